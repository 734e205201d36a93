"""virtio_features: what the chapter reads from sysfs and which guest disks it boots (the
vocabulary collect and analysis share), and text -> rows (pure; tested on fixtures).

A sysfs dump is a flat {path relative to /sys/bus/virtio/devices: value} dict, read on the
host (collect.dump_sysfs) or printed by a guest as 'path<TAB>value' lines (parse_dump).
The functions below decode one dump into device, bit and block-disk records.
"""

from __future__ import annotations

import re
from pathlib import Path

from perfbook.core.errors import ParameterError

from .featurebits.decode import (
    cache_type_from_features,
    decode,
    decode_status,
    device_type,
    parse_bits,
)

SYSFS_VIRTIO = Path("/sys/bus/virtio/devices")

# block attributes we record (relative to /sys/block/<disk>/)
BLOCK_ATTRS = ("cache_type", "serial", "size", "ro")
QUEUE_ATTRS = (
    "write_cache",
    "fua",
    "nr_requests",
    "max_segments",
    "max_segment_size",
    "max_hw_sectors_kb",
    "max_sectors_kb",
    "logical_block_size",
    "physical_block_size",
    "minimum_io_size",
    "optimal_io_size",
    "discard_max_hw_bytes",
    "write_zeroes_max_bytes",
    "rotational",
    "scheduler",
)
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


def parse_dump(text: str) -> dict[str, str]:
    """'path<TAB>value' lines back into a dict (the guest side of dump_sysfs)."""
    out = {}
    for line in text.splitlines():
        if "\t" not in line:
            continue
        k, v = line.split("\t", 1)
        out[k.strip()] = v.strip()
    return out


def natural_key(s: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def devices_from_dump(dump: dict[str, str]) -> list[dict]:
    """One record per virtio device of a dump, decoded."""
    names_ = sorted({k.split("/", 1)[0] for k in dump}, key=natural_key)
    rows = []
    for n in names_:
        feats = dump.get(f"{n}/features", "")
        dev_id = dump.get(f"{n}/device")
        dtype = device_type(dev_id) if dev_id else "unknown"
        try:
            bits = decode(feats, dtype) if feats else []
            err = ""
        except ParameterError as e:
            bits, err = [], str(e)
        rows.append(
            {
                "device": n,
                "device_id": int(dev_id, 0) if dev_id else None,
                "type": dtype,
                "vendor": dump.get(f"{n}/vendor"),
                "driver": dump.get(f"{n}/driver", ""),
                "status": dump.get(f"{n}/status"),
                "status_flags": "|".join(decode_status(dump[f"{n}/status"]))
                if dump.get(f"{n}/status")
                else "",
                "features": feats,
                "n_chars": len(feats),
                "n_set": len(bits),
                "names": " ".join(b.name for b in bits),
                "unknown_bits": " ".join(str(b.bit) for b in bits if not b.known),
                "decode_error": err,
            }
        )
    return rows


def bits_from_dump(dump: dict[str, str]) -> list[dict]:
    """Tidy rows: one per (device, set bit)."""
    rows = []
    for d in devices_from_dump(dump):
        if d["decode_error"] or not d["features"]:
            continue
        for b in decode(d["features"], d["type"]):
            rows.append({"device": d["device"], "type": d["type"], **b.as_dict()})
    return rows


def blocks_from_dump(dump: dict[str, str]) -> list[dict]:
    """One record per virtio block disk: cache_type, write_cache, queues, limits."""
    rows = []
    disks = sorted(
        {tuple(k.split("/")[:3]) for k in dump if "/block/" in k}, key=lambda t: natural_key(t[0])
    )
    for dev, _, disk in disks:
        pre = f"{dev}/block/{disk}"
        feats = dump.get(f"{dev}/features", "")
        bits = set(parse_bits(feats)) if feats else set()
        row = {
            "device": dev,
            "disk": disk,
            "serial": dump.get(f"{pre}/serial", ""),
            "cache_type": dump.get(f"{pre}/cache_type"),
            "flush": 9 in bits,
            "config_wce": 11 in bits,
            "mq_feature": 12 in bits,
            "nr_queues": int(dump[f"{pre}/mq"]) if dump.get(f"{pre}/mq") else None,
            "size_sectors": _int(dump.get(f"{pre}/size")),
            "ro": _int(dump.get(f"{pre}/ro")),
        }
        for a in QUEUE_ATTRS:
            v = dump.get(f"{pre}/queue/{a}")
            row[a] = _int(v) if a not in ("write_cache", "scheduler") else v
        exp = cache_type_from_features(feats) if feats else None
        row["cache_type_rule"] = (
            "config wce byte (CONFIG_WCE)" if 11 in bits else "FLUSH bit (no CONFIG_WCE)"
        )
        row["cache_type_expected"] = exp
        row["cache_type_consistent"] = (
            None if exp is None or row["cache_type"] is None else exp == row["cache_type"]
        )
        tw = dump.get(f"{pre}/cache_type_write")
        if tw:
            r, _, after = tw.partition("\t")
            row["cache_type_write"], row["cache_type_after_write"] = r, after
        rows.append(row)
    return rows


def _int(v):
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        return v
