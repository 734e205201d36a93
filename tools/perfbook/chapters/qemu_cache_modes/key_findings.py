"""Key findings of the cache-modes chapter, from the chapter's values for one dataset."""

from __future__ import annotations

from perfbook.analysis.findings import Finding, Outcome, from_glue, num

from .prose import key_values as _g  # what the tests below read, not every value the prose quotes


def direct_penalty(g):
    ours, seed = num(g["our_pen"]), num(g["seed_pen"])
    return Outcome(
        ours > 0.5,
        f"directsync keeps {ours * 100:.0f} % of none's guest dd rate with "
        f"oflag=direct (2013: {seed * 100:.0f} %); guests under {g['accel']}",
    )


def wb_over_wt(g):
    r = num(g["wb_over_wt"])
    return Outcome(
        r > 3,
        f"qemu-img bench: writeback {g['bw_writeback']} MiB/s, writethrough "
        f"{g['bw_writethrough']} MiB/s: {r:g}×",
    )


def semantics(g):
    a, n = int(num(g["n_sem_agree"])), int(num(g["n_sem_rows"]))
    return Outcome(a == n, f"{a} of {n} open-flag and flush checks match QEMU's documented mapping")


def pagecache(g):
    disk = num(g["disk_mib"])
    res = {
        m: num(g[f"res_{m}"]) for m in ("none", "directsync", "writethrough", "writeback", "unsafe")
    }
    ok = (
        res["none"] < 0.1 * disk
        and res["directsync"] < 0.1 * disk
        and all(res[m] > 0.5 * disk for m in ("writethrough", "writeback", "unsafe"))
    )
    return Outcome(
        ok,
        "image pages in the host page cache (MiB of "
        + f"{disk:g}): "
        + ", ".join(f"{m} {v:g}" for m, v in res.items()),
    )


FINDINGS = (
    Finding(
        "direct_penalty",
        "With oflag=direct in the guest, directsync keeps more than half of none's "
        "write rate, where the 2013 article kept under a tenth",
        from_glue(_g, direct_penalty),
        contrary="With oflag=direct in the guest, directsync keeps at most half of none's write rate",
    ),
    Finding(
        "wb_over_wt",
        "writeback writes more than three times as fast as writethrough (qemu-img bench)",
        from_glue(_g, wb_over_wt),
    ),
    Finding(
        "semantics",
        "Every cache mode opens and flushes the image as QEMU documents it",
        from_glue(_g, semantics),
        contrary="Some cache mode does not open or flush the image as QEMU documents it",
    ),
    Finding(
        "pagecache",
        "Only writethrough, writeback and unsafe leave the image in the host page cache",
        from_glue(_g, pagecache),
    ),
)
