"""qemu_cache_modes, spec: the modes and parts, QEMU's documented mapping, and the constants the
collect, the parsers and the analysis share."""
from __future__ import annotations

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

# -- semantics: strace of qemu-io
TRACED = ("openat", "pread64", "preadv", "preadv2", "pwrite64", "pwritev", "pwritev2",
          "fdatasync", "fsync", "sync_file_range", "io_submit", "io_uring_enter")
SEM_IMAGE_MIB = 8
SEM_WRITE = 64 * KiB
# Phase markers: reads of lengths that nothing else uses, before and after the flush command.
MARK_FLUSH_BEGIN = (6 * MiB, 12 * KiB)
MARK_FLUSH_END = (7 * MiB, 20 * KiB)


def needs_direct(aio: str, mode: str) -> bool:
    """QEMU refuses aio=native without O_DIRECT: such a (aio, mode) pair is not run."""
    return aio == "native" and mode not in ("none", "directsync")


# -- the guest's dd and the host's page cache
DD_BS = 64 * KiB
MEMINFO_KEYS = ("Cached", "Dirty", "Writeback", "MemFree")

# -- the ranking
BENCH_KEYS = ["format", "op", "depth", "flush_interval"]
RANK_REL_TOL = 0.05   # speed: medians closer than this (relative) rank as equal
RANK_MEM_TOL_MIB = 1.0  # memory: residencies closer than this rank as equal
SAFETY_LEVELS = {
    0: "no fdatasync/fsync reaches the image, not even for a guest flush",
    1: "synced on guest flushes only; written data waited dirty in the host page cache",
    2: "synced on guest flushes only; written data went to the host disk at once (O_DIRECT)",
    3: "synced after every write",
}
