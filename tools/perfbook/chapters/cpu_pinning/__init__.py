"""Chapter 'cpu_pinning': pinning prefork workers, and the scheduler tunables of this kernel.

The seed (004_b02ec4e7a2b12836.txt, "FreakOut DSP 入札サーバの CPU 使用率を 30% 削減する
Performance Tuning", 2015) pinned the workers of a prefork, CPU-bound bidding server
to cores with sched_setaffinity() and raised sched_min_granularity_ns and
sched_wakeup_granularity_ns with tuned's throughput-performance profile.

Here tools/c/prefork.c is the server: N forked workers (by default workers_per_cpu x the
online CPUs: two per CPU in the default and full profiles, so that the pool is larger than the
machine as a prefork pool usually is; one per CPU in the quick profile) doing a pointer chase through
a private table sized against this CPU's L2, with one loopback UDP round trip per
request, driven over loopback TCP by a load generator at saturation and at a fixed
rate. measure() runs the variants interleaved (shuffled order in every round):

  unpinned       the default
  pinned         worker i pinned to CPU i mod NCPU (sched_setaffinity)
  slice_10ms     EEVDF request size 10 ms for every task of the experiment,
                 per task through sched_setattr(sched_runtime)
  batch          SCHED_BATCH for every task of the experiment (a woken batch task
                 never preempts the running one)
  pinned_tuned   pinned + slice_10ms + batch together (the seed's two tunings at once)
  base_slice_10ms  the global debugfs knob sched/base_slice_ns = 10 ms, written
                 before and restored after each of its trials, where writable

Per trial it records throughput, CPU time per request (/proc/<pid>/sched), latency
percentiles, voluntary/involuntary context switches, migrations (/proc/<pid>/sched
and sched:sched_migrate_task in a private ftrace instance), per-CPU utilisation
(/proc/stat) and, where the PMU allows, cache misses (perf stat).

  collect.py        measure(ctx): the harness in interleaved adaptive rounds; the debugfs
                    sched knobs: inventory, writes, their undoing (on ctx.undo)
  parse.py          variants, loads, the seed's knobs, the rules fixed in advance; harness
                    output, ftrace text, sched/debug, perf stat
  analysis.py       per-trial metrics, exclusions, summaries, paired effects, rank tests, the
                    effects in words; PinningData (derived trials, the quoted dataset's frames)
  tables.py         the tables the chapter shows, and its columns of the runs table
  figures.py        (figure, caption) pairs
  prose.py          values(D): every value the prose quotes
  key_findings.py   FINDINGS: the chapter's conclusions
"""

from __future__ import annotations

import os
from pathlib import Path

from perfbook.core.errors import ParameterError
from perfbook.framework.contract import REPETITION, Chapter, Param, Table, repetition_params

from .parse import BASELINE, LOADS, VARIANTS, l2_bytes

# Rounds repeat (perfbook.analysis.repetition.Repetition, settings rep_*): one experiment per load,
# whose keys are the variants and whose tracked value is the worker CPU time per request. The
# experiments share the rounds (one shuffled order of every trial still running), and each
# stops on its own: CI target, time budget or maximum number of rounds. A trial is warmup_ms +
# duration_ms plus ~50 ms of start-up, with a fresh pool: the unit of repetition. The trials the
# key findings read (key_findings.FINDING_TRIALS: unpinned, pinned and batch at the fixed rate)
# run in every round; with `context_rounds` set, the other variants and the saturation load,
# which only the tables and figures show, run in the first context_rounds rounds alone (their
# own experiments of that many rounds; None: every trial in every round).
# The default: 200 + 500 ms trials, 2 rounds of all 10 trials this host can run (12 where
# base_slice_10ms is writable) and 6 more of the 3 finding trials, 8 fixed rounds for the
# findings (Moses' interval needs 4 against 4; 8 leaves room for trials the rules leave out,
# disturbed or not keeping up with the rate), with 2 calibration runs: about 32 s (plan_s; it was
# 3 rounds of everything in 26 s, 3 against 3, 90 %, which decides nothing). No warm-up
# round: every trial has its own warm-up; `full` keeps one and runs everything in every round.
# workers "auto" = workers_per_cpu x online CPUs. The seed's migrations need a pool larger than
# the machine (an unpinned worker then has somewhere to go while another runs), so the default
# and full profiles run two workers per CPU; the quick profile (a test) keeps one. A dataset
# answers the pinning finding of its own design (key_findings: pin_cpu_pool for a pool larger
# than the machine, pin_cpu for one worker per CPU); the default measures the seed's design,
# pin_cpu needs a run with workers_per_cpu=1.
_COMMON = {
    "variants": list(VARIANTS),
    "loads": list(LOADS),
    "workers": "auto",
    "ws_kib": "auto",
    "lookups": 20000,
    "rate_fraction": 0.6,
    "seed": 1,
    "trace": True,
    "context_rounds": None,
}
MAX_WORKERS = 64
_KEY = dict(round="int", position="int", variant="str", load="str")
_ROLES = ("worker", "loadgen", "backend")
_PERF = ("perf_cache_misses", "perf_cache_references", "perf_instructions", "perf_cycles")
_TRACE = (
    "trace_markers",
    "trace_window_s",
    "trace_overrun",
    *(f"{r}_migrations_trace" for r in _ROLES),
)


class CpuPinning(Chapter):
    name = "cpu_pinning"
    title = "Pinning prefork workers, and the scheduler tunables of this kernel"
    plan_s = {
        "quick": 8,
        "default": 32,
    }  # seconds a collect should take here (perfbook.book.summary)
    profiles = {
        "quick": {
            "warmup_ms": 100,
            "duration_ms": 200,
            "calib_runs": 1,
            "rep_target": 0.05,
            "rep_min_runs": 2,
            "rep_max_runs": 2,
            "rep_budget_s": 60.0,
            "rep_warmup": 0,
            "workers_per_cpu": 1,
            **_COMMON,
        },
        "default": {
            "warmup_ms": 200,
            "duration_ms": 500,
            "calib_runs": 2,
            "rep_target": 0.05,
            "rep_min_runs": 8,
            "rep_max_runs": 8,
            "rep_budget_s": 120.0,  # a cap for a machine far slower than planned, not a plan
            "rep_warmup": 0,
            "workers_per_cpu": 2,
            **_COMMON,
            "context_rounds": 2,
        },
        "full": {
            "warmup_ms": 500,
            "duration_ms": 2000,
            "calib_runs": 5,
            "rep_target": 0.05,
            "rep_min_runs": 10,
            "rep_max_runs": 60,
            "rep_budget_s": 600.0,
            "rep_warmup": 1,
            "workers_per_cpu": 2,
            **_COMMON,
        },
    }
    params = {
        "warmup_ms": Param(int, min=0, max=60000, help="warm-up of every trial (ms)"),
        "duration_ms": Param(
            int, min=50, max=600000, help="measurement window of every trial (ms)"
        ),
        "calib_runs": Param(
            int, min=1, max=20, help="saturation runs of the baseline to set the fixed rate"
        ),
        **repetition_params("rep_"),
        "variants": Param(
            list,
            choices=tuple(VARIANTS),
            help="variants to run, e.g. 'unpinned,pinned' (unpinned is always added)",
        ),
        "loads": Param(list, choices=LOADS, help="'sat', 'rate' or both"),
        "workers": Param(
            object, help="worker processes: 'auto' (workers_per_cpu x online CPUs) or 1..64"
        ),
        "workers_per_cpu": Param(
            int, min=1, max=16, help="workers per online CPU when workers is 'auto' (capped at 64)"
        ),
        "ws_kib": Param(
            object, help="each worker's table in KiB: 'auto' (3/4 of the L2) or 16..4194304"
        ),
        "lookups": Param(int, min=100, max=10_000_000, help="dependent loads per request"),
        "rate_fraction": Param(
            float,
            min=0.05,
            max=1.0,
            help="fixed rate as a fraction of the baseline's saturation throughput",
        ),
        "seed": Param(int, min=0, max=1 << 30, help="seed of the shuffled order and the harness"),
        "trace": Param(bool, help="count migrations with sched_migrate_task too"),
        "context_rounds": Param(
            int,
            min=1,
            max=1000,
            nullable=True,
            help="rounds that run the trials no key finding reads (the first ones); None: "
            "every trial in every round",
        ),
    }
    tables = {
        "trials": Table(
            **_KEY,
            offered_rate="float",
            rate_saturated="bool",
            window_s="float",
            completed="int",
            issued="int",
            queue_max="int",
            dropped="int",
            lat_n="int",
            lat_mean_ns="float",
            lat_p50_ns="int",
            lat_p90_ns="int",
            lat_p99_ns="int",
            lat_p999_ns="int",
            lat_max_ns="int",
            **{
                f"{r}_{f}": "int"
                for r in _ROLES
                for f in ("exec_ns", "migrations", "nvcsw", "nivcsw")
            },
            busy_ticks="int",
            total_ticks="int",
            steal_ticks="int",
            clk_tck="int",
            policy_ok="bool",
            slice_ok="bool",
            worker_slice_ns="int",
            trace_markers="int",
            trace_window_s="float",
            trace_overrun="int",
            **{f"{r}_migrations_trace": "int" for r in _ROLES},
            **{c: "float" for c in _PERF},
            # rate_saturated: recorded since after the first datasets (derived for those)
            optional=("rate_saturated", *_TRACE, *_PERF),
        ),
        "warmup_trials": Table(**_KEY, completed="int", window_s="float"),
        "tasks": Table(
            **_KEY,
            role="str",
            idx="int",
            pid="int",
            exec_ns="int",
            migrations="int",
            nvcsw="int",
            nivcsw="int",
            policy="int",
            slice_ns="int",
        ),
        "cores": Table(
            **_KEY,
            cpu="int",
            user="int",
            nice="int",
            system="int",
            idle="int",
            iowait="int",
            irq="int",
            softirq="int",
            steal="int",
            total_ticks="int",
            busy_frac="float",
            steal_frac="float",
        ),
        "latency_hist": Table(**_KEY, bin="int", count="int"),
        "migrations": Table(
            **_KEY, t_s="float", pid="int", role="str", orig_cpu="int", dest_cpu="int"
        ),
        "knobs": Table(
            knob="str",
            era="str",
            exists_here="bool",
            readable_here="bool",
            writable_here="bool",
            value_here="str",
            error="str",
            seed_value="float",
            tuned_value="float",
        ),
        "repetition": REPETITION,
    }
    reference = ("cpu_pinning",)
    quote_needs = ("trials",)

    needs_tools = {"cc": "gcc"}  # the prefork harness

    def check(self, p: dict) -> None:
        # lazy: scipy.stats, 0.67 s on top of the declaration's 0.35 s (-X importtime)
        from perfbook.analysis.repetition import repetition_settings

        repetition_settings(p, "rep_")
        if BASELINE not in p["variants"]:
            p["variants"] = [BASELINE, *p["variants"]]  # every effect is relative to it
        w = p["workers"]
        if w == "auto":
            w = min(MAX_WORKERS, p["workers_per_cpu"] * (os.cpu_count() or 1))
        if isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= MAX_WORKERS:
            raise ParameterError(
                f"workers must be 'auto' or an integer in [1, 64], got {p['workers']!r}"
            )
        p["workers"] = w
        ws = p["ws_kib"]
        if ws == "auto":
            ws = max(16, int((l2_bytes() or 512 * 1024) * 0.75) // 1024)
        if isinstance(ws, bool) or not isinstance(ws, int) or not 16 <= ws <= 4 * 1024 * 1024:
            raise ParameterError(
                f"ws_kib must be 'auto' or an integer in [16, 4194304], got {p['ws_kib']!r}"
            )
        p["ws_kib"] = ws

    def preflight(self) -> list[str]:
        if not Path("/proc/self/sched").is_file():
            return [
                "/proc/<pid>/sched is missing (kernel without scheduler statistics): "
                "no per-task CPU time, switches and migrations"
            ]
        return super().preflight()

    def load(self, data_dir=None):
        """Every dataset, as analysis.PinningData (derived trials, the quoted dataset's frames)."""
        return self.part("analysis").PinningData.load(self, data_dir)


chapter = CpuPinning()
