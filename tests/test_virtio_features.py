"""virtio_features: the decoder (unit), this machine's snapshot (fixture), the
guest runner (unit + live), and a quick collect run (live, skipped with a reason)."""
from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tools import guest
from tools import virtio_features as vf
from tools.errors import ParameterError
from tools.scratch import live_dirs

from conftest import ROOT

FIX = ROOT / "tests" / "fixtures" / "virtio_features" / "host_sysfs.json"
# the seed's two strings (000_7b0d737d6588117b.txt, 2013-03-09)
SEED_LOCAL = "0010101101110000000000000000110000000000000000000000000000000000"
SEED_VPS = "0010101001100000000000000000110000000000000000000000000000000000"


# ---------------------------------------------------------------- decoder
def test_seed_local_kvm_string():
    assert vf.names(SEED_LOCAL, 2) == ["SEG_MAX", "GEOMETRY", "BLK_SIZE", "SCSI", "FLUSH",
                                       "TOPOLOGY", "CONFIG_WCE", "INDIRECT_DESC", "EVENT_IDX"]
    # the seed's "10th from the left" is bit 9, today's FLUSH, the 3.x WCE
    b9 = [b for b in vf.decode(SEED_LOCAL, "block") if b.bit == 9][0]
    assert (b9.name, b9.old_name, b9.kind) == ("FLUSH", "WCE", "device")
    # CONFIG_WCE negotiated: cache_type comes from the config byte, not from the bits
    assert vf.cache_type_from_features(SEED_LOCAL) is None


def test_seed_vps_string_and_difference():
    assert vf.names(SEED_VPS, "0x0002") == ["SEG_MAX", "GEOMETRY", "BLK_SIZE", "FLUSH",
                                            "TOPOLOGY", "INDIRECT_DESC", "EVENT_IDX"]
    assert vf.cache_type_from_features(SEED_VPS) == "write back"
    assert vf.diff(SEED_LOCAL, SEED_VPS, "block") == {"added": [], "removed": ["SCSI", "CONFIG_WCE"]}


def test_reference_csv_holds_the_seed_strings():
    import pandas as pd
    ref = pd.read_csv(ROOT / "data" / "reference" / "virtio_features.csv", dtype=str)
    assert set(ref["features"]) == {SEED_LOCAL, SEED_VPS}
    for col in ("seed_file", "article_title", "date", "environment", "note"):
        assert ref[col].notna().all(), col
    assert (ref["seed_file"] == "000_7b0d737d6588117b.txt").all()


def test_this_machine_fixture_decodes():
    dump = json.loads(FIX.read_text())["dump"]
    devs = {d["device"]: d for d in vf.devices_from_dump(dump)}
    assert {d["type"] for d in devs.values()} == {"balloon", "block", "net", "vsock", "rng"}
    assert all(d["n_chars"] == 128 for d in devs.values())
    assert all(d["status_flags"] == "ACKNOWLEDGE|DRIVER|DRIVER_OK|FEATURES_OK" for d in devs.values())
    blk = devs["virtio1"]
    assert blk["driver"] == "virtio_blk"
    assert "FLUSH" in blk["names"].split() and "CONFIG_WCE" not in blk["names"].split()
    assert "VERSION_1" in blk["names"].split()
    # the balloon offers bit 7, which no table of ours names: it must be reported, not dropped
    assert devs["virtio0"]["unknown_bits"] == "7"
    assert "UNKNOWN_7" in devs["virtio0"]["names"].split()
    (b,) = vf.blocks_from_dump(dump)
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
    assert got[1].old_name == "IDENTIFY"          # an old name, still flagged unknown today
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
    rows = vf.devices_from_dump({"virtio0/device": "0x0002", "virtio0/features": "01x",
                                 "virtio1/device": "0x0004", "virtio1/features": "0" * 32 + "1"})
    assert rows[0]["decode_error"] and rows[1]["names"] == "VERSION_1"


def test_status_and_device_names():
    assert vf.decode_status("0x0000000f") == ["ACKNOWLEDGE", "DRIVER", "DRIVER_OK", "FEATURES_OK"]
    assert vf.decode_status(0x83) == ["ACKNOWLEDGE", "DRIVER", "FAILED"]
    assert vf.decode_status(0x110) == ["0x110"]
    for i, n in {1: "net", 2: "block", 3: "console", 4: "rng", 5: "balloon", 8: "scsi", 9: "9p",
                 16: "gpu", 19: "vsock", 26: "fs"}.items():
        assert vf.device_type(i) == n


HEADERS = Path("/usr/include/linux")


def _header_defines():
    out = {}
    for h in HEADERS.glob("virtio_*.h"):
        for m in re.finditer(r"#define\s+(VIRTIO_[A-Z0-9_]*F_[A-Z0-9_]+|VIRTIO_9P_MOUNT_TAG)\s+(\d+)\b",
                             h.read_text()):
            out[m.group(1)] = int(m.group(2))
    return out


def test_table_matches_installed_uapi_headers():
    if not (HEADERS / "virtio_config.h").is_file():
        pytest.skip("no /usr/include/linux/virtio_*.h (apt-get install linux-libc-dev) to check the table against")
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
    assert vf.params("quick")["config_list"][0] == "default"
    assert len(vf.params("default")["config_list"]) == len(vf.GUEST_CONFIGS)
    for bad in ({"configs": "nope"}, {"accel": "xen"}, {"kvm_boot_timeout": -1},
                {"boot_timeout": "soon"}, {"guest": "yes"}, {"colour": 1}):
        with pytest.raises(ParameterError):
            vf.params("quick", **bad)
    with pytest.raises(ParameterError):
        vf.params("huge")


def test_bad_parameter_writes_no_dataset(scratch_data):
    with pytest.raises(ParameterError):
        vf.collect(scratch_data, "quick", configs="default,bogus")
    assert not any((scratch_data / "runs").iterdir())


def test_boot_plan_and_disk_labels_unique():
    plan = vf.boot_plan(vf.params("default"))
    assert [c for c, _ in plan] == [1, 2]
    for _, cfgs in plan:
        labels = [vf._disk(c).label for c in cfgs]
        assert len(set(labels)) == len(labels)
    sep = vf.boot_plan(vf.params("default", separate_boots=True))
    assert len(sep) == len(vf.GUEST_CONFIGS)


# ---------------------------------------------------------------- guest runner (unit)
def _parse_newc(data: bytes) -> dict[str, tuple[int, bytes]]:
    out, off = {}, 0
    while True:
        hdr = data[off:off + 110]
        assert hdr[:6] == b"070701"
        f = [int(hdr[6 + 8 * i:14 + 8 * i], 16) for i in range(13)]
        mode, size, nlen = f[1], f[6], f[11]
        name = data[off + 110:off + 110 + nlen - 1].decode()
        off = off + 110 + nlen
        off += (4 - off % 4) % 4
        body = data[off:off + size]
        off += size
        off += (4 - off % 4) % 4
        if name == "TRAILER!!!":
            return out
        out[name] = (mode, body)


def test_cpio_newc_roundtrip():
    arc = guest.build_cpio([("bin", guest.DIR | 0o755, b""), ("bin/x", guest.REG | 0o755, b"hello"),
                            ("bin/sh", guest.LNK | 0o777, b"x"), ("odd", guest.REG | 0o644, b"abc")])
    got = _parse_newc(arc)
    assert got["bin/x"] == (guest.REG | 0o755, b"hello")
    assert got["bin/sh"] == (guest.LNK | 0o777, b"x") and got["odd"][1] == b"abc"
    assert len(arc) % 4 == 0


def test_module_closure_orders_dependencies(tmp_path):
    def ko(name, deps):
        p = tmp_path / f"{name}.ko"
        p.write_bytes(b"\x7fELF junk\x00license=GPL\x00depends=" + ",".join(deps).encode() + b"\x00name=" +
                      name.encode() + b"\x00")
        return p
    index = {"virtio_blk": ko("virtio_blk", ["virtio", "virtio_ring"]),
             "virtio_pci": ko("virtio_pci", ["virtio_pci_modern_dev", "virtio", "virtio_ring"]),
             "virtio_pci_modern_dev": ko("virtio_pci_modern_dev", []),
             "virtio": ko("virtio", []), "virtio_ring": ko("virtio_ring", ["virtio"])}
    order = guest.module_closure(["virtio_pci", "virtio_blk", "builtin_thing"], index)
    assert order.index("virtio") < order.index("virtio_ring") < order.index("virtio_pci")
    assert order[-1] == "virtio_blk" and "builtin_thing" not in order
    assert len(order) == len(set(order)) == 5


def test_disk_spec_validation_and_cmdline(tmp_path):
    with pytest.raises(ParameterError):
        guest.DiskSpec(label="bad label").validate()
    with pytest.raises(ParameterError):
        guest.DiskSpec(cache="fast").validate()
    with pytest.raises(ParameterError):
        guest.DiskSpec(aio="native", cache="writeback").validate()
    with pytest.raises(ParameterError):
        guest.GuestConfig(disks=[guest.DiskSpec(label="a"), guest.DiskSpec(label="a")]).validate()
    with pytest.raises(ParameterError):
        guest.Runner(accel="hvf")
    d = guest.DiskSpec(label="x", cache="none", write_cache=False, config_wce=False, num_queues=2,
                       packed=True, event_idx=False, extra={"queue-size": 128})
    assert d.describe() == ("cache=none write-cache=off config-wce=off packed=on event_idx=off "
                            "num-queues=2 queue-size=128")
    r = guest.Runner(accel="tcg")
    r.artefacts = {"dir": str(tmp_path)}
    cmd = r.cmdline(guest.GuestConfig(disks=[d], rng=True), "tcg", tmp_path, tmp_path / "i")
    dev = [a for a in cmd if a.startswith("virtio-blk-pci")][0]
    assert "write-cache=off" in dev and "config-wce=off" in dev and "serial=x" in dev
    assert "-no-reboot" in cmd and cmd[cmd.index("-accel") + 1] == "tcg" and "virtio-rng-pci" in cmd


def test_dump_script_matches_python_dump_on_this_host():
    if not vf.SYSFS_VIRTIO.is_dir() or not any(vf.SYSFS_VIRTIO.iterdir()):
        pytest.skip("this host has no virtio devices in /sys/bus/virtio/devices")
    r = subprocess.run(["sh", "-c", vf.dump_script()], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    sh, py = vf.parse_dump(r.stdout), vf.dump_sysfs()
    assert sh == py


# ---------------------------------------------------------------- live: guests
def _need_guest():
    reasons = guest.preflight()
    if reasons:
        pytest.skip(f"no tiny guest here: {reasons[0]}")
    try:
        guest.ensure_artefacts()
    except guest.MissingPrerequisite as e:
        pytest.skip(f"no guest kernel: {e}")


def _qemu_children(pid: int) -> list[str]:
    r = subprocess.run(["pgrep", "-P", str(pid), "-f", guest.QEMU], capture_output=True, text=True)
    return r.stdout.split()


def test_quick_collect_live(scratch_data):
    _need_guest()
    out = vf.collect(scratch_data, "quick")
    man = json.loads((out / "manifest.json").read_text())
    assert man["chapter"] == "virtio_features" and "guests" not in man["skipped"]
    import pandas as pd
    sysfs, cfg = pd.read_csv(out / "sysfs.csv"), pd.read_csv(out / "configs.csv")
    boots = pd.read_csv(out / "boots.csv")
    assert set(boots["accel"]) <= {"kvm", "tcg"} and boots["accel_note"].notna().all()
    for df in (sysfs, cfg, boots):
        df["host_id"], df["run_id"] = "h", "r"
    devs, bits, blocks = vf.decoded_tables(sysfs, cfg, boots)
    g = blocks[blocks["source"] == "guest"].set_index("config")
    assert set(g.index) == set(vf.params("quick")["config_list"])
    # what QEMU offers changes what the guest negotiates
    assert g.loc["writethrough+config-wce=off", "cache_type"] == "write through"
    assert not g.loc["writethrough+config-wce=off", "config_wce"]
    assert g.loc["default", "config_wce"] and g.loc["default", "cache_type"] == "write back"
    gb = bits[bits["source"] == "guest"]
    assert "RING_PACKED" in set(gb[gb["config"] == "packed=on"]["name"])
    assert "RING_PACKED" not in set(gb[gb["config"] == "default"]["name"])
    legacy = set(gb[gb["config"] == "legacy+scsi=on"]["name"])
    assert "VERSION_1" not in legacy and "SCSI" not in legacy  # offered, but 6.x drivers never take it
    # a one-shot readout: nothing is repeated until tight, so there is no repetition table
    assert "repetition" not in man["tables"]
    assert not _qemu_children(os.getpid())
    assert not _owned_by(os.getpid())


def _owned_by(pid: int) -> list[Path]:
    out = []
    for d in live_dirs("guest"):
        try:
            if int((d / "owner").read_text().split()[0]) == pid:
                out.append(d)
        except (OSError, ValueError, IndexError):
            pass
    return out


def test_failed_boot_cleans_up():
    _need_guest()
    bad = guest.GuestConfig(extra_args=["-device", "no-such-device-perfbook"])
    with pytest.raises(guest.PerfbookError, match="no-such-device-perfbook|stopped before"):
        guest.run_script("true", bad, accel="tcg", timeout=60)
    assert not _qemu_children(os.getpid())
    assert not _owned_by(os.getpid())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_qemu_and_removes_scratch(tmp_path, sig):
    _need_guest()
    prog = textwrap.dedent("""
        import sys
        from tools import guest
        with guest.Runner(accel="tcg", timeout=120, progress=lambda s: print(s, flush=True)) as r:
            print("SCRATCH", r.scratch, flush=True)
            r.run("sleep 100", guest.GuestConfig())
    """)
    p = subprocess.Popen([sys.executable, "-c", prog], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    scratch = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            if line.startswith("SCRATCH"):
                scratch = Path(line.split()[1])
            if "booting" in line:
                break
        assert scratch is not None and scratch.is_dir()
        for _ in range(100):
            if _qemu_children(p.pid):
                break
            time.sleep(0.1)
        assert _qemu_children(p.pid), "QEMU did not start"
        time.sleep(1)
        p.send_signal(sig)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode != 0
    assert not _qemu_children(p.pid)
    assert not scratch.exists()
    assert not _owned_by(p.pid)
    assert not subprocess.run(["pgrep", "-f", str(scratch)], capture_output=True).stdout


def test_auto_accel_falls_back_and_labels(monkeypatch, tmp_path):
    calls = []

    def fake_boot(self, script, cfg, accel, note, boot_timeout):
        calls.append((accel, boot_timeout))
        if accel == "kvm":
            raise guest.BootTimeout("KVM guest did not reach init within 3 s")
        return guest.GuestResult("ok\n", 0, accel, note, 1.0, 2.0, "k", "q", [], "")
    monkeypatch.setattr(guest.Runner, "_boot", fake_boot)
    monkeypatch.setattr(guest, "kvm_usable", lambda: (True, "/dev/kvm is present"))
    r = guest.Runner(accel="auto", kvm_boot_timeout=3)
    r.scratch, r.artefacts = tmp_path, {"dir": str(tmp_path)}
    res = r.run("true")
    assert (res.accel, res.output) == ("tcg", "ok\n")
    assert "TCG fallback" in res.accel_note and "3 s" in res.accel_note
    assert calls == [("kvm", 3.0), ("tcg", None)]
    res2 = r.run("true")  # the decision is kept: no second KVM attempt
    assert calls[-1] == ("tcg", None) and len(calls) == 3 and res2.accel_note == res.accel_note
    monkeypatch.setattr(guest, "kvm_usable", lambda: (False, "/dev/kvm is missing"))
    r2 = guest.Runner(accel="auto")
    r2.scratch, r2.artefacts = tmp_path, {"dir": str(tmp_path)}
    assert r2.run("true").accel_note == "TCG fallback: /dev/kvm is missing"


def test_no_qemu_skips_the_guest_part(monkeypatch, scratch_data):
    if not vf.SYSFS_VIRTIO.is_dir() or not any(vf.SYSFS_VIRTIO.iterdir()):
        pytest.skip("this host has no virtio devices: nothing to snapshot without QEMU")
    why = "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)"
    monkeypatch.setattr(guest, "preflight", lambda: [why])
    out = vf.collect(scratch_data, "quick")
    man = json.loads((out / "manifest.json").read_text())
    assert man["skipped"] == {"guests": why}
    assert set(man["tables"]) == {"sysfs"}
    import pandas as pd
    s = pd.read_csv(out / "sysfs.csv")
    assert set(s["source"]) == {"host"} and (s[s.path.str.endswith("/serial")]["value"] == "(redacted)").all()


def test_guest_files_validation(tmp_path):
    f = tmp_path / "tool"
    f.write_bytes(b"#!/bin/sh\n")
    guest.GuestConfig(files={"bin/tool": f, "etc/x.conf": b"a=1"}).validate()
    for bad in ({"/abs": b""}, {"a/../b": b""}, {"bin/missing": tmp_path / "nope"}):
        with pytest.raises(ParameterError):
            guest.GuestConfig(files=bad).validate()


def test_unfetchable_guest_kernel_skips_the_guest_part(monkeypatch, scratch_data):
    if not vf.SYSFS_VIRTIO.is_dir() or not any(vf.SYSFS_VIRTIO.iterdir()):
        pytest.skip("this host has no virtio devices: nothing to snapshot without a guest")
    why = "apt-get download linux-image-x failed: no network"

    def no_kernel(*a, **k):
        raise guest.MissingPrerequisite(why)
    monkeypatch.setattr(guest, "preflight", lambda: [])
    monkeypatch.setattr(guest, "ensure_artefacts", no_kernel)
    out = vf.collect(scratch_data, "quick")
    man = json.loads((out / "manifest.json").read_text())
    assert man["skipped"] == {"guests": why} and set(man["tables"]) == {"sysfs"}
    assert not _owned_by(os.getpid())


def test_host_bit_diff_is_a_set_difference_per_device_type():
    """Two hosts are compared bit by bit (exact readouts), from each host's newest dataset."""
    import pandas as pd
    ms = [{"host": {"host_id": h}, "run_id": r} for h, r in
          (("h-a", "20260101T000000Z"), ("h-b", "20260101T000000Z"), ("h-b", "20260202T000000Z"))]
    rows = [("h-a", "20260101T000000Z", "block", "FLUSH"), ("h-a", "20260101T000000Z", "block", "VERSION_1"),
            ("h-a", "20260101T000000Z", "net", "CSUM"),
            ("h-b", "20260101T000000Z", "block", "SCSI"),                      # older run: ignored
            ("h-b", "20260202T000000Z", "block", "VERSION_1"), ("h-b", "20260202T000000Z", "block", "MQ")]
    bits = pd.DataFrame([{"host_id": h, "run_id": r, "source": "host", "type": t, "name": n}
                         for h, r, t, n in rows])
    d = vf.host_bit_diff(bits, ms).set_index("type")
    assert d.loc["block", "only on this host"] == "MQ" and d.loc["block", "only on the baseline"] == "FLUSH"
    assert d.loc["net", "only on this host"] == "(no such device)"
    assert (d["baseline"] == "h-a").all() and (d["host_id"] == "h-b").all()
    assert vf.host_bit_diff(bits[bits.host_id == "h-a"], ms[:1]).empty
