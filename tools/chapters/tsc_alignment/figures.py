"""The chapter's figures: D in, (figure, caption) out (tools.notebook.show displays them)."""
from __future__ import annotations

from . import analysis as A

VARIANT_ORDER = list(A.ORDER)


def bracket_caption(b, manifests, what: str, by=("host_id", "variant"), ci: bool = False,
                    extra: str = "") -> str:
    """Caption for a figure of bracket readings: readings per group, the warm-up readings
    excluded (per block, and whole warm-up rounds), and the hosts."""
    from ...stats import caption, hosts_of
    g = b.groupby(list(by))["warmup"]
    n = g.apply(lambda s: int((s == 0).sum())).to_numpy()
    wu = g.apply(lambda s: int((s != 0).sum())).to_numpy()
    hosts = hosts_of([m for m in manifests if m["host"]["host_id"] in set(b["host_id"])])
    return caption(what, n=n, unit="readings", warmup=wu, hosts=hosts, ci=ci, extra=extra)


def pingpong(D):
    """Every exchange's two bounds on the skew, per direction and host (every dataset)."""
    import pandas as pd
    import seaborn as sns
    from ...stats import caption, hosts_of
    pp = D["skew_pingpong"].copy()
    pp["exchange"] = pp["direction"].map({0: "A starts: bounds on d", 1: "B starts: bounds on -d"})
    long = pd.concat([pp.assign(bound="upper: t2 - t1", cycles=pp["t2_minus_t1"]),
                      pp.assign(bound="lower: t2 - t3", cycles=-pp["t3_minus_t2"])])
    lo_q, hi_q = long["cycles"].quantile([0.01, 0.99])
    shown = long[(long["cycles"] >= lo_q) & (long["cycles"] <= hi_q)]
    g = sns.displot(shown, x="cycles", hue="bound", col="exchange", row="host_id", kind="hist", binwidth=25,
                    element="step", height=3.2, aspect=1.4)
    for ax in g.axes.flat:
        ax.axvline(0, color="k", lw=0.8)
    g.figure.suptitle("Per-exchange bounds (1st-99th percentile shown); the skew lies right of every "
                      "lower and left of every upper value", y=1.04, fontsize=10)
    return g.figure, caption(
        "Cross-CPU ping-pong: the two bounds of every exchange, per direction and host",
        n=long.groupby(["host_id", "exchange", "bound"]).size().to_numpy(), unit="exchanges", warmup=0,
        hosts=hosts_of(D.manifests), ci=False,
        extra="The skew bound is the tightest pair of bounds over all exchanges, not a median, so no "
              "confidence interval applies; the number of exchanges is fixed (skew_rounds x skew_iters)")


def inside(D):
    """Every guest reading against its host bracket (shown datasets, one per host)."""
    import seaborn as sns
    bs = A.brackets(D, "shown")
    w = bs[bs["warmup"] == 0].copy()
    w["guest - host before (cycles)"] = w["entry"]
    g = sns.catplot(w, kind="strip", x="variant", y="guest - host before (cycles)", hue="cpu", col="host_id",
                    dodge=True, size=2, alpha=0.4, order=VARIANT_ORDER, height=3.8, aspect=1.6)
    for ax in g.axes.flat:
        ax.set_yscale("symlog", linthresh=1e4)
        ax.axhline(0, color="k", lw=0.8)
    g.figure.suptitle("Guest RDTSC minus the host read before KVM_RUN; inside the bracket means 0 < y < width",
                      y=1.03, fontsize=10)
    return g.figure, bracket_caption(bs, D.manifests,
                                     "Every guest reading against its host bracket, per offset variant, CPU and host")


def widths(D):
    """ECDF of the KVM_RUN round trip per offset variant and host (shown datasets)."""
    import seaborn as sns
    bs = A.brackets(D, "shown")
    g = sns.displot(bs[bs["warmup"] == 0], kind="ecdf", x="width", hue="variant", col="host_id", height=3.8,
                    aspect=1.6, hue_order=VARIANT_ORDER)
    for ax in g.axes.flat:
        ax.set_xscale("log")
        ax.set_xlabel("KVM_RUN bracket width: host TSC after - before (cycles)")
    g.figure.suptitle("One KVM_RUN -> I/O exit -> userspace round trip, per offset variant", y=1.03, fontsize=10)
    return g.figure, bracket_caption(bs, D.manifests,
                                     "Distribution (ECDF) of the KVM_RUN round trip per offset variant and host")


def timeline(D):
    """Host events, host reads and guest stamps of two KVM_RUN round trips on one TSC axis."""
    import matplotlib.pyplot as plt
    from ...stats import caption
    q = D.quoted
    tl = A.timeline(D)
    fig, ax = plt.subplots(figsize=(9, 4.6))
    lanes = {"host user": 0, "host kernel (ftrace)": 1, "guest": 2}
    colors = {"host user": "tab:blue", "host kernel (ftrace)": "tab:gray", "guest": "tab:red"}
    for r in tl.itertuples():
        y = lanes[r.source]
        ax.plot([r.t_cycles, r.t_cycles], [y - 0.3, y + 0.3], color=colors[r.source], lw=1.5)
        ax.annotate(r.what, (r.t_cycles, y + 0.32), rotation=60, fontsize=7, ha="left", va="bottom")
    ax.set_yticks(list(lanes.values()), list(lanes.keys()))
    ax.set_ylim(-0.6, 3.6)
    ax.set_xlabel("host TSC cycles since the first bracket's start")
    ax.set_title("Two KVM_RUN round trips on one TSC axis")
    return fig, caption(
        "Host kernel events, host reads and guest stamps of two KVM_RUN round trips on one TSC axis",
        n=2, unit="round trips", warmup=3, hosts=[(q.host_id, q.host["description"])], ci=False,
        extra=f"From the short traced run of dataset {q['run_id']}")
