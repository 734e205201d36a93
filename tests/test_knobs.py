"""perfbook.hoststate.knobs: kernel knobs put back on every exit path, and after a SIGKILL by the sweep.
On a fake tree (this host's lockdown forbids writing the real debugfs knobs), through the
cpu_pinning chapter's SchedKnobs, the one user today."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from conftest import ROOT
from perfbook.chapters.cpu_pinning.collect import SchedKnobs
from perfbook.core.errors import PerfbookError
from perfbook.hoststate import knobs


def _fake_debugfs(tmp_path):
    root = tmp_path / "debug"
    (root / "sched").mkdir(parents=True)
    (root / "sched" / "base_slice_ns").write_text("1400000\n")
    (root / "sched" / "migration_cost_ns").write_text("500000\n")
    return root


def test_knobs_are_restored_after_an_exception(tmp_path):
    root = _fake_debugfs(tmp_path)
    with pytest.raises(RuntimeError):
        with SchedKnobs(root=root, mount=False) as k:
            k.set("base_slice_ns", "10000000")
            k.set("base_slice_ns", "20000000")  # the first saved value wins
            assert (root / "sched/base_slice_ns").read_text() == "20000000"
            raise RuntimeError("boom")
    assert (root / "sched/base_slice_ns").read_text() == "1400000"
    assert (root / "sched/migration_cost_ns").read_text() == "500000\n"


KNOB_RUN = r"""
import signal, sys, time
# Ctrl-C as at a terminal, also when the tests run as a background job (whose SIGINT is ignored)
signal.signal(signal.SIGINT, signal.default_int_handler)
from pathlib import Path
from perfbook.chapters.cpu_pinning.collect import SchedKnobs
with SchedKnobs(root=Path(sys.argv[1]), mount=False) as k:
    k.set("base_slice_ns", "10000000")
    print("set", flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_knobs_are_restored_on_signals(tmp_path, sig):
    """The mechanism on a fake tree (this host's lockdown forbids writing the real knobs)."""
    root = _fake_debugfs(tmp_path)
    code = KNOB_RUN
    if (
        sig == signal.SIGTERM
    ):  # the framework's collect turns SIGTERM into KeyboardInterrupt the same way
        code = "from perfbook.core import guard; guard.enter()\n" + KNOB_RUN
    p = subprocess.Popen(
        [sys.executable, "-c", code, str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert p.stdout.readline().strip() == "set"
    assert (root / "sched/base_slice_ns").read_text() == "10000000"
    p.send_signal(sig)
    p.communicate(timeout=120)  # a hang fails; a busy machine may take its time
    assert p.returncode != 0
    assert (root / "sched/base_slice_ns").read_text() == "1400000"


def test_unreadable_knob_is_never_written(tmp_path):
    root = _fake_debugfs(tmp_path)
    with SchedKnobs(root=root, mount=False) as k:
        with pytest.raises(PerfbookError, match="refusing to write"):
            k.set("no_such_knob", "1")


def test_a_sigkilled_runs_knobs_are_restored_by_the_sweep(tmp_path):
    root = _fake_debugfs(tmp_path)
    p = subprocess.Popen(
        [sys.executable, "-c", KNOB_RUN, str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert p.stdout.readline().strip() == "set"
    rec = knobs._record_dir() / f"{p.pid}.json"
    assert json.loads(rec.read_text())["saved"] == {str(root / "sched/base_slice_ns"): "1400000"}
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=120)  # a hang fails; a busy machine may take its time
    assert (root / "sched/base_slice_ns").read_text() == "10000000", "SIGKILL: nothing restored yet"
    done = knobs.sweep_stale(log=lambda s: None)
    assert (root / "sched/base_slice_ns").read_text() == "1400000" and not rec.exists()
    assert any("base_slice_ns" in d for d in done)


def test_a_live_runs_record_is_left_alone(tmp_path):
    root = _fake_debugfs(tmp_path)
    with SchedKnobs(root=root, mount=False) as k:
        k.set("base_slice_ns", "10000000")
        assert knobs.sweep_stale(log=lambda s: None) == []
        assert (root / "sched/base_slice_ns").read_text() == "10000000"
    assert (root / "sched/base_slice_ns").read_text() == "1400000"
    assert not (knobs._record_dir() / f"{os.getpid()}.json").exists()


def test_a_mount_below_ours_does_not_keep_ours_mounted(tmp_path):
    """Found by a noisy make test: perf read /sys/kernel/debug/tracing while cpu_pinning had
    debugfs mounted, the kernel automounted tracefs there, and debugfs could not be unmounted
    (busy) after a SIGTERM; the record was dropped too, so no sweep ever retried. Here with
    tmpfs in a scratch directory (a mount below the session's root stands for the automount)."""
    if os.geteuid() != 0:
        pytest.skip("mounting needs root")
    root = tmp_path / "dbg"
    root.mkdir()
    said = []
    with knobs.KnobSession(root=root, mount=True, log=said.append, fstype="tmpfs") as k:
        assert k.mounted_by_us and knobs.mounted(root, "tmpfs")
        (root / "tracing").mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "none", str(root / "tracing")], check=True)
    assert not knobs.mounted(root / "tracing", "tmpfs") and not knobs.mounted(root, "tmpfs"), said
    assert not (knobs._record_dir() / f"{os.getpid()}.json").exists()


def test_a_mount_that_cannot_be_released_stays_recorded_for_the_sweep(tmp_path, monkeypatch):
    root = _fake_debugfs(tmp_path)
    monkeypatch.setattr(knobs, "_umount", lambda root, log: False)
    s = knobs.KnobSession(root=root, mount=False, log=lambda m: None)
    with s:
        s.mounted_by_us = True  # as if it had mounted root
    rec = knobs._record_dir() / f"{os.getpid()}.json"
    try:
        assert rec.exists() and json.loads(rec.read_text())["mounted"] is True
    finally:
        rec.unlink(missing_ok=True)


def test_the_sweep_keeps_the_record_of_a_mount_it_could_not_release(tmp_path, monkeypatch):
    """A noisy make test left debugfs (with tracefs automounted below it) mounted and no record:
    the sweep's own unmount failed (busy) and it dropped the record anyway, so no later sweep
    retried. Now the record stays until an unmount succeeds."""
    if os.geteuid() != 0:
        pytest.skip("mounting needs root")
    # a state directory of this test's own (removed with tmp_path): every run's first step
    # sweeps the machine's, and a run of another test worker would take this record (and
    # unmount) between our two sweeps
    monkeypatch.setenv("PERFBOOK_STATE_DIR", str(tmp_path / "state"))
    root = tmp_path / "dbg"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "none", str(root)], check=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    rec = knobs._record_dir() / f"{dead.pid}.json"
    from perfbook.hoststate.statedir import write_file

    write_file(
        rec, json.dumps({"root": str(root), "mounted": True, "fstype": "tmpfs", "saved": {}})
    )
    try:
        with monkeypatch.context() as busy:
            busy.setattr(knobs, "_umount", lambda root, log: False)  # busy
            assert knobs.sweep_stale(log=lambda s: None) == []
            assert rec.exists() and knobs.mounted(root, "tmpfs")
        assert knobs.sweep_stale(log=lambda s: None) == [f"{root} unmounted"]
        assert not rec.exists() and not knobs.mounted(root, "tmpfs")
    finally:
        rec.unlink(missing_ok=True)
        subprocess.run(["umount", str(root)], capture_output=True)


def test_a_debugfs_that_appeared_during_the_run_is_released_after_it(tmp_path):
    """A noisy make test: after SIGTERM to a papermill cpu_pinning collect, debugfs stayed
    mounted with no record of ours (perf mounts debugfs, or reads the tracefs below it, by
    itself). The framework now unmounts debugfs if it was not mounted when the run began.
    Here with tmpfs standing for debugfs."""
    if os.geteuid() != 0:
        pytest.skip("mounting needs root")
    root = tmp_path / "dbg"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "none", str(root)], check=True)
    try:
        assert not knobs.release_debugfs_if_new(True, lambda s: None, root, "tmpfs")
        assert knobs.mounted(root, "tmpfs"), "a mount that was there before the run stays"
        (root / "tracing").mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "none", str(root / "tracing")], check=True)
        assert knobs.release_debugfs_if_new(False, lambda s: None, root, "tmpfs")
        assert not knobs.mounted(root, "tmpfs") and not knobs.mounted(root / "tracing", "tmpfs")
    finally:
        subprocess.run(["umount", "-R", str(root)], capture_output=True)
