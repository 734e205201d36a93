"""Key findings of the netperf latency chapter, computed per dataset (perfbook.analysis.findings).

The unit of repetition is the round: each round runs its cells once with each tool, in one fresh
process per run, so a run's percentiles and mean (one row of the runs table) are one replicate of
its cell. Two cells that ran in the same rounds are compared round by round (each round's ratio
or difference, their median with its order-statistic interval: decide.location), so that what a
round met, a slow phase of the host, is divided out; cells of two paths in datasets that ran one
path's rounds after the other's are compared as two samples (the Hodges-Lehmann shift,
decide.shift). A comparison with the 2013 article scales our
estimate by its exact published figure (decide.scaled). The pooled ladder the prose quotes is
context only: pooled over rounds, one disturbed round moves its P99 (the tail finding decides on
each round's own P99 / P50). netperf's percentiles agreeing with our histogram is a check of the
instruments, shown in the cross-validation table, not a finding."""

from __future__ import annotations

import numpy as np

from perfbook.analysis import decide
from perfbook.analysis.decide import fmt
from perfbook.analysis.findings import Finding, Measured, Takeaway

from . import analysis as A

ROUNDS = "rounds"
# The cells (path, proto, pin) the findings below read, each with the instruments they read in
# it: collect.split_cells runs these in every round, with these instruments, and the chapter's
# other cells (and instruments) only in the first `context_rounds` rounds of the default
# (tests/test_netperf_latency.py checks that every finding reads only these).
FINDING_CELLS = {
    ("loopback", "udp", "none"): ("rrbench", "netperf"),  # faster (netperf), tail, the baseline
    ("loopback", "udp", "same"): ("rrbench",),  # pin_same, veth
    ("veth", "udp", "same"): ("rrbench",),  # veth
}


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
    its order-statistic interval) over the 2013 article's, an exact published figure. The ratio
    sets two machines side by side (this host, often a guest, and the article's, whose CPU and
    kernel it does not state): it is what the two printed means say, not a speed-up of Linux,
    and the claim says so."""
    means = per_round(run, "loopback", "udp", "none", "mean_us", tool="netperf")
    if means is None:
        return None
    seed = seed_mean_us(run)
    est = decide.location(means, what="rounds' netperf means")
    return Measured(
        decide.scaled(est, seed),
        f"netperf mean round trip {_us(est.value)} against 2013's {_us(seed)}",
    )


def paired(run, a: tuple, b: tuple, col: str, tool: str = "rrbench"):
    """(a's values, b's values) of the rounds that ran both cells (path, proto, pin), in round
    order, one pair per round; None where the dataset lacks either cell or ran them in separate
    rounds. Cells of one path always shared their rounds; cells of two paths did since both
    paths run in each round (shared_rounds)."""
    if "runs" not in run:
        return None
    r = run["runs"]
    r = r[r["tool"] == tool]

    def of(cell):
        path, proto, pin = cell
        at = (r["path"] == path) & (r["proto"] == proto) & (r["pin"] == pin)
        return r.loc[at].set_index("rep")[col].astype(float)

    va, vb = of(a), of(b)
    if va.empty or vb.empty or (a[0] != b[0] and not shared_rounds(r)):
        return None
    both = sorted(va.index.intersection(vb.index))  # round numbers: unique, no ties
    return va.loc[both].to_numpy(), vb.loc[both].to_numpy()


def shared_rounds(runs) -> bool:
    """Whether the dataset ran its paths in the same rounds: each round's runs, of every path,
    come after all runs of the round before (the run order). Datasets from before this design
    ran one path's rounds after the other's, so a round of veth and the round of loopback with
    the same number were minutes apart and no pair."""
    if "order" not in runs or runs.empty:
        return False
    g = runs.groupby("rep")["order"]
    lo, hi = g.min().sort_index(kind="stable"), g.max().sort_index(kind="stable")
    return bool((lo.to_numpy()[1:] > hi.to_numpy()[:-1]).all())


def _min_paired() -> int:
    """The fewest rounds whose median has an order-statistic interval of 95 % (decide.location):
    below it a comparison round by round cannot decide, and two samples of rounds can (4
    against 4: 97.1 %)."""
    return next(n for n in range(2, 100) if decide.location(np.arange(float(n))).coverage >= 0.95)


MIN_PAIRED = _min_paired()


def compare(run, a: tuple, b: tuple, paired_of, unpaired_of, what: str):
    """a against b, P50 of rrbench: round by round where the rounds pair (paired; at least
    MIN_PAIRED of them), the median of paired_of(a_i, b_i) over the rounds with its
    order-statistic interval; else the two samples of rounds, unpaired_of(a, b) (decide.ratio or
    decide.shift). (estimate, a's values, b's values), or None when a cell is missing. Which
    one applies follows from the design (how many rounds, shared or not), not from the values."""
    pair = paired(run, a, b, "p50_us")
    if pair is not None and len(pair[0]) >= MIN_PAIRED:
        va, vb = pair
        return decide.location(paired_of(va, vb), what=what), va, vb
    va, vb = per_round(run, *a, "p50_us"), per_round(run, *b, "p50_us")
    if va is None or vb is None:
        return None
    return unpaired_of(va, vb, what=ROUNDS), va, vb


def pin_same(run):
    """Loopback UDP: each round's P50 with client and server pinned to one CPU over the same
    round's unpinned P50 (rrbench), the median of these ratios with its order-statistic interval
    over the rounds. The two cells ran in one round seconds apart, so the state of the machine a
    round met (a slow phase, a busy neighbour) divides out. With fewer than MIN_PAIRED rounds
    (older datasets), the Hodges-Lehmann ratio of the two sets of rounds."""
    c = compare(
        run,
        ("loopback", "udp", "same"),
        ("loopback", "udp", "none"),
        lambda a, b: a / b,
        decide.ratio,
        "rounds' P50 pinned / unpinned",
    )
    if c is None:
        return None
    est, same, none = c
    return Measured(
        est,
        f"loopback UDP P50 pinned to one CPU {_us(_med(same))}, unpinned {_us(_med(none))} "
        "(medians of the rounds)",
    )


def veth(run):
    """UDP, client and server on one CPU: the rounds' P50 over the veth pair minus over loopback
    (rrbench). Both on one CPU, so that where the scheduler puts them, which moves an unpinned
    median from ~6 to ~80 µs here between runs, is the same on both paths and only the path
    differs. Where both paths ran in the same rounds (shared_rounds), each round's difference,
    their median with its order-statistic interval over the rounds; in older datasets, which ran
    one path's rounds after the other's (or with fewer than MIN_PAIRED rounds), the unpaired
    Hodges-Lehmann shift of the two sets of rounds."""
    c = compare(
        run,
        ("veth", "udp", "same"),
        ("loopback", "udp", "same"),
        lambda a, b: a - b,
        decide.shift,
        "rounds' veth − loopback P50",
    )
    if c is None:
        return None
    est, ve, lo = c
    return Measured(
        est,
        f"UDP P50 with both ends on one CPU over veth {_us(_med(ve))}, over loopback "
        f"{_us(_med(lo))} (medians of the rounds)",
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
        "netperf's mean loopback UDP round trip on this host is less than half the figure the "
        "2013 article printed for its own, unstated machine and kernel",
        faster,
        quantity="mean round trip / 2013's",
        side="<",
        threshold=0.5,
        unit="×",
        contrary="netperf's mean loopback UDP round trip on this host is not less than half the "
        "figure the 2013 article printed for its own, unstated machine and kernel",
        reproduce=(
            'timeout 20 netserver -D -L 127.0.0.1 -p 12866& sleep 1;echo "mean round trip '
            "$(netperf -H 127.0.0.1 -p 12866 -t UDP_RR -l 3 -P 0 -- -o MEAN_LATENCY) us; 2013: "
            '44.34 us";kill $!'
        ),
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
        reproduce=(
            "timeout 20 netserver -D -L 127.0.0.1 -p 12866& sleep 1;n(){ netperf -H 127.0.0.1 -p "
            '12866 $@ -t UDP_RR -l 2 -P 0 -- -o P50_LATENCY;};for i in 1 2;do echo "P50 '
            'unpinned $(n) us, both on CPU 1 $(n -T1,1) us";done;kill $!'
        ),
    ),
    Finding(
        "veth",
        "A veth pair between namespaces adds less than 2 µs to the UDP median (client and server "
        "on one CPU)",
        veth,
        quantity="veth − loopback UDP P50",
        side="<",
        threshold=2.0,
        unit="µs",
        contrary="A veth pair between namespaces adds 2 µs or more to the UDP median (client and "
        "server on one CPU)",
        reproduce=(
            "ip netns add pb;ip l add pa type veth peer pb netns pb;ip a add 10.9.9.1/24 dev pa;"
            "ip l set pa up;ip -n pb a add 10.9.9.2/24 dev pb;ip -n pb l set pb up;timeout 20 "
            "netserver -D -L 10.9.9.1 -p 12866& sleep 1;n(){ $@ netperf -H 10.9.9.1 -p 12866 "
            '-T1,1 -t UDP_RR -l 3 -P 0 -- -o P50_LATENCY;};echo "P50 loopback $(n) us, veth $(n '
            'ip netns exec pb) us";kill $!;ip netns del pb'
        ),
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
        reproduce=(
            "timeout 20 netserver -D -L 127.0.0.1 -p 12866& sleep 1;for i in 1 2 3;do netperf -H "
            "127.0.0.1 -p 12866 -t UDP_RR -l 1 -P 0 -- -o P50_LATENCY,P99_LATENCY|awk -F, "
            '\'{print "P50 "$1" us, P99 "$2" us: "$2/$1"x"}\';done;kill $!'
        ),
    ),
)


def _seed_text(D) -> str:
    m = A.seed_metrics(D.reference("netperf_latency")).loc["MEAN_LATENCY"].astype(float)
    return (
        f"2013 (localhost, machine not stated): a mean UDP round trip of {fmt(m.median())} µs "
        f"(the median of its {len(m)} runs)"
    )


def _transfer(D, host) -> str:
    if host.get("virtualization") not in (None, "none"):
        return (
            "Measured in a virtual machine whose loopback crosses no hypervisor but whose vCPUs "
            "share physical CPUs: a bare-metal host should be at least as fast"
        )
    return "Measured on bare metal"


TAKEAWAY = Takeaway(
    finding="faster",
    mechanism="A loopback UDP round trip is two sends, two softirq deliveries and two "
    "wake-ups inside one kernel.",
    seed=_seed_text,
    transfer=_transfer,
)
