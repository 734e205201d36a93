"""The example's figures: frames in, (figure, caption) out."""
from __future__ import annotations


def per_round(D):
    import matplotlib.pyplot as plt
    calls = D["calls"]
    fig, ax = plt.subplots()
    for (h, r), g in calls.groupby(["host_id", "run_id"]):
        ax.plot(g["round"], g["ns_per_call"], marker="o", label=f"{h}/{r}")
    ax.set_xlabel("round")
    ax.set_ylabel("ns per getppid() call")
    return fig, f"getppid() cost per round, {len(D)} dataset(s)"
