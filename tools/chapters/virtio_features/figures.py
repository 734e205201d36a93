"""virtio_features: the two bit heatmaps (D in, (figure, caption) out)."""
from __future__ import annotations

from ... import stats
from .analysis_guest import block_matrix, host_block_bits, type_matrix

EXACT = "A feature string is an exact readout: one per device, nothing to average"


def _heatmap(M, cmap: str, figsize, xrot: int, yfont: int, title: str):
    import matplotlib.pyplot as plt
    import numpy as np
    fig, ax = plt.subplots(figsize=figsize)
    ax.imshow(M.values, cmap=cmap, vmin=0, vmax=1.3, aspect="auto")
    ax.set_xticks(range(M.shape[1]), M.columns, rotation=xrot, ha="right", fontsize=8)
    ax.set_yticks(range(len(M)), M.index, fontsize=yfont)
    ax.set_xticks(np.arange(-.5, M.shape[1]), minor=True)
    ax.set_yticks(np.arange(-.5, len(M)), minor=True)
    ax.grid(which="minor", color="white", linewidth=1)
    ax.grid(which="major", visible=False)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def _quoted_host(D) -> list[tuple[str, str]]:
    q = D.quoted
    return [(q.host_id, q["host"].get("description"))]


def block_bits(D):
    """Negotiated virtio-blk bits x devices: every host's disks, the guest disks, the seed."""
    M = block_matrix(D)
    fig = _heatmap(M, "Blues", (max(8, 0.42 * M.shape[1] + 3), 0.32 * len(M) + 2.5), 60, 8,
                   "negotiated virtio-blk feature bits (bit number, name)")
    runs = set(host_block_bits(D).run_id)
    hosts = stats.hosts_of([m for m in D.manifests if m["run_id"] in runs]) or _quoted_host(D)
    return fig, stats.caption(
        "Negotiated virtio-blk feature bits of every host's block devices, of each guest disk of the newest "
        "dataset, and of the seed's two strings", n=1, unit="readouts", warmup=0, hosts=hosts, ci=False,
        extra=EXACT)


def type_bits(D):
    """Negotiated bits of every device type, this host and the default guest."""
    H = type_matrix(D)
    fig = _heatmap(H, "Greens", (max(6, 0.6 * H.shape[1] + 4), 0.26 * len(H) + 2), 45, 7,
                   "negotiated bits of every device type (host and default guest)")
    return fig, stats.caption(
        "Negotiated bits of every virtio device type of the newest dataset's host and of its default guest",
        n=1, unit="readouts", warmup=0, hosts=_quoted_host(D), ci=False, extra=EXACT)
