"""Network round-trip latency with netperf's omni RR test, and our own RR harness.

What `collect` does, on this host:
  * paths: loopback (127.0.0.1 in the host's namespace) and a veth pair between two
    network namespaces it creates (perfbook_<pid>_cli, perfbook_<pid>_srv, addresses
    from the RFC 2544 benchmarking range 198.18.0.0/15 that exist only inside them);
  * protocols: UDP and TCP request/response (1-byte request and response by default);
  * CPU pinning: none, client and server on different CPUs ("split"), both on one
    CPU ("same");
  * two instruments on each cell, interleaved: tools/c/rrbench.c, which keeps every
    transaction's latency in ns, and netperf -t omni -d rr -j -k all (netserver is
    started by us, in the foreground, on a free port, and always stopped);
  * ping -f on each path, as the in-kernel round trip the seed compares against.

Everything it creates (namespaces, veth, netserver and harness processes) is removed
on success, failure, SIGINT and SIGTERM. A namespace left by a SIGKILLed run is swept
at the next start (its name carries the dead owner's pid).

netperf's percentiles come from a histogram (src/netlib.c HIST_add /
HIST_get_percentile, 100 buckets per decade of integer microseconds); `netperf_hist_*`
below re-implements that bucketing so it can be applied to our exact samples.
"""
from __future__ import annotations

import contextlib
import math
import os
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from . import ftrace
from .errors import MissingPrerequisite, ParameterError, PerfbookError
from .proc import pid_alive
from .stats import repetition, repetition_settings

CHAPTER = "netperf_latency"
TITLE = "Network round-trip latency with netperf"

PATHS = ("loopback", "veth")
PROTOS = ("udp", "tcp")
PINS = ("none", "split", "same")
PIN_HELP = {"none": "no pinning (scheduler decides)",
            "split": "client on CPU 0, server on CPU 1",
            "same": "client and server both on CPU 1"}

# Cells repeat in rounds, adaptively (tools.stats.Repetition), one experiment per path:
# a round runs every protocol x pinning cell of the path with both tools, in a shuffled
# order, and rounds are added until every cell's per-run P50 has a 95 % CI narrower
# than rep_target (relative), or rep_budget_s (per path) runs out, or rep_max_runs.
# `reps` instead fixes the number of rounds (rep_min_runs = rep_max_runs = reps).
PROFILES = {
    "quick": {"paths": ["loopback", "veth"], "protos": ["udp", "tcp"], "pins": ["none", "split"],
              "rep_target": 0.05, "rep_min_runs": 1, "rep_max_runs": 1, "rep_budget_s": 30.0,
              "rep_warmup": 0, "seconds": 0.5, "warmup": 0.2, "netperf_seconds": 1,
              "request_size": 1, "response_size": 1, "ping_count": 2000, "seed": 7,
              "sched_seconds": 0.2},
    "default": {"paths": ["loopback", "veth"], "protos": ["udp", "tcp"], "pins": list(PINS),
                "rep_target": 0.05, "rep_min_runs": 5, "rep_max_runs": 20, "rep_budget_s": 45.0,
                "rep_warmup": 0, "seconds": 0.5, "warmup": 0.2, "netperf_seconds": 1,
                "request_size": 1, "response_size": 1, "ping_count": 20000, "seed": 7,
                "sched_seconds": 0.3},
    "full": {"paths": ["loopback", "veth"], "protos": ["udp", "tcp"], "pins": list(PINS),
             "rep_target": 0.05, "rep_min_runs": 6, "rep_max_runs": 50, "rep_budget_s": 400.0,
             "rep_warmup": 1, "seconds": 2.0, "warmup": 0.5, "netperf_seconds": 2,
             "request_size": 1, "response_size": 1, "ping_count": 100000, "seed": 7,
             "sched_seconds": 1.0},
}
COMMON = {"reps": None}

NS_PREFIX = "perfbook_"
VETH_NET = "198.18.7."          # RFC 2544 benchmarking range, only inside our namespaces
CLI_ADDR, SRV_ADDR = VETH_NET + "1", VETH_NET + "2"
LATENCY_KEYS = ("MIN_LATENCY", "MEAN_LATENCY", "P50_LATENCY", "P90_LATENCY",
                "P99_LATENCY", "MAX_LATENCY", "STDDEV_LATENCY")
# histogram of our samples: log-spaced bins, this many per decade, from 0.1 us
HIST_PER_DECADE = 200
HIST_LO_US = 0.1


# --------------------------------------------------------------------------- parameters
def params(profile: str = "default", **overrides) -> dict:
    if profile not in PROFILES:
        raise ParameterError(f"profile must be one of {tuple(PROFILES)}, got {profile!r}")
    p = {k: (list(v) if isinstance(v, list) else v) for k, v in {**PROFILES[profile], **COMMON}.items()}
    for k, v in overrides.items():
        if v is None:
            continue
        if k not in p:
            raise ParameterError(f"unknown parameter {k!r} for {CHAPTER}; known: {', '.join(sorted(p))}")
        p[k] = v
    for k, allowed in (("paths", PATHS), ("protos", PROTOS), ("pins", PINS)):
        v = p[k]
        if isinstance(v, str):
            v = [s.strip() for s in v.split(",") if s.strip()]
        if not isinstance(v, (list, tuple)) or not v:
            raise ParameterError(f"{k} must be a non-empty list drawn from {allowed}")
        bad = [x for x in v if x not in allowed]
        if bad:
            raise ParameterError(f"{k}: {bad[0]!r} is not one of {allowed}")
        p[k] = list(dict.fromkeys(v))
    if p["reps"] is not None:
        v = p["reps"]
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 100:
            raise ParameterError(f"reps must be an integer in [1, 100], got {v!r}")
        p["rep_min_runs"] = p["rep_max_runs"] = v
    repetition_settings(p, "rep_")
    for k, lo, hi in (("netperf_seconds", 1, 60), ("request_size", 1, 65000),
                      ("response_size", 1, 65000), ("ping_count", 0, 1_000_000), ("seed", 0, 2**31)):
        v = p[k]
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ParameterError(f"{k} must be an integer in [{lo}, {hi}], got {v!r}")
    for k, lo, hi in (("seconds", 0.05, 120.0), ("warmup", 0.0, 30.0), ("sched_seconds", 0.0, 5.0)):
        v = p[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= float(v) <= hi:
            raise ParameterError(f"{k} must be a number of seconds in [{lo}, {hi}], got {v!r}")
        p[k] = float(v)
    return p


def preflight() -> list[str]:
    reasons = []
    if os.geteuid() != 0:
        reasons.append("needs root (network namespaces, veth, CPU pinning of netserver); run as root")
    for tool, pkg in (("ip", "iproute2"), ("taskset", "util-linux")):
        if not shutil.which(tool):
            reasons.append(f"{tool} is missing (apt-get install {pkg})")
    if not (shutil.which("cc") or shutil.which("gcc")):
        reasons.append("no C compiler for tools/c/rrbench.c (apt-get install gcc)")
    return reasons


# ------------------------------------------------------------------ netperf's histogram
def netperf_bucket_width_us(us) -> np.ndarray:
    """Width of the netperf histogram bucket holding a latency of `us` microseconds.

    netlib.c HIST_add: 8 decades (1 us .. 100 s), 100 buckets each (hist.h
    HIST_NUM_OF_BUCKET), so the width is a hundredth of the decade: 0.1 us below
    10 us, 1 us for 10..99 us, 10 us for 100..999 us, 100 us for 1..9.99 ms ...
    """
    us = np.maximum(np.asarray(us, dtype=float), 1.0)
    decade = np.floor(np.log10(us))
    return 10.0 ** decade / 10.0


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
    scale = np.where(idx >= 0, 10.0 ** d, np.nan)
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
        scale = 10.0 ** d
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


def read_rrbench_file(path: Path) -> tuple[np.ndarray, np.ndarray]:
    raw = Path(path).read_bytes()
    n = len(raw) // 6
    if n * 6 != len(raw):
        raise PerfbookError(f"rrbench output {path.name} has a truncated length {len(raw)}")
    lat = np.frombuffer(raw, dtype=np.uint32, count=n)
    phase = np.frombuffer(raw, dtype=np.uint16, count=n, offset=4 * n)
    return lat, phase


# ------------------------------------------------------------------- output parsers
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


def _num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


# ------------------------------------------------------------------ the network lab
def _run(cmd, check=True, timeout=30, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise PerfbookError(f"{' '.join(cmd)} failed: {(r.stderr or r.stdout).strip()[:200]}")
    return r


def list_netns() -> list[str]:
    r = _run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def _kill_netns(name: str) -> None:
    r = _run(["ip", "netns", "pids", name], check=False)
    for tok in r.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(tok), signal.SIGKILL)
    _run(["ip", "netns", "del", name], check=False)


def sweep_stale_netns(log=print) -> list[str]:
    """Delete perfbook_<pid>_* namespaces whose owner pid is dead (a SIGKILLed run)."""
    removed = []
    for name in list_netns():
        m = re.match("^" + NS_PREFIX + r"(\d+)_", name)
        if m and not pid_alive(int(m.group(1))):
            _kill_netns(name)
            removed.append(name)
    if removed:
        log(f"[{CHAPTER}] swept namespaces left by a killed run: {', '.join(removed)}")
    return removed


class Lab:
    """Namespaces, veth and child processes that we create; `close()` undoes all of it."""

    def __init__(self, log=print):
        self.log = log
        self.pid = os.getpid()
        self.ns_cli = f"{NS_PREFIX}{self.pid}_cli"
        self.ns_srv = f"{NS_PREFIX}{self.pid}_srv"
        self.netns: list[str] = []
        self.procs: list[subprocess.Popen] = []
        self._guarded = False
        self.closed = False

    # -- signals: SIGINT/SIGTERM/SIGHUP become KeyboardInterrupt so that `finally` runs
    def __enter__(self):
        from . import guard
        guard.enter()
        self._guarded = True
        sweep_stale_netns(self.log)
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def make_veth(self) -> None:
        for ns in (self.ns_cli, self.ns_srv):
            _run(["ip", "netns", "add", ns])
            self.netns.append(ns)
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        vc, vs = f"pb{self.pid}c", f"pb{self.pid}s"
        _run(["ip", "link", "add", vc, "netns", self.ns_cli, "type", "veth",
              "peer", "name", vs, "netns", self.ns_srv])
        for ns, dev, a in ((self.ns_cli, vc, CLI_ADDR), (self.ns_srv, vs, SRV_ADDR)):
            _run(["ip", "-n", ns, "addr", "add", a + "/24", "dev", dev])
            _run(["ip", "-n", ns, "link", "set", dev, "up"])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            st = [_run(["ip", "-n", ns, "-br", "link", "show", "dev", d], check=False).stdout
                  for ns, d in ((self.ns_cli, vc), (self.ns_srv, vs))]
            if all(" UP " in s for s in st):
                return
            time.sleep(0.05)
        raise PerfbookError("the veth pair between our namespaces did not come up within 5 s")

    def spawn(self, cmd, **kw) -> subprocess.Popen:
        p = subprocess.Popen(cmd, start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def stop(self, p: subprocess.Popen, timeout: float = 2.0) -> None:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout)
        # the group may hold children (netserver forks one per test)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        for s in (p.stdout, p.stderr):
            if s:
                with contextlib.suppress(Exception):
                    s.close()
        if p in self.procs:
            self.procs.remove(p)

    def close(self) -> None:
        if self.closed:
            return
        from . import guard
        with guard.restoring():  # a second Ctrl-C cannot cut the cleanup in half
            try:
                for p in list(self.procs):
                    with contextlib.suppress(Exception):
                        self.stop(p)
                for ns in reversed(self.netns):
                    _kill_netns(ns)
                self.netns.clear()
                left = [n for n in list_netns() if n in (self.ns_cli, self.ns_srv)]
                if left:
                    self.log(f"warning: could not delete namespaces {left}")
            finally:
                self.closed = True
        if self._guarded:
            self._guarded = False
            guard.leave()

    # -- helpers
    def prefix(self, path: str, side: str) -> list[str]:
        if path == "loopback":
            return []
        return ["ip", "netns", "exec", self.ns_cli if side == "cli" else self.ns_srv]

    @staticmethod
    def addr(path: str) -> str:
        return "127.0.0.1" if path == "loopback" else SRV_ADDR


def pin_cpus(pin: str) -> tuple[int | None, int | None]:
    """(client CPU, server CPU) for a pinning mode."""
    return {"none": (None, None), "split": (0, 1), "same": (1, 1)}[pin]


def _taskset(cpu):
    return [] if cpu is None else ["taskset", "-c", str(cpu)]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _read_line(p: subprocess.Popen, timeout: float) -> str:
    r, _, _ = select.select([p.stdout], [], [], timeout)
    if not r:
        return ""
    return p.stdout.readline()


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


class Netserver:
    """netserver -D on a free port in a path's server namespace; ready when it listens."""

    def __init__(self, lab: Lab, path: str, logdir: Path):
        self.lab, self.path = lab, path
        self.addr = lab.addr(path)
        self.proc = None
        self.port = None
        self.log = logdir / f"netserver-{path}.log"

    def _listening(self, port: int) -> bool:
        r = _run(self.lab.prefix(self.path, "srv") + ["ss", "-Htln", f"sport = :{port}"], check=False)
        wide = wildcard_listeners(r.stdout)
        if wide:
            raise PerfbookError(f"netserver listens on {', '.join(wide)}, not only on {self.addr}; "
                                "refusing to run a server reachable from every interface")
        return bool(r.stdout.strip())

    def start(self) -> "Netserver":
        for attempt in range(4):
            port = _free_port() if self.path == "loopback" else 12865 + attempt
            with open(self.log, "a") as logf:
                self.proc = self.lab.spawn(self.lab.prefix(self.path, "srv") +
                                           ["netserver", "-D", "-4", "-L", self.addr, "-p", str(port)],
                                           stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and self.proc.poll() is None:
                if self._listening(port):
                    self.port = port
                    return self
                time.sleep(0.05)
            self.lab.stop(self.proc)
        raise PerfbookError(f"netserver did not start listening on the {self.path} path "
                            f"(see {self.log.name}); is another netserver holding the port?")

    def stop(self):
        if self.proc is not None:
            self.lab.stop(self.proc)
            self.proc = None


def run_rrbench(lab: Lab, binary: Path, path: str, proto: str, pin: str, p: dict,
                outfile: Path, pids: dict | None = None) -> tuple[dict, np.ndarray, np.ndarray]:
    ccpu, scpu = pin_cpus(pin)
    srv = lab.spawn(lab.prefix(path, "srv") + _taskset(scpu) +
                    [str(binary), "server", "-P", proto, "-b", lab.addr(path), "-p", "0",
                     "-q", str(p["request_size"]), "-r", str(p["response_size"])],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        line = _read_line(srv, 5.0)
        m = re.match(r"ready (\d+)", line or "")
        if not m:
            err = srv.stderr.read() if srv.poll() is not None else ""
            raise PerfbookError(f"rrbench server did not start on {path}/{proto}: {err.strip()[:200]}")
        port = m.group(1)
        cmd = (lab.prefix(path, "cli") + _taskset(ccpu) +
               [str(binary), "client", "-P", proto, "-H", lab.addr(path), "-p", port,
                "-l", str(p["seconds"]), "-w", str(p["warmup"]),
                "-q", str(p["request_size"]), "-r", str(p["response_size"]), "-o", str(outfile)])
        cli = lab.spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                        text=True)
        if pids is not None:  # taskset and ip netns exec exec() the harness: same pid
            pids.update({"server": srv.pid, "client": cli.pid})
        try:
            out, err = cli.communicate(timeout=p["seconds"] + p["warmup"] + 20)
        except subprocess.TimeoutExpired:
            raise PerfbookError(f"rrbench client on {path}/{proto} did not finish in time") from None
        finally:
            lab.stop(cli)
        if cli.returncode != 0:
            raise PerfbookError(f"rrbench client failed on {path}/{proto}: {err.strip()[:200]}")
        summary = parse_rrbench(out)
    finally:
        lab.stop(srv)
    lat, phase = read_rrbench_file(outfile)
    if len(lat) != summary["n"]:
        raise PerfbookError(f"rrbench wrote {len(lat)} samples but counted {summary['n']}")
    return summary, lat, phase


def netperf_cmd(path_addr: str, port: int, proto: str, pin: str, p: dict) -> list[str]:
    ccpu, scpu = pin_cpus(pin)
    cmd = ["netperf", "-H", path_addr, "-p", str(port), "-t", "omni", "-l", str(p["netperf_seconds"]),
           "-j", "-P", "0"]
    if pin != "none":
        cmd += ["-T", f"{ccpu},{scpu}"]
    cmd += ["--", "-d", "rr", "-T", proto.upper(), "-r", f"{p['request_size']},{p['response_size']}",
            "-k", "all"]
    return cmd


def run_netperf(lab: Lab, ns: Netserver, path: str, proto: str, pin: str, p: dict) -> dict:
    cmd = lab.prefix(path, "cli") + netperf_cmd(ns.addr, ns.port, proto, pin, p)
    proc = lab.spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        out, err = proc.communicate(timeout=p["netperf_seconds"] + 30)
    except subprocess.TimeoutExpired:
        raise PerfbookError(f"netperf on {path}/{proto} did not finish in time") from None
    finally:
        lab.stop(proc)
    kv = parse_kv(out)
    if proc.returncode != 0 or "P50_LATENCY" not in kv:
        raise PerfbookError(f"netperf failed on {path}/{proto} (exit {proc.returncode}): "
                            f"{(err or out).strip()[:200]}")
    return kv


def run_ping(lab: Lab, path: str, count: int) -> dict:
    cmd = lab.prefix(path, "cli") + ["ping", "-f", "-q", "-n", "-c", str(count), lab.addr(path)]
    r = _run(cmd, check=False, timeout=max(30, count / 1000))
    if r.returncode != 0:
        raise PerfbookError(f"ping on {path} failed: {(r.stderr or r.stdout).strip()[:200]}")
    return parse_ping(r.stdout)


# --------------------------------------------------- scheduler tracepoints (one run)
SCHED_PINS = ("same", "split")
def parse_sched_trace(lines, pids: dict, trace_stats: dict | None = None) -> dict:
    """Wake-up -> on-CPU delays of the harness processes from ftrace text output.

    For each of our pids: a sched_wakeup at t_w, then the next sched_switch with
    next_pid == pid at t_s, gives one delay t_s - t_w (in us; the text trace prints
    microseconds). Returns {role: np.ndarray of delays}. Any trace options parse
    (tools.ftrace); `trace_stats` (ftrace.new_stats()) receives the lost-event counts.
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


def sched_stage(lab: "Lab", binary: Path, p: dict, pins, tmp: Path, w, prog) -> list[dict]:
    """One traced rrbench run per pinning mode (loopback, UDP) with sched_wakeup and
    sched_switch enabled in a private ftrace instance: how long a woken harness process
    waits before it runs. Skipped (recorded in the manifest) where tracing is unavailable."""
    from .tracefs import TraceError, TraceSession
    rows = []
    todo = [x for x in SCHED_PINS if x in pins]
    if not todo:
        return rows
    try:
        with TraceSession("rrsched", log=prog.note) as ts:
            ts.set_option("buffer_size_kb", "16384")
            # a wake-up on one CPU and the switch-in on another must be ordered correctly:
            # the default 'local' clock is per CPU; 'mono' is one clock for all CPUs
            ts.set_option("trace_clock", "mono")
            for pin in todo:
                ts.clear()
                pids: dict = {}
                # no warm-up: the trace then covers exactly the recorded transactions
                q = {**p, "seconds": p["sched_seconds"], "warmup": 0.0}
                ts.enable("sched/sched_wakeup")
                ts.enable("sched/sched_switch")
                try:
                    summ, lat, _ = run_rrbench(lab, binary, "loopback", "udp", pin, q,
                                               tmp / f"sched-{pin}.bin", pids)
                finally:
                    ts.disable("sched/sched_wakeup")
                    ts.disable("sched/sched_switch")
                overrun = ts.buffer_stats().get("overrun", 0)
                with open(ts.file("trace")) as f:
                    delays = parse_sched_trace(f, pids)
                st = sample_stats(lat)
                for role, d in delays.items():
                    rows.append({"path": "loopback", "proto": "udp", "pin": pin, "role": role,
                                 "wakeups": len(d),
                                 "wakeups_per_transaction": len(d) / max(summ["n"], 1),
                                 "delay_sum_us": float(d.sum()),
                                 "delay_mean_us": float(d.mean()) if len(d) else math.nan,
                                 "delay_p50_us": float(np.median(d)) if len(d) else math.nan,
                                 "delay_p99_us": float(np.percentile(d, 99)) if len(d) else math.nan,
                                 "delay_max_us": float(d.max()) if len(d) else math.nan,
                                 "traced_transactions": summ["n"], "traced_rr_mean_us": st["mean_us"],
                                 "traced_rr_p50_us": st["p50_us"], "overrun": overrun})
                prog.step(f"sched tracepoints, loopback/udp/{pin}")
    except (TraceError, MissingPrerequisite, OSError) as e:
        w.skip("sched breakdown", f"scheduler tracepoints unavailable: {e}")
    return rows


# ------------------------------------------------------------------------ collect
def collect(data_dir=None, profile: str = "default", **overrides) -> Path:
    import pandas as pd

    from . import cbuild
    from .dataset import DatasetWriter, check_writable
    from .lock import measure_lock
    from .paths import data_dir as default_data_dir
    from .progress import Progress

    p = params(profile, **overrides)
    data = Path(data_dir) if data_dir else default_data_dir()
    reasons = preflight()
    if reasons:
        raise MissingPrerequisite(reasons[0])
    check_writable(data)
    binary = cbuild.binary("rrbench")
    have_netperf = bool(shutil.which("netperf") and shutil.which("netserver"))
    have_ping = bool(shutil.which("ping")) and p["ping_count"] > 0
    ncpu = len(os.sched_getaffinity(0))
    pins = [x for x in p["pins"] if x == "none" or ncpu >= 2]

    cells = [(proto, pin) for proto in p["protos"] for pin in pins]
    tools = ["rrbench", "netperf"] if have_netperf else ["rrbench"]
    runs_per_round = len(cells) * len(tools)
    total = (p["rep_warmup"] + p["rep_min_runs"]) * runs_per_round * len(p["paths"])
    total += len(p["paths"]) * (1 + have_ping)
    total += len([x for x in SCHED_PINS if x in pins]) if p["sched_seconds"] > 0 else 0
    prog = Progress(CHAPTER, total)
    rows, hist_rows, kv_rows, ping_rows = [], [], [], []

    with measure_lock(f"{CHAPTER} collect"), \
            DatasetWriter(CHAPTER, data, {**p, "profile": profile}) as w, \
            Lab(log=prog.note) as lab, \
            tempfile.TemporaryDirectory(prefix="perfbook-rr-") as tmp:
        tmp = Path(tmp)
        prog.t0 = time.monotonic()  # don't count the wait for the lock
        w.extra["_tool_cmds"] = {"netperf": ["netperf", "-V"], "ping": ["ping", "-V"],
                                 "ip": ["ip", "-V"]}
        w.extra["paths_setup"] = {
            "loopback": "client and server in the host's network namespace, 127.0.0.1",
            "veth": f"client in netns {lab.ns_cli} ({CLI_ADDR}), server in netns {lab.ns_srv} "
                    f"({SRV_ADDR}), one veth pair; both namespaces removed at the end"}
        w.extra["pins"] = {k: PIN_HELP[k] for k in pins}
        w.extra["cpus_usable"] = ncpu
        if ncpu < 2 and len(pins) < len(p["pins"]):
            w.skip("pinning split/same", f"only {ncpu} usable CPU: client and server can't be placed apart")
        if not have_netperf:
            w.skip("netperf", "netperf/netserver are not installed (apt-get install netperf, from "
                              "Debian's non-free component; tools/setup.sh enables it)")
        if not have_ping:
            w.skip("ping", "ping is not installed (apt-get install iputils-ping)" if p["ping_count"]
                   else "ping_count=0")
        if "veth" in p["paths"]:
            lab.make_veth()
        servers = {}
        if have_netperf:
            for path in p["paths"]:
                servers[path] = Netserver(lab, path, tmp).start()
                for proto in p["protos"]:  # warm-up run per path/protocol, not recorded
                    run_netperf(lab, servers[path], path, proto, "none", {**p, "netperf_seconds": 1})
                prog.step(f"netserver up and warmed on {path}")
        else:
            for path in p["paths"]:
                prog.step(f"{path}: netperf missing")
        if have_ping:
            for path in p["paths"]:
                ping = run_ping(lab, path, p["ping_count"])
                ping_rows.append({"path": path, "count": p["ping_count"], **ping})
                prog.step(f"ping -f on {path}")

        rng = random.Random(p["seed"])
        order = 0
        t0 = time.monotonic()
        reps = []
        for path in p["paths"]:
            rep = repetition(path, [f"{proto}/{pin}/{tool}" for proto, pin in cells for tool in tools],
                             p, "rep_")
            reps.append(rep)
            for rd in rep.rounds():
                if rd.index:
                    prog.note(f"{path} after {rd.index} round(s): {rep.status()}")
                if rd.index >= rep.warmup + rep.min_runs:  # a round beyond the planned ones
                    prog.total += runs_per_round
                rnd = rd.index - rep.warmup  # measured rounds are numbered from 0 per path
                label = (f"{path} warm-up round {rd.index + 1}" if rd.warmup
                         else f"{path} round {rnd + 1} (at most {rep.max_runs})")
                seq = cells[:]
                rng.shuffle(seq)
                for proto, pin in seq:
                    pair = tools[:]
                    if (rd.index + order) % 2:
                        pair.reverse()
                    for tool in pair:
                        order += 1
                        key = dict(rep=rnd, order=order, path=path, proto=proto, pin=pin, tool=tool,
                                   t_s=round(time.monotonic() - t0, 3),
                                   request_size=p["request_size"], response_size=p["response_size"])
                        if tool == "rrbench":
                            f = tmp / f"rr-{order}.bin"
                            summ, lat, phase = run_rrbench(lab, binary, path, proto, pin, p, f)
                            f.unlink()
                            st = sample_stats(lat)
                            rep.add(f"{proto}/{pin}/{tool}", st["p50_us"])
                            if rd.warmup:
                                prog.step(f"{label} {proto}/{pin} {tool}")
                                continue
                            nq = netperf_style_percentiles(lat, phase)
                            nr = netperf_rank_samples(lat, phase)
                            rows.append({**key, "n": summ["n"], "lost": summ["lost"],
                                         "seconds": summ["elapsed_ns"] / 1e9,
                                         "rate_tps": summ["n"] / (summ["elapsed_ns"] / 1e9),
                                         **st, "rt_latency_us": math.nan,
                                         "nq_p50_us": nq[0.5], "nq_p90_us": nq[0.9], "nq_p99_us": nq[0.99],
                                         "nr_p50_us": nr[0.5], "nr_p90_us": nr[0.9], "nr_p99_us": nr[0.99]})
                            bins, counts = log_histogram(lat)
                            for b, c in zip(bins.tolist(), counts.tolist()):
                                hist_rows.append({"rep": rnd, "order": order, "path": path, "proto": proto,
                                                  "pin": pin, "bin": b, "count": c})
                        else:
                            kv = run_netperf(lab, servers[path], path, proto, pin, p)
                            rep.add(f"{proto}/{pin}/{tool}", _num(kv.get("P50_LATENCY")))
                            if rd.warmup:
                                prog.step(f"{label} {proto}/{pin} {tool}")
                                continue
                            rate = _num(kv.get("THROUGHPUT"))
                            secs = _num(kv.get("ELAPSED_TIME"))
                            rows.append({**key, "n": int(round(rate * secs)) if rate == rate else -1,
                                         "lost": 0, "seconds": secs, "rate_tps": rate,
                                         "min_us": _num(kv.get("MIN_LATENCY")),
                                         "mean_us": _num(kv.get("MEAN_LATENCY")),
                                         "std_us": _num(kv.get("STDDEV_LATENCY")),
                                         "p50_us": _num(kv.get("P50_LATENCY")),
                                         "p90_us": _num(kv.get("P90_LATENCY")),
                                         "p99_us": _num(kv.get("P99_LATENCY")),
                                         "p999_us": math.nan,
                                         "max_us": _num(kv.get("MAX_LATENCY")),
                                         "rt_latency_us": _num(kv.get("RT_LATENCY")),
                                         "nq_p50_us": math.nan, "nq_p90_us": math.nan,
                                         "nq_p99_us": math.nan, "nr_p50_us": math.nan,
                                         "nr_p90_us": math.nan, "nr_p99_us": math.nan})
                            for k, v in kv.items():
                                if k in ("UUID", "COMMAND_LINE"):
                                    continue
                                kv_rows.append({"rep": rnd, "order": order, "path": path, "proto": proto,
                                                "pin": pin, "key": k, "value": v})
                        prog.step(f"{label} {proto}/{pin} {tool}")
            prog.total -= max(0, rep.warmup + rep.min_runs - rep.rounds_done) * runs_per_round
            prog.note(f"{path} stopped by {rep.stopped_by}: {rep.status()}")
        for s in servers.values():
            s.stop()
        sched_rows = []
        if p["sched_seconds"] > 0:
            sched_rows = sched_stage(lab, binary, p, pins, tmp, w, prog)
        w.add_table("runs", pd.DataFrame(rows))
        if rows:
            qc = quantization(pd.DataFrame(rows).assign(host_id=""))  # load() adds host_id
            w.extra["netperf_rank_check"] = {
                "rule": RANK_RULE, "percentiles_checked": int(qc["in_rank_bucket"].notna().sum()),
                "in_rank_bucket": int((qc["in_rank_bucket"] == True).sum())}  # noqa: E712
        w.add_table("repetition", pd.DataFrame([r for rep in reps for r in rep.records()]))
        w.extra["warmup_runs"] = {
            "netperf_per_path_and_protocol": 1 if have_netperf else 0,
            "rrbench_unrecorded_seconds_per_run": p["warmup"],
            "warmup_rounds_per_path": p["rep_warmup"]}
        if sched_rows:
            w.add_table("sched", pd.DataFrame(sched_rows))
        w.add_table("hist", pd.DataFrame(hist_rows))
        if kv_rows:
            w.add_table("netperf_all", pd.DataFrame(kv_rows))
        if ping_rows:
            w.add_table("ping", pd.DataFrame(ping_rows))
        w.extra["hist_bins"] = {"per_decade": HIST_PER_DECADE, "lo_us": HIST_LO_US}
        w.notes.append("rrbench latencies are CLOCK_MONOTONIC ns around send()+recv(); the hist "
                       "table holds every recorded transaction in log bins")
        if have_netperf:
            w.notes.append("netperf: " + " ".join(netperf_cmd("<addr>", 0, "udp", "split", p)))
    return w.published


# ------------------------------------------------------------------------ analysis
def load(data_dir=None) -> dict:
    """Every committed dataset of this chapter: runs, hist (with bin edges), ping, manifests."""
    from .dataset import load_manifests, load_table
    # the analysis must not depend on the order rows were written in: sort on natural keys
    runs = _sorted(load_table(CHAPTER, "runs", data_dir), ["t_s", "rep", "order"])
    hist = load_table(CHAPTER, "hist", data_dir)
    if not hist.empty:
        lo, hi = bin_edges_us(hist["bin"])
        hist["lo_us"], hist["hi_us"] = lo, hi
    return {"runs": runs, "hist": hist, "ping": load_table(CHAPTER, "ping", data_dir),
            "repetition": load_table(CHAPTER, "repetition", data_dir),
            "sched": _sorted(load_table(CHAPTER, "sched", data_dir), ["path", "proto", "_pin", "_role"],
                             _pin=("pin", SCHED_PINS), _role=("role", SCHED_ROLES)),
            "netperf_all": load_table(CHAPTER, "netperf_all", data_dir),
            "manifests": load_manifests(CHAPTER, data_dir)}


SCHED_ROLES = ("server", "client")   # run_rrbench's pids order: sched_stage's rows per pin


def _sorted(df, keys, **ranks):
    """Rows by host, run and `keys`; ranks name=(column, order) sort a column in a code order."""
    if df.empty:
        return df
    d = df.assign(**{k: df[c].map({v: i for i, v in enumerate(o)}).fillna(len(o))
                     for k, (c, o) in ranks.items()})
    return (d.sort_values(["host_id", "run_id", *keys], kind="stable")
            .drop(columns=list(ranks)).reset_index(drop=True))


CELL = ["host_id", "path", "proto", "pin"]


def hist_quantiles(hist, qs=(0.5, 0.9, 0.99, 0.999)):
    """Pooled quantiles per cell from the log-binned counts (geometric bin middle)."""
    import pandas as pd
    out = []
    for key, g in hist.groupby(CELL, sort=True):
        g = g.groupby("bin", as_index=False)["count"].sum().sort_values("bin")
        cum = g["count"].cumsum().to_numpy()
        tot = cum[-1]
        lo, hi = bin_edges_us(g["bin"].to_numpy())
        mid = np.sqrt(lo * hi)
        row = dict(zip(CELL, key))
        row["n"] = int(tot)
        for q in qs:
            row[f"q{q:g}"] = float(mid[np.searchsorted(cum, q * tot)])
        out.append(row)
    return pd.DataFrame(out)


def percentile_table(runs, tool="rrbench"):
    """Per cell: median over repetitions of each run's P50/P90/P99/max, with the
    distribution-free CI of that median (tools.stats) and the number of runs."""
    import pandas as pd

    from .stats import median_ci
    r = runs[runs["tool"] == tool]
    rows = []
    for key, g in r.groupby(CELL, sort=True):
        row = dict(zip(CELL, key))
        row["runs"] = len(g)
        row["transactions"] = int(g["n"].sum())
        row["rate_tps"] = float(np.median(g["rate_tps"]))
        for c in ("p50_us", "p90_us", "p99_us", "max_us", "mean_us"):
            lo, hi, cov = median_ci(g[c])
            row[c] = float(np.median(g[c]))
            row[c.replace("_us", "_lo")] = lo
            row[c.replace("_us", "_hi")] = hi
        row["ci_coverage"] = cov
        rows.append(row)
    return pd.DataFrame(rows)


# The stated tolerance of the cross-validation. netperf and rrbench are run on the same
# path but not on the same transactions, so the comparison allows:
#   q: netperf's own quantization at that value (one histogram bucket + 1 us for its
#      microsecond timestamps, see netperf_bucket_width_us);
#   s: run-to-run variation and harness differences: REL_TOL of our value, or the range
#      of that percentile over the repetitions of either tool if that is wider (two tools
#      can't be expected to agree better than one tool agrees with itself).
REL_TOL = {"p50": 0.15, "p90": 0.15, "p99": 0.35}


def crossval(runs):
    """Our distribution's P50/P90/P99 against netperf's, per cell, with the tolerance."""
    import pandas as pd
    ours = percentile_table(runs, "rrbench")
    nps = percentile_table(runs, "netperf")
    if ours.empty or nps.empty:
        return pd.DataFrame()
    m = ours.merge(nps, on=CELL, suffixes=("_ours", "_netperf"))
    rng = {}
    for tool in ("rrbench", "netperf"):
        g = runs[runs["tool"] == tool].groupby(CELL)
        for pc in ("p50", "p90", "p99"):
            rng[(tool, pc)] = (g[f"{pc}_us"].max() - g[f"{pc}_us"].min())
    rows = []
    for _, r in m.iterrows():
        key = tuple(r[c] for c in CELL)
        for pc in ("p50", "p90", "p99"):
            a, b = r[f"{pc}_us_ours"], r[f"{pc}_us_netperf"]
            q = float(netperf_bucket_width_us(b)) + 1.0
            spread = max(float(rng[("rrbench", pc)].get(key, 0.0)), float(rng[("netperf", pc)].get(key, 0.0)))
            tol = q + max(REL_TOL[pc] * a, spread)
            rows.append({**{c: r[c] for c in CELL}, "percentile": pc.upper(),
                         "ours_us": a, "netperf_us": b, "diff_us": b - a,
                         "rel_diff": (b - a) / a if a else math.nan, "run_range_us": spread,
                         "tolerance_us": tol, "agree": bool(abs(b - a) <= tol)})
    return pd.DataFrame(rows)


RANK_RULE = ("netperf 2.7.0 src/netlib.c HIST_get_percentile: num = (int)(p * total); the "
             "percentile is interpolated inside the bucket holding the num-th smallest integer-us "
             "latency and truncated, so it lies in that bucket's [lower, upper] edges")


def quantization(runs):
    """Same transactions, two estimators: exact percentiles of our samples vs the
    percentiles netperf's histogram would report for them (nq_*).

    exact_us interpolates between samples (numpy's default), netperf takes a rank, so on a
    sparse tail the two can sit buckets apart: error_us is a result, not a bound. The exact
    check is against our sample at netperf's rank (nr_*, RANK_RULE): in_rank_bucket must be
    True wherever nr_* was recorded (datasets before it have <NA>)."""
    import pandas as pd
    r = runs[runs["tool"] == "rrbench"].copy()
    out = []
    for pc in ("p50", "p90", "p99"):
        d = r[CELL + ["rep"]].copy()
        d["percentile"] = pc.upper()
        d["exact_us"] = r[f"{pc}_us"]
        d["netperf_style_us"] = r[f"nq_{pc}_us"]
        d["error_us"] = d["netperf_style_us"] - d["exact_us"]
        d["bucket_us"] = netperf_bucket_width_us(d["exact_us"])
        nr = r[f"nr_{pc}_us"] if f"nr_{pc}_us" in r else pd.Series(math.nan, index=r.index)
        d["rank_us"] = nr
        idx = np.where(nr.notna(), netperf_bucket_index(nr.fillna(-1).astype(np.int64)), -1)
        d["rank_bucket_lo_us"], d["rank_bucket_hi_us"] = netperf_bucket_edges(idx)
        d["in_rank_bucket"] = pd.array(netperf_in_rank_bucket(d["netperf_style_us"], nr), dtype="boolean")
        d.loc[nr.isna().to_numpy(), "in_rank_bucket"] = pd.NA
        out.append(d)
    return pd.concat(out, ignore_index=True)


# ------------------------------------------------------------- chapter helpers
PCT_ORDER = ["P50", "P90", "P99", "P99.9", "max"]


def latest(manifests: list[dict]) -> dict:
    """The dataset the prose quotes: the newest default/full run (a quick run is a test)."""
    from .dataset import newest
    return newest(manifests)


def datasets_table(manifests, runs=None):
    """One row per dataset; `rounds` is the number of measured rounds per path (from `runs`)."""
    import pandas as pd
    rows = []
    for m in manifests:
        p, h = m["parameters"], m["host"]
        rounds = "?"
        if runs is not None and len(runs):
            r = runs[(runs["host_id"] == h["host_id"]) & (runs["run_id"] == m["run_id"])]
            per_path = r.groupby("path")["rep"].nunique()
            rounds = ", ".join(f"{k}: {v}" for k, v in per_path.items())
        rows.append({"host_id": h["host_id"], "run_id": m["run_id"], "host": h["description"],
                     "kernel": h["kernel_release"], "virtualization": h["virtualization"],
                     "repetition": "adaptive" if "rep_target" in p else "fixed",
                     "rounds": rounds, "rrbench s/run": p["seconds"], "netperf s/run": p["netperf_seconds"],
                     "pins": ",".join(p["pins"]), "skipped": "; ".join(m.get("skipped", {})) or "-"})
    return pd.DataFrame(rows)


def skipped_parts(manifests) -> list[tuple[str, str, str]]:
    return [(m["host"]["host_id"], k, v) for m in manifests for k, v in m.get("skipped", {}).items()]


def pooled(hist):
    """Counts per cell and bin, summed over repetitions and datasets of one host."""
    return hist.groupby(CELL + ["bin"], as_index=False)["count"].sum()


def ladder(runs, hist):
    """Per cell: pooled P50/P90/P99/P99.9 of every recorded transaction (from the
    log bins, relative resolution 1.2 %), the largest single latency, and n."""
    q = hist_quantiles(pooled(hist), (0.5, 0.9, 0.99, 0.999))
    rr = runs[runs["tool"] == "rrbench"].groupby(CELL, as_index=False).agg(
        max_us=("max_us", "max"), runs=("n", "size"), rate_tps=("rate_tps", "median"))
    t = q.merge(rr, on=CELL)
    t = t.rename(columns={"q0.5": "P50", "q0.9": "P90", "q0.99": "P99", "q0.999": "P99.9", "max_us": "max"})
    return t[CELL + ["runs", "n", "rate_tps"] + PCT_ORDER]


def ladder_long(lad):
    return lad.melt(id_vars=CELL, value_vars=PCT_ORDER, var_name="percentile", value_name="latency_us")


def ccdf(hist):
    """Exceedance curve per cell: fraction of transactions slower than each bin's upper edge."""
    import pandas as pd
    frames = []
    for key, g in pooled(hist).groupby(CELL, sort=True):
        g = g.sort_values("bin")
        tot = g["count"].sum()
        lo, hi = bin_edges_us(g["bin"].to_numpy())
        frac = 1.0 - g["count"].cumsum().to_numpy() / tot
        d = pd.DataFrame({"latency_us": hi, "slower_than": frac})
        for c, v in zip(CELL, key):
            d[c] = v
        frames.append(d[d["slower_than"] > 0])
    return pd.concat(frames, ignore_index=True)


def pin_effect(lad):
    """P50 and P99 of each pinning mode relative to 'none', per path and protocol."""
    base = lad[lad["pin"] == "none"].set_index(["host_id", "path", "proto"])
    t = lad.set_index(["host_id", "path", "proto"]).copy()
    for c in ("P50", "P99"):
        t[f"{c}_vs_none"] = t[c] / base[c].reindex(t.index).to_numpy()
    return t.reset_index()[CELL + ["P50", "P50_vs_none", "P99", "P99_vs_none"]]


def ping_vs_rr(runs, ping):
    """ping -f (the echo answered inside the kernel) beside the RR round trip, per path."""
    rr = runs[(runs["tool"] == "rrbench") & (runs["pin"] == "none")]
    g = rr.groupby(["host_id", "path", "proto"], as_index=False).agg(
        rr_min_us=("min_us", "median"), rr_mean_us=("mean_us", "median"))
    pg = ping.groupby(["host_id", "path"], as_index=False).agg(
        ping_min_us=("min_us", "median"), ping_mean_us=("mean_us", "median"), pings=("received", "sum"))
    t = g.merge(pg, on=["host_id", "path"])
    t["rr_over_ping_mean"] = t["rr_mean_us"] / t["ping_mean_us"]
    return t


def seed_metrics(ref):
    """The seed's three runs side by side (rows: metric)."""
    r = ref[ref["unit"] == "us"].pivot(index="metric", columns="run", values="value")
    order = ["MIN_LATENCY", "MEAN_LATENCY", "P50_LATENCY", "P90_LATENCY", "P99_LATENCY",
             "MAX_LATENCY", "STDDEV_LATENCY"]
    return r.reindex([o for o in order if o in r.index])[["selectors", "k_all", "histogram"]]


def versus_seed(runs, ref, host_id=None):
    """The seed's UDP loopback numbers beside ours on the same path (loopback, UDP, no
    pinning): netperf (same tool, median over runs) and rrbench (median over runs)."""
    import pandas as pd
    sel = runs[(runs["path"] == "loopback") & (runs["proto"] == "udp") & (runs["pin"] == "none")]
    if host_id is not None:
        sel = sel[sel["host_id"] == host_id]
    cols = {"MIN_LATENCY": "min_us", "MEAN_LATENCY": "mean_us", "P50_LATENCY": "p50_us",
            "P90_LATENCY": "p90_us", "P99_LATENCY": "p99_us", "MAX_LATENCY": "max_us",
            "STDDEV_LATENCY": "std_us"}
    seed = seed_metrics(ref)
    rows = []
    for metric, col in cols.items():
        row = {"metric": metric,
               "seed (median of its runs)": float(np.nanmedian(seed.loc[metric].astype(float)))
               if metric in seed.index else math.nan}
        for tool in ("netperf", "rrbench"):
            v = sel[sel["tool"] == tool][col]
            row[f"{tool} here"] = float(np.median(v)) if len(v) else math.nan
        rows.append(row)
    t = pd.DataFrame(rows)
    t["seed / netperf here"] = t["seed (median of its runs)"] / t["netperf here"]
    return t


def seed_buckets(ref):
    h = ref[ref["metric"] == "hist_count"].copy()
    h["lo_us"] = h["bucket_lo_us"].astype(float)
    h["hi_us"] = h["bucket_hi_us"].astype(float)
    # column 0 of every printed row is empty by construction (smaller values land in the
    # row above): drop it so that the buckets tile 10 us .. 10 ms without overlap
    h = h[h["lo_us"] > 0]
    return h[["lo_us", "hi_us", "value"]].rename(columns={"value": "count"})


def versus_seed_histogram(hist, ref, host_id=None):
    """Fraction of transactions per bucket of the seed's printed histogram (10-us buckets
    from 10 us, 100-us from 100 us, 1-ms from 1 ms), seed vs ours (loopback, UDP, none).
    Our log bins are assigned by their geometric middle (bins are 1.2 % wide)."""
    import pandas as pd
    sb = seed_buckets(ref)
    h = hist[(hist["path"] == "loopback") & (hist["proto"] == "udp") & (hist["pin"] == "none")]
    if host_id is not None:
        h = h[h["host_id"] == host_id]
    g = h.groupby("bin", as_index=False)["count"].sum()
    lo, hi = bin_edges_us(g["bin"].to_numpy())
    mid = np.sqrt(lo * hi)
    ours = []
    for _, b in sb.iterrows():
        ours.append(int(g["count"][(mid >= b["lo_us"]) & (mid < b["hi_us"])].sum()))
    below = int(g["count"][mid < sb["lo_us"].min()].sum())
    t = sb.copy()
    t["seed_fraction"] = t["count"] / t["count"].sum()
    t["ours_count"] = ours
    t["ours_fraction"] = np.array(ours) / g["count"].sum()
    t = t[(t["count"] > 0) | (t["ours_count"] > 0)]
    t["bucket"] = [f"{a:g}-{b:g}" for a, b in zip(t["lo_us"], t["hi_us"])]
    below_row = pd.DataFrame([{"bucket": f"<{sb['lo_us'].min():g}", "lo_us": 0.0, "hi_us": sb["lo_us"].min(),
                               "count": 0, "seed_fraction": 0.0, "ours_count": below,
                               "ours_fraction": below / g["count"].sum()}])
    return pd.concat([below_row, t], ignore_index=True)[
        ["bucket", "lo_us", "hi_us", "count", "seed_fraction", "ours_count", "ours_fraction"]]


def netperf_summary(runs):
    """netperf's own numbers per cell: median over runs, with the distribution-free CI of
    that median as 'lo-hi' (tools.stats.median_ci; with few runs it is [min, max] and its
    real coverage is given)."""
    import pandas as pd

    from .stats import median_ci
    r = runs[runs["tool"] == "netperf"]
    rows = []
    for key, g in r.groupby(CELL, sort=True):
        row = dict(zip(CELL, key))
        row["runs"] = len(g)
        row["req/resp B"] = f"{int(g['request_size'].iloc[0])}/{int(g['response_size'].iloc[0])}"
        for c, name in (("rate_tps", "trans/s"), ("min_us", "MIN"), ("mean_us", "MEAN"), ("p50_us", "P50"),
                        ("p90_us", "P90"), ("p99_us", "P99"), ("max_us", "MAX"), ("std_us", "STDDEV")):
            lo, hi, cov = median_ci(g[c])
            fmt = (lambda v: f"{v:,.0f}") if c in ("rate_tps", "max_us") else (lambda v: f"{v:g}")
            row[name] = f"{fmt(float(np.median(g[c])))} [{fmt(lo)}-{fmt(hi)}]"
        row["CI coverage"] = round(cov, 2)
        rows.append(row)
    return pd.DataFrame(rows)


def none_vs_pinned(runs, tool="rrbench"):
    """Per path/protocol: the per-run P50 of the unpinned runs (min, max) beside the
    median P50 of 'same' and 'split'. An unpinned run lands wherever the scheduler puts
    client and server, so its P50 can sit near either pinned mode."""
    r = runs[runs["tool"] == tool]
    rows = []
    for (h, path, proto), g in r.groupby(["host_id", "path", "proto"], sort=True):
        row = {"host_id": h, "path": path, "proto": proto}
        nn = g[g["pin"] == "none"]["p50_us"]
        row["none_p50_min"], row["none_p50_max"] = float(nn.min()), float(nn.max())
        for pin in ("same", "split"):
            v = g[g["pin"] == pin]["p50_us"]
            row[f"{pin}_p50"] = float(np.median(v)) if len(v) else math.nan
        rows.append(row)
    import pandas as pd
    return pd.DataFrame(rows)


def max_clusters(runs, resolution_us=100.0):
    """How the per-run maxima (both tools) group when rounded to `resolution_us`."""
    v = (runs["max_us"] / resolution_us).round() * resolution_us
    return v.value_counts().rename_axis("max_us_rounded").reset_index(name="runs")


# ------------------------------------------------- hosts, pinning, captions
from .dataset import only_shown, shown_datasets  # noqa: E402  (one dataset per host, side by side)


def pin_comparison(runs, tool="rrbench"):
    """split and same against none, per dataset, path and protocol, on the per-run P50
    (tools.stats.compare: Mann-Whitney, Cliff's delta, Hodges-Lehmann shift)."""
    import dataclasses
    from .stats import Comparison, compare_frame
    within = ["host_id", "run_id", "path", "proto"]
    t = compare_frame(runs[runs["tool"] == tool], by="pin", value="p50_us", baseline="none",
                      within=within)
    if t.empty:  # fewer than two runs per cell: the same columns, no rows
        t = t.reindex(columns=[*within, "pin", "baseline",
                               *(f.name for f in dataclasses.fields(Comparison))])
    return t


def host_comparison(runs, manifests, tool="rrbench"):
    """Each other host's shown dataset against the prose's, per cell, on the per-run P50."""
    import pandas as pd
    from .stats import compare_frame
    if len(shown_datasets(manifests)) < 2:
        return pd.DataFrame()
    r = only_shown(runs[runs["tool"] == tool], manifests)
    return compare_frame(r, by="host_id", value="p50_us", baseline=latest(manifests)["host"]["host_id"],
                         within=["path", "proto", "pin"])


def caption_for(runs, manifests, what: str, extra: str = "") -> str:
    """Caption for a figure of pooled rrbench transactions: runs per cell, warm-up, hosts."""
    from .stats import caption, hosts_of
    r = runs[runs["tool"] == "rrbench"]
    g = r.groupby(["host_id", "run_id", "path", "proto", "pin"])
    shown = {(m["host"]["host_id"], m["run_id"]) for m in manifests}
    ms = [m for m in manifests if (m["host"]["host_id"], m["run_id"]) in
          set(zip(r["host_id"], r["run_id"])) & shown]
    wu = [m["parameters"].get("rep_warmup", 0) for m in ms] or [0]
    secs = sorted({m["parameters"]["warmup"] for m in ms})
    tx = g["n"].sum()
    text = (f"Pooled transactions per cell: {int(tx.min()):,}–{int(tx.max()):,}; every run began with "
            f"{'/'.join(f'{s:g}' for s in secs)} s of unrecorded transactions")
    return caption(what, n=g.size().to_numpy(), unit="runs", warmup=wu, hosts=hosts_of(ms), ci=False,
                   extra=text + (". " + extra if extra else ""))
