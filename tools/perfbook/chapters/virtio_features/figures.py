"""virtio_features: the two bit heatmaps (D in, (figure, caption) out)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from perfbook.analysis import fleetview as fv
from perfbook.analysis import stats

from .analysis import block_matrix, host_block_bits, type_matrix

EXACT = "A feature string is an exact readout: one per device, nothing to average"


def _heatmap(M, cmap: str, figsize, xrot: int, yfont: int, title: str):
    fig, ax = plt.subplots(figsize=figsize)
    ax.imshow(M.values, cmap=cmap, vmin=0, vmax=1.3, aspect="auto")
    ax.set_xticks(range(M.shape[1]), M.columns, rotation=xrot, ha="right", fontsize=8)
    ax.set_yticks(range(len(M)), M.index, fontsize=yfont)
    ax.set_xticks(np.arange(-0.5, M.shape[1]), minor=True)
    ax.set_yticks(np.arange(-0.5, len(M)), minor=True)
    ax.grid(which="minor", color="white", linewidth=1)
    ax.grid(which="major", visible=False)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def _quoted_host(D) -> list[tuple[str, str]]:
    q = D.quoted
    return [(q.host_id, q["host"].get("description"))]


def fleet_columns(M, F):
    """block_matrix's columns with the hosts' disks by role: this host's disks and the reference
    host's each a column, every other host's disks pooled into one column holding the share of
    them that negotiated the bit (so the grid does not widen with the fleet). Returns (matrix,
    number of other hosts' disks)."""
    ref = F.reference if F.reference != F.this else None
    keep, pooled = {}, []
    for c in M.columns:
        if c.startswith("host "):
            hid = c.split()[1]
            if hid == ref:
                keep["reference host " + c.split(" ", 2)[2]] = M[c]
            else:
                pooled.append(c)
        else:
            keep[c] = M[c]
    out = pd.DataFrame(keep, index=M.index)
    if pooled:
        hosts = len({c.split()[1] for c in pooled})
        share = M[pooled].mean(axis=1)
        cols = list(out.columns)
        at = next((i for i, c in enumerate(cols) if c.startswith("guest ")), len(cols))
        out.insert(
            at,
            f"other hosts: share of {fv.plural(len(pooled), 'disk')} of {fv.plural(hosts, 'host')}",
            share,
        )
    return out, len(pooled)


def block_bits(D):
    """Negotiated virtio-blk bits x devices: this host's disks (and the reference host's), the other
    hosts' disks pooled into one column (the share that negotiated each bit), the guest disks of
    the quoted dataset, the seed's strings."""
    hb = host_block_bits(D)
    F = fv.fleet(D, set(hb.host_id.unique()) if len(hb) else None)
    M, n_pooled = fleet_columns(block_matrix(D), F)
    fig = _heatmap(
        M,
        "Blues",
        (max(8, 0.42 * M.shape[1] + 3), 0.32 * len(M) + 2.5),
        60,
        8,
        "negotiated virtio-blk feature bits (bit number, name)",
    )
    ax = fig.axes[0]
    pooled = [i for i, c in enumerate(M.columns) if c.startswith("other hosts")]
    for j in pooled:
        for i, v in enumerate(M.iloc[:, j]):
            if 0 < v < 1:
                ax.text(j, i, f"{100 * v:.0f}", ha="center", va="center", fontsize=6)
    return fig, stats.caption(
        "Negotiated virtio-blk feature bits of this host's block devices (and the reference host's), of each guest "
        "disk of the newest dataset, and of the seed's two strings",
        n=1,
        unit="readouts",
        warmup=0,
        hosts=F.caption_hosts() or _quoted_host(D),
        ci=False,
        extra=EXACT
        + (
            f". The other hosts' disks ({fv.plural(n_pooled, 'disk')}) share one column: its shade is the "
            "share of them that negotiated the bit, written in % where it is neither none nor all"
            if n_pooled
            else ""
        ),
    )


def type_bits(D):
    """Negotiated bits of every device type, this host and the default guest."""
    H = type_matrix(D)
    fig = _heatmap(
        H,
        "Greens",
        (max(6, 0.6 * H.shape[1] + 4), 0.26 * len(H) + 2),
        45,
        7,
        "negotiated bits of every device type (host and default guest)",
    )
    return fig, stats.caption(
        "Negotiated bits of every virtio device type of the newest dataset's host and of its default guest",
        n=1,
        unit="readouts",
        warmup=0,
        hosts=_quoted_host(D),
        ci=False,
        extra=EXACT,
    )
