"""Files the book keeps for itself under build/ (the verdict store, build/verdicts/): read and
written without following a symlink, and refused when they belong to a stranger.

A file here repeats what the data directory it was made from says, so it may belong to us, to
root, or to the owner of that data directory; anything else in its place (a symlink, another
kind of file, another user's file) is refused with one line (UnsafePath). A file is replaced
atomically: written to a temporary file beside it (O_EXCL | O_NOFOLLOW), then renamed.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from perfbook.core.paths import build_dir, runs_dir
from perfbook.hoststate.statedir import UnsafePath


def store_dir(kind: str, data_dir: Path | str | None = None) -> Path:
    """build/<kind>/<data>: `data` for the checkout's data/, data-<16 hex> for any other data
    directory (a scratch fleet, a test's copy)."""
    runs = runs_dir(data_dir).resolve()
    name = (
        "data"
        if runs == runs_dir().resolve()
        else f"data-{hashlib.sha256(str(runs).encode()).hexdigest()[:16]}"
    )
    return build_dir() / kind / name


def trusted_owner(path: Path, st: os.stat_result, kind: str, runs: Path) -> None:
    """Refuse a symlink, the wrong kind of file, or one owned by someone other than us, root
    or the owner of the data directory `runs` it was made from."""
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(
            f"{path} is a symlink; perfbook refuses to follow it "
            "(remove it: it is made again by itself)"
        )
    if not (stat.S_ISDIR if kind == "directory" else stat.S_ISREG)(st.st_mode):
        raise UnsafePath(f"{path} is not a {kind}; perfbook refuses to use it (remove it)")
    if st.st_uid not in (os.geteuid(), 0):
        try:
            data_owner = os.stat(runs).st_uid
        except OSError:
            data_owner = None
        if st.st_uid != data_owner:
            raise UnsafePath(
                f"{path} belongs to uid {st.st_uid}, neither us, root nor the owner of "
                f"{runs}; perfbook refuses to use it (remove it: it is made again by itself)"
            )


def _check_dir(d: Path, create: bool, runs: Path) -> bool:
    """`d` and its parent are real directories of ours or root's (True), or absent (False)."""
    for p in (d.parent, d):
        try:
            st = os.lstat(p)
        except (FileNotFoundError, NotADirectoryError):
            if not create:
                return False
            try:
                os.mkdir(p, 0o755)
            except OSError:
                return False
            st = os.lstat(p)
        trusted_owner(p, st, "directory", runs)
    return True


def read_private(path: Path, runs: Path) -> bytes | None:
    """The bytes of a file kept under build/: None when it or its directory is absent or it is
    unreadable; UnsafePath for a symlink or a stranger's file in its place."""
    if not _check_dir(path.parent, create=False, runs=runs):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        if e.errno == 40:  # ELOOP: the last component is a symlink
            trusted_owner(path, os.lstat(path), "file", runs)
        return None
    try:
        trusted_owner(path, os.fstat(fd), "file", runs)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    except OSError:
        return None
    finally:
        os.close(fd)


def write_private(path: Path, data: bytes, runs: Path) -> None:
    """Replace a file under build/ atomically (a temporary file beside it, then a rename)."""
    if not _check_dir(path.parent, create=True, runs=runs):
        raise PermissionError(f"cannot create {path.parent}")
    try:
        trusted_owner(path, os.lstat(path), "file", runs)  # never replace a planted link silently
    except FileNotFoundError:
        pass
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
