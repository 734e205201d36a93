"""Key findings of the netperf latency chapter, computed per dataset (perfbook.analysis.findings).

The unit of repetition is the round: each round runs every cell of a path once with each tool,
in one fresh process per run, so a run's percentiles and mean (one row of the runs table) are
one replicate of its cell. Comparisons of two cells are Hodges-Lehmann shifts or ratios of those
per-round values (decide.shift, decide.ratio); a comparison with the 2013 article scales our
estimate by its exact published figure (decide.scaled). The pooled ladder the prose quotes is
context only: pooled over rounds, one disturbed round moves its P99 (the tail finding decides on
each round's own P99 / P50). netperf's percentiles agreeing with our histogram is a check of the
instruments, shown in the cross-validation table, not a finding."""

from __future__ import annotations

import numpy as np

from perfbook.analysis import decide
from perfbook.analysis.decide import fmt
from perfbook.analysis.findings import Finding, Measured

from . import analysis as A

ROUNDS = "rounds"


def per_round(run, path: str, proto: str, pin: str, col: str, tool: str = "rrbench"):
    """The per-round values of one column of one cell of this dataset (one row per run of the
    tool, in measured order); None where the dataset has no such cell (a path, protocol or
    pinning mode its parameters left out)."""
    if "runs" not in run:
        return None
    r = run["runs"]
    at = (r["tool"] == tool) & (r["path"] == path) & (r["proto"] == proto) & (r["pin"] == pin)
    v = r.loc[at, col].to_numpy(dtype=float)
    return v if len(v) else None


def _us(x) -> str:
    return f"{fmt(x)} µs"


def _med(x) -> float:
    return float(np.median(x))


def seed_mean_us(run) -> float:
    """The 2013 article's mean round trip (loopback UDP): the median of its runs' MEAN_LATENCY,
    the figure the chapter's seed table sets beside ours (analysis.versus_seed)."""
    seed = A.seed_metrics(run.reference("netperf_latency"))
    return float(np.nanmedian(seed.loc["MEAN_LATENCY"].astype(float)))


def faster(run):
    """netperf's mean round trip (loopback UDP, unpinned; the median of the rounds' means, with
    its order-statistic interval) over the 2013 article's, an exact published figure."""
    means = per_round(run, "loopback", "udp", "none", "mean_us", tool="netperf")
    if means is None:
        return None
    seed = seed_mean_us(run)
    est = decide.location(means, what="rounds' netperf means")
    return Measured(
        decide.scaled(est, seed),
        f"netperf mean round trip {_us(est.value)} against 2013's {_us(seed)}",
    )


def pin_same(run):
    """Loopback UDP: the rounds' P50 with client and server pinned to one CPU over the unpinned
    rounds' P50 (rrbench)."""
    same = per_round(run, "loopback", "udp", "same", "p50_us")
    none = per_round(run, "loopback", "udp", "none", "p50_us")
    if same is None or none is None:
        return None
    return Measured(
        decide.ratio(same, none, what=ROUNDS),
        f"loopback UDP P50 pinned to one CPU {_us(_med(same))}, unpinned {_us(_med(none))} "
        "(medians of the rounds)",
    )


def veth(run):
    """UDP, unpinned: the rounds' P50 over the veth pair minus over loopback (rrbench). The two
    paths are separate experiments with rounds of their own, so the shift is unpaired."""
    ve = per_round(run, "veth", "udp", "none", "p50_us")
    lo = per_round(run, "loopback", "udp", "none", "p50_us")
    if ve is None or lo is None:
        return None
    return Measured(
        decide.shift(ve, lo, what=ROUNDS),
        f"UDP P50 unpinned over veth {_us(_med(ve))}, over loopback {_us(_med(lo))} "
        "(medians of the rounds)",
    )


def tail(run):
    """Loopback UDP, unpinned: each round's P99 / P50 (one run's own transactions), their median
    with its order-statistic interval over the rounds. The pooled ladder's ratio is context: it
    mixes rounds whose medians differ."""
    p50 = per_round(run, "loopback", "udp", "none", "p50_us")
    p99 = per_round(run, "loopback", "udp", "none", "p99_us")
    if p50 is None or p99 is None:
        return None
    lo = run.data.ladder.set_index(["path", "proto", "pin"]).loc[("loopback", "udp", "none")]
    return Measured(
        decide.location(p99 / p50, what="rounds' P99 / P50"),
        f"pooled over the rounds P99 / P50 {fmt(lo['P99'] / lo['P50'])}×, "
        f"max / P50 {fmt(lo['max'] / lo['P50'])}×",
    )


FINDINGS = (
    Finding(
        "faster",
        "Loopback round trips are more than twice as fast as the 2013 article measured",
        faster,
        quantity="mean round trip / 2013's",
        side="<",
        threshold=0.5,
        unit="×",
        contrary="Loopback round trips are not twice as fast as in 2013",
    ),
    Finding(
        "pin_same",
        "Pinning client and server to one CPU lowers the loopback UDP median by more than 10 %",
        pin_same,
        quantity="P50 pinned to one CPU / unpinned",
        side="<",
        threshold=0.9,
        unit="×",
        contrary="Pinning client and server to one CPU does not lower the loopback UDP median "
        "by more than 10 %",
    ),
    Finding(
        "veth",
        "A veth pair between namespaces adds less than 2 µs to the UDP median",
        veth,
        quantity="veth − loopback UDP P50",
        side="<",
        threshold=2.0,
        unit="µs",
        contrary="A veth pair between namespaces adds 2 µs or more to the UDP median",
    ),
    Finding(
        "tail",
        "On loopback UDP without pinning, the P99 is less than three times the median",
        tail,
        quantity="P99 / P50 of a round",
        side="<",
        threshold=3.0,
        unit="×",
        contrary="On loopback UDP without pinning, the P99 is three times the median or more",
    ),
)
