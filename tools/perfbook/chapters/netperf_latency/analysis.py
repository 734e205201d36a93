"""The chapter's analysis: loaded frames in, frames out (no I/O, no plotting). Cells are
(host_id, path, proto, pin); a run is one instrument's run of one cell in one round. With
NetperfData, the chapter's datasets (perfbook.data.dataset.Data) with the quoted dataset's
frames, and the seed's 2013 numbers (data/reference/netperf_latency.csv) beside ours."""

from __future__ import annotations

import dataclasses
import math
from functools import cached_property

import numpy as np
import pandas as pd

from perfbook.analysis.stats import Comparison, caption, compare_frame, hosts_of, median_ci
from perfbook.data.dataset import Data, in_order
from perfbook.data.machine import host_pairs

from .parse import (
    CELL,
    PCT_ORDER,
    REL_TOL,
    SCHED_PINS,
    SCHED_ROLES,
    bin_edges_us,
    netperf_bucket_edges,
    netperf_bucket_index,
    netperf_bucket_width_us,
    netperf_in_rank_bucket,
)


def _cumulative(hist):
    """pooled(hist) (cells in order, bins ascending in each), each row's count up to and including
    its bin within its cell, its cell's total, and the row where each cell starts: every cell at
    once, not one frame per cell (a fleet's shown datasets have a thousand cells)."""
    p = pooled(hist)
    keys = [p[c].to_numpy() for c in CELL]
    new = np.ones(len(p), dtype=bool)
    new[1:] = np.any([k[1:] != k[:-1] for k in keys], axis=0)
    starts = np.flatnonzero(new)
    sizes = np.diff(np.append(starts, len(p)))
    count = p["count"].to_numpy()
    cum = np.cumsum(count)
    cum = cum - np.repeat(cum[starts] - count[starts], sizes)
    return p, cum, np.repeat(cum[starts + sizes - 1], sizes), starts


def hist_quantiles(hist, qs=(0.5, 0.9, 0.99, 0.999)):
    """Pooled quantiles per cell from the log-binned counts (geometric bin middle): the q-th is
    the middle of the first bin whose cumulative count reaches q of the cell's total."""
    p, cum, tot, starts = _cumulative(hist)
    if not len(p):
        return pd.DataFrame()
    lo, hi = bin_edges_us(p["bin"].to_numpy())
    mid = np.sqrt(lo * hi)
    out = p[CELL].iloc[starts].reset_index(drop=True)
    out["n"] = tot[starts].astype(int)
    for q in qs:
        # per cell, how many of its bins stay below q * total: np.searchsorted over the cell
        out[f"q{q:g}"] = mid[starts + np.add.reduceat((cum < q * tot).astype(np.int64), starts)]
    return out


def medians(g, cols):
    """g[cols].median() of a groupby, NaN where a group has a NaN: np.median's value, which
    the per-group loops it replaces took (a groupby's median skips NaN)."""
    return g[cols].median().where(g[cols].count().eq(g.size(), axis=0))


def both_tools(runs):
    """The runs of the rounds in which a cell ran with both instruments: the default runs a
    findings' cell with rrbench alone after its first rounds (collect.cell_tools), and the two
    instruments are compared on the same rounds, not rrbench's many against netperf's few."""
    keys = [c for c in (*CELL, "run_id", "rep") if c in runs]
    n = runs.groupby(keys)["tool"].transform("nunique")
    return runs[n.to_numpy() >= 2]


def crossval(runs):
    """Our distribution's P50/P90/P99 against netperf's, per cell, on the rounds that ran both
    (both_tools), with the tolerance: each tool's median over its runs (NaN if a run has none, as np.median gives), and the widest
    range of that percentile over either tool's runs."""
    pcs = ["p50", "p90", "p99"]
    cols = [f"{pc}_us" for pc in pcs]
    runs = both_tools(runs)
    med, rng = {}, {}
    for tool in ("rrbench", "netperf"):
        g = runs[runs["tool"] == tool].groupby(CELL)
        med[tool] = medians(g, cols)
        rng[tool] = g[cols].max() - g[cols].min()
    if med["rrbench"].empty or med["netperf"].empty:
        return pd.DataFrame()
    m = (
        med["rrbench"]
        .reset_index()
        .merge(med["netperf"].reset_index(), on=CELL, suffixes=("_ours", "_netperf"))
    )
    if m.empty:
        return pd.DataFrame()
    at = pd.MultiIndex.from_frame(m[CELL])
    a = m[[f"{c}_ours" for c in cols]].to_numpy(dtype=float)
    b = m[[f"{c}_netperf" for c in cols]].to_numpy(dtype=float)
    ra, rb = (
        rng[t].reindex(at, fill_value=0.0).to_numpy(dtype=float) for t in ("rrbench", "netperf")
    )
    spread = np.where(rb > ra, rb, ra)  # max(ra, rb), as Python's max takes it
    rel = np.array([REL_TOL[pc] for pc in pcs]) * a
    tol = (netperf_bucket_width_us(b) + 1.0) + np.where(spread > rel, spread, rel)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel_diff = np.where(a != 0, (b - a) / a, math.nan)
    out = m[CELL].loc[m.index.repeat(len(pcs))].reset_index(drop=True)
    out["percentile"] = [pc.upper() for pc in pcs] * len(m)
    for name, v in (
        ("ours_us", a),
        ("netperf_us", b),
        ("diff_us", b - a),
        ("rel_diff", rel_diff),
        ("run_range_us", spread),
        ("tolerance_us", tol),
    ):
        out[name] = v.ravel()
    out["agree"] = np.abs(b - a).ravel() <= tol.ravel()
    return out


def quantization(runs):
    """Same transactions, two estimators: exact percentiles of our samples vs the
    percentiles netperf's histogram would report for them (nq_*).

    exact_us interpolates between samples (numpy's default), netperf takes a rank, so on a
    sparse tail the two can sit buckets apart: error_us is a result, not a bound. The exact
    check is against our sample at netperf's rank (nr_*, RANK_RULE): in_rank_bucket must be
    True wherever nr_* was recorded (datasets before it have <NA>)."""
    r = runs[runs["tool"] == "rrbench"].copy()
    out = []
    for pc in ("p50", "p90", "p99"):
        d = r[CELL + ["rep"]].copy()
        d["percentile"] = pc.upper()
        d["exact_us"] = r[f"{pc}_us"]
        d["netperf_style_us"] = r[f"nq_{pc}_us"]
        d["error_us"] = d["netperf_style_us"] - d["exact_us"]
        d["bucket_us"] = netperf_bucket_width_us(d["exact_us"])
        nr = r[f"nr_{pc}_us"] if f"nr_{pc}_us" in r else pd.Series(math.nan, index=r.index)
        d["rank_us"] = nr
        idx = np.where(nr.notna(), netperf_bucket_index(nr.fillna(-1).astype(np.int64)), -1)
        d["rank_bucket_lo_us"], d["rank_bucket_hi_us"] = netperf_bucket_edges(idx)
        d["in_rank_bucket"] = pd.array(
            netperf_in_rank_bucket(d["netperf_style_us"], nr), dtype="boolean"
        )
        d.loc[nr.isna().to_numpy(), "in_rank_bucket"] = pd.NA
        out.append(d)
    return pd.concat(out, ignore_index=True)


def pooled(hist):
    """Counts per cell and bin, summed over repetitions and datasets of one host."""
    return hist.groupby(CELL + ["bin"], as_index=False)["count"].sum()


def ladder(runs, hist):
    """Per cell: pooled P50/P90/P99/P99.9 of every recorded transaction (from the
    log bins, relative resolution 1.2 %), the largest single latency, and n."""
    q = hist_quantiles(hist, (0.5, 0.9, 0.99, 0.999))  # it pools the cells itself
    g = runs[runs["tool"] == "rrbench"].groupby(CELL)
    rr = pd.DataFrame(
        {"max_us": g["max_us"].max(), "runs": g.size(), "rate_tps": g["rate_tps"].median()}
    )
    t = q.merge(rr.reset_index(), on=CELL)
    t = t.rename(
        columns={"q0.5": "P50", "q0.9": "P90", "q0.99": "P99", "q0.999": "P99.9", "max_us": "max"}
    )
    return t[CELL + ["runs", "n", "rate_tps"] + PCT_ORDER]


def ladder_long(lad):
    return lad.melt(
        id_vars=CELL, value_vars=PCT_ORDER, var_name="percentile", value_name="latency_us"
    )


def ccdf(hist):
    """Exceedance curve per cell: fraction of transactions slower than each bin's upper edge."""
    p, cum, tot, _ = _cumulative(hist)
    if not len(p):
        raise ValueError("no histogram rows to draw an exceedance curve from")
    d = pd.DataFrame(
        {"latency_us": bin_edges_us(p["bin"].to_numpy())[1], "slower_than": 1.0 - cum / tot}
    )
    for c in CELL:
        d[c] = p[c].to_numpy()
    return d[d["slower_than"] > 0].reset_index(drop=True)


def pin_effect(lad):
    """P50 and P99 of each pinning mode relative to 'none', per path and protocol."""
    base = lad[lad["pin"] == "none"].set_index(["host_id", "path", "proto"])
    t = lad.set_index(["host_id", "path", "proto"]).copy()
    for c in ("P50", "P99"):
        t[f"{c}_vs_none"] = t[c] / base[c].reindex(t.index).to_numpy()
    return t.reset_index()[CELL + ["P50", "P50_vs_none", "P99", "P99_vs_none"]]


def ping_vs_rr(runs, ping):
    """ping -f (the echo answered inside the kernel) beside the RR round trip, per path."""
    rr = runs[(runs["tool"] == "rrbench") & (runs["pin"] == "none")]
    g = rr.groupby(["host_id", "path", "proto"], as_index=False).agg(
        rr_min_us=("min_us", "median"), rr_mean_us=("mean_us", "median")
    )
    pg = ping.groupby(["host_id", "path"], as_index=False).agg(
        ping_min_us=("min_us", "median"),
        ping_mean_us=("mean_us", "median"),
        pings=("received", "sum"),
    )
    t = g.merge(pg, on=["host_id", "path"])
    t["rr_over_ping_mean"] = t["rr_mean_us"] / t["ping_mean_us"]
    return t


def netperf_summary(runs):
    """netperf's own numbers per cell: median over runs, with the distribution-free CI of
    that median as 'lo-hi' (perfbook.analysis.stats.median_ci; with few runs it is [min, max] and its
    real coverage is given)."""
    r = runs[runs["tool"] == "netperf"]
    rows = []
    for key, g in r.groupby(CELL, sort=True):
        row = dict(zip(CELL, key))
        row["runs"] = len(g)
        row["req/resp B"] = f"{int(g['request_size'].iloc[0])}/{int(g['response_size'].iloc[0])}"
        for c, name in (
            ("rate_tps", "trans/s"),
            ("min_us", "MIN"),
            ("mean_us", "MEAN"),
            ("p50_us", "P50"),
            ("p90_us", "P90"),
            ("p99_us", "P99"),
            ("max_us", "MAX"),
            ("std_us", "STDDEV"),
        ):
            lo, hi, cov = median_ci(g[c])
            fmt = (lambda v: f"{v:,.0f}") if c in ("rate_tps", "max_us") else (lambda v: f"{v:g}")
            row[name] = f"{fmt(float(np.median(g[c])))} [{fmt(lo)}-{fmt(hi)}]"
        row["CI coverage"] = round(cov, 2)
        rows.append(row)
    return pd.DataFrame(rows)


def none_vs_pinned(runs, tool="rrbench"):
    """Per path/protocol: the per-run P50 of the unpinned runs (min, max) beside the
    median P50 of 'same' and 'split'. An unpinned run lands wherever the scheduler puts
    client and server, so its P50 can sit near either pinned mode."""
    r = runs[runs["tool"] == tool]
    rows = []
    for (h, path, proto), g in r.groupby(["host_id", "path", "proto"], sort=True):
        row = {"host_id": h, "path": path, "proto": proto}
        nn = g[g["pin"] == "none"]["p50_us"]
        row["none_p50_min"], row["none_p50_max"] = float(nn.min()), float(nn.max())
        for pin in ("same", "split"):
            v = g[g["pin"] == pin]["p50_us"]
            row[f"{pin}_p50"] = float(np.median(v)) if len(v) else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def max_clusters(runs, resolution_us=100.0):
    """How the per-run maxima (both tools) group when rounded to `resolution_us`."""
    v = (runs["max_us"] / resolution_us).round() * resolution_us
    counts = v.value_counts(sort=False).rename_axis("max_us_rounded").reset_index(name="runs")
    return counts.sort_values(
        ["runs", "max_us_rounded"], ascending=[False, True], kind="stable"
    ).reset_index(drop=True)


def pin_comparison(runs, tool="rrbench"):
    """split and same against none, per dataset, path and protocol, on the per-run P50
    (perfbook.analysis.stats.compare: Mann-Whitney, Cliff's delta, Hodges-Lehmann shift)."""
    within = ["host_id", "run_id", "path", "proto"]
    t = compare_frame(
        runs[runs["tool"] == tool], by="pin", value="p50_us", baseline="none", within=within
    )
    if t.empty:  # fewer than two runs per cell: the same columns, no rows
        t = t.reindex(
            columns=[*within, "pin", "baseline", *(f.name for f in dataclasses.fields(Comparison))]
        )
    return t


def host_comparison(runs, shown: dict, baseline: str, tool="rrbench", manifests=()):
    """Each other host's shown dataset (shown: host_id -> run_id) against the prose's host
    `baseline`, per cell, on the per-run P50; empty with fewer than two hosts. A TCG host
    against a real CPU is not compared (perfbook.data.machine.comparable)."""
    if len(shown) < 2:
        return pd.DataFrame()
    r = runs[runs["tool"] == tool]
    r = r[[shown.get(h) == x for h, x in zip(r["host_id"], r["run_id"])]]
    return compare_frame(
        r,
        by="host_id",
        value="p50_us",
        baseline=baseline,
        within=["path", "proto", "pin"],
        pair_check=host_pairs(manifests),
    )


def caption_for(runs, manifests, what: str, extra: str = "") -> str:
    """Caption for a figure of pooled rrbench transactions: runs per cell, warm-up, hosts."""
    r = runs[runs["tool"] == "rrbench"]
    g = r.groupby(["host_id", "run_id", "path", "proto", "pin"])
    have = {(m["host"]["host_id"], m["run_id"]) for m in manifests} & set(
        zip(r["host_id"], r["run_id"])
    )
    ms = [m for m in manifests if (m["host"]["host_id"], m["run_id"]) in have]
    wu = [m["parameters"].get("rep_warmup", 0) for m in ms] or [0]
    secs = sorted({m["parameters"]["warmup"] for m in ms})
    tx = g["n"].sum()
    text = (
        f"Pooled transactions per cell: {int(tx.min()):,}–{int(tx.max()):,}; every run began with "
        f"{'/'.join(f'{s:g}' for s in secs)} s of unrecorded transactions"
    )
    return caption(
        what,
        n=g.size().to_numpy(),
        unit="runs",
        warmup=wu,
        hosts=hosts_of(ms),
        ci=False,
        extra=text + (". " + extra if extra else ""),
    )


def sched_per_transaction(sched, runs):
    """Per pinning mode of the traced runs: the wake-up-to-run wait per transaction, its
    share of the traced round trip, and the untraced mean (median over runs) beside it."""
    per_tx = sched.groupby("pin").agg(
        wait_sum_us=("delay_sum_us", "sum"),
        transactions=("traced_transactions", "first"),
        traced_mean_us=("traced_rr_mean_us", "first"),
    )
    per_tx["wait_us"] = per_tx.wait_sum_us / per_tx.transactions
    rr = runs[(runs.tool == "rrbench") & (runs.path == "loopback") & (runs.proto == "udp")]
    per_tx["untraced_mean_us"] = rr.groupby("pin").mean_us.median().reindex(per_tx.index)
    per_tx["wait_share"] = per_tx.wait_us / per_tx.traced_mean_us
    return per_tx


# ---------------------------------------------------------- the seed's numbers
def seed_metrics(ref):
    """The seed's three runs side by side (rows: metric)."""
    r = ref[ref["unit"] == "us"].pivot(index="metric", columns="run", values="value")
    order = [
        "MIN_LATENCY",
        "MEAN_LATENCY",
        "P50_LATENCY",
        "P90_LATENCY",
        "P99_LATENCY",
        "MAX_LATENCY",
        "STDDEV_LATENCY",
    ]
    return r.reindex([o for o in order if o in r.index])[["selectors", "k_all", "histogram"]]


def versus_seed(runs, ref, host_id=None):
    """The seed's UDP loopback numbers beside ours on the same path (loopback, UDP, no
    pinning): netperf (same tool, median over runs) and rrbench (median over runs)."""
    sel = runs[(runs["path"] == "loopback") & (runs["proto"] == "udp") & (runs["pin"] == "none")]
    if host_id is not None:
        sel = sel[sel["host_id"] == host_id]
    cols = {
        "MIN_LATENCY": "min_us",
        "MEAN_LATENCY": "mean_us",
        "P50_LATENCY": "p50_us",
        "P90_LATENCY": "p90_us",
        "P99_LATENCY": "p99_us",
        "MAX_LATENCY": "max_us",
        "STDDEV_LATENCY": "std_us",
    }
    seed = seed_metrics(ref)
    here = medians(sel.groupby("tool"), list(cols.values()))
    rows = []
    for metric, col in cols.items():
        row = {
            "metric": metric,
            "seed (median of its runs)": float(np.nanmedian(seed.loc[metric].astype(float)))
            if metric in seed.index
            else math.nan,
        }
        for tool in ("netperf", "rrbench"):
            row[f"{tool} here"] = float(here.at[tool, col]) if tool in here.index else math.nan
        rows.append(row)
    t = pd.DataFrame(rows)
    t["seed / netperf here"] = t["seed (median of its runs)"] / t["netperf here"]
    return t


def seed_buckets(ref):
    h = ref[ref["metric"] == "hist_count"].copy()
    h["lo_us"] = h["bucket_lo_us"].astype(float)
    h["hi_us"] = h["bucket_hi_us"].astype(float)
    # column 0 of every printed row is empty by construction (smaller values land in the
    # row above): drop it so that the buckets tile 10 us .. 10 ms without overlap
    h = h[h["lo_us"] > 0]
    return h[["lo_us", "hi_us", "value"]].rename(columns={"value": "count"})


def versus_seed_histogram(hist, ref, host_id=None):
    """Fraction of transactions per bucket of the seed's printed histogram (10-us buckets
    from 10 us, 100-us from 100 us, 1-ms from 1 ms), seed vs ours (loopback, UDP, none).
    Our log bins are assigned by their geometric middle (bins are 1.2 % wide)."""
    sb = seed_buckets(ref)
    h = hist[(hist["path"] == "loopback") & (hist["proto"] == "udp") & (hist["pin"] == "none")]
    if host_id is not None:
        h = h[h["host_id"] == host_id]
    g = h.groupby("bin", as_index=False)["count"].sum()
    lo, hi = bin_edges_us(g["bin"].to_numpy())
    mid = np.sqrt(lo * hi)
    count = g["count"].to_numpy()
    ours = [
        int(count[(mid >= lo_b) & (mid < hi_b)].sum())
        for lo_b, hi_b in zip(sb["lo_us"], sb["hi_us"])
    ]
    below = int(g["count"][mid < sb["lo_us"].min()].sum())
    t = sb.copy()
    t["seed_fraction"] = t["count"] / t["count"].sum()
    t["ours_count"] = ours
    t["ours_fraction"] = np.array(ours) / g["count"].sum()
    t = t[(t["count"] > 0) | (t["ours_count"] > 0)]
    t["bucket"] = [f"{a:g}-{b:g}" for a, b in zip(t["lo_us"], t["hi_us"])]
    below_row = pd.DataFrame(
        [
            {
                "bucket": f"<{sb['lo_us'].min():g}",
                "lo_us": 0.0,
                "hi_us": sb["lo_us"].min(),
                "count": 0,
                "seed_fraction": 0.0,
                "ours_count": below,
                "ours_fraction": below / g["count"].sum(),
            }
        ]
    )
    return pd.concat([below_row, t], ignore_index=True)[
        ["bucket", "lo_us", "hi_us", "count", "seed_fraction", "ours_count", "ours_fraction"]
    ]


# ------------------------------------------------------------------ the datasets
class NetperfData(Data):
    """D["runs"] in the order it was measured; D["hist"] with each bin's edges (lo_us, hi_us);
    D["sched"] per pinning mode and role in the collect order. The quoted dataset's frames:
    D.R (its runs), D.H (its histogram), D.ladder (its pooled percentiles), D.p (its
    parameters); D.ref, the seed's numbers."""

    def prepare(self, name: str, df):
        if name == "runs":
            df = in_order(df, ["t_s", "rep", "order"])
        elif name == "hist" and not df.empty:
            df = df.copy()
            df["lo_us"], df["hi_us"] = bin_edges_us(df["bin"])
        elif name == "sched":
            df = in_order(
                df,
                ["path", "proto", "_pin", "_role"],
                _pin=("pin", SCHED_PINS),
                _role=("role", SCHED_ROLES),
            )
        return df

    @cached_property
    def R(self):
        return self.of_quoted(self["runs"])

    @cached_property
    def H(self):
        return self.of_quoted(self["hist"])

    @cached_property
    def ladder(self):
        """ladder() of the quoted dataset (several sections read it; not to be changed)."""
        return ladder(self.R, self.H)

    @cached_property
    def versus_seed(self):
        """versus_seed() of the quoted dataset, by metric (the seed section and its
        seed_ratio read it)."""
        return versus_seed(self.R, self.ref, self.quoted.host_id).set_index("metric")

    @property
    def p(self) -> dict:
        return self.quoted.parameters

    @cached_property
    def ref(self):
        return self.reference(self.chapter.name)
