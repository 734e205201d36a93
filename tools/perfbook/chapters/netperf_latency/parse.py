"""Text and bytes -> values: netperf -k output, rrbench's summary and sample file, ping's
summary, `ss` listeners, ftrace text of the scheduler tracepoints; and the summaries of a
latency sample (statistics, log-binned histogram). Pure; tested on fixtures."""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from perfbook.probes import ftrace
from perfbook.core.errors import PerfbookError
from .spec import HIST_LO_US, HIST_PER_DECADE


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
    return {"sent": int(c.group(1)), "received": int(c.group(2)),
            "min_us": mn, "mean_us": avg, "max_us": mx, "mdev_us": mdev}


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
        return {k: math.nan for k in ("min_us", "mean_us", "std_us", "p50_us", "p90_us",
                                      "p99_us", "p999_us", "max_us")}
    q = np.percentile(x, [50, 90, 99, 99.9])
    return {"min_us": float(x.min()), "mean_us": float(x.mean()),
            "std_us": float(x.std(ddof=1)) if len(x) > 1 else 0.0,
            "p50_us": float(q[0]), "p90_us": float(q[1]), "p99_us": float(q[2]),
            "p999_us": float(q[3]), "max_us": float(x.max())}


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
