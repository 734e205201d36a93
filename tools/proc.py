"""Child processes that never outlive an exception or a signal in this process."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path


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


def sigterm_as_interrupt():
    """Make SIGTERM raise KeyboardInterrupt, like SIGINT, so that cleanup code in
    finally blocks runs. Returns the previous handler (None off the main thread);
    give it back with signal.signal(signal.SIGTERM, old)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def _term(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    old = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _term)
    return old


def sweep_scratch(parent, prefix: str) -> list[Path]:
    """Remove scratch directories <parent>/<prefix>* whose owner process is gone.

    The owner's pid is the first word of the directory's 'owner' file. A
    directory without one is removed only when older than an hour (a crash
    between creating it and writing the file)."""
    removed = []
    for d in Path(parent).glob(prefix + "*"):
        try:
            pid = int((d / "owner").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            try:
                if time.time() - d.stat().st_mtime < 3600:
                    continue
            except OSError:
                continue
            pid = -1
        if pid > 0 and pid_alive(pid):
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
    return removed
