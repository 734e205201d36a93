"""The synthetic fleet (tools.synthfleet): valid, visibly synthetic, varied, never in data/."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import ROOT
from tools import hosts, identity, synthfleet
from tools.dataset import load_manifest, read_table
from tools.validation import validate_all
from tools.errors import PerfbookError
from tools.dataset import table_path


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
    assert len({(m["host"]["cpu_model"], m["host"]["kernel_release"], m["host"]["virtualization"])
                for m in ms}) > 1


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
        for p in (ROOT / "data" / "runs").glob("*/*/*/manifest.json"))
