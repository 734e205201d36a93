"""/proc/diskstats and /sys/block/*/stat, and the iostat -x columns computed from them.

Pure functions, no kernel state: parsing, the sysstat 12.x formulas, a parser for
`iostat -x -k` plain-text reports, and the invariants the chapter checks.

Field order (Documentation/admin-guide/iostats.rst, block/genhd.c diskstats_show):

    1 rd_ios  2 rd_merges  3 rd_sectors  4 rd_ticks      (reads: completed, merged, sectors, ms)
    5 wr_ios  6 wr_merges  7 wr_sectors  8 wr_ticks      (writes)
    9 in_flight  10 io_ticks (ms)  11 time_in_queue (ms)
   12 dc_ios 13 dc_merges 14 dc_sectors 15 dc_ticks      (discards, kernel >= 4.18)
   16 fl_ios 17 fl_ticks                                 (flushes, kernel >= 5.5)

Older kernels print 11 numbers (or, before 2.6.25, only 4 for partitions:
rd_ios rd_sectors wr_ios wr_sectors). Fields they lack parse as 0, and
`fields_present` says how many the kernel printed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

FIELDS = (
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
# The kernel prints these as 32-bit "%u" (milliseconds): deltas wrap modulo 2**32.
U32_FIELDS = ("rd_ticks", "wr_ticks", "io_ticks", "time_in_queue", "dc_ticks", "fl_ticks")
# sysstat keeps the other counters in `unsigned long` (64 bits on the 64-bit hosts we
# run on) and subtracts them in that type: a counter that went backwards is a wrap,
# and the difference is taken modulo 2**64 (iostat.c: "Counters overflows are
# possible, but don't need to be handled in a special way").
U64_WRAP = 2**64
U32_WRAP = 2**32
# sysstat's interval is whole centiseconds of /proc/uptime, and get_interval()
# (common.c) turns a zero interval into 1 cs "paranoia checking".
MIN_INTERVAL_S = 0.01
OLD_PARTITION_FIELDS = ("rd_ios", "rd_sectors", "wr_ios", "wr_sectors")

# sysstat 12.x `iostat -x` column order (plain text, one device per line).
COLUMNS = (
    "r/s",
    "rkB/s",
    "rrqm/s",
    "%rrqm",
    "r_await",
    "rareq-sz",
    "w/s",
    "wkB/s",
    "wrqm/s",
    "%wrqm",
    "w_await",
    "wareq-sz",
    "d/s",
    "dkB/s",
    "drqm/s",
    "%drqm",
    "d_await",
    "dareq-sz",
    "f/s",
    "f_await",
    "aqu-sz",
    "%util",
)


class ParseError(ValueError):
    pass


@dataclass
class DiskStat:
    major: int
    minor: int
    name: str
    fields_present: int
    values: dict = field(default_factory=dict)

    def __getitem__(self, k):
        return self.values[k]


def _numbers(tokens: list[str], where: str) -> list[int]:
    try:
        return [int(t) for t in tokens]
    except ValueError:
        raise ParseError(f"{where}: expected only integers, got {' '.join(tokens)!r}") from None


def parse_fields(nums: list[int], where: str = "stat") -> tuple[dict, int]:
    """Counters from the numbers after the device name (4, 11, 15 or 17 of them)."""
    n = len(nums)
    vals = dict.fromkeys(FIELDS, 0)
    if n == 4:
        vals.update(zip(OLD_PARTITION_FIELDS, nums))
    elif n in (11, 15, 17) or n > 17:
        # a future kernel may append fields: we keep the 17 we know
        vals.update(zip(FIELDS, nums[:17]))
    else:
        raise ParseError(f"{where}: {n} numbers; a kernel prints 4, 11, 15 or 17")
    return vals, n


def parse_diskstats(text: str) -> dict[str, DiskStat]:
    """/proc/diskstats text -> {device name: DiskStat}."""
    out = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        tok = line.split()
        if not tok:
            continue
        if len(tok) < 7:
            raise ParseError(f"diskstats line {lineno}: too few fields: {line.strip()!r}")
        major, minor = _numbers(tok[:2], f"diskstats line {lineno}")
        vals, n = parse_fields(
            _numbers(tok[3:], f"diskstats line {lineno}"), f"diskstats line {lineno} ({tok[2]})"
        )
        out[tok[2]] = DiskStat(major, minor, tok[2], n, vals)
    return out


def parse_sys_stat(text: str, name: str = "?") -> DiskStat:
    """/sys/block/<dev>/stat text (no major/minor/name) -> DiskStat."""
    nums = _numbers(text.split(), f"/sys/block/{name}/stat")
    vals, n = parse_fields(nums, f"/sys/block/{name}/stat")
    return DiskStat(-1, -1, name, n, vals)


def _device_was_reset(prev: dict, curr: dict) -> bool:
    """sysstat 12.6's test (iostat.c write_stats) for a device removed and inserted again.

    Fewer I/Os in total than before, and every sector counter either went
    backwards or was 0 before: sysstat then computes from zero (``iozero``).
    """
    ios = ("rd_ios", "wr_ios", "dc_ios", "fl_ios")
    return sum(curr[k] for k in ios) < sum(prev[k] for k in ios) and all(
        not prev[k] or curr[k] < prev[k] for k in ("rd_sectors", "wr_sectors", "dc_sectors")
    )


def delta(prev: dict, curr: dict) -> dict:
    """Counter differences the way sysstat 12.6's iostat takes them.

    The 32-bit millisecond fields wrap modulo 2**32 and the others modulo 2**64
    (C unsigned int / unsigned long subtraction); a device that was removed and
    inserted again (see _device_was_reset) counts from zero.
    """
    if _device_was_reset(prev, curr):
        prev = dict.fromkeys(FIELDS, 0)
    d = {}
    for k in FIELDS:
        if k == "in_flight":
            d[k] = curr[k]
            continue
        d[k] = (curr[k] - prev[k]) % (U32_WRAP if k in U32_FIELDS else U64_WRAP)
    return d


def _div(a, b):
    return a / b if b else 0.0


def compute_columns(prev: dict, curr: dict, interval_s: float) -> dict:
    """Every `iostat -x -k` column from two snapshots, with sysstat 12.x formulas.

    sysstat's S_VALUE(m, n, p) is (n - m) / p * 100 with p in 1/100 s; here the
    interval is in seconds, which is the same thing. kB = sectors / 2. A zero
    interval counts as one centisecond, like sysstat's get_interval(); a negative
    or NaN one is an error.
    """
    if interval_s is None or math.isnan(interval_s) or interval_s < 0:
        raise ValueError(f"interval must be >= 0 s, got {interval_s!r}")
    d = delta(prev, curr)
    T = float(interval_s) or MIN_INTERVAL_S
    c = {}
    for p, ios, merges, sectors, ticks in (
        ("r", "rd_ios", "rd_merges", "rd_sectors", "rd_ticks"),
        ("w", "wr_ios", "wr_merges", "wr_sectors", "wr_ticks"),
        ("d", "dc_ios", "dc_merges", "dc_sectors", "dc_ticks"),
    ):
        c[f"{p}/s"] = d[ios] / T
        c[f"{p}kB/s"] = d[sectors] / T / 2
        c[f"{p}rqm/s"] = d[merges] / T
        c[f"%{p}rqm"] = _div(d[merges], d[merges] + d[ios]) * 100
        c[f"{p}_await"] = _div(d[ticks], d[ios])
        c[f"{p}areq-sz"] = _div(d[sectors], d[ios]) / 2
    c["f/s"] = d["fl_ios"] / T
    c["f_await"] = _div(d["fl_ticks"], d["fl_ios"])
    c["aqu-sz"] = d["time_in_queue"] / T / 1000
    c["%util"] = d["io_ticks"] / (T * 1000) * 100
    # sysstat's extra figures (iostat -s / sar): all of r, w, d together
    # (sums in the C types: unsigned long for I/Os and sectors, unsigned int for ticks)
    nr = (d["rd_ios"] + d["wr_ios"] + d["dc_ios"]) % U64_WRAP
    c["await"] = _div((d["rd_ticks"] + d["wr_ticks"] + d["dc_ticks"]) % U32_WRAP, nr)
    c["areq-sz"] = _div((d["rd_sectors"] + d["wr_sectors"] + d["dc_sectors"]) % U64_WRAP, nr) / 2
    return {k: c[k] for k in (*COLUMNS, "await", "areq-sz")}


# ---- sysstat's own output ----------------------------------------------------------

_HEADER_RE = re.compile(r"^Device\s+r/s\s")


def parse_iostat_report_line(header: list[str], line: str, device: str) -> dict | None:
    """One `iostat -x` device line -> {column: float}, None if it's another device."""
    tok = line.split()
    if not tok or tok[0] != device:
        return None
    if len(tok) != len(header):
        raise ParseError(f"iostat line has {len(tok)} fields, header has {len(header)}")
    out = {}
    for k, v in zip(header[1:], tok[1:]):
        try:
            out[k] = float(v.replace(",", "."))
        except ValueError:
            raise ParseError(f"iostat column {k}: not a number: {v!r}") from None
    return out


def parse_iostat_text(text: str, device: str) -> list[dict]:
    """All reports for `device` in `iostat -x` plain-text output, in order."""
    header = None
    rows = []
    for line in text.splitlines():
        if _HEADER_RE.match(line):
            header = line.split()
            continue
        if header is not None:
            r = parse_iostat_report_line(header, line, device)
            if r is not None:
                rows.append(r)
    return rows


def is_header(line: str) -> bool:
    return bool(_HEADER_RE.match(line))


# ---- invariants ----------------------------------------------------------------------


def await_mix(c: dict) -> float:
    """await as the request-weighted mix of r_await, w_await and d_await."""
    n = c["r/s"] + c["w/s"] + c["d/s"]
    return _div(c["r/s"] * c["r_await"] + c["w/s"] * c["w_await"] + c["d/s"] * c["d_await"], n)


def little_prediction(c: dict) -> float:
    """aqu-sz predicted by Little's law: throughput x mean time in the system.

    time_in_queue sums the latency of completed reads, writes, discards and
    flushes, so the flush term is part of the prediction.
    """
    return (
        c["r/s"] * c["r_await"]
        + c["w/s"] * c["w_await"]
        + c["d/s"] * c["d_await"]
        + c["f/s"] * c["f_await"]
    ) / 1000.0


def tiq_residual_ms(prev: dict, curr: dict) -> int:
    """time_in_queue delta minus the summed per-operation ticks deltas (ms).

    Zero up to truncation (each field is a separate ns->ms division: |r| <= 4)
    where time_in_queue is the sum of completed requests' latencies (kernel >= 5.x);
    on 3.x kernels it integrated in-flight x elapsed and differs under load.
    """
    d = delta(prev, curr)
    return d["time_in_queue"] - (d["rd_ticks"] + d["wr_ticks"] + d["dc_ticks"] + d["fl_ticks"])
