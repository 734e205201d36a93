"""sched_callers: the tables the page shows (D -> DataFrame), and the chapter's columns of the
runs table."""

from __future__ import annotations

import pandas as pd

from .analysis import (
    STACK_TRACERS,
    agreement,
    callers_of,
    callers_wide,
    cost_per_event,
    dataset_key,
    probe_effect,
)
from .parse import ENTRIES


def run_columns(m, data) -> dict:
    """The chapter's columns of the shared runs table for dataset m (data: the Data of m alone)."""
    q = m["parameters"]
    r = data["runs"]
    n = r[r.dataset == dataset_key(m)]["round"].nunique() if len(r) else 0
    return {
        "rounds": n,
        "hackbench": f"-g {q['hackbench_groups']} -l {q['hackbench_loops']} "
        f"× {q['hackbench_runs']} per round",
    }


def callers_table(D, workload: str):
    """The quoted dataset's top callers under one workload: a row per caller, a column per
    tracer, shares in % (analysis.callers_wide)."""
    return callers_wide(D, workload)


def agreement_table(D):
    """Per workload and pair of tracers: their rank agreement on the callers (analysis.agreement)."""
    return agreement(D).round(2)


def entries_table(D, dataset: str | None = None):
    """How each tracer's switches entered __schedule, per workload (shares in %)."""
    c = callers_of(D)
    ds = dataset or dataset_key(D.quoted)
    c = c[c.dataset == ds]
    t = (
        c.pivot_table(
            index=["workload", "entry"],
            columns="tracer",
            values="share",
            aggfunc="sum",
            fill_value=0.0,
        )
        * 100
    )
    t = t[[x for x in STACK_TRACERS if x in t.columns]].round(1)
    t["what"] = [ENTRIES.get(e, "") for _, e in t.index]
    return t


def probe_table(D):
    """Per dataset and tracer: hackbench's time, the slowdown against the untraced runs, and
    the extra time per traced switch (analysis.cost_per_event: ns per switch, its interval)."""
    t = probe_effect(D["runs"])
    c = cost_per_event(D["runs"], D["sessions"])[
        ["dataset", "tracer", "events_per_run", "ns_per_event", "ns_lo", "ns_hi"]
    ]
    t = t.merge(c, on=["dataset", "tracer"], how="left")
    t = t[
        [
            "dataset",
            "tracer",
            "n",
            "median",
            "ci_low",
            "ci_high",
            "rel_shift",
            "rel_low",
            "rel_high",
            "cliffs_delta",
            "p_value",
            "events_per_run",
            "ns_per_event",
            "ns_lo",
            "ns_hi",
        ]
    ].copy()
    for c in ("rel_shift", "rel_low", "rel_high"):
        t[c] = (t[c] * 100).round(1)
    t = t.rename(
        columns={
            "median": "median_s",
            "rel_shift": "slowdown_%",
            "rel_low": "slowdown_lo_%",
            "rel_high": "slowdown_hi_%",
        }
    )
    return t.round(
        {"median_s": 3, "ci_low": 3, "ci_high": 3, "cliffs_delta": 2, "p_value": 4}
        | {"events_per_run": 0, "ns_per_event": 0, "ns_lo": 0, "ns_hi": 0}
    ).reset_index(drop=True)


def seed_beside_ours(D, dataset: str | None = None):
    """The seed's callers of schedule() (shares of its top 20) beside today's name and our
    share of that caller under the same workload, per tracer."""
    ref = D.reference("sched_callers")
    names = D.reference("sched_callers_names").set_index("name_3x")
    c = callers_of(D)
    ds = dataset or dataset_key(D.quoted)
    c = c[c.dataset == ds]
    rows = []
    for wl, g in ref.groupby("workload", sort=False):
        tot = g["count"].sum()
        ours = c[c.workload == wl]
        for r in g.to_dict("records"):
            today = (
                names.loc[r["caller"], "name_today"] if r["caller"] in names.index else r["caller"]
            )
            row = {
                "workload": wl,
                "caller (3.x)": r["caller"],
                "count 2012": int(r["count"]),
                "share 2012 %": round(100 * r["count"] / tot, 1),
                "today": today,
            }
            for t in STACK_TRACERS:
                ot = ours[ours.tracer == t]
                if len(ot):
                    hit = ot[ot.caller.isin(today.split("|"))]
                    row[f"{t} %"] = round(100 * hit.share.sum(), 1)
            rows.append(row)
    return pd.DataFrame(rows)
