"""sched_callers: parsers on hand-built output of each tracer, the caller analysis, parameters
and the seed's reference table."""
from __future__ import annotations

import pandas as pd
import pytest

from tools.chapters.sched_callers import analysis as A, chapter, parse as P
from tools.dataset import load_reference
from tools.errors import ParameterError

TRIGGER = """# tracer: nop
          python-9832    [000] d..2.  1849.458884: <stack trace>
 => trace_event_raw_event_sched_switch
 => __traceiter_sched_switch
 => __schedule
 => schedule
 => schedule_timeout
 => unix_stream_read_generic
          python-9833    [001] d..2.  1849.458890: <stack trace>
 => trace_event_raw_event_sched_switch
 => __schedule+0x5f8/0x1200
 => schedule_idle
 => cpu_startup_entry
"""
BPFTRACE = """Attaching 1 probe...


@[
    __schedule+1560
    schedule+35
    schedule_timeout+193
]: 7
@[
    __schedule+1560
    __cond_resched+53
    generic_perform_write+80
]: 2
"""
PERF = """perf 10703 sched:sched_switch: 
\tffffffff821f8298 __schedule
\tffffffff821f8c03 schedule
\tffffffff821ffdd1 schedule_timeout
\t           ee137 sched_setaffinity@@GLIBC_2.3.4

migration/0    18 sched:sched_switch: 
\tffffffff821f8298 __schedule
\tffffffff821f8c03 schedule
\tffffffff8139769c smpboot_thread_fn
"""
HIST = """# event histogram
#
# trigger info: hist:keys=common_stacktrace:vals=hitcount:sort=hitcount:size=8192 [active]
#

{ common_stacktrace:
         __schedule+0x5f8/0x1200
         schedule+0x23/0x80
         schedule_timeout+0xc1/0x100
} hitcount:         12

Totals:
    Hits: 12
"""


def test_each_tracer_parses_to_the_same_stacks():
    assert P.ftrace_stacks(TRIGGER, 3) == {("__schedule", "schedule", "schedule_timeout"): 1,
                                           ("__schedule", "schedule_idle", "cpu_startup_entry"): 1}
    assert P.bpftrace_stacks(BPFTRACE, 3) == {("__schedule", "schedule", "schedule_timeout"): 7,
                                              ("__schedule", "__cond_resched", "generic_perform_write"): 2}
    assert P.perf_stacks(PERF, 3) == {("__schedule", "schedule", "schedule_timeout"): 1,
                                      ("__schedule", "schedule", "smpboot_thread_fn"): 1}
    assert P.hist_stacks(HIST, 3) == {("__schedule", "schedule", "schedule_timeout"): 12}


def test_function_tracer_stacks_start_at_schedule():
    text = "  sleep-1 [000] ...1.  5.000001: <stack trace>\n => do_nanosleep\n => hrtimer_nanosleep\n"
    assert P.function_stacks(text, 3) == {("schedule", "do_nanosleep", "hrtimer_nanosleep"): 1}


def test_hackbench_time():
    assert P.hackbench_seconds("Running in process mode\nTime: 0.794\n") == 0.794
    with pytest.raises(ValueError):
        P.hackbench_seconds("nothing")


def test_classify_entries_and_callers():
    assert A.classify("__schedule;schedule;schedule_timeout;x") == ("schedule", "schedule_timeout")
    assert A.classify("__schedule;schedule_idle;cpu_startup_entry") == ("schedule_idle", "cpu_startup_entry")
    assert A.classify("schedule;do_nanosleep") == ("schedule", "do_nanosleep")
    assert A.label("schedule", "do_wait") == "do_wait"
    assert A.label("__cond_resched", "f") == "f → __cond_resched"


def test_callers_are_shares_per_tracer_and_workload():
    st = pd.DataFrame({"dataset": "h/r", "tracer": ["perf", "perf", "bpftrace"], "workload": "hackbench",
                       "stack": ["__schedule;schedule;a", "__schedule;schedule;b", "__schedule;schedule;a"],
                       "count": [3, 1, 10]})
    c = A.callers(st).set_index(["tracer", "caller"])
    assert c.loc[("perf", "a"), "share"] == 0.75 and c.loc[("bpftrace", "a"), "share"] == 1.0


def test_parameters_always_run_hackbench_and_check_bounds():
    p = chapter.parameters("quick", workloads="sleep")
    assert p["workloads"] == ["sleep", "hackbench"] and "ftrace_trigger" in p["tracers"]
    with pytest.raises(ParameterError):
        chapter.parameters("quick", tracers="strace")
    with pytest.raises(ParameterError):
        chapter.parameters("quick", hackbench_runs=1)


def test_the_seed_table_holds_the_published_counts():
    ref = load_reference("sched_callers")
    got = {(r.workload, r.caller): r.count for r in ref.itertuples(index=False) if r.rank <= 3}
    assert got == {("sleep", "cpu_idle"): 332, ("sleep", "worker_thread"): 166,
                   ("sleep", "schedule_hrtimeout_range_clock"): 116, ("hackbench", "schedule_timeout"): 1590,
                   ("hackbench", "work_resched"): 735, ("hackbench", "cpu_idle"): 349}
    assert len(ref) == 19 and ref.seed_file.eq("004_b02ec4e7a2b12836.txt").all()
    names = load_reference("sched_callers_names")
    assert set(ref.caller) <= set(names.name_3x)
