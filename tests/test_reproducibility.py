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
    med, seconds, projected = got["widths"]["trace_overhead"]
    assert 0 < med < 0.05 and seconds > 10 and projected < seconds  # ±5 % is already reached


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
    "est,want",
    [
        (Estimate(2.0, 1.0, 4.0, 0.95, "", "log"), 1.0),  # (4 / 1)^½ − 1
        (Estimate(10.0, 9.0, 11.0, 0.95, ""), 0.1),
        (Estimate(10.0, 10.0, 10.0, 1.0, "exact"), None),  # an exact value: no width
        (Estimate(10.0, 9.0, 11.0, 0.0, "one boot"), None),  # no coverage claimed
        (Estimate(0.0, -1.0, 1.0, 0.95, ""), None),  # relative to 0: meaningless
    ],
)
def test_the_half_width_is_relative_and_only_for_intervals_that_claim_coverage(est, want):
    got = rp._half_width(est)
    assert got == want if want is None else math.isclose(got, want)


def test_the_projection_brings_a_66_percent_interval_to_95_and_scales_with_the_square():
    at95 = rp._projected(0.05, 0.95, 10.0)
    assert math.isclose(at95, 10.0, rel_tol=1e-9)  # already ±5 % at 95 %
    assert math.isclose(rp._projected(0.10, 0.95, 10.0), 40.0, rel_tol=1e-9)
    assert rp._projected(0.05, 0.6666, 10.0) > 30  # a 66 % interval is ~2x narrower than 95 %
