"""One cgroup v2 group per measure run: no process the run started outlives it.

PR_SET_PDEATHSIG (perfbook.core.proc.die_with_parent) reaches only a direct child, and only the
children that asked for it; a grandchild (probench under perf, qemu-io under strace, fio's
workers, a daemonized helper) is left behind when a run is SIGKILLed. A cgroup is inherited
by every descendant and cannot be left by one, so the run moves itself into
<cgroup2 mount>/perfbook-run-<pid> for the length of the collect:

* on a normal end, a failure or a signal, `RunGroup.__exit__` moves the run back to where it
  was, kills whatever is still in the group (its own children, grandchildren, ...) and
  removes the group;
* a SIGKILLed run can't do that, so a watchdog started before the move (outside the group, in
  a session of its own so that group signals don't reach it) waits on a pipe whose other
  end only the run holds. When the run dies, however it dies, the pipe closes and the
  watchdog kills the group (cgroup.kill, Linux 5.14+, or SIGKILL per process before that)
  and removes it;
* if even the watchdog was killed, `sweep_stale()` (every run's first step, `make sweep`)
  finds groups whose owner pid is dead and does the same.

Only root can create a group under the cgroup2 mount's top; a host without a writable
cgroup2 hierarchy runs without one (PDEATHSIG and process groups still apply), and
`RunGroup.path` is None.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from perfbook.core import guard
from perfbook.core.paths import repo_root
from perfbook.core.proc import pid_alive

PREFIX = "perfbook-run-"
_NAME = re.compile(rf"^{re.escape(PREFIX)}(\d+)$")


def mount() -> Path | None:
    """The cgroup2 mount point (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        pre, _, post = line.partition(" - ")
        if post.split()[:1] == ["cgroup2"]:
            return Path(pre.split()[4])
    return None


def current(pid: int | str = "self") -> str | None:
    """The cgroup2 path of a process ('0::<path>' in /proc/<pid>/cgroup)."""
    try:
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return line[3:]
    except OSError:
        pass
    return None


def _subtree(group: Path) -> list[Path]:
    """group and every cgroup below it (a chapter may make its own, as sched_callers does for its
    workloads), deepest first: the order rmdir needs. Symlinks are not followed."""
    below = [Path(d) for d, _, _ in os.walk(group, followlinks=False)]
    return sorted(below, key=lambda d: len(d.parts), reverse=True)


def procs(group: Path) -> list[int]:
    """Every process in group's subtree."""
    out = []
    for g in _subtree(group) or [group]:
        try:
            out += [int(x) for x in (g / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            continue
    return out


def kill_all(group: Path, spare: int | None = None, timeout: float = 10.0) -> None:
    """SIGKILL every process in `group` (but `spare`), until it is empty or `timeout` passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = [p for p in procs(group) if p != spare]
        if not pids:
            return
        if spare is None and (group / "cgroup.kill").exists():
            try:
                (group / "cgroup.kill").write_text("1")
            except OSError:
                pass
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)


def remove(group: Path, timeout: float = 10.0) -> bool:
    """rmdir the group, and the cgroups below it first, once their last process is gone (a
    dying process lingers a moment). A run killed by SIGKILL leaves a chapter's own cgroups
    inside its group, and its group cannot go before they do."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            for g in _subtree(group):  # group itself last
                os.rmdir(g)
            return True
        except FileNotFoundError:
            continue  # gone meanwhile (another sweep): look again
        except OSError:
            if time.monotonic() > deadline:
                return False
            kill_all(group, timeout=0.5)
            time.sleep(0.05)


# The watchdog: started before the run joins its group, so it stays outside it.
_WATCHDOG = """
import os, sys
sys.stdin.buffer.read()          # EOF: the run ended, however it ended
from perfbook.hoststate.cgroup import kill_all, remove
from pathlib import Path
g = Path(sys.argv[1])
if g.is_dir():
    kill_all(g)
    remove(g)
"""


class RunGroup:
    """`with RunGroup():` the calling process, and everything it starts inside the block,
    run in a fresh cgroup that is emptied and removed when the block ends (see module doc).
    Nested uses share the outermost group."""

    _depth = 0

    def __init__(self):
        self.path: Path | None = None
        self._home: Path | None = None
        self._watchdog: subprocess.Popen | None = None
        self._nested = False

    def __enter__(self):
        if RunGroup._depth:
            self._nested = True
            RunGroup._depth += 1
            return self
        RunGroup._depth += 1
        root, here = mount(), current()
        if os.geteuid() != 0 or root is None or here is None:
            return self
        group = root / f"{PREFIX}{os.getpid()}"
        try:
            if group.exists():  # a dead run of ours with our pid: empty it first
                kill_all(group)
                remove(group)
            os.mkdir(group, 0o755)
        except OSError:
            return self  # a read-only or foreign hierarchy: run without a group
        self._watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(group)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            cwd=repo_root(),
        )
        try:
            (group / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            self._stop_watchdog()
            remove(group)
            return self
        self.path, self._home = group, root / here.lstrip("/")
        return self

    def end_children(self) -> None:
        """SIGKILL every other process of the group now, and wait until they are gone: the
        framework does this before it restores, so that no child (a perf still reading the
        tracefs automounted below debugfs, a bpftrace on a probe) holds or re-creates the
        state being undone."""
        if self.path is not None and not self._nested:
            kill_all(self.path, spare=os.getpid())

    def _stop_watchdog(self):
        if self._watchdog is not None:
            try:
                self._watchdog.stdin.close()
                self._watchdog.wait(timeout=15)
            except (OSError, subprocess.TimeoutExpired):
                self._watchdog.kill()
                self._watchdog.wait()
            self._watchdog = None

    def __exit__(self, *exc):
        RunGroup._depth -= 1
        if self._nested or self.path is None:
            return False
        with guard.restoring():
            for home in (self._home, mount()):  # where we came from, else the hierarchy's top
                try:
                    (home / "cgroup.procs").write_text(str(os.getpid()))
                    break
                except (OSError, TypeError):
                    continue
            else:
                # still inside: end the others now; the watchdog empties and removes the
                # group when this process exits (closing its pipe now would kill us)
                kill_all(self.path, spare=os.getpid())
                self._watchdog, self.path = None, None
                return False
            kill_all(self.path)
            remove(self.path)
            self._stop_watchdog()
            self.path = None
        return False


def sweep_stale(log=print) -> list[str]:
    """Groups of runs whose owner is dead: kill what is left in them and remove them."""
    root = mount()
    if root is None or os.geteuid() != 0:
        return []
    removed = []
    for g in root.glob(f"{PREFIX}*"):
        m = _NAME.match(g.name)
        if not m or g.is_symlink() or not g.is_dir() or pid_alive(int(m.group(1))):
            continue
        left = procs(g)
        kill_all(g)
        if remove(g):
            removed.append(
                f"cgroup {g.name}" + (f" ({len(left)} process(es) killed)" if left else "")
            )
    return removed
