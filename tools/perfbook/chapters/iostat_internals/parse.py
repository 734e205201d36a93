"""iostat_internals: the chapter's vocabulary (the workload phases, the tolerances, the trace
settings and the tables' natural order, shared by collect and analysis) and its parsers: block
tracepoint lines (through perfbook.probes.ftrace) paired into requests, the time-average
occupancy of a window, fio's JSON summary (pure: text and rows in, rows out)."""

from __future__ import annotations

import json
from collections import defaultdict, deque

from perfbook.core.errors import PerfbookError
from perfbook.probes import ftrace

# name -> (how, description). fio phases give fio arguments; "own" phases are ours.
PHASES: dict[str, dict] = {
    "seqread_1m_qd1": {
        "fio": ["--rw=read", "--bs=1M", "--direct=1", "--ioengine=psync"],
        "what": "sequential 1 MiB O_DIRECT reads, one at a time",
    },
    # depth 1 through libaio, like depth 16: the two differ in iodepth alone (key_findings.util
    # compares them; psync at depth 1 against libaio at 16 also compared the engines)
    "randread_4k_qd1": {
        "fio": ["--rw=randread", "--bs=4k", "--direct=1", "--ioengine=libaio", "--iodepth=1"],
        "what": "random 4 KiB O_DIRECT reads, queue depth 1 (libaio)",
    },
    "randread_4k_qd16": {
        "fio": ["--rw=randread", "--bs=4k", "--direct=1", "--ioengine=libaio", "--iodepth=16"],
        "what": "random 4 KiB O_DIRECT reads, queue depth 16 (libaio)",
    },
    "randwrite_4k_qd1": {
        "fio": ["--rw=randwrite", "--bs=4k", "--direct=1", "--ioengine=libaio", "--iodepth=1"],
        "what": "random 4 KiB O_DIRECT writes, queue depth 1 (libaio)",
    },
    "randwrite_4k_qd16": {
        "fio": ["--rw=randwrite", "--bs=4k", "--direct=1", "--ioengine=libaio", "--iodepth=16"],
        "what": "random 4 KiB O_DIRECT writes, queue depth 16 (libaio)",
    },
    "seqwrite_4k_qd16": {
        "fio": [
            "--rw=write",
            "--bs=4k",
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=16",
            "--iodepth_batch_submit=16",
            "--iodepth_batch_complete_min=16",
        ],
        "what": "sequential 4 KiB O_DIRECT writes submitted 16 at a time (merges)",
    },
    "randrw_4k_qd8": {
        "fio": [
            "--rw=randrw",
            "--rwmixread=70",
            "--bs=4k",
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=8",
        ],
        "what": "random 70/30 read/write mix, 4 KiB O_DIRECT, queue depth 8",
    },
    "fsync_4k": {
        "fio": ["--rw=randwrite", "--bs=4k", "--direct=0", "--ioengine=psync", "--fsync=1"],
        "what": "buffered random 4 KiB writes, fsync after each",
    },
    "buffered_seqread": {
        "own": "buffered_read",
        "what": "buffered sequential 128 KiB reads, page cache dropped every pass (readahead)",
    },
    "discard": {
        "own": "discard",
        "what": "punch 1 MiB holes in a preallocated file + fsync (ext4 'discard' mount option)",
    },
}


QUICK_PHASES = ["randread_4k_qd1", "randwrite_4k_qd16", "fsync_4k"]


# The default profile's phases: the two the repeated findings compare (util, aqu), every round,
# and the ones the fsync finding and the prose's merges and splits read, once.
DEFAULT_REPEAT = ["randread_4k_qd1", "randread_4k_qd16"]
DEFAULT_PHASES = [*DEFAULT_REPEAT, "fsync_4k", "seqread_1m_qd1", "seqwrite_4k_qd16"]


# Stated tolerance for "our column agrees with sysstat's" (see the chapter):
# |ours - sysstat| <= TOL_ABS + TOL_REL * max(|ours|, |sysstat|).
TOL_ABS = 0.011  # sysstat prints 2 decimals (0.005) plus one more rounding step


TOL_REL = 0.02  # 1 % from /proc/uptime's 10 ms steps + 1 % for sampling-instant offset


IOSTAT_INTERVAL_S = 1.0  # the interval we give iostat


# An interval of ours is paired with a sysstat report only if our two snapshots are this close
# to one iostat interval apart (and both reports were read at once: backlog 0). sysstat's
# reports come IOSTAT_INTERVAL_S apart (alarm(2)); our snapshots follow them within a
# millisecond: over the 322 intervals of the first three committed datasets they were never
# more than 8.2 ms off (median 0.05 ms). 20 ms of offset is 2 % of the interval, the share of
# TOL_REL; a follower that was stopped or starved is off by far more (a stop of 20 s read 20
# reports within 7 ms).
SPAN_TOL_S = 0.02


TOL_UTIL_JIFFY = 1.0  # %util: plus one jiffy per 1 s interval at HZ=100, the coarsest usual tick


SAMPLER_RT_PRIO = 10


TRACE_PREROLL_S = 0.2  # tracing starts this long before the window's first snapshot


TRACE_POSTROLL_S = 0.02


TRACE_EVENTS = (
    "block/block_io_start",
    "block/block_io_done",
    "block/block_rq_issue",
    "block/block_rq_complete",
)


PHASE_TAIL_S = 0.25  # the steady part of a phase ends this long before its nominal end


TABLES = ("intervals", "windows", "trace_windows", "trace_sample", "phases")


# Each table's natural key: the analysis must not depend on the order rows were written in.
# trace_sample rows are a random sample per window and op; their order within one carries nothing.
ORDER_KEYS = {
    "intervals": ["seq"],
    "windows": ["window", "t_ns"],
    "trace_windows": ["window", "_op"],
    "trace_sample": ["window", "_op"],
    "phases": ["t_start_ns"],
    "repetition": ["experiment", "_key"],
}


OPS = ("all", "read", "write", "discard", "flush")


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
    out = [
        (round(float(ts) * 1e6) * 1000, ev, op_class(rwbs), int(sector), int(nr))  # usec: exact
        for ts, ev, rwbs, sector, nr in ftrace.fields(text, r"block_\w+", _BLOCK_BODY, trace_stats)
    ]
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
    starts, issues = defaultdict(deque), defaultdict(deque)
    d2c_done: dict[tuple, deque] = defaultdict(deque)
    recs = []
    unmatched = {
        "done_without_start": 0,
        "start_without_done": 0,
        "flush_without_start": 0,
        "carried_in_ns": 0,
        "carried_out_ns": 0,
    }

    def edge(t0, t1):
        """Book-keeping for time_in_queue's rule: a request's whole latency counts when it ends."""
        if w0 <= t1 <= w1:
            unmatched["carried_in_ns"] += max(0, w0 - t0)  # waited before the window
        elif t1 > w1 and t0 < w1:
            unmatched["carried_out_ns"] += w1 - max(t0, w0)  # in flight at the end: not yet counted

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
                while issued is not None and issued[0] < t0:  # left over by an earlier request
                    issued = d2c_done[key].popleft() if d2c_done[key] else None
                if w0 <= t <= w1:
                    recs.append(
                        {
                            "op": op,
                            "q2c_ns": t - t0,
                            "d2c_ns": (issued[1] - issued[0]) if issued else None,
                        }
                    )
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
                    unmatched["done_without_start"] += 1  # started before tracing began
                intervals.append((t_first, t))
        elif ev == "block_rq_issue":
            issues[key].append(t)
        elif ev == "block_rq_complete":
            if issues[key]:
                ti = issues[key].popleft()
                d2c_done[key].append((ti, t))
                dev_intervals.append((ti, t))
            elif nr > 0:
                dev_intervals.append((t_first, t))  # issued before tracing began
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


def fio_summary(text: str) -> dict:
    """IOPS and mean latencies from fio's JSON output (the first job)."""
    start = text.find("{")
    try:
        j = json.loads(text[start:]) if start >= 0 else {}
        job = j["jobs"][0]
    except (ValueError, KeyError, IndexError):
        raise PerfbookError("could not parse fio's JSON output") from None
    out = {"fio_version": j.get("fio version")}
    for d in ("read", "write"):
        s = job.get(d, {})
        out[f"fio_{d}_iops"] = s.get("iops", 0.0)
        out[f"fio_{d}_lat_mean_us"] = s.get("lat_ns", {}).get("mean", 0.0) / 1000
        out[f"fio_{d}_clat_mean_us"] = s.get("clat_ns", {}).get("mean", 0.0) / 1000
    return out
