"""iostat_internals: the figures, each D -> (figure, caption); the drawing of each (_draw_*)
reads the quoted dataset's analysis, D.analysis()."""

from __future__ import annotations

import matplotlib.pyplot as plt
import seaborn as sns

from perfbook.analysis import fleetview as fv
from perfbook.analysis import stats
from perfbook.probes import diskstats as ds

from .analysis import phase_summary_hosts
from .parse import PHASES

# what the two non-phase labels mean (legends and captions)
NON_PHASE = {
    "transition": "transition (interval spans two phases)",
    "idle": "idle (no phase running: before the first, after the last)",
}
NON_PHASE_COLOR = (0.6, 0.6, 0.6)


def _phase_palette(phases):
    """A colour per workload phase, none of them grey (tab10 without its grey, then black, in
    parse.PHASES order), and light grey for the intervals that belong to no phase (NON_PHASE)."""
    names = [p for p in PHASES if p in set(phases)]
    colours = [c for i, c in enumerate(sns.color_palette("tab10", 10)) if i != 7] + [
        (0.0, 0.0, 0.0)
    ]
    pal = dict(zip(names, colours[: len(names)] + colours[: max(0, len(names) - len(colours))]))
    for extra in sorted(set(phases) - set(PHASES)):
        pal[extra] = NON_PHASE_COLOR
    return pal


def _scatter_phase(ax, x, y, ph, pal, size, label=True):
    """Points of one phase: filled in the phase's colour, or open grey circles for NON_PHASE."""
    lab = NON_PHASE.get(ph, ph) if label else None
    if ph in PHASES:
        ax.scatter(x, y, s=size, color=pal.get(ph, "0.3"), label=lab, zorder=2)
    else:
        ax.scatter(x, y, s=size, facecolors="none", edgecolors=NON_PHASE_COLOR, label=lab, zorder=2)


def _draw_timeseries(A):
    """Key columns per interval over the run, coloured by phase."""
    ours = A["ours"].copy()
    ours["t_s"] = ours["interval_s"].cumsum()
    ours["IOPS"] = ours["r/s"] + ours["w/s"] + ours["d/s"]
    cols = [
        ("IOPS", "IOPS (r/s + w/s + d/s)"),
        ("await", "await (ms)"),
        ("aqu-sz", "aqu-sz"),
        ("%util", "%util"),
        ("f/s", "f/s"),
    ]
    pal = _phase_palette(ours["phase"])
    fig, axes = plt.subplots(len(cols), 1, figsize=(9, 9), sharex=True)
    have = set(ours["phase"].unique())
    order = [p for p in PHASES if p in have] + sorted(have - set(PHASES))
    for ax, (c, label) in zip(axes, cols):
        ax.plot(ours["t_s"], ours[c], color="0.8", lw=0.8, zorder=1)
        for ph in order:
            g = ours[ours["phase"] == ph]
            _scatter_phase(ax, g["t_s"], g[c], ph, pal, 14)
        ax.set_ylabel(label, fontsize=9)
    axes[-1].set_xlabel("seconds since the first report")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.legend(
        handles,
        labels,
        ncol=3,
        fontsize=7,
        loc="lower center",
        bbox_to_anchor=(0.5, 0.0),
        frameon=False,
    )
    return fig


def _draw_disagreement(A):
    """|ours - sysstat| relative to the tolerance, per column and interval."""
    c = A["cmp"].copy()
    c["gap / tolerance"] = c["abs_diff"] / c["tolerance"]
    fig, ax = plt.subplots(figsize=(9, 4))
    fv.strip(
        data=c,
        x="column",
        y="gap / tolerance",
        ax=ax,
        size=3,
        jitter=0.25,
        order=list(ds.COLUMNS),
        color="tab:blue",
    )
    ax.axhline(1, color="tab:red", lw=1, ls="--", label="stated tolerance")
    ax.set_ylim(0, max(1.1, c["gap / tolerance"].max() * 1.1))
    ax.tick_params(axis="x", rotation=60, labelsize=8)
    ax.set_xlabel("")
    ax.legend(loc="upper right")
    fig.tight_layout()
    return fig


def _draw_latency(A):
    """Per-request latency (io_start -> io_done) from tracepoints, with await as a line."""
    ta = A["trace_await"]
    big = ta[ta["op"].isin(["read", "write"]) & (ta["n_trace"] >= 200)]
    keep = set(zip(big["window"], big["op"]))
    s = A["sample"]
    s = s[[(w, o) in keep for w, o in zip(s["window"], s["op"])]].copy()
    ta = big
    have = set(s["phase"].unique())
    phases = [p for p in PHASES if p in have]
    fig, axes = plt.subplots(len(phases), 1, figsize=(9, 1.35 * len(phases) + 0.6), sharex=True)
    axes = axes if len(phases) > 1 else [axes]
    for ax, ph in zip(axes, phases):
        g = s[s["phase"] == ph]
        sns.histplot(
            data=g,
            x="q2c_us",
            hue="op",
            ax=ax,
            log_scale=True,
            bins=60,
            element="step",
            stat="percent",
            common_norm=False,
            legend=(ax is axes[0]),
            hue_order=["read", "write"],
            palette={"read": "tab:blue", "write": "tab:orange"},
        )
        for op, color in (("read", "tab:blue"), ("write", "tab:orange")):
            a = ta[(ta["phase"] == ph) & (ta["op"] == op)]["await_ms"]
            if len(a):
                ax.axvline(1000 * a.mean(), color=color, ls="--", lw=1.2)
        ax.set_ylabel("")
        ax.text(0.005, 0.95, ph, transform=ax.transAxes, ha="left", va="top", fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
    axes[-1].set_xlabel(
        "io_start -> io_done per request (µs, log scale); dashed: await over the same window"
    )
    fig.supylabel("requests per bin (% of the direction's sample)", fontsize=9)
    fig.tight_layout()
    return fig


def _draw_little(A):
    """aqu-sz against Little's law (intervals) and against the trace's time-average occupancy."""
    ours, tu = A["ours"], A.get("trace_util")
    pal = _phase_palette(ours["phase"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    pred = ours.apply(ds.little_prediction, axis=1)
    have = set(ours["phase"].unique())
    order = [p for p in PHASES if p in have] + sorted(have - set(PHASES))
    for ph in order:
        sel = ours["phase"] == ph
        _scatter_phase(axes[0], pred[sel], ours.loc[sel, "aqu-sz"], ph, pal, 16)
    hi = max(pred.max(), ours["aqu-sz"].max()) * 1.05 + 0.01
    axes[0].plot([0, hi], [0, hi], color="0.4", lw=0.8, ls="--")
    axes[0].set_xlabel("sum of rate x await (Little's law), per interval")
    axes[0].set_ylabel("aqu-sz (from time_in_queue)")
    if tu is not None and len(tu):
        for ph in tu["phase"].unique():
            g = tu[tu["phase"] == ph]
            _scatter_phase(axes[1], g["occupancy"], g["aqu-sz"], ph, pal, 22, label=False)
        hi = max(tu["occupancy"].max(), tu["aqu-sz"].max()) * 1.05 + 0.01
        axes[1].plot([0, hi], [0, hi], color="0.4", lw=0.8, ls="--")
    axes[1].set_xlabel("time-average requests in flight, from tracepoints")
    axes[1].set_ylabel("aqu-sz over the same window")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    fig.legend(
        handles,
        labels,
        ncol=3,
        fontsize=7,
        loc="lower center",
        bbox_to_anchor=(0.5, 0.0),
        frameon=False,
    )
    return fig


def _draw_saturation(A):
    """%util against IOPS and aqu-sz per phase: 100 % busy is not 100 % of capacity."""
    ps = A["phase_summary"]
    pal = _phase_palette(ps["phase"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for _, r in ps.iterrows():
        for ax, x in ((axes[0], "IOPS"), (axes[1], "aqu-sz")):
            ax.errorbar(
                r[x],
                r["%util"],
                xerr=[[r[x] - r[f"{x} lo"]], [r[f"{x} hi"] - r[x]]],
                yerr=[[r["%util"] - r["%util lo"]], [r["%util hi"] - r["%util"]]],
                fmt="o",
                color=pal.get(r["phase"]),
                label=r["phase"] if ax is axes[0] else None,
            )
    axes[0].set_xscale("log")
    lab = stats.ci_label(ps["n"])  # the real coverage of the median intervals, per phase's n
    for ax, x in (
        (axes[0], f"IOPS (median per phase, {lab})"),
        (axes[1], f"aqu-sz (median per phase, {lab})"),
    ):
        ax.set_xlabel(x)
        ax.set_ylabel("%util")
        ax.axhline(100, color="0.5", lw=0.8, ls=":")
    handles, labels = axes[0].get_legend_handles_labels()  # below the panels: inside, it hid points
    rows = -(-len(labels) // 4)
    fig.tight_layout(rect=(0, 0.03 + 0.045 * rows, 1, 1))
    fig.legend(
        handles,
        labels,
        ncol=4,
        fontsize=7,
        loc="lower center",
        bbox_to_anchor=(0.5, 0.0),
        frameon=False,
        title="phase",
        title_fontsize=8,
    )
    return fig


# ---- the figures: (figure, caption) --------------------------------------------------------


def _host(A):
    m = A["manifest"]
    return [(m["host"]["host_id"], m["host"].get("description"))]


def timeseries(D):
    A = D.analysis()
    return _draw_timeseries(A), stats.caption(
        "iostat columns per 1-s interval of the newest dataset, coloured by the phase that ran through "
        "the whole interval",
        n=A["ours"].groupby("phase").size(),
        unit="intervals",
        warmup=0,
        hosts=_host(A),
        ci=False,
        extra="Open grey circles: intervals that straddle two phases (transition) or in which no "
        "phase ran (idle: before the first phase and after the last); every phase begins with 1 s of warm-up",
    )


def disagreement(D):
    A = D.analysis()
    return _draw_disagreement(A), stats.caption(
        "Gap between our column and sysstat's, divided by the stated tolerance, one dot per interval",
        n=A["cmp"].groupby("column").size(),
        unit="intervals",
        warmup=0,
        hosts=_host(A),
        ci=False,
        extra="Values above the dashed line are outside the tolerance",
    )


def little(D):
    A = D.analysis()
    return _draw_little(A), stats.caption(
        "Left: aqu-sz against Little's law per interval; right: aqu-sz against the time-average number "
        "of requests in flight from the tracepoints, per trace window",
        n=[len(A["ours"]), len(A.get("trace_util", []))],
        unit="intervals or windows",
        warmup=0,
        hosts=_host(A),
        ci=False,
    )


def latency(D):
    A = D.analysis()
    return _draw_latency(A), stats.caption(
        "Per-request latency from block_io_start to block_io_done, a random sample of each trace window's "
        "requests, per phase and direction",
        n=A["sample"].groupby(["phase", "op"]).size(),
        unit="requests",
        warmup=0,
        hosts=_host(A),
        ci=False,
        extra="Each direction's histogram is normalised to its own sample: the y axis is the share of the "
        "sampled requests per bin, in %. Dashed: the mean of await over the same windows",
    )


def saturation(D):
    A = D.analysis()
    return _draw_saturation(A), stats.caption(
        "%util against IOPS and aqu-sz, median per phase over its steady 1-s intervals",
        n=A["phase_summary"]["n"],
        unit="intervals",
        warmup=0,
        hosts=_host(A),
        extra="Intervals that straddle two phases, and warm-up rounds, are left out",
    )


def hosts_iops(D):
    """Device IOPS per phase: one point per other host, this host and the reference host with
    their intervals (each host's shown dataset), log scale."""
    PH = phase_summary_hosts(D.host_analyses())
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
        "Device IOPS per phase, each host's shown dataset",
        n=PH["n"],
        unit="intervals",
        warmup=0,
        hosts=F.caption_hosts(),
        extra="Intervals that straddle two phases, and warm-up rounds, are left out. "
        + F.marks_text(drawn, "a host's median IOPS over the phase's steady intervals"),
    )
