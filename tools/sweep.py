"""Remove what a killed run of ours left behind, every kind of it, in one place.

A run restores its state on success, failure, Ctrl-C, SIGTERM and SIGHUP (tools.guard).
SIGKILL can't be caught, so every run starts with this sweep, and `make sweep` runs it by
hand. Each kind of state carries its owner's pid, and only the state of dead owners is
removed:

  tracefs     instances perfbook_<pid>_*, probes in group perfbook_<pid>, our mount
  scratch     <scratch parent>/<chapter>-<pid>-* (and the older /var/tmp/perfbook-*-*)
  datasets    half-written data/runs/**/.tmp-<pid>-* directories
  netns       perfbook_<pid>_* network namespaces
  knobs       debugfs/sysctl knobs a run changed, and the debugfs it mounted (tools.knobs)
  processes   whatever is left in the cgroup of a dead run, perfbook-run-<pid> (tools.cgroup)
  kernels     a notebook kernel's connection file and sockets, <state dir>/kernels/k<pid>-*,
              when the process that started it (papermill, a refresh) died before it could
              remove them (tools.provisioner)
Children also die with their run at once: PR_SET_PDEATHSIG (tools.proc.die_with_parent), and
the run's cgroup watchdog for every descendant.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import time
from pathlib import Path

from .proc import pid_alive

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
            pid = int(owner.read_text().split()[0]) if stat.S_ISREG(ost.st_mode) \
                and ost.st_uid == os.geteuid() else -1
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
                    from .statedir import subdir, write_file
                    write_file(subdir("tracefs") / "mounted", "legacy\n")
            except FileNotFoundError:
                pass
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        removed.append(str(p))
    return removed


def _dataset_tmp(data_dir=None) -> list[str]:
    from .paths import runs_dir
    base = runs_dir(data_dir)
    removed = []
    if not base.is_dir():
        return removed
    for d in base.glob("*/*/.tmp-*"):
        m = _TMP.match(d.name)
        if m and not pid_alive(int(m.group(1))) and not d.is_symlink():
            shutil.rmtree(d, ignore_errors=True)
            removed.append(str(d))
    return removed


# a notebook kernel's connection file k<pid>-<n>.json and sockets k<pid>-<n>-<port>, named after
# the process that started it (tools.provisioner); older refreshes named them kernel-<pid>.json
# and k<pid>-<port>
_KERNEL = re.compile(r"^(?:k(\d+)(?:-\d+){1,2}(?:\.json)?|kernel-(\d+)\.json)$")


def kernel_files() -> list[str]:
    """The connection files and sockets, in <state dir>/kernels, of notebook kernels whose
    owner is dead: regular files and sockets of ours only, never through a link."""
    from .statedir import subdir
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
            f.unlink(missing_ok=True)     # the name itself: unlink never follows a link
            removed.append(str(f))
    return removed


# jupyter's names for a connection file it places itself: kernel-<id>.json in its runtime
# directory, or tempfile.mkstemp(".json") (/tmp/tmpXXXXXXXX.json, what papermill's kernels got)
_KFILE = re.compile(r"^(kernel-[\w.-]+|tmp[a-z0-9_]{8})\.json$")


def _legacy_kernel_records() -> list[str]:
    """Older versions recorded a papermill kernel's connection file in <state
    dir>/kernelfiles/<kernel pid>: once that kernel is dead, the file goes if it is still a
    regular file of ours with jupyter's name (never through a link), then the record."""
    from .statedir import state_dir
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
        if fst is not None and stat.S_ISREG(fst.st_mode) and fst.st_uid == os.geteuid() \
                and _KFILE.match(path.name):
            path.unlink(missing_ok=True)
            removed.append(str(path))
        rec.unlink(missing_ok=True)
    try:
        d.rmdir()                         # empty once every recorded kernel is dead
    except OSError:
        pass
    return removed


def sweep_all(log=print, data_dir=None) -> list[str]:
    """Sweep every kind of state of dead runs; returns what was removed."""
    from . import scratch
    removed: list[str] = []
    removed += _legacy_state()  # first: it may hand over a tracefs mount to release below
    if os.geteuid() == 0:
        from . import cgroup    # first: a leftover bpftrace or perf still holds probes
        removed += cgroup.sweep_stale(log=log)
        from .tracefs import find_tracefs, sweep_stale
        root = find_tracefs()
        if root is not None:
            removed += sweep_stale(root, log=lambda s: None)
        from . import knobs
        removed += knobs.sweep_stale(log=log)
        if shutil.which("ip"):
            from .netns import sweep_stale_netns
            removed += sweep_stale_netns(log=lambda s: None)
    removed += kernel_files()
    removed += _legacy_kernel_records()
    removed += [str(p) for p in scratch.sweep()]
    removed += _legacy_scratch(log)
    removed += _dataset_tmp(data_dir)
    if removed:
        log("swept state left by a killed run: " + ", ".join(removed))
    return removed
