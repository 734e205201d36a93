"""Kernel knobs a run changes (debugfs, sysctl), restored whatever stops the run.

`KnobSession(root)` mounts debugfs at `root` if it is not mounted, writes knobs, and on
close puts every knob back to the value read before its first write and unmounts what it
mounted (signals blocked meanwhile). A collect puts it on `ctx.undo`.

Before any change the session records it in the private state directory
(perfbook.hoststate.statedir, `knobs/<pid>.json`: the mount it made and each knob's original value), so
that after a SIGKILL `sweep_stale()` (every run's first step, `make sweep`) restores the
knobs and unmounts debugfs for the dead run.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from perfbook.core import guard
from perfbook.core.errors import PerfbookError
from perfbook.core.proc import pid_alive
from perfbook.hoststate.mounts import mounts
from perfbook.hoststate.statedir import subdir, write_file
from perfbook.hoststate.tracefs import write_knob

DEBUGFS = Path("/sys/kernel/debug")


def mounted(root: Path = DEBUGFS, fstype: str = "debugfs") -> bool:
    """Whether `fstype` is mounted exactly at `root` (/proc/mounts, exact mount point)."""
    return any(m == str(root) and t == fstype for m, t in mounts())


def _record_dir() -> Path:
    return subdir("knobs")


class KnobSession:
    """Knob writes under `root` (debugfs by default), each undone when the session closes."""

    def __init__(
        self, root: Path = DEBUGFS, mount: bool = True, log=print, fstype: str = "debugfs"
    ):
        self.root, self.mount, self.log, self.fstype = Path(root), mount, log, fstype
        self.mounted_by_us = False
        self.saved: dict[str, str] = {}
        self._closed = True
        self._record = _record_dir() / f"{os.getpid()}.json"

    def _save_record(self) -> None:
        write_file(
            self._record,
            json.dumps(
                {
                    "root": str(self.root),
                    "mounted": self.mounted_by_us,
                    "fstype": self.fstype,
                    "saved": self.saved,
                }
            )
            + "\n",
        )

    def __enter__(self):
        self._closed = False
        if self.mount and not mounted(self.root, self.fstype):
            self.mounted_by_us = True  # recorded before mounting: a SIGKILL in between
            self._save_record()  # leaves a record the sweep can act on
            r = subprocess.run(
                ["mount", "-t", self.fstype, "none", str(self.root)], capture_output=True, text=True
            )
            if r.returncode != 0:
                self.mounted_by_us = False
                self._record.unlink(missing_ok=True)
                self.log(
                    f"note: {self.fstype} is not mounted and mounting it failed: {r.stderr.strip()}"
                )
        return self

    def set(self, path: str | Path, value: str) -> None:
        """Write `value` to the knob at `path` (relative to root), saving its value first."""
        full = self.root / path
        key = str(full)
        if key not in self.saved:
            try:
                self.saved[key] = full.read_text().strip()
            except OSError as e:
                raise PerfbookError(
                    f"can't read {full} before changing it ({e.strerror}); "
                    "refusing to write a knob we could not restore"
                ) from None
            self._save_record()
        write_knob(full, value)

    def restore(self, path: str | Path) -> None:
        key = str(self.root / path)
        if key in self.saved:
            write_knob(Path(key), self.saved.pop(key))

    def close(self) -> None:
        if self._closed:
            return
        with guard.restoring():  # a second signal can't cut the restore in half
            left = False
            try:
                for key in list(self.saved):
                    value = self.saved[key]
                    try:
                        write_knob(Path(key), value)
                        self.saved.pop(key)
                    except OSError as e:
                        left = True
                        self.log(f"warning: could not restore {key}: {e.strerror}")
                if self.mounted_by_us:
                    if _umount(self.root, self.log):
                        self.mounted_by_us = False
                    else:
                        left = True
            finally:
                if left:  # keep the record: the next run's sweep retries what failed here
                    self._save_record()
                else:
                    self._record.unlink(missing_ok=True)
                self._closed = True

    def __exit__(self, *exc):
        self.close()
        return False


def _submounts(root: Path) -> list[str]:
    """Mount points below root, deepest first (from /proc/self/mountinfo)."""
    below = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(str(root).rstrip("/") + "/"):
                below.append(point)
    return sorted(set(below), key=lambda p: -p.count("/"))


def _umount(root: Path, log) -> bool:
    """Unmount root. Reading /sys/kernel/debug/tracing (perf and libtraceevent do) makes the
    kernel automount tracefs there, and debugfs can't be unmounted under it: such submounts
    are unmounted first (an automount comes back by itself the next time it is read)."""
    for sub in _submounts(root):
        r = subprocess.run(["umount", sub], capture_output=True, text=True)
        if r.returncode != 0:
            log(f"warning: could not unmount {sub} (below {root}): {r.stderr.strip()}")
    r = subprocess.run(["umount", str(root)], capture_output=True, text=True)
    if r.returncode != 0:
        log(f"warning: could not unmount {root}: {r.stderr.strip()}")
    return r.returncode == 0


def release_debugfs_if_new(
    was_mounted: bool, log=print, root: Path | None = None, fstype: str = "debugfs"
) -> bool:
    """After a run (every child gone, every session closed): unmount debugfs if it was not
    mounted when the run began and is now. perf and libtraceevent mount debugfs, or read the
    tracefs automounted below it, on their own when they look for tracing; a run's children
    must not leave the mount table different from the one the run found. The run holds the
    machine-wide lock, so no other run of ours can be using it."""
    root = root or DEBUGFS
    if was_mounted or not mounted(root, fstype):
        return False
    return _umount(root, log)


def sweep_stale(log=print) -> list[str]:
    """Restore the knobs and unmount what runs that died (SIGKILL) left; returns what."""
    done = []
    for rec in sorted(_record_dir().glob("*.json")):
        try:
            pid = int(rec.stem)
        except ValueError:
            continue
        if pid_alive(pid):
            continue
        try:
            state = json.loads(rec.read_text())
        except (OSError, ValueError):
            rec.unlink(missing_ok=True)
            continue
        for key, value in state.get("saved", {}).items():
            try:
                write_knob(Path(key), value)
                done.append(f"knob {key} restored to {value!r}")
            except OSError as e:
                log(f"warning: could not restore {key} to {value!r}: {e.strerror}")
        root = Path(state.get("root", DEBUGFS))
        live = [
            r
            for r in _record_dir().glob("*.json")
            if r != rec and r.stem.isdigit() and pid_alive(int(r.stem))
        ]
        if state.get("mounted") and not live and mounted(root, state.get("fstype", "debugfs")):
            if _umount(root, log):
                done.append(f"{root} unmounted")
            else:  # busy (a process still reads the tracefs below it): the next sweep retries;
                write_file(rec, json.dumps({**state, "saved": {}}) + "\n")  # dropping the
                continue  # record would orphan the mount
        rec.unlink(missing_ok=True)
    return done


def records() -> list[Path]:
    """The knob records that exist now (tests: none may outlive its run)."""
    return sorted(_record_dir().glob("*.json"))
