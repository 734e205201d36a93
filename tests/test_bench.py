"""The fleet benchmark's scratch handling (perfbook.dev.bench fleet), without running notebooks: the
copy runs its own tools, the checkout is only read, and every scratch copy and process goes,
on success and on Ctrl-C."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import ROOT
from perfbook.analysis import findings
from perfbook.core import codedigest
from perfbook.core.errors import PerfbookError
from perfbook.data import dataset, digest
from perfbook.dev import bench


@pytest.fixture
def scratch_parent(tmp_path, monkeypatch):
    d = tmp_path / "scratch"
    d.mkdir(mode=0o700)
    monkeypatch.setenv("PERFBOOK_SCRATCH_DIR", str(d))
    return d


def inside(top: Path) -> list[int]:
    """Pids of processes working inside `top`."""
    top = str(top.resolve())
    out = []
    for d in Path("/proc").iterdir():
        try:
            cwd = os.readlink(d / "cwd") if d.name.isdigit() else ""
            if cwd and (d / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue  # a zombie: gone, waiting for its parent to reap it
        except OSError:
            continue
        if cwd == top or cwd.startswith(top + "/"):
            out.append(int(d.name))
    return out


def test_the_copy_holds_the_checkout_and_runs_its_own_tools(tmp_path):
    copy = bench.scratch_checkout(tmp_path / "copy")
    files = bench.checkout_files(ROOT)
    assert "tools/perfbook/dev/bench.py" in files and "Makefile" in files
    for rel in files:
        if os.path.lexists(ROOT / rel):
            assert os.path.lexists(copy / rel), rel
    assert os.readlink(copy / ".venv") == str((ROOT / ".venv").resolve())
    assert not any((copy / d).exists() for d in (".git", "build", "_build"))
    bench.check_copy(copy, bench.copy_env(copy))  # it imports its own tools


def test_a_copy_of_a_copy_holds_the_same_files(tmp_path):
    """A benchmark or test run inside a scratch copy makes its own copy of that copy: no .git
    there, and a .venv that is a link (it used to be copied as a file and then clash)."""
    first = bench.scratch_checkout(tmp_path / "first")
    (first / "build").mkdir()
    (first / "build" / "junk").write_text("not content\n")
    second = bench.scratch_checkout(tmp_path / "second", first)
    assert bench.checkout_files(second) == bench.checkout_files(first)
    assert "tools/perfbook/dev/bench.py" in bench.checkout_files(second)
    assert not (second / "build").exists()
    assert os.readlink(second / ".venv") == str((ROOT / ".venv").resolve())


def test_a_copy_that_would_run_the_checkouts_tools_is_refused(tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / ".venv").symlink_to(ROOT / ".venv")
    env = dict(os.environ, PERFBOOK_ROOT=str(copy))
    env.pop("PYTHONPATH", None)  # no tools/ of its own
    with pytest.raises(PerfbookError, match="would not run its own tools"):
        bench.check_copy(copy, env)


@pytest.mark.slow  # re-executes notebooks or a measure in child processes
def test_a_dry_run_at_n1_measures_a_copy_and_leaves_nothing(scratch_parent):
    before = digest.dir_digest(ROOT / "data")
    committed = sorted(p.name for p in (ROOT / "data" / "runs").iterdir() if p.is_dir())
    chapters = {p.name for p in (ROOT / "data" / "runs").glob("*/*") if p.is_dir()}
    datasets = len(list((ROOT / "data" / "runs").glob("*/*/*/manifest.json")))
    lines = []
    rows = bench.fleet([1], dry_run=True, say=lines.append)
    (row,) = rows
    assert row["n"] == 1 and row["hosts"] == len(committed) + 1
    assert row["datasets"] == datasets + len(chapters)  # the synthetic host: one per chapter
    assert row["manifests_s"] is not None and row["manifests_s"] > 0
    assert "refresh_s" not in row and row["data_mb"] > 0
    assert any("--dry-run: the notebooks and the book are not run" in ln for ln in lines)
    table = [ln for ln in lines if ln.split()[:2] == ["1", str(len(committed) + 1)]]
    assert len(table) == 1
    assert list(scratch_parent.iterdir()) == []  # every copy removed
    assert digest.dir_digest(ROOT / "data") == before  # the checkout's data untouched


def test_an_interrupted_run_removes_its_scratch(scratch_parent, monkeypatch):
    seen = []

    def interrupted(n, copy, *args, **kwargs):
        seen.append(copy)
        assert (copy / "data" / "runs").is_dir()
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "measure_size", interrupted)
    with pytest.raises(KeyboardInterrupt):
        bench.fleet([0], dry_run=True, say=lambda *_: None)
    assert seen and not seen[0].exists()
    assert list(scratch_parent.iterdir()) == []


def test_an_interrupted_step_stops_its_child_and_the_kernels_it_started(tmp_path):
    top = tmp_path / "top"
    work = top / "copy"
    work.mkdir(parents=True)
    code = (
        "import subprocess, time\n"
        "subprocess.Popen(['sleep', '300'], start_new_session=True)  # like a notebook kernel\n"
        "print('started', flush=True)\n"
        "time.sleep(300)\n"
    )

    def stop(line):
        if line == "started":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        bench.run_step(
            [sys.executable, "-c", code],
            work,
            dict(os.environ),
            top,
            "[t]",
            say=lambda *_: None,
            on_line=stop,
        )
    import time

    for _ in range(50):  # SIGKILL is delivered asynchronously
        if not inside(top):
            break
        time.sleep(0.1)
    assert inside(top) == []


def test_a_step_reports_its_time_status_and_lines(tmp_path):
    got = []
    secs, rc = bench.run_step(
        [sys.executable, "-c", "print('a'); print('b'); raise SystemExit(3)"],
        tmp_path,
        dict(os.environ),
        tmp_path,
        "[t]",
        say=got.append,
    )
    assert rc == 3 and secs >= 0 and got == ["[t] a", "[t] b"]


def test_the_table_shows_every_size_and_notebook():
    rows = [
        {
            "n": 1,
            "hosts": 4,
            "datasets": 43,
            "data_mb": 7.0,
            "manifests_s": 0.02,
            "refresh_s": 300.0,
            "refresh_rc": 1,
            "again_s": 100.0,
            "again_rc": 0,
            "book_s": 90.0,
            "book_rc": 0,
            "site_mb": 60.0,
            "notebooks": {"trace_overhead": 20, "hosts": "FAILED"},
            "legends": {"trace_overhead": 5},
            "probe": [1.02, 1.1],
        },
        {
            "n": 10,
            "hosts": 13,
            "datasets": 133,
            "data_mb": 20.0,
            "manifests_s": 0.05,
            "notebooks": {"trace_overhead": 31},
            "legends": {},
        },
    ]
    out = bench.fleet_table(rows, committed=3)
    assert "beside the 3 committed ones" in out[0]
    assert out[3].split() == [
        "1",
        "4",
        "43",
        "7",
        "20",
        "300!",
        "100",
        "90",
        "60",
        "5",
        "1.02/1.10",
    ]
    assert out[4].split() == ["10", "13", "133", "20", "50", "-", "-", "-", "-", "-", "-"]
    assert not any(ln.startswith("notebooks + book") for ln in out)  # N=10 has no times
    rows[1].update(refresh_s=600.0, again_s=200.0, book_s=180.0, probe=[1.3, None])
    ratios = [
        ln
        for ln in bench.fleet_table(rows, committed=3)
        if ln.startswith(("notebooks + book", "speed"))
    ]
    assert ratios == [
        "notebooks + book (nothing stored yet): N=10 takes 2.0x the time of N=1",
        "notebooks + book (findings stored): N=10 takes 2.0x the time of N=1",
        "speed probe before/after the first refresh (the same work each time; a larger "
        "figure is a slower machine): N=1 1.02/1.10 s, N=10 1.30/- s",
    ]
    per_nb = {ln.split()[0]: ln for ln in out if ln.startswith(("trace_overhead", "hosts"))}
    assert per_nb["trace_overhead"].split() == ["trace_overhead", "20", "/", "5", "31", "/", "-"]
    assert per_nb["hosts"].split()[:4] == ["hosts", "FAILED", "/", "-"]
    assert out[-1].startswith("! the step exited non-zero")


def test_bad_sizes_are_one_line(capsys):
    assert bench.main(["fleet", "--sizes", "1,x"]) == 2
    assert (
        capsys.readouterr().err.strip() == "error: --sizes wants numbers like 1,10,100, got '1,x'"
    )
    with pytest.raises(PerfbookError, match="numbers of hosts >= 0"):
        bench.fleet([-1])


def test_the_legend_hook_counts_entries(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(bench.LEGEND_HOOK)
    out = tmp_path / "legends.txt"
    env = dict(
        os.environ,
        PYTHONPATH=str(tmp_path),
        PERFBOOK_BENCH_LEGENDS=str(out),
        MPLBACKEND="Agg",
        PERFBOOK_REFRESHING="some_chapter",
    )  # what `python -m perfbook refresh` sets per notebook
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import matplotlib.pyplot as plt\n"
            "f, a = plt.subplots()\n[a.plot([1, 2], label=str(i)) for i in range(7)]\n"
            "a.legend()\n",
        ],
        env=env,
        check=True,
    )
    (line,) = out.read_text().splitlines()
    assert line.split() == ["some_chapter", "7"]


def test_the_speed_probe_times_the_same_work_in_the_copy(tmp_path):
    """The probe runs in a new process of the copy's Python and gives seconds; a copy whose
    Python fails gives None (a '-' in the table), never a made-up figure."""
    copy = bench.scratch_checkout(tmp_path / "copy")
    env = bench.copy_env(copy)
    s = bench.speed_probe(copy, env)
    assert s is not None and 0 < s < 120
    assert (
        bench.speed_probe(copy, dict(env, PYTHONPATH="/nonexistent", PYTHONHOME="/nonexistent"))
        is None
    )


def test_each_memo_the_memo_benchmark_names_is_turned_off(monkeypatch):
    """bench memo's switches reach the memo they name: a memo renamed or removed fails here,
    not as a benchmark that measures nothing."""
    monkeypatch.setattr(findings, "_CODE", findings._CODE)
    monkeypatch.setattr(codedigest, "_imports", codedigest._imports)
    monkeypatch.setattr(dataset.Data, "__init__", dataset.Data.__init__)
    monkeypatch.setattr(functools, "cached_property", functools.cached_property)
    monkeypatch.setenv("PERFBOOK_VERDICT_STORE", "on")  # recorded: the end restores the session's
    monkeypatch.delenv("PERFBOOK_VERDICT_STORE")
    held = {
        "code-digests": lambda: findings._CODE,
        "module-imports": lambda: codedigest._imports,
        "verdict-store": findings.store_enabled,
        "data-memos": lambda: dataset.Data.__init__,
        "cached-properties": lambda: functools.cached_property,
    }
    assert set(bench.MEMOS) == set(held)
    for name, (_what, off) in bench.MEMOS.items():
        before = held[name]()
        off()
        assert held[name]() is not before, name
    findings._CODE["k"] = 1
    assert "k" not in findings._CODE and findings._CODE.get("k") is None
    assert not hasattr(codedigest._imports, "cache_info")
    D = dataset.Data(SimpleNamespace(name="none"), manifests=[])
    D._once["k"] = 1
    assert "k" not in D._once and D.once("k", lambda: 2) == 2 and D.once("k", lambda: 3) == 3
    calls = []

    class Derived:
        @functools.cached_property
        def value(self):
            calls.append(1)
            return len(calls)

    d = Derived()
    assert (d.value, d.value) == (1, 2)  # computed at every access
