"""virtio_blk_latency: the figures (D: analysis.VirtioData -> (figure, caption))."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from perfbook.analysis import stats

from . import analysis as A

# lifecycle lanes -> tab10 colour index
LANE_COLOR = {
    "guest": 0,
    "host/QEMU boundary": 1,
    "QEMU": 2,
    "QEMU aio": 3,
    "host": 4,
    "QEMU (TCG APIC)": 5,
    "host kvm.ko": 6,
}


def delta_bars(D):
    """The delta table as stacked bars: the seed's, ours with one layer per boot, every aio mode
    with all layers at once; shares of the guest benchmark (left) and µs (right)."""
    acc, p, ref = D.acc, D.p, D.ref
    series = [(f"seed {ref.date.iloc[0][:4]}\nKVM", A.seed_delta(ref))]
    series.append(
        (f"threads\n1 layer/boot\n{acc}" if D.have_seed_method else f"threads\n{acc}", D.delta)
    )
    per_aio = {a: A.cumulative_table(D.iv, "one_run", aio=a, pattern="seq") for a in p["aio"]}
    for a, cum in per_aio.items():
        dl = A.delta_table(cum)
        if len(dl):
            series.append((f"{a}\nall at once\n{acc}", dl))
    order = [n for n, _u, _l in A.DELTA_ROWS]
    colors = dict(zip(order, plt.cm.tab10.colors))
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.2), layout="constrained")
    for k, (label, dl) in enumerate(series):
        for ax, col, scale in ((axes[0], "delta_pct", 1.0), (axes[1], "delta_ns", 1e-3)):
            bottom = 0.0
            for r in dl.itertuples():
                val = getattr(r, col) * scale
                ax.bar(
                    k,
                    val,
                    bottom=bottom,
                    color=colors[r.layer.split(" + ")[0]],
                    edgecolor="white",
                    hatch="//" if " + " in r.layer else None,
                    label=r.layer,
                )
                bottom += val
    for ax, yl in zip(axes, ("share of the guest benchmark (%)", "mean latency (µs)")):
        ax.set_xticks(range(len(series)), [s[0] for s in series], fontsize="x-small")
        ax.set_ylabel(yl)
        ax.axhline(0, color="black", lw=0.6)
    h_, l_ = axes[0].get_legend_handles_labels()
    uniq = dict(zip(l_, h_))
    fig.legend(
        uniq.values(),
        uniq.keys(),
        fontsize="small",
        loc="outside lower center",
        ncol=len(uniq),
        frameon=False,
    )
    fig.suptitle(
        f"Where a 4 KiB O_DIRECT sequential read goes: the seed (KVM) and ours ({acc} guest)",
        fontsize="medium",
    )
    first = D.cum if D.have_seed_method else D.cum1
    ns_ = [int(first.set_index("key").loc["guest_benchmark", "n"])] + [
        int(c.set_index("key").loc["guest_benchmark", "n"]) for c in per_aio.values()
    ]
    return fig, stats.caption(
        f"The delta table as stacked bars: the seed's 2010 breakdown (a KVM guest) beside ours ({acc} guest): "
        "aio=threads with one layer traced per boot, and every aio mode with all layers traced at once. "
        "Means per layer, left as shares of the guest benchmark, right in µs; a segment below 0 is a negative delta",
        n=ns_,
        unit="requests",
        warmup=p["warmup"],
        hosts=D.hosts_caption,
        ci=False,
        extra=f"Accelerator: {acc}. The seed's bar is its published table (one mean per layer, no spread)",
    )


def cdfs(D):
    """Empirical CDFs of every layer's per-request latency in the all-layer boots, per aio mode."""
    acc, p, allv = D.acc, D.p, D.all_layers
    fig, axes = plt.subplots(
        1,
        len(p["aio"]),
        figsize=(4.2 * len(p["aio"]), 4.8),
        sharex=True,
        sharey=True,
        squeeze=False,
        layout="constrained",
    )
    for ax, a in zip(axes[0], p["aio"]):
        sub = allv[(allv.aio == a) | (allv.kind == "host")]
        for k in A.KEYS:
            x = np.sort(sub[k].dropna().to_numpy() / 1000)
            if len(x):
                ax.plot(x, np.arange(1, len(x) + 1) / len(x), label=A.LAYER_LABELS[k], lw=1.2)
        ax.set_xscale("log")
        ax.set_title(f"aio={a} ({acc} guest)", fontsize="medium")
        ax.set_xlabel("latency per request (µs, log scale)")
    axes[0, 0].set_ylabel("fraction of requests ≤ x")
    fig.legend(
        *axes[0, -1].get_legend_handles_labels(),
        fontsize="small",
        loc="outside lower center",
        ncol=4,
        frameon=False,
    )
    fig.suptitle(
        f"Per-layer latency distributions, all layers traced, {acc} guest", fontsize="medium"
    )
    return fig, stats.caption(
        f"Empirical CDFs of every layer's per-request latency in the all-layer boots, sequential and random "
        f"reads together, one panel per aio mode ({acc} guest); the host benchmark is the same in every panel",
        n=allv.groupby(["aio", "kind"]).size().to_numpy(),
        unit="requests",
        warmup=p["warmup"],
        hosts=D.hosts_caption,
        ci=False,
        extra=f"Accelerator: {acc}",
    )


def lifecycle_timeline(D):
    """One request per aio mode on the host's time axis, a bar per event since the previous one."""
    acc, p = D.acc, D.p
    fig, axes = plt.subplots(len(p["aio"]), 1, figsize=(11, 4.6 * len(p["aio"])), squeeze=False)
    for ax, a in zip(axes[:, 0], p["aio"]):
        lc = A.lifecycle(D.an, job=D.first_all_layer_boot(a), n=1).reset_index(drop=True)
        t = lc.t_ns.to_numpy() / 1000
        start = np.concatenate([[0.0], t[:-1]])
        for y, r in lc.iterrows():
            ax.barh(
                y,
                t[y] - start[y],
                left=start[y],
                color=plt.cm.tab10(LANE_COLOR.get(r.layer, 7)),
                height=0.7,
            )
            ax.plot(t[y], y, "|", color="black", ms=8)
        ax.set_yticks(
            range(len(lc)), [f"{e}  [{la}]" for e, la in zip(lc.event, lc.layer)], fontsize=7
        )
        ax.invert_yaxis()
        ax.set_title(
            f"aio={a}, {acc} guest: the request with the median latency", fontsize="medium"
        )
        ax.set_xlabel(
            "µs since the guest called pread() (host TSC axis); a bar spans the time since the previous event"
        )
    fig.tight_layout()
    return fig, stats.caption(
        f"One request per aio mode (the one with the median guest benchmark latency of the first all-layer boot), "
        f"every stamp on the host's TSC axis ({acc} guest), colour by layer. Guest stamps are placed with the middle of "
        "the offset bracket",
        n=1,
        unit="request",
        warmup=p["warmup"],
        hosts=D.hosts_caption,
        ci=False,
        extra=f"Accelerator: {acc}. Bracket half-widths: see the alignment table",
    )
