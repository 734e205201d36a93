"""The shared helpers chapters use for adaptive repetition and for showing several hosts:
perfbook.analysis.repetition.repetition_settings / repetition / interleave and perfbook.analysis.repetition.repetition_overview /
env_diff_view."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import fake_manifest
from perfbook.analysis import repetition as rep_mod
from perfbook.analysis import stats
from perfbook.book import notebook
from perfbook.core.errors import ParameterError
from test_stats import FakeClock as Clock

GOOD = {"target": 0.05, "min_runs": 3, "max_runs": 9, "budget_s": 20, "warmup": 1}


def test_repetition_settings_validate_with_a_prefix():
    p = {f"rep_{k}": v for k, v in GOOD.items()}
    assert rep_mod.repetition_settings(p, "rep_") == {**GOOD, "budget_s": 20.0}
    r = rep_mod.repetition("x", ["a"], p, "rep_")
    assert (r.min_runs, r.max_runs, r.warmup, r.budget_s) == (3, 9, 1, 20.0)
    for key, bad, words in (
        ("target", 0, "rep_target must be a relative CI width"),
        ("target", True, "rep_target"),
        ("budget_s", "10", "rep_budget_s"),
        ("min_runs", 0, "rep_min_runs must be an integer"),
        ("max_runs", 2.0, "rep_max_runs must be an integer"),
        ("warmup", -1, "rep_warmup must be an integer in 0"),
    ):
        with pytest.raises(ParameterError, match=words):
            rep_mod.repetition_settings({**p, f"rep_{key}": bad}, "rep_")
    with pytest.raises(ParameterError, match=r"rep_max_runs \(2\) must be >= rep_min_runs \(3\)"):
        rep_mod.repetition_settings({**p, "rep_max_runs": 2}, "rep_")
    with pytest.raises(ParameterError, match="rep_warmup"):
        rep_mod.repetition_settings({k: v for k, v in p.items() if k != "rep_warmup"}, "rep_")


def test_interleave_runs_experiments_in_shared_rounds_until_each_stops():
    clk = Clock()
    tight = rep_mod.Repetition(
        "tight",
        ["a", "b"],
        target=0.05,
        min_runs=3,
        max_runs=50,
        budget_s=1000,
        warmup=1,
        clock=clk,
    )
    noisy = rep_mod.Repetition(
        "noisy", ["c"], target=0.01, min_runs=3, max_runs=50, budget_s=10, warmup=0, clock=clk
    )
    seen = []
    for k, rounds in enumerate(rep_mod.interleave([tight, noisy])):
        seen.append(sorted(rounds))
        clk.t += 1
        if "tight" in rounds:
            tight.add("a", 100.0)
            tight.add("b", 50.0)
        if "noisy" in rounds:
            noisy.add("c", [1.0, 9.0][k % 2])
    assert (
        tight.stopped_by == rep_mod.STOP_TARGET and tight.n == 3 and tight.warmup_values["a"] == 1
    )
    assert noisy.stopped_by == rep_mod.STOP_BUDGET and noisy.n == 10
    assert seen[0] == ["noisy", "tight"] and seen[-1] == ["noisy"]  # the tight one dropped out


def _dataset(root, host, run, repetition=None):
    d = root / "runs" / host / "demo" / run
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(
        json.dumps(fake_manifest(host, run, host={"kernel_release": host}))
    )
    if repetition is not None:
        pd.DataFrame(repetition).to_csv(d / "repetition.csv", index=False)


def test_repetition_overview_counts_adaptive_and_fixed_datasets(tmp_path):
    clk = Clock()
    r = rep_mod.Repetition(
        "exp", ["a", "b"], target=0.3, min_runs=2, max_runs=3, budget_s=100, warmup=1, clock=clk
    )
    for rnd in r.rounds():
        clk.t += 1
        r.add("a", 10.0)
        r.add("b", 1.0 + rnd.index)
    _dataset(tmp_path, "h-old", "20260101T000000Z")
    _dataset(tmp_path, "h-new", "20260102T000000Z", r.records())
    table, counts = rep_mod.repetition_overview("demo", tmp_path)
    assert counts["datasets"] == 2 and counts["fixed"] == 1 and counts["experiments"] == 1
    # by hand: round 0 is warm-up; a = 10, 10, 10 (CI width 0: met); b = 2, 3 after round 2
    # ([2, 3] around 2.5: 40 % > 30 %), then 2, 3, 4 ([2, 4] around 3: 67 %): never met,
    # so repetition stops at max_runs = 3 with 1 of the 2 keys within the target
    assert r.stopped_by == rep_mod.STOP_MAX and counts[rep_mod.STOP_MAX] == 1
    old = table[table.host_id == "h-old"].iloc[0]
    assert old.stopped_by == rep_mod.FIXED_REPETITION
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
    assert stats.significance_text(df) == (
        "1 of 3 comparisons are significant at p < 0.05; the other 2 are not significant"
    )
    assert stats.significance_text(df.iloc[:1]).startswith("all 1 comparison")
    assert stats.significance_text(df.iloc[1:]).startswith("none of the 2")
    assert stats.significance_text(df.iloc[0:0]) == "no comparison could be made"


# ---------------------------------------------------------------- the time budget is a bound
def _run(rep, clk, durations, value=lambda i: 1.0 + i % 3):
    """Drive `rep` with rounds lasting durations[i] seconds (the last one repeats)."""
    for rnd in rep.rounds():
        clk.t += durations[min(rnd.index, len(durations) - 1)]
        for k in rep.keys:
            rep.add(k, value(rnd.index))
    return rep


def test_a_round_the_last_one_says_would_overrun_the_budget_is_not_started():
    clk = Clock()
    # 4 s rounds, 10 s budget: after 8 s a third round would end at 12 s, so it is not started
    rep = _run(
        rep_mod.Repetition(
            "r", ["a"], target=0.001, min_runs=2, max_runs=50, budget_s=10, warmup=0, clock=clk
        ),
        clk,
        [4],
    )
    assert (
        rep.stopped_by == rep_mod.STOP_BUDGET and rep.n == 2 and rep.elapsed_s == 8 <= rep.budget_s
    )
    # a long first round (the chapter's extra work in round 0) and short ones after it: the
    # estimate follows the last round, and the rounds end exactly at the budget
    clk = Clock()
    rep = _run(
        rep_mod.Repetition(
            "s", ["a"], target=0.001, min_runs=2, max_runs=50, budget_s=12, warmup=0, clock=clk
        ),
        clk,
        [6, 2],
    )
    assert rep.n == 4 and rep.elapsed_s == 12 and rep.stopped_by == rep_mod.STOP_BUDGET


@pytest.mark.parametrize("min_runs", [1, 3])
def test_the_budget_stops_a_run_only_at_min_runs_and_one_measured_round_always_runs(min_runs):
    """Warm-up past the budget: one measured round still runs; and min_runs is the n the
    findings' intervals need (#40), so the rounds go on to it before the budget stops them."""
    clk = Clock()
    rep = _run(
        rep_mod.Repetition(
            "w",
            ["a", "b"],
            target=0.05,
            min_runs=min_runs,
            max_runs=9,
            budget_s=5,
            warmup=1,
            clock=clk,
        ),
        clk,
        [9, 9],
    )
    assert rep.n == min_runs and rep.warmup_values["a"] == 1
    assert rep.stopped_by == rep_mod.STOP_BUDGET and rep.elapsed_s == 9 * (1 + min_runs)
    (rec, _) = rep.records()
    assert rec["n"] == min_runs and (min_runs > 1 or rec["rel_ci_width"] != rec["rel_ci_width"])


def test_stop_rule_tells_fixed_rounds_and_unrecorded_reasons_apart():
    from perfbook.analysis.repetition import NOT_RECORDED, STOP_FIXED, stop_rule

    clk = Clock()
    fixed = _run(
        rep_mod.Repetition(
            "f", ["a"], target=0.5, min_runs=3, max_runs=3, budget_s=100, warmup=0, clock=clk
        ),
        clk,
        [1],
        value=lambda i: 10.0,
    )
    (rec,) = fixed.records()
    # the CI target was met at n = 3, but with min_runs == max_runs the rounds were fixed anyway
    assert rec["stopped_by"] == rep_mod.STOP_TARGET and stop_rule(rec) == STOP_FIXED
    assert stop_rule({**rec, "stopped_by": rep_mod.STOP_MAX}) == STOP_FIXED
    # a budget that cut fixed rounds short is still the budget
    assert stop_rule({**rec, "stopped_by": rep_mod.STOP_BUDGET}) == rep_mod.STOP_BUDGET
    assert stop_rule({**rec, "min_runs": 2}) == rep_mod.STOP_TARGET
    assert stop_rule({**rec, "stopped_by": float("nan")}) == NOT_RECORDED
    assert stop_rule({"n": 3}) == NOT_RECORDED


def test_the_rerun_box_lists_a_few_datasets_times_and_sums_up_a_fleets():
    """How long each profile took: each dataset's time while there are few; with a fleet, a
    median and range per machine kind, so the box does not grow with the hosts."""
    from types import SimpleNamespace

    from perfbook.data.manifest import Manifest

    def man(i, seconds, profile="default"):  # as a chapter's Data holds them
        return Manifest(
            fake_manifest(
                f"h-{i:03d}",
                "20260101T000000Z",
                profile=profile,
                started="2026-01-01T00:00:00+00:00",
                finished=f"2026-01-01T00:{seconds // 60:02d}:{seconds % 60:02d}+00:00",
            )
        )

    few = SimpleNamespace(manifests=[man(0, 45), man(1, 40), man(2, 12, "quick")])
    kind = (
        notebook._durations(SimpleNamespace(manifests=[man(0, 1)]))["default"]
        .split("(")[1]
        .rstrip(")")
    )
    assert notebook._durations(few) == {
        "default": f"40 s ({kind}), 45 s ({kind})",
        "quick": f"12 s ({kind})",
    }
    fleet = SimpleNamespace(manifests=[man(i, 40 + i % 11) for i in range(100)])
    told = notebook._durations(fleet)["default"]
    assert told == f"median 45 s (40 to 50 s) over 100 {kind} datasets", told
