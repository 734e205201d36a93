"""sched_callers: parsers on hand-built output of each tracer, the caller analysis, parameters
and the seed's reference table."""

from __future__ import annotations

import pandas as pd
import pytest

from perfbook.chapters.sched_callers import analysis as A
from perfbook.chapters.sched_callers import chapter
from perfbook.chapters.sched_callers import parse as P
from perfbook.chapters.sched_callers import prose as PR
from perfbook.core.errors import ParameterError
from perfbook.data.dataset import load_reference

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
    assert P.ftrace_stacks(TRIGGER, 3) == {
        ("__schedule", "schedule", "schedule_timeout"): 1,
        ("__schedule", "schedule_idle", "cpu_startup_entry"): 1,
    }
    assert P.bpftrace_stacks(BPFTRACE, 3) == {
        ("__schedule", "schedule", "schedule_timeout"): 7,
        ("__schedule", "__cond_resched", "generic_perform_write"): 2,
    }
    assert P.perf_stacks(PERF, 3) == {
        ("__schedule", "schedule", "schedule_timeout"): 1,
        ("__schedule", "schedule", "smpboot_thread_fn"): 1,
    }
    assert P.hist_stacks(HIST, 3) == {("__schedule", "schedule", "schedule_timeout"): 12}


def test_function_tracer_stacks_start_at_schedule():
    text = (
        "  sleep-1 [000] ...1.  5.000001: <stack trace>\n => do_nanosleep\n => hrtimer_nanosleep\n"
    )
    assert P.function_stacks(text, 3) == {("schedule", "do_nanosleep", "hrtimer_nanosleep"): 1}


def test_hackbench_time():
    assert P.hackbench_seconds("Running in process mode\nTime: 0.794\n") == 0.794
    with pytest.raises(ValueError):
        P.hackbench_seconds("nothing")


def test_classify_entries_and_callers():
    assert A.classify("__schedule;schedule;schedule_timeout;x") == ("schedule", "schedule_timeout")
    assert A.classify("__schedule;schedule_idle;cpu_startup_entry") == (
        "schedule_idle",
        "cpu_startup_entry",
    )
    assert A.classify("schedule;do_nanosleep") == ("schedule", "do_nanosleep")
    assert A.label("schedule", "do_wait") == "do_wait"
    assert A.label("__cond_resched", "f") == "f → __cond_resched"


def test_callers_are_shares_per_tracer_and_workload():
    st = pd.DataFrame(
        {
            "dataset": "h/r",
            "tracer": ["perf", "perf", "bpftrace"],
            "workload": "hackbench",
            "stack": ["__schedule;schedule;a", "__schedule;schedule;b", "__schedule;schedule;a"],
            "count": [3, 1, 10],
        }
    )
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
    assert got == {
        ("sleep", "cpu_idle"): 332,
        ("sleep", "worker_thread"): 166,
        ("sleep", "schedule_hrtimeout_range_clock"): 116,
        ("hackbench", "schedule_timeout"): 1590,
        ("hackbench", "work_resched"): 735,
        ("hackbench", "cpu_idle"): 349,
    }
    assert len(ref) == 19 and ref.seed_file.eq("004_b02ec4e7a2b12836.txt").all()
    names = load_reference("sched_callers_names")
    assert set(ref.caller) <= set(names.name_3x)


# ---- the layouts each tool prints, normalised to the same terms (issue #43) ------------------

# The function tracer with options/func_stack_trace, as 6.13 on (and 6.12.y) print it: the
# function's own line, then a "<stack trace>" record whose first frame is the return address into
# the instance's ftrace trampoline. kernel/trace/trace.c __ftrace_trace_stack() replaces such an
# address with FTRACE_TRAMPOLINE_MARKER, and trace_output.c trace_stack_print() prints it as
# " => [FTRACE TRAMPOLINE]" (commit 6ce5a6f0a07d, "tracing: Fix function name for trampoline");
# every other frame is " => " + seq_print_ip_sym() ("%s", the symbol alone without
# options/sym-offset). Context columns as trace_print_context() prints them (see tests/fixtures/ftrace).
FUNCTION_6_13 = """# tracer: function
#
           sleep-4242    [001] ...1.  1849.458884: schedule <-do_nanosleep
           sleep-4242    [001] ...1.  1849.458890: <stack trace>
 => [FTRACE TRAMPOLINE]
 => do_nanosleep
 => hrtimer_nanosleep
 => common_nsleep
 => __x64_sys_clock_nanosleep
           kworker/0:1-17      [000] ...1.  1849.459001: schedule <-worker_thread
           kworker/0:1-17      [000] ...1.  1849.459003: <stack trace>
 => [FTRACE TRAMPOLINE]
 => worker_thread
 => kthread
 => ret_from_fork
"""
# The same records as v6.1 to 6.12 print them: no marker, and kallsyms_lookup() has no name for a
# trampoline (kernel/kallsyms.c looks in the kernel, modules, BPF and ftrace_mod_maps only; the
# "ftrace_trampoline [__builtin__ftrace]" symbol is listed in /proc/kallsyms, not looked up), so
# trace_seq_print_sym() prints the bare address, "0x%08lx". With options/sym-offset a frame is
# sprint_symbol()'s "sym+0x5e/0x150", and " [mod]" for module text.
FUNCTION_6_1 = """# tracer: function
#
           sleep-4242    [001] ...1.  1849.458884: schedule <-do_nanosleep
           sleep-4242    [001] ...1.  1849.458890: <stack trace>
 => 0xffffffffc03e10a4
 => do_nanosleep+0x5e/0x150
 => hrtimer_nanosleep+0x9b/0x160
 => common_nsleep+0x30/0x50
 => __x64_sys_clock_nanosleep+0xce/0x140
           kworker/0:1-17      [000] ...1.  1849.459001: schedule <-worker_thread
           kworker/0:1-17      [000] ...1.  1849.459003: <stack trace>
 => 0xffffffffc03e10a4
 => worker_thread+0x1c8/0x3d0
 => kthread+0xe9/0x110
 => ret_from_fork+0x22/0x30
"""


@pytest.mark.parametrize("text", [FUNCTION_6_13, FUNCTION_6_1], ids=["6.13", "6.1"])
def test_function_tracer_drops_the_trampoline_frame(text):
    assert P.function_stacks(text, 3) == {
        ("schedule", "do_nanosleep", "hrtimer_nanosleep"): 1,
        ("schedule", "worker_thread", "kthread"): 1,
    }


# A hist trigger keyed on the stack (trace_events_hist.c hist_trigger_print_key() and
# hist_trigger_stacktrace_print(): "{ common_stacktrace:" -- "stacktrace:" before 6.5 --, one
# frame per line as "%*c" (9 blanks) + "%pS", then "} hitcount: %10llu"). %pS is sprint_symbol():
# "sym+0xoff/0xsize", " [mod]" after a module's symbol, "0x%lx" where no symbol covers the address.
# Entries in ascending order of the sort key (sort=hitcount). Two return addresses in the same
# functions are two keys; counted by function they are one stack.
HIST_MODULES = """# event histogram
#
# trigger info: hist:keys=common_stacktrace:vals=hitcount:sort=hitcount:size=8192 [active]
#

{ common_stacktrace:
         __schedule+0x5f8/0x1200
         schedule+0x23/0x80
         0xffffffffc0a01234
} hitcount:          2
{ common_stacktrace:
         __schedule+0x5f8/0x1200
         schedule+0x23/0x80
         nvme_poll_cq+0x4e/0xa0 [nvme]
         nvme_irq+0x21/0x50 [nvme]
} hitcount:          3
{ common_stacktrace:
         __schedule+0x5f8/0x1200
         schedule+0x23/0x80
         nvme_poll_cq+0x52/0xa0 [nvme]
         nvme_irq+0x21/0x50 [nvme]
} hitcount:          4

Totals:
    Hits: 9
    Entries: 3
    Dropped: 0
"""
# The same switches as bpftrace prints them (kstack, BPFtrace::resolve_ksym(): "sym+<decimal
# offset>", no module name, "0x..." for an address bcc cannot resolve) and as perf script
# -F comm,pid,event,ip,sym,dso does (evsel_fprintf.c: "\t%16lx sym (dso)"; "[unknown]" for no symbol).
BPFTRACE_MODULES = """Attaching 1 probe...


@[
    __schedule+1528
    schedule+35
    nvme_poll_cq+78
    nvme_irq+33
]: 7
@[
    __schedule+1528
    schedule+35
    0xffffffffc0a01234
]: 2
"""
PERF_MODULES = """kworker/u4:2 77 sched:sched_switch: 
\tffffffff821f8298 __schedule ([kernel.kallsyms])
\tffffffff821f8c03 schedule ([kernel.kallsyms])
\tffffffffc0a0504e nvme_poll_cq ([nvme])
\tffffffffc0a05121 nvme_irq ([nvme])

kworker/u4:2 77 sched:sched_switch: 
\tffffffff821f8298 __schedule ([kernel.kallsyms])
\tffffffff821f8c03 schedule ([kernel.kallsyms])
\tffffffffc0a01234 [unknown] ([unknown])
"""
MODULE_STACKS = {
    ("__schedule", "schedule", "nvme_poll_cq", "nvme_irq"): 7,
    ("__schedule", "schedule", "[unknown]"): 2,
}


def test_hist_frames_with_modules_and_offsets_merge_by_function():
    assert P.hist_stacks(HIST_MODULES, 4) == MODULE_STACKS


def test_every_tracer_names_module_and_unresolved_frames_alike():
    perf = P.perf_stacks(PERF_MODULES, 4)
    assert P.bpftrace_stacks(BPFTRACE_MODULES, 4) == MODULE_STACKS
    assert perf == {
        ("__schedule", "schedule", "nvme_poll_cq", "nvme_irq"): 1,
        ("__schedule", "schedule", "[unknown]"): 1,
    }


# perf script's callchain lines (tools/perf/util/evsel_fprintf.c sample__fprintf_callchain(), the
# same in perf 6.1, which Debian 12 ships): "\t%16lx" ip, " sym" (" sym+0x.." with symoff),
# " (dso)" for a frame that is not inlined, then with srcline "\n  file:line", then " (inlined)" for
# an inlined function. --inline is on by default (perf-script(1) of 6.1); where perf finds the
# kernel's debug info, each return address inside inlined code gives one entry per inlined function
# (innermost first, util/srcline.c) and then the out-of-line function, all at the same address.
# do_nanosleep inlined into hrtimer_nanosleep here: the other tracers name hrtimer_nanosleep.
PERF_INLINED = """sleep 4242 sched:sched_switch: 
\tffffffff821f8298 __schedule
\tffffffff821f8c03 schedule
\tffffffff81421cd4 do_nanosleep (inlined)
\tffffffff81421cd4 hrtimer_nanosleep
\tffffffff8142a8d0 common_nsleep
\t           cf503 clock_nanosleep@GLIBC_2.2.5

"""
PERF_INLINED_SRCLINE = """sleep 4242 sched:sched_switch: 
\tffffffff821f8298 __schedule+0x618 ([kernel.kallsyms])
  kernel/sched/core.c:6598
\tffffffff821f8c03 schedule+0x23 ([kernel.kallsyms])
  kernel/sched/core.c:6674
\tffffffff81421cd4 do_nanosleep+0x74
  kernel/time/hrtimer.c:2045 (inlined)
\tffffffff81421cd4 hrtimer_nanosleep+0x74 ([kernel.kallsyms])
  kernel/time/hrtimer.c:2092
\tffffffff8142a8d0 common_nsleep+0x30 ([kernel.kallsyms])
  kernel/time/posix-timers.c:1235
\t           cf503 clock_nanosleep@GLIBC_2.2.5+0x23 (/usr/lib/x86_64-linux-gnu/libc.so.6)
  clock_nanosleep.c:71

"""
NANOSLEEP = """@[
    __schedule+1560
    schedule+35
    hrtimer_nanosleep+116
    common_nsleep+48
]: 1
"""


@pytest.mark.parametrize("text", [PERF_INLINED, PERF_INLINED_SRCLINE], ids=["sym", "srcline"])
def test_perf_inlined_frames_are_not_callers(text):
    want = {("__schedule", "schedule", "hrtimer_nanosleep", "common_nsleep"): 1}
    assert P.perf_stacks(text, 4) == want == P.bpftrace_stacks(NANOSLEEP, 4)


def test_perf_srcline_lines_are_not_frames():
    """Real `perf script -F comm,pid,event,ip,sym,srcline` of perf 6.1 here (Linux 6.18, no
    kernel debug info: a kernel frame's srcline is "[kernel.kallsyms][<ip>]"), for a program
    sleeping in clock_nanosleep: tests/fixtures/sched_callers/perf_script_srcline.txt."""
    from pathlib import Path

    text = (
        Path(__file__).parent / "fixtures" / "sched_callers" / "perf_script_srcline.txt"
    ).read_text()
    assert P.perf_stacks(text, 5) == {
        ("__schedule", "schedule", "do_nanosleep", "hrtimer_nanosleep", "common_nsleep"): 2
    }


def _one_round_dataset(tmp_path):
    """The committed dataset cut to its first round, with the repetition table that round gives
    (perfbook.analysis.repetition over each tracer's median hackbench time, one value each: no interval)."""
    import json
    import statistics

    from perfbook.analysis.repetition import repetition
    from perfbook.chapters.sched_callers.parse import EXPERIMENT

    D = chapter.load()
    if D.quoted is None:
        pytest.skip("no committed sched_callers dataset")
    src = D.quoted.path
    dst = tmp_path / "data" / "runs" / D.quoted.host_id / chapter.name / src.name
    dst.mkdir(parents=True)
    m = json.loads((src / "manifest.json").read_text())
    tables = {t: pd.read_csv(src / f"{t}.csv.xz") for t in m["tables"]}
    for t in ("runs", "stacks", "sessions"):
        tables[t] = tables[t][tables[t]["round"] == 0]
    r = tables["runs"]
    keys = list(dict.fromkeys(r.tracer))
    rep = repetition(
        EXPERIMENT, keys, {**m["parameters"], "rep_min_runs": 1, "rep_max_runs": 1}, "rep_"
    )
    for _ in rep.rounds():
        for k in keys:
            rep.add(k, statistics.median(r[r.tracer == k].seconds))
    tables["repetition"] = pd.DataFrame(rep.records())
    for t, df in tables.items():
        df.to_csv(dst / f"{t}.csv.xz", index=False)
        m["tables"][t] = len(df)
    (dst / "manifest.json").write_text(json.dumps(m))
    return tmp_path / "data"


def test_one_round_says_its_interval_is_not_estimable_whatever_the_row_order(tmp_path, monkeypatch):
    data = _one_round_dataset(tmp_path)
    f = PR.values(chapter.load(data))
    assert f["rep_n"] == 1
    assert f["rep_width_range"] == "not estimable (one round: no interval)"
    assert not [k for k, v in f.items() if "nan" in str(v).lower()]
    monkeypatch.setenv("PERFBOOK_SHUFFLE_ROWS", "7")
    assert PR.values(chapter.load(data)) == f


def test_interval_widths_name_their_tracers_whatever_the_row_order():
    """The narrowest and widest interval, ties broken by the tracer's name, and any tracer whose
    width could not be estimated said so instead of printed as nan."""
    rep = pd.DataFrame(
        {
            "key": ["perf", "none", "bpftrace", "ftrace_trigger"],
            "n": [4, 4, 4, 1],
            "rel_ci_width": [0.3, 0.2, 0.3, float("nan")],
        }
    )
    want = "from 20 % (none) to 30 % (perf) of the median; not estimable for ftrace_trigger (one round: no interval)"
    for seed in range(4):
        assert PR.interval_widths(rep.sample(frac=1, random_state=seed)) == want


# -- the key findings: decided on sessions and rounds, with intervals ---------------------------


class _Run:
    """A stand-in for perfbook.analysis.findings.Run: one dataset's tables and manifest."""

    def __init__(self, tracers=("bpftrace", "perf"), skipped=None, **tables):
        self.tables = tables
        self.manifest = {"parameters": {"tracers": list(tracers)}, "skipped": skipped or {}}

    def __contains__(self, name):
        return name in self.tables

    def __getitem__(self, name):
        return self.tables[name]

    def reference(self, name, dtype=None):
        return load_reference(name)


def _finding(key):
    return next(f for f in chapter.key_findings if f.key == key)


def _runs(medians: dict, rounds: int = 6, spread: float = 0.01, seed: int = 0):
    """hackbench seconds: `rounds` rounds of 4 runs per tracer around its median."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        [
            {"round": r, "tracer": t, "run": i, "seconds": v * (1 + rng.normal(0, spread))}
            for r in range(rounds)
            for t, v in medians.items()
            for i in range(4)
        ]
    )


def _stacks(counts: dict, rounds: int = 3, tracers=("bpftrace", "perf")):
    """hackbench stacks: per session, `counts` {caller of schedule(): switches}."""
    return pd.DataFrame(
        [
            {"round": r, "tracer": t, "workload": "hackbench", "stack": f"__schedule;schedule;{c}"}
            | {"count": n + r}
            for r in range(rounds)
            for t in tracers
            for c, n in counts.items()
        ]
    )


def test_the_probe_effect_findings_rest_on_rounds_and_can_straddle():
    from perfbook.chapters.sched_callers.key_findings import (
        bpf_cheaper_than_perf,
        every_tracer_slows,
    )

    slows, cheaper = _finding("every_tracer_slows"), _finding("bpf_cheaper_than_perf")
    slow = _Run(runs=_runs({"none": 1.0, "bpftrace": 1.2, "perf": 1.5}))
    assert slows.outcome(every_tracer_slows(slow)).verdict == "holds"
    got = cheaper.outcome(bpf_cheaper_than_perf(slow))
    assert got.verdict == "holds" and "6 against 6 per-round medians" in got.estimate.basis
    # one tracer that costs nothing, measured precisely: not every tracer slows hackbench
    free = _Run(runs=_runs({"none": 1.0, "bpftrace": 0.9, "perf": 1.5}, spread=0.001))
    f = slows.outcome(every_tracer_slows(free))
    assert f.verdict == "does not hold" and f.estimate.value == pytest.approx(0.9, rel=0.01)
    # the least of two intervals, each at 97.5 %: the union keeps 95 %
    assert f.estimate.coverage >= 0.95 and "least of 2 tracers" in f.estimate.basis
    # four rounds: each 4 against 4 covers 97.14 %, two of them 94.28 %: too few to decide
    few = slows.outcome(
        every_tracer_slows(_Run(runs=_runs({"none": 1, "bpftrace": 1.2, "perf": 1.5}, 4)))
    )
    assert few.verdict == "undecided" and "94.28 % coverage" in few.why
    noisy = _Run(runs=_runs({"none": 1.0, "bpftrace": 1.0, "perf": 1.02}, spread=0.1))
    assert "straddles 1" in cheaper.outcome(bpf_cheaper_than_perf(noisy)).why
    # perf skipped on this host: bpftrace against perf was not measured
    assert bpf_cheaper_than_perf(_Run(skipped={"perf": "no perf"}, runs=slow["runs"])) is None


def test_the_seed_top_caller_is_decided_on_sessions():
    from perfbook.chapters.sched_callers.key_findings import seed_top_hackbench

    f = _finding("seed_top_hackbench")
    top = {"schedule_timeout": 700, "exit_to_user_mode_loop": 200, "pipe_read": 50}
    got = f.outcome(seed_top_hackbench(_Run(stacks=_stacks(top))))
    assert got.verdict == "holds" and "median of 6 sessions" in got.estimate.basis
    assert got.estimate.value == pytest.approx(702 / 202, rel=0.01)
    assert "runner-up mostly exit_to_user_mode_loop" in got.evidence
    second = {"schedule_timeout": 200, "exit_to_user_mode_loop": 700}
    assert f.outcome(seed_top_hackbench(_Run(stacks=_stacks(second)))).verdict == "does not hold"
    two = f.outcome(seed_top_hackbench(_Run(stacks=_stacks(top, rounds=1))))
    assert two.verdict == "undecided" and "median of 2 sessions" in two.why
    assert seed_top_hackbench(_Run(tracers=("bpftrace",), skipped={"bpftrace": "no"})) is None


def test_the_idle_loop_finding_counts_its_calls_of_schedule():
    from perfbook.chapters.sched_callers.key_findings import idle_not_schedule

    f = _finding("idle_not_schedule")

    def stacks(*rows):
        return pd.DataFrame(
            [
                {"dataset": "h-a/r1", "round": 0, "tracer": "perf", "workload": "sleep"}
                | {"stack": s, "count": n}
                for s, n in rows
            ]
        )

    idle = ("__schedule;schedule_idle;cpu_startup_entry", 40)
    ok = f.outcome(idle_not_schedule(_Run(stacks=stacks(idle))))
    assert ok.verdict == "holds" and ok.estimate.exact and "40 times" in ok.evidence
    old = f.outcome(
        idle_not_schedule(_Run(stacks=stacks(idle, ("__schedule;schedule;do_idle", 3))))
    )
    assert old.verdict == "does not hold" and old.estimate.value == 3
    none = f.outcome(idle_not_schedule(_Run(stacks=stacks(("__schedule;schedule;pipe_read", 9)))))
    assert none.verdict == "undecided" and "no idle-loop switch" in none.why
    assert idle_not_schedule(_Run(runs=_runs({"none": 1.0}))) is None
