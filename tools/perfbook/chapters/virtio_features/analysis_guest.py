"""virtio_features: the guests' disks (what each QEMU option changes) and the two bit matrices."""
from __future__ import annotations

from .decode import decode, table_rows
from .spec import GUEST_CONFIGS

# the block bits the guest summary shows, one column each
KEY_BITS = ["FLUSH", "CONFIG_WCE", "MQ", "SCSI", "DISCARD", "WRITE_ZEROES", "INDIRECT_DESC", "EVENT_IDX",
            "VERSION_1", "RING_PACKED", "RING_RESET"]


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


def guest_summary(D):
    """Per guest disk config: the key bits, cache_type, what the FLUSH/CONFIG_WCE rule
    predicts, write_cache, hardware queues, and whether cache_type could be written."""
    import pandas as pd
    gb, per, order, opts = guest_view(D)
    if not order:
        return pd.DataFrame()
    by = gb.set_index("config")
    rule = gb.fillna({"cache_type_expected": "(config byte)"}).set_index("config")
    return pd.DataFrame([{"config": c, "QEMU options": opts.get(c, ""),
                          **{k: int(k in per[c]) for k in KEY_BITS},
                          "cache_type": by.loc[c, "cache_type"],
                          "rule says": rule.loc[c, "cache_type_expected"],
                          "write_cache": by.loc[c, "write_cache"],
                          "hw queues": by.loc[c, "nr_queues"],
                          "cache_type writable": by.loc[c, "cache_type_write"]}
                         for c in order])


def changes_table(D):
    """Bits each config adds to or removes from the default disk of the same guest (the
    2-vCPU configs are compared with smp2:default)."""
    import pandas as pd
    gb, per, order, _ = guest_view(D)
    if not order:
        return pd.DataFrame()
    by = gb.set_index("config")

    def changes(c):
        base = "smp2:default" if c.startswith("smp2:") else "default"
        a, b = per.get(base, set()), per[c]
        return {"config": c, "compared with": base, "added": " ".join(sorted(b - a)) or "-",
                "removed": " ".join(sorted(a - b)) or "-", "cache_type": by.loc[c, "cache_type"]}
    return pd.DataFrame([changes(c) for c in order if c not in ("default", "smp2:default")])


def block_matrix(D):
    """Negotiated virtio-blk bits (rows: 'bit NAME') x devices (columns: each host's block
    devices from its shown dataset, each guest disk of the quoted one, the seed's strings)."""
    import pandas as pd
    _, per, order, _ = guest_view(D)
    hball = host_block_bits(D)
    cols = []
    for (hid, dev), g in hball.groupby(["host_id", "device"]):
        cols.append((("this host " if hid == D.quoted.host_id else f"host {hid} ") + dev, set(g.name)))
    for c in order:
        cols.append(("guest " + c, per[c]))
    for r in D.seed.itertuples():
        cols.append((r.label, set(b.name for b in decode(r.features, r.device_type))))
    allb = {}
    for _, s in cols:
        for n in s:
            allb[n] = None
    bitno = {r["name"]: r["bit"] for r in table_rows() if r["device_type"] in ("(all)", "block")}
    rows_ = sorted(allb, key=lambda n: bitno.get(n, int(n.split("_")[-1]) if n.startswith("UNKNOWN_") else 999))
    return pd.DataFrame({lab: [int(n in s) for n in rows_] for lab, s in cols},
                        index=[f"{bitno.get(n, '?'):>2} {n}" for n in rows_])


def host_block_bits(D):
    """The block-device bits of every host's shown dataset."""
    b = D.bits
    return D.of_shown(b[(b.source == "host") & (b.type == "block")]) if len(b) else b


def type_matrix(D):
    """Negotiated bits of every device type (rows: 'bit type:NAME') of the quoted dataset's
    host and of its first guest's default disk and other devices (columns)."""
    import numpy as np
    import pandas as pd
    bits = quoted(D, D.bits)
    sel = bits[(bits.source == "host") |
               ((bits.source == "guest") & ((bits.config == "default") | (bits.type != "block")))]
    sel = sel[(sel.source == "host") | (sel.boot == sel[sel.source == "guest"].boot.min())]
    sel = sel.assign(col=np.where(sel.source == "host", "host ", "guest ") + sel.type)
    sel = sel.assign(row=sel.bit.map("{:>3}".format) + " " + sel.type.where(sel.kind == "device", "transport")
                     + ":" + sel.name)
    H = pd.crosstab(sel.row, sel.col).clip(upper=1)
    return H.loc[sorted(H.index, key=lambda s: (s.split()[1].split(":")[0] != "transport",
                                                 s.split()[1].split(":")[0], int(s.split()[0])))]


def guest_findings(D) -> dict:
    """What the prose says about the guests' disks and the two matrices."""
    out = guest_rules(D)
    changed = changes_table(D)
    same = changed[(changed["added"] == "-") & (changed["removed"] == "-")] if not changed.empty else changed
    M, H = block_matrix(D), type_matrix(D)
    hb = quoted(D, D.bits, "host")
    hb = hb[hb.type == "block"] if len(hb) else hb
    miss = [n for n in ("GEOMETRY", "CONFIG_WCE") if n not in set(hb.get("name", ()))]
    return {**out, "n_no_change": len(same),
            "no_change_list": ", ".join(f"{r.config} ({r.cache_type})" for r in same.itertuples()) or "none",
            "hm_rows": len(M), "hm_cols": M.shape[1], "all_rows": len(H),
            "host_vs_qemu": (f"This host's disk lacks {' and '.join(miss)}, which QEMU's virtio-blk offers by "
                             "default, so this machine's virtual disk is not QEMU's virtio-blk."
                             if miss and not hb.empty else
                             "This host's disk has the bits QEMU's virtio-blk always offers.")}


def guest_rules(D) -> dict:
    """The guests' disks: what each configuration's cache type and negotiated bits say (the
    key findings read these alone, without the matrices)."""
    gb, per, order, _ = guest_view(D)
    out = {"n_rule_checked": 0, "n_rule_ok": 0, "n_writable": 0, "n_cwce": 0, "wt_cache": "-",
           "wt_flush": "no", "wtn_cache": "-", "wtn_flush": "no", "scsi_taken": "no", "mq_q": "-"}
    if order:
        cons = gb.cache_type_consistent.dropna()
        wt = gb.set_index("config")
        out.update({
            "n_rule_checked": len(cons), "n_rule_ok": int(cons.astype(bool).sum()),
            "n_writable": int((gb.cache_type_write == "ok").sum()),
            "n_cwce": int(gb.config_wce.astype(bool).sum()),
            "wt_cache": wt.loc["cache=writethrough", "cache_type"] if "cache=writethrough" in wt.index else "-",
            "wt_flush": "yes" if "FLUSH" in per.get("cache=writethrough", set()) else "no",
            "wtn_cache": (wt.loc["writethrough+config-wce=off", "cache_type"]
                          if "writethrough+config-wce=off" in wt.index else "-"),
            "wtn_flush": "yes" if "FLUSH" in per.get("writethrough+config-wce=off", set()) else "no",
            "scsi_taken": "yes" if "SCSI" in per.get("legacy+scsi=on", set()) else "no",
            "mq_q": ", ".join(f"{c}: {int(wt.loc[c, 'nr_queues'])}" for c in order
                              if c.startswith("smp2:")) or "-"})
    return out


def accel_findings(D) -> dict:
    """Whether the data can say that the accelerator leaves the negotiated bits alone: every
    guest disk configuration measured under both KVM and TCG (in any dataset), compared on its
    negotiated virtio-blk bits."""
    b = D.bits
    g = b[(b.source == "guest") & (b.type == "block")] if len(b) else b
    accels = sorted(set(g.accel)) if len(g) else []
    if len(accels) < 2:
        return {"accel_compare": (f"every guest in the data ran under {accels[0].upper()}, so whether "
                                  f"{'TCG' if accels[0] == 'kvm' else 'KVM'} negotiates the same bits was "
                                  "not measured"
                                  if accels else "no guest ran, so nothing was compared")}
    sets = g.groupby(["config", "accel", "host_id", "run_id", "boot", "device"])["name"].agg(frozenset)
    per = sets.reset_index().groupby(["config", "accel"])["name"].agg(set)
    both = [c for c in set(per.index.get_level_values(0))
            if all((c, a) in per.index for a in accels)]
    same = [c for c in both if len({s for a in accels for s in per[(c, a)]}) == 1]
    return {"accel_compare": (f"{len(same)} of the {len(both)} disk configurations measured under both "
                              "accelerators negotiated the same virtio-blk bits under each"
                              if both else "no disk configuration was measured under both accelerators, "
                              "so whether they negotiate the same bits was not measured")}


def option_findings(D) -> dict:
    """What single QEMU options changed, from the changes table and the block matrix."""
    from .decode import table_rows
    ch = changes_table(D)
    transport = {r["name"] for r in table_rows() if r["kind"] == "transport"}
    out = {"wco_cache": "-", "legacy_removed": "-", "transport_only": "none", "modern_v1": "-"}
    if ch.empty:
        return out
    by = ch.set_index("config")
    if "write-cache=off" in by.index:
        out["wco_cache"] = by.loc["write-cache=off", "cache_type"]
    if "legacy" in by.index:
        out["legacy_removed"] = " and ".join(by.loc["legacy", "removed"].split()) or "nothing"

    def names(r):
        return [n for col in ("added", "removed") for n in r[col].split() if n != "-"]
    only = [f"{r['config']} ({' '.join(('+' if n in r['added'].split() else '-') + n for n in names(r))})"
            for _, r in ch.iterrows() if names(r) and set(names(r)) <= transport]
    out["transport_only"] = ", ".join(only) or "none"
    M = block_matrix(D)
    v1 = [i for i in M.index if i.split()[-1] == "VERSION_1"]
    modern = [c for c in M.columns if not c.startswith("seed:") and "legacy" not in c]
    has = sum(int(M.loc[v1[0], c]) for c in modern) if v1 else 0
    out["modern_v1"] = (f"All {len(modern)} columns other than the seed's and the legacy disks have "
                        "VERSION_1" if has == len(modern) else
                        f"{has} of the {len(modern)} columns other than the seed's and the legacy disks "
                        "have VERSION_1")
    return out
