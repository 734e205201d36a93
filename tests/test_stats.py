import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from perfbook.analysis import stats
from perfbook.analysis.repetition import (
    STOP_BUDGET,
    STOP_MAX,
    STOP_TARGET,
    Repetition,
    repetition_summary,
)


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


# ---------------------------------------------------------------- compare
def test_compare_detects_a_shift_and_sizes_it():
    rng = np.random.default_rng(1)
    b = rng.lognormal(mean=np.log(100), sigma=0.05, size=60)
    a = b * 1.10 + rng.normal(0, 0.5, size=60)
    c = stats.compare(a, b, names=("new", "old"))
    assert c.significant and c.p_value < 1e-6
    assert c.magnitude == "large" and c.cliffs_delta > 0.474
    assert 0.07 < c.rel_shift < 0.13
    assert c.shift_low <= c.shift <= c.shift_high
    assert "higher" in c.verdict and "new" in c.verdict


def test_compare_says_not_significant_for_the_same_distribution():
    rng = np.random.default_rng(2)
    c = stats.compare(rng.normal(50, 5, 40), rng.normal(50, 5, 40))
    assert not c.significant
    assert "not significant" in c.verdict
    assert c.shift_low <= 0 <= c.shift_high


def test_a_comparison_too_small_to_reach_alpha_is_not_tested():
    """#42: 2 against 2 (smallest p 0.33) and 3 against 3 (0.1) cannot be significant at 0.05,
    so the test is not run and the verdict says why; 4 against 4 (0.029) is tested."""
    assert stats.min_p_value(2, 2) == pytest.approx(1 / 3)
    assert stats.min_p_value(3, 3) == pytest.approx(0.1)
    assert stats.min_p_value(4, 4) == pytest.approx(2 / 70)
    assert stats.min_p_value(20000, 20000) == 0.0  # C(40000, 20000) overflows a float
    c = stats.compare([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    assert math.isnan(c.p_value) and not c.significant and c.cliffs_delta == -1.0
    assert "not tested (3 against 3 cannot reach p < 0.05" in c.verdict
    assert stats.compare([1.0, 2, 3, 4], [5.0, 6, 7, 8]).significant
    df = pd.DataFrame({"significant": [False, False], "p_value": [math.nan, math.nan]})
    assert stats.significance_text(df).startswith("none of the 2 comparison(s) could be tested")


def test_compare_false_positive_rate_is_near_alpha():
    rng = np.random.default_rng(3)
    hits = sum(
        stats.compare(rng.exponential(size=25), rng.exponential(size=25)).significant
        for _ in range(300)
    )
    assert hits / 300 < 0.09


def test_hodges_lehmann_ci_coverage_by_simulation():
    rng = np.random.default_rng(4)
    hits = 0
    for _ in range(300):
        a = rng.lognormal(size=20) + 2.0
        b = rng.lognormal(size=25)
        _, lo, hi = stats.hodges_lehmann(a, b)
        hits += lo <= 2.0 <= hi
    assert hits / 300 >= 0.92


def test_compare_frame_per_host():
    import pandas as pd

    rng = np.random.default_rng(5)
    rows = [
        {"host_id": h, "variant": v, "x": rng.normal(10 + (v == "fast") * -3, 1)}
        for h in ("h1", "h2")
        for v in ("base", "fast", "same")
        for _ in range(12)
    ]
    out = stats.compare_frame(
        pd.DataFrame(rows), by="variant", value="x", baseline="base", within="host_id"
    )
    assert len(out) == 4
    fast = out[out.variant == "fast"]
    assert fast["significant"].all() and (fast["shift"] < 0).all()


def test_compare_needs_two_values():
    with pytest.raises(ValueError):
        stats.compare([1.0], [1.0, 2.0])


# ---------------------------------------------------------------- repetition
class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_repetition_stops_at_the_ci_target_and_drops_warmup():
    rng = np.random.default_rng(6)
    clock = FakeClock()
    rep = Repetition(
        "tight",
        keys=["a", "b"],
        target=0.05,
        min_runs=5,
        max_runs=500,
        budget_s=1000,
        warmup=2,
        clock=clock,
    )
    for r in rep.rounds():
        clock.t += 1
        rep.add("a", 1000.0 if r.warmup else rng.normal(100, 2))
        rep.add("b", rng.normal(50, 1))
    assert rep.stopped_by == STOP_TARGET
    recs = {r["key"]: r for r in rep.records()}
    assert recs["a"]["warmup"] == 2 and recs["b"]["warmup"] == 2
    assert max(rep.values["a"]) < 200  # the warm-up outlier was dropped
    assert all(r["met_target"] and r["rel_ci_width"] <= 0.05 for r in recs.values())
    assert recs["a"]["n"] == rep.n >= 5


def test_repetition_stops_at_the_time_budget_when_noise_is_high():
    rng = np.random.default_rng(7)
    clock = FakeClock()
    rep = Repetition(
        "noisy", target=0.01, min_runs=3, max_runs=10_000, budget_s=30, warmup=1, clock=clock
    )
    for _ in rep.rounds():
        clock.t += 2
        rep.add("value", rng.lognormal(0, 1))
    assert rep.stopped_by == STOP_BUDGET
    assert rep.elapsed_s >= 30 and rep.n == 14  # 15 rounds of 2 s, one warm-up
    assert not rep.records()[0]["met_target"]


def test_repetition_max_runs_and_summary():
    import pandas as pd

    clock = FakeClock()
    rep = Repetition(
        "capped", target=0.0001, min_runs=2, max_runs=4, budget_s=100, warmup=0, clock=clock
    )
    for i in rep.rounds():
        rep.add("value", 1 + i.index)
    assert rep.stopped_by == STOP_MAX and rep.n == 4
    s = repetition_summary(pd.DataFrame(rep.records()))
    assert s["experiments"] == 1 and s[STOP_MAX] == 1 and s["keys_met"] == 0


def test_repetition_rejects_bad_settings():
    with pytest.raises(ValueError):
        Repetition("x", target=0)
    with pytest.raises(ValueError):
        Repetition("x", min_runs=5, max_runs=2)


# ---------------------------------------------------------------- captions
def test_caption_states_n_ci_warmup_and_host():
    cap = stats.caption(
        "Per-call cost by mechanism",
        n=[70, 70, 68],
        unit="batches",
        warmup=5,
        hosts=[("h-abc", "AMD EPYC, 2 CPUs, kvm guest")],
    )
    assert "n = 68–70 batches" in cap
    assert "after 5 warm-up batches (excluded)" in cap
    # real coverages, from the exact binomial sums (see _exact_coverage): n = 68 -> k = 25,
    # n = 70 -> k = 26; each at least 95 %, stated rounded down
    lo, hi = sorted(_exact_coverage(n) for n in (68, 70))
    assert lo >= 0.95 and f"coverage {_pct_down(lo)}–{_pct_down(hi)} %." in cap
    assert "distribution-free" in cap and "below 95 %" not in cap
    assert "Host h-abc (AMD EPYC, 2 CPUs, kvm guest)." in cap
    two = stats.caption("x", n=3, unit="runs", warmup=[0, 1], hosts=["h-a", "h-b"], ci=False)
    assert "Hosts h-a; h-b." in two and "distribution-free" not in two


def test_hosts_of_manifests():
    ms = [
        {"host": {"host_id": "h-1", "description": "d1"}},
        {"host": {"host_id": "h-1", "description": "d1"}},
        {"host": {"host_id": "h-2", "description": "d2"}},
    ]
    assert stats.hosts_of(ms) == [("h-1", "d1"), ("h-2", "d2")]


def test_caption_singular_warmup():
    cap = stats.caption("x", n=6, unit="batches", warmup=1, hosts=["h-a"])
    assert "after 1 warm-up batch (excluded)" in cap
    assert "after 1 warm-up round (excluded)" in stats.caption(
        "x", n=6, unit="rounds", warmup=1, hosts=["h"]
    )


# ------------------------------------------------- real coverage of small-n intervals
def _exact_coverage(n, confidence=0.95):
    """Largest-k order-statistic interval [x(k), x(n-k+1)] with coverage >= confidence,
    from exact integer binomial sums; [min, max] (k = 1) when none reaches it."""
    from math import comb

    cov = lambda k: 1 - 2 * sum(comb(n, i) for i in range(k)) / 2**n
    k = 1
    while k + 1 <= n // 2 and cov(k + 1) >= confidence:
        k += 1
    return cov(k)


def _pct_down(c):
    import math

    return f"{math.floor(c * 10000) / 100:.2f}".rstrip("0").rstrip(".")


def test_min_max_interval_coverage_is_stated_for_small_n():
    # [min, max] covers the median unless all n values fall on one side: 1 - 2 * 0.5**n
    assert stats.median_ci_coverage(5) == pytest.approx(0.9375)
    assert stats.median_ci_coverage(4) == pytest.approx(0.875)
    assert stats.median_ci_coverage(3) == pytest.approx(0.75)
    assert stats.median_ci_coverage(2) == pytest.approx(0.5)
    assert stats.median_ci_coverage(6) == pytest.approx(1 - 2 / 64)  # first n with >= 95 %
    assert stats.median_ci_coverage(1) == 0.0
    for n in range(2, 120):
        assert stats.median_ci_coverage(n) == pytest.approx(_exact_coverage(n), abs=1e-12)
    assert stats.ci_label(5) == "93.75 % CI"
    assert stats.ci_label([3, 4, 5]) == "75–93.75 % CI"
    assert stats.ci_label(6) == "96.87 % CI"  # 96.875 %, rounded down


def test_caption_states_the_real_coverage_below_n6():
    cap = stats.caption("x", n=[3, 8], unit="rounds", warmup=1, hosts=["h"])
    # n = 3: 1 - 2/8 = 75 %; n = 8: k = 1 again (k = 2 gives 1 - 2*9/256 = 92.97 %), 1 - 2/256
    assert "coverage 75–99.21 % (below 95 %" in cap
    assert "95 % distribution-free" not in cap
    five = stats.caption("x", n=5, unit="runs", warmup=0, hosts=["h"])
    assert "coverage 93.75 % (below 95 %" in five


def test_repetition_records_carry_the_real_coverage():
    rep = Repetition(
        "x", ["a"], target=0.001, min_runs=3, max_runs=3, budget_s=100, warmup=0, clock=lambda: 0.0
    )
    for rnd in rep.rounds():
        rep.add("a", 1.0 + rnd.index)
    (rec,) = rep.records()
    assert rec["n"] == 3 and rec["ci_coverage"] == pytest.approx(0.75)


def test_hodges_lehmann_coverage_is_exact_for_small_samples():
    # [min, max] fallback: 1 - 2 / C(n+m, n)
    assert stats.hodges_lehmann_coverage(2, 2) == (pytest.approx(1 - 2 / 6), True)
    assert stats.hodges_lehmann_coverage(3, 2)[0] == pytest.approx(0.8)
    assert stats.hodges_lehmann_coverage(3, 3)[0] == pytest.approx(0.9)
    # with k > 0: 1 - 2 P(U <= k), against U counted over every order of the n + m values
    from itertools import combinations

    for n, m in ((5, 5), (6, 6), (4, 9)):
        k = stats._hl_rank(n, m, 0.95)
        assert k >= 0
        us = [
            sum(sum(1 for j in range(n + m) if j not in pos and j < i) for i in pos)
            for pos in combinations(range(n + m), n)
        ]
        got, exact = stats.hodges_lehmann_coverage(n, m)
        assert exact and 0.95 <= got < 0.99
        assert got == pytest.approx(1 - 2 * np.mean(np.array(us) <= k))
    # symmetric in n and m, and a simulation agrees (continuous data, true shift 0)
    assert stats.hodges_lehmann_coverage(4, 9)[0] == pytest.approx(
        stats.hodges_lehmann_coverage(9, 4)[0]
    )
    rng = np.random.default_rng(3)
    hits = [
        lo <= 0 <= hi
        for lo, hi in (
            stats.hodges_lehmann(rng.normal(size=3), rng.normal(size=3))[1:] for _ in range(4000)
        )
    ]
    assert np.mean(hits) == pytest.approx(0.9, abs=0.02)
    # large samples: the normal approximation's nominal value, flagged as not exact
    cov, exact = stats.hodges_lehmann_coverage(300, 300)
    assert not exact and cov == pytest.approx(0.95, abs=0.002)


def test_hl_ci_label_states_real_or_approximate_coverage():
    assert stats.hl_ci_label((3, 3)) == "90 % CI"
    assert stats.hl_ci_label([(3, 3), (5, 5)]) == "90–96.82 % CI"
    assert stats.hl_ci_label([(3, 3), (300, 300)]) == "approx. 95 % CI"


def test_a_pair_that_is_not_comparable_is_shown_but_not_tested():
    """A TCG guest against a real CPU (perfbook.data.machine.comparable): the row keeps both medians
    and says why, with no p-value; the prose's count leaves it out."""
    import pandas as pd

    from perfbook.analysis.stats import compare_frame, significance_text
    from perfbook.data.machine import host_pairs

    df = pd.DataFrame(
        {"host_id": ["kvm"] * 5 + ["tcg"] * 5, "x": [1, 2, 3, 4, 5, 11, 12, 13, 14, 15]}
    )
    manifests = [
        {"host": {"host_id": "kvm", "virtualization": "kvm"}},
        {"host": {"host_id": "tcg", "virtualization": "qemu"}},
    ]
    out = compare_frame(
        df, by="host_id", value="x", baseline="kvm", pair_check=host_pairs(manifests)
    )
    row = out.iloc[0]
    assert not row["compared"] and row["verdict"].startswith("not compared: tcg is a TCG guest")
    assert row["median_a"] == 13 and row["median_b"] == 3 and row["p_value"] != row["p_value"]
    assert "not comparable" in significance_text(out)
    both = [{"host": {"host_id": h, "virtualization": "kvm"}} for h in ("kvm", "tcg")]
    tested = compare_frame(df, by="host_id", value="x", baseline="kvm", pair_check=host_pairs(both))
    assert tested.iloc[0]["compared"] and tested.iloc[0]["p_value"] < 0.05
