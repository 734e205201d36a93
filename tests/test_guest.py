"""tools.guest and tools.guest_image, on their own: the initramfs writer, module closure,
DiskSpec, the KVM -> TCG fallback, a failed boot, and a Runner stopped by a signal
(outside the framework, so not part of tests/test_contract.py's matrix)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tools import guest, guest_image
from tools.errors import ParameterError

from conftest import ROOT, need_guest, owned_by, qemu_children


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
    arc = guest_image.build_cpio([("bin", guest_image.DIR | 0o755, b""), ("bin/x", guest_image.REG | 0o755, b"hello"),
                            ("bin/sh", guest_image.LNK | 0o777, b"x"), ("odd", guest_image.REG | 0o644, b"abc")])
    got = _parse_newc(arc)
    assert got["bin/x"] == (guest_image.REG | 0o755, b"hello")
    assert got["bin/sh"] == (guest_image.LNK | 0o777, b"x") and got["odd"][1] == b"abc"
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
    order = guest_image.module_closure(["virtio_pci", "virtio_blk", "builtin_thing"], index)
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

def test_failed_boot_cleans_up():
    need_guest()
    bad = guest.GuestConfig(extra_args=["-device", "no-such-device-perfbook"])
    with pytest.raises(guest.PerfbookError, match="no-such-device-perfbook|stopped before"):
        guest.run_script("true", bad, accel="tcg", timeout=60)
    assert not qemu_children(os.getpid())
    assert not owned_by(os.getpid())

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_qemu_and_removes_scratch(tmp_path, sig):
    need_guest()
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
            if qemu_children(p.pid):
                break
            time.sleep(0.1)
        assert qemu_children(p.pid), "QEMU did not start"
        time.sleep(1)
        p.send_signal(sig)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode != 0
    assert not qemu_children(p.pid)
    assert not scratch.exists()
    assert not owned_by(p.pid)
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

def test_guest_files_validation(tmp_path):
    f = tmp_path / "tool"
    f.write_bytes(b"#!/bin/sh\n")
    guest.GuestConfig(files={"bin/tool": f, "etc/x.conf": b"a=1"}).validate()
    for bad in ({"/abs": b""}, {"a/../b": b""}, {"bin/missing": tmp_path / "nope"}):
        with pytest.raises(ParameterError):
            guest.GuestConfig(files=bad).validate()
