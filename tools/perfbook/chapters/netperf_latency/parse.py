"""The chapter's vocabulary and its text -> values: the paths, protocols, pinning modes, the lab's
addresses, the bins of our histogram and the tolerances fixed in advance; netperf -k output,
rrbench's summary and sample file, ping's summary, `ss` listeners, ftrace text of the scheduler
tracepoints; the summaries of a latency sample (statistics, log-binned histogram); and
netperf's own percentiles, re-implemented (netlib.c HIST_add's buckets, 100 per decade of
integer microseconds, and HIST_get_percentile's rank and interpolation), so that they can be
applied to our exact samples. Pure; tested on fixtures."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from perfbook.core.errors import PerfbookError
from perfbook.probes import ftrace

# ------------------------------------------------------------ the experiment
PATHS = ("loopback", "veth")
PROTOS = ("udp", "tcp")
PINS = ("none", "split", "same")
PIN_HELP = {
    "none": "no pinning (scheduler decides)",
    "split": "client on CPU 0, server on CPU 1",
    "same": "client and server both on CPU 1",
}

VETH_NET = "198.18.7."  # RFC 2544 benchmarking range, only inside our namespaces
CLI_ADDR, SRV_ADDR = VETH_NET + "1", VETH_NET + "2"
# The loopback namespace's lo also carries this address (/32, nothing is sent to it): netperf
# resolves "127.0.0.1" with getaddrinfo(AI_ADDRCONFIG), and glibc (check_pf.c) then returns
# IPv4 results only where some IPv4 address other than 127.0.0.1 exists. The round trips
# still go from 127.0.0.1 to 127.0.0.1.
LO_EXTRA_ADDR = "198.18.6.1"
LATENCY_KEYS = (
    "MIN_LATENCY",
    "MEAN_LATENCY",
    "P50_LATENCY",
    "P90_LATENCY",
    "P99_LATENCY",
    "MAX_LATENCY",
    "STDDEV_LATENCY",
)

# histogram of our samples: log-spaced bins, this many per decade, from 0.1 us
HIST_PER_DECADE = 200
HIST_LO_US = 0.1

SCHED_PINS = ("same", "split")  # the pinning modes of the scheduler-tracepoint runs
SCHED_ROLES = ("server", "client")  # run_rrbench's pids order: sched_stage's rows per pin

CELL = ["host_id", "path", "proto", "pin"]
PCT_ORDER = ["P50", "P90", "P99", "P99.9", "max"]

# The stated tolerance of the cross-validation. netperf and rrbench are run on the same
# path but not on the same transactions, so the comparison allows:
#   q: netperf's own quantization at that value (one histogram bucket + 1 us for its
#      microsecond timestamps, see netperf_bucket_width_us below);
#   s: run-to-run variation and harness differences: REL_TOL of our value, or the range
#      of that percentile over the repetitions of either tool if that is wider (two tools
#      can't be expected to agree better than one tool agrees with itself).
REL_TOL = {"p50": 0.15, "p90": 0.15, "p99": 0.35}

RANK_RULE = (
    "netperf 2.7.0 src/netlib.c HIST_get_percentile: num = (int)(p * total); the "
    "percentile is interpolated inside the bucket holding the num-th smallest integer-us "
    "latency and truncated, so it lies in that bucket's [lower, upper] edges"
)


# ------------------------------------------------------------------- tool output
def parse_kv(text: str) -> dict:
    """netperf -k output: KEY=VALUE lines (anything else, like the banner, is ignored)."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Z][A-Z0-9_]*)=(.*)$", line.strip())
        if m:
            out[m.group(1)] = m.group(2).strip().strip('"')
    return out


def parse_rrbench(text: str) -> dict:
    m = re.search(r"n=(\d+) lost=(\d+) elapsed_ns=(\d+)", text)
    if not m:
        raise PerfbookError(f"rrbench printed no summary line: {text.strip()[-200:]!r}")
    return {"n": int(m.group(1)), "lost": int(m.group(2)), "elapsed_ns": int(m.group(3))}


def parse_ping(text: str) -> dict:
    """iputils ping summary: 'rtt min/avg/max/mdev = a/b/c/d ms' and packet counts."""
    m = re.search(r"=\s*([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+)\s*ms", text)
    c = re.search(r"(\d+) packets transmitted, (\d+) (?:packets )?received", text)
    if not m or not c:
        raise PerfbookError(f"could not parse ping's summary: {text.strip()[-200:]!r}")
    mn, avg, mx, mdev = (float(g) * 1000.0 for g in m.groups())
    return {
        "sent": int(c.group(1)),
        "received": int(c.group(2)),
        "min_us": mn,
        "mean_us": avg,
        "max_us": mx,
        "mdev_us": mdev,
    }


def num(v) -> float:
    """A netperf value as a float (NaN when missing or not a number)."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def rrbench_samples(raw: bytes, name: str = "rrbench output") -> tuple[np.ndarray, np.ndarray]:
    """rrbench's -o file: n uint32 latencies (ns), then n uint16 phases (the start's ns within
    its microsecond)."""
    n = len(raw) // 6
    if n * 6 != len(raw):
        raise PerfbookError(f"{name} has a truncated length {len(raw)}")
    lat = np.frombuffer(raw, dtype=np.uint32, count=n)
    phase = np.frombuffer(raw, dtype=np.uint16, count=n, offset=4 * n)
    return lat, phase


def read_rrbench_file(path: Path) -> tuple[np.ndarray, np.ndarray]:
    return rrbench_samples(Path(path).read_bytes(), f"rrbench output {Path(path).name}")


def wildcard_listeners(ss_output: str) -> list[str]:
    """Local addresses in `ss -Htln` output that listen on every interface (0.0.0.0, *, [::])."""
    out = []
    for line in ss_output.splitlines():
        f = line.split()
        if len(f) >= 4:
            host = f[3].rsplit(":", 1)[0]
            if host in ("0.0.0.0", "*", "[::]", "::", "[::ffff:0.0.0.0]"):
                out.append(f[3])
    return out


# ------------------------------------------------------- scheduler tracepoints
def parse_sched_trace(lines, pids: dict, trace_stats: dict | None = None) -> dict:
    """Wake-up -> on-CPU delays of the harness processes from ftrace text output.

    For each of our pids: a sched_wakeup at t_w, then the next sched_switch with
    next_pid == pid at t_s, gives one delay t_s - t_w (in us; the text trace prints
    microseconds). Returns {role: np.ndarray of delays}. Any trace options parse
    (perfbook.probes.ftrace); `trace_stats` (ftrace.new_stats()) receives the lost-event counts.
    """
    role_of = {int(v): k for k, v in pids.items()}
    pending: dict[int, float] = {}
    out = {r: [] for r in pids}
    for r in ftrace.records(lines, trace_stats):
        if r.event not in ("sched_wakeup", "sched_switch"):
            continue
        t = r.ts * 1e6
        f = ftrace.parse_kv(r.body)
        if r.event == "sched_wakeup":
            pid = int(f.get("pid", -1))
            if pid in role_of:
                pending.setdefault(pid, t)
        else:
            prev = int(f.get("prev_pid", -1))
            if prev in pending:
                # it was woken while still on a CPU: no wait to measure
                pending.pop(prev)
            pid = int(f.get("next_pid", -1))
            if pid in pending:
                out[role_of[pid]].append(t - pending.pop(pid))
    return {k: np.asarray(v, dtype=float) for k, v in out.items()}


# ---------------------------------------------------------------- sample summaries
def sample_stats(lat_ns) -> dict:
    x = np.asarray(lat_ns, dtype=float) / 1000.0
    if len(x) == 0:
        return {
            k: math.nan
            for k in (
                "min_us",
                "mean_us",
                "std_us",
                "p50_us",
                "p90_us",
                "p99_us",
                "p999_us",
                "max_us",
            )
        }
    q = np.percentile(x, [50, 90, 99, 99.9])
    return {
        "min_us": float(x.min()),
        "mean_us": float(x.mean()),
        "std_us": float(x.std(ddof=1)) if len(x) > 1 else 0.0,
        "p50_us": float(q[0]),
        "p90_us": float(q[1]),
        "p99_us": float(q[2]),
        "p999_us": float(q[3]),
        "max_us": float(x.max()),
    }


def log_histogram(lat_ns) -> tuple[np.ndarray, np.ndarray]:
    """(bin index, count) of non-empty log bins; bin k spans
    HIST_LO_US*10**(k/HIST_PER_DECADE) .. HIST_LO_US*10**((k+1)/HIST_PER_DECADE) us."""
    us = np.maximum(np.asarray(lat_ns, dtype=float) / 1000.0, HIST_LO_US)
    k = np.floor(np.log10(us / HIST_LO_US) * HIST_PER_DECADE).astype(np.int64)
    bins, counts = np.unique(k, return_counts=True)
    return bins, counts


def bin_edges_us(k) -> tuple[np.ndarray, np.ndarray]:
    k = np.asarray(k, dtype=float)
    return HIST_LO_US * 10 ** (k / HIST_PER_DECADE), HIST_LO_US * 10 ** ((k + 1) / HIST_PER_DECADE)


# ------------------------------------------------ netperf's histogram (netlib.c)
def netperf_bucket_width_us(us) -> np.ndarray:
    """Width of the netperf histogram bucket holding a latency of `us` microseconds.

    netlib.c HIST_add: 8 decades (1 us .. 100 s), 100 buckets each (hist.h
    HIST_NUM_OF_BUCKET), so the width is a hundredth of the decade: 0.1 us below
    10 us, 1 us for 10..99 us, 10 us for 100..999 us, 100 us for 1..9.99 ms ...
    """
    us = np.maximum(np.asarray(us, dtype=float), 1.0)
    decade = np.floor(np.log10(us))
    return 10.0**decade / 10.0


def netperf_hist_counts(us_int) -> tuple[np.ndarray, int]:
    """Bucket integer-microsecond latencies the way netlib.c HIST_add does.

    Returns (counts[8*100], ridiculous): the 8 decades unit_usec, ten_usec, ...,
    ten_sec laid end to end, and the >= 100 s (or negative) count.
    """
    idx = netperf_bucket_index(us_int)
    ok = idx >= 0
    counts = np.bincount(idx[ok], minlength=800).astype(np.int64)
    return counts, int(np.count_nonzero(~ok))


def netperf_bucket_index(us_int) -> np.ndarray:
    """Flat bucket index (decade * 100 + bucket) under which netlib.c HIST_add files each
    integer-microsecond latency, with its float arithmetic; -1 for negative or >= 100 s."""
    v = np.atleast_1d(np.asarray(us_int, dtype=np.int64))
    out = np.full(v.shape, -1, dtype=np.int64)
    val = v.astype(np.float32)  # netperf divides a float by 10 per decade
    for d in range(8):
        sel = (val >= 0) & (val < 10)
        out[sel] = d * 100 + (val[sel] * 10).astype(np.int64)
        val = np.where(sel | (val < 0), np.float32(np.nan), val / np.float32(10))
    return out


def netperf_bucket_edges(idx) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) edge in us of flat netperf bucket `idx`: bucket i of decade d spans
    i * 10**d / 10 .. (i + 1) * 10**d / 10 (NaN for -1)."""
    idx = np.asarray(idx, dtype=np.int64)
    d, i = np.divmod(idx, 100)
    scale = np.where(idx >= 0, 10.0**d, np.nan)
    return i * scale / 10, (i + 1) * scale / 10


def netperf_rank(total: int, p: float) -> int:
    """netlib.c HIST_get_percentile's rank: num = (int)(percentile * (double)total), C
    truncation of the double product (so 0.29 * 100 gives 28). 1-based: the percentile is
    read in the bucket holding the num-th smallest latency."""
    return int(p * float(total))


def netperf_hist_percentile(counts: np.ndarray, total: int, p: float) -> int:
    """netlib.c HIST_get_percentile, step by step.

    num = (int)(total * p). For each decade in turn, HIST_search_bucket walks its 100
    buckets adding counts; in the first bucket where the running count reaches num it
    interpolates linearly by count inside the bucket and truncates to an integer number
    of microseconds: (int)((i + (num-last)/(current-last)) * scale / 10). A result of 0
    makes netperf go on with the next decade (a quirk we keep); past 100 s it is 1e8.
    """
    num = int(total * p)
    if num == 0:
        return 0
    last = current = 0
    for d in range(8):
        scale = 10.0**d
        r = 0
        for i in range(100):
            last = current
            current += int(counts[d * 100 + i])
            if current >= num:
                if current > last:
                    r = int((i + (num - last) / (current - last)) * scale / 10)
                break
        if r:
            return r
    return int(1e8)


def netperf_style_percentiles(lat_ns, phase_ns=None, ps=(0.5, 0.9, 0.99)) -> dict:
    """Percentiles of our samples as netperf would report them.

    netperf times a transaction with two gettimeofday() stamps (integer us), so a
    latency becomes floor(end_us) - floor(start_us); `phase_ns` (the start's ns
    within its us) reproduces that; without it we truncate.
    """
    us = _netperf_us(lat_ns, phase_ns)
    counts, _ = netperf_hist_counts(us)
    return {p: netperf_hist_percentile(counts, len(us), p) for p in ps}


def _netperf_us(lat_ns, phase_ns=None) -> np.ndarray:
    lat = np.asarray(lat_ns, dtype=np.int64)
    if phase_ns is None:
        return lat // 1000
    return (np.asarray(phase_ns, dtype=np.int64) + lat) // 1000


def netperf_rank_samples(lat_ns, phase_ns=None, ps=(0.5, 0.9, 0.99)) -> dict:
    """Our sample at netperf's own rank: the netperf_rank(n, p)-th smallest latency in
    the integer microseconds netperf would have stamped (as netperf_style_percentiles).

    HIST_get_percentile walks the buckets until the running count reaches that rank, so
    the bucket it interpolates in is the bucket holding this sample, and its result lies
    in that bucket's closed interval (netperf_in_rank_bucket). NaN when the rank is 0.
    """
    us = np.sort(_netperf_us(lat_ns, phase_ns))
    out = {}
    for p in ps:
        k = netperf_rank(len(us), p)
        out[p] = int(us[k - 1]) if k >= 1 else math.nan
    return out


def netperf_in_rank_bucket(value_us, rank_us) -> np.ndarray:
    """Whether netperf's percentile `value_us` lies in the bucket holding the sample at its
    rank `rank_us`, edges included: HIST_search_bucket returns
    (int)((i + (num - last) / (current - last)) * scale / 10) with a fraction in (0, 1],
    i.e. a point of (lower, upper] truncated to an integer, so lower <= value <= upper (the
    upper edge when the rank is the bucket's last sample). Exact: only a defect breaks it."""
    v = np.asarray(value_us, dtype=float)
    r = np.asarray(rank_us, dtype=float)
    ok = np.isfinite(r) & np.isfinite(v)
    idx = np.full(r.shape, -1, dtype=np.int64)
    idx[ok] = netperf_bucket_index(r[ok].astype(np.int64)).reshape(-1)
    lo, hi = netperf_bucket_edges(idx)
    return ok & (idx >= 0) & (lo <= v) & (v <= hi)
