"""The example's analysis: frames in, frames out (no I/O, no plotting)."""

from __future__ import annotations

from perfbook.analysis import stats


def per_dataset(calls):
    """Median cost of one getppid() call per dataset, with its distribution-free CI."""
    return stats.summarize_frame(calls, ["host_id", "run_id"], "ns_per_call")


def quoted(D):
    """per_dataset()'s row of the dataset the prose quotes (D.quoted), None without one."""
    if D.quoted is None:
        return None
    return per_dataset(D.of_quoted(D["calls"])).iloc[0]
