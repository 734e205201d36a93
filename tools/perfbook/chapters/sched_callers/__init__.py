"""Chapter 'sched_callers': who calls schedule()? Callers found with today's tracers, and
what each tracer costs the workload it watches.

  collect.py       measure(ctx): arms each tracer around the workloads, times hackbench under it
  parse.py         the tracers, the workloads, the scheduler's entry points; each tracer's
                   output -> stack counts
  analysis.py      callers per tracer, rank agreement, the probe effect (CallersData)
  figures.py       the callers per tracer and the probe effect
  tables.py        the tables, the runs table's columns
  prose.py         every value the prose quotes
  key_findings.py  the key findings
"""

from __future__ import annotations

from perfbook.framework.contract import REPETITION, Chapter, Param, Table, repetition_params
from perfbook.hoststate.tracefs import preflight as tracefs_preflight

from .parse import DEFAULT_TRACERS, WORKLOADS

_COMMON = {
    "tracers": None,
    "workloads": None,
    "hackbench_groups": 10,
    "hackbench_loops": 100,
    "dd_mib": 8,
    "stack_depth": 8,
    "buffer_kb": 8192,
    "seed": 1,
    "rounds": None,
}


class SchedCallers(Chapter):
    name = "sched_callers"
    title = "Who calls schedule()? Today's tracers, and what each costs"
    # Each round arms every tracer once (shuffled); the first caller_rounds rounds run every
    # workload under it, later rounds hackbench only. Rounds repeat adaptively until each
    # tracer's median hackbench time has a 95 % CI narrower than rep_target, or the budget ends.
    # On 2 CPUs with 3 usable tracers (committed data: 4 runs of hackbench -l 100, 0.84 s each,
    # 27 s for the first round and 22 s for the next, 93 s in all) the default's 2 runs of
    # -l 50 make a first round of ~14 s (sleep, dd and the tracers' start, stop and parsing)
    # and later ones of ~6.5 s. The default runs a fixed 2 rounds (rep_min_runs = rep_max_runs;
    # a budget that must let the long first round be followed by a second would also let a
    # third in), about 23 s in all (plan_s); its 30 s budget caps a host where
    # all six tracers run, whose rounds are about twice as long.
    plan_s = {
        "quick": 11,
        "default": 23,
    }  # seconds a collect should take here (perfbook.book.summary)
    profiles = {
        "quick": {
            "hackbench_runs": 2,
            "caller_rounds": 1,
            "rep_target": 0.05,
            "rep_min_runs": 1,
            "rep_max_runs": 1,
            "rep_budget_s": 30.0,
            "rep_warmup": 0,
            **_COMMON,
            "hackbench_loops": 50,
        },
        "default": {
            "hackbench_runs": 2,
            "caller_rounds": 1,
            "rep_target": 0.03,
            "rep_min_runs": 2,
            "rep_max_runs": 2,
            "rep_budget_s": 30.0,
            "rep_warmup": 0,
            **_COMMON,
            "hackbench_loops": 50,
        },
        "full": {
            "hackbench_runs": 5,
            "caller_rounds": 3,
            "rep_target": 0.02,
            "rep_min_runs": 10,
            "rep_max_runs": 40,
            "rep_budget_s": 900.0,
            "rep_warmup": 1,
            **_COMMON,
        },
    }
    params = {
        "tracers": Param(
            list, choices=DEFAULT_TRACERS, nullable=True, help="a subset of the tracers"
        ),
        "workloads": Param(
            list, choices=tuple(WORKLOADS), nullable=True, help="a subset of the workloads"
        ),
        "hackbench_groups": Param(int, min=1, max=100, help="hackbench -g: groups of 20+20 tasks"),
        "hackbench_loops": Param(int, min=1, help="hackbench -l: messages per sender"),
        "hackbench_runs": Param(int, min=2, help="hackbench runs per armed tracer and round"),
        "caller_rounds": Param(
            int, min=1, help="rounds that run every workload (later ones: hackbench)"
        ),
        "dd_mib": Param(int, min=1, max=1024, help="MiB that dd writes and fsyncs"),
        "stack_depth": Param(
            int, min=2, max=32, help="frames kept per stack, from __schedule outwards"
        ),
        "buffer_kb": Param(int, min=64, help="per-CPU ring buffer of the private ftrace instance"),
        **repetition_params("rep_"),
        "rounds": Param(
            int, min=1, nullable=True, help="a fixed number of rounds (sets both run bounds)"
        ),
        "seed": Param(int, help="seed of the shuffled tracer order"),
    }
    tables = {
        "stacks": Table(round="int", tracer="str", workload="str", stack="str", count="int"),
        "runs": Table(round="int", position="int", tracer="str", run="int", seconds="float"),
        "sessions": Table(
            round="int",
            tracer="str",
            workload="str",
            events="int",
            distinct="int",
            lost="int",
            wall_s="float",
        ),
        "repetition": REPETITION,
    }
    reference = ("sched_callers", "sched_callers_names")
    needs_tools = {"hackbench": "rt-tests", "dd": "coreutils"}
    needs_text = (
        "tracefs; bpftrace and perf where installed (each tracer this kernel lacks is skipped)"
    )

    def check(self, p: dict) -> None:
        # lazy: scipy.stats, 0.67 s on top of the declaration's 0.35 s (-X importtime)
        from perfbook.analysis.repetition import repetition_settings

        if p["rounds"] is not None:
            p["rep_min_runs"] = p["rep_max_runs"] = p["rounds"]
        repetition_settings(p, "rep_")
        p["tracers"] = list(p["tracers"] or DEFAULT_TRACERS)
        p["workloads"] = list(dict.fromkeys([*(p["workloads"] or WORKLOADS), "hackbench"]))

    def preflight(self) -> list[str]:
        return tracefs_preflight(need_uprobes=False) + super().preflight()

    def load(self, data_dir=None):
        """Every dataset of this chapter (analysis.CallersData: a 'dataset' column in every table)."""
        return self.part("analysis").CallersData(self, data_dir)


chapter = SchedCallers()
