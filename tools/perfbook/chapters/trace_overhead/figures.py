"""trace_overhead: the figures (frames in, (figure, caption) out)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from perfbook.analysis import fleetview as fv

from .analysis import COMPARED, caption_for, published_current, run_medians, run_steps
from .parse import MECHANISMS


def _log_ticks(ax, axis="x"):
    """Readable ticks on a log axis: every decade written out (1, 10, 100, 1,000, ...), plus 2 and 5
    within each decade where the axis spans about two decades, or 3 where it spans about three."""
    a = ax.xaxis if axis == "x" else ax.yaxis
    lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
    span = hi / lo
    subs = (1.0, 2.0, 5.0) if span <= 150 else (1.0, 3.0) if span <= 1500 else (1.0,)
    a.set_major_locator(LogLocator(base=10, subs=subs))
    a.set_minor_locator(
        LogLocator(base=10, subs=tuple(k for k in (2.0, 3.0, 5.0) if k not in subs))
    )
    a.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    a.set_minor_formatter(NullFormatter())


def _fleet_medians(D, mechanisms=None):
    """Per drawn dataset and mechanism: median ns per call with its CI and p95 (every counted run
    of this host and of the reference host, each other host's shown dataset), the fleet, and the
    samples behind them (for the caption)."""
    med = run_medians(D)
    F = fv.fleet(D, set(med.host_id.unique()))
    keep = fv.runs(D, F)
    med = fv.of_runs(med, keep)
    samples = fv.of_runs(D["samples"], keep)
    if mechanisms is not None:
        med = med[med.mechanism.isin(mechanisms)]
        samples = samples[samples.mechanism.isin(mechanisms)]
    return med, F, samples, [m for m in D.manifests if m.key in keep]


def costs(D):
    """Median cost per call per mechanism: one point per other host, every run of this host and of
    the reference host with its CI and p95; one panel per machine kind; log scale."""
    med, F, samples, mans = _fleet_medians(D)
    order = [m for m in MECHANISMS if m in set(med.mechanism)]
    med = med.assign(pos=med.mechanism.map({m: i for i, m in enumerate(order)}))
    panels = fv.facets(F, "kind")
    fig, axes = plt.subplots(
        1,
        len(panels),
        figsize=(min(4.6 * len(panels) + 1.8, 14), 0.42 * len(order) + 2.2),
        sharex=True,
        sharey=True,
        squeeze=False,
        layout="constrained",
    )
    drawn = []
    for ax, (title, Fk) in zip(axes[0], panels):
        drawn.append(
            fv.points(ax, Fk, med, "pos", "median", "ci_low", "ci_high", orient="h", tick="p95")
        )
        if len(panels) > 1:
            ax.set_title(title, fontsize="medium")
        ax.set_xlabel(
            "ns per call (median, CI within the run;\ngrey tick: p95)"
            if len(panels) > 1
            else "ns per call (median, CI within the run; grey tick: p95)"
        )
    ax0 = axes[0, 0]
    ax0.set_yticks(range(len(order)), order)
    ax0.set_ylim(len(order) - 0.5, -0.5)
    ax0.set_xscale("log")
    _log_ticks(ax0)
    d = fv.merge(*drawn)
    fv.legend(
        fig,
        F,
        d,
        extra=[
            (Line2D([], [], ls="none", marker="|", ms=8, color="0.45"), "p95 of a highlighted run")
        ]
        if d.get("tick")
        else (),
    )
    kinds = (
        (
            " One panel per machine kind: a TCG guest's times are QEMU's emulation of the CPU, "
            "to be read within its panel."
        )
        if len(panels) > 1
        else ""
    )
    cap = caption_for(
        samples,
        mans,
        "Median cost of one call per mechanism, log scale; grey tick: p95"
        + ("" if not kinds else "; one panel per machine kind"),
        extra=F.marks_text(
            d, F.runs_text("the median of one dataset's batches"), panels=len(panels) > 1
        )
        + kinds,
    )
    return fig, fv.recaption(cap, mans, F)


def seed_comparison(D):
    """The seed's 2013 figures beside every host's median, per mechanism, log scale."""
    ref = D.reference("trace_overhead")
    seed = ref[ref.run == "uprobe-based event tracer"].set_index("mechanism").per_call_us * 1000
    stap = ref[ref.mechanism == "systemtap"].per_call_us.iloc[0] * 1000
    cats = [
        ("marker", "marker"),
        ("uprobe", "uprobe on ret"),
        ("bpf_uprobe", "systemtap (2013) / BPF"),
    ]
    med, F, samples, mans = _fleet_medians(D, [c for c, _ in cats])
    med = med.assign(pos=med.mechanism.map({c: i for i, (c, _) in enumerate(cats)}))
    fig, ax = plt.subplots(figsize=(8, 4.8), layout="constrained")
    drawn = fv.points(ax, F, med, "pos", "median", "ci_low", "ci_high", orient="v", width=0.5)
    fv.seed_mark(ax, [k - 0.38 for k in range(len(cats))], [seed["marker"], seed["uprobe"], stap])
    ax.set_xticks(range(len(cats)), [c for _, c in cats])
    ax.set_yscale("log")
    _log_ticks(ax, "y")
    ax.set_ylabel("ns per trace point")
    seed_label = "seed, 2013: one loop of 1000 calls, no interval, Linux 3.x"
    fv.legend(fig, F, drawn, seed=seed_label)
    cap = caption_for(
        samples,
        mans,
        "Nanoseconds per trace point, log scale: the seed's 2013 figures (one timed "
        "loop of 1000 calls each, no interval) beside every host's median with its CI within that run",
        extra=F.marks_text(
            drawn, F.runs_text("the median of one dataset's batches"), seed=seed_label
        ),
    )
    return fig, fv.recaption(cap, mans, F)


def published(D):
    """The kernel developers' published bare-metal benchmarks beside every host's runs, per
    variant, in ns per hit (1000 / the posted million hits per second), log scale: the runs of
    this host and of the reference host with their range, one point per other host."""
    pub = published_current(D)
    med, steps = run_medians(D), run_steps(D)
    F = fv.fleet(D, set(med.host_id.unique()))
    keep = fv.runs(D, F)
    rows = COMPARED
    frames = []
    for k, (mech, _, _) in enumerate(rows):
        if mech == "sstep":
            g = (
                steps[steps.key == "sstep"].rename(columns={"ns": "value"})
                if len(steps)
                else pd.DataFrame()
            )
        else:
            g = med[med.mechanism == mech].rename(columns={"median": "value"})
        if len(g):
            frames.append(fv.of_runs(g, keep)[["host_id", "run_id", "value"]].assign(pos=k))
    pts = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=["host_id", "run_id", "value", "pos"])
    )
    pts = pts[pts.value > 0]
    fig, ax = plt.subplots(figsize=(8, 0.55 * len(rows) + 2.4), layout="constrained")
    markers = ["s", "^", "v", "P", "X"]
    extra = []
    for j, p in enumerate(pub.to_dict("records")):
        ax.plot(
            [p[variant] for _, variant, _ in rows],
            [k - 0.38 for k in range(len(rows))],
            ls="none",
            marker=markers[j % len(markers)],
            mfc="none",
            mec="black",
            ms=7,
        )
        extra.append(
            (
                plt.Line2D(
                    [],
                    [],
                    ls="none",
                    marker=markers[j % len(markers)],
                    mfc="none",
                    mec="black",
                    ms=7,
                ),
                f"published: {p['machine']}, BPF counter",
            )
        )
    off = fv.highlight_offsets(F, 0.5)
    for h, role in F.highlighted:  # the range of a highlighted host's runs, behind its points
        for k, g in pts[pts.host_id == h].groupby("pos"):
            ax.plot(
                [g.value.min(), g.value.max()],
                [k + off[h]] * 2,
                color=fv.STYLE[role]["color"],
                lw=1.2,
                zorder=2,
            )
    drawn = fv.points(ax, F, pts, "pos", "value", orient="h", width=0.5, spread=0.0)
    ax.set_yticks(range(len(rows)), [label for _, _, label in rows])
    ax.set_ylim(len(rows) - 0.5, -0.6)
    ax.set_xscale("log")
    _log_ticks(ax)
    ax.set_xlabel("ns per hit (published: 1000 / posted M/s)")
    fv.legend(fig, F, drawn, extra=extra, ncol=2)
    caption = (
        f"Published bare-metal uprobe benchmarks ({len(pub)} machines, open markers; bpf selftests' "
        "run_bench_uprobes.sh, converted from million hits per second to ns per hit as 1000 / "
        "M/s; each consumer is a BPF program that increments a counter) beside the hosts that measured "
        "this chapter, log scale. Our rows other than the first record an ftrace event; the single step "
        "is a difference of two rows, so the consumer cancels out of it. "
        + F.marks_text(
            drawn,
            F.runs_text(
                "a run's median", "a point per counted run, joined by a line over their range"
            ),
        )
    )
    return fig, caption
