"""virtio_features: the analysis (committed text in, decoded frames out): VirtioData, the
datasets with their sysfs dumps decoded once; the bit sets of the guests' disks and the two
bit matrices.

Feature strings are exact readouts: nothing here is statistical. The prose quotes the
quoted dataset (D.quoted); "every host" views use each host's shown dataset (D.of_shown).
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import pandas as pd

from perfbook.data.dataset import Data

from .featurebits.decode import decode, table_rows
from .parse import GUEST_CONFIGS, bits_from_dump, blocks_from_dump, devices_from_dump

# ---- decoding the committed dumps -----------------------------------------------------------


def dumps_by_column(sysfs) -> list[dict]:
    """Split the tidy sysfs table into per-(host, run, source, boot) dumps."""
    out = []
    if sysfs is None or sysfs.empty:
        return out
    for (host, run, source, boot), g in sysfs.groupby(
        ["host_id", "run_id", "source", "boot"], sort=True
    ):
        dump = dict(zip(g["path"], g["value"].fillna("").astype(str)))
        out.append(
            {"host_id": host, "run_id": run, "source": source, "boot": int(boot), "dump": dump}
        )
    return out


def decoded_tables(sysfs, configs=None, boots=None):
    """(devices, bits, blocks) DataFrames, labelled with source/config/accel."""
    dev_rows, bit_rows, blk_rows = [], [], []
    cfg_by_serial = {}
    if configs is not None and not configs.empty:
        for r in configs.to_dict("records"):
            cfg_by_serial[(r["host_id"], r["run_id"], int(r["boot"]), str(r["serial"]))] = r[
                "config"
            ]
    accel = {}
    if boots is not None and not boots.empty:
        for r in boots.to_dict("records"):
            accel[(r["host_id"], r["run_id"], int(r["boot"]))] = r["accel"]
    for d in dumps_by_column(sysfs):
        key = (d["host_id"], d["run_id"], d["boot"])
        base = {
            "host_id": d["host_id"],
            "run_id": d["run_id"],
            "source": d["source"],
            "boot": d["boot"],
            "accel": accel.get(key, "" if d["source"] == "guest" else "host"),
        }
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


class VirtioData(Data):
    """The datasets, with the committed sysfs dumps decoded once (devices, bits, blocks) and
    the seed's strings."""

    @cached_property
    def _decoded(self):
        return decoded_tables(self["sysfs"], self["configs"], self["boots"])

    @property
    def devices(self):
        return self._decoded[0]

    @property
    def bits(self):
        return self._decoded[1]

    @property
    def blocks(self):
        return self._decoded[2]

    @cached_property
    def seed(self):
        # every column as text: a guessed type would turn a feature string into a number and
        # drop its leading zeros (bits 0 and 1)
        return self.reference("virtio_features", dtype=str)


def host_bit_diff(bits, shown: dict, source: str = "host"):
    """Per device type, the negotiated bits each host has that the first (sorted) host lacks,
    and the reverse, from each host's shown dataset (`shown`: host_id -> run_id). Feature
    strings are exact readouts, so this is a set difference, not a statistical test. Empty
    with fewer than two hosts."""
    b = bits
    if b is not None and not b.empty:
        b = b[[shown.get(h) == r for h, r in zip(b["host_id"], b["run_id"])]]
        b = b[b["source"] == source]
    if b is None or b.empty or b["host_id"].nunique() < 2:
        return pd.DataFrame(
            columns=["host_id", "baseline", "type", "only on this host", "only on the baseline"]
        )
    hosts_ = sorted(b["host_id"].unique())
    base = hosts_[0]
    per = {h: {t: set(g["name"]) for t, g in b[b["host_id"] == h].groupby("type")} for h in hosts_}
    rows = []
    for h in hosts_[1:]:
        for t in sorted(set(per[h]) | set(per[base])):
            mine, theirs = per[h].get(t), per[base].get(t)
            rows.append(
                {
                    "host_id": h,
                    "baseline": base,
                    "type": t,
                    "only on this host": "(no such device)"
                    if mine is None
                    else " ".join(sorted(mine - (theirs or set()))) or "-",
                    "only on the baseline": "(no such device)"
                    if theirs is None
                    else " ".join(sorted(theirs - (mine or set()))) or "-",
                }
            )
    return pd.DataFrame(rows)


def host_diff(D):
    return host_bit_diff(D.bits, D.shown)


def seed_bits(D):
    """The seed's two strings decoded, one row per bit: 1 where a string has it."""
    rows = []
    for r in D.seed.itertuples():
        for b in decode(r.features, r.device_type):
            rows.append(
                {
                    "string": r.label,
                    "bit": b.bit,
                    "char from left": b.bit + 1,
                    "name today": b.name,
                    "2013 name": b.old_name or b.name,
                    "kind": b.kind,
                }
            )
    return pd.DataFrame(rows)


# ---- the guests' disks and the two bit matrices --------------------------------------------


def quoted(D, df, source: str | None = None):
    """The rows of a decoded frame from the quoted dataset (and of one source)."""
    df = D.of_quoted(df)
    return df[df["source"] == source] if source and len(df) else df


def guest_view(D):
    """(gb, per, order, opts) of the quoted dataset: its guest block disks, the negotiated
    block bits per config, the configs in GUEST_CONFIGS order, and their QEMU options."""
    gb = quoted(D, D.blocks, "guest").copy()
    gbits = quoted(D, D.bits, "guest")
    gbits = gbits[gbits.type == "block"] if len(gbits) else gbits
    order = [c for c in GUEST_CONFIGS if c in set(gb.get("config", ()))]
    per = {c: set(gbits[gbits.config == c]["name"]) for c in order}
    cfgs = D.of_quoted(D["configs"])
    opts = dict(zip(cfgs.config, cfgs.qemu_options)) if len(cfgs) else {}
    return gb, per, order, opts


def block_matrix(D):
    """Negotiated virtio-blk bits (rows: 'bit NAME') x devices (columns: each host's block
    devices from its shown dataset, each guest disk of the quoted one, the seed's strings)."""
    _, per, order, _ = guest_view(D)
    hball = host_block_bits(D)
    cols = []
    for (hid, dev), g in hball.groupby(["host_id", "device"]):
        cols.append(
            (("this host " if hid == D.quoted.host_id else f"host {hid} ") + dev, set(g.name))
        )
    for c in order:
        cols.append(("guest " + c, per[c]))
    for r in D.seed.itertuples():
        cols.append((r.label, set(b.name for b in decode(r.features, r.device_type))))
    allb = {}
    for _, s in cols:
        for n in s:
            allb[n] = None
    bitno = {r["name"]: r["bit"] for r in table_rows() if r["device_type"] in ("(all)", "block")}
    rows_ = sorted(
        allb, key=lambda n: bitno.get(n, int(n.split("_")[-1]) if n.startswith("UNKNOWN_") else 999)
    )
    return pd.DataFrame(
        {lab: [int(n in s) for n in rows_] for lab, s in cols},
        index=[f"{bitno.get(n, '?'):>2} {n}" for n in rows_],
    )


def host_block_bits(D):
    """The block-device bits of every host's shown dataset."""
    b = D.bits
    return D.of_shown(b[(b.source == "host") & (b.type == "block")]) if len(b) else b


def type_matrix(D):
    """Negotiated bits of every device type (rows: 'bit type:NAME') of the quoted dataset's
    host and of its first guest's default disk and other devices (columns)."""
    bits = quoted(D, D.bits)
    sel = bits[
        (bits.source == "host")
        | ((bits.source == "guest") & ((bits.config == "default") | (bits.type != "block")))
    ]
    sel = sel[(sel.source == "host") | (sel.boot == sel[sel.source == "guest"].boot.min())]
    sel = sel.assign(col=np.where(sel.source == "host", "host ", "guest ") + sel.type)
    sel = sel.assign(
        row=sel.bit.map("{:>3}".format)
        + " "
        + sel.type.where(sel.kind == "device", "transport")
        + ":"
        + sel.name
    )
    H = pd.crosstab(sel.row, sel.col).clip(upper=1)
    return H.loc[
        sorted(
            H.index,
            key=lambda s: (
                s.split()[1].split(":")[0] != "transport",
                s.split()[1].split(":")[0],
                int(s.split()[0]),
            ),
        )
    ]
