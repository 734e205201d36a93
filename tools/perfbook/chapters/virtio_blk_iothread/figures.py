"""virtio_blk_iothread: the figures. iops() and cpu() show the quoted dataset; hosts() shows the
on/off effect over every host (perfbook.analysis.fleetview)."""

from __future__ import annotations

import matplotlib.pyplot as plt

from perfbook.analysis import fleetview as fv
from perfbook.analysis.stats import caption, hl_ci_label
from perfbook.data.machine import legend

from . import analysis as A

COLORS = {"off": "tab:gray", "on": "tab:blue"}


def _label(job: str, storm: bool, event_idx: str | None = None) -> str:
    return (
        job.replace("_qd", " QD")
        + (" + storm" if storm else "")
        + (f", event_idx {event_idx}" if event_idx else "")
    )


def _hosts(D):
    q = D.quoted
    return [(q["host"]["host_id"], f"{q['host']['cpu_model']}, {q['host']['cpus_online']} CPUs")]


def iops(D):
    """Left: median IOPS per job, iothread off and on, with the median's CI. Right: on against
    off over one value per boot, the Hodges-Lehmann shift relative to off, with its CI (a job
    whose boots had two event_idx values has no single effect: it is left out here)."""
    fio = D.of_quoted(A.fio_table(D))
    s = A.fio_summary(fio)
    e = A.effects(fio)
    e = e.drop_duplicates(["job", "storm"], keep=False) if len(e) else e
    cells = list(dict.fromkeys(zip(s.job, s.storm)))
    fig, (a1, a2) = plt.subplots(
        1,
        2,
        figsize=(9, 0.45 * len(cells) + 1.6),
        sharey=True,
        gridspec_kw={"width_ratios": [3, 2]},
    )
    for k, v in enumerate(("off", "on")):
        g = s[s.variant == v].set_index(["job", "storm"]).reindex(cells)
        y = [i + (k - 0.5) * 0.3 for i in range(len(cells))]
        a1.errorbar(
            g["median"],
            y,
            xerr=[g["median"] - g.ci_low, g.ci_high - g["median"]],
            fmt="o",
            color=COLORS[v],
            capsize=3,
            label=f"iothread {v}",
        )
    a1.set_xscale("log")
    a1.set_xlabel("IOPS (median and CI)")
    a1.set_yticks(range(len(cells)), [_label(*c) for c in cells])
    a1.invert_yaxis()
    a1.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.2 - 0.5 / max(len(cells), 1)),
        ncol=2,
        fontsize="small",
    )
    if len(e):
        g = e.set_index(["job", "storm"]).reindex(cells)
        a2.errorbar(
            100 * g.rel_shift,
            range(len(cells)),
            xerr=[100 * (g.rel_shift - g.rel_low), 100 * (g.rel_high - g.rel_shift)],
            fmt="s",
            color="tab:blue",
            capsize=3,
        )
    a2.axvline(0, color="k", lw=0.8)
    a2.set_xlabel("iothread on against off (%)")
    fig.tight_layout()
    n = fio.groupby(["job", "storm", "variant"]).size().to_numpy()
    boots = D.of_quoted(A.boots_table(D))
    pairs = [(int(r.n_a), int(r.n_b)) for r in e.itertuples()] if len(e) else []
    return fig, caption(
        f"fio inside the guest, per job: IOPS with iothread off and on (left), and on against off "
        f"(right: Hodges–Lehmann shift relative to off over one value per boot, with its "
        f"{hl_ci_label(pairs) if pairs else 'CI'}). Host {legend(D.quoted['host'])}, run "
        f"{D.quoted['run_id']}; guests under {', '.join(sorted(set(boots.accel)))}, "
        f"event_idx {', '.join(sorted(set(boots.event_idx)))}",
        n=n,
        unit="runs",
        warmup=0,
        hosts=_hosts(D),
        extra="Each boot ran an unrecorded warm-up job first"
        if D.quoted["parameters"].get("fio_warmup_ms", 1)
        else "",
    )


def cpu(D):
    """CPU seconds per second of job for each class of QEMU thread, iothread off and on."""
    r = A.cpu_rates(D.of_quoted(A.table(D, "threads")))
    cells = list(dict.fromkeys(zip(r.job, r.storm, r.variant)))
    fig, ax = plt.subplots(figsize=(9, 0.33 * len(cells) + 1.6))
    left = [0.0] * len(cells)
    colors = {
        "vcpu": "tab:orange",
        "main": "tab:red",
        "iothread": "tab:blue",
        "monitor": "tab:purple",
        "worker": "tab:green",
        "other": "tab:gray",
        "exited": "tab:olive",
    }
    for c in ("main", "iothread", "monitor", "worker", "other", "exited", "vcpu"):
        g = r[r.cls == c].set_index(["job", "storm", "variant"])["rate"].reindex(cells).fillna(0.0)
        if g.sum() <= 0:
            continue
        ax.barh(
            range(len(cells)),
            g,
            left=left,
            color=colors[c],
            label={
                "main": "main loop",
                "vcpu": "vCPU",
                "iothread": "I/O thread",
                "monitor": "QMP monitor thread",
            }.get(c, c),
        )
        left = [a + b for a, b in zip(left, g)]
    ax.set_yticks(
        range(len(cells)), [f"{_label(j, s)}, iothread {v}" for j, s, v in cells], fontsize="small"
    )
    ax.invert_yaxis()
    ax.set_xlabel("QEMU CPU time per second of job (s/s), median over runs")
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12 - 0.6 / max(len(cells), 1)),
        ncol=4,
        fontsize="small",
    )
    fig.tight_layout()
    return fig, caption(
        "Where QEMU's CPU time goes during each fio job: user plus system time of each class of "
        "QEMU thread between the job's two markers, from /proc/<pid>/task/<tid>/stat",
        n=r.n.to_numpy(),
        unit="runs",
        warmup=0,
        hosts=_hosts(D),
        ci=False,
        extra="'exited' is time of threads that ended during the job",
    )


def hosts(D):
    """iothread on against off per job and event_idx over the hosts (perfbook.analysis.fleetview):
    one point per other host, every counted run of this host and of the reference host with its
    interval (over one value per boot); one panel per machine kind (a TCG guest's I/O path is
    paced by an emulated CPU). event_idx is a factor: each row holds it equal, and a dataset
    whose variants' boots differ in it has no effect to draw."""
    e = A.every_effect(D)
    if not len(e):
        fig, ax = plt.subplots(figsize=(6, 1.5))
        ax.axis("off")
        ax.text(
            0.5,
            0.5,
            "no dataset has two boots per variant at one event_idx",
            ha="center",
            va="center",
        )
        who = [f"{role} ({h})" for h, role in fv.fleet(D).highlighted]
        return (
            fig,
            "No host has a dataset with at least two boots per variant at one event_idx (the "
            "unit of repetition is the boot), so no effect is drawn"
            + (
                f"; {' and '.join(who)}: no mark, {'it has' if len(who) == 1 else 'they have'} "
                "nothing to draw here."
                if who
                else "."
            ),
        )
    e = e.assign(
        host_id=e.dataset.str.split("/").str[0],
        run_id=e.dataset.str.split("/").str[1],
        value=100 * e.rel_shift,
        lo=100 * e.rel_low,
        hi=100 * e.rel_high,
    )
    # the hosts with an effect, and this host and the reference host whatever they have: one
    # without an effect to draw (one boot per variant, or variants at different event_idx) is
    # named in the caption as having nothing to draw
    F = fv.fleet(D, set(e.host_id.unique()) | {h for h, _ in fv.fleet(D).highlighted})
    keep = fv.runs(D, F)
    e = fv.of_runs(e, keep)
    cells = list(dict.fromkeys(zip(e.job, e.storm, e.event_idx)))
    e = e.assign(pos=[cells.index(c) for c in zip(e.job, e.storm, e.event_idx)])
    panels = fv.facets(F, "kind")
    fig, axes = plt.subplots(
        1,
        len(panels),
        figsize=(min(4.6 * len(panels) + 2.2, 14), 0.45 * len(cells) + 2.2),
        sharey=True,
        squeeze=False,
        layout="constrained",
    )
    drawn = [
        fv.points(ax, Fk, e, "pos", "value", "lo", "hi", orient="h")
        for ax, (_, Fk) in zip(axes[0], panels)
    ]
    for ax, (title, _) in zip(axes[0], panels):
        ax.axvline(0, color="k", lw=0.8)
        ax.set_xlabel("IOPS, iothread on against off (%)")
        if len(panels) > 1:
            ax.set_title(title, fontsize="medium")
    axes[0, 0].set_yticks(range(len(cells)), [_label(*c) for c in cells])
    axes[0, 0].set_ylim(len(cells) - 0.5, -0.5)
    d = fv.merge(*drawn)
    fv.legend(fig, F, d)
    mans = [m for m in D.manifests if (m.host_id, m["run_id"]) in keep]
    pairs = [(int(r.n_a), int(r.n_b)) for r in e.itertuples()]
    cap = caption(
        "fio IOPS with iothread on against off, per job and virtio-blk event_idx (held equal "
        "within each row): the Hodges–Lehmann shift relative to off, over one value per boot",
        n=e.n_a.to_numpy(),
        unit="boots",
        warmup=0,
        hosts=[(m.host_id, m["host"].get("description")) for m in mans],
        ci=False,
        extra=F.marks_text(
            d,
            "one dataset's shift",
            f"its {hl_ci_label(pairs)}" if pairs else None,
            panels=len(panels) > 1,
        ),
    )
    return fig, fv.recaption(cap, mans, F)
