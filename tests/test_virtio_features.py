"""virtio_features: the decoder (unit), this machine's snapshot (fixture), the chapter's
parameters, the guest runner of perfbook.qemu.guest (unit + live), and a quick collect (live,
skipped with a reason). The collect's signal handling is in tests/test_contract.py (LIVE)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, need_guest, owned_by, qemu_children
from perfbook.analysis.findings import FAILS, HOLDS, NOT_MEASURED, UNDECIDED, Run, evaluate
from perfbook.chapters import virtio_features as V
from perfbook.chapters.virtio_features import (
    analysis,
    collect,
    key_findings,
    parse,
    prose,
    tables,
)
from perfbook.chapters.virtio_features.featurebits import decode as vf
from perfbook.core.errors import ParameterError
from perfbook.data.dataset import load_manifest, shown_datasets, table_path, write_table
from perfbook.framework import sequence as framework
from perfbook.qemu import guest

FIX = ROOT / "tests" / "fixtures" / "virtio_features" / "host_sysfs.json"
# the seed's two strings (000_7b0d737d6588117b.txt, 2013-03-09)
SEED_LOCAL = "0010101101110000000000000000110000000000000000000000000000000000"
SEED_VPS = "0010101001100000000000000000110000000000000000000000000000000000"


# ---------------------------------------------------------------- decoder
def test_seed_local_kvm_string():
    assert vf.names(SEED_LOCAL, 2) == [
        "SEG_MAX",
        "GEOMETRY",
        "BLK_SIZE",
        "SCSI",
        "FLUSH",
        "TOPOLOGY",
        "CONFIG_WCE",
        "INDIRECT_DESC",
        "EVENT_IDX",
    ]
    # the seed's "10th from the left" is bit 9, today's FLUSH, the 3.x WCE
    b9 = [b for b in vf.decode(SEED_LOCAL, "block") if b.bit == 9][0]
    assert (b9.name, b9.old_name, b9.kind) == ("FLUSH", "WCE", "device")
    # CONFIG_WCE negotiated: cache_type comes from the config byte, not from the bits
    assert vf.cache_type_from_features(SEED_LOCAL) is None


def test_seed_vps_string_and_difference():
    assert vf.names(SEED_VPS, "0x0002") == [
        "SEG_MAX",
        "GEOMETRY",
        "BLK_SIZE",
        "FLUSH",
        "TOPOLOGY",
        "INDIRECT_DESC",
        "EVENT_IDX",
    ]
    assert vf.cache_type_from_features(SEED_VPS) == "write back"
    assert vf.diff(SEED_LOCAL, SEED_VPS, "block") == {
        "added": [],
        "removed": ["SCSI", "CONFIG_WCE"],
    }


def test_reference_csv_holds_the_seed_strings():
    import pandas as pd

    ref = pd.read_csv(ROOT / "data" / "reference" / "virtio_features.csv", dtype=str)
    assert set(ref["features"]) == {SEED_LOCAL, SEED_VPS}
    for col in ("seed_file", "article_title", "date", "environment", "note"):
        assert ref[col].notna().all(), col
    assert (ref["seed_file"] == "000_7b0d737d6588117b.txt").all()


def test_this_machine_fixture_decodes():
    dump = json.loads(FIX.read_text())["dump"]
    devs = {d["device"]: d for d in parse.devices_from_dump(dump)}
    assert {d["type"] for d in devs.values()} == {"balloon", "block", "net", "vsock", "rng"}
    assert all(d["n_chars"] == 128 for d in devs.values())
    assert all(
        d["status_flags"] == "ACKNOWLEDGE|DRIVER|DRIVER_OK|FEATURES_OK" for d in devs.values()
    )
    blk = devs["virtio1"]
    assert blk["driver"] == "virtio_blk"
    assert "FLUSH" in blk["names"].split() and "CONFIG_WCE" not in blk["names"].split()
    assert "VERSION_1" in blk["names"].split()
    # the balloon offers bit 7, which no table of ours names: it must be reported, not dropped
    assert devs["virtio0"]["unknown_bits"] == "7"
    assert "UNKNOWN_7" in devs["virtio0"]["names"].split()
    (b,) = parse.blocks_from_dump(dump)
    assert b["cache_type"] == "write back" and b["write_cache"] == "write back"
    assert b["cache_type_rule"].startswith("FLUSH") and b["cache_type_consistent"] is True
    assert b["nr_queues"] == 1 and b["serial"] == "(redacted)"


@pytest.mark.parametrize("length", [24, 32, 64, 128, 200])
def test_any_length(length):
    bits = [b for b in (2, 9, 23, 29, 32, 34, 63, 65, 127, 130, 199) if b < length]
    s = vf.to_string(bits, length)
    assert len(s) == length
    assert [b.bit for b in vf.decode(s, "block")] == bits
    assert vf.to_int(s) == sum(1 << b for b in bits)


def test_unknown_bits_are_reported_not_dropped():
    s = vf.to_string([3, 8, 45, 100, 140], 160)
    got = vf.decode(s, "block")
    assert [b.bit for b in got] == [3, 8, 45, 100, 140]
    assert all(not b.known for b in got)
    assert [b.kind for b in got] == ["device", "device", "reserved", "device", "reserved"]
    assert got[1].old_name == "IDENTIFY"  # an old name, still flagged unknown today
    # an unknown device type: transport bits still named, the rest UNKNOWN_n
    names = vf.names(vf.to_string([0, 28, 32], 64), 99)
    assert names == ["UNKNOWN_0", "INDIRECT_DESC", "VERSION_1"]
    assert vf.device_type(99) == "unknown-99"


def test_transport_bits_24_to_41():
    s = vf.to_string(range(24, 42), 64)
    got = vf.decode(s, "net")
    assert all(b.kind == "transport" for b in got)
    named = {b.bit: b.name for b in got if b.known}
    assert named[32] == "VERSION_1" and named[34] == "RING_PACKED" and named[41] == "ADMIN_VQ"
    assert named[28] == "INDIRECT_DESC" and named[29] == "EVENT_IDX"
    assert {25, 26}.isdisjoint(named)  # never defined: unknown, but still listed
    assert [b.bit for b in got] == list(range(24, 42))


def test_bad_input_is_one_clear_error():
    with pytest.raises(ParameterError, match="only 0 and 1"):
        vf.parse_bits("0012")
    with pytest.raises(ParameterError):
        vf.device_type("not-a-device")
    assert vf.parse_bits("") == [] and vf.parse_bits(" 0101\n") == [1, 3]
    # a device whose string is garbage doesn't stop the others from being decoded
    rows = parse.devices_from_dump(
        {
            "virtio0/device": "0x0002",
            "virtio0/features": "01x",
            "virtio1/device": "0x0004",
            "virtio1/features": "0" * 32 + "1",
        }
    )
    assert rows[0]["decode_error"] and rows[1]["names"] == "VERSION_1"


def test_status_and_device_names():
    assert vf.decode_status("0x0000000f") == ["ACKNOWLEDGE", "DRIVER", "DRIVER_OK", "FEATURES_OK"]
    assert vf.decode_status(0x83) == ["ACKNOWLEDGE", "DRIVER", "FAILED"]
    assert vf.decode_status(0x110) == ["0x110"]
    for i, n in {
        1: "net",
        2: "block",
        3: "console",
        4: "rng",
        5: "balloon",
        8: "scsi",
        9: "9p",
        16: "gpu",
        19: "vsock",
        26: "fs",
    }.items():
        assert vf.device_type(i) == n


HEADERS = Path("/usr/include/linux")


def _header_defines():
    out = {}
    for h in HEADERS.glob("virtio_*.h"):
        for m in re.finditer(
            r"#define\s+(VIRTIO_[A-Z0-9_]*F_[A-Z0-9_]+|VIRTIO_9P_MOUNT_TAG)\s+(\d+)\b",
            h.read_text(),
        ):
            out[m.group(1)] = int(m.group(2))
    return out


def test_table_matches_installed_uapi_headers():
    if not (HEADERS / "virtio_config.h").is_file():
        pytest.skip(
            "no /usr/include/linux/virtio_*.h (apt-get install linux-libc-dev) to check the table against"
        )
    defs = _header_defines()
    rows = vf.table_rows()
    checked = 0
    for r in rows:
        if r["source"] == "uapi-6.1" and r["macro"] in defs:
            assert defs[r["macro"]] == r["bit"], r
            checked += 1
    assert checked > 60
    # every feature macro of the device types we cover is in the table (no silent gap)
    covered = {"BLK", "NET", "BALLOON", "CONSOLE", "SCSI", "VSOCK", "GPU", "IOMMU", "MEM"}
    ours = {r["macro"] for r in rows}
    for name, bit in defs.items():
        m = re.match(r"VIRTIO_([A-Z0-9]+)_F_", name)
        if m and m.group(1) in covered and name != "VIRTIO_NET_F_GUEST_UDP_TUNNEL_GSO_MAPPED":
            assert name in ours, f"{name} ({bit}) is in the headers but not in the table"


# ---------------------------------------------------------------- parameters
def test_params_validate():
    p = V.chapter.parameters("quick")
    assert parse.config_list(p["configs"])[0] == "default"
    assert parse.config_list(V.chapter.parameters("default")["configs"]) == list(
        parse.GUEST_CONFIGS
    )
    assert V.chapter.parameters("quick", kvm_boot_timeout=5)["kvm_boot_timeout"] == 5.0
    for bad in (
        {"configs": "nope"},
        {"configs": " , "},
        {"accel": "xen"},
        {"kvm_boot_timeout": -1},
        {"boot_timeout": 901},
        {"boot_timeout": "soon"},
        {"guest": "yes"},
        {"separate_boots": 1},
        {"colour": 1},
    ):
        with pytest.raises(ParameterError) as e:
            V.chapter.parameters("quick", **bad)
        assert "\n" not in str(e.value)
    with pytest.raises(ParameterError):
        V.chapter.parameters("huge")


def test_bad_config_writes_no_dataset(scratch_data):
    with pytest.raises(ParameterError, match="bogus"):
        framework.collect(
            V.chapter, "quick", scratch_data, say=lambda s: None, configs="default,bogus"
        )
    assert not any((scratch_data / "runs").iterdir())


def test_boot_plan_and_disk_labels_unique():
    plan = collect.plan_of(V.chapter.parameters("default"))
    assert [c for c, _ in plan] == [1, 2]
    assert [c for _, cs in plan for c in cs] == list(parse.GUEST_CONFIGS)
    for _, cfgs in plan:
        labels = [collect.disk(c).label for c in cfgs]
        assert len(set(labels)) == len(labels)
    sep = collect.plan_of(V.chapter.parameters("default", separate_boots=True))
    assert len(sep) == len(parse.GUEST_CONFIGS) and all(len(cs) == 1 for _, cs in sep)
    assert collect.plan_of(V.chapter.parameters("default", guest=False)) == []


# ---------------------------------------------------------------- guest runner (unit)
def test_dump_script_matches_python_dump_on_this_host():
    if not _host_has_virtio():
        pytest.skip("this host has no virtio devices in /sys/bus/virtio/devices")
    r = subprocess.run(
        ["sh", "-c", collect.dump_script()], capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 0, r.stderr
    sh, py = parse.parse_dump(r.stdout), collect.dump_sysfs()
    assert sh == py and py


# ---------------------------------------------------------------- live: guests
def _host_has_virtio() -> bool:
    return parse.SYSFS_VIRTIO.is_dir() and any(parse.SYSFS_VIRTIO.iterdir())


def _collect(data):
    return framework.collect(V.chapter, "quick", data, say=lambda s: None)


def test_quick_collect_live(scratch_data):
    need_guest()
    out = _collect(scratch_data)
    man = load_manifest(out)
    assert man["chapter"] == "virtio_features" and "guests" not in man["skipped"]
    assert (
        man.profile == "quick"
        and man.parameters["configs"] == V.chapter.profiles["quick"]["configs"]
    )
    assert set(man.facts["decoder_sources"]) == {"uapi-6.1", "upstream", "spec-1.2"}
    assert (
        man.facts["guest_artefacts"]["kernel_release"] and "dir" not in man.facts["guest_artefacts"]
    )
    D = V.chapter.load(scratch_data)  # read back through the declared schemas
    boots, bits, blocks = D["boots"], D.bits, D.blocks
    assert set(boots["accel"]) <= {"kvm", "tcg"} and boots["accel_note"].notna().all()
    assert not boots["qemu_cmdline"].str.contains(str(guest.guest_root())).any()
    g = blocks[blocks["source"] == "guest"].set_index("config")
    assert set(g.index) == set(parse.config_list(V.chapter.profiles["quick"]["configs"]))
    assert (blocks[blocks["source"] == "host"]["serial"] == "(redacted)").all()
    # what QEMU offers changes what the guest negotiates
    assert g.loc["writethrough+config-wce=off", "cache_type"] == "write through"
    assert not g.loc["writethrough+config-wce=off", "config_wce"]
    assert g.loc["default", "config_wce"] and g.loc["default", "cache_type"] == "write back"
    gb = bits[bits["source"] == "guest"]
    assert "RING_PACKED" in set(gb[gb["config"] == "packed=on"]["name"])
    assert "RING_PACKED" not in set(gb[gb["config"] == "default"]["name"])
    legacy = set(gb[gb["config"] == "legacy+scsi=on"]["name"])
    assert (
        "VERSION_1" not in legacy and "SCSI" not in legacy
    )  # offered, but 6.x drivers never take it
    # a one-shot readout: nothing is repeated until tight, so there is no repetition table
    assert "repetition" not in man["tables"]
    assert not qemu_children(os.getpid())
    assert not owned_by(os.getpid())


def test_no_qemu_skips_the_guest_part(monkeypatch, scratch_data):
    if not _host_has_virtio():
        pytest.skip("this host has no virtio devices: nothing to snapshot without QEMU")
    why = "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)"
    monkeypatch.setattr(guest, "preflight", lambda: [why])
    out = _collect(scratch_data)
    man = json.loads((out / "manifest.json").read_text())
    assert man["skipped"] == {"guests": why}
    assert set(man["tables"]) == {"sysfs"}
    import pandas as pd

    s = pd.read_csv(table_path(out, "sysfs"))
    assert (
        set(s["source"]) == {"host"}
        and (s[s.path.str.endswith("/serial")]["value"] == "(redacted)").all()
    )


def test_unfetchable_guest_kernel_skips_the_guest_part(monkeypatch, scratch_data):
    if not _host_has_virtio():
        pytest.skip("this host has no virtio devices: nothing to snapshot without a guest")
    why = "apt-get download linux-image-x failed: no network"

    def no_kernel(*a, **k):
        raise guest.MissingPrerequisite(why)

    monkeypatch.setattr(guest, "preflight", lambda: [])
    monkeypatch.setattr(guest, "ensure_artefacts", no_kernel)
    out = _collect(scratch_data)
    man = json.loads((out / "manifest.json").read_text())
    assert man["skipped"] == {"guests": why} and set(man["tables"]) == {"sysfs"}
    assert not owned_by(os.getpid())


def test_host_bit_diff_is_a_set_difference_per_device_type():
    """Two hosts are compared bit by bit (exact readouts), from each host's newest dataset."""
    import pandas as pd

    ms = [
        {"host": {"host_id": h}, "run_id": r}
        for h, r in (
            ("h-a", "20260101T000000Z"),
            ("h-b", "20260101T000000Z"),
            ("h-b", "20260202T000000Z"),
        )
    ]
    rows = [
        ("h-a", "20260101T000000Z", "block", "FLUSH"),
        ("h-a", "20260101T000000Z", "block", "VERSION_1"),
        ("h-a", "20260101T000000Z", "net", "CSUM"),
        ("h-b", "20260101T000000Z", "block", "SCSI"),  # older run: ignored
        ("h-b", "20260202T000000Z", "block", "VERSION_1"),
        ("h-b", "20260202T000000Z", "block", "MQ"),
    ]
    bits = pd.DataFrame(
        [{"host_id": h, "run_id": r, "source": "host", "type": t, "name": n} for h, r, t, n in rows]
    )
    for m in ms:
        m.update(profile="default", tables={"sysfs": 1})
    shown = shown_datasets(ms)
    assert shown == {"h-a": "20260101T000000Z", "h-b": "20260202T000000Z"}
    d = analysis.host_bit_diff(bits, shown).set_index("type")
    assert (
        d.loc["block", "only on this host"] == "MQ"
        and d.loc["block", "only on the baseline"] == "FLUSH"
    )
    assert d.loc["net", "only on this host"] == "(no such device)"
    assert (d["baseline"] == "h-a").all() and (d["host_id"] == "h-b").all()
    assert analysis.host_bit_diff(bits[bits.host_id == "h-a"], shown_datasets(ms[:1])).empty


# ---------------------------------------------------------------- committed data
def test_committed_data_decodes_every_guest_config(book_data):
    """The quoted dataset (profile default) booted every guest config; each disk got its
    config through its serial, and the summary and change tables cover them all in order."""
    D = V.chapter.load(book_data.data_dir)
    assert D.quoted.profile == "default"
    summary, changed = tables.guest_summary(D), tables.changes_table(D)
    assert list(summary["config"]) == list(parse.GUEST_CONFIGS)
    assert list(changed["config"]) == [
        c for c in parse.GUEST_CONFIGS if c not in ("default", "smp2:default")
    ]
    g = summary.set_index("config")
    assert g.loc["default", "CONFIG_WCE"] == 1 and g.loc["config-wce=off", "CONFIG_WCE"] == 0
    assert g.loc["packed=on", "RING_PACKED"] == 1 and g.loc["legacy", "VERSION_1"] == 0
    assert D.seed["features"].tolist() == [SEED_LOCAL, SEED_VPS]  # read as text: leading zeros kept
    f = prose.values(D)
    assert not [k for k, v in f.items() if isinstance(v, float)]
    assert f["seed_removed"] == "SCSI and CONFIG_WCE" and f["n_configs"] == len(parse.GUEST_CONFIGS)


def test_accel_findings_compare_only_configs_measured_under_both():
    """The accelerator sentence says 'not measured' with one accelerator, and with two compares
    each configuration's negotiated block bits across them."""
    from types import SimpleNamespace

    import pandas as pd

    def rows(accel, run, config, names):
        return [
            {
                "host_id": "h",
                "run_id": run,
                "source": "guest",
                "boot": 0,
                "device": "virtio1",
                "type": "block",
                "accel": accel,
                "config": config,
                "name": n,
            }
            for n in names
        ]

    one = pd.DataFrame(rows("tcg", "r1", "default", ["FLUSH", "VERSION_1"]))
    assert (
        "whether KVM negotiates the same bits was not measured"
        in prose.accel_findings(SimpleNamespace(bits=one))["accel_compare"]
    )
    two = pd.DataFrame(
        rows("tcg", "r1", "default", ["FLUSH", "VERSION_1"])
        + rows("kvm", "r2", "default", ["FLUSH", "VERSION_1"])
        + rows("kvm", "r2", "packed=on", ["RING_PACKED"])
        + rows("tcg", "r1", "legacy", ["FLUSH"])
        + rows("kvm", "r2", "legacy", ["SCSI"])
    )
    s = prose.accel_findings(SimpleNamespace(bits=two))["accel_compare"]
    assert s.startswith("1 of the 2 disk configurations measured under both"), s


# ---------------------------------------------------------------- key findings
# Facts of one boot, each an exact count: a copy of a committed dataset, edited, decides them
# both ways, and two runs of one build that disagree leave the host undecided.
KF_HOST, KF_RUN = "h-5ab5c186a54f", "20261124T024333Z"
KF_SRC = ROOT / "data" / "runs" / KF_HOST / "virtio_features" / KF_RUN
LONGER, RULES = key_findings.FINDINGS


def _kf_run(data: Path, run_id: str = KF_RUN, edit=None, guests: bool = True) -> Path:
    """A copy of the committed dataset KF_SRC as run_id, its sysfs rows passed through edit()
    and, with guests=False, without its guest part (as a collect without QEMU writes it)."""
    import pandas as pd

    dst = data / "runs" / KF_HOST / "virtio_features" / run_id
    shutil.copytree(KF_SRC, dst)
    man = json.loads((dst / "manifest.json").read_text())
    man["run_id"] = run_id
    s = pd.read_csv(table_path(dst, "sysfs"), dtype=str, keep_default_na=False)
    if not guests:
        s = s[s["source"] == "host"]
        for t in ("configs", "boots"):
            table_path(dst, t).unlink()
            del man["tables"][t]
        man["skipped"] = {"guests": "no QEMU"}
    s = edit(s) if edit else s
    table_path(dst, "sysfs").unlink()
    write_table(dst / "sysfs", s)
    man["tables"]["sysfs"] = len(s)
    (dst / "manifest.json").write_text(json.dumps(man))
    return dst


def _measured(data: Path, finding):
    D = V.chapter.load(data)
    (m,) = D.manifests
    return finding.outcome(finding.measure(Run(D, m)))


def _short_host_files(s):
    at = (s["source"] == "host") & s["path"].str.endswith("/features")
    s.loc[at, "value"] = s.loc[at, "value"].str[:64]
    return s


def _broken_rule(s):
    # the writethrough+config-wce=off disk (no FLUSH, no CONFIG_WCE) claims a write-back cache
    at = (s["source"] == "guest") & (s["path"] == "virtio7/block/vdh/cache_type")
    assert at.sum() == 1 and (s.loc[at, "value"] == "write through").all()
    s.loc[at, "value"] = "write back"
    return s


def test_key_findings_are_the_boot_facts_not_the_checks():
    """Two findings, each an exact count; the decoder's coverage and the CONFIG_WCE-gated
    write are checks (the page states them), not findings. The threshold is the seed's length."""
    import pandas as pd

    assert [f.key for f in V.chapter.key_findings] == ["longer", "rules"]
    ref = pd.read_csv(ROOT / "data" / "reference" / "virtio_features.csv", dtype=str)
    assert {len(f) for f in ref["features"]} == {key_findings.SEED_BITS} == {LONGER.threshold}


def test_key_findings_hold_on_the_committed_data(monkeypatch):
    monkeypatch.setenv("PERFBOOK_VERDICT_STORE", "off")
    D = V.chapter.load(None)
    for h in D.hosts:
        longer, rules = (evaluate(D, f, h) for f in (LONGER, RULES))
        assert longer.verdict == HOLDS and longer.estimate.exact, longer.evidence
        assert longer.estimate.value == 128 and "2013: 64 bits" in longer.evidence
        assert rules.verdict == HOLDS and rules.estimate.value == 0, rules.evidence
        assert "3 disks without CONFIG_WCE checked" in rules.evidence
    # the basis names the boots those disks shared (the default boots several disks in one
    # guest), not "each booted once" (#40)
    gb = analysis.quoted(D, D.blocks, "guest")
    gb = gb[gb["cache_type_consistent"].notna()]
    assert gb["boot"].nunique() < len(gb), "the committed default shares its boots"
    got = key_findings.cache_rule(Run(D, D.quoted))
    assert f"{len(gb)} guest disks without CONFIG_WCE in {gb['boot'].nunique()} boot(s)" in (
        got.estimate.basis
    )


def test_key_findings_decided_both_ways(scratch_data, tmp_path, monkeypatch):
    monkeypatch.setenv("PERFBOOK_VERDICT_STORE", "off")
    _kf_run(scratch_data)
    assert _measured(scratch_data, LONGER).verdict == HOLDS
    assert _measured(scratch_data, RULES).verdict == HOLDS
    short = tmp_path / "short"
    (short / "runs").mkdir(parents=True)
    _kf_run(short, edit=_short_host_files)
    o = _measured(short, LONGER)
    assert o.verdict == FAILS and o.estimate.value == 64, o.evidence
    broken = tmp_path / "broken"
    (broken / "runs").mkdir(parents=True)
    _kf_run(broken, edit=_broken_rule)
    o = _measured(broken, RULES)
    assert o.verdict == FAILS and o.estimate.value == 1, o.evidence


def test_key_findings_not_measured_without_the_part(scratch_data, tmp_path, monkeypatch):
    """No guest booted: the cache rule was not measured; a host without virtio devices has
    no features file of its own: its length was not measured (not a failure)."""
    monkeypatch.setenv("PERFBOOK_VERDICT_STORE", "off")
    _kf_run(scratch_data, guests=False)
    assert _measured(scratch_data, RULES) is None
    assert _measured(scratch_data, LONGER).verdict == HOLDS
    bare = tmp_path / "bare"
    (bare / "runs").mkdir(parents=True)
    _kf_run(bare, edit=lambda s: s[s["source"] == "guest"])
    assert _measured(bare, LONGER) is None
    assert _measured(bare, RULES).verdict == HOLDS
    D = V.chapter.load(bare)
    assert evaluate(D, LONGER, KF_HOST).verdict == NOT_MEASURED


def test_two_runs_that_disagree_leave_the_host_undecided(scratch_data, monkeypatch):
    """Two runs of one kernel build, one with a disk that breaks the rule: the runs are the
    replicates, so their pooled interval straddles the threshold."""
    monkeypatch.setenv("PERFBOOK_VERDICT_STORE", "off")
    _kf_run(scratch_data)
    _kf_run(scratch_data, "20261125T000000Z", edit=_broken_rule)
    D = V.chapter.load(scratch_data)
    v = evaluate(D, RULES, KF_HOST)
    assert v.verdict == UNDECIDED and "straddles" in v.why, v.evidence
    assert [o.verdict for _, o in v.runs] == [HOLDS, FAILS]
    assert evaluate(D, LONGER, KF_HOST).verdict == HOLDS
