"""iostat_internals: our iostat columns from the counters, the comparison with sysstat and
with the tracepoints, the quoted dataset's and every host's analysis (frames in, frames out),
and the chapter's Data."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from perfbook.analysis.findings import Run, stored_frames
from perfbook.analysis.stats import compare_frame, median_ci
from perfbook.data.dataset import Data, quoted, shown_datasets
from perfbook.probes import diskstats as ds

from .parse import (
    IOSTAT_INTERVAL_S,
    OPS,
    ORDER_KEYS,
    PHASES,
    SPAN_TOL_S,
    TOL_ABS,
    TOL_REL,
    TOL_UTIL_JIFFY,
)


def steady_iops(a: dict, c: dict) -> float:
    """Completed reads + writes + discards per second between two snapshots (the value
    adaptive repetition tracks per phase)."""
    T = (c["t_ns"] - a["t_ns"]) / 1e9
    if T <= 0:
        return float("nan")
    return sum(c[k] - a[k] for k in ("rd_ios", "wr_ios", "dc_ios")) / T


def spans_claim(prev: dict, curr: dict) -> bool:
    """Does the interval between two consecutive rows of `intervals` (as _runs gives them)
    span what sysstat's report claims: one iostat interval, sampled when we snapshot? Both
    reports were read at once (backlog 0) and our snapshots are IOSTAT_INTERVAL_S apart
    within SPAN_TOL_S (collect._IostatFollower, parse.SPAN_TOL_S)."""
    return (
        prev.get("backlog", 0) == 0
        and curr.get("backlog", 0) == 0
        and abs((curr["t_ns"] - prev["t_ns"]) / 1e9 - IOSTAT_INTERVAL_S) <= SPAN_TOL_S
    )


def _runs(iv):
    """(run_id or None, records in seq order) of each dataset in an intervals frame; a backlog
    that was not recorded (datasets from before it was) counts as 0."""
    if "backlog" in iv:
        iv = iv.assign(backlog=iv["backlog"].fillna(0).astype("int64"))
    iv = iv.sort_values(["run_id", "seq"] if "run_id" in iv else ["seq"], kind="stable")
    groups = iv.groupby("run_id") if "run_id" in iv else [(None, iv)]
    return [(run, g.to_dict("records")) for run, g in groups]


def off_claim(intervals) -> list[int]:
    """The seq of every row whose interval (from the row before) does not span what its
    sysstat report claims (spans_claim): our_columns leaves them out."""
    return [
        int(curr["seq"])
        for _, recs in _runs(intervals)
        for prev, curr in zip(recs, recs[1:])
        if not spans_claim(prev, curr)
    ]


def our_columns(intervals, clock: str = "monotonic"):
    """Our iostat columns for every interval (row k from snapshots k-1 and k) that spans what
    sysstat's report k claims (spans_claim: a report read late is no interval of ours).

    clock='monotonic' uses the nanosecond clock of our snapshots; clock='uptime'
    uses /proc/uptime in 1/100 s like sysstat does.
    """
    rows = []
    # only the columns read here go into the records (not sysstat's 22, which doubled their cost)
    iv = intervals[
        [
            c
            for c in ("run_id", "seq", "round", "phase", "t_ns", "uptime_cs", "backlog", *ds.FIELDS)
            if c in intervals
        ]
    ]
    for run, recs in _runs(iv):
        for prev, curr in zip(recs, recs[1:]):
            if not spans_claim(prev, curr):
                continue
            if clock == "monotonic":
                T = (curr["t_ns"] - prev["t_ns"]) / 1e9
            elif clock == "uptime":
                T = (curr["uptime_cs"] - prev["uptime_cs"]) / 100
            elif clock == "nominal":
                T = IOSTAT_INTERVAL_S
            else:
                raise ValueError(f"clock must be monotonic, uptime or nominal, got {clock!r}")
            if T <= 0:
                continue
            c = ds.compute_columns(prev, curr, T)
            d = ds.delta(prev, curr)
            counts = {
                f"n_{k}": d[k]
                for k in (
                    "rd_ios",
                    "wr_ios",
                    "dc_ios",
                    "fl_ios",
                    "rd_merges",
                    "wr_merges",
                    "dc_merges",
                )
            }
            same = prev["phase"] == curr["phase"] and prev["round"] == curr["round"]
            row = {
                "seq": curr["seq"],
                "round": curr["round"],
                "phase": curr["phase"] if same else "transition",
                "prev_phase": prev["phase"],
                "interval_s": T,
                "tiq_residual_ms": ds.tiq_residual_ms(prev, curr),
                "io_ticks_delta": d["io_ticks"],
                **counts,
                **c,
            }
            if run is not None:
                row = {"run_id": run, **row}
            rows.append(row)
    return pd.DataFrame(rows)


# the request (or merge) count behind each column, for judging a gap
COUNT_OF = {
    **{c: "rd_ios" for c in ("r/s", "rkB/s", "r_await", "rareq-sz", "%rrqm")},
    **{c: "wr_ios" for c in ("w/s", "wkB/s", "w_await", "wareq-sz", "%wrqm")},
    **{c: "dc_ios" for c in ("d/s", "dkB/s", "d_await", "dareq-sz", "%drqm")},
    "rrqm/s": "rd_merges",
    "wrqm/s": "wr_merges",
    "drqm/s": "dc_merges",
    "f/s": "fl_ios",
    "f_await": "fl_ios",
}


def compare_with_sysstat(intervals, clock: str = "monotonic", ours=None):
    """Tidy frame: one row per interval and column with ours, sysstat's and the gap. `ours`:
    our_columns(intervals, clock) when the caller has it already (the analysis shows it too)."""
    ours = our_columns(intervals, clock) if ours is None else ours
    keys = ["run_id", "seq"] if "run_id" in ours else ["seq"]
    sys_cols = {f"sysstat {c}": c for c in ds.COLUMNS}
    sysdf = intervals[keys + list(sys_cols)].rename(columns=sys_cols)
    long_o = _long(ours, keys + ["phase", "prev_phase"], ds.COLUMNS, "ours")
    long_s = _long(sysdf, keys, ds.COLUMNS, "sysstat")
    m = long_o.merge(long_s, on=keys + ["column"])
    cnt = ours[keys + [c for c in ours.columns if c.startswith("n_")]].copy()
    cnt["n_all"] = cnt["n_rd_ios"] + cnt["n_wr_ios"] + cnt["n_dc_ios"] + cnt["n_fl_ios"]
    m = m.merge(cnt, on=keys)
    # each row's request count, picked from its column's count (a lookup per row, not a loop)
    n_cols = [f"n_{COUNT_OF.get(c, 'all')}" for c in ds.COLUMNS]
    pick = m["column"].map({c: i for i, c in enumerate(ds.COLUMNS)}).to_numpy(dtype=np.intp)
    m["count"] = m[n_cols].to_numpy()[np.arange(len(m)), pick]
    m = m.drop(columns=[c for c in m.columns if c.startswith("n_")])
    m["abs_diff"] = (m["ours"] - m["sysstat"]).abs()
    scale = m[["ours", "sysstat"]].abs().max(axis=1)
    m["rel_diff"] = (m["abs_diff"] / scale).where(scale > 0, 0.0)
    jiffy = (m["column"] == "%util") * TOL_UTIL_JIFFY
    m["tolerance"] = TOL_ABS + TOL_REL * scale + jiffy
    m["within"] = m["abs_diff"] <= m["tolerance"]
    if clock == "monotonic":
        # sysstat divides by its own /proc/uptime delta, read just *before* its counters;
        # if iostat is held up between the two reads (a preempted vCPU), its counts span a
        # longer or shorter time than its divisor. Our counts over the nominal interval
        # reproduce that: such a gap is sysstat's divisor, not a disagreement in counters.
        nom = our_columns(intervals, "nominal")
        nl = _long(nom, keys, ds.COLUMNS, "ours_nominal")
        m = m.merge(nl, on=keys + ["column"])
        gap = (m["ours_nominal"] - m["sysstat"]).abs()
        tol = TOL_ABS + TOL_REL * m[["ours_nominal", "sysstat"]].abs().max(axis=1) + jiffy
        m["divisor_explains"] = ~m["within"] & (gap <= tol)
        m["agree"] = m["within"] | m["divisor_explains"]
    return m


def _long(df, keys: list, cols, name: str):
    """df.melt(id_vars=keys, value_vars=cols, var_name="column", value_name=name), the same
    frame (rows column by column, dtypes, a new RangeIndex) built from df's arrays: pandas'
    melt takes the frame apart column by column, and its melts were a third of a comparison."""
    cols = list(cols)
    out = {k: np.tile(df[k].to_numpy(), len(cols)) for k in keys}
    out["column"] = np.repeat(np.array(cols, dtype=object), len(df))
    out[name] = df[cols].to_numpy().ravel(order="F")
    return pd.DataFrame(out)


def disagreement_table(cmp):
    """Per column: n intervals, share within tolerance, largest absolute and relative gap."""
    rows = []
    # each column's rows found in one grouping, its statistics on plain arrays (NaN skipped as
    # pandas does): a filter and a dozen Series operations per column were this table's time
    at = cmp.groupby("column", sort=False).indices
    absd, sysv, rel = (cmp[c].to_numpy(dtype=float) for c in ("abs_diff", "sysstat", "rel_diff"))
    within = cmp["within"].to_numpy(dtype=bool)
    dex = cmp["divisor_explains"].to_numpy(dtype=bool) if "divisor_explains" in cmp else None
    for col in ds.COLUMNS:
        if col not in at:
            continue
        p = at[col]
        big = np.abs(sysv[p]) >= 1
        rows.append(
            {
                "column": col,
                "n": len(p),
                "within_tol_pct": 100 * within[p].mean(),
                "outside": int((~within[p]).sum()),
                "divisor_explains": int(dex[p].sum()) if dex is not None else 0,
                "max_abs_diff": np.nanmax(absd[p]),
                "at_value": sysv[p[np.nanargmax(absd[p])]],
                "max_rel_diff_pct": 100 * np.nanmax(rel[p][big]) if big.any() else 0.0,
            }
        )
    return pd.DataFrame(rows)


def window_columns(windows):
    """iostat columns over each trace window (start/end snapshots), one row per window."""
    rows = []
    keys = ["run_id", "window"] if "run_id" in windows else ["window"]
    # each window's first start and first end snapshot, as plain records (what a filter of each
    # group of the frame gave, at a fraction of its cost), in the windows' sorted order
    edges: dict = {}
    for r in windows.to_dict("records"):
        edges.setdefault(tuple(r[k] for k in keys), {}).setdefault(r["edge"], r)
    for key in sorted(edges):
        s, e = edges[key]["start"], edges[key]["end"]
        T = (e["t_ns"] - s["t_ns"]) / 1e9
        c = ds.compute_columns(s, e, T)
        d = ds.delta(s, e)
        rows.append(
            {
                **dict(zip(keys, key)),
                "round": s["round"],
                "phase": s["phase"],
                "window_s": T,
                "ios": d["rd_ios"] + d["wr_ios"] + d["dc_ios"],
                "ticks_ms": d["rd_ticks"] + d["wr_ticks"] + d["dc_ticks"],
                **c,
            }
        )
    return pd.DataFrame(rows)


# the await column each op of a trace window is compared with
AWAIT_OF = {
    "read": "r_await",
    "write": "w_await",
    "discard": "d_await",
    "flush": "f_await",
    "all": "await",
}


def trace_vs_await(windows, trace_windows, wc=None):
    """Per window and op: tracepoint mean latency (io_start->io_done) beside await. `wc`:
    window_columns(windows) when the caller has it already."""
    wc = window_columns(windows) if wc is None else wc
    keys = ["run_id", "window"] if "run_id" in wc else ["window"]
    m = trace_windows.merge(wc, on=keys + ["round", "phase"], suffixes=("", "_ds"))
    pick = m["op"].map({o: i for i, o in enumerate(AWAIT_OF)}).to_numpy(dtype=float)
    known = ~np.isnan(pick)
    aw = np.full(len(m), np.nan)
    aw[known] = m[list(AWAIT_OF.values())].to_numpy(dtype=float)[known, pick[known].astype(np.intp)]
    df = pd.DataFrame(
        {
            **{k: m[k] for k in keys},
            "round": m["round"],
            "phase": m["phase"],
            "op": m["op"],
            "n_trace": m["n"],
            "trace_mean_ms": m["q2c_mean_us"] / 1000,
            "device_mean_ms": m["d2c_mean_us"] / 1000,
            "await_ms": aw,
            "trace_p50_ms": m["q2c_p50_us"] / 1000,
            "trace_p99_ms": m["q2c_p99_us"] / 1000,
        }
    )
    df["diff_ms"] = df["trace_mean_ms"] - df["await_ms"]
    return df


def trace_vs_util(windows, trace_windows, wc=None):
    """Per window: trace busy fraction vs %util and trace occupancy vs aqu-sz. `wc`:
    window_columns(windows) when the caller has it already."""
    wc = window_columns(windows) if wc is None else wc
    keys = ["run_id", "window"] if "run_id" in wc else ["window"]
    tw = trace_windows[trace_windows["op"] == "all"]
    m = tw.merge(wc, on=keys + ["round", "phase"], suffixes=("_trace", ""))
    T = m["window_s_trace"] if "window_s_trace" in m else m["window_s"]
    m["occupancy_as_tiq"] = (
        m["occupancy"] + (m["carried_in_ns"] - m["carried_out_ns"]) / 1e9 / T
        if "carried_in_ns" in m
        else float("nan")
    )
    m["trace_busy_pct"] = 100 * m["busy_frac"]
    m["device_busy_pct"] = 100 * m["dev_busy_frac"]
    return m[
        keys
        + [
            "round",
            "phase",
            "trace_busy_pct",
            "device_busy_pct",
            "%util",
            "occupancy",
            "occupancy_as_tiq",
            "dev_occupancy",
            "aqu-sz",
            "r/s",
            "w/s",
            "await",
            "f/s",
            "f_await",
            "done_without_start",
            "start_without_done",
            "flush_without_start",
            "n",
        ]
    ]


def in_written_order(df, table: str):
    """`table`'s rows sorted by host, run and the table's natural key (ORDER_KEYS).

    What a stable sort of the whole frame on those columns gives, found on the key columns
    alone and the rows moved once: op and key are ranked with one index lookup (a map over
    their strings cost more than the sort), and a host or run column that holds one value (a
    dataset's own view, sorted once per dataset) is left out, which a stable sort can't notice."""
    keys = ORDER_KEYS.get(table)
    if not len(df) or keys is None:
        return df
    ranked = {"_op": ("op", OPS), "_key": ("key", tuple(PHASES))}
    by = {}
    for c in ("host_id", "run_id", *keys):
        if c in ranked:
            col, order = ranked[c]
            if col in df:  # absent: the rank is one constant, which orders nothing
                r = pd.Index(order).get_indexer(df[col])
                by[c] = np.where(r < 0, len(order), r)
        elif c in ("host_id", "run_id") and not (df[c].to_numpy() != df[c].iloc[0]).any():
            continue
        else:
            by[c] = df[c].to_numpy()
    at = pd.DataFrame(by).sort_values(list(by), kind="stable").index.to_numpy()
    return df.iloc[at].reset_index(drop=True)


def steady(ours):
    """Intervals that lie wholly inside one phase of a measured (not warm-up) round."""
    return ours[~ours["phase"].isin(["transition", "idle"]) & (ours["round"] >= 0)]


def phase_summary(ours):
    """Per phase: median [CI] of the key columns over steady intervals (perfbook.analysis.stats: the
    median and median_ci that summarize() gives; its percentiles and moments, most of its cost
    and read by nothing here, are not computed)."""
    rows = []
    st = steady(ours).copy()
    st["IOPS"] = st["r/s"] + st["w/s"] + st["d/s"]
    for ph, g in st.groupby("phase", sort=False):
        row = {"phase": ph, "n": len(g)}
        for col in ("IOPS", "await", "aqu-sz", "%util", "f/s", "rareq-sz", "wareq-sz", "%wrqm"):
            x = g[col].to_numpy(dtype=float)
            x = x[~np.isnan(x)]
            row[col] = float(np.median(x)) if len(x) else float("nan")
            row[f"{col} lo"], row[f"{col} hi"], _ = median_ci(x)
        rows.append(row)
    order = [p for p in PHASES if p in {r["phase"] for r in rows}]
    return pd.DataFrame(rows).set_index("phase").loc[order].reset_index()


def per_round_columns(ours, phase: str):
    """Per measured round of `phase` (the chapter's unit of repetition): the device's IOPS,
    aqu-sz and %util over the round's steady intervals, each the time-weighted mean of its
    1-s values (so the round's completed requests over its seconds, its time_in_queue over
    its seconds). Columns round, secs, intervals, iops, aqu, util; empty when the phase has
    no steady interval."""
    st = steady(ours) if len(ours) else ours
    st = st[st["phase"] == phase] if len(st) else st
    if not len(st):
        return pd.DataFrame(columns=["round", "secs", "intervals", "iops", "aqu", "util"])
    T = st["interval_s"]
    w = st.assign(
        _req=st["n_rd_ios"] + st["n_wr_ios"] + st["n_dc_ios"],
        _aqu=st["aqu-sz"] * T,
        _util=st["%util"] * T,
    )
    g = w.groupby("round").agg(
        secs=("interval_s", "sum"),
        intervals=("interval_s", "size"),
        req=("_req", "sum"),
        aqu=("_aqu", "sum"),
        util=("_util", "sum"),
    )
    out = pd.DataFrame(
        {
            "secs": g["secs"],
            "intervals": g["intervals"],
            "iops": g["req"] / g["secs"],
            "aqu": g["aqu"] / g["secs"],
            "util": g["util"] / g["secs"],
        }
    )
    return out.reset_index()


def steady_columns(windows, phase: str):
    """Per measured round of `phase`: the device's IOPS, aqu-sz and %util over the phase's
    steady part, from our own two snapshots that bound it (edges 'start', one second into the
    phase after its warm-up, and 'phase_end', a quarter second before its end: the window the
    repetition tracks). Unlike iostat's 1-s intervals, which fall where sysstat's clock puts
    them and take in fio's start-up and exit, every round's value covers the same part of its
    phase. Columns round, secs, intervals (1), iops, aqu, util, as per_round_columns; empty
    when the dataset has no such snapshots (before 'phase_end' was recorded)."""
    cols = ["round", "secs", "intervals", "iops", "aqu", "util"]
    if windows is None or not len(windows) or "edge" not in windows:
        return pd.DataFrame(columns=cols)
    w = windows[(windows["phase"] == phase) & (windows["round"] >= 0)]
    keys = ["run_id", "window"] if "run_id" in w else ["window"]
    edges: dict = {}
    for r in w.to_dict("records"):
        edges.setdefault(tuple(r[k] for k in keys), {}).setdefault(r["edge"], r)
    rows = []
    for key in sorted(edges):
        e = edges[key]
        if "start" not in e or "phase_end" not in e:
            continue
        a, c = e["start"], e["phase_end"]
        T = (c["t_ns"] - a["t_ns"]) / 1e9
        if T <= 0:
            continue
        col = ds.compute_columns(a, c, T)
        rows.append(
            {
                "round": a["round"],
                "secs": T,
                "intervals": 1,
                "iops": col["r/s"] + col["w/s"] + col["d/s"],
                "aqu": col["aqu-sz"],
                "util": col["%util"],
            }
        )
    return pd.DataFrame(rows, columns=cols)


def round_columns(A: dict, phase: str):
    """The per-round values the findings read: steady_columns of the dataset's snapshots, or,
    for a dataset without 'phase_end' snapshots, per_round_columns of its iostat intervals."""
    sc = steady_columns(A.get("windows"), phase)
    if len(sc):
        return sc
    ours = A.get("ours")
    return per_round_columns(ours, phase) if ours is not None else sc


def jiffy_check(ours, hz: int | None) -> dict:
    """Are io_ticks deltas whole jiffies? (io_ticks is kept in jiffies, printed in ms)."""
    if not hz:
        return {"hz": None, "share": float("nan"), "n": len(ours)}
    ms = 1000 // hz if 1000 % hz == 0 else None
    if not ms:
        return {"hz": hz, "share": float("nan"), "n": len(ours)}
    d = ours["io_ticks_delta"]
    return {"hz": hz, "ms": ms, "n": int(len(d)), "share": float((d % ms == 0).mean())}


def per_round_rates(ours, phases, phase: str, direction: str):
    """Per measured round of `phase`: the device's completed requests per second over the
    phase's steady intervals (reads for 'read', writes and flushes for 'write') beside fio's
    own rate and latency for that round (fio's IOPS x mean latency is fio's time-average number
    of I/Os in flight, by Little's law). Empty when the phase or fio's numbers are missing."""
    if ours is None or phases is None or not len(ours) or not len(phases) or "phase" not in phases:
        return pd.DataFrame()
    st = steady(ours)
    st = st[st["phase"] == phase]
    f = phases[(phases["phase"] == phase) & (phases["round"] >= 0)].set_index("round")
    if st.empty or f.empty:
        return pd.DataFrame()
    # two aggregations over several columns each: the same sums and medians as named
    # aggregation, which costs several times as much per call
    by = st.groupby("round")
    g = pd.concat(
        [
            by[["n_rd_ios", "n_wr_ios", "n_fl_ios", "interval_s"]].sum(),
            by[["await", "aqu-sz"]].median(),
        ],
        axis=1,
    )
    g.columns = ["rd", "wr", "fl", "secs", "await_ms", "aqu"]
    g = g.join(f[[f"fio_{direction}_iops", f"fio_{direction}_lat_mean_us"]], how="inner")
    g = g.rename(
        columns={f"fio_{direction}_iops": "fio_iops", f"fio_{direction}_lat_mean_us": "fio_lat_us"}
    )
    for k in ("rd", "wr", "fl"):
        g[f"{k}_per_op"] = g[k] / g["secs"] / g["fio_iops"]
    g["fio_in_flight"] = g["fio_iops"] * g["fio_lat_us"] / 1e6
    g["inside_share"] = 1000 * g["await_ms"] / g["fio_lat_us"]
    return g.reset_index()


def flush_origin(trace_windows, phase: str = "fsync_4k") -> dict:
    """Where the flush requests of `phase`'s trace windows came from.

    An empty preflush write (fsync's blkdev_issue_flush, rwbs 'FWS') is accounted as a write
    (block_io_start/done) but is never issued itself: the flush machinery issues a flush request
    ('FF') in its place, which has no block_io_start. So in a window, accounted writes that were
    never issued = empty preflushes, and flush requests without a start = flushes issued. A flush
    with data or FUA (a jbd2 commit record) is issued as a write and adds flush requests of its own."""
    tw = trace_windows
    if tw is None or not len(tw) or "phase" not in tw:
        return {}
    keys = ["run_id", "window"] if "run_id" in tw else ["window"]
    w = tw[(tw["phase"] == phase) & (tw["op"] == "write")]
    a = tw[(tw["phase"] == phase) & (tw["op"] == "all")]
    if w.empty or a.empty:
        return {}
    m = w.merge(a[keys + ["flush_without_start"]], on=keys, suffixes=("", "_all"))
    return {
        "windows": int(len(m)),
        "accounted_writes": int(m["n"].sum()),
        "issued_writes": int(m["n_d2c"].sum()),
        "empty_preflush": int((m["n"] - m["n_d2c"]).sum()),
        "flush_requests": int(m["flush_without_start_all"].sum()),
    }


# ---- the quoted dataset's analysis and every host's ------------------------------------


def only_run(df, host_id, run_id):
    """The rows of one dataset of a loaded table: its host and run id together (two hosts may
    measure in the same second, and a fleet's copies share run ids)."""
    return (
        df[(df["host_id"] == host_id) & (df["run_id"] == run_id)]
        if len(df) and "run_id" in df
        else df
    )


def analyse(D: dict) -> dict:
    """All derived frames the chapter shows, for the newest dataset (plus all-run frames)."""
    man = quoted(D["manifests"])
    if man is None:
        return {}
    hid, rid = man["host"]["host_id"], man["run_id"]
    iv = only_run(D["intervals"], hid, rid) if len(D["intervals"]) else D["intervals"]
    out = {"manifest": man, "run_id": rid}
    if len(iv):
        out["ours"] = our_columns(iv)
        out["intervals"] = iv
        out["cmp"] = compare_with_sysstat(iv, ours=out["ours"])
        out["disagree"] = disagreement_table(out["cmp"])
        out["phase_summary"] = phase_summary(out["ours"])
    out["phases"] = only_run(D["phases"], hid, rid)
    w = only_run(D["windows"], hid, rid)
    out["windows"] = w
    tw = only_run(D["trace_windows"], hid, rid)
    out["trace_windows_raw"] = tw
    if len(w) and len(tw):
        wc = window_columns(w)
        out["trace_await"] = trace_vs_await(w, tw, wc)
        out["trace_util"] = trace_vs_util(w, tw, wc)
        out["sample"] = only_run(D["trace_sample"], hid, rid)
    return out


def uptime_disagreement(A: dict):
    """disagreement_table() of the comparison with sysstat on /proc/uptime's clock (sysstat's
    own divisor), worked out once per analysis when first asked: only the prose quotes it
    (prose_values(uptime=True)), not the key findings nor a host's summary."""
    if "disagree_uptime" not in A:
        A["cmp_uptime"] = compare_with_sysstat(A["intervals"], "uptime")
        A["disagree_uptime"] = disagreement_table(A["cmp_uptime"])
    return A["disagree_uptime"]


def analyse_hosts(D) -> dict[str, dict]:
    """host_summary() of the dataset shown for each host (perfbook.data.dataset.shown_datasets: the
    prose's dataset for its host, the newest non-quick one of every other host), keyed by host
    id. Each is computed on that dataset alone and kept in the verdict store
    (perfbook.analysis.findings.stored_frames), so a fleet's hosts are reduced once, not at every refresh."""
    out = {}
    for hid, rid in sorted(shown_datasets(D.manifests).items()):
        m = next(x for x in D.manifests if x.host_id == hid and x["run_id"] == rid)
        out[hid] = stored_frames(D, m, "host-summary", lambda m=m: host_summary(Run(D, m).data))
    return out


def host_summary(D) -> dict:
    """What the cross-host views read of one dataset (D holds it alone): its overview row (how
    well its counters agree with sysstat and with the tracepoints), the IOPS of its steady 1-s
    intervals per phase, and its phase summary."""
    A = D.analysis()
    if not A:
        return {}
    man, hid = A["manifest"], A["manifest"]["host"]["host_id"]
    row = {
        "host_id": hid,
        "run_id": A["run_id"],
        "kernel": man["host"].get("kernel_release"),
        "device": man["facts"].get("device", {}).get("name"),
        "scheduler": re.sub(
            r".*\[(\S+)\].*", r"\1", man["facts"].get("device", {}).get("scheduler") or "?"
        ),
        "rounds": measured_rounds(A),
    }
    if "cmp" in A:
        c = A["cmp"]
        row.update(
            {
                "intervals": len(A["ours"]),
                "values compared": len(c),
                "within tolerance %": round(100 * c["within"].mean(), 2),
                "agree %": round(100 * c["agree"].mean(), 2),
            }
        )
    if "trace_await" in A:
        ta = A["trace_await"]
        main = ta[ta["op"].isin(["read", "write"]) & (ta["n_trace"] >= 200)]
        rel = (main["diff_ms"] / main["await_ms"]).abs()
        row.update(
            {
                "trace windows": int(ta["window"].nunique()),
                "median |trace - await| %": round(100 * rel.median(), 2),
            }
        )
    out = {"overview": pd.DataFrame([row])}
    if "ours" in A:
        st = steady(A["ours"])
        out["steady"] = pd.DataFrame(
            {
                "host_id": hid,
                "phase": st["phase"].to_numpy(),
                "IOPS": (st["r/s"] + st["w/s"] + st["d/s"]).to_numpy(),
            }
        )
    if "phase_summary" in A:
        out["phase_summary"] = A["phase_summary"]
    return out


def steady_intervals(AH: dict[str, dict]):
    """Every host's steady 1-s intervals (its shown dataset): host, phase and IOPS."""
    frames = [S["steady"] for S in AH.values() if "steady" in S]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def phase_summary_hosts(AH: dict[str, dict]):
    """phase_summary() of every host, with a host column."""
    frames = [
        S["phase_summary"].assign(host_id=hid) for hid, S in AH.items() if "phase_summary" in S
    ]
    if not frames:
        return pd.DataFrame()
    df = pd.concat(frames, ignore_index=True)
    return df[["host_id", *[c for c in df.columns if c != "host_id"]]]


def compare_hosts(AH: dict[str, dict], value: str = "IOPS"):
    """Each host against the first (sorted) host, per phase, on a column of the steady
    intervals (perfbook.analysis.stats.compare_frame: Mann-Whitney U, Cliff's delta, Hodges-Lehmann)."""
    st = steady_intervals(AH)
    if st.empty or st["host_id"].nunique() < 2:
        return st.iloc[0:0]
    base = sorted(st["host_id"].unique())[0]
    return compare_frame(st, by="host_id", value=value, baseline=base, within="phase")


def measured_rounds(A: dict) -> str:
    """How many rounds the dataset measured (its phases' rounds; else the parameter)."""
    ph = A.get("phases")
    return str(
        ph[ph["round"] >= 0]["round"].nunique()
        if ph is not None and len(ph)
        else A["manifest"]["parameters"].get("rounds")
    )


class IostatData(Data):
    """The datasets, every table in its natural order (the analysis must not depend on the
    order rows were written in), the plain dict of frames the analysis takes, and the
    analyses every part of the page reads, each worked out once."""

    def prepare(self, name, df):
        return in_written_order(df, name)

    def frames(self) -> dict:
        return {
            **{
                t: self[t]
                for t in ("intervals", "windows", "trace_windows", "trace_sample", "phases")
            },
            "manifests": self.manifests,
        }

    def analysis(self) -> dict:
        """analyse() of these datasets: the quoted dataset's frames (the prose, the tables, the
        figures and a host's summary read it)."""
        if "_analysis" not in self.__dict__:
            self._analysis = analyse(self.frames())
        return self._analysis

    def host_analyses(self) -> dict[str, dict]:
        """analyse_hosts() of these datasets: every host's shown dataset, reduced (the
        cross-host table, figure and comparison read it)."""
        if "_host_analyses" not in self.__dict__:
            self._host_analyses = analyse_hosts(self)
        return self._host_analyses
