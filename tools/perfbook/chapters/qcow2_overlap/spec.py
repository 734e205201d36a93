"""qcow2_overlap: the modes, the workloads and the qemu-img command lines (pure: no I/O)."""
from __future__ import annotations

from pathlib import Path

SEED = "002_8365d2f6af46e24d.txt"
MODES = ("none", "constant", "cached", "all")
MiB, GiB = 1 << 20, 1 << 30
MAX_SIZE = 64 * 1024 * GiB  # sparse files only; metadata stays small at 64 KiB clusters

PERF_WORKLOADS = ("prealloc_512", "allocate_sequential_64k", "overwrite_scattered_512",
                  "overwrite_after_snapshots_512")
OVERLAP_SYMBOLS = ("qcow2_check_metadata_overlap", "qcow2_pre_write_overlap_check")


def rotation(modes, rng) -> list[str]:
    """The modes in a fresh shuffled order (one round), from the run's seeded generator."""
    order = list(modes)
    rng.shuffle(order)
    return order


def image_opts(path: Path, mode: str, no_flush: bool = True) -> str:
    """The --image-opts string that selects an overlap-check mode (QEMU >= 2.x syntax)."""
    opts = ["driver=qcow2", f"overlap-check={mode}"]
    if no_flush:
        opts.append("cache.no-flush=on")
    opts.append(f"file.filename={path}")
    return ",".join(opts)


def create_cmd(path: Path, cluster_size: int, size: int = 0, prealloc: str | None = None) -> list[str]:
    o = f"cluster_size={cluster_size}" + (f",preallocation={prealloc}" if prealloc else "")
    return ["qemu-img", "create", "-q", "-f", "qcow2", "-o", o, str(path), str(size)]


def prealloc_cmd(path: Path, size: int, mode: str) -> list[str]:
    return ["qemu-img", "resize", "-q", "--preallocation=metadata", "--image-opts",
            image_opts(path, mode), str(size)]


def bench_cmd(path: Path, mode: str, count: int, buf: int, step: int) -> list[str]:
    return ["qemu-img", "bench", "-q", "-w", "-c", str(count), "-s", str(buf), "-S", str(step),
            "-t", "writeback", "--image-opts", image_opts(path, mode, no_flush=True)]


def snapshot_cmd(path: Path, name: str) -> list[str]:
    return ["qemu-img", "snapshot", "-c", name, str(path)]
