"""The chapter's figures: D in, (figure, caption) out; one dataset per host (D.of_shown)."""
from __future__ import annotations

from . import analysis as A
from . import analysis_seed as S
from .spec import PCT_ORDER


def exceedance(D):
    """Fraction of round trips slower than x, per path, protocol, pinning and host."""
    import seaborn as sns
    runs, hist = D.of_shown(D["runs"]), D.of_shown(D["hist"])
    g = sns.relplot(data=A.ccdf(hist), x="latency_us", y="slower_than", hue="proto", style="pin",
                    col="path", row="host_id", kind="line", height=3.6, aspect=1.25, drawstyle="steps-post")
    g.set(xscale="log", yscale="log", xlabel="round-trip latency x (µs)", ylabel="fraction slower than x")
    g.fig.suptitle("RR latency exceedance per path (rrbench, every transaction)", y=1.03)
    return g.figure, A.caption_for(runs, D.manifests,
                                   "Fraction of round trips slower than x, per path, protocol, pinning and host "
                                   "(rrbench, every transaction of every run pooled per cell)")


def ladder(D):
    """Pooled P50 to P99.9 and the maximum, per path, pinning mode, protocol and host."""
    import seaborn as sns
    runs, hist = D.of_shown(D["runs"]), D.of_shown(D["hist"])
    ll = A.ladder_long(A.ladder(runs, hist))
    ll["path / pin"] = ll.path + " / " + ll.pin
    g = sns.catplot(data=ll, x="percentile", y="latency_us", hue="path / pin", col="proto", row="host_id",
                    kind="point", order=PCT_ORDER, dodge=0.35, height=3.6, aspect=1.2, errorbar=None,
                    markersize=4)
    g.set(yscale="log", ylabel="latency (µs)")
    g.fig.suptitle("Percentile ladder per path and pinning mode (rrbench, pooled over repetitions)", y=1.03)
    return g.figure, A.caption_for(runs, D.manifests, "Pooled P50 to P99.9 and the slowest single transaction, "
                                   "per path, pinning mode, protocol and host")


def seed_histogram(D):
    """The seed's printed histogram beside every host's rrbench transactions (loopback UDP, none)."""
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns
    vh = S.versus_seed_histogram(D.H, D.ref, D.quoted.host_id)
    frames = [vh.assign(who="seed 2013 (netperf -v 2)", fraction=vh.seed_fraction)]
    hist = D["hist"]
    for h, r in D.shown.items():
        v = S.versus_seed_histogram(hist[(hist.host_id == h) & (hist.run_id == r)], D.ref, h)
        frames.append(v.assign(who=f"{h} (rrbench)", fraction=v.ours_fraction))
    long = pd.concat(frames, ignore_index=True)[["bucket", "who", "fraction"]]
    fig, ax = plt.subplots()
    sns.barplot(data=long, x="bucket", y="fraction", hue="who", ax=ax)
    ax.set(yscale="log", ylim=(1e-6, 1.5), xlabel="bucket of the seed's printed histogram (µs)",
           ylabel="fraction of transactions", title="loopback UDP RR: the seed vs each host")
    ax.tick_params(axis="x", rotation=60)
    lo_udp = D.of_shown(D["runs"])
    lo_udp = lo_udp[(lo_udp.path == "loopback") & (lo_udp.proto == "udp") & (lo_udp.pin == "none")]
    return fig, A.caption_for(lo_udp, D.manifests,
                              "Share of loopback UDP round trips (no pinning) per bucket of the seed's histogram: "
                              "the seed's one netperf run of 2013 beside every host's rrbench transactions")
