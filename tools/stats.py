"""Statistics shared by every chapter.

* median_ci: the distribution-free confidence interval of a median from order
  statistics (binomial ranks). No normality assumption; the exact coverage is
  returned with it because ranks make it discrete.
* summarize: n, median + CI, mean, stddev, CV and tail percentiles of a sample.
* diff_ci: a conservative interval for a difference of two medians.
* cv: coefficient of variation, for run-to-run stability.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats as _st

CI_METHOD = "distribution-free order-statistic CI of the median (binomial ranks)"


def median_ci(values, confidence: float = 0.95) -> tuple[float, float, float]:
    """(low, high, achieved_coverage) for the median of `values`.

    With n sorted values x(1)..x(n), P(x(k) <= median <= x(n-k+1)) =
    1 - 2*BinomCDF(k-1; n, 1/2). We take the largest k whose coverage is
    still >= `confidence`. Below n=6 no such k exists at 95 %; then the
    interval is [min, max] and the coverage returned is what it really is.
    """
    x = np.sort(np.asarray(values, dtype=float))
    x = x[~np.isnan(x)]
    n = len(x)
    if n == 0:
        return (math.nan, math.nan, math.nan)
    if n == 1:
        return (x[0], x[0], 0.0)
    best_k, best_cov = 1, 1 - 2 * _st.binom.cdf(0, n, 0.5)
    for k in range(1, n // 2 + 1):
        cov = 1 - 2 * _st.binom.cdf(k - 1, n, 0.5)
        if cov >= confidence:
            best_k, best_cov = k, cov
        else:
            break
    return (float(x[best_k - 1]), float(x[n - best_k]), float(best_cov))


@dataclass
class Summary:
    n: int
    median: float
    ci_low: float
    ci_high: float
    ci_coverage: float
    mean: float
    std: float
    cv: float
    p5: float
    p25: float
    p75: float
    p95: float
    p99: float
    min: float
    max: float

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(values, confidence: float = 0.95) -> Summary:
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    if len(x) == 0:
        nan = math.nan
        return Summary(0, *([nan] * 14))
    lo, hi, cov = median_ci(x, confidence)
    mean = float(np.mean(x))
    std = float(np.std(x, ddof=1)) if len(x) > 1 else 0.0
    q = np.percentile(x, [5, 25, 75, 95, 99])
    return Summary(len(x), float(np.median(x)), lo, hi, cov, mean, std,
                   std / mean if mean else math.nan, *map(float, q),
                   float(x.min()), float(x.max()))


def summarize_frame(df, by, value: str, confidence: float = 0.95):
    """Summary rows per group of a tidy frame, as a DataFrame."""
    import pandas as pd
    rows = []
    for key, g in df.groupby(by, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        by_l = [by] if isinstance(by, str) else list(by)
        rows.append({**dict(zip(by_l, key)), **summarize(g[value], confidence).as_dict()})
    return pd.DataFrame(rows)


def diff_ci(a_low: float, a_high: float, b_low: float, b_high: float) -> tuple[float, float]:
    """Conservative interval for median(a) - median(b) from their two CIs.

    If both CIs hold, the difference lies in [a_low - b_high, a_high - b_low];
    by the union bound the coverage is at least 1 - (alpha_a + alpha_b).
    """
    return (a_low - b_high, a_high - b_low)


def cv(values) -> float:
    x = np.asarray(values, dtype=float)
    if len(x) < 2 or np.mean(x) == 0:
        return math.nan
    return float(np.std(x, ddof=1) / np.mean(x))
