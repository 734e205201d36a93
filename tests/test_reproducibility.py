"""perfbook bench reproducibility (#40): the report on datasets already measured."""

from __future__ import annotations

import math

import pytest

from perfbook.analysis.decide import Estimate
from perfbook.chapters import by_name
from perfbook.core.paths import data_dir
from perfbook.dev import reproducibility as rp

HOST = "h-82250967b8b9"  # a committed host with three default trace_overhead runs


def test_the_report_on_committed_runs_gives_each_runs_verdict_and_the_pooled_one(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("PERFBOOK_VERDICT_STORE", "off")
    ch = by_name("trace_overhead").load()
    assert rp.gather(data_dir(), tmp_path, HOST, "default", [ch.name]) == 3
    lines = []
    got = rp.report(tmp_path, "default", [ch], HOST, say=lines.append)
    text = "\n".join(lines)
    assert "marker_cheaper: holds, holds, holds | pooled: holds (0.353×" in text, text
    assert got["decided"] == {0: [5, 5], 1: [5, 5], 2: [5, 5]} and got["pooled"] == (5, 5)
    assert got["contradictions"] == [] and "contradictions" in text
    per, seconds = got["widths"]["trace_overhead"]
    assert set(per) == {f.key for f in ch.key_findings} and seconds > 10
    assert all(0 < r < 1 for r in per.values()), per  # every interval clears its threshold
    assert "every finding clears its threshold" in text


def test_a_finding_that_holds_in_one_run_and_not_in_another_is_a_contradiction(
    tmp_path, monkeypatch
):
    from perfbook.analysis import findings

    monkeypatch.setenv("PERFBOOK_VERDICT_STORE", "off")
    ch = by_name("trace_overhead").load()
    rp.gather(data_dir(), tmp_path, HOST, "default", [ch.name])
    real = findings.outcomes
    flip = iter(range(100))

    def outcomes(D, m):
        out = real(D, m)
        if next(flip) == 1:  # the second run: its marker finding turned around
            o = out["marker_cheaper"]
            out["marker_cheaper"] = findings.Outcome(findings.FAILS, o.evidence, o.estimate, o.why)
        return out

    monkeypatch.setattr(rp, "outcomes", outcomes)
    got = rp.report(tmp_path, "default", [ch], HOST, say=lambda s: None)
    assert got["contradictions"] == [
        ("trace_overhead", "marker_cheaper", ["holds", "does not hold", "holds"])
    ]


@pytest.mark.parametrize(
    "est,threshold,want",
    [
        # a ratio: log scale; half-width log(4)/2 at 95 % over log(2 / 1)
        (Estimate(2.0, 1.0, 4.0, 0.95, "", "log"), 1.0, math.log(4) / 2 / math.log(2)),
        (Estimate(10.0, 9.0, 11.0, 0.95, ""), 8.0, 0.5),  # ±1 at 2 from the threshold
        (Estimate(10.0, 9.0, 11.0, 0.95, ""), 10.0, math.inf),  # on the threshold: never
        (Estimate(10.0, 10.0, 10.0, 1.0, "exact"), 8.0, 0.0),  # an exact value
        (Estimate(10.0, 9.0, 11.0, 0.0, "one boot"), 8.0, None),  # no coverage claimed
        (Estimate(10.0, math.nan, math.nan, 0.0, "confound"), 8.0, None),
    ],
)
def test_reach_is_the_half_width_over_the_distance_to_the_threshold(est, threshold, want):
    got = rp.reach(est, threshold)
    assert got == want if want in (None, 0.0, math.inf) else math.isclose(got, want)


def test_a_narrower_coverage_is_brought_to_95_and_seconds_scale_with_the_square():
    at66 = rp.reach(Estimate(10.0, 9.0, 11.0, 0.6666, ""), 8.0)
    assert at66 > 2 * 0.5 * 0.9  # a 66 % interval is about half as wide as a 95 % one
    assert rp.to_decide(2.0, 10.0) == 40.0 and rp.to_decide(0.5, 10.0) == 2.5
