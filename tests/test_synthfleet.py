"""The synthetic fleet (perfbook.dev.synthfleet): valid, visibly synthetic, varied, never in data/."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import ROOT
from perfbook.analysis import hosts
from perfbook.book.validation import validate_all
from perfbook.core.errors import PerfbookError
from perfbook.data import identity
from perfbook.data.dataset import load_manifest, read_table, table_path
from perfbook.dev import synthfleet


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    dest = tmp_path_factory.mktemp("fleet") / "data"
    ids = synthfleet.generate(6, dest, seed=7, say=lambda *_: None)
    return dest, ids


def test_a_synthetic_fleet_validates_like_any_contribution(fleet):
    dest, ids = fleet
    assert len(set(ids)) == 6
    assert validate_all(dest) == sum(1 for _ in (dest / "runs").glob("*/*/*/manifest.json"))
    for mf in (dest / "runs").glob("*/*/*/manifest.json"):
        assert identity.check(load_manifest(mf.parent)) is None


def test_every_synthetic_host_is_marked_and_varied(fleet):
    dest, ids = fleet
    t = hosts.host_table(dest)
    assert sorted(t.host_id) == sorted(ids)
    assert t.description.str.startswith("synthetic: ").all()
    ms = hosts.all_manifests(dest)
    assert all(m["host"]["synthetic"] and m["host"]["machine"]["synthetic"] for m in ms)
    assert (
        len(
            {
                (m["host"]["cpu_model"], m["host"]["kernel_release"], m["host"]["virtualization"])
                for m in ms
            }
        )
        > 1
    )


def test_values_are_scaled_per_host_and_counts_kept(fleet):
    dest, _ = fleet
    run = sorted((dest / "runs").glob("*/trace_overhead/*"))[0]
    man = load_manifest(run)
    src = next((ROOT / "data" / "runs").glob(f"*/trace_overhead/{run.name}"))
    for table, rows in man["tables"].items():
        mine, orig = read_table(run, table, man), pd.read_csv(table_path(src, f"{table}"))
        assert len(mine) == rows == len(orig)
        assert list(mine.columns) == list(orig.columns)
        for c in orig.columns:
            if orig[c].dtype.kind in "iu":
                assert (mine[c] == orig[c]).all(), (table, c)
    s, o = read_table(run, "samples", man), pd.read_csv(table_path(src, "samples"))
    ratio = (s.ns_per_call / o.ns_per_call).dropna()
    assert ratio.max() / ratio.min() < 1.0001  # one factor per host keeps ratios within it


def test_the_book_data_is_refused(tmp_path):
    with pytest.raises(PerfbookError, match="never goes into the book's data/"):
        synthfleet.generate(1, ROOT / "data", say=lambda *_: None)
    with pytest.raises(PerfbookError, match="never goes into the book's data/"):
        synthfleet.generate(1, ROOT / "data" / "runs" / "x", say=lambda *_: None)
    assert not list((ROOT / "data" / "runs").glob("*/*/*/manifest.json")) or all(
        not json.loads(p.read_text())["host"].get("synthetic")
        for p in (ROOT / "data" / "runs").glob("*/*/*/manifest.json")
    )


# -- a reader's new host and a kernel update (conftest.book_data) ------------------------------


def test_a_readers_new_host_and_a_kernel_update_validate_like_any_contribution(book_datasets):
    """The new host: its id follows from its facts (another CPU model, another kernel build),
    its one dataset per chapter is the newest, default profile, marked synthetic, with one
    measured round where the chapter repeats adaptively. The kernel update: the same host id on
    another build, newer than every dataset, one round fewer. Both copies validate."""
    from perfbook.analysis import fleetview

    committed = {p.name for p in (ROOT / "data" / "runs").glob("*/*/*")}
    for scenario in ("new_host", "spanning_builds"):
        bd = book_datasets(scenario)
        assert validate_all(bd.data_dir) == sum(
            1 for _ in (bd.data_dir / "runs").glob("*/*/*/manifest.json")
        )
        assert set(bd.added) == {p.name for p in (ROOT / "data" / "runs").glob("*/*")}
        for chapter, run in bd.added.items():
            man = load_manifest(run)
            assert identity.check(man) is None and man.host_id == bd.host
            assert man.profile == "default" and run.name > max(committed)
            src = max(
                (ROOT / "data" / "runs").glob(
                    f"{fleetview.reference_host()['host_id']}/{chapter}/*"
                )
                if scenario == "spanning_builds"
                else (ROOT / "data" / "runs").glob(f"*/{chapter}/*"),
                key=lambda p: p.name,
            )
            old = load_manifest(src)
            if scenario == "new_host":
                assert (
                    man["host"]["synthetic"]
                    and man["host"]["cpu_model"] == synthfleet.READER["cpu_model"]
                )
                assert man["host"]["kernel_release"] == synthfleet.READER["kernel_release"]
                assert man["host"]["cpu_model"] != old["host"]["cpu_model"]
            else:
                assert (
                    man.host_id == old.host_id and man["host"]["machine"] == old["host"]["machine"]
                )
                assert man["host"]["kernel_release"] != old["host"]["kernel_release"]
            for col, _, tables in synthfleet.ROUNDS.get(chapter, ()):
                for t in tables:
                    if t not in man["tables"]:
                        continue
                    mine, theirs = read_table(run, t, man), read_table(src, t, old)
                    warm, was_warm = synthfleet._warm(mine, col), synthfleet._warm(theirs, col)
                    had = theirs[col][~was_warm].nunique()
                    # one round fewer, but a table recorded in one round keeps it
                    want = 1 if scenario == "new_host" else max(had - 1, 1)
                    assert mine[col][~warm].nunique() == want, (scenario, chapter, t)
                    assert mine[col][~warm].min() == theirs[col][~was_warm].min(), (
                        scenario,
                        chapter,
                        t,
                    )
                    assert warm.sum() == was_warm.sum(), "the warm-up rounds are kept"
            if chapter in synthfleet.ROUNDS and "repetition" in man["tables"]:
                rep, was = read_table(run, "repetition", man), read_table(src, "repetition", old)
                adaptive = (was.min_runs < was.max_runs) & (was.n > 1)
                want = 1 if scenario == "new_host" else was.n[adaptive] - 1
                assert (rep.n[adaptive] == want).all(), (scenario, chapter)


def test_every_chapter_that_repeats_adaptively_has_its_rounds_listed():
    """synthfleet.ROUNDS names, for each chapter whose committed datasets repeat adaptively, the
    tables and the column that number its rounds: a chapter added or changed shows up here."""
    from perfbook.chapters import CHAPTERS
    from perfbook.data.dataset import list_runs

    for ch in CHAPTERS:
        tables = ch.load().tables
        for col, which, names in synthfleet.ROUNDS.get(ch.name, ()):
            assert which in ("first", "last", "context")
            assert all(col in tables[t].columns for t in names), (ch.name, col, names)
        adaptive = False
        for run in list_runs(ch.name):
            man = load_manifest(run)
            if "repetition" in man["tables"]:
                rep = read_table(run, "repetition", man)
                adaptive = adaptive or bool((rep.min_runs < rep.max_runs).any())
        assert adaptive == (ch.name in synthfleet.ROUNDS), ch.name


def test_another_build_of_a_kernel_release():
    assert synthfleet.other_build("6.18.44-fc-v657") == "6.18.44-fc-v658"
    assert synthfleet.other_build("6.18.44-fc-v657", {"6.18.44-fc-v658"}) == "6.18.44-fc-v659"
    assert synthfleet.other_build("6.1.0-56-amd64") == "6.1.0-57-amd64"
    assert synthfleet.other_build("6.18.44") == "6.18.44-rebuild1"


def test_a_new_host_or_build_never_goes_into_the_book_data():
    for make in (
        lambda: synthfleet.add_host(ROOT / "data"),
        lambda: synthfleet.add_build(ROOT / "data", "h-5ab5c186a54f"),
    ):
        with pytest.raises(PerfbookError, match="never goes into the book's data/"):
            make()
