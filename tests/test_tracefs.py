"""Tracing state is restored on success, on exceptions, on SIGINT/SIGTERM, and
swept after SIGKILL. These tests change real kernel state, so they need root."""

import os
import signal
import subprocess
import sys

import pytest

from conftest import need_root
from perfbook.hoststate import tracefs
from perfbook.probes import cbuild, elfsym


@pytest.fixture
def root_tracefs():
    need_root("tracefs")
    reasons = tracefs.preflight()
    if reasons:
        pytest.skip(reasons[0])
    from perfbook.hoststate.lock import measure_lock

    with measure_lock("tests/test_tracefs.py"):
        before = tracefs.snapshot()
        yield before
        after = tracefs.snapshot()
    assert after == before, "tracing state changed across the test"


def _probench():
    return cbuild.binary("probench")


def test_session_restores_everything(root_tracefs):
    b = _probench()
    with tracefs.TraceSession("unit") as s:
        inst = s.instance
        assert inst is not None and inst.is_dir()
        ev = s.add_uprobe("u1", b, elfsym.file_offset(b, "pb_ret"))
        ev2 = s.add_uprobe("u2", b, elfsym.file_offset(b, "pb_ret"), ret=True)
        s.enable(ev)
        s.enable(ev2)
        s.set_option("trace_clock", "mono")
        # disturb the global settings the way a careless tool would
        root = s.root
        tracefs._write(root / "tracing_on", "0" if s.saved.tracing_on == "1" else "1")
        tracefs._write(
            root / "trace_clock", "global" if s.saved.trace_clock != "global" else "local"
        )
        assert any(
            ev.split("/")[1] in line for line in (root / "uprobe_events").read_text().splitlines()
        )
    assert not inst.exists()


def test_session_restores_on_exception(root_tracefs):
    b = _probench()
    with pytest.raises(ZeroDivisionError):
        with tracefs.TraceSession("unit") as s:
            s.enable(s.add_uprobe("u1", b, elfsym.file_offset(b, "pb_push")))
            raise ZeroDivisionError("a failure inside the session")


def test_kernel_rejection_is_a_clear_error(root_tracefs):
    with tracefs.TraceSession("unit") as s:
        with pytest.raises(tracefs.TraceError, match="refused uprobe"):
            s.add_uprobe("bad", "/nonexistent/perfbook-binary", 0x10)


ARMED = r"""
import sys, time
from perfbook.probes import cbuild, elfsym
from perfbook.hoststate.tracefs import TraceSession
b = cbuild.binary("probench")
with TraceSession("sig") as s:
    s.enable(s.add_uprobe("held", b, elfsym.file_offset(b, "pb_ret")))
    s.set_option("trace_clock", "x86-tsc" if "x86-tsc" in open(s.root / "trace_clock").read() else "mono")
    print("armed", s.instance, flush=True)
    time.sleep(60)
"""


def _start_armed():
    p = subprocess.Popen([sys.executable, "-c", ARMED], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("armed"), line
    return p, line.split()[1]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_run_restores(root_tracefs, sig):
    p, inst = _start_armed()
    assert os.path.isdir(inst)
    p.send_signal(sig)
    p.wait(timeout=30)
    assert not os.path.exists(inst)


def test_sigkill_leftovers_are_swept_next_time(root_tracefs):
    p, inst = _start_armed()
    p.kill()
    p.wait()
    assert os.path.isdir(inst), "SIGKILL can't be caught: the instance is still there"
    stale = tracefs.snapshot()
    assert stale["our_probes"] and stale["our_instances"]
    removed = tracefs.sweep_stale(tracefs.find_tracefs(), log=lambda *_: None)
    assert any(r.startswith("instance") for r in removed)
    assert any(r.startswith("uprobe") for r in removed)
    assert not os.path.exists(inst)


def test_sweep_leaves_live_owners_alone(root_tracefs):
    b = _probench()
    with tracefs.TraceSession("live") as s:
        s.add_uprobe("mine", b, elfsym.file_offset(b, "pb_ret"))
        assert tracefs.sweep_stale(s.root, log=lambda *_: None) == []
        assert s.instance.exists()


CONCURRENT = r"""
import sys, time
from perfbook.hoststate.tracefs import TraceSession
with TraceSession(sys.argv[1]):
    time.sleep(float(sys.argv[2]))
"""


def test_concurrent_sessions_mount_once_and_the_last_one_out_unmounts():
    """Sessions that start together while tracefs is unmounted mount it once (the decision is
    taken under a lock) and the last one out unmounts it: no stacked mount is left behind."""
    need_root("mounting tracefs")
    if tracefs.find_tracefs() is not None:
        pytest.skip("tracefs is mounted by someone else here; not unmounting it")
    for attempt in range(3):  # a race: several rounds of eight sessions starting together
        procs = [
            subprocess.Popen([sys.executable, "-c", CONCURRENT, f"conc{i}", str(0.2 * (i % 3))])
            for i in range(8)
        ]
        assert all(p.wait(60) == 0 for p in procs)
        mounted = [m for m, t in tracefs.mounts() if t == "tracefs"]
        assert mounted == [], f"round {attempt + 1}: left mounted: {mounted}"
        assert not (tracefs._mount_dir() / "mounted").exists()


def test_a_flag_without_a_mount_is_cleared():
    """A run killed between writing the 'mounted' flag and mounting leaves only the flag:
    the next release removes it and unmounts nothing."""
    need_root("the tracefs registry")
    if tracefs.find_tracefs() is not None:
        pytest.skip("tracefs is mounted here")
    flag = tracefs._mount_dir() / "mounted"
    tracefs.write_file(flag, "999999\n")
    assert tracefs.release_mount(tracefs.DEFAULT_MOUNT) is False and not flag.exists()


def test_our_instance_prints_lines_the_parser_reads_whatever_the_top_level_says(tmp_path):
    """A new instance inherits every output option from the top level; with context-info off,
    or raw/hex/bin on, perfbook.probes.ftrace could read none of its lines (they went to 'unparsed'
    and were silently dropped). The session writes the kernel's defaults on its own instance."""
    from perfbook.hoststate.tracefs import READABLE_FORMAT, readable_format

    opts = tmp_path / "options"
    opts.mkdir()
    inherited = {
        "context-info": "0",
        "raw": "1",
        "hex": "0",
        "bin": "1",
        "record-tgid": "1",
        "irq-info": "0",
    }
    for k, v in inherited.items():
        (opts / k).write_text(v + "\n")
    changed = readable_format(tmp_path)
    assert changed == {"context-info": "1", "raw": "0", "bin": "0"}
    assert {k: (opts / k).read_text().strip() for k in READABLE_FORMAT} == READABLE_FORMAT
    assert (opts / "record-tgid").read_text().strip() == "1", (
        "layouts the parser reads are left alone"
    )
    assert readable_format(tmp_path) == {}


def test_a_busy_unmount_keeps_the_flag_for_the_next_sweep(tmp_path, monkeypatch):
    """v3 of this session's noisy runs left tracefs mounted with no flag of ours: the session
    ended while a child still held a tracefs file, umount said EBUSY, and the flag was dropped
    anyway, so no later sweep would ever unmount it. The flag now stays until umount works."""
    from pathlib import Path
    from types import SimpleNamespace

    mount_dir = tmp_path / "state"
    mount_dir.mkdir(mode=0o700)
    monkeypatch.setattr(tracefs, "_mount_dir", lambda: mount_dir)
    monkeypatch.setattr(tracefs.time, "sleep", lambda s: None)
    root = Path("/sys/kernel/tracing")
    state = {"mounted": True, "busy": True, "calls": 0}
    monkeypatch.setattr(
        tracefs, "mounts", lambda: [(str(root), "tracefs")] if state["mounted"] else []
    )

    def umount(cmd, capture_output=True):
        state["calls"] += 1
        if state["busy"]:
            return SimpleNamespace(returncode=32, stdout=b"", stderr=b"target is busy")
        state["mounted"] = False
        return SimpleNamespace(returncode=0, stdout=b"", stderr=b"")

    monkeypatch.setattr(tracefs.subprocess, "run", umount)
    (mount_dir / "mounted").write_text("1\n")
    assert tracefs.release_mount(root) is False and state["calls"] > 1, "retried"
    assert (mount_dir / "mounted").exists(), "a failed unmount must keep our flag"
    state["busy"] = False
    assert tracefs.release_mount(root) is True
    assert not (mount_dir / "mounted").exists() and not state["mounted"]


def test_a_snapshot_of_a_tracefs_unmounted_while_it_looks_says_unmounted(tmp_path, monkeypatch):
    """A noisy make test: the contract test's leftovers() read tracefs while the run under
    test unmounted it (its restore), and crashed on the vanished instances/ directory."""
    from perfbook.hoststate import tracefs

    root = tmp_path / "tracing"
    (root / "instances").mkdir(parents=True)
    for name, text in (
        ("tracing_on", "0"),
        ("trace_clock", "[local] global"),
        ("current_tracer", "nop"),
        ("set_event", ""),
        ("uprobe_events", ""),
    ):
        (root / name).write_text(text + "\n")

    def gone(self):
        raise FileNotFoundError(2, "No such file or directory", str(self))

    monkeypatch.setattr(type(root), "iterdir", gone)
    assert tracefs.snapshot(root) == {"mounted": False}
