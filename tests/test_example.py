"""The example chapter (tools/perfbook/chapters/example/), the one a new chapter copies: its
parts from a measured dataset to the prose's values, its key finding in both directions, and its
notebook (chapters/example.ipynb, not in the book) run on a dataset of this host.

tests/test_contract.py drives the same chapter through the framework's failure paths."""

from __future__ import annotations

import ast
import json
import re

import matplotlib
import nbformat
import papermill as pm
import pytest

from conftest import ROOT
from perfbook.analysis.decide import Estimate
from perfbook.analysis.findings import FAILS, HOLDS, UNDECIDED, Measured, evaluate
from perfbook.book.notebook import frame_glue
from perfbook.chapters import EXAMPLE
from perfbook.chapters.example import analysis, chapter, figures, key_findings, prose, tables
from perfbook.framework import sequence as framework

matplotlib.use("Agg")
NB = ROOT / EXAMPLE.notebook
FINDING = key_findings.FINDINGS[0]


def _collect(data, profile="quick"):
    return framework.collect(chapter, profile, data, say=lambda s: None)


def test_the_example_chapter_from_measure_to_findings(scratch_data):
    """The README's example, end to end: measure, a typed dataset, findings, a figure."""
    out = _collect(scratch_data)
    D = chapter.load(scratch_data)
    assert len(D) == 1 and D.quoted.path == out and D.quoted.profile == "quick"
    assert str(D["calls"]["round"].dtype) == "int64" and len(D["calls"]) == 3
    ph = D.quoted.phases  # where the seconds went (#40): the example's hold is its set-up
    assert ph["setup"] >= chapter.parameters("quick")["hold_s"] - 0.1 and "measured" in ph
    assert set(ph) <= {"framework", "setup", "measured", "other", "restore"}, ph
    f = prose.values(D)
    assert f["n_datasets"] == 1 and float(f["median_ns"]) > 0 and "%" in f["ci"]
    assert float(f["ci_high_ns"]) >= float(f["median_ns"])
    fig, caption = figures.per_round(D)
    assert fig.axes[0].get_ylabel() and "1 dataset" in caption
    t = tables.per_call(D)
    assert list(t.columns) == [
        "rounds",
        "ns_per_call",
        "ci_low",
        "ci_high",
    ] and t.rounds.tolist() == [3]


def test_without_a_dataset_the_parts_say_so(scratch_data):
    D = chapter.load(scratch_data)
    assert prose.values(D)["n_datasets"] == 0
    assert "no dataset" in tables.per_call(D)
    fig, caption = figures.per_round(D)
    assert not fig.axes[0].lines and "0 dataset" in caption
    assert not D.hosts, "no data: no host, so no verdict either"


@pytest.mark.parametrize(
    "low,high,verdict",
    [(700.0, 999.9, HOLDS), (1000.0, 1400.0, FAILS), (700.0, 1000.0, UNDECIDED)],
)
def test_the_key_finding_is_decided_on_the_interval(low, high, verdict):
    """The claim holds only where the whole interval of the median lies below 1000 ns, does not
    hold where all of it lies at or above, and a median below it with an interval that reaches
    it leaves the claim undecided."""
    out = FINDING.outcome(Measured(Estimate(800.0, low, high, 0.96, "median of 12 rounds")))
    assert out.verdict == verdict and out.evidence.startswith("median cost per call 800 ns")


def test_the_key_finding_of_a_real_profile_run(scratch_data):
    """Chapter.key_findings reads key_findings.FINDINGS, and a default-profile dataset gets a
    verdict whose direction is the interval's (a quick or disturbed run decides nothing)."""
    assert chapter.key_findings == key_findings.FINDINGS and len(chapter.key_findings) == 1
    _collect(scratch_data, "default")
    D = chapter.load(scratch_data)
    v = evaluate(D, FINDING, D.quoted.host_id)
    row = analysis.quoted(D)
    want = (
        UNDECIDED  # a busy machine (a test run beside others): shown, and it decides nothing
        if (D.quoted.get("disturbance") or {}).get("disturbed")
        else HOLDS
        if row["ci_high"] < key_findings.LIMIT_NS
        else FAILS
        if row["ci_low"] >= key_findings.LIMIT_NS
        else UNDECIDED
    )
    (run_id, out), *_ = v.runs  # the run's own number, whether or not it decides
    assert v.verdict == want and out.estimate.high == row["ci_high"], v


def test_the_notebook_runs_on_a_dataset_and_glues_what_prose_gives(tmp_path, scratch_data):
    """The notebook, executed by papermill on a dataset of this host: it glues exactly
    prose.values(D) and every glue name its text quotes exists."""
    _collect(scratch_data)
    out = tmp_path / "out.ipynb"
    pm.execute_notebook(
        str(NB),
        str(out),
        parameters={"data_dir": str(scratch_data)},
        progress_bar=False,
        cwd=str(NB.parent),
        kernel_name="python3",
    )
    nb = nbformat.read(out, as_version=4)
    glued = {
        o.metadata["scrapbook"]["name"]: o.data["application/papermill.record/text/plain"]
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if "scrapbook" in o.get("metadata", {})
    }
    want = prose.values(chapter.load(scratch_data))
    assert {k: glued[k] for k in want} == {k: repr(v) for k, v in want.items()}
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    quoted = set(re.findall(r"\{glue:text\}`([^`]+)`", text))
    assert quoted <= set(want) | frame_glue(chapter, nb), quoted - set(want)


def test_the_notebook_is_out_of_the_book_and_declares_every_parameter():
    """Not in _toc.yml (the book); its parameters cell names every parameter the chapter
    declares (`perfbook measure --param` reads it), each None: the profile's value."""
    import yaml

    assert "chapters/example" not in json.dumps(yaml.safe_load((ROOT / "_toc.yml").read_text()))
    nb = nbformat.read(NB, as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    given = {s.targets[0].id: s.value for s in ast.parse(cell.source).body}
    assert set(given) == {"mode", "profile", "data_dir", *chapter.params}
    assert all(
        isinstance(given[k], ast.Constant) and given[k].value is None for k in chapter.params
    )
