"""iostat_internals: the phased workload (fio and our own phases), the iostat follower and
the /proc/diskstats snapshots (collect side: touches the host)."""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import random
import subprocess
import threading
import time
from pathlib import Path

from perfbook.probes import diskstats as ds
from perfbook.core.errors import PerfbookError
from perfbook.core.proc import die_with_parent, kill_group
from .spec import PHASES, SAMPLER_RT_PRIO

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
                    snap = snapshot(self.device)          # first: as close to sysstat's read as we can
                    cols = ds.parse_iostat_report_line(header, line, self.device)
                    rnd, phase = self.label()
                    self.rows.append({"seq": len(self.rows), "round": rnd, "phase": phase,
                                      "backlog": sum(j > i for j in ours),
                                      **snap, **{f"sysstat {k}": v for k, v in cols.items()}})
        except Exception as e:  # reported by collect()
            self.error = f"{type(e).__name__}: {e}"


def _queued(fd: int) -> bytes:
    """What is already waiting in the pipe `fd` (FIONREAD), read without blocking."""
    import fcntl
    import struct
    import termios
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
