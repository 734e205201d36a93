"""The example's analysis: frames in, frames and findings out (no I/O, no plotting)."""
from __future__ import annotations

from perfbook.analysis import stats


def per_dataset(calls):
    """Median cost of one getppid() call per dataset, with its distribution-free CI."""
    return stats.summarize_frame(calls, ["host_id", "run_id"], "ns_per_call")


def findings(D) -> dict:
    """Every value the prose quotes, formatted as it shows."""
    if D.quoted is None:
        return {"n_datasets": 0, "median_ns": "n/a"}
    row = per_dataset(D.of_quoted(D["calls"])).iloc[0]
    return {"n_datasets": len(D), "median_ns": f"{row['median']:.1f}",
            "ci": f"{row['ci_low']:.1f}–{row['ci_high']:.1f} ns ({100 * row['ci_coverage']:.2f} %)"}
