"""Key findings (perfbook.analysis.findings): how a host's verdict is formed, and every declared finding
evaluated on every committed host.

The second half is what a contributor meets: a new host's data that contradicts a finding
changes that host's verdict here, in the chapter's Key findings block and on the hosts page,
instead of silently contradicting typed prose.
"""

from __future__ import annotations

import json
import os
import shutil

import pandas as pd
import pytest

from conftest import ROOT
from perfbook.analysis import findings as F
from perfbook.chapters import CHAPTERS, by_name
from perfbook.data.buildfiles import store_dir
from perfbook.data.dataset import Data, Manifest
from perfbook.hoststate.statedir import UnsafePath


class _Chapter:
    name = "fake"
    key_findings = ()


class _Data:
    """The part of perfbook.data.dataset.Data that findings read: manifests and one table."""

    def __init__(self, rows, profiles):
        self.chapter = _Chapter()
        self.manifests = [
            Manifest(
                {
                    "run_id": r,
                    "host": {"host_id": h},
                    "profile": profiles.get((h, r)),
                    "tables": ["t"],
                }
            )
            for h, r in dict.fromkeys((h, r) for h, r, _ in rows)
        ]
        self.table = pd.DataFrame(rows, columns=["host_id", "run_id", "x"])
        self._rows = {}

    def __getitem__(self, name):
        return self.table

    rows_of = Data.rows_of  # what a finding's Run[name] reads

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
    assert v.verdict == F.HOLDS and [r for r, _ in v.runs] == [
        "r1",
        "r3",
    ]  # r3: no profile recorded
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
def test_every_finding_evaluates_on_every_committed_host(entry, capsys, book_data):
    ch = entry.load()
    assert 3 <= len(ch.key_findings) <= 5, (
        f"{ch.name}: {len(ch.key_findings)} key findings, want 3-5"
    )
    keys = [f.key for f in ch.key_findings]
    assert len(set(keys)) == len(keys), f"{ch.name}: duplicate finding keys {keys}"
    D = ch.load(book_data.data_dir)
    told = 0
    for per_host in F.verdicts(D):
        for v in per_host:
            assert v.verdict in F.VERDICTS
            for run_id, out in v.runs:
                if out is not None:
                    told += 1
                    assert isinstance(out.holds, bool), (
                        f"{ch.name}/{v.finding.key}: holds must be a bool"
                    )
                    assert out.evidence.strip(), (
                        f"{ch.name}/{v.finding.key} on {run_id}: no numbers"
                    )
    assert told, f"{ch.name}: no finding could be evaluated on any dataset of the {book_data} data"
    if book_data.scenario == "committed":
        with capsys.disabled():
            print(
                f"\n{ch.name}:\n"
                + F.matrix(D).drop(columns=["chapter", "claim"]).to_string(index=False)
            )


def _prose_values(name: str):
    """The chapter's function of every value its prose quotes (None: it has none by that name)."""
    from conftest import prose_function

    return prose_function(name)


@pytest.mark.parametrize(
    "entry",
    [
        c
        for c in CHAPTERS
        if _prose_values(c.name) and any(hasattr(f.test, "compute") for f in c.load().key_findings)
    ],
    ids=lambda c: c.name,
)
def test_a_finding_read_from_a_few_sections_decides_as_from_every_value(
    entry, monkeypatch, book_data
):
    """A key finding computes only the sections of the prose values its test reads
    (findings.sections). On every committed dataset it decides as it would from all of them:
    a section the test needs and its compute lacks fails here, not as 'not measured'."""
    monkeypatch.setenv("PERFBOOK_VERDICT_STORE", "off")
    ch = entry.load()
    D, every = ch.load(book_data.data_dir), _prose_values(entry.name)
    tests = [f for f in ch.key_findings if hasattr(f.test, "compute")]
    compared = 0
    for m in F.counted_runs(D.manifests):
        run = F.Run(D, m)
        try:
            full = F.plain(every(run.data))
        except (KeyError, IndexError, ValueError, TypeError, AttributeError, ZeroDivisionError):
            full = None
        for f in tests:
            try:  # as from_glue decides
                want = f.test.decide(full) if full is not None else None
            except (KeyError, ValueError, IndexError, TypeError):
                want = None
            got = f.test(run)
            assert got == want, (
                f"{entry.name}/{f.key} on {m.label}: {got} from its sections, {want} from all"
            )
            compared += want is not None
    assert compared, f"{entry.name}: no dataset gave a verdict to compare"


# -- the verdict store: each dataset's outcomes computed once --------------------------------

STORED = "trace_overhead"  # the cheapest chapter with datasets on three committed hosts


def forget():
    """What a new process holds: nothing."""
    F._CODE.clear()


@pytest.fixture
def store(tmp_path, monkeypatch):
    """STORED's committed datasets in a scratch data directory, with a build directory of its
    own; returns (data directory, the store's directory)."""
    monkeypatch.setenv("PERFBOOK_BUILD", str(tmp_path / "build"))
    monkeypatch.delenv("PERFBOOK_VERDICT_STORE", raising=False)
    data = tmp_path / "data"
    for d in sorted((ROOT / "data" / "runs").glob(f"*/{STORED}")):
        shutil.copytree(d, data / "runs" / d.parent.name / STORED)
    forget()
    yield data, store_dir("verdicts", data)
    forget()


def _all_verdicts(data):
    D = by_name(STORED).load().load(data)
    return [[(v.host_id, v.verdict, v.runs) for v in per_host] for per_host in F.verdicts(D)]


def _no_computing(monkeypatch):
    def refuse(D, finding, m, run=None):
        raise AssertionError(f"{finding.key} on {m.label} was computed, not read from the store")

    monkeypatch.setattr(F, "_test", refuse)


def test_the_store_gives_what_computing_gives_and_a_new_process_reads_it(store, monkeypatch):
    data, top = store
    monkeypatch.setenv("PERFBOOK_VERDICT_STORE", "off")
    computed = _all_verdicts(data)
    assert not top.exists()
    monkeypatch.delenv("PERFBOOK_VERDICT_STORE")
    forget()
    assert _all_verdicts(data) == computed  # computed, and stored
    runs = sorted(p.name for p in (data / "runs").glob(f"*/{STORED}/*"))
    files = sorted(top.glob(f"{STORED}__*__outcomes.json"))
    assert len(files) == len(runs) == len({f.name.split("__")[2] for f in files})
    forget()
    _no_computing(monkeypatch)
    assert _all_verdicts(data) == computed  # read back, nothing computed


def test_a_changed_dataset_is_computed_again(store, monkeypatch):
    data, top = store
    before = _all_verdicts(data)
    run = sorted((data / "runs").glob(f"*/{STORED}/*"))[0]
    (run / "README").write_text("a file added to a dataset changes its digest\n")
    forget()
    asked = []
    real = F._test
    monkeypatch.setattr(
        F, "_test", lambda D, f, m, run=None: asked.append(m.label) or real(D, f, m, run)
    )
    assert _all_verdicts(data) == before
    label = f"{run.parent.parent.name}/{run.name}"
    assert set(asked) == {label}, "only the changed dataset is computed again"


def test_changed_code_is_computed_again(store, monkeypatch):
    data, top = store
    _all_verdicts(data)
    forget()
    from perfbook.core import codedigest

    real = codedigest.closure
    monkeypatch.setattr(
        codedigest, "closure", lambda mods: {**real(mods), "extra.py": ROOT / "Makefile"}
    )
    asked = []
    real_test = F._test
    monkeypatch.setattr(
        F, "_test", lambda D, f, m, run=None: asked.append(m.label) or real_test(D, f, m, run)
    )
    _all_verdicts(data)
    assert len(set(asked)) == len(list((data / "runs").glob(f"*/{STORED}/*")))


@pytest.mark.parametrize("damage", ["garbage", "other key", "wrong shape"])
def test_a_damaged_stored_file_is_computed_again(store, monkeypatch, damage):
    data, top = store
    before = _all_verdicts(data)
    path = sorted(top.glob("*__outcomes.json"))[0]
    doc = json.loads(path.read_text())
    if damage == "garbage":
        path.write_bytes(b"\x00{not json")
    elif damage == "other key":
        doc["key"] = "0" * 64
        doc["value"] = {k: [True, "planted"] for k in doc["value"]}
        path.write_text(json.dumps(doc))
    else:
        doc["value"] = {k: "holds" for k in doc["value"]}
        path.write_text(json.dumps(doc))
    forget()
    assert _all_verdicts(data) == before
    assert json.loads(path.read_text())["key"] != "0" * 64


def test_a_symlink_planted_in_the_store_is_refused_and_never_followed(store):
    data, top = store
    _all_verdicts(data)
    path = sorted(top.glob("*__outcomes.json"))[0]
    victim = path.parent.parent / "victim"
    victim.write_text("precious\n")
    path.unlink()
    path.symlink_to(victim)
    forget()
    with pytest.raises(UnsafePath, match="is a symlink; perfbook refuses to follow it") as e:
        _all_verdicts(data)
    assert str(path) in str(e.value) and len(str(e.value).splitlines()) == 1
    assert victim.read_text() == "precious\n"


def test_another_users_stored_file_is_refused(store):
    if os.geteuid() != 0:
        pytest.skip("making a file of another user needs root")
    data, top = store
    _all_verdicts(data)
    path = sorted(top.glob("*__outcomes.json"))[0]
    os.chown(path, 65534, 65534)
    forget()
    with pytest.raises(UnsafePath, match="belongs to uid 65534"):
        _all_verdicts(data)


def test_no_writable_build_directory_costs_only_the_time(store, monkeypatch, tmp_path):
    data, top = store
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("PERFBOOK_BUILD", str(blocker / "build"))
    first = _all_verdicts(data)
    forget()
    assert _all_verdicts(data) == first


def test_platform_notes_are_stored_per_dataset(store, monkeypatch):
    """per_host_note: each host's note from its newest counted dataset, computed once."""
    data, top = store
    D = by_name(STORED).load().load(data)
    calls = []

    def compute(d):
        calls.append(d.manifests[0].label)
        return {"n": len(d.manifests)}

    want = {h: ["1 dataset"] for h in D.hosts}
    assert F.per_host_note(D, compute, lambda g: f"{g['n']} dataset") == want
    assert len(calls) == len(D.hosts) and len(list(top.glob("*__note-*.json"))) == len(D.hosts)
    forget()
    D = by_name(STORED).load().load(data)
    assert F.per_host_note(D, compute, lambda g: f"{g['n']} dataset") == want
    assert len(calls) == len(D.hosts), "the notes were read back, not computed"


def test_glued_values_and_frames_are_stored_per_dataset_and_given_back_exactly(store):
    """glued(): a chapter's prose values for one dataset (tsc_alignment's caveats quote every
    host's), and stored_frames(): a chapter's per-dataset reduction (iostat_internals' host
    summaries), each computed once and read back by a new process unchanged: same keys and
    values; same columns, dtypes and values, NaN and strings included."""
    import numpy as np

    data, top = store
    D = by_name(STORED).load().load(data)
    m = D.manifests[0]
    calls = []

    def compute(d):
        calls.append(1)
        return {"n": np.int64(len(d.manifests)), "x": 0.1 + 0.2, "s": "a"}

    frame = pd.DataFrame(
        {"host": ["h", None], "n": [1, 2], "v": [0.1 + 0.2, float("nan")], "ok": [True, False]}
    )

    def make():
        calls.append(2)
        return {"rows": frame, "none": frame.iloc[0:0]}

    first = (F.glued(F.Run(D, m), compute), F.stored_frames(D, m, "frames", make))
    forget()
    D = by_name(STORED).load().load(data)
    again = (F.glued(F.Run(D, m), compute), F.stored_frames(D, m, "frames", make))
    assert calls == [1, 2], "read back, not computed again"
    assert first[0] == again[0] == {"n": 1, "x": 0.1 + 0.2, "s": "a"}
    for got in (first[1], again[1]):
        pd.testing.assert_frame_equal(got["rows"], frame, check_exact=True)
        pd.testing.assert_frame_equal(got["none"], frame.iloc[0:0], check_exact=True)
    assert len(list(top.glob("*__glue-*.json"))) == 1 and len(list(top.glob("*__frames.json"))) == 1


def test_iostat_host_summaries_stored_or_computed_give_the_same_views(
    monkeypatch, tmp_path, book_data
):
    """iostat_internals' cross-host views (overview, phase summaries, the rank comparison)
    are the same from the stored host summaries as computed with the store off."""
    monkeypatch.setenv("PERFBOOK_BUILD", str(tmp_path / "build"))
    ch = by_name("iostat_internals").load()
    from perfbook.chapters.iostat_internals import analysis as IA
    from perfbook.chapters.iostat_internals import tables as IT

    def views():
        forget()
        D = ch.load(book_data.data_dir)
        AH = D.host_analyses()
        return IT.host_overview(D), IA.phase_summary_hosts(AH), IA.compare_hosts(AH)

    monkeypatch.setenv("PERFBOOK_VERDICT_STORE", "off")
    off = views()
    monkeypatch.delenv("PERFBOOK_VERDICT_STORE")
    views()
    monkeypatch.setattr(
        IA, "host_summary", lambda D: (_ for _ in ()).throw(AssertionError("computed"))
    )
    stored = views()
    assert len(off[0]) >= 2
    for a, b in zip(off, stored):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    forget()
