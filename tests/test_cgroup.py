"""perfbook.hoststate.cgroup: no descendant of a run outlives it, even when the run is SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfbook.hoststate import cgroup

ROOT = Path(__file__).resolve().parents[1]


def _need_cgroup():
    if os.geteuid() != 0:
        pytest.skip("creating a cgroup needs root")
    if cgroup.mount() is None:
        pytest.skip("no cgroup2 hierarchy is mounted here")


def _gone(pid: int, seconds: float = 10) -> bool:
    """Dead or a zombie waiting for init: nothing runs any more."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.1)
    return False


# A run that starts a grandchild in a session of its own (so that neither PDEATHSIG nor a
# process-group kill reaches it), prints its pid and waits.
RUN = (
    "import subprocess, sys, time\n"
    "from perfbook.hoststate.cgroup import RunGroup\n"
    "with RunGroup() as g:\n"
    "    p = subprocess.Popen(['setsid', 'sh', '-c', 'sleep 4343 & echo $!'], stdout=subprocess.PIPE, text=True)\n"
    "    print(p.stdout.readline().strip(), g.path, flush=True)\n"
    "    p.wait()\n"
    "    time.sleep(float(sys.argv[1]))\n"
)


def _start(hold: float):
    p = subprocess.Popen(
        [sys.executable, "-c", RUN, str(hold)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    pid, path = p.stdout.readline().split()
    assert path != "None", "the run got no cgroup"
    return p, int(pid), Path(path)


def test_a_detached_grandchild_dies_when_the_run_ends():
    _need_cgroup()
    p, gc, group = _start(0)
    assert p.wait(timeout=30) == 0
    assert _gone(gc), f"grandchild {gc} outlived its run"
    assert not group.exists()
    assert cgroup.current() == cgroup.current(os.getpid())


def test_a_detached_grandchild_dies_when_the_run_is_sigkilled():
    """The issue's orphaned bpftrace: a SIGKILLed run can clean nothing up itself; its
    watchdog kills the group at once, before any sweep."""
    _need_cgroup()
    p, gc, group = _start(300)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert _gone(gc), f"grandchild {gc} outlived its SIGKILLed run"
    deadline = time.monotonic() + 10
    while group.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not group.exists()


def test_sweep_empties_and_removes_the_group_of_a_dead_run():
    """If the watchdog died too (a kill of everything), the next run's sweep does its work."""
    _sweep_a_dead_runs_group(inner=None)


def _sweep_a_dead_runs_group(inner: str | None) -> None:
    """A group named for a dead run, a sleep in it (or in its cgroup `inner`): the next run's
    sweep must kill the sleep and remove every group."""
    _need_cgroup()
    dead = subprocess.Popen(["true"])
    dead.wait()
    group = cgroup.mount() / f"{cgroup.PREFIX}{dead.pid}"
    home = group / inner if inner else group
    os.mkdir(group)
    if inner:
        os.mkdir(home)
    child = subprocess.Popen(["sleep", "4344"])
    try:
        (home / "cgroup.procs").write_text(str(child.pid))
        assert cgroup.procs(group) == [child.pid]
        from perfbook.hoststate.sweep import sweep_all

        removed = sweep_all(log=lambda s: None)
        assert any(r.startswith(f"cgroup {group.name}") for r in removed), removed
        assert child.wait(timeout=10) == -signal.SIGKILL
        assert not group.exists()
    finally:
        child.kill()
        cgroup.remove(group)


def test_sweep_removes_a_dead_runs_group_with_a_cgroup_of_its_chapter_inside():
    """sched_callers runs its workloads in a cgroup of its own inside the run's: after a
    SIGKILL, the process in it must die and both groups go (the run's group could not be
    removed while the chapter's was there, nor its process seen from the run's group)."""
    _sweep_a_dead_runs_group(inner="sched_callers")


def test_the_group_of_a_live_run_is_left_alone():
    _need_cgroup()
    p, gc, group = _start(300)
    try:
        from perfbook.hoststate.sweep import sweep_all

        sweep_all(log=lambda s: None)
        assert group.exists() and not _gone(gc, 0.5)
    finally:
        p.kill()
        p.wait()
    assert _gone(gc)


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _legacy_record(pid: int, path) -> Path:
    """What an older version wrote for a papermill kernel's connection file."""
    from perfbook.hoststate.statedir import state_dir, write_file

    d = state_dir() / "kernelfiles"
    d.mkdir(mode=0o700, exist_ok=True)
    write_file(d / str(pid), f"{path}\n")
    return d / str(pid)


def test_sweep_removes_a_connection_file_an_older_version_recorded(tmp_path, monkeypatch):
    """Older versions recorded a papermill kernel's /tmp/tmpXXXXXXXX.json in kernelfiles/: the
    sweep still removes it once that kernel is dead, and keeps a live kernel's."""
    import tempfile

    monkeypatch.setenv("PERFBOOK_STATE_DIR", str(tmp_path / "state"))
    from perfbook.hoststate.sweep import _legacy_kernel_records

    fd, made = tempfile.mkstemp(".json", dir=tmp_path)
    os.close(fd)
    alive = tmp_path / "kernel-5678.json"
    alive.write_text("{}")
    dead_rec = _legacy_record(_dead_pid(), made)
    live_rec = _legacy_record(os.getpid(), alive)
    try:
        assert (
            made in _legacy_kernel_records() and not os.path.exists(made) and not dead_rec.exists()
        )
        assert alive.exists() and live_rec.exists(), "a live kernel's file is left alone"
    finally:
        live_rec.unlink()
    _legacy_kernel_records()
    assert not live_rec.parent.exists(), "the emptied record directory stays"


def test_sweep_never_follows_a_planted_link_or_removes_another_name(tmp_path, monkeypatch):
    from perfbook.hoststate.sweep import _legacy_kernel_records

    monkeypatch.setenv("PERFBOOK_STATE_DIR", str(tmp_path / "state"))
    victim = tmp_path / "precious.txt"
    victim.write_text("user data")
    link = tmp_path / "kernel-9999.json"
    link.symlink_to(victim)
    other = tmp_path / "notes.json"
    other.write_text("{}")
    for f in (link, other):
        rec = _legacy_record(_dead_pid(), f)
        assert _legacy_kernel_records() == [] and not rec.exists()
    assert victim.read_text() == "user data" and link.is_symlink() and other.exists()


def test_the_sweep_removes_the_kernel_files_of_dead_owners_only(tmp_path):
    """`make sweep` said 'nothing to sweep' beside two connection files a killed refresh left.
    It removes a dead owner's connection file and sockets; a live owner's, a symlink and a
    name that is not a kernel's stay."""
    import shutil
    import socket
    import tempfile

    state = Path(tempfile.mkdtemp(prefix="pbk-", dir="/tmp"))  # short: a Unix socket's path
    try:
        kernels = state / "kernels"
        kernels.mkdir(mode=0o700, parents=True)
        dead, alive = _dead_pid(), os.getpid()
        (kernels / f"k{dead}-1.json").write_text('{"key": "secret"}')
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(kernels / f"k{dead}-1-1"))
        sock.close()
        (kernels / f"k{alive}-1.json").write_text("{}")
        victim = tmp_path / "victim"
        victim.write_text("precious")
        (kernels / f"k{dead}-2.json").symlink_to(victim)
        (kernels / "notes.txt").write_text("keep")
        r = subprocess.run(
            [sys.executable, "-m", "perfbook", "sweep"],
            cwd=Path(__file__).resolve().parents[1],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PERFBOOK_STATE_DIR": str(state)},
        )
        assert r.returncode == 0, r.stdout + r.stderr
        left = sorted(f.name for f in kernels.iterdir())
        assert left == sorted([f"k{alive}-1.json", f"k{dead}-2.json", "notes.txt"]), r.stdout
        assert f"k{dead}-1.json" in r.stdout and victim.read_text() == "precious"
    finally:
        shutil.rmtree(state, ignore_errors=True)
