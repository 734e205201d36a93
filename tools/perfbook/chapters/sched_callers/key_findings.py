"""Key findings of the sched_callers chapter, computed per dataset (perfbook.analysis.findings).

A round arms each tracer alone once (one probe session each) and runs hackbench several times
under it; those runs share the session, so the unit of repetition is the round: hackbench's time
is compared on per-round medians (analysis.round_seconds). The callers are compared per window
(analysis.top_margins): the tracers of one caller session count the same switches (one window),
each probe session is a window of its own.

The tracers' agreement with each other (Kendall's τ, the same top caller) is a check of the
instruments, not a finding about the kernel: the chapter shows it in its agreement table."""

from __future__ import annotations

import math

import numpy as np

from perfbook.analysis import decide
from perfbook.analysis.decide import Estimate, fmt
from perfbook.analysis.findings import Finding, Measured, Takeaway

from . import analysis as A
from .parse import DEFAULT_TRACERS

CONFIDENCE = 0.95
IDLE = ("do_idle", "cpu_startup_entry")  # do_idle, or the function it is inlined into
WHAT = "per-round medians"


def _tracers(run, *, stacks: bool) -> list[str]:
    """The tracers this dataset armed: its parameters' tracers less the ones it skipped (the
    manifest says why), in the chapter's order; `stacks`: only those that record stacks."""
    m = run.manifest
    planned = m["parameters"].get("tracers") or DEFAULT_TRACERS
    skipped = set(m.get("skipped") or {})
    have = [t for t in planned if t not in skipped and t != "none"]
    return [t for t in have if t in A.STACK_TRACERS] if stacks else have


def idle_not_schedule(run):
    """How often the idle loop called schedule(): a count of the switches every stack tracer
    saw (exact); undecided where no tracer saw the idle loop enter the scheduler at all."""
    if "stacks" not in run or not _tracers(run, stacks=True):
        return None
    c = A.callers(run["stacks"])
    idle = c[c.entry == "schedule_idle"]
    direct = int(c[(c.entry == "schedule") & c.caller.isin(IDLE)]["count"].sum())
    k = c.tracer.nunique()
    if idle.empty and not direct:
        return Measured(
            Estimate(0.0, math.nan, math.nan, 0.0, f"no idle-loop switch seen by {k} tracer(s)")
        )
    via = ", ".join(sorted(set(idle.caller))) or "nowhere"
    return Measured(
        decide.exact(direct, f"switches counted by {k} tracer(s)"),
        f"schedule_idle → __schedule {int(idle['count'].sum()):,} times (called from "
        f"{via}), over {k} tracer(s)",
    )


def seed_top_hackbench(run):
    """The 2012 top caller's calls of schedule() over the next caller's, per window under
    hackbench: the median window's margin with its order-statistic interval (> 1: it is the
    top caller). A window is one session's switches: the tracers armed together on one caller
    session count the same switches, so their margins make one value (their median); each
    probe session, one tracer alone, is a window of its own."""
    if "stacks" not in run or not _tracers(run, stacks=True):
        return None
    ref = run.reference("sched_callers")
    seed = (
        ref[ref.workload == "hackbench"]
        .sort_values("count", ascending=False, kind="stable")
        .iloc[0]
        .caller
    )
    m = A.top_margins(run["stacks"], "hackbench", seed)
    if m.empty:
        raise ValueError("no hackbench session counted a call of schedule()")
    share = m.groupby("tracer", sort=False)["share"].median()
    runner = m.runner_up.mode().iloc[0]
    per_window = m.groupby("window", sort=True)["margin"].median()
    return Measured(
        decide.location(per_window, CONFIDENCE, what="windows (sessions)"),
        f"2012: {seed}; its share of schedule() calls "
        + ", ".join(f"{t} {fmt(100 * s)} %" for t, s in share.items())
        + f"; runner-up mostly {runner}",
    )


def _seconds(run):
    if "runs" not in run:
        return None
    return A.round_seconds(run["runs"])


def every_tracer_slows(run):
    """The least of the tracers' slowdowns (hackbench's per-round medians under the tracer over
    the untraced ones, each at 1 - 0.05 / k so that the union bound keeps 95 %)."""
    r = _seconds(run)
    tracers = _tracers(run, stacks=False)
    if r is None or not tracers:
        return None
    each = 1 - (1 - CONFIDENCE) / len(tracers)
    ests = {t: decide.ratio(r[t].dropna(), r["none"].dropna(), each, WHAT) for t in tracers}
    n = {len(r[t].dropna()) for t in tracers}
    basis = (
        f"the least of {len(ests)} tracers' ratios of {'/'.join(map(str, sorted(n)))} against "
        f"{len(r['none'].dropna())} per-round medians, union bound"
    )
    return Measured(
        decide.lesser(*ests.values(), basis=basis),
        ", ".join(f"{t} {fmt(e.value)}×" for t, e in ests.items())
        + f" (untraced {fmt(float(np.median(r['none'].dropna())))} s)",
    )


def bpf_cheaper_than_perf(run):
    r = _seconds(run)
    if r is None or not {"bpftrace", "perf"} <= set(_tracers(run, stacks=False)):
        return None
    med = {t: fmt(float(np.median(r[t].dropna()))) for t in ("bpftrace", "perf", "none")}
    return Measured(
        decide.ratio(r["bpftrace"].dropna(), r["perf"].dropna(), CONFIDENCE, WHAT),
        f"hackbench {med['bpftrace']} s under bpftrace, {med['perf']} s under perf, "
        f"{med['none']} s untraced",
    )


FINDINGS = (
    Finding(
        "idle_not_schedule",
        "The idle loop no longer calls schedule(): it reaches __schedule through "
        "schedule_idle, so the seed's cpu_idle has no counterpart among today's callers of schedule()",
        idle_not_schedule,
        quantity="the idle loop's calls of schedule()",
        side="<",
        threshold=1,
        contrary="The idle loop still reaches the scheduler through schedule()",
        reproduce=(
            "bpftrace -qe 't:sched:sched_switch /args->prev_pid==0/ {@[kstack(3)]=count()} "
            "i:s:1{exit()}'"
        ),
    ),
    Finding(
        "seed_top_hackbench",
        "schedule_timeout is hackbench's top caller of schedule()",
        seed_top_hackbench,
        quantity="2012's top caller / the next caller",
        side=">",
        threshold=1.0,
        unit="×",
        contrary="schedule_timeout is not hackbench's top caller of schedule()",
        reproduce=(
            'bpftrace -qe \'t:sched:sched_switch /comm=="hackbench"/ {@[kstack(3)]=count()} '
            "END{print(@,3);clear(@)}' -c /usr/bin/hackbench"
        ),
    ),
    Finding(
        "every_tracer_slows",
        "Every tracer slows hackbench",
        every_tracer_slows,
        quantity="hackbench time under the least costly tracer / untraced",
        side=">",
        threshold=1.0,
        unit="×",
        contrary="Not every tracer slows hackbench",
        reproduce=(
            "H=/usr/bin/hackbench;($H;bpftrace -qe 't:sched:sched_switch{@[kstack(12)]=count()} "
            'END{clear(@)}\' -c "$H";perf record -qago /tmp/p.d -e sched:sched_switch $H;'
            'rm /tmp/p.d)|awk \'/Time/{split("untraced bpftrace perf",t);print t[++n],$2" s"}\''
        ),
    ),
    Finding(
        "bpf_cheaper_than_perf",
        "Counting stacks in a BPF map costs hackbench less time than perf recording every switch",
        bpf_cheaper_than_perf,
        quantity="hackbench time under bpftrace / under perf",
        side="<",
        threshold=1.0,
        unit="×",
        contrary="Counting stacks in a BPF map costs hackbench no less time than perf recording "
        "every switch",
        reproduce=(
            "H=/usr/bin/hackbench;(bpftrace -qe 't:sched:sched_switch{@[kstack(12)]=count()} "
            'END{clear(@)}\' -c "$H";perf record -qago /tmp/p.d -e sched:sched_switch $H;'
            'rm /tmp/p.d)|awk \'/Time/{print n++?"perf":"bpftrace",$2" s"}\''
        ),
    ),
)


def _seed_text(D) -> str:
    ref = D.reference("sched_callers")
    h = ref[ref.workload == "hackbench"].sort_values("rank", kind="stable")
    a, b = h.iloc[0], h.iloc[1]
    return (
        f"2012 (Fedora, a 3.2-or-earlier kernel, SystemTap): {a['caller']} called schedule() "
        f"{fmt(float(a['count']))} times under hackbench, {fmt(float(a['count']) / float(b['count']))}× the next "
        f"caller ({b['caller']})"
    )


def _transfer(D, host) -> str:
    return (
        "Which functions call schedule() is the kernel's code, the same on bare metal; their "
        "shares follow the workload and the number of CPUs"
    )


TAKEAWAY = Takeaway(
    finding="seed_top_hackbench",
    mechanism="A task that blocks with a timeout enters schedule() through schedule_timeout().",
    seed=_seed_text,
    transfer=_transfer,
)
