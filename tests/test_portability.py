"""Stored outputs must read the same whichever machine re-executes them.

nbval re-executes every notebook and compares its outputs with the stored ones, which were made
on another machine. Its kernels run as a machine made to look as unlike this one as it allows
(perfbook.book.jupyter.othermachine, set by perfbook.book.jupyter.nbval_plugin): rows shuffled,
numpy's baseline code path, another OpenBLAS kernel set, another host id, clock and time zone.
The notebooks are executed once per test run, and that one pass is the portability check; the
tests here check that each knob takes in a kernel started the way nbval starts one, and that
an nbval session turns them on.
test_every_sort_is_stable is the static half: a sort that leaves ties to its algorithm is the
defect class the CPU path finds, and it is cheaper to refuse it where it is written.
"""

import ast
import json
import os
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from perfbook.book.jupyter import nbval_plugin, provisioner
from perfbook.book.jupyter.othermachine import openblas_core, other_machine_env

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import json, os, time
from numpy._core._multiarray_umath import __cpu_features__ as f
from perfbook.book.jupyter.othermachine import openblas_core
from perfbook.data import hostinfo
print(json.dumps({
    "on": [k for k in (os.environ.get("NPY_DISABLE_CPU_FEATURES") or "").split() if f.get(k)],
    "core": openblas_core(), "now": time.time(), "host": hostinfo.host_id(),
    "tz": time.strftime("%z"), "shuffle": os.environ.get("PERFBOOK_SHUFFLE_ROWS"),
    "leaked": os.environ.get("PERFBOOK_KERNEL_ENV")}))
"""


def _in_a_kernel(monkeypatch, env: dict | None) -> dict:
    """PROBE's answer from a kernel started as nbval starts one (nbclient in this process, the
    python3 kernelspec, perfbook's provisioner), with `env` as the provisioner's EXTRA_ENV."""
    monkeypatch.setattr(provisioner, "EXTRA_ENV", dict(env or {}))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(PROBE)])
    NotebookClient(
        nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(ROOT)}}
    ).execute()
    return json.loads(nb.cells[0].outputs[0]["text"].strip().splitlines()[-1])


def test_nbvals_kernels_run_as_another_machine(monkeypatch):
    """The knobs take in the kernel: numpy reports the SIMD targets off, OpenBLAS the other
    kernel set, the clock, zone, host id and row shuffling are the ones given (else nbval could
    not fail on them), and the variable itself does not reach the notebook's code."""
    env, said = other_machine_env()
    got = _in_a_kernel(monkeypatch, env)
    assert got["on"] == [], f"numpy still dispatches to {got['on']}"
    if "OPENBLAS_CORETYPE" in env:
        assert got["core"] == env["OPENBLAS_CORETYPE"], got["core"]
    if "FAKETIME" in env:
        assert got["now"] - time.time() > 1000 * 86400
    assert got["host"] == env["PERFBOOK_HOST_ID"] and got["tz"] == "+1400"
    assert got["shuffle"] == env["PERFBOOK_SHUFFLE_ROWS"] and got["leaked"] is None


def test_without_it_a_kernel_is_this_machine(monkeypatch):
    """The same probe without the variable: the knobs above are the variable's doing."""
    got = _in_a_kernel(monkeypatch, None)
    assert got["shuffle"] is None and abs(got["now"] - time.time()) < 3600
    assert got["host"] != "h-0123456789ab"


def test_an_nbval_session_turns_it_on(monkeypatch):
    """pytest --nbval (make test) gives nbval's kernels the other machine and says so in its
    header; without --nbval, or with --nbval-this-machine, it is left alone. Its own environment
    stays as it was: a process a test starts (a papermill collect, and the kernel that runs it)
    is this machine (a collect that inherited libfaketime hung in a futex)."""

    class Config:
        def __init__(self, nbval, this):
            self.option = type("O", (), {"nbval": nbval})()
            self._this = this

        def getoption(self, name):
            return self._this

    for nbval, this, on in ((True, False, True), (False, False, False), (True, True, False)):
        monkeypatch.setattr(provisioner, "EXTRA_ENV", {})
        monkeypatch.setattr(nbval_plugin, "_CHANGED", [])
        monkeypatch.setattr(nbval_plugin, "_OTHER", {})
        environ = dict(os.environ)
        nbval_plugin.pytest_configure(Config(nbval, this))
        assert dict(os.environ) == environ
        header = nbval_plugin.pytest_report_header(None)
        assert (header is not None and "another machine" in header) == on
        assert provisioner.EXTRA_ENV == {}, "only while an nbval cell runs"
        for item, other in ((NbvalCell(), on), (NotACell(), False)):
            for hook in (nbval_plugin.pytest_runtest_setup, nbval_plugin.pytest_runtest_call):
                during = hook(item)
                next(during)
                assert provisioner.EXTRA_ENV == (other_machine_env()[0] if other else {})
                next(during, None)
                assert provisioner.EXTRA_ENV == {}


class IPyNbFile:  # stands for nbval's notebook collector (its module is nbval's)
    pass


IPyNbFile.__module__ = "nbval.plugin"


class NbvalCell:
    parent = IPyNbFile()


class NotACell:
    parent = object()


def test_the_openblas_probe_names_a_kernel_set():
    assert openblas_core() is None or openblas_core().isidentifier()


# -- the static half -----------------------------------------------------------------------------

SORTS = {"sort_values", "sort_index", "argsort"}  # each must say kind="stable"
TIE_PICKERS = {"nlargest", "nsmallest", "argpartition"}  # leave ties to the algorithm: refused
STABLE = ("stable", "mergesort")


def unstable_sorts(paths, root: Path = ROOT) -> list[str]:
    """file:line: what, for each sort in `paths` whose order of equal keys is the algorithm's
    (paths named relative to `root`). A line that says `portability:` in a comment is exempt
    (it must say why)."""
    out = []
    for p in paths:
        src = Path(p).read_text()
        lines = src.splitlines()
        for node in ast.walk(ast.parse(src)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            name, kw = node.func.attr, {k.arg: k.value for k in node.keywords}
            if name in SORTS and not (
                isinstance(kw.get("kind"), ast.Constant) and kw["kind"].value in STABLE
            ):
                bad = f'{name}() without kind="stable"'
            elif name in TIE_PICKERS:
                bad = f'{name}() (sort with kind="stable" and take the rows instead)'
            elif name == "value_counts" and not (
                isinstance(kw.get("sort"), ast.Constant) and kw["sort"].value is False
            ):
                bad = "value_counts() without sort=False (its sort orders equal counts by the algorithm)"
            else:
                continue
            if "portability:" not in lines[node.lineno - 1]:
                out.append(f"{Path(p).relative_to(root)}:{node.lineno}: {bad}")
    return out


def test_every_sort_is_stable():
    found = unstable_sorts(sorted((ROOT / "tools").rglob("*.py")))
    assert not found, "sorts whose order of ties depends on the CPU's sort code:\n" + "\n".join(
        found
    )


def test_the_sort_check_finds_an_unstable_sort(tmp_path):
    p = tmp_path / "x.py"
    p.write_text(
        "df.sort_values('a')\ndf.sort_values('a', kind='stable')\ns.argsort()\n"
        "s.value_counts()\ns.value_counts(sort=False)\ns.nlargest(2)\n"
        "s.argsort()  # portability: the SIMD sort is what this checks\n"
    )
    got = [int(ln.split(":")[1]) for ln in unstable_sorts([p], tmp_path)]
    assert got == [1, 3, 4, 6]
