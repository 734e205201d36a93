"""virtio_blk_latency: text -> frames, and the vocabulary collect and analysis share (what is
measured: aio modes, variants, trace events, the stamp columns). The traces of every layer
(ftrace of the guest and the host, QEMU's log backend), the benchmark's and the calibration's
output, and the guest's output disk. Pure: tested on the fixtures in
tests/fixtures/virtio_blk_latency."""

from __future__ import annotations

import math
import re

import pandas as pd

from perfbook.core.errors import PerfbookError
from perfbook.framework.contract import choose_list
from perfbook.probes import ftrace

# ---- what the chapter measures (shared by collect and analysis) ------------------------------
SEED = "001_44860ac07de981e7.txt"
SEED_TEXT = "001_44860ac07de981e7.virtio-blk-latency.txt"
AIO = ("threads", "native", "io_uring")
PATTERNS = ("seq", "rand")
LAYERS = ("guest", "qemu", "host")
VARIANTS = {
    "plain": (),
    "guest": ("guest",),
    "qemu": ("qemu",),
    "host": ("host",),
    "boundary": ("qemu", "host"),
    "all": ("guest", "qemu", "host"),
}
# the seed's method: one layer per boot; 'boundary' is the host/QEMU edge, which the kvm.ko row's
# TCG stand-in needs (the vCPU's kick is a host event, the APIC delivery a QEMU one)
SINGLE = ("guest", "qemu", "host", "boundary")
BENCH = "seqread"
BLOCK = 4096
MiB = 1024 * 1024
REGION_START = MiB  # the benchmark stays clear of the partition-table reads at both ends
OUT_DISK_MIB = 96

QEMU_EVENTS = (
    "virtio_queue_notify",
    "virtqueue_pop",
    "virtio_blk_handle_read",
    "thread_pool_submit",
    "thread_pool_complete",
    "luring_co_submit",
    "luring_process_completion",
    "virtio_blk_rw_complete",
    "virtio_blk_req_complete",
    "virtqueue_flush",
    "virtio_notify",
    "virtio_notify_irqfd",
    "apic_deliver_irq",
)
# The single-layer boots ('qemu', 'boundary') log only what their rows and the matching need, as
# the seed enabled only virtio_queue_notify and virtio_notify for its QEMU row: the log backend
# writes every event with its own write(), so each event costs the main loop time.
QEMU_CORE_EVENTS = (
    "virtio_queue_notify",
    "virtio_blk_handle_read",
    "virtio_blk_rw_complete",
    "virtio_notify",
    "virtio_notify_irqfd",
    "apic_deliver_irq",
)
SUBMIT_CALLS = ("preadv", "pread64", "preadv2", "io_submit", "io_uring_enter")
HOST_SYSCALLS = SUBMIT_CALLS + ("io_getevents", "write")
KVM_NOTIFY = ("kvm_fast_mmio", "kvm_mmio", "kvm_pio")
KVM_IRQ = ("kvm_msi_set_irq", "kvm_set_irq")

# Rounds repeat (perfbook.analysis.repetition.Repetition). A round boots every cell of `boots`
# (aio/variant) once, in shuffled order; the value each round adds per aio mode is the median
# latency of its untraced ("plain") boot, or of its first cell's where the round has none. Rounds
# go on until each aio mode's median over rounds has a 95 % CI narrower than rep_target
# (relative), or rep_budget_s runs out, or rep_max_runs rounds are in (the default profile fixes
# the rounds: min = max). The boot is the unit of repetition: requests inside one boot share its
# conditions.
EXPERIMENT = "guest benchmark, untraced boot"


def round_cells(p: dict) -> list[str]:
    """A round's guest boots as 'aio/variant', in a fixed order: `boots` among the aio modes of
    `aio`, or (boots None) every aio mode x variant and the single-layer boots of layer_runs."""
    if p["boots"] is None:
        cells = [f"{a}/{v}" for a in p["aio"] for v in p["variants"]]
        cells += [f"{a}/{v}" for a in p["layer_runs"] for v in SINGLE if v not in p["variants"]]
        return cells
    every = [f"{a}/{v}" for a in AIO for v in VARIANTS]
    want = choose_list(p["boots"], every, "boot (aio/variant)")
    return [c for c in every if c in want and c.split("/")[0] in p["aio"]]


# the stamps of a request, per layer (relative to the layer's anchor in the requests table)
STAMPS_G = ("g_issue", "g_notify", "g_irq", "g_complete")
STAMPS_H = (
    "h_kick",
    "h_kvm_notify",
    "h_sub",
    "h_sub_exit",
    "h_complete",
    "h_notifier",
    "h_kvm_irq",
)
STAMPS_Q = ("q_pop", "q_read", "q_submit", "q_cb", "q_rw", "q_req", "q_flush", "q_irq", "q_apic")
# absolute anchors (guest TSC, host TSC, QEMU µs) are stored relative to the boot's smallest
BASES = {"t0": "t0_base", "h_anchor": "h_base", "q_anchor": "q_base"}


# ---- text -> frames -------------------------------------------------------------------------
_SYS_ENTER = re.compile(r"^sys_(\w+)\((.*)\)\s*$")
_SYS_EXIT = re.compile(r"^sys_(\w+) -> (0x[0-9a-fA-F]+|-?\d+)\s*$")
_BLOCK = re.compile(r"^(\d+),(\d+)\s+(\S+)\s+(?:(\d+)\s+)?\(([^)]*)\)\s+(\d+)\s+\+\s+(\d+)")
_ARG = re.compile(r"(\w+): (0x[0-9a-fA-F]+|-?\d+)")


def parse_ftrace(text: str):
    """ftrace 'trace' text -> frame: ts, tid, comm, kind (enter/exit/event), name, detail,
    ret, cpu. Syscall events print as 'sys_x(args)' and 'sys_x -> ret'. Lines are split by
    perfbook.probes.ftrace (host or guest kernel, any trace options); ts is the raw count for the
    x86-tsc clock we set (int), float seconds if a kernel fell back to a ns clock.
    attrs['lost'] / attrs['lost_lines'] say whether the ring buffer dropped events."""
    rows = []
    st = ftrace.new_stats()
    for r in ftrace.records(text, st):
        ts, tid, comm, cpu = r.ts, r.pid, r.task, r.cpu
        if r.event is not None:
            rows.append((ts, tid, comm, "event", r.event, r.body, None, cpu))
            continue
        body = r.body
        s = _SYS_EXIT.match(body)
        if s:
            rows.append((ts, tid, comm, "exit", s[1], "", int(s[2], 0), cpu))
            continue
        s = _SYS_ENTER.match(body)
        if s:
            rows.append((ts, tid, comm, "enter", s[1], s[2], None, cpu))
    df = pd.DataFrame(rows, columns=["ts", "tid", "comm", "kind", "name", "detail", "ret", "cpu"])
    df.attrs.update(st)
    return df


def host_loss(cpu_stats: dict, frames: dict, start) -> tuple[int, int]:
    """(events lost inside the measured span, events lost before it) of the host's ftrace
    buffers. `cpu_stats`: buffer -> CPU -> ring-buffer stats (TraceSession.cpu_buffer_stats);
    `frames`: buffer -> its parse_ftrace frame; `start`: the earliest host event of a matched
    request (nan: none matched).

    The host buffers run from QEMU's start, in ftrace's overwrite mode: a full CPU buffer drops
    its *oldest* events (its overrun count). A TCG boot is long, and longer on a busy machine,
    so a CPU may overrun with the boot's syscalls and still hold every event of the benchmark
    that follows. A CPU's overrun is lost before the span if the CPU's oldest kept event is
    older than `start`, else it may fall inside the span and counts there. Events refused
    when a buffer was not in overwrite mode ('dropped events') can't be placed: inside."""
    inside = before = 0
    for buf, cpus in cpu_stats.items():
        df = frames.get(buf)
        for cpu, st in cpus.items():
            inside += st.get("dropped events", 0)
            over = st.get("overrun", 0)
            if not over:
                continue
            kept = (
                df.ts[df.cpu == cpu] if df is not None and len(df) else pd.Series([], dtype=float)
            )
            oldest = float(kept.min()) if len(kept) else math.nan
            if not math.isnan(oldest) and not math.isnan(float(start)) and oldest <= float(start):
                before += over
            else:
                inside += over
    return int(inside), int(before)


def syscall_args(detail: str) -> dict[str, int]:
    return {k: int(v, 0) for k, v in _ARG.findall(detail)}


def block_fields(detail: str) -> dict | None:
    """'254,0 R 4096 () 2048 + 8 ...' -> dev, rwbs, sector, nr_sector."""
    m = _BLOCK.match(detail)
    if not m:
        return None
    return {
        "major": int(m[1]),
        "minor": int(m[2]),
        "rwbs": m[3],
        "sector": int(m[6]),
        "nr_sector": int(m[7]),
    }


_QLOG = re.compile(r"^(\d+)@(\d+)\.(\d{6}):(\w+)\s?(.*)$")


def parse_qemu_log(text: str):
    """QEMU 'log' trace backend with -msg timestamp=on -> frame: line, tid, us (gettimeofday
    microseconds since the epoch), name, detail."""
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
    req, loops = [], []
    for line in text.splitlines():
        parts = line.strip().split(",")
        if parts[0] == "r" and len(parts) == 7:
            req.append(
                (
                    parts[1],
                    int(parts[2]),
                    int(parts[3]),
                    int(parts[4]),
                    int(parts[5]),
                    int(parts[6]),
                )
            )
        elif parts[0] == "loop" and len(parts) == 7:
            loops.append((parts[1], *map(int, parts[2:])))
    r = pd.DataFrame(req, columns=["pattern", "idx", "warm", "offset", "t0", "t1"])
    lp = pd.DataFrame(
        loops, columns=["pattern", "tsc_start", "tsc_end", "mono_start", "mono_end", "n"]
    )
    return r, lp


def parse_calib(text: str):
    rows = [
        tuple(int(x) for x in line.split(",")[1:5])
        for line in text.splitlines()
        if line.startswith("c,") and len(line.split(",")) == 5
    ]
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
