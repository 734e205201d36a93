"""qemu_cache_modes, tables: the chapter's tables, ready to display (D: analysis.CacheData), and
the columns the runs table adds for it."""

from __future__ import annotations

import pandas as pd

from . import analysis as A
from .analysis import SAFETY_LEVELS
from .parse import MODES, PARTS

_MODE_RANK = {m: i for i, m in enumerate(MODES)}


def run_columns(m, data) -> dict:
    """What the runs table adds for dataset m (its manifest; `data`, its Data, is not read):
    QEMU's version, the repetition, the parts."""
    return {
        "QEMU": m["tools"].get("qemu-img", "").split("(")[0].strip(),
        "repetition": "adaptive (bench, host dd)" if "repetition" in m["tables"] else "fixed",
        "parts": ", ".join(
            x
            for x in PARTS
            if x in m["tables"]
            or (x == "semantics" and "trace" in m["tables"])
            or (x == "guest" and "guest_dd" in m["tables"])
        ),
    }


def semantics(D):
    """One row per traced qemu-io run, and whether it matches the manual's mapping."""
    sem = D.sem
    show = sem[
        [
            "mode",
            "format",
            "aio",
            "open_flags",
            "writes",
            "syncs_write",
            "syncs_per_write",
            "syncs_flush",
            "syncs_close",
            "direct",
            "writeback",
            "no_flush",
        ]
    ].copy()
    show["matches the manual"] = A.check_documented(sem)["agrees"].values
    return show.sort_values(
        ["format", "aio", "mode"],
        key=lambda s: s.map(_MODE_RANK) if s.name == "mode" else s,
        kind="stable",
    ).reset_index(drop=True)


def seed_semantics(D):
    """The seed's three switches per mode against the traced ones, and the guest's cache_type."""
    ref, raw, boots = D.ref, D.raw, D.boots
    seed_sem = (
        ref[ref.kind == "semantics"].pivot(index="mode", columns="item", values="value").astype(int)
    )
    gct = (
        boots.drop_duplicates("mode", keep="last").set_index("mode")["guest_cache_type"]
        if not boots.empty
        else pd.Series(dtype=str)
    )

    def onoff(seed, ours):
        return f"{'on' if seed else 'off'} / {'on' if ours else 'off'}"

    rows = []
    for m in MODES:
        r = raw.loc[m]
        seed = (
            bool(seed_sem.loc[m, "host_page_cache"]),
            bool(seed_sem.loc[m, "disk_write_cache"]),
            bool(seed_sem.loc[m, "no_flush"]),
        )
        ours = (not r.direct, bool(r.writeback), bool(r.no_flush))
        rows.append(
            {
                "mode": m,
                "host page cache (2013 / traced)": onoff(seed[0], ours[0]),
                "disk write cache (2013 / traced)": onoff(seed[1], ours[1]),
                "no flush (2013 / traced)": onoff(seed[2], ours[2]),
                "guest's cache_type": gct.get(m, "not measured"),
                "same as 2013": seed == ours,
            }
        )
    return pd.DataFrame(rows)


def bench_table(D):
    """The bench's summary, one row per configuration (format, operation, depth, flush interval)
    and one column per mode: median MB/s [95 % CI]. The per-run rows (cv, latency) stay in
    bench.csv, in each dataset's archive (the chapter's part of the appendix)."""
    tab = D.bs.assign(
        cell=[
            f"{m:.0f} [{lo:.0f}, {hi:.0f}]"
            for m, lo, hi in zip(D.bs["median"], D.bs["ci_low"], D.bs["ci_high"])
        ]
    )
    wide = tab.pivot_table(
        index=["format", "op", "depth", "flush_interval"],
        columns="mode",
        values="cell",
        aggfunc="first",
    )
    wide = wide[[m for m in MODES if m in wide.columns]]
    wide.columns.name = "MB/s [95 % CI]"
    return wide


def main_bench(CB, d1: int):
    """The comparisons of raw writes at depth d1 without flushes."""
    if not len(CB):
        return CB
    return CB[
        (CB.format == "raw") & (CB.op == "write") & (CB.depth == d1) & (CB.flush_interval == 0)
    ]


def bench_comparisons(D):
    """Each mode against none, per bench configuration (rank tests)."""
    CB = A.compare_modes(D.bench)
    if not len(CB):
        return "no comparisons"
    return CB[
        [
            "format",
            "op",
            "depth",
            "flush_interval",
            "mode",
            "n_a",
            "n_b",
            "rel_shift",
            "rel_low",
            "rel_high",
            "p_value",
            "cliffs_delta",
            "verdict",
        ]
    ].round(4)


def dd_comparison(D):
    """The seed's dd figures beside the host's and the guest's, mode ordered host first."""
    comp = A.dd_comparison(D.gs, D.hs, D.ref, D.acc)
    comp["mode"] = pd.Categorical(comp["mode"], ["host", *MODES], ordered=True)
    return comp


def dd_table(D):
    """The seed's dd test, 2013 against this host, one column per variant and source."""
    comp = dd_comparison(D)
    wide = comp.assign(
        value=[
            f"{v:,.1f}" if v == v else f"{lo:,.0f}–{hi:,.0f}"
            for v, lo, hi in zip(comp.mb_per_s, comp.low, comp.high)
        ]
    )
    wide = wide.pivot_table(
        index="mode", columns=["variant", "source"], values="value", aggfunc="first", observed=True
    )
    return wide.reindex(columns=["normal", "direct"], level=0)


def guest_comparisons(D):
    """With oflag=direct, each mode against none inside the guest (rank tests)."""
    CG = A.compare_modes(A.guest_dd_table(D.gdd).query("variant == 'direct'"))
    if not len(CG):
        return "no comparisons"
    return CG[
        [
            "mode",
            "n_a",
            "n_b",
            "median_a",
            "median_b",
            "rel_shift",
            "p_value",
            "cliffs_delta",
            "verdict",
        ]
    ].round(4)


def memory_table(D):
    """The host's memory per mode while the guest wrote, and the guest's own copy."""
    mem = D.mem
    gb = D.boots.drop_duplicates("mode", keep="last").set_index("mode")
    return pd.DataFrame(
        {
            "guest disk MiB": mem.disk_mib,
            "guest wrote MiB (all runs)": mem.guest_wrote_mib,
            "host cache of the image, peak MiB (mincore)": mem.image_resident_peak_mib,
            "host Dirty growth, MiB": mem.dirty_growth_mib,
            "host Writeback peak, MiB": mem.writeback_peak_mib,
            "host Cached growth, MiB (all files)": mem.cached_growth_mib,
            "guest's own copy (Buffers), MiB": gb.reindex(list(MODES)).guest_buffers_kb / 1024,
        }
    ).round(1)


def rankings_table(D):
    """The seed's three orderings next to today's, and where they differ."""
    return A.rankings(D.ref, D.sem, D.pagecache, D.gs, D.bs)


def safety_table(D):
    """The safety level of each mode, from the measurements."""
    lv = A.safety_levels(D.sem, D.pagecache)
    return (
        pd.DataFrame(
            [
                {
                    "mode": m,
                    "level": lv.get(m),
                    "meaning (from the measurements)": SAFETY_LEVELS[lv[m]],
                }
                for m in MODES
                if m in lv
            ]
        )
        .sort_values("level", kind="stable")
        .reset_index(drop=True)
    )


def recommendations(D):
    """The seed's recommendations, as it gave them."""
    ref = D.ref
    return ref[ref.kind == "recommendation"][["item", "value", "note"]].rename(
        columns={
            "item": "the seed's requirement",
            "value": "the seed's choice",
            "note": "the seed's reason",
        }
    )


# -- hosts side by side ---------------------------------------------------------------------
def shown_bench(D):
    """The shown datasets' raw writes at the smallest depth without flushes (one dataset per host)."""
    BH = D.of_shown(D["bench"])
    return BH[
        (BH.format == "raw")
        & (BH.op == "write")
        & (BH.depth == BH.depth.min())
        & (BH.flush_interval == 0)
    ]


def hosts_table(D):
    """The bench's raw writes per mode and host: median [CI]."""
    bsh = A.bench_summary(shown_bench(D))
    side = bsh.assign(
        value=bsh.apply(lambda r: f"{r['median']:,.0f} [{r.ci_low:,.0f}, {r.ci_high:,.0f}]", axis=1)
    )
    return side.pivot_table(
        index="mode", columns="host_id", values="value", aggfunc="first"
    ).reindex(list(MODES))


def host_compare(D):
    """Each host against the first on the bench's raw writes per mode (empty: one host)."""
    return A.compare_hosts(shown_bench(D), keys=["mode"])


def host_comparisons(D):
    """host_compare() ready to display, or None with a single host."""
    CHB = host_compare(D)
    if not len(CHB):
        return None
    return CHB[
        [
            "mode",
            "host_id",
            "baseline",
            "n_a",
            "n_b",
            "median_a",
            "median_b",
            "rel_shift",
            "p_value",
            "cliffs_delta",
            "verdict",
        ]
    ].round(4)
