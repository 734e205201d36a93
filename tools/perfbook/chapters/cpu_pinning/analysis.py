"""Frames in, frames out: per-trial metrics, the trials the summaries use, summaries, paired
effects, rank tests, per-core balance (no I/O, no plotting)."""
from __future__ import annotations

import math

from .spec import BASELINE, DISTURBED_PCT, LOADS, METRICS, ORDER, RATE_KEPT_UP, SEED_KNOBS


# -- row order: the analysis must not depend on the order rows were written in ----------
def _rank(seq, value) -> int:
    return list(seq).index(value) if value in seq else len(seq)


def in_order(df, key):
    """Rows sorted by host, run, then key(row): a tuple that reproduces the written order."""
    if df.empty:
        return df
    k = df.apply(key, axis=1)
    return (df.assign(_k=k).sort_values(["host_id", "run_id", "_k"], kind="stable")
            .drop(columns="_k").reset_index(drop=True))


def knob_rank(row) -> tuple:
    """knob_inventory's order: today's debugfs files by name; per SEED_KNOBS entry its sysctl
    and, if gone, its 5.13 debugfs file; then the sysctl_sched block of sched/debug by name."""
    knob = row["knob"]
    for i, (old, info) in enumerate(SEED_KNOBS.items()):
        if knob == f"sysctl kernel.{old}":
            return (1, i, 0, "")
        if row["era"] != "now" and knob == f"debugfs sched/{info['debugfs_5_13']}":
            return (1, i, 1, "")
    return (2 if knob.startswith("sched/debug") else 0, 0, 0, knob)


def repetition_rank(row) -> tuple:
    return (_rank(LOADS, row["experiment"]), _rank(ORDER, row["key"]), row["key"])


# -- per-trial metrics ---------------------------------------------------------------------
def derive(trials):
    """Per-trial metrics from the raw counters."""
    import pandas as pd
    t = trials.copy()
    t["throughput"] = t["completed"] / t["window_s"]
    # datasets from before the column was recorded: the same rule, from the counters
    kept_up = RATE_KEPT_UP * t["offered_rate"] * t["window_s"]
    computed = ((t["load"] == "rate") & (t["completed"] < kept_up)).astype("boolean")
    given = t["rate_saturated"] if "rate_saturated" in t else pd.Series(pd.NA, index=t.index)
    t["rate_saturated"] = given.astype("boolean").fillna(computed).fillna(False).astype(bool)
    t["cpu_per_req_us"] = t["worker_exec_ns"] / t["completed"] / 1e3
    t["all_cpu_per_req_us"] = (t["worker_exec_ns"] + t["loadgen_exec_ns"] + t["backend_exec_ns"]) \
        / t["completed"] / 1e3
    t["machine_cpu_per_req_us"] = t["busy_ticks"] / t["clk_tck"] / t["completed"] * 1e6
    t["machine_busy_pct"] = 100 * t["busy_ticks"] / t["total_ticks"]
    # CPU the rest of the host used during the window (interference), in % of one CPU
    ours_s = (t["worker_exec_ns"] + t["loadgen_exec_ns"] + t["backend_exec_ns"]) / 1e9
    t["other_cpu_pct"] = 100 * (t["busy_ticks"] / t["clk_tck"] - ours_s) / t["window_s"]
    t["worker_cpu_pct"] = 100 * t["worker_exec_ns"] / 1e9 / t["window_s"]
    for q in ("p50", "p90", "p99", "p999", "max"):
        t[f"lat_{q}_ms"] = t[f"lat_{q}_ns"] / 1e6
    t["lat_mean_ms"] = t["lat_mean_ns"] / 1e6
    # Little's law: mean requests in flight (about `workers` at saturation)
    t["in_flight"] = t["completed"] * t["lat_mean_ns"] / 1e9 / t["window_s"]
    t["invol_per_req"] = t["worker_nivcsw"] / t["completed"]
    t["vol_per_req"] = t["worker_nvcsw"] / t["completed"]
    t["worker_migr_per_s"] = t["worker_migrations"] / t["window_s"]
    if "worker_migrations_trace" in t and t["worker_migrations_trace"].notna().any():
        t["worker_migr_trace_per_s"] = t["worker_migrations_trace"].astype(float) / t["window_s"]
    return t


def warmups(repetition):
    """The warm-up rounds of every dataset of a repetition table, by (host_id, run_id), for
    warmup_rounds(): one grouping, not a filter of the whole table per dataset."""
    if repetition is None or repetition.empty:
        return {}
    return repetition.groupby(["host_id", "run_id"], sort=False)["warmup"].max()


def warmup_rounds(rounds, host_id, run_id) -> int:
    """Warm-up rounds of one dataset, from warmups() (0 for datasets from before adaptive
    repetition)."""
    w = rounds.get((host_id, run_id))
    return 0 if w is None else int(w)


# -- which trials the summaries use (rules fixed in advance, spec.py) --------------------------
def undisturbed(trials):
    if "other_cpu_pct" not in trials:
        return trials
    return trials[~(trials["other_cpu_pct"] > DISTURBED_PCT)]


def comparable(trials):
    """The trials the summaries and comparisons use: undisturbed, and for the fixed-rate
    load only those that kept up with the rate."""
    t = undisturbed(trials)
    if "rate_saturated" in t:
        t = t[~t["rate_saturated"].fillna(False).astype(bool)]
    return t


def exclusions(trials):
    """Per load and variant: trials, how many were disturbed, how many ran saturated at the
    fixed rate, and how many the summaries use."""
    import pandas as pd
    if trials.empty:
        return pd.DataFrame(columns=["load", "variant", "trials", "disturbed", "rate_saturated",
                                     "used"])
    t = trials.assign(
        _dist=trials["other_cpu_pct"] > DISTURBED_PCT if "other_cpu_pct" in trials else False,
        _sat=trials["rate_saturated"].fillna(False).astype(bool) if "rate_saturated" in trials
        else False)
    t["_used"] = t.index.isin(comparable(trials).index)
    return (t.groupby(["load", "variant"]).agg(trials=("_used", "size"), disturbed=("_dist", "sum"),
                                               rate_saturated=("_sat", "sum"), used=("_used", "sum"))
            .reset_index().astype({"disturbed": int, "rate_saturated": int, "used": int}))


# -- summaries and effects -----------------------------------------------------------------
def summary(trials, metrics=tuple(METRICS), by=("host_id", "run_id", "load", "variant")):
    """Median over undisturbed rounds with the distribution-free CI, per group and metric."""
    import pandas as pd
    from perfbook.analysis.stats import summarize
    rows = []
    for key, g in comparable(trials).groupby(list(by), sort=True):
        for m in metrics:
            if m not in g:
                continue
            s = summarize(g[m])
            rows.append({**dict(zip(by, key)), "metric": m, "n": s.n, "median": s.median,
                         "ci_low": s.ci_low, "ci_high": s.ci_high, "ci_coverage": s.ci_coverage,
                         "p5": s.p5, "p95": s.p95})
    return pd.DataFrame(rows, columns=[*by, "metric", "n", "median", "ci_low", "ci_high",
                                       "ci_coverage", "p5", "p95"])


def medians(trials, metrics=tuple(METRICS), by=("load", "variant")):
    """summary()'s medians alone, wide: a row per group of the comparable trials (every group,
    as summary() has; NaN where a metric has no value), a column per metric. The prose of each
    dataset reads only medians, and the intervals are most of summary()'s cost. The group
    median is np.median's over the values that are not NaN, as in summarize()."""
    t = comparable(trials)
    return t.groupby(list(by), sort=True)[[m for m in metrics if m in t]].median()


def paired_effects(trials, metrics=tuple(METRICS), baseline: str = BASELINE):
    """Per round, variant / baseline - 1 (same round, same load): median and CI over rounds.

    Rounds interleave the variants, so pairing by round removes slow drift of the host.
    A pair is used only if neither of its trials was disturbed.
    """
    import pandas as pd
    from perfbook.analysis.stats import summarize
    rows = []
    keys = ["host_id", "run_id", "load"]
    t = comparable(trials)
    metrics = [m for m in metrics if m in t]
    t = t[[*keys, "variant", "round", *metrics]]      # the columns read: cheaper to cut and index
    for key, g in t.groupby(keys, sort=True):
        base = g[g.variant == baseline].set_index("round")[metrics]
        for variant, gv in g.groupby("variant", sort=False):
            if variant == baseline:
                continue
            gv = gv.set_index("round")[metrics]
            common = gv.index.intersection(base.index)
            # every metric's ratios at once (one selection per variant, not one per metric)
            rel = (gv.loc[common] / base.loc[common] - 1) * 100
            for m in metrics:
                s = summarize(rel[m])
                rows.append({**dict(zip(keys, key)), "variant": variant, "metric": m,
                             "n_rounds": s.n, "change_pct": s.median, "ci_low": s.ci_low,
                             "ci_high": s.ci_high, "ci_coverage": s.ci_coverage})
    return pd.DataFrame(rows, columns=[*keys, "variant", "metric", "n_rounds", "change_pct",
                                       "ci_low", "ci_high", "ci_coverage"])


def compare_variants(trials, metrics=("cpu_per_req_us", "lat_p99_ms"), baseline: str = BASELINE):
    """Every variant against the baseline, per host, run and load, with perfbook.analysis.stats.compare
    (Mann-Whitney U, Cliff's delta, Hodges-Lehmann shift) over undisturbed trials."""
    import pandas as pd
    from perfbook.analysis.stats import compare_frame
    t = comparable(trials)
    frames = [compare_frame(t, by="variant", value=m, baseline=baseline,
                            within=["host_id", "run_id", "load"]).assign(metric=m)
              for m in metrics if m in t]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def compare_hosts(shown_trials, metric: str = "cpu_per_req_us", manifests=()):
    """Each host's shown dataset (D.of_shown) against the first host's, per load and variant;
    a TCG host against a real CPU is not compared (perfbook.data.machine.comparable)."""
    from perfbook.data.machine import host_pairs
    from perfbook.analysis.stats import compare_frame
    t = comparable(shown_trials)
    if t.empty or t.host_id.nunique() < 2:
        return t.iloc[0:0]
    base = sorted(t.host_id.unique())[0]
    return compare_frame(t, by="host_id", value=metric, baseline=base, within=["load", "variant"],
                         pair_check=host_pairs(manifests))


def fmt_pct(x: float) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.1f} %"


def effects_by_key(eff) -> dict:
    """(load, variant, metric) -> effect_of() each paired effect in `eff` (the first row of a
    key), from one pass over its rows: the prose asks for every variant x load x metric of each
    dataset, and filtering the frame once per effect was most of the key findings' time."""
    rows = {}
    for r in eff.itertuples(index=False):
        rows.setdefault((r.load, r.variant, r.metric), r)
    return {k: effect_of(r) for k, r in rows.items()}


def effect_of(r) -> dict:
    """One paired effect (a row of paired_effects(); None: not measured) as numbers and words
    (for the chapter's prose)."""
    if r is None:
        return {"text": "not measured", "verdict": "not measured", "change": math.nan,
                "lo": math.nan, "hi": math.nan, "n": 0}
    if r.ci_low > 0:
        verdict = "higher"
    elif r.ci_high < 0:
        verdict = "lower"
    else:
        verdict = "not distinguishable from the baseline"
    return {"text": f"{fmt_pct(r.change_pct)} (CI {fmt_pct(r.ci_low)} to {fmt_pct(r.ci_high)})",
            "verdict": verdict, "change": float(r.change_pct), "lo": float(r.ci_low),
            "hi": float(r.ci_high), "n": int(r.n_rounds)}


# -- per-core balance ----------------------------------------------------------------------
def busy_cores(cores, trials):
    """The per-CPU rows of undisturbed trials of one dataset (cores and trials of that dataset)."""
    c = cores.merge(trials[["round", "variant", "load", "other_cpu_pct"]],
                    on=["round", "variant", "load"])
    return c[~(c.other_cpu_pct > DISTURBED_PCT)]


def core_spread(busy):
    """Median over rounds of (busiest - idlest CPU busy share), percentage points."""
    return (busy.groupby(["load", "variant", "round"]).busy_frac.agg(lambda s: s.max() - s.min())
            .mul(100).groupby(["load", "variant"]).median())


# -- the runs table's chapter columns ------------------------------------------------------------
def run_columns(m, D) -> dict:
    t = D["trials"]
    mine = t[(t.host_id == m.host_id) & (t.run_id == m["run_id"])] if len(t) else t
    return {"description": m["host"].get("description"),
            "rounds": mine["round"].nunique() if len(mine) else 0,
            "repetition": "adaptive" if "repetition" in m["tables"] else "fixed",
            "workers": m.parameters.get("workers"), "CPUs": m["host"].get("cpus_online"),
            "fixed rate (req/s)": m.facts.get("calibration", {}).get("rate_req_s")}
