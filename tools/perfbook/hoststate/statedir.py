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

open_file also serves the data directory (perfbook.data.dataset.open_data), whose files anyone may
have contributed: any owner's regular file, with every directory below runs/ or reference/
opened without following a link as well (`below`).
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from perfbook.core.errors import PerfbookError


class UnsafePath(PerfbookError):
    """A path we would use is not ours (a symlink, another user's file ...). `path` names it
    and `what` says what it is ("a symlink", "not a file" ...), for a caller's own message."""

    def __init__(self, message: str, path=None, what: str | None = None):
        super().__init__(message)
        self.path, self.what = path, what


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


def check_kind(path: Path, st: os.stat_result, kind: str = "directory") -> None:
    """Refuse what is not a `kind` ("directory" or "file": a regular one); st from lstat/fstat."""
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(
            f"{path} is a symlink; perfbook refuses to follow it "
            "(remove it: perfbook never makes one)",
            path,
            "a symlink",
        )
    want = stat.S_ISDIR if kind == "directory" else stat.S_ISREG
    if not want(st.st_mode):
        raise UnsafePath(
            f"{path} is not a {kind}; perfbook refuses to use it (remove it)",
            path,
            f"not a {'regular file' if kind == 'file' else kind}",
        )


def check_ours(path: Path, st: os.stat_result, kind: str = "directory") -> None:
    """Refuse what is not a `kind` owned by the effective user (st from lstat/fstat)."""
    check_kind(path, st, kind)
    if st.st_uid != os.geteuid():
        raise UnsafePath(
            f"{path} belongs to uid {st.st_uid}, not to us (uid {os.geteuid()}); "
            "perfbook refuses to use it (remove it, it was not made by perfbook)"
        )


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
        raise UnsafePath(
            f"cannot create {path}: permission denied (run as root, or set "
            "PERFBOOK_STATE_DIR to a directory of yours)"
        ) from None
    check_ours(path, os.lstat(path))  # a symlink or someone else's: refuse before opening
    try:  # O_NOFOLLOW: a swap to a symlink after the lstat fails here (ELOOP/ENOTDIR)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise UnsafePath(
            f"{path} changed while perfbook checked it ({e.strerror}); refusing"
        ) from None
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


def open_file(
    path: Path, flags: int, mode: int = 0o600, *, below: Path | None = None, ours: bool = True
) -> int:
    """os.open without following a symlink; the file must be a regular file of ours (any
    owner's with ours=False: the files of a data directory).

    below: a directory above `path`, used as the caller gives it; every directory between it
    and the file is opened without following a symlink too (O_NOFOLLOW alone covers only the
    last component). A FIFO or device in the file's place is refused, not waited on."""
    path = Path(path)
    at, name = (None, path) if below is None else _walk_to(path, Path(below))
    try:
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode, dir_fd=at)
    except OSError as e:
        if e.errno == errno.ELOOP:  # the last component is a symlink
            raise UnsafePath(
                f"{path} is a symlink; perfbook refuses to follow it", path, "a symlink"
            ) from None
        raise
    finally:
        if at is not None:
            os.close(at)
    try:
        (check_ours if ours else check_kind)(path, os.fstat(fd), kind="file")
        os.set_blocking(fd, True)  # O_NONBLOCK was for the open of a FIFO only
    except BaseException:
        os.close(fd)
        raise
    return fd


def _walk_to(path: Path, below: Path) -> tuple[int, str]:
    """(fd of the directory that holds `path`, its last component), each directory from
    `below` down opened with O_NOFOLLOW: UnsafePath for a symlink or a non-directory on the
    way, OSError for what else fails."""
    rel = path.relative_to(below).parts
    if not rel or ".." in rel:
        raise ValueError(f"{path} is not a file below {below}")
    fd, at = os.open(below, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), below
    try:
        for part in rel[:-1]:
            at = at / part
            try:
                nxt = os.open(
                    part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
                )
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):  # which of the two, named
                    check_kind(at, os.stat(part, dir_fd=fd, follow_symlinks=False))
                raise
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd, rel[-1]


def write_file(path: Path, text: str) -> None:
    """Replace the content of a private file of ours (created 0600 if missing)."""
    fd = open_file(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
