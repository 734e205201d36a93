"""Stored outputs must read the same whichever machine re-executes them.

nbval re-executes every notebook on this machine and compares its outputs with the stored ones,
which were made on another. The pass here re-executes them once more on a machine made to look
as unlike the one that stored them as this one allows:

* every loaded table's rows shuffled (perfbook.data.dataset.read_table, PERFBOOK_SHUFFLE_ROWS): the
  analysis must not depend on the order rows were written in;
* numpy's baseline code path (NPY_DISABLE_CPU_FEATURES turns off each SIMD target numpy would
  dispatch to here) and another OpenBLAS kernel set (OPENBLAS_CORETYPE): the analysis must not
  depend on the CPU's vector units. numpy's default sort is an introsort whose AVX-512 and
  AVX2 builds order equal keys differently: a "first" of tied rows changed a stored lifecycle
  table from one machine to the next (issue #43);
* another host id (PERFBOOK_HOST_ID): the machine that builds the book is not a host of it;
* another clock and time zone (libfaketime, TZ): nothing stored may depend on when it was built.

test_every_sort_is_stable is the static half: a sort that leaves ties to its algorithm is the
defect class the CPU path finds, and it is cheaper to refuse it where it is written.
"""

import ast
import os
import subprocess
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")  # Debian's libfaketime


def numpy_baseline_env() -> dict[str, str]:
    """NPY_DISABLE_CPU_FEATURES naming every SIMD target numpy dispatches to on this CPU (its
    build's baseline stays: it cannot be turned off), or {} when it dispatches to none."""
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

    on = [t for t in __cpu_dispatch__ if __cpu_features__.get(t)]
    return {"NPY_DISABLE_CPU_FEATURES": " ".join(on)} if on else {}


def openblas_core() -> str | None:
    """The kernel set numpy's OpenBLAS chose here (a DYNAMIC_ARCH build), None if unknown."""
    import ctypes
    import glob

    import numpy

    for lib in glob.glob(str(Path(numpy.__file__).parent.parent / "numpy.libs" / "*openblas*")):
        for name in (
            "scipy_openblas_get_corename64_",
            "scipy_openblas_get_corename",
            "openblas_get_corename",
        ):
            fn = getattr(ctypes.CDLL(lib), name, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                return fn().decode()
    return None


def other_machine_env() -> tuple[dict[str, str], list[str]]:
    """The environment of the pass, and what it changed (for the failure message)."""
    env = {
        "PERFBOOK_SHUFFLE_ROWS": "7",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PERFBOOK_HOST_ID": "h-0123456789ab",
        "TZ": "Pacific/Kiritimati",
    }
    said = ["rows shuffled (seed 7)", "host id h-0123456789ab", "time zone UTC+14"]
    npy = numpy_baseline_env()
    if npy:
        env.update(npy)
        said.append(f"numpy without {npy['NPY_DISABLE_CPU_FEATURES']}")
    core = openblas_core()
    if core:
        # SSE4.2 kernels where numpy's are AVX2 or AVX-512, else AVX2 ones
        other = "Nehalem" if core != "Nehalem" else "Haswell"
        env["OPENBLAS_CORETYPE"] = other
        said.append(f"OpenBLAS {other} kernels instead of {core}")
    if FAKETIME.is_file():
        # three years and a day on, every clock (an offset, not a speed: timeouts keep their
        # length). Faking the wall clock alone hangs the kernels: libfaketime then converts the
        # monotonic deadlines of pthread_cond_timedwait as if they were faked too.
        env.update(LD_PRELOAD=str(FAKETIME), FAKETIME="+1096d")
        said.append("the wall clock 1096 days ahead")
    else:
        warnings.warn(
            f"{FAKETIME} is missing (apt-get install faketime; tools/setup.sh installs "
            "it as root): the portability pass keeps this machine's clock",
            stacklevel=2,
        )
    return env, said


def test_nbval_passes_on_another_machine():
    env, said = other_machine_env()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "chapters",
            "summary.ipynb",
            "hosts.ipynb",
            "--nbval",
            "--nbval-current-env",
            "--nbval-sanitize-with",
            "tests/nbval_sanitize.cfg",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "perfbook.book.jupyter.nbval_plugin",
        ],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=1500,
    )
    failed = [ln for ln in r.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    assert r.returncode == 0, f"nbval fails on another machine ({'; '.join(said)}):\n" + "\n".join(
        failed or [r.stdout[-4000:], r.stderr[-2000:]]
    )


def test_the_pass_changes_what_it_says(tmp_path):
    """The knobs take: numpy reports the SIMD targets off, OpenBLAS the other kernel set, the
    clock and the host id are the ones given (else the pass above could not fail on them)."""
    env, _ = other_machine_env()
    probe = (
        "import json, time, numpy\n"
        "from numpy._core._multiarray_umath import __cpu_features__ as f\n"
        "from perfbook.data import hostinfo\n"
        "import tests.test_portability as t\n"
        "print(json.dumps({'on': [k for k in (t.os.environ.get('NPY_DISABLE_CPU_FEATURES') or '').split() if f.get(k)],"
        " 'core': t.openblas_core(), 'now': time.time(), 'host': hostinfo.host_id(),"
        " 'tz': time.strftime('%z')}))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    import json
    import time

    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["on"] == [], f"numpy still dispatches to {got['on']}"
    if "OPENBLAS_CORETYPE" in env:
        assert got["core"] == env["OPENBLAS_CORETYPE"], got["core"]
    if "FAKETIME" in env:
        assert got["now"] - time.time() > 1000 * 86400
    assert got["host"] == env["PERFBOOK_HOST_ID"] and got["tz"] == "+1400"


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
