"""The three-valued verdict (perfbook.analysis.decide) on synthetic data with a known truth.

For each kind of finding (a ratio, a shift, a share) and for a host's runs pooled, 1,000
simulated datasets: a claim that is false (its true value sits on the threshold, the hardest
false case) must be called "holds" in at most 5 % of them, and a claim true by a clear margin
must be decided in at least 80 % at the n the default profile gives. The same simulation run
with the old rule (a point estimate against the threshold) calls the false claim "holds" about
half the time: the check can fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfbook.analysis import decide as dc

SIMS = 1000
ALPHA_MAX = 0.05
POWER_MIN = 0.80


def _rates(make, side, threshold, seed):
    """(share called holds, share decided) of SIMS estimates from make(rng)."""
    rng = np.random.default_rng(seed)
    verdicts = [dc.decide(make(rng), side, threshold).verdict for _ in range(SIMS)]
    holds = sum(v == dc.HOLDS for v in verdicts) / SIMS
    decided = sum(v in (dc.HOLDS, dc.FAILS) for v in verdicts) / SIMS
    return holds, decided


# a ratio: A / B of per-round medians, 10 rounds each, 10 % run-to-run CV
def _ratio(true, n=10, cv=0.10):
    return lambda rng: dc.ratio(
        rng.lognormal(math.log(true), cv, n), rng.lognormal(0.0, cv, n), what="rounds"
    )


# a shift: A - B in µs, 10 rounds each, sd 1 µs
def _shift(true, n=10, sd=1.0):
    return lambda rng: dc.shift(rng.normal(10 + true, sd, n), rng.normal(10, sd, n))


# a share: k of n events, n = 400
def _share(true, n=400):
    return lambda rng: dc.share(rng.binomial(n, true), n)


# a host's runs pooled: 3 runs, each an estimate of a ratio with a between-run effect (CV 10 %)
def _pooled(true, runs=3, between=0.10):
    def make(rng):
        es = []
        for _ in range(runs):
            shift = rng.normal(0, between)
            es.append(_ratio(true * math.exp(shift))(rng))
        return dc.pool(es)

    return make


KINDS = {
    # kind: (estimate maker, side, threshold, a true value by a clear margin)
    "ratio": (_ratio, ">", 2.0, 2.5),
    "shift": (_shift, "<", 2.0, 0.0),
    "share": (_share, ">", 0.5, 0.6),
    "pooled runs": (_pooled, ">", 2.0, 3.0),
}


@pytest.mark.parametrize("kind", KINDS)
def test_a_false_claim_is_called_holds_in_at_most_5_percent(kind):
    make, side, threshold, _ = KINDS[kind]
    holds, _ = _rates(make(threshold), side, threshold, seed=1)
    assert holds <= ALPHA_MAX, f"{kind}: a false claim held in {holds:.1%} of {SIMS}"


@pytest.mark.parametrize("kind", KINDS)
def test_a_claim_true_by_a_clear_margin_is_decided_in_at_least_80_percent(kind):
    make, side, threshold, true = KINDS[kind]
    holds, decided = _rates(make(true), side, threshold, seed=2)
    assert decided >= POWER_MIN, f"{kind}: decided in {decided:.1%} of {SIMS}"
    assert holds == decided, f"{kind}: a true claim was called 'does not hold'"


def test_the_old_point_estimate_rule_fails_this_check():
    """Deciding on the point estimate alone (the rule before three-valued verdicts) calls the
    false ratio claim 'holds' in about half the datasets: the simulation can catch it."""
    rng = np.random.default_rng(1)
    make = _ratio(2.0)
    holds = sum(make(rng).value > 2.0 for _ in range(SIMS)) / SIMS
    assert holds > 0.3


def test_two_against_two_cannot_decide_at_95_percent():
    """Moses' interval for 2 against 2 covers 66.67 %: never decided, and says why."""
    rng = np.random.default_rng(3)
    e = dc.ratio(rng.lognormal(3, 0.01, 2), rng.lognormal(0, 0.01, 2))
    assert e.value > 10 and 0.66 < e.coverage < 0.67
    d = dc.decide(e, ">", 2.0)
    assert d.verdict == dc.UNDECIDED and d.why.startswith("n too small")


def test_exact_values_decide_on_the_value_and_a_nan_is_not_measured():
    assert dc.decide(dc.exact(3), ">", 2).verdict == dc.HOLDS
    assert dc.decide(dc.exact(2), ">", 2).verdict == dc.FAILS
    assert dc.decide(dc.exact(math.nan), ">", 2).verdict == dc.NOT_MEASURED
    assert dc.decide(None, "<", 2).verdict == dc.NOT_MEASURED


def test_a_quantile_interval_reports_its_real_coverage():
    rng = np.random.default_rng(4)
    x = rng.exponential(1.0, 2000)
    est, lo, hi, cov = dc.quantile_ci(x, 0.99)
    assert lo <= est <= hi and cov >= 0.95
    _, _, _, small = dc.quantile_ci(x[:10], 0.99)
    assert small < 0.5  # 10 values cannot bound a P99: said, not hidden


def test_the_union_bound_lowers_the_coverage_it_labels():
    a, b = dc.location(np.arange(1, 21)), dc.location(np.arange(1, 21) + 100)
    q = dc.divide(a, b)
    assert q.coverage == pytest.approx(1 - (1 - a.coverage) - (1 - b.coverage))
    assert q.low <= q.value <= q.high and q.scale == "log"


def test_texts_carry_the_real_coverage_and_never_nan():
    e = dc.Estimate(2.3456, 2.1, 2.6, 0.6666, "x")
    assert dc.interval_text(e, "×") == "2.35× (66.66 % interval 2.10–2.60×)"
    assert dc.fmt(math.nan) == "n/a" and dc.fmt(-1234.5) == "\u22121,234"
    assert "nan" not in dc.interval_text(dc.Estimate(1.0, math.nan, math.nan, 0.0, "1 run"))
    none = dc.Estimate(3.36, 1.8, 6.29, 0.0, "runs inside one boot")
    assert dc.interval_text(none, "×") == "3.36× (range 1.80–6.29×, no coverage claimed)"


def test_combining_estimates_lesser_greatest_fold():
    a = dc.Estimate(2.0, 1.0, 3.0, 0.975, "a")
    b = dc.Estimate(1.5, 1.2, 4.0, 0.975, "b")
    lo = dc.lesser(a, b)
    assert (lo.value, lo.low, lo.high) == (1.5, 1.0, 3.0) and lo.coverage == pytest.approx(0.95)
    hi = dc.greatest(a, b)
    assert (hi.value, hi.low, hi.high) == (2.0, 1.2, 4.0)
    r = dc.Estimate(0.8, 0.5, 0.9, 0.95, "r", "log")
    f = dc.fold(r)
    assert (f.value, f.low, f.high) == pytest.approx((1.25, 1 / 0.9, 2.0)) and f.scale == "log"
    s = dc.fold(dc.Estimate(1.1, 0.95, 1.3, 0.95, "s", "log"))
    assert (s.low, s.high) == pytest.approx((1.0, 1.3))
    assert dc.decide(s, ">", 1.05).verdict == dc.UNDECIDED
    assert (
        dc.decide(dc.fold(dc.Estimate(1.01, 0.99, 1.03, 0.95, "t")), ">", 1.05).verdict == dc.FAILS
    )


def test_an_estimate_without_an_interval_is_undecided_for_that_reason_and_never_pooled():
    """A comparison its chapter found confounded (virtio_blk_iothread: variants at different
    event_idx) keeps its number but has no interval: the why names the confound, not n, and
    a host's pooled estimate leaves that run out."""
    bad = dc.Estimate(2.0, math.nan, math.nan, 0.0, "no comparison at one event_idx")
    d = dc.decide(bad, ">", 1.0)
    assert d.verdict == dc.UNDECIDED and d.why == "no interval: no comparison at one event_idx"
    good = [dc.Estimate(v, v - 0.1, v + 0.1, 0.95, "r") for v in (1.5, 1.6)]
    assert dc.pool([bad, *good]) == dc.pool(good)
    assert dc.pool([bad]) is None
