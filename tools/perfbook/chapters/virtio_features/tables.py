"""virtio_features: the tables the page shows (D -> DataFrame), and the runs table's columns."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .analysis import guest_view, host_diff, quoted, seed_bits
from .featurebits.bits import SOURCES
from .featurebits.decode import table_rows

HOST_COLUMNS = [
    "device",
    "type",
    "driver",
    "status_flags",
    "n_chars",
    "n_set",
    "names",
    "unknown_bits",
]
RENAME = {"status_flags": "status", "n_chars": "chars", "n_set": "bits set"}
BOOT_COLUMNS = [
    "boot",
    "cpus",
    "n_disks",
    "accel",
    "accel_note",
    "boot_seconds",
    "total_seconds",
    "guest_kernel",
    "qemu_version",
]
LIMIT_COLUMNS = [
    "where",
    "cache_type",
    "write_cache",
    "nr_queues",
    "nr_requests",
    "max_segments",
    "max_segment_size",
    "max_hw_sectors_kb",
    "logical_block_size",
    "physical_block_size",
    "discard_max_hw_bytes",
    "write_zeroes_max_bytes",
    "fua",
]
# the block bits the guest summary shows, one column each
KEY_BITS = [
    "FLUSH",
    "CONFIG_WCE",
    "MQ",
    "SCSI",
    "DISCARD",
    "WRITE_ZEROES",
    "INDIRECT_DESC",
    "EVENT_IDX",
    "VERSION_1",
    "RING_PACKED",
    "RING_RESET",
]


def sources_table():
    """Where the decoder's names come from."""
    return pd.Series(SOURCES, name="source text").rename_axis("source").reset_index()


def bit_table():
    """The decoder's transport and virtio-blk bits."""
    tab = pd.DataFrame(table_rows())
    return tab[tab.device_type.isin(["(all)", "block"])][
        ["device_type", "bit", "name", "macro", "note", "source"]
    ]


def host_devices(D):
    """Every virtio device of the quoted dataset's host, decoded."""
    return quoted(D, D.devices, "host")[HOST_COLUMNS].rename(columns=RENAME)


def every_host_devices(D):
    """The same decoding for each host's shown dataset, one row per device."""
    hd = D.of_shown(D.devices[D.devices.source == "host"])
    return (
        hd[["host_id", "run_id", "device", "type", "n_chars", "n_set", "names", "unknown_bits"]]
        .rename(columns=RENAME)
        .reset_index(drop=True)
    )


def host_tables(D) -> list:
    """The every-host devices table, and the bit-by-bit difference when there are two hosts."""
    diff_ = host_diff(D)
    return [every_host_devices(D)] + ([diff_] if len(diff_) else [])


def seed_table(D):
    return (
        seed_bits(D)
        .pivot_table(
            index=["bit", "char from left", "2013 name", "name today", "kind"],
            columns="string",
            values="kind",
            aggfunc="size",
            fill_value=0,
        )
        .reset_index()
    )


def boots_table(D):
    b = D.of_quoted(D["boots"])
    return b[BOOT_COLUMNS] if len(b) else pd.DataFrame(columns=BOOT_COLUMNS)


def limits_table(D):
    """What the block layer took from each disk of the quoted dataset."""
    lim = D.of_quoted(D.blocks).copy()
    lim["where"] = np.where(lim.source == "host", "this host " + lim.device, "guest " + lim.config)
    return lim[LIMIT_COLUMNS]


def guest_summary(D):
    """Per guest disk config: the key bits, cache_type, what the FLUSH/CONFIG_WCE rule
    predicts, write_cache, hardware queues, and whether cache_type could be written."""
    gb, per, order, opts = guest_view(D)
    if not order:
        return pd.DataFrame()
    by = gb.set_index("config")
    rule = gb.fillna({"cache_type_expected": "(config byte)"}).set_index("config")
    return pd.DataFrame(
        [
            {
                "config": c,
                "QEMU options": opts.get(c, ""),
                **{k: int(k in per[c]) for k in KEY_BITS},
                "cache_type": by.loc[c, "cache_type"],
                "rule says": rule.loc[c, "cache_type_expected"],
                "write_cache": by.loc[c, "write_cache"],
                "hw queues": by.loc[c, "nr_queues"],
                "cache_type writable": by.loc[c, "cache_type_write"],
            }
            for c in order
        ]
    )


def changes_table(D):
    """Bits each config adds to or removes from the default disk of the same guest (the
    2-vCPU configs are compared with smp2:default)."""
    gb, per, order, _ = guest_view(D)
    if not order:
        return pd.DataFrame()
    by = gb.set_index("config")

    def changes(c):
        base = "smp2:default" if c.startswith("smp2:") else "default"
        a, b = per.get(base, set()), per[c]
        return {
            "config": c,
            "compared with": base,
            "added": " ".join(sorted(b - a)) or "-",
            "removed": " ".join(sorted(a - b)) or "-",
            "cache_type": by.loc[c, "cache_type"],
        }

    return pd.DataFrame([changes(c) for c in order if c not in ("default", "smp2:default")])


def run_columns(m, data) -> dict:
    """What the runs table adds for this chapter: guest boots and what was not measured."""
    return {
        "guest boots": m["tables"].get("boots", 0),
        "not measured": "; ".join(f"{k}: {v}" for k, v in m["skipped"].items()) or "-",
    }
