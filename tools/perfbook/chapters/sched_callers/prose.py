"""sched_callers: every value the prose quotes (values(D)), formatted as it shows."""

from __future__ import annotations

import numpy as np

from perfbook.data import machine

from .analysis import (
    STACK_TRACERS,
    WHY_NO_WINDOWS,
    agreement,
    callers_of,
    cost_per_event,
    dataset_key,
    probe_effect,
    top_caller,
    tracers_with_stacks,
    windows,
)


def values(D) -> dict:
    """Every value the prose quotes, formatted as it shows."""
    q = D.quoted
    ds, p = dataset_key(q), q["parameters"]
    f = {
        "n_datasets": len(D),
        "n_hosts": len(D.hosts),
        "newest_host": q.host_id,
        "newest_kernel": q["host"]["kernel_release"],
        "newest_date": q["started"][:10],
        "p_groups": p["hackbench_groups"],
        "p_loops": p["hackbench_loops"],
        "p_runs": p["hackbench_runs"],
        "p_depth": p["stack_depth"],
        "p_dd_mib": p["dd_mib"],
    }
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
    f["idle_direct"] = int(
        ent[(ent.entry == "schedule") & ent.caller.isin(("do_idle", "cpu_startup_entry"))][
            "count"
        ].sum()
    )
    f["all_n"] = f"{int(ent['count'].sum()):,}"
    for wl in ("sleep", "dd", "hackbench"):
        tops = {t: top_caller(D, wl, t) for t in have}
        tops = {t: v for t, v in tops.items() if v}
        f[f"top_{wl}"] = (
            "; ".join(f"{t}: {c} ({100 * s:.0f} %)" for t, (c, s) in tops.items()) or "n/a"
        )
    ag = agreement(D)
    for wl in ("sleep", "dd", "hackbench"):
        a = ag[ag.workload == wl].kendall.dropna()  # one caller in common: no tau
        f[f"tau_min_{wl}"] = f"{a.min():.2f}" if len(a) else "n/a"
        f[f"tau_max_{wl}"] = f"{a.max():.2f}" if len(a) else "n/a"
    pe = probe_effect(D["runs"])
    pe = pe[pe.dataset == ds].set_index("tracer")
    f["none_median"] = f"{pe.loc['none', 'median']:.3f}" if "none" in pe.index else "n/a"
    for t in pe.index:
        if t != "none" and "rel_shift" in pe.columns:
            r = pe.loc[t]
            f[f"slow_{t}"] = (
                f"{100 * r.rel_shift:+.1f} % (CI {100 * r.rel_low:+.1f} to "
                f"{100 * r.rel_high:+.1f} %)"
                if r.rel_low == r.rel_low and r.rel_high == r.rel_high  # not NaN
                else "not estimated (one probe-effect round: no shift to compare)"
                if r.rel_shift != r.rel_shift
                else f"{100 * r.rel_shift:+.1f} % (no interval: too few rounds)"
            )
    for part in (
        session_sizes,
        window_findings,
        cost_findings,
        repetition_findings,
        host_findings,
        skipped_findings,
    ):
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
        out[f"sessions_{wl}"] = (
            "; ".join(
                f"{t} {g.loc[t, 'events']:,.0f} switches in {g.loc[t, 'wall_s']:.1f} s"
                for t in order
            )
            or "not measured"
        )
    return out


def window_findings(D, dataset: str | None = None) -> dict:
    """Whether the quoted dataset's caller sessions had every tracer on the same window
    (analysis.windows), and the filter that scoped them."""
    ds = dataset or dataset_key(D.quoted)
    w = windows(D["sessions"])
    w = w[(w.dataset == ds) & (w.n > 1)]
    ses = D["sessions"]
    ses = ses[(ses.dataset == ds) & (ses.tracer != "none")]
    filters = sorted({f for f in ses.get("filter", []) if isinstance(f, str) and f})
    if w.empty:
        text = "no caller session had its tracers armed together"
    elif w.why.eq(WHY_NO_WINDOWS).all():
        text = "not recorded: in this dataset each tracer counted a session of its own"
    else:
        ok = w[w.same]
        text = f"{len(ok)} of {len(w)} caller session(s) had every tracer on one window" + (
            f" ({', '.join(ok.workload)})" if len(ok) else ""
        )
        bad = w[~w.same]
        if len(bad):
            text += "; not compared: " + "; ".join(
                f"{r.workload}: {r.why}" for r in bad.itertuples()
            )
    return {"windows_same": text, "filters": ", ".join(filters) or "none recorded"}


def cost_findings(D, dataset: str | None = None) -> dict:
    """Per tracer: the extra hackbench time per traced event (analysis.cost_per_event), as
    'bpftrace 310 ns (95 % interval -50 to 700 ns) per switch over 4,600 switches per run'."""
    ds = dataset or dataset_key(D.quoted)
    c = cost_per_event(D["runs"], D["sessions"])
    c = c[c.dataset == ds].set_index("tracer")
    out, parts = {}, []
    for t in [x for x in STACK_TRACERS if x in c.index]:
        r = c.loc[t]
        v = (
            f"{r.ns_per_event:,.0f} ns ({100 * r.coverage:.0f} % interval {r.ns_lo:,.0f} to "
            f"{r.ns_hi:,.0f} ns) per switch, over {r.events_per_run:,.0f} switches per run"
        )
        out[f"cost_{t}"] = v
        parts.append(f"{t} {v}")
    out["cost_all"] = "; ".join(parts) or "not measured"
    return out


def repetition_findings(D) -> dict:
    """The quoted dataset's repetition settings and how far its medians got."""
    q = D.quoted
    p = q["parameters"]
    rep = D["repetition"]
    rep = rep[rep.dataset == dataset_key(q)]
    out = {
        "p_rep_target": f"{100 * p['rep_target']:g}",
        "p_rep_min": p["rep_min_runs"],
        "p_rep_max": p["rep_max_runs"],
        "p_rep_budget": f"{p['rep_budget_s']:.0f}",
    }
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
    ok = rep[np.isfinite(rep.rel_ci_width.astype(float))].sort_values(
        ["rel_ci_width", "key"], kind="stable"
    )
    parts = []
    if len(ok):
        lo, hi = ok.iloc[0], ok.iloc[-1]
        parts.append(
            f"{100 * lo.rel_ci_width:.0f} % ({lo.key}) of the median"
            if len(ok) == 1
            else f"from {100 * lo.rel_ci_width:.0f} % ({lo.key}) to {100 * hi.rel_ci_width:.0f} % "
            f"({hi.key}) of the median"
        )
    bad = rep.drop(ok.index)
    for why, g in bad.groupby(bad.n < 2):
        reason = "one round: no interval" if why else "a median of 0: no relative width"
        keys = "" if ok.empty and len(g) == len(rep) else " for " + ", ".join(sorted(g.key))
        parts.append(f"not estimable{keys} ({reason})")
    return "; ".join(parts)


def host_findings(D) -> dict:
    """Which hosts measured the chapter, with their kind (perfbook.data.machine), as a sentence."""
    hosts = {}
    for m in D.manifests:
        hosts[m["host"]["host_id"]] = machine.short_kind(m["host"])
    names = ", ".join(f"{h} ({k})" for h, k in hosts.items())
    if len(hosts) < 2:
        s = (
            f"So far only {names} has measured it; another host's dataset would add its own rows "
            "to the probe-effect table and figure."
        )
    else:
        s = (
            f"{len(hosts)} hosts have measured this chapter: {names}. The table below lists the facts in "
            "which their newest manifests differ. Each host's slowdowns are measured against its own untraced "
            "runs."
        )
    return {"host_sentence": s}


def skipped_findings(D) -> dict:
    """How many tracers the quoted dataset skipped, of how many asked for."""
    q = D.quoted
    asked = list(q["parameters"]["tracers"])
    sk = [t for t in asked if t in q.get("skipped", {})]
    return {"n_tracers_asked": len(asked), "n_tracers_skipped": len(sk)}
