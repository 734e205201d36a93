"""Child processes that never outlive an exception or a signal in this process."""
from __future__ import annotations

import os
import signal
import subprocess


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, **kw)
    try:
        out, err = p.communicate(timeout=timeout)
    finally:
        kill_group(p)
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)
