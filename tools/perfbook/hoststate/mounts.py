"""The mount table, as the kernel has it now."""

from __future__ import annotations

from pathlib import Path


def mounts() -> list[tuple[str, str]]:
    """(mount point, filesystem type) of every mount, from /proc/mounts."""
    out = []
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3:
                out.append((parts[1], parts[2]))
    except OSError:
        pass
    return out
