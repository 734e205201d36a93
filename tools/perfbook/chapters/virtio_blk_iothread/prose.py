"""virtio_blk_iothread: every value the prose quotes (values(D)), formatted as it shows, and the
platform banner's note (platform_notes(D))."""

from __future__ import annotations

import math

from perfbook.analysis import stats
from perfbook.analysis.findings import per_host_note

from .analysis import (
    bonnie_beside_seed,
    boots_table,
    cpu_rates,
    dataset_key,
    effects,
    fio_summary,
    fio_table,
    storm_effects,
    table,
)

# the values the prose quotes that a dataset may lack (a job or test it did not run)
_JOBS = ("randread_qd1", "randread_qd32", "randwrite_qd1", "randwrite_qd32")
PROSE_KEYS = (
    [f"{w}_{j}_{v}" for w in ("iops", "p99") for j in _JOBS for v in ("off", "on")]
    + [f"eff_{j}" for j in _JOBS]
    + ["eff_randread_qd1_storm", "eff_randread_qd32_storm"]
    + [f"storm_randread_qd{q}_{v}" for q in (1, 32) for v in ("off", "on")]
    + [
        f"cpu_randread_qd{q}{s}_{v}_{c}"
        for q in (1, 32)
        for s in ("", "_storm")
        for v in ("off", "on")
        for c in ("main", "vcpu", "iothread", "monitor", "worker", "exited")
    ]
    + [
        f"{w}_{t}_ratio"
        for w in ("seed", "ours")
        for t in ("block_output", "rewrite", "block_input", "seeks")
    ]
    + ["storm_rate", "storm_client_cpu"]
)


def _ci_label(e) -> str:
    pairs = [(int(r.n_a), int(r.n_b)) for r in e.itertuples()] if len(e) else []
    return stats.hl_ci_label(pairs) if pairs else "no interval: fewer than 2 boots per variant"


def _fmt_eff(r) -> str:
    return (
        f"{100 * r.rel_shift:+.1f} % (CI {100 * r.rel_low:+.1f} to {100 * r.rel_high:+.1f} %, "
        f"n = {int(r.n_a)} and {int(r.n_b)})"
    )


def quoted_boots(D):
    """The quoted dataset's boots, each with its event_idx (analysis.boots_table)."""
    boots = boots_table(D)
    return boots[boots.dataset == dataset_key(D.quoted)]


def accel(D, boots=None) -> dict:
    """The quoted dataset's accelerator (the platform note reads this alone), from its boots
    (quoted_boots, when the caller has them)."""
    boots = quoted_boots(D) if boots is None else boots
    return {
        "accel": ", ".join(sorted(set(boots.accel))) or "n/a",
        "accel_note": boots.accel_note.iloc[0] if len(boots) else "",
    }


def stall_text(m) -> str:
    """What the stall watchdog did in one dataset's run (collect.boot_until_done), from its manifest."""
    if "stalled_boots" not in m.facts:
        return (
            "The quoted dataset's run predates this rule: a guest that stalled then failed the whole "
            "run, so none of its boots stalled"
        )
    n, secs = len(m.facts["stalled_boots"]), m["parameters"]["stall_seconds"]
    return f"In the quoted dataset's run (stall_seconds {secs:g}), " + (
        f"{n} guest{'s' if n > 1 else ''} stalled and {'were' if n > 1 else 'was'} booted again"
        if n
        else "no guest stalled"
    )


def event_idx_text(m, accels: set) -> str:
    """The virtio-blk devices' event_idx in one dataset's boots, from its parameters and the
    accelerator that ran them (collect.boot_once: auto is off under TCG only)."""
    v = m["parameters"].get("event_idx")
    if v is None:
        return "on, QEMU's default (the dataset predates the event_idx parameter)"
    if v == "auto":
        return "off (auto, under TCG)" if "tcg" in accels else "on (auto: QEMU's default under KVM)"
    return f"{v}, as the run asked"


def event_idx_boots_text(boots) -> str:
    """What the quoted dataset's boots had as event_idx, per variant where they differ."""
    if not len(boots):
        return "not recorded"
    levels = sorted(set(boots.event_idx))
    if len(levels) == 1:
        return f"{levels[0]} in all {len(boots)} boots"
    return "; ".join(
        f"iothread {v}: {', '.join(sorted(set(g.event_idx)))}" for v, g in boots.groupby("variant")
    )


def values(D) -> dict:
    """Every value the prose quotes, formatted as it shows."""
    q = D.quoted
    ds, p = dataset_key(q), q["parameters"]
    boots = quoted_boots(D)
    f = {
        "n_datasets": len(D),
        "n_hosts": len(D.hosts),
        "newest_host": q.host_id,
        "newest_date": q["started"][:10],
        **accel(D, boots),
        "qemu_version": boots.qemu_version.iloc[0] if len(boots) else "n/a",
        "n_boots": len(boots),
        "boot_s": f"{boots.boot_seconds.median():.1f}" if len(boots) else "n/a",
        "queues": ", ".join(str(x) for x in sorted(set(boots.queues))),
        "guest_cpus": p["guest_cpus"],
        "p_runtime_ms": p["runtime_ms"],
        "p_repeats": p["repeats"],
        "p_cache": p["cache"],
        "p_aio": p["aio"],
        "p_disk_mib": p["disk_mib"],
        "p_bonnie_mib": p["bonnie_mib"],
        "p_storm_command": p["storm_command"],
        "p_depths": ", ".join(map(str, p["depths"])),
        "p_rw": ", ".join(p["rw"]),
    }
    f["stall_text"] = stall_text(q)
    f["p_event_idx"] = event_idx_text(q, set(boots.accel.unique()))
    f["event_idx_boots"] = event_idx_boots_text(boots)
    fio = fio_table(D)
    fio = fio[fio.dataset == ds]
    eff = effects(fio)
    f["ci_label"] = _ci_label(eff)
    sm = fio_summary(fio).set_index(["job", "storm", "variant"])
    for (job, st, v), r in sm.iterrows():
        k = f"{job}{'_storm' if st else ''}_{v}"
        f[f"iops_{k}"] = f"{r['median']:,.0f}"
        f[f"p99_{k}"] = f"{r.clat_p99_us:,.0f}"
    none = "not estimated (fewer than 2 boots per variant at one event_idx)"
    for job, st, v in sm.index:
        f[f"eff_{job}{'_storm' if st else ''}"] = none
        if st:
            f[f"storm_{job}_{v}"] = none
    for r in eff.itertuples():
        f[f"eff_{r.job}{'_storm' if r.storm else ''}"] = _fmt_eff(r)
    for r in storm_effects(fio).itertuples():
        f[f"storm_{r.job}_{r.variant}"] = _fmt_eff(r)
    st = table(D, "storm")
    st = st[st.dataset == ds] if len(st) else st
    if len(st):
        f["storm_rate"] = f"{(st.commands / st.seconds).median():,.0f}"
        f["storm_client_cpu"] = f"{(st.client_cpu_s / st.seconds).median():.2f}"
    cr = cpu_rates(table(D, "threads"))
    cr = cr[cr.dataset == ds].set_index(["job", "storm", "variant", "cls"])["rate"]
    for (job, stm, v, c), x in cr.items():
        f[f"cpu_{job}{'_storm' if stm else ''}_{v}_{c}"] = f"{x:.2f}"
    for r in bonnie_beside_seed(D, ds).to_dict("records"):
        f[f"seed_{r['test']}_ratio"] = f"{r['2013 on/off']:.2f}"
        if not math.isnan(r.get("ours on/off", math.nan)):
            f[f"ours_{r['test']}_ratio"] = f"{r['ours on/off']:.2f}"
    ref = D.reference("virtio_blk_iothread").set_index(["kind", "variant", "item"])
    f["seed_iops_before"] = f"{ref.loc[('report', 'off', 'iops'), 'value']:,.0f}"
    f["seed_iops_after"] = f"{ref.loc[('report', 'on', 'iops'), 'value']:,.0f}"
    rep = table(D, "repetition")
    rep = rep[rep.dataset == ds] if len(rep) else rep
    f["rep_stop"] = (
        ", ".join(sorted(set(rep.stopped_by))).replace("_", " ") if len(rep) else "not recorded"
    )
    f["rep_n_max"] = int(rep.n.max()) if len(rep) else 0
    f["rep_target"] = f"{100 * p['rep_target']:g}"
    for k in PROSE_KEYS:
        f.setdefault(k, "not measured")
    f["host_sentence"] = (
        f"Only {q.host_id} has measured this chapter so far."
        if len(D.hosts) < 2
        else f"{len(D.hosts)} hosts have measured this chapter; the tables quote {q.host_id}."
    )
    return f


def platform_notes(D) -> dict[str, list[str]]:
    """The accelerator each host's QEMU guests ran under (the platform banner)."""
    return per_host_note(D, accel, lambda g: f"its QEMU guests ran under {g['accel']}")
