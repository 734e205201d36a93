"""sched_callers: the analysis (frames in, frames out): callers per tracer, their agreement,
the probe effect, and the chapter's Data subclass (CallersData)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
from scipy import stats as st

from perfbook.analysis import decide
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


# -- windows: which tracers counted the same switches (#40) --------------------------------------

WINDOW_TOL_S = 1e-6  # the windows are stored as CLOCK_MONOTONIC seconds, to the microsecond
WINDOW_FIELDS = ["window_start", "window_end", "armed_start", "armed_end"]
WHY_NO_WINDOWS = "no windows recorded: each tracer counted a session of its own"


def _scope(f) -> str | None:
    """What a session's filter counts, if it scopes every tracer alike: the workload's cgroup
    ('cgroup:<path>' for bpftrace and perf, 'pids:<path>' for ftrace's pid filter, which
    follows the same processes), or 'idle' (the idle tasks, cut to one window); None for no
    filter, or one that counts other tasks too ('pids+next:', 'idle uncut')."""
    if not isinstance(f, str) or not f or f == "none":
        return None
    kind, _, where = f.partition(":")
    if kind in ("cgroup", "pids") and where:
        return where
    return "idle" if f == "idle" else None


def windows(sessions):
    """Per dataset, caller session (one number shared by the tracers armed together) and
    workload: the tracers compared, and whether they counted the same switches (`same`), with
    why not. A tracer whose filter counts other tasks too (the hist trigger's pid filter, which
    lets through switches into the workload) is left out where two others remain, and named.
    The same means: the same scope (_scope), counted windows equal to the microsecond, each
    inside its tracer's armed window, and for a workload scope the window is the workload's
    run. A dataset without the window columns (before #40) has no such session."""
    cols = ["dataset", "session", "workload", "tracers", "n", "same", "why"]
    if sessions is None or not len(sessions):
        return pd.DataFrame(columns=cols)
    ses = sessions[sessions.tracer != "none"]
    if "session" not in ses.columns or ses["session"].isna().all():
        rows = [
            [ds, None, wl, ", ".join(sorted(set(g.tracer))), g.tracer.nunique(), False]
            + [WHY_NO_WINDOWS]
            for (ds, wl), g in ses.groupby(["dataset", "workload"], sort=True)
        ]
        return pd.DataFrame(rows, columns=cols)
    rows = []
    for (ds, sid, wl), g in ses.groupby(["dataset", "session", "workload"], sort=True):
        why, out = "", ""
        scoped = g[[_scope(f) is not None for f in g["filter"]]]
        if len(g) >= 2 and len(scoped) >= 2 and len(scoped) < len(g):
            # a tracer whose filter counts other tasks too is left out, the others compared
            out = "left out (filter does not scope to the workload alike): " + ", ".join(
                f"{t} {f}" for t, f in zip(g.tracer, g["filter"]) if t not in set(scoped.tracer)
            )
            g = scoped
        scopes = {_scope(f) for f in g["filter"]}
        w = g[WINDOW_FIELDS + ["workload_start", "workload_end"]].astype(float)
        if len(g) < 2:
            why = "one tracer"
        elif None in scopes or len(scopes) > 1:
            why = "filters differ or do not scope to the workload: " + ", ".join(
                f"{t} {f}" for t, f in zip(g.tracer, g["filter"])
            )
        elif w[WINDOW_FIELDS].isna().any().any():
            why = "a window was not recorded"
        elif np.ptp(w.window_start) > WINDOW_TOL_S or np.ptp(w.window_end) > WINDOW_TOL_S:
            why = (
                f"windows differ by up to {max(np.ptp(w.window_start), np.ptp(w.window_end)):.3g} s"
            )
        elif (w.window_start < w.armed_start - WINDOW_TOL_S).any() or (
            w.window_end > w.armed_end + WINDOW_TOL_S
        ).any():
            why = "a tracer was not armed over the whole window"
        elif scopes != {"idle"} and (
            (w.window_start - w.workload_start).abs().max() > WINDOW_TOL_S
            or (w.window_end - w.workload_end).abs().max() > WINDOW_TOL_S
        ):
            why = "the window is not the workload's run"
        tr = ", ".join(t for t in STACK_TRACERS if t in set(g.tracer))
        rows.append([ds, sid, wl, tr, len(g), not why, "; ".join(x for x in (why, out) if x)])
    return pd.DataFrame(rows, columns=cols)


def comparable(stacks, sessions):
    """The stacks of the sessions whose tracers counted the same switches (windows().same):
    the only ones whose shares may be compared between tracers."""
    if stacks is None or not len(stacks) or "session" not in stacks.columns:
        return stacks.iloc[0:0] if stacks is not None else stacks
    w = windows(sessions)
    ok = w[w.same][["dataset", "session", "workload", "tracers"]]
    if ok.empty:
        return stacks.iloc[0:0]
    ok = ok.assign(tracer=ok.tracers.str.split(", ")).explode("tracer").drop(columns="tracers")
    st = stacks.dropna(subset=["session"])
    key = ["dataset", "session", "workload", "tracer"]
    ok = ok.astype({"session": "int64"})
    st = st.astype({"session": "int64"})
    return st.merge(ok, on=key, how="inner")[stacks.columns]


def shown_stacks(D):
    """The stacks the caller tables show: per dataset, those of its shared windows
    (comparable()) where it has any, else all of them (a dataset before #40, whose tracers
    each counted a session of its own: the agreement table then says nothing about it)."""
    stacks = D["stacks"]
    if stacks is None or not len(stacks):
        return stacks
    same = comparable(stacks, D["sessions"])
    older = stacks[~stacks.dataset.isin(set(same.dataset))]
    return pd.concat([same, older], ignore_index=True)


def callers_of(D):
    """callers(shown_stacks(D)), computed once per Data: a notebook asks for it a dozen times,
    and at a hundred hosts each pass over every dataset's stacks took about 1.7 s. Callers of
    it filter the frame and never change it."""
    stacks = D["stacks"]
    held = getattr(D, "_callers", None)
    if held is None or held[0] is not stacks:
        held = (stacks, callers(shown_stacks(D)))
        D._callers = held
    return held[1]


def comparable_callers_of(D):
    """callers() of the comparable stacks only (comparable()), once per Data."""
    stacks = D["stacks"]
    held = getattr(D, "_same_callers", None)
    if held is None or held[0] is not stacks:
        held = (stacks, callers(comparable(stacks, D["sessions"])))
        D._same_callers = held
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
    tracer never saw: 0). Only over sessions whose tracers counted the same switches
    (comparable()): tracers on different windows are not compared (no row)."""
    c = comparable_callers_of(D)
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
            if len(keys) < 2:  # one caller: no ranks to correlate
                rho = tau = np.nan
            else:
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


def _window_key(df):
    """The window each stack row was counted in: its session where recorded (the tracers of a
    caller session share one), else its tracer and round (before #40 each tracer was armed for
    a session of its own)."""
    if "session" in df.columns and df["session"].notna().all():
        return df["session"].astype("int64").astype(str)
    return df["tracer"].astype(str) + "/" + df["round"].astype(str)


def session_callers(stacks, workload: str):
    """The callers of schedule() per session: one row per tracer, window (_window_key), round
    and caller, with the switches that session counted."""
    s = stacks[stacks.workload == workload]
    cols = ["tracer", "window", "round", "caller", "count"]
    if s.empty:
        return pd.DataFrame(columns=cols)
    ec = [classify(x) for x in s["stack"].fillna("")]
    s = s.assign(entry=[e for e, _ in ec], caller=[c for _, c in ec], window=_window_key(s))
    s = s[s.entry == "schedule"]
    return s.groupby(cols[:4], as_index=False)["count"].sum()[cols]


def top_margins(stacks, workload: str, caller: str):
    """Per session (tracer and window): `caller`'s calls of schedule() over those of the next
    largest caller (> 1: `caller` is that session's top caller), with the runner-up named."""
    c = session_callers(stacks, workload)
    rows = []
    for (tracer, win, rnd), g in c.groupby(["tracer", "window", "round"]):
        mine = int(g.loc[g.caller == caller, "count"].sum())
        others = g[g.caller != caller].sort_values(
            ["count", "caller"], ascending=[False, True], kind="stable"
        )
        nxt = int(others["count"].iloc[0]) if len(others) else 0
        rows.append(
            {
                "tracer": tracer,
                "window": win,
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
            "window",
            "round",
            "count",
            "runner_up",
            "runner_up_count",
            "margin",
            "share",
        ],
    )


# -- the cost per traced event (#40) --------------------------------------------------------------


def probe_events(sessions, runs):
    """Per dataset and tracer: the median switches one hackbench run gave it in the sessions
    where it was armed alone (events over the session's runs)."""
    cols = ["dataset", "tracer", "events_per_run"]
    if sessions is None or not len(sessions) or runs is None or not len(runs):
        return pd.DataFrame(columns=cols)
    ses = sessions[(sessions.workload == "hackbench") & (sessions.tracer != "none")]
    if "session" in ses.columns and ses["session"].notna().all():
        alone = ses.groupby(["dataset", "session"])["tracer"].transform("size") == 1
        ses = ses[alone]
    n = runs.groupby(["dataset", "round", "tracer"]).size().rename("n_runs").reset_index()
    ses = ses.merge(n, on=["dataset", "round", "tracer"], how="inner")
    ses = ses.assign(events_per_run=ses.events / ses.n_runs)
    return ses.groupby(["dataset", "tracer"], as_index=False)["events_per_run"].median()[cols]


def cost_per_event(runs, sessions, confidence: float = 0.95):
    """Per dataset and tracer: the extra seconds per hackbench run (the Hodges-Lehmann shift
    of its per-round medians against the untraced ones, with Moses' interval:
    perfbook.analysis.decide.shift) over the switches it counted per run (probe_events): the
    extra time per traced event, in ns, with that interval scaled alike."""
    cols = ["dataset", "tracer", "events_per_run", "extra_ms", "extra_lo_ms", "extra_hi_ms"]
    cols += ["ns_per_event", "ns_lo", "ns_hi", "coverage"]
    ev = probe_events(sessions, runs)
    rows = []
    for ds, r in runs.groupby("dataset") if runs is not None and len(runs) else []:
        med = round_seconds(r)
        if "none" not in med.columns:
            continue
        for t in [c for c in med.columns if c != "none"]:
            e = ev[(ev.dataset == ds) & (ev.tracer == t)].events_per_run
            a, b = med[t].dropna(), med["none"].dropna()
            if e.empty or len(a) < 2 or len(b) < 2:
                continue
            est = decide.shift(a, b, confidence, "per-round medians")
            k = 1e9 / float(e.iloc[0]) if float(e.iloc[0]) > 0 else np.nan
            rows.append(
                [ds, t, float(e.iloc[0]), 1e3 * est.value, 1e3 * est.low, 1e3 * est.high]
                + [k * est.value, k * est.low, k * est.high, est.coverage]
            )
    return pd.DataFrame(rows, columns=cols)
