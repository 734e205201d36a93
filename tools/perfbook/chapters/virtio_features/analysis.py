"""virtio_features: the analysis (committed text in, decoded frames and the prose's findings out).

Feature strings are exact readouts: nothing here is statistical. The prose quotes the
quoted dataset (D.quoted); "every host" views use each host's shown dataset (D.of_shown).
"""
from __future__ import annotations

from perfbook.core.errors import DatasetError
from perfbook.data.machine import kind
from .bits import SOURCES
from .decode import cache_type_from_features, decode, diff, table_rows
from .parse import bits_from_dump, blocks_from_dump, devices_from_dump
from .analysis_guest import (accel_findings, block_matrix, changes_table, guest_findings,  # noqa: F401
                             guest_rules, guest_summary, guest_view, option_findings, quoted, type_matrix)

HOST_COLUMNS = ["device", "type", "driver", "status_flags", "n_chars", "n_set", "names", "unknown_bits"]
RENAME = {"status_flags": "status", "n_chars": "chars", "n_set": "bits set"}
BOOT_COLUMNS = ["boot", "cpus", "n_disks", "accel", "accel_note", "boot_seconds", "total_seconds",
                "guest_kernel", "qemu_version"]
LIMIT_COLUMNS = ["where", "cache_type", "write_cache", "nr_queues", "nr_requests", "max_segments",
                 "max_segment_size", "max_hw_sectors_kb", "logical_block_size", "physical_block_size",
                 "discard_max_hw_bytes", "write_zeroes_max_bytes", "fua"]


# ---- decoding the committed dumps -----------------------------------------------------------

def dumps_by_column(sysfs) -> list[dict]:
    """Split the tidy sysfs table into per-(host, run, source, boot) dumps."""
    out = []
    if sysfs is None or sysfs.empty:
        return out
    for (host, run, source, boot), g in sysfs.groupby(["host_id", "run_id", "source", "boot"], sort=True):
        dump = dict(zip(g["path"], g["value"].fillna("").astype(str)))
        out.append({"host_id": host, "run_id": run, "source": source, "boot": int(boot), "dump": dump})
    return out


def decoded_tables(sysfs, configs=None, boots=None):
    """(devices, bits, blocks) DataFrames, labelled with source/config/accel."""
    import pandas as pd
    dev_rows, bit_rows, blk_rows = [], [], []
    cfg_by_serial = {}
    if configs is not None and not configs.empty:
        for r in configs.to_dict("records"):
            cfg_by_serial[(r["host_id"], r["run_id"], int(r["boot"]), str(r["serial"]))] = r["config"]
    accel = {}
    if boots is not None and not boots.empty:
        for r in boots.to_dict("records"):
            accel[(r["host_id"], r["run_id"], int(r["boot"]))] = r["accel"]
    for d in dumps_by_column(sysfs):
        key = (d["host_id"], d["run_id"], d["boot"])
        base = {"host_id": d["host_id"], "run_id": d["run_id"], "source": d["source"],
                "boot": d["boot"], "accel": accel.get(key, "" if d["source"] == "guest" else "host")}
        blocks = blocks_from_dump(d["dump"])
        serial_of = {b["device"]: str(b["serial"]) for b in blocks}
        for r in devices_from_dump(d["dump"]):
            cfg = cfg_by_serial.get(key + (serial_of.get(r["device"], ""),), "")
            dev_rows.append({**base, "config": cfg, **r})
        for r in bits_from_dump(d["dump"]):
            cfg = cfg_by_serial.get(key + (serial_of.get(r["device"], ""),), "")
            bit_rows.append({**base, "config": cfg, **r})
        for r in blocks:
            cfg = cfg_by_serial.get(key + (str(r["serial"]),), "")
            blk_rows.append({**base, "config": cfg, **r})
    return pd.DataFrame(dev_rows), pd.DataFrame(bit_rows), pd.DataFrame(blk_rows)


def host_bit_diff(bits, shown: dict, source: str = "host"):
    """Per device type, the negotiated bits each host has that the first (sorted) host lacks,
    and the reverse, from each host's shown dataset (`shown`: host_id -> run_id). Feature
    strings are exact readouts, so this is a set difference, not a statistical test. Empty
    with fewer than two hosts."""
    import pandas as pd
    b = bits
    if b is not None and not b.empty:
        b = b[[shown.get(h) == r for h, r in zip(b["host_id"], b["run_id"])]]
        b = b[b["source"] == source]
    if b is None or b.empty or b["host_id"].nunique() < 2:
        return pd.DataFrame(columns=["host_id", "baseline", "type", "only on this host",
                                     "only on the baseline"])
    hosts_ = sorted(b["host_id"].unique())
    base = hosts_[0]
    per = {h: {t: set(g["name"]) for t, g in b[b["host_id"] == h].groupby("type")} for h in hosts_}
    rows = []
    for h in hosts_[1:]:
        for t in sorted(set(per[h]) | set(per[base])):
            mine, theirs = per[h].get(t), per[base].get(t)
            rows.append({"host_id": h, "baseline": base, "type": t,
                         "only on this host": "(no such device)" if mine is None else
                         " ".join(sorted(mine - (theirs or set()))) or "-",
                         "only on the baseline": "(no such device)" if theirs is None else
                         " ".join(sorted(theirs - (mine or set()))) or "-"})
    return pd.DataFrame(rows)


# ---- the tables the chapter shows --------------------------------------------------------

def sources_table():
    """Where the decoder's names come from."""
    import pandas as pd
    return pd.Series(SOURCES, name="source text").rename_axis("source").reset_index()


def bit_table():
    """The decoder's transport and virtio-blk bits."""
    import pandas as pd
    tab = pd.DataFrame(table_rows())
    return tab[tab.device_type.isin(["(all)", "block"])][["device_type", "bit", "name", "macro", "note", "source"]]


def host_devices(D):
    """Every virtio device of the quoted dataset's host, decoded."""
    return quoted(D, D.devices, "host")[HOST_COLUMNS].rename(columns=RENAME)


def every_host_devices(D):
    """The same decoding for each host's shown dataset, one row per device."""
    hd = D.of_shown(D.devices[D.devices.source == "host"])
    return (hd[["host_id", "run_id", "device", "type", "n_chars", "n_set", "names", "unknown_bits"]]
            .rename(columns=RENAME).reset_index(drop=True))


def host_diff(D):
    return host_bit_diff(D.bits, D.shown)


def host_tables(D) -> list:
    """The every-host devices table, and the bit-by-bit difference when there are two hosts."""
    diff_ = host_diff(D)
    return [every_host_devices(D)] + ([diff_] if len(diff_) else [])


def seed_bits(D):
    """The seed's two strings decoded, one row per bit: 1 where a string has it."""
    import pandas as pd
    rows = []
    for r in D.seed.itertuples():
        for b in decode(r.features, r.device_type):
            rows.append({"string": r.label, "bit": b.bit, "char from left": b.bit + 1, "name today": b.name,
                         "2013 name": b.old_name or b.name, "kind": b.kind})
    return pd.DataFrame(rows)


def seed_table(D):
    return seed_bits(D).pivot_table(index=["bit", "char from left", "2013 name", "name today", "kind"],
                                    columns="string", values="kind", aggfunc="size",
                                    fill_value=0).reset_index()


def boots_table(D):
    import pandas as pd
    b = D.of_quoted(D["boots"])
    return b[BOOT_COLUMNS] if len(b) else pd.DataFrame(columns=BOOT_COLUMNS)


def limits_table(D):
    """What the block layer took from each disk of the quoted dataset."""
    import numpy as np
    lim = D.of_quoted(D.blocks).copy()
    lim["where"] = np.where(lim.source == "host", "this host " + lim.device, "guest " + lim.config)
    return lim[LIMIT_COLUMNS]


# ---- the prose's findings -----------------------------------------------------------------

def _chars(devs) -> str:
    return ", ".join(str(x) for x in sorted(set(devs["n_chars"])))


def overview(D) -> dict:
    q = D.quoted
    if q is None or D["sysfs"].empty:
        raise DatasetError("no dataset of this chapter yet: run it once with mode='collect'")
    host_devs, g_devs = quoted(D, D.devices, "host"), quoted(D, D.devices, "guest")
    return {"n_datasets": len(D.manifests), "n_hosts": len(D.hosts),
            "host_kernel": q["host"]["kernel_release"], "host_virt": q["host"]["virtualization"],
            "host_kind": kind(q["host"]),
            "run_date": q["started"][:10], "n_host_devices": len(host_devs),
            "host_types": ", ".join(sorted(host_devs["type"])), "host_chars": _chars(host_devs),
            "guest_chars": _chars(g_devs) or "none"}


def table_findings() -> dict:
    import pandas as pd
    tab = pd.DataFrame(table_rows())
    return {"n_table_bits": len(tab), "n_table_types": int(tab["device_type"].nunique() - 1)}


def host_findings(D) -> dict:
    host_devs = quoted(D, D.devices, "host")
    unk = host_devs[host_devs.unknown_bits.astype(str).str.len() > 0]
    diff_ = host_diff(D)
    if len(diff_):
        nd = int(((diff_["only on this host"] != "-") | (diff_["only on the baseline"] != "-")).sum())
        n_hosts = every_host_devices(D).host_id.nunique()
        sentence = (f"With {n_hosts} hosts, {nd} of {len(diff_)} device types differ from "
                    f"{diff_.baseline.iloc[0]}; the environment diff below lists the other facts in "
                    "which the hosts' manifests differ.")
    else:
        sentence = ("Only one host has data for this chapter, so there is nothing to compare yet; "
                    "another host's dataset would add its rows here, a bit-by-bit difference and an "
                    "environment diff.")
    where = "; ".join(f"{r.type} ({r.device}): bit {r.unknown_bits}" for r in unk.itertuples()) or "none"
    v1 = host_devs[host_devs.names.astype(str).str.split().apply(lambda n: "VERSION_1" in n)]
    legacy = sorted(set(host_devs["type"]) - set(v1["type"]))
    return {"n_unknown_devices": len(unk), "unknown_where": where,
            "host_v1_sentence": (
                f"All {len(host_devs)} devices ({', '.join(sorted(host_devs['type']))}) are virtio 1.0 devices "
                "(VERSION_1, bit 32)" if not legacy else
                f"{len(v1)} of the {len(host_devs)} devices are virtio 1.0 devices (VERSION_1, bit 32); "
                f"the others ({', '.join(legacy)}) are legacy devices"),
            "unknown_sentence": (
                f"Bits the decoder has no name for: {where}. The string shows that the driver and the device "
                "agreed on such a bit. It is in none of the decoder's sources listed above, so the decoder "
                "reports it and does not guess a name" if len(unk) else
                "Every negotiated bit of these devices has a name in the decoder's tables"),
            "host_diff_sentence": sentence}


def seed_findings(D) -> dict:
    ref, sb = D.seed, seed_bits(D)
    d = diff(ref.features.iloc[0], ref.features.iloc[1], "block")
    renamed = sb[sb["2013 name"] != sb["name today"]].drop_duplicates("bit")
    return {"seed_removed": " and ".join(d["removed"]),
            "seed_local_cache": cache_type_from_features(ref.features.iloc[0]) or "read from the config byte",
            "seed_vps_cache": cache_type_from_features(ref.features.iloc[1]) or "read from the config byte",
            "seed_len": ", ".join(sorted({str(len(f)) for f in ref.features})),
            "seed_renamed": ", ".join(f"bit {r['bit']} {r['2013 name']} → {r['name today']}"
                                      for _, r in renamed.iterrows()) or "none"}


def boot_findings(D) -> dict:
    b = D.of_quoted(D["boots"])
    if not len(b):
        return {"accel_used": "none (no guest ran)",
                "accel_note": "; ".join(f"{k}: {v}" for k, v in D.quoted["skipped"].items()),
                "boot_s": "-", "guest_kernel": "-", "qemu_version": "-", "n_configs": 0, "n_boots": 0}
    return {"accel_used": ", ".join(sorted(set(b.accel))).upper(),
            "accel_note": "; ".join(sorted(set(b.accel_note))),
            "boot_s": f"{b.boot_seconds.min():.1f}-{b.boot_seconds.max():.1f}",
            "guest_kernel": b.guest_kernel.iloc[0], "qemu_version": str(b.qemu_version.iloc[0]),
            "n_configs": len(D.of_quoted(D["configs"])), "n_boots": len(b)}


def findings(D) -> dict:
    """Every value the prose quotes, formatted as it shows."""
    return {**overview(D), **table_findings(), **host_findings(D), **seed_findings(D),
            **boot_findings(D), **guest_findings(D), **accel_findings(D), **option_findings(D)}


def run_columns(m) -> dict:
    """What the runs table adds for this chapter: guest boots and what was not measured."""
    return {"guest boots": m["tables"].get("boots", 0),
            "not measured": "; ".join(f"{k}: {v}" for k, v in m["skipped"].items()) or "-"}
