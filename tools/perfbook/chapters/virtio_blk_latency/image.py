"""virtio_blk_latency, collect side: the benchmark image, its extents (FIEMAP) and the disk
that holds it (perfbook.probes.blockdev), so that the host's block requests map back to image offsets."""
from __future__ import annotations

import fcntl
import os
import random
import struct
from pathlib import Path

from perfbook.core.errors import MissingPrerequisite
from .spec import MiB

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
    from perfbook.probes.blockdev import device_of, kernel_dev_t
    name, major, minor = device_of(path)  # MissingPrerequisite when not on a block device
    st = os.stat(path)
    real = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}").resolve()
    if (real / "dm").exists() or (real / "md").exists() or real.name.startswith(("dm-", "md", "loop")):
        raise MissingPrerequisite(f"the image sits on a stacked device ({real.name}); "
                                  "its sectors can't be mapped to the disk's requests")
    start = int((real / "start").read_text()) if (real / "partition").exists() else 0
    return {"name": name, "part": real.name, "major": major, "minor": minor,
            "dev_t": kernel_dev_t(major, minor), "part_start": start}
