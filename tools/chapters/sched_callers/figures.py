"""sched_callers: the figures (frames in, (figure, caption) out)."""
from __future__ import annotations

from ...machine import legend, short_kind
from . import analysis as A


def callers(D, workload: str = "hackbench", n: int = 8):
    """Shares of the top callers per tracer, one group of bars per caller (quoted dataset)."""
    import matplotlib.pyplot as plt
    w = A.callers_wide(D, workload, n)
    fig, ax = plt.subplots(figsize=(8, 0.5 * max(len(w), 2) + 1.5))
    k = len(w.columns)
    for i, t in enumerate(w.columns):
        ax.barh([y + (i - (k - 1) / 2) * 0.8 / max(k, 1) for y in range(len(w))], w[t],
                height=0.8 / max(k, 1), label=t)
    ax.set_yticks(range(len(w)), w.index)
    ax.invert_yaxis()
    ax.set_xlabel(f"share of the tracer's context switches under {workload} (%)")
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    q = D.quoted
    return fig, (f"Callers of the scheduler under {workload}, as a share of each tracer's switches; "
                 f"'→ X' marks an entry into __schedule other than schedule(). Host {legend(q['host'])}, "
                 f"run {q['run_id']} ({q['host']['cpu_model']}, {q['host']['cpus_online']} CPUs, "
                 f"Linux {q['host']['kernel_release']}).")


def probe_effect(D):
    """hackbench's median time per tracer with its CI, one row of points per dataset."""
    import matplotlib.pyplot as plt
    from ...stats import caption
    s = A.probe_effect(D["runs"])
    order = [t for t in A.TRACERS if t in set(s.tracer)]
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(order) + 1.5))
    ds = sorted(s.dataset.unique())
    names = {A.dataset_key(m): f"{legend(m['host'])}, run {m['run_id']}" for m in D.manifests}
    for i, d in enumerate(ds):
        g = s[s.dataset == d].set_index("tracer").reindex(order)
        y = [k + (i - (len(ds) - 1) / 2) * 0.25 for k in range(len(order))]
        ax.errorbar(g["median"], y, xerr=[g["median"] - g.ci_low, g.ci_high - g["median"]], fmt="o",
                    capsize=3, label=names.get(d, d))
    ax.set_yticks(range(len(order)), order)
    ax.invert_yaxis()
    ax.set_xlabel("hackbench time (s, median and 95 % CI)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), fontsize="small")
    fig.tight_layout()
    n = D["runs"].groupby(["dataset", "tracer"]).size().to_numpy()
    return fig, caption("hackbench's own time per run, untraced and under each tracer", n=n, unit="runs",
                        warmup=[m["parameters"].get("rep_warmup", 0) * m["parameters"]["hackbench_runs"] for m in D.manifests],
                        hosts=[(m["host"]["host_id"], f"{short_kind(m['host'])}, {m['host']['cpu_model']}, "
                                                      f"{m['host']['cpus_online']} CPUs") for m in D.manifests])
