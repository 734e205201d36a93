"""Chapter 'netperf_latency': network round-trip latency with netperf's omni RR test, and our
own RR harness.

What measure() does, on this host:
  * paths: loopback (127.0.0.1 in a network namespace it creates, perfbook_<pid>_lo) and a
    veth pair between two more (perfbook_<pid>_cli, perfbook_<pid>_srv, addresses from the
    RFC 2544 benchmarking range 198.18.0.0/15 that exist only inside them). No server of a
    run listens in the host's namespace, where every local user could reach it (#43);
  * protocols: UDP and TCP request/response (1-byte request and response by default);
  * CPU pinning: none, client and server on different CPUs ("split"), both on one
    CPU ("same");
  * two instruments on each cell, interleaved: tools/c/rrbench.c, which keeps every
    transaction's latency in ns, and netperf -t omni -d rr -j -k all (netserver is
    started by us, in the foreground, on a free port, and always stopped);
  * ping -f on each path, as the in-kernel round trip the seed compares against;
  * one traced run per pinning mode with the scheduler tracepoints (sched_stage).

Everything it creates (namespaces, veth, netserver and harness processes) is on the run's
undo stack; a namespace left by a SIGKILLed run is swept at the next start (its name carries
the dead owner's pid, perfbook.hoststate.netns).

netperf's percentiles come from a histogram (src/netlib.c HIST_add / HIST_get_percentile,
100 buckets per decade of integer microseconds); parse.py re-implements that
bucketing so it can be applied to our exact samples.

  collect.py        measure(ctx): the interleaved adaptive rounds, ping, sched tracepoints;
                    the lab (namespaces, veth, netserver) and one run of each instrument
  parse.py          paths, protocols, pinning modes, addresses, bins, tolerances;
                    netperf/rrbench/ping/ss/ftrace output, sample summaries, and netperf's
                    histogram and percentile, step by step
  analysis.py       ladders, exceedance, cross-validation, quantization, comparisons, the
                    seed's 2013 numbers beside ours; NetperfData (ordered tables, the quoted
                    dataset's frames)
  tables.py         the tables the chapter shows, and its columns of the runs table
  figures.py        (figure, caption) pairs
  prose.py          values(D): every value the prose quotes
  key_findings.py   FINDINGS: the chapter's conclusions
"""

from __future__ import annotations

import os

from perfbook.framework.contract import REPETITION, Chapter, Param, Table, repetition_params

from .parse import PATHS, PINS, PROTOS

# Cells repeat in rounds (perfbook.analysis.repetition.Repetition), one experiment for both
# paths: a round runs its cells with both tools, the cells of both paths in one shuffled order,
# so a comparison of the paths is not one of two stretches of time. The cells the key findings
# read (key_findings.FINDING_CELLS: loopback UDP unpinned and pinned to one CPU, veth UDP
# unpinned) run in every round; with `context_rounds` set, the other cells, which only the
# tables and figures show, run in the first context_rounds rounds alone (None: every cell every
# round). Rounds are added until every tracked cell's per-run P50 has a 95 % CI narrower than
# rep_target (relative), or rep_budget_s runs out, or rep_max_runs; `reps` instead fixes the
# number of rounds (rep_min_runs = rep_max_runs = reps).
_COMMON = {
    "paths": ["loopback", "veth"],
    "protos": ["udp", "tcp"],
    "rep_target": 0.05,
    "request_size": 1,
    "response_size": 1,
    "seed": 7,
    "reps": None,
    "context_rounds": None,
    "netperf_match": False,
}
_KEY = dict(rep="int", order="int", path="str", proto="str", pin="str")
_US = (
    "min_us",
    "mean_us",
    "std_us",
    "p50_us",
    "p90_us",
    "p99_us",
    "p999_us",
    "max_us",
    "rt_latency_us",
)
_NQ = ("nq_p50_us", "nq_p90_us", "nq_p99_us")
_NR = (
    "nr_p50_us",
    "nr_p90_us",
    "nr_p99_us",
)  # recorded since the rank check: absent from older datasets


class NetperfLatency(Chapter):
    name = "netperf_latency"
    title = "Network round-trip latency with netperf"
    # The default runs 15 fixed rounds: the findings' medians of the rounds (faster, tail, and
    # pin_same and veth, which compare two cells round by round: key_findings.compare) have a
    # 96.5 % order-statistic interval from the 4th to the 12th value at 15, so that three
    # disturbed rounds on either side leave it decided (at 6, the 96.9 % one is [min, max], which
    # one round moves; here the unpinned pair lands on two CPUs in one round of four and its
    # median goes from ~8 to ~80 µs). After the first 2 rounds (context_rounds, every cell with
    # both instruments, ~10 s each, which the cross-validation's range over the rounds needs) a
    # round runs only the 3 cells the findings read, each with the instruments they read
    # (key_findings.FINDING_CELLS: rrbench in all three, netperf in loopback UDP unpinned):
    # ~1.7 s. In each cell rrbench runs first (0.3 s recorded after 0.1 s unrecorded) and netperf
    # then counts the transactions it recorded (netperf_match): both instruments see a window of
    # one size, where netperf's shortest timed run (-l 1) saw three times rrbench's transactions
    # and took most of the old default's 38 s for 2 rounds; a fixed count (-l -25000) took 5-7 s
    # in a split cell here (~250 µs a transaction). With the 4 unrecorded netperf warm-ups
    # (collect.WARMUP_TRANSACTIONS), ping and the scheduler-tracepoint runs (~4 s): 45-48 s
    # here (plan_s 46). `full` runs every cell with both instruments in every round, up to 50 rounds.
    # quick: one round of every cell, its netperf runs 5,000 transactions: 10 s here
    # (2026-11-29; 15,000, as many as its 0.25 s rrbench runs record, took 18 s in a fresh
    # clone's `make all PROFILE=quick`, which then took 182 s against its 3-minute target).
    plan_s = {
        "quick": 10,
        "default": 46,
    }  # seconds a collect should take here (perfbook.book.summary)
    profiles = {
        "quick": {
            **_COMMON,
            "pins": ["none", "split"],
            "rep_min_runs": 1,
            "rep_max_runs": 1,
            "rep_budget_s": 30.0,
            "rep_warmup": 0,
            "seconds": 0.25,
            "warmup": 0.1,
            "netperf_seconds": 1,
            "netperf_transactions": 5000,
            "ping_count": 1000,
            "sched_seconds": 0.2,
        },
        "default": {
            **_COMMON,
            "pins": list(PINS),
            "rep_min_runs": 15,
            "rep_max_runs": 15,
            "rep_budget_s": 120.0,  # a cap for a machine far slower than planned, not a plan
            "rep_warmup": 0,
            "context_rounds": 2,
            "seconds": 0.3,
            "warmup": 0.1,
            "netperf_seconds": 1,
            "netperf_match": True,
            "ping_count": 5000,
            "sched_seconds": 0.2,
        },
        "full": {
            **_COMMON,
            "pins": list(PINS),
            "rep_min_runs": 6,
            "rep_max_runs": 50,
            "rep_budget_s": 800.0,
            "rep_warmup": 1,
            "seconds": 2.0,
            "warmup": 0.5,
            "netperf_seconds": 2,
            "ping_count": 100000,
            "sched_seconds": 1.0,
        },
    }
    params = {
        "paths": Param(list, choices=PATHS, help="network paths, e.g. 'loopback,veth'"),
        "protos": Param(list, choices=PROTOS, help="protocols, e.g. 'udp,tcp'"),
        "pins": Param(list, choices=PINS, help="pinning modes, e.g. 'none,split,same'"),
        **repetition_params("rep_"),
        "reps": Param(
            int,
            min=1,
            max=100,
            nullable=True,
            help="a fixed number of rounds per path (sets rep_min_runs and rep_max_runs)",
        ),
        "context_rounds": Param(
            int,
            min=1,
            max=100,
            nullable=True,
            help="rounds that run the cells no key finding reads (the first ones); None: every "
            "cell in every round",
        ),
        "seconds": Param(float, min=0.05, max=120.0, help="recorded seconds per rrbench run"),
        "warmup": Param(
            float, min=0.0, max=30.0, help="unrecorded seconds before each rrbench run"
        ),
        "netperf_seconds": Param(int, min=1, max=60, help="netperf -l (whole seconds)"),
        "netperf_transactions": Param(
            int,
            min=100,
            max=10_000_000,
            nullable=True,
            help="netperf -l -N: each measured run N transactions, not "
            "netperf_seconds (None: whole seconds)",
        ),
        "netperf_match": Param(
            bool,
            help="rrbench runs first in each cell and netperf then counts the transactions it "
            "recorded (-l -N): both instruments see a window of one size",
        ),
        "request_size": Param(int, min=1, max=65000, help="request bytes"),
        "response_size": Param(int, min=1, max=65000, help="response bytes"),
        "ping_count": Param(int, min=0, max=1_000_000, help="ping -f -c per path (0: no ping)"),
        "seed": Param(int, min=0, max=2**31, help="seed of the shuffled order of the cells"),
        "sched_seconds": Param(
            float,
            min=0.0,
            max=5.0,
            help="seconds of each traced run with the scheduler tracepoints (0: none)",
        ),
    }
    tables = {
        "runs": Table(
            **_KEY,
            tool="str",
            t_s="float",
            request_size="int",
            response_size="int",
            n="int",
            lost="int",
            seconds="float",
            rate_tps="float",
            **{c: "float" for c in (*_US, *_NQ, *_NR)},
            optional=_NR,
        ),
        "hist": Table(**_KEY, bin="int", count="int"),
        "netperf_all": Table(**_KEY, key="str", value="str"),
        "ping": Table(
            path="str",
            count="int",
            sent="int",
            received="int",
            min_us="float",
            mean_us="float",
            max_us="float",
            mdev_us="float",
        ),
        "sched": Table(
            path="str",
            proto="str",
            pin="str",
            role="str",
            wakeups="int",
            wakeups_per_transaction="float",
            delay_sum_us="float",
            delay_mean_us="float",
            delay_p50_us="float",
            delay_p99_us="float",
            delay_max_us="float",
            traced_transactions="int",
            traced_rr_mean_us="float",
            traced_rr_p50_us="float",
            overrun="int",
        ),
        "repetition": REPETITION,
    }
    reference = ("netperf_latency",)
    quote_needs = ("runs",)

    needs_tools = {"ip": "iproute2", "taskset": "util-linux", "cc": "gcc"}

    def check(self, p: dict) -> None:
        # lazy: scipy.stats, 0.67 s on top of the declaration's 0.35 s (-X importtime)
        from perfbook.analysis.repetition import repetition_settings

        if p["reps"] is not None:
            p["rep_min_runs"] = p["rep_max_runs"] = p["reps"]
        repetition_settings(p, "rep_")

    def preflight(self) -> list[str]:
        reasons = []
        if os.geteuid() != 0:
            reasons.append(
                "needs root (network namespaces, veth, CPU pinning of netserver); run as root"
            )
        return reasons + super().preflight()

    def load(self, data_dir=None):
        """Every dataset, as analysis.NetperfData (ordered tables, the quoted dataset's frames)."""
        return self.part("analysis").NetperfData.load(self, data_dir)


chapter = NetperfLatency()
