"""Key findings of the sched_callers chapter, computed per dataset (perfbook.analysis.findings)."""

from __future__ import annotations

from perfbook.analysis.findings import Finding, Outcome
from perfbook.analysis.stats import compare

from . import analysis as A


def _D(run):
    return run.data


IDLE = ("do_idle", "cpu_startup_entry")  # do_idle, or the function it is inlined into


def idle_not_schedule(run):
    D = _D(run)
    c = A.callers_of(D)
    idle = c[c.entry == "schedule_idle"]
    direct = int(c[(c.entry == "schedule") & c.caller.isin(IDLE)]["count"].sum())
    if idle.empty and not direct:
        return None
    via = ", ".join(sorted(set(idle.caller)))
    return Outcome(
        direct == 0 and len(idle) > 0,
        f"schedule_idle → __schedule {int(idle['count'].sum()):,} times (called from {via}), "
        f"the idle loop → schedule() {direct} times, over {c.tracer.nunique()} tracer(s)",
    )


def tracers_agree(run):
    D = _D(run)
    ag = A.agreement(D, workload="hackbench")
    if ag.empty:
        return None
    worst = ag.sort_values("kendall", kind="stable").iloc[0]
    return Outcome(
        bool(ag.kendall.min() >= 0.6 and ag.same_top.all()),
        f"under hackbench, Kendall's τ between tracers {ag.kendall.min():.2f} to "
        f"{ag.kendall.max():.2f} over {len(ag)} pair(s) (lowest: {worst.tracer_a} and "
        f"{worst.tracer_b}); same top caller in {int(ag.same_top.sum())} of {len(ag)}",
    )


def seed_top_hackbench(run):
    D = _D(run)
    tops = {t: A.top_caller(D, "hackbench", t) for t in A.tracers_with_stacks(D)}
    tops = {t: v for t, v in tops.items() if v}
    if not tops:
        return None
    ref = run.reference("sched_callers")
    seed = (
        ref[ref.workload == "hackbench"]
        .sort_values("count", ascending=False, kind="stable")
        .iloc[0]
        .caller
    )
    ok = all(c == seed for c, _ in tops.values())
    return Outcome(
        ok,
        f"2012: {seed}; now "
        + ", ".join(
            f"{t}: {c} ({100 * s:.0f} % of schedule() calls)" for t, (c, s) in tops.items()
        ),
    )


def _slowdowns(run):
    """Each tracer's effect on hackbench's time (two findings read it)."""
    D = _D(run)
    pe = A.probe_effect(D["runs"])
    if "rel_shift" not in pe.columns:
        return None
    return pe[pe.tracer != "none"].dropna(subset=["rel_shift"]).set_index("tracer")


def every_tracer_slows(run):
    pe = _slowdowns(run)
    if pe is None or pe.empty:
        return None
    return Outcome(
        bool(pe.significant.all()),
        "; ".join(
            f"{t} {100 * r.rel_shift:+.1f} % (CI {100 * r.rel_low:+.1f} to {100 * r.rel_high:+.1f} %"
            f", p = {r.p_value:.2g})"
            for t, r in pe.iterrows()
        ),
    )


def bpf_cheaper_than_perf(run):
    pe = _slowdowns(run)
    if pe is None or not {"bpftrace", "perf"} <= set(pe.index):
        return None
    b, p = pe.loc["bpftrace"], pe.loc["perf"]
    r = _D(run)["runs"]
    c = compare(
        r[r.tracer == "bpftrace"].seconds, r[r.tracer == "perf"].seconds, names=("bpftrace", "perf")
    )
    return Outcome(
        bool(c.significant and c.shift < 0),
        f"against the untraced runs bpftrace {100 * b.rel_shift:+.1f} %, perf {100 * p.rel_shift:+.1f} % "
        f"on hackbench's time; directly, {c.verdict}",
    )


FINDINGS = (
    Finding(
        "idle_not_schedule",
        "The idle loop no longer calls schedule(): it reaches __schedule through "
        "schedule_idle, so the seed's cpu_idle has no counterpart among today's callers of schedule()",
        idle_not_schedule,
        contrary="The idle loop still reaches the scheduler through schedule()",
    ),
    Finding(
        "tracers_agree",
        "The tracers agree on hackbench's callers: the same top caller, and "
        "Kendall's τ of at least 0.6 between every pair",
        tracers_agree,
        contrary="The tracers disagree on hackbench's callers",
    ),
    Finding(
        "seed_top_hackbench",
        "schedule_timeout is still hackbench's top caller of schedule(), as in 2012",
        seed_top_hackbench,
        contrary="hackbench's top caller of schedule() is no longer the seed's",
    ),
    Finding(
        "every_tracer_slows",
        "Every tracer slows hackbench measurably (Mann–Whitney p < 0.05)",
        every_tracer_slows,
        contrary="Not every tracer slows hackbench measurably",
    ),
    Finding(
        "bpf_cheaper_than_perf",
        "Counting stacks in a BPF map costs hackbench measurably less than perf "
        "recording every switch (Mann–Whitney p < 0.05 between their runs)",
        bpf_cheaper_than_perf,
        contrary="Counting stacks in a BPF map was not measurably cheaper for hackbench than perf "
        "recording every switch",
    ),
)
