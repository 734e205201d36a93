"""Key findings (tools.findings): how a host's verdict is formed, and every declared finding
evaluated on every committed host.

The second half is what a contributor meets: a new host's data that contradicts a finding
changes that host's verdict here, in the chapter's Key findings block and on the hosts page,
instead of silently contradicting typed prose.
"""
from __future__ import annotations

import pandas as pd
import pytest

from tools import findings as F
from tools.chapters import CHAPTERS
from tools.dataset import Manifest


class _Chapter:
    name = "fake"
    key_findings = ()


class _Data:
    """The part of tools.dataset.Data that findings read: manifests and one table."""

    def __init__(self, rows, profiles):
        self.chapter = _Chapter()
        self.manifests = [Manifest({"run_id": r, "host": {"host_id": h}, "profile": profiles.get((h, r)),
                                    "tables": ["t"]}) for h, r in dict.fromkeys((h, r) for h, r, _ in rows)]
        self.table = pd.DataFrame(rows, columns=["host_id", "run_id", "x"])

    def __getitem__(self, name):
        return self.table

    @property
    def hosts(self):
        return sorted({m.host_id for m in self.manifests})

    def reference(self, name, dtype=None):
        raise KeyError(name)


def _over_one(run):
    t = run["t"]
    if t.empty or t["x"].isna().all():
        return None
    x = float(t["x"].iloc[0])
    return F.Outcome(x > 1, f"x = {x:g}")


FINDING = F.Finding("over_one", "x is above 1", _over_one)


def _verdict(rows, host="h-a", profiles=None):
    return F.evaluate(_Data(rows, profiles or {}), FINDING, host)


def test_a_host_whose_runs_agree_gets_their_verdict():
    v = _verdict([("h-a", "r1", 2.0), ("h-a", "r2", 3.0)])
    assert v.verdict == F.HOLDS and v.label == "holds"
    assert "run r1: x = 2" in v.evidence and "run r2: x = 3" in v.evidence
    assert _verdict([("h-a", "r1", 0.5)]).verdict == F.FAILS


def test_runs_that_disagree_make_a_mixed_verdict_with_the_count():
    v = _verdict([("h-a", "r1", 2.0), ("h-a", "r2", 0.5), ("h-a", "r3", 4.0)])
    assert v.verdict == F.MIXED
    assert v.label == "mixed: holds in 2 of 3 runs"
    assert "run r2: x = 0.5 (does not hold)" in v.evidence


def test_a_run_that_did_not_measure_it_is_not_counted_and_none_at_all_is_not_measured():
    v = _verdict([("h-a", "r1", None), ("h-a", "r2", 2.0)])
    assert v.verdict == F.HOLDS and v.evidence == "x = 2 (run r2)"
    assert _verdict([("h-a", "r1", None)]).verdict == F.NOT_MEASURED


def test_quick_runs_do_not_vote_when_a_real_run_exists():
    rows = [("h-a", "r1", 2.0), ("h-a", "r2", 0.5), ("h-a", "r3", 3.0)]
    v = _verdict(rows, profiles={("h-a", "r1"): "default", ("h-a", "r2"): "quick"})
    assert v.verdict == F.HOLDS and [r for r, _ in v.runs] == ["r1", "r3"]   # r3: no profile recorded
    assert _verdict(rows[1:2], profiles={("h-a", "r2"): "quick"}).verdict == F.FAILS


def test_other_hosts_do_not_leak_into_a_verdict():
    rows = [("h-a", "r1", 2.0), ("h-b", "r9", 0.1)]
    assert _verdict(rows, "h-a").verdict == F.HOLDS
    assert _verdict(rows, "h-b").verdict == F.FAILS


def test_the_prose_sentence_follows_the_verdict():
    assert F.sentence(_verdict([("h-a", "r1", 2.0)])).startswith("x is above 1 (x = 2")
    assert F.sentence(_verdict([("h-a", "r1", 0.5)])).startswith("Not so: x is above 1")
    mixed = F.sentence(_verdict([("h-a", "r1", 2.0), ("h-a", "r2", 0.5)]))
    assert "depends on the run" in mixed and "holds in 1 of 2 runs" in mixed


def test_a_finding_that_crashes_names_itself_and_the_run():
    bad = F.Finding("bad", "crashes", lambda run: run["t"]["missing"])
    with pytest.raises(RuntimeError, match=r"finding 'bad' on h-a/r1: KeyError"):
        F.evaluate(_Data([("h-a", "r1", 1.0)], {}), bad, "h-a")


# -- every chapter's findings on every committed host ----------------------------------------

@pytest.mark.parametrize("entry", CHAPTERS, ids=[c.name for c in CHAPTERS])
def test_every_finding_evaluates_on_every_committed_host(entry, capsys):
    ch = entry.load()
    assert 3 <= len(ch.key_findings) <= 5, f"{ch.name}: {len(ch.key_findings)} key findings, want 3-5"
    keys = [f.key for f in ch.key_findings]
    assert len(set(keys)) == len(keys), f"{ch.name}: duplicate finding keys {keys}"
    D = ch.load()
    told = 0
    for per_host in F.verdicts(D):
        for v in per_host:
            assert v.verdict in F.VERDICTS
            for run_id, out in v.runs:
                if out is not None:
                    told += 1
                    assert isinstance(out.holds, bool), f"{ch.name}/{v.finding.key}: holds must be a bool"
                    assert out.evidence.strip(), f"{ch.name}/{v.finding.key} on {run_id}: no numbers"
    assert told, f"{ch.name}: no finding could be evaluated on any committed dataset"
    with capsys.disabled():
        print(f"\n{ch.name}:\n" + F.matrix(D).drop(columns=["chapter", "claim"]).to_string(index=False))
