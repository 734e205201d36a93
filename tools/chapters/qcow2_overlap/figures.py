"""qcow2_overlap: the figures, as (figure, caption) pairs for tools.notebook.show."""
from __future__ import annotations

from . import analysis as A
from .spec import MODES, MiB


def prealloc(D):
    """Extra CPU of cached over none when preallocating, against the image size: every dataset,
    each with its fitted power law; the quoted one extrapolated to the seed's size."""
    import pandas as pd
    from ...findings import counted_runs
    from ...machine import legend
    rs = D["prealloc"]
    rs = rs[rs.command == "resize_no_flush"]
    ref = D.reference("qcow2_overlap")
    seed_size = int(ref[ref.experiment == "create_prealloc_metadata_512"].image_size_mib.iloc[0]) * MiB
    runs = []
    for h in D.hosts:
        for m in counted_runs([m for m in D.manifests if m.host_id == h]):
            mine = rs[(rs.host_id == h) & (rs.run_id == m["run_id"])]
            ov = A.overhead(mine, ["cluster_size", "image_size", "mode"])
            if not ov.empty:
                runs.append({"label": f"{legend(m['host'])}, run {m['run_id']}", "ov": ov,
                             "fit": A.fit_power_law(ov, at=seed_size),
                             "quoted": m.key == D.quoted.key})
    fig = plot_prealloc(runs, ref)
    used = rs[(rs.cluster_size == 512) & rs["mode"].isin(["none", "cached"])]
    cached = pd.concat([r["ov"] for r in runs]) if runs else pd.DataFrame(
        columns=["cluster_size", "mode", "extra", "n", "n_none"])
    cached = cached[(cached.cluster_size == 512) & (cached["mode"] == "cached")]
    n_neg = int((cached.extra <= 0).sum())
    q = next((r for r in runs if r["quoted"]), None)
    fit_text = "lines: each run's power law, fitted by least squares in log-log space over the sizes it measured"
    if q is not None and q["fit"]["n"] >= 3:
        f = q["fit"]
        fit_text += (f"; the quoted run ({D.quoted.run_id}): exponent {f['k']:.2f}, 95 % interval "
                     f"{f['k_lo']:.1f} to {f['k_hi']:.1f}, R² {f['r2']:.2f}, dotted its extrapolation to the "
                     f"seed's {seed_size // MiB} MiB; grey dashed, a quadratic (exponent fixed at 2) through "
                     "the quoted run's points, for comparison only")
    extra = "; ".join(x for x in (
        A.prealloc_bars_text(cached),
        "an interval reaching zero or below runs to the bottom edge",
        f"{n_neg} of {len(cached)} shifts are zero or below and cannot be drawn on the log axis" if n_neg else "",
        "each run's points are set slightly apart horizontally", fit_text) if x)
    cap = A.caption_for(
        used, D.manifests,
        "Extra CPU seconds of overlap-check=cached over =none when preallocating metadata at 512-byte "
        "clusters, against the image size, for every dataset; the star is the user time the seed's 2014 "
        "series saved on its create", by=["host_id", "run_id", "image_size", "mode"], ci=False, extra=extra)
    return fig, cap


def modes(D):
    """Median CPU time per qemu-img bench run, per mode, workload and host."""
    from ...machine import legend
    wr = A.writes(D)
    names = {m.host_id: legend(m["host"]) for m in D.manifests}  # host id and kind (TCG guest ...)
    summ = A.summary(wr, A.WRITES_BY)
    g = plot_modes(summ.assign(host_id=summ.host_id.map(names)))
    return g.figure, A.caption_for(wr, D.manifests, "CPU seconds per qemu-img bench run, per "
                                   "overlap-check mode, workload and host", by=A.WRITES_BY)


def formula(D):
    """Metadata clusters counted in the images against the seed's formula."""
    from ...stats import caption, hosts_of
    ft = A.formula_shown(D)
    cap = caption(
        "L2 tables plus refcount blocks counted in real images against the seed's formula 10 · IS / CS²",
        n=ft.groupby(["host_id", "cluster_size"]).size().to_numpy(), unit="images", warmup=0,
        hosts=hosts_of([m for m in D.manifests if m["host"]["host_id"] in set(ft.host_id)]), ci=False,
        extra="Counts read from the images by tools/qcow2.py: deterministic, so no interval applies")
    return plot_formula(ft), cap


def plot_prealloc(runs, ref):
    """`runs`: [{label, ov (overhead() of one dataset), fit (fit_power_law at the seed's size),
    quoted}]. Points: cached's Hodges-Lehmann shift over none with its interval, per run, each
    with its fitted power law over the sizes it measured; the quoted run's fit extrapolated to
    the seed's size (dotted) beside a quadratic through the same points (dashed, comparison)."""
    import matplotlib.pyplot as plt
    import numpy as np
    fig, ax = plt.subplots(figsize=(8, 5.6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    r = ref[ref.experiment == "create_prealloc_metadata_512"]
    seed_mib = float(r.image_size_mib.iloc[0]) if len(r) else None
    positive = []
    for i, run in enumerate(runs):
        ov, f, c = run["ov"], run["fit"], colors[i % len(colors)]
        d = ov[(ov.cluster_size == 512) & (ov["mode"] == "cached")].sort_values("image_size")
        d = d[d.extra > 0]
        if d.empty:
            continue
        positive += list(d.extra)
        x = d.image_size / MiB * (1 + 0.04 * (i - (len(runs) - 1) / 2))
        fit = (f"exponent {f['k']:.2f} [{f['k_lo']:.1f}, {f['k_hi']:.1f}], R² {f['r2']:.2f}"
               if f["n"] >= 3 else f"{f['n']} sizes: no fit with an interval")
        # an interval reaching zero or below runs to the bottom edge (a log axis has no zero)
        low = d.extra - d.extra_ci_low.clip(lower=1e-9)
        ax.errorbar(x, d.extra, yerr=[low.clip(lower=0), (d.extra_ci_high - d.extra).clip(lower=0)],
                    fmt="o", capsize=3, color=c, label=f"{run['label']}: {fit}")
        if f["n"] >= 3 and f["k"] == f["k"]:  # two points: no fit worth a line
            xs = np.geomspace(d.image_size.min(), d.image_size.max(), 30)
            ax.plot(xs / MiB, f["c"] * xs ** f["k"], color=c, lw=1.2)
            if run["quoted"] and seed_mib:
                xe = np.geomspace(d.image_size.max(), seed_mib * MiB, 30)
                ax.plot(xe / MiB, f["c"] * xe ** f["k"], color=c, lw=1.2, ls=":",
                        label="quoted run's power law, extrapolated")
                a = A.fit_quadratic(ov)
                if a == a and a > 0:
                    xq = np.geomspace(d.image_size.min(), seed_mib * MiB, 50)
                    ax.plot(xq / MiB, a * xq ** 2, ls="--", color="grey", lw=1,
                            label="for comparison: quadratic (exponent fixed at 2) through the quoted run")
    if len(r):
        before = r[r.variant == "before_series"].user_s.iloc[0]
        after = r[r.variant == "after_series"].user_s.iloc[0]
        ax.scatter([seed_mib], [before - after], marker="*", s=180, color="black",
                   label="seed 2014: user time its series saved (a different quantity, another CPU)", zorder=5)
        positive.append(before - after)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    if positive:
        ax.set_ylim(min(positive) / 5, max(positive) * 3)
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("virtual image size, MiB (cluster size 512 B)")
    ax.set_ylabel("extra CPU s of cached over none")
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: not labels[i].startswith("h-"))  # runs first
    ax.legend([handles[i] for i in order], [labels[i] for i in order], fontsize="small",
              loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=1, frameon=False)
    fig.tight_layout()
    return fig


def plot_modes(summ, workload_col: str = "workload"):
    """Median CPU time per mode and workload with its CI; one row of panels per host
    (a seaborn FacetGrid)."""
    import seaborn as sns
    from ...stats import ci_label
    d = summ[summ.metric == "cpu_s"].copy()
    if "host_id" not in d.columns:
        d["host_id"] = "this host"
    order = [m for m in MODES if m in set(d["mode"])]
    g = sns.catplot(data=d, kind="bar", x="mode", y="median", col=workload_col, row="host_id",
                    sharey=False, order=order, height=3.4, aspect=0.9, color="steelblue",
                    col_order=sorted(set(d[workload_col])), row_order=sorted(set(d.host_id)))
    for (host, wl), ax in g.axes_dict.items():
        sub = d[(d.host_id == host) & (d[workload_col] == wl)]
        sub = sub.set_index("mode").reindex(order)
        ax.errorbar(range(len(sub)), sub["median"],
                    yerr=[sub["median"] - sub.ci_low, sub.ci_high - sub["median"]],
                    fmt="none", color="black", capsize=3)
    g.set_titles("{row_name}\n{col_name}", size="small")
    for ax in g.axes.flat:
        ax.tick_params(axis="x", labelrotation=30)
    # two lines: one row's label must not run into the next row's
    g.set_axis_labels("overlap-check", f"CPU s per run\n(median, {ci_label(d['n'])})")
    return g


def plot_formula(ft):
    import matplotlib.pyplot as plt
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
