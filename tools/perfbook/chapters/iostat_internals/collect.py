"""iostat_internals: the measurement (the only part of the chapter that touches the host).

A phased workload (fio, plus two small phases of our own) runs on a scratch file in a private
directory (perfbook.hoststate.scratch: under the scratch parent of perfbook.hoststate.statedir, or under the
scratch_parent parameter), on whatever block device holds it. While it runs:

* sysstat's `iostat -x -d -k -y <dev> 1` reports every interval; the moment a report line
  arrives we snapshot /proc/diskstats ourselves, so our interval and sysstat's end within a
  fraction of a millisecond of each other. A report read late (the run was stopped or
  starved, and newer ones waited behind it) is marked, and the analysis pairs only reports
  read at once, one interval apart (analysis.spans_claim);
* every phase is a measured window (ctx.window, perfbook.hoststate.monitor): a gap inside one (the run
  stopped or starved) means its steady IOPS and trace window are wrong, and nothing is
  published;
* in the middle of every phase a short trace window records block:block_io_start /
  block_io_done (the points where the kernel does its accounting) and block:block_rq_issue /
  block_rq_complete (the device's share), in a private ftrace instance filtered to the
  device, bracketed by two diskstats snapshots.

Everything raw is kept (counters, sysstat's printed columns, per-window trace summaries and a
bounded random sample of per-request latencies); analysis.py recomputes the iostat columns
and the cross-checks from it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import gzip
import os
import platform
import random
import re
import shutil
import struct
import subprocess
import tempfile
import termios
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pandas as pd

from perfbook.analysis.repetition import repetition
from perfbook.core.errors import ParameterError, PerfbookError
from perfbook.core.proc import die_with_parent, kill_group, run_group
from perfbook.hoststate import statedir
from perfbook.hoststate.scratch import Scratch
from perfbook.hoststate.tracefs import TraceSession
from perfbook.hoststate.tracefs import preflight as tracefs_preflight
from perfbook.probes import diskstats as ds
from perfbook.probes.blockdev import device_of, kernel_dev_t, mount_of, queue_facts

from .analysis import off_claim, steady_iops, trace_vs_await
from .parse import (
    IOSTAT_INTERVAL_S,
    PHASE_TAIL_S,
    PHASES,
    SAMPLER_RT_PRIO,
    TRACE_EVENTS,
    TRACE_POSTROLL_S,
    TRACE_PREROLL_S,
    fio_summary,
    occupancy,
    pair_requests,
    parse_trace,
)

# ---- the workload: fio and our own phases, the iostat follower, diskstats snapshots ---------


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
    return {
        "t_ns": t,
        "read_ns": t_read - t,
        "uptime_cs": up,
        "fields_present": st.fields_present,
        **st.values,
    }


def _realtime_self() -> bool:
    """Run the calling thread SCHED_FIFO (root only), so that its snapshot follows
    sysstat's read without waiting behind the workload for a CPU."""
    try:
        os.sched_setscheduler(
            threading.get_native_id(), os.SCHED_FIFO, os.sched_param(SAMPLER_RT_PRIO)
        )
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
    """Reads sysstat's reports; snapshots diskstats the moment one arrives.

    A report is paired with the snapshot taken when it is read, which is when sysstat sampled
    only if it was read at once. A follower that was stopped or starved finds several reports
    waiting, sampled a second apart, and would stamp them all within a millisecond. So the
    pipe is read raw (a text wrapper would hide what is queued behind a line): every report
    has `backlog`, the number of newer reports already there when it was read (0: read at
    once, as far as the pipe can tell), and the analysis pairs only reports read at once whose
    snapshots are one iostat interval apart (analysis.our_columns)."""

    def __init__(self, proc: subprocess.Popen, device: str, label):
        super().__init__(daemon=True)
        self.proc, self.device, self.label = proc, device, label
        self.rows: list[dict] = []
        self.error: str | None = None

    def run(self):
        header = None
        _realtime_self()
        fd = self.proc.stdout.fileno()
        pending = b""
        try:
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                pending += chunk + _queued(fd)
                *lines, pending = pending.split(b"\n")
                texts = [x.decode(errors="replace") for x in lines]
                ours = [i for i, t in enumerate(texts) if t.startswith(self.device + " ")]
                for i, line in enumerate(texts):
                    if ds.is_header(line):
                        header = line.split()
                        continue
                    if header is None or not line.startswith(self.device + " "):
                        continue
                    snap = snapshot(self.device)  # first: as close to sysstat's read as we can
                    cols = ds.parse_iostat_report_line(header, line, self.device)
                    rnd, phase = self.label()
                    self.rows.append(
                        {
                            "seq": len(self.rows),
                            "round": rnd,
                            "phase": phase,
                            "backlog": sum(j > i for j in ours),
                            **snap,
                            **{f"sysstat {k}": v for k, v in cols.items()},
                        }
                    )
        except Exception as e:  # reported by collect()
            self.error = f"{type(e).__name__}: {e}"


def _queued(fd: int) -> bytes:
    """What is already waiting in the pipe `fd` (FIONREAD), read without blocking."""
    out = b""
    while True:
        n = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
        if n <= 0:
            return out
        out += os.read(fd, n)


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
                _fallocate(fd, 0, 0, size)  # allocate (unwritten extents: no data I/O)
                os.fsync(fd)
                offsets = list(range(0, size, chunk))
                self.rng.shuffle(offsets)
                for i, off in enumerate(offsets):
                    if self._done(t_end):
                        break
                    _fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, chunk)
                    self.ops += 1
                    if i % 4 == 3:
                        os.fsync(fd)  # commit: ext4 issues the discards now
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
            self.cmd = [
                "fio",
                "--name=perfbook",
                f"--filename={scratch / 'data.bin'}",
                f"--size={p['file_mb']}M",
                "--time_based",
                f"--runtime={seconds}",
                "--output-format=json",
                "--randrepeat=0",
                "--norandommap",
                "--thread",
                *self.spec["fio"],
            ]
        else:
            target = scratch / ("data.bin" if self.spec["own"] == "buffered_read" else "holes.bin")
            self.thread = _OwnWorkload(self.spec["own"], target, seconds, self.stop_ev, seed)

    def start(self):
        if self.thread is not None:
            self.thread.start()
        else:
            self.proc = subprocess.Popen(
                self.cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )

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
            raise PerfbookError(
                f"fio phase {self.name} failed (exit {self.proc.returncode}): {last[0]}"
            )
        return fio_summary(out)

    def stop(self):
        self.stop_ev.set()
        if self.proc is not None:
            kill_group(self.proc)  # its whole process group, even if fio itself has exited
        if self.thread is not None and self.thread.is_alive():
            self.thread.join(5)


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL the process group `proc` leads (all our children are started with
    start_new_session and die_with_parent) and reap it. Never raises a timeout, so a slow
    exit can't skip the cleanup steps after it."""
    kill_group(proc)


# ---- the measurement --------------------------------------------------------------------


def scratch_parent_of(p: dict) -> Path:
    """The directory the scratch directory goes into: 'auto' is perfbook.hoststate.statedir's private one."""
    return statedir.scratch_parent() if p["scratch_parent"] == "auto" else Path(p["scratch_parent"])


def _optional() -> dict[str, str]:
    missing = {}
    if not shutil.which("iostat"):
        missing["sysstat"] = "sysstat's iostat is not installed (apt-get install sysstat)"
    elif not shutil.which("stdbuf"):
        missing["sysstat"] = (
            "stdbuf (coreutils) is missing, so iostat's reports can't be followed line by line"
        )
    r = tracefs_preflight(need_uprobes=False)
    if r:
        missing["tracepoints"] = r[0]
    return missing


def _round_order(p: dict, r: int) -> list[str]:
    """The repeated phases of round r: every round starts one phase later (rotation), so order
    effects spread."""
    ph = p["repeat"]
    k = r % len(ph)
    return ph[k:] + ph[:k]


def _layout(scratch: Path, p: dict) -> None:
    r = run_group(
        [
            "fio",
            "--name=layout",
            f"--filename={scratch / 'data.bin'}",
            f"--size={p['file_mb']}M",
            "--rw=write",
            "--bs=1M",
            "--direct=1",
            "--ioengine=psync",
            "--output-format=json",
        ],
        preexec_fn=die_with_parent,
    )
    if r.returncode != 0:
        last = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
        raise PerfbookError(
            f"fio could not lay out the scratch file: {last[0]} "
            "(does the filesystem support O_DIRECT?)"
        )


def _arm(session: TraceSession, major: int, minor: int) -> None:
    session.set_option("tracing_on", "0")
    session.set_option("trace_clock", "mono")  # same clock as time.monotonic_ns()
    session.set_option("buffer_size_kb", "32768")
    flt = f"dev == {kernel_dev_t(major, minor)}"
    for ev in TRACE_EVENTS:
        f = session.buffer / "events" / ev / "filter"
        if f.exists():
            f.write_text(flt)
        session.enable(ev)


def _summarize_window(text: str, w0: int, w1: int, n_sample: int, rng: random.Random):
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
        row = {
            "op": op,
            "n": len(q),
            "n_d2c": len(d),
            "q2c_max_us": float(q.max()) if len(q) else float("nan"),
            "q2c_sum_us": float(q.sum()) if len(q) else 0.0,
            "q2c_mean_us": float(q.mean()) if len(q) else float("nan"),
            "d2c_mean_us": float(d.mean()) if len(d) else float("nan"),
        }
        for pct in (50, 90, 99):
            row[f"q2c_p{pct}_us"] = float(np.percentile(q, pct)) if len(q) else float("nan")
        if op == "all":
            row.update(
                {
                    "window_s": (w1 - w0) / 1e9,
                    "occupancy": occ,
                    "busy_frac": busy,
                    "dev_occupancy": dev_occ,
                    "dev_busy_frac": dev_busy,
                    "events": len(events),
                    **unmatched,
                }
            )
        rows.append(row)
    pick = recs if len(recs) <= n_sample else rng.sample(recs, n_sample)
    sample = [
        {
            "op": r["op"],
            "q2c_us": r["q2c_ns"] / 1000,
            "d2c_us": (r["d2c_ns"] / 1000) if r["d2c_ns"] is not None else float("nan"),
        }
        for r in pick
    ]
    return rows, sample


def fs_facts(mount: dict, dev: str, root: str = "/") -> dict:
    """The file system under the scratch directory, for reading the fsync phase: whether ext4
    has a journal (/sys/fs/ext4/<name>/journal_task names the jbd2 thread, '<none>' without a
    journal), its options as ext4 reports them, and the disk's largest segment. Read-only;
    None for what this kernel or file system does not expose."""

    def read(rel):
        try:
            return (Path(root) / rel).read_text().strip()
        except OSError:
            return None

    out = {
        "journal": None,
        "ext4_options": None,
        "max_segment_size": read(f"sys/block/{dev}/queue/max_segment_size"),
    }
    src = (mount or {}).get("source") or ""
    if (mount or {}).get("fstype") == "ext4" and src.startswith("/dev/"):
        name = os.path.basename(src)
        task = read(f"sys/fs/ext4/{name}/journal_task")
        out["journal"] = None if task is None else ("none" if task == "<none>" else task)
        opts = read(f"proc/fs/ext4/{name}/options")
        out["ext4_options"] = None if opts is None else ",".join(opts.split())
    return out


def _config_hz() -> int | None:
    for path in ("/proc/config.gz", f"/boot/config-{platform.release()}"):
        try:
            raw = gzip.open(path, "rt").read() if path.endswith(".gz") else Path(path).read_text()
        except OSError:
            continue
        m = re.search(r"^CONFIG_HZ=(\d+)", raw, re.M)
        if m:
            return int(m.group(1))
    return None


def measure(ctx) -> None:
    """Run the phased workload on the device under the scratch directory, with iostat
    following it and a trace window in every phase, into ctx.writer."""
    p, w = ctx.p, ctx.writer
    optional = _optional()
    if not p["trace"]:
        optional["tracepoints"] = "disabled by the parameter trace=False"
    parent = scratch_parent_of(p)
    if not parent.is_dir():
        raise ParameterError(f"scratch_parent {parent} is not a directory")
    dev, major, minor = device_of(parent)
    if p["device"] not in ("auto", dev):
        raise ParameterError(
            f"scratch_parent {parent} is on {dev}, not on {p['device']}; "
            "the workload must run on the device we measure"
        )
    if not Path(f"/sys/block/{dev}/mq").is_dir() and "tracepoints" not in optional:
        optional["tracepoints"] = (
            f"{dev} is not a request-based (blk-mq) device: no block_io_* events"
        )
    for part, why in optional.items():
        w.skip(part, why)
    sd = ctx.undo.enter_context(
        Scratch(
            "iostat_internals",
            parent=None if p["scratch_parent"] == "auto" else parent,
            say=ctx.say,
        )
    )
    scratch = sd.dir
    mount = mount_of(parent)
    w.extra["device"] = {
        "name": dev,
        "major": major,
        "minor": minor,
        **queue_facts(dev),
        "mount": mount,
    }
    w.extra["filesystem"] = fs_facts(mount, dev)
    w.extra["_tool_cmds"] = {"fio": ["fio", "--version"], "iostat": ["iostat", "-V"]}
    w.extra["clock"] = {"CONFIG_HZ": _config_hz(), "USER_HZ": os.sysconf("SC_CLK_TCK")}
    rep = repetition("phases", p["repeat"], p, "rep_")
    once = [x for x in p["phases"] if x not in p["repeat"]]
    prog = ctx.progress(1 + len(once) + len(p["repeat"]))
    prog.note(f"device {dev} ({major}:{minor}); scratch file of {p['file_mb']} MiB under {parent}")
    setup = ctx.undo.enter_context(ExitStack())  # the scratch file, iostat's start, tracefs
    setup.enter_context(ctx.phase("setup"))
    _layout(scratch, p)
    prog.step("scratch file laid out")
    state = {"round": -1, "phase": "idle"}
    iostat = follower = None
    if "sysstat" not in optional:
        env = {**os.environ, "LC_ALL": "C", "S_COLORS": "never"}
        env.pop("S_TIME_FORMAT", None)
        rt = (
            ["chrt", "-f", str(SAMPLER_RT_PRIO)]
            if (os.geteuid() == 0 and shutil.which("chrt"))
            else []
        )
        w.extra["sampling"] = {"iostat_and_sampler_sched_fifo": bool(rt)}
        iostat = subprocess.Popen(
            [
                *rt,
                "stdbuf",
                "-oL",
                "iostat",
                "-x",
                "-d",
                "-k",
                "-y",
                dev,
                str(int(IOSTAT_INTERVAL_S)),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        ctx.undo.callback(_kill, iostat)
        follower = _IostatFollower(iostat, dev, lambda: (state["round"], state["phase"]))
        follower.start()
        time.sleep(1.3)  # the first report is the baseline
    session = None
    if "tracepoints" not in optional:
        session = ctx.undo.enter_context(TraceSession(tag="iostat", log=prog.note))
        _arm(session, major, minor)
    setup.close()
    running: list = []  # the phase's workload while it runs
    ctx.undo.callback(lambda: running and running[0].stop())
    phase_rows, win_rows, raw_traces = [], [], []
    seq = [0]

    def run_phase(name: str, rnd: int, warmup: bool, seconds: float, label: str) -> float:
        """One phase: its workload, the trace window and the snapshots a (window start), b
        (window end) and c (end of the steady part); returns its steady IOPS (a to c)."""
        state["round"], state["phase"] = rnd, name
        # the phase's numbers (its steady IOPS, its trace window) assume the run went on
        # throughout: a gap in it (perfbook.hoststate.monitor) rejects the run
        with (
            ctx.phase("warmup" if warmup else "measured"),
            ctx.window(f"{name} {label}", gap_rejects=True),
        ):
            t0 = time.monotonic_ns()
            with ctx.phase("warmup"):  # the phase's first second: fio's start and warm-up
                running[:] = [_Workload(name, p, scratch, seconds, p["seed"] + seq[0])]
                seq[0] += 1
                running[0].start()
                time.sleep(1.0)  # warm-up before the window
            wid = len(phase_rows)  # one trace window per phase run
            if session is not None:
                session.clear()
                session.set_option("tracing_on", "1")
            prog.note(
                f"{name}: workload running, iostat sampling" + (", tracing on" if session else "")
            )
            if session is not None:
                time.sleep(TRACE_PREROLL_S)  # requests completing in the window started after this
            with _realtime():
                a = snapshot(dev)
            time.sleep(p["trace_window_s"])
            with _realtime():
                b = snapshot(dev)
            if session is not None:
                time.sleep(TRACE_POSTROLL_S)
                session.set_option("tracing_on", "0")
            # the steady part of the phase ends just before the workload does
            time.sleep(
                max(0.0, (t0 + int((seconds - PHASE_TAIL_S) * 1e9) - time.monotonic_ns()) / 1e9)
            )
            with _realtime():
                c = snapshot(dev)
        steady = steady_iops(a, c)
        for edge, snap in (("start", a), ("end", b), ("phase_end", c)):
            win_rows.append({"window": wid, "round": rnd, "phase": name, "edge": edge, **snap})
        if session is not None:
            # parsed after the run: parsing here would hold the GIL and delay the follower
            raw_traces.append(
                (
                    wid,
                    rnd,
                    name,
                    a["t_ns"] + a["read_ns"] // 2,
                    b["t_ns"] + b["read_ns"] // 2,
                    session.buffer_stats().get("overrun", 0),
                    session.file("trace").read_bytes(),
                )
            )
        with ctx.phase("warmup" if warmup else "measured"):  # the workload's last quarter second
            res = running[0].wait(timeout=seconds + 60)
        running.clear()
        phase_rows.append(
            {
                "round": rnd,
                "phase": name,
                "what": PHASES[name]["what"],
                "warmup": warmup,
                "t_start_ns": t0,
                "t_end_ns": time.monotonic_ns(),
                "steady_s": (c["t_ns"] - a["t_ns"]) / 1e9,
                "steady_iops": steady,
                **res,
            }
        )
        return steady

    # the phases that run once, before the rounds: their one measured run is round 0
    for name in once:
        run_phase(name, 0, False, p["phase_seconds"], "(once)")
        prog.step(f"{name} (once)")
    for rd in rep.rounds():
        rnd = rd.index - rep.warmup  # measured rounds from 0; warm-up rounds are negative
        if rd.index:
            prog.note(f"after round {rd.index}: {rep.status()}")
        prog.expect(len(p["repeat"]))
        for name in _round_order(p, rd.index):
            rep.add(name, run_phase(name, rnd, rd.warmup, p["repeat_seconds"], f"round {rd.index}"))
            prog.step(f"round {rd.index + 1}{' (warm-up)' if rd.warmup else ''} {name}")
    prog.note(f"repetition stopped ({rep.stopped_by}): {rep.status()}")
    state["phase"] = "idle"
    if follower is not None:
        time.sleep(1.2)  # one more report covers the last phase's end
        _kill(iostat)
        follower.join(5)
        if follower.error:
            raise PerfbookError(f"reading iostat's output failed: {follower.error}")
        if len(follower.rows) < 3:
            raise PerfbookError("iostat printed fewer than 3 reports; is the device name right?")
        intervals = pd.DataFrame(follower.rows)
        w.add_table("intervals", intervals)
        late = off_claim(intervals)
        if late:
            w.notes.append(
                f"{len(late)} of {len(intervals) - 1} iostat intervals do not span what sysstat's "
                f"report claims (reports read late: the run was stopped or starved); the analysis "
                f"leaves them out (seq {', '.join(map(str, late[:10]))}"
                f"{', ...' if len(late) > 10 else ''})"
            )
    else:
        w.notes.append("no sysstat: intervals were not recorded")
    w.add_table("phases", pd.DataFrame(phase_rows))
    w.add_table("repetition", pd.DataFrame(rep.records()))
    w.add_table("windows", pd.DataFrame(win_rows))
    _trace_tables(w, p, raw_traces, win_rows)
    prog.note("done; the scratch file is removed with its directory")


def _trace_tables(w, p: dict, raw_traces: list, win_rows: list) -> None:
    """The trace windows' summaries and request sample, and how close they came to await."""
    rng = random.Random(p["seed"])
    tw_rows, sample_rows = [], []
    for wid, rnd, name, w0, w1, overrun, raw in raw_traces:
        tw, sample = _summarize_window(raw.decode(errors="replace"), w0, w1, p["trace_sample"], rng)
        tw_rows += [
            {"window": wid, "round": rnd, "phase": name, "overrun": overrun, **r} for r in tw
        ]
        sample_rows += [{"window": wid, "round": rnd, "phase": name, **r} for r in sample]
    if not tw_rows:
        return
    w.add_table("trace_windows", pd.DataFrame(tw_rows))
    w.add_table("trace_sample", pd.DataFrame(sample_rows))
    # two instruments, two request sets at the window edges: their closeness is a result
    # (recorded here, shown by the chapter), not a pass/fail condition
    tv = trace_vs_await(pd.DataFrame(win_rows), pd.DataFrame(tw_rows))
    mv = tv[tv["op"].isin(["read", "write"]) & (tv["n_trace"] >= 200)]
    rel = (mv["diff_ms"] / mv["await_ms"]).abs()
    w.extra["trace_vs_await"] = {
        "n_compared": int(len(mv)),
        "median_abs_diff_ms": float(mv["diff_ms"].abs().median()) if len(mv) else None,
        "max_abs_diff_ms": float(mv["diff_ms"].abs().max()) if len(mv) else None,
        "median_rel_pct": float(100 * rel.median()) if len(mv) else None,
        "within_5pct_2us": float((mv["diff_ms"].abs() <= 0.05 * mv["await_ms"] + 0.002).mean())
        if len(mv)
        else None,
    }


# ---- sysstat's iostat fed our own snapshots (the tests check our columns against it) -----


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
        cmd = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            'mount --bind "$1" /proc/uptime && exec stdbuf -oL iostat -x -d -k -f "$2" "$3" 1 2',
            "sh",
            str(up),
            str(d / "sys"),
            device,
        ]
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
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
