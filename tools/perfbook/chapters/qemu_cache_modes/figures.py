"""qemu_cache_modes, figures: D (analysis.CacheData) in, (figure, caption) out."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import LogLocator, NullFormatter, StrMethodFormatter

from perfbook.analysis import fleetview as fv
from perfbook.analysis import stats
from perfbook.data import machine

from . import analysis as A
from . import tables as V
from .parse import MODES

_M = list(MODES)


def _errorbars(ax, x, g, **kw):
    ax.errorbar(x, g["median"], yerr=[g["median"] - g.ci_low, g.ci_high - g["median"]], **kw)


def _log_ticks(ax):
    """A log y axis labelled with plain numbers at 1, 2 and 5 of every decade (no 10^x)."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _legend_below(fig, handles, labels, ncol=3):
    """The figure's legend centred below its panels, where it hides nothing."""
    fig.legend(
        handles,
        labels,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=ncol,
        fontsize="small",
        frameon=False,
    )


def bench(D):
    """qemu-img bench per mode, format and configuration (the quoted dataset)."""
    bs, p = D.bs, D.p
    panels = [
        (op, d, fi)
        for op in ("write", "read")
        for d in p["bench_depths"]
        for fi in (p["bench_flush_intervals"] if op == "write" else [0])
    ]
    ncol = 3
    nrow = -(-len(panels) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(11, 3.1 * nrow), sharey=True, squeeze=False)
    fmts = list(dict.fromkeys(bs.format))
    for ax, (op, d, fi) in zip(axes.flat, panels):
        g = bs[(bs.op == op) & (bs.depth == d) & (bs.flush_interval == fi)]
        for k, f in enumerate(fmts):
            gf = g[g.format == f].set_index("mode").reindex(_M)
            x = np.arange(len(_M)) + (k - (len(fmts) - 1) / 2) * 0.3
            _errorbars(ax, x, gf, fmt="o", ms=4, capsize=3, lw=1, color=f"C{k}", label=f)
        ax.set_xticks(range(len(_M)), _M, rotation=30, fontsize="small")
        _log_ticks(ax)
        ax.grid(axis="y", which="major", alpha=0.3)
        ax.set_title(f"{op}, depth {d}" + (f", flush every {fi}" if fi else ""), fontsize="medium")
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("MB/s (log scale)")
    fig.suptitle(
        f"qemu-img bench on {machine.legend(D.quoted.host)}, {p['bench_size'] // 1024} KiB "
        f"requests, no guest: median with its {stats.ci_label(bs['n'])}",
        fontsize="medium",
    )
    fig.tight_layout()
    _legend_below(fig, *axes[0, 0].get_legend_handles_labels(), ncol=len(fmts))
    return fig, stats.caption(
        "qemu-img bench per mode, format and configuration, newest dataset, no guest",
        n=bs["n"],
        unit="runs",
        warmup=int(p["bench_warmup"]),
        hosts=D.host_of(D.bench),
    )


def guest_dd(D):
    """The seed's dd test: 2013 against this host's guest and the host itself."""
    comp, acc, gdd = V.dd_comparison(D), D.acc, D.gdd
    order = ["host"] + _M
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    sources = list(dict.fromkeys(comp.source))
    for ax, variant in zip(axes, ("normal", "direct")):
        c = comp[comp.variant == variant].sort_values("mode", kind="stable")
        for k, src in enumerate(sources):
            cs = c[c.source == src].set_index("mode").reindex(order)
            x = np.arange(len(order)) + (k - 0.5) * 0.3
            has = cs.mb_per_s.notna()
            lo, hi = cs.low, cs.high
            ci = has & lo.notna()
            seed = src.startswith("seed")
            # a single figure (the seed's) is a hollow square; a median with its CI a point with a bar
            if seed:
                ax.plot(
                    x[has.values], cs.mb_per_s[has], "s", ms=6, color="black", mfc="none", label=src
                )
            else:
                ax.errorbar(
                    x[has.values],
                    cs.mb_per_s[has],
                    yerr=[
                        (cs.mb_per_s - lo).where(ci, 0)[has],
                        (hi - cs.mb_per_s).where(ci, 0)[has],
                    ],
                    fmt="o",
                    ms=5,
                    capsize=3,
                    lw=1,
                    color=f"C{k}",
                    label=src,
                )
            rng_only = ~has & lo.notna()
            ax.vlines(
                x[rng_only.values],
                lo[rng_only],
                hi[rng_only],
                color="grey",
                lw=4,
                alpha=0.6,
                label=f"{src}: range only" if rng_only.any() else None,
            )
        ax.set_xticks(range(len(order)), order, rotation=30)
        _log_ticks(ax)
        ax.grid(axis="y", which="major", alpha=0.3)
        ax.set_title(
            "dd bs=64k" + (" oflag=direct" if variant == "direct" else ""), fontsize="medium"
        )
    axes[0].set_ylabel("MB/s (log scale)")
    handles, labels = axes[1].get_legend_handles_labels()
    fig.suptitle(
        f"The seed's dd test: 2013 against this host ({acc} guest; 'host' = dd on the host itself)",
        fontsize="medium",
    )
    fig.tight_layout()
    _legend_below(fig, handles, labels)
    host, run = gdd.host_id.iloc[0], gdd.run_id.iloc[0]
    warm = int(
        next(m for m in D.manifests if m.host_id == host and m.run_id == run).parameters[
            "dd_warmup"
        ]
    )
    return fig, stats.caption(
        f"dd of 64 KiB blocks in a {acc} guest per cache mode, and on the host, beside the seed's 2013 figures",
        n=list(D.gs["n"]) + list(D.hs["n"]),
        unit="runs",
        warmup=[warm],
        hosts=D.host_of(gdd),
        extra="The guest's count of runs is fixed (it runs a script written before boot); the seed's "
        "cells are single figures, or a range where it gave only a range",
    )


def pagecache(D):
    """The image's pages in the host page cache and the host's Dirty growth, per mode."""
    samp, mem, acc = D.samples, D.mem, D.acc
    fig, axes = plt.subplots(1, len(_M), figsize=(12, 2.9), sharey=True)
    for ax, m in zip(axes, _M):
        s = samp[samp["mode"] == m]
        base = mem.loc[m, "dirty_base_kb"]
        ax.plot(s.t, s.image_resident_kb.fillna(0) / 1024, label="image in host page cache")
        ax.plot(s.t, (s.dirty_kb - base) / 1024, label="host Dirty growth")
        ax.set_title(m, fontsize="medium")
        ax.set_xlabel("s since the guest run began")
    axes[0].set_ylabel("MiB")
    axes[0].legend(fontsize="x-small", loc="upper left")
    fig.suptitle(
        f"Host memory while the {acc} guest writes its {int(mem.disk_mib.max())} MiB disk",
        fontsize="medium",
    )
    fig.tight_layout()
    return fig, stats.caption(
        f"Host page cache of the guest's image (mincore) and growth of the host's Dirty memory while the {acc} "
        "guest wrote, one line per cache mode",
        n=samp.groupby("mode").size(),
        unit="samples",
        warmup=0,
        hosts=D.host_of(samp),
        ci=False,
        extra=f"One sample every {D.p['sample_ms']} ms",
    )


def hosts(D):
    """Bench and guest dd per mode over the hosts (each host's shown dataset): one point per other
    host, this host and the reference host with their intervals; the guest dd split by the
    guest's accelerator (KVM and TCG guests are not comparable), with the seed's figures."""
    bsh = A.bench_summary(V.shown_bench(D))
    GH = D.of_shown(D["guest_dd"])
    gsh = A.guest_dd_summary(GH) if GH is not None and not GH.empty else pd.DataFrame()
    gdir = gsh[gsh.variant == "direct"] if len(gsh) else gsh
    F = fv.fleet(D, set(bsh.host_id.unique()) | set(gdir.host_id if len(gdir) else []))
    sd = A.seed_dd(D.ref)
    sd = sd[(sd.variant == "direct") & sd["mode"].isin(_M)].set_index("mode").reindex(_M)
    pos = {m: i for i, m in enumerate(_M)}
    panels = [
        (
            "qemu-img bench, raw writes, one in flight, no flushes",
            bsh.assign(pos=bsh["mode"].map(pos)),
        )
    ]
    if len(gdir):
        acc = gdir.groupby("host_id").accel.agg(lambda a: "/".join(sorted(set(a))).upper())
        gdir = gdir.assign(pos=gdir["mode"].map(pos), acc=gdir.host_id.map(acc))
        for a in sorted(set(acc)):
            panels.append(
                (
                    f"guest dd bs=64k oflag=direct, {a} guests (n = {int((acc == a).sum())})",
                    gdir[gdir.acc == a],
                )
            )
    fig, axes = plt.subplots(
        1, len(panels), figsize=(5.4 * len(panels) + 0.6, 4.4), squeeze=False, layout="constrained"
    )
    drawn, seeded = [], False
    for ax, (title, d) in zip(axes[0], panels):
        drawn.append(
            fv.points(
                ax, F.within(set(d.host_id.unique())), d, "pos", "median", "ci_low", "ci_high"
            )
        )
        if ax is not axes[0, 0]:
            fv.seed_mark(ax, [k - 0.33 for k in range(len(_M))], sd.mb_per_s.to_numpy(float))
            seeded = True
        ax.set_xticks(range(len(_M)), _M, rotation=30)
        _log_ticks(ax)
        ax.grid(axis="y", which="major", alpha=0.3)
        ax.set_title(title, fontsize="medium")
        ax.set_ylabel(f"MB/s (median, {stats.ci_label(d['n'])})")
    seed_label = f"seed {D.ref.date.iloc[0][:4]}: dd in a KVM guest, one figure" if seeded else None
    d = fv.merge(*drawn)
    fv.legend(fig, F, d, seed=seed_label, ncol=2)
    return fig, stats.caption(
        "Bench and guest dd per cache mode over the hosts (each host's shown dataset), with the seed's 2013 guest "
        "figures; the guest dd has one panel per accelerator of the guest",
        n=list(bsh["n"]) + (list(gdir["n"]) if len(gdir) else []),
        unit="runs",
        warmup=sorted({int(m.parameters.get("bench_warmup", 1)) for m in D.manifests}),
        hosts=F.caption_hosts(),
        extra=F.marks_text(
            d, "a host's median MB/s", seed="the seed's figures, single values with no repeat count"
        ),
    )
