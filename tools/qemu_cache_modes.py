"""Chapter 'qemu_cache_modes': what each QEMU cache mode does on the host, and what it costs.

The 2013 seed (``003_a6856da90838b12c.txt``, "qemu cache mode まとめ") explained the five
``cache=`` modes with a table of three properties (host page cache, a volatile "disk write
cache" of the virtual disk, flushes disabled), measured them with ``dd`` inside a guest and
ranked them by memory, speed and safety. This module measures all of that on today's QEMU:

  semantics -- strace of ``qemu-io -t MODE`` writing a scratch image, then a flush: the open
               flags of the image (O_DIRECT, O_DSYNC) and the fdatasync/fsync calls per write,
               per flush and at close. ``semantics_table()`` turns the trace into the chapter's
               table; ``check_documented()`` compares it with QEMU's documented mapping.
  bench     -- ``qemu-img bench`` per mode: writes and reads, queue depth 1 and more, writes
               with and without ``--flush-interval``, raw and qcow2, repeated in shuffled order.
  host_dd   -- the seed's ``dd`` (64 KiB blocks, normal and oflag=direct) on this host.
  guest     -- the seed's guest test with ``tools.guest``: ``dd`` of 64 KiB blocks to the
               guest's virtio disk, normal and oflag=direct, per cache mode; every result is
               labelled with the accelerator (KVM or TCG). While the guest runs, the host's
               page cache is sampled (/proc/meminfo Cached/Dirty/Writeback, and the pages of
               the guest's image file that are resident, with mincore(2)).

QEMU sources read for the explanations (block/file-posix.c raw_parse_flags: only O_DIRECT is
added, for BDRV_O_NOCACHE; block/block-backend.c: a BlockBackend without write cache adds
BDRV_REQ_FUA to every write; block/io.c: FUA that the driver can't do is emulated by a flush after
the write, and bdrv_co_flush() returns before the driver's flush_to_disk when BDRV_O_NO_FLUSH is
set) are named in the chapter; the documented mapping is the table of ``-drive cache=`` in the
qemu-system-x86_64(1) manual page of QEMU 7.2 (generated from qemu-options.hx).

Scratch images live in a private directory from tools.scratch (qemu_cache_modes-<pid>-XXXX under
the scratch parent of tools.statedir), removed on success, failure, SIGINT, SIGTERM and SIGHUP
(tools.guard); every child process (strace, qemu-io, qemu-img,
dd) runs in its own process group that is killed if we are interrupted, and the guest's QEMU is
owned by tools.guest.Runner, which does the same for its own scratch directory.
"""
from __future__ import annotations

import ctypes
import math
import os
import random
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

from . import guard, scratch, statedir
from .dataset import DatasetWriter
from .errors import MissingPrerequisite, ParameterError, PerfbookError
from .lock import measure_lock
from .params import begin_collect, check_ints, choose_list, is_int, merge
from .progress import Progress
from . import stats
from .proc import die_with_parent, kill_group

CHAPTER = "qemu_cache_modes"
TITLE = "QEMU cache modes: what each mode does on the host, and what it costs"
SEED = "003_a6856da90838b12c.txt"
MODES = ("none", "directsync", "writethrough", "writeback", "unsafe")
PARTS = ("semantics", "bench", "host_dd", "guest")
FORMATS = ("raw", "qcow2")
OPS = ("write", "read")
AIO = ("threads", "native", "io_uring")
KiB, MiB = 1024, 1024 * 1024

# The documented mapping: qemu-system-x86_64(1), QEMU 7.2, -drive cache= (from qemu-options.hx).
# mode -> (cache.writeback, cache.direct, cache.no-flush)
DOC_SOURCE = ("qemu-system-x86_64(1) manual page of QEMU 7.2 (Debian qemu-system-x86 "
              "1:7.2+dfsg-7), -drive cache=, generated from qemu-options.hx")
DOC_MAPPING: dict[str, tuple[bool, bool, bool]] = {
    "writeback": (True, False, False),
    "none": (True, True, False),
    "writethrough": (False, False, False),
    "directsync": (False, True, False),
    "unsafe": (True, False, True),
}

PROFILES = {
    "quick": {
        "sem_writes": 3, "sem_formats": ["raw"], "sem_aio": ["threads"],
        "bench_formats": ["raw"], "bench_ops": ["write", "read"], "bench_depths": [1],
        "bench_flush_intervals": [0], "bench_count": 64, "bench_warmup": 1, "bench_min_ms": 20,
        "bench_target": 0.05, "bench_min_runs": 1, "bench_max_runs": 1, "bench_budget_s": 30.0,
        "host_dd_target": 0.05, "host_dd_min_runs": 1, "host_dd_max_runs": 1, "host_dd_budget_s": 10.0,
        "host_dd_warmup": 0,
        "guest_modes": ["none", "writeback"], "dd_mib": 4, "dd_repeats": 1, "dd_warmup": 0,
        "kvm_boot_timeout": 5.0,
    },
    "default": {
        "sem_writes": 4, "sem_formats": ["raw", "qcow2"], "sem_aio": ["threads", "native"],
        "bench_formats": ["raw", "qcow2"], "bench_ops": ["write", "read"], "bench_depths": [1, 16],
        "bench_flush_intervals": [0, 16], "bench_count": 256, "bench_warmup": 1, "bench_min_ms": 100,
        "bench_target": 0.05, "bench_min_runs": 6, "bench_max_runs": 40, "bench_budget_s": 60.0,
        "host_dd_target": 0.05, "host_dd_min_runs": 6, "host_dd_max_runs": 50, "host_dd_budget_s": 10.0,
        "host_dd_warmup": 1,
        "guest_modes": None, "dd_mib": 32, "dd_repeats": 9, "dd_warmup": 1,
        "kvm_boot_timeout": 10.0,
    },
    "full": {
        "sem_writes": 8, "sem_formats": ["raw", "qcow2"], "sem_aio": ["threads", "native"],
        "bench_formats": ["raw", "qcow2"], "bench_ops": ["write", "read"],
        "bench_depths": [1, 4, 32], "bench_flush_intervals": [0, 1, 16], "bench_count": 1024,
        "bench_warmup": 1, "bench_min_ms": 200,
        "bench_target": 0.05, "bench_min_runs": 10, "bench_max_runs": 100, "bench_budget_s": 300.0,
        "host_dd_target": 0.05, "host_dd_min_runs": 10, "host_dd_max_runs": 100, "host_dd_budget_s": 30.0,
        "host_dd_warmup": 1,
        "guest_modes": None, "dd_mib": 64, "dd_repeats": 15, "dd_warmup": 1,
        "kvm_boot_timeout": 20.0,
    },
}
COMMON = {"modes": None, "parts": None, "bench_size": 64 * KiB, "bench_aio": "threads",
          "bench_image_mib": 64, "accel": "auto", "boot_timeout": 180.0, "guest_memory_mib": 256,
          "sample_ms": 25, "seed": 1}
INT_KEYS = {"sem_writes": 1, "bench_count": 1, "bench_warmup": 1, "bench_min_ms": 1,
            "dd_mib": 1, "dd_repeats": 1, "dd_warmup": 0,
            "bench_size": 4096, "bench_image_mib": 4, "guest_memory_mib": 96, "sample_ms": 5,
            "seed": 0}


def _int_list(p: dict, key: str, lo: int, hi: int) -> list[int]:
    v = p[key]
    if is_int(v):
        v = [v]
    elif isinstance(v, str):
        try:
            v = [int(x) for x in v.split(",") if x.strip()]
        except ValueError:
            raise ParameterError(f"{key} must be a list of integers, got {p[key]!r}") from None
    if (not isinstance(v, (list, tuple)) or not v
            or not all(is_int(x) and lo <= x <= hi for x in v)):
        raise ParameterError(f"{key} must be a non-empty list of integers in {lo}..{hi}, got {p[key]!r}")
    return sorted(set(v))


def params(profile: str = "default", **overrides) -> dict:
    """Merge a profile with overrides and validate everything (ParameterError)."""
    p = merge(profile, PROFILES, COMMON, overrides)
    check_ints(p, INT_KEYS)
    # adaptive repetition of the bench and of dd on the host (the guest's dd runs a fixed script)
    stats.repetition_settings(p, "bench_")   # bench_warmup >= 1: the first warm-up round sizes runs
    stats.repetition_settings(p, "host_dd_")
    p["modes"] = [m for m in MODES if m in choose_list(p["modes"], MODES, "cache mode")]
    p["parts"] = [x for x in PARTS if x in choose_list(p["parts"], PARTS, "part")]
    gm = choose_list(p["guest_modes"], MODES, "guest cache mode", default=p["modes"])
    # the guest runs the chosen modes only; a profile's guest subset that misses them all: all of them
    p["guest_modes"] = [m for m in MODES if m in gm and m in p["modes"]] or list(p["modes"])
    p["sem_formats"] = choose_list(p["sem_formats"], FORMATS, "semantics image format")
    p["sem_aio"] = choose_list(p["sem_aio"], ("threads", "native"), "semantics aio backend")
    p["bench_formats"] = choose_list(p["bench_formats"], FORMATS, "bench image format")
    p["bench_ops"] = choose_list(p["bench_ops"], OPS, "bench operation")
    p["bench_depths"] = _int_list(p, "bench_depths", 1, 256)
    p["bench_flush_intervals"] = _int_list(p, "bench_flush_intervals", 0, 1 << 20)
    if p["bench_aio"] not in AIO:
        raise ParameterError(f"bench_aio must be one of {', '.join(AIO)}, got {p['bench_aio']!r}")
    if p["bench_size"] % 4096 or p["bench_size"] > 16 * MiB:
        raise ParameterError(f"bench_size must be a multiple of 4096 bytes up to 16 MiB "
                             f"(O_DIRECT needs aligned requests), got {p['bench_size']!r}")
    if p["sem_writes"] > 64:
        raise ParameterError(f"sem_writes must be at most 64 (the traced image is 8 MiB), got {p['sem_writes']}")
    if p["dd_mib"] > 1024:
        raise ParameterError(f"dd_mib must be at most 1024 (the guest disk is that big), got {p['dd_mib']}")
    if p["bench_image_mib"] > 4096:
        raise ParameterError(f"bench_image_mib must be at most 4096, got {p['bench_image_mib']}")
    if p["guest_memory_mib"] > 4096:
        raise ParameterError(f"guest_memory_mib must be at most 4096, got {p['guest_memory_mib']}")
    from .guest import check_boot_params
    return check_boot_params(p, 900)


def preflight() -> list[str]:
    """Why collect can't run here at all ([] = it can; missing strace/QEMU only skip parts)."""
    reasons = []
    for tool, pkg in (("qemu-img", "qemu-utils"), ("qemu-io", "qemu-utils")):
        if not shutil.which(tool):
            reasons.append(f"{tool} is not installed (apt-get install {pkg})")
    try:
        statedir.scratch_parent()
    except statedir.UnsafePath as e:
        reasons.append(f"no place for scratch images: {e}")
    return reasons


# ---------------------------------------------------------------- scratch and children
Scratch = scratch.Scratch  # our private directory for scratch images, removed on every exit path
check_interrupted = guard.check_interrupted  # a signal swallowed in a finalizer raises again


def run(cmd: list[str], what: str, timeout: float = 300, env=None) -> subprocess.CompletedProcess:
    """Run a child in its own process group; killed with its group on any exception."""
    check_interrupted()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True,
                         preexec_fn=die_with_parent, env=env)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(p)
        raise PerfbookError(f"{what} did not finish within {timeout:.0f} s") from None
    finally:
        kill_group(p)
    check_interrupted()
    if p.returncode != 0:
        last = (err.strip() or out.strip() or f"exit {p.returncode}").splitlines()[-1]
        raise PerfbookError(f"{what} failed (exit {p.returncode}): {last}")
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def create_image(path: Path, fmt: str, size_mib: int) -> None:
    """A fully preallocated image, so that runs overwrite allocated blocks (no allocation cost)."""
    run(["qemu-img", "create", "-q", "-f", fmt, "-o", "preallocation=full", str(path),
         f"{size_mib}M"], f"qemu-img create {fmt}")
    _sync_file(path)


def _sync_file(path: Path) -> None:
    """Write back this one file's dirty pages (untimed, between runs) so that no run pays
    for the previous run's dirty data. Only our own scratch file is touched."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------- part 1: semantics (strace)
TRACED = ("openat", "pread64", "preadv", "preadv2", "pwrite64", "pwritev", "pwritev2",
          "fdatasync", "fsync", "sync_file_range", "io_submit", "io_uring_enter")
SEM_IMAGE_MIB = 8
SEM_WRITE = 64 * KiB
# Phase markers: reads of lengths that nothing else uses, before and after the flush command.
MARK_FLUSH_BEGIN = (6 * MiB, 12 * KiB)
MARK_FLUSH_END = (7 * MiB, 20 * KiB)


def qemu_io_trace_cmd(trace_file: Path, image: Path, fmt: str, mode: str, aio: str,
                      n_writes: int) -> list[str]:
    cmds: list[str] = []
    for i in range(n_writes):
        cmds += ["-c", f"write -P 0x5a {i * SEM_WRITE} {SEM_WRITE}"]
    cmds += ["-c", f"read {MARK_FLUSH_BEGIN[0]} {MARK_FLUSH_BEGIN[1]}", "-c", "flush",
             "-c", f"read {MARK_FLUSH_END[0]} {MARK_FLUSH_END[1]}"]
    return ["strace", "-f", "-qq", "-s", "16", "-e", "trace=" + ",".join(TRACED),
            "-o", str(trace_file), "qemu-io", "-f", fmt, "-t", mode, "-i", aio, *cmds, str(image)]


_LINE = re.compile(r"^(\d+)\s+(.*)$")
_RESUMED = re.compile(r"^<\.\.\. (\w+) resumed>(.*)$")
_CALL = re.compile(r"^(\w+)\((.*)$")
_RET = re.compile(r"\)\s+=\s+(-?\d+|0x[0-9a-fA-F]+|\?)(?:\s+(E\w+))?(?:\s+\(.*\))?\s*$")


def parse_strace(text: str) -> list[dict]:
    """strace -f output -> [{seq, pid, syscall, args, ret, errno}] in entry order.

    '<unfinished ...>' / '<... resumed>' pairs are joined; signal and exit lines are dropped.
    """
    events: list[dict] = []
    pending: dict[str, int] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if not m:
            continue
        pid, rest = m.group(1), m.group(2)
        if rest.startswith(("+++", "---")):
            continue
        r = _RESUMED.match(rest)
        if r:
            idx = pending.pop(pid, None)
            if idx is None:
                continue
            ev = events[idx]
            ev["args"] += r.group(2)
            _finish(ev)
            continue
        c = _CALL.match(rest)
        if not c:
            continue
        ev = {"seq": len(events), "pid": int(pid), "syscall": c.group(1), "args": c.group(2),
              "ret": None, "errno": None}
        if rest.endswith("<unfinished ...>"):
            ev["args"] = ev["args"][: -len("<unfinished ...>")].rstrip()
            pending[pid] = len(events)
        else:
            _finish(ev)
        events.append(ev)
    return events


def _finish(ev: dict) -> None:
    m = _RET.search(ev["args"])
    if m:
        v = m.group(1)
        ev["ret"] = None if v == "?" else int(v, 0)
        ev["errno"] = m.group(2) if v.startswith("-") else None
        ev["args"] = ev["args"][: m.start()]


_IOCB_START = re.compile(r"\{aio_data=")
_IOCB_OP = re.compile(r"aio_lio_opcode=IOCB_CMD_(\w+), aio_fildes=(\d+)")
_IOCB_OFFSET = re.compile(r"\baio_offset=(\d+)")
_IOCB_NBYTES = re.compile(r"\baio_nbytes=(\d+)")
_IOVLEN = re.compile(r"iov_len=(\d+)")
_INTS = re.compile(r"(?<![\w.])(-?\d+)(?![\w.])")


def classify(events: list[dict], image_name: str) -> list[dict]:
    """Keep what concerns the image: its opens, I/O and syncs on its fd, io_uring_enter.

    Each kept row gets kind (open/write/read/sync/uring), fd, open flags, bytes, offset.
    """
    fd_flags: dict[int, str] = {}
    rows = []
    for ev in events:
        name, args = ev["syscall"], ev["args"]
        if name == "openat":
            m = re.match(r'\s*[^,]+,\s*"([^"]*)",\s*([A-Z_|0-9]+)', args)
            if not m or not _is_image(m.group(1), image_name) or ev["ret"] is None or ev["ret"] < 0:
                continue
            fd_flags[ev["ret"]] = m.group(2)
            rows.append({**ev, "kind": "open", "fd": ev["ret"], "flags": m.group(2),
                         "bytes": None, "offset": None, "dsync": False})
            continue
        if name == "io_uring_enter":
            rows.append({**ev, "kind": "uring", "fd": None, "flags": None, "bytes": None, "offset": None,
                         "dsync": False})
            continue
        if name == "io_submit":
            # one segment per iocb: strace prints FSYNC/FDSYNC iocbs without aio_offset
            # (and without aio_flags), PWRITE/PREAD with aio_buf + aio_nbytes and
            # PWRITEV/PREADV with an iovec array in aio_buf
            starts = [m.start() for m in _IOCB_START.finditer(args)] + [len(args)]
            for seg in (args[a:b] for a, b in zip(starts, starts[1:])):
                m = _IOCB_OP.search(seg)
                if not m:
                    continue
                op, fd = m.group(1), int(m.group(2))
                if fd not in fd_flags:
                    continue
                kind = ("write" if op.startswith("PWRITE") else "read" if op.startswith("PREAD")
                        else "sync" if op in ("FSYNC", "FDSYNC") else "other")
                nb = off = None
                if kind in ("write", "read"):
                    if op.endswith("V"):
                        nb = sum(int(x) for x in _IOVLEN.findall(seg)) or None
                    else:
                        mb = _IOCB_NBYTES.search(seg)
                        nb = int(mb.group(1)) if mb else None
                    mo = _IOCB_OFFSET.search(seg)
                    off = int(mo.group(1)) if mo else None
                rows.append({**ev, "syscall": f"io_submit:{op}", "kind": kind, "fd": fd,
                             "flags": fd_flags[fd], "bytes": nb, "offset": off,
                             "dsync": bool(re.search(r"RWF_D?SYNC", seg))})
            continue
        m = re.match(r"\s*(\d+)", args)
        if not m:
            continue
        fd = int(m.group(1))
        if fd not in fd_flags:
            continue
        kind = {"pwrite64": "write", "pwritev": "write", "pwritev2": "write",
                "pread64": "read", "preadv": "read", "preadv2": "read",
                "fdatasync": "sync", "fsync": "sync", "sync_file_range": "sync"}.get(name)
        if kind is None:
            continue
        nb = off = None
        if kind in ("write", "read"):
            if name in ("pwrite64", "pread64"):  # (fd, buf, count, offset)
                m = re.search(r",\s*(\d+),\s*(\d+)\s*$", args)
                if m:
                    nb, off = int(m.group(1)), int(m.group(2))
            else:  # (fd, [iov...], iovcnt, offset[, flags])
                parts = [x.strip() for x in re.sub(r"\[.*\]", "[]", args).split(",")]
                nb = sum(int(x) for x in _IOVLEN.findall(args))
                off = int(parts[3]) if len(parts) > 3 and parts[3].isdigit() else None
        rows.append({**ev, "kind": kind, "fd": fd, "flags": fd_flags[fd], "bytes": nb, "offset": off,
                     "dsync": bool(re.search(r"RWF_D?SYNC", args))})
    return rows


def _is_image(path: str, image_name: str) -> bool:
    """The exact image: the same path, or (for a bare name) the same last component;
    "xsem.raw" is not "sem.raw"."""
    if path == image_name:
        return True
    return not image_name.startswith("/") and path.endswith("/" + image_name)


def assign_phases(rows: list[dict]) -> list[dict]:
    """open -> write -> flush -> close, split at the first write and the two marker reads.

    Failed syscalls (e.g. QEMU's O_DIRECT alignment probes, which return EINVAL) count in
    the phase they happen in but are not I/O of the experiment.
    """
    phase = "open"
    out = []
    for r in rows:
        ok = r["ret"] is not None and r["ret"] >= 0
        if r["kind"] == "read" and ok and r["bytes"] == MARK_FLUSH_BEGIN[1]:
            phase = "flush"
            out.append({**r, "phase": phase, "marker": "flush_begin"})
            continue
        if r["kind"] == "read" and ok and r["bytes"] == MARK_FLUSH_END[1]:
            out.append({**r, "phase": phase, "marker": "flush_end"})
            phase = "close"
            continue
        if phase == "open" and r["kind"] == "write" and ok:
            phase = "write"
        out.append({**r, "phase": phase, "marker": ""})
    return out


def trace_rows(text: str, image_name: str) -> list[dict]:
    return assign_phases(classify(parse_strace(text), image_name))


def semantics_table(events):
    """One row per traced run (mode, format, aio): what QEMU did with the image.

    Columns: open_flags (of the fd the writes went to), o_direct, o_dsync, writes,
    syncs_write (during the writes), syncs_per_write, syncs_flush (in the flush command),
    syncs_close (after it), uring_enters, and the three derived properties in the
    documented terms: direct (O_DIRECT), writeback (no sync per write and no O_DSYNC),
    no_flush (no fdatasync/fsync reached the image at all).
    """
    import pandas as pd
    keys = [k for k in ("host_id", "run_id", "mode", "format", "aio") if k in events.columns]
    rows = []
    for key, g in events.groupby(keys, sort=False):
        key = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        ok = g["ret"].fillna(-1) >= 0
        w = g[(g.kind == "write") & ok & (g.phase == "write")]
        flags = ""
        if len(w):
            first = w.iloc[0]
            flags = str(first["flags"])
        else:
            opens = g[g.kind == "open"]
            flags = str(opens.iloc[-1]["flags"]) if len(opens) else ""
        syncs = g[(g.kind == "sync") & ok]
        n_w = len(w)
        s_w = int((syncs.phase == "write").sum())
        s_f = int((syncs.phase == "flush").sum())
        s_c = int((syncs.phase == "close").sum())
        o_direct = "O_DIRECT" in flags
        o_dsync = "O_DSYNC" in flags or re.search(r"\bO_SYNC\b", flags) is not None
        w_dsync = int(w["dsync"].fillna(False).astype(bool).sum()) if "dsync" in w else 0
        synced_writes = o_dsync or (n_w > 0 and (s_w >= n_w or w_dsync == n_w))
        rows.append({**key, "open_flags": flags, "o_direct": o_direct, "o_dsync": o_dsync,
                     "writes": n_w, "dsync_writes": w_dsync, "syncs_write": s_w,
                     "syncs_per_write": s_w / n_w if n_w else math.nan,
                     "syncs_flush": s_f, "syncs_close": s_c,
                     "uring_enters": int((g.kind == "uring").sum()),
                     "direct": o_direct,
                     "writeback": not synced_writes,
                     "no_flush": (s_w + s_f + s_c + w_dsync) == 0 and not o_dsync})
    return pd.DataFrame(rows)


def check_documented(sem):
    """Compare the measured properties with QEMU's documented mapping, per row."""
    import pandas as pd
    out = []
    for r in sem.itertuples():
        doc = DOC_MAPPING.get(r.mode)
        if doc is None:
            continue
        wb, direct, nf = doc
        out.append({"mode": r.mode, "format": r.format, "aio": r.aio,
                     "doc_writeback": wb, "doc_direct": direct, "doc_no_flush": nf,
                     "measured_writeback": bool(r.writeback), "measured_direct": bool(r.direct),
                     "measured_no_flush": bool(r.no_flush),
                     "agrees": (wb, direct, nf) == (bool(r.writeback), bool(r.direct), bool(r.no_flush))})
    return pd.DataFrame(out)


def _redact(text: str, scratch: Path) -> str:
    return text.replace(str(scratch), "SCRATCH")


def _semantics(s: Scratch, p: dict, prog, w) -> list[dict]:
    rows = []
    imgs = {}
    for fmt in p["sem_formats"]:
        imgs[fmt] = s.path(f"sem.{fmt}")
        create_image(imgs[fmt], fmt, SEM_IMAGE_MIB)
    (w.path("strace")).mkdir(exist_ok=True)
    for fmt in p["sem_formats"]:
        for aio in p["sem_aio"]:
            for mode in p["modes"]:
                if aio == "native" and mode not in ("none", "directsync"):
                    continue  # QEMU refuses aio=native without O_DIRECT
                tf = s.path(f"trace-{mode}-{fmt}-{aio}.txt")
                run(qemu_io_trace_cmd(tf, imgs[fmt], fmt, mode, aio, p["sem_writes"]),
                    f"strace qemu-io -t {mode} ({fmt}, aio={aio})", timeout=120)
                text = _redact(tf.read_text(errors="replace"), s.dir)
                (w.path("strace") / tf.name).write_text(text)
                tf.unlink()
                for r in trace_rows(text, imgs[fmt].name):
                    rows.append({"mode": mode, "format": fmt, "aio": aio, **r})
                prog.step(f"semantics {mode} {fmt} aio={aio}")
    for img in imgs.values():
        img.unlink()
    return rows


# ---------------------------------------------------------------- part 2: qemu-img bench
_COMPLETED = re.compile(r"Run completed in ([0-9.]+) seconds")


def bench_cmd(image: Path, fmt: str, mode: str, op: str, depth: int, flush_interval: int,
              count: int, size: int, aio: str) -> list[str]:
    cmd = ["qemu-img", "bench", "-f", fmt, "-t", mode, "-i", aio, "-c", str(count),
           "-d", str(depth), "-s", str(size)]
    if op == "write":
        cmd += ["-w", "--pattern=90"]
        if flush_interval:
            cmd.append(f"--flush-interval={flush_interval}")
    return cmd + [str(image)]


def bench_configs(p: dict) -> list[dict]:
    out = []
    for fmt in p["bench_formats"]:
        for op in p["bench_ops"]:
            for depth in p["bench_depths"]:
                for fi in (p["bench_flush_intervals"] if op == "write" else [0]):
                    for mode in p["modes"]:
                        if p["bench_aio"] == "native" and mode not in ("none", "directsync"):
                            continue
                        out.append({"format": fmt, "op": op, "depth": depth,
                                    "flush_interval": fi, "mode": mode})
    return out


def bench_experiment(c: dict) -> str:
    """The adaptive-repetition experiment a bench config belongs to: its modes are the keys."""
    return f"bench {c['format']} {c['op']} d={c['depth']} fi={c['flush_interval']}"


def _bench(s: Scratch, p: dict, rng, prog, rest: int = 0) -> tuple[list[dict], list[dict]]:
    """Rounds of every config still running, in shuffled order, repeated adaptively.

    One Repetition per (format, op, depth, flush interval), keyed by mode, tracks MB/s; all of
    them share the rounds, and each stops on its own (CI target, budget or maximum). The first
    warm-up round also sizes each config: qemu-img bench reports its run time in milliseconds,
    so a config that finishes in less than bench_min_ms gets proportionally more requests (at
    most 64 times bench_count) for all its timed runs. Returns (rows, repetition records)."""
    imgs = {}
    for fmt in p["bench_formats"]:
        imgs[fmt] = s.path(f"bench.{fmt}")
        create_image(imgs[fmt], fmt, p["bench_image_mib"])
    configs = bench_configs(p)
    counts = {i: p["bench_count"] for i in range(len(configs))}
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(configs):
        groups.setdefault(bench_experiment(c), []).append(i)
    reps = {e: stats.repetition(e, [configs[i]["mode"] for i in ix], p, "bench_")
            for e, ix in groups.items()}
    rows = []
    for rounds in stats.interleave(reps.values()):
        first = next(iter(rounds.values()))
        rnd = first.index - p["bench_warmup"]
        if first.index > p["bench_warmup"]:
            met = sum(1 for r in reps.values() for k in r.keys if r.met(k))
            prog.note(f"bench round {rnd}: {len(rounds)} of {len(reps)} experiments still running, "
                      f"{met} of {sum(len(r.keys) for r in reps.values())} configs within the CI target")
        order = [i for e in rounds for i in groups[e]]
        rng.shuffle(order)
        prog.expect(len(order) + rest)
        for pos, i in enumerate(order):
            c = configs[i]
            count = counts[i]
            cmd = bench_cmd(imgs[c["format"]], c["format"], c["mode"], c["op"], c["depth"],
                            c["flush_interval"], count, p["bench_size"], p["bench_aio"])
            t0 = time.perf_counter()
            r = run(cmd, f"qemu-img bench -t {c['mode']}", timeout=600)
            wall = time.perf_counter() - t0
            _sync_file(imgs[c["format"]])
            m = _COMPLETED.search(r.stdout)
            if not m:
                raise PerfbookError(f"qemu-img bench printed no run time: {r.stdout.strip()[-120:]}")
            sec = float(m.group(1))
            e = bench_experiment(c)
            reps[e].add(c["mode"], count * p["bench_size"] / sec / 1e6 if sec else math.nan)
            if first.index == 0:  # the calibration round (always a warm-up round)
                want = p["bench_min_ms"] / 1000
                if sec < want:
                    counts[i] = count * min(64, math.ceil(want / max(sec, 0.0005)))
            if rnd >= 0:
                nbytes = count * p["bench_size"]
                rows.append({"round": rnd, "position": pos, **c, "count": count,
                             "size": p["bench_size"], "aio": p["bench_aio"], "seconds": sec,
                             "wall_seconds": wall, "mb_per_s": nbytes / sec / 1e6 if sec else math.nan,
                             "iops": count / sec if sec else math.nan,
                             "mean_latency_us": sec * 1e6 * c["depth"] / count if count else math.nan})
            prog.step(f"bench {c['op']} {c['mode']} {c['format']} d={c['depth']} "
                      f"fi={c['flush_interval']}" + (" (warm-up)" if rnd < 0 else ""))
    for img in imgs.values():
        img.unlink()
    stopped = [r.stopped_by for r in reps.values()]
    prog.note("bench: repetition stopped, " + ", ".join(f"{stopped.count(x)} by {x}" for x in
                                                         sorted(set(stopped))))
    return rows, [r for rp in reps.values() for r in rp.records()]


# ---------------------------------------------------------------- part 3: dd on this host
_DD = re.compile(r"^(\d+) bytes .* copied, ([0-9.e+-]+) s", re.M)


def _host_dd(s: Scratch, p: dict, rng, prog, rest: int = 0) -> tuple[list[dict], list[dict]]:
    img = s.path("host-dd.img")
    count = p["dd_mib"] * MiB // (64 * KiB)
    run(["dd", "if=/dev/zero", f"of={img}", "bs=64k", f"count={count}", "conv=fsync"],
        "dd (preallocate)", env={**os.environ, "LC_ALL": "C"})
    rows = []
    rep = stats.repetition("host_dd", ["normal", "direct"], p, "host_dd_")
    for rd in rep.rounds():
        rnd = rd.index - rep.warmup
        prog.expect(2 + rest)
        order = ["normal", "direct"]
        rng.shuffle(order)
        for pos, variant in enumerate(order):
            cmd = ["dd", "if=/dev/zero", f"of={img}", "bs=64k", f"count={count}", "conv=notrunc"]
            if variant == "direct":
                cmd.append("oflag=direct")
            r = run(cmd, f"dd ({variant})", env={**os.environ, "LC_ALL": "C"})
            _sync_file(img)
            m = _DD.search(r.stderr)
            if not m:
                raise PerfbookError(f"dd printed no summary: {r.stderr.strip()[-120:]}")
            nb, sec = int(m.group(1)), float(m.group(2))
            rep.add(variant, nb / sec / 1e6 if sec else math.nan)
            if rnd >= 0:
                rows.append({"round": rnd, "position": pos, "variant": variant, "bytes": nb,
                             "seconds": sec, "mb_per_s": nb / sec / 1e6 if sec else math.nan})
            prog.step(f"host dd {variant}" + (" (warm-up)" if rnd < 0 else ""))
    img.unlink()
    prog.note(f"host dd: repetition stopped by {rep.stopped_by}: {rep.status()}")
    return rows, rep.records()


# ---------------------------------------------------------------- part 4: the guest
def resident_bytes(path) -> int:
    """How many bytes of `path` are in the host page cache now (mincore(2) on a mapping)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0
        addr = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap failed")
        try:
            ps = os.sysconf("SC_PAGE_SIZE")
            vec = (ctypes.c_ubyte * ((size + ps - 1) // ps))()
            if libc.mincore(ctypes.c_void_p(addr), size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore failed")
            return sum(1 for b in bytes(vec) if b & 1) * ps
        finally:
            libc.munmap(ctypes.c_void_p(addr), size)
    finally:
        os.close(fd)


MEMINFO_KEYS = ("Cached", "Dirty", "Writeback", "MemFree")


def meminfo() -> dict[str, int]:
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in MEMINFO_KEYS:
                out[k] = int(v.split()[0])
    return out


class PageCacheSampler(threading.Thread):
    """Samples /proc/meminfo and the residency of the guest's disk image while it runs."""

    def __init__(self, find_image, interval: float):
        super().__init__(daemon=True)
        self.find_image, self.interval = find_image, interval
        self.samples: list[dict] = []
        self._halt = threading.Event()
        self.t0 = time.monotonic()

    def run(self):
        while not self._halt.is_set():
            row = {"t": time.monotonic() - self.t0, **{f"{k.lower()}_kb": v for k, v in meminfo().items()}}
            img = self.find_image()
            res = None
            if img is not None:
                try:
                    res = resident_bytes(img) // KiB
                except OSError:
                    res = None
            row["image_resident_kb"] = res
            self.samples.append(row)
            self._halt.wait(self.interval)

    def stop(self):
        self._halt.set()
        self.join(timeout=5)


DD_BS = 64 * KiB


def guest_script(dd_mib: int, order: list[tuple[int, int, str]]) -> str:
    """busybox sh: dd of 64 KiB blocks to /dev/vda in the given (round, position, variant) order.

    Each dd opens and closes /dev/vda; the last close writes the device's dirty pages back
    (blkdev_put -> sync_blockdev) and drops them, so a 'normal' run's time includes getting its
    data to the virtual disk. A last, untimed dd runs with the device held open, so the guest
    keeps its pages: GUEST_BUFFERS (Buffers in the guest's /proc/meminfo, the page cache of
    block devices) is the guest's copy, for the double-caching comparison.

    Time stamps come from adjtimex (microseconds); the 'stamps' variant measures the cost of
    taking two stamps around nothing.
    """
    count = dd_mib * MiB // DD_BS
    lines = [
        "ts() { adjtimex | awk '/tv_sec/{s=$2} /tv_usec/{u=$2} END{printf \"%d%06d\\n\", s, u}'; }",
        'echo "CACHE_TYPE $(cat /sys/block/vda/cache_type 2>/dev/null)"',
        'echo "WRITE_CACHE $(cat /sys/block/vda/queue/write_cache 2>/dev/null)"',
        'echo "SIZE $(cat /sys/block/vda/size)"',
        "one() {",
        "  a=$(ts)",
        f'  case "$3" in',
        f"    normal) dd if=/dev/zero of=/dev/vda bs=64k count={count} 2>/tmp/dd.err;;",
        f"    direct) dd if=/dev/zero of=/dev/vda bs=64k count={count} oflag=direct 2>/tmp/dd.err;;",
        "    *) : > /tmp/dd.err;;",
        "  esac",
        "  rc=$?",
        "  b=$(ts)",
        '  out=$(grep "records out" /tmp/dd.err | tr " " _)',
        '  echo "DD $1 $2 $3 $a $b $rc ${out:-none}"',
        "}",
    ]
    lines += [f"one {rnd} {pos} {variant}" for rnd, pos, variant in order]
    # double caching: with /dev/vda held open, the guest keeps the pages of one more (untimed)
    # normal dd in its page cache after dd exits; sync sends them to the host
    lines += ["exec 3</dev/vda",
              f"dd if=/dev/zero of=/dev/vda bs=64k count={count} 2>/dev/null",
              "sync",
              "echo \"GUEST_BUFFERS $(awk '/^Buffers:/{print $2}' /proc/meminfo)\"",
              "exec 3<&-",
              "sync"]
    return "\n".join(lines) + "\n"


def guest_order(p: dict, rng) -> list[tuple[int, int, str]]:
    order = []
    for rnd in range(-p["dd_warmup"], p["dd_repeats"]):
        vs = ["normal", "direct", "stamps"]
        rng.shuffle(vs)
        order += [(rnd, pos, v) for pos, v in enumerate(vs)]
    return order


def parse_guest(output: str) -> tuple[dict, list[dict]]:
    info, rows = {}, []
    for line in output.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] in ("CACHE_TYPE", "WRITE_CACHE", "SIZE", "GUEST_BUFFERS"):
            info[parts[0].lower()] = " ".join(parts[1:])
        elif parts[0] == "DD" and len(parts) >= 8:
            rnd, pos, variant, a, b, rc = parts[1:7]
            rows.append({"round": int(rnd), "position": int(pos), "variant": variant,
                         "t0_us": int(a), "t1_us": int(b), "rc": int(rc),
                         "records_out": parts[7].replace("_", " ")})
    return info, rows


def _redact_cmd(cmd: list[str]) -> str:
    from . import guest
    return " ".join(re.sub(r"/(?:[^/\s,=]+/)*guest-\d+-[^/]+/run-[^/]+/", "SCRATCH/",
                           a.replace(str(guest.guest_root()), "build/guest")) for a in cmd[1:])


def _guest(p: dict, rng, prog, w) -> tuple[list, list, list, list]:
    from . import guest
    dd_rows, boots, pc_summary, pc_samples = [], [], [], []
    modes = p["guest_modes"]
    order = modes[:]
    rng.shuffle(order)
    with guest.Runner(accel=p["accel"], kvm_boot_timeout=p["kvm_boot_timeout"],
                      timeout=p["boot_timeout"], progress=prog.note) as r:
        w.extra["guest_artefacts"] = {k: v for k, v in (r.artefacts or {}).items() if k != "dir"}

        def find_image():
            if r.scratch is None:
                return None
            hits = sorted(r.scratch.glob("run-*/disk0.img"))
            return hits[-1] if hits else None

        for boot, mode in enumerate(order):
            check_interrupted()
            seq = guest_order(p, rng)
            disk = guest.DiskSpec(label="dd", cache=mode, size_mib=max(p["dd_mib"], 4))
            cfg = guest.GuestConfig(disks=[disk], memory_mib=p["guest_memory_mib"])
            base = meminfo()
            sampler = PageCacheSampler(find_image, p["sample_ms"] / 1000)
            sampler.start()
            try:
                res = r.run(guest_script(p["dd_mib"], seq), cfg)
            finally:
                sampler.stop()
            check_interrupted()
            after = meminfo()
            if res.rc != 0:
                raise PerfbookError(f"the guest script failed with status {res.rc} (cache={mode})")
            info, rows = parse_guest(res.output)
            want = len(seq)
            if len(rows) != want:
                raise PerfbookError(f"the guest printed {len(rows)} dd results, expected {want} (cache={mode})")
            for x in rows:
                dd_rows.append({"boot": boot, "mode": mode, "accel": res.accel, **x,
                                "bytes": (p["dd_mib"] * MiB) if x["variant"] != "stamps" else 0})
            boots.append({"boot": boot, "mode": mode, "accel": res.accel, "accel_note": res.accel_note,
                          "boot_seconds": res.boot_seconds, "total_seconds": res.total_seconds,
                          "guest_cache_type": info.get("cache_type"),
                          "guest_write_cache": info.get("write_cache"),
                          "guest_disk_sectors": info.get("size"),
                          "guest_buffers_kb": int(info["guest_buffers"]) if info.get("guest_buffers", "").isdigit() else None,
                          "guest_kernel": res.kernel,
                          "qemu_version": res.qemu_version, "memory_mib": p["guest_memory_mib"],
                          "dd_mib": p["dd_mib"], "qemu_cmdline": _redact_cmd(res.cmdline)})
            sm = sampler.samples
            for x in sm:
                pc_samples.append({"boot": boot, "mode": mode, **x})

            def peak(key):
                vals = [x[key] for x in sm if x.get(key) is not None]
                return max(vals) if vals else None
            pc_summary.append({
                "boot": boot, "mode": mode, "accel": res.accel, "samples": len(sm),
                "guest_wrote_mib": p["dd_mib"] * (p["dd_warmup"] + p["dd_repeats"]) * 2,
                "disk_mib": disk.size_mib,
                "cached_base_kb": base["Cached"], "cached_peak_kb": peak("cached_kb"),
                "cached_after_kb": after["Cached"],
                "dirty_base_kb": base["Dirty"], "dirty_peak_kb": peak("dirty_kb"),
                "writeback_peak_kb": peak("writeback_kb"),
                "image_resident_peak_kb": peak("image_resident_kb"),
                "image_resident_last_kb": next((x["image_resident_kb"] for x in reversed(sm)
                                                if x.get("image_resident_kb") is not None), None)})
            prog.step(f"guest cache={mode}: {res.accel}, {res.total_seconds:.1f} s")
    return dd_rows, boots, pc_summary, pc_samples


# ---------------------------------------------------------------- collect
def collect(data_dir=None, profile: str = "default", **overrides) -> Path:
    """Measure this host; returns the new dataset's directory."""
    import pandas as pd
    from . import guest
    p, data = begin_collect(params, preflight, profile, overrides, data_dir)
    rng = random.Random(p["seed"])
    parts = list(p["parts"])
    skipped = {}
    if "semantics" in parts and not shutil.which("strace"):
        skipped["semantics"] = "strace is not installed (apt-get install strace)"
    if "host_dd" in parts and not shutil.which("dd"):
        skipped["host_dd"] = "dd is not installed (coreutils)"
    if "guest" in parts and (g := guest.preflight()):
        skipped["guest"] = g[0]
    parts = [x for x in parts if x not in skipped]
    n_sem = sum(1 for _f in p["sem_formats"] for a in p["sem_aio"] for m in p["modes"]
                if not (a == "native" and m not in ("none", "directsync"))) if "semantics" in parts else 0
    # step counts at the least; adaptive rounds raise them as they go
    n_bench = len(bench_configs(p)) * (p["bench_min_runs"] + p["bench_warmup"]) if "bench" in parts else 0
    n_dd = 2 * (p["host_dd_min_runs"] + p["host_dd_warmup"]) if "host_dd" in parts else 0
    n_guest = len(p["guest_modes"]) if "guest" in parts else 0
    public = {**p, "profile": profile}
    with guard.interruptible(), measure_lock(CHAPTER), DatasetWriter(CHAPTER, data, public) as w, \
            Scratch(CHAPTER, say=lambda m: print(f"[{CHAPTER}] {m}", flush=True)) as s:
        prog = Progress(CHAPTER, n_sem + n_bench + n_dd + n_guest)
        w.extra["_tool_cmds"] = {"qemu-img": ["qemu-img", "--version"],
                                 "qemu-io": ["qemu-io", "--version"],
                                 "strace": ["strace", "-V"],
                                 "qemu-system": [guest.QEMU, "--version"],
                                 "dd": ["dd", "--version"]}
        w.extra["documented_mapping"] = {"source": DOC_SOURCE,
                                         "columns": ["cache.writeback", "cache.direct", "cache.no-flush"],
                                         "modes": {k: list(v) for k, v in DOC_MAPPING.items()}}
        w.extra["scratch_fs"] = _fstype(str(s.dir.parent))
        w.extra["host_disk"] = _host_disk_info(str(s.dir.parent))
        w.extra["vm_dirty"] = {k: _read(f"/proc/sys/vm/{k}") for k in
                               ("dirty_ratio", "dirty_background_ratio", "dirty_expire_centisecs",
                                "dirty_writeback_centisecs")}
        for part, why in skipped.items():
            w.skip(part, why)
        for part in PARTS:
            if part not in p["parts"]:
                w.skip(part, "left out by the parts parameter")
        if "semantics" in parts:
            w.add_table("trace", pd.DataFrame(_semantics(s, p, prog, w)).drop(columns=["args"]))
        rep_rows = []
        if "bench" in parts:
            rows, recs = _bench(s, p, rng, prog, rest=n_dd + n_guest)
            w.add_table("bench", pd.DataFrame(rows))
            rep_rows += recs
        if "host_dd" in parts:
            rows, recs = _host_dd(s, p, rng, prog, rest=n_guest)
            w.add_table("host_dd", pd.DataFrame(rows))
            rep_rows += recs
        if rep_rows:
            w.add_table("repetition", pd.DataFrame(rep_rows))
        if "guest" in parts:
            try:
                dd_rows, boots, pcs, pcsamples = _guest(p, rng, prog, w)
            except MissingPrerequisite as e:  # e.g. the guest kernel can't be fetched
                w.skip("guest", str(e))
            else:
                w.add_table("guest_dd", pd.DataFrame(dd_rows))
                w.add_table("guest_boots", pd.DataFrame(boots))
                w.add_table("pagecache", pd.DataFrame(pcs))
                w.add_table("pagecache_samples", pd.DataFrame(pcsamples))
    return w.published


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _fstype(path: str) -> dict:
    best, fs, dev = "", None, None
    for line in (_read("/proc/mounts") or "").splitlines():
        d, mnt, typ = line.split()[:3]
        if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
            best, fs, dev = mnt, typ, d
    return {"mount": best, "fstype": fs, "device": dev}


def _host_disk_info(path: str) -> dict:
    dev = _fstype(path).get("device") or ""
    name = os.path.basename(dev)
    q = Path(f"/sys/class/block/{name}")
    if not q.exists():
        return {"device": name}
    base = q if (q / "queue").exists() else q.parent
    return {"device": name, "write_cache": _read(str(base / "queue" / "write_cache")),
            "rotational": _read(str(base / "queue" / "rotational")),
            "driver": os.path.basename(os.path.realpath(base / "device" / "driver"))
            if (base / "device" / "driver").exists() else None}


# ---------------------------------------------------------------- explain side
def load(data_dir=None) -> dict:
    """Everything the chapter shows: every dataset's tables, manifests, the seed's figures."""
    from .dataset import load_manifests, load_reference, load_table
    names = ("trace", "bench", "host_dd", "guest_dd", "guest_boots", "pagecache", "pagecache_samples")
    out = {n: _natural_order(load_table(CHAPTER, n, data_dir), n) for n in names}
    out["manifests"] = load_manifests(CHAPTER, data_dir)
    out["reference"] = load_reference(CHAPTER, data_dir)
    return out


# Each table's natural key: the analysis must not depend on the order rows were written in
# (_f/_a/_m: format, aio and mode in FORMATS/AIO/MODES order, the order the trace runs them).
NATURAL_KEYS = {"bench": ["round", "position"], "host_dd": ["round", "position"],
                "guest_boots": ["boot"], "guest_dd": ["boot", "round", "position"],
                "pagecache": ["boot"], "pagecache_samples": ["boot", "t"],
                "trace": ["_f", "_a", "_m", "seq"]}


def _natural_order(df, name):
    if df.empty or name not in NATURAL_KEYS:
        return df
    rank = {"_f": ("format", FORMATS), "_a": ("aio", AIO), "_m": ("mode", MODES)}
    keys = NATURAL_KEYS[name]
    d = df.assign(**{k: df[c].map({v: i for i, v in enumerate(o)}).fillna(len(o))
                     for k, (c, o) in rank.items() if k in keys})
    return (d.sort_values(["host_id", "run_id", *keys], kind="stable")
            .drop(columns=[k for k in rank if k in keys]).reset_index(drop=True))


def latest(manifests: list[dict]) -> dict | None:
    """The dataset the prose quotes (tools.dataset.newest: a quick test run never wins)."""
    from .dataset import newest
    return newest(manifests)


def newest_with(table, manifests):
    """The rows of the newest dataset that has this table (empty frame if none); a quick
    test run only where no other dataset has it (tools.dataset.newest)."""
    if table is None or table.empty:
        return table
    from .dataset import newest
    have = set(zip(table["host_id"], table["run_id"]))
    m = newest([m for m in manifests if (m["host"]["host_id"], m["run_id"]) in have])
    if m is None:
        return table.iloc[0:0]
    return table[(table.host_id == m["host"]["host_id"]) & (table.run_id == m["run_id"])]


BENCH_KEYS = ["format", "op", "depth", "flush_interval"]


def compare_modes(bench, baseline: str = "none", value: str = "mb_per_s"):
    """Every mode against `baseline` per host, run and bench configuration, with
    tools.stats.compare (Mann-Whitney U, Cliff's delta, Hodges-Lehmann shift)."""
    from .stats import compare_frame
    if bench is None or bench.empty:
        return bench
    return compare_frame(bench, by="mode", value=value, baseline=baseline,
                         within=["host_id", "run_id", *[k for k in BENCH_KEYS if k in bench]])


def compare_hosts(table, manifests, keys, value: str = "mb_per_s"):
    """Each host's shown dataset (tools.dataset.only_shown) against the first host's, within
    `keys` (e.g. mode)."""
    from .dataset import only_shown
    from .stats import compare_frame
    t = only_shown(table, manifests)
    if t is None or t.empty or t.host_id.nunique() < 2:
        return t.iloc[0:0] if t is not None else t
    base = sorted(t.host_id.unique())[0]
    return compare_frame(t, by="host_id", value=value, baseline=base, within=list(keys))


def bench_summary(bench):
    from .stats import summarize_frame
    keys = ["host_id", "format", "op", "depth", "flush_interval", "mode"]
    t = summarize_frame(bench, keys, "mb_per_s")
    lat = summarize_frame(bench, keys, "mean_latency_us")[keys + ["median"]].rename(
        columns={"median": "latency_us"})
    return t.merge(lat, on=keys)


def guest_dd_table(dd):
    """MB/s per run, with the cost of the two time stamps (the 'stamps' variant of the same
    boot, median) taken out."""
    import pandas as pd
    d = dd[dd["round"] >= 0].copy()
    d["elapsed_us"] = d["t1_us"] - d["t0_us"]
    stamps = d[d.variant == "stamps"].groupby(["host_id", "run_id", "boot"])["elapsed_us"].median()
    d = d[d.variant != "stamps"].copy()
    d["stamp_us"] = [stamps.get((h, r, b), 0.0) for h, r, b in zip(d.host_id, d.run_id, d["boot"])]
    d["mb_per_s"] = d["bytes"] / ((d["elapsed_us"] - d["stamp_us"]).clip(lower=1) / 1e6) / 1e6
    d["mb_per_s_raw"] = d["bytes"] / (d["elapsed_us"] / 1e6) / 1e6
    return pd.DataFrame(d)


def guest_dd_summary(dd):
    from .stats import summarize_frame
    d = guest_dd_table(dd)
    return summarize_frame(d, ["host_id", "accel", "mode", "variant"], "mb_per_s")


def host_dd_summary(hd):
    from .stats import summarize_frame
    return summarize_frame(hd, ["host_id", "variant"], "mb_per_s")


def pagecache_table(pc):
    """Host page-cache growth per guest run, in MiB."""
    t = pc.copy()
    t["cached_growth_mib"] = (t.cached_peak_kb - t.cached_base_kb) / 1024
    t["dirty_growth_mib"] = (t.dirty_peak_kb - t.dirty_base_kb) / 1024
    t["image_resident_peak_mib"] = t.image_resident_peak_kb / 1024
    t["writeback_peak_mib"] = t.writeback_peak_kb / 1024
    return t


def seed_dd(reference):
    """The seed's dd table, tidy: source, mode, variant, mb_per_s, low, high."""
    import pandas as pd
    r = reference[reference.kind == "dd"]
    out = r[["mode", "item", "value", "value_low", "value_high"]].rename(
        columns={"item": "variant", "value": "mb_per_s", "value_low": "low", "value_high": "high"})
    for c in ("mb_per_s", "low", "high"):
        out[c] = pd.to_numeric(out[c], errors="coerce")
    return out.reset_index(drop=True)


def dd_comparison(guest_summary, host_summary, reference, accel_label: str):
    """Seed vs today, one row per (source, mode incl. 'host', variant)."""
    import pandas as pd
    rows = []
    dd = reference[reference.kind == "dd"]
    m = re.search(r"qemu (\S+?),", dd.environment.iloc[0]) if len(dd) else None
    label = f"seed {dd.date.iloc[0][:4]}" + (f" (QEMU {m.group(1)})" if m else "") if len(dd) else "seed"
    for r in seed_dd(reference).itertuples():
        rows.append({"source": label, "mode": r.mode, "variant": r.variant,
                     "mb_per_s": r.mb_per_s, "low": r.low, "high": r.high})
    for r in host_summary.itertuples():
        rows.append({"source": f"this host, {accel_label} guest", "mode": "host", "variant": r.variant,
                     "mb_per_s": r.median, "low": r.ci_low, "high": r.ci_high})
    for r in guest_summary.itertuples():
        rows.append({"source": f"this host, {accel_label} guest", "mode": r.mode, "variant": r.variant,
                     "mb_per_s": r.median, "low": r.ci_low, "high": r.ci_high})
    return pd.DataFrame(rows)


RANK_REL_TOL = 0.05   # speed: medians closer than this (relative) rank as equal
RANK_MEM_TOL_MIB = 1.0  # memory: residencies closer than this rank as equal


def order_with_ties(values: dict[str, tuple[float, float, float]], ascending=True,
                    rel_tol: float = RANK_REL_TOL) -> str:
    """'a < b = c' from {mode: (median, ci_low, ci_high)}: neighbours are written as equal
    when their intervals overlap or their medians differ by less than rel_tol (relative)."""
    items = sorted(values.items(), key=lambda kv: kv[1][0], reverse=not ascending)
    out = ""
    prev = None
    for name, (med, lo, hi) in items:
        if prev is None:
            out = name
        else:
            pmed, plo, phi = prev
            overlap = not (hi < plo or lo > phi)
            close = abs(med - pmed) < rel_tol * max(abs(med), abs(pmed))
            out += (" = " if overlap or close else (" < " if ascending else " > ")) + name
        prev = (med, lo, hi)
    return out


def parse_order(text: str) -> list[list[str]]:
    """'a < b = c < d' -> [[a], [b, c], [d]] (ascending groups)."""
    groups = []
    for part in re.split(r"\s*<\s*", text.strip()):
        groups.append([x.strip() for x in part.split("=") if x.strip()])
    return groups


def pairwise_disagreements(seed_order: str, ours: str) -> list[str]:
    """Pairs the two orderings rank differently (one says a < b, the other b < a or a = b)."""
    def rank(order):
        return {m: i for i, g in enumerate(parse_order(order)) for m in g}
    a, b = rank(seed_order), rank(ours)
    common = [m for m in a if m in b]
    out = []
    for i, x in enumerate(common):
        for y in common[i + 1:]:
            sa = (a[x] > a[y]) - (a[x] < a[y])
            sb = (b[x] > b[y]) - (b[x] < b[y])
            if sa != sb:
                def rel(s, u, v):
                    return f"{u} {'<' if s < 0 else '>' if s > 0 else '='} {v}"
                out.append(f"2013: {rel(sa, x, y)}, today: {rel(sb, x, y)}")
    return out


def order_by_value(values: dict[str, float], tol: float) -> str:
    """'a < b = c' from {mode: value}, ascending; neighbours closer than `tol` are equal."""
    items = sorted(values.items(), key=lambda kv: kv[1])
    out, prev = "", None
    for name, v in items:
        out = name if prev is None else out + (" = " if abs(v - prev) < tol else " < ") + name
        prev = v
    return out


SAFETY_LEVELS = {
    0: "no fdatasync/fsync reaches the image, not even for a guest flush",
    1: "synced on guest flushes only; written data waited dirty in the host page cache",
    2: "synced on guest flushes only; written data went to the host disk at once (O_DIRECT)",
    3: "synced after every write",
}


def safety_levels(sem, pc) -> dict[str, int]:
    """A level per mode from measured facts only: the trace (raw, aio=threads) and the
    host's Dirty growth while the guest wrote (more than half the guest disk = 'waited dirty')."""
    s = sem[(sem.format == "raw") & (sem.aio == "threads")].drop_duplicates("mode", keep="last")
    dirty = {}
    if pc is not None and not pc.empty:
        t = pagecache_table(pc)
        dirty = (t.groupby("mode")["dirty_growth_mib"].median() / t.groupby("mode")["disk_mib"].median()).to_dict()
    out = {}
    for r in s.itertuples():
        if r.no_flush:
            out[r.mode] = 0
        elif not r.writeback:
            out[r.mode] = 3
        elif r.mode in dirty and dirty[r.mode] >= 0.5:
            out[r.mode] = 1
        elif r.direct:
            out[r.mode] = 2
        else:
            out[r.mode] = 1
    return out


def rankings(reference, sem=None, pc=None, guest_summary=None, bench_summary=None) -> "pd.DataFrame":
    """The seed's three orderings next to the ones today's data gives, and where they differ."""
    import pandas as pd
    from .stats import ci_label  # "equal if the CIs overlap": with their real coverage
    ref = reference[reference.kind == "ranking"].set_index("item")["value"].to_dict()
    rows = []

    def add(criterion, evidence, ours):
        seed = ref.get(criterion, "")
        dis = pairwise_disagreements(seed, ours) if ours else []
        rows.append({"criterion": criterion, "evidence today": evidence, "2013 (seed)": seed,
                     "today": ours or "not measured", "pairs ranked differently": len(dis) if ours else None,
                     "differences": "; ".join(dis)})
    if pc is not None and not pc.empty:
        t = pagecache_table(pc).groupby("mode")["image_resident_peak_mib"].median().to_dict()
        add("memory", "host page cache held for the guest's image (mincore), MiB; "
            f"equal if within {RANK_MEM_TOL_MIB:g} MiB", order_by_value(t, RANK_MEM_TOL_MIB))
    if guest_summary is not None and not guest_summary.empty:
        for variant in ("direct", "normal"):
            g = guest_summary[guest_summary.variant == variant]
            vals = {r.mode: (r.median, r.ci_low, r.ci_high) for r in g.itertuples()}
            acc = "/".join(sorted(set(g.accel))).upper()
            add("performance", f"guest dd {'oflag=direct' if variant == 'direct' else 'without oflag'} "
                f"({acc} guest), MB/s; equal if the {ci_label(g['n'])}s overlap or the medians differ by "
                f"< {RANK_REL_TOL:.0%}",
                order_with_ties(vals))
    if bench_summary is not None and not bench_summary.empty:
        b = bench_summary[(bench_summary.format == "raw") & (bench_summary.op == "write")
                          & (bench_summary.depth == bench_summary.depth.min())
                          & (bench_summary.flush_interval == 0)]
        vals = {r.mode: (r.median, r.ci_low, r.ci_high) for r in b.itertuples()}
        add("performance", f"qemu-img bench, raw, 64 KiB writes at depth {int(b.depth.min()) if len(b) else 1}, "
            f"no flushes, MB/s; equal if the {ci_label(b['n'])}s overlap or the medians differ by "
            f"< {RANK_REL_TOL:.0%}",
            order_with_ties(vals))
    if sem is not None and not sem.empty:
        lv = safety_levels(sem, pc)
        add("safety", "level from the trace and the host's Dirty growth (see the levels table)",
            order_by_value({m: float(v) for m, v in lv.items()}, 0.5))
    return pd.DataFrame(rows)


from .dataset import skipped_table as not_measured  # noqa: E402  (the chapter's name for it)
from .dataset import only_shown  # noqa: E402,F401  (one dataset per host, side by side)
