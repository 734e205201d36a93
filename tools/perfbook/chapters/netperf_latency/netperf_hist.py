"""netperf's percentiles, re-implemented: netlib.c HIST_add's buckets (100 per decade of
integer microseconds) and HIST_get_percentile's rank and interpolation, so that they can be
applied to our exact samples. Pure numpy, no I/O."""
from __future__ import annotations

import math

import numpy as np


def netperf_bucket_width_us(us) -> np.ndarray:
    """Width of the netperf histogram bucket holding a latency of `us` microseconds.

    netlib.c HIST_add: 8 decades (1 us .. 100 s), 100 buckets each (hist.h
    HIST_NUM_OF_BUCKET), so the width is a hundredth of the decade: 0.1 us below
    10 us, 1 us for 10..99 us, 10 us for 100..999 us, 100 us for 1..9.99 ms ...
    """
    us = np.maximum(np.asarray(us, dtype=float), 1.0)
    decade = np.floor(np.log10(us))
    return 10.0 ** decade / 10.0


def netperf_hist_counts(us_int) -> tuple[np.ndarray, int]:
    """Bucket integer-microsecond latencies the way netlib.c HIST_add does.

    Returns (counts[8*100], ridiculous): the 8 decades unit_usec, ten_usec, ...,
    ten_sec laid end to end, and the >= 100 s (or negative) count.
    """
    idx = netperf_bucket_index(us_int)
    ok = idx >= 0
    counts = np.bincount(idx[ok], minlength=800).astype(np.int64)
    return counts, int(np.count_nonzero(~ok))


def netperf_bucket_index(us_int) -> np.ndarray:
    """Flat bucket index (decade * 100 + bucket) under which netlib.c HIST_add files each
    integer-microsecond latency, with its float arithmetic; -1 for negative or >= 100 s."""
    v = np.atleast_1d(np.asarray(us_int, dtype=np.int64))
    out = np.full(v.shape, -1, dtype=np.int64)
    val = v.astype(np.float32)  # netperf divides a float by 10 per decade
    for d in range(8):
        sel = (val >= 0) & (val < 10)
        out[sel] = d * 100 + (val[sel] * 10).astype(np.int64)
        val = np.where(sel | (val < 0), np.float32(np.nan), val / np.float32(10))
    return out


def netperf_bucket_edges(idx) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) edge in us of flat netperf bucket `idx`: bucket i of decade d spans
    i * 10**d / 10 .. (i + 1) * 10**d / 10 (NaN for -1)."""
    idx = np.asarray(idx, dtype=np.int64)
    d, i = np.divmod(idx, 100)
    scale = np.where(idx >= 0, 10.0 ** d, np.nan)
    return i * scale / 10, (i + 1) * scale / 10


def netperf_rank(total: int, p: float) -> int:
    """netlib.c HIST_get_percentile's rank: num = (int)(percentile * (double)total), C
    truncation of the double product (so 0.29 * 100 gives 28). 1-based: the percentile is
    read in the bucket holding the num-th smallest latency."""
    return int(p * float(total))


def netperf_hist_percentile(counts: np.ndarray, total: int, p: float) -> int:
    """netlib.c HIST_get_percentile, step by step.

    num = (int)(total * p). For each decade in turn, HIST_search_bucket walks its 100
    buckets adding counts; in the first bucket where the running count reaches num it
    interpolates linearly by count inside the bucket and truncates to an integer number
    of microseconds: (int)((i + (num-last)/(current-last)) * scale / 10). A result of 0
    makes netperf go on with the next decade (a quirk we keep); past 100 s it is 1e8.
    """
    num = int(total * p)
    if num == 0:
        return 0
    last = current = 0
    for d in range(8):
        scale = 10.0 ** d
        r = 0
        for i in range(100):
            last = current
            current += int(counts[d * 100 + i])
            if current >= num:
                if current > last:
                    r = int((i + (num - last) / (current - last)) * scale / 10)
                break
        if r:
            return r
    return int(1e8)


def netperf_style_percentiles(lat_ns, phase_ns=None, ps=(0.5, 0.9, 0.99)) -> dict:
    """Percentiles of our samples as netperf would report them.

    netperf times a transaction with two gettimeofday() stamps (integer us), so a
    latency becomes floor(end_us) - floor(start_us); `phase_ns` (the start's ns
    within its us) reproduces that; without it we truncate.
    """
    us = _netperf_us(lat_ns, phase_ns)
    counts, _ = netperf_hist_counts(us)
    return {p: netperf_hist_percentile(counts, len(us), p) for p in ps}


def _netperf_us(lat_ns, phase_ns=None) -> np.ndarray:
    lat = np.asarray(lat_ns, dtype=np.int64)
    if phase_ns is None:
        return lat // 1000
    return (np.asarray(phase_ns, dtype=np.int64) + lat) // 1000


def netperf_rank_samples(lat_ns, phase_ns=None, ps=(0.5, 0.9, 0.99)) -> dict:
    """Our sample at netperf's own rank: the netperf_rank(n, p)-th smallest latency in
    the integer microseconds netperf would have stamped (as netperf_style_percentiles).

    HIST_get_percentile walks the buckets until the running count reaches that rank, so
    the bucket it interpolates in is the bucket holding this sample, and its result lies
    in that bucket's closed interval (netperf_in_rank_bucket). NaN when the rank is 0.
    """
    us = np.sort(_netperf_us(lat_ns, phase_ns))
    out = {}
    for p in ps:
        k = netperf_rank(len(us), p)
        out[p] = int(us[k - 1]) if k >= 1 else math.nan
    return out


def netperf_in_rank_bucket(value_us, rank_us) -> np.ndarray:
    """Whether netperf's percentile `value_us` lies in the bucket holding the sample at its
    rank `rank_us`, edges included: HIST_search_bucket returns
    (int)((i + (num - last) / (current - last)) * scale / 10) with a fraction in (0, 1],
    i.e. a point of (lower, upper] truncated to an integer, so lower <= value <= upper (the
    upper edge when the rank is the bucket's last sample). Exact: only a defect breaks it."""
    v = np.asarray(value_us, dtype=float)
    r = np.asarray(rank_us, dtype=float)
    ok = np.isfinite(r) & np.isfinite(v)
    idx = np.full(r.shape, -1, dtype=np.int64)
    idx[ok] = netperf_bucket_index(r[ok].astype(np.int64)).reshape(-1)
    lo, hi = netperf_bucket_edges(idx)
    return ok & (idx >= 0) & (lo <= v) & (v <= hi)
