"""virtio_blk_iothread: the analysis (frames in, frames out): medians and their intervals, the
on/off effects, CPU per thread class, the seed's bonnie++ figures beside ours; for the key
findings, each comparison's values per unit of repetition (per_repetition) and the estimates
that combine intervals are perfbook.analysis.decide's (lesser, greatest, fold)."""

from __future__ import annotations

import math
import re

import pandas as pd

from perfbook.analysis import stats

JOB_ORDER = (
    "randread_qd1",
    "randread_qd4",
    "randread_qd32",
    "randwrite_qd1",
    "randwrite_qd4",
    "randwrite_qd32",
    "read_qd1",
    "read_qd4",
    "read_qd32",
    "write_qd1",
    "write_qd4",
    "write_qd32",
)


def dataset_key(m) -> str:
    return f"{m['host']['host_id']}/{m['run_id']}"


def table(D, name: str):
    """D[name] with a 'dataset' column (host/run)."""
    df = D[name]
    return df.assign(dataset=df.host_id + "/" + df.run_id) if len(df) else df.assign(dataset=[])


def in_job_order(df, col="job"):
    """df sorted by dataset, job (in JOB_ORDER), storm and variant."""
    rank = {j: i for i, j in enumerate(JOB_ORDER)}
    return df.sort_values(
        [c for c in ("dataset", col, "storm", "variant") if c in df.columns],
        key=lambda s: s.map(lambda x: rank.get(x, 99)) if s.name == col else s,
        kind="stable",
    )


def fio_summary(fio):
    """Median IOPS with its distribution-free CI, and median latencies, per dataset, job,
    storm and variant."""
    s = stats.summarize_frame(fio, ["dataset", "job", "storm", "variant"], "iops")
    lat = fio.groupby(["dataset", "job", "storm", "variant"], as_index=False)[
        ["clat_p50_us", "clat_p99_us", "guest_sys_pct"]
    ].median()
    return in_job_order(s.merge(lat, on=["dataset", "job", "storm", "variant"]))


def event_idx_of(cmdline) -> str:
    """The fio disk's virtio-blk event_idx ("on" or "off") from QEMU's command line (its
    -device virtio-blk-pci with serial=data, else the first virtio-blk-pci): the value given,
    else "on", QEMU's default for the property; "unknown" without a command line or such a
    device."""
    if not isinstance(cmdline, str) or not cmdline.strip():
        return "unknown"
    devs = [d.split(",") for d in re.findall(r"virtio-blk-pci,(\S+)", cmdline)]
    dev = next((d for d in devs if "serial=data" in d), devs[0] if devs else None)
    if dev is None:
        return "unknown"
    given = [a.split("=", 1)[1] for a in dev if a.startswith("event_idx=")]
    if not given:
        return "on"
    return {"true": "on", "yes": "on", "false": "off", "no": "off"}.get(given[-1], given[-1])


def boots_table(D):
    """table(D, "boots") with every boot's event_idx: as recorded, or (a dataset older than
    the column) inferred from its qemu_cmdline (event_idx_of)."""

    def make():
        b = table(D, "boots")
        if not len(b):
            return b.assign(event_idx=pd.Series([], dtype=object))
        have = b.event_idx if "event_idx" in b.columns else pd.Series(None, index=b.index)
        known = have.where(have.notna() & (have.astype(str) != ""), None)
        guess = b.qemu_cmdline.map(event_idx_of)
        return b.assign(event_idx=known.fillna(guess).astype(str))

    return D.once("boots_event_idx", make)


def with_event_idx(rows, boots):
    """rows (fio, threads, bonnie: one dataset's or more) with their boot's event_idx."""
    key = ["dataset", "round", "boot", "variant"]
    if not len(rows):
        return rows.assign(event_idx=pd.Series([], dtype=object))
    ev = boots[key + ["event_idx"]].drop_duplicates(key)
    out = rows.merge(ev, on=key, how="left")
    return out.assign(event_idx=out.event_idx.fillna("unknown"))


def fio_table(D):
    """table(D, "fio") with each run's boot's event_idx (boots_table)."""
    return D.once("fio_event_idx", lambda: with_event_idx(table(D, "fio"), boots_table(D)))


def per_boot(fio, value: str = "iops"):
    """One row per boot, job and storm: the median of `value` over that boot's runs of the job
    (the boot, not the run, is the unit of repetition)."""
    keys = [
        c
        for c in ("dataset", "round", "boot", "variant", "job", "storm", "event_idx")
        if c in fio.columns
    ]
    return fio.groupby(keys, as_index=False, dropna=False)[value].median()


def effects(fio, value: str = "iops"):
    """iothread on against off per dataset, job and storm (and event_idx, where the rows have
    it: variants are compared only at the same event_idx), over one value per boot
    (per_boot): the Hodges-Lehmann shift relative to off's median (on/off - 1) with its
    distribution-free CI, Mann-Whitney p, Cliff's delta. A dataset of one boot per variant
    has no row."""
    within = [c for c in ("dataset", "job", "storm", "event_idx") if c in fio.columns]
    c = stats.compare_frame(
        per_boot(fio, value), by="variant", value=value, baseline="off", within=within
    )
    return in_job_order(c) if len(c) else c


def every_effect(D):
    """effects() of every dataset of D, once (the effects table and the hosts figure show them)."""
    return D.once("every_effect", lambda: effects(fio_table(D)))


def storm_effects(fio):
    """Per variant: the storm's relative change of IOPS (storm against no storm, same job), over
    one value per boot (per_boot)."""
    stormed = fio[fio.storm].job.unique() if len(fio) else []
    f = per_boot(fio[fio.job.isin(stormed)]).assign(
        load=lambda d: d.storm.map({True: "storm", False: "quiet"})
    )
    c = stats.compare_frame(
        f, by="load", value="iops", baseline="quiet", within=["dataset", "job", "variant"]
    )
    return in_job_order(c) if len(c) else c


def cpu_rates(threads):
    """CPU seconds per second of job, per thread class: the median over runs, per dataset,
    variant, job and storm."""
    t = threads.assign(rate=(threads.user_s + threads.sys_s) / threads.wall_s)
    g = t.groupby(["dataset", "job", "storm", "variant", "cls"], as_index=False).agg(
        rate=("rate", "median"), threads=("threads", "max"), n=("rate", "size")
    )
    return in_job_order(g)


def bonnie_beside_seed(D, dataset: str | None = None):
    """The seed's bonnie++ figures (data plane off and on) beside ours (iothread off and on,
    medians), with each side's on/off ratio."""
    ref = D.reference("virtio_blk_iothread")
    ref = ref[ref.kind == "bonnie_io"].pivot_table(
        index="item", columns="variant", values="value", aggfunc="first"
    )
    b = table(D, "bonnie")
    b = b[b.dataset == (dataset or dataset_key(D.quoted))] if len(b) else b
    ours = (
        b.pivot_table(index="item", columns="variant", values="value", aggfunc="median")
        if len(b)
        else None
    )
    rows = []
    for item in ref.index:
        row = {
            "test": item,
            "2013 off": ref.loc[item, "off"],
            "2013 on": ref.loc[item, "on"],
            "2013 on/off": round(ref.loc[item, "on"] / ref.loc[item, "off"], 2),
        }
        if ours is not None and item in ours.index and {"off", "on"} <= set(ours.columns):
            o = ours.loc[item]
            row.update(
                {
                    "ours off": o["off"],
                    "ours on": o["on"],
                    "ours on/off": round(o["on"] / o["off"], 2) if o["off"] else math.nan,
                }
            )
        rows.append(row)
    order = {
        k: i
        for i, k in enumerate(
            ("per_chr_output", "block_output", "rewrite", "per_chr_input", "block_input", "seeks")
        )
    }
    return (
        pd.DataFrame(rows)
        .sort_values("test", key=lambda s: s.map(order), kind="stable")
        .reset_index(drop=True)
    )


# -- the key findings' units of repetition and the estimates they combine -----------------------

PSEUDO = "inside one boot per variant (pseudo-replication: the spread between boots is not in it)"


def per_repetition(rows, by, value: str, run: str = "fio run") -> tuple[dict, str]:
    """({group of `by`: array of `value`, one per repetition}, what those values are).

    The chapter repeats rounds, each booting every variant once: where every group has two boots
    or more (or a boot has one `run` of each group), a repetition is a boot, its value the median
    of its runs. A dataset of one round with several runs per boot (the default profile before
    #40) has only the runs inside that boot; they are given back as they are, and `what` says
    so (key_findings.boots_only then claims no coverage)."""
    keys = [by] if isinstance(by, str) else list(by)
    runs = rows.groupby(keys + ["round", "boot"]).size()
    boots = runs.groupby(level=keys).size()
    if len(runs) and runs.max() <= 1:
        v, what = rows, f"boots (one {run} each)"
    elif len(boots) and boots.min() >= 2:
        v = rows.groupby(keys + ["round", "boot"], as_index=False)[value].median()
        what = f"boots (each the median of its {run}s)"
    else:
        v, what = rows, f"{run}s {PSEUDO}"
    out = {}
    for k, g in v.groupby(keys):
        out[k[0] if isinstance(k, tuple) and len(k) == 1 else k] = g[value].to_numpy(float)
    return out, what


def storm_ratios(fio):
    """One row per boot that ran a job both with and without the storm: its variant, round,
    boot, job and `ratio`, the median IOPS of its storm runs over that of its quiet runs."""
    g = fio.groupby(["variant", "round", "boot", "job", "storm"])["iops"].median().unstack("storm")
    if True not in g.columns or False not in g.columns:
        return pd.DataFrame(columns=["variant", "round", "boot", "job", "ratio"])
    g = g.dropna(subset=[True, False])
    return (g[True] / g[False]).rename("ratio").reset_index()


def thread_runs(threads):
    """One row per fio run (round, boot, variant, job, storm, rep) with each thread class's CPU
    seconds per second of the job as a column (0 where a class had no thread), and `io`: the
    main loop, the I/O thread and the block layer's workers together."""
    t = threads.assign(rate=(threads.user_s + threads.sys_s) / threads.wall_s)
    w = t.pivot_table(
        index=["round", "boot", "variant", "job", "storm", "rep"],
        columns="cls",
        values="rate",
        aggfunc="sum",
    ).fillna(0.0)
    for c in ("main", "iothread", "worker", "vcpu"):
        if c not in w.columns:
            w[c] = 0.0
    return w.assign(io=w.main + w.iothread + w.worker).reset_index()
