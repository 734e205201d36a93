"""The example's measurement: the only part of the chapter that touches the host."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pandas as pd

from perfbook.core.proc import die_with_parent, kill_group
from perfbook.hoststate.tracefs import TraceSession
from perfbook.hoststate.tracefs import preflight as tracefs_preflight

CHILD_MARK = "4242.4242"  # `sleep 4242.4242`: tests find a leaked child by it


def measure(ctx) -> None:
    """Measure this host into ctx.writer (the framework validated ctx.p and holds the lock)."""
    p, w = ctx.p, ctx.writer
    with ctx.phase("setup"):  # where the seconds go: the manifest's `phases`
        scratch = ctx.scratch()  # removed by the framework's undo stack
        traced = _trace(ctx)
        child = subprocess.Popen(
            ["sleep", CHILD_MARK], start_new_session=True, preexec_fn=die_with_parent
        )
        ctx.undo.callback(kill_group, child)  # registered right after the change
        scratch.path("state").write_text("in use\n")
        prog = ctx.progress(p["rounds"])
        prog.note(
            f"state changed: scratch, child {child.pid}" + (", ftrace instance" if traced else "")
        )
        time.sleep(p["hold_s"])
    rows = []
    for r in range(p["rounds"]):
        if p["fail_after"] and r == p["fail_after"]:
            raise RuntimeError(f"example: failing on purpose after {r} rounds")
        with ctx.phase("measured"):
            t0 = time.perf_counter_ns()
            for _ in range(p["calls"]):
                os.getppid()
            ns = round((time.perf_counter_ns() - t0) / p["calls"], 1)
        rows.append({"round": r, "ns_per_call": ns})
        prog.step(f"round {r + 1}")
    w.add_table("calls", pd.DataFrame(rows))
    w.extra["python"] = sys.version.split()[0]


def _trace(ctx) -> bool:
    """A private ftrace instance with one event enabled, as root; else a recorded skip."""
    if os.geteuid() != 0 or tracefs_preflight(need_uprobes=False):
        ctx.writer.skip("ftrace", "not root or no tracefs: no instance was made")
        return False
    s = ctx.undo.enter_context(TraceSession("example"))
    s.enable("sched/sched_process_exit")
    return True
