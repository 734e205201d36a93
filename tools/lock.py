"""One measure run at a time per machine: a flock on a file outside the checkout.

Two clones, or a test and a measure run, must not both change kernel tracing
state. The lock is released when the holder exits, even on SIGKILL.
"""
from __future__ import annotations

import fcntl
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

from .errors import LockBusy


def lock_path() -> Path:
    env = os.environ.get("PERFBOOK_LOCK")
    if env:
        return Path(env)
    for d in ("/run/lock", "/var/lock", tempfile.gettempdir()):
        if os.access(d, os.W_OK):
            return Path(d) / "perfbook-measure.lock"
    return Path(tempfile.gettempdir()) / "perfbook-measure.lock"


_held: dict[str, int] = {}


def _is_ancestor(holder: str) -> bool:
    """True if the lock file's 'pid N ...' names a parent (grand-parent ...) of this
    process: it holds the lock on our behalf, so waiting for it would deadlock."""
    parts = holder.split()
    if len(parts) < 2 or parts[0] != "pid" or not parts[1].isdigit():
        return False
    want, pid = int(parts[1]), os.getppid()
    if want <= 1:
        return False
    for _ in range(64):
        if pid == want:
            return True
        if pid <= 1:
            return False
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


@contextmanager
def measure_lock(what: str = "measure", wait: float | None = None):
    """Hold the machine-wide lock; re-entrant within one process.

    If another run holds it, wait up to `wait` seconds (PERFBOOK_LOCK_WAIT,
    default 900), saying so, then fail with LockBusy.
    """
    import time
    if wait is None:
        wait = float(os.environ.get("PERFBOOK_LOCK_WAIT", "900"))
    path = lock_path()
    key = str(path)
    if key in _held:
        _held[key] += 1
        try:
            yield path
        finally:
            _held[key] -= 1
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    deadline = time.monotonic() + wait
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            try:
                holder = Path(path).read_text().strip()
            except OSError:
                holder = "?"
            if _is_ancestor(holder):  # e.g. `python -m tools measure` -> notebook kernel
                os.close(fd)
                yield path
                return
            if time.monotonic() >= deadline:
                os.close(fd)
                raise LockBusy(f"another measure run holds {path} ({holder}); "
                               "wait for it to finish, or set PERFBOOK_LOCK_WAIT") from None
            if not told:
                print(f"waiting for the measure lock {path}, held by {holder} ...", flush=True)
                told = True
            time.sleep(0.5)
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} {what}\n".encode())
    _held[key] = 1
    try:
        yield path
    finally:
        del _held[key]
        os.close(fd)  # closing drops the flock
