"""Chapter 'virtio_blk_latency': where the latency of one virtio-blk read goes, layer by layer.

The seed (``001_44860ac07de981e7.txt``, the KVM wiki page "Virtio/Block/Latency" of July 2010;
its latest revision as plain text in ``001_44860ac07de981e7.virtio-blk-latency.txt``) timed a
single-threaded 4 KiB O_DIRECT sequential read benchmark in a guest and on the host, put time
stamps on every layer in between (guest virtio-pci notify and interrupt, host kvm.ko pio exit and
irq injection, QEMU's virtqueue notify and guest notification, QEMU's posix-aio pread), and turned
the mean latency of each layer into a cumulative table and a table of deltas. This module does the
same on today's stack, per request instead of per mean:

  benchmark  -- tools/c/seqread.c: pread() of 4 KiB blocks with O_DIRECT, sequential and random,
                one request at a time; the time stamp counter is read right before and after every
                request. The same static binary runs on the host (against the image file) and in
                the tiny guest of tools.guest (against the virtio disk backed by that image).
  guest      -- ftrace inside the guest (trace_clock x86-tsc): kprobes on vp_notify and
                vring_interrupt, block:block_rq_issue/complete of the benchmark's disk.
  QEMU       -- QEMU's own trace events with the 'log' backend (-trace, -D, -msg timestamp=on):
                virtio_queue_notify ... virtio_notify(_irqfd), the thread pool and io_uring events,
                apic_deliver_irq. Stamps are gettimeofday() microseconds, mapped onto the TSC with
                our own calibration (CLOCK_REALTIME against RDTSC before and after every boot).
  host       -- two private ftrace instances (x86-tsc): QEMU's own threads (set_event_pid with
                event-fork) for the submission syscalls (preadv, io_submit, io_uring_enter) and the
                8-byte eventfd writes (the vCPU's ioeventfd kick, the main loop's guest notifier);
                and block:block_rq_issue/complete of the disk that holds the image, mapped back to
                image offsets with FIEMAP. With a KVM guest also kvm:kvm_mmio/kvm_fast_mmio/kvm_pio
                and kvm:kvm_msi_set_irq/kvm_set_irq.

Every request is matched across the layers by the offset it reads (the guest's block_rq_issue
sector, QEMU's virtio_blk_handle_read sector, the host's block_rq_issue sector through the image's
extent map), and the guest's TSC is put on the host's axis with a causality bracket (the TSC
alignment chapter's method): the guest's vp_notify happens before the vCPU thread's ioeventfd
write (or kvm.ko's notify exit), and the host's guest-notifier write (or MSI injection) happens
before the guest's vring_interrupt. Under TCG QEMU's RDTSC returns the host's TSC plus a constant
(softmmu/cpu-timers.c: cpu_get_ticks() = cpu_ticks_offset + cpu_get_host_ticks();
target/i386/tcg/misc_helper.c: helper_rdtsc() adds env->tsc_offset), so one offset fits a run.

Scratch files (the benchmark image, the guest's output disk, QEMU's trace log) live in a
private directory from tools.scratch (virtio_blk_latency-<pid>-XXXX under the scratch parent of
tools.statedir), removed on success, failure, SIGINT, SIGTERM and SIGHUP (tools.guard); QEMU is owned by tools.guest.Runner and the ftrace instances by
tools.tracefs.TraceSession, which restore their state on the same paths.
"""
from __future__ import annotations

import fcntl
import math
import os
import random
import re
import shutil
import struct
import subprocess
from pathlib import Path

from .errors import MissingPrerequisite, ParameterError, PerfbookError
from .params import begin_collect, check_ints, choose_list, merge

CHAPTER = "virtio_blk_latency"
TITLE = "Where virtio-blk latency goes, layer by layer"
SEED = "001_44860ac07de981e7.txt"
SEED_TEXT = "001_44860ac07de981e7.virtio-blk-latency.txt"
AIO = ("threads", "native", "io_uring")
PATTERNS = ("seq", "rand")
LAYERS = ("guest", "qemu", "host")
VARIANTS = {"plain": (), "guest": ("guest",), "qemu": ("qemu",), "host": ("host",),
            "boundary": ("qemu", "host"), "all": ("guest", "qemu", "host")}
# the seed's method: one layer per boot; 'boundary' is the host/QEMU edge, which the kvm.ko row's
# TCG stand-in needs (the vCPU's kick is a host event, the APIC delivery a QEMU one)
SINGLE = ("guest", "qemu", "host", "boundary")
BENCH = "seqread"
BLOCK = 4096
MiB = 1024 * 1024
REGION_START = MiB        # the benchmark stays clear of the partition-table reads at both ends
OUT_DISK_MIB = 96

QEMU_EVENTS = ("virtio_queue_notify", "virtqueue_pop", "virtio_blk_handle_read",
               "thread_pool_submit", "thread_pool_complete", "luring_co_submit",
               "luring_process_completion", "virtio_blk_rw_complete", "virtio_blk_req_complete",
               "virtqueue_flush", "virtio_notify", "virtio_notify_irqfd", "apic_deliver_irq")
# The single-layer boots ('qemu', 'boundary') log only what their rows and the matching need, as
# the seed enabled only virtio_queue_notify and virtio_notify for its QEMU row: the log backend
# writes every event with its own write(), so each event costs the main loop time.
QEMU_CORE_EVENTS = ("virtio_queue_notify", "virtio_blk_handle_read", "virtio_blk_rw_complete",
                    "virtio_notify", "virtio_notify_irqfd", "apic_deliver_irq")
SUBMIT_CALLS = ("preadv", "pread64", "preadv2", "io_submit", "io_uring_enter")
HOST_SYSCALLS = SUBMIT_CALLS + ("io_getevents", "write")
KVM_NOTIFY = ("kvm_fast_mmio", "kvm_mmio", "kvm_pio")
KVM_IRQ = ("kvm_msi_set_irq", "kvm_set_irq")

# Rounds repeat adaptively (tools.stats.Repetition). A round boots every aio mode and variant
# once, in shuffled order; the value each round adds per aio mode is the median latency of its
# untraced ("plain") boot. Rounds go on until each aio mode's median over rounds has a 95 % CI
# narrower than rep_target (relative), or rep_budget_s runs out, or rep_max_runs rounds are in.
# The boot is the unit of repetition: requests inside one boot share its conditions.
PROFILES = {
    "quick": {"requests": 100, "warmup": 10, "aio": ["threads"], "variants": ["plain", "all"],
              "layer_runs": [], "host_requests": 100, "kvm_boot_timeout": 5.0,
              "rep_target": 0.1, "rep_min_runs": 1, "rep_max_runs": 1, "rep_budget_s": 60.0,
              "rep_warmup": 0},
    "default": {"requests": 300, "warmup": 20, "aio": None, "variants": ["plain", "all"],
                "layer_runs": ["threads"], "host_requests": 300, "kvm_boot_timeout": 10.0,
                "rep_target": 0.1, "rep_min_runs": 4, "rep_max_runs": 8, "rep_budget_s": 190.0,
                "rep_warmup": 0},
    "full": {"requests": 1000, "warmup": 50, "aio": None, "variants": ["plain", "all"],
             "layer_runs": ["threads", "native", "io_uring"], "host_requests": 1000,
             "kvm_boot_timeout": 20.0, "rep_target": 0.05, "rep_min_runs": 8, "rep_max_runs": 30,
             "rep_budget_s": 1200.0, "rep_warmup": 0},
}
EXPERIMENT = "guest benchmark, untraced boot"
# rounds: a fixed number of rounds (sets rep_min_runs = rep_max_runs)
COMMON = {"patterns": None, "image_mib": 64, "accel": "auto", "boot_timeout": 300.0,
          "guest_memory_mib": 256, "guest_buffer_kb": 16384, "host_buffer_kb": 8192,
          "calib_samples": 30, "seed": 1, "rounds": None}
INT_KEYS = {"requests": 20, "warmup": 0, "host_requests": 20, "image_mib": 8,
            "guest_memory_mib": 128, "guest_buffer_kb": 1024, "host_buffer_kb": 1024,
            "calib_samples": 10, "seed": 0}


def params(profile: str = "default", **overrides) -> dict:
    """Merge a profile with overrides and validate everything (ParameterError)."""
    from .stats import repetition_settings
    p = merge(profile, PROFILES, COMMON, overrides)
    check_ints(p, INT_KEYS)
    if p["rounds"] is not None:
        check_ints(p, {"rounds": 1})
        if p["rounds"] > 50:
            raise ParameterError(f"rounds must be at most 50, got {p['rounds']}")
        p["rep_min_runs"] = p["rep_max_runs"] = p["rounds"]
    repetition_settings(p, "rep_")
    p["aio"] = [a for a in AIO if a in choose_list(p["aio"], AIO, "aio backend")]
    p["patterns"] = [x for x in PATTERNS if x in choose_list(p["patterns"], PATTERNS, "access pattern")]
    p["variants"] = choose_list(p["variants"], tuple(VARIANTS), "variant")
    lr = p["layer_runs"]
    p["layer_runs"] = [] if lr in ([], "", "none") else [
        a for a in AIO if a in choose_list(lr, AIO, "layer_runs aio backend")]
    limits = {"requests": 100000, "warmup": 10000, "host_requests": 100000,
              "image_mib": 4096, "guest_memory_mib": 2048, "guest_buffer_kb": 262144,
              "host_buffer_kb": 262144, "calib_samples": 10000}
    for k, hi in limits.items():
        if p[k] > hi:
            raise ParameterError(f"{k} must be at most {hi}, got {p[k]}")
    if p["image_mib"] * MiB < 2 * REGION_START + 16 * BLOCK:
        raise ParameterError(f"image_mib must leave room for reads between the first and the last MiB")
    from .guest import check_boot_params
    return check_boot_params(p, 1800)


def preflight() -> list[str]:
    """Why collect can't run here at all ([] = it can; a missing layer is only a skip)."""
    from . import guest
    reasons = list(guest.preflight())
    if not shutil.which("cc") and not shutil.which("gcc"):
        reasons.append("no C compiler for the benchmark (apt-get install gcc libc6-dev)")
    return reasons


def host_layer_problem() -> str | None:
    """Why the host layer (ftrace on this host) can't be traced, or None."""
    from . import tracefs
    r = tracefs.preflight(need_uprobes=False)
    return r[0] if r else None


# ---------------------------------------------------------------- image and its extents
FS_IOC_FIEMAP = 0xC020660B
FIEMAP_FLAG_SYNC = 0x1
FIEMAP_EXTENT_LAST = 0x1
FIEMAP_BAD = 0x2 | 0x4 | 0x8 | 0x80 | 0x100 | 0x200 | 0x800  # unknown, delalloc, encoded, ...


def fill_image(path: Path, mib: int, seed: int) -> None:
    """A raw image full of data (no holes, no unwritten extents: every read reaches the disk)."""
    rnd = random.Random(seed)
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(rnd.randbytes(MiB))
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def fiemap(path: Path) -> list[tuple[int, int, int]]:
    """The file's extents as (logical, physical, length) bytes, via FS_IOC_FIEMAP."""
    out: list[tuple[int, int, int]] = []
    start, count = 0, 256
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            buf = bytearray(struct.pack("=QQIIII", start, (1 << 64) - 1 - start, FIEMAP_FLAG_SYNC, 0,
                                        count, 0) + b"\0" * (56 * count))
            try:
                fcntl.ioctl(fd, FS_IOC_FIEMAP, buf)
            except OSError as e:
                raise MissingPrerequisite(f"FIEMAP is not supported for {path} ({e.strerror})") from None
            mapped = struct.unpack_from("=I", buf, 20)[0]
            last = False
            for i in range(mapped):
                lo, ph, ln, _r1, _r2, flags = struct.unpack_from("=QQQQQI", buf, 32 + 56 * i)
                if flags & FIEMAP_BAD:
                    raise MissingPrerequisite(f"the image's extents can't be mapped to disk sectors "
                                              f"(extent flags {flags:#x})")
                out.append((lo, ph, ln))
                last = bool(flags & FIEMAP_EXTENT_LAST)
            if last or mapped == 0:
                break
            start = out[-1][0] + out[-1][2]
    finally:
        os.close(fd)
    return out


def block_device(path: Path) -> dict:
    """The disk that holds `path`: its kernel dev_t (for trace filters), name and the partition's
    first sector (block tracepoints report sectors of the whole disk)."""
    from .iostat_internals import device_of, kernel_dev_t
    name, major, minor = device_of(path)  # MissingPrerequisite when not on a block device
    st = os.stat(path)
    real = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}").resolve()
    if (real / "dm").exists() or (real / "md").exists() or real.name.startswith(("dm-", "md", "loop")):
        raise MissingPrerequisite(f"the image sits on a stacked device ({real.name}); "
                                  "its sectors can't be mapped to the disk's requests")
    start = int((real / "start").read_text()) if (real / "partition").exists() else 0
    return {"name": name, "part": real.name, "major": major, "minor": minor,
            "dev_t": kernel_dev_t(major, minor), "part_start": start}


def sector_to_offset(sectors, extents: list[tuple[int, int, int]], part_start: int):
    """Disk sectors (512 B, whole disk) -> image offsets (NaN outside the image)."""
    import numpy as np
    s = np.asarray(sectors, dtype="float64")
    if not extents:
        return np.full(len(s), np.nan)
    ext = sorted(extents, key=lambda e: e[1])
    ph = np.array([e[1] for e in ext], dtype="float64")
    lo = np.array([e[0] for e in ext], dtype="float64")
    ln = np.array([e[2] for e in ext], dtype="float64")
    byte = (s - part_start) * 512
    i = np.searchsorted(ph, byte, side="right") - 1
    ok = (i >= 0)
    i = np.clip(i, 0, len(ph) - 1)
    ok &= byte < ph[i] + ln[i]
    return np.where(ok, lo[i] + (byte - ph[i]), np.nan)


# ---------------------------------------------------------------- parsers
_SYS_ENTER = re.compile(r"^sys_(\w+)\((.*)\)\s*$")
_SYS_EXIT = re.compile(r"^sys_(\w+) -> (0x[0-9a-fA-F]+|-?\d+)\s*$")
_BLOCK = re.compile(r"^(\d+),(\d+)\s+(\S+)\s+(?:(\d+)\s+)?\(([^)]*)\)\s+(\d+)\s+\+\s+(\d+)")
_ARG = re.compile(r"(\w+): (0x[0-9a-fA-F]+|-?\d+)")


def parse_ftrace(text: str):
    """ftrace 'trace' text -> frame: ts, tid, comm, kind (enter/exit/event), name, detail,
    ret. Syscall events print as 'sys_x(args)' and 'sys_x -> ret'. Lines are split by
    tools.ftrace (host or guest kernel, any trace options); ts is the raw count for the
    x86-tsc clock we set (int), float seconds if a kernel fell back to a ns clock.
    attrs['lost'] / attrs['lost_lines'] say whether the ring buffer dropped events."""
    import pandas as pd
    from . import ftrace
    rows = []
    st = ftrace.new_stats()
    for r in ftrace.records(text, st):
        ts, tid, comm = r.ts, r.pid, r.task
        if r.event is not None:
            rows.append((ts, tid, comm, "event", r.event, r.body, None))
            continue
        body = r.body
        s = _SYS_EXIT.match(body)
        if s:
            rows.append((ts, tid, comm, "exit", s[1], "", int(s[2], 0)))
            continue
        s = _SYS_ENTER.match(body)
        if s:
            rows.append((ts, tid, comm, "enter", s[1], s[2], None))
    df = pd.DataFrame(rows, columns=["ts", "tid", "comm", "kind", "name", "detail", "ret"])
    df.attrs.update(st)
    return df


def syscall_args(detail: str) -> dict[str, int]:
    return {k: int(v, 0) for k, v in _ARG.findall(detail)}


def block_fields(detail: str) -> dict | None:
    """'254,0 R 4096 () 2048 + 8 ...' -> dev, rwbs, sector, nr_sector."""
    m = _BLOCK.match(detail)
    if not m:
        return None
    return {"major": int(m[1]), "minor": int(m[2]), "rwbs": m[3], "sector": int(m[6]),
            "nr_sector": int(m[7])}


_QLOG = re.compile(r"^(\d+)@(\d+)\.(\d{6}):(\w+)\s?(.*)$")


def parse_qemu_log(text: str):
    """QEMU 'log' trace backend with -msg timestamp=on -> frame: line, tid, us (gettimeofday
    microseconds since the epoch), name, detail."""
    import pandas as pd
    rows = []
    for i, line in enumerate(text.splitlines()):
        m = _QLOG.match(line)
        if m:
            rows.append((i, int(m[1]), int(m[2]) * 1_000_000 + int(m[3]), m[4], m[5]))
    return pd.DataFrame(rows, columns=["line", "tid", "us", "name", "detail"])


def qemu_fields(detail: str) -> dict[str, str]:
    toks = detail.split()
    return {toks[i]: toks[i + 1] for i in range(0, len(toks) - 1, 2)}


def parse_bench(text: str):
    """seqread output -> (requests frame, loop frame)."""
    import pandas as pd
    req, loops = [], []
    for line in text.splitlines():
        parts = line.strip().split(",")
        if parts[0] == "r" and len(parts) == 7:
            req.append((parts[1], int(parts[2]), int(parts[3]), int(parts[4]), int(parts[5]), int(parts[6])))
        elif parts[0] == "loop" and len(parts) == 7:
            loops.append((parts[1], *map(int, parts[2:])))
    r = pd.DataFrame(req, columns=["pattern", "idx", "warm", "offset", "t0", "t1"])
    lp = pd.DataFrame(loops, columns=["pattern", "tsc_start", "tsc_end", "mono_start", "mono_end", "n"])
    return r, lp


def parse_calib(text: str):
    import pandas as pd
    rows = [tuple(int(x) for x in line.split(",")[1:5]) for line in text.splitlines()
            if line.startswith("c,") and len(line.split(",")) == 5]
    return pd.DataFrame(rows, columns=["tsc0", "tsc1", "real_ns", "raw_ns"])


def split_output(blob: bytes) -> dict[str, str]:
    """The guest's output disk: '@@NAME' sections up to '@@END'."""
    end = blob.find(b"\n@@END")
    if end < 0:
        raise PerfbookError("the guest's output disk holds no complete result (no @@END marker)")
    text = blob[:end].decode(errors="replace")
    out: dict[str, list[str]] = {}
    cur = None
    for line in text.splitlines():
        if line.startswith("@@") and re.fullmatch(r"@@[A-Z]+", line.strip()):
            cur = line.strip()[2:]
            out.setdefault(cur, [])
        elif cur is not None:
            out[cur].append(line)
    return {k: "\n".join(v) + "\n" for k, v in out.items()}


def ring_stats(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        v = v.strip().split()[0] if v.strip() else ""
        if v.isdigit():
            out[k.strip()] = int(v)
    return out


# ---------------------------------------------------------------- matching
def match_in_order(want, have, lookahead: int = 64):
    """Match a sequence of wanted offsets to a sequence of observed offsets, both in time order,
    one to one and without reordering: each wanted offset takes the next observed one that
    equals it within `lookahead` places (observations in between are skipped: other I/O);
    a wanted offset with no such observation stays unmatched (-1) and consumes nothing."""
    import numpy as np
    have = list(have)
    out = np.full(len(want), -1, dtype=int)
    j = 0
    for i, w in enumerate(want):
        for k in range(j, min(len(have), j + lookahead)):
            if have[k] == w:
                out[i] = k
                j = k + 1
                break
    return out


def _first_at_or_after(arr, t):
    import numpy as np
    i = np.searchsorted(arr, t, side="left")
    return arr[i] if i < len(arr) else None


def _last_at_or_before(arr, t):
    import numpy as np
    i = np.searchsorted(arr, t, side="right") - 1
    return arr[i] if i >= 0 else None


def guest_stamps(bench, events):
    """Per benchmark request (guest TSC): block_rq_issue of its offset, the first vp_notify after
    it, the first vring_interrupt after that, and the block_rq_complete of its sector, all
    inside the request's [t0, t1]. Columns g_issue, g_notify, g_irq, g_complete (absolute)."""
    import numpy as np
    import pandas as pd
    ev = events[events.kind == "event"]
    iss = ev[ev.name == "block_rq_issue"]
    cmp_ = ev[ev.name == "block_rq_complete"]

    def sectors(df):
        f = [block_fields(d) for d in df.detail]
        return np.array([x["sector"] if x else -1 for x in f], dtype="int64")
    iss_ts, iss_sec = iss.ts.to_numpy(), sectors(iss)
    cmp_by = {}
    for t, s in zip(cmp_.ts.to_numpy(), sectors(cmp_)):
        cmp_by.setdefault(int(s), []).append(int(t))
    notify = np.sort(ev[ev.name == "vp_notify"].ts.to_numpy())
    irq = np.sort(ev[ev.name == "vring_interrupt"].ts.to_numpy())
    rows = []
    for t0, t1, off in zip(bench.t0.to_numpy(), bench.t1.to_numpy(), bench.offset.to_numpy()):
        r = {"g_issue": None, "g_notify": None, "g_irq": None, "g_complete": None}
        lo = np.searchsorted(iss_ts, t0, side="left")
        hi = np.searchsorted(iss_ts, t1, side="right")
        hit = [k for k in range(lo, hi) if iss_sec[k] * 512 == off]
        if hit:
            gi = int(iss_ts[hit[0]])
            r["g_issue"] = gi
            n = _first_at_or_after(notify, gi)
            if n is not None and n <= t1:
                r["g_notify"] = int(n)
                q = _first_at_or_after(irq, n)
                if q is not None and q <= t1:
                    r["g_irq"] = int(q)
            c = _first_at_or_after(np.array(cmp_by.get(int(off // 512), []), dtype="int64"), gi)
            if c is not None and c <= t1:
                r["g_complete"] = int(c)
        rows.append(r)
    return pd.DataFrame(rows, index=bench.index, dtype="float64")


def qemu_segments(ev):
    """QEMU log events -> one row per virtqueue notify of the benchmark's disk: the first of each
    later event up to the next notify (one request in flight at a time), and the offset its
    virtio_blk_handle_read names. The benchmark's disk is the vdev with the most reads."""
    import pandas as pd
    ev = ev.sort_values(["us", "line"], kind="stable")
    reads = ev[ev.name == "virtio_blk_handle_read"]
    if reads.empty:
        return pd.DataFrame(columns=["q_notify", "notify_tid", "offset"])
    vdevs = [qemu_fields(d).get("vdev") for d in reads.detail]
    vdev = max(set(vdevs), key=vdevs.count)
    vq = None
    segs, cur = [], None
    first = {"virtqueue_pop": "q_pop", "thread_pool_submit": "q_submit", "luring_co_submit": "q_submit",
             "thread_pool_complete": "q_cb", "luring_process_completion": "q_cb",
             "virtio_blk_req_complete": "q_req"}
    for name, us, tid, det in zip(ev.name.to_numpy(), ev.us.to_numpy(), ev.tid.to_numpy(),
                                  ev.detail.to_numpy()):
        f = qemu_fields(det) if name.startswith(("virtio", "virtqueue")) else {}
        if name == "virtio_queue_notify":
            if f.get("vdev") != vdev:
                continue
            vq = f.get("vq", vq)
            cur = {"q_notify": int(us), "notify_tid": int(tid), "offset": None}
            segs.append(cur)
            continue
        if cur is None:
            continue
        if name == "virtio_blk_handle_read":
            if f.get("vdev") == vdev and cur["offset"] is None:
                cur["offset"] = int(f.get("sector", "-1")) * 512
                cur["q_read"] = int(us)
        elif name == "virtio_blk_rw_complete":
            if f.get("vdev") == vdev:
                cur.setdefault("q_rw", int(us))
        elif name == "virtqueue_flush":
            if f.get("vq") == vq:
                cur.setdefault("q_flush", int(us))
        elif name in ("virtio_notify", "virtio_notify_irqfd"):
            if f.get("vdev") == vdev and "q_irq" not in cur:
                cur["q_irq"] = int(us)
                cur["irq_tid"] = int(tid)
        elif name == "apic_deliver_irq":
            if "q_irq" in cur:
                cur.setdefault("q_apic", int(us))
        elif name in first:
            cur.setdefault(first[name], int(us))
    cols = ["q_notify", "notify_tid", "offset", "q_pop", "q_read", "q_submit", "q_cb", "q_rw", "q_req",
            "q_flush", "q_irq", "irq_tid", "q_apic"]
    d = pd.DataFrame(segs)
    for c in cols:
        if c not in d.columns:
            d[c] = None
    d = d[cols]
    return d[d.offset.notna()].reset_index(drop=True)


def thread_kind(comm: str, tid: int, pid: int | None) -> str:
    if pid is not None and tid == pid:
        return "main"
    if comm.startswith("CPU "):
        return "vcpu"
    if comm.startswith("worker"):
        return "worker"
    if comm.startswith("iou-"):
        return "io_uring"
    return "other"


def busiest_own_fd(writes, who: str):
    """The fd that only `who` threads write (8-byte eventfd writes) and most often: the vCPU's
    ioeventfd of the benchmark's queue ('vcpu'), the main loop's guest notifier ('main'). Other
    eventfds (the AioContext notifier, ...) are written by several kinds of thread."""
    if writes.empty:
        return None
    kinds = writes.groupby("fd")["who"].agg(lambda s: set(s))
    own = [fd for fd, k in kinds.items() if k == {who}]
    if not own:
        return None
    counts = writes[writes.fd.isin(own)].groupby("fd").size()
    return int(counts.idxmax())


def host_issues(qev, bev, pid: int | None, extents, part_start: int):
    """Host events -> one row per block request of the image: h_issue, its offset, h_complete,
    the submission syscall around it (h_sub, h_sub_exit, which call and thread), the vCPU's last
    ioeventfd kick before it (h_kick), the main thread's first guest-notifier write after the
    completion (h_notifier) and, with KVM, the notify exit and the MSI injection."""
    import numpy as np
    import pandas as pd
    blk = bev[(bev.kind == "event") & bev.name.isin(["block_rq_issue", "block_rq_complete"])].copy()
    f = [block_fields(d) for d in blk.detail]
    blk["sector"] = [x["sector"] if x else -1 for x in f]
    blk["rwbs"] = [x["rwbs"] if x else "" for x in f]
    iss = blk[(blk.name == "block_rq_issue") & blk.rwbs.str.contains("R")].copy()
    iss["offset"] = sector_to_offset(iss.sector, extents, part_start)
    iss = iss[iss.offset.notna()].sort_values("ts")
    cmp_by: dict[int, np.ndarray] = {}
    for s, g in blk[blk.name == "block_rq_complete"].groupby("sector"):
        cmp_by[int(s)] = np.sort(g.ts.to_numpy())
    q = qev.sort_values("ts", kind="stable")
    sub = q[(q.kind == "enter") & q.name.isin(SUBMIT_CALLS)]
    sub_ts = sub.ts.to_numpy()
    exits = {}
    for (tid, name), g in q[(q.kind == "exit") & q.name.isin(SUBMIT_CALLS)].groupby(["tid", "name"]):
        exits[(int(tid), name)] = np.sort(g.ts.to_numpy())
    w = q[(q.kind == "enter") & (q.name == "write")].copy()
    if len(w):
        args = [syscall_args(d) for d in w.detail]
        w["fd"] = [a.get("fd") for a in args]
        w = w[[a.get("count") == 8 for a in args]]
    else:
        w["fd"] = []
    w["who"] = [thread_kind(c, int(t), pid) for c, t in zip(w.comm, w.tid)]
    kick = np.sort(w[w.fd == busiest_own_fd(w, "vcpu")].ts.to_numpy())
    main_w = np.sort(w[w.fd == busiest_own_fd(w, "main")].ts.to_numpy())
    kev = q[(q.kind == "event")]
    kn = kev[kev.name.isin(KVM_NOTIFY)]
    if len(kn):
        kn = kn[[("write" in d) or (n == "kvm_fast_mmio") for n, d in zip(kn.name, kn.detail)]]
    kvm_notify = np.sort(kn.ts.to_numpy())
    kvm_irq = np.sort(kev[kev.name.isin(KVM_IRQ)].ts.to_numpy())
    rows = []
    for ts, off, sec in zip(iss.ts.to_numpy(), iss.offset.to_numpy(), iss.sector.to_numpy()):
        r = {"h_issue": int(ts), "offset": int(off)}
        c = _first_at_or_after(cmp_by.get(int(sec), np.array([], dtype="int64")), ts)
        r["h_complete"] = None if c is None else int(c)
        k = np.searchsorted(sub_ts, ts, side="right") - 1
        r["h_sub"] = r["h_sub_exit"] = None
        r["h_sub_call"] = r["h_sub_thread"] = None
        if k >= 0:
            srow = sub.iloc[k]
            r["h_sub"] = int(srow.ts)
            r["h_sub_call"] = srow["name"]
            r["h_sub_thread"] = thread_kind(srow.comm, int(srow.tid), pid)
            e = _first_at_or_after(exits.get((int(srow.tid), srow["name"]), np.array([], dtype="int64")),
                                   srow.ts)
            r["h_sub_exit"] = None if e is None else int(e)
        before = r["h_sub"] if r["h_sub"] is not None else int(ts)
        kk = _last_at_or_before(kick, before)
        r["h_kick"] = None if kk is None else int(kk)
        kn_ = _last_at_or_before(kvm_notify, before)
        r["h_kvm_notify"] = None if kn_ is None else int(kn_)
        done = r["h_complete"]
        if done is not None and r["h_sub_call"] in ("preadv", "pread64", "preadv2") and r["h_sub_exit"]:
            done = max(done, r["h_sub_exit"])
        nt = _first_at_or_after(main_w, done) if done is not None else None
        r["h_notifier"] = None if nt is None else int(nt)
        ki = _first_at_or_after(kvm_irq, r["h_complete"]) if r["h_complete"] is not None else None
        r["h_kvm_irq"] = None if ki is None else int(ki)
        rows.append(r)
    cols = ["h_issue", "offset", "h_complete", "h_sub", "h_sub_exit", "h_sub_call", "h_sub_thread",
            "h_kick", "h_kvm_notify", "h_notifier", "h_kvm_irq"]
    return pd.DataFrame(rows, columns=cols)


# ---------------------------------------------------------------- alignment
def offset_bracket(g_notify, h_after_notify, g_irq, h_before_irq) -> dict:
    """Bounds on the constant `off` with host_tsc = guest_tsc + off, from causality.

    Each guest notify happens before the host sees it: g_notify + off <= h_after_notify, so
    off <= min(h_after_notify - g_notify). Each host event that leads to the interrupt happens
    before the guest's handler runs: h_before_irq <= g_irq + off, so off >= max(h_before_irq - g_irq).
    NaN pairs are ignored. Returns lo, hi, width, mid, n_lo, n_hi, consistent (lo <= hi)."""
    import numpy as np
    a = np.asarray(h_after_notify, dtype="float64") - np.asarray(g_notify, dtype="float64")
    b = np.asarray(h_before_irq, dtype="float64") - np.asarray(g_irq, dtype="float64")
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    hi = float(a.min()) if len(a) else math.nan
    lo = float(b.max()) if len(b) else math.nan
    return {"lo": lo, "hi": hi, "width": hi - lo, "mid": (lo + hi) / 2, "n_lo": int(len(b)),
            "n_hi": int(len(a)), "consistent": bool(lo <= hi) if len(a) and len(b) else None}


def fit_clock(calib) -> dict:
    """TSC against CLOCK_REALTIME and CLOCK_MONOTONIC_RAW from calibration samples (the clock read
    between two TSC reads; the narrower half of the samples), as least-squares lines around a
    reference point: tsc = tsc_ref + slope * (real_ns - 1000 * real_ref_us). Also the TSC rate in
    Hz. The reference is a whole microsecond, so that QEMU's microsecond stamps subtract exactly
    in float64."""
    import numpy as np
    c = calib.copy()
    w = (c.tsc1 - c.tsc0).astype("float64")
    c = c[w <= w.quantile(0.5)]
    tsc_ref, raw_ref = int(c.tsc0.iloc[0]), int(c.raw_ns.iloc[0])
    real_ref_us = int(c.real_ns.iloc[0]) // 1000
    real_ref = real_ref_us * 1000
    mid = np.array([(int(a) + int(b)) / 2 - tsc_ref for a, b in zip(c.tsc0, c.tsc1)], dtype="float64")
    real = np.array([int(x) - real_ref for x in c.real_ns], dtype="float64")
    raw = np.array([int(x) - raw_ref for x in c.raw_ns], dtype="float64")
    s_real, i_real = np.polyfit(real, mid, 1)
    s_raw, _ = np.polyfit(raw, mid, 1)
    resid = mid - (s_real * real + i_real)
    return {"tsc_ref": tsc_ref + i_real, "real_ref_us": real_ref_us, "slope": float(s_real),
            "tsc_hz": float(s_raw * 1e9), "resid_max": float(np.abs(resid).max()),
            "span_s": float(real.max() - real.min()) / 1e9}


def real_to_tsc(us, fit: dict):
    """QEMU's microsecond stamps (gettimeofday) -> host TSC through the fit (start of the µs)."""
    import numpy as np
    x = np.asarray(us, dtype="float64")
    return fit["tsc_ref"] + fit["slope"] * ((x - fit["real_ref_us"]) * 1000.0)


def qemu_bracket(q_after, h_before, q_before, h_after, res_cyc: float) -> dict:
    """Bounds on a correction c of mapped QEMU stamps (true = mapped + c + u, u in [0, res)):
    a QEMU event that follows a host event (q_after after h_before) gives c > h_before - q_after - res;
    one that precedes a host event (q_before before h_after) gives c < h_after - q_before."""
    import numpy as np
    lo_v = np.asarray(h_before, dtype="float64") - np.asarray(q_after, dtype="float64") - res_cyc
    hi_v = np.asarray(h_after, dtype="float64") - np.asarray(q_before, dtype="float64")
    lo_v, hi_v = lo_v[~np.isnan(lo_v)], hi_v[~np.isnan(hi_v)]
    lo = float(lo_v.max()) if len(lo_v) else math.nan
    hi = float(hi_v.min()) if len(hi_v) else math.nan
    return {"lo": lo, "hi": hi, "mid": (lo + hi) / 2, "width": hi - lo, "n_lo": int(len(lo_v)),
            "n_hi": int(len(hi_v)), "consistent": bool(lo <= hi) if len(lo_v) and len(hi_v) else None}


def qemu_correction(b: dict) -> float:
    """The calibration line is far more precise than the causality bracket (tens of cycles
    against tens of microseconds), so it is kept as it is (0) when the bracket allows that, and
    moved to the nearest bound when it does not."""
    lo, hi = b["lo"], b["hi"]
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
        return 0.0
    return float(min(max(0.0, lo), hi))


# ---------------------------------------------------------------- collect
def plan_round(p: dict, rng, rnd: int) -> list[dict]:
    """One round's jobs, shuffled: one host benchmark, a guest boot per aio mode and variant, and
    the single-layer boots of the layer_runs modes; each with its patterns in shuffled order."""
    jobs = [{"kind": "host", "aio": "", "variant": "host_bench"}]
    for aio in p["aio"]:
        for v in p["variants"]:
            jobs.append({"kind": "guest", "aio": aio, "variant": v})
    for aio in p["layer_runs"]:
        for v in SINGLE:
            if v not in p["variants"]:
                jobs.append({"kind": "guest", "aio": aio, "variant": v})
    rng.shuffle(jobs)
    for pos, j in enumerate(jobs):
        pats = list(p["patterns"])
        rng.shuffle(pats)
        j.update({"round": rnd, "position": pos, "patterns": pats,
                  "seeds": {x: rng.randrange(1, 1 << 30) for x in pats}})
    return jobs


def rep_variant(p: dict) -> str:
    """The variant whose boots feed the adaptive repetition: untraced if there is one."""
    return "plain" if "plain" in p["variants"] else p["variants"][0]


def bench_args(p: dict, pattern: str, seed: int, n: int, out: str, target: str) -> list[str]:
    return ["read", "-f", target, "-n", str(n), "-w", str(p["warmup"]), "-b", str(BLOCK),
            "-m", pattern, "-s", str(p["image_mib"] * MiB - REGION_START), "-p", str(REGION_START),
            "-S", str(seed), "-t", pattern, "-o", out]


def guest_script(p: dict, job: dict, traced: bool) -> str:
    """busybox sh for one boot: (tracing set up,) the benchmark passes, the results (and the
    trace) written to the second disk, /dev/vdb."""
    T = "/sys/kernel/tracing"
    lines = ["set -u", f"T={T}",
             "dev=$(cat /sys/block/vda/dev); maj=${dev%:*}; min=${dev#*:}",
             'echo "DEV $dev"']
    if traced:
        lines += [
            'mount -t tracefs nodev $T || { echo "ERR tracefs"; exit 3; }',
            "echo x86-tsc > $T/trace_clock",
            f"echo {p['guest_buffer_kb']} > $T/buffer_size_kb",
            "echo 'p:perfbook/vp_notify vp_notify' >> $T/kprobe_events || { echo 'ERR kprobe vp_notify'; exit 4; }",
            "echo 'p:perfbook/vring_interrupt vring_interrupt' >> $T/kprobe_events || { echo 'ERR kprobe vring_interrupt'; exit 4; }",
            'f="dev == $(( (maj << 20) | min ))"',
            'echo "$f" > $T/events/block/block_rq_issue/filter',
            'echo "$f" > $T/events/block/block_rq_complete/filter',
            "echo 1 > $T/events/perfbook/enable",
            "echo 1 > $T/events/block/block_rq_issue/enable",
            "echo 1 > $T/events/block/block_rq_complete/enable",
            "echo > $T/trace", "echo 1 > $T/tracing_on"]
    for pat in job["patterns"]:
        args = " ".join(bench_args(p, pat, job["seeds"][pat], p["requests"], f"/tmp/b-{pat}.txt", "/dev/vda"))
        lines.append(f'/bin/seqread {args} || {{ echo "ERR bench {pat} $?"; exit 5; }}')
    if traced:
        lines.append("echo 0 > $T/tracing_on")
    dump = ['echo "@@BENCH"'] + [f"cat /tmp/b-{pat}.txt" for pat in job["patterns"]]
    if traced:
        dump += ['echo "@@STATS"', "cat $T/per_cpu/cpu0/stats", 'echo "@@TRACE"', "cat $T/trace"]
    dump.append('echo "@@END"')
    lines += ["{ " + "; ".join(dump) + "; } > /tmp/out.txt",
              'echo "OUT $(wc -c < /tmp/out.txt)"',
              "cat /tmp/out.txt > /dev/vdb && sync",
              'echo "DONE"']
    return "\n".join(lines) + "\n"


def _calibrate(exe: Path, n: int):
    from .proc import run_group
    r = run_group([str(exe), "calib", "-n", str(n)], timeout=60)
    if r.returncode != 0:
        raise PerfbookError(f"seqread calib failed: {r.stderr.strip()[-200:]}")
    return parse_calib(r.stdout)


class _HostTrace:
    """The two host ftrace instances of one boot: QEMU's threads (syscalls) and the disk."""

    def __init__(self, p: dict, blockdev: dict | None, say):
        self.p, self.blockdev, self.say = p, blockdev, say
        self.q = self.b = None
        self.pid = None
        self.notes: list[str] = []

    def __enter__(self):
        from .tracefs import TraceSession
        self.q = TraceSession("vbl_qemu", log=self.say).__enter__()
        try:
            self.b = TraceSession("vbl_disk", log=self.say).__enter__()
            for t in (self.q, self.b):
                t.set_option("tracing_on", "0")
                t.set_option("trace_clock", "x86-tsc")
                t.set_option("buffer_size_kb", str(self.p["host_buffer_kb"]))
            self.q.set_trace_options(event_fork=True)   # children of the traced pid are traced too
            ev = self.q.buffer / "events" / "syscalls"
            for call in HOST_SYSCALLS:
                for side in ("enter", "exit"):
                    name = f"sys_{side}_{call}"
                    if not (ev / name).is_dir():
                        self.notes.append(f"host syscall event {name} is missing")
                        continue
                    if call == "write":
                        self.q.set_option(f"events/syscalls/{name}/filter",
                                          "count == 8" if side == "enter" else "ret == 8")
                    self.q.enable(f"syscalls/{name}")
            if self.blockdev is not None:
                for name in ("block_rq_issue", "block_rq_complete"):
                    self.b.set_option(f"events/block/{name}/filter", f"dev == {self.blockdev['dev_t']}")
                    self.b.enable(f"block/{name}")
            # kvm.ko's events of *our* QEMU only: the notify exit runs in its vCPU thread and the
            # irqfd injection in the thread that signals the eventfd; other VMs on this host
            # (or a KVM attempt of another run) must not leak in, so they go to the pid-filtered
            # instance
            kvm = self.q.buffer / "events" / "kvm"
            for name in KVM_NOTIFY + KVM_IRQ:
                if (kvm / name).is_dir():
                    self.q.enable(f"kvm/{name}")
            self.b.set_option("tracing_on", "1")
        except BaseException:
            self.close()
            raise
        return self

    def on_start(self, pid: int) -> None:
        """QEMU has just started: trace it and every thread it creates (event-fork adds the
        children of listed tasks). A thread created before the pid was listed is appended from
        /proc. A second start in the same boot (accel=auto: the KVM attempt timed out and QEMU
        restarts under TCG) begins with empty buffers, so no event of the abandoned QEMU is kept.
        Rewriting set_event_pid with O_TRUNC stops event-fork from following new threads until
        the option is set again (seen on this kernel), so the option is toggled around it."""
        if self.pid is not None:
            self.q.set_option("tracing_on", "0")
            self.b.set_option("tracing_on", "0")
            self.q.clear()
            self.b.clear()
            self.b.set_option("tracing_on", "1")
            self.notes.append("QEMU restarted within one boot (accelerator fallback); the first attempt's "
                              "host trace was discarded")
        self.pid = pid
        self.q.set_trace_options(event_fork=False)
        self.q.set_option("set_event_pid", str(pid))
        self.q.set_trace_options(event_fork=True)
        try:
            tids = sorted({d.name for d in Path(f"/proc/{pid}/task").iterdir()} - {str(pid)})
        except OSError:
            tids = []
        if tids:
            from .tracefs import write_knob
            write_knob(self.q.file("set_event_pid"), " ".join(tids) + "\n", append=True)
        self.q.set_option("tracing_on", "1")

    def read(self) -> tuple[str, str, dict]:
        for t in (self.q, self.b):
            t.set_option("tracing_on", "0")
        stats = {"qemu": self.q.buffer_stats(), "disk": self.b.buffer_stats()}
        return (self.q.file("trace").read_text(errors="replace"),
                self.b.file("trace").read_text(errors="replace"), stats)

    def close(self):
        for t in (self.b, self.q):
            if t is not None:
                t.close()

    def __exit__(self, *exc):
        self.close()
        return False


def _qemu_trace_args(logfile: Path, events: list[str]) -> list[str]:
    args = []
    for e in events:
        args += ["-trace", f"enable={e}"]
    return args + ["-D", str(logfile), "-msg", "timestamp=on"]


def available_qemu_events() -> set[str]:
    from . import guest
    r = subprocess.run([guest.QEMU, "-trace", "help"], capture_output=True, text=True, timeout=30)
    return set(r.stdout.split()) | set(r.stderr.split())


def _guest_job(p, job, runner, exe, image, scratch, host_ok, blockdev, extents, qevents, say):
    """One boot: returns (request rows, job row, calibration rows)."""
    import pandas as pd
    from . import guest
    layers = set(VARIANTS[job["variant"]])
    notes = []
    if "host" in layers and not host_ok:
        layers.discard("host")
        notes.append("host layer not traced (see skipped)")
    out_img = scratch / "out.img"
    with open(out_img, "wb") as f:
        f.truncate(OUT_DISK_MIB * MiB)
    qlog = scratch / "qemu-trace.log"
    qlog.unlink(missing_ok=True)
    if job["variant"] != "all":
        qevents = [e for e in qevents if e in QEMU_CORE_EVENTS]
    extra = _qemu_trace_args(qlog, qevents) if "qemu" in layers else []
    if "host" in layers:  # thread names (CPU 0/TCG, worker) tell the host trace who did what
        extra += ["-name", "perfbook,debug-threads=on"]
    cal_before = _calibrate(exe, p["calib_samples"])
    ht = _HostTrace(p, blockdev, say) if "host" in layers else None
    disks = [guest.DiskSpec(label="bench", cache="none", aio=job["aio"], readonly=True, path=image),
             guest.DiskSpec(label="out", cache="writeback", path=out_img)]
    traced = "guest" in layers
    cfg = guest.GuestConfig(disks=disks, memory_mib=p["guest_memory_mib"], extra_args=extra,
                            files={"bin/seqread": exe})
    htext = btext = ""
    hstats = {}
    if ht is not None:
        with ht:
            cfg.on_start = ht.on_start
            res = runner.run(guest_script(p, job, traced), cfg)
            htext, btext, hstats = ht.read()
        notes += ht.notes
    else:
        res = runner.run(guest_script(p, job, traced), cfg)
    cal_after = _calibrate(exe, p["calib_samples"])
    if res.rc != 0:
        tail = " | ".join(res.output.strip().splitlines()[-3:])
        raise PerfbookError(f"the guest's script failed with status {res.rc} ({job['aio']}, "
                            f"{job['variant']}): {tail}")
    sect = split_output(out_img.read_bytes())
    out_img.unlink()
    bench, loops = parse_bench(sect.get("BENCH", ""))
    want = len(job["patterns"]) * (p["requests"] + p["warmup"])
    if len(bench) != want:
        raise PerfbookError(f"the guest returned {len(bench)} benchmark rows, expected {want}")
    bench = bench.sort_values("t0").reset_index(drop=True)
    calib = pd.concat([cal_before.assign(phase="before"), cal_after.assign(phase="after")],
                      ignore_index=True)
    fit = fit_clock(calib)
    jrow = {**{k: job[k] for k in ("round", "position", "kind", "aio", "variant")},
            "layers": "+".join(sorted(layers)) or "none", "patterns": ",".join(job["patterns"]),
            "qemu_events": len(qevents) if "qemu" in layers else 0,
            "accel": res.accel, "accel_note": res.accel_note, "boot_seconds": res.boot_seconds,
            "total_seconds": res.total_seconds, "requests": p["requests"], "warmup": p["warmup"],
            "tsc_hz": fit["tsc_hz"], "q_tsc_ref": fit["tsc_ref"], "q_real_ref_us": fit["real_ref_us"],
            "q_slope": fit["slope"], "calib_resid_cyc": fit["resid_max"], "notes": "; ".join(notes)}
    if len(loops):
        mono = (loops.mono_end - loops.mono_start).sum()
        jrow["guest_tsc_hz"] = float((loops.tsc_end - loops.tsc_start).sum() / mono * 1e9) if mono else math.nan
    req = bench.copy()
    req["bench_cyc"] = req.t1 - req.t0
    # guest layer
    if traced:
        gstats = ring_stats(sect.get("STATS", ""))
        jrow["guest_entries"] = gstats.get("entries")
        jrow["guest_overrun"] = gstats.get("overrun")
        gev = parse_ftrace(sect.get("TRACE", ""))
        gs = guest_stamps(bench, gev)
        for c in gs.columns:
            req[c] = gs[c] - req.t0
        jrow["matched_guest"] = int(gs.g_irq.notna().sum())
    # QEMU layer
    qseg = None
    if "qemu" in layers:
        qtext = qlog.read_text(errors="replace") if qlog.exists() else ""
        qlog.unlink(missing_ok=True)
        qev = parse_qemu_log(qtext)
        jrow["qemu_lines"] = int(len(qev))
        qseg = qemu_segments(qev)
        m = match_in_order(bench.offset.to_numpy(), qseg.offset.to_numpy())
        jrow["matched_qemu"] = int((m >= 0).sum())
        anchor = qseg.q_notify.to_numpy(dtype="float64")
        req["q_anchor"] = [anchor[k] if k >= 0 else math.nan for k in m]
        for c in ("q_pop", "q_read", "q_submit", "q_cb", "q_rw", "q_req", "q_flush", "q_irq", "q_apic"):
            col = qseg[c].to_numpy(dtype="float64")
            req[c] = [col[k] - anchor[k] if k >= 0 else math.nan for k in m]
    # host layer
    if ht is not None:
        jrow["host_lost"] = int(sum(s.get("overrun", 0) + s.get("dropped events", 0) for s in hstats.values()))
        qev_h, bev_h = parse_ftrace(htext), parse_ftrace(btext)
        jrow["host_events"] = int(len(qev_h) + len(bev_h))
        hi = host_issues(qev_h, bev_h, res.qemu_pid, extents or [], blockdev["part_start"] if blockdev else 0)
        m = match_in_order(bench.offset.to_numpy(), hi.offset.to_numpy())
        jrow["matched_host"] = int((m >= 0).sum())
        anchor = hi.h_issue.to_numpy(dtype="float64")
        req["h_anchor"] = [anchor[k] if k >= 0 else math.nan for k in m]
        for c in ("h_complete", "h_sub", "h_sub_exit", "h_kick", "h_kvm_notify", "h_notifier", "h_kvm_irq"):
            col = hi[c].to_numpy(dtype="float64")
            req[c] = [col[k] - anchor[k] if k >= 0 else math.nan for k in m]
        for c in ("h_sub_call", "h_sub_thread"):
            col = hi[c].to_numpy(dtype=object)
            req[c] = [col[k] if k >= 0 else None for k in m]
    req = req.drop(columns=["t1"])
    for k in ("round", "aio", "variant"):
        req.insert(0, k, job[k])
    req.insert(0, "kind", "guest")
    req["accel"] = res.accel
    jrow.update(alignment_summary(req, jrow))
    jrow.update(relative_to_bases(req))
    return req, jrow, calib


def alignment_summary(req, jrow: dict) -> dict:
    """The guest->host offset bracket and the QEMU clock correction bracket of one boot."""
    out = {}
    need_g = {"g_notify", "g_irq"} <= set(req.columns)
    has_h = "h_anchor" in req.columns
    fit = {"tsc_ref": jrow.get("q_tsc_ref"), "real_ref_us": jrow.get("q_real_ref_us"), "slope": jrow.get("q_slope")}
    if need_g and has_h:
        kick = req.h_anchor + req.h_kick if req.h_kick.notna().any() else req.h_anchor + req.h_kvm_notify
        before = req.h_anchor + req.h_notifier if req.h_notifier.notna().any() else req.h_anchor + req.h_kvm_irq
        b = offset_bracket(req.t0 + req.g_notify, kick, req.t0 + req.g_irq, before)
        out.update({"off_lo": b["lo"], "off_hi": b["hi"], "off_n_lo": b["n_lo"], "off_n_hi": b["n_hi"],
                    "off_consistent": b["consistent"], "off_lo_from": "host notifier write"})
        if "q_apic" in req.columns and req.q_apic.notna().any():
            # QEMU's apic_deliver_irq is closer to the guest's handler; its microsecond stamp
            # starts no later than the event, so it is a valid lower bound too
            qb = offset_bracket(req.t0 + req.g_notify, kick, req.t0 + req.g_irq,
                                real_to_tsc(req.q_anchor + req.q_apic, fit))
            if math.isfinite(qb["lo"]) and qb["lo"] > b["lo"]:
                out.update({"off_lo": qb["lo"], "off_n_lo": qb["n_lo"], "off_lo_from": "QEMU apic_deliver_irq",
                            "off_consistent": bool(qb["lo"] <= b["hi"])})
    if has_h and "q_anchor" in req.columns:
        qa = req.q_anchor
        res_cyc = 1000.0 * jrow["q_slope"]
        h = req.h_anchor
        # after-host: virtio_queue_notify follows the vCPU kick; virtio_blk_rw_complete follows the
        # block completion. before-host: virtio_queue_notify precedes the submission syscall (the
        # notify runs the request up to its submission).
        q_after = list(real_to_tsc(qa, fit)) + list(real_to_tsc(qa + req.q_rw, fit))
        h_before = list(h + req.h_kick) + list(h + req.h_complete)
        q_before = real_to_tsc(qa, fit)
        h_after = h + req.h_sub
        b = qemu_bracket(q_after, h_before, q_before, h_after, res_cyc)
        out.update({"qc_lo": b["lo"], "qc_hi": b["hi"], "qc_consistent": b["consistent"],
                    "qc": qemu_correction(b)})
    return out


BASES = {"t0": "t0_base", "h_anchor": "h_base", "q_anchor": "q_base"}


def relative_to_bases(req) -> dict:
    """Store the absolute anchors (guest TSC, host TSC, QEMU microseconds) relative to the
    boot's smallest one (in place); the bases go into the job's row."""
    out = {}
    for col, base in BASES.items():
        if col in req.columns and req[col].notna().any():
            b = int(req[col].min())
            req[col] = req[col] - b
            out[base] = b
    return out


def _host_job(p, job, exe, image):
    from .proc import run_group
    import pandas as pd
    rows = []
    for pat in job["patterns"]:
        args = bench_args(p, pat, job["seeds"][pat], p["host_requests"], "/dev/stdout", str(image))
        r = run_group([str(exe), *args], timeout=600)
        if r.returncode != 0:
            raise PerfbookError(f"the host benchmark failed: {r.stderr.strip()[-200:]}")
        b, _ = parse_bench(r.stdout)
        rows.append(b)
    b = pd.concat(rows, ignore_index=True)
    b["bench_cyc"] = b.t1 - b.t0
    b = b.drop(columns=["t1"])
    for k in ("round", "aio", "variant"):
        b.insert(0, k, job[k])
    b.insert(0, "kind", "host")
    b["accel"] = ""
    bases = relative_to_bases(b)
    return b, {**{k: job[k] for k in ("round", "position", "kind", "aio", "variant")},
               "layers": "none", "patterns": ",".join(job["patterns"]), "requests": p["host_requests"],
               "warmup": p["warmup"], **bases}


def collect(data_dir=None, profile: str = "default", **overrides) -> Path:
    """Measure this host; returns the new dataset's directory."""
    import pandas as pd
    from . import guest
    from .cbuild import binary
    from .dataset import DatasetWriter
    from .lock import measure_lock
    from . import guard
    from .progress import Progress
    from .scratch import Scratch
    from .stats import repetition
    p, data = begin_collect(params, preflight, profile, overrides, data_dir)
    exe = binary(BENCH)
    rng = random.Random(p["seed"])
    per_round = len(plan_round(p, random.Random(0), 0))
    public = {**p, "profile": profile}
    guard.enter()  # SIGINT/SIGTERM/SIGHUP -> KeyboardInterrupt (tools.guard)
    try:
        with measure_lock(CHAPTER), DatasetWriter(CHAPTER, data, public) as w, Scratch(CHAPTER) as sd:
            scratch = sd.dir
            rep = repetition(EXPERIMENT, p["aio"], p, "rep_")
            prog = Progress(CHAPTER, (rep.warmup + rep.min_runs) * per_round + 1)
            prog.note(f"scratch directory {scratch}")
            say = prog.note
            w.extra["_tool_cmds"] = {"qemu-system": [guest.QEMU, "--version"]}
            image = scratch / "bench.img"
            fill_image(image, p["image_mib"], p["seed"])
            prog.step(f"benchmark image of {p['image_mib']} MiB written")
            host_why = host_layer_problem()
            blockdev = extents = None
            if host_why is None:
                try:
                    blockdev = block_device(image)
                    extents = fiemap(image)
                except MissingPrerequisite as e:
                    w.skip("host_block", str(e))
            else:
                w.skip("host", host_why)
            have = available_qemu_events()
            qevents = [e for e in QEMU_EVENTS if e in have]
            missing = [e for e in QEMU_EVENTS if e not in have]
            if missing:
                w.notes.append(f"QEMU {guest.qemu_version()} has no trace events {', '.join(missing)}")
            w.extra["virtio_blk_latency"] = {
                "qemu_events": qevents, "qemu_trace_backend": "log (-trace, -D, -msg timestamp=on)",
                "host_block_device": {k: v for k, v in (blockdev or {}).items()},
                "image_extents": len(extents or []), "region": [REGION_START, p["image_mib"] * MiB - REGION_START],
                "block": BLOCK}
            reqs, jobs, cals = [], [], []
            accel_seen = set()
            with guest.Runner(accel=p["accel"], kvm_boot_timeout=p["kvm_boot_timeout"],
                              timeout=p["boot_timeout"], progress=say) as runner:
                w.extra["guest_artefacts"] = {k: v for k, v in (runner.artefacts or {}).items() if k != "dir"}
                jid = 0
                for rd in rep.rounds():
                    if rd.index:
                        prog.note(f"after {rd.index} round(s): {rep.status()}")
                    rnd = rd.index - rep.warmup   # measured rounds are numbered from 0
                    for job in plan_round(p, rng, rnd):
                        if job["kind"] == "host":
                            r, j = _host_job(p, job, exe, image)
                            cal = None
                        else:
                            r, j, cal = _guest_job(p, job, runner, exe, image, scratch, host_why is None,
                                                   blockdev, extents, qevents, say)
                            accel_seen.add(j["accel"])
                        if job["kind"] == "guest" and job["variant"] == rep_variant(p):
                            ok = r[r.warm == 0]
                            rep.add(job["aio"], float(ok.bench_cyc.median()) / j["tsc_hz"] * 1e6)
                        if not rd.warmup:  # warm-up rounds are run and counted, not kept
                            r.insert(0, "job", jid)
                            reqs.append(r)
                            jobs.append({"job": jid, **j})
                            if cal is not None:
                                cals.append(cal.assign(job=jid))
                            jid += 1
                        extra = f" ({j.get('accel', '').upper()})" if j.get("accel") else ""
                        what = "warm-up round" if rd.warmup else "round"
                        prog.step(f"{what} {rnd}: {job['kind']} {job['aio']} {job['variant']}{extra}")
                    prog.expect(per_round)
                prog.total = prog.done
                prog.note(f"stopped by {rep.stopped_by}: {rep.status()}")
            if "kvm" not in accel_seen:
                w.skip("host_kvm", "no KVM guest ran (the guests ran under "
                       + "/".join(sorted(a.upper() for a in accel_seen)) + "): kvm.ko's exit and "
                       "injection tracepoints only fire for KVM guests; under TCG the notify is an "
                       "MMIO write that QEMU's vCPU thread turns into an ioeventfd write, and the "
                       "interrupt is delivered to QEMU's emulated APIC")
            req = pd.concat(reqs, ignore_index=True)
            w.add_table("requests", _compact(req))
            w.add_table("jobs", pd.DataFrame(jobs))
            w.add_table("repetition", pd.DataFrame(rep.records()))
            if cals:
                w.add_table("calib", pd.concat(cals, ignore_index=True))
    finally:
        guard.leave()
    return w.published


def _compact(req):
    """Integers where the values are whole (CSV size), the request columns in a fixed order; what
    is the same for a whole boot (kind, round, aio, variant, accel) lives in the jobs table."""
    import pandas as pd
    order = ["job", "pattern", "idx", "warm", "offset",
             "bench_cyc", "t0", "g_issue", "g_notify", "g_irq", "g_complete", "h_anchor", "h_kick",
             "h_kvm_notify", "h_sub", "h_sub_exit", "h_complete", "h_notifier", "h_kvm_irq",
             "h_sub_call", "h_sub_thread", "q_anchor", "q_pop", "q_read", "q_submit", "q_cb", "q_rw",
             "q_req", "q_flush", "q_irq", "q_apic"]
    d = req.reindex(columns=order)
    for c in order:
        if c in ("pattern", "h_sub_call", "h_sub_thread"):
            continue
        d[c] = pd.to_numeric(d[c], errors="coerce").round().astype("Int64")
    return d


# ---------------------------------------------------------------- explain side
def load_reference_table(data_dir=None):
    from .dataset import load_reference
    return load_reference(CHAPTER, data_dir)


def load(data_dir=None) -> dict:
    """Every dataset's tables and manifests, and the seed's figures."""
    from .dataset import load_manifests, load_reference, load_table
    out = {n: load_table(CHAPTER, n, data_dir) for n in ("requests", "jobs", "calib", "repetition")}
    # the analysis must not depend on the order rows were written in: natural keys (boot, then
    # the request's start stamp / the calibration pair's stamp)
    for n, keys in (("requests", ["job", "t0"]), ("jobs", ["job"]), ("calib", ["job", "tsc0"])):
        if len(out[n]):
            out[n] = out[n].sort_values(["host_id", "run_id", *keys], kind="stable",
                                        ignore_index=True)
    if len(out["requests"]):
        per_job = ["kind", "round", "aio", "variant", "accel"]
        j = out["jobs"].reindex(columns=["host_id", "run_id", "job"] + per_job)
        j["aio"] = j["aio"].fillna("")
        j["accel"] = j["accel"].fillna("")
        out["requests"] = out["requests"].merge(j, on=["host_id", "run_id", "job"], how="left")
    out["manifests"] = load_manifests(CHAPTER, data_dir)
    out["reference"] = load_reference(CHAPTER, data_dir)
    return out


STAMPS_G = ("g_issue", "g_notify", "g_irq", "g_complete")
STAMPS_H = ("h_kick", "h_kvm_notify", "h_sub", "h_sub_exit", "h_complete", "h_notifier", "h_kvm_irq")
STAMPS_Q = ("q_pop", "q_read", "q_submit", "q_cb", "q_rw", "q_req", "q_flush", "q_irq", "q_apic")


def _with_job_cols(requests, jobs):
    """Requests plus their boot's clock facts: tsc_hz (the run's median where a job has none),
    off (guest->host TSC offset, middle of the bracket), qc (QEMU clock correction, 0 if none;
    see qemu_correction)
    and the QEMU clock fit."""
    import numpy as np
    cols = ["tsc_hz", "off_lo", "off_hi", "qc", "q_tsc_ref", "q_real_ref_us", "q_slope"] + list(BASES.values())
    j = jobs[["host_id", "run_id", "job"] + [c for c in cols if c in jobs]].copy()
    for c in cols:
        if c not in j:
            j[c] = np.nan
    d = requests.merge(j, on=["host_id", "run_id", "job"], how="left")
    for col, base in BASES.items():  # back to absolute stamps (float64 is exact below 2**53)
        if col in d:
            d[col] = d[col].astype("float64") + d[base].astype("float64")
    med = d.groupby(["host_id", "run_id"])["tsc_hz"].transform("median")
    d["tsc_hz"] = d["tsc_hz"].fillna(med)
    d["off"] = (d.off_lo + d.off_hi) / 2
    d["qc"] = d["qc"].fillna(0.0) if "qc" in d else 0.0
    return d


def _q2host(d, us):
    """QEMU microsecond stamps -> host TSC (calibration line plus the bracket's correction)."""
    return d.q_tsc_ref + d.q_slope * ((us - d.q_real_ref_us) * 1000.0) + d.qc


def layer_intervals(requests, jobs):
    """Per request, the latency of each layer in ns; NaN where the boot did not trace it.
    Intervals inside one clock domain need no alignment; the TCG stand-in for the kvm.ko row
    (vCPU kick -> apic_deliver_irq) maps QEMU's clock onto the host's TSC."""
    import numpy as np
    d = _with_job_cols(requests, jobs)
    ns = 1e9 / d.tsc_hz
    out = d[[c for c in ("host_id", "run_id", "job", "kind", "round", "aio", "variant", "accel",
                         "pattern", "idx", "warm") if c in d]].copy()

    def col(c):
        return d[c].astype("float64") if c in d else np.nan
    bench = d.bench_cyc * ns
    out["guest_benchmark"] = np.where(d.kind == "guest", bench, np.nan)
    out["host_benchmark"] = np.where(d.kind == "host", bench, np.nan)
    out["guest_virtio_pci"] = (col("g_irq") - col("g_notify")) * ns
    out["guest_block"] = (col("g_complete") - col("g_issue")) * ns
    kvm = (col("h_kvm_irq") - col("h_kvm_notify")) * ns
    kvm = kvm.where(d["accel"] == "kvm") if "accel" in d else kvm * np.nan
    if "q_anchor" in d and "h_anchor" in d:
        tcg = (_q2host(d, col("q_anchor") + col("q_apic")) - (col("h_anchor") + col("h_kick"))) * ns
    else:
        tcg = np.nan
    out["host_kvm"] = np.where(np.isfinite(kvm), kvm, tcg)
    out["host_kvm_source"] = np.where(np.isfinite(kvm), "kvm.ko",
                                      np.where(np.isfinite(out["host_kvm"]), "TCG stand-in", ""))
    out["qemu_virtio"] = col("q_irq") * 1000.0          # relative to virtio_queue_notify
    out["qemu_aio"] = (col("q_rw") - col("q_read")) * 1000.0
    out["qemu_pool"] = (col("q_cb") - col("q_submit")) * 1000.0
    out["host_block"] = col("h_complete") * ns           # relative to block_rq_issue
    out["host_syscall"] = (col("h_sub_exit") - col("h_sub")) * ns
    out["host_sub_call"] = d["h_sub_call"] if "h_sub_call" in d else None
    return out


def aligned(requests, jobs):
    """Every stamp of every request in ns on one axis, the host's TSC, relative to the request's
    start (t0 = 0): guest stamps move by the offset bracket's middle, QEMU's through the clock
    fit and its correction; 'h_issue_ns' is the host block issue. NaN where a boot lacks the
    guest or host layer (no bracket)."""
    d = _with_job_cols(requests, jobs)
    if "accel" in d:  # kvm.ko's events belong to KVM guests only
        for c in ("h_kvm_notify", "h_kvm_irq"):
            if c in d:
                d[c] = d[c].where(d["accel"] == "kvm")
    ns = 1e9 / d.tsc_hz
    d["bench_ns"] = d.bench_cyc * ns
    for c in STAMPS_G:
        if c in d:
            d[c + "_ns"] = d[c] * ns
    t0_host = d.t0 + d.off
    if "h_anchor" in d:
        base = d.h_anchor - t0_host
        d["h_issue_ns"] = base * ns
        for c in STAMPS_H:
            if c in d:
                d[c + "_ns"] = (base + d[c]) * ns
    if "q_anchor" in d:
        d["q_notify_ns"] = (_q2host(d, d.q_anchor) - t0_host) * ns
        for c in STAMPS_Q:
            if c in d:
                d[c + "_ns"] = (_q2host(d, d.q_anchor + d[c]) - t0_host) * ns
    return d


# the layers of the seed's cumulative table, top to bottom, and how each is measured today
LAYER_ROWS = [
    ("guest_benchmark", "Guest benchmark", "seqread in the guest: TSC around pread()"),
    ("guest_virtio_pci", "Guest virtio-pci", "guest ftrace: vp_notify -> vring_interrupt"),
    ("host_kvm", "Host kvm.ko", "KVM: kvm_mmio/kvm_fast_mmio/kvm_pio (notify) -> kvm_msi_set_irq/kvm_set_irq; "
     "TCG stand-in: the vCPU thread's ioeventfd write -> QEMU's apic_deliver_irq"),
    ("qemu_virtio", "QEMU virtio", "QEMU log: virtio_queue_notify -> virtio_notify(_irqfd)"),
    ("qemu_aio", "QEMU aio", "QEMU log: virtio_blk_handle_read -> virtio_blk_rw_complete"),
    ("host_block", "Host block device", "host ftrace: block_rq_issue -> block_rq_complete (the image's disk)"),
    ("host_benchmark", "Host benchmark", "seqread on the host, same image file"),
]
DELTA_ROWS = [("Guest", "guest_benchmark", "guest_virtio_pci"),
              ("Host/guest switching", "guest_virtio_pci", "host_kvm"),
              ("Host/QEMU switching", "host_kvm", "qemu_virtio"),
              ("QEMU", "qemu_virtio", "qemu_aio"),
              ("Host I/O", "qemu_aio", None)]


def cumulative_table(iv, method: str = "one_run", aio: str = "threads", pattern: str = "seq"):
    """The seed's cumulative table from our requests (means, like the seed, and medians with CI).

    method 'one_run': every layer from the boots that traced all layers at once (the same
    requests); 'control' is that boot's guest benchmark. 'seed': each layer from the boot that
    traced only its own layer (guest / qemu / host variants; the kvm row from the 'boundary'
    boots, which trace the host and QEMU: kvm.ko's events, or the TCG stand-in that needs both),
    the guest benchmark from the untraced boots, and 'control' the guest benchmark of the boot
    each row came from (the seed's 'benchmark control' column).
    """
    import pandas as pd
    from .stats import cv, summarize
    d = iv[(iv.warm == 0) & (iv.pattern == pattern)]
    g = d[(d.kind == "guest") & (d.aio == aio)]
    host = d[d.kind == "host"]
    src = {"one_run": {k: "all" for k, _, _ in LAYER_ROWS},
           "seed": {"guest_benchmark": "plain", "guest_virtio_pci": "guest", "host_kvm": "boundary",
                    "qemu_virtio": "qemu", "qemu_aio": "qemu", "host_block": "host"}}[method]
    rows = []
    for key, label, how in LAYER_ROWS:
        if key == "host_benchmark":
            x, ctrl, variant = host[key], None, "host bench"
        else:
            variant = src.get(key, "all")
            sub = g[g.variant == variant]
            x = sub[key]
            ctrl = sub["guest_benchmark"] if len(sub) else None
        x = x.dropna()
        s = summarize(x) if len(x) else None
        c = summarize(ctrl.dropna()) if ctrl is not None and ctrl.notna().any() else None
        boots = d.loc[x.index].groupby(["host_id", "run_id", "job"])[key].mean() if len(x) else x
        rows.append({"key": key, "layer": label, "measured by": how, "from": variant,
                     "n": s.n if s else 0, "mean_ns": s.mean if s else math.nan,
                     "median_ns": s.median if s else math.nan, "ci_low": s.ci_low if s else math.nan,
                     "ci_high": s.ci_high if s else math.nan,
                     "control_mean_ns": c.mean if c else math.nan, "boots": len(boots),
                     "boot_cv_pct": 100 * cv(boots) if len(boots) > 1 else math.nan})
    t = pd.DataFrame(rows)
    if method == "one_run":
        t["control_mean_ns"] = [math.nan if k == "host_benchmark" else v
                                for k, v in zip(t.key, t.control_mean_ns)]
    return t


CHAIN = [upper for _name, upper, _lower in DELTA_ROWS]


def delta_table(cum, value: str = "mean_ns"):
    """The seed's delta table: successive differences of the cumulative rows (the last one is the
    bottom layer itself), in ns and as a percentage of the guest benchmark. A layer that was not
    measured merges its two neighbouring deltas into one row that names both."""
    import pandas as pd
    v = {k: x for k, x in zip(cum.key, cum[value])}
    names = [n for n, _u, _l in DELTA_ROWS]
    have = [i for i, k in enumerate(CHAIN) if math.isfinite(v.get(k, math.nan))]
    total = v.get("guest_benchmark", math.nan)
    rows = []
    for pos, i in enumerate(have):
        j = have[pos + 1] if pos + 1 < len(have) else None
        low = v[CHAIN[j]] if j is not None else 0.0
        delta = v[CHAIN[i]] - low
        rows.append({"layer": " + ".join(names[i:j] if j is not None else names[i:]),
                     "delta_ns": delta, "delta_pct": 100 * delta / total if total else math.nan})
    return pd.DataFrame(rows, columns=["layer", "delta_ns", "delta_pct"])


def seed_cumulative(reference):
    import pandas as pd
    r = reference[reference.kind == "cumulative"].sort_values("order")
    c = reference[reference.kind == "control"].set_index("item")["value"]
    return pd.DataFrame({"layer": r["item"].to_numpy(), "mean_ns": pd.to_numeric(r["value"]).to_numpy(),
                         "control_mean_ns": [pd.to_numeric(c.get(i), errors="coerce") for i in r["item"]]})


def seed_delta(reference):
    import pandas as pd
    r = reference[reference.kind == "delta"].sort_values("order")
    pct = reference[reference.kind == "delta_pct"].set_index("item")["value"]
    return pd.DataFrame({"layer": r["item"].to_numpy(), "delta_ns": pd.to_numeric(r["value"]).to_numpy(),
                         "delta_pct": [float(pct[i]) for i in r["item"]]})


def breakdown(delta, source: str):
    """Delta rows as shares (stacked-bar input): source, layer, share_pct, ns."""
    import pandas as pd
    return pd.DataFrame({"source": source, "layer": delta.layer, "ns": delta.delta_ns,
                         "share_pct": delta.delta_pct})


def lifecycle(a, job: int, n: int = 1, pattern: str = "seq"):
    """The events of the request with the median total latency (of boot `job`) in time order:
    event, layer, where it runs, ns since the request started, ns since the previous event."""
    import numpy as np
    import pandas as pd
    d = a[(a.job == job) & (a.warm == 0) & (a.pattern == pattern)]
    need = ["g_notify_ns", "g_irq_ns", "q_notify_ns", "h_issue_ns"]
    d = d.dropna(subset=[c for c in need if c in d])
    if d.empty:
        return pd.DataFrame()
    med = d.bench_ns.median()
    pick = d.iloc[(d.bench_ns - med).abs().argsort()[:n]]
    where = LIFECYCLE_EVENTS
    rows = []
    for _, r in pick.iterrows():
        thread_sub = r.get("h_sub_thread") or ""
        for col, (event, layer, runs) in where.items():
            if col == "t1":
                t = r.bench_ns
            elif col == "t0":
                t = 0.0
            else:
                t = r.get(col, np.nan)
            if t is None or not np.isfinite(t):
                continue
            if col in ("h_sub_ns", "h_sub_exit_ns"):
                event = f"{event} ({r.get('h_sub_call')})"
                runs = f"QEMU {thread_sub} thread (host kernel)"
            rows.append({"request": int(r.idx), "event": event, "layer": layer, "runs in": runs, "t_ns": float(t)})
    out = pd.DataFrame(rows).sort_values(["request", "t_ns"], kind="stable")
    out["since_prev_ns"] = out.groupby("request")["t_ns"].diff().fillna(0.0)
    return out.reset_index(drop=True)


LIFECYCLE_EVENTS = {
    "t0": ("pread() called", "guest", "guest user (seqread)"),
    "g_issue_ns": ("block_rq_issue", "guest", "guest kernel"),
    "g_notify_ns": ("vp_notify", "guest", "guest kernel"),
    "h_kick_ns": ("ioeventfd write (kick)", "host/QEMU boundary", "QEMU vCPU thread (host kernel)"),
    "h_kvm_notify_ns": ("kvm notify exit", "host kvm.ko", "host kernel"),
    "q_notify_ns": ("virtio_queue_notify", "QEMU", "QEMU main loop"),
    "q_pop_ns": ("virtqueue_pop", "QEMU", "QEMU main loop"),
    "q_read_ns": ("virtio_blk_handle_read", "QEMU", "QEMU main loop"),
    "q_submit_ns": ("aio submit (thread pool / io_uring)", "QEMU aio", "QEMU main loop"),
    "h_sub_ns": ("submission syscall enter", "host", "QEMU thread (host kernel)"),
    "h_issue_ns": ("block_rq_issue", "host", "host kernel"),
    "h_complete_ns": ("block_rq_complete", "host", "host kernel (interrupt)"),
    "h_sub_exit_ns": ("submission syscall exit", "host", "QEMU thread (host kernel)"),
    "q_cb_ns": ("aio completion callback", "QEMU aio", "QEMU main loop"),
    "q_rw_ns": ("virtio_blk_rw_complete", "QEMU", "QEMU main loop"),
    "q_req_ns": ("virtio_blk_req_complete", "QEMU", "QEMU main loop"),
    "q_flush_ns": ("virtqueue_flush", "QEMU", "QEMU main loop"),
    "q_irq_ns": ("virtio_notify(_irqfd)", "QEMU", "QEMU main loop"),
    "h_notifier_ns": ("guest notifier eventfd write", "host/QEMU boundary", "QEMU main thread (host kernel)"),
    "h_kvm_irq_ns": ("MSI injection", "host kvm.ko", "host kernel"),
    "q_apic_ns": ("apic_deliver_irq", "QEMU (TCG APIC)", "QEMU main loop"),
    "g_irq_ns": ("vring_interrupt", "guest", "guest kernel (interrupt)"),
    "g_complete_ns": ("block_rq_complete", "guest", "guest kernel"),
    "t1": ("pread() returned", "guest", "guest user (seqread)"),
}


def accel_label(jobs) -> str:
    acc = sorted({a for a in jobs.get("accel", []) if isinstance(a, str) and a})
    return "/".join(a.upper() for a in acc) or "none"


from .dataset import skipped_table as not_measured  # noqa: E402  (the chapter's name for it)


# ---------------------------------------------------------------- tables for the chapter
def newest_subset(D: dict, manifest: dict) -> dict:
    """The requests and jobs of one dataset (the one the prose quotes)."""
    rid, hid = manifest["run_id"], manifest["host"]["host_id"]
    out = {}
    for k in ("requests", "jobs", "calib"):
        t = D.get(k)
        out[k] = t[(t.run_id == rid) & (t.host_id == hid)] if t is not None and len(t) else t
    return out


def alignment_table(jobs):
    """Per boot that traced the guest and the host: the guest->host offset bracket (µs wide),
    which host event gave its lower bound, and the QEMU clock check (µs)."""
    import pandas as pd
    j = jobs[jobs.get("off_lo", pd.Series(dtype=float)).notna()] if "off_lo" in jobs else jobs.iloc[:0]
    us = 1e6 / j.tsc_hz
    out = pd.DataFrame({"round": j["round"], "aio": j.aio, "variant": j.variant, "accel": j.accel.str.upper(),
                        "requests matched": j.off_n_hi.astype(int),
                        "bracket width (µs)": (j.off_hi - j.off_lo) * us,
                        "lower bound from": j.get("off_lo_from"),
                        "consistent": j.off_consistent.astype(bool),
                        "QEMU clock check low (µs)": j.qc_lo * us, "QEMU clock check high (µs)": j.qc_hi * us,
                        "QEMU correction (µs)": j.qc * us})
    return out.sort_values(["aio", "round"]).reset_index(drop=True)


def side_by_side_cumulative(cum, reference):
    """Our cumulative table beside the seed's (the seed's 'QEMU paio' sits in our 'QEMU aio' row)."""
    import pandas as pd
    s = seed_cumulative(reference)
    seed_key = {"Guest benchmark": "guest_benchmark", "Guest virtio-pci": "guest_virtio_pci",
                "Host kvm.ko": "host_kvm", "QEMU virtio": "qemu_virtio", "QEMU paio": "qemu_aio",
                "Host benchmark": "host_benchmark"}
    s = s.assign(key=s.layer.map(seed_key)).set_index("key")
    from .stats import ci_label
    ci_col = f"median {ci_label(cum['n'])} (ns)"  # real coverage of the rows' median CIs
    rows = []
    for r in cum.to_dict("records"):
        rows.append({"layer": r["layer"],
                     "seed 2010 (ns)": s.mean_ns.get(r["key"], math.nan),
                     "seed control (ns)": s.control_mean_ns.get(r["key"], math.nan),
                     "ours, mean (ns)": r["mean_ns"], "ours, median (ns)": r["median_ns"],
                     ci_col: (f"{r['ci_low']:,.0f}–{r['ci_high']:,.0f}"
                                             if math.isfinite(r["ci_low"]) else ""),
                     "ours, control (ns)": r["control_mean_ns"], "n": r["n"], "boots": r["boots"],
                     "boot-to-boot CV (%)": r["boot_cv_pct"], "measured by": r["measured by"]})
    return pd.DataFrame(rows)


def side_by_side_delta(delta, reference):
    import pandas as pd
    s = seed_delta(reference).set_index("layer")
    rows = []
    for r in delta.itertuples():
        names = r.layer.split(" + ")
        seed_ns = sum(s.delta_ns.get(n, math.nan) for n in names)
        seed_pct = sum(s.delta_pct.get(n, math.nan) for n in names)
        rows.append({"layer": r.layer, "seed 2010 (ns)": seed_ns, "seed 2010 (%)": seed_pct,
                     "ours (ns)": r.delta_ns, "ours (%)": r.delta_pct})
    return pd.DataFrame(rows)


LAYER_LABELS = {"guest_benchmark": "guest benchmark", "guest_virtio_pci": "guest virtio-pci",
                "host_kvm": "host boundary (kvm.ko / TCG stand-in)", "qemu_virtio": "QEMU virtio",
                "qemu_aio": "QEMU aio", "qemu_pool": "QEMU aio submit -> callback",
                "host_syscall": "host submission syscall", "host_block": "host block device",
                "guest_block": "guest block layer", "host_benchmark": "host benchmark"}


def percentiles(iv, keys, by=("aio",)):
    """p5 / p50 / p95 / p99 (µs) and n of each layer's per-request latency."""
    import pandas as pd
    rows = []
    d = iv[iv.warm == 0]
    for key in keys:
        for grp, g in d.groupby(list(by)):
            x = g[key].dropna() / 1000
            if not len(x):
                continue
            grp = grp if isinstance(grp, tuple) else (grp,)
            rows.append({**dict(zip(by, grp)), "layer": LAYER_LABELS.get(key, key), "n": len(x),
                         "p5": x.quantile(0.05), "median": x.median(), "p95": x.quantile(0.95),
                         "p99": x.quantile(0.99), "mean": x.mean()})
    return pd.DataFrame(rows)


def syscall_summary(iv):
    """The host submission syscall per aio mode: which call, how long (µs), n."""
    import pandas as pd
    d = iv[(iv.warm == 0) & iv.host_syscall.notna()]
    rows = []
    for (aio, call), g in d.groupby(["aio", "host_sub_call"]):
        from .stats import summarize
        s = summarize(g.host_syscall / 1000)
        rows.append({"aio": aio, "syscall": call, "n": s.n, "median (µs)": s.median,
                     "CI": f"{s.ci_low:.1f}–{s.ci_high:.1f}", "mean (µs)": s.mean, "p95 (µs)": s.p95})
    from .stats import ci_label
    t = pd.DataFrame(rows)
    # the column says the real coverage of the median CIs (below 95 % for n < 6)
    return t.rename(columns={"CI": ci_label(t["n"])}) if len(t) else t


def boot_medians(iv, key: str):
    """One value per boot: the median of `key` over its timed requests (both patterns), with
    the boot's round, aio mode and variant. Requests inside one boot share its conditions, so
    comparisons between modes count boots, not requests."""
    d = iv[(iv.warm == 0) & iv[key].notna()]
    return (d.groupby(["host_id", "run_id", "job", "round", "aio", "variant", "kind"])[key].median()
            .reset_index())


def order_text(values: dict, unit: str = "µs", fmt: str = "{:.1f}") -> str:
    """'native (193.4 µs) < threads (200.3 µs) < io_uring (210.0 µs)' from {name: value}."""
    items = sorted(((v, k) for k, v in values.items() if v == v), key=lambda t: t[0])
    return " < ".join(f"{k} ({fmt.format(v)} {unit})" for v, k in items)


def compare_cumulative(reference, tables: dict):
    """The seed's cumulative table beside ours, one column group per method: {label: cumulative}."""
    import pandas as pd
    s = seed_cumulative(reference)
    seed_key = {"Guest benchmark": "guest_benchmark", "Guest virtio-pci": "guest_virtio_pci",
                "Host kvm.ko": "host_kvm", "QEMU virtio": "qemu_virtio", "QEMU paio": "qemu_aio",
                "Host benchmark": "host_benchmark"}
    s = s.assign(key=s.layer.map(seed_key)).set_index("key")
    out = pd.DataFrame({"layer": [label for _k, label, _h in LAYER_ROWS]}, index=[k for k, _l, _h in LAYER_ROWS])
    out["seed 2010 (ns)"] = s.mean_ns.reindex(out.index)
    out["seed control (ns)"] = s.control_mean_ns.reindex(out.index)
    for label, cum in tables.items():
        c = cum.set_index("key")
        out[f"{label}: mean (ns)"] = c.mean_ns
        out[f"{label}: median (ns)"] = c.median_ns
        out[f"{label}: control (ns)"] = c.control_mean_ns
        out[f"{label}: boots"] = c.boots
    out["measured by"] = [how for _k, _l, how in LAYER_ROWS]
    return out.reset_index(drop=True)


def compare_delta(reference, deltas: dict):
    """The seed's delta table beside ours ({label: delta table}); rows by the seed's layer names,
    a merged row of ours (an unmeasured layer) under its first name."""
    import pandas as pd
    s = seed_delta(reference).set_index("layer")
    out = pd.DataFrame(index=[n for n, _u, _l in DELTA_ROWS])
    out["seed 2010 (ns)"] = s.delta_ns
    out["seed 2010 (%)"] = s.delta_pct
    for label, d in deltas.items():
        first = d.layer.str.split(" + ", regex=False).str[0]
        dd = d.assign(first=first).set_index("first")
        out[f"{label} (ns)"] = dd.delta_ns
        out[f"{label} (%)"] = dd.delta_pct
    return out.rename_axis("layer").reset_index()
