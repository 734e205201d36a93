"""Child processes that never outlive an exception or a signal in this process."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import subprocess
from concurrent.futures import ProcessPoolExecutor

from perfbook.core.guard import sigint_default


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def usable_cpus(cap: int = 4) -> int:
    """How many worker processes to run side by side: one per CPU we may run on, at most cap."""
    return max(1, min(cap, len(os.sched_getaffinity(0))))


def fork_pool(initializer=None, initargs: tuple = ()):
    """A ProcessPoolExecutor of usable_cpus() forked workers (they inherit what the parent has
    loaded, and start in milliseconds), each killed by the kernel if we die (die_with_parent),
    then set up by initializer(*initargs)."""
    return ProcessPoolExecutor(
        usable_cpus(),
        mp_context=multiprocessing.get_context("fork"),
        initializer=_worker_start,
        initargs=(initializer, initargs),
    )


def _worker_start(initializer, initargs) -> None:
    die_with_parent()
    if initializer is not None:
        initializer(*initargs)


def die_with_parent() -> None:
    """preexec_fn for subprocess.Popen: in the child, before exec, ask the kernel to SIGKILL
    it when the thread that started it dies (prctl PR_SET_PDEATHSIG), even if that process
    is itself SIGKILLed and no cleanup code runs. Survives exec (not a set-uid one)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def interruptible_child() -> None:
    """preexec_fn for a child we stop with SIGINT (bpftrace, perf record): SIGINT back to its
    default action, then die_with_parent. A process started from `nohup ... &` or a script's
    background job inherits SIGINT *ignored*, and a program that only traps it (a shell, or
    one that keeps inherited dispositions) would then never stop on our SIGINT."""
    sigint_default()
    die_with_parent()


def term_with_parent() -> None:
    """preexec_fn for a child that must clean up when we die: it gets SIGTERM (which it
    handles, perfbook.core.guard) instead of SIGKILL. The notebook's collect helper uses it; called
    directly, it asks the same for the calling process."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def terminate(proc: subprocess.Popen | None, grace: float = 3.0) -> None:
    """Stop a child we started (a QEMU): SIGTERM, then SIGKILL after `grace` seconds."""
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.terminate()
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)
    except ProcessLookupError:
        pass


def kill_group(p: subprocess.Popen) -> None:
    """SIGKILL the process group that `p` leads (started with start_new_session),
    even when `p` itself has exited: its children may still be in the group."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    p.wait()


def run_group(cmd: list[str], timeout: float | None = None, **kw) -> subprocess.CompletedProcess:
    """subprocess.run in its own process group; the whole group is killed if this
    process is interrupted (SIGINT/SIGTERM -> exception) or the timeout expires."""
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kw
    )
    try:
        out, err = p.communicate(timeout=timeout)
    finally:
        kill_group(p)
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)
