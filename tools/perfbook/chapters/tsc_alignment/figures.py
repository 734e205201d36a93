"""The chapter's figures: D in, (figure, caption) out (perfbook.book.notebook.show displays them)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch

from perfbook.analysis import fleetview as fv
from perfbook.analysis.fleetview import strip
from perfbook.analysis.stats import caption, ci_label, summarize_frame

from . import analysis as A

VARIANT_ORDER = list(A.ORDER)


def bracket_caption(
    b, F, what: str, by=("host_id", "variant"), ci: bool = False, extra: str = ""
) -> str:
    """Caption for a figure of bracket readings: readings per group, the warm-up readings
    excluded (per block, and whole warm-up rounds), and the hosts (perfbook.analysis.fleetview: the
    highlighted ones, then the others as a count)."""
    g = b.groupby(list(by))["warmup"]
    n = g.apply(lambda s: int((s == 0).sum())).to_numpy()
    wu = g.apply(lambda s: int((s != 0).sum())).to_numpy()
    return caption(
        what,
        n=n,
        unit="readings",
        warmup=wu,
        hosts=F.within(set(b["host_id"].unique())).caption_hosts(),
        ci=ci,
        extra=extra,
    )


def _pct(q: float) -> str:
    """0.01 -> '1st', 0.995 -> '99.5th'."""
    v = f"{q * 100:g}"
    return v + (
        {"1": "st", "2": "nd", "3": "rd"}.get(v[-1], "th")
        if not v.endswith(("11", "12", "13"))
        else "th"
    )


def _rows(F, hosts) -> list[tuple[str, str]]:
    """(host_id, 'this host') of the highlighted hosts that have data here."""
    have = set(hosts.unique())
    return [(h, F.title(role)) for h, role in F.highlighted if h in have]


def pingpong(D, q=(0.01, 0.99)):
    """Cross-CPU ping-pong. Top: every exchange's two bounds on the skew, per direction, for this
    host (and the reference host), each panel with its own y axis, the x axis clipped to the
    host's q-quantile range, the tightest bounds shaded. Bottom: every host's tightest bounds,
    hosts ranked, one panel per machine kind (a TCG guest's TSC is QEMU's)."""
    pp = D.of_shown(D["skew_pingpong"])
    F = fv.fleet(D, set(pp["host_id"].unique()))
    rows = _rows(F, pp["host_id"])
    sb = A.skew_bounds(pp)
    sb = sb[sb["round"] == "all"]
    panels = fv.facets(F, "kind")
    fig = plt.figure(figsize=(9.5, 2.9 * len(rows) + 3.6), layout="constrained")
    top, bottom = (
        fig.subfigures(2, 1, height_ratios=[2.9 * max(len(rows), 0.01), 3.3])
        if rows
        else (None, fig)
    )
    exchanges = {0: "A starts: bounds on d", 1: "B starts: bounds on -d"}
    axes = top.subplots(len(rows), 2, squeeze=False, sharex="row") if rows else np.empty((0, 2))
    for i, (h, name) in enumerate(rows):
        ph = pp[pp["host_id"] == h]
        vals = np.concatenate([ph["t2_minus_t1"], -ph["t3_minus_t2"]])
        lo_q, hi_q = np.quantile(vals, q)
        bins = np.arange(np.floor(lo_q / 25) * 25, hi_q + 25, 25)
        s = sb[sb["host_id"] == h]
        for j, (direction, title) in enumerate(exchanges.items()):
            ax, d = axes[i, j], ph[ph["direction"] == direction]
            ax.hist(
                d["t2_minus_t1"].clip(upper=hi_q + 1),
                bins=bins,
                histtype="step",
                lw=1.4,
                color="tab:blue",
            )
            ax.hist(
                (-d["t3_minus_t2"]).clip(lower=lo_q - 1),
                bins=bins,
                histtype="step",
                lw=1.4,
                color="tab:orange",
            )
            ax.axvline(0, color="k", lw=0.8)
            sign = 1 if direction == 0 else -1  # direction 1 bounds -d
            ax.axvspan(
                min(sign * s["lo"].max(), sign * s["hi"].min()),
                max(sign * s["lo"].max(), sign * s["hi"].min()) + 0.5,
                color="tab:green",
                alpha=0.3,
            )
            blo, bhi = sorted((sign * int(s["lo"].max()), sign * int(s["hi"].min())))
            ax.text(
                0.02,
                0.95,
                f"tightest: {blo:+,} to {bhi:+,}",
                transform=ax.transAxes,
                fontsize=8,
                va="top",
                bbox=dict(facecolor="white", alpha=0.8, lw=0),
            )
            ax.set_xlim(lo_q, hi_q)
            ax.set_title(f"{name}\n{title}", fontsize=9)
            ax.set_ylabel("exchanges per 25-cycle bin" if j == 0 else "")
            ax.set_xlabel("cycles" if i == len(rows) - 1 else "")
    baxes = bottom.subplots(1, len(panels), squeeze=False, sharey=True)
    mid = sb.assign(mid=(sb["lo"] + sb["hi"]) / 2)
    drawn = []
    for ax, (title, Fk) in zip(baxes[0], panels):
        drawn.append(fv.ranked(ax, Fk, mid, "mid", "lo", "hi"))
        ax.axhline(0, color="k", lw=0.8)
        ax.set_yscale("symlog", linthresh=100)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("hosts, ranked by the middle of their bounds", fontsize=8)
    baxes[0, 0].set_ylabel("skew d: tightest bounds\n(cycles, symlog)", fontsize=9)
    hist_handles = (
        [
            (plt.Line2D([], [], color="tab:blue", lw=1.4), "upper bound: t2 - t1"),
            (plt.Line2D([], [], color="tab:orange", lw=1.4), "lower bound: t2 - t3"),
            (Patch(color="tab:green", alpha=0.3), "tightest bounds over all exchanges"),
        ]
        if rows
        else []
    )
    d = fv.merge(*drawn)
    fv.legend(fig, F, d, extra=hist_handles, ncol=3)
    clip = ", ".join(f"{2 * int((pp['host_id'] == h).sum()):,}" for h, _ in rows)
    return fig, caption(
        "Cross-CPU ping-pong: the two bounds of every exchange, per direction, for the highlighted hosts (top), "
        "and every host's tightest bounds on the skew (bottom)",
        n=pp.groupby(["host_id", "direction"]).size().to_numpy(),
        unit="exchanges",
        warmup=0,
        hosts=F.caption_hosts(),
        ci=False,
        extra=f"Top: each panel has its own y axis, and its x axis shows the {_pct(q[0])} to {_pct(q[1])} percentile "
        f"of that host's bounds ({clip} bounds) (values beyond are counted in the outermost bin); the skew "
        "lies right of every lower and left of every upper value; the shaded band is the tightest pair over "
        "all exchanges, not a median, so no confidence interval applies. Bottom: one bar per host from its "
        "tightest lower to its tightest upper bound, the point at their middle, hosts ranked by it, one panel "
        "per machine kind (a TCG guest's TSC is QEMU's count); a bar that crosses 0 is consistent with "
        "synchronised TSCs. One dataset per host (the newest real-profile run); the number of exchanges "
        "is fixed (skew_rounds x skew_iters). " + F.marks_text(d, "", panels=len(panels) > 1),
    )


# colours of a chapter's own categories, none of them a host role's (red, blue, grey)
OWN_COLOURS = ("C2", "C1", "C4", "C5", "C8", "C9", "C6")


def _strip(ax, w, title):
    """One host's guest readings against its bracket, per variant and CPU (seaborn strip);
    returns the legend's (handle, label) pairs of the CPUs."""
    cpus = sorted(set(w["cpu"].unique()))
    pal = {c: OWN_COLOURS[i % len(OWN_COLOURS)] for i, c in enumerate(cpus)}
    strip(
        data=w,
        x="variant",
        y="entry",
        hue="cpu",
        dodge=True,
        size=2,
        alpha=0.4,
        order=VARIANT_ORDER,
        hue_order=cpus,
        palette=pal,
        ax=ax,
        legend=False,
    )
    ax.set_yscale("symlog", linthresh=1e4)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_title(title, fontsize=9)
    ax.set_ylabel("guest - host before (cycles)")
    return [
        (plt.Line2D([], [], ls="none", marker="o", ms=5, color=pal[c]), f"CPU {c}") for c in cpus
    ]


def inside(D):
    """Every guest reading against its host bracket for this host (and the reference host), and
    the share of readings inside the bracket per variant over the hosts (shown datasets)."""
    bs = A.brackets(D, "shown")
    w = bs[bs["warmup"] == 0]
    F = fv.fleet(D, set(w["host_id"].unique()))
    rows = _rows(F, w["host_id"])
    fig, axes = plt.subplots(
        1, len(rows) + 1, figsize=(5.2 * (len(rows) + 1), 4.4), squeeze=False, layout="constrained"
    )
    cpus = []
    for ax, (h, name) in zip(axes[0], rows):
        cpus = _strip(ax, w[w["host_id"] == h], name) or cpus
    share = (
        w.groupby(["host_id", "variant"])["inside"]
        .mean()
        .mul(100)
        .rename("inside_pct")
        .reset_index()
    )
    share = share.assign(pos=share["variant"].map({v: i for i, v in enumerate(VARIANT_ORDER)}))
    ax = axes[0, -1]
    drawn = fv.points(ax, F, share, "pos", "inside_pct")
    ax.set_xticks(range(len(VARIANT_ORDER)), VARIANT_ORDER)
    ax.set_ylim(-3, 103)
    ax.set_ylabel("readings inside the bracket (%)")
    ax.set_title(f"every host (n = {len(F.hosts)}): share inside, per variant", fontsize=9)
    fig.suptitle(
        "Guest RDTSC minus the host read before KVM_RUN; inside the bracket means 0 < y < width",
        fontsize=10,
    )
    fv.legend(fig, F, drawn, extra=cpus, ncol=3)
    return fig, bracket_caption(
        bs,
        F,
        "Every guest reading against its host bracket, per offset variant and CPU, for the highlighted "
        "hosts (left), and each host's share of readings inside the bracket per variant (right)",
        extra="The shares are exact counts over each host's readings, so no interval applies. "
        + F.marks_text(drawn, "a host's share of readings inside its bracket"),
    )


def widths(D, q=(0.005, 0.99)):
    """ECDF of the KVM_RUN round trip per offset variant for this host (and the reference host),
    the x axis clipped to the host's q-quantile range; and every host's median round trip per
    variant with its interval (shown datasets)."""
    bs = A.brackets(D, "shown")
    w = bs[bs["warmup"] == 0]
    F = fv.fleet(D, set(w["host_id"].unique()))
    rows = _rows(F, w["host_id"])
    fig, axes = plt.subplots(
        1,
        len(rows) + 1,
        figsize=(4.6 * (len(rows) + 1) + 0.6, 4.6),
        squeeze=False,
        layout="constrained",
    )
    clipped, variants = [], []
    for ax, (h, name) in zip(axes[0], rows):
        wh = w[w["host_id"] == h]
        lo, hi = np.quantile(wh["width"], q)
        for k, v in enumerate(VARIANT_ORDER):
            x = np.sort(wh[wh["variant"] == v]["width"].to_numpy())
            if len(x):
                ax.step(
                    x,
                    np.arange(1, len(x) + 1) / len(x),
                    where="post",
                    lw=1.3,
                    color=OWN_COLOURS[k % len(OWN_COLOURS)],
                )
        ax.set_xlim(lo, hi)
        ax.set_ylim(0, 1.01)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("KVM_RUN bracket width: host TSC\nafter - before (cycles)")
        ax.set_ylabel("share of readings at or below")
        clipped.append(
            f"{h}: {lo:,.0f} to {hi:,.0f} cycles shown, {wh['width'].min():,.0f} to "
            f"{wh['width'].max():,.0f} measured"
        )
    if rows:
        variants = [
            (plt.Line2D([], [], color=OWN_COLOURS[k % len(OWN_COLOURS)], lw=1.3), f"variant {v}")
            for k, v in enumerate(VARIANT_ORDER)
        ]
    med = summarize_frame(w, ["host_id", "variant"], "width")
    med = med.assign(pos=med["variant"].map({v: i for i, v in enumerate(VARIANT_ORDER)}))
    ax = axes[0, -1]
    drawn = fv.points(ax, F, med, "pos", "median", "ci_low", "ci_high")
    ax.set_xticks(range(len(VARIANT_ORDER)), VARIANT_ORDER)
    ax.set_ylabel(f"median bracket width (cycles, {ci_label(med['n'])})")
    ax.set_title(f"every host (n = {len(F.hosts)}): median per variant", fontsize=9)
    fig.suptitle("One KVM_RUN -> I/O exit -> userspace round trip, per offset variant", fontsize=10)
    fv.legend(fig, F, drawn, extra=variants, ncol=4)
    return fig, bracket_caption(
        bs,
        F,
        "Distribution (ECDF) of the KVM_RUN round trip per offset variant for the highlighted hosts (left), "
        "and each host's median round trip per variant (right)",
        ci=True,
        extra=(
            f"Left: linear x axis, clipped to the {_pct(q[0])} to {_pct(q[1])} percentile of the host's "
            f"readings ({'; '.join(clipped)}); the curves reach 1 beyond the right edge, and the table above "
            "gives p99 and the maximum. "
            if clipped
            else ""
        )
        + F.marks_text(drawn, "a host's median bracket width over its readings of the variant"),
    )


def timeline(D):
    """Host events, host reads and guest stamps of two KVM_RUN round trips on one TSC axis."""
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
        n=2,
        unit="round trips",
        warmup=3,
        hosts=[(q.host_id, q.host["description"])],
        ci=False,
        extra=f"From the short traced run of dataset {q['run_id']}",
    )
