"""trace_overhead: what the chapter measures (the mechanisms, the sanity bound, the kernel's uprobe
fast paths: shared by collect and analysis) and the parsers of the harness's and perf's output
(pure text -> data)."""

from __future__ import annotations

import re
from io import StringIO

import pandas as pd

from perfbook.core.errors import PerfbookError

# A call of an empty function costs ~1.5 ns on this host and ~26 ns under TCG (committed
# data); a baseline above this means something else is attached to the harness.
BASELINE_MAX_NS = 200
# mechanism -> what the harness calls, and what is armed around it
MECHANISMS: dict[str, dict] = {
    "none": {"target": "ret", "what": "empty function, nothing armed (harness cost)"},
    "syscall": {"target": "syscall", "what": "write(2) of 9 bytes to /dev/null"},
    "marker": {
        "target": "marker",
        "file": "trace_marker",
        "what": "write(2) of 9 bytes to trace_marker",
    },
    "marker_raw": {
        "target": "marker_raw",
        "file": "trace_marker_raw",
        "what": "write(2) of id + 4 bytes to trace_marker_raw",
    },
    "uprobe": {
        "target": "ret",
        "probe": "pb_ret",
        "what": "uprobe event on `ret` (single-stepped out of line)",
    },
    "uprobe_push": {
        "target": "push",
        "probe": "pb_push",
        "what": "uprobe event on `push %rbp` (emulated)",
    },
    "uprobe_nop5": {
        "target": "nop5",
        "probe": "pb_nop5",
        "what": "uprobe event on a 5-byte nop (optimizable)",
    },
    "uretprobe": {
        "target": "ret",
        "probe": "pb_ret",
        "ret": True,
        "what": "uretprobe event on pb_ret",
    },
    "perf_stat": {
        "target": "ret",
        "probe": "pb_ret",
        "tool": "perf",
        "what": "uprobe on `ret` counted by perf stat (no ftrace buffer)",
    },
    "bpf_uprobe": {
        "target": "ret",
        "tool": "bpftrace",
        "what": "bpftrace: BPF count() on a uprobe on `ret`",
    },
}
DEFAULT_MECHANISMS = tuple(MECHANISMS)

EXPERIMENT = "per-call cost"

# Kernel symbols whose presence tells which uprobe fast paths this kernel has.
KERNEL_FEATURES = {
    "push_emulate_op": "x86 uprobes emulate `push` instead of single-stepping it",
    "branch_emulate_op": "x86 uprobes emulate jumps/calls instead of single-stepping them",
    "__x64_sys_uretprobe": "uretprobe syscall: return probes return via a syscall, not a trap",
    "__x64_sys_uprobe": "uprobe syscall: optimized uprobes enter via a syscall, not int3",
    "arch_uprobe_optimize": "uprobes on a 5-byte nop can be rewritten into a call",
}


def parse_harness(text: str):
    """probench stdout -> (DataFrame[batch, iters, ns], timer_ns)."""
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
