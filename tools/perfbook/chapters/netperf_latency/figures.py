"""The chapter's figures: D in, (figure, caption) out; one dataset per host (D.of_shown), drawn with
perfbook.analysis.fleetview (this host and the reference host marked, every other host a grey point or line)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from perfbook.analysis import fleetview as fv

from . import analysis as A
from .parse import PCT_ORDER

# the cell every host is compared in: the seed's (loopback UDP, the scheduler places both ends)
FLEET_CELL = {"path": "loopback", "proto": "udp", "pin": "none"}
PROTO_COLOUR = {"tcp": "C2", "udp": "C1"}  # a chapter's own colours, none of a host role's
PIN_STYLE = {"none": "-", "same": "--", "split": ":"}


def _fleet(D):
    runs = D.of_shown(D["runs"])
    return fv.fleet(D, set(runs["host_id"].unique())), runs


def _caption(D, F, runs, what, extra=""):
    mans = [m for m in D.manifests if D.shown.get(m.host_id) == m["run_id"]]
    return fv.recaption(A.caption_for(runs, mans, what, extra=extra), mans, F)


def _cell_grid(F, rows_hosts, cols, n_fleet_cols, height=3.3):
    """A figure with one row of panels per highlighted host (its cells) and a last row for the
    fleet: (figure, host axes [rows x cols], fleet axes [n_fleet_cols])."""
    ncol = max(len(cols), n_fleet_cols)
    fig, axes = plt.subplots(
        len(rows_hosts) + 1,
        ncol,
        figsize=(4.6 * ncol + 0.4, height * (len(rows_hosts) + 1) + 0.9),
        squeeze=False,
        layout="constrained",
    )
    return fig, axes[:-1], axes[-1]


def _fleet_row(F, haxes, faxes, df, by, values, draw, ylabel):
    """The last row: every host in the seed's cell (FLEET_CELL), one panel per value of `by`;
    draw(ax, rows) draws a panel. Hides empty panels, labels the y axes; returns what was drawn."""
    drawn = []
    for ax, v in zip(faxes, values):
        cell = {**FLEET_CELL, by: v}
        drawn.append(
            draw(
                ax,
                df[
                    (df.path == cell["path"])
                    & (df.proto == cell["proto"])
                    & (df.pin == cell["pin"])
                ],
            )
        )
        ax.set_title(
            f"every host (n = {len(F.hosts)}): {cell['path']}, {cell['proto']}, pin {cell['pin']}",
            fontsize=9,
        )
    for ax in [*haxes.flat, *faxes]:
        if not ax.has_data():
            ax.set_visible(False)
    for ax in [r[0] for r in haxes] + [faxes[0]]:
        ax.set_ylabel(ylabel)
    return fv.merge(*drawn)


def exceedance(D):
    """Fraction of round trips slower than x: every cell (path, protocol, pinning) of this host and
    of the reference host, one row each; a last row with every host's curve for the seed's
    protocol and pinning (UDP, no pinning) on each path."""
    F, runs = _fleet(D)
    cc = A.ccdf(D.of_shown(D["hist"]))
    have = set(cc["host_id"].unique())
    rows = [(h, F.title(role)) for h, role in F.highlighted if h in have]
    paths = sorted(set(cc["path"].unique()))
    fig, haxes, faxes = _cell_grid(F, rows, paths, len(paths))
    for (h, name), axrow in zip(rows, haxes):
        for ax, path in zip(axrow, paths):
            for (proto, pin), g in cc[(cc.host_id == h) & (cc.path == path)].groupby(
                ["proto", "pin"]
            ):
                ax.step(
                    g.latency_us,
                    g.slower_than,
                    where="post",
                    color=PROTO_COLOUR.get(proto, "C4"),
                    ls=PIN_STYLE.get(pin, "-."),
                    lw=1.2,
                )
            ax.set_title(f"{name}: {path}", fontsize=9)
    d = _fleet_row(
        F,
        haxes,
        faxes,
        cc,
        "path",
        paths,
        lambda ax, g: fv.curves(ax, F, g, "latency_us", "slower_than"),
        "fraction slower than x",
    )
    for ax in [*haxes.flat, *faxes]:
        ax.set(xscale="log", yscale="log")
    for ax in faxes:
        ax.set_xlabel("round-trip latency x (µs)")
    own = [(plt.Line2D([], [], color=c, lw=1.2), p) for p, c in PROTO_COLOUR.items()] + [
        (plt.Line2D([], [], color="0.2", ls=s, lw=1.2), f"pin {p}") for p, s in PIN_STYLE.items()
    ]
    fv.legend(fig, F, d, extra=own if rows else (), ncol=4)
    fig.suptitle("RR latency exceedance per path (rrbench, every transaction)")
    return fig, _caption(
        D,
        F,
        runs,
        "Fraction of round trips slower than x, log-log: per path, protocol and "
        "pinning for the highlighted hosts (one row each, colour: protocol, line style: pinning), and "
        "for every host in the seed's cell (loopback and veth, UDP, no pinning; last row); every "
        "transaction of every run pooled per cell",
        extra=F.marks_text(d, ""),
    )


def ladder(D):
    """Pooled P50 to P99.9 and the maximum: every cell of this host and of the reference host, one
    row each; a last row with every host's ladder in the seed's pinning (none) per protocol, loopback."""
    F, runs = _fleet(D)
    lad = A.ladder(runs, D.of_shown(D["hist"]))
    ll = A.ladder_long(lad)
    ll = ll.assign(pos=ll.percentile.map({p: i for i, p in enumerate(PCT_ORDER)}))
    have = set(ll["host_id"].unique())
    rows = [(h, F.title(role)) for h, role in F.highlighted if h in have]
    protos = sorted(set(ll["proto"].unique()))
    fig, haxes, faxes = _cell_grid(F, rows, protos, len(protos))
    cells = [(p, q) for p in sorted(set(ll.path)) for q in PIN_STYLE if q in set(ll.pin)]
    for (h, name), axrow in zip(rows, haxes):
        for ax, proto in zip(axrow, protos):
            for k, (path, pin) in enumerate(cells):
                g = ll[
                    (ll.host_id == h) & (ll.proto == proto) & (ll.path == path) & (ll.pin == pin)
                ].sort_values("pos", kind="stable")
                ax.plot(
                    g.pos + (k - (len(cells) - 1) / 2) * 0.05,
                    g.latency_us,
                    marker="o" if path == "loopback" else "s",
                    ms=3.5,
                    lw=1.1,
                    ls=PIN_STYLE[pin],
                    color=_path_colour(path),
                )
            ax.set_title(f"{name}: {proto}", fontsize=9)
    d = _fleet_row(
        F,
        haxes,
        faxes,
        ll,
        "proto",
        protos,
        lambda ax, g: fv.points(ax, F, g, "pos", "latency_us"),
        "latency (µs)",
    )
    for ax in [*haxes.flat, *faxes]:
        ax.set_yscale("log")
        ax.set_xticks(range(len(PCT_ORDER)), PCT_ORDER)
    own = [
        (
            plt.Line2D(
                [],
                [],
                color=_path_colour(p),
                marker="o" if p == "loopback" else "s",
                ms=3.5,
                lw=1.1,
            ),
            p,
        )
        for p in sorted(set(ll.path))
    ] + [(plt.Line2D([], [], color="0.2", ls=s, lw=1.1), f"pin {p}") for p, s in PIN_STYLE.items()]
    fv.legend(fig, F, d, extra=own if rows else (), ncol=4)
    fig.suptitle("Percentile ladder per path and pinning mode (rrbench, pooled over repetitions)")
    return fig, _caption(
        D,
        F,
        runs,
        "Pooled P50 to P99.9 and the slowest single transaction: per path (colour and "
        "marker), pinning mode (line style) and protocol for the highlighted hosts (one row each), "
        "and for every host on loopback without pinning (last row)",
        extra=F.marks_text(d, "a host's pooled percentile"),
    )


def _path_colour(path: str) -> str:
    return {"loopback": "C2", "veth": "C4"}.get(path, "C5")


def seed_histogram(D):
    """The seed's printed histogram beside every host's rrbench transactions (loopback UDP, none):
    the share per bucket on a log axis, buckets in numeric order, one point per host (this host
    and the reference host marked); an empty bucket has no point (a log axis has no zero)."""
    F, runs = _fleet(D)
    vh = A.versus_seed_histogram(D.H, D.ref, D.quoted.host_id)
    seed = vh.assign(fraction=vh.seed_fraction)
    hist = D.of_shown(D["hist"])
    per_host = dict(tuple(hist.groupby("host_id", sort=False)))  # one split, not a filter per host
    ours = [
        A.versus_seed_histogram(per_host.get(h, hist.iloc[0:0]), D.ref, h).assign(host_id=h)
        for h in F.hosts
    ]
    ours = pd.concat([v.assign(fraction=v.ours_fraction) for v in ours], ignore_index=True)
    both = pd.concat(
        [seed[seed.fraction > 0][["bucket", "lo_us"]], ours[ours.fraction > 0][["bucket", "lo_us"]]]
    )
    order = list(both.drop_duplicates("bucket").sort_values("lo_us", kind="stable").bucket)
    pos = {b: i for i, b in enumerate(order)}
    ours = ours[ours.fraction > 0].assign(pos=lambda d: d.bucket.map(pos))
    fig, ax = plt.subplots(figsize=(7.5, 5.6), layout="constrained")
    drawn = fv.points(ax, F, ours, "pos", "fraction", width=0.5)
    s = seed[seed.fraction > 0]
    fv.seed_mark(ax, [pos[b] - 0.22 for b in s.bucket], s.fraction, ms=10)
    ax.set_xticks(range(len(order)), order, rotation=60, ha="right")
    ax.set(
        yscale="log",
        xlim=(-0.6, len(order) - 0.4),
        xlabel="bucket of the seed's printed histogram (µs)",
        ylabel="fraction of transactions",
        title="loopback UDP RR, no pinning: the seed vs every host",
    )
    ax.grid(axis="y", which="major", alpha=0.3)
    seed_label = "seed 2013 (netperf -v 2, one run)"
    fv.legend(fig, F, drawn, seed=seed_label, ncol=2)
    lo_udp = runs[(runs.path == "loopback") & (runs.proto == "udp") & (runs.pin == "none")]
    return fig, _caption(
        D,
        F,
        lo_udp,
        "Share of loopback UDP round trips (no pinning) per bucket of the seed's histogram, "
        "buckets in numeric order (10 µs wide below 100 µs, 100 µs below 1 ms, then 1 ms), "
        "log scale; a bucket with no transaction has no point. The seed's one netperf run "
        "of 2013 beside every host's rrbench transactions",
        extra=F.marks_text(
            drawn,
            "a host's share of its transactions in the bucket",
            seed="the seed's share per bucket, one run",
        ),
    )
