"""The chapter's figures: frames in, (figure, caption) out (perfbook.book.notebook.show displays them)."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.ticker import LogLocator, NullFormatter, StrMethodFormatter

from perfbook.analysis import fleetview as fv
from perfbook.analysis import stats

from . import analysis as A
from .parse import LOAD_TITLE, LOADS, ORDER


def plot_metric(summ, metric, ylabel, ax):
    """Median (point) and CI (bar) per variant, one colour per load."""
    loads = [ld for ld in LOADS if ld in set(summ.load)]
    s = summ[summ.metric == metric]
    have = set(s.variant.unique())
    order = [v for v in ORDER if v in have]
    for i, ld in enumerate(loads):
        g = s[s.load == ld].set_index("variant").reindex(order)
        x = [k + (i - (len(loads) - 1) / 2) * 0.25 for k in range(len(order))]
        ax.errorbar(
            x,
            g["median"],
            yerr=[g["median"] - g.ci_low, g.ci_high - g["median"]],
            fmt="o",
            capsize=3,
            label={"sat": "saturation", "rate": "fixed rate"}[ld],
        )
    ax.set_xticks(range(len(order)), order, rotation=20)
    ax.set_ylabel(ylabel)
    return ax


def legend_below(fig, axes, title=None, ncol=None):
    """One legend for the whole figure, centred below the panels, where it hides no point or
    interval (the handles of the first panel: every panel uses the same ones)."""
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        title=title,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=ncol or len(labels),
        fontsize="small",
        frameon=False,
    )


def log_ticks(ax):
    """A log y axis with plain numbers at its ticks (200, 500, 1000 rather than 10^2)."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def results(D):
    """Worker CPU per request and p99 latency per variant and load, quoted dataset."""
    S = D.S
    sel = S[S.metric.isin(["cpu_per_req_us", "lat_p99_ms"])]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    plot_metric(S, "cpu_per_req_us", "worker CPU µs per request", axes[0])
    plot_metric(S, "lat_p99_ms", "p99 latency (ms)", axes[1])
    log_ticks(axes[1])
    fig.suptitle(
        "Median over rounds, with its distribution-free " + stats.ci_label(sel["n"]), fontsize=10
    )
    fig.tight_layout()
    legend_below(fig, axes, title="load")
    return fig, stats.caption(
        "Worker CPU time per request (left) and p99 latency (right) per variant and load, newest dataset",
        n=sel["n"],
        unit="rounds",
        warmup=D.warm,
        hosts=D.host_caption,
        extra=f"Each trial also began with {D.p['warmup_ms']} ms of warm-up; disturbed trials are left out",
    )


def migrations(D):
    """Worker migrations per second, from /proc/<pid>/sched and from the tracepoint."""
    TL = D.TL
    sources = {
        "worker_migr_per_s": "/proc/<pid>/sched",
        "worker_migr_trace_per_s": "sched_migrate_task",
    }
    mig = TL.melt(
        id_vars=["variant", "load", "round"],
        value_vars=[c for c in sources if c in TL],
        var_name="source",
        value_name="per_s",
    )
    mig["source"] = mig.source.map(sources)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    have = set(mig.variant.unique())
    order = [v for v in ORDER if v in have]
    for ax, load in zip(axes, ("rate", "sat")):
        g = mig[mig.load == load]
        for i, (src, gs) in enumerate(g.groupby("source")):
            x = [order.index(v) + (i - 0.5) * 0.25 for v in gs.variant]
            ax.scatter(x, gs.per_s, s=12, alpha=0.6, label=src)
        ax.set_xticks(range(len(order)), order, rotation=20)
        ax.set_title(LOAD_TITLE[load])
    axes[0].set_ylabel("worker migrations per second (one dot per trial)")
    fig.tight_layout()
    legend_below(fig, axes, title="counted by")
    return fig, stats.caption(
        "Worker migrations per second, counted by /proc/<pid>/sched and by the sched_migrate_task "
        "tracepoint, one dot per trial of the newest dataset",
        n=TL.groupby(["load", "variant"]).size(),
        unit="trials",
        warmup=D.warm,
        hosts=D.host_caption,
        ci=False,
    )


def core_balance(D):
    """Busy share of each CPU per variant and load, median over rounds."""
    C = A.busy_cores(D.cores_quoted, D.TL)
    bal = C.groupby(["load", "variant", "cpu"]).busy_frac.median().mul(100).reset_index()
    order = [v for v in ORDER if v in set(D.TL.variant)]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, load in zip(axes, ("rate", "sat")):
        g = bal[bal.load == load]
        cpus = sorted(g.cpu.unique())
        for i, cpu in enumerate(cpus):
            gc = g[g.cpu == cpu].set_index("variant").reindex(order)
            ax.bar(
                [k + (i - (len(cpus) - 1) / 2) * 0.35 for k in range(len(order))],
                gc.busy_frac,
                width=0.35,
                label=f"CPU {cpu}",
            )
        ax.set_xticks(range(len(order)), order, rotation=20)
        ax.set_title(LOAD_TITLE[load])
    axes[0].set_ylabel("busy % of the window (median over rounds)")
    fig.tight_layout()
    legend_below(fig, axes, ncol=min(8, len(cpus)))
    return fig, stats.caption(
        "Busy share of each CPU during the measurement window, median over rounds, newest dataset",
        n=C.groupby(["load", "variant", "cpu"]).size(),
        unit="trials",
        warmup=D.warm,
        hosts=D.host_caption,
        ci=False,
        extra="Disturbed trials are left out",
    )


def hosts(D):
    """Worker CPU per request per variant and load over the hosts (each host's shown dataset): one
    point per other host, this host and the reference host with their intervals; one row of
    panels per machine kind (a TCG guest's CPU time is QEMU's emulation)."""
    SH = D.SH
    SH = SH[SH.metric == "cpu_per_req_us"]
    F = fv.fleet(D, set(SH.host_id))
    order = [v for v in ORDER if v in set(SH.variant)]
    SH = SH.assign(pos=SH.variant.map({v: i for i, v in enumerate(order)}))
    rows = fv.facets(F, "kind")
    fig, axes = plt.subplots(
        len(rows),
        2,
        figsize=(10, 3.6 * len(rows) + 1.0),
        sharey="row",
        squeeze=False,
        layout="constrained",
    )
    drawn = []
    for (kind, Fk), axrow in zip(rows, axes):
        for ax, load in zip(axrow, ("rate", "sat")):
            drawn.append(
                fv.points(ax, Fk, SH[SH.load == load], "pos", "median", "ci_low", "ci_high")
            )
            ax.set_xticks(range(len(order)), order, rotation=20)
            ax.set_title(
                f"{kind}: {LOAD_TITLE[load]}" if len(rows) > 1 else LOAD_TITLE[load],
                fontsize="medium",
            )
            log_ticks(ax)
        axrow[0].set_ylabel("worker CPU µs per request\n(log scale)")
    d = fv.merge(*drawn)
    fv.legend(fig, F, d)
    shown = D.of_shown(D["trials"])
    rounds = A.warmups(D["repetition"])
    runs = shown[["host_id", "run_id"]].drop_duplicates().itertuples(index=False)
    warm = [A.warmup_rounds(rounds, h, r) for h, r in runs]
    kinds = (
        (
            " One row of panels per machine kind: a TCG guest's CPU time is QEMU's emulation, to be read "
            "within its row."
        )
        if len(rows) > 1
        else ""
    )
    return fig, stats.caption(
        "Worker CPU time per request per variant and load over the hosts (each host's shown dataset)",
        n=SH["n"],
        unit="rounds",
        warmup=warm,
        hosts=F.caption_hosts(),
        extra="Disturbed trials are left out. "
        + F.marks_text(d, "a host's median over its undisturbed rounds", panels=len(rows) > 1)
        + kinds,
    )
