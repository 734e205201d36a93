"""The chapter contract, for every registered chapter (and the example chapter).

perfbook.framework.sequence.collect owns the sequence: parameters -> preflight -> writable data dir
-> sweep -> lock -> signals -> the chapter's collect -> publish. These tests drive it:

* a bad parameter: one line, no dataset, non-zero exit (library, CLI);
* an unwritable data dir: one line naming it, before anything is measured;
* a chapter whose measure raises midway: state restored, nothing published;
* SIGINT to the foreground group, SIGTERM to the group, SIGTERM to the parent alone and
  SIGKILL followed by the next run, sent while kernel state is changed, through
  `python -m perfbook measure` and through a plain papermill collect: every piece of state
  restored, nothing published, non-zero exit;
* every committed manifest has the required fields.

The live cases need root (and skip with the reason otherwise).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, need_root, read_until
from perfbook.chapters import CHAPTERS, EXAMPLE
from perfbook.core.errors import DatasetError, ParameterError
from perfbook.data.dataset import REQUIRED, list_runs, load_manifest
from perfbook.framework import sequence as framework
from perfbook.hoststate import scratch

ALL = CHAPTERS + [EXAMPLE]
IDS = [c.name for c in ALL]
PY = sys.executable
# processes a run of ours may start; none may outlive it
CHILDREN = (
    "probench",
    "bpftrace",
    "hackbench",
    "fio",
    "iostat",
    "qemu-system-x86_64",
    "qemu-io",
    "qemu-img",
    "netserver",
    "netperf",
    "perf",
    "prefork",
    "seqread",
    "kvmtsc",
    "rrbench",
    "strace",
)


def _int_param(ch) -> str | None:
    """A parameter with a lower bound, to pass a value below it."""
    for k, spec in ch.params.items():
        if spec.kind is int and spec.min is not None:
            return k
    return None


def _datasets(data: Path) -> list[Path]:
    return [p for p in (data / "runs").glob("*/*/*") if p.is_dir()]


# ---- parameters and data directory ------------------------------------------------------


@pytest.mark.parametrize("ch", ALL, ids=IDS)
def test_bad_parameters_are_one_line_and_write_nothing(ch, scratch_data):
    mod = ch.load()
    cases = [("quick", {"no_such_parameter": 1}), ("no_such_profile", {})]
    if _int_param(mod):
        cases.append(("quick", {_int_param(mod): -5}))
    for profile, over in cases:
        with pytest.raises(ParameterError) as e:
            framework.collect(mod, profile, scratch_data, say=lambda s: None, **over)
        assert "\n" not in str(e.value).strip()
    assert _datasets(scratch_data) == []


@pytest.mark.slow  # a measure refused at its parameters: nothing is measured
@pytest.mark.parametrize("ch", ALL, ids=IDS)
def test_measure_cli_rejects_a_bad_value_with_one_line(ch, scratch_data):
    mod = ch.load()
    name = _int_param(mod) or "no_such_parameter"
    r = subprocess.run(
        [
            PY,
            "-m",
            "perfbook",
            "measure",
            "--chapters",
            ch.name,
            "--profile",
            "quick",
            "--param",
            f"{name}=-5",
            "--param",
            f"data_dir={scratch_data}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode != 0
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and name in lines[0], lines
    assert _datasets(scratch_data) == []


@pytest.mark.parametrize("ch", ALL, ids=IDS)
def test_unwritable_data_dir_stops_before_measuring(ch, tmp_path):
    mod = ch.load()
    if mod.preflight():
        pytest.skip(f"{ch.name} can't collect here: {mod.preflight()[0]}")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    t0 = time.monotonic()
    with pytest.raises(DatasetError) as e:
        framework.collect(mod, "quick", blocker / "data", say=lambda s: None)
    assert str(blocker) in str(e.value) and "\n" not in str(e.value)
    assert time.monotonic() - t0 < 10, "it measured before checking the data directory"


@pytest.mark.parametrize("ch", CHAPTERS, ids=[c.name for c in CHAPTERS])
def test_committed_datasets_load_typed_and_match_the_declared_tables(ch):
    """Every committed dataset migrates to the current manifest schema, and every table it
    lists is one the chapter declares, with the declared columns and types."""
    from perfbook.data.dataset import SCHEMA, Manifest, read_table

    chapter = ch.load()
    runs = list_runs(ch.name)
    assert runs, f"no committed dataset of {ch.name}"
    for run in runs:
        m = load_manifest(run)
        assert isinstance(m, Manifest) and m.schema == SCHEMA
        assert all(k in m for k in REQUIRED)
        assert m.host_id == run.parent.parent.name and m.run_id == run.name
        assert "profile" not in m.parameters, "the profile has its own manifest field"
        for table in m.tables:
            assert table in chapter.tables, f"{run}/{table}.csv is not declared by {ch.name}"
            read_table(run, table, m, chapter.tables[table])


@pytest.mark.parametrize("ch", ALL, ids=IDS)
def test_chapter_declares_the_contract(ch):
    """A Chapter subclass with profiles whose values its Params accept, and table schemas."""
    from perfbook.framework.contract import Chapter, Param, Table

    chapter = ch.load()
    assert isinstance(chapter, Chapter) and chapter.name == ch.name and chapter.title
    assert {"quick", "default", "full"} <= set(chapter.profiles)
    assert chapter.params and all(isinstance(v, Param) for v in chapter.params.values())
    assert chapter.tables and all(isinstance(v, Table) for v in chapter.tables.values())
    for prof in chapter.profiles:
        assert set(chapter.profiles[prof]) <= set(chapter.params), f"{prof}: undeclared parameters"
        chapter.parameters(prof)  # every profile passes its own validation
    import importlib

    assert callable(importlib.import_module(f"{ch.module}.collect").measure), "collect.measure(ctx)"


def test_a_table_that_does_not_match_its_schema_is_refused(tmp_path):
    import pandas as pd

    from perfbook.framework.contract import Table

    t = Table(round="int", ns="float", what="str", ok="bool", optional=("ok",))
    good = t.check(pd.DataFrame({"round": [1, 2], "ns": [1.5, 2], "what": ["a", "b"]}), "x")
    assert str(good["round"].dtype) == "int64" and good["ok"].isna().all()
    for bad, msg in [
        (pd.DataFrame({"round": [1.5], "ns": [1.0], "what": ["a"]}), "'round' is not int"),
        (pd.DataFrame({"round": [1], "what": ["a"]}), "missing column(s) ns"),
        (pd.DataFrame({"round": [1], "ns": ["fast"], "what": ["a"]}), "'ns' is not float"),
        (pd.DataFrame({"round": [1], "ns": [1.0], "what": ["a"], "x": [0]}), "undeclared"),
    ]:
        with pytest.raises(DatasetError, match=re.escape(msg)):
            t.check(bad, "x")


def test_a_column_already_in_its_type_is_kept_and_equals_a_full_conversion():
    """Table.check keeps a column read_csv already gave its declared type; on every committed
    table the frame equals the one from converting every column (each column but the text ones,
    which were kept before too, handed over as plain Python objects: no fast path takes them)."""
    import pandas as pd

    from perfbook.chapters import CHAPTERS
    from perfbook.data.dataset import list_runs, table_path
    from perfbook.framework.contract import Table

    t = Table(round="int", ns="float", what="str", ok="bool")
    df = pd.DataFrame({"round": [1, 2], "ns": [1.5, 2.0], "what": ["a", "b"], "ok": [True, False]})
    out = t.check(df, "x")
    import numpy as np

    assert out is not df and all(
        np.shares_memory(out[c].to_numpy(), df[c].to_numpy())  # not copied
        for c in ("round", "ns", "ok")
    )
    assert t.check(df.assign(what=[1.0, None]), "x")["what"].iloc[0] == "1.0"  # not kept: converted
    n = 0
    for ch in CHAPTERS:
        mod = ch.load()
        for run in list_runs(ch.name):
            for name, schema in mod.tables.items():
                p = table_path(run, name)
                if p is None:
                    continue
                raw = pd.read_csv(p)
                fast = schema.check(raw, str(p))
                plain = {
                    c: object for c in raw.columns if not isinstance(raw[c].dtype, pd.StringDtype)
                }
                slow = schema.check(raw.astype(plain), str(p))
                pd.testing.assert_frame_equal(fast, slow, check_exact=True, obj=str(p))
                n += 1
    assert n > 100


def test_an_older_manifest_is_migrated_and_a_newer_one_refused(tmp_path):
    import json

    from perfbook.data.dataset import SCHEMA, migrate

    old = {
        "schema": 1,
        "chapter": "c",
        "run_id": "r",
        "host": {"host_id": "h"},
        "started": "",
        "finished": "",
        "tables": {},
        "parameters": {"profile": "quick", "n": 1},
        "harness": {"a": 1},
    }
    m = migrate(old)
    assert m["schema"] == SCHEMA and m["profile"] == "quick" and m["parameters"] == {"n": 1}
    assert m["facts"] == {"harness": {"a": 1}} and "harness" not in m
    assert m["disturbance"] is None  # 2 -> 3: no run monitor before schema 3
    two = migrate({**old, "schema": 2, "parameters": {"n": 1}, "profile": "quick", "facts": {}})
    assert two["schema"] == SCHEMA and two["disturbance"] is None and "harness" not in two["facts"]
    assert m["phases"] is None and two["phases"] is None  # 3 -> 4: no seconds by phase before
    run = tmp_path / "runs" / "h" / "c" / "r"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({**old, "schema": SCHEMA + 1}))
    with pytest.raises(DatasetError, match="update the checkout"):
        load_manifest(run)


def test_one_selection_policy_quotes_the_newest_real_run():
    from perfbook.data.dataset import quoted

    ms = [
        {"run_id": "20260101T000000Z", "profile": "default", "tables": {"a": 1}},
        {"run_id": "20260301T000000Z", "profile": "quick", "tables": {"a": 1}},
        {"run_id": "20260201T000000Z", "profile": "full", "tables": {"b": 1}},
    ]
    assert quoted(ms)["run_id"] == "20260201T000000Z"  # a quick run never replaces it
    assert quoted(ms, needs=("a",))["run_id"] == "20260101T000000Z"
    assert quoted(ms[1:2])["run_id"] == "20260301T000000Z"  # only a quick run: that one


# ---- the structure the contract promises ------------------------------------------------

TOOLS = ROOT / "tools"


def test_exactly_one_signal_handler_and_one_ftrace_line_parser():
    handlers = [
        str(p.relative_to(ROOT))
        for p in TOOLS.rglob("*.py")
        if re.search(r"signal\.signal\(", p.read_text())
    ]
    assert handlers == ["tools/perfbook/core/guard.py"], handlers
    # an ftrace line parser matches the CPU column, "[001]", before the timestamp
    cpu_col = re.compile(r"""\\\[\(\?P<cpu>|\\\[\(\\\\d\+\)\\\]""")
    parsers = [
        str(p.relative_to(ROOT)) for p in TOOLS.rglob("*.py") if cpu_col.search(p.read_text())
    ]
    assert parsers == ["tools/perfbook/probes/ftrace.py"], parsers


# ---- what a run leaves ----------------------------------------------------------------------

TAG = f"contract-{os.getpid()}-{time.time_ns()}"  # every process a test starts inherits it


def _tagged(pid: int) -> bool:
    try:
        return f"PERFBOOK_TEST_TAG={TAG}".encode() in Path(
            f"/proc/{pid}/environ"
        ).read_bytes().split(b"\0")
    except OSError:
        return False


def _ours(pid: int) -> bool:
    """State named after `pid` belongs to the run under test if that process is gone (its
    state outlived it) or carries our tag; a concurrent run's live state is not ours."""
    from perfbook.core.proc import pid_alive

    return not pid_alive(pid) or _tagged(pid)


def leftovers(data: Path) -> list[str]:
    """Everything the run under test could leave behind; [] when all is restored."""
    from perfbook.hoststate import tracefs

    out = []
    snap = tracefs.snapshot() if os.geteuid() == 0 else {"mounted": False}
    if snap.get("mounted"):
        for probe in snap["our_probes"]:
            m = re.search(r"perfbook_(\d+)/", probe)
            if m and _ours(int(m.group(1))):
                out.append(f"uprobe {probe}")
        for inst in snap["our_instances"]:
            m = re.match(r"perfbook_(\d+)_", inst)
            if m and _ours(int(m.group(1))):
                out.append(f"instance {inst}")
    ps = subprocess.run(["ps", "-eo", "pid=,comm=,args="], capture_output=True, text=True).stdout
    for line in ps.splitlines():
        pid, comm, args = (line.split(None, 2) + ["", ""])[:3]
        # the children, a notebook kernel, and a papermill collect's own process (tools
        # collect), which restores after its kernel is gone: its exit ends the restore
        if (
            comm in CHILDREN
            or "sleep 4242.4242" in args
            or "ipykernel" in args
            or " -m perfbook kernel " in f" {args} "
            or " -m perfbook collect " in f" {args} "
        ) and _tagged(int(pid)):
            out.append(f"process {pid} {comm}")
    for d in scratch.live_dirs():
        m = scratch._NAME.match(d.name)
        if m and _ours(int(m["pid"])):
            out.append(f"scratch {d}")
    out += [f"dataset {d}" for d in _datasets(data)]
    out += [f"half-written {d}" for d in (data / "runs").glob("*/*/.tmp-*")]
    from perfbook.hoststate.statedir import subdir

    out += [
        f"dataset record {r.name}"
        for r in subdir("datasets").iterdir()
        if (m := re.match(r"tmp-(\d+)-", r.name)) and _ours(int(m.group(1)))
    ]
    ns = (
        subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        if os.path.exists("/usr/bin/ip") or os.path.exists("/bin/ip")
        else ""
    )
    for n in ns.splitlines():
        m = re.match(r"perfbook_(\d+)_", n)
        if m and _ours(int(m.group(1))):
            out.append(f"netns {n.split()[0]}")
    from perfbook.hoststate import knobs

    out += [f"knob record {r}" for r in knobs.records() if r.stem.isdigit() and _ours(int(r.stem))]
    from perfbook.hoststate import cgroup

    root = cgroup.mount()
    if root is not None and os.geteuid() == 0:
        out += [
            f"cgroup {g.name} {cgroup.procs(g)}"
            for g in root.glob(f"{cgroup.PREFIX}*")
            if g.name.removeprefix(cgroup.PREFIX).isdigit()
            and _ours(int(g.name.removeprefix(cgroup.PREFIX)))
        ]
    from perfbook.hoststate.statedir import subdir
    from perfbook.hoststate.sweep import _KERNEL

    for f in subdir("kernels").iterdir():
        # only the kernels of the run under test (named after the process that started them)
        m = _KERNEL.match(f.name)
        try:
            recent = f.lstat().st_mtime >= _STARTED[0]
        except FileNotFoundError:
            continue
        if m and recent and _ours(int(m.group(1) or m.group(2))):
            out.append(f"kernel file {f}")
    return out


def mounts_of_ours() -> dict:
    """The mounts a run may make (and must undo): debugfs, tracefs."""
    from perfbook.hoststate import knobs

    return {
        "debugfs": knobs.mounted(),
        "tracefs": knobs.mounted(Path("/sys/kernel/tracing"), "tracefs"),
    }


def settle(data: Path, seconds: float = 60) -> list[str]:
    """leftovers(), polled until empty or `seconds` passed (a kernel cleans up after its parent)."""
    deadline = time.monotonic() + seconds
    while True:
        left = leftovers(data)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def _fg():
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as a terminal's foreground job has it


_STARTED = [0.0]  # when start() began the run under test (time.time())


# A tracer that does not come up in time on a loaded machine is the machine's state, not a defect
# of the run under test: that one run is started once more (a second time fails the test).
SLOW_TRACER = re.compile(r"bpftrace did not attach within")


def start(argv, chapter: str, ready: str, timeout: float = 240, again: bool = True):
    """Start a run in its own session and read its output until `ready` (a regex) shows
    that it changed state; returns (process, output so far)."""
    _STARTED[0] = time.time()
    p = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=_fg,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "PERFBOOK_TEST_TAG": TAG},
    )
    seen, ready_seen = read_until(p, ready, timeout)
    if ready_seen:
        return p, seen
    p.kill()
    p.wait()
    if again and SLOW_TRACER.search("".join(seen)):
        from perfbook.hoststate.sweep import sweep_all

        sweep_all(log=lambda s: None)
        return start(argv, chapter, ready, timeout, again=False)
    pytest.fail(f"{chapter} never reached {ready!r}:\n" + "".join(seen[-20:]))


def entry(kind: str, chapter: str, data: Path, tmp: Path, extra: dict) -> list[str]:
    if (
        kind == "collect"
    ):  # what a notebook's collect mode runs (perfbook.book.collect_mode.run_mode)
        import json

        return [
            PY,
            "-m",
            "perfbook",
            "collect",
            chapter,
            "--profile",
            "quick",
            "--data-dir",
            str(data),
            "--params",
            json.dumps(extra),
        ]
    if kind == "measure":
        args = [
            PY,
            "-m",
            "perfbook",
            "measure",
            "--chapters",
            chapter,
            "--profile",
            "quick",
            "--param",
            f"data_dir={data}",
        ]
        for k, v in extra.items():
            args += ["--param", f"{k}={v}"]
        return args
    pm = str(Path(PY).with_name("papermill"))
    args = [
        pm,
        str(ROOT / "chapters" / f"{chapter}.ipynb"),
        str(tmp / "out.ipynb"),
        "-k",
        "python3",
        "--log-output",
        "-p",
        "mode",
        "collect",
        "-p",
        "profile",
        "quick",
        "-p",
        "data_dir",
        str(data),
    ]
    for k, v in extra.items():
        args += ["-p", k, str(v)]
    return args


# chapter -> (a line that shows kernel state is changed, extra parameters)
LIVE = {
    "example": (r"state changed", {"hold_s": 60}),
    # during the BPF mechanism: bpftrace attached to our harness, the harness running under it
    # (enough calls that the harness is still running when the signal lands)
    "trace_overhead": (
        r"\[trace_overhead\] bpftrace \d+ attached",
        {"mechanisms": "none,bpf_uprobe", "iterations": 2000000},
    ),
    # a phase's workload running, iostat sampling, block events traced
    "iostat_internals": (
        r"\[iostat_internals\] \w+: workload running, iostat sampling, tracing on",
        {},
    ),
    "qcow2_overlap": (r"\[qcow2_overlap\] \d+/\d+", {}),
    # a KVM VM with its TSC offset written, and the private ftrace instance armed; 200 rounds
    # keep it running when the signal lands, and rounds of 2,000 samples reach round 1 in about
    # 0.4 s (20,000 took 3 s; the 8 cases ran in 28 s instead of 52 s, idle)
    "tsc_alignment": (
        r"\[tsc_alignment\] (warm-up )?round 1:",
        {"samples": 2000, "rep_min_runs": 200, "rep_max_runs": 200, "rep_budget_s": 3600},
    ),
    # QEMU guests booting (TCG here; tracing instances armed on the host)
    "virtio_features": (r"\[virtio_features\] booting a (KVM|TCG) guest", {}),
    "virtio_blk_latency": (r"\[virtio_blk_latency\] booting a (TCG|KVM) guest", {"accel": "tcg"}),
    # a guest with an iothread booting: QEMU, its scratch disks and the QMP socket in place
    "virtio_blk_iothread": (r"\[virtio_blk_iothread\] booting a (TCG|KVM) guest", {}),
    # network namespaces with veth pairs, netserver and netperf running
    "netperf_latency": (
        r"\[netperf_latency\] \d+/\d+ \(\d+%\) round 1 ",
        {"rep_target": 0.001, "rep_max_runs": 50, "rep_budget_s": 600},
    ),
    # debugfs mounted for the scheduler knobs, workers running, an ftrace instance armed
    "cpu_pinning": (
        r"\[cpu_pinning\] \d+/\d+ \(\d+%\) round 1 ",
        {"rep_target": 0.001, "rep_max_runs": 50, "rep_budget_s": 600},
    ),
    # a tracer armed in the private instance (the stacktrace trigger) or attached (bpftrace),
    # hackbench running under it long enough for the signal to land
    "sched_callers": (
        r"\[sched_callers\] \w+ armed for hackbench",
        # many short hackbench runs rather than a few long ones: the untimed warm-up before the
        # first tracer is armed is one run (12 s at -l 2000 here, about 1 s at -l 200)
        {
            "tracers": "ftrace_trigger,bpftrace",
            "workloads": "hackbench",
            "hackbench_loops": 200,
            "hackbench_runs": 30,
        },
    ),
}
SIGNALS = {
    "sigint-group": (signal.SIGINT, "group"),
    "sigterm-group": (signal.SIGTERM, "group"),
    "sigterm-parent": (signal.SIGTERM, "parent"),
    "sigkill-parent": (signal.SIGKILL, "parent"),
}
# the example chapter's papermill case is its `python -m perfbook collect` (what its notebook's
# collect mode runs; tests/test_example.py executes the notebook itself)
MATRIX = [
    (c, k, s)
    for c in LIVE
    for k in ("measure", "papermill", "collect")
    for s in SIGNALS
    if k == "measure" or (k == "collect") == (c == "example")
]


@pytest.mark.parametrize("chapter,kind,how", MATRIX, ids=[f"{c}-{k}-{s}" for c, k, s in MATRIX])
def test_signal_restores_everything_and_publishes_nothing(chapter, kind, how, tmp_path):
    need_root("changing kernel state")
    from perfbook.chapters import by_name

    mod = by_name(chapter).load()
    if mod.preflight():
        pytest.skip(f"{chapter} can't collect here: {mod.preflight()[0]}")
    data = tmp_path / "data"
    (data / "runs").mkdir(parents=True)
    from perfbook.hoststate.sweep import sweep_all

    sweep_all(log=lambda s: None)  # a previous case's failure must not fail this one too
    assert settle(data, 5) == [], "state left before the test by a live process of ours"
    ready, extra = LIVE[chapter]
    sig, target = SIGNALS[how]
    mounts_before = mounts_of_ours()
    p, seen = start(entry(kind, chapter, data, tmp_path, extra), chapter, ready)
    t0 = time.monotonic()
    if target == "group":
        os.killpg(p.pid, sig)
    else:
        os.kill(p.pid, sig)
    try:
        out, _ = p.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        pytest.fail(f"{chapter} did not stop within 90 s of {how}")
    stopped = time.monotonic() - t0
    assert p.returncode != 0, f"exit 0 after {how}"
    if sig == signal.SIGKILL:
        # every descendant dies with the run (perfbook.hoststate.cgroup's watchdog), not at the next run's
        # sweep: an orphaned bpftrace would skew whatever runs in between. A SIGKILLed papermill
        # SIGTERMs the collect (which then restores and ends its children itself), so allow
        # for a restore on a busy machine
        deadline = time.monotonic() + 60
        while (
            procs := [x for x in leftovers(data) if x.startswith(("process", "cgroup"))]
        ) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert procs == [], f"after {how} ({kind}) these outlived the run: {procs}"
        from perfbook.hoststate.sweep import sweep_all

        sweep_all(
            log=lambda s: None
        )  # what the next run does first: it finds `data` in its records
    left = settle(data)
    assert left == [], (
        f"after {how} ({kind}) this was left: {left}\n" + "".join(seen[-5:]) + (out or "")[-2000:]
    )
    assert mounts_of_ours() == mounts_before, f"after {how} ({kind}) a mount was left or taken away"
    if sig != signal.SIGKILL:
        assert stopped < (30 if kind == "measure" else 60), f"took {stopped:.0f} s to stop"
    if sig != signal.SIGKILL:
        assert p.returncode == 128 + sig, f"exit {p.returncode} after {how} ({kind})\n{out[-2000:]}"
        assert "Traceback" not in (out or "") and "Aborted!" not in (out or ""), out[-2000:]
        assert len(re.findall(r"^interrupted by SIG", out or "", re.M)) == 1, out[-2000:]


def test_a_killed_runs_half_written_dataset_in_its_own_data_dir_is_swept(tmp_path):
    """A run SIGKILLed while it wrote to a data_dir of its own: `python -m perfbook sweep`, which
    is given no data dir, removes the .tmp-<pid>-* dataset there (the run recorded it)."""
    data = tmp_path / "elsewhere"
    (data / "runs").mkdir(parents=True)
    p, seen = start(
        entry("measure", "example", data, tmp_path, {"hold_s": 60}), "example", r"state changed"
    )
    half = list((data / "runs").glob("*/example/.tmp-*"))
    assert len(half) == 1, "no half-written dataset while the run held its state"
    # SIGKILL for the dataset's writer (.tmp-<pid>-: the run's collect process) first, then for
    # the run: killed the other way round, the writer gets SIGTERM from the run's death and may
    # remove its own half-written dataset before the sweep (a busy .ci/run: 'nothing to sweep')
    writer = int(half[0].name.split("-")[1])
    os.kill(writer, signal.SIGKILL)
    os.kill(p.pid, signal.SIGKILL)
    p.communicate(timeout=90)
    # the sweep rightly leaves a dataset alone while its writer lives: wait for it to be gone
    from perfbook.core.proc import pid_alive

    deadline = time.monotonic() + 60
    while pid_alive(writer) and time.monotonic() < deadline:
        time.sleep(0.2)
    r = subprocess.run(
        [PY, "-m", "perfbook", "sweep"], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert not half[0].exists() and str(half[0]) in r.stdout, r.stdout + r.stderr
    assert settle(data) == []


def test_a_chapter_that_raises_midway_restores_and_publishes_nothing(scratch_data):
    from perfbook.chapters.example import chapter as example

    with pytest.raises(RuntimeError, match="on purpose"):
        framework.collect(example, "quick", scratch_data, say=lambda s: None, fail_after=2)
    assert settle(scratch_data, 10) == []


def test_measure_exits_nonzero_when_a_chapter_fails(scratch_data):
    r = subprocess.run(
        [
            PY,
            "-m",
            "perfbook",
            "measure",
            "--chapters",
            "example",
            "--profile",
            "quick",
            "--param",
            f"data_dir={scratch_data}",
            "--param",
            "fail_after=1",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAILED: RuntimeError: example: failing on purpose" in r.stdout
    assert "Traceback" not in r.stdout + r.stderr
    assert _datasets(scratch_data) == []


@pytest.mark.parametrize("ch", CHAPTERS, ids=[c.name for c in CHAPTERS])
def test_papermill_parses_every_parameter_line(ch, caplog):
    """papermill reads the parameters cell line by line: a line it cannot parse (a chained
    assignment, say) is a warning on every run and a parameter it does not know."""
    import logging

    import nbformat
    from papermill.translators import PythonTranslator

    nb = nbformat.read(ch.path, as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    with caplog.at_level(logging.WARNING, logger="papermill"):
        names = {p.name for p in PythonTranslator.inspect(cell)}
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    assert {"mode", "profile", "data_dir"} <= names
    assert names - {"mode", "profile", "data_dir"} <= set(ch.load().params), (
        "a notebook parameter the chapter does not declare"
    )


def test_a_plain_papermill_run_prints_only_its_own_lines(tmp_path):
    """Every chapter printed papermill's 'Unable to parse line …' and ipykernel's warning that
    a TCP kernel is not encrypted; every parameter line parses, and the kernelspec the setup
    installs (perfbook.book.jupyter.kernel) starts the kernel on Unix sockets (perfbook.book.jupyter.provisioner): no warning."""
    import json

    from jupyter_client.kernelspec import KernelSpecManager

    from perfbook.book.jupyter.kernel import PROVISIONER

    spec = KernelSpecManager().get_kernel_spec("python3")
    assert spec.argv[1:4] == ["-m", "perfbook", "kernel"], spec.argv
    assert spec.metadata["kernel_provisioner"]["provisioner_name"] == PROVISIONER
    pm = str(Path(PY).with_name("papermill"))
    r = subprocess.run(
        [
            pm,
            str(ROOT / "chapters" / "tsc_alignment.ipynb"),
            str(tmp_path / "out.ipynb"),
            "--no-progress-bar",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-2000:]
    for noise in ("Unable to parse", "without encryption", "WARNING", "Traceback"):
        assert noise not in out, out[-2000:]
    assert json.loads((tmp_path / "out.ipynb").read_text())["cells"]


PAPERMILL_SIGNALS = {
    "sigint-group": (signal.SIGINT, "group"),
    "sigterm-group": (signal.SIGTERM, "group"),
    "sigterm-parent": (signal.SIGTERM, "parent"),
    "sighup-parent": (signal.SIGHUP, "parent"),
}


@pytest.mark.parametrize("how", list(PAPERMILL_SIGNALS))
def test_a_signal_to_papermill_is_one_line_and_the_signals_exit_status(how, tmp_path):
    """Ctrl-C to a papermill run printed ipykernel's 20-line ZMQError traceback and click's
    'Aborted!', and exited 1; SIGTERM and SIGHUP killed papermill before it shut its kernel
    down. Every signal now ends it with one line and 128 + the signal's number, its kernel
    gone and the kernel's files with it."""
    from conftest import (
        processes_with_env,
        short_state_dir,
        stop_with,
        ticker_notebook,
        wait_for_file,
    )

    sig, target = PAPERMILL_SIGNALS[how]
    state = short_state_dir()
    conn = tmp_path / "conn.json"
    marker = f"PERFBOOK_TEST_CONN={conn}"
    pm = str(Path(PY).with_name("papermill"))
    p = subprocess.Popen(
        [
            pm,
            str(ticker_notebook(tmp_path / "ticker.ipynb")),
            str(tmp_path / "out.ipynb"),
            "--no-progress-bar",
            "--log-level",
            "WARNING",
        ],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_fg,
        env={**os.environ, "PERFBOOK_STATE_DIR": str(state), "PERFBOOK_TEST_CONN": str(conn)},
    )
    try:
        wait_for_file(conn, p)
        out, err = stop_with(p, sig, target)
        assert out == "", out
        deadline = time.monotonic() + 10
        while (left := processes_with_env(marker)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert left == [], f"the kernel outlived papermill: {left}"
        left = (
            sorted(f.name for f in (state / "kernels").iterdir())
            if (state / "kernels").exists()
            else []
        )
        assert left == [], f"papermill left its kernel's files: {left}\n{out}{err}"
    finally:
        conn.with_name(conn.name + ".stop").touch()
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
        shutil.rmtree(state, ignore_errors=True)


def _make(data: Path, *more: str) -> list[str]:
    return [
        "make",
        "--no-print-directory",
        "measure",
        "PROFILE=quick",
        "CHAPTERS=example",
        f"MEASURE_ARGS=--param data_dir={data} " + " ".join(more),
    ]


@pytest.mark.parametrize("how", ["sigint-group", "sigterm-group"])
def test_make_measure_stops_on_a_signal_and_restores(how, scratch_data):
    """Ctrl-C at the terminal reaches `make measure` as well as `python -m perfbook measure`."""
    sig, _ = SIGNALS[how]
    p, seen = start(
        _make(scratch_data, "--param hold_s=60"), "example", r"state changed", timeout=300
    )
    t0 = time.monotonic()
    os.killpg(p.pid, sig)
    out, _ = p.communicate(timeout=90)
    assert p.returncode != 0, f"make exited 0 after {how}"
    assert time.monotonic() - t0 < 30
    assert settle(scratch_data) == [], out
    assert "Traceback" not in out, out


def test_make_measure_exits_nonzero_when_a_chapter_fails(scratch_data):
    r = subprocess.run(
        _make(scratch_data, "--param fail_after=1"),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert r.returncode != 0, r.stdout + r.stderr
    assert "FAILED" in r.stdout + r.stderr and "Traceback" not in r.stdout + r.stderr
    assert settle(scratch_data, 10) == []
