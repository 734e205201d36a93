"""Block-device and file-system facts that several chapters need (the shared layer).

Which file system and mount hold a path come from util-linux's `findmnt --target`, which
resolves the mount the kernel actually uses (no prefix matching of /proc/mounts, which
would put /var/tmpX under /var/tmp). The whole disk under a path, its dev_t, and its queue
settings come from sysfs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from perfbook.core.errors import MissingPrerequisite


def mount_of(path: str | os.PathLike) -> dict:
    """{"mount", "fstype", "source", "options"} of the mount that holds `path` (findmnt);
    empty values when findmnt is missing or fails."""
    empty = {"mount": None, "fstype": None, "source": None, "options": None}
    if not shutil.which("findmnt"):
        return empty
    try:
        r = subprocess.run(
            ["findmnt", "-J", "-o", "TARGET,FSTYPE,SOURCE,OPTIONS", "--target", str(path)],
            capture_output=True,
            text=True,
            timeout=10,
        )
        fs = json.loads(r.stdout)["filesystems"][0] if r.returncode == 0 else None
    except (OSError, ValueError, KeyError, IndexError, subprocess.TimeoutExpired):
        fs = None
    if not fs:
        return empty
    return {
        "mount": fs.get("target"),
        "fstype": fs.get("fstype"),
        "source": fs.get("source"),
        "options": fs.get("options"),
    }


def fstype(path: str | os.PathLike) -> str | None:
    """The file-system type holding `path` (ext4, xfs, tmpfs, overlay, ...)."""
    return mount_of(path)["fstype"]


def device_of(path: str | os.PathLike) -> tuple[str, int, int]:
    """(whole-disk name, major, minor) of the block device holding `path`."""
    st = os.stat(path)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    sysdev = Path(f"/sys/dev/block/{major}:{minor}")
    if not sysdev.exists():
        raise MissingPrerequisite(
            f"{path} is not on a block device (device {major}:{minor}: "
            "tmpfs, overlay or network filesystem?); pass scratch_parent on a disk"
        )
    real = sysdev.resolve()
    if (real / "partition").exists():
        real = real.parent
    dev = (real / "dev").read_text().strip()
    ma, mi = (int(x) for x in dev.split(":"))
    return real.name, ma, mi


def kernel_dev_t(major: int, minor: int) -> int:
    """dev_t as the kernel encodes it in tracepoints (MAJOR << 20 | MINOR)."""
    return (major << 20) | minor


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


QUEUE_KEYS = (
    "scheduler",
    "nr_requests",
    "rotational",
    "write_cache",
    "max_sectors_kb",
    "max_segments",
    "discard_max_bytes",
    "nomerges",
)


def queue_facts(disk: str) -> dict:
    """The request-queue settings of a whole disk (/sys/block/<disk>/queue), its number of
    hardware queues and its driver; None for what this kernel does not expose."""
    base = Path(f"/sys/block/{disk}")
    out = {k: _read(base / "queue" / k) for k in QUEUE_KEYS}
    try:
        out["nr_hw_queues"] = len([d for d in (base / "mq").iterdir() if d.is_dir()])
    except OSError:
        out["nr_hw_queues"] = None
    drv = base / "device" / "driver"
    out["driver"] = os.path.basename(os.path.realpath(drv)) if drv.exists() else None
    return out
