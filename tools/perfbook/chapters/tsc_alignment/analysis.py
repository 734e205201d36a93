"""Frames in, frames out: brackets, offsets, skew bounds, the timeline, comparisons (no I/O
beyond D, no plotting)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from perfbook.analysis import decide
from perfbook.analysis.stats import compare_frame, summarize_frame

from .parse import U64, VARIANTS, fact_rank, signed

ORDER = ("created",) + VARIANTS  # every offset state, in the order the helper runs them


# -- brackets -----------------------------------------------------------------------------
def bracket_frame(df):
    """Add width / entry / exit / inside columns (cycles) to bracket samples."""
    d = df.copy()
    for c in ("before", "guest", "after"):
        d[c] = d[c].astype("int64")
    d["width"] = d["after"] - d["before"]
    d["entry"] = d["guest"] - d["before"]  # KVM_RUN start -> guest RDTSC
    d["exit"] = d["after"] - d["guest"]  # guest RDTSC -> back in userspace
    d["inside"] = (d["before"] <= d["guest"]) & (d["guest"] <= d["after"])
    return d


def brackets(D, which: str = "all"):
    """bracket_frame of D's bracket table: 'all' datasets, the 'quoted' one, or the 'shown'
    ones (one per host)."""
    b = D["bracket"]
    if len(b) == 0:
        return b
    b = {"all": b, "quoted": D.of_quoted(b), "shown": D.of_shown(b)}[which]
    return bracket_frame(b)


def measured_rounds(b) -> dict:
    """(host_id, run_id) -> rounds with measured (non-warm-up) readings."""
    m = b[(b["round"] >= 0) & (b["warmup"] == 0)]
    return {k: int(g["round"].nunique()) for k, g in m.groupby(["host_id", "run_id"])}


def inside_summary(b):
    """Per variant: n, share of guest readings inside their host bracket."""
    m = b[b["warmup"] == 0]
    g = m.groupby("variant", sort=False)
    out = g.agg(
        n=("inside", "size"), inside=("inside", "sum"), median_distance=("entry", "median")
    ).reset_index()
    out["inside_share"] = out["inside"] / out["n"]
    order = {v: i for i, v in enumerate(ORDER)}
    return out.sort_values("variant", key=lambda s: s.map(order), kind="stable").reset_index(
        drop=True
    )


def width_summary(b, by=("variant",)):
    return summarize_frame(b[b["warmup"] == 0], list(by), "width")


def offset_honored(b) -> bool | None:
    """Does the guest see the offset KVM chose? (None: no data)"""
    c = b[(b["variant"] == "created") & (b["warmup"] == 0)]
    if not len(c):
        c = b[(b["variant"] == "default") & (b["warmup"] == 0)]
    if not len(c):
        return None
    return bool((~c["inside"]).mean() > 0.5)


def round_medians(b):
    """Median bracket width per host, run, variant and round (measured readings only).

    A round is the unit that repeats (and that adaptive repetition counts), so variants
    and hosts are compared on these per-round medians.
    """
    w = b[(b["warmup"] == 0) & b["variant"].isin(VARIANTS)]
    return w.groupby(["host_id", "run_id", "variant", "round"], as_index=False)["width"].median()


def round_widths(b):
    """The median bracket width (cycles) of each measured round of one dataset, over every
    offset variant's readings in it: one value per round, the unit that repeats."""
    w = b[(b["warmup"] == 0) & b["variant"].isin(VARIANTS) & (b["round"] >= 0)]
    return w.groupby("round")["width"].median()


def variant_comparison(b, baseline: str = "default"):
    """Each offset variant's round-trip width against `baseline`, per dataset (compare)."""
    return compare_frame(
        round_medians(b),
        by="variant",
        value="width",
        baseline=baseline,
        within=["host_id", "run_id"],
    )


def host_comparison(D):
    """Each other host's shown dataset against the quoted one, per variant (empty with
    fewer than two hosts)."""
    if len(D.shown) < 2 or len(D["bracket"]) == 0:
        return pd.DataFrame()
    rm = D.of_shown(round_medians(brackets(D)))
    return compare_frame(
        rm, by="host_id", value="width", baseline=D.quoted.host_id, within="variant"
    )


# -- offsets: the API against the tracepoint ------------------------------------------------
def offset_check(ops, events):
    """Pair each offset-changing ioctl with its kvm_write_tsc_offset event.

    Within one run both are in the same order: create_vcpu fires one event,
    every set_attr / set_msr one more. Returns the joined frame with:
      api_offset   -- what KVM_GET_DEVICE_ATTR read back (signed)
      trace_next   -- the tracepoint's 'next' (signed)
      match        -- api == trace
      kernel_tsc   -- host TSC KVM used, when it can be inferred
                      (create: 0 - next; first msr write: written value - next;
                      a second write is 'matched' and reuses the old offset)
      same_as_prev -- next equals the previous event's next (offset reused)
      in_ioctl     -- kernel_tsc and the event stamp inside the ioctl's bracket
    u64 columns may be integers or their decimal text (as the tables store them).
    """
    rows = []
    # each dataset's events, split once (a filter per dataset over every host's events is
    # quadratic in a fleet's datasets)
    by_run = dict(iter(events.groupby(["host_id", "run_id"], sort=False)))
    for (host, run), o in ops.groupby(["host_id", "run_id"], sort=False):
        e = by_run.get((host, run), events.iloc[0:0]).sort_values("ts", kind="stable")
        o = o.sort_values("seq", kind="stable")
        for (_, op), (_, ev) in zip(o.iterrows(), e.iterrows()):
            nxt = int(ev["next"])
            if op["kind"] == "create_vcpu":
                ktsc = (U64 - nxt) % U64
            elif op["kind"] == "set_msr":
                ktsc = (int(op["requested"]) - nxt) % U64
            else:
                ktsc = None
            rows.append(
                {
                    "host_id": host,
                    "run_id": run,
                    "seq": int(op["seq"]),
                    "kind": op["kind"],
                    "variant": op["variant"],
                    "api_offset": signed(op["readback"]),
                    "requested_signed": signed(op["requested"])
                    if op["kind"] == "set_attr"
                    else None,
                    "trace_prev": signed(ev["prev"]),
                    "trace_next": signed(nxt),
                    "event_ts": int(ev["ts"]),
                    "tsc_before": int(op["tsc_before"]),
                    "tsc_after": int(op["tsc_after"]),
                    "kernel_tsc": ktsc,
                }
            )
        if len(o) != len(e):
            rows.append(
                {
                    "host_id": host,
                    "run_id": run,
                    "seq": -1,
                    "kind": "count_mismatch",
                    "variant": f"{len(o)} ops vs {len(e)} events",
                }
            )
    d = pd.DataFrame(rows)
    if len(d):
        d["same_as_prev"] = (
            d.groupby(["host_id", "run_id"])["trace_next"].shift() == d["trace_next"]
        )
        d["match"] = d["api_offset"] == d["trace_next"]
        d["event_in_ioctl"] = (d["tsc_before"] <= d["event_ts"]) & (d["event_ts"] <= d["tsc_after"])
        d["kernel_tsc_in_ioctl"] = [
            (None if k is None or k != k else bool(b0 <= k <= b1))
            for k, b0, b1 in zip(d["kernel_tsc"], d["tsc_before"], d["tsc_after"])
        ]
    return d


def offsets(D):
    """offset_check over every dataset with both tables (empty frame otherwise)."""
    if len(D["kvm_ops"]) == 0 or len(D["tsc_offset_events"]) == 0:
        return pd.DataFrame()
    # once per Data (the prose, the offsets table and the MSR table read it); a copy each time
    return D.once("offsets", lambda: offset_check(D["kvm_ops"], D["tsc_offset_events"])).copy()


# -- cross-CPU skew ---------------------------------------------------------------------
def skew_bounds(pp):
    """Bounds on d = TSC(cpu_b) - TSC(cpu_a) from the ping-pong exchanges.

    direction 0 (a initiates): t2 - t3 < d < t2 - t1
    direction 1 (b initiates): the same for -d.
    Returns one row per (host, run, round) plus an 'all' row per run. Each run's columns are
    cut once into arrays and its rounds selected there (a fleet has hundreds of rounds: a
    frame filter per round and direction cost most of the chapter's key findings).
    """

    def ext(f, x):  # a Series' max/min: NaN where it has no value
        return f(x) if len(x) else np.nan

    rows = []
    for key, g in pp.groupby(["host_id", "run_id"], sort=False):
        rnd, d = g["round"].to_numpy(), g["direction"].to_numpy()
        t21, t32 = g["t2_minus_t1"].to_numpy(), g["t3_minus_t2"].to_numpy()
        ca, cb = g["cpu_a"].to_numpy(), g["cpu_b"].to_numpy()
        for r, at in [(r, np.flatnonzero(rnd == r)) for r in np.unique(rnd).tolist()] + [
            ("all", np.arange(len(g)))
        ]:
            a, b = at[d[at] == 0], at[d[at] == 1]
            lo0, hi0 = ext(np.max, -t32[a]), ext(np.min, t21[a])
            lo1, hi1 = ext(np.max, -t32[b]), ext(np.min, t21[b])
            lo, hi = max(lo0, -hi1), min(hi0, -lo1)
            rtt = pd.Series(np.concatenate([t21[a] + t32[a], t21[b] + t32[b]]))
            rows.append(
                {
                    "host_id": key[0],
                    "run_id": key[1],
                    "round": r,
                    "cpu_a": int(ca[at[0]]),
                    "cpu_b": int(cb[at[0]]),
                    "n": len(at),
                    "lo": int(lo),
                    "hi": int(hi),
                    "consistent": bool(lo <= 0 <= hi),
                    "bound": int(max(abs(lo), abs(hi))),
                    "rtt_median": float(rtt.median()),
                    "rtt_min": int(rtt.min()),
                }
            )
    return pd.DataFrame(rows)


def magnitude(e: decide.Estimate, basis: str = "") -> decide.Estimate:
    """|x| of an estimate of x: the interval of |x| is [0, max(|low|, |high|)] where x's
    interval contains 0, else its end nearer 0 to the farther one; same coverage."""
    lo, hi = sorted((abs(e.low), abs(e.high)))
    if e.low <= 0 <= e.high:
        lo = 0.0
    return decide.Estimate(abs(e.value), lo, hi, e.coverage, basis or e.basis)


def skew_estimate(row) -> decide.Estimate:
    """|TSC(cpu_b) - TSC(cpu_a)| from skew_bounds()'s 'all' row. The bounds are not a
    confidence interval but hard limits (each exchange's reads are ordered in time), so the
    interval of |d| has coverage 1; its value is the middle of the bounds, as the figure draws
    it. Bounds that cross (no constant skew fits every exchange) give no interval."""
    lo, hi, n = int(row["lo"]), int(row["hi"]), int(row["n"])
    mid = (lo + hi) / 2
    if lo > hi:
        return decide.Estimate(
            abs(mid), np.nan, np.nan, 1.0, f"bounds from {n:,} exchanges that cross"
        )
    if lo == hi:
        return decide.exact(abs(lo), f"bounds from {n:,} exchanges that meet")
    return magnitude(
        decide.Estimate(mid, lo, hi, 1.0, ""),
        f"hard bounds from the fastest of {n:,} exchanges (middle of the bounds)",
    )


# -- the timeline ---------------------------------------------------------------------------
def timeline_frame(events, samples, window: int = 4):
    """Host events and guest/host stamps of the first `window` non-warmup samples."""
    s = samples[samples["warmup"] == 0].sort_values("before", kind="stable").head(window)
    if not len(s):
        return pd.DataFrame()
    t0, t1 = int(s["before"].min()), int(s["after"].max())
    rows = []
    for r in s.itertuples():
        rows.append(
            {"ts": int(r.before), "source": "host user", "what": "before KVM_RUN", "sample": r.idx}
        )
        rows.append({"ts": int(r.guest), "source": "guest", "what": "guest RDTSC", "sample": r.idx})
        rows.append(
            {"ts": int(r.after), "source": "host user", "what": "after KVM_RUN", "sample": r.idx}
        )
    ev = events[(events["ts"] >= t0) & (events["ts"] <= t1)]
    for r in ev.itertuples():
        what = r.event
        if r.event == "kvm_emulate_insn":
            m = re.search(r":([0-9a-f]+):([0-9a-f ]+?)\s*\(", r.detail)
            what = f"emulate {m.group(2)}" if m else what
            if "failed" in r.detail:
                what += " (failed)"
        rows.append(
            {"ts": int(r.ts), "source": "host kernel (ftrace)", "what": what, "sample": None}
        )
    d = pd.DataFrame(rows).sort_values("ts", kind="stable").reset_index(drop=True)
    d["t_cycles"] = d["ts"] - t0
    return d


def timeline(D, window: int = 2):
    """timeline_frame of the quoted dataset's short traced run."""
    return timeline_frame(
        D.of_quoted(D["timeline_events"]), D.of_quoted(D["timeline_samples"]), window
    )


# -- the facts -------------------------------------------------------------------------------
def facts(D):
    """The quoted dataset's tsc_facts, in the order collect wrote them."""
    f = D.of_quoted(D["tsc_facts"])
    return f.assign(_k=f["key"].map(fact_rank)).sort_values("_k", kind="stable").drop(columns="_k")
