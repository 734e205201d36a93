"""qcow2_overlap: the figures, as (figure, caption) pairs for tools.notebook.show."""
from __future__ import annotations

from . import analysis as A
from .spec import MODES, MiB


def prealloc(D):
    """Extra CPU of cached and all over none when preallocating, against the image size."""
    rs, ov = A.resizes(D), A.prealloc_overhead(D)
    fig = plot_prealloc(ov, D.reference("qcow2_overlap"), fit_host=D.quoted.host_id)
    cap = A.caption_for(
        rs[(rs.cluster_size == 512) & rs["mode"].isin(["none", "cached", "all"])], D.manifests,
        "Extra CPU seconds of overlap-check=cached and =all over =none when preallocating metadata at "
        "512-byte clusters, against the image size; the star is the seed's 2014 saving",
        by=["host_id", "image_size", "mode"], ci=False, extra=A.prealloc_bars_text(ov))
    return fig, cap


def modes(D):
    """Median CPU time per qemu-img bench run, per mode, workload and host."""
    wr = A.writes(D)
    g = plot_modes(A.summary(wr, A.WRITES_BY))
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


def plot_prealloc(ov_cpu, ref, fit_host=None):
    """Extra CPU seconds of each mode over 'none' versus image size (512-byte clusters),
    per host if `ov_cpu` has a host_id column; the quadratic fit is `fit_host`'s."""
    import matplotlib.pyplot as plt
    # constant scatters around zero (see the table); a log axis can only show the two
    # modes whose cost is real
    g = ov_cpu[(ov_cpu.cluster_size == 512) & ov_cpu["mode"].isin(["cached", "all"])]
    if "host_id" not in g.columns:
        g = g.assign(host_id="this host")
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for (host, mode), d in g.groupby(["host_id", "mode"]):
        d = d.sort_values("image_size")
        x = d.image_size / MiB
        # the HL interval need not contain the point estimate's sign; clip the bars at zero
        ax.errorbar(x, d.extra, yerr=[(d.extra - d.extra_ci_low).clip(lower=0),
                                      (d.extra_ci_high - d.extra).clip(lower=0)],
                    fmt="o-", capsize=3, label=f"overlap-check={mode} ({host})")
    r = ref[ref.experiment == "create_prealloc_metadata_512"]
    fit = ov_cpu if fit_host is None or "host_id" not in ov_cpu else ov_cpu[ov_cpu.host_id == fit_host]
    a, _ = A.fit_quadratic(fit)
    if len(r) and a == a and a > 0:
        import numpy as np
        xs = np.geomspace(g.image_size.min(), r.image_size_mib.iloc[0] * MiB, 50)
        ax.plot(xs / MiB, a * xs ** 2, ls="--", color="grey", lw=1,
                label="cached: fit extra = a · size², extrapolated")
    if len(r):
        before = r[r.variant == "before_series"].user_s.iloc[0]
        after = r[r.variant == "after_series"].user_s.iloc[0]
        ax.scatter([r.image_size_mib.iloc[0]], [before - after], marker="*", s=180, color="black",
                   label="seed 2014: user time saved by the series", zorder=5)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("virtual image size, MiB (cluster size 512 B)")
    ax.set_ylabel("extra CPU s over overlap-check=none")
    ax.legend(fontsize="small")
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
    g.set_axis_labels("overlap-check", f"CPU s per run (median, {ci_label(d['n'])})")
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
