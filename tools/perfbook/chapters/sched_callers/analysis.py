"""sched_callers: the analysis (frames in, frames and the prose's findings out)."""
from __future__ import annotations

from .spec import ENTRIES, TRACERS

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
    import pandas as pd
    if stacks is None or not len(stacks):
        return pd.DataFrame(columns=["dataset", "tracer", "workload", "entry", "caller", "count", "share", "top"])
    df = stacks.copy()
    df["stack"] = df["stack"].fillna("")   # a stack of tracing frames only is stored empty
    df[["entry", "caller"]] = pd.DataFrame([classify(s) for s in df["stack"]], index=df.index)
    df["top"] = [" ← ".join([x for x in s.split(";") if x != "__schedule"][:4]) for s in df["stack"]]
    key = ["dataset", "tracer", "workload", "entry", "caller"]
    top = (df.sort_values(["count", "top"], ascending=[False, True], kind="stable")   # ties: by name
           .drop_duplicates(key).set_index(key)["top"])
    g = df.groupby(key, as_index=False)["count"].sum()
    g["share"] = g["count"] / g.groupby(["dataset", "tracer", "workload"])["count"].transform("sum")
    g["top"] = [top.get(tuple(r)) for r in g[key].itertuples(index=False)]
    return g.sort_values(["dataset", "tracer", "workload", "count"], ascending=[True, True, True, False], kind="stable")


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
    w = c.pivot_table(index="caller_of", columns="tracer", values="share", aggfunc="sum", fill_value=0.0) * 100
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
    import itertools
    import pandas as pd
    from scipy import stats as st
    c = callers_of(D)
    ds = dataset or dataset_key(D.quoted)
    c = c[(c.dataset == ds) & ((c.workload == workload) if workload else True)].assign(caller_of=lambda d: [label(e, k) for e, k in zip(d.entry, d.caller)])
    rows = []
    for wl, g in c.groupby("workload"):
        shares = g.pivot_table(index="caller_of", columns="tracer", values="share", aggfunc="sum", fill_value=0.0)
        for a, b in itertools.combinations([t for t in STACK_TRACERS if t in shares.columns], 2):
            keys = {*_largest(shares[a], n), *_largest(shares[b], n)}
            x, y = shares.loc[sorted(keys), a], shares.loc[sorted(keys), b]
            rho, tau = st.spearmanr(x, y).statistic, st.kendalltau(x, y).statistic
            rows.append({"workload": wl, "tracer_a": a, "tracer_b": b, "callers": len(keys),
                         "spearman": rho, "kendall": tau,
                         "same_top": x.idxmax() == y.idxmax(), "top_a": x.idxmax(), "top_b": y.idxmax()})
    return pd.DataFrame(rows, columns=["workload", "tracer_a", "tracer_b", "callers", "spearman", "kendall",
                                       "same_top", "top_a", "top_b"])


def entries_table(D, dataset: str | None = None):
    """How each tracer's switches entered __schedule, per workload (shares in %)."""
    c = callers_of(D)
    ds = dataset or dataset_key(D.quoted)
    c = c[c.dataset == ds]
    t = c.pivot_table(index=["workload", "entry"], columns="tracer", values="share", aggfunc="sum",
                      fill_value=0.0) * 100
    t = t[[x for x in STACK_TRACERS if x in t.columns]].round(1)
    t["what"] = [ENTRIES.get(e, "") for _, e in t.index]
    return t


def probe_effect(runs):
    """Per dataset, each tracer's hackbench seconds against the untraced runs (perfbook.analysis.stats:
    Hodges-Lehmann shift with its CI, relative to the untraced median; Mann-Whitney; Cliff's delta)."""
    from perfbook.analysis.stats import compare_frame, summarize_frame
    s = summarize_frame(runs, ["dataset", "tracer"], "seconds")
    c = compare_frame(runs, by="tracer", value="seconds", baseline="none", within="dataset")
    if len(c):
        s = s.merge(c[["dataset", "tracer", "rel_shift", "rel_low", "rel_high", "p_value", "cliffs_delta",
                       "significant", "verdict"]], on=["dataset", "tracer"], how="left")
    order = {t: i for i, t in enumerate(TRACERS)}
    return s.sort_values(["dataset", "tracer"], key=lambda x: x.map(order) if x.name == "tracer" else x, kind="stable")


def probe_table(D):
    t = probe_effect(D["runs"])
    t = t[["dataset", "tracer", "n", "median", "ci_low", "ci_high", "rel_shift", "rel_low", "rel_high",
           "cliffs_delta", "p_value"]].copy()
    for c in ("rel_shift", "rel_low", "rel_high"):
        t[c] = (t[c] * 100).round(1)
    t = t.rename(columns={"median": "median_s", "rel_shift": "slowdown_%", "rel_low": "slowdown_lo_%",
                          "rel_high": "slowdown_hi_%"})
    return t.round({"median_s": 3, "ci_low": 3, "ci_high": 3, "cliffs_delta": 2, "p_value": 4}).reset_index(drop=True)


def seed_beside_ours(D, dataset: str | None = None):
    """The seed's callers of schedule() (shares of its top 20) beside today's name and our
    share of that caller under the same workload, per tracer."""
    import pandas as pd
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
            today = names.loc[r["caller"], "name_today"] if r["caller"] in names.index else r["caller"]
            row = {"workload": wl, "caller (3.x)": r["caller"], "count 2012": int(r["count"]),
                   "share 2012 %": round(100 * r["count"] / tot, 1), "today": today}
            for t in STACK_TRACERS:
                ot = ours[ours.tracer == t]
                if len(ot):
                    hit = ot[ot.caller.isin(today.split("|"))]
                    row[f"{t} %"] = round(100 * hit.share.sum(), 1)
            rows.append(row)
    return pd.DataFrame(rows)


# ---- helpers shared with claims and figures -------------------------------------------------

def dataset_key(m) -> str:
    return f"{m['host']['host_id']}/{m['run_id']}"


def runs_columns(m, D) -> dict:
    q = m["parameters"]
    r = D["runs"]
    n = r[r.dataset == dataset_key(m)]["round"].nunique() if len(r) else 0
    return {"rounds": n, "hackbench": f"-g {q['hackbench_groups']} -l {q['hackbench_loops']} "
                                      f"× {q['hackbench_runs']} per round"}


def top_caller(D, workload: str, tracer: str, dataset: str | None = None):
    c = callers_of(D)
    ds = dataset or dataset_key(D.quoted)
    c = c[(c.dataset == ds) & (c.workload == workload) & (c.tracer == tracer) & (c.entry == "schedule")]
    if c.empty:
        return None
    r = c.sort_values("count", ascending=False, kind="stable").iloc[0]
    return r.caller, r.share / c.share.sum()


def tracers_with_stacks(D, dataset: str | None = None) -> list[str]:
    ds = dataset or dataset_key(D.quoted)
    s = D["stacks"]
    have = set(s[s.dataset == ds].tracer) if len(s) else set()
    return [t for t in STACK_TRACERS if t in have]


def findings(D) -> dict:
    """Every value the prose quotes, formatted as it shows."""
    q = D.quoted
    ds, p = dataset_key(q), q["parameters"]
    f = {"n_datasets": len(D), "n_hosts": len(D.hosts), "newest_host": q.host_id,
         "newest_kernel": q["host"]["kernel_release"], "newest_date": q["started"][:10],
         "p_groups": p["hackbench_groups"], "p_loops": p["hackbench_loops"], "p_runs": p["hackbench_runs"],
         "p_depth": p["stack_depth"], "p_dd_mib": p["dd_mib"]}
    have = tracers_with_stacks(D)
    f["tracers_used"] = ", ".join(have) or "none"
    f["tracers_skipped"] = ", ".join(k for k in q.get("skipped", {})) or "none"
    f["triggers"] = q.facts.get("sched_switch_triggers", "not recorded")
    ses = D["sessions"]
    ses = ses[ses.dataset == ds]
    f["rounds"] = int(ses["round"].nunique())
    f["lost_total"] = f"{int(ses.lost.sum()):,}"
    ent = callers_of(D)
    ent = ent[ent.dataset == ds]
    idle = ent[ent.entry == "schedule_idle"]
    f["idle_callers"] = ", ".join(sorted(set(idle.caller))) or "not seen"
    f["idle_n"] = f"{int(idle['count'].sum()):,}"
    f["idle_direct"] = int(ent[(ent.entry == "schedule") & ent.caller.isin(("do_idle", "cpu_startup_entry"))]["count"].sum())
    f["all_n"] = f"{int(ent['count'].sum()):,}"
    for wl in ("sleep", "dd", "hackbench"):
        tops = {t: top_caller(D, wl, t) for t in have}
        tops = {t: v for t, v in tops.items() if v}
        f[f"top_{wl}"] = "; ".join(f"{t}: {c} ({100 * s:.0f} %)" for t, (c, s) in tops.items()) or "n/a"
    ag = agreement(D)
    for wl in ("sleep", "dd", "hackbench"):
        a = ag[ag.workload == wl]
        f[f"tau_min_{wl}"] = f"{a.kendall.min():.2f}" if len(a) else "n/a"
        f[f"tau_max_{wl}"] = f"{a.kendall.max():.2f}" if len(a) else "n/a"
    pe = probe_effect(D["runs"])
    pe = pe[pe.dataset == ds].set_index("tracer")
    f["none_median"] = f"{pe.loc['none', 'median']:.3f}" if "none" in pe.index else "n/a"
    for t in pe.index:
        if t != "none" and "rel_shift" in pe.columns:
            r = pe.loc[t]
            f[f"slow_{t}"] = (f"{100 * r.rel_shift:+.1f} % (CI {100 * r.rel_low:+.1f} to "
                              f"{100 * r.rel_high:+.1f} %)")
    for part in (session_sizes, repetition_findings, host_findings, skipped_findings):
        f.update(part(D))
    ref = D.reference("sched_callers")
    for wl, g in ref.groupby("workload"):
        top = g.sort_values("count", ascending=False, kind="stable").iloc[0]
        f[f"seed_top_{wl}"] = f"{top.caller} ({top['count']:,} of {g['count'].sum():,})"
    return f


def session_sizes(D, dataset: str | None = None) -> dict:
    """Per workload: each tracer's median switches per session and the session's wall time
    (arming, the workload, disarming and reading the tracer's output)."""
    ses = D["sessions"]
    ses = ses[(ses.dataset == (dataset or dataset_key(D.quoted))) & (ses.tracer != "none")]
    out = {}
    for wl in ("sleep", "dd", "hackbench"):
        g = ses[ses.workload == wl].groupby("tracer")[["events", "wall_s"]].median()
        order = [t for t in STACK_TRACERS if t in g.index]
        out[f"sessions_{wl}"] = "; ".join(f"{t} {g.loc[t, 'events']:,.0f} switches in {g.loc[t, 'wall_s']:.1f} s"
                                          for t in order) or "not measured"
    return out


def repetition_findings(D) -> dict:
    """The quoted dataset's repetition settings and how far its medians got."""
    q = D.quoted
    p = q["parameters"]
    rep = D["repetition"]
    rep = rep[rep.dataset == dataset_key(q)]
    out = {"p_rep_target": f"{100 * p['rep_target']:g}", "p_rep_min": p["rep_min_runs"],
           "p_rep_max": p["rep_max_runs"], "p_rep_budget": f"{p['rep_budget_s']:.0f}"}
    if len(rep):
        out["rep_stop"] = ", ".join(sorted(set(rep.stopped_by))).replace("_", " ")
        out["rep_width_range"] = interval_widths(rep)
        out["rep_n"] = int(rep.n.max())
    else:
        out.update(rep_stop="not recorded", rep_width_range="not recorded", rep_n=0)
    return out


def interval_widths(rep) -> str:
    """The narrowest and the widest of a repetition table's median intervals, relative to the
    median, with their tracers: 'from 20 % (none) to 30 % (perf) of the median'. Equal widths
    are ordered by the tracer's name, so the rows' order does not matter. A width that could
    not be estimated is said to be so, with why, never printed as nan: a key with one round has
    no interval, and one whose median is 0 has no relative width."""
    import numpy as np
    ok = rep[np.isfinite(rep.rel_ci_width.astype(float))].sort_values(["rel_ci_width", "key"], kind="stable")
    parts = []
    if len(ok):
        lo, hi = ok.iloc[0], ok.iloc[-1]
        parts.append(f"{100 * lo.rel_ci_width:.0f} % ({lo.key}) of the median" if len(ok) == 1 else
                     f"from {100 * lo.rel_ci_width:.0f} % ({lo.key}) to {100 * hi.rel_ci_width:.0f} % "
                     f"({hi.key}) of the median")
    bad = rep.drop(ok.index)
    for why, g in bad.groupby(bad.n < 2):
        reason = "one round: no interval" if why else "a median of 0: no relative width"
        keys = "" if ok.empty and len(g) == len(rep) else " for " + ", ".join(sorted(g.key))
        parts.append(f"not estimable{keys} ({reason})")
    return "; ".join(parts)


def host_findings(D) -> dict:
    """Which hosts measured the chapter, with their kind (perfbook.data.machine), as a sentence."""
    from perfbook.data import machine
    hosts = {}
    for m in D.manifests:
        hosts[m["host"]["host_id"]] = machine.short_kind(m["host"])
    names = ", ".join(f"{h} ({k})" for h, k in hosts.items())
    if len(hosts) < 2:
        s = (f"So far only {names} has measured it; another host's dataset would add its own rows "
             "to the probe-effect table and figure.")
    else:
        s = (f"{len(hosts)} hosts have measured this chapter: {names}. The table below lists the facts in "
             "which their newest manifests differ. Each host's slowdowns are measured against its own untraced "
             "runs.")
    return {"host_sentence": s}


def skipped_findings(D) -> dict:
    """How many tracers the quoted dataset skipped, of how many asked for."""
    q = D.quoted
    asked = list(q["parameters"]["tracers"])
    sk = [t for t in asked if t in q.get("skipped", {})]
    return {"n_tracers_asked": len(asked), "n_tracers_skipped": len(sk)}
