"""virtio_features: every value the prose quotes (values(D)), formatted as it shows, and the
platform banner's note (platform_notes(D))."""

from __future__ import annotations

import pandas as pd

from perfbook.analysis.findings import per_host_note, sections
from perfbook.core.errors import DatasetError
from perfbook.data.machine import kind

from .analysis import block_matrix, guest_view, host_diff, quoted, seed_bits, type_matrix
from .featurebits.decode import cache_type_from_features, diff, table_rows
from .tables import changes_table, every_host_devices


def _chars(devs) -> str:
    return ", ".join(str(x) for x in sorted(set(devs["n_chars"])))


def overview(D) -> dict:
    q = D.quoted
    if q is None or D["sysfs"].empty:
        raise DatasetError("no dataset of this chapter yet: run it once with mode='collect'")
    host_devs, g_devs = quoted(D, D.devices, "host"), quoted(D, D.devices, "guest")
    return {
        "n_datasets": len(D.manifests),
        "n_hosts": len(D.hosts),
        "host_kernel": q["host"]["kernel_release"],
        "host_virt": q["host"]["virtualization"],
        "host_kind": kind(q["host"]),
        "run_date": q["started"][:10],
        "n_host_devices": len(host_devs),
        "host_types": ", ".join(sorted(host_devs["type"])),
        "host_chars": _chars(host_devs),
        "guest_chars": _chars(g_devs) or "none",
    }


def table_findings() -> dict:
    tab = pd.DataFrame(table_rows())
    return {"n_table_bits": len(tab), "n_table_types": int(tab["device_type"].nunique() - 1)}


def host_findings(D) -> dict:
    host_devs = quoted(D, D.devices, "host")
    unk = host_devs[host_devs.unknown_bits.astype(str).str.len() > 0]
    diff_ = host_diff(D)
    if len(diff_):
        nd = int(
            ((diff_["only on this host"] != "-") | (diff_["only on the baseline"] != "-")).sum()
        )
        n_hosts = every_host_devices(D).host_id.nunique()
        sentence = (
            f"With {n_hosts} hosts, {nd} of {len(diff_)} device types differ from "
            f"{diff_.baseline.iloc[0]}; the environment diff below lists the other facts in "
            "which the hosts' manifests differ."
        )
    else:
        sentence = (
            "Only one host has data for this chapter, so there is nothing to compare yet; "
            "another host's dataset would add its rows here, a bit-by-bit difference and an "
            "environment diff."
        )
    where = (
        "; ".join(f"{r.type} ({r.device}): bit {r.unknown_bits}" for r in unk.itertuples())
        or "none"
    )
    v1 = host_devs[host_devs.names.astype(str).str.split().apply(lambda n: "VERSION_1" in n)]
    legacy = sorted(set(host_devs["type"]) - set(v1["type"]))
    return {
        "n_unknown_devices": len(unk),
        "unknown_where": where,
        "host_v1_sentence": (
            f"All {len(host_devs)} devices ({', '.join(sorted(host_devs['type']))}) are virtio 1.0 devices "
            "(VERSION_1, bit 32)"
            if not legacy
            else f"{len(v1)} of the {len(host_devs)} devices are virtio 1.0 devices (VERSION_1, bit 32); "
            f"the others ({', '.join(legacy)}) are legacy devices"
        ),
        "unknown_sentence": (
            f"Bits the decoder has no name for: {where}. The string shows that the driver and the device "
            "agreed on such a bit. It is in none of the decoder's sources listed above, so the decoder "
            "reports it and does not guess a name"
            if len(unk)
            else "Every negotiated bit of these devices has a name in the decoder's tables"
        ),
        "host_diff_sentence": sentence,
    }


def seed_findings(D) -> dict:
    ref, sb = D.seed, seed_bits(D)
    d = diff(ref.features.iloc[0], ref.features.iloc[1], "block")
    renamed = sb[sb["2013 name"] != sb["name today"]].drop_duplicates("bit")
    return {
        "seed_removed": " and ".join(d["removed"]),
        "seed_local_cache": cache_type_from_features(ref.features.iloc[0])
        or "read from the config byte",
        "seed_vps_cache": cache_type_from_features(ref.features.iloc[1])
        or "read from the config byte",
        "seed_len": ", ".join(sorted({str(len(f)) for f in ref.features})),
        "seed_renamed": ", ".join(
            f"bit {r['bit']} {r['2013 name']} → {r['name today']}" for _, r in renamed.iterrows()
        )
        or "none",
    }


def boot_findings(D) -> dict:
    b = D.of_quoted(D["boots"])
    if not len(b):
        return {
            "accel_used": "none (no guest ran)",
            "accel_note": "; ".join(f"{k}: {v}" for k, v in D.quoted["skipped"].items()),
            "boot_s": "-",
            "guest_kernel": "-",
            "qemu_version": "-",
            "n_configs": 0,
            "n_boots": 0,
        }
    return {
        "accel_used": ", ".join(sorted(set(b.accel))).upper(),
        "accel_note": "; ".join(sorted(set(b.accel_note))),
        "boot_s": f"{b.boot_seconds.min():.1f}-{b.boot_seconds.max():.1f}",
        "guest_kernel": b.guest_kernel.iloc[0],
        "qemu_version": str(b.qemu_version.iloc[0]),
        "n_configs": len(D.of_quoted(D["configs"])),
        "n_boots": len(b),
    }


def guest_findings(D) -> dict:
    """What the prose says about the guests' disks and the two matrices."""
    out = guest_rules(D)
    changed = changes_table(D)
    same = (
        changed[(changed["added"] == "-") & (changed["removed"] == "-")]
        if not changed.empty
        else changed
    )
    M, H = block_matrix(D), type_matrix(D)
    hb = quoted(D, D.bits, "host")
    hb = hb[hb.type == "block"] if len(hb) else hb
    miss = [n for n in ("GEOMETRY", "CONFIG_WCE") if n not in set(hb.get("name", ()))]
    return {
        **out,
        "n_no_change": len(same),
        "no_change_list": ", ".join(f"{r.config} ({r.cache_type})" for r in same.itertuples())
        or "none",
        "hm_rows": len(M),
        "hm_cols": M.shape[1],
        "all_rows": len(H),
        "host_vs_qemu": (
            f"This host's disk lacks {' and '.join(miss)}, which QEMU's virtio-blk offers by "
            "default, so this machine's virtual disk is not QEMU's virtio-blk."
            if miss and not hb.empty
            else "This host's disk has the bits QEMU's virtio-blk always offers."
        ),
    }


def guest_rules(D) -> dict:
    """The guests' disks: what each configuration's cache type and negotiated bits say (the
    key findings read these alone, without the matrices)."""
    gb, per, order, _ = guest_view(D)
    out = {
        "n_rule_checked": 0,
        "n_rule_ok": 0,
        "n_writable": 0,
        "n_cwce": 0,
        "wt_cache": "-",
        "wt_flush": "no",
        "wtn_cache": "-",
        "wtn_flush": "no",
        "scsi_taken": "no",
        "mq_q": "-",
    }
    if order:
        cons = gb.cache_type_consistent.dropna()
        wt = gb.set_index("config")
        out.update(
            {
                "n_rule_checked": len(cons),
                "n_rule_ok": int(cons.astype(bool).sum()),
                "n_writable": int((gb.cache_type_write == "ok").sum()),
                "n_cwce": int(gb.config_wce.astype(bool).sum()),
                "wt_cache": wt.loc["cache=writethrough", "cache_type"]
                if "cache=writethrough" in wt.index
                else "-",
                "wt_flush": "yes" if "FLUSH" in per.get("cache=writethrough", set()) else "no",
                "wtn_cache": (
                    wt.loc["writethrough+config-wce=off", "cache_type"]
                    if "writethrough+config-wce=off" in wt.index
                    else "-"
                ),
                "wtn_flush": "yes"
                if "FLUSH" in per.get("writethrough+config-wce=off", set())
                else "no",
                "scsi_taken": "yes" if "SCSI" in per.get("legacy+scsi=on", set()) else "no",
                "mq_q": ", ".join(
                    f"{c}: {int(wt.loc[c, 'nr_queues'])}" for c in order if c.startswith("smp2:")
                )
                or "-",
            }
        )
    return out


def accel_findings(D) -> dict:
    """Whether the data can say that the accelerator leaves the negotiated bits alone: every
    guest disk configuration measured under both KVM and TCG (in any dataset), compared on its
    negotiated virtio-blk bits."""
    b = D.bits
    g = b[(b.source == "guest") & (b.type == "block")] if len(b) else b
    accels = sorted(set(g.accel)) if len(g) else []
    if len(accels) < 2:
        return {
            "accel_compare": (
                f"every guest in the data ran under {accels[0].upper()}, so whether "
                f"{'TCG' if accels[0] == 'kvm' else 'KVM'} negotiates the same bits was "
                "not measured"
                if accels
                else "no guest ran, so nothing was compared"
            )
        }
    sets = g.groupby(["config", "accel", "host_id", "run_id", "boot", "device"])["name"].agg(
        frozenset
    )
    per = sets.reset_index().groupby(["config", "accel"])["name"].agg(set)
    both = [
        c for c in set(per.index.get_level_values(0)) if all((c, a) in per.index for a in accels)
    ]
    same = [c for c in both if len({s for a in accels for s in per[(c, a)]}) == 1]
    return {
        "accel_compare": (
            f"{len(same)} of the {len(both)} disk configurations measured under both "
            "accelerators negotiated the same virtio-blk bits under each"
            if both
            else "no disk configuration was measured under both accelerators, "
            "so whether they negotiate the same bits was not measured"
        )
    }


def option_findings(D) -> dict:
    """What single QEMU options changed, from the changes table and the block matrix."""
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

    only = [
        f"{r['config']} ({' '.join(('+' if n in r['added'].split() else '-') + n for n in names(r))})"
        for _, r in ch.iterrows()
        if names(r) and set(names(r)) <= transport
    ]
    out["transport_only"] = ", ".join(only) or "none"
    M = block_matrix(D)
    v1 = [i for i in M.index if i.split()[-1] == "VERSION_1"]
    modern = [c for c in M.columns if not c.startswith("seed:") and "legacy" not in c]
    has = sum(int(M.loc[v1[0], c]) for c in modern) if v1 else 0
    out["modern_v1"] = (
        f"All {len(modern)} columns other than the seed's and the legacy disks have VERSION_1"
        if has == len(modern)
        else f"{has} of the {len(modern)} columns other than the seed's and the legacy disks "
        "have VERSION_1"
    )
    return out


def values(D) -> dict:
    """Every value the prose quotes, formatted as it shows."""
    return {
        **overview(D),
        **table_findings(),
        **host_findings(D),
        **seed_findings(D),
        **boot_findings(D),
        **guest_findings(D),
        **accel_findings(D),
        **option_findings(D),
    }


def platform_notes(D) -> dict[str, list[str]]:
    """The accelerator each host's guests ran under, for the platform banner."""
    return per_host_note(
        D,
        sections(boot_findings),
        lambda g: (
            f"its QEMU guests ran under {g['accel_used']}"
            + (f" ({g['accel_note']})" if g.get("accel_note") else "")
        ),
    )
