"""virtio_blk_latency: the chapter's tables, from the quoted dataset (D: analysis.VirtioData).

Each `*_table(D)` is what a notebook cell shows; the frames behind them (same names without
`_table`) also feed the prose values (prose.py); the costly ones are computed once per D."""

from __future__ import annotations

import math

import pandas as pd

from perfbook.analysis import stats

from . import analysis as A


# -- one time axis ---------------------------------------------------------------------------
def alignment(D):
    return D.once("tables:alignment", lambda: A.alignment_table(D.jobs))


def alignment_table(D):
    return alignment(D).round(1)


# -- the seed's tables ---------------------------------------------------------------------
def by_method(D) -> dict:
    """{method label: cumulative table}: one layer per boot (when measured) and all at once."""
    out = {"all at once": D.cum1}
    return {"one layer per boot": D.cum, **out} if D.have_seed_method else out


def cumulative_table(D):
    cumc = A.compare_cumulative(D.ref, by_method(D))
    # a fixed uuid: the table's HTML ids (T_<uuid>_...) stay the same at every refresh
    return (
        cumc.style.set_uuid("vbl-cumulative")
        .format({k: "{:,.0f}" for k in cumc.columns if k.endswith("(ns)")}, na_rep="—")
        .hide(axis="index")
    )


def delta_table(D):
    delc = A.compare_delta(D.ref, {k: A.delta_table(t) for k, t in by_method(D).items()})
    return (
        delc.style.set_uuid("vbl-delta")
        .format(
            {
                k: ("{:,.0f}" if k.endswith("(ns)") else "{:.1f}")
                for k in delc.columns
                if k != "layer"
            },
            na_rep="—",
        )
        .hide(axis="index")
    )


def control(D):
    """Mean guest benchmark (µs) of aio=threads, sequential reads, per variant."""
    iv = D.iv
    gb = iv[(iv.warm == 0) & (iv.kind == "guest") & (iv.aio == "threads") & (iv.pattern == "seq")]
    return gb.groupby("variant").guest_benchmark.mean() / 1000


def control_table(D):
    return control(D).round(1).rename("guest benchmark, mean (µs)").to_frame()


def boot_benchmarks(D):
    """Every guest boot's median guest benchmark (ns)."""
    return D.once(
        "tables:boot_benchmarks",
        lambda: A.boot_medians(D.iv[D.iv.kind == "guest"], "guest_benchmark"),
    )


# -- per-request distributions -----------------------------------------------------------------
def percentiles(D):
    allv = D.all_layers
    pct = A.percentiles(allv[allv.kind == "guest"], A.KEYS[:-1], by=("aio",))
    return pd.concat(
        [pct, A.percentiles(allv[allv.kind == "host"].assign(aio="(host)"), ["host_benchmark"])]
    )


def percentile_table(D):
    return percentiles(D).round(1).reset_index(drop=True)


# -- aio modes -----------------------------------------------------------------------------------
def untraced(D):
    """The untraced boots' guest benchmark medians, in µs."""
    bm = boot_benchmarks(D)
    return bm[bm.variant == "plain"].assign(us=lambda d: d.guest_benchmark / 1000)


def aio(D):
    """Per aio mode: the untraced guest benchmark over boots, and the all-layer boots' layers."""
    plain_b, iv = untraced(D), D.iv
    rows = []
    for a in D.p["aio"]:
        s_ = stats.summarize(plain_b[plain_b.aio == a].us)
        rows.append(
            {
                "aio": a,
                "untraced boots": s_.n,
                "guest benchmark, median of boot medians (µs)": s_.median,
                "CI": f"{s_.ci_low:.1f}–{s_.ci_high:.1f}" if s_.n else "—",  # no untraced boot
                "boot-to-boot CV (%)": 100 * s_.cv,
            }
        )
        for k in ("qemu_virtio", "qemu_aio", "host_syscall", "host_block"):
            bk = A.boot_medians(iv[(iv.kind == "guest") & (iv.variant == "all") & (iv.aio == a)], k)
            rows[-1][f"{A.LAYER_LABELS[k]} (µs)"] = bk[k].median() / 1000 if len(bk) else math.nan
    t = pd.DataFrame(rows)
    return t.rename(columns={"CI": stats.ci_label(t["untraced boots"])})  # its real coverage


def aio_table(D):
    return aio(D).round(1)


def aio_tests(D):
    """Each aio mode against threads on the untraced boots' medians (empty: too few boots)."""
    plain_b = untraced(D)
    enough = plain_b.groupby("aio").size().min() >= 2
    return (
        stats.compare_frame(plain_b, "aio", "us", baseline="threads") if enough else pd.DataFrame()
    )


def aio_tests_table(D):
    cmps = aio_tests(D)
    if not len(cmps):
        return "fewer than 2 untraced boots per aio mode"
    return cmps[
        [
            "aio",
            "baseline",
            "n_a",
            "n_b",
            "median_a",
            "median_b",
            "shift",
            "shift_low",
            "shift_high",
            "p_value",
            "cliffs_delta",
            "verdict",
        ]
    ].round(3)


def syscalls(D):
    allv = D.all_layers
    return A.syscall_summary(allv[allv.kind == "guest"])


def syscall_table(D):
    return syscalls(D).round(1)


# -- one request ----------------------------------------------------------------------------------
def lifecycle(D):
    """The median request of the first all-layer aio=threads boot, event by event (µs)."""
    lc = A.lifecycle(D.an, job=D.first_all_layer_boot("threads"), n=1)
    show = lc[["event", "layer", "runs in", "t_ns", "since_prev_ns"]].copy()
    show["t (µs)"] = show.pop("t_ns") / 1000
    show["since previous (µs)"] = show.pop("since_prev_ns") / 1000
    return show


def lifecycle_table(D):
    return lifecycle(D).round(1).reset_index(drop=True)


def seed_lifecycle(D):
    ref = D.ref
    sl = (
        ref[ref.kind == "lifecycle"]
        .sort_values("order", kind="stable")[["item", "thread", "value"]]
        .rename(
            columns={
                "item": "seed event (2010, aio=native)",
                "thread": "thread",
                "value": "since previous (µs)",
            }
        )
    )
    sl["t (µs)"] = sl["since previous (µs)"].astype(float).cumsum()
    return sl


def seed_lifecycle_table(D):
    return seed_lifecycle(D).reset_index(drop=True)


# -- sequential against random ----------------------------------------------------------------------
def patterns(D):
    """Median per layer (µs) of the all-layer aio=threads boots, per access pattern."""
    rows = []
    for pat in D.p["patterns"]:
        cm = A.cumulative_table(D.iv, "one_run", aio="threads", pattern=pat).set_index("key")
        rows.append(
            {
                "pattern": pat,
                **{
                    A.LAYER_LABELS[k]: cm.loc[k, "median_ns"] / 1000
                    for k in (
                        "guest_benchmark",
                        "guest_virtio_pci",
                        "qemu_aio",
                        "host_block",
                        "host_benchmark",
                    )
                },
            }
        )
    return pd.DataFrame(rows).set_index("pattern")


def pattern_table(D):
    return patterns(D).round(1)
