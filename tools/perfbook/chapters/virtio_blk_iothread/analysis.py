"""virtio_blk_iothread: the analysis (frames in, frames and the prose's findings out)."""
from __future__ import annotations

import math

from perfbook.analysis import stats

JOB_ORDER = ("randread_qd1", "randread_qd4", "randread_qd32", "randwrite_qd1", "randwrite_qd4", "randwrite_qd32",
             "read_qd1", "read_qd4", "read_qd32", "write_qd1", "write_qd4", "write_qd32")
CLASSES = ("main", "vcpu", "iothread", "monitor", "worker", "other", "exited")


# the values the prose quotes that a dataset may lack (a job or test it did not run)
_JOBS = ("randread_qd1", "randread_qd32", "randwrite_qd1", "randwrite_qd32")
PROSE_KEYS = ([f"{w}_{j}_{v}" for w in ("iops", "p99") for j in _JOBS for v in ("off", "on")]
              + [f"eff_{j}" for j in _JOBS] + ["eff_randread_qd1_storm", "eff_randread_qd32_storm"]
              + [f"storm_randread_qd{q}_{v}" for q in (1, 32) for v in ("off", "on")]
              + [f"cpu_randread_qd{q}{s}_{v}_{c}" for q in (1, 32) for s in ("", "_storm") for v in ("off", "on")
                 for c in ("main", "vcpu", "iothread", "monitor", "worker", "exited")]
              + [f"{w}_{t}_ratio" for w in ("seed", "ours") for t in ("block_output", "rewrite", "block_input", "seeks")]
              + ["storm_rate", "storm_client_cpu"])


def dataset_key(m) -> str:
    return f"{m['host']['host_id']}/{m['run_id']}"


def table(D, name: str):
    """D[name] with a 'dataset' column (host/run)."""
    df = D[name]
    return df.assign(dataset=df.host_id + "/" + df.run_id) if len(df) else df.assign(dataset=[])


def _order(df, col="job"):
    rank = {j: i for i, j in enumerate(JOB_ORDER)}
    return df.sort_values([c for c in ("dataset", col, "storm", "variant") if c in df.columns],
                          key=lambda s: s.map(lambda x: rank.get(x, 99)) if s.name == col else s, kind="stable")


def fio_summary(fio):
    """Median IOPS with its distribution-free CI, and median latencies, per dataset, job,
    storm and variant."""
    s = stats.summarize_frame(fio, ["dataset", "job", "storm", "variant"], "iops")
    lat = fio.groupby(["dataset", "job", "storm", "variant"], as_index=False)[
        ["clat_p50_us", "clat_p99_us", "guest_sys_pct"]].median()
    return _order(s.merge(lat, on=["dataset", "job", "storm", "variant"]))


def effects(fio, value: str = "iops"):
    """iothread on against off per dataset, job and storm: the Hodges-Lehmann shift relative to
    off's median (on/off - 1) with its distribution-free CI, Mann-Whitney p, Cliff's delta."""
    c = stats.compare_frame(fio, by="variant", value=value, baseline="off", within=["dataset", "job", "storm"])
    return _order(c) if len(c) else c


def every_effect(D):
    """effects() of every dataset of D, once (the effects table and the hosts figure show them)."""
    return D.once("every_effect", lambda: effects(table(D, "fio")))


def storm_effects(fio):
    """Per variant: the storm's relative change of IOPS (storm against no storm, same job)."""
    stormed = fio[fio.storm].job.unique() if len(fio) else []
    f = fio[fio.job.isin(stormed)].assign(load=lambda d: d.storm.map({True: "storm", False: "quiet"}))
    c = stats.compare_frame(f, by="load", value="iops", baseline="quiet", within=["dataset", "job", "variant"])
    return _order(c) if len(c) else c


def cpu_rates(threads):
    """CPU seconds per second of job, per thread class: the median over runs, per dataset,
    variant, job and storm."""
    t = threads.assign(rate=(threads.user_s + threads.sys_s) / threads.wall_s)
    g = t.groupby(["dataset", "job", "storm", "variant", "cls"], as_index=False).agg(
        rate=("rate", "median"), threads=("threads", "max"), n=("rate", "size"))
    return _order(g)


def cpu_table(D, dataset: str | None = None):
    """The quoted dataset's CPU per thread class (s per s of job), a column per class."""
    r = cpu_rates(table(D, "threads"))
    r = r[r.dataset == (dataset or dataset_key(D.quoted))]
    w = r.pivot_table(index=["job", "storm", "variant"], columns="cls", values="rate", aggfunc="first")
    w = w[[c for c in CLASSES if c in w.columns]]
    return _order(w.reset_index()).set_index(["job", "storm", "variant"]).round(3)


def effects_table(D):
    e = every_effect(D)
    if not len(e):
        return e
    t = e[["dataset", "job", "storm", "n_a", "n_b", "median_b", "median_a", "rel_shift", "rel_low", "rel_high",
           "p_value", "cliffs_delta"]].copy()
    for c in ("rel_shift", "rel_low", "rel_high"):
        t[c] = (100 * t[c]).round(1)
    t = t.rename(columns={"n_a": "n_on", "n_b": "n_off", "median_b": "iops_off", "median_a": "iops_on",
                          "rel_shift": "on_vs_off_%", "rel_low": "ci_low_%", "rel_high": "ci_high_%"})
    return t.round({"iops_off": 0, "iops_on": 0, "p_value": 4, "cliffs_delta": 2}).reset_index(drop=True)


def bonnie_beside_seed(D, dataset: str | None = None):
    """The seed's bonnie++ figures (data plane off and on) beside ours (iothread off and on,
    medians), with each side's on/off ratio."""
    import pandas as pd
    ref = D.reference("virtio_blk_iothread")
    ref = ref[ref.kind == "bonnie_io"].pivot_table(index="item", columns="variant", values="value", aggfunc="first")
    b = table(D, "bonnie")
    b = b[b.dataset == (dataset or dataset_key(D.quoted))] if len(b) else b
    ours = b.pivot_table(index="item", columns="variant", values="value", aggfunc="median") if len(b) else None
    rows = []
    for item in ref.index:
        row = {"test": item, "2013 off": ref.loc[item, "off"], "2013 on": ref.loc[item, "on"],
               "2013 on/off": round(ref.loc[item, "on"] / ref.loc[item, "off"], 2)}
        if ours is not None and item in ours.index and {"off", "on"} <= set(ours.columns):
            o = ours.loc[item]
            row.update({"ours off": o["off"], "ours on": o["on"],
                        "ours on/off": round(o["on"] / o["off"], 2) if o["off"] else math.nan})
        rows.append(row)
    order = {k: i for i, k in enumerate(("per_chr_output", "block_output", "rewrite", "per_chr_input",
                                         "block_input", "seeks"))}
    return pd.DataFrame(rows).sort_values("test", key=lambda s: s.map(order), kind="stable").reset_index(drop=True)


def run_columns(m, D) -> dict:
    p = m["parameters"]
    b = table(D, "boots")
    b = b[b.dataset == dataset_key(m)] if len(b) else b
    return {"boots": len(b), "accel": ", ".join(sorted(set(b.accel))) if len(b) else "n/a",
            "fio": f"{p['runtime_ms']} ms × {p['repeats']} per boot", "disk": f"{p['cache']}/{p['aio']}"}


# ---- the values the prose quotes -------------------------------------------------------------

def _ci_label(e) -> str:
    pairs = [(int(r.n_a), int(r.n_b)) for r in e.itertuples()] if len(e) else []
    return stats.hl_ci_label(pairs) if pairs else "no interval: fewer than 2 runs per variant"


def _fmt_eff(r) -> str:
    return (f"{100 * r.rel_shift:+.1f} % (CI {100 * r.rel_low:+.1f} to {100 * r.rel_high:+.1f} %, "
            f"n = {int(r.n_a)} and {int(r.n_b)})")


def quoted_boots(D):
    """The quoted dataset's boots."""
    boots = table(D, "boots")
    return boots[boots.dataset == dataset_key(D.quoted)]


def accel(D, boots=None) -> dict:
    """The quoted dataset's accelerator (the platform note reads this alone), from its boots
    (quoted_boots, when the caller has them)."""
    boots = quoted_boots(D) if boots is None else boots
    return {"accel": ", ".join(sorted(set(boots.accel))) or "n/a",
            "accel_note": boots.accel_note.iloc[0] if len(boots) else ""}


def stall_text(m) -> str:
    """What the stall watchdog did in one dataset's run (collect.boot_until_done), from its manifest."""
    if "stalled_boots" not in m.facts:
        return ("The quoted dataset's run predates this rule: a guest that stalled then failed the whole "
                "run, so none of its boots stalled")
    n, secs = len(m.facts["stalled_boots"]), m["parameters"]["stall_seconds"]
    return (f"In the quoted dataset's run (stall_seconds {secs:g}), "
            + (f"{n} guest{'s' if n > 1 else ''} stalled and {'were' if n > 1 else 'was'} booted again"
               if n else "no guest stalled"))


def event_idx_text(m, accels: set) -> str:
    """The virtio-blk devices' event_idx in one dataset's boots, from its parameters and the
    accelerator that ran them (collect.boot_once: auto is off under TCG only)."""
    v = m["parameters"].get("event_idx")
    if v is None:
        return "on, QEMU's default (the dataset predates the event_idx parameter)"
    if v == "auto":
        return "off (auto, under TCG)" if "tcg" in accels else "on (auto: QEMU's default under KVM)"
    return f"{v}, as the run asked"


def findings(D) -> dict:
    """Every value the prose quotes, formatted as it shows."""
    q = D.quoted
    ds, p = dataset_key(q), q["parameters"]
    boots = quoted_boots(D)
    f = {"n_datasets": len(D), "n_hosts": len(D.hosts), "newest_host": q.host_id, "newest_date": q["started"][:10],
         **accel(D, boots), "qemu_version": boots.qemu_version.iloc[0] if len(boots) else "n/a", "n_boots": len(boots),
         "boot_s": f"{boots.boot_seconds.median():.1f}" if len(boots) else "n/a",
         "queues": ", ".join(str(x) for x in sorted(set(boots.queues))), "guest_cpus": p["guest_cpus"],
         "p_runtime_ms": p["runtime_ms"], "p_repeats": p["repeats"], "p_cache": p["cache"], "p_aio": p["aio"],
         "p_disk_mib": p["disk_mib"], "p_bonnie_mib": p["bonnie_mib"], "p_storm_command": p["storm_command"],
         "p_depths": ", ".join(map(str, p["depths"])), "p_rw": ", ".join(p["rw"])}
    f["stall_text"] = stall_text(q)
    f["p_event_idx"] = event_idx_text(q, set(boots.accel.unique()))
    fio = table(D, "fio")
    fio = fio[fio.dataset == ds]
    eff = effects(fio)
    f["ci_label"] = _ci_label(eff)
    sm = fio_summary(fio).set_index(["job", "storm", "variant"])
    for (job, st, v), r in sm.iterrows():
        k = f"{job}{'_storm' if st else ''}_{v}"
        f[f"iops_{k}"] = f"{r['median']:,.0f}"
        f[f"p99_{k}"] = f"{r.clat_p99_us:,.0f}"
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
    f["rep_stop"] = ", ".join(sorted(set(rep.stopped_by))).replace("_", " ") if len(rep) else "not recorded"
    f["rep_n_max"] = int(rep.n.max()) if len(rep) else 0
    f["rep_target"] = f"{100 * p['rep_target']:g}"
    for k in PROSE_KEYS:
        f.setdefault(k, "not measured")
    f["host_sentence"] = (f"Only {q.host_id} has measured this chapter so far." if len(D.hosts) < 2 else
                          f"{len(D.hosts)} hosts have measured this chapter; the tables quote {q.host_id}.")
    return f
