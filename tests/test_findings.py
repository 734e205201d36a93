"""Key findings (perfbook.analysis.findings): how a host's verdict is formed, and every declared finding
evaluated on every committed host.

The second half is what a contributor meets: a new host's data that contradicts a finding
changes that host's verdict here, in the chapter's Key findings block and on the hosts page,
instead of silently contradicting typed prose.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil

import pandas as pd
import pytest

from conftest import ROOT
from perfbook.analysis import decide
from perfbook.analysis import findings as F
from perfbook.analysis.decide import Estimate
from perfbook.chapters import CHAPTERS, EXAMPLE, by_name
from perfbook.data.buildfiles import store_dir
from perfbook.data.dataset import Data, Manifest
from perfbook.hoststate.statedir import UnsafePath


class _Chapter:
    name = "fake"
    key_findings = ()


class _Data:
    """The part of perfbook.data.dataset.Data that findings read: manifests and one table.
    rows: (host, run, x); facts: (host, run) -> manifest fields (profile, a disturbance
    record, the kernel build)."""

    def __init__(self, rows, facts=None):
        facts = facts or {}
        self.chapter = _Chapter()
        self.manifests = []
        for h, r in dict.fromkeys((h, r) for h, r, _ in rows):
            f = dict(facts.get((h, r), {}))
            host = {"host_id": h, "kernel_release": f.pop("kernel", "6.1"), "kernel_version": "#1"}
            self.manifests.append(Manifest({"run_id": r, "host": host, "tables": ["t"], **f}))
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


HALF = 0.1  # each fake run's interval: x +- HALF at 95 %


def _x(run):
    t = run["t"]
    if t.empty or t["x"].isna().all():
        return None
    x = float(t["x"].iloc[0])
    return F.Measured(Estimate(x, x - HALF, x + HALF, 0.95, "a fake interval"), f"x = {x:g}")


FINDING = F.Finding("over_one", "x is above 1", _x, quantity="x", side=">", threshold=1.0)


def _verdict(rows, host="h-a", facts=None, finding=FINDING):
    return F.evaluate(_Data(rows, facts), finding, host)


def test_one_run_is_decided_on_its_interval_three_ways():
    assert _verdict([("h-a", "r1", 2.0)]).verdict == F.HOLDS
    assert _verdict([("h-a", "r1", 0.5)]).verdict == F.FAILS
    v = _verdict([("h-a", "r1", 1.05)])  # 0.95-1.15 straddles 1
    assert v.verdict == F.UNDECIDED and "straddles 1" in v.why and "Undecided" in v.evidence
    assert v.evidence.startswith("x 1.05 (95 % interval 0.950–1.15); x = 1.05 (run r1")


def test_an_interval_below_the_confidence_is_undecided_whatever_its_side():
    """2 against 2 covers at most 66.67 %: far above the threshold, still not decided."""
    low = F.Finding(
        "c", "x is above 1", lambda run: F.Measured(decide.ratio([9, 10], [1, 1.1])), "x", ">", 1
    )
    v = _verdict([("h-a", "r1", 2.0)], finding=low)
    assert v.verdict == F.UNDECIDED and "n too small" in v.why and "66.66 %" in v.why


def test_runs_that_agree_are_pooled_over_runs():
    v = _verdict([("h-a", "r1", 2.0), ("h-a", "r2", 2.1)])
    assert v.verdict == F.HOLDS and v.builds[0].run_ids == ("r1", "r2")
    assert "pooled over 2 runs: x 2.05" in v.evidence
    assert "run r1: x 2.00" in v.evidence and "run r2: x 2.10" in v.evidence


def test_runs_that_disagree_leave_the_host_undecided_with_every_run_shown():
    """Each run holds or fails on its own interval; the run-to-run spread decides the host."""
    v = _verdict([("h-a", "r1", 2.0), ("h-a", "r2", 0.5), ("h-a", "r3", 4.0)])
    assert v.verdict == F.UNDECIDED and "straddles" in v.why
    assert "(does not hold)" in v.evidence and "(holds)" in v.evidence


def test_a_run_that_did_not_measure_it_is_not_counted_and_none_at_all_is_not_measured():
    v = _verdict([("h-a", "r1", None), ("h-a", "r2", 2.0)])
    assert v.verdict == F.HOLDS and v.evidence.endswith("(run r2)")
    assert _verdict([("h-a", "r1", None)]).verdict == F.NOT_MEASURED


def test_quick_runs_are_smoke_tests_and_decide_nothing():
    rows = [("h-a", "r1", 2.0), ("h-a", "r2", 0.5), ("h-a", "r3", 2.1)]
    facts = {("h-a", "r1"): {"profile": "default"}, ("h-a", "r2"): {"profile": "quick"}}
    v = _verdict(rows, facts=facts)
    assert v.verdict == F.HOLDS and [r for r, _ in v.runs] == ["r1", "r3"]  # r3: none recorded
    only = _verdict(rows[1:2], facts=facts)
    assert only.verdict == F.UNDECIDED and "smoke-test" in only.why
    assert "not counted" in only.evidence


def test_a_disturbed_run_is_shown_and_does_not_decide():
    rows = [("h-a", "r1", 2.0), ("h-a", "r2", 0.5)]
    facts = {("h-a", "r2"): {"disturbance": {"disturbed": True, "reasons": ["steal"]}}}
    v = _verdict(rows, facts=facts)
    assert v.verdict == F.HOLDS and v.set_aside == (("r2", "disturbed"),)
    assert "disturbed, not counted" in v.evidence
    alone = _verdict(rows[1:], facts=facts)
    assert alone.verdict == F.UNDECIDED and "disturbed" in alone.why


def test_a_run_whose_fingerprint_departs_from_its_hosts_is_set_aside():
    """Four runs of one build; the machine was twice as slow at a system call and a copy in one
    (another machine of the class, or a neighbour the monitor missed): that run is shown, not
    counted. One figure alone that far off is the fingerprint's own noise, and counts."""

    def fp(ns):
        f = {"syscall_ns": ns, "memcpy_gbs": 10.0 * 200 / ns, "loopback_us": 4.6}
        return {"disturbance": {"disturbed": False, "fingerprint": {"before": f, "after": f}}}

    rows = [("h-a", f"r{i}", x) for i, x in enumerate((2.0, 2.05, 2.1, 0.5))]
    facts = {("h-a", f"r{i}"): fp(ns) for i, ns in enumerate((210, 200, 220, 430))}
    v = _verdict(rows, facts=facts)
    assert v.verdict == F.HOLDS and v.builds[0].run_ids == ("r0", "r1", "r2")
    (aside,) = v.set_aside
    assert aside[0] == "r3" and "(syscall_ns 2.00×, memcpy_gbs 0.50×)" in aside[1]
    facts[("h-a", "r3")] = fp(230)  # within 1.5x: it counts, and the host is undecided
    assert _verdict(rows, facts=facts).verdict == F.UNDECIDED
    one = fp(215)
    one["disturbance"]["fingerprint"]["after"] = {
        **one["disturbance"]["fingerprint"]["after"],
        "loopback_us": 9.9,
    }
    facts[("h-a", "r3")] = one  # one figure 2x off: noise, not a departure
    assert _verdict(rows, facts=facts).set_aside == ()


def test_runs_of_two_kernel_builds_are_not_pooled_and_a_disagreement_is_said():
    rows = [("h-a", "r1", 2.0), ("h-a", "r2", 0.5)]
    v = _verdict(rows, facts={("h-a", "r1"): {"kernel": "6.1"}, ("h-a", "r2"): {"kernel": "6.2"}})
    assert v.verdict == F.UNDECIDED and "depends on the kernel build" in v.why
    assert [b.verdict for b in v.builds] == [F.HOLDS, F.FAILS]
    same = _verdict(rows[:1] + [("h-a", "r2", 3.0)], facts={("h-a", "r2"): {"kernel": "6.2"}})
    assert same.verdict == F.HOLDS and len(same.builds) == 2


def test_other_hosts_do_not_leak_into_a_verdict():
    rows = [("h-a", "r1", 2.0), ("h-b", "r9", 0.1)]
    assert _verdict(rows, "h-a").verdict == F.HOLDS
    assert _verdict(rows, "h-b").verdict == F.FAILS


def test_the_prose_sentence_follows_the_verdict():
    assert F.sentence(_verdict([("h-a", "r1", 2.0)])).startswith("x is above 1 (x 2.00")
    assert F.sentence(_verdict([("h-a", "r1", 0.5)])).startswith("Not so: x is above 1")
    open_ = F.sentence(_verdict([("h-a", "r1", 1.0)]))
    assert open_.startswith("Undecided whether x is above 1") and "straddles" in open_


def test_a_finding_that_crashes_names_itself_and_the_run():
    bad = F.Finding("bad", "crashes", lambda run: run["t"]["missing"], "x", ">", 1)
    with pytest.raises(RuntimeError, match=r"finding 'bad' on h-a/r1: KeyError"):
        F.evaluate(_Data([("h-a", "r1", 1.0)]), bad, "h-a")
    text = F.Finding("text", "a string", lambda run: "2.0", "x", ">", 1)
    with pytest.raises(RuntimeError, match=r"finding 'text' on h-a/r1: TypeError"):
        F.evaluate(_Data([("h-a", "r1", 1.0)]), text, "h-a")


# -- every chapter's findings on every committed host ----------------------------------------


@pytest.mark.parametrize("entry", CHAPTERS, ids=[c.name for c in CHAPTERS])
def test_every_finding_evaluates_on_every_committed_host(entry, capsys, book_data):
    ch = entry.load()
    assert 2 <= len(ch.key_findings) <= 5, (
        f"{ch.name}: {len(ch.key_findings)} key findings, want 2-5"
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
                    assert out.verdict in (F.HOLDS, F.FAILS, F.UNDECIDED)
                    assert math.isfinite(out.estimate.value), (
                        f"{ch.name}/{v.finding.key} on {run_id}: no number"
                    )
                    assert "nan" not in out.evidence.lower().split(), out.evidence
    assert told, f"{ch.name}: no finding could be evaluated on any dataset of the {book_data} data"
    if book_data.scenario == "committed":
        with capsys.disabled():
            print(
                f"\n{ch.name}:\n"
                + F.matrix(D).drop(columns=["chapter", "claim"]).to_string(index=False)
            )


@pytest.mark.parametrize("entry", CHAPTERS, ids=[c.name for c in CHAPTERS])
def test_every_finding_the_text_quotes_is_declared(entry):
    """A chapter's markdown quotes key findings as {glue:text}`kf_<key>`: each names a declared
    finding (one removed as a check, or renamed, fails here, not as a missing glue value)."""
    import nbformat

    book = nbformat.read(entry.path, as_version=4)
    quoted = {
        k
        for c in book.cells
        if c.cell_type == "markdown"
        for k in re.findall(r"`kf_(\w+)`", c.source)
    }
    declared = {f.key for f in entry.load().key_findings}
    assert quoted <= declared, f"{entry.name} quotes undeclared findings: {quoted - declared}"


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


def test_runs_without_an_interval_pool_to_undecided_not_to_not_measured():
    """Every run measured the quantity but none has an interval (a confound, or a line through
    two points): the host is undecided, with why; 'not measured' is for runs that did not
    measure it."""
    import math

    from perfbook.analysis.decide import Estimate
    from perfbook.analysis.findings import Finding, Measured, judge

    f = Finding("k", "a claim", lambda run: None, "x", ">", 1.0)
    o = f.outcome(Measured(Estimate(2.0, math.nan, math.nan, 0.0, "a line through 2 sizes")))
    runs = [
        ({"run_id": r, "host": {"kernel_release": "6.1", "kernel_version": "#1"}}, o)
        for r in ("20260101T000000Z", "20260102T000000Z")
    ]
    v = judge(f, "h", runs)
    assert v.verdict == "undecided" and v.why == "no interval: a line through 2 sizes"


# -- findings at a glance (#41): a strip per claim, each run's evidence collapsed -------------


def _block(monkeypatch, rows, most=5, highlight=None):
    D = _Data(rows)
    D.chapter.key_findings = (FINDING,)
    per_host = [F.evaluate(D, FINDING, h) for h in D.hosts]
    monkeypatch.setattr(F, "verdicts", lambda D: [per_host])
    names = {h: f"machine {h[2:]}" for h in D.hosts}
    return F.html_block(D, names, highlight, most), per_host


def _visible(block: str) -> str:
    """The block's text as a reader sees it before opening anything: no closed <details>, no
    attribute (a tooltip is not on the page until hovered)."""
    shown = re.sub(r"<details.*?</details>", "", block, flags=re.S)
    return re.sub(r"<[^>]+>", "", shown)


def test_each_claim_has_one_strip_entry_per_host_and_the_runs_in_a_closed_detail(monkeypatch):
    block, per_host = _block(
        monkeypatch, [("h-a", "r1", 2.0), ("h-a", "r2", 2.1), ("h-b", "s1", 0.5)]
    )
    strip = block.split('<ul class="kf-strip">')[1].split("</ul>")[0]
    entries = re.findall(r'<li class="kf-host">(.*?)</li>', strip)
    assert len(entries) == 2
    assert "holds" in entries[0] and 'title="h-a">machine a<' in entries[0]
    assert "does not hold" in entries[1] and ">0.500 (95 % interval 0.400–0.600)<" in entries[1]
    assert '<strong>x is above 1</strong> <span class="kf-quantity">(x)</span>' in block
    assert 'id="kf-over_one"' in block  # the anchor a takeaway links to
    seen = _visible(block)
    assert "r1" not in seen and "s1" not in seen and "pooled" not in seen, seen  # runs: collapsed
    assert "h-a" not in seen and "h-b" not in seen  # a machine by its label, its id a tooltip
    detail = block.split('<details class="kf-evidence">')[1]
    assert "Evidence: 3 runs on 2 hosts" in detail and "run r1" in detail and "run s1" in detail


def test_an_undecided_entry_says_why_on_its_verdict(monkeypatch):
    block, (v,) = _block(monkeypatch, [("h-a", "r1", 1.0)])
    assert v.verdict == F.UNDECIDED and v.why
    assert f'kf-undecided" title="{v.why}">undecided</span>' in block


def test_beyond_most_hosts_the_strip_shows_the_highlighted_ones_and_counts_all(monkeypatch):
    rows = [(f"h-{c}", "r1", 2.0 if c in "abc" else 0.5) for c in "abcdefg"]
    block, _ = _block(monkeypatch, rows, most=5, highlight={"h-b": "this host"})
    strip = block.split('<ul class="kf-strip">')[1].split("</ul>")[0]
    assert strip.count('<li class="kf-host">') == 1 and "(this host)" in strip
    assert "7 hosts: 3 holds, 4 does not hold" in strip


@pytest.mark.parametrize("entry", CHAPTERS + [EXAMPLE], ids=lambda e: e.name)
def test_every_finding_has_a_one_liner_a_reader_can_run(entry):
    """Finding.reproduce (#41): one line of shell, run as root (no sudo in it), that shows the
    finding's core observation; a harness it names is one `make setup` builds (tools/c/<name>.c),
    and a chapter's one-liners differ from each other."""
    ch = entry.load()
    seen = set()
    for f in ch.key_findings:
        line = f.reproduce
        assert line.strip(), f"{entry.name}: finding {f.key!r} has no one-liner (reproduce=)"
        assert "\n" not in line and "sudo" not in line.split(), f"{entry.name}/{f.key}: {line!r}"
        for harness in re.findall(r"build/bin/(\w+)", line):
            assert (ROOT / "tools" / "c" / f"{harness}.c").is_file(), (
                f"{entry.name}/{f.key}: build/bin/{harness} is not a harness setup builds"
            )
        assert line not in seen, f"{entry.name}/{f.key}: the same one-liner as another finding"
        seen.add(line)
