"""Where a run keeps its state: directories only we can write, files opened without
following symlinks.

A measure run is root among other users. Everything it keeps between its steps (the
lock, the tracefs registry, records of live runs, scratch directories) lives in a
private directory that only the effective user can write:

  run state  /run/perfbook              as root; else $XDG_RUNTIME_DIR/perfbook or /tmp/perfbook-<uid>
  scratch    /var/tmp/perfbook          as root; else /var/tmp/perfbook-<uid>
             (scratch needs a real disk file system: O_DIRECT fails on the tmpfs of /run)

`PERFBOOK_STATE_DIR` and `PERFBOOK_SCRATCH_DIR` move them (tests do). Each directory is
created with mode 0700 and then checked with lstat: a symlink, a non-directory or a
directory owned by someone else is refused with one line that names it; a directory of
ours with a looser mode is tightened. Files inside are opened with O_NOFOLLOW and
O_CLOEXEC and refused unless we own them. Nothing a local user planted can redirect a
write, a read or a sweep.
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from .errors import PerfbookError


class UnsafePath(PerfbookError):
    """A path we would write to is not ours (a symlink, another user's file ...)."""


def _default_state() -> Path:
    if os.geteuid() == 0:
        return Path("/run/perfbook")
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and Path(xdg).is_dir() and os.access(xdg, os.W_OK):
        return Path(xdg) / "perfbook"
    return Path(tempfile.gettempdir()) / f"perfbook-{os.geteuid()}"


def _default_scratch() -> Path:
    base = Path("/var/tmp") if Path("/var/tmp").is_dir() else Path(tempfile.gettempdir())
    return base / ("perfbook" if os.geteuid() == 0 else f"perfbook-{os.geteuid()}")


def check_ours(path: Path, st: os.stat_result, kind: str = "directory") -> None:
    """Refuse what is not a `kind` owned by the effective user (st from lstat/fstat)."""
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"{path} is a symlink; perfbook refuses to follow it "
                         "(remove it: perfbook never makes one)")
    want = stat.S_ISDIR if kind == "directory" else stat.S_ISREG
    if not want(st.st_mode):
        raise UnsafePath(f"{path} is not a {kind}; perfbook refuses to use it (remove it)")
    if st.st_uid != os.geteuid():
        raise UnsafePath(f"{path} belongs to uid {st.st_uid}, not to us (uid {os.geteuid()}); "
                         "perfbook refuses to use it (remove it, it was not made by perfbook)")


def private_dir(path: Path) -> Path:
    """Create `path` (its parent must exist) as a 0700 directory of ours, or check that it
    is one. Never follows a symlink."""
    path = Path(path)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except FileNotFoundError:
        raise UnsafePath(f"cannot create {path}: its parent directory is missing") from None
    except PermissionError:
        raise UnsafePath(f"cannot create {path}: permission denied (run as root, or set "
                         "PERFBOOK_STATE_DIR to a directory of yours)") from None
    check_ours(path, os.lstat(path))  # a symlink or someone else's: refuse before opening
    try:  # O_NOFOLLOW: a swap to a symlink after the lstat fails here (ELOOP/ENOTDIR)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise UnsafePath(f"{path} changed while perfbook checked it ({e.strerror}); refusing") from None
    try:
        st = os.fstat(fd)
        check_ours(path, st)
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return path


def state_dir() -> Path:
    """The private directory of run state (lock, registries, run records)."""
    return private_dir(Path(os.environ.get("PERFBOOK_STATE_DIR") or _default_state()))


def subdir(name: str) -> Path:
    """A private directory inside state_dir()."""
    return private_dir(state_dir() / name)


def scratch_parent() -> Path:
    """The private parent of every scratch directory."""
    return private_dir(Path(os.environ.get("PERFBOOK_SCRATCH_DIR") or _default_scratch()))


def open_file(path: Path, flags: int, mode: int = 0o600) -> int:
    """os.open without following a symlink; the file must be a regular file of ours."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == 40:  # ELOOP: the last component is a symlink
            raise UnsafePath(f"{path} is a symlink; perfbook refuses to follow it") from None
        raise
    try:
        check_ours(Path(path), os.fstat(fd), kind="file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_file(path: Path, text: str) -> None:
    """Replace the content of a private file of ours (created 0600 if missing)."""
    fd = open_file(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)

