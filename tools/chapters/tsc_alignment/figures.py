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


def _pct(q: float) -> str:
    """0.01 -> '1st', 0.995 -> '99.5th'."""
    v = f"{q * 100:g}"
    return v + ({"1": "st", "2": "nd", "3": "rd"}.get(v[-1], "th") if not v.endswith(("11", "12", "13")) else "th")


def _labels(D) -> dict:
    """host_id -> legend label with the host's kind, e.g. 'h-61b2186b600e (TCG guest)'."""
    from ...machine import legend
    return {m.host_id: legend(m["host"]) for m in sorted(D.manifests, key=lambda m: m["run_id"])}


def pingpong(D, q=(0.01, 0.99)):
    """Every exchange's two bounds on the skew, per direction and host (the shown dataset of each
    host): one row of panels per host, each panel with its own y axis (the hosts' exchange counts
    differ), the x axis clipped to each host's q-quantile range, the tightest bounds shaded."""
    import matplotlib.pyplot as plt
    import numpy as np
    from ...stats import caption, hosts_of
    pp = D.of_shown(D["skew_pingpong"])
    names = _labels(D)
    hosts = [h for h in names if h in set(pp["host_id"])]
    sb = A.skew_bounds(pp)
    sb = sb[sb["round"] == "all"]
    fig, axes = plt.subplots(len(hosts), 2, figsize=(9, 2.9 * len(hosts) + 0.6), squeeze=False,
                             sharex="row", layout="constrained")
    exchanges = {0: "A starts: bounds on d", 1: "B starts: bounds on -d"}
    for i, h in enumerate(hosts):
        ph = pp[pp["host_id"] == h]
        vals = np.concatenate([ph["t2_minus_t1"], -ph["t3_minus_t2"]])
        lo_q, hi_q = np.quantile(vals, q)
        bins = np.arange(np.floor(lo_q / 25) * 25, hi_q + 25, 25)
        s = sb[sb["host_id"] == h]
        for j, (direction, title) in enumerate(exchanges.items()):
            ax, d = axes[i, j], ph[ph["direction"] == direction]
            ax.hist(d["t2_minus_t1"].clip(upper=hi_q + 1), bins=bins, histtype="step", lw=1.4,
                    color="tab:blue", label="upper bound: t2 - t1")
            ax.hist((-d["t3_minus_t2"]).clip(lower=lo_q - 1), bins=bins, histtype="step", lw=1.4,
                    color="tab:orange", label="lower bound: t2 - t3")
            ax.axvline(0, color="k", lw=0.8)
            sign = 1 if direction == 0 else -1     # direction 1 bounds -d
            ax.axvspan(min(sign * s["lo"].max(), sign * s["hi"].min()),
                       max(sign * s["lo"].max(), sign * s["hi"].min()) + 0.5, color="tab:green", alpha=0.3,
                       label="tightest bounds over all exchanges" if i == j == 0 else None)
            blo, bhi = sorted((sign * int(s["lo"].max()), sign * int(s["hi"].min())))
            ax.text(0.02, 0.95, f"tightest: {blo:+,} to {bhi:+,}", transform=ax.transAxes, fontsize=8,
                    va="top", bbox=dict(facecolor="white", alpha=0.8, lw=0))
            ax.set_xlim(lo_q, hi_q)
            ax.set_title(f"{names[h]}\n{title}", fontsize=9)
            ax.set_ylabel("exchanges per 25-cycle bin" if j == 0 else "")
            ax.set_xlabel("cycles" if i == len(hosts) - 1 else "")
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="outside lower center", ncol=3, frameon=False,
               fontsize="small")
    per_host = ", ".join(f"{2 * int((pp['host_id'] == h).sum()):,}" for h in hosts)
    return fig, caption(
        "Cross-CPU ping-pong: the two bounds of every exchange, per direction and host",
        n=pp.groupby(["host_id", "direction"]).size().to_numpy(), unit="exchanges", warmup=0,
        hosts=hosts_of(D.manifests), ci=False,
        extra=f"Each panel has its own y axis (the hosts ran different numbers of exchanges), and its x axis "
              f"shows the {_pct(q[0])} to {_pct(q[1])} percentile of that host's bounds ({per_host}) "
              "(values beyond are counted in the outermost bin). One dataset per host (the newest real-profile "
              "run). The skew lies right of every lower and left of every upper value; the shaded band is the "
              "tightest pair over all exchanges, not a median, so no confidence interval applies; the number of exchanges is fixed "
              "(skew_rounds x skew_iters)")


def inside(D):
    """Every guest reading against its host bracket (shown datasets, one per host)."""
    import seaborn as sns
    bs = A.brackets(D, "shown")
    w = bs[bs["warmup"] == 0].copy()
    w["guest - host before (cycles)"] = w["entry"]
    w["host"] = w["host_id"].map(_labels(D))
    g = sns.catplot(w, kind="strip", x="variant", y="guest - host before (cycles)", hue="cpu", col="host",
                    dodge=True, size=2, alpha=0.4, order=VARIANT_ORDER, height=3.8, aspect=1.6)
    for ax in g.axes.flat:
        ax.set_yscale("symlog", linthresh=1e4)
        ax.axhline(0, color="k", lw=0.8)
    g.set_titles("{col_name}", size=9)
    g.figure.suptitle("Guest RDTSC minus the host read before KVM_RUN; inside the bracket means 0 < y < width",
                      y=1.03, fontsize=10)
    return g.figure, bracket_caption(bs, D.manifests,
                                     "Every guest reading against its host bracket, per offset variant, CPU and host")


def widths(D, q=(0.005, 0.99)):
    """ECDF of the KVM_RUN round trip per offset variant and host (shown datasets), the x axis
    clipped to each host's q-quantile range (a tail of a few slow round trips would otherwise
    press the curves against the left edge)."""
    import matplotlib.pyplot as plt
    import numpy as np
    bs = A.brackets(D, "shown")
    w = bs[bs["warmup"] == 0]
    names = _labels(D)
    hosts = [h for h in names if h in set(w["host_id"])]
    fig, axes = plt.subplots(1, len(hosts), figsize=(8, 4.4), squeeze=False, layout="constrained")
    clipped = []
    for ax, h in zip(axes[0], hosts):
        wh = w[w["host_id"] == h]
        lo, hi = np.quantile(wh["width"], q)
        for v in VARIANT_ORDER:
            x = np.sort(wh[wh["variant"] == v]["width"].to_numpy())
            if len(x):
                ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", lw=1.3, label=v)
        ax.set_xlim(lo, hi)
        ax.set_ylim(0, 1.01)
        ax.set_title(names[h], fontsize=9)
        ax.set_xlabel("KVM_RUN bracket width: host TSC after - before (cycles)")
        ax.set_ylabel("share of readings at or below")
        clipped.append(f"{names[h]}: {lo:,.0f} to {hi:,.0f} cycles shown, {wh['width'].min():,.0f} to "
                       f"{wh['width'].max():,.0f} measured")
    fig.legend(*axes[0, 0].get_legend_handles_labels(), title="offset variant", loc="outside lower center",
               ncol=len(VARIANT_ORDER), frameon=False, fontsize="small")
    fig.suptitle("One KVM_RUN -> I/O exit -> userspace round trip, per offset variant", fontsize=10)
    return fig, bracket_caption(
        bs, D.manifests, "Distribution (ECDF) of the KVM_RUN round trip per offset variant and host",
        extra=f"Linear x axis, clipped to the {_pct(q[0])} to {_pct(q[1])} percentile of each host's "
              f"readings ({'; '.join(clipped)}); the curves reach 1 beyond the right edge, and the table above "
              "gives p99 and the maximum")


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
