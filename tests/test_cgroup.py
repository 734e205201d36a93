"""tools.cgroup: no descendant of a run outlives it, even when the run is SIGKILLed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools import cgroup

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
    "from tools.cgroup import RunGroup\n"
    "with RunGroup() as g:\n"
    "    p = subprocess.Popen(['setsid', 'sh', '-c', 'sleep 4343 & echo $!'], stdout=subprocess.PIPE, text=True)\n"
    "    print(p.stdout.readline().strip(), g.path, flush=True)\n"
    "    p.wait()\n"
    "    time.sleep(float(sys.argv[1]))\n")


def _start(hold: float):
    p = subprocess.Popen([sys.executable, "-c", RUN, str(hold)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
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
    _need_cgroup()
    dead = subprocess.Popen(["true"])
    dead.wait()
    group = cgroup.mount() / f"{cgroup.PREFIX}{dead.pid}"
    os.mkdir(group)
    child = subprocess.Popen(["sleep", "4344"])
    try:
        (group / "cgroup.procs").write_text(str(child.pid))
        from tools.sweep import sweep_all
        removed = sweep_all(log=lambda s: None)
        assert any(r.startswith(f"cgroup {group.name}") for r in removed), removed
        assert child.wait(timeout=10) == -signal.SIGKILL
        assert not group.exists()
    finally:
        child.kill()
        cgroup.kill_all(group) if group.exists() else None
        cgroup.remove(group)


def test_the_group_of_a_live_run_is_left_alone():
    _need_cgroup()
    p, gc, group = _start(300)
    try:
        from tools.sweep import sweep_all
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


def test_sweep_removes_the_connection_file_of_a_dead_collect_kernel(tmp_path):
    """A SIGTERM to papermill's group left 'a kernel connection file in /tmp': the kernel
    records its file, and the sweep removes exactly that file once the kernel is dead."""
    from tools.sweep import _kernel_files, forget_kernel_file, remember_kernel_file
    dead, alive = _dead_pid(), os.getpid()
    f_dead, f_alive = tmp_path / "kernel-1234.json", tmp_path / "kernel-5678.json"
    f_dead.write_text("{}")
    f_alive.write_text("{}")
    remember_kernel_file(dead, f_dead)
    remember_kernel_file(alive, f_alive)
    # papermill's kernels get jupyter_client's tempfile name (/tmp/tmpXXXXXXXX.json), and the
    # sweep had refused that name: every killed papermill of a test run left one in /tmp
    import tempfile
    fd, made = tempfile.mkstemp(".json", dir=tmp_path)
    os.close(fd)
    remember_kernel_file(_dead_pid(), made)
    try:
        removed = _kernel_files()
        assert str(f_dead) in removed and not f_dead.exists()
        assert made in removed and not os.path.exists(made)
        assert f_alive.exists(), "a live kernel's file is left alone"
    finally:
        forget_kernel_file(alive)


def test_sweep_never_follows_a_planted_link_or_removes_another_name(tmp_path):
    from tools.sweep import _kernel_files, remember_kernel_file
    victim = tmp_path / "precious.txt"
    victim.write_text("user data")
    link = tmp_path / "kernel-9999.json"
    link.symlink_to(victim)
    other = tmp_path / "notes.json"
    other.write_text("{}")
    from tools.statedir import subdir
    dead = _dead_pid()
    remember_kernel_file(dead, link)
    refused: list[str] = []
    assert _kernel_files(refused) == []
    assert victim.read_text() == "user data" and link.is_symlink()
    # a refused file is reported, and its record kept (the contract's leftovers check reads
    # the records; a dropped record hid the refused file from it) until the file is gone
    assert refused == [str(link)] and (subdir("kernelfiles") / str(dead)).exists()
    link.unlink()
    assert _kernel_files() == [] and not (subdir("kernelfiles") / str(dead)).exists()
    remember_kernel_file(dead, other)
    refused = []
    assert _kernel_files(refused) == [] and refused == [str(other)] and other.exists()
    other.unlink()
    _kernel_files()
    assert not (subdir("kernelfiles") / str(dead)).exists()


def test_a_collect_whose_kernel_ended_removes_that_kernels_file_itself(tmp_path):
    """A SIGTERM to papermill's group can kill papermill midway through its own cleanup, and
    the kernel's connection file was left to the next sweep (a noisy make test saw it). The
    collect, reparented once its kernel ended, removes that one file as it exits; while its
    kernel lives (its parent), the file is the kernel's own business."""
    _need_cgroup()
    from tools.sweep import forget_kernel_file, remember_kernel_file
    ROOT = Path(__file__).resolve().parents[1]
    ended = subprocess.Popen(["sleep", "120"])  # a kernel that is not the collect's parent
    mine = tmp_path / "kernel-4242.json"
    parents = tmp_path / "kernel-4343.json"
    for f in (mine, parents):
        f.write_text("{}")
    remember_kernel_file(ended.pid, mine)
    remember_kernel_file(os.getpid(), parents)
    try:
        for kernel in (ended.pid, os.getpid()):
            r = subprocess.run([sys.executable, "-m", "tools", "collect", "example", "--profile", "quick",
                                "--data-dir", str(tmp_path / "data"), "--params", "{}"],
                               cwd=ROOT, capture_output=True, text=True, timeout=300,
                               env={**os.environ, "PERFBOOK_KERNEL_PID": str(kernel)})
            assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        assert not mine.exists(), "the ended kernel's file outlived the collect"
        assert parents.exists(), "a live parent kernel's file was removed"
    finally:
        ended.kill()
        ended.wait()
        forget_kernel_file(os.getpid())
        forget_kernel_file(ended.pid)
