"""qcow2_overlap: the analysis (frames in, frames out; no I/O beyond D, no plotting).

D is the chapter's tools.dataset.Data. The tables the notebook shows are one dataset per
host (D.of_shown); the prose quotes D.quoted (prose.py).
"""
from __future__ import annotations

from ...qcow2 import formula_bytes, formula_clusters
from .spec import MODES, MiB

PRE_BY = ["host_id", "cluster_size", "image_size", "mode"]
WRITES_BY = ["host_id", "workload", "mode"]


# -- statistics over raw runs -------------------------------------------------------------

def summary(df, by: list[str]):
    """Median + CI etc. of wall and CPU time per group (tidy, one row per metric)."""
    import pandas as pd
    from ...stats import summarize_frame
    out = []
    for metric in ("wall_s", "cpu_s", "user_s"):
        s = summarize_frame(df, by, metric)
        s.insert(len(by), "metric", metric)
        out.append(s)
    return pd.concat(out, ignore_index=True)


def overhead(df, by: list[str], metric: str = "cpu_s"):
    """Extra seconds of each mode over 'none' in the same group, from the raw runs.

    tools.stats.compare of the mode's runs against the 'none' runs: `extra` is the
    Hodges-Lehmann shift with its distribution-free interval (extra_ci_low/high; nominal
    95 %, real coverage from n and n_none: shift_ci_label),
    `p_value` the Mann-Whitney test's, `verdict` says "not significant" where it is not.
    """
    import numpy as np
    import pandas as pd
    from ...stats import compare
    rows = []
    keys = [k for k in by if k != "mode"]
    for key, g in df.groupby(keys):
        key = key if isinstance(key, tuple) else (key,)
        base = g.loc[g["mode"] == "none", metric].to_numpy(float)
        if len(base) < 2:
            continue
        for mode in [m for m in MODES if m in set(g["mode"])]:
            x = g.loc[g["mode"] == mode, metric].to_numpy(float)
            if len(x) < 2:
                continue
            c = compare(x, base, names=(mode, "none"))
            med = float(np.median(x))
            rows.append({**dict(zip(keys, key)), "mode": mode, "median": med,
                         "none_median": c.median_b, "extra": c.shift, "extra_ci_low": c.shift_low,
                         "extra_ci_high": c.shift_high, "n": len(x), "n_none": len(base),
                         "p_value": c.p_value,
                         "cliffs_delta": c.cliffs_delta, "significant": c.significant,
                         "verdict": c.verdict, "share_pct": 100 * c.shift / med if med else np.nan})
    return pd.DataFrame(rows)


def shift_ci_label(ov) -> str:
    """The real coverage of overhead()'s Hodges-Lehmann intervals in `ov`, e.g.
    '90–95.88 % CI' (tools.stats.hl_ci_label over the rows' (n, n_none))."""
    from ...stats import hl_ci_label
    if "n_none" not in ov.columns or ov.empty:
        return "CI of unknown coverage"
    return hl_ci_label(list(zip(ov["n"].astype(int), ov["n_none"].astype(int))))


def prealloc_bars_text(ov_cpu) -> str:
    """Caption sentence for the preallocation figure's bars, with the coverage of the plotted rows."""
    g = ov_cpu[(ov_cpu.cluster_size == 512) & ov_cpu["mode"].isin(["cached", "all"])]
    return ("Bars: Hodges-Lehmann interval of the shift against none (distribution-free), "
            f"{shift_ci_label(g)}")


def fit_quadratic(ov, mode: str = "cached"):
    """Fit extra CPU = a * size^2 (cluster size 512) and return (a, log-log slope); the check
    is O(size) per write and the number of writes is O(size), so the total should grow with
    size^2."""
    import numpy as np
    g = ov[(ov["mode"] == mode) & (ov.cluster_size == 512)]
    x = g.image_size.to_numpy(float)
    y = g.extra.to_numpy(float)
    if len(x) == 0:
        return float("nan"), float("nan")
    a = float(np.sum(x ** 2 * y) / np.sum(x ** 4))
    ok = y > 0  # log-log slope as a check on the exponent
    slope = float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0]) if ok.sum() >= 2 else float("nan")
    return a, slope


def formula_table(meta):
    """Measured metadata against the seed's 10 * IS / CS^2 (and 40 * IS / CS^2 bytes)."""
    import pandas as pd
    f = meta[meta.experiment.isin(["formula", "snapshots"])].copy()
    f = f.drop_duplicates(["host_id", "experiment", "cluster_size", "virtual_size", "nb_snapshots"],
                          keep="last")
    rows = []
    for r in f.itertuples():
        rows.append({
            "host_id": r.host_id, "cluster_size": r.cluster_size,
            "virtual_size_mib": r.virtual_size / MiB, "snapshots": r.nb_snapshots,
            "l2_tables": r.n_active_l2 + r.n_inactive_l2, "refcount_blocks": r.n_refcount_block,
            "measured_clusters": r.n_formula_scope,
            "formula_virtual": formula_clusters(r.virtual_size, r.cluster_size),
            "formula_file": formula_clusters(r.file_size, r.cluster_size),
            "formula_disk": formula_clusters(r.disk_usage, r.cluster_size),
            "measured_list_kib": 4 * r.n_formula_scope / 1024,
            "runs_list_kib": 4 * r.formula_scope_runs / 1024,
            "formula_virtual_kib": formula_bytes(r.virtual_size, r.cluster_size) / 1024,
            "formula_disk_kib": formula_bytes(r.disk_usage, r.cluster_size) / 1024,
            "disk_usage_mib": r.disk_usage / MiB, "file_size_mib": r.file_size / MiB,
        })
    return pd.DataFrame(rows).sort_values(["cluster_size", "virtual_size_mib", "snapshots"])


def caption_for(df, manifests, what: str, by: list[str], ci: bool = True, extra: str = "") -> str:
    """Caption from the runs shown: runs per group, warm-up rounds excluded, hosts."""
    from ...stats import caption, hosts_of
    runs = set(zip(df["host_id"], df["run_id"]))
    ms = [m for m in manifests if (m["host"]["host_id"], m["run_id"]) in runs]
    # warm-up rounds: rep_warmup now, warmup in the datasets of fixed repetition
    wu = [m["parameters"].get("rep_warmup", m["parameters"].get("warmup", 0)) for m in ms] or [0]
    return caption(what, n=df.groupby(by).size().to_numpy(), unit="runs", warmup=wu,
                   hosts=hosts_of(ms), ci=ci, extra=extra)


# -- the frames the chapter shows (one dataset per host) -----------------------------------

def resizes(D):
    """The timed metadata preallocations (no flushes) of the datasets shown."""
    pre = D.of_shown(D["prealloc"])
    return pre[pre.command == "resize_no_flush"]


def prealloc_overhead(D):
    """overhead() of every mode against none, per host, cluster size and image size."""
    return overhead(resizes(D), PRE_BY)


def writes(D):
    return D.of_shown(D["writes"])


def prealloc_table(D):
    """CPU seconds per run and each mode's extra over none, per host and size."""
    ov = prealloc_overhead(D)
    t = ov.assign(size_mib=ov.image_size // 2**20)[["host_id", "cluster_size", "size_mib", "mode", "n", "median",
                                                    "extra", "extra_ci_low", "extra_ci_high", "share_pct",
                                                    "p_value"]]
    t = t.assign(significant=ov["significant"].map({True: "yes", False: "no"}))
    return t.round(3).rename(columns={"median": "cpu_s"}).set_index(["host_id", "cluster_size", "size_mib", "mode"])


def writes_table(D):
    """Per host, workload and mode: runs, median wall and CPU s, the extra CPU over none."""
    wr = writes(D)
    sw, ovw = summary(wr, WRITES_BY), overhead(wr, WRITES_BY)
    wall = sw[sw.metric == "wall_s"].set_index(WRITES_BY)["median"].rename("wall_s")
    tw = ovw.set_index(WRITES_BY).join(wall)[["n", "wall_s", "median", "extra", "extra_ci_low",
                                              "extra_ci_high", "share_pct", "p_value", "verdict"]]
    return tw.rename(columns={"median": "cpu_s"}).round(3)


def writes_spread(D):
    """The spread of the CPU time per run behind the medians (percentiles, CV)."""
    sw = summary(writes(D), WRITES_BY)
    return sw[sw.metric == "cpu_s"].set_index(WRITES_BY)[["n", "median", "ci_low", "ci_high", "p5", "p95",
                                                           "cv"]].round(3)


def cycles_table(D):
    """The share of perf samples in the check, per host, workload and mode."""
    cy = D.of_shown(D["cycles"])
    return cy.groupby(["host_id", "workload", "mode"]).agg(
        n=("check_pct", "size"), check_pct_median=("check_pct", "median"),
        check_pct_min=("check_pct", "min"), check_pct_max=("check_pct", "max")).round(2)


def comparison_table(D):
    """The seed's 2014 figures next to ours (self share of sampled CPU in the check)."""
    import pandas as pd
    from .prose import headline
    h = headline(D)
    nan = float("nan")
    rows = [
        ("metadata preallocation, 512 B clusters",
         f"2 GiB create: {h['seed_pct_create']:.2f} %", f"{h.get('perf_pre_size_mib', 0)} MiB: "
         f"{h.get('perf_pre_cached', nan):.2f} %"),
        ("sequential 64 KiB writes that allocate",
         f"guest dd, 1 GB: {h['seed_pct_dd']:.2f} %", f"{h.get('perf_al_cached', nan):.2f} %"),
        ("scattered 512 B overwrites, preallocated image",
         f"guest O_DIRECT, 1 GB: {h['seed_pct_random']:.2f} %",
         f"{h['ow_size_mib']} MiB: {h.get('perf_ow_cached', nan):.2f} %"),
    ]
    return pd.DataFrame(rows, columns=["workload", "seed 2014, before the series",
                                       "this host, overlap-check=cached"])


FORMULA_COLUMNS = ["host_id", "cluster_size", "virtual_size_mib", "snapshots", "l2_tables", "refcount_blocks",
                   "measured_clusters", "formula_virtual", "measured_list_kib", "formula_virtual_kib",
                   "disk_usage_mib", "formula_disk_kib"]


def formula_shown(D):
    """formula_table() of the datasets shown (one per host)."""
    return formula_table(D.of_shown(D["metadata"]))


def formula_display(D):
    return formula_shown(D)[FORMULA_COLUMNS].round(2).reset_index(drop=True)


PARAMETER_ROWS = ["profile", "rep_target", "rep_min_runs", "rep_max_runs", "rep_budget_s", "rep_warmup",
                  "repeats", "warmup", "prealloc_sizes_512", "prealloc_sizes_64k", "bench_size",
                  "bench_count", "alloc_size", "snapshots", "snap_size", "snap_count", "perf_repeats"]


def parameters_table(D):
    """The parameters of the dataset shown for each host, one column per dataset."""
    import pandas as pd
    shown = D.shown
    ms = [m for m in D.manifests if shown.get(m.host_id) == m["run_id"]]
    return pd.DataFrame({f"{m.host_id} {m['run_id']}":
                         [str(m.profile if k == "profile" else m.parameters.get(k, "—")) for k in PARAMETER_ROWS]
                         for m in ms}, index=PARAMETER_ROWS)


def host_comparison(D):
    """Each other host's CPU time per run against the prose's dataset, case by case where
    both measured the same case (tools.stats.compare_frame; identical sizes and modes)."""
    import pandas as pd
    from ...stats import compare_frame
    if len(D.hosts) < 2:
        return pd.DataFrame()
    pre = resizes(D).assign(
        case=lambda t: "prealloc cs=" + t.cluster_size.astype(str) + " " + (t.image_size // MiB).astype(str) + " MiB")
    wr = writes(D).assign(
        case=lambda t: t.workload + " " + (t.image_size // MiB).astype(str) + " MiB x" + t.requests.astype(str))
    cols = ["host_id", "case", "mode", "cpu_s"]
    both = pd.concat([pre[cols], wr[cols]])
    return compare_frame(both, by="host_id", value="cpu_s", baseline=D.quoted.host_id, within=["case", "mode"])


def host_comparison_table(D):
    hc = host_comparison(D)
    if not len(hc):
        return "no host comparison (see the text above)"
    return hc[["case", "mode", "host_id", "baseline", "n_a", "n_b", "median_a", "median_b", "shift",
               "shift_low", "shift_high", "cliffs_delta", "p_value", "verdict"]].round(3)


def not_measured(D):
    """Per dataset: what it did not measure and why (its skips and notes), the perf event
    it sampled and where its scratch images lived."""
    import pandas as pd
    from ...dataset import skipped_table
    rows = []
    cy = D["cycles"]
    for m in sorted(D.manifests, key=lambda m: m["run_id"]):
        mine = cy[(cy.host_id == m.host_id) & (cy.run_id == m["run_id"])] if len(cy) else cy
        scratch = m.facts.get("scratch") or {}
        rows.append({"host": m.host_id, "run": m["run_id"], "what": "perf event",
                     "why": mine.event.iloc[0] if len(mine) else "none"})
        rows.append({"host": m.host_id, "run": m["run_id"], "what": "scratch file system",
                     "why": f"{scratch.get('filesystem')}; flushes: {scratch.get('flushes')}"})
    t = pd.concat([skipped_table(D.manifests), pd.DataFrame(rows)], ignore_index=True)
    return t.sort_values(["host", "run"], kind="stable").reset_index(drop=True)
