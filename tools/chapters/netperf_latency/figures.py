"""The chapter's figures: D in, (figure, caption) out; one dataset per host (D.of_shown)."""
from __future__ import annotations

from ...machine import legend
from . import analysis as A
from . import analysis_seed as S
from .spec import PCT_ORDER


def host_labels(D) -> dict[str, str]:
    """host_id -> 'h-... (KVM guest)', 'h-... (TCG guest)': the host's kind from its newest manifest."""
    return {m.host_id: legend(m.host) for m in sorted(D.manifests, key=lambda m: m["run_id"])}


def _with_host(df, D):
    return df.assign(host=df["host_id"].map(host_labels(D)))


def exceedance(D):
    """Fraction of round trips slower than x, per path, protocol, pinning and host."""
    import seaborn as sns
    runs, hist = D.of_shown(D["runs"]), D.of_shown(D["hist"])
    g = sns.relplot(data=_with_host(A.ccdf(hist), D), x="latency_us", y="slower_than", hue="proto", style="pin",
                    col="path", row="host", kind="line", height=3.6, aspect=1.25, drawstyle="steps-post")
    g.set(xscale="log", yscale="log", xlabel="round-trip latency x (µs)", ylabel="fraction slower than x")
    g.set_titles(template="{row_name}: {col_name}")
    g.fig.suptitle("RR latency exceedance per path (rrbench, every transaction)", y=1.03)
    return g.figure, A.caption_for(runs, D.manifests,
                                   "Fraction of round trips slower than x, per path, protocol, pinning and host "
                                   "(rrbench, every transaction of every run pooled per cell)")


def ladder(D):
    """Pooled P50 to P99.9 and the maximum, per path, pinning mode, protocol and host."""
    import seaborn as sns
    runs, hist = D.of_shown(D["runs"]), D.of_shown(D["hist"])
    ll = _with_host(A.ladder_long(A.ladder(runs, hist)), D)
    ll["path / pin"] = ll.path + " / " + ll.pin
    g = sns.catplot(data=ll, x="percentile", y="latency_us", hue="path / pin", col="proto", row="host",
                    kind="point", order=PCT_ORDER, dodge=0.35, height=3.6, aspect=1.2, errorbar=None,
                    markersize=4)
    g.set(yscale="log", ylabel="latency (µs)")
    g.set_titles(template="{row_name}: {col_name}")
    g.fig.suptitle("Percentile ladder per path and pinning mode (rrbench, pooled over repetitions)", y=1.03)
    return g.figure, A.caption_for(runs, D.manifests, "Pooled P50 to P99.9 and the slowest single transaction, "
                                   "per path, pinning mode, protocol and host")


def seed_histogram(D):
    """The seed's printed histogram beside every host's rrbench transactions (loopback UDP, none):
    the share per bucket as points on a log axis, buckets in numeric order; an empty bucket
    has no point (a log axis has no zero)."""
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd
    vh = S.versus_seed_histogram(D.H, D.ref, D.quoted.host_id)
    series = [("seed 2013 (netperf -v 2, one run)", vh.assign(fraction=vh.seed_fraction))]
    hist, labels = D["hist"], host_labels(D)
    for h, r in D.shown.items():
        v = S.versus_seed_histogram(hist[(hist.host_id == h) & (hist.run_id == r)], D.ref, h)
        series.append((f"{labels[h]}, rrbench", v.assign(fraction=v.ours_fraction)))
    buckets = pd.concat([v[v.fraction > 0][["bucket", "lo_us"]] for _, v in series]).drop_duplicates("bucket")
    order = list(buckets.sort_values("lo_us").bucket)
    pos = {b: i for i, b in enumerate(order)}
    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    offsets = np.linspace(-0.22, 0.22, len(series)) if len(series) > 1 else [0.0]
    for (label, v), off, mk in zip(series, offsets, "osD^v<>"):
        v = v[v.fraction > 0]
        ax.plot([pos[b] + off for b in v.bucket], v.fraction, marker=mk, linestyle="none", markersize=5,
                label=label)
    ax.set_xticks(range(len(order)), order, rotation=60, ha="right")
    ax.set(yscale="log", xlim=(-0.6, len(order) - 0.4), xlabel="bucket of the seed's printed histogram (µs)",
           ylabel="fraction of transactions", title="loopback UDP RR, no pinning: the seed vs each host")
    ax.grid(axis="y", which="major", alpha=0.3)
    fig.tight_layout(rect=(0, 0.17, 1, 1))
    fig.legend(loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=1, frameon=False)
    lo_udp = D.of_shown(D["runs"])
    lo_udp = lo_udp[(lo_udp.path == "loopback") & (lo_udp.proto == "udp") & (lo_udp.pin == "none")]
    return fig, A.caption_for(lo_udp, D.manifests,
                              "Share of loopback UDP round trips (no pinning) per bucket of the seed's histogram, "
                              "buckets in numeric order (10 µs wide below 100 µs, 100 µs below 1 ms, then 1 ms), "
                              "log scale; a bucket with no transaction has no point. The seed's one netperf run "
                              "of 2013 beside every host's rrbench transactions")
