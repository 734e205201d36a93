"""qcow2_overlap, tables: the tables the chapter shows (D: perfbook.data.dataset.Data), one dataset
per host (D.of_shown) unless a table says otherwise."""

from __future__ import annotations

import pandas as pd

from perfbook.data.dataset import skipped_table

from .analysis import (
    WRITES_BY,
    cluster_text,
    formula_shown,
    host_comparison,
    perf_check_pct,
    prealloc_fits,
    prealloc_overhead,
    shown_overhead,
    writes_summary,
)
from .parse import MiB

PARAMETER_ROWS = [
    "profile",
    "rep_target",
    "rep_min_runs",
    "rep_max_runs",
    "rep_budget_s",
    "rep_warmup",
    "repeats",
    "warmup",
    "prealloc_sizes_512",
    "prealloc_sizes_64k",
    "bench_size",
    "bench_count",
    "alloc_size",
    "snapshots",
    "snap_size",
    "snap_count",
    "perf_repeats",
]


def parameters_table(D):
    """The parameters of the dataset shown for each host, one column per dataset."""
    shown = D.shown
    ms = [m for m in D.manifests if shown.get(m.host_id) == m["run_id"]]
    return pd.DataFrame(
        {
            f"{m.host_id} {m['run_id']}": [
                str(m.profile if k == "profile" else m.parameters.get(k, "—"))
                for k in PARAMETER_ROWS
            ]
            for m in ms
        },
        index=PARAMETER_ROWS,
    )


def prealloc_table(D):
    """CPU seconds per run and each mode's extra over none, per host and size."""
    ov = prealloc_overhead(D)
    t = ov.assign(size_mib=ov.image_size // 2**20)[
        [
            "host_id",
            "cluster_size",
            "size_mib",
            "mode",
            "n",
            "median",
            "extra",
            "extra_ci_low",
            "extra_ci_high",
            "share_pct",
            "p_value",
        ]
    ]
    t = t.assign(significant=ov["significant"].map({True: "yes", False: "no"}))
    return (
        t.round(3)
        .rename(columns={"median": "cpu_s"})
        .set_index(["host_id", "cluster_size", "size_mib", "mode"])
    )


def fits_table(D):
    """prealloc_fits() for display: the exponent through the sizes' shifts (no interval: a line
    through its points), and the median of the rounds' exponents with its interval and the
    interval's real coverage (below 95 % the finding stays undecided)."""
    f = prealloc_fits(D)
    if f.empty:
        return "no 512-byte-cluster preallocation with two runs per mode"
    t = f[
        [
            "host_id",
            "run_id",
            "profile",
            "sizes_mib",
            "n",
            "dropped",
            "k",
            "k_rounds",
            "k_lo",
            "k_hi",
            "coverage",
        ]
    ].assign(coverage=lambda x: (100 * x.coverage).round(1))
    return (
        t.rename(
            columns={
                "n": "sizes fitted",
                "dropped": "shift <= 0",
                "k": "exponent_through_shifts",
                "k_rounds": "exponent_median_of_rounds",
                "k_lo": "ci_low",
                "k_hi": "ci_high",
                "coverage": "coverage_pct",
            }
        )
        .round(2)
        .set_index(["host_id", "run_id"])
    )


def writes_table(D):
    """Per host, workload and mode: runs, median wall and CPU s, the extra CPU over none."""
    sw, ovw = writes_summary(D), shown_overhead(D, "writes")
    wall = sw[sw.metric == "wall_s"].set_index(WRITES_BY)["median"].rename("wall_s")
    tw = ovw.set_index(WRITES_BY).join(wall)[
        [
            "n",
            "wall_s",
            "median",
            "extra",
            "extra_ci_low",
            "extra_ci_high",
            "share_pct",
            "p_value",
            "verdict",
        ]
    ]
    return tw.rename(columns={"median": "cpu_s"}).round(3)


def writes_spread(D):
    """The spread of the CPU time per run behind the medians (percentiles, CV)."""
    sw = writes_summary(D)
    return (
        sw[sw.metric == "cpu_s"]
        .set_index(WRITES_BY)[["n", "median", "ci_low", "ci_high", "p5", "p95", "cv"]]
        .round(3)
    )


def cycles_table(D):
    """The share of perf samples in the check, per host, workload and mode."""
    cy = D.of_shown(D["cycles"])
    return (
        cy.groupby(["host_id", "workload", "mode"])
        .agg(
            n=("check_pct", "size"),
            check_pct_median=("check_pct", "median"),
            check_pct_min=("check_pct", "min"),
            check_pct_max=("check_pct", "max"),
        )
        .round(2)
    )


def comparison_table(D):
    """The seed's 2014 shares next to ours (self share of sampled CPU in the check), each with
    its cluster size, and whether the two cluster sizes are the same."""
    ref = D.reference("qcow2_overlap")
    seed = ref[(ref.metric == "cycles_share_pct") & (ref.variant == "before_series")].set_index(
        "experiment"
    )
    wr = D.of_quoted(D["writes"])
    pct = perf_check_pct(D)

    def share(wl):
        """cached's median share of perf samples in the check in workload wl (NaN: not recorded)."""
        return float(pct.get((wl, "cached"), float("nan"))) if pct is not None else float("nan")

    def ours(wl, col):
        v = sorted(set(wr[wr.workload == wl][col].astype(int)))
        return v[0] if len(v) == 1 else None

    cy = D.of_quoted(D["cycles"])
    pre_mib = int(cy[cy.workload == "prealloc_512"].image_size.iloc[0]) // MiB if len(cy) else None
    rows = []
    ow_mib = int(wr[wr.workload == "overwrite_scattered_512"].image_size.iloc[0]) // MiB
    # the perf recording of each workload builds the image the timed runs use (collect.perf_shares)
    for what, exp, seed_what, cached, cs, mib in (
        (
            "metadata preallocation",
            "create_prealloc_metadata_512",
            "qemu-img create",
            share("prealloc_512"),
            512,
            pre_mib,
        ),
        (
            "sequential 64 KiB writes that allocate",
            "guest_dd_64k",
            "guest dd",
            share("allocate_sequential_64k"),
            ours("allocate_sequential_64k", "cluster_size"),
            (ours("allocate_sequential_64k", "image_size") or 0) // MiB,
        ),
        (
            "scattered 512 B overwrites, preallocated image",
            "guest_random_512_odirect",
            "guest O_DIRECT",
            share("overwrite_scattered_512"),
            ours("overwrite_scattered_512", "cluster_size"),
            ow_mib,
        ),
    ):
        r = seed.loc[exp]
        same_cs = cs is not None and int(r.cluster_size) == cs
        rows.append(
            {
                "workload": what,
                "seed 2014, before the series": f"{seed_what}: {r.value:.2f} %",
                "seed image": f"{int(r.image_size_mib)} MiB",
                "seed cluster size": f"{cluster_text(r.cluster_size)} ({r.cluster_size_basis.split(':')[0]})",
                "this host, overlap-check=cached": f"{cached:.2f} %",
                "our image": f"{mib} MiB" if mib else "—",
                "our cluster size": cluster_text(cs) if cs else "mixed",
                "same cluster size": "yes" if same_cs else "no: not like with like",
                "same image size": "yes" if mib == int(r.image_size_mib) else "no",
            }
        )
    return pd.DataFrame(rows)


FORMULA_COLUMNS = [
    "host_id",
    "cluster_size",
    "virtual_size_mib",
    "snapshots",
    "l2_tables",
    "refcount_blocks",
    "measured_clusters",
    "formula_virtual",
    "measured_list_kib",
    "formula_virtual_kib",
    "disk_usage_mib",
    "formula_disk_kib",
]


def formula_display(D):
    return formula_shown(D)[FORMULA_COLUMNS].round(2).reset_index(drop=True)


def host_comparison_table(D):
    hc = host_comparison(D)
    if not len(hc):
        return "no host comparison (see the text above)"
    return hc[
        [
            "case",
            "mode",
            "host_id",
            "baseline",
            "n_a",
            "n_b",
            "median_a",
            "median_b",
            "shift",
            "shift_low",
            "shift_high",
            "cliffs_delta",
            "p_value",
            "verdict",
        ]
    ].round(3)


def not_measured(D):
    """Per dataset: what it did not measure and why (its skips and notes), the perf event
    it sampled and where its scratch images lived."""
    rows = []
    cy = D["cycles"]
    for m in sorted(D.manifests, key=lambda m: m["run_id"]):
        mine = cy[(cy.host_id == m.host_id) & (cy.run_id == m["run_id"])] if len(cy) else cy
        scratch = m.facts.get("scratch") or {}
        rows.append(
            {
                "host": m.host_id,
                "run": m["run_id"],
                "what": "perf event",
                "why": mine.event.iloc[0] if len(mine) else "none",
            }
        )
        rows.append(
            {
                "host": m.host_id,
                "run": m["run_id"],
                "what": "scratch file system",
                "why": f"{scratch.get('filesystem')}; flushes: {scratch.get('flushes')}",
            }
        )
    t = pd.concat([skipped_table(D.manifests), pd.DataFrame(rows)], ignore_index=True)
    return t.sort_values(["host", "run"], kind="stable").reset_index(drop=True)
