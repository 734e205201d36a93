"""The tables the chapter shows, ready to display. Tables of every host show one dataset per
host (D.of_shown); the rest show the quoted dataset (the one the prose quotes)."""

from __future__ import annotations

import pandas as pd

from perfbook.data.dataset import skipped_table

from . import analysis as A


def netperf_length(p: dict) -> str:
    """How long each measured netperf run was: '1 s', '15,000 transactions' (quick), or as many
    transactions as the cell's rrbench run had just recorded (netperf_match, the default)."""
    if p.get("netperf_match"):
        return "as many transactions as the cell's rrbench run before it recorded"
    n = p.get("netperf_transactions")
    return f"{n:,} transactions" if n else f"{int(p['netperf_seconds'])} s"


def rounds_text(r) -> str:
    """The measured rounds of one dataset's runs: per path ('9 (loopback) and 9 (veth)') where
    every cell of a path ran as often, else the rounds of the cells that ran most and least
    ('9 (the cells the key findings read) and 2 (the others)': context_rounds)."""
    if r.empty:
        return "?"
    per_cell = r.groupby(["path", "proto", "pin"])["rep"].nunique()
    if per_cell.groupby(level="path").nunique().eq(1).all():
        per_path = r.groupby("path")["rep"].nunique()
        return " and ".join(f"{v} ({k})" for k, v in per_path.items())
    return f"{per_cell.max()} (the cells the key findings read) and {per_cell.min()} (the others)"


def run_columns(m, data) -> dict:
    """The chapter's columns of the shared runs table (dataset m; `data` the Data of it alone):
    repetition, rounds per path, run lengths."""
    p, runs = m.parameters, data["runs"]
    r = runs[(runs["host_id"] == m.host_id) & (runs["run_id"] == m["run_id"])]
    fixed = p.get("rep_min_runs") is not None and p.get("rep_min_runs") == p.get("rep_max_runs")
    return {
        "repetition": "adaptive" if "rep_target" in p and not fixed else "fixed",
        "rounds": rounds_text(r),
        "rrbench s/run": p["seconds"],
        "netperf/run": netperf_length(p),
        "pins": ",".join(p["pins"]),
        "skipped": "; ".join(m.skipped) or "-",
    }


def ladder(D):
    """Pooled P50..P99.9 and max per cell, one dataset per host."""
    lad = A.ladder(D.of_shown(D["runs"]), D.of_shown(D["hist"]))
    return lad.round({"rate_tps": 0, "P50": 1, "P90": 1, "P99": 1, "P99.9": 1, "max": 0})


def pin_effect(D):
    return A.pin_effect(D.ladder).round(2)


def _compact(t, keys: list[str]):
    """A comparison table (perfbook.analysis.stats.compare columns) cut to its key columns: the identifiers,
    the runs on each side, the Hodges-Lehmann shift with its 95 % interval in one cell, and the
    verdict (which already quotes the p-value and Cliff's delta). The medians, the separate
    interval ends, Cliff's delta and the p-value stay in A.pin_comparison/A.host_comparison."""

    def shift(r):
        if pd.isna(r["shift"]):
            return "-"
        return f"{r['shift']:.2f} [{r['shift_low']:.2f}, {r['shift_high']:.2f}]"

    out = t[keys].copy()
    out["runs"] = [f"{a} vs {b}" for a, b in zip(t["n_a"], t["n_b"])]
    out["shift µs (95 % CI)"] = [shift(r) for _, r in t.iterrows()]
    out["verdict"] = t["verdict"]
    return out.reset_index(drop=True)


def pin_comparison(D):
    """split and same against none, per dataset (every dataset: each is compared within itself)."""
    return _compact(A.pin_comparison(D["runs"]), ["host_id", "run_id", "path", "proto", "pin"])


def none_vs_pinned(D):
    return A.none_vs_pinned(D.of_shown(D["runs"])).round(1)


def max_clusters(D):
    return A.max_clusters(D.R).head(8)


def crossval(D):
    cv = A.crossval(D.of_shown(D["runs"]))
    return cv.pivot_table(
        index=["host_id", "path", "proto", "pin"],
        columns="percentile",
        values=["ours_us", "netperf_us", "diff_us", "tolerance_us", "agree"],
        aggfunc="first",
    ).round(1)


def netperf_summary(D):
    return A.netperf_summary(D.of_shown(D["runs"]))


def quantization(D):
    q = A.quantization(D.R)
    return (
        q.groupby("percentile")
        .agg(
            runs=("error_us", "size"),
            mean_error_us=("error_us", "mean"),
            max_abs_error_us=("error_us", lambda e: e.abs().max()),
            bucket_us=("bucket_us", "max"),
        )
        .round(2)
    )


def ping_vs_rr(D):
    return A.ping_vs_rr(D.of_shown(D["runs"]), D.of_shown(D["ping"])).round(1)


def sched(D):
    """The traced runs of the quoted dataset, per pinning mode and role."""
    Sn = D.of_quoted(D["sched"])
    if Sn is None or Sn.empty:
        return "no scheduler-tracepoint data in the quoted dataset"
    return Sn[
        [
            "pin",
            "role",
            "wakeups",
            "wakeups_per_transaction",
            "delay_mean_us",
            "delay_p50_us",
            "delay_p99_us",
            "delay_max_us",
            "traced_transactions",
            "traced_rr_mean_us",
            "overrun",
        ]
    ].round(2)


def sched_per_transaction(D):
    Sn = D.of_quoted(D["sched"])
    if Sn is None or Sn.empty:
        return "no scheduler-tracepoint data in the quoted dataset"
    return A.sched_per_transaction(Sn, D.R).round(2)


def versus_seed(D):
    return D.versus_seed.round(2)


def hosts_compared(D):
    """A.host_comparison of a Data's shown datasets against the prose's host, once per Data (the
    key findings and the table both read it)."""
    return D.once(
        "host_comparison",
        lambda: A.host_comparison(D["runs"], D.shown, D.quoted.host_id, manifests=D.manifests),
    )


def host_comparison(D):
    hc = hosts_compared(D)
    if hc.empty:
        return "no host comparison (see the text above)"
    return _compact(hc, ["path", "proto", "pin", "host_id", "baseline"])


def skipped(D):
    """Parts a run skipped, and why, from the manifests (the notes are left out)."""
    t = skipped_table(D.manifests)
    return pd.DataFrame(t[t["what"] != "note"]).reset_index(drop=True)
