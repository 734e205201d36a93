import numpy as np
import pytest
from scipy import stats as st

from tools import stats


def test_median_ci_brackets_the_median_and_reports_coverage():
    x = np.arange(1, 101)
    lo, hi, cov = stats.median_ci(x)
    assert lo < np.median(x) < hi
    assert cov >= 0.95
    k = int(lo)  # values are 1..n so x(k) == k
    assert cov == pytest.approx(1 - 2 * st.binom.cdf(k - 1, 100, 0.5))
    # the next tighter interval would fall below 95 %
    assert 1 - 2 * st.binom.cdf(k, 100, 0.5) < 0.95


def test_median_ci_small_samples_are_honest():
    lo, hi, cov = stats.median_ci([3.0, 1.0, 2.0])
    assert (lo, hi) == (1.0, 3.0)
    assert cov == pytest.approx(0.75)  # 1 - 2 * 0.5**3


def test_median_ci_coverage_by_simulation():
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(400):
        x = rng.lognormal(size=31)  # skewed: a normal-theory CI would be off
        lo, hi, _ = stats.median_ci(x)
        hits += lo <= 1.0 <= hi  # the true median of lognormal(0, 1) is 1
    assert hits / 400 >= 0.92


def test_summarize_and_cv():
    s = stats.summarize([1, 2, 3, 4, 100])
    assert s.n == 5 and s.median == 3 and s.max == 100
    assert stats.cv([10, 10, 10]) == 0
    assert np.isnan(stats.summarize([]).median)


def test_diff_ci_is_conservative():
    assert stats.diff_ci(10, 12, 1, 2) == (8, 11)
