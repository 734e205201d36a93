"""iostat_internals: our iostat columns from the counters, the comparison with sysstat and
with the tracepoints (frames in, frames out)."""
from __future__ import annotations

import os
import subprocess
import tempfile
import threading
from pathlib import Path

from perfbook.probes import diskstats as ds
from perfbook.core.errors import PerfbookError
from perfbook.core.proc import die_with_parent, kill_group
from .spec import (IOSTAT_INTERVAL_S, OPS, ORDER_KEYS, PHASES, SPAN_TOL_S, TOL_ABS, TOL_REL,
                   TOL_UTIL_JIFFY)

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
    within SPAN_TOL_S (workload._IostatFollower, spec.SPAN_TOL_S)."""
    return (prev.get("backlog", 0) == 0 and curr.get("backlog", 0) == 0
            and abs((curr["t_ns"] - prev["t_ns"]) / 1e9 - IOSTAT_INTERVAL_S) <= SPAN_TOL_S)


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
    return [int(curr["seq"]) for _, recs in _runs(intervals)
            for prev, curr in zip(recs, recs[1:]) if not spans_claim(prev, curr)]


def our_columns(intervals, clock: str = "monotonic"):
    """Our iostat columns for every interval (row k from snapshots k-1 and k) that spans what
    sysstat's report k claims (spans_claim: a report read late is no interval of ours).

    clock='monotonic' uses the nanosecond clock of our snapshots; clock='uptime'
    uses /proc/uptime in 1/100 s like sysstat does.
    """
    import pandas as pd
    rows = []
    # only the columns read here go into the records (not sysstat's 22, which doubled their cost)
    iv = intervals[[c for c in ("run_id", "seq", "round", "phase", "t_ns", "uptime_cs", "backlog", *ds.FIELDS)
                    if c in intervals]]
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
            counts = {f"n_{k}": d[k] for k in ("rd_ios", "wr_ios", "dc_ios", "fl_ios",
                                                "rd_merges", "wr_merges", "dc_merges")}
            same = prev["phase"] == curr["phase"] and prev["round"] == curr["round"]
            row = {"seq": curr["seq"], "round": curr["round"],
                   "phase": curr["phase"] if same else "transition",
                   "prev_phase": prev["phase"], "interval_s": T,
                   "tiq_residual_ms": ds.tiq_residual_ms(prev, curr),
                   "io_ticks_delta": d["io_ticks"], **counts, **c}
            if run is not None:
                row = {"run_id": run, **row}
            rows.append(row)
    return pd.DataFrame(rows)


# the request (or merge) count behind each column, for judging a gap
COUNT_OF = {**{c: "rd_ios" for c in ("r/s", "rkB/s", "r_await", "rareq-sz", "%rrqm")},
            **{c: "wr_ios" for c in ("w/s", "wkB/s", "w_await", "wareq-sz", "%wrqm")},
            **{c: "dc_ios" for c in ("d/s", "dkB/s", "d_await", "dareq-sz", "%drqm")},
            "rrqm/s": "rd_merges", "wrqm/s": "wr_merges", "drqm/s": "dc_merges",
            "f/s": "fl_ios", "f_await": "fl_ios"}


def compare_with_sysstat(intervals, clock: str = "monotonic", ours=None):
    """Tidy frame: one row per interval and column with ours, sysstat's and the gap. `ours`:
    our_columns(intervals, clock) when the caller has it already (the analysis shows it too)."""
    import numpy as np
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
    import numpy as np
    import pandas as pd
    cols = list(cols)
    out = {k: np.tile(df[k].to_numpy(), len(cols)) for k in keys}
    out["column"] = np.repeat(np.array(cols, dtype=object), len(df))
    out[name] = df[cols].to_numpy().ravel(order="F")
    return pd.DataFrame(out)


def _stat_line(snap: dict) -> str:
    """A /sys/block/<dev>/stat line (17 numbers) from one of our diskstats snapshots."""
    return " ".join(str(int(snap[k])) for k in ds.FIELDS) + "\n"


def _uptime_line(snap: dict) -> str:
    cs = int(snap["uptime_cs"])
    return f"{cs // 100}.{cs % 100:02d} 0.00\n"


def replay_sysstat(prev: dict, curr: dict, device: str = "pbdev", timeout: float = 30.0) -> dict:
    """Feed sysstat's iostat the very two snapshots we read, and return its second report.

    In a private mount namespace (unshare --mount) a regular file is bind-mounted over
    /proc/uptime, and `iostat -f DIR` reads DIR/block/<device>/stat. Both files hold
    `prev` until iostat has printed its first report (its first read is done), then `curr`;
    iostat sleeps 1 s between its reads, and divides by the uptime it read, so the second
    report is computed from exactly our two snapshots. Root only. Raises PerfbookError
    if iostat can't be fed this way."""
    with tempfile.TemporaryDirectory(prefix="perfbook-replay-") as d:
        d = Path(d)
        stat = d / "sys" / "block" / device / "stat"
        stat.parent.mkdir(parents=True)
        up = d / "uptime"
        stat.write_text(_stat_line(prev))
        up.write_text(_uptime_line(prev))
        env = {**os.environ, "LC_ALL": "C", "S_COLORS": "never"}
        env.pop("S_TIME_FORMAT", None)
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
               f'mount --bind "$1" /proc/uptime && exec stdbuf -oL iostat -x -d -k -f "$2" "$3" 1 2',
               "sh", str(up), str(d / "sys"), device]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env, start_new_session=True, preexec_fn=die_with_parent)
        timer = threading.Timer(timeout, kill_group, (proc,))
        timer.start()
        out = []
        try:
            for line in proc.stdout:
                out.append(line)
                if line.startswith(device + " "):
                    # first report printed: swap in the second snapshot, same inodes
                    with open(stat, "r+") as f:
                        f.truncate(0)
                        f.write(_stat_line(curr))
                    with open(up, "r+") as f:
                        f.truncate(0)
                        f.write(_uptime_line(curr))
                    break
            out += proc.stdout.readlines()
            err = proc.stderr.read()
        finally:
            timer.cancel()
            kill_group(proc)
        rows = ds.parse_iostat_text("".join(out), device)
        if len(rows) != 2:
            raise PerfbookError(f"iostat replay gave {len(rows)} report(s): {err.strip()[-200:]}")
        return rows[1]


def disagreement_table(cmp):
    """Per column: n intervals, share within tolerance, largest absolute and relative gap."""
    import numpy as np
    import pandas as pd
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
        rows.append({"column": col, "n": len(p), "within_tol_pct": 100 * within[p].mean(),
                     "outside": int((~within[p]).sum()),
                     "divisor_explains": int(dex[p].sum()) if dex is not None else 0,
                     "max_abs_diff": np.nanmax(absd[p]),
                     "at_value": sysv[p[np.nanargmax(absd[p])]],
                     "max_rel_diff_pct": 100 * np.nanmax(rel[p][big]) if big.any() else 0.0})
    return pd.DataFrame(rows)


def window_columns(windows):
    """iostat columns over each trace window (start/end snapshots), one row per window."""
    import pandas as pd
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
        rows.append({**dict(zip(keys, key)), "round": s["round"], "phase": s["phase"],
                     "window_s": T, "ios": d["rd_ios"] + d["wr_ios"] + d["dc_ios"],
                     "ticks_ms": d["rd_ticks"] + d["wr_ticks"] + d["dc_ticks"], **c})
    return pd.DataFrame(rows)


# the await column each op of a trace window is compared with
AWAIT_OF = {"read": "r_await", "write": "w_await", "discard": "d_await", "flush": "f_await", "all": "await"}


def trace_vs_await(windows, trace_windows, wc=None):
    """Per window and op: tracepoint mean latency (io_start->io_done) beside await. `wc`:
    window_columns(windows) when the caller has it already."""
    import numpy as np
    import pandas as pd
    wc = window_columns(windows) if wc is None else wc
    keys = ["run_id", "window"] if "run_id" in wc else ["window"]
    m = trace_windows.merge(wc, on=keys + ["round", "phase"], suffixes=("", "_ds"))
    pick = m["op"].map({o: i for i, o in enumerate(AWAIT_OF)}).to_numpy(dtype=float)
    known = ~np.isnan(pick)
    aw = np.full(len(m), np.nan)
    aw[known] = m[list(AWAIT_OF.values())].to_numpy(dtype=float)[known, pick[known].astype(np.intp)]
    df = pd.DataFrame({**{k: m[k] for k in keys}, "round": m["round"], "phase": m["phase"],
                       "op": m["op"], "n_trace": m["n"], "trace_mean_ms": m["q2c_mean_us"] / 1000,
                       "device_mean_ms": m["d2c_mean_us"] / 1000, "await_ms": aw,
                       "trace_p50_ms": m["q2c_p50_us"] / 1000, "trace_p99_ms": m["q2c_p99_us"] / 1000})
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
    m["occupancy_as_tiq"] = (m["occupancy"] + (m["carried_in_ns"] - m["carried_out_ns"]) / 1e9 / T
                             if "carried_in_ns" in m else float("nan"))
    m["trace_busy_pct"] = 100 * m["busy_frac"]
    m["device_busy_pct"] = 100 * m["dev_busy_frac"]
    return m[keys + ["round", "phase", "trace_busy_pct", "device_busy_pct", "%util", "occupancy",
                     "occupancy_as_tiq", "dev_occupancy", "aqu-sz",
                     "r/s", "w/s", "await", "f/s", "f_await", "done_without_start",
                     "start_without_done", "flush_without_start", "n"]]


def in_written_order(df, table: str):
    """`table`'s rows sorted by host, run and the table's natural key (ORDER_KEYS).

    What a stable sort of the whole frame on those columns gives, found on the key columns
    alone and the rows moved once: op and key are ranked with one index lookup (a map over
    their strings cost more than the sort), and a host or run column that holds one value (a
    dataset's own view, sorted once per dataset) is left out, which a stable sort can't notice."""
    import numpy as np
    import pandas as pd
    keys = ORDER_KEYS.get(table)
    if not len(df) or keys is None:
        return df
    ranked = {"_op": ("op", OPS), "_key": ("key", tuple(PHASES))}
    by = {}
    for c in ("host_id", "run_id", *keys):
        if c in ranked:
            col, order = ranked[c]
            if col in df:     # absent: the rank is one constant, which orders nothing
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
    import numpy as np
    import pandas as pd
    from perfbook.analysis.stats import median_ci
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
    import pandas as pd
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
    g = pd.concat([by[["n_rd_ios", "n_wr_ios", "n_fl_ios", "interval_s"]].sum(),
                   by[["await", "aqu-sz"]].median()], axis=1)
    g.columns = ["rd", "wr", "fl", "secs", "await_ms", "aqu"]
    g = g.join(f[[f"fio_{direction}_iops", f"fio_{direction}_lat_mean_us"]], how="inner")
    g = g.rename(columns={f"fio_{direction}_iops": "fio_iops", f"fio_{direction}_lat_mean_us": "fio_lat_us"})
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
    return {"windows": int(len(m)), "accounted_writes": int(m["n"].sum()),
            "issued_writes": int(m["n_d2c"].sum()), "empty_preflush": int((m["n"] - m["n_d2c"]).sum()),
            "flush_requests": int(m["flush_without_start_all"].sum())}
