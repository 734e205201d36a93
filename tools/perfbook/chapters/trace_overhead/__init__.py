"""Chapter 'trace_overhead': what one user-space trace point costs.

collect.py       measure(ctx): arms each mechanism around the C harness and times it
parse.py         the mechanisms and the sanity bound; the harness's and perf's output
analysis.py      costs, overheads, the step decomposition, the published benchmarks (TraceData)
figures.py       the costs, the seed comparison, the published benchmarks
tables.py        the tables, the runs table's columns
prose.py         every value the prose quotes
key_findings.py  the key findings
"""

from __future__ import annotations

import os

from perfbook.core.errors import ParameterError
from perfbook.framework.contract import REPETITION, Chapter, Param, Table, repetition_params
from perfbook.hoststate.tracefs import preflight as tracefs_preflight

from .parse import DEFAULT_MECHANISMS, MECHANISMS

_COMMON = {"mechanisms": None, "pin_cpu": "auto", "seed": 1, "rounds": None}


class TraceOverhead(Chapter):
    name = "trace_overhead"
    title = "Trace overhead: ftrace marker versus uprobes"
    # Rounds repeat adaptively (perfbook.analysis.repetition.Repetition): after rep_warmup rounds that are
    # dropped, whole rounds of every mechanism run until each mechanism's median per-round
    # cost has a 95 % CI narrower than rep_target (relative), or rep_budget_s runs out, or
    # rep_max_runs rounds are in. `warmup` is the harness's untimed batches inside each run.
    # A round's time is mostly the four ~10 µs probes (uprobe, uretprobe, perf_stat, bpf_uprobe)
    # times the calls per run, plus ~1.7 s of process and bpftrace start-up. On 2 CPUs (a KVM
    # guest, committed data) 20000-call batches made a 12.5 s round: 3 rounds in 45 s. The key
    # findings rest on per-round medians, so rounds, not calls, buy precision (#40): 3 rounds
    # against 3 cover 90 % and decide nothing at 95 %; a median needs 6 rounds, a ratio 4 a
    # side. Measured 2026-11-29 on a 2-CPU PVM guest whose uprobe costs 20 µs: 4000-call batches
    # (48000 calls a run) gave 3 rounds in 14 s; 2000 (20000 a run) 4 rounds in 14 s, which
    # decided 3 of 5 findings; the default's 1000 (10000 a run, ~2.3 s a round, 1.7 s of it
    # process and bpftrace start-up) 7 rounds in its 16 s budget, which decided 4 of 5 (the
    # fifth, BPF against ftrace at 1.03x, straddles 1): about 17 s in all (plan_s). No warm-up
    # round: every run already starts with `warmup` untimed batches; `full` keeps two.
    # Rounds come in mirrored pairs (collect.round_order, #40): the same time, positions balanced.
    # Measured 2026-11-29 here: 6 rounds in 15 s decided 5 of 5 (BPF 0.895x, 0.778-0.987); a run
    # beside a busy neighbour (74 % of the CPU) got 4 rounds: the budget stops rounds before
    # rep_min_runs (perfbook.analysis.repetition), and 4 rounds leave the median undecided.
    plan_s = {
        "quick": 5,
        "default": 17,
    }  # seconds a collect should take here (perfbook.book.summary)
    profiles = {
        "quick": {
            "iterations": 2000,
            "batches": 3,
            "warmup": 1,
            "rep_target": 0.05,
            "rep_min_runs": 2,
            "rep_max_runs": 2,
            "rep_budget_s": 30.0,
            "rep_warmup": 0,
            **_COMMON,
        },
        "default": {
            "iterations": 1000,
            "batches": 8,
            "warmup": 2,
            "rep_target": 0.05,
            "rep_min_runs": 6,
            "rep_max_runs": 30,
            "rep_budget_s": 16.0,
            "rep_warmup": 0,
            **_COMMON,
        },
        "full": {
            "iterations": 100000,
            "batches": 20,
            "warmup": 3,
            "rep_target": 0.02,
            "rep_min_runs": 10,
            "rep_max_runs": 100,
            "rep_budget_s": 600.0,
            "rep_warmup": 2,
            **_COMMON,
        },
    }
    params = {
        "iterations": Param(int, min=1, help="calls per timed batch"),
        "batches": Param(int, min=1, help="timed batches per run"),
        "warmup": Param(int, min=0, help="untimed batches before the timed ones, in every run"),
        **repetition_params("rep_"),
        "rounds": Param(
            int, min=1, nullable=True, help="a fixed number of rounds (sets both run bounds)"
        ),
        "mechanisms": Param(
            list, choices=tuple(MECHANISMS), nullable=True, help="a subset of the mechanisms"
        ),
        "pin_cpu": Param(object, nullable=True, help="'auto', -1 (no pinning) or a CPU number"),
        "seed": Param(
            int,
            help="seed of the shuffled mechanism orders (each pair of rounds: one and its reverse)",
        ),
    }
    tables = {
        "samples": Table(
            round="int",
            position="int",
            mechanism="str",
            batch="int",
            iters="int",
            ns="int",
            timer_ns="int",
            ns_per_call="float",
        ),
        "checks": Table(round="int", mechanism="str", expected_hits="int", observed_hits="int"),
        "repetition": REPETITION,
    }
    reference = ("trace_overhead",)

    needs_tools = {"cc": "gcc"}  # the probench harness

    def check(self, p: dict) -> None:
        # lazy: scipy.stats, 0.67 s on top of the declaration's 0.35 s (-X importtime)
        from perfbook.analysis.repetition import repetition_settings

        if p["rounds"] is not None:
            p["rep_min_runs"] = p["rep_max_runs"] = p["rounds"]
        repetition_settings(p, "rep_")
        mechs = p["mechanisms"] or list(DEFAULT_MECHANISMS)
        p["mechanisms"] = list(
            dict.fromkeys(["none", *mechs])
        )  # every comparison needs the baseline
        cpu, ncpu = p["pin_cpu"], os.cpu_count() or 1
        if cpu == "auto":
            cpu = ncpu - 1
        if cpu is not None and (
            isinstance(cpu, bool) or not isinstance(cpu, int) or not -1 <= cpu < ncpu
        ):
            raise ParameterError(
                f"pin_cpu must be 'auto', -1 (no pinning) or a CPU in 0..{ncpu - 1}, got {cpu!r}"
            )
        p["pin_cpu"] = -1 if cpu is None else cpu

    def preflight(self) -> list[str]:
        return tracefs_preflight(need_uprobes=True) + super().preflight()

    def load(self, data_dir=None):
        """Every dataset of this chapter (analysis.TraceData: a 'dataset' column in every table)."""
        return self.part("analysis").TraceData(self, data_dir)


chapter = TraceOverhead()
