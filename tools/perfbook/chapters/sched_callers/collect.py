"""sched_callers: the measurement (the only part of the chapter that touches the host).

Two kinds of session, both with the workload in a child cgroup of the run's cgroup
(perfbook.hoststate.cgroup) and every tracer filtered to it:

* a caller session (the first `caller_rounds` rounds, one per workload): every tracer is armed
  (a seeded shuffle), then the workload runs once, then every tracer is stopped. All of them
  count the same switches: those of the workload's own processes while it ran. `sleep 1` is
  the idle machine the seed watched: its sessions count the idle tasks' switches instead
  (prev_pid == 0), cut by timestamp to the same window, whole milliseconds around the sleep,
  in CLOCK_MONOTONIC for every tracer.
* a probe session (every round, each tracer alone and the untraced baseline, shuffled): one
  tracer armed around `hackbench_runs` hackbench runs; hackbench's own times go to `runs`.

Each tracer's armed window, the counted window and the workload's run are recorded in
`sessions` (CLOCK_MONOTONIC seconds), with the filter used; the analysis compares callers only
over sessions whose tracers counted identical windows. Every change is registered on ctx.undo
right after it is made: the private ftrace instances (TraceSession restores filters, options and
the tracer when it removes them), the triggers, the bpftrace and perf processes, the cgroup.
"""

from __future__ import annotations

import math
import os
import random
import re
import select
import shutil
import signal
import statistics
import subprocess
import time
from contextlib import nullcontext
from pathlib import Path

import pandas as pd

from perfbook.analysis.repetition import repetition
from perfbook.core.errors import PerfbookError
from perfbook.core.proc import interruptible_child, kill_group, run_group
from perfbook.hoststate import bpftrace
from perfbook.hoststate import cgroup as cg
from perfbook.hoststate.tracefs import TraceSession, write_knob
from perfbook.probes import ftrace

from . import parse
from .parse import EXPERIMENT

SWITCH = "events/sched/sched_switch"
FORK = "sched/sched_process_fork"
IDLE_COND = "prev_pid == 0"
SESSION_COLUMNS = [
    "round",
    "tracer",
    "workload",
    "events",
    "distinct",
    "lost",
    "wall_s",
    *parse.WINDOW_COLUMNS,
]


def _phase(ctx, kind: str):
    """ctx.phase(kind) where the framework has it, else nothing."""
    ph = getattr(ctx, "phase", None)
    return ph(kind) if callable(ph) else nullcontext()


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


class Scope:
    """What one session counts: the workload's processes (`cgroup`: the child cgroup they run
    in, or None where the run has none) or, for `idle`, the idle tasks within `cut`."""

    def __init__(self, idle: bool, group: Path | None, rel: str | None):
        self.idle, self.group, self.rel = idle, group, rel
        self.cut: tuple[float, float] | None = None  # idle: the counted window
        self.run: tuple[float, float] | None = None  # the workload's run

    def enter(self) -> None:
        """preexec_fn of the workload: into the cgroup (before it execs, so that every process
        it starts is there too)."""
        if self.group is not None:
            fd = os.open(self.group / "cgroup.procs", os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)


class _Ftrace:
    """The stacktrace trigger, the hist trigger or the function tracer, each in a private
    instance of its own (they coexist: nothing is shared between instances). Scoped to the
    workload with set_event_pid (set_ftrace_pid for the function tracer) and event-fork
    (function-fork), which follow its forks; the trigger's pid filter keeps a switch whose
    prev *or* next task is listed, so the stacks are then kept only for the workload's own
    pids, read from the sched_process_fork records of the same instance."""

    def __init__(self, kind: str, s: TraceSession, ctx):
        self.kind, self.s, self.depth, self.armed = kind, s, ctx.p["stack_depth"], False
        self.spec = None
        s.set_option("buffer_size_kb", str(ctx.p["buffer_kb"]))
        s.set_option("trace_clock", "mono")  # CLOCK_MONOTONIC, as the windows
        ctx.undo.callback(self._undo)  # before the instance goes (the stack unwinds in reverse)

    def filter_text(self, sc: Scope) -> str:
        if sc.idle:
            return "idle" if self.kind != "ftrace_hist" else "idle uncut"
        return ("pids+next:" if self.kind == "ftrace_hist" else "pids:") + (sc.rel or "tree")

    def arm(self, sc: Scope):
        s = self.s
        s.clear()
        self.armed, self.scoped = True, not sc.idle
        cond = f" if {IDLE_COND}" if sc.idle else ""
        if self.scoped:  # this process: the workload's processes are the tasks it forks
            write_knob(s.file("set_event_pid"), str(os.getpid()))
            s.set_trace_options(event_fork=1)
            s.enable(FORK)
            if self.kind == "ftrace_function":
                write_knob(s.file("set_ftrace_pid"), str(os.getpid()))
                s.set_trace_options(function_fork=1)
        if self.kind == "ftrace_trigger":
            self.spec = f"stacktrace{cond}"
            write_knob(s.file(f"{SWITCH}/trigger"), self.spec)
        elif self.kind == "ftrace_hist":
            for key in ("common_stacktrace", "stacktrace"):  # renamed in 6.5
                try:
                    self.spec = f"hist:keys={key}:vals=hitcount:sort=hitcount:size=8192{cond}"
                    write_knob(s.file(f"{SWITCH}/trigger"), self.spec)
                    break
                except OSError:
                    self.spec = None
            if self.spec is None:
                raise PerfbookError("the kernel refused a hist trigger keyed on the stack")
        else:
            if sc.idle:
                write_knob(s.file("set_ftrace_pid"), "0")  # the idle tasks
            write_knob(s.file("set_ftrace_filter"), "schedule")
            s.set_trace_options(func_stack_trace=1)
            s.set_option("current_tracer", "function")
        self.t_on = time.monotonic()

    def _undo(self):
        if not self.armed:
            return
        self.armed = False
        s = self.s
        steps = {
            "ftrace_trigger": [(f"{SWITCH}/trigger", f"!{self.spec}", True)] if self.spec else [],
            "ftrace_hist": [(f"{SWITCH}/trigger", f"!{self.spec}", True)] if self.spec else [],
            "ftrace_function": [
                ("current_tracer", "nop", False),
                ("options/func_stack_trace", "0", False),
                ("set_ftrace_filter", "", False),
                ("options/function-fork", "0", False),
                ("set_ftrace_pid", "", False),
            ],
        }[self.kind]
        steps += [("options/event-fork", "0", False), ("set_event_pid", "", False)]
        for name, value, append in steps:
            try:
                write_knob(s.file(name), value, append=append)
            except OSError:
                pass
        try:
            s.disable(FORK)
        except OSError:
            pass

    def stop(self):
        self.t_off = time.monotonic()
        self.hist = self.s.file(f"{SWITCH}/hist").read_text() if self.kind == "ftrace_hist" else ""
        self._undo()

    def read(self, sc: Scope):
        if self.kind == "ftrace_hist":
            return parse.hist_stacks(self.hist, self.depth), 0
        st = ftrace.new_stats()
        text = self.s.file("trace").read_text()
        # the tasks this process forked while the workload ran, and their descendants
        pids = parse.fork_tree(text, os.getpid(), sc.run) if self.scoped else None
        fn = parse.ftrace_stacks if self.kind == "ftrace_trigger" else parse.function_stacks
        counts = fn(text, self.depth, st, pids=pids, window=sc.cut)
        return counts, max(st["lost"], self.s.buffer_stats().get("overrun", 0))


class _Bpftrace:
    def __init__(self, ctx):
        self.ctx, self.depth, self.bt = ctx, ctx.p["stack_depth"], None

    def filter_text(self, sc: Scope) -> str:
        return "idle" if sc.idle else f"cgroup:{sc.rel}" if sc.group else "none"

    def arm(self, sc: Scope):
        k = f"kstack({self.depth + 4})"
        if sc.idle:  # per millisecond of CLOCK_MONOTONIC, cut to the window afterwards
            body = f"/args->prev_pid == 0/ {{ @[{k}, nsecs / 1000000] = count(); }}"
        elif sc.group is not None:
            body = f'/cgroup == cgroupid("{sc.group}")/ {{ @[{k}] = count(); }}'
        else:
            body = f"{{ @[{k}] = count(); }}"
        prog = f'tracepoint:sched:sched_switch {body} BEGIN {{ printf("armed\\n"); }}'
        self.bt = bpftrace.start(prog, self.ctx.say)
        self.ctx.undo.callback(kill_group, self.bt)  # never an orphan attached to the scheduler
        while True:  # BEGIN runs once every probe is attached
            line = self.bt.stdout.readline()
            if not line:
                raise PerfbookError("bpftrace exited before its BEGIN probe ran")
            if line.strip() == "armed":
                break
        self.t_on = time.monotonic()

    def stop(self):
        self.t_off = time.monotonic()
        self.text = bpftrace.stop(self.bt, self.ctx.say)

    def read(self, sc: Scope):
        ms = (round(sc.cut[0] * 1000), round(sc.cut[1] * 1000)) if sc.idle else None
        return parse.bpftrace_stacks(self.text, self.depth, window_ms=ms), 0


class _Perf:
    """perf record started with its events disabled (-D -1) and switched on and off through
    its control FIFO, whose ack marks the window's start and end."""

    def __init__(self, ctx, scratch: Path):
        self.ctx, self.depth, self.dir, self.p = ctx, ctx.p["stack_depth"], scratch, None
        self.out, self.ctl, self.ack = scratch / "perf.data", None, None

    def filter_text(self, sc: Scope) -> str:
        return "idle" if sc.idle else f"cgroup:{sc.rel}" if sc.group else "none"

    def _command(self, cmd: str, deadline: float):
        os.write(self.ctl, f"{cmd}\n".encode())
        got = b""
        while b"ack" not in got:
            left = deadline - time.monotonic()
            if left <= 0 or self.p.poll() is not None:
                raise PerfbookError(f"perf record did not acknowledge '{cmd}'")
            if select.select([self.ack], [], [], min(left, 0.2))[0]:
                got += os.read(self.ack, 64) or b""

    def arm(self, sc: Scope):
        self.out.unlink(missing_ok=True)
        ctl, ack = self.dir / "perf.ctl", self.dir / "perf.ack"
        for f in (ctl, ack):
            f.unlink(missing_ok=True)
            os.mkfifo(f)
        sel = ["--filter", IDLE_COND] if sc.idle else ["-G", sc.rel] if sc.group else []
        # --no-bpf-event: no side-band thread and its 1 s exit wait (as in qcow2_overlap)
        cmd = ["perf", "record", "-q", "--no-bpf-event", "-a", "-g", "-k", "CLOCK_MONOTONIC"]
        cmd += ["-e", "sched:sched_switch", *sel, "-D", "-1"]
        cmd += ["--control", f"fifo:{ctl},{ack}", "-o", str(self.out)]
        self.p = p = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=interruptible_child,
        )
        self.ctx.undo.callback(kill_group, p)
        self.ack = os.open(ack, os.O_RDONLY | os.O_NONBLOCK)
        self.ctx.undo.callback(self._close)
        deadline = time.monotonic() + 30
        while True:  # perf opens the control FIFO once its events are set up
            try:
                self.ctl = os.open(ctl, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError:
                if p.poll() is not None or time.monotonic() > deadline:
                    kill_group(p)
                    raise PerfbookError(
                        "perf record did not start: " + (p.stderr.read() or "")[-300:]
                    ) from None
                time.sleep(0.02)
        self._command("enable", deadline)
        self.t_on = time.monotonic()

    def _close(self):
        for name in ("ctl", "ack"):
            fd = getattr(self, name, None)
            setattr(self, name, None)
            if fd is not None:
                os.close(fd)

    def stop(self):
        self.t_off = time.monotonic()
        p = self.p
        try:
            self._command("disable", time.monotonic() + 30)
            p.send_signal(signal.SIGINT)
            _, self.err = p.communicate(timeout=120)
        finally:
            kill_group(p)
            self._close()

    def read(self, sc: Scope):
        r = run_group(
            ["perf", "script", "-i", str(self.out), "-F", "comm,pid,time,event,ip,sym"],
            timeout=300,
        )
        if r.returncode != 0:
            raise PerfbookError(f"perf script failed: {r.stderr.strip()[-300:]}")
        m = re.search(r"lost (\d+)", self.err or "")
        self.out.unlink(missing_ok=True)
        counts = parse.perf_stacks(r.stdout, self.depth, window=sc.cut)
        return counts, int(m.group(1)) if m else 0


def run_workload(name: str, p: dict, scratch: Path, enter=()) -> list[float]:
    """Run one workload, each process after calling `enter` (into its cgroup) before it execs; hackbench's own seconds per run (other workloads: none)."""

    def pre():
        for f in enter:
            f()

    kw = {"preexec_fn": pre} if enter else {}
    if name == "sleep":
        r = run_group(["sleep", "1"], **kw)
    elif name == "dd":
        f = scratch / "dd.bin"
        r = run_group(
            ["dd", "if=/dev/zero", f"of={f}", "bs=64k", f"count={16 * p['dd_mib']}", "conv=fsync"],
            **kw,
        )
        f.unlink(missing_ok=True)
    else:
        out = []
        for _ in range(p["hackbench_runs"]):
            r = run_group(
                ["hackbench", "-g", str(p["hackbench_groups"]), "-l", str(p["hackbench_loops"])],
                timeout=600,
                **kw,
            )
            if r.returncode != 0:
                raise PerfbookError(f"hackbench failed: {r.stderr.strip()[-300:]}")
            out.append(parse.hackbench_seconds(r.stdout))
        return out
    if r.returncode != 0:
        raise PerfbookError(f"{name} failed: {r.stderr.strip()[-300:]}")
    return []


def _workload_cgroup(ctx) -> tuple[Path | None, str | None]:
    """A child cgroup of the run's own (perfbook-run-<pid>) for the workloads, removed on undo;
    (None, None) where the run has no cgroup of its own."""
    root, here = cg.mount(), cg.current()
    if root is None or here is None or not here.lstrip("/").startswith(cg.PREFIX):
        return None, None
    g = root / here.lstrip("/") / "sched_callers"
    try:
        if g.exists():
            cg.kill_all(g)
            cg.remove(g)
        g.mkdir()
    except OSError as e:
        ctx.say(f"no workload cgroup ({e.strerror}): the tracers are not scoped to it")
        return None, None

    def gone():
        cg.kill_all(g)
        cg.remove(g)

    ctx.undo.callback(gone)
    return g, str(g.relative_to(root))


def session(ctx, arms: dict, wl: str, scope: Scope, order: list[str], scratch: Path, prog):
    """Arm `order`'s tracers, run the workload once, stop them all, read each one's counts.
    -> (hackbench seconds, {tracer: (counts, lost)}, session row fields per tracer)."""
    p = ctx.p
    t0 = time.monotonic()
    on = [arms[t] for t in order]
    with _phase(ctx, "setup"):
        for t in order:
            arms[t].arm(scope)
            prog.note(f"{t} armed for {wl}")
    if not order:
        prog.note(f"untraced {wl}")
    with _phase(ctx, "measured"):
        ws = time.monotonic()
        secs = run_workload(wl, p, scratch, [scope.enter])
        we = time.monotonic()
    scope.run = (ws, we)
    if scope.idle:  # the whole milliseconds of the run, the same cut for every tracer
        scope.cut = (math.ceil(ws * 1000) / 1000, math.floor(we * 1000) / 1000)
    with _phase(ctx, "setup"):  # stopping the tracers, reading their counts
        for a in reversed(on):
            a.stop()
        out, fields = {}, {}
        for t in order:
            a = arms[t]
            counts, lost = a.read(scope)
            out[t] = (counts, lost)
            if scope.cut is not None:
                lo, hi = max(a.t_on, scope.cut[0]), min(a.t_off, scope.cut[1])
            elif scope.group is not None or not scope.idle and isinstance(a, _Ftrace):
                lo, hi = max(a.t_on, ws), min(a.t_off, we)  # nothing counts outside the run
            else:
                lo, hi = a.t_on, a.t_off
            fields[t] = {
                "filter": a.filter_text(scope),
                "armed_start": a.t_on,
                "armed_end": a.t_off,
                "window_start": lo,
                "window_end": hi,
                "workload_start": ws,
                "workload_end": we,
            }
    wall = time.monotonic() - t0
    if not order:
        fields["none"] = {
            "filter": "",
            "workload_start": ws,
            "workload_end": we,
            **dict.fromkeys(["armed_start", "armed_end", "window_start", "window_end"], math.nan),
        }
        out["none"] = ({}, 0)
    return secs, out, fields, wall


def measure(ctx) -> None:
    """Measure this host into ctx.writer (the framework publishes it)."""
    p, w = ctx.p, ctx.writer
    scratch = ctx.scratch().dir
    s = ctx.undo.enter_context(TraceSession("schedcall", log=ctx.say))
    why = unavailable(s, p["tracers"])
    for t, reason in why.items():
        w.skip(t, reason)
    tracers = [t for t in p["tracers"] if t not in why]
    w.extra["sched_switch_triggers"] = _triggers(s).strip("# ").strip()
    w.extra["_tool_cmds"] = {"bpftrace": ["bpftrace", "--version"]}
    group, rel = _workload_cgroup(ctx)
    w.extra["workload_cgroup"] = rel or "none"

    def make(t):
        if t == "bpftrace":
            return _Bpftrace(ctx)
        if t == "perf":
            return _Perf(ctx, scratch)
        own = s if t == "ftrace_trigger" else ctx.undo.enter_context(TraceSession(t, log=ctx.say))
        return _Ftrace(t, own, ctx)

    arms = {t: make(t) for t in tracers}
    keys = ["none", *tracers]
    with _phase(ctx, "warmup"):  # untimed: page cache, caches
        run_workload(
            "hackbench", {**p, "hackbench_runs": 1}, scratch, [Scope(False, group, rel).enter]
        )
    rng = random.Random(p["seed"])
    rep = repetition(EXPERIMENT, keys, p, "rep_")
    per_round = lambda i: len(keys) + (len(p["workloads"]) if 0 <= i < p["caller_rounds"] else 0)
    prog = ctx.progress(sum(per_round(i - rep.warmup) for i in range(rep.warmup + rep.min_runs)))
    stacks, runs, sessions, sid = [], [], [], 0

    def keep(rnd, wl, out, fields, wall):
        for t, (counts, lost) in out.items():
            stacks.extend(
                {"round": rnd, "tracer": t, "workload": wl, "stack": ";".join(k), "count": n}
                | {"session": sid}
                for k, n in counts.items()
            )
            sessions.append(
                {
                    "round": rnd,
                    "tracer": t,
                    "workload": wl,
                    "events": sum(counts.values()),
                    "distinct": len(counts),
                    "lost": lost,
                    "wall_s": wall,
                    "session": sid,
                    **fields[t],
                }
            )

    for rd in rep.rounds():
        rnd = rd.index - rep.warmup
        if rd.index >= rep.warmup + rep.min_runs:
            prog.total += per_round(rnd)
        if 0 <= rnd < p["caller_rounds"] and tracers:
            for wl in p["workloads"]:  # every tracer on one window
                order = tracers[:]
                rng.shuffle(order)
                sc = Scope(wl == "sleep", group, rel)
                _, out, fields, wall = session(ctx, arms, wl, sc, order, scratch, prog)
                keep(rnd, wl, out, fields, wall)
                sid += 1
                prog.step(f"round {rnd + 1} {wl} under every tracer")
        order = keys[:]
        rng.shuffle(order)
        for pos, t in enumerate(order):  # each tracer alone: the probe effect
            sc = Scope(False, group, rel)
            on = [] if t == "none" else [t]
            secs, out, fields, wall = session(ctx, arms, "hackbench", sc, on, scratch, prog)
            rep.add(t, statistics.median(secs))
            if not rd.warmup:
                runs += [
                    {"round": rnd, "position": pos, "tracer": t, "run": i, "seconds": x}
                    for i, x in enumerate(secs)
                ]
                keep(rnd, "hackbench", out, fields, wall)
            sid += 1
            prog.step(f"{'warm-up ' if rd.warmup else ''}round {rd.index + 1} {t} hackbench")
    prog.note(f"stopped by {rep.stopped_by}: {rep.status()}")
    w.add_table("repetition", pd.DataFrame(rep.records()))
    w.add_table(
        "stacks",
        pd.DataFrame(stacks, columns=["round", "tracer", "workload", "stack", "count", "session"]),
    )
    w.add_table(
        "runs", pd.DataFrame(runs, columns=["round", "position", "tracer", "run", "seconds"])
    )
    ses = pd.DataFrame(sessions, columns=SESSION_COLUMNS)
    w.add_table("sessions", ses)
    empty = ses[(ses.tracer != "none") & (ses.events == 0) & (ses.workload == "hackbench")]
    if len(empty):
        w.reject(
            f"{len(empty)} traced hackbench session(s) saw no context switch (first: "
            f"{empty.iloc[0].tracer}, round {empty.iloc[0]['round']})"
        )
