"""iostat_internals: the workload phases, tolerances and trace settings (shared by collect
and analysis)."""
from __future__ import annotations

# name -> (how, description). fio phases give fio arguments; "own" phases are ours.
PHASES: dict[str, dict] = {
    "seqread_1m_qd1":   {"fio": ["--rw=read", "--bs=1M", "--direct=1", "--ioengine=psync"],
                         "what": "sequential 1 MiB O_DIRECT reads, one at a time"},
    "randread_4k_qd1":  {"fio": ["--rw=randread", "--bs=4k", "--direct=1", "--ioengine=psync"],
                         "what": "random 4 KiB O_DIRECT reads, queue depth 1"},
    "randread_4k_qd16": {"fio": ["--rw=randread", "--bs=4k", "--direct=1", "--ioengine=libaio",
                                 "--iodepth=16"],
                         "what": "random 4 KiB O_DIRECT reads, queue depth 16 (libaio)"},
    "randwrite_4k_qd1": {"fio": ["--rw=randwrite", "--bs=4k", "--direct=1", "--ioengine=psync"],
                         "what": "random 4 KiB O_DIRECT writes, queue depth 1"},
    "randwrite_4k_qd16": {"fio": ["--rw=randwrite", "--bs=4k", "--direct=1", "--ioengine=libaio",
                                  "--iodepth=16"],
                          "what": "random 4 KiB O_DIRECT writes, queue depth 16 (libaio)"},
    "seqwrite_4k_qd16": {"fio": ["--rw=write", "--bs=4k", "--direct=1", "--ioengine=libaio",
                                 "--iodepth=16", "--iodepth_batch_submit=16",
                                 "--iodepth_batch_complete_min=16"],
                         "what": "sequential 4 KiB O_DIRECT writes submitted 16 at a time (merges)"},
    "randrw_4k_qd8":    {"fio": ["--rw=randrw", "--rwmixread=70", "--bs=4k", "--direct=1",
                                 "--ioengine=libaio", "--iodepth=8"],
                         "what": "random 70/30 read/write mix, 4 KiB O_DIRECT, queue depth 8"},
    "fsync_4k":         {"fio": ["--rw=randwrite", "--bs=4k", "--direct=0", "--ioengine=psync",
                                 "--fsync=1"],
                         "what": "buffered random 4 KiB writes, fsync after each"},
    "buffered_seqread": {"own": "buffered_read",
                         "what": "buffered sequential 128 KiB reads, page cache dropped every pass (readahead)"},
    "discard":          {"own": "discard",
                         "what": "punch 1 MiB holes in a preallocated file + fsync (ext4 'discard' mount option)"},
}


QUICK_PHASES = ["randread_4k_qd1", "randwrite_4k_qd16", "fsync_4k"]


# Stated tolerance for "our column agrees with sysstat's" (see the chapter):
# |ours - sysstat| <= TOL_ABS + TOL_REL * max(|ours|, |sysstat|).
TOL_ABS = 0.011   # sysstat prints 2 decimals (0.005) plus one more rounding step


TOL_REL = 0.02    # 1 % from /proc/uptime's 10 ms steps + 1 % for sampling-instant offset


IOSTAT_INTERVAL_S = 1.0  # the interval we give iostat


# An interval of ours is paired with a sysstat report only if our two snapshots are this close
# to one iostat interval apart (and both reports were read at once: backlog 0). sysstat's
# reports come IOSTAT_INTERVAL_S apart (alarm(2)); our snapshots follow them within a
# millisecond: over the 322 intervals of the first three committed datasets they were never
# more than 8.2 ms off (median 0.05 ms). 20 ms of offset is 2 % of the interval, the share of
# TOL_REL; a follower that was stopped or starved is off by far more (a stop of 20 s read 20
# reports within 7 ms).
SPAN_TOL_S = 0.02


TOL_UTIL_JIFFY = 1.0  # %util: plus one jiffy per 1 s interval at HZ=100, the coarsest usual tick


SAMPLER_RT_PRIO = 10


TRACE_PREROLL_S = 0.2      # tracing starts this long before the window's first snapshot


TRACE_POSTROLL_S = 0.02


TRACE_EVENTS = ("block/block_io_start", "block/block_io_done",
                "block/block_rq_issue", "block/block_rq_complete")


PHASE_TAIL_S = 0.25   # the steady part of a phase ends this long before its nominal end


TABLES = ("intervals", "windows", "trace_windows", "trace_sample", "phases")


# Each table's natural key: the analysis must not depend on the order rows were written in.
# trace_sample rows are a random sample per window and op; their order within one carries nothing.
ORDER_KEYS = {"intervals": ["seq"], "windows": ["window", "t_ns"],
              "trace_windows": ["window", "_op"], "trace_sample": ["window", "_op"],
              "phases": ["t_start_ns"], "repetition": ["experiment", "_key"]}


OPS = ("all", "read", "write", "discard", "flush")
