"""Chapter 'iostat_internals': iostat -x recomputed from /proc/diskstats.

collect() runs a phased workload (fio, plus two small phases of our own) on a
scratch file in a private directory (tools.scratch: under the scratch parent of
tools.statedir, or under the scratch_parent parameter), on whatever block device holds it. While it runs:

* sysstat's `iostat -x -d -k -y <dev> 1` reports every interval; the moment a
  report line arrives we snapshot /proc/diskstats ourselves, so our interval
  and sysstat's end within a fraction of a millisecond of each other;
* in the middle of every phase a short trace window records block:block_io_start
  / block_io_done (the points where the kernel does its accounting) and
  block:block_rq_issue / block_rq_complete (the device's share), in a private
  ftrace instance filtered to the device, bracketed by two diskstats snapshots.

Everything raw is kept (counters, sysstat's printed columns, per-window trace
summaries and a bounded random sample of per-request latencies); the analysis
functions below recompute the iostat columns and the cross-checks from it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import random
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from . import diskstats as ds
from . import ftrace, stats
from .dataset import DatasetWriter
from .errors import MissingPrerequisite, ParameterError, PerfbookError
from .lock import measure_lock
from .params import choose_list, merge
from . import guard, scratch as scratch_dirs, statedir
from .proc import die_with_parent, kill_group, run_group
from .progress import Progress
from .tracefs import TraceSession, preflight as tracefs_preflight

CHAPTER = "iostat_internals"
TITLE = "iostat -x internals: recomputed from /proc/diskstats, checked against sysstat and tracepoints"

# name -> (how, description). fio phases give fio arguments; "own" phases are ours.
PHASES: dict[str, dict] = {
    "seqread_1m_qd1":   {"fio": ["--rw=read", "--bs=1M", "--direct=1", "--ioengine=psync"],
                         "what": "sequential 1 MiB O_DIRECT reads, one at a time"},
    "randread_4k_qd1":  {"fio": ["--rw=randread", "--bs=4k", "--direct=1", "--ioengine=psync"],
                         "what": "random 4 KiB O_DIRECT reads, queue depth 1"},
    "randread_4k_qd16": {"fio": ["--rw=randread", "--bs=4k", "--direct=1", "--ioengine=libaio",
                                 "--iodepth=16"],
                         "what": "random 4 KiB O_DIRECT reads, queue depth 16 (libaio)"},
    "randwrite_4k_qd1": {"fio": ["--rw=randwrite", "--bs=4k", "--direct=1", "--ioengine=psync"],
                         "what": "random 4 KiB O_DIRECT writes, queue depth 1"},
    "randwrite_4k_qd16": {"fio": ["--rw=randwrite", "--bs=4k", "--direct=1", "--ioengine=libaio",
                                  "--iodepth=16"],
                          "what": "random 4 KiB O_DIRECT writes, queue depth 16 (libaio)"},
    "seqwrite_4k_qd16": {"fio": ["--rw=write", "--bs=4k", "--direct=1", "--ioengine=libaio",
                                 "--iodepth=16", "--iodepth_batch_submit=16",
                                 "--iodepth_batch_complete_min=16"],
                         "what": "sequential 4 KiB O_DIRECT writes submitted 16 at a time (merges)"},
    "randrw_4k_qd8":    {"fio": ["--rw=randrw", "--rwmixread=70", "--bs=4k", "--direct=1",
                                 "--ioengine=libaio", "--iodepth=8"],
                         "what": "random 70/30 read/write mix, 4 KiB O_DIRECT, queue depth 8"},
    "fsync_4k":         {"fio": ["--rw=randwrite", "--bs=4k", "--direct=0", "--ioengine=psync",
                                 "--fsync=1"],
                         "what": "buffered random 4 KiB writes, fsync after each (journal + flush)"},
    "buffered_seqread": {"own": "buffered_read",
                         "what": "buffered sequential 128 KiB reads, page cache dropped every pass (readahead)"},
    "discard":          {"own": "discard",
                         "what": "punch 1 MiB holes in a preallocated file + fsync (ext4 'discard' mount option)"},
}
QUICK_PHASES = ["randread_4k_qd1", "randwrite_4k_qd16", "fsync_4k"]

# Rounds are repeated adaptively (tools.stats.Repetition, settings rep_*): one round runs every
# phase once; the value tracked per phase is the device's IOPS over the phase's steady part.
# A round of the default profile takes about a minute, so its budget allows two rounds and its
# min_runs (6, the smallest n with a real 95 % interval of the median) is reached only in "full".
PROFILES = {
    "quick":   {"phases": QUICK_PHASES, "phase_seconds": 3, "file_mb": 64, "trace_window_s": 0.3,
                "rep_target": 0.05, "rep_min_runs": 1, "rep_max_runs": 2, "rep_budget_s": 5.0,
                "rep_warmup": 0},
    "default": {"phases": list(PHASES), "phase_seconds": 5, "file_mb": 256, "trace_window_s": 0.5,
                "rep_target": 0.05, "rep_min_runs": 6, "rep_max_runs": 12, "rep_budget_s": 100.0,
                "rep_warmup": 0},
    "full":    {"phases": list(PHASES), "phase_seconds": 10, "file_mb": 1024, "trace_window_s": 1.0,
                "rep_target": 0.05, "rep_min_runs": 6, "rep_max_runs": 20, "rep_budget_s": 660.0,
                "rep_warmup": 0},
}
COMMON = {"device": "auto", "trace": True, "trace_sample": 1000, "scratch_parent": "auto",
          "seed": 1}

# Stated tolerance for "our column agrees with sysstat's" (see the chapter):
# |ours - sysstat| <= TOL_ABS + TOL_REL * max(|ours|, |sysstat|).
TOL_ABS = 0.011   # sysstat prints 2 decimals (0.005) plus one more rounding step
TOL_REL = 0.02    # 1 % from /proc/uptime's 10 ms steps + 1 % for sampling-instant offset
IOSTAT_INTERVAL_S = 1.0  # the interval we give iostat
TOL_UTIL_JIFFY = 1.0  # %util: plus one jiffy per 1 s interval at HZ=100, the coarsest usual tick


# ---- parameters ------------------------------------------------------------------

def params(profile: str = "default", **overrides) -> dict:
    """Merge a profile with overrides and validate (ParameterError, one line)."""
    p = merge(profile, PROFILES, COMMON, overrides)
    if p["phases"] is None:
        raise ParameterError(f"phases must be a non-empty list (or comma-separated string) of {', '.join(PHASES)}")
    p["phases"] = choose_list(p["phases"], list(PHASES), "phase")
    stats.repetition_settings(p, "rep_")
    for k, lo, hi in (("phase_seconds", 2, 600), ("file_mb", 16, 65536),
                      ("trace_sample", 0, 10 ** 6), ("seed", 0, 2 ** 31)):
        v = p[k]
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ParameterError(f"{k} must be an integer in {lo}..{hi}, got {v!r}")
    w = p["trace_window_s"]
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0.05 <= w <= 10:
        raise ParameterError(f"trace_window_s must be a number of seconds in 0.05..10, got {w!r}")
    if w + 1.3 > p["phase_seconds"]:
        raise ParameterError(f"trace_window_s ({w}) plus 1.3 s of warm-up and pre-roll must fit in "
                             f"phase_seconds "
                             f"({p['phase_seconds']}); lower it or raise phase_seconds")
    if not isinstance(p["trace"], bool):
        raise ParameterError(f"trace must be True or False, got {p['trace']!r}")
    if not isinstance(p["device"], str) or not re.fullmatch(r"auto|[A-Za-z0-9_.!-]{1,64}", p["device"]):
        raise ParameterError(f"device must be 'auto' or a block device name like 'vda', got {p['device']!r}")
    if not isinstance(p["scratch_parent"], str) or not (p["scratch_parent"] == "auto"
                                                        or os.path.isabs(p["scratch_parent"])):
        raise ParameterError(f"scratch_parent must be 'auto' (perfbook's private scratch directory) "
                             f"or an absolute directory, got {p['scratch_parent']!r}")
    return p


def preflight() -> list[str]:
    reasons = []
    if not Path("/proc/diskstats").is_file():
        reasons.append("no /proc/diskstats (not Linux, or /proc not mounted)")
    if not shutil.which("fio"):
        reasons.append("fio is not installed (apt-get install fio); it drives the workload")
    try:
        statedir.scratch_parent()
    except statedir.UnsafePath as e:
        reasons.append(f"no place for the scratch file: {e}")
    return reasons


def scratch_parent_of(p: dict) -> Path:
    """The directory the scratch directory goes into: 'auto' is tools.statedir's private one."""
    return statedir.scratch_parent() if p["scratch_parent"] == "auto" else Path(p["scratch_parent"])


def _optional() -> dict[str, str]:
    missing = {}
    if not shutil.which("iostat"):
        missing["sysstat"] = "sysstat's iostat is not installed (apt-get install sysstat)"
    elif not shutil.which("stdbuf"):
        missing["sysstat"] = "stdbuf (coreutils) is missing, so iostat's reports can't be followed line by line"
    r = tracefs_preflight(need_uprobes=False)
    if r:
        missing["tracepoints"] = r[0]
    return missing


# ---- the device under the scratch file --------------------------------------------

def device_of(path: str | os.PathLike) -> tuple[str, int, int]:
    """(whole-disk name, major, minor) of the block device holding `path`."""
    st = os.stat(path)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    sysdev = Path(f"/sys/dev/block/{major}:{minor}")
    if not sysdev.exists():
        raise MissingPrerequisite(f"{path} is not on a block device (device {major}:{minor}: "
                                  "tmpfs, overlay or network filesystem?); pass scratch_parent on a disk")
    real = sysdev.resolve()
    if (real / "partition").exists():
        real = real.parent
    dev = (real / "dev").read_text().strip()
    ma, mi = (int(x) for x in dev.split(":"))
    return real.name, ma, mi


def kernel_dev_t(major: int, minor: int) -> int:
    """dev_t as the kernel encodes it in tracepoints (MAJOR << 20 | MINOR)."""
    return (major << 20) | minor


# ---- snapshots ---------------------------------------------------------------------

def read_uptime_cs() -> int:
    """/proc/uptime in 1/100 s, parsed the way sysstat does (seconds*100 + cents)."""
    first = Path("/proc/uptime").read_text().split()[0]
    sec, _, cent = first.partition(".")
    return int(sec) * 100 + int((cent + "00")[:2])


def snapshot(device: str) -> dict:
    """One reading of the device's counters with both clocks."""
    t = time.monotonic_ns()
    text = Path("/proc/diskstats").read_text()
    t_read = time.monotonic_ns()
    up = read_uptime_cs()
    st = ds.parse_diskstats(text).get(device)
    if st is None:
        raise PerfbookError(f"device {device} vanished from /proc/diskstats")
    return {"t_ns": t, "read_ns": t_read - t, "uptime_cs": up, "fields_present": st.fields_present,
            **st.values}


SAMPLER_RT_PRIO = 10


def _realtime_self() -> bool:
    """Run the calling thread SCHED_FIFO (root only), so that its snapshot follows
    sysstat's read without waiting behind the workload for a CPU."""
    try:
        os.sched_setscheduler(threading.get_native_id(), os.SCHED_FIFO,
                              os.sched_param(SAMPLER_RT_PRIO))
        return True
    except (OSError, AttributeError):
        return False


class _realtime:
    """SCHED_FIFO for the calling thread inside the block, then back to its own policy."""

    def __enter__(self):
        tid = threading.get_native_id()
        try:
            self.saved = (os.sched_getscheduler(tid), os.sched_getparam(tid))
        except OSError:
            self.saved = None
        self.on = self.saved is not None and _realtime_self()
        return self

    def __exit__(self, *a):
        if self.on:
            try:
                os.sched_setscheduler(threading.get_native_id(), self.saved[0], self.saved[1])
            except OSError:
                pass
        return False


class _IostatFollower(threading.Thread):
    """Reads sysstat's reports; snapshots diskstats the moment one arrives."""

    def __init__(self, proc: subprocess.Popen, device: str, label):
        super().__init__(daemon=True)
        self.proc, self.device, self.label = proc, device, label
        self.rows: list[dict] = []
        self.error: str | None = None

    def run(self):
        header = None
        _realtime_self()
        try:
            for line in self.proc.stdout:
                if ds.is_header(line):
                    header = line.split()
                    continue
                if header is None or not line.startswith(self.device + " "):
                    continue
                snap = snapshot(self.device)          # first: as close to sysstat's read as we can
                cols = ds.parse_iostat_report_line(header, line, self.device)
                rnd, phase = self.label()
                self.rows.append({"seq": len(self.rows), "round": rnd, "phase": phase,
                                  **snap, **{f"sysstat {k}": v for k, v in cols.items()}})
        except Exception as e:  # reported by collect()
            self.error = f"{type(e).__name__}: {e}"


# ---- workloads ----------------------------------------------------------------------

_libc = None


def _fallocate(fd: int, mode: int, offset: int, length: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    if _libc.fallocate(fd, mode, offset, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 0x01, 0x02


class _OwnWorkload(threading.Thread):
    """The two phases fio can't do on a file: buffered reads with cache drops, discards."""

    def __init__(self, kind: str, path: Path, seconds: float, stop: threading.Event, seed: int):
        super().__init__(daemon=True)
        self.kind, self.path, self.seconds, self.stop_ev = kind, path, seconds, stop
        self.rng = random.Random(seed)
        self.ops = 0
        self.error: str | None = None

    def run(self):
        try:
            getattr(self, "_" + self.kind)()
        except Exception as e:
            self.error = f"{self.kind}: {type(e).__name__}: {e}"

    def _done(self, t_end):
        return self.stop_ev.is_set() or time.monotonic() >= t_end

    def _buffered_read(self):
        t_end = time.monotonic() + self.seconds
        fd = os.open(self.path, os.O_RDONLY)
        try:
            while not self._done(t_end):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.lseek(fd, 0, os.SEEK_SET)
                while not self._done(t_end):
                    b = os.read(fd, 128 * 1024)
                    self.ops += 1
                    if not b:
                        break
        finally:
            os.close(fd)

    def _discard(self):
        t_end = time.monotonic() + self.seconds
        size = 64 * 1024 * 1024
        chunk = 1024 * 1024
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            while not self._done(t_end):
                _fallocate(fd, 0, 0, size)            # allocate (unwritten extents: no data I/O)
                os.fsync(fd)
                offsets = list(range(0, size, chunk))
                self.rng.shuffle(offsets)
                for i, off in enumerate(offsets):
                    if self._done(t_end):
                        break
                    _fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, chunk)
                    self.ops += 1
                    if i % 4 == 3:
                        os.fsync(fd)                  # commit: ext4 issues the discards now
                os.fsync(fd)
        finally:
            os.close(fd)


class _Workload:
    """One phase: a fio process or one of our threads, stoppable on any exit path."""

    def __init__(self, name: str, p: dict, scratch: Path, seconds: float, seed: int):
        self.name, self.spec = name, PHASES[name]
        self.proc: subprocess.Popen | None = None
        self.thread: _OwnWorkload | None = None
        self.stop_ev = threading.Event()
        self.result: dict = {}
        if "fio" in self.spec:
            self.cmd = ["fio", "--name=perfbook", f"--filename={scratch / 'data.bin'}",
                        f"--size={p['file_mb']}M", "--time_based", f"--runtime={seconds}",
                        "--output-format=json", "--randrepeat=0", "--norandommap",
                        "--thread", *self.spec["fio"]]
        else:
            target = scratch / ("data.bin" if self.spec["own"] == "buffered_read" else "holes.bin")
            self.thread = _OwnWorkload(self.spec["own"], target, seconds, self.stop_ev, seed)

    def start(self):
        if self.thread is not None:
            self.thread.start()
        else:
            self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True, start_new_session=True,
                                         preexec_fn=die_with_parent)

    def wait(self, timeout: float) -> dict:
        if self.thread is not None:
            self.thread.join(timeout)
            if self.thread.is_alive():
                self.stop_ev.set()
                self.thread.join(5)
            if self.thread.error:
                raise PerfbookError(f"phase {self.name} failed: {self.thread.error}")
            return {"ops": self.thread.ops}
        out, err = self.proc.communicate(timeout=timeout)
        if self.proc.returncode != 0:
            last = (err or out).strip().splitlines()[-1:] or ["no output"]
            raise PerfbookError(f"fio phase {self.name} failed (exit {self.proc.returncode}): {last[0]}")
        return _fio_summary(out)

    def stop(self):
        self.stop_ev.set()
        if self.proc is not None:
            kill_group(self.proc)       # its whole process group, even if fio itself has exited
        if self.thread is not None and self.thread.is_alive():
            self.thread.join(5)


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL the process group `proc` leads (all our children are started with
    start_new_session and die_with_parent) and reap it. Never raises a timeout, so a slow
    exit can't skip the cleanup steps after it."""
    kill_group(proc)


def _fio_summary(text: str) -> dict:
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


# ---- tracepoints ----------------------------------------------------------------------

TRACE_PREROLL_S = 0.2      # tracing starts this long before the window's first snapshot
TRACE_POSTROLL_S = 0.02
TRACE_EVENTS = ("block/block_io_start", "block/block_io_done",
                "block/block_rq_issue", "block/block_rq_complete")
# the body of a block_* event (the line itself: tools.ftrace)
_BLOCK_BODY = re.compile(r"(?P<maj>\d+),(?P<min>\d+) (?P<rwbs>\S+) (?:(?P<bytes>\d+) )?\((?P<cmd>[^)]*)\) "
                         r"(?P<sector>\d+) \+ (?P<nr>\d+)")


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
    out = []
    for r in ftrace.records(text, trace_stats):
        if not (r.event or "").startswith("block_") or isinstance(r.ts, int):
            continue
        m = _BLOCK_BODY.match(r.body)
        if not m:
            continue
        t_ns = round(r.ts * 1e6) * 1000            # microsecond stamps: exact
        out.append((t_ns, r.event, op_class(m.group("rwbs")), int(m.group("sector")),
                    int(m.group("nr"))))
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


# ---- collect -----------------------------------------------------------------------------

def collect(data_dir=None, profile: str = "default", **overrides) -> Path:
    p = params(profile, **overrides)
    from .paths import resolve_data_dir
    from .dataset import check_writable
    data = resolve_data_dir(data_dir)
    reasons = preflight()
    if reasons:
        raise MissingPrerequisite(reasons[0])
    check_writable(data)
    optional = _optional()
    if not p["trace"]:
        optional["tracepoints"] = "disabled by the parameter trace=False"
    parent = scratch_parent_of(p)
    if not parent.is_dir():
        raise ParameterError(f"scratch_parent {parent} is not a directory")
    dev, major, minor = device_of(parent)
    if p["device"] not in ("auto", dev):
        raise ParameterError(f"scratch_parent {parent} is on {dev}, not on {p['device']}; "
                             "the workload must run on the device we measure")
    if not Path(f"/sys/block/{dev}/mq").is_dir() and "tracepoints" not in optional:
        optional["tracepoints"] = f"{dev} is not a request-based (blk-mq) device: no block_io_* events"

    guard.enter()  # SIGINT/SIGTERM/SIGHUP -> KeyboardInterrupt (tools.guard)
    sd = scratch_dirs.Scratch(CHAPTER, parent=None if p["scratch_parent"] == "auto" else parent)
    scratch = None
    iostat = None
    work = None
    try:
        with measure_lock(f"{CHAPTER} collect"), \
                DatasetWriter(CHAPTER, data, {**p, "profile": profile}) as w:
            for part, why in optional.items():
                w.skip(part, why)
            scratch = sd.__enter__().dir  # 0700, O_EXCL (mkdtemp); closed in the finally below
            w.extra["device"] = {"name": dev, "major": major, "minor": minor,
                                 **_queue_facts(dev)}
            w.extra["_tool_cmds"] = {"fio": ["fio", "--version"], "iostat": ["iostat", "-V"]}
            w.extra["clock"] = {"CONFIG_HZ": _config_hz(), "USER_HZ": os.sysconf("SC_CLK_TCK")}
            rep = stats.repetition("phases", p["phases"], p, "rep_")
            prog = Progress(CHAPTER, total=1 + len(p["phases"]))
            prog.note(f"device {dev} ({major}:{minor}); scratch file of {p['file_mb']} MiB under {parent}")
            _layout(scratch, p)
            prog.step("scratch file laid out")
            state = {"round": -1, "phase": "idle"}
            if "sysstat" not in optional:
                env = {**os.environ, "LC_ALL": "C", "S_COLORS": "never"}
                env.pop("S_TIME_FORMAT", None)
                rt = ["chrt", "-f", str(SAMPLER_RT_PRIO)] if (os.geteuid() == 0 and shutil.which("chrt")) else []
                w.extra["sampling"] = {"iostat_and_sampler_sched_fifo": bool(rt)}
                iostat = subprocess.Popen([*rt, "stdbuf", "-oL", "iostat", "-x", "-d", "-k", "-y", dev,
                                           str(int(IOSTAT_INTERVAL_S))],
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                          text=True, env=env, start_new_session=True,
                                          preexec_fn=die_with_parent)
                follower = _IostatFollower(iostat, dev, lambda: (state["round"], state["phase"]))
                follower.start()
                time.sleep(1.3)                     # the first report is the baseline
            else:
                follower = None
            session_cm = TraceSession(tag="iostat", log=prog.note) if "tracepoints" not in optional else None
            phase_rows, win_rows, tw_rows, sample_rows, raw_traces = [], [], [], [], []
            rng = random.Random(p["seed"])
            with (session_cm or _Null()) as session:
                if session is not None:
                    _arm(session, major, minor)
                i = 0
                for rd in rep.rounds():
                    # rounds are numbered from 0 after the warm-up rounds (those are negative)
                    rnd = rd.index - rep.warmup
                    if rd.index:
                        prog.note(f"after round {rd.index}: {rep.status()}")
                    prog.expect(len(p["phases"]))
                    for name in _round_order(p, rd.index):
                        state["round"], state["phase"] = rnd, name
                        t0 = time.monotonic_ns()
                        work = _Workload(name, p, scratch, p["phase_seconds"], p["seed"] + i)
                        i += 1
                        work.start()
                        time.sleep(1.0)                 # warm-up before the window
                        wid = len(phase_rows)          # one trace window per phase run
                        if session is not None:
                            session.clear()
                            session.set_option("tracing_on", "1")
                            time.sleep(TRACE_PREROLL_S)    # requests completing in the window started after this
                        with _realtime():
                            a = snapshot(dev)
                        time.sleep(p["trace_window_s"])
                        with _realtime():
                            b = snapshot(dev)
                        if session is not None:
                            time.sleep(TRACE_POSTROLL_S)
                            session.set_option("tracing_on", "0")
                        # the steady part of the phase ends just before the workload does
                        time.sleep(max(0.0, (t0 + int((p["phase_seconds"] - PHASE_TAIL_S) * 1e9)
                                             - time.monotonic_ns()) / 1e9))
                        with _realtime():
                            c = snapshot(dev)
                        steady = steady_iops(a, c)
                        rep.add(name, steady)
                        for edge, s in (("start", a), ("end", b), ("phase_end", c)):
                            win_rows.append({"window": wid, "round": rnd, "phase": name, "edge": edge, **s})
                        if session is not None:
                            # parsed after the run: parsing here would hold the GIL and delay the
                            # iostat follower's snapshots
                            raw_traces.append((wid, rnd, name, a["t_ns"] + a["read_ns"] // 2,
                                       b["t_ns"] + b["read_ns"] // 2,
                                               session.buffer_stats().get("overrun", 0),
                                               session.file("trace").read_bytes()))
                        res = work.wait(timeout=p["phase_seconds"] + 60)
                        work = None
                        t1 = time.monotonic_ns()
                        phase_rows.append({"round": rnd, "phase": name, "what": PHASES[name]["what"],
                                           "warmup": rd.warmup, "t_start_ns": t0, "t_end_ns": t1,
                                           "steady_s": (c["t_ns"] - a["t_ns"]) / 1e9,
                                           "steady_iops": steady, **res})
                        prog.step(f"round {rd.index + 1}{' (warm-up)' if rd.warmup else ''} {name}")
                prog.note(f"repetition stopped ({rep.stopped_by}): {rep.status()}")
                state["phase"] = "idle"
            if follower is not None:
                time.sleep(1.2)                     # one more report covers the last phase's end
                _kill(iostat)
            for wid, rnd, name, w0, w1, overrun, raw in raw_traces:
                tw, sample = _summarize_window(raw.decode(errors="replace"), w0, w1,
                                               p["trace_sample"], rng)
                for r in tw:
                    tw_rows.append({"window": wid, "round": rnd, "phase": name, "overrun": overrun, **r})
                for r in sample:
                    sample_rows.append({"window": wid, "round": rnd, "phase": name, **r})
            raw_traces.clear()
            if follower is not None:
                follower.join(5)
                if follower.error:
                    raise PerfbookError(f"reading iostat's output failed: {follower.error}")
                if len(follower.rows) < 3:
                    raise PerfbookError("iostat printed fewer than 3 reports; is the device name right?")
                import pandas as pd
                w.add_table("intervals", pd.DataFrame(follower.rows))
            else:
                w.notes.append("no sysstat: intervals were not recorded")
            import pandas as pd
            w.add_table("phases", pd.DataFrame(phase_rows))
            w.add_table("repetition", pd.DataFrame(rep.records()))
            w.add_table("windows", pd.DataFrame(win_rows))
            if tw_rows:
                w.add_table("trace_windows", pd.DataFrame(tw_rows))
                w.add_table("trace_sample", pd.DataFrame(sample_rows))
                # two instruments, two request sets at the window edges: their closeness is a
                # result (recorded here, shown by the chapter), not a pass/fail condition
                tv = trace_vs_await(pd.DataFrame(win_rows), pd.DataFrame(tw_rows))
                mv = tv[tv["op"].isin(["read", "write"]) & (tv["n_trace"] >= 200)]
                rel = (mv["diff_ms"] / mv["await_ms"]).abs()
                w.extra["trace_vs_await"] = {
                    "n_compared": int(len(mv)),
                    "median_abs_diff_ms": float(mv["diff_ms"].abs().median()) if len(mv) else None,
                    "max_abs_diff_ms": float(mv["diff_ms"].abs().max()) if len(mv) else None,
                    "median_rel_pct": float(100 * rel.median()) if len(mv) else None,
                    "within_5pct_2us": float((mv["diff_ms"].abs() <= 0.05 * mv["await_ms"] + 0.002)
                                             .mean()) if len(mv) else None}
            prog.note("done; scratch file removed")
        return w.dest
    finally:
        try:
            if work is not None:
                work.stop()
        finally:
            if iostat is not None:
                _kill(iostat)
        sd.close()
        guard.leave()


class _Null:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


def _round_order(p: dict, r: int) -> list[str]:
    """The phases of round r: every round starts one phase later (rotation), so order effects spread."""
    ph = p["phases"]
    k = r % len(ph)
    return ph[k:] + ph[:k]


PHASE_TAIL_S = 0.25   # the steady part of a phase ends this long before its nominal end


def steady_iops(a: dict, c: dict) -> float:
    """Completed reads + writes + discards per second between two snapshots (the value
    adaptive repetition tracks per phase)."""
    T = (c["t_ns"] - a["t_ns"]) / 1e9
    if T <= 0:
        return float("nan")
    return sum(c[k] - a[k] for k in ("rd_ios", "wr_ios", "dc_ios")) / T


def _layout(scratch: Path, p: dict) -> None:
    r = run_group(["fio", "--name=layout", f"--filename={scratch / 'data.bin'}",
                   f"--size={p['file_mb']}M", "--rw=write", "--bs=1M", "--direct=1",
                   "--ioengine=psync", "--output-format=json"], preexec_fn=die_with_parent)
    if r.returncode != 0:
        last = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
        raise PerfbookError(f"fio could not lay out the scratch file: {last[0]} "
                            "(does the filesystem support O_DIRECT?)")


def _arm(session: TraceSession, major: int, minor: int) -> None:
    session.set_option("tracing_on", "0")
    session.set_option("trace_clock", "mono")       # same clock as time.monotonic_ns()
    session.set_option("buffer_size_kb", "32768")
    flt = f"dev == {kernel_dev_t(major, minor)}"
    for ev in TRACE_EVENTS:
        f = session.buffer / "events" / ev / "filter"
        if f.exists():
            f.write_text(flt)
        session.enable(ev)


def _summarize_window(text: str, w0: int, w1: int, n_sample: int, rng: random.Random):
    import numpy as np
    events = parse_trace(text)
    recs, unmatched, intervals, dev_intervals = pair_requests(events, w0, w1)
    occ, busy = occupancy(intervals, w0, w1)
    dev_occ, dev_busy = occupancy(dev_intervals, w0, w1)
    rows = []
    for op in ("all", "read", "write", "discard", "flush"):
        sel = [r for r in recs if op == "all" or r["op"] == op]
        q = np.array([r["q2c_ns"] for r in sel], dtype=float) / 1000
        d = np.array([r["d2c_ns"] for r in sel if r["d2c_ns"] is not None], dtype=float) / 1000
        if op != "all" and not len(q):
            continue
        row = {"op": op, "n": len(q), "n_d2c": len(d),
               "q2c_max_us": float(q.max()) if len(q) else float("nan"),
               "q2c_sum_us": float(q.sum()) if len(q) else 0.0,
               "q2c_mean_us": float(q.mean()) if len(q) else float("nan"),
               "d2c_mean_us": float(d.mean()) if len(d) else float("nan")}
        for pct in (50, 90, 99):
            row[f"q2c_p{pct}_us"] = float(np.percentile(q, pct)) if len(q) else float("nan")
        if op == "all":
            row.update({"window_s": (w1 - w0) / 1e9, "occupancy": occ, "busy_frac": busy,
                        "dev_occupancy": dev_occ, "dev_busy_frac": dev_busy,
                        "events": len(events), **unmatched})
        rows.append(row)
    pick = recs if len(recs) <= n_sample else rng.sample(recs, n_sample)
    sample = [{"op": r["op"], "q2c_us": r["q2c_ns"] / 1000,
               "d2c_us": (r["d2c_ns"] / 1000) if r["d2c_ns"] is not None else float("nan")}
              for r in pick]
    return rows, sample


def _queue_facts(dev: str) -> dict:
    q = Path(f"/sys/block/{dev}/queue")
    out = {}
    for k in ("scheduler", "nr_requests", "rotational", "write_cache", "max_sectors_kb",
              "max_segments", "discard_max_bytes", "nomerges"):
        try:
            out[k] = (q / k).read_text().strip()
        except OSError:
            out[k] = None
    try:
        out["nr_hw_queues"] = len([d for d in Path(f"/sys/block/{dev}/mq").iterdir() if d.is_dir()])
    except OSError:
        out["nr_hw_queues"] = None
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if parts[1] == "/" or parts[0].endswith("/" + dev):
                out.setdefault("mount_options", {})[parts[1]] = parts[3]
    except OSError:
        pass
    return out


def _config_hz() -> int | None:
    import gzip
    import platform
    for path in ("/proc/config.gz", f"/boot/config-{platform.release()}"):
        try:
            raw = gzip.open(path, "rt").read() if path.endswith(".gz") else Path(path).read_text()
        except OSError:
            continue
        m = re.search(r"^CONFIG_HZ=(\d+)", raw, re.M)
        if m:
            return int(m.group(1))
    return None


# ---- analysis (used by the chapter and the tests) ------------------------------------------

def our_columns(intervals, clock: str = "monotonic"):
    """Our iostat columns for every interval (row k from snapshots k-1 and k).

    clock='monotonic' uses the nanosecond clock of our snapshots; clock='uptime'
    uses /proc/uptime in 1/100 s like sysstat does.
    """
    import pandas as pd
    rows = []
    iv = intervals.sort_values(["run_id", "seq"] if "run_id" in intervals else ["seq"])
    groups = iv.groupby("run_id") if "run_id" in iv else [(None, iv)]
    for run, g in groups:
        recs = g.to_dict("records")
        for prev, curr in zip(recs, recs[1:]):
            if clock == "monotonic":
                T = (curr["t_ns"] - prev["t_ns"]) / 1e9
            elif clock == "uptime":
                T = (curr["uptime_cs"] - prev["uptime_cs"]) / 100
            elif clock == "nominal":
                T = IOSTAT_INTERVAL_S
            else:
                raise ValueError(f"clock must be monotonic, uptime or nominal, got {clock!r}")
            if T <= 0:
                continue
            c = ds.compute_columns(prev, curr, T)
            d = ds.delta(prev, curr)
            counts = {f"n_{k}": d[k] for k in ("rd_ios", "wr_ios", "dc_ios", "fl_ios",
                                                "rd_merges", "wr_merges", "dc_merges")}
            same = prev["phase"] == curr["phase"] and prev["round"] == curr["round"]
            row = {"seq": curr["seq"], "round": curr["round"],
                   "phase": curr["phase"] if same else "transition",
                   "prev_phase": prev["phase"], "interval_s": T,
                   "tiq_residual_ms": ds.tiq_residual_ms(prev, curr),
                   "io_ticks_delta": d["io_ticks"], **counts, **c}
            if run is not None:
                row = {"run_id": run, **row}
            rows.append(row)
    return pd.DataFrame(rows)


# the request (or merge) count behind each column, for judging a gap
COUNT_OF = {**{c: "rd_ios" for c in ("r/s", "rkB/s", "r_await", "rareq-sz", "%rrqm")},
            **{c: "wr_ios" for c in ("w/s", "wkB/s", "w_await", "wareq-sz", "%wrqm")},
            **{c: "dc_ios" for c in ("d/s", "dkB/s", "d_await", "dareq-sz", "%drqm")},
            "rrqm/s": "rd_merges", "wrqm/s": "wr_merges", "drqm/s": "dc_merges",
            "f/s": "fl_ios", "f_await": "fl_ios"}


def compare_with_sysstat(intervals, clock: str = "monotonic"):
    """Tidy frame: one row per interval and column with ours, sysstat's and the gap."""
    ours = our_columns(intervals, clock)
    keys = ["run_id", "seq"] if "run_id" in ours else ["seq"]
    sys_cols = {f"sysstat {c}": c for c in ds.COLUMNS}
    sysdf = intervals[keys + list(sys_cols)].rename(columns=sys_cols)
    long_o = ours.melt(id_vars=keys + ["phase", "prev_phase"], value_vars=list(ds.COLUMNS),
                       var_name="column", value_name="ours")
    long_s = sysdf.melt(id_vars=keys, var_name="column", value_name="sysstat")
    m = long_o.merge(long_s, on=keys + ["column"])
    cnt = ours[keys + [c for c in ours.columns if c.startswith("n_")]].copy()
    cnt["n_all"] = cnt["n_rd_ios"] + cnt["n_wr_ios"] + cnt["n_dc_ios"] + cnt["n_fl_ios"]
    m = m.merge(cnt, on=keys)
    m["count"] = [r[f"n_{COUNT_OF.get(r['column'], 'all')}"] for r in m.to_dict("records")]
    m = m.drop(columns=[c for c in m.columns if c.startswith("n_")])
    m["abs_diff"] = (m["ours"] - m["sysstat"]).abs()
    scale = m[["ours", "sysstat"]].abs().max(axis=1)
    m["rel_diff"] = (m["abs_diff"] / scale).where(scale > 0, 0.0)
    m["tolerance"] = TOL_ABS + TOL_REL * scale + (m["column"] == "%util") * TOL_UTIL_JIFFY
    m["within"] = m["abs_diff"] <= m["tolerance"]
    if clock == "monotonic":
        # sysstat divides by its own /proc/uptime delta, read just *before* its counters;
        # if iostat is held up between the two reads (a preempted vCPU), its counts span a
        # longer or shorter time than its divisor. Our counts over the nominal interval
        # reproduce that: such a gap is sysstat's divisor, not a disagreement in counters.
        nom = our_columns(intervals, "nominal")
        nl = nom.melt(id_vars=keys, value_vars=list(ds.COLUMNS), var_name="column",
                      value_name="ours_nominal")
        m = m.merge(nl, on=keys + ["column"])
        gap = (m["ours_nominal"] - m["sysstat"]).abs()
        tol = TOL_ABS + TOL_REL * m[["ours_nominal", "sysstat"]].abs().max(axis=1) \
            + (m["column"] == "%util") * TOL_UTIL_JIFFY
        m["divisor_explains"] = ~m["within"] & (gap <= tol)
        m["agree"] = m["within"] | m["divisor_explains"]
    return m


def _stat_line(snap: dict) -> str:
    """A /sys/block/<dev>/stat line (17 numbers) from one of our diskstats snapshots."""
    return " ".join(str(int(snap[k])) for k in ds.FIELDS) + "\n"


def _uptime_line(snap: dict) -> str:
    cs = int(snap["uptime_cs"])
    return f"{cs // 100}.{cs % 100:02d} 0.00\n"


def replay_sysstat(prev: dict, curr: dict, device: str = "pbdev", timeout: float = 30.0) -> dict:
    """Feed sysstat's iostat the very two snapshots we read, and return its second report.

    In a private mount namespace (unshare --mount) a regular file is bind-mounted over
    /proc/uptime, and `iostat -f DIR` reads DIR/block/<device>/stat. Both files hold
    `prev` until iostat has printed its first report (its first read is done), then `curr`;
    iostat sleeps 1 s between its reads, and divides by the uptime it read, so the second
    report is computed from exactly our two snapshots. Root only. Raises PerfbookError
    if iostat can't be fed this way."""
    with tempfile.TemporaryDirectory(prefix="perfbook-replay-") as d:
        d = Path(d)
        stat = d / "sys" / "block" / device / "stat"
        stat.parent.mkdir(parents=True)
        up = d / "uptime"
        stat.write_text(_stat_line(prev))
        up.write_text(_uptime_line(prev))
        env = {**os.environ, "LC_ALL": "C", "S_COLORS": "never"}
        env.pop("S_TIME_FORMAT", None)
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
               f'mount --bind "$1" /proc/uptime && exec stdbuf -oL iostat -x -d -k -f "$2" "$3" 1 2',
               "sh", str(up), str(d / "sys"), device]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env, start_new_session=True, preexec_fn=die_with_parent)
        timer = threading.Timer(timeout, kill_group, (proc,))
        timer.start()
        out = []
        try:
            for line in proc.stdout:
                out.append(line)
                if line.startswith(device + " "):
                    # first report printed: swap in the second snapshot, same inodes
                    with open(stat, "r+") as f:
                        f.truncate(0)
                        f.write(_stat_line(curr))
                    with open(up, "r+") as f:
                        f.truncate(0)
                        f.write(_uptime_line(curr))
                    break
            out += proc.stdout.readlines()
            err = proc.stderr.read()
        finally:
            timer.cancel()
            kill_group(proc)
        rows = ds.parse_iostat_text("".join(out), device)
        if len(rows) != 2:
            raise PerfbookError(f"iostat replay gave {len(rows)} report(s): {err.strip()[-200:]}")
        return rows[1]


def disagreement_table(cmp):
    """Per column: n intervals, share within tolerance, largest absolute and relative gap."""
    import pandas as pd
    rows = []
    for col in ds.COLUMNS:
        g = cmp[cmp["column"] == col]
        if g.empty:
            continue
        i = g["abs_diff"].idxmax()
        rows.append({"column": col, "n": len(g), "within_tol_pct": 100 * g["within"].mean(),
                     "outside": int((~g["within"]).sum()),
                     "divisor_explains": int(g["divisor_explains"].sum()) if "divisor_explains" in g else 0,
                     "max_abs_diff": g["abs_diff"].max(),
                     "at_value": g.loc[i, "sysstat"],
                     "max_rel_diff_pct": 100 * g.loc[g["sysstat"].abs() >= 1, "rel_diff"].max()
                     if (g["sysstat"].abs() >= 1).any() else 0.0})
    return pd.DataFrame(rows)


def window_columns(windows):
    """iostat columns over each trace window (start/end snapshots), one row per window."""
    import pandas as pd
    rows = []
    keys = ["run_id", "window"] if "run_id" in windows else ["window"]
    for key, g in windows.groupby(keys):
        s = g[g["edge"] == "start"].iloc[0].to_dict()
        e = g[g["edge"] == "end"].iloc[0].to_dict()
        T = (e["t_ns"] - s["t_ns"]) / 1e9
        c = ds.compute_columns(s, e, T)
        d = ds.delta(s, e)
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(keys, key)), "round": s["round"], "phase": s["phase"],
                     "window_s": T, "ios": d["rd_ios"] + d["wr_ios"] + d["dc_ios"],
                     "ticks_ms": d["rd_ticks"] + d["wr_ticks"] + d["dc_ticks"], **c})
    return pd.DataFrame(rows)


def trace_vs_await(windows, trace_windows):
    """Per window and op: tracepoint mean latency (io_start->io_done) beside await."""
    import pandas as pd
    wc = window_columns(windows)
    keys = ["run_id", "window"] if "run_id" in wc else ["window"]
    m = trace_windows.merge(wc, on=keys + ["round", "phase"], suffixes=("", "_ds"))
    out = []
    for _, r in m.iterrows():
        aw = {"read": r["r_await"], "write": r["w_await"], "discard": r["d_await"],
              "flush": r["f_await"], "all": r["await"]}.get(r["op"])
        out.append({**{k: r[k] for k in keys}, "round": r["round"], "phase": r["phase"],
                    "op": r["op"], "n_trace": r["n"], "trace_mean_ms": r["q2c_mean_us"] / 1000,
                    "device_mean_ms": r["d2c_mean_us"] / 1000, "await_ms": aw,
                    "trace_p50_ms": r["q2c_p50_us"] / 1000, "trace_p99_ms": r["q2c_p99_us"] / 1000})
    df = pd.DataFrame(out)
    df["diff_ms"] = df["trace_mean_ms"] - df["await_ms"]
    return df


def trace_vs_util(windows, trace_windows):
    """Per window: trace busy fraction vs %util and trace occupancy vs aqu-sz."""
    wc = window_columns(windows)
    keys = ["run_id", "window"] if "run_id" in wc else ["window"]
    tw = trace_windows[trace_windows["op"] == "all"]
    m = tw.merge(wc, on=keys + ["round", "phase"], suffixes=("_trace", ""))
    T = m["window_s_trace"] if "window_s_trace" in m else m["window_s"]
    m["occupancy_as_tiq"] = (m["occupancy"] + (m["carried_in_ns"] - m["carried_out_ns"]) / 1e9 / T
                             if "carried_in_ns" in m else float("nan"))
    m["trace_busy_pct"] = 100 * m["busy_frac"]
    m["device_busy_pct"] = 100 * m["dev_busy_frac"]
    return m[keys + ["round", "phase", "trace_busy_pct", "device_busy_pct", "%util", "occupancy",
                     "occupancy_as_tiq", "dev_occupancy", "aqu-sz",
                     "r/s", "w/s", "await", "f/s", "f_await", "done_without_start",
                     "start_without_done", "flush_without_start", "n"]]


# ---- loading and summarising for the chapter --------------------------------------------

TABLES = ("intervals", "windows", "trace_windows", "trace_sample", "phases")


def load(data_dir=None) -> dict:
    """Every committed dataset of this chapter: tables (with host_id/run_id) and manifests."""
    from .dataset import load_manifests, load_table
    from .paths import resolve_data_dir
    data = resolve_data_dir(data_dir) if data_dir else None
    out = {t: in_written_order(load_table(CHAPTER, t, data), t) for t in TABLES}
    out["manifests"] = load_manifests(CHAPTER, data)
    return out


# Each table's natural key: the analysis must not depend on the order rows were written in.
# trace_sample rows are a random sample per window and op; their order within one carries nothing.
ORDER_KEYS = {"intervals": ["seq"], "windows": ["window", "t_ns"],
              "trace_windows": ["window", "_op"], "trace_sample": ["window", "_op"],
              "phases": ["t_start_ns"], "repetition": ["experiment", "_key"]}
OPS = ("all", "read", "write", "discard", "flush")


def in_written_order(df, table: str):
    """`table`'s rows sorted by host, run and the table's natural key (ORDER_KEYS)."""
    keys = ORDER_KEYS.get(table)
    if not len(df) or keys is None:
        return df
    rank = {o: i for i, o in enumerate(OPS)}
    d = df.assign(_op=df["op"].map(rank).fillna(len(OPS)) if "op" in df else 0,
                  _key=df["key"].map({k: i for i, k in enumerate(PHASES)}).fillna(len(PHASES))
                  if "key" in df else 0)
    return (d.sort_values(["host_id", "run_id", *keys], kind="stable")
            .drop(columns=["_op", "_key"]).reset_index(drop=True))


def newest(manifests: list[dict]) -> dict | None:
    """The dataset the prose quotes (tools.dataset.newest: a quick test run never wins)."""
    from .dataset import newest as newest_real
    return newest_real(manifests)


def only_run(df, run_id):
    return df[df["run_id"] == run_id] if len(df) and "run_id" in df else df


def steady(ours):
    """Intervals that lie wholly inside one phase of a measured (not warm-up) round."""
    return ours[~ours["phase"].isin(["transition", "idle"]) & (ours["round"] >= 0)]


def phase_summary(ours):
    """Per phase: median [CI] of the key columns over steady intervals (tools.stats)."""
    import pandas as pd
    from .stats import summarize
    rows = []
    st = steady(ours).copy()
    st["IOPS"] = st["r/s"] + st["w/s"] + st["d/s"]
    for ph, g in st.groupby("phase", sort=False):
        row = {"phase": ph, "n": len(g)}
        for col in ("IOPS", "await", "aqu-sz", "%util", "f/s", "rareq-sz", "wareq-sz", "%wrqm"):
            s = summarize(g[col])
            row[col] = s.median
            row[f"{col} lo"], row[f"{col} hi"] = s.ci_low, s.ci_high
        rows.append(row)
    order = [p for p in PHASES if p in {r["phase"] for r in rows}]
    return pd.DataFrame(rows).set_index("phase").loc[order].reset_index()


def jiffy_check(ours, hz: int | None) -> dict:
    """Are io_ticks deltas whole jiffies? (io_ticks is kept in jiffies, printed in ms)."""
    if not hz:
        return {"hz": None, "share": float("nan"), "n": len(ours)}
    ms = 1000 // hz if 1000 % hz == 0 else None
    if not ms:
        return {"hz": hz, "share": float("nan"), "n": len(ours)}
    d = ours["io_ticks_delta"]
    return {"hz": hz, "ms": ms, "n": int(len(d)), "share": float((d % ms == 0).mean())}


# Every glue name the chapter's prose uses; figures() fills the ones a dataset can't give
# (no sysstat, no tracepoints, a phase not run) with 'n/a' so the page still renders.
PROSE_KEYS = (
    "agree_pct",
    "aqu_max_abs",
    "busy_util_max_gap",
    "dev_busy_util_med_gap",
    "device",
    "device_share_max_pct",
    "device_share_min_pct",
    "edge_max_rel_pct",
    "file_mb",
    "fio_version",
    "fsync_4k_fs",
    "fsync_fio_rate",
    "host",
    "host_desc",
    "hz",
    "interval_max_ms",
    "interval_min_ms",
    "jiffy_ms",
    "jiffy_share_pct",
    "kernel",
    "little_max_diff",
    "max_rate_rel_pct",
    "max_rate_rel_pct_uptime",
    "min_col_within_pct",
    "mix_max_diff",
    "n_compared",
    "n_divisor",
    "n_intervals",
    "n_phases",
    "n_traced",
    "n_unexplained",
    "n_windows",
    "nr_hw_queues",
    "occ_max_rel_pct",
    "occ_med_rel_pct",
    "occ_tiq_max_rel_pct",
    "occ_tiq_med_rel_pct",
    "occ_worst_phase",
    "phase_seconds",
    "qd16_over_qd1",
    "randread_4k_qd16_aqu",
    "randread_4k_qd16_iops",
    "randread_4k_qd16_util",
    "randread_4k_qd1_iops",
    "randread_4k_qd1_util",
    "ratio_max_rel_big_pct",
    "ratio_med_abs",
    "ratio_within_pct",
    "rounds",
    "run_id",
    "scheduler",
    "seqwrite_4k_qd16_wrqm",
    "skipped",
    "sysstat_version",
    "tiq_max_resid",
    "tol_abs",
    "tol_rel_pct",
    "trace_busy_util_med_gap",
    "trace_max_abs_us",
    "trace_max_rel_pct",
    "trace_med_diff_us",
    "trace_med_rel_pct",
    "unexplained_max_count",
    "unexplained_phases",
    "util_max",
    "util_max_abs",
    "window_jiffies",
    "window_ms",
    "within_pct",
    "write_cache",
)


def _fmt(x, nd=2):
    try:
        if x != x:
            return "n/a"
    except TypeError:
        return str(x)
    return f"{x:,.{nd}f}"


def analyse(D: dict) -> dict:
    """All derived frames the chapter shows, for the newest dataset (plus all-run frames)."""
    man = newest(D["manifests"])
    if man is None:
        return {}
    rid = man["run_id"]
    iv = only_run(D["intervals"], rid) if len(D["intervals"]) else D["intervals"]
    out = {"manifest": man, "run_id": rid}
    if len(iv):
        out["ours"] = our_columns(iv)
        out["cmp"] = compare_with_sysstat(iv)
        out["cmp_uptime"] = compare_with_sysstat(iv, "uptime")
        out["disagree"] = disagreement_table(out["cmp"])
        out["disagree_uptime"] = disagreement_table(out["cmp_uptime"])
        out["phase_summary"] = phase_summary(out["ours"])
    out["phases"] = only_run(D["phases"], rid)
    w = only_run(D["windows"], rid)
    tw = only_run(D["trace_windows"], rid)
    if len(w) and len(tw):
        out["trace_await"] = trace_vs_await(w, tw)
        out["trace_util"] = trace_vs_util(w, tw)
        out["sample"] = only_run(D["trace_sample"], rid)
    return out


def analyse_hosts(D: dict) -> dict[str, dict]:
    """analyse() of the dataset shown for each host (tools.dataset.shown_datasets: the prose's
    dataset for its host, the newest non-quick one of every other host), keyed by host id."""
    from .dataset import shown_datasets
    out = {}
    for hid, rid in sorted(shown_datasets(D["manifests"]).items()):
        out[hid] = analyse({**D, "manifests": [m for m in D["manifests"]
                                               if m["host"]["host_id"] == hid and m["run_id"] == rid]})
    return out


def host_overview(AH: dict[str, dict]):
    """One row per host (its newest dataset): how well its counters agree with sysstat and
    with the tracepoints."""
    import pandas as pd
    rows = []
    for hid, A in AH.items():
        man = A["manifest"]
        row = {"host_id": hid, "run_id": A["run_id"], "kernel": man["host"].get("kernel_release"),
               "device": man.get("device", {}).get("name"),
               "scheduler": re.sub(r".*\[(\S+)\].*", r"\1", man.get("device", {}).get("scheduler") or "?"),
               "rounds": figures(A)["rounds"]}
        if "cmp" in A:
            c = A["cmp"]
            row.update({"intervals": len(A["ours"]), "values compared": len(c),
                        "within tolerance %": round(100 * c["within"].mean(), 2),
                        "agree %": round(100 * c["agree"].mean(), 2)})
        if "trace_await" in A:
            ta = A["trace_await"]
            main = ta[ta["op"].isin(["read", "write"]) & (ta["n_trace"] >= 200)]
            rel = (main["diff_ms"] / main["await_ms"]).abs()
            row.update({"trace windows": int(ta["window"].nunique()),
                        "median |trace - await| %": round(100 * rel.median(), 2)})
        rows.append(row)
    return pd.DataFrame(rows)


def steady_intervals(AH: dict[str, dict]):
    """Every host's steady 1-s intervals (newest dataset each), with IOPS, in one frame."""
    import pandas as pd
    frames = []
    for hid, A in AH.items():
        if "ours" not in A:
            continue
        st = steady(A["ours"]).copy()
        st["IOPS"] = st["r/s"] + st["w/s"] + st["d/s"]
        st.insert(0, "host_id", hid)
        frames.append(st)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def phase_summary_hosts(AH: dict[str, dict]):
    """phase_summary() of every host, with a host column."""
    import pandas as pd
    frames = [A["phase_summary"].assign(host_id=hid) for hid, A in AH.items() if "phase_summary" in A]
    if not frames:
        return pd.DataFrame()
    df = pd.concat(frames, ignore_index=True)
    return df[["host_id", *[c for c in df.columns if c != "host_id"]]]


def compare_hosts(AH: dict[str, dict], value: str = "IOPS"):
    """Each host against the first (sorted) host, per phase, on a column of the steady
    intervals (tools.stats.compare_frame: Mann-Whitney U, Cliff's delta, Hodges-Lehmann)."""
    from .stats import compare_frame
    st = steady_intervals(AH)
    if st.empty or st["host_id"].nunique() < 2:
        return st.iloc[0:0]
    base = sorted(st["host_id"].unique())[0]
    return compare_frame(st, by="host_id", value=value, baseline=base, within="phase")


def figures(A: dict) -> dict[str, str]:
    """Every number the chapter's prose quotes, formatted, keyed by glue name."""
    man = A["manifest"]
    f = {}
    p = man["parameters"]
    dev = man.get("device", {})
    f["run_id"] = man["run_id"]
    f["host"] = man["host"]["host_id"]
    f["host_desc"] = man["host"]["description"]
    f["kernel"] = man["host"]["kernel_release"]
    f["sysstat_version"] = (man["tools"].get("iostat") or "not installed")
    f["fio_version"] = (man["tools"].get("fio") or "not installed")
    f["device"] = dev.get("name", "?")
    f["scheduler"] = re.sub(r".*\[(\S+)\].*", r"\1", dev.get("scheduler") or "?")
    f["write_cache"] = dev.get("write_cache") or "?"
    f["nr_hw_queues"] = str(dev.get("nr_hw_queues"))
    f["hz"] = str(man.get("clock", {}).get("CONFIG_HZ"))
    f["phase_seconds"] = str(p["phase_seconds"])
    ph_ = A.get("phases")
    measured = (ph_[ph_["round"] >= 0]["round"].nunique() if ph_ is not None and len(ph_)
                else p.get("rounds"))
    f["rounds"] = str(measured)
    f["n_phases"] = str(len(p["phases"]))
    f["window_ms"] = _fmt(p["trace_window_s"] * 1000, 0)
    hz = man.get("clock", {}).get("CONFIG_HZ")
    f["window_jiffies"] = _fmt(p["trace_window_s"] * hz, 0) if hz else "n/a"
    f["file_mb"] = str(p["file_mb"])
    if "ours" in A:
        ours, cmp, dis = A["ours"], A["cmp"], A["disagree"]
        f["n_intervals"] = str(len(ours))
        f["n_steady"] = str(len(steady(ours)))
        f["n_compared"] = f"{len(cmp):,}"
        f["within_pct"] = _fmt(100 * cmp["within"].mean(), 1)
        f["tol_abs"] = _fmt(TOL_ABS, 3)
        f["tol_rel_pct"] = _fmt(100 * TOL_REL, 0)
        rates = dis[dis["column"].isin(["r/s", "w/s", "rkB/s", "wkB/s", "f/s", "d/s", "dkB/s"])]
        f["max_rate_rel_pct"] = _fmt(rates["max_rel_diff_pct"].max(), 2)
        ratio_cols = ["r_await", "w_await", "d_await", "f_await", "rareq-sz",
                      "wareq-sz", "dareq-sz", "%rrqm", "%wrqm", "%drqm"]
        rc = cmp[cmp["column"].isin(ratio_cols)]
        f["ratio_within_pct"] = _fmt(100 * rc["within"].mean(), 1)
        f["ratio_med_abs"] = _fmt(rc["abs_diff"].median(), 4)
        big = rc[(rc["count"] >= 1000) & (rc["sysstat"].abs() >= 1)]
        f["ratio_max_rel_big_pct"] = _fmt(100 * big["rel_diff"].max(), 2) if len(big) else "n/a"
        miss = cmp[~cmp["within"]]
        f["n_divisor"] = str(int(cmp["divisor_explains"].sum()))
        f["agree_pct"] = _fmt(100 * cmp["agree"].mean(), 1)
        f["n_unexplained"] = str(int((~cmp["agree"]).sum()))
        um = cmp[~cmp["agree"]]
        f["unexplained_max_count"] = f"{int(um['count'].max()):,}" if len(um) else "0"
        f["unexplained_phases"] = ", ".join(sorted(set(um["phase"]))) or "none"
        f["n_outside"] = str(len(miss))
        f["outside_max_count"] = f"{int(miss['count'].max()):,}" if len(miss) else "0"
        f["outside_phases"] = ", ".join(sorted(set(miss["phase"]))) or "none"
        f["min_col_within_pct"] = _fmt(dis["within_tol_pct"].min(), 1)
        du = A["disagree_uptime"]
        ur = du[du["column"].isin(rates["column"])]
        f["max_rate_rel_pct_uptime"] = _fmt(ur["max_rel_diff_pct"].max(), 2)
        f["util_max_abs"] = _fmt(dis.set_index("column").loc["%util", "max_abs_diff"], 2)
        f["aqu_max_abs"] = _fmt(dis.set_index("column").loc["aqu-sz", "max_abs_diff"], 3)
        f["interval_min_ms"] = _fmt(ours["interval_s"].min() * 1000, 1)
        f["interval_max_ms"] = _fmt(ours["interval_s"].max() * 1000, 1)
        f["tiq_max_resid"] = str(int(ours["tiq_residual_ms"].abs().max()))
        mix = (ours.apply(ds.await_mix, axis=1) - ours["await"]).abs().max()
        f["mix_max_diff"] = f"{mix:.1e}"
        pred = ours.apply(ds.little_prediction, axis=1)
        f["little_max_diff"] = _fmt((ours["aqu-sz"] - pred).abs().max(), 4)
        jc = jiffy_check(ours, man.get("clock", {}).get("CONFIG_HZ"))
        f["jiffy_share_pct"] = _fmt(100 * jc["share"], 1)
        f["jiffy_ms"] = str(jc.get("ms", "?"))
        f["util_max"] = _fmt(ours["%util"].max(), 1)
        ps = A["phase_summary"].set_index("phase")
        for ph in ("randread_4k_qd1", "randread_4k_qd16", "randwrite_4k_qd1", "randwrite_4k_qd16",
                   "fsync_4k", "seqwrite_4k_qd16", "discard", "buffered_seqread", "seqread_1m_qd1"):
            if ph in ps.index:
                r = ps.loc[ph]
                f[f"{ph}_iops"] = _fmt(r["IOPS"], 0)
                f[f"{ph}_util"] = _fmt(r["%util"], 1)
                f[f"{ph}_aqu"] = _fmt(r["aqu-sz"], 2)
                f[f"{ph}_await"] = _fmt(r["await"], 3)
                f[f"{ph}_fs"] = _fmt(r["f/s"], 0)
                f[f"{ph}_wrqm"] = _fmt(r["%wrqm"], 1)
                f[f"{ph}_rareq"] = _fmt(r["rareq-sz"], 1)
        ph = A.get("phases")
        if ph is not None and len(ph) and "fsync_4k" in set(ph["phase"]):
            f["fsync_fio_rate"] = _fmt(ph[ph["phase"] == "fsync_4k"]["fio_write_iops"].median(), 0)
        if "randread_4k_qd1" in ps.index and "randread_4k_qd16" in ps.index:
            f["qd16_over_qd1"] = _fmt(ps.loc["randread_4k_qd16", "IOPS"] / ps.loc["randread_4k_qd1", "IOPS"], 1)
    if "trace_await" in A:
        ta = A["trace_await"]
        main = ta[ta["op"].isin(["read", "write"]) & (ta["n_trace"] >= 200)]
        f["n_windows"] = str(ta["window"].nunique())
        f["n_traced"] = f"{int(ta[ta['op'] == 'all']['n_trace'].sum()):,}"
        f["trace_max_abs_us"] = _fmt(1000 * main["diff_ms"].abs().max(), 2)
        f["trace_med_diff_us"] = _fmt(1000 * main["diff_ms"].median(), 2)
        rel = (main["diff_ms"] / main["await_ms"]).abs()
        f["trace_max_rel_pct"] = _fmt(100 * rel.max(), 1)
        f["trace_med_rel_pct"] = _fmt(100 * rel.median(), 1)
        share = (main["device_mean_ms"] / main["trace_mean_ms"])
        f["device_share_min_pct"] = _fmt(100 * share.min(), 0)
        f["device_share_max_pct"] = _fmt(100 * share.max(), 0)
        tu = A["trace_util"]
        rel = ((tu["occupancy"] - tu["aqu-sz"]) / tu["aqu-sz"].where(tu["aqu-sz"] > 0)).abs()
        f["occ_max_rel_pct"] = _fmt(100 * rel.max(), 1)
        f["occ_med_rel_pct"] = _fmt(100 * rel.median(), 2)
        iw = rel.idxmax()
        f["occ_worst_phase"] = str(tu.loc[iw, "phase"])
        rel2 = ((tu["occupancy_as_tiq"] - tu["aqu-sz"]) / tu["aqu-sz"].where(tu["aqu-sz"] > 0)).abs()
        f["occ_tiq_max_rel_pct"] = _fmt(100 * rel2.max(), 1)
        f["occ_tiq_med_rel_pct"] = _fmt(100 * rel2.median(), 2)
        f["occ_worst_tiq_rel_pct"] = _fmt(100 * rel2.loc[iw], 1)
        edge = ((tu["occupancy_as_tiq"] - tu["occupancy"]).abs()
                / tu["aqu-sz"].where(tu["aqu-sz"] > 0))
        f["edge_max_rel_pct"] = _fmt(100 * edge.max(), 2)
        f["busy_util_max_gap"] = _fmt((tu["trace_busy_pct"] - tu["%util"]).abs().max(), 1)
        f["dev_busy_util_med_gap"] = _fmt((tu["device_busy_pct"] - tu["%util"]).median(), 1)
        f["trace_busy_util_med_gap"] = _fmt((tu["trace_busy_pct"] - tu["%util"]).median(), 1)
    skipped = man.get("skipped", {})
    f["skipped"] = "; ".join(f"{k}: {v}" for k, v in skipped.items()) or "nothing"
    for k in PROSE_KEYS:
        f.setdefault(k, "n/a")
    return f


# ---- plots ------------------------------------------------------------------------------

def _phase_palette(phases):
    import seaborn as sns
    names = [p for p in PHASES if p in set(phases)]
    pal = dict(zip(names, sns.color_palette("tab10", len(names))))
    for extra in sorted(set(phases) - set(PHASES)):
        pal[extra] = (0.6, 0.6, 0.6)          # transition, idle
    return pal


def plot_timeseries(A):
    """Key columns per interval over the run, coloured by phase."""
    import matplotlib.pyplot as plt
    ours = A["ours"].copy()
    ours["t_s"] = ours["interval_s"].cumsum()
    ours["IOPS"] = ours["r/s"] + ours["w/s"] + ours["d/s"]
    cols = [("IOPS", "IOPS (r/s + w/s + d/s)"), ("await", "await (ms)"),
            ("aqu-sz", "aqu-sz"), ("%util", "%util"), ("f/s", "f/s")]
    pal = _phase_palette(ours["phase"])
    fig, axes = plt.subplots(len(cols), 1, figsize=(9, 9), sharex=True)
    for ax, (c, label) in zip(axes, cols):
        ax.plot(ours["t_s"], ours[c], color="0.6", lw=0.8, zorder=1)
        for ph, g in ours.groupby("phase"):
            ax.scatter(g["t_s"], g[c], s=14, color=pal.get(ph, "0.3"), label=ph, zorder=2)
        ax.set_ylabel(label, fontsize=9)
    axes[0].legend(ncol=3, fontsize=7, loc="upper left", bbox_to_anchor=(0, 1.65))
    axes[-1].set_xlabel("seconds since the first report")
    fig.tight_layout()
    return fig


def plot_disagreement(A):
    """|ours - sysstat| relative to the tolerance, per column and interval."""
    import matplotlib.pyplot as plt
    import seaborn as sns
    c = A["cmp"].copy()
    c["gap / tolerance"] = c["abs_diff"] / c["tolerance"]
    fig, ax = plt.subplots(figsize=(9, 4))
    sns.stripplot(data=c, x="column", y="gap / tolerance", ax=ax, size=3, jitter=0.25,
                  order=list(ds.COLUMNS), color="tab:blue")
    ax.axhline(1, color="tab:red", lw=1, ls="--", label="stated tolerance")
    ax.set_ylim(0, max(1.1, c["gap / tolerance"].max() * 1.1))
    ax.tick_params(axis="x", rotation=60, labelsize=8)
    ax.set_xlabel("")
    ax.legend(loc="upper right")
    fig.tight_layout()
    return fig


def plot_latency(A):
    """Per-request latency (io_start -> io_done) from tracepoints, with await as a line."""
    import matplotlib.pyplot as plt
    import seaborn as sns
    ta = A["trace_await"]
    big = ta[ta["op"].isin(["read", "write"]) & (ta["n_trace"] >= 200)]
    keep = set(zip(big["window"], big["op"]))
    s = A["sample"]
    s = s[[(w, o) in keep for w, o in zip(s["window"], s["op"])]].copy()
    ta = big
    phases = [p for p in PHASES if p in set(s["phase"])]
    fig, axes = plt.subplots(len(phases), 1, figsize=(9, 1.35 * len(phases) + 0.6), sharex=True)
    axes = axes if len(phases) > 1 else [axes]
    for ax, ph in zip(axes, phases):
        g = s[s["phase"] == ph]
        sns.histplot(data=g, x="q2c_us", hue="op", ax=ax, log_scale=True, bins=60,
                     element="step", stat="density", common_norm=False, legend=(ax is axes[0]),
                     hue_order=["read", "write"], palette={"read": "tab:blue", "write": "tab:orange"})
        for op, color in (("read", "tab:blue"), ("write", "tab:orange")):
            a = ta[(ta["phase"] == ph) & (ta["op"] == op)]["await_ms"]
            if len(a):
                ax.axvline(1000 * a.mean(), color=color, ls="--", lw=1.2)
        ax.set_ylabel(ph, rotation=0, ha="right", fontsize=8)
        ax.set_yticks([])
    axes[-1].set_xlabel("io_start -> io_done per request (us, log scale); dashed: await over the same window")
    fig.tight_layout()
    return fig


def plot_little(A):
    """aqu-sz against Little's law (intervals) and against the trace's time-average occupancy."""
    import matplotlib.pyplot as plt
    ours, tu = A["ours"], A.get("trace_util")
    pal = _phase_palette(ours["phase"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    pred = ours.apply(ds.little_prediction, axis=1)
    for ph in ours["phase"].unique():
        sel = ours["phase"] == ph
        axes[0].scatter(pred[sel], ours.loc[sel, "aqu-sz"], s=16, color=pal.get(ph, "0.3"), label=ph)
    hi = max(pred.max(), ours["aqu-sz"].max()) * 1.05 + 0.01
    axes[0].plot([0, hi], [0, hi], color="0.4", lw=0.8, ls="--")
    axes[0].set_xlabel("sum of rate x await (Little's law), per interval")
    axes[0].set_ylabel("aqu-sz (from time_in_queue)")
    if tu is not None and len(tu):
        for ph in tu["phase"].unique():
            g = tu[tu["phase"] == ph]
            axes[1].scatter(g["occupancy"], g["aqu-sz"], s=22, color=pal.get(ph, "0.3"))
        hi = max(tu["occupancy"].max(), tu["aqu-sz"].max()) * 1.05 + 0.01
        axes[1].plot([0, hi], [0, hi], color="0.4", lw=0.8, ls="--")
    axes[1].set_xlabel("time-average requests in flight, from tracepoints")
    axes[1].set_ylabel("aqu-sz over the same window")
    axes[0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def plot_saturation(A):
    """%util against IOPS and aqu-sz per phase: 100 % busy is not 100 % of capacity."""
    import matplotlib.pyplot as plt
    ps = A["phase_summary"]
    pal = _phase_palette(ps["phase"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for _, r in ps.iterrows():
        for ax, x in ((axes[0], "IOPS"), (axes[1], "aqu-sz")):
            ax.errorbar(r[x], r["%util"], xerr=[[r[x] - r[f"{x} lo"]], [r[f"{x} hi"] - r[x]]],
                        yerr=[[r["%util"] - r["%util lo"]], [r["%util hi"] - r["%util"]]],
                        fmt="o", color=pal.get(r["phase"]), label=r["phase"] if ax is axes[0] else None)
    axes[0].set_xscale("log")
    from .stats import ci_label
    lab = ci_label(ps["n"])  # the real coverage of the median intervals, per phase's n
    for ax, x in ((axes[0], f"IOPS (median per phase, {lab})"), (axes[1], f"aqu-sz (median per phase, {lab})")):
        ax.set_xlabel(x)
        ax.set_ylabel("%util")
        ax.axhline(100, color="0.5", lw=0.8, ls=":")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def seed_table(ref, A) -> "pd.DataFrame":
    """The seed's reading of each counter beside today's, with the evidence from our data."""
    import pandas as pd
    f = figures(A) if A else {}
    verdict = {
        "merges": ("held", "counted when a bio joins an existing request, now in the plug or the scheduler",
                   f"%wrqm {f.get('seqwrite_4k_qd16_wrqm', 'n/a')} % for sequential 4 KiB writes sent 16 at a time"),
        "ios": ("held", "counted at completion (blk_account_io_done)",
                f"our counts agree with sysstat's: {f.get('agree_pct', 'n/a')} % of all values"),
        "sectors": ("held", "counted per completed chunk (blk_update_request)",
                    f"rareq-sz {f.get('seqread_1m_qd1_rareq', 'n/a')} kB for 1 MiB O_DIRECT reads "
                    "(what reached the device, after the queue limits split them)"),
        "avgrq-sz": ("split", "per direction, in kB: rareq-sz, wareq-sz, dareq-sz",
                     f"rareq-sz {f.get('buffered_seqread_rareq', 'n/a')} kB for 128 KiB buffered reads (readahead)"),
        "ticks": ("changed unit and start point", "ns sums from request allocation to completion, printed in ms",
                  f"trace mean vs await: median gap {f.get('trace_med_rel_pct', 'n/a')} %"),
        "time_in_queue": ("changed", "sum of completed requests' latencies; in-flight requests add nothing until they end",
                          f"time_in_queue - sum of ticks: at most {f.get('tiq_max_resid', 'n/a')} ms per interval"),
        "io_ticks": ("changed", "jiffies between accounting events while requests are in flight (update_io_ticks)",
                     f"{f.get('jiffy_share_pct', 'n/a')} % of deltas are whole {f.get('jiffy_ms', '?')} ms jiffies"),
        "svctm": ("gone", "not printed by sysstat 12.x", "-"),
        "in_flight": ("changed mechanism", "counted on demand from the tag set when the file is read", "-"),
        "interval": ("changed", "sysstat 12.x divides by /proc/uptime deltas in 1/100 s", 
                     f"rate gaps {f.get('max_rate_rel_pct', 'n/a')} % (ns clock) vs {f.get('max_rate_rel_pct_uptime', 'n/a')} % (uptime clock)"),
    }
    rows = []
    for _, r in ref.iterrows():
        v = verdict.get(r["item"], ("?", "?", "?"))
        rows.append({"counter": r["counter"], "3.x column": r["iostat_column_3x"],
                     "seed's reading (3.x)": r["seed_reading"], "today (6.x, sysstat 12.x)": v[1],
                     "verdict": v[0], "evidence in our data": v[2]})
    return pd.DataFrame(rows)
