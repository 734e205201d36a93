"""sched_callers: parsers of each tracer's output (pure text -> stack counts).

Every parser returns a Counter of stacks, each a tuple of kernel function names innermost
first, cut to start at __schedule (or at the first frame a tracer records, where it has no
__schedule) and to `depth` frames. ftrace's text is read with perfbook.probes.ftrace, the one ftrace parser.

A parser knows its tool's layout only; the frames it finds go, as the tool printed them, to
cut(), the one place they are normalised (frame_name()), so that every tracer's stacks are
counted on the same terms. The analysis takes the names as stored and normalises nothing again.
What the tools print for a frame (the kernel's and the tools' source; tests/test_sched_callers.py
quotes each layout):

  ftrace "<stack trace>" (trace_output.c trace_stack_print, seq_print_ip_sym): "sym"; with
      options/sym-offset "sym+0x1f/0x80", and " [mod]" after a module's symbol; "0xffffffffc0a01234"
      where no symbol covers the address; "[FTRACE TRAMPOLINE]" for the function tracer's
      trampoline (6.13 on; see function_stacks() for earlier kernels).
  hist trigger (trace_events_hist.c, "%pS"): "sym+0x1f/0x80", "sym+0x4e/0xa0 [mod]", "0x...".
  bpftrace kstack (resolve_ksym): "sym+31" (a decimal offset, never a module), "0x...".
  perf script -F ip,sym (evsel_fprintf.c sample__fprintf_callchain): "sym", "[unknown]" (or
      "[0x...]"), "sym+0x1f" with -F symoff, " (dso)" with -F dso, and " (inlined)" after an
      inlined function's entry (perf_stacks()).

The common terms, applied once: a frame is the function's symbol alone, without offset, size
or module (only some tracers print them, and the same function reached at two return addresses
is one caller); an address no tracer could name is "[unknown]"; a symbol's compiler suffix
(".constprop.0", ".isra.0", ".cold") stays, since every tracer prints the same kallsyms name.
Two kinds of frame are no caller and are dropped: the ftrace trampoline (the tracer's own code)
and perf's inlined entries. An inlined function leaves no return address of its own: ftrace,
the hist trigger and bpftrace name the out-of-line function whose code holds the address, and
perf, where it finds debug info for the kernel (--inline is on by default), lists the inlined
functions at that address first and that same out-of-line function after them. Dropping the
inlined entries gives every tracer the same caller.
"""

from __future__ import annotations

import re
from collections import Counter

from perfbook.probes import ftrace

# tracer -> what it is. Each one counts the kernel stacks at a context switch (or at a call of
# schedule()) of the workload's own processes (its cgroup; the idle tasks for sleep), while it
# runs; "none" is the untraced baseline of the probe effect.
TRACERS: dict[str, str] = {
    "none": "nothing armed (the baseline of the probe effect)",
    "ftrace_function": "function tracer in a private instance, set_ftrace_filter=schedule, "
    "options/func_stack_trace",
    "ftrace_hist": "hist trigger on sched:sched_switch keyed on the kernel stack (in-kernel counting)",
    "ftrace_trigger": "`stacktrace` trigger on sched:sched_switch: one stack per switch into a "
    "private instance's ring buffer",
    "bpftrace": "bpftrace: tracepoint:sched:sched_switch /cgroup == cgroupid(...)/ "
    "{ @[kstack(N)] = count(); }",
    "perf": "perf record -a -g -e sched:sched_switch -G <cgroup>, switched on and off through "
    "its control FIFO, then perf script",
    "dynevent": "fprobe or kprobe dynamic event on schedule with a stack trace",
}
DEFAULT_TRACERS = tuple(t for t in TRACERS if t != "none")

# workload -> what it does (collect builds the command line from the parameters)
WORKLOADS: dict[str, str] = {
    "sleep": "sleep 1 (the seed's first workload: an idle machine for one second)",
    "dd": "dd of a few MiB from /dev/zero to a scratch file with conv=fsync (a write and a flush)",
    "hackbench": "hackbench -g N from rt-tests (the seed's second workload: N groups of 20 "
    "senders and 20 receivers over sockets)",
}
EXPERIMENT = "hackbench seconds"
# what the sessions table records of each session's window (CLOCK_MONOTONIC) and filter; optional:
# datasets older than the one-window design lack them
WINDOW_COLUMNS = (
    "session",
    "filter",
    "armed_start",
    "armed_end",
    "window_start",
    "window_end",
    "workload_start",
    "workload_end",
)

# frames a tracer's own machinery puts above the scheduler: dropped before counting
TRACING_FRAMES = (
    "trace_event_raw_event_",
    "__traceiter_",
    "perf_trace_",
    "__bpf_trace_",
    "bpf_trace_run",
    "__perf_event_overflow",
    "perf_tp_event",
    "event_triggers_call",
    "trace_event_buffer_commit",
    "stacktrace_trigger",
    "__trace_stack",
)

# entry points into __schedule(): the function that called it
ENTRIES = {
    "schedule": "schedule(): a task blocks or yields (what the seed probed)",
    "schedule_idle": "schedule_idle(): the idle loop (do_idle) hands the CPU over, without schedule()",
    "__cond_resched": "cond_resched(): a voluntary preemption point, straight into __schedule",
    "preempt_schedule_irq": "preemption on return from an interrupt to kernel code",
    "preempt_schedule_common": "preempt_enable() found need_resched set",
    "preempt_schedule": "preempt_enable() found need_resched set",
    "preempt_schedule_notrace": "preempt_enable_notrace() found need_resched set",
    "schedule_rtlock": "a sleeping spinlock (PREEMPT_RT)",
    "do_task_dead": "do_task_dead(): an exiting task's last switch, straight into __schedule",
}

UNKNOWN = "[unknown]"
TRAMPOLINE = "[FTRACE TRAMPOLINE]"
INLINED = " (inlined)"
_OFFSET = re.compile(r"\+(?:0x[0-9a-f]+(?:/0x[0-9a-f]+)?|\d+)$")
_SUFFIX = re.compile(r"\s+(?:\[[^\]]*\]|\([^)]*\))$")  # " [mod]" (kernel), " (dso)" (perf)
_ADDRESS = re.compile(r"^(?:0x[0-9a-f]+|\[0x[0-9a-f]+\]|\[unknown\])$")


def frame_name(frame: str) -> str | None:
    """One frame as a tracer printed it -> the function's name on the common terms (see the
    module's docstring), or None for a frame that is no caller: the ftrace trampoline, perf's
    inlined entries, an empty frame. '__schedule+0x5f8/0x1200', '__schedule+1560',
    'nvme_poll_cq+0x4e/0xa0 [nvme]' -> the name; '0xffffffffc0a01234', '[unknown]' -> '[unknown]'."""
    f = frame.strip()
    if not f or f == TRAMPOLINE or f.endswith(INLINED):
        return None
    f = _SUFFIX.sub("", f)
    return UNKNOWN if _ADDRESS.match(f) else _OFFSET.sub("", f)


def cut(frames, depth: int, traced: str | None = None) -> tuple[str, ...]:
    """Frames as printed -> names (frame_name(), the one normalisation), the tracers' own
    frames dropped, from __schedule outwards, at most `depth`. `traced`: the function whose
    calls a tracer reports (it has no __schedule frame); put in front where the stack lacks it."""
    names = [n for n in map(frame_name, frames) if n is not None]
    names = [n for n in names if not n.startswith(TRACING_FRAMES)]
    if traced is not None and names and names[0] != traced:
        names = [traced, *names]
    if "__schedule" in names:
        names = names[names.index("__schedule") :]
    return tuple(names[:depth])


def _kept(rec, pids, window) -> bool:
    """A record of the scope: its task among `pids` (None: any), its time within `window`
    ([start, end) in the trace clock's seconds; None: any)."""
    if pids is not None and rec.pid not in pids:
        return False
    return window is None or window[0] <= float(rec.ts) < window[1]


def fork_tree(text: str, parent: int, window=None) -> set[int]:
    """The workload's pids: the tasks `parent` forked within `window` ([start, end) in the
    trace clock's seconds; None: any time), and every task one of them forked, from the
    sched_process_fork records of a trace ('comm=sh pid=1 child_comm=sh child_pid=2'), in the
    order they were written. `parent` itself, and what it forked outside the window (a
    tracer it started), are not among them."""
    tree: set[int] = set()
    for rec in ftrace.records(text):
        if rec.event != "sched_process_fork":
            continue
        kv = ftrace.parse_kv(rec.body)
        try:
            dad, child = int(kv["pid"]), int(kv["child_pid"])
        except (KeyError, ValueError):
            continue
        if dad in tree or dad == parent and _kept(rec, None, window):
            tree.add(child)
    return tree


def ftrace_stacks(
    text: str, depth: int, stats: dict | None = None, pids=None, window=None
) -> Counter:
    """The `<stack trace>` records of a private instance's trace (trigger or function tracer),
    those of `pids` within `window` only (_kept)."""
    out: Counter = Counter()
    for rec, frames in ftrace.stack_traces(text, stats):
        if frames and _kept(rec, pids, window):
            out[cut(frames, depth)] += 1
    return out


def function_stacks(
    text: str, depth: int, stats: dict | None = None, pids=None, window=None
) -> Counter:
    """The function tracer with func_stack_trace: each hit of schedule() gives a stack whose
    first frame is the return address into the tracer's trampoline (the instance's ftrace_ops
    calls the tracer from there), then schedule's caller. 6.13 on (and 6.12.y) print that frame
    as "[FTRACE TRAMPOLINE]" (FTRACE_TRAMPOLINE_MARKER, which frame_name() drops); earlier
    kernels as a bare address ("0xffffffffc03e10a4": kallsyms_lookup() has no name for a
    trampoline, which only /proc/kallsyms lists), dropped here as the first frame. The traced
    function is put in front when it is missing. `pids`, `window`: as ftrace_stacks."""
    out: Counter = Counter()
    for rec, frames in ftrace.stack_traces(text, stats):
        if not _kept(rec, pids, window):
            continue
        if frames and frame_name(frames[0]) == UNKNOWN:
            frames = frames[1:]
        names = cut(frames, depth, traced="schedule")
        if names:
            out[names] += 1
    return out


def hist_stacks(text: str, depth: int) -> Counter:
    """A hist trigger's `hist` file keyed on common_stacktrace (stacktrace before 6.5):
    '{ common_stacktrace:', one frame per line, '} hitcount: N'."""
    out: Counter = Counter()
    frames, inside = [], False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("{") and "stacktrace:" in s:
            frames, inside = [], True
            continue
        if inside and s.startswith("}"):
            m = re.search(r"hitcount:\s*(\d+)", s)
            if m:
                out[cut(frames, depth)] += int(m.group(1))
            inside = False
            continue
        if inside and s:
            frames.append(s)
    return out


def bpftrace_stacks(text: str, depth: int, window_ms=None) -> Counter:
    """bpftrace's map print: '@[', one frame per line, ']: N'; with a second key (the
    millisecond of CLOCK_MONOTONIC, nsecs / 1000000) the last line is ', 123456]: N', and
    `window_ms` ([first, end) in milliseconds) keeps the entries within it."""
    out: Counter = Counter()
    frames, inside = [], False
    for line in text.splitlines():
        s = line.strip()
        if s == "@[":
            frames, inside = [], True
        elif inside and (m := re.fullmatch(r"(?:,\s*(\d+))?\]:\s*(\d+)", s)):
            ms = int(m.group(1)) if m.group(1) else None
            if window_ms is None or ms is not None and window_ms[0] <= ms < window_ms[1]:
                out[cut(frames, depth)] += int(m.group(2))
            inside = False
        elif inside and s:
            frames.append(s)
    return out


_PERF_TIME = re.compile(r"\s(\d+\.\d+):\s")


def perf_stacks(text: str, depth: int, window=None) -> Counter:
    """`perf script -F comm,pid,event,ip,sym` (tools/perf/util/evsel_fprintf.c
    sample__fprintf_callchain): a header line per sample, then one '\\t%16lx SYM' line per
    frame (kernel frames, then user frames); only kernel frames are kept, SYM as printed (with
    ' (inlined)' for an inlined function's entry). With -F srcline each frame line is followed
    by '  file:line', and an inlined entry's ' (inlined)' comes after that line instead: it is
    moved back onto its frame. With -F time the header holds the sample's time ('1234.567890:'),
    and `window` ([start, end) seconds) keeps the samples within it."""
    out: Counter = Counter()
    frames, inside, kernel = [], False, False
    for line in text.splitlines() + [""]:
        if not line.strip() or not line[0].isspace():  # a blank line or the next header
            if inside:
                out[cut(frames, depth)] += 1
            frames, inside = [], bool(line.strip()) and "sched_switch" in line
            if inside and window is not None:
                m = _PERF_TIME.search(line)
                inside = bool(m) and window[0] <= float(m.group(1)) < window[1]
        elif inside and line.startswith("\t"):
            ip, _, sym = line.strip().partition(" ")
            kernel = ip.lower().startswith("ffff")
            if kernel:
                frames.append(sym)
        elif inside and kernel and line.rstrip().endswith(INLINED) and frames:  # its srcline
            frames[-1] += INLINED
    return out


def hackbench_seconds(stdout: str) -> float:
    """hackbench's 'Time: 0.794' line."""
    m = re.search(r"^Time:\s*([0-9.]+)", stdout, re.M)
    if not m:
        raise ValueError("hackbench printed no 'Time:' line")
    return float(m.group(1))
