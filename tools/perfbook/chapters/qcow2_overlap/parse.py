"""qcow2_overlap, parse: perf report text -> numbers (pure, tested on canned text), and the
chapter's vocabulary, which the collect and the analysis share: the overlap-check modes, the
sizes, the workloads perf records and the symbols it looks for."""

from __future__ import annotations

import re

SEED = "002_8365d2f6af46e24d.txt"
MODES = ("none", "constant", "cached", "all")
MiB, GiB = 1 << 20, 1 << 30
MAX_SIZE = 64 * 1024 * GiB  # sparse files only; metadata stays small at 64 KiB clusters

PERF_WORKLOADS = (
    "prealloc_512",
    "allocate_sequential_64k",
    "overwrite_scattered_512",
    "overwrite_after_snapshots_512",
)
# The (workload, mode) recordings the prose quotes: what perf_quoted_only records
PERF_QUOTED = {
    "prealloc_512": "cached",
    "allocate_sequential_64k": "cached",
    "overwrite_scattered_512": "cached",
    "overwrite_after_snapshots_512": "all",
}
OVERLAP_SYMBOLS = ("qcow2_check_metadata_overlap", "qcow2_pre_write_overlap_check")

_HEADER = re.compile(r"#\s*Samples:\s*([\d.]+)([KM]?)\s+of event '([^']+)'")
_ROW = re.compile(r"\s*([\d.]+)%\s+(?:(\d+)\s+)?\[[.k]\]\s+(\S+)")


def parse_perf_report(text: str) -> tuple[dict, str, int]:
    """`perf report --stdio --no-children [-n] --sort symbol` output -> ({symbol: percent of
    samples, "_top": the first symbol}, the event name, the sample count)."""
    shares, event, total, top, counted = {}, "", 0, None, 0
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m:
            mult = {"": 1, "K": 1000, "M": 1000000}[m.group(2)]
            total, event = int(float(m.group(1)) * mult), m.group(3)
            continue
        m = _ROW.match(line)
        if m:
            pct, sym = float(m.group(1)), m.group(3)
            counted += int(m.group(2) or 0)
            shares[sym] = shares.get(sym, 0.0) + pct
            if top is None:
                top = sym
    shares["_top"] = top or ""
    # the header rounds large counts ("2K"); with -n the per-symbol counts add up exactly
    return shares, event, counted or total
