"""Frames in, frames out: per-trial metrics, the trials the summaries use, summaries, paired
effects, rank tests, per-core balance, the quoted dataset's effects in words and the seed's
figures beside them; PinningData, the loaded datasets and the quoted dataset's frames (no I/O
beyond the Data's, no plotting)."""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np
import pandas as pd

from perfbook.analysis import decide, stats
from perfbook.analysis.stats import compare_frame, summarize
from perfbook.data.dataset import Data
from perfbook.data.machine import host_pairs

from .parse import BASELINE, DISTURBED_PCT, LOADS, METRICS, ORDER, RATE_KEPT_UP, SEED_KNOBS


# -- row order: the analysis must not depend on the order rows were written in ----------
def _rank(seq, value) -> int:
    return list(seq).index(value) if value in seq else len(seq)


def in_order(df, key):
    """Rows sorted by host, run, then key(row): a tuple that reproduces the written order."""
    if df.empty:
        return df
    k = df.apply(key, axis=1)
    return (
        df.assign(_k=k)
        .sort_values(["host_id", "run_id", "_k"], kind="stable")
        .drop(columns="_k")
        .reset_index(drop=True)
    )


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
    t = trials.copy()
    t["throughput"] = t["completed"] / t["window_s"]
    # datasets from before the column was recorded: the same rule, from the counters
    kept_up = RATE_KEPT_UP * t["offered_rate"] * t["window_s"]
    computed = ((t["load"] == "rate") & (t["completed"] < kept_up)).astype("boolean")
    given = t["rate_saturated"] if "rate_saturated" in t else pd.Series(pd.NA, index=t.index)
    t["rate_saturated"] = given.astype("boolean").fillna(computed).fillna(False).astype(bool)
    t["cpu_per_req_us"] = t["worker_exec_ns"] / t["completed"] / 1e3
    t["all_cpu_per_req_us"] = (
        (t["worker_exec_ns"] + t["loadgen_exec_ns"] + t["backend_exec_ns"]) / t["completed"] / 1e3
    )
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


# -- which trials the summaries use (rules fixed in advance, parse.py) --------------------------
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
    if trials.empty:
        return pd.DataFrame(
            columns=["load", "variant", "trials", "disturbed", "rate_saturated", "used"]
        )
    t = trials.assign(
        _dist=trials["other_cpu_pct"] > DISTURBED_PCT if "other_cpu_pct" in trials else False,
        _sat=trials["rate_saturated"].fillna(False).astype(bool)
        if "rate_saturated" in trials
        else False,
    )
    t["_used"] = t.index.isin(comparable(trials).index)
    return (
        t.groupby(["load", "variant"])
        .agg(
            trials=("_used", "size"),
            disturbed=("_dist", "sum"),
            rate_saturated=("_sat", "sum"),
            used=("_used", "sum"),
        )
        .reset_index()
        .astype({"disturbed": int, "rate_saturated": int, "used": int})
    )


# -- summaries and effects -----------------------------------------------------------------
def summary(trials, metrics=tuple(METRICS), by=("host_id", "run_id", "load", "variant")):
    """Median over undisturbed rounds with the distribution-free CI, per group and metric."""
    rows = []
    for key, g in comparable(trials).groupby(list(by), sort=True):
        for m in metrics:
            if m not in g:
                continue
            s = summarize(g[m])
            rows.append(
                {
                    **dict(zip(by, key)),
                    "metric": m,
                    "n": s.n,
                    "median": s.median,
                    "ci_low": s.ci_low,
                    "ci_high": s.ci_high,
                    "ci_coverage": s.ci_coverage,
                    "p5": s.p5,
                    "p95": s.p95,
                }
            )
    return pd.DataFrame(
        rows,
        columns=[*by, "metric", "n", "median", "ci_low", "ci_high", "ci_coverage", "p5", "p95"],
    )


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
    rows = []
    keys = ["host_id", "run_id", "load"]
    t = comparable(trials)
    metrics = [m for m in metrics if m in t]
    t = t[[*keys, "variant", "round", *metrics]]  # the columns read: cheaper to cut and index
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
                rows.append(
                    {
                        **dict(zip(keys, key)),
                        "variant": variant,
                        "metric": m,
                        "n_rounds": s.n,
                        "change_pct": s.median,
                        "ci_low": s.ci_low,
                        "ci_high": s.ci_high,
                        "ci_coverage": s.ci_coverage,
                    }
                )
    return pd.DataFrame(
        rows,
        columns=[
            *keys,
            "variant",
            "metric",
            "n_rounds",
            "change_pct",
            "ci_low",
            "ci_high",
            "ci_coverage",
        ],
    )


def compare_variants(trials, metrics=("cpu_per_req_us", "lat_p99_ms"), baseline: str = BASELINE):
    """Every variant against the baseline, per host, run and load, with perfbook.analysis.stats.compare
    (Mann-Whitney U, Cliff's delta, Hodges-Lehmann shift) over undisturbed trials."""
    t = comparable(trials)
    frames = [
        compare_frame(
            t, by="variant", value=m, baseline=baseline, within=["host_id", "run_id", "load"]
        ).assign(metric=m)
        for m in metrics
        if m in t
    ]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def compare_hosts(shown_trials, metric: str = "cpu_per_req_us", manifests=()):
    """Each host's shown dataset (D.of_shown) against the first host's, per load and variant;
    a TCG host against a real CPU is not compared (perfbook.data.machine.comparable)."""
    t = comparable(shown_trials)
    if t.empty or t.host_id.nunique() < 2:
        return t.iloc[0:0]
    base = sorted(t.host_id.unique())[0]
    return compare_frame(
        t,
        by="host_id",
        value=metric,
        baseline=base,
        within=["load", "variant"],
        pair_check=host_pairs(manifests),
    )


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
        return {
            "text": "not measured",
            "verdict": "not measured",
            "change": math.nan,
            "lo": math.nan,
            "hi": math.nan,
            "n": 0,
        }
    if r.ci_low > 0:
        verdict = "higher"
    elif r.ci_high < 0:
        verdict = "lower"
    else:
        verdict = "not distinguishable from the baseline"
    return {
        "text": f"{fmt_pct(r.change_pct)} (CI {fmt_pct(r.ci_low)} to {fmt_pct(r.ci_high)})",
        "verdict": verdict,
        "change": float(r.change_pct),
        "lo": float(r.ci_low),
        "hi": float(r.ci_high),
        "n": int(r.n_rounds),
    }


def round_values(trials, load: str, variant: str, metric: str):
    """One variant's per-round values of `metric` under `load` from the comparable trials of
    one dataset (a trial is one round's run of a variant: the unit of repetition)."""
    t = comparable(trials)
    at = (t["load"] == load) & (t["variant"] == variant)
    return t.loc[at, metric].to_numpy(dtype=float)


def round_ratio(a, b, what: str = "rounds") -> decide.Estimate:
    """a / b of two variants' per-round values as decide.ratio gives it (exp of the
    Hodges-Lehmann shift of the logs, Moses' interval), where `a` may hold zeros (a round
    without a single event of a count): a zero is log 0 = -inf, the smallest of the pairwise
    log ratios, so the ranks and the interval's coverage are those of decide.ratio. b > 0."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    if (a < 0).any() or (b <= 0).any():
        raise ValueError("round_ratio() needs a >= 0 and b > 0")
    if (a > 0).all():
        return decide.ratio(a, b, what=what)
    with np.errstate(divide="ignore"):
        est, lo, hi = stats.hodges_lehmann(np.log(a), np.log(b))
    cov, _ = stats.hodges_lehmann_coverage(len(a), len(b))
    return decide.Estimate(
        math.exp(est),
        math.exp(lo),
        math.exp(hi),
        0.0 if math.isnan(cov) else cov,
        f"ratio from the Hodges-Lehmann shift of logs, {len(a)} against {len(b)} {what} "
        f"({int((a == 0).sum())} of them 0)",
        "log",
    )


# -- per-core balance ----------------------------------------------------------------------
def busy_cores(cores, trials):
    """The per-CPU rows of undisturbed trials of one dataset (cores and trials of that dataset)."""
    c = cores.merge(
        trials[["round", "variant", "load", "other_cpu_pct"]], on=["round", "variant", "load"]
    )
    return c[~(c.other_cpu_pct > DISTURBED_PCT)]


def core_spread(busy):
    """Median over rounds of (busiest - idlest CPU busy share), percentage points."""
    return (
        busy.groupby(["load", "variant", "round"])
        .busy_frac.agg(lambda s: s.max() - s.min())
        .mul(100)
        .groupby(["load", "variant"])
        .median()
    )


# -- the quoted dataset's effects in words, and the seed's figures beside them (tables and prose) --
TUNED = ("pinned", "slice_10ms", "batch", "pinned_tuned")  # the variants with an effect
ALL = ("unpinned", *TUNED)
SHORT = (
    ("cpu_per_req_us", "cpu"),
    ("lat_mean_ms", "mean"),
    ("lat_p99_ms", "p99"),
    ("throughput", "thr"),
    ("all_cpu_per_req_us", "allcpu"),
    ("machine_busy_pct", "busy"),
)


def effect_words(D) -> dict:
    """(short metric, variant, load) -> effect_of() of the quoted dataset."""
    return {
        (short, v, load): effect(D, load, v, m)
        for load in ("rate", "sat")
        for v in TUNED
        for m, short in SHORT
    }


def effect(D, load: str, variant: str, metric: str) -> dict:
    """One paired effect of the quoted dataset in words (its effects are read once: D.EW)."""
    return D.EW.get((load, variant, metric)) or effect_of(None)


def switch_medians(D):
    """Median migrations/s and switches per request, per load and variant: the pivot of
    summary()'s medians (metrics in name order; a load and variant, or a metric, without any
    value left out), from D.M."""
    mm = D.M[sorted(("worker_migr_per_s", "invol_per_req", "vol_per_req"))]
    return mm.dropna(how="all").dropna(how="all", axis=1).rename_axis(columns="metric")


def host_summary(D):
    """Each host's shown dataset: worker CPU, p99 and throughput per load and variant."""
    return summary(D.of_shown(D["trials"]), metrics=("cpu_per_req_us", "lat_p99_ms", "throughput"))


def mean_ms(x: float) -> str:
    """A mean latency of seed_claims in words: n/a where no comparable trial of the variant is
    left at the fixed rate (every one disturbed, or behind the rate), as in a one-round run."""
    return "n/a" if math.isnan(x) else f"{x:.3f} ms"


def seed_claims(D) -> dict:
    """The seed's figures (data/reference/cpu_pinning.csv) and ours beside them."""
    ref = D.reference("cpu_pinning")
    mean = D.M["lat_mean_ms"]
    mrt = ref[ref.quantity == "mean_response_time"].set_index("applies_to").value
    return {
        "ref": ref,
        "cpu_claims": ref[ref.quantity == "cpu_usage_change"].set_index("applies_to").value,
        "before": mrt["before"],
        "after": mrt["both"],
        "lat_un": mean.get(("rate", "unpinned"), math.nan),
        "lat_tu": mean.get(("rate", "pinned_tuned"), math.nan),
    }


# -- the loaded datasets (perfbook.data.dataset.Data) and the quoted dataset's frames --------
EFFECT_METRICS = (
    "cpu_per_req_us",
    "all_cpu_per_req_us",
    "machine_busy_pct",
    "lat_mean_ms",
    "lat_p99_ms",
    "throughput",
)


class PinningData(Data):
    """D["trials"] carries the per-trial metrics (derive); D["knobs"] and
    D["repetition"] are in the order the collect step writes them, whatever the row order
    on disk. The quoted dataset's frames: D.TL (its trials), D.S (summary), D.M (its medians
    alone), D.E (paired effects; D.EW, the same in words by key), D.XR (exclusions), D.K (its
    knob inventory), D.cores_quoted and D.tasks_quoted (its per-CPU and per-task rows), D.warm
    (its warm-up rounds) and D.host_caption. Each host's shown dataset:
    D.SH (host_summary) and D.CH (compare_hosts), computed once for the
    tables, the figure and the prose that read them."""

    def prepare(self, name: str, df):
        if name == "trials" and len(df):
            df = derive(df)
        elif name == "knobs":
            df = in_order(df, knob_rank)
        elif name == "repetition":
            df = in_order(df, repetition_rank)
        return df

    # -- the quoted dataset ------------------------------------------------------------
    @cached_property
    def TL(self):
        return self.of_quoted(self["trials"])

    @cached_property
    def S(self):
        return summary(self.TL)

    @cached_property
    def M(self):
        """medians() of every metric (and vol_per_req) per load and variant: what the
        prose reads of D.S, and of the switches, without computing their intervals."""
        return medians(self.TL, (*METRICS, "vol_per_req"))

    @cached_property
    def E(self):
        return paired_effects(self.TL, metrics=EFFECT_METRICS)

    @cached_property
    def EW(self) -> dict:
        """(load, variant, metric) -> effect_of() of every paired effect in D.E: the
        prose, its key findings and the seed's table read them by key, many times each."""
        return effects_by_key(self.E)

    @cached_property
    def XR(self):
        return exclusions(self.TL)

    @cached_property
    def K(self):
        # not quoted_rows: the knobs table shows the fleet table's index, which of_quoted keeps
        return self.of_quoted(self["knobs"])

    # the quoted dataset's per-CPU and per-task rows, from its own files (Data.quoted_rows):
    # reading every host's for them was most of the prose's time at a hundred hosts
    @cached_property
    def cores_quoted(self):
        return self.quoted_rows("cores")

    @cached_property
    def tasks_quoted(self):
        return self.quoted_rows("tasks")

    # -- each host's shown dataset: the hosts table, its figure and the prose read them ----
    @cached_property
    def SH(self):
        return host_summary(self)

    @cached_property
    def CH(self):
        return compare_hosts(self.of_shown(self["trials"]), manifests=self.manifests)

    @property
    def p(self) -> dict:
        return self.quoted.parameters

    @property
    def warm(self) -> int:
        return warmup_rounds(
            warmups(self["repetition"]), self.quoted.host_id, self.quoted["run_id"]
        )

    @property
    def host_caption(self) -> list[tuple]:
        h = self.quoted.host
        return [(h["host_id"], h.get("description"))]
