"""The run monitor (tools/perfbook/hoststate/monitor.py): gaps seen from outside the run (stopped, frozen,
starved), the figures over the run and its windows, the verdict, and what it costs.

The live tests watch a child of the test (a `sleep`), not the test itself, so that a SIGSTOP
stops only the child; the cgroup freeze needs root and a cgroup2 hierarchy."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from conftest import need_root
from perfbook.hoststate import monitor as M


def _child():
    return subprocess.Popen(["sleep", "600"], start_new_session=True)


def _watch(child, seconds_before: float = 0.5):
    mon = M.RunMonitor(child.pid).start()
    time.sleep(seconds_before)
    return mon


def test_a_stopped_process_is_a_gap_and_marks_the_run_disturbed():
    """SIGSTOP for 3 s: the monitor, in a session of its own, sees the child in state T and
    records one gap of 3 s (+-2 ticks), the reason and the window it hit."""
    child = _child()
    mon = _watch(child)
    try:
        with mon.window("stopped part", gap_rejects=True):
            os.kill(child.pid, signal.SIGSTOP)
            time.sleep(3.0)
            os.kill(child.pid, signal.SIGCONT)
            time.sleep(0.3)
        with mon.window("after"):
            time.sleep(0.5)
        rec = mon.stop()
    finally:
        mon.close()
        child.kill()
        child.wait()
    assert rec["recorded"] and rec["disturbed"] is True, rec
    gaps = [g for g in rec["gaps"] if g["kind"] == "stopped"]
    assert (
        len(gaps) == 1 and 3.0 - 2 * M.PERIOD_S <= gaps[0]["seconds"] <= 3.0 + 2 * M.PERIOD_S + 0.3
    ), gaps
    assert 0.3 <= gaps[0]["at_s"] <= 1.5 and gaps[0]["windows"] == ["stopped part"]
    assert any(
        r.startswith(f"stopped for {gaps[0]['seconds']:g} s at {gaps[0]['at_s']:g} s into the run")
        for r in rec["reasons"]
    ), rec["reasons"]
    assert len(rec["rejects"]) == 1 and "'stopped part'" in rec["rejects"][0]
    w = {x["name"]: x for x in rec["windows"]}
    assert w["stopped part"]["gaps"] == [0] and w["after"]["gaps"] == []
    assert w["after"]["seconds"] >= 0.5 and "steal_pct" in w["after"] and "ctxt_per_s" in w["after"]
    print(
        f"monitor: {rec['samples']} samples over {rec['seconds']} s, {rec['monitor_cpu_s']} s of CPU "
        f"({rec['monitor_start_cpu_s']} s to start)"
    )


def test_an_idle_process_is_no_gap():
    """A sleeping child watched for 3 s: no gap anywhere near one of 3 s, and never stopped
    (scheduling noise on a busy machine is tenths of a second; see perfbook.hoststate.monitor.GAP_S)."""
    child = _child()
    mon = _watch(child, 3.0)
    try:
        rec = mon.stop()
    finally:
        mon.close()
        child.kill()
        child.wait()
    assert rec["recorded"] and rec["samples"] >= 10
    assert not [g for g in rec["gaps"] if g["seconds"] >= 3 or g["kind"] == "stopped"], rec["gaps"]
    assert rec["disturbed"] == bool(rec["reasons"]) and rec["rejects"] == []
    assert rec["load1"]["max"] >= 0 and rec["runnable"]["max"] >= 1  # the monitor counts itself


def test_a_frozen_cgroup_is_a_gap_the_monitor_sees_in_its_own_clock():
    """The run's cgroup frozen with the monitor in it: its own tick comes 2.5 s late."""
    need_root("freezing a cgroup")
    from perfbook.hoststate.cgroup import mount, remove

    root = mount()
    if root is None or not (root / "cgroup.procs").exists():
        pytest.skip("no cgroup2 hierarchy to freeze a group in")
    child = _child()
    mon = _watch(child)
    group = root / f"perfbook-test-freeze-{os.getpid()}"
    os.mkdir(group)
    try:
        if not (group / "cgroup.freeze").exists():
            pytest.skip("this cgroup2 hierarchy has no cgroup.freeze (Linux < 5.2)")
        (group / "cgroup.procs").write_text(str(mon.proc.pid))
        (group / "cgroup.freeze").write_text("1")
        time.sleep(2.5)
        (group / "cgroup.freeze").write_text("0")
        time.sleep(0.3)
        rec = mon.stop()
    finally:
        if (group / "cgroup.freeze").exists():
            (group / "cgroup.freeze").write_text("0")
        mon.close()
        child.kill()
        child.wait()
        remove(group)
    gaps = [g for g in rec["gaps"] if g["kind"] == "not running"]
    assert len(gaps) == 1 and 2.5 - 2 * M.PERIOD_S <= gaps[0]["seconds"] <= 2.5 + 0.5, rec["gaps"]
    assert rec["disturbed"] and "not running" in rec["reasons"][0]


# ---- the record from samples (no process) -------------------------------------------------


def _raw(states, period_s=0.1, run_step=None, late_at=None, steal=0, cpu=100, busy=0, own=0):
    """A monitor output with one sample per state; run_step(i) -> ns run in tick i. Per
    sample: `cpu` ticks of all CPU time (USER_HZ 100), `steal` and `busy` of them, `own`
    ticks of it in the run's cgroup."""
    P = int(period_s * 1e9)
    t, run, rows = 0, 0, []
    for i, st in enumerate(states):
        t += P + (int(5e9) if late_at == i else 0)
        run += run_step(i) if run_step else P // 2
        rows.append(
            [
                t,
                0,
                st,
                run,
                0,
                0.5,
                2,
                cpu * i,
                steal * i,
                1000 * i,
                None,
                busy * i,
                own * i * 10**4,
            ]
        )
    return {
        "pid": 1,
        "period_ns": P,
        "fields": M.FIELDS,
        "samples": rows,
        "cpu_s": 0.05,
        "start_cpu_s": 0.03,
        "hz": 100,
    }


def test_starved_is_runnable_without_running_and_short_waits_are_not():
    """Runnable (R) for 2.5 s with no CPU time is a starved gap; 1.5 s of it (scheduling noise
    on a loaded machine reached 0.6 s), or 2.5 s in which it ran 5 % of each tick (a fair share
    among twenty), is not."""
    starved = M.summarize(
        _raw(["S"] * 5 + ["R"] * 26 + ["S"] * 5, run_step=lambda i: 0 if 5 <= i < 31 else 10**6)
    )
    assert [(g["kind"], g["seconds"]) for g in starved["gaps"]] == [("starved", 2.5)]
    assert starved["disturbed"] and "starved" in starved["reasons"][0]
    short = M.summarize(_raw(["S"] * 5 + ["R"] * 16 + ["S"] * 5, run_step=lambda i: 0))
    share = M.summarize(_raw(["R"] * 25, run_step=lambda i: 5 * 10**6))
    assert (
        short["gaps"] == []
        and share["gaps"] == []
        and not short["disturbed"]
        and not share["disturbed"]
    )


def test_a_late_tick_is_not_running_and_a_window_after_it_is_not_hit():
    rec = M.summarize(
        _raw(["S"] * 20, late_at=10),
        [{"name": "after", "start_ns": int(6.05e9), "end_ns": int(7e9), "gap_rejects": True}],
    )
    assert [(g["kind"], g["seconds"]) for g in rec["gaps"]] == [("not running", 5.0)]
    assert rec["rejects"] == [] and rec["windows"][0]["gaps"] == []  # it began on the late tick


def test_steal_marks_a_run_disturbed_only_beyond_its_threshold():
    few = M.summarize(_raw(["S"] * 30, steal=4))
    many = M.summarize(_raw(["S"] * 30, steal=40))
    assert few["steal_pct"] == 4 and not few["disturbed"]
    assert (
        many["steal_pct"] == 40
        and many["disturbed"]
        and "steal time was 40 %" in many["reasons"][0]
    )


def test_a_busy_neighbour_marks_a_run_disturbed_and_the_runs_own_work_does_not():
    """CPU time outside the run's cgroup (busy minus the cgroup's usage) is a neighbour's:
    from FOREIGN_PCT of all CPU time on, the run is disturbed; however busy the run itself
    keeps the CPUs, it is not."""
    own = M.summarize(_raw(["S"] * 30, busy=95, own=90))  # the run's own children: 90 %
    near = M.summarize(_raw(["S"] * 30, busy=40, own=15))  # 25 % outside
    loud = M.summarize(_raw(["S"] * 30, busy=100, own=0))  # two busy loops, the run asleep
    assert own["foreign_pct"] == 5 and not own["disturbed"]
    assert near["foreign_pct"] == 25 and not near["disturbed"]
    assert loud["foreign_pct"] == 100 and loud["disturbed"]
    assert "work outside the run used 100 %" in loud["reasons"][0]
    old = _raw(["S"] * 30)
    old["samples"] = [r[:11] for r in old["samples"]]  # a record from before the field
    assert "foreign_pct" not in M.summarize(old)


def test_no_record_is_no_verdict():
    rec = M.summarize(None)
    assert rec["recorded"] is False and rec["disturbed"] is None and rec["rejects"] == []
    assert M.verdict_text(rec) == "not recorded" and M.verdict_text(None) == "not recorded"
    assert M.verdict_text(M.summarize(_raw(["S"] * 5))) == "no"


def test_the_monitor_ends_with_its_run():
    """Closing the pipe ends it (its record printed); so does our death (die_with_parent),
    which a subprocess that starts one and is SIGKILLed shows."""
    import sys

    from conftest import ROOT

    code = (
        "import sys, time; sys.path.insert(0, sys.argv[1]); from perfbook.hoststate.monitor import RunMonitor; "
        "m = RunMonitor().start(); print(m.proc.pid, flush=True); time.sleep(60)"
    )
    p = subprocess.Popen([sys.executable, "-c", code, str(ROOT)], stdout=subprocess.PIPE, text=True)
    pid = int(p.stdout.readline())
    p.kill()
    p.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":  # dead, not yet reaped by init
                    break
        except OSError:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the monitor outlived the process it watched")


def test_a_short_stop_is_a_gap_and_a_single_sample_is_not():
    """Nothing stops a run on its own, so a stop of half a second counts (GAP_S['stopped']);
    one sample in state T (a stop of under two ticks) does not."""
    half = M.summarize(_raw(["S"] * 5 + ["T"] * 5 + ["S"] * 5))
    one = M.summarize(_raw(["S"] * 5 + ["T"] + ["S"] * 5))
    assert [(g["kind"], g["seconds"]) for g in half["gaps"]] == [("stopped", 0.5)] and half[
        "disturbed"
    ]
    assert one["gaps"] == [] and not one["disturbed"]


def test_a_busy_neighbour_started_mid_run_marks_it_and_it_decides_nothing(tmp_path):
    """Two busy loops outside the run, started once an example collect has begun its 4-second
    hold: the dataset is published marked disturbed (work outside the run), the runs table
    shows it, and its key finding does not decide on it, nor does the prose quote it where an
    undisturbed run exists."""
    import json
    import sys

    from conftest import ROOT, read_until
    from perfbook.analysis import findings as F
    from perfbook.chapters.example import chapter
    from perfbook.data.dataset import quoted

    need_root()
    data = tmp_path / "data"
    p = subprocess.Popen(
        [
            *(sys.executable, "-m", "perfbook", "measure", "--chapters", "example"),
            *("--profile", "default", "--param", "hold_s=4", "--param", f"data_dir={data}"),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    loops = []
    try:
        seen, cued = read_until(p, "state changed", 600)
        assert cued, "".join(seen)
        loops = [
            subprocess.Popen(["sh", "-c", "while :; do :; done"], start_new_session=True)
            for _ in range(2)
        ]
        out, _ = p.communicate(timeout=120)
    finally:
        for q in loops:
            q.kill()
            q.wait()
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 0, "".join(seen) + out
    (man,) = [json.loads(m.read_text()) for m in data.glob("runs/*/example/*/manifest.json")]
    rec = man["disturbance"]
    assert rec["disturbed"] and rec["foreign_pct"] >= M.FOREIGN_PCT, rec
    assert any(r.startswith("work outside the run used") for r in rec["reasons"]), rec["reasons"]
    fp = rec["fingerprint"]  # the machine's speed before and after, for the host's distribution
    assert all(fp[k]["syscall_ns"] > 0 and fp[k]["memcpy_gbs"] > 0 for k in ("before", "after"))
    D = chapter.load(data)
    v = F.evaluate(D, chapter.key_findings[0], D.hosts[0])
    assert v.verdict == F.UNDECIDED and v.set_aside == ((man["run_id"], "disturbed"),), v
    calm = {**man, "run_id": "20000101T000000Z", "disturbance": {**rec, "disturbed": False}}
    assert quoted([man, calm])["run_id"] == calm["run_id"]  # older, but undisturbed
