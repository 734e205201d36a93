"""sched_callers: the measurement (the only part of the chapter that touches the host).

Each round arms every tracer in turn (a seeded shuffle), runs the workloads under it and
disarms it again: the stacks it saw go to the `stacks` table, hackbench's own timings to
`runs`, so that the callers and the probe effect come from the same sessions. The untraced
baseline runs hackbench only. Every change is registered on ctx.undo right after it is made:
the private ftrace instance (perfbook.hoststate.tracefs.TraceSession restores filters, options and the
tracer when it removes it), the trigger, and the bpftrace and perf processes.
"""

from __future__ import annotations

import random
import re
import shutil
import signal
import statistics
import subprocess
import time
from pathlib import Path

import pandas as pd

from perfbook.analysis.repetition import repetition
from perfbook.core.errors import PerfbookError
from perfbook.core.proc import interruptible_child, kill_group, run_group
from perfbook.hoststate import bpftrace
from perfbook.hoststate.tracefs import TraceSession, write_knob
from perfbook.probes import ftrace

from . import parse
from .parse import EXPERIMENT

SWITCH = "events/sched/sched_switch"


def _triggers(s: TraceSession) -> str:
    """The '# Available triggers:' line of sched_switch's trigger file."""
    lines = s.file(f"{SWITCH}/trigger").read_text().splitlines()
    return next((lines[i + 1] for i, ln in enumerate(lines[:-1]) if "Available triggers" in ln), "")


def unavailable(s: TraceSession, tracers) -> dict[str, str]:
    """tracer -> why this host can't use it (tracers absent from the dict can run)."""
    why, trig = {}, _triggers(s)
    if "ftrace_function" in tracers:
        if "function" not in s.file("available_tracers").read_text().split():
            why["ftrace_function"] = (
                "the kernel has no function tracer (CONFIG_FUNCTION_TRACER off)"
            )
        else:
            try:
                write_knob(s.file("set_ftrace_filter"), "schedule")
                write_knob(s.file("set_ftrace_filter"), "")
            except OSError as e:
                why["ftrace_function"] = (
                    f"writing set_ftrace_filter is refused ({e.strerror}): this "
                    "kernel does not let root filter the function tracer here"
                )
    if "ftrace_hist" in tracers and "hist" not in trig.split():
        why["ftrace_hist"] = (
            f"no hist triggers (CONFIG_HIST_TRIGGERS off): sched_switch's trigger "
            f"file offers only '{trig.strip('# ').strip()}'"
        )
    if "ftrace_trigger" in tracers and "stacktrace" not in trig.split():
        why["ftrace_trigger"] = (
            f"no stacktrace trigger: sched_switch offers only '{trig.strip('# ').strip()}'"
        )
    if "dynevent" in tracers:
        readme = s.root.joinpath("README").read_text()
        if (s.root / "kprobe_events").exists() or "f[:[<group>/][<event>]]" in readme:
            why["dynevent"] = (
                "kprobe or fprobe events exist here, but this chapter does not arm "
                "them yet (the other tracers answer the same question)"
            )
        else:
            why["dynevent"] = (
                "no kprobe_events, and dynamic_events accepts no kprobe or fprobe "
                "definitions (tracefs README lists only uprobes): "
                "CONFIG_KPROBE_EVENTS and CONFIG_FPROBE_EVENTS are off"
            )
    for t, tool in (("bpftrace", "bpftrace"), ("perf", "perf")):
        if t in tracers and not shutil.which(tool):
            why[t] = f"{tool} is not installed"
    return why


class _Ftrace:
    """The stacktrace trigger, the hist trigger or the function tracer in the private instance."""

    def __init__(self, kind: str, s: TraceSession, ctx):
        self.kind, self.s, self.depth, self.armed = kind, s, ctx.p["stack_depth"], False
        self.spec = None
        ctx.undo.callback(self._undo)  # before the instance goes (the stack unwinds in reverse)

    def arm(self):
        s = self.s
        s.clear()
        self.armed = True
        if self.kind == "ftrace_trigger":
            write_knob(s.file(f"{SWITCH}/trigger"), "stacktrace")
        elif self.kind == "ftrace_hist":
            for key in ("common_stacktrace", "stacktrace"):  # renamed in 6.5
                try:
                    self.spec = f"hist:keys={key}:vals=hitcount:sort=hitcount:size=8192"
                    write_knob(s.file(f"{SWITCH}/trigger"), self.spec)
                    break
                except OSError:
                    self.spec = None
            if self.spec is None:
                raise PerfbookError("the kernel refused a hist trigger keyed on the stack")
        else:
            write_knob(s.file("set_ftrace_filter"), "schedule")
            s.set_trace_options(func_stack_trace=1)
            s.set_option("current_tracer", "function")

    def _undo(self):
        if not self.armed:
            return
        self.armed = False
        s = self.s
        steps = {
            "ftrace_trigger": [(f"{SWITCH}/trigger", "!stacktrace", True)],
            "ftrace_hist": [(f"{SWITCH}/trigger", f"!{self.spec}", True)] if self.spec else [],
            "ftrace_function": [
                ("current_tracer", "nop", False),
                ("options/func_stack_trace", "0", False),
                ("set_ftrace_filter", "", False),
            ],
        }[self.kind]
        for name, value, append in steps:
            try:
                write_knob(s.file(name), value, append=append)
            except OSError:
                pass

    def disarm(self):
        hist = self.s.file(f"{SWITCH}/hist").read_text() if self.kind == "ftrace_hist" else ""
        self._undo()
        if self.kind == "ftrace_hist":
            return parse.hist_stacks(hist, self.depth), 0
        st = ftrace.new_stats()
        text = self.s.file("trace").read_text()
        fn = parse.ftrace_stacks if self.kind == "ftrace_trigger" else parse.function_stacks
        counts = fn(text, self.depth, st)
        return counts, max(st["lost"], self.s.buffer_stats().get("overrun", 0))


class _Bpftrace:
    def __init__(self, ctx):
        self.ctx, self.depth, self.bt = ctx, ctx.p["stack_depth"], None

    def arm(self):
        prog = f"tracepoint:sched:sched_switch {{ @[kstack({self.depth + 4})] = count(); }}"
        self.bt = bpftrace.start(prog, self.ctx.say)
        self.ctx.undo.callback(kill_group, self.bt)  # never an orphan attached to the scheduler

    def disarm(self):
        return parse.bpftrace_stacks(bpftrace.stop(self.bt, self.ctx.say), self.depth), 0


class _Perf:
    def __init__(self, ctx, scratch: Path):
        self.ctx, self.depth, self.out, self.p = (
            ctx,
            ctx.p["stack_depth"],
            scratch / "perf.data",
            None,
        )

    def arm(self):
        self.out.unlink(missing_ok=True)
        # --no-bpf-event: no side-band thread and its 1 s exit wait (as in qcow2_overlap)
        p = subprocess.Popen(
            [
                "perf",
                "record",
                "-q",
                "--no-bpf-event",
                "-a",
                "-g",
                "-e",
                "sched:sched_switch",
                "-o",
                str(self.out),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=interruptible_child,
        )
        self.ctx.undo.callback(kill_group, p)
        self.p, deadline = p, time.monotonic() + 30
        while not (self.out.exists() and self.out.stat().st_size > 0):
            if p.poll() is not None or time.monotonic() > deadline:
                raise PerfbookError("perf record did not start: " + (p.stderr.read() or "")[-300:])
            time.sleep(0.05)
        time.sleep(0.5)  # the output file is written before every CPU's event is enabled

    def disarm(self):
        p = self.p
        try:
            p.send_signal(signal.SIGINT)
            _, err = p.communicate(timeout=120)
        finally:
            kill_group(p)
        r = run_group(
            ["perf", "script", "-i", str(self.out), "-F", "comm,pid,event,ip,sym"], timeout=300
        )
        if r.returncode != 0:
            raise PerfbookError(f"perf script failed: {r.stderr.strip()[-300:]}")
        m = re.search(r"lost (\d+)", err or "")
        self.out.unlink(missing_ok=True)
        return parse.perf_stacks(r.stdout, self.depth), int(m.group(1)) if m else 0


def run_workload(name: str, p: dict, scratch: Path) -> list[float]:
    """Run one workload; hackbench's own seconds per run (other workloads: none)."""
    if name == "sleep":
        r = run_group(["sleep", "1"])
    elif name == "dd":
        f = scratch / "dd.bin"
        r = run_group(
            ["dd", "if=/dev/zero", f"of={f}", "bs=64k", f"count={16 * p['dd_mib']}", "conv=fsync"]
        )
        f.unlink(missing_ok=True)
    else:
        out = []
        for _ in range(p["hackbench_runs"]):
            r = run_group(
                ["hackbench", "-g", str(p["hackbench_groups"]), "-l", str(p["hackbench_loops"])],
                timeout=600,
            )
            if r.returncode != 0:
                raise PerfbookError(f"hackbench failed: {r.stderr.strip()[-300:]}")
            out.append(parse.hackbench_seconds(r.stdout))
        return out
    if r.returncode != 0:
        raise PerfbookError(f"{name} failed: {r.stderr.strip()[-300:]}")
    return []


def measure(ctx) -> None:
    """Measure this host into ctx.writer (the framework publishes it)."""
    p, w = ctx.p, ctx.writer
    scratch = ctx.scratch().dir
    s = ctx.undo.enter_context(TraceSession("schedcall"))
    s.set_option("buffer_size_kb", str(p["buffer_kb"]))
    why = unavailable(s, p["tracers"])
    for t, reason in why.items():
        w.skip(t, reason)
    tracers = ["none"] + [t for t in p["tracers"] if t not in why]
    w.extra["sched_switch_triggers"] = _triggers(s).strip("# ").strip()
    w.extra["_tool_cmds"] = {"bpftrace": ["bpftrace", "--version"]}
    arms = {
        t: (
            _Bpftrace(ctx)
            if t == "bpftrace"
            else _Perf(ctx, scratch)
            if t == "perf"
            else _Ftrace(t, s, ctx)
        )
        for t in tracers
        if t != "none"
    }
    run_workload("hackbench", {**p, "hackbench_runs": 1}, scratch)  # untimed: page cache, caches
    rng = random.Random(p["seed"])
    rep = repetition(EXPERIMENT, tracers, p, "rep_")
    per_round = lambda i: sum(
        1 if t == "none" or i >= p["caller_rounds"] else len(p["workloads"]) for t in tracers
    )
    prog = ctx.progress(sum(per_round(i) for i in range(rep.warmup + rep.min_runs)))
    stacks, runs, sessions = [], [], []
    for rd in rep.rounds():
        if rd.index >= rep.warmup + rep.min_runs:
            prog.total += per_round(rd.index)
        rnd = rd.index - rep.warmup
        order = tracers[:]
        rng.shuffle(order)
        for pos, t in enumerate(order):
            wls = (
                ["hackbench"]
                if t == "none" or rnd < 0 or rnd >= p["caller_rounds"]
                else p["workloads"]
            )
            for wl in wls:
                t0 = time.monotonic()
                if t != "none":
                    arms[t].arm()
                prog.note(f"{t} armed for {wl}" if t != "none" else f"untraced {wl}")
                secs = run_workload(wl, p, scratch)
                counts, lost = arms[t].disarm() if t != "none" else ({}, 0)
                wall = time.monotonic() - t0
                if wl == "hackbench":
                    rep.add(t, statistics.median(secs))
                if not rd.warmup:
                    runs += [
                        {"round": rnd, "position": pos, "tracer": t, "run": i, "seconds": x}
                        for i, x in enumerate(secs)
                    ]
                    stacks += [
                        {
                            "round": rnd,
                            "tracer": t,
                            "workload": wl,
                            "stack": ";".join(k),
                            "count": n,
                        }
                        for k, n in counts.items()
                    ]
                    sessions.append(
                        {
                            "round": rnd,
                            "tracer": t,
                            "workload": wl,
                            "events": sum(counts.values()),
                            "distinct": len(counts),
                            "lost": lost,
                            "wall_s": wall,
                        }
                    )
                prog.step(f"{'warm-up ' if rd.warmup else ''}round {rd.index + 1} {t} {wl}")
    prog.note(f"stopped by {rep.stopped_by}: {rep.status()}")
    w.add_table("repetition", pd.DataFrame(rep.records()))
    w.add_table(
        "stacks", pd.DataFrame(stacks, columns=["round", "tracer", "workload", "stack", "count"])
    )
    w.add_table(
        "runs", pd.DataFrame(runs, columns=["round", "position", "tracer", "run", "seconds"])
    )
    ses = pd.DataFrame(
        sessions, columns=["round", "tracer", "workload", "events", "distinct", "lost", "wall_s"]
    )
    w.add_table("sessions", ses)
    empty = ses[(ses.tracer != "none") & (ses.events == 0)]
    if len(empty):
        w.reject(
            f"{len(empty)} traced session(s) saw no context switch (first: "
            f"{empty.iloc[0].tracer} under {empty.iloc[0].workload})"
        )
