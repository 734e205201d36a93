"""sched_callers: the figures (frames in, (figure, caption) out)."""

from __future__ import annotations

import matplotlib.pyplot as plt

from perfbook.analysis import fleetview as fv
from perfbook.analysis.stats import caption, summarize_frame
from perfbook.data.machine import legend

from . import analysis as A
from .parse import TRACERS


def callers(D, workload: str = "hackbench", n: int = 8):
    """Shares of the top callers per tracer, one group of bars per caller (quoted dataset)."""
    w = A.callers_wide(D, workload, n)
    fig, ax = plt.subplots(figsize=(8, 0.5 * max(len(w), 2) + 1.5))
    k = len(w.columns)
    for i, t in enumerate(w.columns):
        ax.barh(
            [y + (i - (k - 1) / 2) * 0.8 / max(k, 1) for y in range(len(w))],
            w[t],
            height=0.8 / max(k, 1),
            label=t,
        )
    ax.set_yticks(range(len(w)), w.index)
    ax.invert_yaxis()
    ax.set_xlabel(f"share of the tracer's context switches under {workload} (%)")
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    q = D.quoted
    return fig, (
        f"Callers of the scheduler under {workload}, as a share of each tracer's switches; "
        f"'→ X' marks an entry into __schedule other than schedule(). Host {legend(q['host'])}, "
        f"run {q['run_id']} ({q['host']['cpu_model']}, {q['host']['cpus_online']} CPUs, "
        f"Linux {q['host']['kernel_release']})."
    )


def probe_effect(D):
    """hackbench's median time per tracer with its CI over the hosts: every counted run of this
    host and of the reference host, one point per other host (its shown dataset)."""
    runs = D["runs"]
    F = fv.fleet(D, set(runs.host_id.unique()))
    keep = fv.runs(D, F)
    runs = fv.of_runs(runs, keep)
    s = summarize_frame(runs, ["host_id", "run_id", "tracer"], "seconds")
    order = [t for t in TRACERS if t in set(s.tracer)]
    s = s.assign(pos=s.tracer.map({t: i for i, t in enumerate(order)}))
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(order) + 2.2), layout="constrained")
    drawn = fv.points(ax, F, s, "pos", "median", "ci_low", "ci_high", orient="h", width=0.6)
    ax.set_yticks(range(len(order)), order)
    ax.set_ylim(len(order) - 0.5, -0.5)
    ax.set_xlabel("hackbench time (s, median and its CI)")
    fv.legend(fig, F, drawn)
    mans = [m for m in D.manifests if m.key in keep]
    n = runs.groupby(["host_id", "run_id", "tracer"]).size().to_numpy()
    return fig, caption(
        "hackbench's own time per run, untraced and under each tracer",
        n=n,
        unit="runs",
        warmup=[
            m["parameters"].get("rep_warmup", 0) * m["parameters"]["hackbench_runs"] for m in mans
        ],
        hosts=F.caption_hosts(),
        extra=F.marks_text(drawn, F.runs_text("the median of one dataset's runs")),
    )
