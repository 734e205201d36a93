"""iostat_internals: every value the chapter's prose quotes, formatted (values(D) for the
notebook's glue; run_values(D), one dataset's, for the key findings)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from perfbook.analysis import stats
from perfbook.analysis.findings import Run, counted_runs, glued
from perfbook.data import machine
from perfbook.probes import diskstats as ds

from .analysis import (
    compare_hosts,
    flush_origin,
    jiffy_check,
    measured_rounds,
    per_round_rates,
    steady,
    uptime_disagreement,
)
from .parse import TOL_ABS, TOL_REL


def values(D, uptime: bool = True) -> dict:
    """Every value the prose quotes (dataset_values of the quoted dataset, plus the counts of
    datasets and hosts, the repetition settings and the host comparison's sentence); `uptime`:
    dataset_values'."""
    A, AH = D.analysis(), D.host_analyses()
    f = {
        k: (v if isinstance(v, (str, int)) else str(v))
        for k, v in dataset_values(A, uptime).items()
    }
    p, prof = A["manifest"]["parameters"], D.chapter.profiles
    ph = D["phases"]
    ph = ph[
        (ph["host_id"] == A["manifest"]["host"]["host_id"])
        & (ph["run_id"] == A["run_id"])
        & (ph["round"] >= 0)
    ]
    per_round = ph.groupby("round").apply(
        lambda g: (g["t_end_ns"].max() - g["t_start_ns"].min()) / 1e9, include_groups=False
    )
    cmp = compare_hosts(AH)
    f.update(
        {
            "n_hosts": len(AH),
            "n_datasets": len(D.manifests),
            "rep_datasets": len(D.manifests),
            "rep_target_pct": f"{100 * p.get('rep_target', prof['default']['rep_target']):g}",
            "rep_budget_default": f"{prof['default']['rep_budget_s']:.0f}",
            "rep_budget_full": f"{prof['full']['rep_budget_s']:.0f}",
            "round_s": f"{per_round.median():.0f}" if len(per_round) else "n/a",
            "host_cmp_sentence": _host_sentence(AH, cmp),
            "seq1m_runs": _per_run(
                D,
                A,
                lambda g: (
                    f"{g['seq1m_req_per_read']} requests per read, aqu-sz {g['seqread_1m_qd1_aqu']}"
                ),
            ),
        }
    )
    return f


def _per_run(D, A, say) -> str:
    """say(g) for every counted dataset of the quoted dataset's host, with its run id (the same
    per-dataset values the key findings use); 'only this dataset' when there are fewer than two."""
    hid = A["manifest"]["host"]["host_id"]
    runs = counted_runs([m for m in D.manifests if m.host_id == hid])
    if len(D.manifests) < 2 or len(runs) < 2:
        return "only this dataset"
    parts = []
    for m in runs:
        g = glued(Run(D, m), run_values)
        if g is not None:
            parts.append(f"run {m['run_id']}: {say(g)}")
    return "; ".join(parts)


def _host_sentence(AH, cmp) -> str:
    if len(cmp):
        return (
            f"With {len(AH)} hosts, each is compared with {cmp['baseline'].iloc[0]} phase by phase on "
            f"the IOPS of its steady intervals ({stats.COMPARE_METHOD}): {stats.significance_text(cmp)}. "
            "The environment diff above lists the facts in which the hosts' manifests differ."
        )
    return (
        "Only one host has data for this chapter, so there is no second host to compare it with and "
        "no environment diff. A second host's dataset (see the README) would appear here, with a rank "
        "test per phase and the facts in which the two environments differ."
    )


def run_values(D) -> dict:
    """values() of one dataset (D holds it alone) without the comparison on /proc/uptime's
    clock, which no key finding reads: what the key findings decide on, and the per-run
    sentences of values()."""
    return values(D, uptime=False)


# Every glue name the chapter's prose uses; dataset_values() fills the ones a dataset can't give
# (no sysstat, no tracepoints, a phase not run) with 'n/a' so the page still renders.
PROSE_KEYS = (
    "fs_journal",
    "fsync_origin_said",
    "fsync_w_per",
    "fsync_f_per",
    "fsync_rounds",
    "fsync_nwin",
    "fsync_empty",
    "fsync_flush_rq",
    "fsync_issued_w",
    "fsync_data_per_flush",
    "fsync_extra_flush",
    "qd16_fio_inflight",
    "qd16_fio_lat_us",
    "qd16_await_us",
    "qd16_inside_pct",
    "qd16_pred_aqu",
    "qd16_occ",
    "seq1m_req_per_read",
    "seq1m_split_rounds",
    "seq1m_rounds",
    "seq1m_aqu_rounds",
    "max_segments",
    "mix_said",
    "await_device_said",
    "pre_dispatch_max_pct",
    "seqread_1m_qd1_aqu",
    "seqread_1m_qd1_rareq",
    "agree_pct",
    "aqu_max_abs",
    "busy_util_max_gap",
    "dev_busy_util_med_gap",
    "device",
    "device_share_max_pct",
    "device_share_min_pct",
    "edge_max_rel_pct",
    "file_mb",
    "fio_version",
    "fsync_4k_fs",
    "fsync_fio_rate",
    "host",
    "host_desc",
    "hz",
    "interval_max_ms",
    "interval_min_ms",
    "jiffy_ms",
    "jiffy_share_pct",
    "kernel",
    "little_max_diff",
    "max_rate_rel_pct",
    "max_rate_rel_pct_uptime",
    "min_col_within_pct",
    "mix_max_diff",
    "n_compared",
    "n_divisor",
    "n_intervals",
    "n_phases",
    "n_repeat",
    "once_phases",
    "repeat_seconds",
    "n_traced",
    "n_unexplained",
    "n_windows",
    "nr_hw_queues",
    "occ_max_rel_pct",
    "occ_med_rel_pct",
    "occ_tiq_max_rel_pct",
    "occ_tiq_med_rel_pct",
    "occ_worst_phase",
    "phase_seconds",
    "qd16_over_qd1",
    "randread_4k_qd16_aqu",
    "randread_4k_qd16_iops",
    "randread_4k_qd16_util",
    "randread_4k_qd1_iops",
    "randread_4k_qd1_util",
    "ratio_max_rel_big_pct",
    "ratio_med_abs",
    "ratio_within_pct",
    "rounds",
    "run_id",
    "scheduler",
    "seqwrite_4k_qd16_wrqm",
    "skipped",
    "sysstat_version",
    "tiq_max_resid",
    "tol_abs",
    "tol_rel_pct",
    "trace_busy_util_med_gap",
    "trace_max_abs_us",
    "trace_max_rel_pct",
    "trace_med_diff_us",
    "trace_med_rel_pct",
    "unexplained_max_count",
    "unexplained_phases",
    "util_max",
    "util_max_abs",
    "window_jiffies",
    "window_ms",
    "within_pct",
    "write_cache",
    "driver",
    "device_kind",
    "device_said",
    "mount_said",
    "discard_said",
    "queues_said",
    "qd16_shape_said",
    "util_said",
)


def _fmt(x, nd=2):
    try:
        if x != x:
            return "n/a"
    except TypeError:
        return str(x)
    return f"{x:,.{nd}f}"


def _journal_said(fs: dict | None) -> str:
    """What the dataset recorded about the file system's journal (collect records it since
    the fsync analysis needed it; older datasets did not)."""
    if not fs or fs.get("journal") is None:
        return "not recorded in this dataset"
    j = fs["journal"]
    return "none (ext4 without a journal)" if j == "none" else f"a jbd2 journal ({j})"


def _device_values(man) -> dict[str, str]:
    """What the measured device and its mount are, from the manifest's host and device facts,
    and the sentences on what this dataset cannot show because of them."""
    h, dev = man["host"], man["facts"].get("device", {})
    name, drv = dev.get("name", "?"), dev.get("driver") or "unknown driver"
    guest = (h.get("virtualization") or "none") != "none"
    kind = machine.short_kind(h)
    mnt = dev.get("mount") or {}
    opts = (mnt.get("options") or "").split(",")
    nq = dev.get("nr_hw_queues")
    f = {
        "driver": drv,
        "device_kind": f"{name} ({drv}) of a {kind}" if guest else f"{name} ({drv}) on {kind}",
    }
    if guest:
        f["device_said"] = (
            f"The device is {name}, a {drv} disk of a {kind}. Its latency includes whatever the "
            "hypervisor and the storage behind it add, which cannot be seen from inside. The "
            "chapter's claims rest on comparisons made inside one run, not on the absolute latencies."
        )
    else:
        f["device_said"] = (
            f"The device is {name} ({drv}) of a {kind} host, so its latencies are the device's "
            "own; the chapter's claims still rest on comparisons made inside one run."
        )
    if not mnt:
        f["mount_said"] = (
            "The dataset does not record which file system the scratch directory was on."
        )
    elif mnt.get("mount") == "/":
        f["mount_said"] = (
            f"The disk also carries the root file system ({mnt.get('source')} mounted at /), so "
            "other processes' I/O lands in the same counters. All three observers see that I/O too, "
            "so the comparisons stay valid. The absolute rates are not the workload's alone."
        )
    else:
        f["mount_said"] = (
            f"The scratch directory is on {mnt.get('source')}, mounted at {mnt.get('mount')}; I/O "
            "of other processes to that device, if any, lands in the same counters and all three "
            "observers see it."
        )
    if not mnt:
        f["discard_said"] = (
            "The mount options are not recorded, so why the discard phase did or did not show d/s is not known."
        )
    elif "discard" in opts:
        f["discard_said"] = (
            f"Discards appear because {mnt.get('mount')} is mounted with discard ({mnt.get('fstype')}). "
            "On a file system without it, the discard phase would show no d/s."
        )
    else:
        f["discard_said"] = (
            f"{mnt.get('mount')} is mounted without discard, so the discard phase's punched holes "
            "send no discards to the device and d/s stays at zero."
        )
    if nq is None:
        f["queues_said"] = "The dataset does not record the device's hardware queues."
    elif int(nq) == 1:
        f["queues_said"] = (
            "With one hardware queue, this device cannot show how %util behaves across several queues."
        )
    else:
        f["queues_said"] = (
            f"The device has {nq} hardware queues; %util counts time with any request in flight on "
            "any of them, which this chapter does not take apart."
        )
    return f


def _and(items) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _tail_values(sample, ta) -> dict[str, str]:
    """The shape of the queue-depth-16 latency histograms (the sampled requests of each trace
    window): mean against median, and the share of requests above twice the median."""
    if sample is None or not len(sample):
        return {}
    big = ta[ta["n_trace"] >= 200]
    # the queue-depth-16 phases' requests (their names tested once each, not once per request),
    # of those windows and ops, matched as pairs in one lookup (a Python loop over the sample's
    # string columns was most of this function's time)
    s = sample[
        sample["phase"].isin([p for p in sample["phase"].unique() if str(p).endswith("_qd16")])
    ]
    s = s[
        pd.MultiIndex.from_arrays([s["window"], s["op"]]).isin(list(zip(big["window"], big["op"])))
        if len(big) and len(s)
        else np.zeros(len(s), dtype=bool)
    ]
    parts, ratios, names = [], [], []
    for (ph, op), g in s.groupby(["phase", "op"], sort=False):
        x = g["q2c_us"]
        if len(x) < 200:
            continue
        r = x.mean() / x.median()
        ratios.append(r)
        names.append(f"{ph} {op}s")
        parts.append(
            f"{ph} {op}s: mean {x.mean():,.0f} µs, median {x.median():,.0f} µs ({r:.2f}×), "
            f"{100 * (x > 2 * x.median()).mean():.1f} % above twice the median"
        )
    if not parts:
        return {}
    skewed = [n for n, r in zip(names, ratios) if r >= 1.15]
    if not skewed:
        said = (
            "In every queue-depth-16 phase the mean lies within 15 % of the median, so here the latencies "
            "cluster around a typical value and await, a mean, describes a typical request; a tail that "
            "pulled await up would show as a mean well above the median"
        )
    else:
        said = (
            f"In {_and(skewed)} the mean lies 15 % or more above the median: there a tail of slow "
            "requests pulls await above what a typical request takes"
            + (
                ""
                if len(skewed) == len(names)
                else f"; in {_and(n for n in names if n not in skewed)} it does not"
            )
        )
    return {"qd16_shape_said": f"{'; '.join(parts)}. {said}"}


def _per_op_values(ours, phases) -> dict[str, str]:
    """Per fsync and per fio I/O: the device's requests and flushes, and Little's law on fio's
    side and the block layer's (median over the measured rounds)."""
    f = {}
    fs = per_round_rates(ours, phases, "fsync_4k", "write")
    if len(fs):
        f["fsync_w_per"] = _fmt(fs["wr_per_op"].median(), 2)
        f["fsync_f_per"] = _fmt(fs["fl_per_op"].median(), 2)
        f["fsync_rounds"] = str(len(fs))
    qd = per_round_rates(ours, phases, "randread_4k_qd16", "read")
    if len(qd):
        f["qd16_fio_inflight"] = _fmt(qd["fio_in_flight"].median(), 2)
        f["qd16_fio_lat_us"] = _fmt(qd["fio_lat_us"].median(), 0)
        f["qd16_await_us"] = _fmt(1000 * qd["await_ms"].median(), 0)
        f["qd16_inside_pct"] = _fmt(100 * qd["inside_share"].median(), 0)
        f["qd16_pred_aqu"] = _fmt((qd["fio_in_flight"] * qd["inside_share"]).median(), 2)
    sq = per_round_rates(ours, phases, "seqread_1m_qd1", "read")
    if len(sq):
        f["seq1m_rounds"] = str(len(sq))
        f["seq1m_req_per_read"] = " and ".join(_fmt(x, 2) for x in sq["rd_per_op"])
        f["seq1m_aqu_rounds"] = " and ".join(_fmt(x, 2) for x in sq["aqu"])
        f["seq1m_split_rounds"] = str(int((sq["rd_per_op"] > 1.5).sum()))
    return f


def dataset_values(A: dict, uptime: bool = True) -> dict[str, str]:
    """Every number the chapter's prose quotes, formatted, keyed by glue name; without the
    comparison on /proc/uptime's clock unless `uptime` (the key findings read none of it)."""
    man = A["manifest"]
    f = {}
    p = man["parameters"]
    dev = man["facts"].get("device", {})
    f["run_id"] = man["run_id"]
    f["host"] = man["host"]["host_id"]
    f["host_desc"] = man["host"]["description"]
    f["kernel"] = man["host"]["kernel_release"]
    f["sysstat_version"] = man["tools"].get("iostat") or "not installed"
    f["fio_version"] = man["tools"].get("fio") or "not installed"
    f["device"] = dev.get("name", "?")
    f["scheduler"] = re.sub(r".*\[(\S+)\].*", r"\1", dev.get("scheduler") or "?")
    f["write_cache"] = dev.get("write_cache") or "?"
    f["nr_hw_queues"] = str(dev.get("nr_hw_queues"))
    f["max_segments"] = str(dev.get("max_segments") or "n/a")
    f["fs_journal"] = _journal_said(man["facts"].get("filesystem"))
    f.update(_device_values(man))
    f["hz"] = str(man["facts"].get("clock", {}).get("CONFIG_HZ"))
    f["phase_seconds"] = str(p["phase_seconds"])
    f["rounds"] = measured_rounds(A)
    f["n_phases"] = str(len(p["phases"]))
    # a dataset from before `repeat` repeated every phase at phase_seconds
    rep = p.get("repeat") or p["phases"]
    f["n_repeat"] = str(len(rep))
    f["repeat_seconds"] = _fmt(p.get("repeat_seconds") or p["phase_seconds"], 1)
    once = [x for x in p["phases"] if x not in rep]
    f["once_phases"] = ", ".join(f"`{x}`" for x in once) if once else "none"
    f["window_ms"] = _fmt(p["trace_window_s"] * 1000, 0)
    hz = man["facts"].get("clock", {}).get("CONFIG_HZ")
    f["window_jiffies"] = _fmt(p["trace_window_s"] * hz, 0) if hz else "n/a"
    f["file_mb"] = str(p["file_mb"])
    if "ours" in A:
        ours, cmp, dis = A["ours"], A["cmp"], A["disagree"]
        f["n_intervals"] = str(len(ours))
        f["n_steady"] = str(len(steady(ours)))
        f["n_compared"] = f"{len(cmp):,}"
        f["within_pct"] = _fmt(100 * cmp["within"].mean(), 1)
        f["tol_abs"] = _fmt(TOL_ABS, 3)
        f["tol_rel_pct"] = _fmt(100 * TOL_REL, 0)
        rates = dis[dis["column"].isin(["r/s", "w/s", "rkB/s", "wkB/s", "f/s", "d/s", "dkB/s"])]
        f["max_rate_rel_pct"] = _fmt(rates["max_rel_diff_pct"].max(), 2)
        ratio_cols = [
            "r_await",
            "w_await",
            "d_await",
            "f_await",
            "rareq-sz",
            "wareq-sz",
            "dareq-sz",
            "%rrqm",
            "%wrqm",
            "%drqm",
        ]
        rc = cmp[cmp["column"].isin(ratio_cols)]
        f["ratio_within_pct"] = _fmt(100 * rc["within"].mean(), 1)
        f["ratio_med_abs"] = _fmt(rc["abs_diff"].median(), 4)
        big = rc[(rc["count"] >= 1000) & (rc["sysstat"].abs() >= 1)]
        f["ratio_max_rel_big_pct"] = _fmt(100 * big["rel_diff"].max(), 2) if len(big) else "n/a"
        miss = cmp[~cmp["within"]]
        f["n_divisor"] = str(int(cmp["divisor_explains"].sum()))
        f["agree_pct"] = _fmt(100 * cmp["agree"].mean(), 1)
        f["n_unexplained"] = str(int((~cmp["agree"]).sum()))
        um = cmp[~cmp["agree"]]
        f["unexplained_max_count"] = f"{int(um['count'].max()):,}" if len(um) else "0"
        f["unexplained_phases"] = ", ".join(sorted(set(um["phase"].unique()))) or "none"
        f["n_outside"] = str(len(miss))
        f["outside_max_count"] = f"{int(miss['count'].max()):,}" if len(miss) else "0"
        f["outside_phases"] = ", ".join(sorted(set(miss["phase"].unique()))) or "none"
        f["min_col_within_pct"] = _fmt(dis["within_tol_pct"].min(), 1)
        if uptime:
            du = uptime_disagreement(A)
            ur = du[du["column"].isin(rates["column"])]
            f["max_rate_rel_pct_uptime"] = _fmt(ur["max_rel_diff_pct"].max(), 2)
        f["util_max_abs"] = _fmt(dis.set_index("column").loc["%util", "max_abs_diff"], 2)
        f["aqu_max_abs"] = _fmt(dis.set_index("column").loc["aqu-sz", "max_abs_diff"], 3)
        f["interval_min_ms"] = _fmt(ours["interval_s"].min() * 1000, 1)
        f["interval_max_ms"] = _fmt(ours["interval_s"].max() * 1000, 1)
        f["tiq_max_resid"] = str(int(ours["tiq_residual_ms"].abs().max()))
        # the identities per interval, on plain records of the columns they read (a row-wise
        # apply built a Series per interval)
        recs = ours[
            ["r/s", "w/s", "d/s", "f/s", "r_await", "w_await", "d_await", "f_await"]
        ].to_dict("records")
        mix = (
            (pd.Series([ds.await_mix(r) for r in recs], index=ours.index) - ours["await"])
            .abs()
            .max()
        )
        f["mix_max_diff"] = f"{mix:.1e}"
        pred = pd.Series([ds.little_prediction(r) for r in recs], index=ours.index)
        f["little_max_diff"] = _fmt((ours["aqu-sz"] - pred).abs().max(), 4)
        jc = jiffy_check(ours, man["facts"].get("clock", {}).get("CONFIG_HZ"))
        f["jiffy_share_pct"] = _fmt(100 * jc["share"], 1)
        f["jiffy_ms"] = str(jc.get("ms", "?"))
        f["util_max"] = _fmt(ours["%util"].max(), 1)
        ps = A["phase_summary"].set_index("phase")
        for ph in (
            "randread_4k_qd1",
            "randread_4k_qd16",
            "randwrite_4k_qd1",
            "randwrite_4k_qd16",
            "fsync_4k",
            "seqwrite_4k_qd16",
            "discard",
            "buffered_seqread",
            "seqread_1m_qd1",
        ):
            if ph in ps.index:
                r = ps.loc[ph]
                f[f"{ph}_iops"] = _fmt(r["IOPS"], 0)
                f[f"{ph}_util"] = _fmt(r["%util"], 1)
                f[f"{ph}_aqu"] = _fmt(r["aqu-sz"], 2)
                f[f"{ph}_await"] = _fmt(r["await"], 3)
                f[f"{ph}_fs"] = _fmt(r["f/s"], 0)
                f[f"{ph}_wrqm"] = _fmt(r["%wrqm"], 1)
                f[f"{ph}_rareq"] = _fmt(r["rareq-sz"], 1)
        ph = A.get("phases")
        if ph is not None and len(ph) and "fsync_4k" in set(ph["phase"].unique()):
            f["fsync_fio_rate"] = _fmt(ph[ph["phase"] == "fsync_4k"]["fio_write_iops"].median(), 0)
        if "randread_4k_qd1" in ps.index and "randread_4k_qd16" in ps.index:
            ratio = ps.loc["randread_4k_qd16", "IOPS"] / ps.loc["randread_4k_qd1", "IOPS"]
            f["qd16_over_qd1"] = _fmt(ratio, 1)
            f["util_said"] = (
                f"So at depth 1, {_fmt(ps.loc['randread_4k_qd1', '%util'], 1)} % util came with "
                f"{100 / ratio:.0f} % of the IOPS the same device gave at depth 16."
                if ratio >= 1.2
                else "Here the deeper queue gave hardly more IOPS, so this device did not show the effect."
            )
        f.update(_per_op_values(ours, A.get("phases")))
        tiny = mix < 1e-9
        f["mix_said"] = (
            "within floating-point rounding, so the identity holds"
            if tiny
            else "more than floating-point rounding: the identity does not hold exactly here"
        )
    if "trace_await" in A:
        ta = A["trace_await"]
        main = ta[ta["op"].isin(["read", "write"]) & (ta["n_trace"] >= 200)]
        f["n_windows"] = str(ta["window"].nunique())
        f["n_traced"] = f"{int(ta[ta['op'] == 'all']['n_trace'].sum()):,}"
        f["trace_max_abs_us"] = _fmt(1000 * main["diff_ms"].abs().max(), 2)
        f["trace_med_diff_us"] = _fmt(1000 * main["diff_ms"].median(), 2)
        rel = (main["diff_ms"] / main["await_ms"]).abs()
        f["trace_max_rel_pct"] = _fmt(100 * rel.max(), 1)
        f["trace_med_rel_pct"] = _fmt(100 * rel.median(), 1)
        share = main["device_mean_ms"] / main["trace_mean_ms"]
        f["device_share_min_pct"] = _fmt(100 * share.min(), 0)
        f["device_share_max_pct"] = _fmt(100 * share.max(), 0)
        pre = 100 * (1 - share.min())  # the largest share of a window's mean spent before dispatch
        f["pre_dispatch_max_pct"] = _fmt(pre, 0)
        f["await_device_said"] = (
            "so await is not the device's latency here either"
            if pre >= 10
            else "so here await came within 10 % of the device's latency in every window"
        )
        f.update(_tail_values(A.get("sample"), ta))
        tu = A["trace_util"]
        qd = tu[tu["phase"] == "randread_4k_qd16"]
        if len(qd):
            f["qd16_occ"] = _fmt(qd["occupancy"].median(), 2)
        fo = flush_origin(A.get("trace_windows_raw"))
        if fo:
            f["fsync_nwin"] = str(fo["windows"])
            f["fsync_empty"] = f"{fo['empty_preflush']:,}"
            f["fsync_flush_rq"] = f"{fo['flush_requests']:,}"
            f["fsync_issued_w"] = f"{fo['issued_writes']:,}"
            f["fsync_extra_flush"] = f"{fo['flush_requests'] - fo['empty_preflush']:,}"
            f["fsync_data_per_flush"] = (
                _fmt(fo["issued_writes"] / fo["flush_requests"], 2)
                if fo["flush_requests"]
                else "n/a"
            )
            extra = fo["flush_requests"] - fo["empty_preflush"]
            # the file system is whatever holds the scratch directory (collect formats none):
            # without a journal there is no journal commit that could add a flush
            journal = (man["facts"].get("filesystem") or {}).get("journal")
            if extra <= 0.02 * fo["empty_preflush"]:
                f["fsync_origin_said"] = (
                    "every flush request came from an fsync's own empty preflush"
                    + (
                        "; this ext4 has no journal, so no journal commit could have added one"
                        if journal == "none"
                        else ", none from a journal commit"
                        if journal is not None
                        else " (whether the file system had a journal is not recorded)"
                    )
                )
            else:
                f["fsync_origin_said"] = (
                    f"{extra:,} flush requests came from elsewhere than the empty preflushes"
                    + ("" if journal == "none" else ", such as journal commits")
                )
        rel = ((tu["occupancy"] - tu["aqu-sz"]) / tu["aqu-sz"].where(tu["aqu-sz"] > 0)).abs()
        f["occ_max_rel_pct"] = _fmt(100 * rel.max(), 1)
        f["occ_med_rel_pct"] = _fmt(100 * rel.median(), 2)
        iw = rel.idxmax()
        f["occ_worst_phase"] = str(tu.loc[iw, "phase"])
        rel2 = (
            (tu["occupancy_as_tiq"] - tu["aqu-sz"]) / tu["aqu-sz"].where(tu["aqu-sz"] > 0)
        ).abs()
        f["occ_tiq_max_rel_pct"] = _fmt(100 * rel2.max(), 1)
        f["occ_tiq_med_rel_pct"] = _fmt(100 * rel2.median(), 2)
        f["occ_worst_tiq_rel_pct"] = _fmt(100 * rel2.loc[iw], 1)
        edge = (tu["occupancy_as_tiq"] - tu["occupancy"]).abs() / tu["aqu-sz"].where(
            tu["aqu-sz"] > 0
        )
        f["edge_max_rel_pct"] = _fmt(100 * edge.max(), 2)
        f["busy_util_max_gap"] = _fmt((tu["trace_busy_pct"] - tu["%util"]).abs().max(), 1)
        f["dev_busy_util_med_gap"] = _fmt((tu["device_busy_pct"] - tu["%util"]).median(), 1)
        f["trace_busy_util_med_gap"] = _fmt((tu["trace_busy_pct"] - tu["%util"]).median(), 1)
    skipped = man.get("skipped", {})
    f["skipped"] = "; ".join(f"{k}: {v}" for k, v in skipped.items()) or "nothing"
    for k in PROSE_KEYS:
        f.setdefault(k, "n/a")
    return f
