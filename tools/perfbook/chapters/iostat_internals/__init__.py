"""Chapter 'iostat_internals': iostat -x recomputed from /proc/diskstats, checked against
sysstat and the block tracepoints.

  collect.py       measure(ctx): the phased workload (fio and our own phases), iostat followed
                   and diskstats snapshotted, trace windows; sysstat fed our own snapshots
  parse.py         the workload phases, tolerances, trace settings; block tracepoint lines
                   paired into requests, fio's summary
  analysis.py      our columns, the comparisons with sysstat and the tracepoints, the quoted
                   dataset's and every host's analysis (IostatData)
  figures.py       the figures
  tables.py        the tables, the runs table's columns
  prose.py         every value the prose quotes
  key_findings.py  the key findings
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from perfbook.core.errors import ParameterError
from perfbook.framework.contract import REPETITION, Chapter, Param, Table, repetition_params
from perfbook.probes.diskstats import COLUMNS

from .parse import PHASES, QUICK_PHASES

_COMMON = {
    "device": "auto",
    "trace": True,
    "trace_sample": 1000,
    "scratch_parent": "auto",
    "seed": 1,
}
_COUNTERS = (
    "rd_ios",
    "rd_merges",
    "rd_sectors",
    "rd_ticks",
    "wr_ios",
    "wr_merges",
    "wr_sectors",
    "wr_ticks",
    "in_flight",
    "io_ticks",
    "time_in_queue",
    "dc_ios",
    "dc_merges",
    "dc_sectors",
    "dc_ticks",
    "fl_ios",
    "fl_ticks",
)
_SNAPSHOT = {
    "t_ns": "int",
    "read_ns": "int",
    "uptime_cs": "int",
    "fields_present": "int",
    **{c: "int" for c in _COUNTERS},
}
_SYSSTAT = COLUMNS  # the columns sysstat's iostat -x prints, in its order
_FIO = {
    "fio_version": "str",
    **{
        f"fio_{d}_{k}": "float"
        for d in ("read", "write")
        for k in ("iops", "lat_mean_us", "clat_mean_us")
    },
}
_Q2C = {f"q2c_{k}_us": "float" for k in ("max", "sum", "mean", "p50", "p90", "p99")}


class IostatInternals(Chapter):
    name = "iostat_internals"
    title = "iostat -x internals: recomputed from /proc/diskstats, checked against sysstat and tracepoints"
    # Rounds are repeated adaptively (perfbook.analysis.repetition, settings rep_*): one round runs every
    # phase once; the value tracked per phase is the device's IOPS over the phase's steady part.
    # A round lasts as long as its phases (phase_seconds each, plus ~0.26 s of fio start-up), on
    # any machine; 3 s is the shortest phase that still holds a whole 1 s iostat interval after its
    # 1.2 s warm-up and pre-roll. The default's round of 10 phases takes ~33 s, so its 40 s budget
    # stops after one round (a second would overrun it: no interval across rounds, n = 1); with
    # ~10 s for the scratch file, iostat's start and end and the trace windows' parsing, about
    # 43 s (plan_s). `full` (10 s phases, 660 s) is the profile that repeats
    # rounds until min_runs (6, the smallest n with a real 95 % interval of the median).
    plan_s = {
        "quick": 16,
        "default": 43,
    }  # seconds a collect should take here (perfbook.book.summary)
    profiles = {
        "quick": {
            "phases": QUICK_PHASES,
            "phase_seconds": 3,
            "file_mb": 64,
            "trace_window_s": 0.3,
            "rep_target": 0.05,
            "rep_min_runs": 1,
            "rep_max_runs": 2,
            "rep_budget_s": 5.0,
            "rep_warmup": 0,
            **_COMMON,
        },
        "default": {
            "phases": list(PHASES),
            "phase_seconds": 3,
            "file_mb": 128,
            "trace_window_s": 0.5,
            "rep_target": 0.05,
            "rep_min_runs": 6,
            "rep_max_runs": 12,
            "rep_budget_s": 40.0,
            "rep_warmup": 0,
            **_COMMON,
        },
        "full": {
            "phases": list(PHASES),
            "phase_seconds": 10,
            "file_mb": 1024,
            "trace_window_s": 1.0,
            "rep_target": 0.05,
            "rep_min_runs": 6,
            "rep_max_runs": 20,
            "rep_budget_s": 660.0,
            "rep_warmup": 0,
            **_COMMON,
        },
    }
    params = {
        "phases": Param(list, choices=tuple(PHASES), help="the workload phases of every round"),
        "phase_seconds": Param(int, min=2, max=600, help="seconds per phase"),
        "file_mb": Param(int, min=16, max=65536, help="size of the scratch file"),
        "trace_window_s": Param(
            float, min=0.05, max=10, help="seconds of tracing inside each phase"
        ),
        "trace": Param(bool, help="False: no block tracepoint windows"),
        "trace_sample": Param(int, min=0, max=10**6, help="requests kept per trace window"),
        "device": Param(str, help="'auto' or the block device the scratch file must be on"),
        "scratch_parent": Param(
            str, help="'auto' (perfbook's private scratch directory) or an absolute directory"
        ),
        "seed": Param(int, min=0, max=2**31, help="seed of the workload's offsets"),
        **repetition_params("rep_"),
    }
    tables = {
        # backlog: newer reports already waiting when this one was read (collect._IostatFollower)
        "intervals": Table(
            seq="int",
            round="int",
            phase="str",
            backlog="int",
            **_SNAPSHOT,
            **{f"sysstat {c}": "float" for c in _SYSSTAT},
            optional=("backlog",),
        ),
        "windows": Table(window="int", round="int", phase="str", edge="str", **_SNAPSHOT),
        "phases": Table(
            round="int",
            phase="str",
            what="str",
            warmup="bool",
            t_start_ns="int",
            t_end_ns="int",
            steady_s="float",
            steady_iops="float",
            **_FIO,
            ops="float",
            optional=("warmup", "steady_s", "steady_iops", "ops"),
        ),
        "trace_windows": Table(
            window="int",
            round="int",
            phase="str",
            overrun="int",
            op="str",
            n="int",
            n_d2c="int",
            **_Q2C,
            d2c_mean_us="float",
            window_s="float",
            occupancy="float",
            busy_frac="float",
            dev_occupancy="float",
            dev_busy_frac="float",
            events="float",
            done_without_start="float",
            start_without_done="float",
            flush_without_start="float",
            carried_in_ns="float",
            carried_out_ns="float",
        ),
        "trace_sample": Table(
            window="int", round="int", phase="str", op="str", q2c_us="float", d2c_us="float"
        ),
        "repetition": REPETITION,
    }
    reference = ("iostat_internals",)

    needs_tools = {"fio": "fio"}

    def check(self, p: dict) -> None:
        # lazy: scipy.stats, 0.67 s on top of the declaration's 0.35 s (-X importtime)
        from perfbook.analysis.repetition import repetition_settings

        repetition_settings(p, "rep_")
        w = p["trace_window_s"]
        if w + 1.3 > p["phase_seconds"]:
            raise ParameterError(
                f"trace_window_s ({w}) plus 1.3 s of warm-up and pre-roll must fit in "
                f"phase_seconds ({p['phase_seconds']}); lower it or raise phase_seconds"
            )
        if not re.fullmatch(r"auto|[A-Za-z0-9_.!-]{1,64}", p["device"]):
            raise ParameterError(
                f"device must be 'auto' or a block device name like 'vda', got {p['device']!r}"
            )
        if not (p["scratch_parent"] == "auto" or os.path.isabs(p["scratch_parent"])):
            raise ParameterError(
                f"scratch_parent must be 'auto' (perfbook's private scratch directory) "
                f"or an absolute directory, got {p['scratch_parent']!r}"
            )

    def preflight(self) -> list[str]:
        reasons = super().preflight()
        if not Path("/proc/diskstats").is_file():
            reasons.append("no /proc/diskstats (not Linux, or /proc not mounted)")
        return reasons

    def load(self, data_dir=None):
        """Every dataset of this chapter (analysis.IostatData: in their natural order, analysed once)."""
        return self.part("analysis").IostatData(self, data_dir)


chapter = IostatInternals()
