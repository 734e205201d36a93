"""The shared helpers chapters use for adaptive repetition and for showing several hosts:
tools.stats.repetition_settings / repetition / interleave and tools.notebook.repetition_overview /
env_diff_view."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import fake_manifest

from test_stats import FakeClock as Clock
from tools import notebook, stats
from tools.errors import ParameterError

GOOD = {"target": 0.05, "min_runs": 3, "max_runs": 9, "budget_s": 20, "warmup": 1}


def test_repetition_settings_validate_with_a_prefix():
    p = {f"rep_{k}": v for k, v in GOOD.items()}
    assert stats.repetition_settings(p, "rep_") == {**GOOD, "budget_s": 20.0}
    r = stats.repetition("x", ["a"], p, "rep_")
    assert (r.min_runs, r.max_runs, r.warmup, r.budget_s) == (3, 9, 1, 20.0)
    for key, bad, words in (("target", 0, "rep_target must be a relative CI width"),
                            ("target", True, "rep_target"), ("budget_s", "10", "rep_budget_s"),
                            ("min_runs", 0, "rep_min_runs must be an integer"),
                            ("max_runs", 2.0, "rep_max_runs must be an integer"),
                            ("warmup", -1, "rep_warmup must be an integer in 0")):
        with pytest.raises(ParameterError, match=words):
            stats.repetition_settings({**p, f"rep_{key}": bad}, "rep_")
    with pytest.raises(ParameterError, match=r"rep_max_runs \(2\) must be >= rep_min_runs \(3\)"):
        stats.repetition_settings({**p, "rep_max_runs": 2}, "rep_")
    with pytest.raises(ParameterError, match="rep_warmup"):
        stats.repetition_settings({k: v for k, v in p.items() if k != "rep_warmup"}, "rep_")


def test_interleave_runs_experiments_in_shared_rounds_until_each_stops():
    clk = Clock()
    tight = stats.Repetition("tight", ["a", "b"], target=0.05, min_runs=3, max_runs=50,
                             budget_s=1000, warmup=1, clock=clk)
    noisy = stats.Repetition("noisy", ["c"], target=0.01, min_runs=3, max_runs=50,
                             budget_s=10, warmup=0, clock=clk)
    seen = []
    for k, rounds in enumerate(stats.interleave([tight, noisy])):
        seen.append(sorted(rounds))
        clk.t += 1
        if "tight" in rounds:
            tight.add("a", 100.0)
            tight.add("b", 50.0)
        if "noisy" in rounds:
            noisy.add("c", [1.0, 9.0][k % 2])
    assert tight.stopped_by == stats.STOP_TARGET and tight.n == 3 and tight.warmup_values["a"] == 1
    assert noisy.stopped_by == stats.STOP_BUDGET and noisy.n == 10
    assert seen[0] == ["noisy", "tight"] and seen[-1] == ["noisy"]     # the tight one dropped out


def _dataset(root, host, run, repetition=None):
    d = root / "runs" / host / "demo" / run
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps(fake_manifest(host, run, host={"kernel_release": host})))
    if repetition is not None:
        pd.DataFrame(repetition).to_csv(d / "repetition.csv", index=False)


def test_repetition_overview_counts_adaptive_and_fixed_datasets(tmp_path):
    clk = Clock()
    r = stats.Repetition("exp", ["a", "b"], target=0.3, min_runs=2, max_runs=3, budget_s=100,
                         warmup=1, clock=clk)
    for rnd in r.rounds():
        clk.t += 1
        r.add("a", 10.0)
        r.add("b", 1.0 + rnd.index)
    _dataset(tmp_path, "h-old", "20260101T000000Z")
    _dataset(tmp_path, "h-new", "20260102T000000Z", r.records())
    table, counts = notebook.repetition_overview("demo", tmp_path)
    assert counts["datasets"] == 2 and counts["fixed"] == 1 and counts["experiments"] == 1
    # by hand: round 0 is warm-up; a = 10, 10, 10 (CI width 0: met); b = 2, 3 after round 2
    # ([2, 3] around 2.5: 40 % > 30 %), then 2, 3, 4 ([2, 4] around 3: 67 %): never met,
    # so repetition stops at max_runs = 3 with 1 of the 2 keys within the target
    assert r.stopped_by == stats.STOP_MAX and counts[stats.STOP_MAX] == 1
    old = table[table.host_id == "h-old"].iloc[0]
    assert old.stopped_by == notebook.FIXED_REPETITION
    new = table[table.host_id == "h-new"].iloc[0]
    assert new.experiment == "exp" and new["keys"] == 2 and new["warm-up"] == 1
    assert new["keys met"] == "1/2"


def test_env_diff_view_one_host_and_two(tmp_path):
    from IPython.display import Markdown
    _dataset(tmp_path, "h-a", "20260101T000000Z")
    one = notebook.env_diff_view("demo", tmp_path)
    assert isinstance(one, Markdown) and "Only one host (h-a)" in one.data
    _dataset(tmp_path, "h-b", "20260102T000000Z")
    two = notebook.env_diff_view("demo", tmp_path)
    assert list(two.columns) == ["h-a", "h-b"] and "kernel_release" in two.index


def test_significance_text_covers_all_none_and_some():
    df = pd.DataFrame({"significant": [True, False, False]})
    assert stats.significance_text(df) == ("1 of 3 comparisons are significant at p < 0.05; "
                                           "the other 2 are not significant")
    assert stats.significance_text(df.iloc[:1]).startswith("all 1 comparison")
    assert stats.significance_text(df.iloc[1:]).startswith("none of the 2")
    assert stats.significance_text(df.iloc[0:0]) == "no comparison could be made"
