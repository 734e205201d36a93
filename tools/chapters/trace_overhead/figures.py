"""trace_overhead: the figures (frames in, (figure, caption) out)."""
from __future__ import annotations

from .analysis import (COMPARED, caption_for, dataset_key, host_label, host_runs, published_current,
                       run_medians, run_steps, summary_table)
from .spec import MECHANISMS


def dataset_labels(D) -> dict[str, str]:
    """'host/run' -> how a legend names it: the host's id and kind (TCG named as such), the run."""
    from ...machine import legend
    return {dataset_key(m): f"{legend(m['host'])}, run {m['run_id']}" for m in D.manifests}


def _log_ticks(ax, axis="x"):
    """Readable ticks on a log axis: every decade written out (1, 10, 100, 1,000, ...), plus 2 and 5
    within each decade where the axis spans about two decades, or 3 where it spans about three."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    a = ax.xaxis if axis == "x" else ax.yaxis
    lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
    span = hi / lo
    subs = (1.0, 2.0, 5.0) if span <= 150 else (1.0, 3.0) if span <= 1500 else (1.0,)
    a.set_major_locator(LogLocator(base=10, subs=subs))
    a.set_minor_locator(LogLocator(base=10, subs=tuple(k for k in (2.0, 3.0, 5.0) if k not in subs)))
    a.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    a.set_minor_formatter(NullFormatter())


def _legend_below(fig, ax, ncol=1):
    """The legend under the plot, outside it, so it never narrows the axes."""
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=ncol, fontsize="small", frameon=False)


def costs(D):
    """Median cost per call and its CI, per mechanism and dataset, log scale."""
    import matplotlib.pyplot as plt
    summary, labels = summary_table(D["samples"]), dataset_labels(D)
    order = [m for m in MECHANISMS if m in set(summary.mechanism)]
    hosts = sorted(summary.dataset.unique())  # one row of points per dataset
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(order) + 1.4 + 0.2 * len(hosts)),
                           layout="constrained")
    for i, h in enumerate(hosts):
        g = summary[summary.dataset == h].set_index("mechanism").reindex(order)
        y = [k + (i - (len(hosts) - 1) / 2) * 0.7 / max(len(hosts), 1) for k in range(len(order))]
        ax.errorbar(g["median"], y, xerr=[g["median"] - g.ci_low, g.ci_high - g["median"]],
                    fmt="o", ms=4, capsize=2, label=labels.get(h, h))
        ax.scatter(g["p95"], y, marker="|", s=60, color="grey")
    ax.set_yticks(range(len(order)), order)
    ax.invert_yaxis()
    ax.set_xscale("log")
    _log_ticks(ax)
    ax.set_xlabel("ns per call (median, 95 % CI within the run; grey tick: p95)")
    _legend_below(fig, ax)
    return fig, caption_for(D["samples"], D.manifests, "Median cost of one call per mechanism and "
                            "dataset, log scale; grey tick: p95. Each run of a host is its own row of "
                            "points, so the distance between a host's rows is its run-to-run spread")


def seed_comparison(D):
    """The seed's 2013 figures beside the median of every dataset, per mechanism, log scale."""
    import matplotlib.pyplot as plt
    samples = D["samples"]
    ref = D.reference("trace_overhead")
    seed = ref[ref.run == "uprobe-based event tracer"].set_index("mechanism").per_call_us * 1000
    stap = ref[ref.mechanism == "systemtap"].per_call_us.iloc[0] * 1000
    cats = [("marker", "marker"), ("uprobe", "uprobe on ret"), ("bpf_uprobe", "systemtap (2013) / BPF")]
    summary, labels = summary_table(samples), dataset_labels(D)
    sets = sorted(summary.dataset.unique())
    fig, ax = plt.subplots(figsize=(8, 4.0 + 0.2 * (len(sets) + 1)), layout="constrained")
    width = 0.7 / (len(sets) + 1)
    x0 = [k - 0.35 + width / 2 for k in range(len(cats))]
    ax.scatter(x0, [seed["marker"], seed["uprobe"], stap], marker="D", s=40, color="black",
               label="seed, 2013 (one loop of 1000 calls, no interval), Linux 3.x")
    for i, ds in enumerate(sets):
        g = summary[summary.dataset == ds].set_index("mechanism").reindex([c for c, _ in cats])
        x = [v + (i + 1) * width for v in x0]
        ax.errorbar(x, g["median"], yerr=[g["median"] - g.ci_low, g.ci_high - g["median"]],
                    fmt="o", ms=4, capsize=2, label=labels.get(ds, ds))
    ax.set_xticks(range(len(cats)), [c for _, c in cats])
    ax.set_yscale("log")
    _log_ticks(ax, "y")
    ax.set_ylabel("ns per trace point")
    _legend_below(fig, ax)
    return fig, caption_for(
        samples[samples.mechanism.isin(["marker", "uprobe", "bpf_uprobe"])], D.manifests,
        "Nanoseconds per trace point, log scale: the seed's 2013 figures (one timed loop of 1000 calls "
        "each, no interval) beside the median of every dataset with its 95 % CI within that run")


def published(D):
    """The kernel developers' published bare-metal benchmarks beside every host's runs, per
    variant, in ns per hit (1000 / the posted million hits per second), log scale."""
    import matplotlib.pyplot as plt
    pub = published_current(D)
    med, steps = run_medians(D), run_steps(D)
    rows = COMPARED
    fig, ax = plt.subplots(figsize=(8, 0.55 * len(rows) + 1.6 + 0.2 * (len(pub) + len(D.hosts))), layout="constrained")
    markers = ["D", "s", "^", "v", "P"]
    for j, p in enumerate(pub.to_dict("records")):
        y = [k - 0.3 for k in range(len(rows))]
        ax.scatter([p[variant] for _, variant, _ in rows], y, marker=markers[j % len(markers)],
                   facecolors="none", edgecolors="black", s=40,
                   label=f"published: {p['machine']}, BPF counter")
    for i, h in enumerate(D.hosts):
        runs = [m.run_id for m in host_runs(D, h)]
        y0 = 0.3 * (i + 1) / max(len(D.hosts), 1) - 0.15
        for k, (mech, _, _) in enumerate(rows):
            if mech == "sstep":
                g = steps[(steps.host_id == h) & steps.run_id.isin(runs) & (steps.key == "sstep")]
                vals = list(g.ns)
            else:
                g = med[(med.host_id == h) & med.run_id.isin(runs) & (med.mechanism == mech)]
                vals = list(g["median"])
            vals = [v for v in vals if v == v]
            if not vals:
                continue
            line = ax.plot([min(vals), max(vals)], [k + y0] * 2, color=f"C{i}", lw=1.5)[0]
            ax.scatter(vals, [k + y0] * len(vals), color=f"C{i}", s=18, zorder=3,
                       label=f"{host_label(D, h)}: each run's median, line: their range"
                       if k == 0 else None)
            line.set_label(None)
    ax.set_yticks(range(len(rows)), [label for _, _, label in rows])
    ax.invert_yaxis()
    ax.set_xscale("log")
    _log_ticks(ax)
    ax.set_xlabel("ns per hit (published: 1000 / posted M/s)")
    _legend_below(fig, ax)
    caption = (f"Published bare-metal uprobe benchmarks ({len(pub)} machines, bpf selftests' "
               "run_bench_uprobes.sh, converted from million hits per second to ns per hit as 1000 / "
               "M/s; each consumer is a BPF program that increments a counter) beside each run of every "
               "host that measured this chapter, log scale. Our rows other than the first record an ftrace "
               "event; the single step is a difference of two rows, so the consumer cancels out of it")
    return fig, caption
