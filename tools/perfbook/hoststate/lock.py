"""One measure run at a time per machine: a flock on a file in our private state directory.

Two clones, or a test and a measure run, must not both change kernel state. The lock
file is `<state_dir>/measure.lock` (perfbook.hoststate.statedir: mode 0700, ours, never followed
through a symlink), so no other user can open it, hold it or plant it. Who holds it is
read from the kernel (/proc/locks, matched on the file's device and inode), never from
text in a file: a run started by the holder (`python -m perfbook measure` -> a notebook
kernel) proceeds under its ancestor's lock; anyone else waits. The lock is released when
the holder exits, even on SIGKILL.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path

from perfbook.core.errors import LockBusy
from perfbook.hoststate import statedir


def lock_path() -> Path:
    env = os.environ.get("PERFBOOK_LOCK")  # tests: a lock of their own
    if env:
        return Path(env)
    return statedir.state_dir() / "measure.lock"


_held: dict[str, int] = {}


def flock_holders(fd: int, locks_text: str | None = None) -> list[int]:
    """Pids that hold a FLOCK on the file open at `fd`, from /proc/locks.

    A line reads `1: FLOCK  ADVISORY  WRITE 2801 00:19:1234 0 EOF` (id, kind, mode, type,
    pid, major:minor:inode, start, end); blocked waiters carry a `->` and are skipped."""
    st = os.fstat(fd)
    want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    if locks_text is None:
        locks_text = Path("/proc/locks").read_text()
    pids = []
    for line in locks_text.splitlines():
        parts = line.split()
        if len(parts) < 6 or "->" in parts or parts[1] != "FLOCK":
            continue
        try:
            maj, mnr, ino = parts[5].split(":")
            key = (int(maj, 16), int(mnr, 16), int(ino))
            pid = int(parts[4])
        except ValueError:
            continue
        if key == want:
            pids.append(pid)
    return pids


def ancestors(pid: int | None = None) -> list[int]:
    """Our parent, grand-parent, ... up to (excluding) pid 1, from /proc/<pid>/stat."""
    out, pid = [], os.getppid() if pid is None else pid
    for _ in range(64):
        if pid <= 1:
            break
        out.append(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


def _describe(pid: int) -> str:
    try:
        cmd = (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        cmd = "?"
    return f"pid {pid} ({cmd.strip()[:80]})"


@contextmanager
def measure_lock(what: str = "measure", wait: float | None = None):
    """Hold the machine-wide lock; re-entrant within one process, and inherited by the
    processes a holder starts.

    If another run holds it, wait up to `wait` seconds (PERFBOOK_LOCK_WAIT, default 900),
    saying so, then fail with LockBusy.
    """
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
    fd = statedir.open_file(path, os.O_RDWR | os.O_CREAT)
    deadline = time.monotonic() + wait
    told = False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holders = flock_holders(fd)
                mine = set(ancestors())
                if holders and all(h in mine for h in holders):
                    yield path  # our parent holds it for us (measure -> notebook kernel)
                    return
                who = ", ".join(_describe(h) for h in holders) or "a process that just left"
                if time.monotonic() >= deadline:
                    raise LockBusy(
                        f"another measure run holds {path} ({who}); "
                        "wait for it to finish, or set PERFBOOK_LOCK_WAIT"
                    ) from None
                if not told:
                    print(f"waiting for the measure lock {path}, held by {who} ...", flush=True)
                    told = True
                time.sleep(0.5)
        os.ftruncate(fd, 0)
        os.write(fd, f"{what}\n".encode())  # for people; the holder's pid comes from /proc/locks
        _held[key] = 1
        try:
            yield path
        finally:
            del _held[key]
    finally:
        os.close(fd)  # closing drops the flock
