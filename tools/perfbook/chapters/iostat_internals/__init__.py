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

from .parse import DEFAULT_PHASES, DEFAULT_REPEAT, PHASES, QUICK_PHASES

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
    # A round runs every phase of `repeat` once, in an order that rotates by one phase a round;
    # the phases of `phases` that are not in `repeat` run once, before the rounds (round 0). The
    # rounds are the unit of repetition of the findings that compare phases (util: a ratio, 4
    # against 4 rounds at least; aqu: a median, 6 rounds at least), so the default spends its
    # time on six rounds of the two phases they read, at repeat_seconds (2 s: 1 s of warm-up,
    # the trace window, and the steady part the findings read, from our own snapshots, not
    # iostat's 1-s intervals), and runs the fsync phase (its finding counts flush requests in
    # the trace window) and the two phases the prose's merges and splits read once, at
    # phase_seconds (3 s still hold a whole 1-s iostat interval after the warm-up). The rounds
    # are fixed (rep_min_runs = rep_max_runs), with a budget that only a starved run reaches.
    # Here a repeated phase costs ~2.35 s (12 of them, 28 s), a phase run once ~3.35 s (3, 10 s),
    # and the rest (scratch file, iostat's start and end, the 15 trace windows' parsing, the
    # framework) ~10 s: the measured default took 50 s on a busy machine, ~48 s (plan_s). `full`
    # repeats every phase, 10 s each, until its CI target or 660 s.
    plan_s = {
        "quick": 16,
        "default": 48,
    }  # seconds a collect should take here (perfbook.book.summary)
    profiles = {
        "quick": {
            "phases": QUICK_PHASES,
            "repeat": None,
            "phase_seconds": 3,
            "repeat_seconds": None,
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
            "phases": list(DEFAULT_PHASES),
            "repeat": list(DEFAULT_REPEAT),
            "phase_seconds": 3,
            "repeat_seconds": 2.0,
            "file_mb": 128,
            "trace_window_s": 0.3,
            "rep_target": 0.05,
            "rep_min_runs": 6,
            "rep_max_runs": 6,
            "rep_budget_s": 60.0,
            "rep_warmup": 0,
            **_COMMON,
        },
        "full": {
            "phases": list(PHASES),
            "repeat": None,
            "phase_seconds": 10,
            "repeat_seconds": None,
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
        "phases": Param(list, choices=tuple(PHASES), help="the workload phases of the run"),
        "repeat": Param(
            list,
            choices=tuple(PHASES),
            nullable=True,
            help="the phases of `phases` that every round repeats (None, or none of `phases`: "
            "all of them); the others run once, before the rounds",
        ),
        "phase_seconds": Param(int, min=2, max=600, help="seconds per phase"),
        "repeat_seconds": Param(
            float,
            min=2,
            max=600,
            nullable=True,
            help="seconds per phase of the repeated rounds (None: phase_seconds)",
        ),
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
        # the phases of `phases` that repeat, in their order; none of them (a narrower `phases`
        # than the profile's): every phase repeats, as before `repeat` existed
        rep = [x for x in p["phases"] if p["repeat"] is None or x in p["repeat"]]
        p["repeat"] = rep or list(p["phases"])
        if p["repeat_seconds"] is None:
            p["repeat_seconds"] = float(p["phase_seconds"])
        w = p["trace_window_s"]
        for k in ("phase_seconds", "repeat_seconds"):
            if w + 1.3 > p[k]:
                raise ParameterError(
                    f"trace_window_s ({w}) plus 1.3 s of warm-up and pre-roll must fit in "
                    f"{k} ({p[k]}); lower it or raise {k}"
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
