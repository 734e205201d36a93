"""trace_overhead: the figures (frames in, (figure, caption) out)."""
from __future__ import annotations

from .analysis import caption_for, comparison, host_labels, summary_table
from .spec import MECHANISMS


def costs(D):
    """Median cost per call and its CI, per mechanism and dataset, log scale."""
    import matplotlib.pyplot as plt
    summary, labels = summary_table(D["samples"]), host_labels(D.manifests)
    order = [m for m in MECHANISMS if m in set(summary.mechanism)]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(order) + 1.2))
    hosts = sorted(summary.dataset.unique())  # one row of points per dataset
    for i, h in enumerate(hosts):
        g = summary[summary.dataset == h].set_index("mechanism").reindex(order)
        y = [k + (i - (len(hosts) - 1) / 2) * 0.25 for k in range(len(order))]
        ax.errorbar(g["median"], y, xerr=[g["median"] - g.ci_low, g.ci_high - g["median"]],
                    fmt="o", capsize=3, label=labels.get(h, h))
        ax.scatter(g["p95"], y, marker="|", s=120, color="grey")
    ax.set_yticks(range(len(order)), order)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("ns per call (median, 95 % CI; grey tick: p95)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.4, -0.12 - 0.6 / len(order)), fontsize="small")
    fig.tight_layout()
    return fig, caption_for(D["samples"], D.manifests, "Median cost of one call per mechanism and "
                            "dataset, log scale; grey tick: p95")


def seed_comparison(D):
    """The seed's 2013 figures beside the median of every dataset, per mechanism."""
    import seaborn as sns
    samples = D["samples"]
    comp = comparison(summary_table(samples), D.reference("trace_overhead"), D.manifests)
    g = sns.catplot(data=comp, kind="bar", x="mechanism", y="per_call_us", hue="source",
                    order=["marker", "uprobe", "systemtap / BPF"], height=4, aspect=1.9)
    g.set_axis_labels("", "µs per trace point")
    sns.move_legend(g, "upper center", bbox_to_anchor=(0.45, 0.0), frameon=False, fontsize="small",
                    ncol=1, title=None)
    return g.figure, caption_for(
        samples[samples.mechanism.isin(["marker", "uprobe", "bpf_uprobe"])], D.manifests,
        "Microseconds per trace point: the seed's 2013 figures (one timed loop of 1000 calls each) beside "
        "the median of every dataset", ci=False)
