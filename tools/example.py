"""Chapter 'example': the smallest chapter that follows the contract (tools/README.md).

Not in the book's table of contents. It exists to show how a chapter is written, and so
that tests/test_contract.py can drive every path of the framework on something quick:
it changes kernel state the way real chapters do (a private ftrace instance with an
event enabled, as root), makes a scratch directory and starts a child process, then
measures how long `getppid()` takes, in rounds. `fail_after` makes it raise midway and
`hold_s` makes it wait with all of that state in place, so that a test can signal it.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from .dataset import DatasetWriter
from .params import check_ints, merge
from .progress import Progress
from .proc import die_with_parent, kill_group
from .scratch import Scratch

CHAPTER = "example"
TITLE = "Example chapter (not in the book)"
PROFILES = {"quick": {"rounds": 3, "calls": 2000}, "default": {"rounds": 10, "calls": 20000},
            "full": {"rounds": 30, "calls": 100000}}
COMMON = {"hold_s": 0, "fail_after": 0}
CHILD_MARK = "4242.4242"  # `sleep 4242.4242`: tests find a leaked child by it


def params(profile: str = "default", **overrides) -> dict:
    p = merge(profile, PROFILES, COMMON, overrides)
    check_ints(p, {"rounds": 1, "calls": 1, "hold_s": 0, "fail_after": 0})
    return p


def preflight() -> list[str]:
    return []  # runs anywhere; the ftrace part only as root with tracefs


def collect(data_dir=None, profile: str = "default", **overrides) -> Path:
    import pandas as pd
    p = params(profile, **overrides)
    prog = Progress(CHAPTER, p["rounds"])
    with DatasetWriter(CHAPTER, data_dir, {**p, "profile": profile}) as w, \
            Scratch(CHAPTER) as scratch, _maybe_trace(w) as trace:
        child = subprocess.Popen(["sleep", CHILD_MARK], start_new_session=True,
                                 preexec_fn=die_with_parent)
        try:
            (scratch.path("state")).write_text("in use\n")
            prog.note(f"state changed: scratch, child {child.pid}"
                      + (", ftrace instance" if trace else ""))
            time.sleep(p["hold_s"])
            rows = []
            for r in range(p["rounds"]):
                if p["fail_after"] and r == p["fail_after"]:
                    raise RuntimeError(f"example: failing on purpose after {r} rounds")
                t0 = time.perf_counter_ns()
                for _ in range(p["calls"]):
                    os.getppid()
                rows.append({"round": r, "ns_per_call": round((time.perf_counter_ns() - t0) / p["calls"], 1)})
                prog.step(f"round {r + 1}")
        finally:
            kill_group(child)
        w.add_table("calls", pd.DataFrame(rows))
        w.extra["python"] = sys.version.split()[0]
    return w.published


@contextmanager
def _maybe_trace(w):
    """A private ftrace instance with one event enabled, as root; else a recorded skip."""
    from .tracefs import TraceSession, preflight as tracefs_preflight
    if os.geteuid() != 0 or tracefs_preflight(need_uprobes=False):
        w.skip("ftrace", "not root or no tracefs: no instance was made")
        yield None
        return
    with TraceSession("example") as s:
        s.enable("sched/sched_process_exit")
        yield s
