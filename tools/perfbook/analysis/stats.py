"""Statistics shared by every chapter.

* median_ci: the distribution-free confidence interval of a median from order
  statistics (binomial ranks). No normality assumption; the exact coverage is
  returned with it because ranks make it discrete.
* summarize: n, median + CI, mean, stddev, CV and tail percentiles of a sample.
* diff_ci: a conservative interval for a difference of two medians.
* cv: coefficient of variation, for run-to-run stability.
* compare / compare_frame: Mann-Whitney U, Cliff's delta and the Hodges-Lehmann
  shift with its CI; says "not significant" when p >= alpha.
* Repetition: adaptive repetition until every median's CI is narrower than a
  target or a time budget runs out (the reason is recorded); warm-up excluded.
* caption: figure captions stating n, CI method, warm-up and host, from data.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy import special as _sp

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
    best_k, best_cov = _median_ci_rank(n, confidence)
    return (float(x[best_k - 1]), float(x[n - best_k]), float(best_cov))


def _median_ci_rank(n: int, confidence: float) -> tuple[int, float]:
    # the coverage of [x(k), x(n-k+1)] for every k = 1 .. n//2 in one call (it falls as k grows):
    # the largest k that still covers `confidence`, else k = 1 ([min, max]) with what it covers
    cov = 1 - 2 * _sp.bdtr(np.arange(max(n // 2, 1)), n, 0.5)  # the binomial CDF
    ok = np.flatnonzero(cov >= confidence)
    k = int(ok[-1]) + 1 if len(ok) else 1
    return k, float(cov[k - 1])


def median_ci_coverage(n: int, confidence: float = 0.95) -> float:
    """The real coverage of median_ci's interval for n values (nan for n = 0, 0 for n = 1).

    At least `confidence` from n = 6 on (at 95 %); below that the interval is
    [min, max], whose coverage is 1 - 2 * 0.5**n (93.75 % at n = 5, 75 % at n = 3).
    """
    n = int(n)
    if n <= 0:
        return math.nan
    if n == 1:
        return 0.0
    return _median_ci_rank(n, confidence)[1]


def coverage_text(coverages) -> str:
    """'96.87 %' or '75–96.87 %': coverages as percentages, rounded down (never overstated)."""
    vals = sorted(
        {
            math.floor(float(c) * 10000 + 1e-6) / 100
            for c in np.atleast_1d(coverages)
            if not math.isnan(float(c))
        }
    )
    if not vals:
        return "n/a"
    f = lambda v: f"{v:.2f}".rstrip("0").rstrip(".")
    return f"{f(vals[0])} %" if len(vals) == 1 else f"{f(vals[0])}–{f(vals[-1])} %"


def ci_label(n, confidence: float = 0.95) -> str:
    """Label for median CIs over groups of n values (scalar or per group), with the real
    coverage: '96.87 % CI' (n = 6), '75–93.75 % CI' (n = 3–5)."""
    ns = [int(v) for v in np.atleast_1d(n) if not (isinstance(v, float) and math.isnan(v))]
    return f"{coverage_text([median_ci_coverage(k, confidence) for k in ns])} CI"


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
    return Summary(
        len(x),
        float(np.median(x)),
        lo,
        hi,
        cov,
        mean,
        std,
        std / mean if mean else math.nan,
        *map(float, q),
        float(x.min()),
        float(x.max()),
    )


def summarize_frame(df, by, value: str, confidence: float = 0.95):
    """Summary rows per group of a tidy frame, as a DataFrame."""
    rows = []
    by_l = [by] if isinstance(by, str) else list(by)
    # the value column's groups alone (a sub-frame per group cost as much as its summary)
    for key, g in df.groupby(by, sort=True)[value]:
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(by_l, key)), **summarize(g, confidence).as_dict()})
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


# --------------------------------------------------------------------------
# comparisons: a rank test, an effect size, a shift estimate with its CI
# --------------------------------------------------------------------------
COMPARE_METHOD = (
    "two-sided Mann-Whitney U test; effect size Cliff's delta; "
    "Hodges-Lehmann shift with its distribution-free CI"
)
# Romano et al. (2006) thresholds for |Cliff's delta|
_DELTA_LABELS = ((0.147, "negligible"), (0.33, "small"), (0.474, "medium"), (math.inf, "large"))
_MAX_PAIRS = 4_000_000  # pairwise differences kept exactly up to this many


@dataclass
class Comparison:
    n_a: int
    n_b: int
    median_a: float
    median_b: float
    shift: float  # Hodges-Lehmann estimate of a - b
    shift_low: float
    shift_high: float
    rel_shift: float  # shift / median_b
    rel_low: float
    rel_high: float
    p_value: float
    cliffs_delta: float  # P(a > b) - P(a < b), in [-1, 1]
    magnitude: str  # negligible / small / medium / large
    significant: bool
    alpha: float
    verdict: str  # one line, e.g. "a is 4.1 % higher (p = 0.002, large)"

    def as_dict(self) -> dict:
        return asdict(self)


def _pairwise_diffs(a: np.ndarray, b: np.ndarray, rng_seed: int = 0) -> np.ndarray:
    if len(a) * len(b) <= _MAX_PAIRS:
        return (a[:, None] - b[None, :]).ravel()
    # Too many pairs to hold: a fixed-seed random sample of pairs (deterministic).
    rng = np.random.default_rng(rng_seed)
    i = rng.integers(0, len(a), _MAX_PAIRS)
    j = rng.integers(0, len(b), _MAX_PAIRS)
    return a[i] - b[j]


def hodges_lehmann(a, b, confidence: float = 0.95) -> tuple[float, float, float]:
    """(estimate, low, high) of the location shift a - b.

    The estimate is the median of all pairwise differences; the interval takes
    the order statistics of those differences whose ranks come from the
    null distribution of U (normal approximation with continuity), as in
    Moses' distribution-free interval. No normality of the data is assumed.
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        return (math.nan, math.nan, math.nan)
    d = np.sort(_pairwise_diffs(a, b))
    est = float(np.median(d))
    nm = n * m
    k = _hl_rank(n, m, confidence)
    if k < 0:
        return (est, float(d[0]), float(d[-1]))
    scale = len(d) / nm  # sampled pairs: map ranks proportionally
    lo_i = min(len(d) - 1, int(k * scale))
    hi_i = max(0, len(d) - 1 - int(k * scale))
    return (est, float(d[lo_i]), float(d[hi_i]))


def _hl_rank(n: int, m: int, confidence: float) -> int:
    """hodges_lehmann's k: the interval is the (k+1)-th smallest to (k+1)-th largest of
    the n*m differences; k from the normal approximation of U (negative: [min, max])."""
    nm = n * m
    z = _z(confidence)
    return int(math.floor(nm / 2 - z * math.sqrt(nm * (n + m + 1) / 12.0) - 0.5))


def _z(confidence: float) -> float:
    """The normal quantile of a two-sided `confidence`."""
    return float(_sp.ndtri(0.5 + confidence / 2))


_HL_EXACT_MAX_PAIRS = 20_000  # exact null distribution of U up to this many pairs


def _mwu_cdf(n: int, m: int, k: int) -> float:
    """P(U <= k) under the null (continuous data): U counts pairs with a > b among
    C(n+m, n) equally likely orders; f(i, j) = shift(f(i-1, j), j) + f(i, j-1)."""
    if k < 0:
        return 0.0
    n, m = max(n, m), min(n, m)  # U's null distribution is symmetric in n and m
    width = k + 1  # only counts up to k are needed
    row = [np.zeros(width) for _ in range(m + 1)]
    row[0][0] = 1.0
    for j in range(1, m + 1):  # i = 0: every order has U = 0
        row[j][0] = 1.0
    for _ in range(1, n + 1):
        new = [row[0].copy()]
        for j in range(1, m + 1):
            f = new[j - 1].copy()
            if j < width:
                f[j:] += row[j][: width - j]
            new.append(f)
        row = new
    return float(row[m].sum() / math.comb(n + m, n))


def hodges_lehmann_coverage(n: int, m: int, confidence: float = 0.95) -> tuple[float, bool]:
    """(coverage, exact) of hodges_lehmann's interval for samples of n and m values.

    The interval is [D(k+1), D(nm-k)] of the nm sorted differences, k from a normal
    approximation (_hl_rank); for continuous data without ties its exact coverage is
    1 - 2 P(U <= k) (Moses), and the [min, max] fallback (k < 0) has 1 - 2 / C(n+m, n):
    66.67 % for 2 vs 2, 80 % for 3 vs 2, 90 % for 3 vs 3. Computed exactly up to
    _HL_EXACT_MAX_PAIRS pairs; beyond that (exact False) the nominal value of the normal
    approximation, and past _MAX_PAIRS the differences are themselves a sample.
    """
    n, m = int(n), int(m)
    if n <= 0 or m <= 0:
        return (math.nan, True)
    k = max(_hl_rank(n, m, confidence), 0)
    if n * m <= _HL_EXACT_MAX_PAIRS:
        return (1.0 - 2.0 * _mwu_cdf(n, m, k), True)
    mu, sd = n * m / 2, math.sqrt(n * m * (n + m + 1) / 12.0)
    return (1.0 - 2.0 * float(_sp.ndtr((k + 0.5 - mu) / sd)), False)


def hl_ci_label(pairs, confidence: float = 0.95) -> str:
    """Label for Hodges-Lehmann intervals over groups of (n, m) sample sizes (one pair or
    a list), with their real coverage: '90–95.24 % CI'; 'approx. 95 % CI' where some
    coverage is only the normal approximation's."""
    pairs = [pairs] if np.ndim(pairs) == 1 else list(pairs)
    covs = [hodges_lehmann_coverage(n, m, confidence) for n, m in pairs]
    if covs and not all(exact for _, exact in covs):
        return f"approx. {confidence * 100:g} % CI"
    return f"{coverage_text([c for c, _ in covs])} CI"


def min_p_value(n: int, m: int) -> float:
    """The smallest two-sided p-value the Mann-Whitney test can give for n against m values
    without ties: both extreme orders, 2 / C(n+m, n) (0.33 for 2 against 2, 0.1 for 3 against
    3, 0.029 for 4 against 4). Where it is not below alpha, no data could be significant."""
    log_orders = math.lgamma(n + m + 1) - math.lgamma(n + 1) - math.lgamma(m + 1)
    return min(1.0, 2.0 * math.exp(-log_orders))  # in logs: C(n+m, n) overflows a float


def compare(
    a, b, alpha: float = 0.05, confidence: float = 0.95, names: tuple[str, str] = ("a", "b")
) -> Comparison:
    """Compare sample `a` against baseline `b` without assuming normality.

    Significance comes from the two-sided Mann-Whitney U test; the size of the
    difference from Cliff's delta (dominance) and from the Hodges-Lehmann shift
    with its CI, also relative to median(b). `verdict` says "not significant"
    when p >= alpha, whatever the point estimates say; where n against m cannot reach alpha
    at all (min_p_value), the test is not run (p_value nan) and `verdict` says "not tested".
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    n, m = len(a), len(b)
    if n < 2 or m < 2:
        raise ValueError(f"compare needs at least 2 values per side, got {n} and {m}")
    # Cliff's delta from U = (a > b) + 0.5 ties over all pairs, whether or not a test is run
    bs = np.sort(b)
    lo, hi = np.searchsorted(bs, a, "left"), np.searchsorted(bs, a, "right")
    u = float(lo.sum() + 0.5 * (hi - lo).sum())  # O((n + m) log m), as the test's own U
    delta = 2.0 * u / (n * m) - 1.0
    mag = next(lbl for thr, lbl in _DELTA_LABELS if abs(delta) < thr)
    testable = min_p_value(n, m) < alpha
    if testable:
        # scipy.stats costs 0.6 s of every perfbook process that imports this module (a
        # collect's stopping rule needs only median_ci, whose binomial CDF scipy.special has)
        from scipy.stats import mannwhitneyu  # lazy: 0.6 s of each collect's start

        p = float(mannwhitneyu(a, b, alternative="two-sided").pvalue)
    else:
        p = math.nan  # not run: no outcome of n against m could reach alpha (#42)
    est, lo, hi = hodges_lehmann(a, b, confidence)
    med_b = float(np.median(b))
    rel = lambda v: v / med_b if med_b else math.nan
    sig = p < alpha
    na, nb = names
    if sig:
        word = "higher" if est > 0 else "lower"
        verdict = (
            f"{na} is {abs(rel(est)) * 100:.1f} % {word} than {nb} "
            f"(p = {p:.2g}, Cliff's delta {delta:+.2f}, {mag})"
        )
    elif not testable:
        verdict = (
            f"{na} vs {nb}: not tested ({n} against {m} cannot reach p < {alpha:g}; "
            f"Cliff's delta {delta:+.2f}, {mag})"
        )
    else:
        verdict = f"{na} vs {nb}: not significant (p = {p:.2g}, Cliff's delta {delta:+.2f}, {mag})"
    return Comparison(
        n,
        m,
        float(np.median(a)),
        med_b,
        est,
        lo,
        hi,
        rel(est),
        rel(lo),
        rel(hi),
        p,
        delta,
        mag,
        sig,
        alpha,
        verdict,
    )


def compare_frame(
    df, by: str, value: str, baseline, within=None, alpha: float = 0.05, pair_check=None
):
    """One Comparison row per group of `by` against its `baseline` group.

    `within` (a column or list) repeats the comparison inside each of its
    groups, e.g. per host. `pair_check(variant, baseline)` -> (ok, why) leaves out a pair
    whose comparison would carry no information (perfbook.data.machine.comparable for hosts: a TCG
    guest against a real CPU); its row keeps the medians and says why in `verdict`.
    Returns a DataFrame.
    """
    within_l = [] if within is None else ([within] if isinstance(within, str) else list(within))
    groups = df.groupby(within_l, sort=True) if within_l else [((), df)]
    rows = []
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        base = g.loc[g[by] == baseline, value]
        for variant, gv in g.groupby(by, sort=True):
            if variant == baseline or len(base) < 2 or len(gv) < 2:
                continue
            ok, why = pair_check(variant, baseline) if pair_check else (True, "")
            if not ok:
                nan = float("nan")
                rows.append(
                    {
                        **dict(zip(within_l, key)),
                        by: variant,
                        "baseline": baseline,
                        **Comparison(
                            len(gv),
                            len(base),
                            float(gv[value].median()),
                            float(base.median()),
                            nan,
                            nan,
                            nan,
                            nan,
                            nan,
                            nan,
                            nan,
                            nan,
                            "not compared",
                            False,
                            alpha,
                            why,
                        ).as_dict(),
                        "compared": False,
                    }
                )
                continue
            c = compare(gv[value], base, alpha=alpha, names=(str(variant), str(baseline)))
            rows.append(
                {
                    **dict(zip(within_l, key)),
                    by: variant,
                    "baseline": baseline,
                    **c.as_dict(),
                    "compared": True,
                }
            )
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------
# adaptive repetition
# --------------------------------------------------------------------------
def _n_text(n) -> str:
    vals = sorted(
        {int(v) for v in np.atleast_1d(n) if not (isinstance(v, float) and math.isnan(v))}
    )
    if not vals:
        return "n = 0"
    return f"n = {vals[0]}" if len(vals) == 1 else f"n = {vals[0]}–{vals[-1]}"


def _singular(unit: str) -> str:
    """'batches' -> 'batch', 'runs' -> 'run' (for a count of one)."""
    for plural, single in (("ches", "ch"), ("shes", "sh"), ("ses", "s"), ("s", "")):
        if unit.endswith(plural):
            return unit[: -len(plural)] + single
    return unit


def host_text(hosts) -> str:
    """'host h-1db0… (AMD EPYC, 2 CPUs, kvm guest)' for one or more (id, description)."""
    items = []
    seen = set()
    for h in hosts:
        hid, desc = (h, None) if isinstance(h, str) else (h[0], h[1] if len(h) > 1 else None)
        if hid in seen:
            continue
        seen.add(hid)
        items.append(f"{hid} ({desc})" if desc else str(hid))
    word = "host" if len(items) == 1 else "hosts"
    return f"{word} " + "; ".join(items) if items else "no host"


def caption(
    what: str,
    *,
    n,
    unit: str,
    warmup,
    hosts,
    confidence: float = 0.95,
    ci: bool = True,
    extra: str = "",
) -> str:
    """A figure caption stating n, the CI method, warm-up and host, from data.

    `n` and `warmup` may be scalars or sequences (per group); ranges are shown
    as lo–hi. `hosts` is a list of host ids or (id, description) pairs.
    """
    parts = [what.rstrip(".") + "."]
    parts.append(f"{_n_text(n)} {unit} per group")
    w = sorted({int(v) for v in np.atleast_1d(warmup)})
    wt = (f"{w[0]}" if len(w) == 1 else f"{w[0]}–{w[-1]}") if w else "0"
    wunit = _singular(unit) if wt == "1" else unit
    parts[-1] += f", after {wt} warm-up {wunit} (excluded)."
    if ci:
        ns = [int(v) for v in np.atleast_1d(n) if not (isinstance(v, float) and math.isnan(v))]
        covs = [median_ci_coverage(k, confidence) for k in ns]
        text = f"Bars/bands: {CI_METHOD}, coverage {coverage_text(covs)}"
        if any(c < confidence for c in covs if not math.isnan(c)):
            text += (
                f" (below {confidence * 100:.0f} % where n is too small for it: "
                "the interval is then [min, max])"
            )
        parts.append(text + ".")
    parts.append(host_text(hosts)[0].upper() + host_text(hosts)[1:] + ".")
    if extra:
        parts.append(extra.rstrip(".") + ".")
    return " ".join(parts)


def hosts_of(manifests) -> list[tuple[str, str]]:
    """(host_id, description) pairs from manifests, in first-seen order."""
    out = []
    for m in manifests:
        h = m.get("host", {})
        pair = (h.get("host_id", "?"), h.get("description"))
        if pair not in out:
            out.append(pair)
    return out


# --------------------------------------------------------------------------
# adaptive repetition settings in a chapter's PROFILES
# --------------------------------------------------------------------------
def n_rows(df) -> int:
    return 0 if df is None else len(df)


def significance_text(comparisons, alpha: float = 0.05) -> str:
    """'3 of 8 comparisons are significant at p < 0.05; the other 5 are not significant' for a
    compare_frame() result (also the all and none cases), for a chapter's prose."""
    skipped = (
        int((~comparisons["compared"]).sum())
        if n_rows(comparisons) and "compared" in comparisons
        else 0
    )
    if skipped:
        comparisons = comparisons[comparisons["compared"]]
    n = len(comparisons)
    k = int(comparisons["significant"].sum()) if n else 0
    if n == 0:
        return (
            f"no comparison was made ({skipped} pair(s) not comparable: a TCG guest against a real CPU)"
            if skipped
            else "no comparison could be made"
        )
    untested = int(comparisons["p_value"].isna().sum()) if "p_value" in comparisons else 0
    if untested == n:
        return (
            f"none of the {n} comparison(s) could be tested: too few repetitions to reach "
            f"p < {alpha:g}"
        )
    if k == n:
        return f"all {n} comparison(s) are significant at p < {alpha:g}"
    if k == 0:
        return f"none of the {n} comparison(s) is significant at p < {alpha:g}"
    return f"{k} of {n} comparisons are significant at p < {alpha:g}; the other {n - k} are not significant"
