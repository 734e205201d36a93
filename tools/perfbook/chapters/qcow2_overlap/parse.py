"""qcow2_overlap: perf report text -> numbers (pure, tested on canned text)."""
from __future__ import annotations

import re

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
