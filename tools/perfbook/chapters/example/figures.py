"""The example's figures: D in, (figure, caption) out (perfbook.book.notebook.figure)."""

from __future__ import annotations

import matplotlib.pyplot as plt


def per_round(D):
    """The cost of one call in each timed round, one line per dataset (none without data)."""
    fig, ax = plt.subplots()
    for (h, r), g in D["calls"].groupby(["host_id", "run_id"]) if len(D) else ():
        ax.plot(g["round"], g["ns_per_call"], marker="o", label=f"{h}/{r}")
    ax.set_xlabel("round")
    ax.set_ylabel("ns per getppid() call")
    return fig, f"getppid() cost per round, {len(D)} dataset(s)"
