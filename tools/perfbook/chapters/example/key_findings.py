"""The example's key finding: the median cost of a call, decided on its interval."""

from __future__ import annotations

from perfbook.analysis import decide
from perfbook.analysis.findings import Finding, Measured

LIMIT_NS = 1000  # one microsecond


def per_call(run):
    """The median of the dataset's per-round ns per call with its order-statistic interval;
    None (not measured) for a dataset without calls."""
    if "calls" not in run:
        return None
    calls = run["calls"]["ns_per_call"]
    if calls.empty:
        return None
    return Measured(decide.location(calls, what="rounds"))


FINDINGS = (
    Finding(
        "under_a_microsecond",
        "One getppid() call from Python costs less than a microsecond",
        per_call,
        quantity="median cost per call",
        side="<",
        threshold=LIMIT_NS,
        unit="ns",
        contrary="One getppid() call from Python costs a microsecond or more",
        reproduce=".venv/bin/python -m timeit -s 'import os' 'os.getppid()'",
    ),
)
