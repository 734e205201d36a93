"""sched_callers: parsers of each tracer's output (pure text -> stack counts).

Every parser returns a Counter of stacks, each a tuple of kernel function names innermost
first, cut to start at __schedule (or at the first frame a tracer records, where it has no
__schedule) and to `depth` frames. ftrace's text is read with tools.ftrace, the one ftrace parser.
"""
from __future__ import annotations

import re
from collections import Counter

from ... import ftrace
from .spec import TRACING_FRAMES

_OFFSET = re.compile(r"\+0x[0-9a-f]+(?:/0x[0-9a-f]+)?$|\+\d+$")


def frame_name(frame: str) -> str:
    """'__schedule+0x5f8/0x1200' or '__schedule+1560' -> '__schedule'."""
    return _OFFSET.sub("", frame.strip())


def cut(frames, depth: int) -> tuple[str, ...]:
    """Names only, the tracers' own frames dropped, from __schedule outwards, at most `depth`."""
    names = [frame_name(f) for f in frames if f.strip()]
    names = [n for n in names if not n.startswith(TRACING_FRAMES)]
    if "__schedule" in names:
        names = names[names.index("__schedule"):]
    return tuple(names[:depth])


def ftrace_stacks(text: str, depth: int, stats: dict | None = None) -> Counter:
    """The `<stack trace>` records of a private instance's trace (trigger or function tracer)."""
    out: Counter = Counter()
    for _, frames in ftrace.stack_traces(text, stats):
        if frames:
            out[cut(frames, depth)] += 1
    return out


def function_stacks(text: str, depth: int, stats: dict | None = None) -> Counter:
    """The function tracer with func_stack_trace: each hit of schedule() gives a stack that
    starts at its caller's frames; the traced function is put in front when it is missing."""
    out: Counter = Counter()
    for _, frames in ftrace.stack_traces(text, stats):
        names = [frame_name(f) for f in frames]
        if names and names[0] != "schedule":
            names = ["schedule", *names]
        if names:
            out[cut(names, depth)] += 1
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


def bpftrace_stacks(text: str, depth: int) -> Counter:
    """bpftrace's map print: '@[', one frame per line, ']: N'."""
    out: Counter = Counter()
    frames, inside = [], False
    for line in text.splitlines():
        s = line.strip()
        if s == "@[":
            frames, inside = [], True
        elif inside and (m := re.fullmatch(r"\]:\s*(\d+)", s)):
            out[cut(frames, depth)] += int(m.group(1))
            inside = False
        elif inside and s:
            frames.append(s)
    return out


def perf_stacks(text: str, depth: int) -> Counter:
    """`perf script -F comm,pid,event,ip,sym`: a header line per sample, then '\\tADDR SYM'
    lines (kernel frames, then user frames); only kernel frames are kept."""
    out: Counter = Counter()
    frames, inside = [], False
    for line in text.splitlines() + [""]:
        if not line.strip():
            if inside:
                out[cut(frames, depth)] += 1
            frames, inside = [], False
        elif not line[0].isspace():
            if inside:
                out[cut(frames, depth)] += 1
            frames, inside = [], "sched_switch" in line
        elif inside:
            parts = line.split(None, 1)
            if len(parts) == 2 and parts[0].lower().startswith("ffff"):
                frames.append(parts[1].split(" (")[0])
    return out


def hackbench_seconds(stdout: str) -> float:
    """hackbench's 'Time: 0.794' line."""
    m = re.search(r"^Time:\s*([0-9.]+)", stdout, re.M)
    if not m:
        raise ValueError("hackbench printed no 'Time:' line")
    return float(m.group(1))
