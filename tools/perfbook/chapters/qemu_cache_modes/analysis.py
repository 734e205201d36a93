"""qemu_cache_modes, analysis: frames in, frames out (no I/O, no plotting).

The chapter's Data (CacheData): every table in its natural order, and the quoted dataset's
frames every table, figure and finding starts from, computed once. The semantics table from
the classified trace and its check against QEMU's manual; summaries of the bench, the host's
and the guest's dd and the page cache; the seed's figures; rank tests between modes and hosts;
the three orderings (memory, speed, safety) beside the seed's."""

from __future__ import annotations

import math
import re
from functools import cached_property

import numpy as np
import pandas as pd

from perfbook.analysis import stats
from perfbook.data.dataset import Data

from .parse import AIO, DOC_MAPPING, FORMATS, MODES

BENCH_KEYS = ["format", "op", "depth", "flush_interval"]
RANK_REL_TOL = 0.05  # speed: medians closer than this (relative) rank as equal
RANK_MEM_TOL_MIB = 1.0  # memory: residencies closer than this rank as equal
SAFETY_LEVELS = {
    0: "no fdatasync/fsync reaches the image, not even for a guest flush",
    1: "synced on guest flushes only; written data waited dirty in the host page cache",
    2: "synced on guest flushes only; written data went to the host disk at once (O_DIRECT)",
    3: "synced after every write",
}

# -- the chapter's Data ---------------------------------------------------------------------

# Each table's natural key: the analysis must not depend on the order rows were written in
# (_f/_a/_m: format, aio and mode in FORMATS/AIO/MODES order, the order the trace runs them).
NATURAL_KEYS = {
    "bench": ["round", "position"],
    "host_dd": ["round", "position"],
    "guest_boots": ["boot"],
    "guest_dd": ["boot", "round", "position"],
    "pagecache": ["boot"],
    "pagecache_samples": ["boot", "t"],
    "trace": ["_f", "_a", "_m", "seq"],
}


def natural_order(df, name):
    if df.empty or name not in NATURAL_KEYS:
        return df
    rank = {"_f": ("format", FORMATS), "_a": ("aio", AIO), "_m": ("mode", MODES)}
    keys = NATURAL_KEYS[name]
    d = df.assign(
        **{
            k: df[c].map({v: i for i, v in enumerate(o)}).fillna(len(o))
            for k, (c, o) in rank.items()
            if k in keys
        }
    )
    return (
        d.sort_values(["host_id", "run_id", *keys], kind="stable")
        .drop(columns=[k for k in rank if k in keys])
        .reset_index(drop=True)
    )


class CacheData(Data):
    """Every table in its natural order. The quoted dataset (D.quoted): D.p (its parameters),
    D.trace, D.sem (semantics_table), D.raw (its raw, aio=threads rows by mode), D.bench and
    D.bs (bench_summary), D.boots, D.gdd, D.hdd, D.gs, D.hs (the dd summaries), D.acc (the
    accelerator label), D.pc (pagecache_table) and D.samples; D.ref, the seed's figures."""

    def prepare(self, name: str, df):
        return natural_order(df, name)

    @property
    def p(self) -> dict:
        return self.quoted.parameters

    @cached_property
    def ref(self):
        return self.reference(self.chapter.name)

    def host_of(self, df) -> list[tuple]:
        """[(host_id, description)] of the dataset df's first row comes from, for a caption."""
        host, run = df.host_id.iloc[0], df.run_id.iloc[0]
        return [
            (
                host,
                next(
                    m.host.get("description")
                    for m in self.manifests
                    if m.host_id == host and m.run_id == run
                ),
            )
        ]

    # -- the quoted dataset ------------------------------------------------------------
    @cached_property
    def trace(self):
        return self.of_quoted(self["trace"])

    @cached_property
    def sem(self):
        return semantics_table(self.trace)

    @cached_property
    def raw(self):
        s = self.sem
        return s[(s.format == "raw") & (s.aio == "threads")].set_index("mode")

    @cached_property
    def bench(self):
        return self.of_quoted(self["bench"])

    @cached_property
    def bs(self):
        return bench_summary(self.bench)

    @cached_property
    def boots(self):
        return self.of_quoted(self["guest_boots"])

    @cached_property
    def gdd(self):
        return self.of_quoted(self["guest_dd"])

    @cached_property
    def hdd(self):
        return self.of_quoted(self["host_dd"])

    @cached_property
    def gs(self):
        return guest_dd_summary(self.gdd)

    @cached_property
    def hs(self):
        return host_dd_summary(self.hdd)

    @property
    def acc(self) -> str:
        return "/".join(a.upper() for a in sorted(set(self.gs.accel)))

    @cached_property
    def pagecache(self):
        return self.of_quoted(self["pagecache"])

    @cached_property
    def pc(self):
        return pagecache_table(self.pagecache)

    @cached_property
    def mem(self):
        """pagecache_table per mode (the last boot of each), in MODES order."""
        return self.pc.drop_duplicates("mode", keep="last").set_index("mode").reindex(list(MODES))

    @cached_property
    def samples(self):
        return self.of_quoted(self["pagecache_samples"])


# -- frames in, frames out ------------------------------------------------------------------


def semantics_table(events):
    """One row per traced run (mode, format, aio): what QEMU did with the image.

    Columns: open_flags (of the fd the writes went to), o_direct, o_dsync, writes,
    syncs_write (during the writes), syncs_per_write, syncs_flush (in the flush command),
    syncs_close (after it), uring_enters, and the three derived properties in the
    documented terms: direct (O_DIRECT), writeback (no sync per write and no O_DSYNC),
    no_flush (no fdatasync/fsync reached the image at all).
    """
    keys = [k for k in ("host_id", "run_id", "mode", "format", "aio") if k in events.columns]
    rows = []
    for key, g in events.groupby(keys, sort=False):
        # each group's columns as arrays, compared there (a frame filter per property and
        # group cost most of a fleet's findings: hundreds of datasets of a dozen runs each)
        key = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        kind, phase = g["kind"].to_numpy(dtype=object), g["phase"].to_numpy(dtype=object)
        ok = (g["ret"].fillna(-1) >= 0).to_numpy()
        fl = g["flags"].to_numpy(dtype=object)
        w = np.flatnonzero((kind == "write") & ok & (phase == "write"))
        if len(w):
            flags = str(fl[w[0]])
        else:
            opens = np.flatnonzero(kind == "open")
            flags = str(fl[opens[-1]]) if len(opens) else ""
        sync_phase = phase[(kind == "sync") & ok]
        n_w = len(w)
        s_w = int((sync_phase == "write").sum())
        s_f = int((sync_phase == "flush").sum())
        s_c = int((sync_phase == "close").sum())
        o_direct = "O_DIRECT" in flags
        o_dsync = "O_DSYNC" in flags or re.search(r"\bO_SYNC\b", flags) is not None
        w_dsync = (
            int(g["dsync"].fillna(False).astype(bool).to_numpy()[w].sum()) if "dsync" in g else 0
        )
        synced_writes = o_dsync or (n_w > 0 and (s_w >= n_w or w_dsync == n_w))
        rows.append(
            {
                **key,
                "open_flags": flags,
                "o_direct": o_direct,
                "o_dsync": o_dsync,
                "writes": n_w,
                "dsync_writes": w_dsync,
                "syncs_write": s_w,
                "syncs_per_write": s_w / n_w if n_w else math.nan,
                "syncs_flush": s_f,
                "syncs_close": s_c,
                "uring_enters": int((kind == "uring").sum()),
                "direct": o_direct,
                "writeback": not synced_writes,
                "no_flush": (s_w + s_f + s_c + w_dsync) == 0 and not o_dsync,
            }
        )
    return pd.DataFrame(rows)


def check_documented(sem):
    """Compare the measured properties with QEMU's documented mapping, per row."""
    out = []
    for r in sem.itertuples():
        doc = DOC_MAPPING.get(r.mode)
        if doc is None:
            continue
        wb, direct, nf = doc
        out.append(
            {
                "mode": r.mode,
                "format": r.format,
                "aio": r.aio,
                "doc_writeback": wb,
                "doc_direct": direct,
                "doc_no_flush": nf,
                "measured_writeback": bool(r.writeback),
                "measured_direct": bool(r.direct),
                "measured_no_flush": bool(r.no_flush),
                "agrees": (wb, direct, nf) == (bool(r.writeback), bool(r.direct), bool(r.no_flush)),
            }
        )
    return pd.DataFrame(out)


def compare_modes(bench, baseline: str = "none", value: str = "mb_per_s"):
    """Every mode against `baseline` per host, run and bench configuration, with
    perfbook.analysis.stats.compare (Mann-Whitney U, Cliff's delta, Hodges-Lehmann shift)."""
    if bench is None or bench.empty:
        return bench
    return stats.compare_frame(
        bench,
        by="mode",
        value=value,
        baseline=baseline,
        within=["host_id", "run_id", *[k for k in BENCH_KEYS if k in bench]],
    )


def compare_hosts(t, keys, value: str = "mb_per_s"):
    """Each host's rows against the first host's, within `keys` (e.g. mode); `t` holds one
    dataset per host (D.of_shown)."""
    if t is None or t.empty or t.host_id.nunique() < 2:
        return t.iloc[0:0] if t is not None else t
    base = sorted(t.host_id.unique())[0]
    return stats.compare_frame(t, by="host_id", value=value, baseline=base, within=list(keys))


def _median(values) -> float:
    """stats.summarize(values).median without the rest of the summary."""
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    return float(np.median(x)) if len(x) else math.nan


def bench_summary(bench):
    """stats.summarize_frame of the rates with each configuration's median latency beside it,
    in one pass over the groups (two passes and a merge cost twice as much)."""
    keys = ["host_id", "format", "op", "depth", "flush_interval", "mode"]
    rows = []
    for key, g in bench[keys + ["mb_per_s", "mean_latency_us"]].groupby(keys, sort=True):
        rows.append(
            {
                **dict(zip(keys, key)),
                **stats.summarize(g["mb_per_s"]).as_dict(),
                "latency_us": _median(g["mean_latency_us"]),
            }
        )
    t = pd.DataFrame(rows)
    return t[keys + [c for c in t.columns if c not in keys]]  # no group: KeyError, as before


def guest_dd_table(dd):
    """MB/s per run, with the cost of the two time stamps (the 'stamps' variant of the same
    boot, median) taken out."""
    d = dd[dd["round"] >= 0].copy()
    d["elapsed_us"] = d["t1_us"] - d["t0_us"]
    stamps = d[d.variant == "stamps"].groupby(["host_id", "run_id", "boot"])["elapsed_us"].median()
    d = d[d.variant != "stamps"].copy()
    d["stamp_us"] = [stamps.get((h, r, b), 0.0) for h, r, b in zip(d.host_id, d.run_id, d["boot"])]
    d["mb_per_s"] = d["bytes"] / ((d["elapsed_us"] - d["stamp_us"]).clip(lower=1) / 1e6) / 1e6
    d["mb_per_s_raw"] = d["bytes"] / (d["elapsed_us"] / 1e6) / 1e6
    return pd.DataFrame(d)


def guest_dd_summary(dd):
    d = guest_dd_table(dd)
    return stats.summarize_frame(d, ["host_id", "accel", "mode", "variant"], "mb_per_s")


def host_dd_summary(hd):
    return stats.summarize_frame(hd, ["host_id", "variant"], "mb_per_s")


def pagecache_table(pc):
    """Host page-cache growth per guest run, in MiB."""
    t = pc.copy()
    t["cached_growth_mib"] = (t.cached_peak_kb - t.cached_base_kb) / 1024
    t["dirty_growth_mib"] = (t.dirty_peak_kb - t.dirty_base_kb) / 1024
    t["image_resident_peak_mib"] = t.image_resident_peak_kb / 1024
    t["writeback_peak_mib"] = t.writeback_peak_kb / 1024
    return t


def seed_dd(reference):
    """The seed's dd table, tidy: source, mode, variant, mb_per_s, low, high."""
    r = reference[reference.kind == "dd"]
    out = r[["mode", "item", "value", "value_low", "value_high"]].rename(
        columns={"item": "variant", "value": "mb_per_s", "value_low": "low", "value_high": "high"}
    )
    for c in ("mb_per_s", "low", "high"):
        out[c] = pd.to_numeric(out[c], errors="coerce")
    return out.reset_index(drop=True)


def dd_comparison(guest_summary, host_summary, reference, accel_label: str):
    """Seed vs today, one row per (source, mode incl. 'host', variant)."""
    rows = []
    dd = reference[reference.kind == "dd"]
    m = re.search(r"qemu (\S+?),", dd.environment.iloc[0]) if len(dd) else None
    label = (
        f"seed {dd.date.iloc[0][:4]}" + (f" (QEMU {m.group(1)})" if m else "")
        if len(dd)
        else "seed"
    )
    for r in seed_dd(reference).itertuples():
        rows.append(
            {
                "source": label,
                "mode": r.mode,
                "variant": r.variant,
                "mb_per_s": r.mb_per_s,
                "low": r.low,
                "high": r.high,
            }
        )
    for r in host_summary.itertuples():
        rows.append(
            {
                "source": f"this host, {accel_label} guest",
                "mode": "host",
                "variant": r.variant,
                "mb_per_s": r.median,
                "low": r.ci_low,
                "high": r.ci_high,
            }
        )
    for r in guest_summary.itertuples():
        rows.append(
            {
                "source": f"this host, {accel_label} guest",
                "mode": r.mode,
                "variant": r.variant,
                "mb_per_s": r.median,
                "low": r.ci_low,
                "high": r.ci_high,
            }
        )
    return pd.DataFrame(rows)


def order_with_ties(
    values: dict[str, tuple[float, float, float]], ascending=True, rel_tol: float = RANK_REL_TOL
) -> str:
    """'a < b = c' from {mode: (median, ci_low, ci_high)}: neighbours are written as equal
    when their intervals overlap or their medians differ by less than rel_tol (relative)."""
    items = sorted(values.items(), key=lambda kv: kv[1][0], reverse=not ascending)
    out = ""
    prev = None
    for name, (med, lo, hi) in items:
        if prev is None:
            out = name
        else:
            pmed, plo, phi = prev
            overlap = not (hi < plo or lo > phi)
            close = abs(med - pmed) < rel_tol * max(abs(med), abs(pmed))
            out += (" = " if overlap or close else (" < " if ascending else " > ")) + name
        prev = (med, lo, hi)
    return out


def parse_order(text: str) -> list[list[str]]:
    """'a < b = c < d' -> [[a], [b, c], [d]] (ascending groups)."""
    groups = []
    for part in re.split(r"\s*<\s*", text.strip()):
        groups.append([x.strip() for x in part.split("=") if x.strip()])
    return groups


def pairwise_disagreements(seed_order: str, ours: str) -> list[str]:
    """Pairs the two orderings rank differently (one says a < b, the other b < a or a = b)."""

    def rank(order):
        return {m: i for i, g in enumerate(parse_order(order)) for m in g}

    a, b = rank(seed_order), rank(ours)
    common = [m for m in a if m in b]
    out = []
    for i, x in enumerate(common):
        for y in common[i + 1 :]:
            sa = (a[x] > a[y]) - (a[x] < a[y])
            sb = (b[x] > b[y]) - (b[x] < b[y])
            if sa != sb:

                def rel(s, u, v):
                    return f"{u} {'<' if s < 0 else '>' if s > 0 else '='} {v}"

                out.append(f"2013: {rel(sa, x, y)}, today: {rel(sb, x, y)}")
    return out


def order_by_value(values: dict[str, float], tol: float) -> str:
    """'a < b = c' from {mode: value}, ascending; neighbours closer than `tol` are equal."""
    items = sorted(values.items(), key=lambda kv: kv[1])
    out, prev = "", None
    for name, v in items:
        out = name if prev is None else out + (" = " if abs(v - prev) < tol else " < ") + name
        prev = v
    return out


def safety_levels(sem, pc) -> dict[str, int]:
    """A level per mode from measured facts only: the trace (raw, aio=threads) and the
    host's Dirty growth while the guest wrote (more than half the guest disk = 'waited dirty')."""
    s = sem[(sem.format == "raw") & (sem.aio == "threads")].drop_duplicates("mode", keep="last")
    dirty = {}
    if pc is not None and not pc.empty:
        t = pagecache_table(pc)
        dirty = (
            t.groupby("mode")["dirty_growth_mib"].median() / t.groupby("mode")["disk_mib"].median()
        ).to_dict()
    out = {}
    for r in s.itertuples():
        if r.no_flush:
            out[r.mode] = 0
        elif not r.writeback:
            out[r.mode] = 3
        elif r.mode in dirty and dirty[r.mode] >= 0.5:
            out[r.mode] = 1
        elif r.direct:
            out[r.mode] = 2
        else:
            out[r.mode] = 1
    return out


def rankings(reference, sem=None, pc=None, guest_summary=None, bench_summary=None):
    """The seed's three orderings next to the ones today's data gives, and where they differ."""
    ref = reference[reference.kind == "ranking"].set_index("item")["value"].to_dict()
    rows = []

    def add(criterion, evidence, ours):
        seed = ref.get(criterion, "")
        dis = pairwise_disagreements(seed, ours) if ours else []
        rows.append(
            {
                "criterion": criterion,
                "evidence today": evidence,
                "2013 (seed)": seed,
                "today": ours or "not measured",
                "pairs ranked differently": len(dis) if ours else None,
                "differences": "; ".join(dis),
            }
        )

    if pc is not None and not pc.empty:
        t = pagecache_table(pc).groupby("mode")["image_resident_peak_mib"].median().to_dict()
        add(
            "memory",
            "host page cache held for the guest's image (mincore), MiB; "
            f"equal if within {RANK_MEM_TOL_MIB:g} MiB",
            order_by_value(t, RANK_MEM_TOL_MIB),
        )
    if guest_summary is not None and not guest_summary.empty:
        for variant in ("direct", "normal"):
            g = guest_summary[guest_summary.variant == variant]
            vals = {r.mode: (r.median, r.ci_low, r.ci_high) for r in g.itertuples()}
            acc = "/".join(sorted(set(g.accel))).upper()
            add(
                "performance",
                f"guest dd {'oflag=direct' if variant == 'direct' else 'without oflag'} "
                f"({acc} guest), MB/s; equal if the {stats.ci_label(g['n'])}s overlap or the medians differ by "
                f"< {RANK_REL_TOL:.0%}",
                order_with_ties(vals),
            )
    if bench_summary is not None and not bench_summary.empty:
        b = bench_summary[
            (bench_summary.format == "raw")
            & (bench_summary.op == "write")
            & (bench_summary.depth == bench_summary.depth.min())
            & (bench_summary.flush_interval == 0)
        ]
        vals = {r.mode: (r.median, r.ci_low, r.ci_high) for r in b.itertuples()}
        add(
            "performance",
            f"qemu-img bench, raw, 64 KiB writes at depth {int(b.depth.min()) if len(b) else 1}, "
            f"no flushes, MB/s; equal if the {stats.ci_label(b['n'])}s overlap or the medians differ by "
            f"< {RANK_REL_TOL:.0%}",
            order_with_ties(vals),
        )
    if sem is not None and not sem.empty:
        lv = safety_levels(sem, pc)
        add(
            "safety",
            "level from the trace and the host's Dirty growth (see the levels table)",
            order_by_value({m: float(v) for m, v in lv.items()}, 0.5),
        )
    return pd.DataFrame(rows)
