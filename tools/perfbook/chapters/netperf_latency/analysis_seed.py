"""The seed's 2013 numbers (data/reference/netperf_latency.csv) beside ours: loopback, UDP,
no pinning, the cell the seed measured."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .analysis import medians
from .parse import bin_edges_us


def seed_metrics(ref):
    """The seed's three runs side by side (rows: metric)."""
    r = ref[ref["unit"] == "us"].pivot(index="metric", columns="run", values="value")
    order = ["MIN_LATENCY", "MEAN_LATENCY", "P50_LATENCY", "P90_LATENCY", "P99_LATENCY",
             "MAX_LATENCY", "STDDEV_LATENCY"]
    return r.reindex([o for o in order if o in r.index])[["selectors", "k_all", "histogram"]]


def versus_seed(runs, ref, host_id=None):
    """The seed's UDP loopback numbers beside ours on the same path (loopback, UDP, no
    pinning): netperf (same tool, median over runs) and rrbench (median over runs)."""
    sel = runs[(runs["path"] == "loopback") & (runs["proto"] == "udp") & (runs["pin"] == "none")]
    if host_id is not None:
        sel = sel[sel["host_id"] == host_id]
    cols = {"MIN_LATENCY": "min_us", "MEAN_LATENCY": "mean_us", "P50_LATENCY": "p50_us",
            "P90_LATENCY": "p90_us", "P99_LATENCY": "p99_us", "MAX_LATENCY": "max_us",
            "STDDEV_LATENCY": "std_us"}
    seed = seed_metrics(ref)
    here = medians(sel.groupby("tool"), list(cols.values()))
    rows = []
    for metric, col in cols.items():
        row = {"metric": metric,
               "seed (median of its runs)": float(np.nanmedian(seed.loc[metric].astype(float)))
               if metric in seed.index else math.nan}
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
    ours = [int(count[(mid >= lo_b) & (mid < hi_b)].sum()) for lo_b, hi_b in zip(sb["lo_us"], sb["hi_us"])]
    below = int(g["count"][mid < sb["lo_us"].min()].sum())
    t = sb.copy()
    t["seed_fraction"] = t["count"] / t["count"].sum()
    t["ours_count"] = ours
    t["ours_fraction"] = np.array(ours) / g["count"].sum()
    t = t[(t["count"] > 0) | (t["ours_count"] > 0)]
    t["bucket"] = [f"{a:g}-{b:g}" for a, b in zip(t["lo_us"], t["hi_us"])]
    below_row = pd.DataFrame([{"bucket": f"<{sb['lo_us'].min():g}", "lo_us": 0.0, "hi_us": sb["lo_us"].min(),
                               "count": 0, "seed_fraction": 0.0, "ours_count": below,
                               "ours_fraction": below / g["count"].sum()}])
    return pd.concat([below_row, t], ignore_index=True)[
        ["bucket", "lo_us", "hi_us", "count", "seed_fraction", "ours_count", "ours_fraction"]]
