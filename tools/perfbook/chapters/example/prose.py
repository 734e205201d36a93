"""The example's prose values: values(D) gives every value the notebook's text glues, formatted
exactly as it shows them (strings and ints: perfbook.book.notebook.glue_all refuses floats)."""

from __future__ import annotations

from .analysis import quoted


def values(D) -> dict:
    """Every value the prose quotes, formatted as it shows."""
    row = quoted(D)
    if row is None:
        return {"n_datasets": 0, "median_ns": "n/a", "ci": "n/a", "ci_high_ns": "n/a"}
    return {
        "n_datasets": len(D),
        "median_ns": f"{row['median']:.1f}",
        "ci": f"{row['ci_low']:.1f}–{row['ci_high']:.1f} ns ({100 * row['ci_coverage']:.2f} %)",
        "ci_high_ns": f"{row['ci_high']:.1f}",
    }
