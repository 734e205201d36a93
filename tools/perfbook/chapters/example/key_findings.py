"""The example's key finding, decided on the number the prose shows and its interval."""

from __future__ import annotations

from perfbook.analysis.findings import Finding, Outcome, from_glue, num

from .prose import values

LIMIT_NS = 1000  # one microsecond


def under_a_microsecond(g):
    """Holds where the whole interval of the median lies below LIMIT_NS, fails where it does
    not; None (not measured) without a median."""
    if g["median_ns"] == "n/a":
        return None
    return Outcome(
        num(g["ci_high_ns"]) < LIMIT_NS,
        f"median {g['median_ns']} ns per call, 95 % interval {g['ci']}",
    )


FINDINGS = (
    Finding(
        "under_a_microsecond",
        "One getppid() call from Python costs less than a microsecond: the "
        "upper end of the median's interval lies below 1000 ns",
        from_glue(values, under_a_microsecond),
        contrary="The data do not show one getppid() call from Python costing less than a microsecond: "
        "the median's interval reaches 1000 ns or more",
    ),
)
