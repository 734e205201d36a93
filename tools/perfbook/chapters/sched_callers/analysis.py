"""sched_callers: the analysis (frames in, frames out): callers per tracer, their agreement,
the probe effect, and the chapter's Data subclass (CallersData)."""

from __future__ import annotations

import itertools

import pandas as pd
from scipy import stats as st

from perfbook.analysis.stats import compare_frame, summarize_frame
from perfbook.data.dataset import Data

from .parse import TRACERS


class CallersData(Data):
    """The datasets, with a 'dataset' column (host/run) in every table."""

    def prepare(self, name, df):
        if len(df):
            df.insert(0, "dataset", df.host_id + "/" + df.run_id)
        return df


STACK_TRACERS = [t for t in TRACERS if t != "none"]


def classify(stack: str) -> tuple[str, str]:
    """A stack (frames from __schedule outwards, ';'-joined) -> (entry, caller): the function
    that called __schedule, and the one that called it. A tracer that saw no __schedule frame
    (the function tracer sees schedule() itself) starts one frame later."""
    f = [x for x in stack.split(";") if x]
    if f and f[0] == "__schedule":
        f = f[1:]
    return (f[0] if f else "?"), (f[1] if len(f) > 1 else "?")


def callers(stacks):
    """Per dataset, tracer, workload, entry and caller: switches and their share of the
    tracer's switches in that workload, and the top frames (the first stack seen)."""
    if stacks is None or not len(stacks):
        return pd.DataFrame(
            columns=["dataset", "tracer", "workload", "entry", "caller", "count", "share", "top"]
        )
    df = stacks.copy()
    df["stack"] = df["stack"].fillna("")  # a stack of tracing frames only is stored empty
    df[["entry", "caller"]] = pd.DataFrame([classify(s) for s in df["stack"]], index=df.index)
    df["top"] = [
        " ← ".join([x for x in s.split(";") if x != "__schedule"][:4]) for s in df["stack"]
    ]
    key = ["dataset", "tracer", "workload", "entry", "caller"]
    top = (
        df.sort_values(["count", "top"], ascending=[False, True], kind="stable")  # ties: by name
        .drop_duplicates(key)
        .set_index(key)["top"]
    )
    g = df.groupby(key, as_index=False)["count"].sum()
    g["share"] = g["count"] / g.groupby(["dataset", "tracer", "workload"])["count"].transform("sum")
    g["top"] = [top.get(tuple(r)) for r in g[key].itertuples(index=False)]
    return g.sort_values(
        ["dataset", "tracer", "workload", "count"],
        ascending=[True, True, True, False],
        kind="stable",
    )


def callers_of(D):
    """callers(D["stacks"]), computed once per Data: a notebook asks for it a dozen times, and
    at a hundred hosts each pass over every dataset's stacks took about 1.7 s. Callers of it
    filter the frame and never change it."""
    stacks = D["stacks"]
    held = getattr(D, "_callers", None)
    if held is None or held[0] is not stacks:
        held = (stacks, callers(stacks))
        D._callers = held
    return held[1]


def label(entry: str, caller: str) -> str:
    return caller if entry == "schedule" else f"{caller} → {entry}"


def callers_wide(D, workload: str, n: int = 10, dataset: str | None = None):
    """The quoted dataset's callers under one workload: a row per caller (its entry into
    __schedule where that is not schedule()), a column per tracer, shares in %; the n callers
    with the largest mean share."""
    c = callers_of(D)
    ds = dataset or dataset_key(D.quoted)
    c = c[(c.dataset == ds) & (c.workload == workload)]
    if c.empty:
        return c
    c = c.assign(caller_of=[label(e, k) for e, k in zip(c.entry, c.caller)])
    w = (
        c.pivot_table(
            index="caller_of", columns="tracer", values="share", aggfunc="sum", fill_value=0.0
        )
        * 100
    )
    w = w[[t for t in STACK_TRACERS if t in w.columns]]
    return w.loc[w.mean(axis=1).sort_values(ascending=False, kind="stable").index[:n]].round(1)


def _largest(shares, n: int):
    """The index of the n largest shares; equal shares in index (caller name) order, as
    Series.nlargest keeps them, but by a stable sort rather than the sort's own tie order."""
    return shares.sort_values(ascending=False, kind="stable").index[:n]


def agreement(D, dataset: str | None = None, n: int = 10, workload: str | None = None):
    """Per workload (or the one given) and pair of tracers: Spearman's rho and Kendall's tau
    between their caller shares, over the union of each one's n top callers (a caller one
    tracer never saw: 0)."""
    c = callers_of(D)
    ds = dataset or dataset_key(D.quoted)
    c = c[(c.dataset == ds) & ((c.workload == workload) if workload else True)].assign(
        caller_of=lambda d: [label(e, k) for e, k in zip(d.entry, d.caller)]
    )
    rows = []
    for wl, g in c.groupby("workload"):
        shares = g.pivot_table(
            index="caller_of", columns="tracer", values="share", aggfunc="sum", fill_value=0.0
        )
        for a, b in itertools.combinations([t for t in STACK_TRACERS if t in shares.columns], 2):
            keys = {*_largest(shares[a], n), *_largest(shares[b], n)}
            x, y = shares.loc[sorted(keys), a], shares.loc[sorted(keys), b]
            rho, tau = st.spearmanr(x, y).statistic, st.kendalltau(x, y).statistic
            rows.append(
                {
                    "workload": wl,
                    "tracer_a": a,
                    "tracer_b": b,
                    "callers": len(keys),
                    "spearman": rho,
                    "kendall": tau,
                    "same_top": x.idxmax() == y.idxmax(),
                    "top_a": x.idxmax(),
                    "top_b": y.idxmax(),
                }
            )
    return pd.DataFrame(
        rows,
        columns=[
            "workload",
            "tracer_a",
            "tracer_b",
            "callers",
            "spearman",
            "kendall",
            "same_top",
            "top_a",
            "top_b",
        ],
    )


def probe_effect(runs):
    """Per dataset, each tracer's hackbench seconds against the untraced runs (perfbook.analysis.stats:
    Hodges-Lehmann shift with its CI, relative to the untraced median; Mann-Whitney; Cliff's delta)."""
    s = summarize_frame(runs, ["dataset", "tracer"], "seconds")
    c = compare_frame(runs, by="tracer", value="seconds", baseline="none", within="dataset")
    if len(c):
        s = s.merge(
            c[
                [
                    "dataset",
                    "tracer",
                    "rel_shift",
                    "rel_low",
                    "rel_high",
                    "p_value",
                    "cliffs_delta",
                    "significant",
                    "verdict",
                ]
            ],
            on=["dataset", "tracer"],
            how="left",
        )
    order = {t: i for i, t in enumerate(TRACERS)}
    return s.sort_values(
        ["dataset", "tracer"],
        key=lambda x: x.map(order) if x.name == "tracer" else x,
        kind="stable",
    )


def dataset_key(m) -> str:
    return f"{m['host']['host_id']}/{m['run_id']}"


def top_caller(D, workload: str, tracer: str, dataset: str | None = None):
    c = callers_of(D)
    ds = dataset or dataset_key(D.quoted)
    c = c[
        (c.dataset == ds)
        & (c.workload == workload)
        & (c.tracer == tracer)
        & (c.entry == "schedule")
    ]
    if c.empty:
        return None
    r = c.sort_values("count", ascending=False, kind="stable").iloc[0]
    return r.caller, r.share / c.share.sum()


def tracers_with_stacks(D, dataset: str | None = None) -> list[str]:
    ds = dataset or dataset_key(D.quoted)
    s = D["stacks"]
    have = set(s[s.dataset == ds].tracer) if len(s) else set()
    return [t for t in STACK_TRACERS if t in have]


# -- the key findings' numbers: one value per session (a tracer armed in one round) -------------


def round_seconds(runs):
    """Per round (rows) and tracer (columns): the median of that round's hackbench seconds.
    A round arms each tracer once and runs hackbench several times under it, so those runs
    share one session: a round's median is the unit of repetition (the key findings rest on it,
    as the repetition table's medians do)."""
    return runs.groupby(["round", "tracer"])["seconds"].median().unstack("tracer")


def session_callers(stacks, workload: str):
    """The callers of schedule() per session: one row per tracer, round and caller, with the
    switches that session counted. Each tracer is armed for its own session, so each counts a
    different stretch of time (the chapter's "Different windows")."""
    s = stacks[stacks.workload == workload]
    cols = ["tracer", "round", "caller", "count"]
    if s.empty:
        return pd.DataFrame(columns=cols)
    ec = [classify(x) for x in s["stack"].fillna("")]
    s = s.assign(entry=[e for e, _ in ec], caller=[c for _, c in ec])
    s = s[s.entry == "schedule"]
    return s.groupby(cols[:3], as_index=False)["count"].sum()[cols]


def top_margins(stacks, workload: str, caller: str):
    """Per session (tracer and round): `caller`'s calls of schedule() over those of the next
    largest caller (> 1: `caller` is that session's top caller), with the runner-up named."""
    c = session_callers(stacks, workload)
    rows = []
    for (tracer, rnd), g in c.groupby(["tracer", "round"]):
        mine = int(g.loc[g.caller == caller, "count"].sum())
        others = g[g.caller != caller].sort_values(
            ["count", "caller"], ascending=[False, True], kind="stable"
        )
        nxt = int(others["count"].iloc[0]) if len(others) else 0
        rows.append(
            {
                "tracer": tracer,
                "round": rnd,
                "count": mine,
                "runner_up": others.caller.iloc[0] if len(others) else "",
                "runner_up_count": nxt,
                "margin": mine / nxt if nxt else float("inf"),
                "share": mine / g["count"].sum(),
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "tracer",
            "round",
            "count",
            "runner_up",
            "runner_up_count",
            "margin",
            "share",
        ],
    )
