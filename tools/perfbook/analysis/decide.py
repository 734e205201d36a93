"""A finding's decisive quantity as a number with its interval, and the three-valued verdict.

A key finding is a claim about one number: a ratio, a shift or a share, computed by the
chapter's analysis (never read back from display text). The number is an Estimate: its point
value, an interval, and the interval's real coverage (what the method guarantees at this n,
not what was asked for), with what the interval rests on. decide() sets the interval against
the claim's threshold:

* holds          the whole interval is on the claim's side;
* does not hold  the whole interval is on the other side;
* undecided      the interval straddles the threshold, or its real coverage is below the
                 finding's confidence (2 against 2 cannot give a 95 % interval), with why.

pool() makes one Estimate of a host's runs (perfbook.analysis.findings): the run is the unit
of repetition, so the interval is a t-interval over the runs' own estimates (on the log scale
for a ratio). Its spread is the between-run variance, which includes the within-run one: a
host with two runs that agree within each run but not with each other stays undecided.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import special as _sp

from perfbook.analysis import stats

HOLDS, FAILS, UNDECIDED, NOT_MEASURED = "holds", "does not hold", "undecided", "not measured"


@dataclass(frozen=True)
class Estimate:
    value: float
    low: float
    high: float
    coverage: float  # the interval's real coverage: 1.0 for an exact value (a count, a fact)
    basis: str  # what the interval rests on, in the reader's words
    scale: str = "linear"  # "log": a ratio, pooled and compared on the log scale

    @property
    def exact(self) -> bool:
        return self.coverage >= 1.0 and self.low == self.high == self.value

    def as_doc(self) -> list:
        return [self.value, self.low, self.high, self.coverage, self.basis, self.scale]

    @classmethod
    def from_doc(cls, doc) -> Estimate:
        v, lo, hi, cov, basis, scale = doc
        f = lambda x: math.nan if x is None else float(x)
        return cls(f(v), f(lo), f(hi), f(cov), str(basis), str(scale))


def _finite(*xs) -> bool:
    return all(isinstance(x, (int, float)) and math.isfinite(x) for x in xs)


def exact(value: float, basis: str = "an exact count") -> Estimate:
    """A number without sampling error: a count, a configured fact, a published figure."""
    return Estimate(float(value), float(value), float(value), 1.0, basis)


def _clean(x) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    return x[~np.isnan(x)]


def location(values, confidence: float = 0.95, what: str = "values") -> Estimate:
    """The median of `values` with its distribution-free order-statistic interval."""
    x = _clean(values)
    lo, hi, cov = stats.median_ci(x, confidence)
    med = float(np.median(x)) if len(x) else math.nan
    return Estimate(med, lo, hi, 0.0 if math.isnan(cov) else cov, f"median of {len(x)} {what}")


def quantile_ci(values, q: float, confidence: float = 0.95) -> tuple[float, float, float, float]:
    """(estimate, low, high, coverage) of the q-quantile from order statistics: the
    narrowest symmetric-in-probability pair of ranks whose binomial coverage reaches
    `confidence` (else [min, max] with what it covers)."""
    x = np.sort(_clean(values))
    n = len(x)
    if n == 0:
        return (math.nan, math.nan, math.nan, math.nan)
    est = float(np.quantile(x, q))
    if n == 1:
        return (est, est, est, 0.0)
    a = (1 - confidence) / 2
    # ranks j < k (1-based) with P(x(j) <= xi_q <= x(k)) = Bin(k-1) - Bin(j-1) >= confidence
    j = int(max(1, _binom_ppf(a, n, q)))
    k = int(min(n, _binom_ppf(1 - a, n, q) + 1))
    cov = float(_sp.bdtr(k - 1, n, q) - (_sp.bdtr(j - 1, n, q) if j > 1 else 0.0))
    return (est, float(x[j - 1]), float(x[k - 1]), cov)


def _binom_ppf(p: float, n: int, q: float) -> int:
    """The smallest r with BinomCDF(r; n, q) >= p."""
    cdf = _sp.bdtr(np.arange(n + 1), n, q)
    return int(np.searchsorted(cdf, p))


def quantile(values, q: float, confidence: float = 0.95, what: str = "values") -> Estimate:
    est, lo, hi, cov = quantile_ci(values, q, confidence)
    n = len(_clean(values))
    return Estimate(est, lo, hi, 0.0 if math.isnan(cov) else cov, f"P{q * 100:g} of {n} {what}")


def shift(a, b, confidence: float = 0.95, what: str = "values") -> Estimate:
    """The Hodges-Lehmann shift a - b with Moses' distribution-free interval."""
    a, b = _clean(a), _clean(b)
    est, lo, hi = stats.hodges_lehmann(a, b, confidence)
    cov, _ = stats.hodges_lehmann_coverage(len(a), len(b), confidence)
    return Estimate(
        est,
        lo,
        hi,
        0.0 if math.isnan(cov) else cov,
        f"Hodges-Lehmann shift, {len(a)} against {len(b)} {what}",
    )


def ratio(a, b, confidence: float = 0.95, what: str = "values") -> Estimate:
    """a / b as exp of the Hodges-Lehmann shift of the logs (positive values): the typical
    ratio, with Moses' interval carried over."""
    a, b = _clean(a), _clean(b)
    if (a <= 0).any() or (b <= 0).any():
        raise ValueError("ratio() needs positive values")
    s = shift(np.log(a), np.log(b), confidence, what)
    return Estimate(
        math.exp(s.value),
        math.exp(s.low),
        math.exp(s.high),
        s.coverage,
        f"ratio from the Hodges-Lehmann shift of logs, {len(a)} against {len(b)} {what}",
        "log",
    )


def share(k: int, n: int, confidence: float = 0.95, what: str = "") -> Estimate:
    """k of n as a share with its Clopper-Pearson interval (coverage at least `confidence`)."""
    from scipy.stats import beta  # lazy: scipy.stats costs 0.6 s of a process that never asks

    k, n = int(k), int(n)
    if n <= 0:
        return Estimate(math.nan, math.nan, math.nan, 0.0, "no trials")
    a = 1 - confidence
    lo = 0.0 if k == 0 else float(beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a / 2, k + 1, n - k))
    return Estimate(k / n, lo, hi, confidence, f"Clopper-Pearson, {k} of {n}{what}")


def divide(num: Estimate, den: Estimate, basis: str = "") -> Estimate:
    """num / den of two independent estimates (positive): the interval by the union bound,
    [num.low / den.high, num.high / den.low], covers at least 1 - (1 - c1) - (1 - c2)."""
    cov = max(0.0, 1.0 - (1.0 - num.coverage) - (1.0 - den.coverage))
    if not (den.low > 0 and num.low >= 0):
        lo = hi = math.nan
        cov = 0.0
    else:
        lo, hi = num.low / den.high, num.high / den.low
    return Estimate(
        num.value / den.value,
        lo,
        hi,
        cov,
        basis or f"({num.basis}) / ({den.basis}), union bound",
        "log",
    )


def minus(a: Estimate, b: Estimate, basis: str = "") -> Estimate:
    """a - b of two independent estimates, the interval by the union bound."""
    cov = max(0.0, 1.0 - (1.0 - a.coverage) - (1.0 - b.coverage))
    return Estimate(
        a.value - b.value,
        a.low - b.high,
        a.high - b.low,
        cov,
        basis or f"({a.basis}) - ({b.basis}), union bound",
    )


def scaled(e: Estimate, by: float, basis: str = "") -> Estimate:
    """e / by for an exact `by` (a published figure): the interval scales with it."""
    lo, hi = sorted((e.low / by, e.high / by))
    return replace(e, value=e.value / by, low=lo, high=hi, basis=basis or e.basis)


def _union(estimates) -> float:
    return max(0.0, 1.0 - sum(1.0 - e.coverage for e in estimates))


def _extreme(pick, word: str, estimates, basis: str) -> Estimate:
    """pick (min or max) of several quantities, each estimated on its own: where every quantity
    lies in its interval, the picked one lies in [pick of lows, pick of highs], so that
    interval covers it with at least the union bound 1 - sum(1 - c_i) (the estimates need not
    be independent)."""
    return Estimate(
        pick(e.value for e in estimates),
        pick(e.low for e in estimates),
        pick(e.high for e in estimates),
        _union(estimates),
        basis or f"the {word} of: " + "; ".join(e.basis for e in estimates) + " (union bound)",
        "log" if all(e.scale == "log" for e in estimates) else "linear",
    )


def lesser(*estimates: Estimate, basis: str = "") -> Estimate:
    """The least of several quantities (_extreme): a claim that every one of them is above a
    threshold is decided on it; give each at confidence 1 - (1 - c) / k for a union of c."""
    return _extreme(min, "lesser", estimates, basis)


def greatest(*estimates: Estimate, basis: str = "") -> Estimate:
    """The greatest of several quantities (_extreme): a claim that every one of them is below
    a threshold."""
    return _extreme(max, "greatest", estimates, basis)


def fold(e: Estimate) -> Estimate:
    """A ratio's distance from 1 in either direction, as a factor >= 1: max(r, 1/r), for a claim
    that something changes by more than a factor whichever way. Its interval is the ratio's,
    folded (one that straddles 1 gives [1, the farther end])."""
    lo, hi = e.low, e.high
    if lo >= 1:
        flo, fhi = lo, hi
    elif hi <= 1:
        flo, fhi = 1 / hi, 1 / lo
    else:
        flo, fhi = 1.0, max(hi, 1 / lo)
    return replace(e, value=max(e.value, 1 / e.value), low=flo, high=fhi)


@dataclass(frozen=True)
class Decision:
    verdict: str
    why: str = ""  # for an undecided verdict: what keeps it open


def fmt(x: float, digits: int = 3) -> str:
    """x with `digits` significant digits, thousands separated, a minus sign (never 'nan')."""
    if not _finite(x):
        return "n/a"
    if x == 0:
        return "0"
    mag = int(math.floor(math.log10(abs(x))))
    d = max(0, digits - 1 - mag)
    s = f"{abs(x):,.{d}f}"
    return ("\u2212" if x < 0 else "") + s


def coverage_words(e: Estimate) -> str:
    """'95 % interval', '66.66 % interval': the interval's real coverage, rounded down."""
    if e.exact:
        return "exact"
    return f"{stats.coverage_text([e.coverage])} interval"


def interval_text(e: Estimate, unit: str = "") -> str:
    """'2.31× (95 % interval 2.10–2.52×)' or '12 (exact)': the number and its interval."""
    u = unit if unit in ("", "×", "%") or unit.startswith(" ") else f" {unit}"
    if e.exact:
        return f"{fmt(e.value)}{u}"
    if not _finite(e.low, e.high):
        return f"{fmt(e.value)}{u} (no interval: {e.basis})"
    if e.coverage <= 0:  # a range that covers nothing known (one value, pseudo-replication)
        return f"{fmt(e.value)}{u} (range {fmt(e.low)}–{fmt(e.high)}{u}, no coverage claimed)"
    return f"{fmt(e.value)}{u} ({coverage_words(e)} {fmt(e.low)}–{fmt(e.high)}{u})"


def decide(e: Estimate | None, side: str, threshold: float, confidence: float = 0.95) -> Decision:
    """The three-valued verdict of the claim `value <side> threshold` (side '>' or '<')."""
    if side not in (">", "<"):
        raise ValueError(f"side must be '>' or '<', not {side!r}")
    if e is None or not _finite(e.value):
        return Decision(NOT_MEASURED)
    if not _finite(e.low, e.high):  # no interval at all: not a question of n (a confound)
        return Decision(UNDECIDED, f"no interval: {e.basis}")
    if not e.exact and e.coverage < confidence:
        have = stats.coverage_text([e.coverage]) if e.coverage > 0 else "no"
        return Decision(
            UNDECIDED,
            f"n too small: {e.basis} gives {have} coverage, short of {confidence * 100:g} %",
        )
    above, below = e.low > threshold, e.high < threshold
    if side == ">":
        if above:
            return Decision(HOLDS)
        if e.high <= threshold:
            return Decision(FAILS)
    else:
        if below:
            return Decision(HOLDS)
        if e.low >= threshold:
            return Decision(FAILS)
    return Decision(
        UNDECIDED, f"the interval {fmt(e.low)}–{fmt(e.high)} straddles {fmt(threshold)}"
    )


def _t(confidence: float, df: int) -> float:
    return float(_sp.stdtrit(df, 0.5 + confidence / 2))


def _within_se(e: Estimate, log: bool) -> float:
    """The standard error one run's own interval implies (on the log scale for a ratio):
    half its width over the normal quantile of its coverage (hard bounds, coverage 1, as if
    95 %); 0 for an exact value, nan where its interval says nothing (no coverage, a bound at
    0 on the log scale)."""
    if e.exact:
        return 0.0
    if not (0 < e.coverage <= 1) or not _finite(e.low, e.high):
        return math.nan
    cov = min(e.coverage, 0.95)  # hard bounds (coverage 1): read as a 95 % interval
    if log:
        if e.low <= 0:
            return math.nan
        lo, hi = math.log(e.low), math.log(e.high)
    else:
        lo, hi = e.low, e.high
    return (hi - lo) / (2 * stats._z(cov))


def pool(estimates: list[Estimate], confidence: float = 0.95) -> Estimate | None:
    """One Estimate from several runs of one condition (a host, one kernel build): a
    t-interval over the runs' point estimates (log scale for a ratio), never narrower than
    the runs' own intervals allow (the half-width is at least z * sqrt(sum se_i^2) / k, as in
    the modified Hartung-Knapp method: two runs that agree by chance do not make a zero-width
    interval). One run: its own estimate. Exact values that all agree stay exact. Estimates
    without a finite interval are left out."""
    # a run without an interval has no comparison to pool (a confound its chapter named, as
    # virtio_blk_iothread's event_idx): it is shown under the verdict and left out here
    es = [e for e in estimates if e is not None and _finite(e.value, e.low, e.high)]
    if not es:
        return None
    if len(es) == 1:
        return es[0]
    if all(e.exact for e in es) and len({e.value for e in es}) == 1:
        return es[0]
    log = all(e.scale == "log" for e in es) and all(e.value > 0 for e in es)
    y = np.array([math.log(e.value) if log else e.value for e in es])
    k = len(y)
    m, s = float(y.mean()), float(y.std(ddof=1))
    half = _t(confidence, k - 1) * s / math.sqrt(k)
    se = [_within_se(e, log) for e in es]
    if all(math.isfinite(x) for x in se):
        half = max(half, stats._z(confidence) * math.sqrt(sum(x * x for x in se)) / k)
    back = math.exp if log else (lambda v: v)
    return Estimate(
        back(m),
        back(m - half),
        back(m + half),
        confidence,
        f"t-interval over {k} runs' estimates{' (log scale)' if log else ''}",
        "log" if log else "linear",
    )
