"""iostat_internals: what the notebook shows, each a one-line call: the values the prose
glues, the tables, and the figures with their captions."""
from __future__ import annotations

from perfbook.analysis import stats
from .analysis import in_written_order
from .figures import (plot_disagreement, plot_latency, plot_little, plot_saturation, plot_timeseries,
                      seed_table)
from .findings import analyse_hosts, compare_hosts, host_overview, phase_summary_hosts, prose_values
from .spec import PHASES


def analyse_all(D):
    """(A, AH): the quoted dataset's analysis, and every host's shown dataset's."""
    return D.analysis(), analyse_hosts(D)


def glue_values(D, A, AH, uptime: bool = True) -> dict:
    """Every value the prose quotes (prose_values of the quoted dataset, plus the counts of
    datasets and hosts, the repetition settings and the host comparison's sentence); `uptime`:
    prose_values'."""
    f = {k: (v if isinstance(v, (str, int)) else str(v)) for k, v in prose_values(A, uptime).items()}
    p, prof = A["manifest"]["parameters"], D.chapter.profiles
    ph = D["phases"]
    ph = ph[(ph["host_id"] == A["manifest"]["host"]["host_id"]) & (ph["run_id"] == A["run_id"]) & (ph["round"] >= 0)]
    per_round = ph.groupby("round").apply(lambda g: (g["t_end_ns"].max() - g["t_start_ns"].min()) / 1e9,
                                          include_groups=False)
    cmp = compare_hosts(AH)
    f.update({"n_hosts": len(AH), "n_datasets": len(D.manifests), "rep_datasets": len(D.manifests),
              "rep_target_pct": f'{100 * p.get("rep_target", prof["default"]["rep_target"]):g}',
              "rep_budget_default": f'{prof["default"]["rep_budget_s"]:.0f}',
              "rep_budget_full": f'{prof["full"]["rep_budget_s"]:.0f}',
              "round_s": f"{per_round.median():.0f}" if len(per_round) else "n/a",
              "host_cmp_sentence": _host_sentence(AH, cmp),
              "seq1m_runs": _per_run(D, A, lambda g: f"{g['seq1m_req_per_read']} requests per read, "
                                                     f"aqu-sz {g['seqread_1m_qd1_aqu']}")})
    return f


def _per_run(D, A, say) -> str:
    """say(g) for every counted dataset of the quoted dataset's host, with its run id (the same
    per-dataset values the key findings use); '' for a single dataset (the prose says it)."""
    from perfbook.analysis.findings import Run, counted_runs, glued
    from .claims import _g
    hid = A["manifest"]["host"]["host_id"]
    runs = counted_runs([m for m in D.manifests if m.host_id == hid])
    if len(D.manifests) < 2 or len(runs) < 2:
        return "only this dataset"
    parts = []
    for m in runs:
        g = glued(Run(D, m), _g)
        if g is not None:
            parts.append(f"run {m['run_id']}: {say(g)}")
    return "; ".join(parts)


def _host_sentence(AH, cmp) -> str:
    if len(cmp):
        return (f"With {len(AH)} hosts, each is compared with {cmp['baseline'].iloc[0]} phase by phase on "
                f"the IOPS of its steady intervals ({stats.COMPARE_METHOD}): {stats.significance_text(cmp)}. "
                "The environment diff above lists the facts in which the hosts' manifests differ.")
    return ("Only one host has data for this chapter, so there is no second host to compare it with and "
            "no environment diff. A second host's dataset (see the README) would appear here, with a rank "
            "test per phase and the facts in which the two environments differ.")


def _host(A):
    m = A["manifest"]
    return [(m["host"]["host_id"], m["host"].get("description"))]


# ---- tables ---------------------------------------------------------------------------------

def phase_table(D, A):
    """Per phase: what it runs (the chapter's own description, spec.PHASES, where the dataset's
    wording is older), the rounds and fio's median IOPS."""
    ph = D["phases"][(D["phases"]["host_id"] == A["manifest"]["host"]["host_id"]) & (D["phases"]["run_id"] == A["run_id"])]
    ph = ph.assign(what=[PHASES.get(p, {}).get("what", w) for p, w in zip(ph["phase"], ph["what"])])
    return (ph.groupby("phase", sort=False)
              .agg(what=("what", "first"), runs=("round", "size"),
                   fio_read_iops=("fio_read_iops", "median"), fio_write_iops=("fio_write_iops", "median"))
              .round(0))


def _ci(m, lo, hi, fmt: str) -> list[str]:
    """'median [low, high]' strings, formatted at the source."""
    return [f"{a:{fmt}} [{b:{fmt}}, {c:{fmt}}]" for a, b, c in zip(m, lo, hi)]


def repetition_table(D):
    """Per dataset and phase: the rounds, the median IOPS with its 95 % interval, the relative
    width reached and whether it met the target (the rest of repetition.csv is linked under
    Datasets)."""
    from IPython.display import Markdown
    from perfbook.analysis.repetition import FIXED_REPETITION
    rk = in_written_order(D["repetition"], "repetition")
    if not len(rk):
        return Markdown(f"No dataset of this chapter has a repetition table yet: all of them used {FIXED_REPETITION}.")
    out = rk[["host_id", "run_id", "key", "n"]].rename(columns={"key": "phase", "n": "rounds"})
    return out.assign(**{"median IOPS [95 % CI]": _ci(rk["median"], rk["ci_low"], rk["ci_high"], ".0f"),
                         "rel. CI width": rk["rel_ci_width"].round(3), "met target": rk["met_target"]})


def phase_glance(A):
    """Phases at a glance: per phase, the steady intervals, IOPS median [95 % CI] and the medians
    of the columns the prose discusses (the CIs of the others, and rareq-sz/wareq-sz, are in
    A['phase_summary']; the per-interval values are intervals.csv)."""
    ps = A["phase_summary"]
    out = ps[["phase", "n"]].rename(columns={"n": "intervals"})
    return out.assign(**{"IOPS [95 % CI]": _ci(ps["IOPS"], ps["IOPS lo"], ps["IOPS hi"], ".0f"),
                         "await ms": ps["await"].round(3), "aqu-sz": ps["aqu-sz"].round(2),
                         "%util": ps["%util"].round(1), "f/s": ps["f/s"].round(0),
                         "%wrqm": ps["%wrqm"].round(1)})


def outside_tolerance(A):
    c = A["cmp"]
    return c[~c["agree"]][["seq", "phase", "prev_phase", "column", "ours", "ours_nominal", "sysstat",
                           "count"]].round(3)


def trace_await_table(A):
    ta = A["trace_await"]
    return ta[ta["op"] != "all"].groupby(["phase", "op"], sort=False)[
        ["n_trace", "trace_mean_ms", "await_ms", "diff_ms", "device_mean_ms", "trace_p50_ms", "trace_p99_ms"]
    ].median().round(4)


def trace_util_table(A):
    return A["trace_util"].groupby("phase", sort=False)[
        ["trace_busy_pct", "device_busy_pct", "%util", "occupancy", "aqu-sz"]].median().round(2)


def host_comparison(AH):
    cmp = compare_hosts(AH)
    if not len(cmp):
        return None
    return cmp[["phase", "host_id", "baseline", "n_a", "n_b", "median_a", "median_b", "rel_shift",
                "rel_low", "rel_high", "p_value", "cliffs_delta", "verdict"]].round(4)


def seed(D, A):
    """The seed's reading of each counter beside today's (long cells shown whole)."""
    import pandas as pd
    from IPython.display import HTML
    with pd.option_context("display.max_colwidth", 200):
        return HTML(seed_table(D.reference("iostat_internals"), A).set_index("counter").to_html())


# ---- figures: (figure, caption) ------------------------------------------------------------

def timeseries(A):
    return plot_timeseries(A), stats.caption(
        "iostat columns per 1-s interval of the newest dataset, coloured by the phase that ran through "
        "the whole interval", n=A["ours"].groupby("phase").size(), unit="intervals", warmup=0, hosts=_host(A),
        ci=False, extra="Open grey circles: intervals that straddle two phases (transition) or in which no "
        "phase ran (idle: before the first phase and after the last); every phase begins with 1 s of warm-up")


def disagreement(A):
    return plot_disagreement(A), stats.caption(
        "Gap between our column and sysstat's, divided by the stated tolerance, one dot per interval",
        n=A["cmp"].groupby("column").size(), unit="intervals", warmup=0, hosts=_host(A), ci=False,
        extra="Values above the dashed line are outside the tolerance")


def little(A):
    return plot_little(A), stats.caption(
        "Left: aqu-sz against Little's law per interval; right: aqu-sz against the time-average number "
        "of requests in flight from the tracepoints, per trace window",
        n=[len(A["ours"]), len(A.get("trace_util", []))], unit="intervals or windows", warmup=0,
        hosts=_host(A), ci=False)


def latency(A):
    return plot_latency(A), stats.caption(
        "Per-request latency from block_io_start to block_io_done, a random sample of each trace window's "
        "requests, per phase and direction", n=A["sample"].groupby(["phase", "op"]).size(), unit="requests",
        warmup=0, hosts=_host(A), ci=False,
        extra="Each direction's histogram is normalised to its own sample: the y axis is the share of the "
              "sampled requests per bin, in %. Dashed: the mean of await over the same windows")


def saturation(A):
    return plot_saturation(A), stats.caption(
        "%util against IOPS and aqu-sz, median per phase over its steady 1-s intervals",
        n=A["phase_summary"]["n"], unit="intervals", warmup=0, hosts=_host(A),
        extra="Intervals that straddle two phases, and warm-up rounds, are left out")


def hosts_iops(D, AH):
    """Device IOPS per phase: one point per other host, this host and the reference host with
    their intervals (each host's shown dataset), log scale."""
    import matplotlib.pyplot as plt
    from perfbook.analysis import fleetview as fv
    PH = phase_summary_hosts(AH)
    F = fv.fleet(D, set(PH["host_id"].unique()))
    have = set(PH["phase"].unique())
    order = [p for p in PHASES if p in have]
    PH = PH[PH["phase"].isin(order)]
    PH = PH.assign(pos=PH["phase"].map({p: i for i, p in enumerate(order)}))
    fig, ax = plt.subplots(figsize=(9, 4.6), layout="constrained")
    drawn = fv.points(ax, F, PH, "pos", "IOPS", "IOPS lo", "IOPS hi")
    ax.set_yscale("log")
    ax.set_xticks(range(len(order)), order, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("IOPS (median of steady 1-s intervals)")
    fv.legend(fig, F, drawn)
    return fig, stats.caption(
        "Device IOPS per phase, each host's shown dataset", n=PH["n"], unit="intervals",
        warmup=0, hosts=F.caption_hosts(),
        extra="Intervals that straddle two phases, and warm-up rounds, are left out. "
              + F.marks_text(drawn, "a host's median IOPS over the phase's steady intervals"))


__all__ = ["analyse_all", "glue_values", "host_overview"]
