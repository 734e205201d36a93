"""The tables the chapter shows, ready to display (frames in, frames out), and the chapter's
columns of the runs table."""

from __future__ import annotations

import pandas as pd

from . import analysis as A
from .analysis import effect_words, seed_claims, switch_medians
from .parse import VARIANTS

RESULT_COLS = {
    "throughput": "req/s",
    "cpu_per_req_us": "worker CPU µs/req",
    "all_cpu_per_req_us": "all CPU µs/req",
    "machine_busy_pct": "machine busy %",
    "lat_mean_ms": "mean latency ms",
    "lat_p99_ms": "p99 ms",
    "worker_migr_per_s": "worker migrations/s",
    "invol_per_req": "invol. switches/req",
}
EFFECT_COLS = [
    "cpu_per_req_us",
    "all_cpu_per_req_us",
    "machine_busy_pct",
    "lat_mean_ms",
    "lat_p99_ms",
    "throughput",
]


def knobs(D):
    """The knob inventory of the quoted dataset."""
    return (
        D.K[
            [
                "knob",
                "era",
                "exists_here",
                "readable_here",
                "writable_here",
                "value_here",
                "error",
                "seed_value",
                "tuned_value",
            ]
        ]
        .astype(object)
        .fillna("")
    )


def variants(D):
    measured = D.quoted.facts["variants_measured"]
    return pd.DataFrame(
        [
            {"variant": v, "what": VARIANTS[v]["what"], "measured here": v in measured}
            for v in VARIANTS
        ]
    )


def repetition_keys(D):
    """Per dataset, load and variant: rounds, the median and CI reached, and why it stopped."""
    R = D["repetition"]
    cols = [
        "host_id",
        "run_id",
        "experiment",
        "key",
        "n",
        "warmup",
        "median",
        "ci_low",
        "ci_high",
        "rel_ci_width",
        "met_target",
        "stopped_by",
    ]
    return (
        R.reindex(columns=cols)
        .rename(
            columns={"experiment": "load", "key": "variant", "median": "median worker CPU µs/req"}
        )
        .round(3)
    )


def exclusions(D):
    return D.XR.set_index(["load", "variant"])


def results(D):
    """Median per load and variant of every metric, quoted dataset."""
    tab = D.S.pivot_table(index=["load", "variant"], columns="metric", values="median")
    tab = tab.reindex(columns=list(RESULT_COLS))
    tab.columns = list(RESULT_COLS.values())
    return tab.round(3)


def effects(D):
    """Paired change against unpinned: median [CI] over rounds, per load, variant and metric."""
    eff = D.E.copy()
    eff["change"] = [
        f"{A.fmt_pct(r.change_pct)} [{A.fmt_pct(r.ci_low)}, {A.fmt_pct(r.ci_high)}]"
        for r in eff.itertuples()
    ]
    t = eff.pivot_table(
        index=["load", "variant"], columns="metric", values="change", aggfunc="first"
    )
    return t.reindex(columns=EFFECT_COLS)


def comparisons(D):
    CV = A.compare_variants(D.TL)
    if not len(CV):
        return "no comparisons"
    return CV[
        [
            "load",
            "variant",
            "metric",
            "n_a",
            "n_b",
            "median_a",
            "median_b",
            "rel_shift",
            "rel_low",
            "rel_high",
            "p_value",
            "cliffs_delta",
            "magnitude",
            "verdict",
        ]
    ].round(4)


def switches(D):
    return switch_medians(D).round(2)


def spread(D):
    busy = A.busy_cores(D.cores_quoted, D.TL)
    return (
        A.core_spread(busy)
        .rename("median busiest - idlest CPU (percentage points)")
        .round(1)
        .to_frame()
    )


def hosts(D):
    """Median [CI] per metric, load and variant, one column per host (shown datasets)."""
    SH = D.SH
    wide = SH.assign(
        value=[f"{r.median:.3g} [{r.ci_low:.3g}, {r.ci_high:.3g}]" for r in SH.itertuples()]
    )
    return wide.pivot_table(
        index=["metric", "load", "variant"], columns="host_id", values="value", aggfunc="first"
    )


def host_comparisons(D):
    CH = D.CH
    if not len(CH):
        return None
    return CH[
        [
            "load",
            "variant",
            "host_id",
            "baseline",
            "n_a",
            "n_b",
            "median_a",
            "median_b",
            "rel_shift",
            "p_value",
            "cliffs_delta",
            "verdict",
        ]
    ].round(4)


def beside_seed(D):
    """The seed's claims and ours at the fixed rate."""
    c = seed_claims(D)
    words = effect_words(D)

    def ours(load, v, short):
        e = words.get((short, v, load))
        return e["text"] if e else "not measured"

    rows = []
    for _, r in c["ref"].iterrows():
        if r.quantity != "cpu_usage_change":
            continue
        if r.applies_to == "scheduler tunables":
            here = f"slice_10ms: {ours('rate', 'slice_10ms', 'cpu')}; batch: {ours('rate', 'batch', 'cpu')}"
            busy = f"slice_10ms: {ours('rate', 'slice_10ms', 'busy')}; batch: {ours('rate', 'batch', 'busy')}"
        else:
            v = {"pinned": "pinned", "both": "pinned_tuned"}[r.applies_to]
            here, busy = ours("rate", v, "cpu"), ours("rate", v, "busy")
        rows.append(
            {
                "claim": f"CPU usage, {r.applies_to}",
                "seed": f"{r.value:+.0f} %",
                "here (fixed rate, worker CPU per request)": here,
                "here (fixed rate, busy % of all CPUs)": busy,
            }
        )
    lat_un, lat_tu = c["lat_un"], c["lat_tu"]
    rows.append(
        {
            "claim": "mean response time, before -> after both tunings",
            "seed": f"{c['before']:.0f} ms -> {c['after']:.0f} ms",
            "here (fixed rate, worker CPU per request)": (
                f"{A.mean_ms(lat_un)} -> {A.mean_ms(lat_tu)} (mean latency)"
            ),
            "here (fixed rate, busy % of all CPUs)": "",
        }
    )
    return pd.DataFrame(rows)


# -- the runs table's chapter columns ------------------------------------------------------------
def run_columns(m, data) -> dict:
    """The runs table's columns of dataset m (`data`: the Data of m alone)."""
    t = data["trials"]
    mine = t[(t.host_id == m.host_id) & (t.run_id == m["run_id"])] if len(t) else t
    return {
        "description": m["host"].get("description"),
        "rounds": mine["round"].nunique() if len(mine) else 0,
        "repetition": "adaptive" if "repetition" in m["tables"] else "fixed",
        "workers": m.parameters.get("workers"),
        "CPUs": m["host"].get("cpus_online"),
        "fixed rate (req/s)": m.facts.get("calibration", {}).get("rate_req_s"),
    }
