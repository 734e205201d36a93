"""virtio_features: text -> rows (pure; tested on fixtures).

A sysfs dump is a flat {path relative to /sys/bus/virtio/devices: value} dict, read on the
host (collect.dump_sysfs) or printed by a guest as 'path<TAB>value' lines (parse_dump).
The functions below decode one dump into device, bit and block-disk records.
"""
from __future__ import annotations

import re

from perfbook.core.errors import ParameterError
from .decode import cache_type_from_features, decode, decode_status, device_type, parse_bits
from .spec import QUEUE_ATTRS


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
        rows.append({
            "device": n, "device_id": int(dev_id, 0) if dev_id else None, "type": dtype,
            "vendor": dump.get(f"{n}/vendor"), "driver": dump.get(f"{n}/driver", ""),
            "status": dump.get(f"{n}/status"),
            "status_flags": "|".join(decode_status(dump[f"{n}/status"])) if dump.get(f"{n}/status") else "",
            "features": feats, "n_chars": len(feats), "n_set": len(bits),
            "names": " ".join(b.name for b in bits),
            "unknown_bits": " ".join(str(b.bit) for b in bits if not b.known),
            "decode_error": err,
        })
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
    disks = sorted({tuple(k.split("/")[:3]) for k in dump if "/block/" in k}, key=lambda t: natural_key(t[0]))
    for dev, _, disk in disks:
        pre = f"{dev}/block/{disk}"
        feats = dump.get(f"{dev}/features", "")
        bits = set(parse_bits(feats)) if feats else set()
        row = {"device": dev, "disk": disk, "serial": dump.get(f"{pre}/serial", ""),
               "cache_type": dump.get(f"{pre}/cache_type"),
               "flush": 9 in bits, "config_wce": 11 in bits, "mq_feature": 12 in bits,
               "nr_queues": int(dump[f"{pre}/mq"]) if dump.get(f"{pre}/mq") else None,
               "size_sectors": _int(dump.get(f"{pre}/size")),
               "ro": _int(dump.get(f"{pre}/ro"))}
        for a in QUEUE_ATTRS:
            v = dump.get(f"{pre}/queue/{a}")
            row[a] = _int(v) if a not in ("write_cache", "scheduler") else v
        exp = cache_type_from_features(feats) if feats else None
        row["cache_type_rule"] = ("config wce byte (CONFIG_WCE)" if 11 in bits
                                  else "FLUSH bit (no CONFIG_WCE)")
        row["cache_type_expected"] = exp
        row["cache_type_consistent"] = (None if exp is None or row["cache_type"] is None
                                        else exp == row["cache_type"])
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
