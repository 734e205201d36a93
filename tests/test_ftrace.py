"""perfbook.probes.ftrace: one test per line layout the kernel prints.

tests/fixtures/ftrace/*.txt are real `trace` / `trace_pipe` texts of kernel 6.18 (sched
events in a private instance, options and trace_clock set in that instance only); the
hand-built lines below copy the kernel's printf formats (kernel/trace/trace_output.c) for
what this host can't show."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from perfbook.probes import ftrace as F

FIX = Path(__file__).parent / "fixtures" / "ftrace"


def _load(name):
    text = (FIX / f"{name}.txt").read_text()
    n = sum(1 for ln in text.splitlines() if ln.strip() and not ln.startswith("#"))
    df = F.parse_lines(text)
    return text, n, df


@pytest.mark.parametrize(
    "name,tgid,irq",
    [
        ("local_irq", False, True),
        ("local_noirq", False, False),
        ("local_tgid_irq", True, True),
        ("local_tgid_noirq", True, False),
        ("mono_irq", False, True),
        ("global_tgid_irq", True, True),
        ("boot_noirq", False, False),
    ],
)
def test_ns_clocks_every_option_combination(name, tgid, irq):
    text, n, df = _load(name)
    assert len(df) == n and df.attrs["unparsed"] == 0 and df.attrs["lost"] == 0
    assert list(df.columns) == F.COLUMNS and df["ts"].dtype == "float64"
    assert df["tgid"].notna().any() == tgid and df["flags"].notna().all() == irq
    assert df["flags"].isna().all() == (not irq)
    assert df["event"].isin(["sched_switch", "sched_wakeup"]).all()
    # sec.usec kept to the microsecond, not truncated to whole seconds
    first = next(ln for ln in text.splitlines() if not ln.startswith("#"))
    assert df["ts"].iloc[0] == float(first.split(": ")[0].split()[-1]) and df["ts"].iloc[0] % 1


def test_comms_with_spaces_and_dashes_and_unknown_tgid():
    _, _, df = _load("local_tgid_irq")
    r = df[df.task == "fmt probe-7 x"].iloc[0]
    assert r.pid == r.tgid == 7084 and r.cpu == 0 and r["flags"] == "dN.4."
    m = df[df.task == "memfd:sealed-91"].iloc[0]
    assert m.pid == 4110 and m.event == "sched_switch"
    _, _, g = _load("global_tgid_irq")
    idle = g[g.task == "<idle>"]
    assert len(idle) and idle.pid.eq(0).all() and idle.tgid.isna().any()  # "(-------)"


@pytest.mark.parametrize(
    "name,tgid",
    [
        ("counter_irq", False),
        ("counter_tgid_noirq", True),
        ("x86tsc_irq", False),
        ("uptime_irq", False),
    ],
)
def test_counter_clocks_keep_the_raw_integer(name, tgid):
    text, n, df = _load(name)
    assert len(df) == n and df["ts"].dtype == "int64"
    assert df["tgid"].notna().any() == tgid
    first = next(ln for ln in text.splitlines() if not ln.startswith("#"))
    assert df["ts"].iloc[0] == int(first.split(": ")[0].split()[-1])


def test_x86_tsc_hand_built_past_int64_stays_exact():
    big = 2**64 - 5
    lines = [
        f"       CPU 0/KVM-4242    [001] d..1. {big:12d}: kvm_write_tsc_offset: vcpu=0 prev=0 next=5",
        f"          kvmtsc-42      [000] ..... {2**40 + 1:12d}: kvm_exit: reason EPT_VIOLATION",
    ]
    df = F.parse_lines(lines)
    assert df["ts"].dtype == object and df["ts"].tolist() == [big, 2**40 + 1]
    assert df.task.tolist() == ["CPU 0/KVM", "kvmtsc"]


def test_latency_format():
    text, n, df = _load("latency_format")
    assert len(df) == n and df.attrs["relative"]
    r = df[df.event == "tracing_mark_write"].iloc[0]
    assert (r.task, r.pid, r.cpu, r["flags"], r.body) == (
        "fmt prob",
        7584,
        0,
        "...1.",
        "pf_window_start",
    )
    assert r.ts == pytest.approx(0.202082)
    c = F.parse_lines(["  <idle>-0         1d..2.  123: sched_switch: prev_pid=0"])  # counter clock
    assert c["ts"].tolist() == [123] and c.cpu.tolist() == [1]


def test_lost_events_are_counted_and_reported():
    _, n, df = _load("lost_pipe")
    assert len(df) == n - 2 and df.attrs["lost"] == 4309 + 5451 and df.attrs["lost_lines"] == 2
    assert df.attrs["lost_by_cpu"] == {0: 4309, 1: 5451}
    assert "lost 9760 events" in F.lost_note(df.attrs)
    u = F.parse_lines(["CPU:3 [LOST EVENTS]"])  # count unknown
    assert u.attrs["lost_lines"] == 1 and F.lost_note(u.attrs)
    assert F.lost_note(F.parse_lines("").attrs) is None


def test_hand_built_layouts():
    lines = [
        "# tracer: function",
        "##### CPU 1 buffer started ####",
        " kworker/u4:2-events_unbound-123     [001] .N.1.    12.000001: workqueue_execute_start: work struct 0x1",
        "           <...>-123456789 ( 123456) [1023] d...  4000.500000: sched_process_exit: comm=x pid=1",
        "            bash-1234    [000] ...1.   100.000002: do_sys_openat2 <-__x64_sys_openat",
        "     CPU 0/TCG-24283   [000] .....    5.000000: sys_write(fd: 0xd, buf: 0x1, count: 8)",
        "     CPU 0/TCG-24283   [000] .....    5.000004: sys_write -> 0x8",
        "          seqread-80      [000] d..1.   7.000000: vp_notify: (vp_notify+0x0/0x40)",
        "          seqread-80      [000] .....   7.000001: empty_event: ",
        "  => __schedule",  # a stack-trace continuation
    ]
    df = F.parse_lines(lines)
    assert df.attrs["unparsed"] == 1 and len(df) == 7
    assert df.task.tolist()[:2] == ["kworker/u4:2-events_unbound", "<...>"]
    assert df.pid.tolist()[:2] == [123, 123456789] and df.tgid.tolist()[1] == 123456
    assert df.cpu.tolist()[1] == 1023 and df["flags"].tolist()[1] == "d..."  # old 4-char flags
    assert df.event.iloc[2:5].isna().all()
    assert df.body.tolist()[2:5] == [
        "do_sys_openat2 <-__x64_sys_openat",
        "sys_write(fd: 0xd, buf: 0x1, count: 8)",
        "sys_write -> 0x8",
    ]
    assert df.event.tolist()[5:] == ["vp_notify", "empty_event"] and df.body.iloc[6] == ""


def test_parse_kv():
    assert F.parse_kv(
        "prev_comm=fmt probe-7 x prev_pid=7584 prev_prio=120 prev_state=S ==> "
        "next_comm=sh next_pid=6404 next_prio=120"
    ) == {
        "prev_comm": "fmt probe-7 x",
        "prev_pid": "7584",
        "prev_prio": "120",
        "prev_state": "S",
        "next_comm": "sh",
        "next_pid": "6404",
        "next_prio": "120",
    }
    assert F.parse_kv("pf_window_start") == {"_text": "pf_window_start"}
    assert F.parse_kv("(vp_notify+0x0/0x40) arg1=0x5") == {
        "_text": "(vp_notify+0x0/0x40)",
        "arg1": "0x5",
    }
    assert F.parse_kv("") == {}


def test_empty_and_file_input(tmp_path):
    df = F.parse_lines("# tracer: nop\n")
    assert df.empty and list(df.columns) == F.COLUMNS
    p = tmp_path / "t"
    p.write_text((FIX / "local_noirq.txt").read_text())
    with open(p) as f:
        assert len(F.parse_lines(f)) == len(_load("local_noirq")[2])
    assert isinstance(F.parse_lines(["  a-1 [000] 1.000000: e: x"])["tgid"].dtype, pd.Int64Dtype)


def test_trace_session_set_trace_options(tmp_path):
    """TraceSession.set_trace_options writes options/<name> of the private instance only
    (a stand-in directory here: no tracefs needed)."""
    from perfbook.hoststate import tracefs

    s = tracefs.TraceSession("unit")
    with pytest.raises(tracefs.TraceError, match="private instance"):
        s.set_trace_options(record_tgid=False)
    s.root, s.instance = tmp_path, tmp_path / "instances" / "x"
    (s.instance / "options").mkdir(parents=True)
    for name in ("record-tgid", "irq-info", "trace_printk_dest"):
        (s.instance / "options" / name).write_text("1\n")
    s.set_trace_options(record_tgid=False, irq_info=True, trace_printk_dest=0)
    got = {p.name: p.read_text() for p in (s.instance / "options").iterdir()}
    assert got == {"record-tgid": "0", "irq-info": "1", "trace_printk_dest": "0"}
    with pytest.raises(tracefs.TraceError, match="no trace option"):
        s.set_trace_options(no_such_option=True)


def test_stack_traces_from_a_trigger_and_the_function_tracer():
    text = """# tracer: nop
          python-9832    [000] d..2.  1849.458884: <stack trace>
 => trace_event_raw_event_sched_switch
 => __schedule
 => schedule
 => schedule_timeout
 memfd:sealed-91-1411    [001] d..2.  1849.458955: <stack trace>
 => __schedule+0x5f8/0x1200
 => schedule_idle
 => do_idle
          <idle>-0       [001] d..2.  1849.458960: schedule <-schedule_timeout
          sleep-9835    [000] ....  1849.460433: <user stack trace>
 =>  <00007f0000001234>
CPU:1 [LOST 3 EVENTS]
           sleep-9835    [000] d..2.  1849.461398: <stack trace>
"""
    st = F.new_stats()
    got = list(F.stack_traces(text, st))
    assert [(r.task, r.pid, r.cpu) for r, _ in got] == [
        ("python", 9832, 0),
        ("memfd:sealed-91", 1411, 1),
        ("sleep", 9835, 0),
    ]
    assert got[0][1] == [
        "trace_event_raw_event_sched_switch",
        "__schedule",
        "schedule",
        "schedule_timeout",
    ]
    assert got[1][1] == ["__schedule+0x5f8/0x1200", "schedule_idle", "do_idle"]
    assert got[2][1] == []  # a stack cut off at the end of the buffer
    assert st["lost"] == 3 and st["unparsed"] == 0


def test_stack_trace_frames_are_kept_whole_as_printed():
    """A frame is everything trace_stack_print() (kernel/trace/trace_output.c) prints after
    " => ": the function tracer's trampoline as "[FTRACE TRAMPOLINE]" (6.13 on,
    FTRACE_TRAMPOLINE_MARKER), and with options/sym-offset sprint_symbol()'s
    "sym+0x4e/0xa0 [mod]" for module text; the names are left to the caller to normalise."""
    text = """# tracer: function
           sleep-4242    [001] ...1.  1849.458890: <stack trace>
 => [FTRACE TRAMPOLINE]
 => nvme_poll_cq+0x4e/0xa0 [nvme]
 => 0xffffffffc0a01234
 => do_nanosleep+0x5e/0x150
"""
    st = F.new_stats()
    ((rec, frames),) = F.stack_traces(text, st)
    assert frames == [
        "[FTRACE TRAMPOLINE]",
        "nvme_poll_cq+0x4e/0xa0 [nvme]",
        "0xffffffffc0a01234",
        "do_nanosleep+0x5e/0x150",
    ]
    assert (rec.task, rec.pid, st["unparsed"]) == ("sleep", 4242, 0)


def _by_records(text):
    r"""fields(text, r"\w+", "(.*)") the slow way: records() of the sec.usec clocks, per line
    (a relative, latency-format text has none)."""
    st = F.new_stats()
    out = [
        (r.ts, r.event, r.body)
        for r in F.records(text, st)
        if r.event is not None and isinstance(r.ts, float)
    ]
    return ([] if st["relative"] else out), st


@pytest.mark.parametrize("name", sorted(p.stem for p in FIX.glob("*.txt")))
def test_fields_finds_what_records_finds_in_every_layout(name):
    """The one-pass parser and the per-line one on identical input: every real layout (the
    counter clocks and the relative times of the latency format give no sec.usec records:
    nothing), plus lost events counted the same way."""
    text = (FIX / f"{name}.txt").read_text()
    want, want_st = _by_records(text)
    st = F.new_stats()
    got = [(float(ts), ev, body) for ts, ev, body in F.fields(text, r"\w+", "(.*)", st)]
    assert got == want
    assert {k: st[k] for k in ("lost", "lost_lines", "lost_by_cpu")} == {
        k: want_st[k] for k in ("lost", "lost_lines", "lost_by_cpu")
    }


def test_fields_keeps_the_printed_timestamp_and_the_body_groups():
    text = (
        "\n".join(
            [
                "# tracer: nop",
                "  kworker/u4:2-events_unbound-123     [001] .N.1.    12.000001: block_rq_issue: 254,0 WS 4096 () 8 + 8 [kworker]",
                "           <...>-123456789 ( 123456) [1023] d...  4000.500000: block_io_done: 254,0 R 0 () 16 + 8 [0]",
                "            bash-1234    [000] ...1.   100.000002: do_sys_openat2 <-__x64_sys_openat",
                "CPU:1 [LOST 7 EVENTS]",
                "             fio-9   [000] .....   5.000000: sched_switch: prev_comm=fio",
                "             fio-9   [000] .....      512: block_rq_issue: 254,0 WS 4096 () 8 + 8 [fio]",  # counter clock
            ]
        )
        + "\n"
    )
    st = F.new_stats()
    got = F.fields(text, r"block_\w+", r"\d+,\d+ (\S+) (?:\d+ )?\([^)\n]*\) (\d+) \+ (\d+)", st)
    assert got == [
        ("12.000001", "block_rq_issue", "WS", "8", "8"),
        ("4000.500000", "block_io_done", "R", "16", "8"),
    ]
    assert st["lost"] == 7 and st["lost_lines"] == 1 and st["lost_by_cpu"] == {1: 7}
