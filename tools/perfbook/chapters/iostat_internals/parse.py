"""iostat_internals: block tracepoint lines (through perfbook.probes.ftrace) paired into requests, and
the time-average occupancy of a window (pure: text and rows in, rows out)."""
from __future__ import annotations

from perfbook.probes import ftrace

# the body of a block_* event (the line itself: perfbook.probes.ftrace): rwbs, sector, nr_sectors kept
_BLOCK_BODY = r"\d+,\d+ (\S+) (?:\d+ )?\([^)\n]*\) (\d+) \+ (\d+)"


def op_class(rwbs: str) -> str:
    """read / write / discard / flush from a tracepoint's rwbs string.

    'F' first means a preflush; an empty preflush write (fsync's 'FWS') is a
    write for the accounting, like the kernel's op_stat_group() sees it.
    """
    if "D" in rwbs:
        return "discard"
    if "R" in rwbs:
        return "read"
    if "W" in rwbs:
        return "write"
    if rwbs.startswith("F"):
        return "flush"
    return "other"


def parse_trace(text: str, trace_stats: dict | None = None) -> list[tuple]:
    """Trace text (any trace options; the mono clock _arm sets prints sec.usec) ->
    [(t_ns, event, op, sector, nr_sectors)]. `trace_stats` (ftrace.new_stats()) receives the
    lost-event counts."""
    out = [(round(float(ts) * 1e6) * 1000, ev, op_class(rwbs), int(sector), int(nr))  # usec: exact
           for ts, ev, rwbs, sector, nr in ftrace.fields(text, r"block_\w+", _BLOCK_BODY, trace_stats)]
    out.sort(key=lambda r: r[0])
    return out


def pair_requests(events: list[tuple], w0: int, w1: int):
    """Match start->done (accounting) and issue->complete (device) per request.

    Tracing runs a little before w0 and after w1 (pre- and post-roll), so a
    request that completes inside [w0, w1] normally has its io_start in the
    trace too. Returns (recs, unmatched, intervals, dev_intervals):
      recs: requests whose io_done lies in [w0, w1] -- the same set diskstats
            counts between the two snapshots -- with q2c_ns (io_start -> io_done,
            what nsecs sums) and d2c_ns (issue -> complete) when seen;
      intervals / dev_intervals: (begin, end) of every request in the
            accounting / device sense, for occupancy over [w0, w1];
      unmatched: counts of requests the trace saw only one end of.
    """
    from collections import defaultdict, deque
    starts, issues = defaultdict(deque), defaultdict(deque)
    d2c_done: dict[tuple, deque] = defaultdict(deque)
    recs = []
    unmatched = {"done_without_start": 0, "start_without_done": 0, "flush_without_start": 0,
                 "carried_in_ns": 0, "carried_out_ns": 0}

    def edge(t0, t1):
        """Book-keeping for time_in_queue's rule: a request's whole latency counts when it ends."""
        if w0 <= t1 <= w1:
            unmatched["carried_in_ns"] += max(0, w0 - t0)      # waited before the window
        elif t1 > w1 and t0 < w1:
            unmatched["carried_out_ns"] += w1 - max(t0, w0)    # in flight at the end: not yet counted
    intervals = []
    dev_intervals = []
    t_first = events[0][0] if events else w0
    t_last = events[-1][0] if events else w1
    for t, ev, op, sector, nr in events:
        key = (op, sector if op != "flush" else 0)
        if ev == "block_io_start":
            starts[key].append(t)
        elif ev == "block_io_done":
            issued = d2c_done[key].popleft() if d2c_done[key] else None
            if starts[key]:
                t0 = starts[key].popleft()
                while issued is not None and issued[0] < t0:    # left over by an earlier request
                    issued = d2c_done[key].popleft() if d2c_done[key] else None
                if w0 <= t <= w1:
                    recs.append({"op": op, "q2c_ns": t - t0,
                                 "d2c_ns": (issued[1] - issued[0]) if issued else None})
                intervals.append((t0, t))
                edge(t0, t)
            elif op == "flush" and issued is not None:
                # the flush machinery's own request: no io_start, but it was issued
                if w0 <= t <= w1:
                    unmatched["flush_without_start"] += 1
                intervals.append((issued[0], t))
                edge(issued[0], t)
            else:
                if w0 <= t <= w1:
                    unmatched["done_without_start"] += 1   # started before tracing began
                intervals.append((t_first, t))
        elif ev == "block_rq_issue":
            issues[key].append(t)
        elif ev == "block_rq_complete":
            if issues[key]:
                ti = issues[key].popleft()
                d2c_done[key].append((ti, t))
                dev_intervals.append((ti, t))
            elif nr > 0:
                dev_intervals.append((t_first, t))     # issued before tracing began
            # else: an empty preflush write finished by the flush machinery; never issued itself
    for q in starts.values():
        for t0 in q:
            if t0 <= w1:
                unmatched["start_without_done"] += 1
            intervals.append((t0, max(t_last, w1)))
            edge(t0, max(t_last, w1) + 1)
    for q in issues.values():
        dev_intervals.extend((ti, max(t_last, w1)) for ti in q)
    return recs, unmatched, intervals, dev_intervals


def occupancy(intervals, w0: int, w1: int) -> tuple[float, float]:
    """(time-average number in flight, fraction of time with >= 1 in flight) over [w0, w1]."""
    span = w1 - w0
    if span <= 0:
        return float("nan"), float("nan")
    edges = []
    total = 0
    for a, b in intervals:
        a, b = max(a, w0), min(b, w1)
        if b > a:
            total += b - a
            edges.append((a, 1))
            edges.append((b, -1))
    edges.sort()
    busy, level, last = 0, 0, w0
    for t, d in edges:
        if level > 0:
            busy += t - last
        level += d
        last = t
    return total / span, busy / span
