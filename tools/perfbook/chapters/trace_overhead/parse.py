"""trace_overhead: parsers of the harness's and perf's output (pure text -> data)."""
from __future__ import annotations

import re
from io import StringIO

from perfbook.core.errors import PerfbookError


def parse_harness(text: str):
    """probench stdout -> (DataFrame[batch, iters, ns], timer_ns)."""
    import pandas as pd
    m = re.search(r"timer_ns=(\d+)", text)
    if not m:
        raise PerfbookError("probench output has no header line")
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    return pd.read_csv(StringIO(body)), int(m.group(1))


def perf_count(stderr: str) -> int | None:
    for line in stderr.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[0].strip().isdigit() and ":" in parts[2]:
            return int(parts[0])
    return None
