"""Remove what a killed run of ours left behind, every kind of it, in one place.

A run restores its state on success, failure, Ctrl-C, SIGTERM and SIGHUP (perfbook.core.guard).
SIGKILL can't be caught, so every run starts with this sweep, and `make sweep` runs it by
hand. Each kind of state carries its owner's pid, and only the state of dead owners is
removed:

  tracefs     instances perfbook_<pid>_*, probes in group perfbook_<pid>, our mount
  scratch     <scratch parent>/<chapter>-<pid>-* (and the older /var/tmp/perfbook-*-*)
  datasets    half-written <data dir>/runs/<host>/<chapter>/.tmp-<pid>-* directories, in the
              checkout's data/ and in every other data dir a run wrote to: the writer records
              each one it makes (remember_dataset) before making it
  netns       perfbook_<pid>_* network namespaces
  knobs       debugfs/sysctl knobs a run changed, and the debugfs it mounted (perfbook.hoststate.knobs)
  processes   whatever is left in the cgroup of a dead run, perfbook-run-<pid> (perfbook.hoststate.cgroup)
  kernels     a notebook kernel's connection file and sockets, <state dir>/kernels/k<pid>-*,
              when the process that started it (papermill, a refresh) died before it could
              remove them (perfbook.book.jupyter.provisioner)
Children also die with their run at once: PR_SET_PDEATHSIG (perfbook.core.proc.die_with_parent), and
the run's cgroup watchdog for every descendant.

Nothing is removed through a symlink, nor anything of another user's. A private directory
that is refused (perfbook.hoststate.statedir.UnsafePath: the state dir or the scratch parent planted as a
symlink or as another user's directory) stops only the kinds of state kept in it: every
other kind is swept first, and the refusals are reported at the end, in one line.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import time
from pathlib import Path

from perfbook.core.paths import runs_dir
from perfbook.core.proc import pid_alive
from perfbook.hoststate import cgroup, knobs, scratch
from perfbook.hoststate.netns import sweep_stale_netns
from perfbook.hoststate.statedir import UnsafePath, state_dir, subdir, write_file
from perfbook.hoststate.tracefs import find_tracefs, sweep_stale

_TMP = re.compile(r"^\.tmp-(\d+)-")


def _legacy_scratch(log) -> list[str]:
    """/var/tmp/perfbook-<chapter>-* directories of runs older than the private parent."""
    removed = []
    for d in Path("/var/tmp").glob("perfbook-*-*"):
        try:
            st = os.lstat(d)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            continue  # never a symlink, never another user's
        owner = d / "owner"
        try:
            ost = os.lstat(owner)
            pid = (
                int(owner.read_text().split()[0])
                if stat.S_ISREG(ost.st_mode) and ost.st_uid == os.geteuid()
                else -1
            )
        except (OSError, ValueError, IndexError):
            pid = -1
        if pid > 0 and pid_alive(pid):
            continue
        if pid < 0 and time.time() - st.st_mtime < 3600:
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed.append(str(d))
    return removed


def _legacy_state() -> list[str]:
    """The lock and registry of older versions, in world-writable /run/lock: removed when
    they are ours (never a symlink, never another user's), so nothing stays to be planted."""
    removed = []
    for p in (Path("/run/lock/perfbook-measure.lock"), Path("/run/lock/perfbook-tracefs")):
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        if st.st_uid != os.geteuid() or stat.S_ISLNK(st.st_mode):
            continue
        if stat.S_ISDIR(st.st_mode):
            flag = p / "mounted"
            try:  # an older version mounted tracefs: hand that over, so the mount is released
                if stat.S_ISREG(os.lstat(flag).st_mode):
                    write_file(subdir("tracefs") / "mounted", "legacy\n")
            except FileNotFoundError:
                pass
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        removed.append(str(p))
    return removed


def _open_dir(path: Path) -> int:
    """A directory fd of `path` (absolute; the caller closes it), opened from / one component
    at a time with O_NOFOLLOW: OSError (ELOOP, ENOTDIR) when a component is a symlink or no
    directory, FileNotFoundError when one is missing."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open("/", flags)
    try:
        for part in Path(path).parts[1:]:
            nxt = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _remove_dataset_tmp(path: Path) -> str:
    """Remove the half-written dataset `path` (absolute): 'removed', 'gone' when it is not
    there, or 'refused' when it, or a directory above it, is a symlink, or it is not a
    directory of ours. rmtree works below the directory fd and never follows a link."""
    try:
        fd = _open_dir(path.parent)
    except FileNotFoundError:
        return "gone"
    except OSError:
        return "refused"
    try:
        try:
            st = os.lstat(path.name, dir_fd=fd)
        except FileNotFoundError:
            return "gone"
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            return "refused"
        shutil.rmtree(path.name, dir_fd=fd, ignore_errors=True)
        try:
            os.lstat(path.name, dir_fd=fd)
            return "refused"  # it could not be removed (EIO, EROFS ...)
        except FileNotFoundError:
            return "removed"
    finally:
        os.close(fd)


def _dataset_tmp(data_dir=None) -> list[str]:
    """Half-written datasets of dead runs in the checkout's data/ (or `data_dir`), recorded or
    not (runs older than the records), ours only, no symlink followed on the way."""
    base = Path(os.path.realpath(runs_dir(data_dir)))
    removed = []
    for host in _subdirs(base):
        for chap in _subdirs(host):
            for d in _subdirs(chap):
                m = _TMP.match(d.name)
                if m and not pid_alive(int(m.group(1))) and _remove_dataset_tmp(d) == "removed":
                    removed.append(str(d))
    return removed


def _subdirs(d: Path) -> list[Path]:
    """The directories in `d` that are no symlinks."""
    try:
        with os.scandir(d) as it:
            return [d / e.name for e in it if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


_REC = re.compile(r"^tmp-(\d+)-")


def remember_dataset(tmp: Path) -> None:
    """Record, before it is made, the temporary directory `tmp` (.tmp-<our pid>-...) a dataset
    writer is about to fill, wherever its data dir is: after a SIGKILL the sweep removes it."""
    real = os.path.realpath(tmp)
    write_file(subdir("datasets") / Path(real).name.lstrip("."), f"{real}\n")


def forget_dataset(tmp: Path) -> None:
    """The writer published or removed `tmp`: its record goes. A record that can't go (the
    state dir was refused meanwhile) is harmless: the sweep drops it once its run is dead."""
    try:
        (subdir("datasets") / Path(tmp).name.lstrip(".")).unlink(missing_ok=True)
    except (OSError, UnsafePath):
        pass


def _recorded_datasets(refused: list[str]) -> list[str]:
    """The recorded half-written datasets of dead runs (remember_dataset), in any data dir.
    A record names one .tmp-<its pid>-* directory and nothing else; one that is there but
    refused keeps its record and is reported in `refused`."""
    removed = []
    for rec in subdir("datasets").iterdir():
        m = _REC.match(rec.name)
        if not m or pid_alive(int(m.group(1))):
            continue
        try:
            path = Path(rec.read_text().strip())
        except (OSError, ValueError):
            path = Path()
        if not path.is_absolute() or path.name != f".{rec.name}":
            rec.unlink(missing_ok=True)  # not a record we write: nothing to act on
            continue
        outcome = _remove_dataset_tmp(path)
        if outcome == "refused":
            refused.append(str(path))
            continue
        if outcome == "removed":
            removed.append(str(path))
        rec.unlink(missing_ok=True)
    return removed


# a notebook kernel's connection file k<pid>-<n>.json and sockets k<pid>-<n>-<port>, named after
# the process that started it (perfbook.book.jupyter.provisioner); older refreshes named them kernel-<pid>.json
# and k<pid>-<port>
_KERNEL = re.compile(r"^(?:k(\d+)(?:-\d+){1,2}(?:\.json)?|kernel-(\d+)\.json)$")


def kernel_files() -> list[str]:
    """The connection files and sockets, in <state dir>/kernels, of notebook kernels whose
    owner is dead: regular files and sockets of ours only, never through a link."""
    removed = []
    for f in subdir("kernels").iterdir():
        m = _KERNEL.match(f.name)
        if not m or pid_alive(int(m.group(1) or m.group(2))):
            continue
        try:
            st = os.lstat(f)
        except FileNotFoundError:
            continue
        if st.st_uid == os.geteuid() and (stat.S_ISREG(st.st_mode) or stat.S_ISSOCK(st.st_mode)):
            f.unlink(missing_ok=True)  # the name itself: unlink never follows a link
            removed.append(str(f))
    return removed


# jupyter's names for a connection file it places itself: kernel-<id>.json in its runtime
# directory, or tempfile.mkstemp(".json") (/tmp/tmpXXXXXXXX.json, what papermill's kernels got)
_KFILE = re.compile(r"^(kernel-[\w.-]+|tmp[a-z0-9_]{8})\.json$")


def _legacy_kernel_records() -> list[str]:
    """Older versions recorded a papermill kernel's connection file in <state
    dir>/kernelfiles/<kernel pid>: once that kernel is dead, the file goes if it is still a
    regular file of ours with jupyter's name (never through a link), then the record."""
    d = state_dir() / "kernelfiles"
    try:
        st = os.lstat(d)
    except FileNotFoundError:
        return []
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        return []
    removed = []
    for rec in d.iterdir():
        if not rec.name.isdigit() or pid_alive(int(rec.name)):
            continue
        try:
            path = Path(rec.read_text().strip())
            fst = os.lstat(path)
        except (OSError, ValueError):
            fst = None
        if (
            fst is not None
            and stat.S_ISREG(fst.st_mode)
            and fst.st_uid == os.geteuid()
            and _KFILE.match(path.name)
        ):
            path.unlink(missing_ok=True)
            removed.append(str(path))
        rec.unlink(missing_ok=True)
    try:
        d.rmdir()  # empty once every recorded kernel is dead
    except OSError:
        pass
    return removed


def sweep_all(log=print, data_dir=None, refused: list[str] | None = None) -> list[str]:
    """Sweep every kind of state of dead runs; returns what was removed.

    A kind kept in a private directory that is refused (UnsafePath) is left alone, the others
    are swept all the same, and the reasons (each naming its path) go into `refused`; without
    that list they are raised, as one UnsafePath, once everything else is swept."""
    removed: list[str] = []
    unsafe: list[str] = []

    def kind(fn, *args):
        try:
            removed.extend(fn(*args))
        except UnsafePath as e:
            if str(e) not in unsafe:
                unsafe.append(str(e))

    kind(_legacy_state)  # first: it may hand over a tracefs mount to release below
    if os.geteuid() == 0:
        kind(cgroup.sweep_stale, log)
        root = find_tracefs()
        if root is not None:
            kind(sweep_stale, root, lambda s: None)
        kind(knobs.sweep_stale, log)
        if shutil.which("ip"):
            kind(sweep_stale_netns, lambda s: None)
    kind(kernel_files)
    kind(_legacy_kernel_records)
    kind(lambda: [str(p) for p in scratch.sweep()])
    kind(_legacy_scratch, log)
    kind(_dataset_tmp, data_dir)
    left: list[str] = []  # datasets refused one by one: said, not raised
    kind(_recorded_datasets, left)
    if left:
        log(
            "left alone, not a half-written dataset of ours (behind a symlink, another user's) "
            "or not removable: " + ", ".join(left) + "; remove it by hand"
        )
    if removed:
        log("swept state left by a killed run: " + ", ".join(removed))
    if refused is not None:
        refused.extend(unsafe)
    elif unsafe:
        raise UnsafePath("; ".join(unsafe))
    return removed
