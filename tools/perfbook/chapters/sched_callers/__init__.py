"""Chapter 'sched_callers': who calls schedule()? Callers found with today's tracers, and
what each tracer costs the workload it watches.

  collect.py       measure(ctx): arms every tracer on one window per workload (the callers),
                   then each alone around hackbench (the probe effect); the workloads in a
                   cgroup that every tracer is scoped to
  parse.py         the tracers, the workloads, the scheduler's entry points; each tracer's
                   output -> stack counts
  analysis.py      callers per tracer, which sessions share a window, rank agreement over
                   those only, the probe effect and its cost per event (CallersData)
  figures.py       the callers per tracer and the probe effect
  tables.py        the tables, the runs table's columns
  prose.py         every value the prose quotes
  key_findings.py  the key findings
"""

from __future__ import annotations

from perfbook.framework.contract import REPETITION, Chapter, Param, Table, repetition_params
from perfbook.hoststate.tracefs import preflight as tracefs_preflight

from .parse import DEFAULT_TRACERS, WINDOW_COLUMNS, WORKLOADS

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
    # The first caller_rounds rounds open with one caller session per workload (every tracer
    # armed on the same window, the workload run once); every round then times hackbench under
    # each tracer alone and untraced (shuffled), one session each: the probe effect. Rounds
    # repeat adaptively until each key's median hackbench time has a 95 % CI narrower than
    # rep_target, or the budget ends. every_tracer_slows is a union over the k tracers used
    # (3 here): each ratio needs 1 - 0.05/k = 98.3 %, which Moses' interval first reaches at
    # 5 against 5 rounds (99.2 %; 4 against 4 gives 97.1 %), so the default runs a fixed
    # 5 rounds (test_the_default_runs_enough_rounds_for_every_tracer_slows). With the tracers
    # scoped to the workload's cgroup, perf started disabled and switched on through its
    # control FIFO (no 0.5 s wait) and bpftrace attached in ~0.2 s, a probe session of one
    # hackbench -l 50 run takes about 1 s (one run a session: each round's value is that run;
    # two runs a session cost 7 s more for a median that the rounds' spread swamps here).
    # Measured here (2 CPUs shared with other runs, 3 tracers): a default collect of 29 s
    # (3 caller sessions ~6 s, 20 probe sessions ~22 s), 23 s in a whole default measure alone
    # (plan_s 26); the quick profile's one round of two runs a session about 16 s.
    plan_s = {
        "quick": 16,
        "default": 26,
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
            "hackbench_runs": 1,
            "caller_rounds": 1,
            "rep_target": 0.03,
            "rep_min_runs": 5,
            "rep_max_runs": 5,
            "rep_budget_s": 60.0,
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
        "hackbench_runs": Param(int, min=1, help="hackbench runs per armed tracer and round"),
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
        "stacks": Table(
            optional=("session",),
            round="int",
            tracer="str",
            workload="str",
            stack="str",
            count="int",
            session="int",
        ),
        "runs": Table(round="int", position="int", tracer="str", run="int", seconds="float"),
        # one row per tracer and session; a caller session's tracers share its number. The
        # window columns (CLOCK_MONOTONIC seconds) and the filter are new in #40: older
        # datasets, whose tracers each counted a window of their own, have none
        "sessions": Table(
            optional=WINDOW_COLUMNS,
            round="int",
            tracer="str",
            workload="str",
            events="int",
            distinct="int",
            lost="int",
            wall_s="float",
            session="int",
            filter="str",
            armed_start="float",
            armed_end="float",
            window_start="float",
            window_end="float",
            workload_start="float",
            workload_end="float",
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
