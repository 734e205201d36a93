"""qcow2_overlap, figures: D in, (figure, caption) pairs out (perfbook.book.notebook.figure)."""

from __future__ import annotations

import types

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from perfbook.analysis import fleetview as fv
from perfbook.analysis.decide import interval_text
from perfbook.analysis.stats import caption, ci_label

from . import analysis as A
from .parse import MODES, MiB


def prealloc(D):
    """Extra CPU of cached over none when preallocating, against the image size, each run with its
    fitted power law over the sizes it measured (never beyond them): every counted run of this
    host and of the reference host, each other host's shown dataset in grey. The caption gives
    the highlighted runs' exponents as the median of their rounds' exponents with its interval."""
    measured = sorted(A.measured_datasets(D, "prealloc"))
    F = fv.fleet(D, {h for h, _ in measured})
    keep = fv.runs(D, F)
    rs = A.datasets_rows(D, "prealloc", keep)
    ref = D.reference("qcow2_overlap")
    runs = []
    for h, r in (k for k in measured if k in keep):
        ov = A.dataset_overhead(D, "prealloc", (h, r))
        if not ov.empty:
            runs.append(
                {
                    "host_id": h,
                    "run_id": r,
                    "role": F.role(h),
                    "ov": ov,
                    "fit": A.fit_power_law(ov),
                    "exp": A.exponent(
                        A.dataset_rows(D, "prealloc", (h, r)).query("cluster_size == 512"), ov
                    ),
                    "quoted": (h, r) == D.quoted.key,
                }
            )
    fig, drawn = plot_prealloc(runs, ref, F)
    cached = (
        pd.concat([r["ov"] for r in runs])
        if runs
        else pd.DataFrame(columns=["cluster_size", "mode", "extra", "n", "n_none"])
    )
    cached = cached[(cached.cluster_size == 512) & (cached["mode"] == "cached")]
    n_neg = int((cached.extra <= 0).sum())
    fits = [
        f"{r['run_id']}{' (quoted)' if r['quoted'] else ''}: {interval_text(r['exp'])}"
        for r in runs
        if r["role"] != fv.OTHER
    ]
    ks = [
        r["fit"]["k"]
        for r in runs
        if r["role"] == fv.OTHER and r["fit"]["n"] >= 2 and r["fit"]["k"] == r["fit"]["k"]
    ]
    fit_text = (
        "lines: each run's power law through its sizes' shifts (least squares in log-log space), "
        "drawn over the sizes it measured only; each highlighted run's exponent, the median of "
        "its rounds' exponents with its interval where it has one"
        + (f": {'; '.join(fits)}" if fits else "")
        + (
            f"; the other hosts' lines' exponents: median {np.median(ks):.2f}, {min(ks):.2f} to "
            f"{max(ks):.2f} over {len(ks)} runs"
            if len(ks) > 1
            else f"; the other host's line's exponent {ks[0]:.2f}"
            if ks
            else ""
        )
    )
    extra = "; ".join(
        x
        for x in (
            A.prealloc_bars_text(cached),
            "an interval reaching zero or below runs to the bottom edge",
            f"{n_neg} of {len(cached)} shifts are zero or below and cannot be drawn on the log axis"
            if n_neg
            else "",
            "each host's points are set slightly apart horizontally",
            fit_text,
        )
        if x
    )
    extra += ". " + F.marks_text(
        drawn,
        F.runs_text(
            "a run's Hodges-Lehmann shift of cached over none",
            "a point per counted run",
            roles=drawn["roles"],
        ),
    )
    used = rs[(rs.cluster_size == 512) & rs["mode"].isin(["none", "cached"])]
    mans = [m for m in D.manifests if m.key in keep]
    cap = A.caption_for(
        used,
        mans,
        "Extra CPU seconds of overlap-check=cached over =none when preallocating metadata at 512-byte "
        "clusters, against the image size, over the hosts; the star is the user time the seed's 2014 "
        "series saved on its create",
        by=["host_id", "run_id", "image_size", "mode"],
        ci=False,
        extra=extra,
    )
    return fig, fv.recaption(cap, mans, F)


def modes(D):
    """Median CPU time per qemu-img bench run, per mode and workload: one point per other host,
    this host and the reference host with their intervals; one row of panels per machine kind."""
    wr = A.writes(D)
    F = fv.fleet(D, set(wr.host_id.unique()))
    g = plot_modes(A.writes_summary(D), F)
    fig, drawn, panels = g.figure, g.drawn, g.rows
    mans = [m for m in D.manifests if m.key in fv.runs(D, F, every_run=False)]
    kinds = (
        (
            " One row of panels per machine kind: a TCG guest's CPU time is QEMU's emulation, to be read "
            "within its row."
        )
        if panels > 1
        else ""
    )
    cap = A.caption_for(
        wr,
        mans,
        "CPU seconds per qemu-img bench run, per overlap-check mode and workload, "
        "over the hosts (each host's shown dataset)",
        by=A.WRITES_BY,
        extra=F.marks_text(drawn, "a host's median CPU seconds per run", panels=panels > 1) + kinds,
    )
    return fig, fv.recaption(cap, mans, F)


def formula(D):
    """Metadata clusters counted in the images against the seed's formula (every host's images,
    coloured by cluster size: the counts are deterministic, so the hosts' points coincide)."""
    ft = A.formula_shown(D)
    cap = caption(
        "L2 tables plus refcount blocks counted in real images against the seed's formula 10 · IS / CS², "
        "every host's images (each host's shown dataset)",
        n=ft.groupby(["host_id", "cluster_size"]).size().to_numpy(),
        unit="images",
        warmup=0,
        hosts=fv.fleet(D, set(ft.host_id.unique())).caption_hosts(),
        ci=False,
        extra="Counts read from the images by tools/perfbook/probes/qcow2.py: deterministic, so no interval applies, and "
        "hosts that made the same image have one point",
    )
    return plot_formula(ft), cap


def plot_prealloc(runs, ref, F):
    """`runs`: [{host_id, run_id, role (perfbook.analysis.fleetview), ov (overhead() of one dataset), fit
    (fit_power_law), quoted}]. Points: cached's Hodges-Lehmann shift over none with its
    interval, each run with its fitted power law over the sizes it measured and nowhere else, in
    its host's role style (other hosts grey, without intervals once there are many). Returns
    (figure, what was drawn)."""
    fig, ax = plt.subplots(figsize=(8, 6.2), layout="constrained")
    r = ref[ref.experiment == "create_prealloc_metadata_512"]
    seed_mib = float(r.image_size_mib.iloc[0]) if len(r) else None
    positive, drawn, extra = [], {"roles": set(), "bars": False, "other_bars": False}, []
    others = [x for x in runs if x["role"] == fv.OTHER]
    few = len(others) <= fv.FEW_OTHERS
    spread = (
        {x["host_id"]: o for x, o in zip(others, np.linspace(-0.06, 0.06, len(others)))}
        if others
        else {}
    )
    for run in sorted(runs, key=lambda x: x["role"] != fv.OTHER):  # the other hosts first, under
        ov, f, role = run["ov"], run["fit"], run["role"]
        style = fv.STYLE[role]
        d = ov[(ov.cluster_size == 512) & (ov["mode"] == "cached")].sort_values(
            "image_size", kind="stable"
        )
        d = d[d.extra > 0]
        if d.empty:
            continue
        positive += list(d.extra)
        x = d.image_size / MiB * (1 + spread.get(run["host_id"], 0.0 if role == fv.THIS else 0.03))
        # an interval reaching zero or below runs to the bottom edge (a log axis has no zero)
        bars = role != fv.OTHER or few
        low = d.extra - d.extra_ci_low.clip(lower=1e-9)
        ax.errorbar(
            x,
            d.extra,
            yerr=[low.clip(lower=0), (d.extra_ci_high - d.extra).clip(lower=0)] if bars else None,
            ls="none",
            capsize=3 if role != fv.OTHER else 0,
            elinewidth=1 if role != fv.OTHER else 0.7,
            ecolor=None if role != fv.OTHER else "0.7",
            **style,
        )
        drawn["roles"].add(role)
        drawn["bars"] = drawn["bars"] or bars
        drawn["other_bars"] = drawn["other_bars"] or (bars and role == fv.OTHER)
        if f["n"] >= 2 and f["k"] == f["k"]:  # over the sizes measured, never beyond
            xs = np.geomspace(d.image_size.min(), d.image_size.max(), 30)
            ax.plot(
                xs / MiB,
                f["c"] * xs ** f["k"],
                color=style["color"],
                lw=1.2 if role != fv.OTHER else 0.7,
                alpha=1.0 if role != fv.OTHER else 0.45,
                zorder=style["zorder"] - 1,
            )
    extra.insert(
        0, (Line2D([], [], color="0.3", lw=1.2), "a run's power law over the sizes it measured")
    )
    seed_label = None
    if len(r):
        before = r[r.variant == "before_series"].user_s.iloc[0]
        after = r[r.variant == "after_series"].user_s.iloc[0]
        fv.seed_mark(ax, [seed_mib], [before - after], ms=15)
        seed_label = "seed 2014: user time its series saved (a different quantity, another CPU)"
        positive.append(before - after)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    if positive:
        ax.set_ylim(min(positive) / 5, max(positive) * 3)
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("virtual image size, MiB (cluster size 512 B)")
    ax.set_ylabel("extra CPU s of cached over none")
    fv.legend(fig, F, drawn, seed=seed_label, extra=extra, ncol=2)
    return fig, drawn


def plot_modes(summ, F=None, workload_col: str = "workload"):
    """Median CPU time per mode and workload over the hosts (perfbook.analysis.fleetview.points): a column
    of panels per workload, a row per machine kind (F: the fleet; without it, and without a
    host_id column, the rows are one host's). Returns a namespace: figure, axes, drawn, rows."""
    d = summ[summ.metric == "cpu_s"]
    if "host_id" not in d.columns:
        d = d.assign(host_id="this host")
    if F is None:
        hosts = sorted(set(d.host_id.unique()))
        F = fv.Fleet({h: {"host_id": h} for h in hosts}, hosts[0], None)
    have = set(d["mode"].unique())
    order = [m for m in MODES if m in have]
    d = d.assign(pos=d["mode"].map({m: i for i, m in enumerate(order)}))
    wls = sorted(set(d[workload_col]))
    rows = fv.facets(F, "kind")
    fig, axes = plt.subplots(
        len(rows),
        len(wls),
        figsize=(3.3 * len(wls) + 0.8, 3.1 * len(rows) + 1.0),
        squeeze=False,
        sharex=True,
        layout="constrained",
    )
    drawn = []
    for i, (kind, Fk) in enumerate(rows):
        for j, wl in enumerate(wls):
            ax = axes[i, j]
            drawn.append(
                fv.points(ax, Fk, d[d[workload_col] == wl], "pos", "median", "ci_low", "ci_high")
            )
            ax.set_title(f"{kind}\n{wl}" if len(rows) > 1 else wl, fontsize="small")
            ax.set_xticks(range(len(order)), order, rotation=30)
            ax.set_ylim(bottom=0)
        axes[i, 0].set_ylabel(f"CPU s per run\n(median, {ci_label(d['n'])})")
    for ax in axes[-1]:
        ax.set_xlabel("overlap-check")
    drawn = fv.merge(*drawn)
    fv.legend(fig, F, drawn)
    return types.SimpleNamespace(figure=fig, axes=axes, drawn=drawn, rows=len(rows))


def plot_formula(ft):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for cs, d in ft.groupby("cluster_size"):
        ax.scatter(d.formula_virtual, d.measured_clusters, label=f"{cs} B clusters", s=40)
    lo = max(1.0, min(ft.formula_virtual.min(), ft.measured_clusters.min()) / 2)
    hi = max(ft.formula_virtual.max(), ft.measured_clusters.max()) * 2
    ax.plot([lo, hi], [lo, hi], color="grey", lw=1, ls="--", label="measured = formula")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("formula 10 · IS / CS² with IS = virtual size (clusters)")
    ax.set_ylabel("measured L2 tables + refcount blocks")
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig
