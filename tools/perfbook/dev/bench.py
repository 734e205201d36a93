"""Benchmarks that print figures (speed and stability are reported, never asserted).

python -m perfbook bench trace-cv [--runs 5] [--profile default]
    Repeats the trace_overhead collection N times (marker and baseline only,
    into a scratch data directory), prints each run's marker median and the
    coefficient of variation across runs, plus the harness's own cost.

python -m perfbook bench fleet [--sizes 1,10,100] [--seed 1] [--dry-run]
    How the book scales with the number of hosts. For each N it makes a scratch copy
    of this checkout (its files as git lists them, tracked and untracked but not
    ignored, plus a symlink to .venv), adds N synthetic hosts (perfbook.dev.synthfleet; N
    counts them *beside* the committed hosts, so N=0 is the committed data alone) to the
    copy's data/runs, and times there: loading one chapter's manifests, `make notebooks`
    (`python -m perfbook refresh`, every notebook), `make book` (`python -m perfbook book`),
    with the sizes of data/ and of the site, the seconds of each notebook, and the most
    legend entries a figure of each notebook had (counted by a hook on matplotlib's
    Legend in the notebook kernels), and a speed probe (PROBE: a fixed workload timed before
    and after the first refresh of each size, which shows a machine that slowed between
    rows). --dry-run skips the notebooks and the book.
    Everything happens in a scratch directory (perfbook.hoststate.scratch) that is removed at the
    end, on Ctrl-C, SIGTERM or SIGHUP as well; the checkout is only read.

python -m perfbook bench memo [--memos all] [--notebooks summary,...] [--data-dir D] [--runs 3]
    What each memo that perfbook keeps (MEMOS) saves where it is meant to: each notebook's code
    cells are executed in a new process (an IPython shell; inline figures are rendered, as in a
    kernel), once with every memo and once with the memo turned off, in turn, `--runs` times
    each; the verdict store (build/verdicts) is filled by a first execution and kept, as in a
    second `make notebooks`. Prints the median CPU and wall seconds of each and their ratio. A
    memo's docstring quotes the figure this printed on the project's machine. `--memos
    verdict-store+data-memos` turns both off together: a memo that helps where the verdict
    store has nothing yet (a new host's first `make notebooks`) shows there.

python -m perfbook bench reproducibility [--runs 3] [--profile default] [--chapters a,b] [--from D]
    Do the findings survive a rerun (#40)? Measures this host K times into a scratch data
    directory (or reads this host's datasets from D), then prints per finding each run's
    verdict and the pooled one, the decided fraction per run, every contradiction, and each
    chapter's precision per second (perfbook.dev.reproducibility).

python -m perfbook bench validate [--data-dir D] [--runs 3]
    `python -m perfbook validate` in a new process with each dataset's pass kept in the verdict
    store (filled by a first run) and with PERFBOOK_VERDICT_STORE=off, in turn; prints the
    median wall and CPU seconds of each (perfbook.book.validation quotes them).

python -m perfbook bench zygote [--runs 3] [--chapters a,b]
    `python -m perfbook refresh` of every notebook (or of --chapters) in a scratch copy of the
    checkout, with kernels forked from the zygote (perfbook.book.jupyter.zygote) and with
    PERFBOOK_WARM_KERNELS=off, in turn; prints the median wall and CPU seconds of each.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from IPython.core.interactiveshell import InteractiveShell

from perfbook.analysis import findings, stats
from perfbook.chapters import by_name
from perfbook.chapters.trace_overhead import chapter as T
from perfbook.core import codedigest, guard
from perfbook.core.errors import PerfbookError, one_line
from perfbook.core.paths import repo_root
from perfbook.core.proc import kill_group
from perfbook.data import dataset
from perfbook.dev import synthfleet
from perfbook.framework.sequence import collect
from perfbook.hoststate.scratch import Scratch


def trace_cv(runs: int, profile: str, mechanisms: str) -> int:
    scratch = tempfile.mkdtemp(prefix="perfbook-bench-")
    try:
        meds, nones = [], []
        t0 = time.monotonic()
        for i in range(runs):
            t = time.monotonic()
            collect(T, profile, scratch, say=lambda s: None, mechanisms=mechanisms)
            s = T.load(scratch)["samples"]
            s = s[s.run_id == s.run_id.max()]
            m = s[s.mechanism == "marker"].ns_per_call
            meds.append(float(m.median()))
            nones.append(float(s[s.mechanism == "none"].ns_per_call.median()))
            lo, hi, cov = stats.median_ci(m)
            print(
                f"run {i + 1}/{runs}: marker median {meds[-1]:.1f} ns "
                f"({stats.coverage_text(cov)} CI {lo:.1f}-{hi:.1f}), "
                f"harness {nones[-1]:.2f} ns/call, {time.monotonic() - t:.0f} s",
                flush=True,
            )
        print(
            f"marker median across {runs} runs: {stats.summarize(meds).median:.1f} ns, "
            f"CV {stats.cv(meds):.4f}; harness cost {stats.summarize(nones).median:.2f} ns/call; "
            f"wall {time.monotonic() - t0:.0f} s"
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


# -- fleet: how the book scales with the number of hosts ----------------------------------------

FLEET_CHAPTER = "trace_overhead"  # the chapter whose manifests are timed

# Loaded by every Python of a notebook kernel (PYTHONPATH): counts the entries of each
# matplotlib legend, one line "pid time entries" per legend, into $PERFBOOK_BENCH_LEGENDS.
LEGEND_HOOK = """\
import os, sys, time
_out = os.environ.get("PERFBOOK_BENCH_LEGENDS")


class _LegendCounter:
    def find_spec(self, name, path=None, target=None):
        if name != "matplotlib.legend":
            return None
        sys.meta_path.remove(self)
        import importlib.util
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            init = module.Legend.__init__

            def counted(self, *args, **kwargs):
                init(self, *args, **kwargs)
                try:
                    with open(_out, "a") as f:
                        f.write(f"{os.environ.get('PERFBOOK_REFRESHING', '?')} {len(self.texts)}\\n")
                except OSError:
                    pass
            module.Legend.__init__ = counted
        spec.loader.exec_module = exec_module
        return spec


if _out:
    sys.meta_path.insert(0, _LegendCounter())
"""


# Not part of a checkout's content: what git ignores at the top (and the copies' own .venv link).
_NOT_COPIED = {
    ".git",
    ".venv",
    "build",
    "_build",
    "__pycache__",
    ".pytest_cache",
    ".ipynb_checkpoints",
}


def checkout_files(src: Path) -> list[str]:
    """The checkout's files as git lists them: tracked, and untracked but not ignored. A copy
    made by scratch_checkout has no .git: its files are all there is, less what git ignores at
    the top (build output, caches, the .venv link)."""
    src = Path(src)
    if not (src / ".git").exists():
        out = []
        for dirpath, dirnames, filenames in os.walk(src):
            dirnames[:] = [d for d in dirnames if d not in _NOT_COPIED]
            rel = os.path.relpath(dirpath, src)
            out += [
                os.path.normpath(os.path.join(rel, f)) for f in filenames if f not in _NOT_COPIED
            ]
            out += [
                os.path.normpath(os.path.join(rel, d))
                for d in dirnames
                if os.path.islink(os.path.join(dirpath, d))
            ]
        return sorted(out)
    out = subprocess.run(
        ["git", "-C", str(src), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout
    return sorted({f for f in out.decode().split("\0") if f and f.split("/")[0] != ".venv"})


def scratch_checkout(dest: Path, src: Path | None = None) -> Path:
    """A copy of the checkout `src` (default: this one) in `dest`: its files (checkout_files;
    a deleted one is skipped, a symlink stays a symlink) and a symlink to its .venv. build/,
    _build/ and .git are not copied, so nothing run in the copy reaches the checkout."""
    src = Path(src or repo_root())
    dest = Path(dest)
    dest.mkdir(parents=True)
    for rel in checkout_files(src):
        s, d = src / rel, dest / rel
        if not os.path.lexists(s):
            continue  # deleted in the work tree
        d.parent.mkdir(parents=True, exist_ok=True)
        if os.path.islink(s):
            os.symlink(os.readlink(s), d)
        elif os.path.isfile(s):
            shutil.copy2(s, d)
    if (src / ".venv").exists():
        os.symlink((src / ".venv").resolve(), dest / ".venv")
    return dest


def copy_env(copy: Path, extra_path: Path | None = None) -> dict:
    """The environment of a command run in a copy: its own perfbook package (PYTHONPATH before
    the editable install, which points at the checkout), root and build directory."""
    env = dict(os.environ)
    path = [str(copy / "tools")] + ([str(extra_path)] if extra_path else [])
    if env.get("PYTHONPATH"):
        path.append(env["PYTHONPATH"])
    env.update(
        PYTHONPATH=os.pathsep.join(path),
        PERFBOOK_ROOT=str(copy),
        PERFBOOK_BUILD=str(copy / "build"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.pop("PERFBOOK_BENCH_LEGENDS", None)
    return env


def _python(copy: Path) -> str:
    return str(copy / ".venv" / "bin" / "python") if (copy / ".venv").exists() else sys.executable


def check_copy(copy: Path, env: dict) -> None:
    """Refuse to run anything in a copy whose Python would import the checkout's perfbook."""
    out = subprocess.run(
        [
            _python(copy),
            "-c",
            "import perfbook, perfbook.core.paths as p; "
            "print(perfbook.__file__); print(p.repo_root()); print(p.build_dir())",
        ],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
    )
    lines = out.stdout.split()
    want = [str(copy / "tools" / "perfbook" / "__init__.py"), str(copy), str(copy / "build")]
    if out.returncode != 0 or [str(Path(x).resolve()) for x in lines] != [
        str(Path(x).resolve()) for x in want
    ]:
        raise PerfbookError(
            f"the scratch copy {copy} would not run its own tools "
            f"(got {lines or out.stderr.strip()[-200:]}); nothing was run in it"
        )


def du_mb(path: Path) -> float | None:
    """Disk usage (du -sk) in MB, None if the path is missing."""
    if not Path(path).exists():
        return None
    out = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True)
    return int(out.stdout.split()[0]) / 1024 if out.returncode == 0 else None


def _stop(p: subprocess.Popen, top: Path) -> None:
    """Stop a child's process group (SIGINT first: `refresh` shuts its kernel down), then
    every process of ours still working inside the scratch directory `top` (notebook
    kernels run in sessions of their own)."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGINT)
            p.wait(timeout=20)
        except (ProcessLookupError, PermissionError):
            pass
        except subprocess.TimeoutExpired:
            pass
    kill_group(p)
    kill_inside(top)


def kill_inside(top: Path) -> list[int]:
    """SIGKILL our processes whose working directory is inside `top` (started there by us)."""
    killed = []
    top = str(Path(top).resolve())
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if d.stat().st_uid != os.geteuid():
                continue
            cwd = os.readlink(d / "cwd")
        except OSError:
            continue
        if cwd == top or cwd.startswith(top + "/"):
            try:
                os.kill(int(d.name), signal.SIGKILL)
                killed.append(int(d.name))
            except OSError:
                pass
    return killed


def run_step(
    cmd: list[str], copy: Path, env: dict, top: Path, tag: str, say=print, on_line=None
) -> tuple[float, int]:
    """Run `cmd` in the copy, in a session of its own, its output as progress lines;
    (seconds, exit status). Interrupted: the child and its kernels are stopped first."""
    t0 = time.monotonic()
    p = subprocess.Popen(
        cmd,
        cwd=copy,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        for line in p.stdout:
            line = line.rstrip()
            if line:
                say(f"{tag} {line}")
                if on_line:
                    on_line(line)
        rc = p.wait()
    except BaseException:
        _stop(p, top)
        raise
    return time.monotonic() - t0, rc


def time_manifests(copy: Path, env: dict, chapter: str, reps: int = 5) -> float | None:
    """Seconds of load_manifests(chapter) in a new process (the best of `reps` runs)."""
    code = (
        "import sys, time\nfrom perfbook.data import dataset\nt = time.perf_counter()\n"
        "n = len(dataset.load_manifests(sys.argv[1]))\nprint(n, time.perf_counter() - t)\n"
    )
    best = None
    for _ in range(reps):
        out = subprocess.run(
            [_python(copy), "-c", code, chapter], cwd=copy, capture_output=True, text=True, env=env
        )
        if out.returncode == 0 and out.stdout.split():
            s = float(out.stdout.split()[1])
            best = s if best is None else min(best, s)
    return best


# A fixed CPU workload (pandas group medians, regex over trace-like text), timed in a new process
# before and after each size's first refresh: this machine's speed drifts within the hour (15-30 %
# on this project's 2-core machine), and the probe shows a row timed on a slower machine.
PROBE = """\
import re, statistics, time
import numpy as np, pandas as pd
rng = np.random.default_rng(1)
df = pd.DataFrame({"k": rng.integers(0, 1000, 400_000), "v": rng.random(400_000)})
times = []
for _ in range(5):
    t = time.perf_counter()
    for _ in range(3):
        df.groupby("k")["v"].median()
    text = "\\n".join(f"task-{i} [001] {i / 1e6:.6f}: ev: a={i}" for i in range(100_000))
    assert len(re.findall(r"a=(\\d+)", text)) == 100_000
    times.append(time.perf_counter() - t)
print(statistics.median(times))
"""


def speed_probe(copy: Path, env: dict) -> float | None:
    """Seconds of PROBE's workload (the median of 5 passes, its imports not counted), or None
    if it failed."""
    out = subprocess.run(
        [_python(copy), "-c", PROBE], cwd=copy, env=env, capture_output=True, text=True
    )
    try:
        return float(out.stdout.split()[-1]) if out.returncode == 0 else None
    except (IndexError, ValueError):
        return None


REFRESH_LINE = re.compile(
    r"^\[refresh\] (?P<name>[\w-]+): (?P<what>re-executed.* in (?P<s>\d+) s|FAILED.*)"
)


def measure_size(
    n: int,
    copy: Path,
    fleet_runs: Path | None,
    ids: list[str],
    top: Path,
    dry_run: bool = False,
    say=print,
) -> dict:
    """One row of the fleet benchmark: the copy gets the first n synthetic hosts, then each
    step is timed in it."""
    tag = f"[bench fleet N={n}]"
    for hid in ids[:n]:
        shutil.copytree(fleet_runs / hid, copy / "data" / "runs" / hid, symlinks=True)
    runs = copy / "data" / "runs"
    row: dict = {
        "n": n,
        "hosts": sum(1 for p in runs.iterdir() if p.is_dir() and not p.name.startswith(".")),
        "datasets": sum(1 for _ in runs.glob("*/*/*/manifest.json")),
        "data_mb": du_mb(copy / "data"),
        "notebooks": {},
        "legends": {},
    }
    env = copy_env(copy)
    check_copy(copy, env)
    py = _python(copy)
    say(
        f"{tag} {row['hosts']} hosts, {row['datasets']} datasets, data/ {row['data_mb']:.0f} MB; "
        f"timing {FLEET_CHAPTER}'s manifests ..."
    )
    row["manifests_s"] = time_manifests(copy, env, FLEET_CHAPTER)
    if dry_run:
        say(f"{tag} --dry-run: the notebooks and the book are not run")
        return row
    hook = top / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(LEGEND_HOOK)
    legends = top / f"legends-{n}.txt"

    def notebook_done(line):
        m = REFRESH_LINE.match(line)
        if m:
            row["notebooks"][m["name"]] = int(m["s"]) if m["s"] else "FAILED"

    say(
        f"{tag} make notebooks (python -m perfbook refresh, every notebook; nothing stored yet) ..."
    )
    renv = dict(copy_env(copy, hook), PERFBOOK_BENCH_LEGENDS=str(legends))
    row["probe"] = [speed_probe(copy, env)]
    row["refresh_s"], row["refresh_rc"] = run_step(
        [py, "-m", "perfbook", "refresh"], copy, renv, top, tag, say=say, on_line=notebook_done
    )
    row["probe"].append(speed_probe(copy, env))
    if legends.is_file():
        for line in legends.read_text().splitlines():
            try:
                name, count = line.split()
            except ValueError:
                continue
            row["legends"][name] = max(row["legends"].get(name, 0), int(count))
    say(
        f"{tag} make notebooks again (every notebook; each dataset's findings now stored, "
        "as when one host is added to a fleet) ..."
    )
    row["again_s"], row["again_rc"] = run_step(
        [py, "-m", "perfbook", "refresh"], copy, env, top, tag, say=say
    )
    say(f"{tag} make book (python -m perfbook book) ...")
    row["book_s"], row["book_rc"] = run_step(
        [py, "-m", "perfbook", "book"], copy, env, top, tag, say=say
    )
    row["site_mb"] = du_mb(copy / "_build" / "html")
    return row


def _cell(v, fmt="{:.0f}") -> str:
    return "-" if v is None else fmt.format(v)


def _probe_cell(probe) -> str:
    return "/".join(_cell(x, "{:.2f}") for x in probe) if probe else "-"


def fleet_table(rows: list[dict], committed: int) -> list[str]:
    """The benchmark's tables: one row per N, then seconds and legend entries per notebook."""
    out = [
        f"fleet benchmark: N synthetic hosts beside the {committed} committed ones "
        "(N=0: the committed data alone); times are wall seconds in a scratch copy"
    ]
    head = (
        f"{'N':>4} {'hosts':>5} {'datasets':>8} {'data MB':>8} "
        f"{'manifests ms':>12} {'refresh s':>9} {'again s':>7} {'book s':>7} {'site MB':>8} "
        f"{'legend max':>10} {'probe s':>9}"
    )
    out += [head, "-" * len(head)]
    for r in rows:
        man = r.get("manifests_s")
        mans = "-" if man is None else f"{man * 1e3:.0f}"
        fail = lambda k, r=r: "!" if r.get(k) not in (None, 0) else ""
        out.append(
            f"{r['n']:>4} {r['hosts']:>5} {r['datasets']:>8} {_cell(r['data_mb']):>8} {mans:>12} "
            f"{_cell(r.get('refresh_s')) + fail('refresh_rc'):>9} "
            f"{_cell(r.get('again_s')) + fail('again_rc'):>7} "
            f"{_cell(r.get('book_s')) + fail('book_rc'):>7} {_cell(r.get('site_mb')):>8} "
            f"{_cell(max(r['legends'].values()) if r['legends'] else None):>10} "
            f"{_probe_cell(r.get('probe')):>9}"
        )
    timed = [r for r in rows if r.get("refresh_s") is not None and r.get("book_s") is not None]
    if len(timed) > 1:
        lo, hi = timed[0], timed[-1]
        for key, what in (("refresh_s", "nothing stored yet"), ("again_s", "findings stored")):
            if lo.get(key) and hi.get(key) is not None:
                out.append(
                    f"notebooks + book ({what}): N={hi['n']} takes "
                    f"{(hi[key] + hi['book_s']) / (lo[key] + lo['book_s']):.1f}x the time of N={lo['n']}"
                )
        if lo.get("probe") and hi.get("probe"):
            out.append(
                f"speed probe before/after the first refresh (the same work each time; a larger "
                f"figure is a slower machine): N={lo['n']} {_probe_cell(lo['probe'])} s, "
                f"N={hi['n']} {_probe_cell(hi['probe'])} s"
            )
    names = sorted({nb for r in rows for nb in r["notebooks"]})
    if names:
        out.append("")
        out.append(
            "per notebook: refresh seconds (notebooks run side by side, python -m perfbook refresh "
            "--jobs) / most legend entries in one figure"
        )
        out.append(f"{'notebook':<22}" + "".join(f"{'N=' + str(r['n']):>14}" for r in rows))
        for nb in names:
            cells = []
            for r in rows:
                s = r["notebooks"].get(nb)
                cells.append(f"{'-' if s is None else s} / {r['legends'].get(nb, '-')}")
            out.append(f"{nb:<22}" + "".join(f"{c:>14}" for c in cells))
    if any(r.get(k) not in (None, 0) for r in rows for k in ("refresh_rc", "book_rc")):
        out.append("! the step exited non-zero (its output above says why)")
    return out


def fleet(sizes: list[int], seed: int = 1, dry_run: bool = False, say=print) -> list[dict]:
    """Run the fleet benchmark (see the module doc); returns its rows, prints its tables."""
    sizes = sorted(set(sizes))
    if not sizes or sizes[0] < 0:
        raise PerfbookError(f"--sizes wants numbers of hosts >= 0, got {sizes}")
    t0 = time.monotonic()
    rows = []
    with (
        guard.interruptible(),
        Scratch("bench_fleet", say=lambda m: say(f"[bench fleet] {m}")) as s,
    ):
        top = s.dir
        saved = os.environ.get("PERFBOOK_BUILD")
        os.environ["PERFBOOK_BUILD"] = str(top / "build")  # our own verdict store stays in scratch
        try:
            say("[bench fleet] copying the checkout ...")
            base = scratch_checkout(top / "base")
            committed = sum(
                1
                for p in (base / "data" / "runs").iterdir()
                if p.is_dir() and not p.name.startswith(".")
            )
            ids, fleet_runs = [], None
            if sizes[-1] > 0:
                say(
                    f"[bench fleet] generating {sizes[-1]} synthetic hosts (perfbook.dev.synthfleet, seed {seed}) ..."
                )
                t = time.monotonic()
                ids = synthfleet.generate(
                    sizes[-1],
                    top / "fleet" / "data",
                    seed,
                    source=base / "data",
                    say=lambda m: say(f"[bench fleet] {m}"),
                )
                fleet_runs = top / "fleet" / "data" / "runs"
                say(f"[bench fleet] {len(ids)} synthetic hosts in {time.monotonic() - t:.0f} s")
            for n in sizes:
                copy = top / f"n{n}"
                shutil.copytree(base, copy, symlinks=True)
                rows.append(measure_size(n, copy, fleet_runs, ids, top, dry_run, say))
                with guard.restoring():
                    shutil.rmtree(copy, ignore_errors=True)
        finally:
            if saved is None:
                os.environ.pop("PERFBOOK_BUILD", None)
            else:
                os.environ["PERFBOOK_BUILD"] = saved
            kill_inside(top)
    for line in fleet_table(rows, committed):
        say(line)
    say(f"[bench fleet] done in {time.monotonic() - t0:.0f} s; the scratch copies are removed")
    return rows


# -- memo: what each memo kept in perfbook saves --------------------------------------------


class _Forgetful(dict):
    """A memo's dict that never finds what was put in it: the code runs as it would without."""

    def __contains__(self, key):
        return False

    def get(self, key, default=None):
        return default

    def pop(self, key, *default):
        super().pop(key, None)
        return default[0] if default else None


# name -> (what it is, a function that turns it off in this process). Each one's docstring (or
# comment) quotes what `bench memo` printed for it on the project's machine.
def _no_code_digests():
    findings._CODE = _Forgetful()


def _no_module_imports():
    codedigest._imports = codedigest._imports.__wrapped__


def _no_verdict_store():
    os.environ["PERFBOOK_VERDICT_STORE"] = "off"


def _no_data_memos():
    init = dataset.Data.__init__

    def forgetful(self, *a, **kw):
        init(self, *a, **kw)
        self._views, self._rows, self._once = _Forgetful(), _Forgetful(), _Forgetful()

    dataset.Data.__init__ = forgetful


class _Recomputed:
    """functools.cached_property without the cache: computed at every access."""

    def __init__(self, fn):
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __get__(self, obj, cls=None):
        return self if obj is None else self.fn(obj)


def _no_cached_properties():
    functools.cached_property = _Recomputed  # before a chapter's analysis is imported


MEMOS: dict = {
    "verdict-store": (
        "perfbook.analysis.findings.stored: each dataset's values kept in build/verdicts",
        _no_verdict_store,
    ),
    "code-digests": (
        "perfbook.analysis.findings._CODE: each chapter's code digest, once per process",
        _no_code_digests,
    ),
    "module-imports": (
        "perfbook.core.codedigest._imports: each module's imports, parsed once per process",
        _no_module_imports,
    ),
    "data-memos": (
        "perfbook.data.dataset.Data's once(), view_of() and rows_of() memos",
        _no_data_memos,
    ),
    "cached-properties": (
        "the chapters' functools.cached_property values (their analysis classes)",
        _no_cached_properties,
    ),
}

MEMO_NOTEBOOKS = ("summary", "trace_overhead")


def run_cells(notebook: Path, data_dir: str = "") -> tuple[float, float]:
    """Execute a notebook's code cells in this process, as its kernel would (an IPython shell,
    figures rendered by the inline backend), its parameter data_dir set; (wall, CPU) seconds."""
    shell = InteractiveShell.instance()
    shell.enable_gui = lambda gui=None: None  # no event loop: the inline backend needs none
    shell.enable_matplotlib("inline")
    nb = nbformat.read(notebook, as_version=4)
    os.chdir(Path(notebook).parent)
    t0, c0 = time.perf_counter(), time.process_time()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        src = cell.source
        if "parameters" in cell.metadata.get("tags", []):
            src += f"\ndata_dir = {data_dir!r}\n"
        with contextlib.redirect_stdout(io.StringIO()):
            r = shell.run_cell(src, store_history=False)
        if not r.success:
            err = r.error_in_exec or r.error_before_exec
            raise PerfbookError(f"{notebook}: a cell failed: {type(err).__name__}: {err}")
    return time.perf_counter() - t0, time.process_time() - c0


def _cells_child(notebook: Path, data_dir: str, without: str, env: dict) -> tuple[float, float]:
    """run_cells in a new process with memo `without` turned off ('-': none)."""
    out = subprocess.run(
        [sys.executable, "-m", "perfbook", "bench", "cells", str(notebook), data_dir, without],
        env=env,
        capture_output=True,
        text=True,
    )
    try:
        wall, cpu = (float(x) for x in out.stdout.split()[-2:])
    except ValueError:
        raise PerfbookError(
            f"{notebook} (without {without}): {one_line(out.stderr.strip()) or 'no figures'}"
        ) from None
    return wall, cpu


def memo(names, notebooks, data_dir: str = "", runs: int = 3, say=print) -> dict:
    """The memo benchmark (module doc): {(notebook, memo or '-'): [(wall, CPU), ...]}."""
    unknown = [n for name in names for n in name.split("+") if n not in MEMOS]
    if unknown:
        raise PerfbookError(f"unknown memo(s) {', '.join(unknown)}; known: {', '.join(MEMOS)}")
    got: dict = {}
    with tempfile.TemporaryDirectory(prefix="perfbook-bench-memo-") as top:
        env = dict(os.environ, PERFBOOK_BUILD=str(Path(top) / "build"))
        for name in notebooks:
            nb = by_name(name).path
            say(f"[bench memo] {name}: filling the verdict store ...")
            _cells_child(nb, data_dir, "-", env)
            for i in range(runs):
                for without in ["-", *names]:
                    got.setdefault((name, without), []).append(
                        _cells_child(nb, data_dir, without, env)
                    )
                say(f"[bench memo] {name}: round {i + 1}/{runs} done")
    say(
        f"median of {runs} runs each, in turn; seconds of the notebook's cells in a new process "
        f"(data: {data_dir or 'data/'}; the verdict store filled)"
    )
    say(f"{'notebook':<16} {'without':<16} {'CPU s':>7} {'wall s':>7} {'CPU x with':>10}")
    for name in notebooks:
        base = statistics.median(c for _, c in got[(name, "-")])
        for without in ["-", *names]:
            ws = [w for w, _ in got[(name, without)]]
            cs = [c for _, c in got[(name, without)]]
            say(
                f"{name:<16} {without:<16} {statistics.median(cs):>7.2f} "
                f"{statistics.median(ws):>7.2f} {statistics.median(cs) / base:>10.2f}"
            )
    return got


# -- zygote: a refresh with kernels forked from it and without ------------------------------


def _timed(cmd: list[str], cwd: Path, env: dict, top: Path, what: str) -> tuple[float, float]:
    """(wall, CPU seconds of cmd and every process it waited for), run_step'd in `cwd`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, rc = run_step(cmd, cwd, env, top, f"[bench {what}]", say=lambda m: None)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if rc:
        raise PerfbookError(f"{what} in {cwd} exited {rc}")
    return wall, sum(getattr(after, k) - getattr(before, k) for k in ("ru_utime", "ru_stime"))


def zygote(runs: int = 3, chapters: str = "", say=print) -> dict:
    """`python -m perfbook refresh` in a scratch copy, warm kernels on and off in turn;
    {"on"|"off": [(wall, CPU of the refresh and every process it waited for)]}."""
    got: dict = {"on": [], "off": []}
    with (
        guard.interruptible(),
        Scratch("bench_zygote", say=lambda m: say(f"[bench zygote] {m}")) as s,
    ):
        try:
            copy = scratch_checkout(s.dir / "copy")
            env = copy_env(copy)
            check_copy(copy, env)
            cmd = [_python(copy), "-m", "perfbook", "refresh"]
            cmd += ["--chapters", chapters] if chapters else []
            for i in range(runs):
                for warm in ("on", "off"):
                    wall, cpu = _timed(
                        cmd, copy, dict(env, PERFBOOK_WARM_KERNELS=warm), s.dir, "refresh"
                    )
                    got[warm].append((wall, cpu))
                    say(f"[bench zygote] warm kernels {warm}: {wall:.0f} s wall, {cpu:.0f} s CPU")
        finally:
            kill_inside(s.dir)
    for warm in ("on", "off"):
        say(
            f"refresh{' --chapters ' + chapters if chapters else ''}, warm kernels {warm}: median "
            f"of {runs}: {statistics.median(w for w, _ in got[warm]):.1f} s wall, "
            f"{statistics.median(c for _, c in got[warm]):.1f} s CPU"
        )
    return got


# -- validate: a validation with each dataset's pass stored and without -------------------


def validate(data_dir: str = "", runs: int = 3, say=print) -> dict:
    """`python -m perfbook validate` in a new process, with the verdict store (filled by a first
    run: each dataset's pass, slot 'valid') and with PERFBOOK_VERDICT_STORE=off, in turn;
    {"stored"|"off": [(wall, CPU)]}."""
    got: dict = {"stored": [], "off": []}
    with tempfile.TemporaryDirectory(prefix="perfbook-bench-validate-") as top:
        env = dict(os.environ, PERFBOOK_BUILD=str(Path(top) / "build"))
        cmd = [sys.executable, "-m", "perfbook", "validate"]
        cmd += ["--data-dir", data_dir] if data_dir else []
        say("[bench validate] filling the verdict store ...")
        _timed(cmd, Path(top), env, Path(top), "validate")
        for _ in range(runs):
            got["stored"].append(_timed(cmd, Path(top), env, Path(top), "validate"))
            off = dict(env, PERFBOOK_VERDICT_STORE="off")
            got["off"].append(_timed(cmd, Path(top), off, Path(top), "validate"))
    for k in got:
        say(
            f"validate ({data_dir or 'data/'}), each pass {k}: median of {runs}: "
            f"{statistics.median(w for w, _ in got[k]):.1f} s wall, "
            f"{statistics.median(c for _, c in got[k]):.1f} s CPU"
        )
    return got


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfbook bench")
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("trace-cv")
    t.add_argument("--runs", type=int, default=5)
    t.add_argument("--profile", default="default")
    t.add_argument("--mechanisms", default="marker")
    f = sub.add_parser("fleet", help="how the book scales with the number of hosts")
    f.add_argument(
        "--sizes", default="1,10,100", help="numbers of synthetic hosts, comma-separated"
    )
    f.add_argument("--seed", type=int, default=1)
    f.add_argument("--dry-run", action="store_true", help="skip the notebooks and the book")
    m = sub.add_parser("memo", help="what each memo saves: notebooks run with it and without")
    m.add_argument(
        "--memos",
        default="all",
        help="comma-separated names (default: every one); a+b turns a and b off together",
    )
    m.add_argument("--notebooks", default=",".join(MEMO_NOTEBOOKS))
    m.add_argument("--data-dir", default="", help="a data directory (e.g. a synthetic fleet)")
    m.add_argument("--runs", type=int, default=3)
    c = sub.add_parser("cells", help="(bench memo's child) one notebook's cells, timed")
    c.add_argument("notebook")
    c.add_argument("data_dir")
    c.add_argument("without", help="memos to turn off first (a+b), or -")
    z = sub.add_parser("zygote", help="refresh with kernels forked from the zygote and without")
    z.add_argument("--runs", type=int, default=3)
    z.add_argument("--chapters", default="")
    r = sub.add_parser(
        "reproducibility", help="verdicts over K runs: decided, contradictions (#40)"
    )
    r.add_argument("--runs", type=int, default=3)
    r.add_argument("--profile", default="default", choices=("quick", "default", "full"))
    r.add_argument("--chapters", default="")
    r.add_argument("--from", dest="source", default="", help="a data directory already measured")
    r.add_argument("--host", default="", help="with --from: whose datasets (default: this host)")
    v = sub.add_parser("validate", help="validate with each dataset's pass stored and without")
    v.add_argument("--data-dir", default="")
    v.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "reproducibility":
            # lazy: the analysis layer (scipy) only for this benchmark
            from perfbook.dev.reproducibility import reproducibility

            reproducibility(
                args.runs,
                args.profile,
                args.chapters,
                args.source,
                args.host,
                say=lambda x: print(x, flush=True),
            )
            return 0
        if args.cmd == "validate":
            validate(args.data_dir, args.runs, say=lambda x: print(x, flush=True))
            return 0
        if args.cmd == "cells":
            for name in args.without.split("+") if args.without != "-" else ():
                MEMOS[name][1]()
            wall, cpu = run_cells(Path(args.notebook), args.data_dir)
            print(f"{wall:.3f} {cpu:.3f}")
            return 0
        if args.cmd == "memo":
            names = list(MEMOS) if args.memos == "all" else args.memos.split(",")
            notebooks = [n for n in args.notebooks.split(",") if n]
            memo(names, notebooks, args.data_dir, args.runs, say=lambda x: print(x, flush=True))
            return 0
        if args.cmd == "zygote":
            zygote(args.runs, args.chapters, say=lambda x: print(x, flush=True))
            return 0
        if args.cmd == "fleet":
            try:
                sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
            except ValueError:
                raise PerfbookError(
                    f"--sizes wants numbers like 1,10,100, got {args.sizes!r}"
                ) from None
            fleet(sizes, args.seed, args.dry_run, say=lambda m: print(m, flush=True))
            return 0
        return trace_cv(args.runs, args.profile, args.mechanisms)
    except PerfbookError as e:
        print(one_line(e), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        sig = guard.interrupted_by() or "SIGINT"
        print(f"[bench] interrupted by {sig}; the scratch copies are removed", file=sys.stderr)
        return 128 + int(getattr(signal, sig))
