"""ftrace / uprobe state that we change, and always put back.

A TraceSession:
  * finds tracefs, mounting it at /sys/kernel/tracing if needed. Sessions
    register in <state dir>/tracefs/ (perfbook.hoststate.statedir; user.<pid>.*, and 'mounted' when
    we mounted it); the last live session out unmounts what we mounted, and a
    sweep does the same after a SIGKILL;
  * sweeps probes and instances that a killed run of ours left behind
    (group / instance names carry the owner's pid: perfbook_<pid>...);
  * snapshots the global settings we could disturb (tracing_on, trace_clock,
    current_tracer, the set of enabled top-level events);
  * creates a private instance (instances/perfbook_<pid>_<tag>) where events
    are enabled, so the top-level buffer is never touched;
  * on exit -- normal, exception, SIGINT or SIGTERM -- disables our events,
    deletes our probe definitions (they are global, even when enabled only in
    an instance), removes the instance and restores the snapshot.
SIGKILL can't be caught: the next session's sweep removes what it left.
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import os
import re
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from perfbook.core import guard
from perfbook.core.errors import MissingPrerequisite, PerfbookError
from perfbook.core.proc import pid_alive
from perfbook.hoststate.mounts import mounts
from perfbook.hoststate.statedir import open_file, subdir, write_file

PREFIX = "perfbook_"
_GROUP_RE = re.compile(r"^[pr]:(" + PREFIX + r"(\d+))/(\S+)\s")
_INST_RE = re.compile("^" + PREFIX + r"(\d+)_")
DEFAULT_MOUNT = Path("/sys/kernel/tracing")


def find_tracefs() -> Path | None:
    """The tracefs directory if it is mounted somewhere, else None."""
    for mnt, fstype in mounts():
        if fstype == "tracefs":
            return Path(mnt)
    for mnt, fstype in mounts():
        if fstype == "debugfs" and (Path(mnt) / "tracing" / "trace").exists():
            return Path(mnt) / "tracing"
    return None


def preflight(need_uprobes: bool = True) -> list[str]:
    """Reasons this host can't run a trace session (empty list = fine)."""
    reasons = []
    if os.geteuid() != 0:
        reasons.append(
            "not root: tracefs, uprobes and trace_marker need root (run the measure step with sudo)"
        )
        return reasons
    root = find_tracefs()
    if root is None:
        if not DEFAULT_MOUNT.is_dir():
            reasons.append(
                "no tracefs: /sys/kernel/tracing is missing (kernel built without CONFIG_FTRACE?)"
            )
            return reasons
        fstypes = (
            Path("/proc/filesystems").read_text() if Path("/proc/filesystems").exists() else ""
        )
        if "tracefs" not in fstypes:
            reasons.append("no tracefs: the kernel does not offer the tracefs filesystem")
            return reasons
        root = DEFAULT_MOUNT  # mountable; the session mounts it
        return reasons
    if not (root / "instances").is_dir():
        reasons.append(
            f"tracefs at {root} has no instances directory (kernel too old for private instances)"
        )
    if need_uprobes and not (root / "uprobe_events").exists():
        reasons.append(f"no uprobe_events in {root} (kernel built without CONFIG_UPROBE_EVENTS)")
    return reasons


def write_knob(path: Path, text: str, append: bool = False) -> None:
    """Write a tracefs, debugfs, sysfs or procfs file. Signals wait until the fd is closed: a KeyboardInterrupt between
    open and close would leak the fd, and an instance with an open file can't be removed."""
    flags = os.O_WRONLY | os.O_CLOEXEC | (os.O_APPEND if append else os.O_TRUNC)
    with guard.restoring():
        fd = os.open(path, flags)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


_write = write_knob


@dataclass
class GlobalState:
    tracing_on: str
    trace_clock: str
    current_tracer: str
    set_event: list[str]
    our_probes: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, root: Path) -> GlobalState:
        clock = (root / "trace_clock").read_text()
        m = re.search(r"\[(\S+)\]", clock)
        return cls(
            tracing_on=(root / "tracing_on").read_text().strip(),
            trace_clock=m.group(1) if m else clock.strip(),
            current_tracer=(root / "current_tracer").read_text().strip(),
            set_event=sorted((root / "set_event").read_text().split()),
            our_probes=[
                line
                for line in _read_lines(root / "uprobe_events")
                if line.startswith(("p:" + PREFIX, "r:" + PREFIX))
            ],
        )


def _read_lines(p: Path) -> list[str]:
    try:
        return [line for line in p.read_text().splitlines() if line.strip()]
    except OSError:
        return []


def _mount_dir() -> Path:
    """Where sessions record that they use tracefs, and whether we mounted it: a private
    directory of ours (perfbook.hoststate.statedir), so no other user can plant or redirect an entry."""
    return subdir("tracefs")


def _live_users(exclude: str | None = None) -> list[Path]:
    users = []
    for f in _mount_dir().glob("user.*"):
        try:
            pid = int(f.name.split(".")[1])
        except (IndexError, ValueError):
            continue
        if f.name != exclude and pid_alive(pid):
            users.append(f)
    return users


@contextmanager
def _mount_decision():
    """Whether to mount, and whether to unmount, is decided by one perfbook process at a time
    (an flock in the private state directory): two sessions that both found tracefs unmounted
    would otherwise stack two mounts, and only one would be released."""
    fd = open_file(_mount_dir() / "mount.lock", os.O_RDWR | os.O_CREAT)
    try:
        with guard.restoring():
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the flock


def release_mount(root: Path, exclude: str | None = None) -> bool:
    """Unmount tracefs if a perfbook session mounted it and no live session uses it.

    The 'mounted' flag is written before the mount and survives a SIGKILLed session, so the
    next session (or a sweep) unmounts what the killed one mounted."""
    with _mount_decision():
        flag = _mount_dir() / "mounted"
        if not flag.exists() or _live_users(exclude):
            return False

        def still_mounted() -> bool:
            return any(t == "tracefs" and Path(m) == Path(root) for m, t in mounts())

        if not still_mounted():
            flag.unlink(missing_ok=True)
            return False
        # a child of ours that is still exiting (perf, bpftrace) can hold a tracefs file a
        # moment longer: retry, and if it stays busy keep the flag so the next session or
        # sweep unmounts it (dropping the flag would leave the mount looking like someone else's)
        for _ in range(30):
            r = subprocess.run(["umount", str(root)], capture_output=True)
            if r.returncode == 0 or not still_mounted():
                flag.unlink(missing_ok=True)
                return True
            time.sleep(0.1)
        return False


def sweep_stale(root: Path, log=print) -> list[str]:
    """Remove instances, probe definitions and session marks left by dead perfbook
    processes, and unmount tracefs if we mounted it and no live session uses it."""
    removed = []
    inst_dir = root / "instances"
    if inst_dir.is_dir():
        for d in inst_dir.iterdir():
            m = _INST_RE.match(d.name)
            if m and not pid_alive(int(m.group(1))):
                try:
                    d.rmdir()
                    removed.append(f"instance {d.name}")
                except OSError as e:
                    log(f"warning: could not remove stale instance {d.name}: {e.strerror}")
    for line in _read_lines(root / "uprobe_events"):
        m = _GROUP_RE.match(line + " ")
        if m and not pid_alive(int(m.group(2))):
            ev = f"{m.group(1)}/{m.group(3)}"
            _disable_everywhere(root, m.group(1), m.group(3))
            try:
                _write(root / "uprobe_events", f"-:{ev}\n", append=True)
                removed.append(f"uprobe {ev}")
            except OSError as e:
                log(f"warning: could not remove stale uprobe {ev}: {e.strerror}")
    for f in _mount_dir().glob("user.*"):
        try:
            dead = not pid_alive(int(f.name.split(".")[1]))
        except (IndexError, ValueError):
            dead = True
        if dead:
            f.unlink(missing_ok=True)
    if release_mount(root):  # a no-op while any live session (the caller's too) uses it
        removed.append(f"tracefs mount at {root}")
    if removed:
        log("swept stale state from a killed run: " + ", ".join(removed))
    return removed


def _holders(path: Path) -> str:
    """Which processes have a file under `path` open (for an EBUSY message)."""
    found = []
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            for fd in fd_dir.iterdir():
                if os.readlink(fd).startswith(str(path)):
                    found.append(f"pid {fd_dir.parent.name}")
                    break
        except OSError:
            continue
    return "open by " + ", ".join(found) if found else "no process has a file of it open"


def _disable_everywhere(root: Path, group: str, event: str) -> None:
    places = (
        [root] + [d for d in (root / "instances").iterdir()]
        if (root / "instances").is_dir()
        else [root]
    )
    for base in places:
        en = base / "events" / group / event / "enable"
        try:
            if en.exists() and en.read_text().strip() != "0":
                _write(en, "0")
        except OSError:
            pass


class TraceError(PerfbookError):
    pass


# Output options a new instance inherits from the top level that would print lines
# perfbook.probes.ftrace can't read (no context, raw/hex/binary records): set to the kernel's defaults
# on our own instance, so whatever another user set globally, every line is parsed.
# record-tgid, irq-info and latency-format are left alone: perfbook.probes.ftrace reads all their layouts.
READABLE_FORMAT = {"context-info": "1", "raw": "0", "hex": "0", "bin": "0"}


def readable_format(instance: Path) -> dict[str, str]:
    """Write READABLE_FORMAT into `instance`/options where it differs; returns what changed."""
    changed = {}
    for name, want in READABLE_FORMAT.items():
        path = instance / "options" / name
        try:
            have = path.read_text().strip()
        except OSError:
            continue  # an option this kernel doesn't have
        if have != want:
            _write(path, want)
            changed[name] = want
    return changed


class TraceSession:
    """Private tracing state for one measurement, restored on every exit path."""

    def __init__(self, tag: str = "run", use_instance: bool = True, log=print):
        if not re.fullmatch(r"[a-z0-9_]{1,20}", tag):
            raise ValueError("tag must be [a-z0-9_]{1,20}")
        self.tag = tag
        self.use_instance = use_instance
        self.log = log
        self.group = f"{PREFIX}{os.getpid()}"
        self.root: Path | None = None
        self.instance: Path | None = None
        self.probes: list[str] = []  # "group/event"
        self.enabled: list[Path] = []  # enable files we wrote 1 to
        self.saved: GlobalState | None = None
        self._guarded = False
        self._closed = True

    # -- setup -------------------------------------------------------------
    def __enter__(self):
        reasons = preflight(need_uprobes=False)
        if reasons:
            raise MissingPrerequisite(reasons[0])
        self._closed = False
        guard.enter()  # SIGINT/SIGTERM/SIGHUP -> KeyboardInterrupt until close()
        self._guarded = True
        atexit.register(self.close)
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def _open(self):
        with _mount_decision():  # mount and register as one step: no release in between
            root = find_tracefs()
            if root is None:
                # the flag first: a signal or SIGKILL right after the mount leaves a record
                write_file(_mount_dir() / "mounted", f"{os.getpid()}\n")
                with guard.restoring():
                    r = subprocess.run(
                        ["mount", "-t", "tracefs", "nodev", str(DEFAULT_MOUNT)],
                        capture_output=True,
                        text=True,
                    )
                if r.returncode != 0:
                    (_mount_dir() / "mounted").unlink(missing_ok=True)
                    raise MissingPrerequisite(
                        f"tracefs is not mounted and mounting it failed: {r.stderr.strip()}"
                    )
                root = DEFAULT_MOUNT
            self.root = root
            self._user = _mount_dir() / f"user.{os.getpid()}.{id(self)}"
            write_file(self._user, self.tag + "\n")
        sweep_stale(root, self.log)
        self.saved = GlobalState.read(root)
        if self.use_instance and (root / "instances").is_dir():
            self.instance = root / "instances" / f"{self.group}_{self.tag}"
            self.instance.mkdir()
            readable_format(self.instance)
        else:
            self.instance = None

    # -- paths ---------------------------------------------------------------
    @property
    def buffer(self) -> Path:
        """The directory holding this session's trace, trace_marker, events ..."""
        assert self.root is not None
        return self.instance if self.instance is not None else self.root

    def file(self, name: str) -> Path:
        return self.buffer / name

    # -- probes ----------------------------------------------------------------
    def add_uprobe(
        self, event: str, path: str | Path, offset: int, ret: bool = False, args: str = ""
    ) -> str:
        """Define a uprobe (or uretprobe) at a *file offset* of `path`."""
        assert self.root is not None
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", event):
            raise ValueError(f"bad event name {event!r}")
        kind = "r" if ret else "p"
        line = f"{kind}:{self.group}/{event} {Path(path).resolve()}:{offset:#x}"
        if args:
            line += " " + args
        try:
            _write(self.root / "uprobe_events", line + "\n", append=True)
        except OSError as e:
            raise TraceError(
                f"the kernel refused uprobe '{line}': {e.strerror}; {self._error_log_tail()}"
            ) from None
        name = f"{self.group}/{event}"
        self.probes.append(name)
        return name

    def _error_log_tail(self) -> str:
        lines = _read_lines(self.root / "error_log") if self.root else []
        return ("error_log: " + " | ".join(lines[-2:])) if lines else "error_log is empty"

    def enable(self, event: str) -> None:
        """Enable 'group/event' (ours or a static one like 'block/block_rq_issue')."""
        en = self.buffer / "events" / event / "enable"
        if not en.exists():
            raise TraceError(f"no event {event} in {self.buffer}/events")
        _write(en, "1")
        self.enabled.append(en)

    def disable(self, event: str) -> None:
        en = self.buffer / "events" / event / "enable"
        _write(en, "0")
        if en in self.enabled:
            self.enabled.remove(en)

    def remove_uprobe(self, name: str) -> None:
        self._disable_probe(name)
        _write(self.root / "uprobe_events", f"-:{name}\n", append=True)
        self.probes.remove(name)

    def _disable_probe(self, name: str):
        group, event = name.split("/")
        _disable_everywhere(self.root, group, event)
        self.enabled = [e for e in self.enabled if f"/{group}/{event}/" not in str(e)]

    def set_option(self, name: str, value: str) -> None:
        """Write a per-buffer setting (tracing_on, trace_clock, buffer_size_kb, ...)."""
        if self.instance is None and name not in ("tracing_on",):
            raise TraceError(f"refusing to change global {name} without a private instance")
        _write(self.buffer / name, value)

    def set_trace_options(self, **opts) -> None:
        """Write options/<name> of the private instance: set_trace_options(record_tgid=False,
        irq_info=True). '_' in a name stands for '-' unless options/ has the name as given;
        bools (and ints) are written as 1/0. A new instance inherits these options from the
        top level; perfbook.probes.ftrace parses every layout they give, so set one only where a
        chapter needs it."""
        if self.instance is None:
            raise TraceError(
                f"refusing to change global trace options {sorted(opts)} without a private instance"
            )
        for name, value in opts.items():
            path = self.buffer / "options" / name
            if not path.exists():
                path = self.buffer / "options" / name.replace("_", "-")
            if not path.exists():
                raise TraceError(f"no trace option {name!r} in {self.buffer / 'options'}")
            _write(path, str(int(value)) if isinstance(value, (bool, int)) else str(value))

    def clear(self) -> None:
        _write(self.buffer / "trace", "")

    def buffer_stats(self) -> dict:
        """Summed per-CPU ring-buffer statistics of this session's buffer."""
        tot: dict[str, int] = {}
        for stats in self.cpu_buffer_stats().values():
            for k, v in stats.items():
                tot[k] = tot.get(k, 0) + v
        return tot

    def cpu_buffer_stats(self) -> dict[int, dict[str, int]]:
        """Each CPU's ring-buffer statistics of this session's buffer (per_cpu/cpuN/stats: the
        integer ones, such as entries, overrun and dropped events), by CPU number."""
        out: dict[int, dict[str, int]] = {}
        for cpu in sorted((self.buffer / "per_cpu").glob("cpu*")):
            if not cpu.name[3:].isdigit():
                continue
            stats = out.setdefault(int(cpu.name[3:]), {})
            for line in _read_lines(cpu / "stats"):
                k, _, v = line.partition(":")
                v = v.strip().split()[0] if v.strip() else ""
                if v.isdigit():
                    stats[k.strip()] = int(v)
        return out

    def uprobe_hits(self) -> dict[str, int]:
        """Hit counts of our probes from uprobe_profile ('path event hits')."""
        ours = {name.split("/", 1)[1]: name for name in self.probes}
        out = {}
        for line in _read_lines(self.root / "uprobe_profile"):
            parts = line.split()
            if len(parts) >= 3 and parts[-2] in ours and parts[-1].isdigit():
                out[ours[parts[-2]]] = int(parts[-1])
        return out

    def adopt_probe(self, name: str) -> None:
        """Take ownership of a probe another tool (perf probe) defined in our group."""
        if not name.startswith(self.group + "/"):
            raise ValueError(f"{name} is not in our group {self.group}")
        self.probes.append(name)

    # -- teardown ----------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        errors = []
        try:
            with guard.restoring():  # cleanup is not interruptible; signals arrive after it
                try:
                    if self.root is not None:
                        for en in list(self.enabled):
                            try:
                                _write(en, "0")
                            except OSError as e:
                                errors.append(f"disable {en}: {e.strerror}")
                        self.enabled.clear()
                        for name in list(self.probes):
                            try:
                                self.remove_uprobe(name)
                            except OSError as e:
                                errors.append(f"remove {name}: {e.strerror}")
                        if self.instance is not None and self.instance.exists():
                            for attempt in range(250):  # up to 5 s: readers let go
                                try:
                                    self.instance.rmdir()
                                    break
                                except OSError as e:
                                    if e.errno != errno.EBUSY or attempt == 249:
                                        errors.append(
                                            f"rmdir {self.instance}: {e.strerror} "
                                            f"({_holders(self.instance)})"
                                        )
                                        break
                                    time.sleep(0.02)
                        self._restore_globals(errors)
                        user = getattr(self, "_user", None)
                        if user is not None:
                            user.unlink(missing_ok=True)
                        release_mount(self.root)
                finally:
                    self._closed = True
                    try:
                        atexit.unregister(self.close)
                    except Exception:
                        pass
            if errors:
                self.log("warning: tracing cleanup incomplete: " + "; ".join(errors))
        finally:
            if self._guarded:
                self._guarded = False
                guard.leave()

    def _restore_globals(self, errors: list[str]) -> None:
        if self.saved is None:
            return
        now = GlobalState.read(self.root)
        if now.tracing_on != self.saved.tracing_on:
            _write(self.root / "tracing_on", self.saved.tracing_on)
        if now.trace_clock != self.saved.trace_clock:
            _write(self.root / "trace_clock", self.saved.trace_clock)
        if now.current_tracer != self.saved.current_tracer:
            _write(self.root / "current_tracer", self.saved.current_tracer)
        if now.set_event != self.saved.set_event:
            errors.append("top-level set_event changed during the run (not by us?)")

    def __exit__(self, *exc):
        self.close()
        return False


def snapshot(root: Path | None = None) -> dict:
    """Observable tracing state, for tests: what must be identical before/after."""
    root = root or find_tracefs()
    if root is None:
        return {"mounted": False}
    try:
        st = GlobalState.read(root)
        return {
            "mounted": True,
            "tracing_on": st.tracing_on,
            "trace_clock": st.trace_clock,
            "current_tracer": st.current_tracer,
            "set_event": st.set_event,
            "our_probes": [l for l in _read_lines(root / "uprobe_events") if PREFIX in l],
            "our_instances": sorted(
                d.name for d in (root / "instances").iterdir() if d.name.startswith(PREFIX)
            )
            if (root / "instances").is_dir()
            else [],
        }
    except FileNotFoundError:  # unmounted while we looked (a run restoring meanwhile)
        return {"mounted": False}
