"""The one sequence every chapter's collect runs through, whoever starts it
(`python -m perfbook measure`, `make all`, or a papermill collect of a notebook):

  parameters -> preflight -> sweep of dead runs' state -> lock -> signals -> a cgroup of
  its own (perfbook.hoststate.cgroup: no descendant outlives the run) -> the run monitor (perfbook.hoststate.monitor) ->
  a fingerprint (perfbook.hoststate.fingerprint) -> the chapter's measure(ctx) (writing
  through ctx.writer, registering every change on ctx.undo, marking its measured windows
  with ctx.window and where its seconds go with ctx.phase) -> a fingerprint -> the monitor's
  record with both fingerprints (the manifest's `disturbance`) -> undo -> the seconds by phase
  (the manifest's `phases`, perfbook.core.phases) -> publish -> status line.

The chapter (tools/perfbook/framework/contract.py) brings only its parameters, preflight() and measure(ctx);
the framework opens the dataset writer and the undo stack (the kernel-state guard) around
measure, unwinds the stack before publishing, and publishes only on success. A bad parameter is
one ParameterError line and nothing is measured; a host that can't run the chapter is a
skip (MissingPrerequisite); a private directory that is refused (perfbook.hoststate.statedir.UnsafePath: the
state dir or the scratch parent planted as a symlink or another user's) is a failure, one line
that names it, before anything is measured; Ctrl-C, SIGTERM or SIGHUP raise KeyboardInterrupt
inside the collect, every `finally` restores what it changed, and nothing is published. A run
that was stopped, frozen or starved (a gap, perfbook.hoststate.monitor), or lost much of its CPU time to
steal or to work outside the run (a busy neighbour), is published marked disturbed; a gap inside a window the chapter marked gap_rejects is a
failed sanity check, and nothing is published.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import ExitStack
from pathlib import Path

from perfbook.core import guard
from perfbook.core.errors import MissingPrerequisite
from perfbook.core.paths import resolve_data_dir
from perfbook.core.phases import PhaseClock
from perfbook.data.dataset import check_writable
from perfbook.data.writer import DatasetWriter
from perfbook.framework.contract import Context
from perfbook.hoststate import fingerprint, knobs, statedir
from perfbook.hoststate.cgroup import RunGroup
from perfbook.hoststate.lock import measure_lock
from perfbook.hoststate.monitor import RunMonitor
from perfbook.hoststate.sweep import sweep_all
from perfbook.hoststate.tracefs import find_tracefs, release_mount


def status(chapter: str, state: str, detail: str, **extra) -> None:
    """Append one line to the measure run's status file (PERFBOOK_STATUS_FILE), if any."""
    path = os.environ.get("PERFBOOK_STATUS_FILE")
    if path:
        with open(path, "a") as f:
            f.write(
                json.dumps({"chapter": chapter, "status": state, "detail": detail, **extra}) + "\n"
            )


def _record_disturbance(w, rec: dict, say) -> None:
    """The run monitor's record into the manifest; the gaps that hit a gap_rejects window
    reject the run (perfbook.hoststate.monitor)."""
    w.disturbance = rec
    for why in rec["rejects"]:
        w.reject(why)
    if rec["disturbed"] and not rec["rejects"]:
        say("disturbed: " + "; ".join(rec["reasons"]) + " (published, marked disturbed)")


def _release_mounts(debugfs_before: bool, say) -> None:
    """Now that every child is gone: unmount the tracefs a session of ours mounted (a no-op
    when we did not mount it or another live session uses it), and debugfs if it appeared
    during the run (perfbook.hoststate.knobs.release_debugfs_if_new)."""
    if os.geteuid() != 0:
        return
    with guard.restoring():
        root = find_tracefs()
        if root is not None:
            release_mount(root)
        knobs.release_debugfs_if_new(debugfs_before, say)


def collect(
    chapter, profile: str = "default", data_dir=None, say=print, **overrides
) -> Path | None:
    """Measure one chapter (a perfbook.framework.contract.Chapter) on this host. Returns the new dataset,
    or None when skipped."""
    p = chapter.parameters(profile, **overrides)  # bad input stops here, before anything
    reasons = chapter.preflight()
    if reasons:
        say(f"SKIPPED: {reasons[0]}")
        status(chapter.name, "skipped", "; ".join(reasons))
        return None
    data = resolve_data_dir(data_dir)
    check_writable(data)  # an unwritable data dir stops here too,
    statedir.state_dir()  # and so does a refused private directory
    statedir.scratch_parent()  # (UnsafePath), before waiting for the lock
    t0 = time.monotonic()
    with guard.interruptible(), measure_lock(f"{chapter.name} collect"):
        sweep_all(log=say)  # UnsafePath, once all else is swept, if it refused something
        debugfs_before = knobs.mounted()  # the mount table this run must leave as it found it
        try:
            with DatasetWriter(chapter.name, data, p, profile=profile, schemas=chapter.tables) as w:
                try:
                    with (
                        RunGroup() as group,
                        ExitStack() as undo,
                    ):  # every descendant is gone before publishing
                        # in the run's cgroup (a freeze of the group stops it too), in a session
                        # of its own (a SIGSTOP of the run's process group does not)
                        monitor = RunMonitor().start()
                        clock = PhaseClock()
                        try:
                            before = fingerprint.take()  # 60 ms: the machine's speed today
                            t1 = time.monotonic()
                            clock.add("framework", t1 - t0)
                            ctx = Context(chapter, p, profile, w, undo, say, monitor, clock)
                            chapter.measure(ctx)
                            t2 = time.monotonic()
                            after = fingerprint.take()
                            rec = monitor.stop()
                            rec["fingerprint"] = {"before": before, "after": after}
                            _record_disturbance(w, rec, say)
                            clock.add("framework", time.monotonic() - t2)
                        finally:
                            t3 = time.monotonic()
                            with guard.restoring():  # a second signal cannot cut the restore short
                                monitor.close()
                                group.end_children()  # first: no child may hold what is undone
                                undo.close()
                            clock.add("restore", time.monotonic() - t3)
                            w.phases = clock.seconds(time.monotonic() - t0)
                finally:
                    _release_mounts(debugfs_before, say)  # what a child held or mounted
        except MissingPrerequisite as e:
            say(f"SKIPPED: {e}")
            status(chapter.name, "skipped", str(e))
            return None
    out = w.published
    status(
        chapter.name,
        "measured",
        str(out),
        seconds=round(time.monotonic() - t0),
        disturbed=(w.disturbance or {}).get("disturbed"),
    )
    say(f"new dataset: {out}")
    return out
