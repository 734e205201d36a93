"""Key findings of the iostat -x chapter, each decided on the prose's values of one dataset
(prose.run_values: without the uptime-clock gap, which no finding reads)."""

from __future__ import annotations

from perfbook.analysis.findings import Finding, Outcome, from_glue, num

from .prose import run_values


def util(g):
    r = num(g["qd16_over_qd1"])
    return Outcome(
        r > 2,
        f"4 KiB random reads: {g['randread_4k_qd1_iops']} IOPS at {g['randread_4k_qd1_util']} % "
        f"util (depth 1), {g['randread_4k_qd16_iops']} at {g['randread_4k_qd16_util']} % (depth 16): "
        f"{r:g}×",
    )


def equal(g):
    a = num(g["agree_pct"])
    return Outcome(
        a >= 99, f"{g['agree_pct']} % of {g['n_compared']} values agree with sysstat's iostat"
    )


def aqu(g):
    q = num(g["randread_4k_qd16_aqu"])
    return Outcome(q < 8, f"aqu-sz {q:g} at fio iodepth 16 (4 KiB random reads)")


def fsync(g):
    w, fl = num(g["fsync_w_per"]), num(g["fsync_f_per"])
    empty, flushes = num(g["fsync_empty"]), num(g["fsync_flush_rq"])
    ok = abs(w - 2) <= 0.25 and abs(fl - 1) <= 0.125 and flushes <= 1.02 * empty
    return Outcome(
        ok,
        f"{g['fsync_w_per']} writes and {g['fsync_f_per']} flushes per fsync; "
        f"{g['fsync_flush_rq']} flush requests for {g['fsync_empty']} empty preflush writes "
        f"in {g['fsync_nwin']} trace windows",
    )


def trace(g):
    r = num(g["trace_max_rel_pct"])
    return Outcome(
        r < 5, f"tracepoint mean vs await: at most {g['trace_max_abs_us']} µs, {r:g} % apart"
    )


FINDINGS = (
    Finding(
        "util",
        "%util near 100 % is not saturation: deeper queues still raise IOPS more than twofold",
        from_glue(run_values, util),
        contrary="%util near 100 % meant saturation: a deeper queue did not double IOPS",
    ),
    Finding(
        "equal",
        "Our columns from /proc/diskstats agree with sysstat's iostat in at least 99 % of values",
        from_glue(run_values, equal),
    ),
    Finding("aqu", "aqu-sz stays below half of fio's iodepth of 16", from_glue(run_values, aqu)),
    Finding(
        "fsync",
        "Each fsync cost one data write and one empty preflush write, and every flush request "
        "came from such an empty preflush, none from a journal commit",
        from_glue(run_values, fsync),
        contrary="An fsync was not just a data write and an empty preflush: journal commits or other "
        "flushes added requests",
    ),
    Finding(
        "trace",
        "The block tracepoints' mean latency matches await within 5 %",
        from_glue(run_values, trace),
    ),
)
