"""virtio_features: what the chapter reads from sysfs and which guest disks it boots."""
from __future__ import annotations

from pathlib import Path

SYSFS_VIRTIO = Path("/sys/bus/virtio/devices")

# block attributes we record (relative to /sys/block/<disk>/)
BLOCK_ATTRS = ("cache_type", "serial", "size", "ro")
QUEUE_ATTRS = ("write_cache", "fua", "nr_requests", "max_segments", "max_segment_size",
               "max_hw_sectors_kb", "max_sectors_kb", "logical_block_size",
               "physical_block_size", "minimum_io_size", "optimal_io_size",
               "discard_max_hw_bytes", "write_zeroes_max_bytes", "rotational", "scheduler")
DEVICE_ATTRS = ("device", "vendor", "status", "features")

# Guest disk configurations: name -> DiskSpec keyword arguments. Every disk is
# a virtio-blk-pci device of QEMU; what changes is what QEMU offers.
GUEST_CONFIGS: dict[str, dict] = {
    "default": {},
    "cache=none": {"cache": "none"},
    "cache=writethrough": {"cache": "writethrough"},
    "cache=directsync": {"cache": "directsync"},
    "cache=unsafe": {"cache": "unsafe"},
    "write-cache=off": {"write_cache": False},
    "config-wce=off": {"config_wce": False},
    "writethrough+config-wce=off": {"cache": "writethrough", "config_wce": False},
    "write-cache=off+config-wce=off": {"write_cache": False, "config_wce": False},
    "legacy": {"disable_modern": True},
    "legacy+scsi=on": {"disable_modern": True, "scsi": True},
    "packed=on": {"packed": True},
    "event_idx=off": {"event_idx": False},
    "indirect_desc=off": {"indirect_desc": False},
    "discard+write-zeroes=off": {"discard": False, "write_zeroes": False},
    # these go into a 2-vCPU guest: num-queues defaults to the vCPU count
    "smp2:default": {},
    "smp2:num-queues=1": {"num_queues": 1},
    "smp2:num-queues=2": {"num_queues": 2},
}
# the configs table has one opt_<key> column per DiskSpec keyword a config run used
OPTION_KEYS = tuple(dict.fromkeys(k for kw in GUEST_CONFIGS.values() for k in kw))


def config_list(configs: str) -> list[str]:
    """The guest configurations a `configs` parameter names ("all" or a comma-separated
    list), in the order given; unknown names are left for the caller to refuse."""
    if configs == "all":
        return list(GUEST_CONFIGS)
    return list(dict.fromkeys(c.strip() for c in str(configs).split(",") if c.strip()))


def boot_plan(configs: list[str], separate_boots: bool) -> list[tuple[int, list[str]]]:
    """[(cpus, [config names])] in boot order."""
    one = [c for c in configs if not c.startswith("smp2:")]
    two = [c for c in configs if c.startswith("smp2:")]
    if separate_boots:
        return [(1, [c]) for c in one] + [(2, [c]) for c in two]
    return ([(1, one)] if one else []) + ([(2, two)] if two else [])
