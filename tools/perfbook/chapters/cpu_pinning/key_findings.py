"""Key findings of the CPU pinning chapter, computed per dataset (perfbook.analysis.findings).

A trial is one round's run of one variant under one load, with a fresh pool: the unit of
repetition. Each finding is a ratio of two variants' per-round values under the fixed-rate load,
from the trials the chapter's summaries use (analysis.comparable: undisturbed, and keeping up
with the rate), as the Hodges-Lehmann ratio with Moses' interval (analysis.round_ratio, which is
decide.ratio where a count may be 0 in a round).

The pinning effect depends on the design: with one worker per CPU an unpinned worker has little
room to move, while the seed's prefork pools had more workers than cores. So the pinning finding
is split by design, and a dataset answers only the one its design measured (the other is "not
measured" for it).

Two former findings are checks, not findings, and the chapter states them where it shows the
numbers: pinned workers do not migrate (an affinity of one CPU allows none: it checks that the
pinning took effect; the migrations table and figure), and /proc/<pid>/sched and the
sched_migrate_task tracepoint count the same migrations (two instruments agree; trace_sentence).
"""

from __future__ import annotations

import numpy as np

from perfbook.analysis.decide import fmt
from perfbook.analysis.findings import Finding, Measured, Takeaway

from .analysis import round_ratio, round_values

LOAD = "rate"  # the fixed-rate load: the same requests per second for every variant
# The (load, variant) trials the findings below read: collect.split_trials runs them in every
# round, and the chapter's other trials only in the first `context_rounds` rounds of the default
# (tests/test_cpu_pinning.py checks that every finding reads only these).
FINDING_TRIALS = ((LOAD, "unpinned"), (LOAD, "pinned"), (LOAD, "batch"))


def _rounds(run, metric: str, *variants):
    """{variant: its per-round values of metric at the fixed rate} of this dataset; None (not
    measured) where it has no trials or did not run the load or one of the variants."""
    if "trials" not in run:
        return None
    t = run["trials"]
    if t is None or t.empty:
        return None
    out = {v: round_values(t, LOAD, v, metric) for v in variants}
    return out if all(len(x) for x in out.values()) else None


def _design(run) -> tuple[int, int]:
    return int(run.manifest.parameters["workers"]), int(run.manifest.host["cpus_online"])


def _seed_pin(run) -> float:
    """The seed's CPU usage change for pinning, in % (an exact published figure)."""
    ref = run.reference("cpu_pinning")
    return float(ref[ref.quantity == "cpu_usage_change"].set_index("applies_to").value["pinned"])


def _pinning(run):
    r = _rounds(run, "cpu_per_req_us", "pinned", "unpinned")
    if r is None:
        return None
    w, c = _design(run)
    return Measured(
        round_ratio(r["pinned"], r["unpinned"]),
        f"{w} workers on {c} CPUs, fixed rate: worker CPU per request "
        f"{fmt(float(np.median(r['pinned'])))} µs pinned, "
        f"{fmt(float(np.median(r['unpinned'])))} µs unpinned; 2015: {fmt(_seed_pin(run), 2)} %",
    )


def pin_cpu(run):
    """One worker per CPU (the design of the first datasets)."""
    w, c = _design(run)
    return _pinning(run) if w == c else None


def pin_cpu_pool(run):
    """More workers than CPUs, as in the seed's prefork pools."""
    w, c = _design(run)
    return _pinning(run) if w > c else None


def batch(run):
    r = _rounds(run, "invol_per_req", "batch", "unpinned")
    if r is None:
        return None
    return Measured(
        round_ratio(r["batch"], r["unpinned"]),
        f"involuntary switches per request at the fixed rate: SCHED_BATCH "
        f"{fmt(float(np.median(r['batch'])))}, default {fmt(float(np.median(r['unpinned'])))}",
    )


FINDINGS = (
    Finding(
        "pin_cpu_pool",
        "With more workers than CPUs, a prefork pool like the seed's, pinning the workers "
        "lowers CPU time per request by a resolvable amount",
        pin_cpu_pool,
        quantity="pinned / unpinned worker CPU per request",
        side="<",
        threshold=1.0,
        unit="×",
        contrary="With more workers than CPUs, pinning the workers did not lower CPU time per request",
        reproduce=(
            'f(){ build/bin/prefork --workers $((2*$(nproc))) --mode "$@";};r=$(f sat|awk -F= '
            "'/^comp/{print $2*.6}');for p in 0 1 0 1;do echo pin=$p $(f rate --rate $r --pin $p|"
            "awk -F'[,=]' '/,worker,/{s+=$2<\"n\"?$6:-$6}/^comp/{n=$2}END{print s/n/1e3}') "
            "us/req;done"
        ),
    ),
    Finding(
        "pin_cpu",
        "With one worker per CPU, pinning the workers lowers CPU time per request by a "
        "resolvable amount",
        pin_cpu,
        quantity="pinned / unpinned worker CPU per request",
        side="<",
        threshold=1.0,
        unit="×",
        contrary="With one worker per CPU, pinning the workers did not lower CPU time per request",
        reproduce=(
            'f(){ build/bin/prefork --workers $(nproc) --mode "$@";};r=$(f sat|awk -F= '
            "'/^comp/{print $2*.6}');for p in 0 1 0 1;do echo pin=$p $(f rate --rate $r --pin $p|"
            "awk -F'[,=]' '/,worker,/{s+=$2<\"n\"?$6:-$6}/^comp/{n=$2}END{print s/n/1e3}') "
            "us/req;done"
        ),
    ),
    Finding(
        "batch",
        "SCHED_BATCH cuts involuntary context switches to less than half",
        batch,
        quantity="SCHED_BATCH / default involuntary switches per request",
        side="<",
        threshold=0.5,
        unit="×",
        contrary="SCHED_BATCH does not cut involuntary context switches to less than half",
        reproduce=(
            "for p in normal batch normal batch;do echo $p $(build/bin/prefork --mode sat "
            "--workers $((2*$(nproc))) --all-tasks 1 --policy $p|awk -F'[,=]' "
            "'/,worker,/{s+=$2<\"n\"?$9:-$9}/^comp/{n=$2}END{print s/n}') invol/req;done"
        ),
    ),
)


def _seed_text(D) -> str:
    ref = D.reference("cpu_pinning")
    r = ref[(ref.quantity == "cpu_usage_change") & (ref.applies_to == "pinned")]["value"].iloc[0]
    return f"2015 (FreakOut's bidding servers, a prefork pool): pinning changed CPU use by {fmt(float(r))} %"


def _transfer(D, host) -> str:
    n = host.get("cpus_online")
    return (
        f"With {n} CPUs the scheduler has few places to move a worker to; on a many-core "
        "bare-metal host migrations and their cache misses weigh more, so pinning may gain more"
    )


TAKEAWAY = Takeaway(
    finding="pin_cpu_pool",
    mechanism="Pinning a worker to one CPU stops the scheduler from migrating it on wake-up.",
    seed=_seed_text,
    transfer=_transfer,
)
