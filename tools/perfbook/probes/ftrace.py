"""The one parser for ftrace's text output (`trace`, `trace_pipe`), for every chapter.

Line layouts understood (kernel/trace/trace_output.c and trace.c, as printed by 6.x):

1. The default context (trace_print_context), then the event text:

       "%16s-%-7d "     comm (right-aligned; may hold spaces and dashes: "CPU 0/TCG",
                        "memfd:sealed-91", "<...>" when the comm is unknown), pid
       "(%7d) "         tgid, only with options/record-tgid ("(-------) " if unknown)
       "[%03d] "        cpu
       "dNhPM"          latency flags, only with options/irq-info: irqs-off, need-resched,
                        hard/softirq, preempt depth, migrate-disable (4 chars on old kernels)
       " %5lu.%06lu: "  sec.usec for the ns clocks (local, global, perf, mono, mono_raw,
                        boot, tai)                                  -> ts: float seconds
       " %12llu: "      the raw count for the other clocks (x86-tsc, counter, uptime)
                                                                    -> ts: int, exact
   A new instance inherits record-tgid and irq-info from the top level, so all four
   combinations occur; all are parsed the same way.
2. options/latency-format (lat_print_generic + lat_print_timestamp, not verbose):
       "%8.8s-%-7d %3d" comm cut to 8 chars, pid, cpu; the flags right after the cpu;
       " %4lldus%c: " usec since the buffer start and a delay mark ("!", "+", "#", ...)
       (ts: float seconds), or " %4lld: " for counter clocks (ts: int). Times are relative:
       attrs['relative'] is True.
3. "CPU:%d [LOST %lu EVENTS]" and "CPU:%d [LOST EVENTS]" (count unknown): the ring buffer
   overwrote events. Counted in attrs['lost'] (events), attrs['lost_by_cpu'] and
   attrs['lost_lines'] (markers; a marker without a count adds to lost_lines only).
4. Comment lines starting with '#' (headers, "##### CPU 1 buffer started ####") and blank
   lines are skipped.

The event text is split as the kernel prints it: "name: fields" gives event=name and
body=fields (trace events, kprobe/uprobe events, tracing_mark_write, trace_printk);
anything else -- the function tracer's "func <-parent", syscall events "sys_x(args)" and
"sys_x -> ret" -- gives event=None and body=the whole text. parse_kv() splits a
"k=v k=v" body.

Not understood, counted in attrs['unparsed']: options/context-info off (no context),
verbose latency format, raw/hex/bin output, the function_graph tracer, and continuation
lines of multi-line bodies. The one multi-line body that is read is the kernel stack trace
(options/stacktrace, options/func_stack_trace, the `stacktrace` event trigger): a record whose
body is "<stack trace>", followed by one " => frame" line per frame, innermost first
(trace_stack_print); stack_traces() returns each with its frames, as printed. Our own instances never print the first three
layouts, whatever the top level inherits to them: perfbook.hoststate.tracefs.readable_format sets their defaults.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import pandas as pd

COLUMNS = ["task", "pid", "tgid", "cpu", "flags", "ts", "event", "body"]

_CTX = re.compile(
    r"^\s*(?P<task>.*?)-(?P<pid>\d+)\s+"
    r"(?:\((?:\s*(?P<tgid>\d+)|-+)\)\s+)?"  # record-tgid
    r"\[(?P<cpu>\d+)\]\s+"
    r"(?:(?P<flags>[^\d\s]\S*)\s+)?"  # irq-info
    r"(?P<ts>\d+(?:\.\d+)?): (?P<text>.*)$"
)
_LAT = re.compile(
    r"^\s*(?P<task>.{0,8}?)-(?P<pid>\d+)\s+(?P<cpu>\d+)(?P<flags>[^\d\s]\S*)\s+"
    r"(?P<ts>\d+)(?P<us>us[ $@*#!+])?: (?P<text>.*)$"
)
_LOST = re.compile(r"^CPU:(\d+) \[LOST (?:(\d+) )?EVENTS\]\s*$")
_EVENT = re.compile(r"^(\w+):(?: (.*))?$")
_KEY = re.compile(r"(?<!\S)(\w+)=")


class Record(NamedTuple):
    task: str
    pid: int
    tgid: int | None
    cpu: int
    flags: str | None
    ts: float | int
    event: str | None
    body: str


def new_stats() -> dict:
    return {"lost": 0, "lost_lines": 0, "lost_by_cpu": {}, "unparsed": 0, "relative": False}


def _lines(text_or_lines) -> Iterable[str]:
    return text_or_lines.splitlines() if isinstance(text_or_lines, str) else text_or_lines


def records(text_or_lines, stats: dict | None = None) -> Iterator[Record]:
    """Yield one Record per trace line of `text_or_lines` (a str, or lines such as an open
    file). `stats` (from new_stats()) is updated with lost events and unparsed lines."""
    st = stats if stats is not None else new_stats()
    for line in _lines(text_or_lines):
        line = line.rstrip("\n")
        if not line.strip() or line.startswith("#"):
            continue
        m = _CTX.match(line)
        lat = False
        if not m:
            m = _LAT.match(line)
            lat = m is not None
        if not m:
            lm = _LOST.match(line)
            if lm:
                st["lost_lines"] += 1
                n = int(lm.group(2)) if lm.group(2) else 0
                st["lost"] += n
                cpu = int(lm.group(1))
                st["lost_by_cpu"][cpu] = st["lost_by_cpu"].get(cpu, 0) + n
            else:
                st["unparsed"] += 1
            continue
        raw = m.group("ts")
        if lat:
            st["relative"] = True
            ts = int(raw) / 1e6 if m.group("us") else int(raw)
        else:
            ts = float(raw) if "." in raw else int(raw)
        text = m.group("text")
        em = _EVENT.match(text)
        event, body = (em.group(1), em.group(2) or "") if em else (None, text)
        tgid = m.groupdict().get("tgid")
        yield Record(
            m.group("task").strip(),
            int(m.group("pid")),
            int(tgid) if tgid else None,
            int(m.group("cpu")),
            m.group("flags"),
            ts,
            event,
            body,
        )


# _CTX for the sec.usec clocks, for one pass over a whole text (fields()): the same layout,
# with blanks that cannot run into the next line
_CTX_ABS = (
    r"^[ \t]*.*?-\d+[ \t]+(?:\((?:[ \t]*\d+|-+)\)[ \t]+)?\[\d+\][ \t]+"
    r"(?:[^\d\s]\S*[ \t]+)?(\d+\.\d+): "
)
_LOST_M = re.compile(r"^CPU:(\d+) \[LOST (?:(\d+) )?EVENTS\][ \t]*$", re.M)


def fields(text: str, events: str, body: str, stats: dict | None = None) -> list[tuple]:
    """[(ts, event, *groups of `body`)] for every record of `text` (a str) whose event name
    matches the regex `events` and whose body starts with a match of the regex `body`, in
    text order: what records() and a body regex give, in one regex pass over the whole text
    instead of two matches and a Record per line (3x faster on the hundreds of thousands of
    block events an iostat trace window holds). Only the sec.usec clocks' layout (ts: the
    printed str, e.g. "12.000345", exact); any other line (counter clocks, the latency
    format's relative times) is skipped, and not counted as unparsed. `stats` gets lost
    events as in records()."""
    rx = re.compile(_CTX_ABS + f"({events}): {body}", re.M)  # re keeps it compiled
    if stats is not None:
        for m in _LOST_M.finditer(text):
            stats["lost_lines"] += 1
            n = int(m.group(2)) if m.group(2) else 0
            stats["lost"] += n
            cpu = int(m.group(1))
            stats["lost_by_cpu"][cpu] = stats["lost_by_cpu"].get(cpu, 0) + n
    return rx.findall(text)


_FRAME = re.compile(r"^ =>\s*(.*?)\s*$")


def stack_traces(text_or_lines, stats: dict | None = None) -> Iterator[tuple[Record, list[str]]]:
    """Yield (record, frames) for every "<stack trace>" record of ftrace text: frames are the
    " => frame" lines after it, innermost first, each the whole text trace_stack_print()
    (kernel/trace/trace_output.c) printed after " => ": the symbol ("func"), with
    options/sym-offset sprint_symbol()'s "func+0x1a/0x40" and " [mod]" for module text, the
    bare address ("0xffffffffc0a01234") where no symbol covers it, and "[FTRACE TRAMPOLINE]"
    for the function tracer's trampoline (6.13 on: FTRACE_TRAMPOLINE_MARKER). Normalising
    them is the caller's business. Other records are skipped; a "<user stack trace>" block
    is skipped too. Frame lines are not counted as unparsed; `stats` gets lost events as in
    records()."""
    st = stats if stats is not None else new_stats()
    cur: tuple[Record, list[str]] | None = None
    for line in _lines(text_or_lines):
        line = line.rstrip("\n")
        fm = _FRAME.match(line)
        if fm:
            if cur is not None:
                cur[1].append(fm.group(1))
            continue
        if cur is not None:
            yield cur
            cur = None
        for rec in records([line], st):
            if rec.event is None and rec.body.strip() == "<stack trace>":
                cur = (rec, [])
    if cur is not None:
        yield cur


def frame(recs: Iterable[Record], stats: dict | None = None):
    """Records -> DataFrame with COLUMNS; tgid is nullable (Int64), ts float64 for sec.usec
    clocks, int64 for counters (object holding Python ints past 2**63). attrs = stats."""
    recs = list(recs)
    df = pd.DataFrame(recs, columns=COLUMNS)
    df["pid"] = df["pid"].astype("int64")
    df["cpu"] = df["cpu"].astype("int64")
    df["tgid"] = pd.array([r.tgid for r in recs], dtype="Int64")
    kinds = {type(r.ts) for r in recs}
    if kinds == {int}:
        big = max(r.ts for r in recs) >= 1 << 63
        df["ts"] = pd.Series([r.ts for r in recs], dtype=object if big else "int64")
    elif kinds == {float} or not kinds:
        df["ts"] = df["ts"].astype("float64")
    else:  # a clock change inside one text
        df["ts"] = pd.Series([r.ts for r in recs], dtype=object)
    df.attrs.update(stats if stats is not None else new_stats())
    return df


def parse_lines(text_or_lines):
    """ftrace text -> DataFrame (see frame()); df.attrs['lost'] > 0 or
    df.attrs['lost_lines'] > 0 means the ring buffer dropped events."""
    st = new_stats()
    return frame(records(text_or_lines, st), st)


def parse_kv(body: str) -> dict[str, str]:
    """'k=v k2=v two' -> {'k': 'v', 'k2': 'v two'}: a value runs to the next ' key='
    (so comms with spaces survive); sched_switch's '==>' separator is dropped. Text
    before the first key, or a body without any key, is kept under '_text'."""
    body = body.replace(" ==> ", " ")
    keys = list(_KEY.finditer(body))
    out: dict[str, str] = {}
    lead = body[: keys[0].start()] if keys else body
    if lead.strip():
        out["_text"] = lead.strip()
    for k, nxt in zip(keys, keys[1:] + [None]):
        out[k.group(1)] = body[k.end() : nxt.start() if nxt else len(body)].strip()
    return out


def lost_note(stats: dict) -> str | None:
    """One line saying events were lost, or None."""
    if not stats.get("lost_lines"):
        return None
    cpus = ", ".join(f"cpu{c}: {n}" for c, n in sorted(stats["lost_by_cpu"].items()))
    return f"ftrace lost {stats['lost']} events ({stats['lost_lines']} markers; {cpus})"
