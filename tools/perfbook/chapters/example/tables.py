"""The example's tables: D in, the DataFrames the notebook shows out."""

from __future__ import annotations

from .analysis import per_dataset


def per_call(D):
    """Every dataset's median cost of one call, its 95 % interval and the rounds behind it."""
    if not len(D):
        return "no dataset of this chapter: see Rerun this chapter"
    t = per_dataset(D["calls"])
    return (
        t[["host_id", "run_id", "n", "median", "ci_low", "ci_high"]]
        .rename(columns={"n": "rounds", "median": "ns_per_call"})
        .round(1)
        .set_index(["host_id", "run_id"])
    )
