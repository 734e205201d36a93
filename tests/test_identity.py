"""Host identity v2 (perfbook.data.identity): machines cloned from one image come apart, a reused or
edited host id is refused, and the migration of the committed data loses nothing."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from conftest import ROOT
from perfbook.analysis import hosts
from perfbook.book.validation import validate_all
from perfbook.core.errors import DatasetError
from perfbook.data import identity

KEY = "h-1db0cee60199"  # one machine-id, as every clone of this project's image has


def legacy_host(**over) -> dict:
    h = {
        "host_id": KEY,
        "cpu_model": "AMD EPYC",
        "cpus_online": 2,
        "mem_total_gib": 23.5,
        "arch": "x86_64",
        "kernel_release": "6.18.44-fc-v769",
        "tsc_flags": ["constant_tsc", "tsc", "tsc_known_freq"],
    }
    h.update(over)
    return h


def manifest(host: dict, run: str, chapter: str = "tsc_alignment") -> dict:
    return {
        "schema": 2,
        "chapter": chapter,
        "run_id": run,
        "host": host,
        "profile": "default",
        "parameters": {},
        "started": "2026-01-01T00:00:00+00:00",
        "finished": "2026-01-01T00:01:00+00:00",
        "tables": {},
        "skipped": {},
        "notes": [],
    }


def v2(khz, **over) -> dict:
    h = legacy_host(**over)
    h["machine_key"] = KEY
    h["machine"] = identity.machine_facts(h, khz, "test")
    h["host_id"] = identity.derive(h["machine"])
    return h


def test_one_machine_id_two_machines_give_two_hosts(tmp_path):
    """The issue's case: one machine-id, a different TSC frequency and CPU model."""
    a = v2(2445402)
    b = v2(2596094, cpu_model="AMD EPYC 9B14")
    assert a["machine"]["machine_key"] == b["machine"]["machine_key"]
    assert a["host_id"] != b["host_id"]
    for i, h in enumerate((a, b)):
        run = tmp_path / "runs" / h["host_id"] / "demo" / f"2026010{i + 1}T000000Z"
        run.mkdir(parents=True)
        (run / "manifest.json").write_text(json.dumps(manifest(h, run.name, "demo")))
    t = hosts.host_table(tmp_path)
    assert sorted(t["host_id"]) == sorted([a["host_id"], b["host_id"]])
    assert set(t["tsc_mhz"]) == {2450, 2600}


@pytest.mark.parametrize(
    "khz,over",
    [
        (2496000, {}),
        (2445402, {"cpus_online": 4}),
        (2445402, {"mem_total_gib": 63.8}),
        (2445402, {"cpu_model": "Intel Xeon"}),
        (2445402, {"arch": "aarch64"}),
    ],
)
def test_every_identity_fact_separates_machines(khz, over):
    assert v2(khz, **over)["host_id"] != v2(2445402)["host_id"]


def test_facts_that_vary_from_boot_to_boot_keep_the_id():
    """A calibrated TSC moves by up to a MHz between boots, MemTotal by MiB between kernel builds."""
    assert v2(2445402)["host_id"] == v2(2446900)["host_id"] == v2(2443100)["host_id"]
    assert v2(2445402)["host_id"] == v2(2445565)["host_id"]  # the TCG guest's own calibration
    assert v2(2445402)["host_id"] == v2(2445402, mem_total_gib=23.3)["host_id"]
    assert identity.tsc_mhz(2596138) == identity.tsc_mhz(2596094) == 2600
    assert identity.mem_gib(23.5) == 24 and identity.mem_gib(7.8) == 8


def test_kernel_log_prefers_the_refined_calibration():
    log = (
        "[    0.000000] tsc: Detected 2893.124 MHz processor\n"
        "[    1.532112] tsc: Refined TSC clocksource calibration: 2893.202 MHz\n"
    )
    assert identity.tsc_from_kernel_log(log) == 2893202
    assert identity.tsc_from_kernel_log("[0.0] tsc: Detected 2596.138 MHz processor") == 2596138
    assert identity.tsc_from_kernel_log("clocksource: Switched to clocksource hpet") is None


def test_an_exact_frequency_only_counts_where_the_kernel_was_told_it():
    told = v2(2596094)["machine"]
    calibrated = v2(2596094, tsc_flags=["constant_tsc", "tsc"])["machine"]
    assert told["tsc_khz"] == 2596094 and calibrated["tsc_khz"] is None


def test_same_id_with_different_check_facts_is_labelled_never_merged_silently():
    a, b = manifest(v2(2596094), "20260101T000000Z"), manifest(v2(2596138), "20260102T000000Z")
    assert a["host"]["host_id"] == b["host"]["host_id"]
    assert identity.conflicts([a, b]) == {a["host"]["host_id"]: ["tsc_khz: 2596094 vs 2596138"]}
    c = manifest(v2(2596094), "20260103T000000Z")
    c["host"]["machine"]["cpu_stepping"] = "2"
    a["host"]["machine"]["cpu_stepping"] = "1"
    assert "cpu_stepping: 1 vs 2" in identity.conflicts([a, c])[a["host"]["host_id"]]
    assert identity.conflicts([a, manifest(v2(2596094), "20260104T000000Z")]) == {}


def test_an_edited_or_legacy_host_id_is_refused():
    h = v2(2445402)
    assert identity.check({"host": h}) is None
    assert "does not follow" in identity.check({"host": {**h, "host_id": "h-000000000000"}})
    assert "predates host identity v2" in identity.check({"host": legacy_host()})
    # an explicit label (PERFBOOK_HOST_ID) is allowed, but two machines under it clash
    lab = {**h, "host_id": "lab-box", "machine": {**h["machine"], "id_override": True}}
    other = {**lab, "machine": {**lab["machine"], "cpus": 8}}
    assert identity.check({"host": lab}) is None
    assert identity.clashes([{"host": lab}, {"host": other}]) == {"lab-box": ["cpus: 2 vs 8"]}


def test_validate_refuses_a_dataset_whose_id_does_not_follow_from_its_facts(tmp_path):
    src = sorted((ROOT / "data" / "runs").glob("*/tsc_alignment/*"))[0]
    data = tmp_path / "data"
    m = json.loads((src / "manifest.json").read_text())
    m["host"]["machine"]["tsc_mhz"] = 3000  # another machine's facts under this id
    dest = data / "runs" / src.parent.parent.name / "tsc_alignment" / src.name
    shutil.copytree(src, dest)
    (dest / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DatasetError, match=r"manifest.json: host_id .* does not follow"):
        validate_all(data, names={"tsc_alignment"})


def _tables(root):
    return {
        (p.parent.parent.name, p.parent.name, p.name): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.glob("*/*/*/*.csv*")
    }


def test_migration_of_the_committed_data_loses_nothing_and_lands_where_it_is(tmp_path):
    """Un-migrate every committed dataset (its v1 host id, no machine facts), migrate it again
    with the evidence its manifest records, and find the same ids and byte-identical tables."""
    committed = ROOT / "data" / "runs"
    legacy = tmp_path / "data" / "runs"
    evidence = {}
    migrated = [
        mf
        for mf in sorted(committed.glob("*/*/*/manifest.json"))
        if "migrated_from" in json.loads(mf.read_text())["host"]["machine"]
    ]
    assert migrated  # datasets measured since record their facts themselves: never had a v1 id
    for mf in migrated:
        man = json.loads(mf.read_text())
        host = man["host"]
        mach = host.pop("machine")
        key = host.pop("machine_key")
        host["host_id"] = key
        src = mach["tsc_source"]
        if not src.startswith("inferred from tsc_alignment") and not src.startswith("not recorded"):
            evidence[(key, host["kernel_release"])] = (
                mach["tsc_khz"] or mach["tsc_mhz"] * 1000,
                src,
            )
        dest = legacy / key / mf.parent.parent.name / mf.parent.name
        shutil.copytree(mf.parent, dest)
        (dest / "manifest.json").write_text(json.dumps(man))
    before = _tables(legacy)
    moved = identity.migrate(legacy.parent, evidence, say=lambda *_: None)
    assert len(moved) == len(migrated)
    after = _tables(legacy)
    assert sorted(after.values()) == sorted(before.values())
    runs = {(mf.parent.parent.name, mf.parent.name) for mf in migrated}
    assert after == {k: v for k, v in _tables(committed).items() if k[:2] in runs}
    for mf in legacy.glob("*/*/*/manifest.json"):
        mine = json.loads(mf.read_text())["host"]
        theirs = json.loads((committed / mf.relative_to(legacy)).read_text())["host"]
        assert mine == theirs
