"""perfbook.qemu.guest and perfbook.qemu.guest_image, on their own: the initramfs writer, module closure,
DiskSpec, the KVM -> TCG fallback, a failed boot, and a Runner stopped by a signal
(outside the framework, so not part of tests/test_contract.py's matrix)."""

from __future__ import annotations

import gzip
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import ROOT, need_guest, owned_by, qemu_children
from perfbook.core.errors import ParameterError
from perfbook.qemu import guest, guest_image


def _parse_newc(data: bytes) -> dict[str, tuple[int, bytes]]:
    out, off = {}, 0
    while True:
        hdr = data[off : off + 110]
        assert hdr[:6] == b"070701"
        f = [int(hdr[6 + 8 * i : 14 + 8 * i], 16) for i in range(13)]
        mode, size, nlen = f[1], f[6], f[11]
        name = data[off + 110 : off + 110 + nlen - 1].decode()
        off = off + 110 + nlen
        off += (4 - off % 4) % 4
        body = data[off : off + size]
        off += size
        off += (4 - off % 4) % 4
        if name == "TRAILER!!!":
            return out
        out[name] = (mode, body)


def test_cpio_newc_roundtrip():
    arc = guest_image.build_cpio(
        [
            ("bin", guest_image.DIR | 0o755, b""),
            ("bin/x", guest_image.REG | 0o755, b"hello"),
            ("bin/sh", guest_image.LNK | 0o777, b"x"),
            ("odd", guest_image.REG | 0o644, b"abc"),
        ]
    )
    got = _parse_newc(arc)
    assert got["bin/x"] == (guest_image.REG | 0o755, b"hello")
    assert got["bin/sh"] == (guest_image.LNK | 0o777, b"x") and got["odd"][1] == b"abc"
    assert len(arc) % 4 == 0


def test_module_closure_orders_dependencies(tmp_path):
    def ko(name, deps):
        p = tmp_path / f"{name}.ko"
        p.write_bytes(
            b"\x7fELF junk\x00license=GPL\x00depends="
            + ",".join(deps).encode()
            + b"\x00name="
            + name.encode()
            + b"\x00"
        )
        return p

    index = {
        "virtio_blk": ko("virtio_blk", ["virtio", "virtio_ring"]),
        "virtio_pci": ko("virtio_pci", ["virtio_pci_modern_dev", "virtio", "virtio_ring"]),
        "virtio_pci_modern_dev": ko("virtio_pci_modern_dev", []),
        "virtio": ko("virtio", []),
        "virtio_ring": ko("virtio_ring", ["virtio"]),
    }
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
    d = guest.DiskSpec(
        label="x",
        cache="none",
        write_cache=False,
        config_wce=False,
        num_queues=2,
        packed=True,
        event_idx=False,
        extra={"queue-size": 128},
    )
    assert d.describe() == (
        "cache=none write-cache=off config-wce=off packed=on event_idx=off "
        "num-queues=2 queue-size=128"
    )
    r = guest.Runner(accel="tcg")
    r.artefacts = {"dir": str(tmp_path)}
    cmd = r.cmdline(guest.GuestConfig(disks=[d], rng=True), "tcg", tmp_path, tmp_path / "i")
    dev = [a for a in cmd if a.startswith("virtio-blk-pci")][0]
    assert "write-cache=off" in dev and "config-wce=off" in dev and "serial=x" in dev
    assert "-no-reboot" in cmd and cmd[cmd.index("-accel") + 1] == "tcg" and "virtio-rng-pci" in cmd
    # properties for TCG only: on the TCG command line (overriding), not on the KVM one
    t = guest.DiskSpec(label="t", cache="none", event_idx=True, tcg_extra={"event_idx": "off"})
    devs = {
        a: [
            x
            for x in r.cmdline(guest.GuestConfig(disks=[t]), a, tmp_path, tmp_path / "i")
            if x.startswith("virtio-blk-pci")
        ][0]
        for a in ("tcg", "kvm")
    }
    assert devs["tcg"].endswith(",event_idx=off") and devs["tcg"].count("event_idx") == 1
    assert devs["kvm"].endswith(",event_idx=on")
    with pytest.raises(ParameterError, match="bad device property"):
        guest.DiskSpec(tcg_extra={"Bad Name": 1}).validate()


def test_failed_boot_cleans_up():
    need_guest()
    bad = guest.GuestConfig(extra_args=["-device", "no-such-device-perfbook"])
    with pytest.raises(guest.PerfbookError, match="no-such-device-perfbook|stopped before"):
        guest.run_script("true", bad, accel="tcg", timeout=60)
    assert not qemu_children(os.getpid())
    assert not owned_by(os.getpid())


def test_a_stalled_guest_is_stopped_and_says_where_it_stood():
    """A script silent for stall_seconds stops the guest (GuestStalled, which a chapter may boot
    again); the one line is read before QEMU is stopped: the script's last line and QEMU's threads
    by name, not QEMU's own "terminating on signal" line."""
    need_guest()
    cfg = guest.GuestConfig(thread_names=True, stall_seconds=5)
    t0 = time.monotonic()
    with pytest.raises(guest.GuestStalled) as e:
        guest.run_script("echo step-one; sleep 600", cfg, accel="tcg", timeout=300)
    msg = str(e.value)
    assert time.monotonic() - t0 < 290, "the stall, not the boot's timeout, stopped it"
    assert "printed nothing for 5 s" in msg and "\n" not in msg and "signal" not in msg, msg
    assert "the script's last line: 'step-one'; the console's: " in msg, msg
    assert re.search(r"QEMU's threads \(state, CPU\): .*CPU 0/TCG [RSD] \d+\.\d s", msg), msg
    assert not qemu_children(os.getpid())
    assert not owned_by(os.getpid())
    with pytest.raises(ParameterError, match="stall_seconds"):
        guest.GuestConfig(stall_seconds=0).validate()


def test_stall_report_reads_proc_and_the_last_lines():
    pid = int(next((FIX / "proc").iterdir()).name)
    got = guest.stall_report(
        "@@PERFBOOK-BEGIN@@\r\n@@JOB-IO j1@@\r\n\r\n", "", pid, proc=FIX / "proc"
    )
    assert got.startswith(
        "the script's last line: '@@JOB-IO j1@@'; the console's: nothing; QEMU's threads"
    )
    assert re.search(r"CPU 0/TCG [A-Z] \d+\.\d s", got) and "IO io0" in got, got
    assert guest.stall_report("", "x", 2**22 + 7, proc=FIX / "proc").endswith("(state, CPU): gone")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_qemu_and_removes_scratch(tmp_path, sig):
    need_guest()
    prog = textwrap.dedent("""
        import sys
        from perfbook.qemu import guest
        with guest.Runner(accel="tcg", timeout=120, progress=lambda s: print(s, flush=True)) as r:
            print("SCRATCH", r.scratch, flush=True)
            r.run("sleep 100", guest.GuestConfig())
    """)
    p = subprocess.Popen(
        [sys.executable, "-c", prog],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
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
    monkeypatch.setattr(guest, "_KVM_TIMED_OUT", {})
    r = guest.Runner(accel="auto", kvm_boot_timeout=3)
    r.scratch, r.artefacts = tmp_path, {"dir": str(tmp_path)}
    res = r.run("true")
    assert (res.accel, res.output) == ("tcg", "ok\n")
    assert "TCG fallback" in res.accel_note and "3 s" in res.accel_note
    assert calls == [("kvm", 3.0), ("tcg", None)]
    res2 = r.run("true")  # the decision is kept: no second KVM attempt
    assert calls[-1] == ("tcg", None) and len(calls) == 3 and res2.accel_note == res.accel_note
    # a later Runner of this process (the next chapter of one measure) does not wait again...
    r3 = guest.Runner(accel="auto", kvm_boot_timeout=3)
    r3.scratch, r3.artefacts = tmp_path, {"dir": str(tmp_path)}
    res3 = r3.run("true")
    assert calls[-1] == ("tcg", None) and len(calls) == 4 and res3.accel == "tcg"
    assert "did not reach init within 3 s" in res3.accel_note and "not retried" in res3.accel_note
    # ... unless it gives KVM longer than the boot that failed
    r4 = guest.Runner(accel="auto", kvm_boot_timeout=10)
    r4.scratch, r4.artefacts = tmp_path, {"dir": str(tmp_path)}
    r4.run("true")
    assert calls[-2:] == [("kvm", 10.0), ("tcg", None)]
    monkeypatch.setattr(guest, "kvm_usable", lambda: (False, "/dev/kvm is missing"))
    monkeypatch.setattr(guest, "_KVM_SKIP_TOLD", set())
    said = []
    r2 = guest.Runner(accel="auto", progress=said.append)
    r2.scratch, r2.artefacts = tmp_path, {"dir": str(tmp_path)}
    assert r2.run("true").accel_note == "TCG fallback: /dev/kvm is missing"
    # the progress says once why KVM was not tried (a PVM host's reader sees why TCG)
    r5 = guest.Runner(accel="auto", progress=said.append)
    r5.scratch, r5.artefacts = tmp_path, {"dir": str(tmp_path)}
    r5.run("true")
    assert [s for s in said if s.startswith("KVM not tried")] == [
        "KVM not tried: /dev/kvm is missing; the guests run under TCG"
    ]


def test_kvm_usable_knows_pvm_cannot_boot_our_kernel(monkeypatch, tmp_path):
    """PVM (kvm_pvm without kvm_intel/kvm_amd) boots only PVM-enabled guests: no KVM attempt."""
    from perfbook.data import hostinfo

    for m in ("kvm", "kvm_pvm"):
        (tmp_path / m).mkdir()
    assert hostinfo.kvm_modules(tmp_path) == ["kvm", "kvm_pvm"]
    monkeypatch.setattr(guest.os.path, "exists", lambda p: p == "/dev/kvm" or os.path.lexists(p))
    monkeypatch.setattr(guest.os, "access", lambda p, mode: True)
    ok, why = guest.kvm_usable(["kvm", "kvm_pvm"])
    assert not ok and "kvm_pvm" in why and "PVM-enabled" in why
    assert guest.kvm_usable(["kvm", "kvm_intel"]) == (True, "/dev/kvm is present")
    assert guest.kvm_usable(["kvm", "kvm_amd", "kvm_pvm"])[0]  # VMX/SVM hardware KVM is there too


def test_guest_files_validation(tmp_path):
    f = tmp_path / "tool"
    f.write_bytes(b"#!/bin/sh\n")
    guest.GuestConfig(files={"bin/tool": f, "etc/x.conf": b"a=1"}).validate()
    for bad in ({"/abs": b""}, {"a/../b": b""}, {"bin/missing": tmp_path / "nope"}):
        with pytest.raises(ParameterError):
            guest.GuestConfig(files=bad).validate()


# -- iothreads, QMP, thread names, streamed lines, host programs in the guest ----------------
FIX = ROOT / "tests" / "fixtures" / "virtio_blk_iothread"


def test_iothread_qmp_and_thread_names_on_the_command_line(tmp_path):
    d = guest.DiskSpec(label="x", cache="none", aio="native", iothread="io0", num_queues=1)
    cfg = guest.GuestConfig(disks=[d], iothreads=["io0"], thread_names=True, qmp=True)
    cfg.validate()
    r = guest.Runner(accel="tcg")
    r.artefacts = {"dir": str(tmp_path)}
    cmd = r.cmdline(cfg, "tcg", tmp_path, tmp_path / "i")
    assert cmd[cmd.index("-object") + 1] == "iothread,id=io0"
    assert cmd[cmd.index("-name") + 1] == "perfbook,debug-threads=on"
    assert cmd[cmd.index("-qmp") + 1] == f"unix:{tmp_path / 'qmp.sock'},server=on,wait=off"
    dev = [a for a in cmd if a.startswith("virtio-blk-pci")][0]
    assert dev.endswith(",iothread=io0,num-queues=1")
    assert d.describe() == "cache=none aio=native iothread=io0 num-queues=1"
    plain = r.cmdline(guest.GuestConfig(), "tcg", tmp_path, tmp_path / "i")
    assert not {"-object", "-name", "-qmp"} & set(plain)
    with pytest.raises(ParameterError, match="not in iothreads"):
        guest.GuestConfig(disks=[guest.DiskSpec(iothread="io1")], iothreads=["io0"]).validate()
    with pytest.raises(ParameterError, match="iothread id"):
        guest.GuestConfig(iothreads=["0bad id"]).validate()


def test_task_stat_parsing_and_thread_classes():
    """Real /proc lines of a process whose threads were named as QEMU names its own."""
    pid = next((FIX / "proc").iterdir()).name
    line = (FIX / "proc" / pid / "task").glob("*/stat")
    comms = {guest.parse_task_stat(p.read_text())[0] for p in line}
    assert comms == {"python", "CPU 0/TCG", "IO io0", "worker", "call_rcu"}
    assert guest.parse_task_stat("7 (a) b) c) R 1 1 1 0 -1 0 0 0 0 0 5 6 0 0")[0] == "a) b) c"
    assert guest.parse_task_stat("7 (x) R 1 1 1 0 -1 0 0 0 0 0 5 6 0 0")[1:] == (5, 6)
    assert [
        guest.thread_class(c)
        for c in (
            "CPU 1/KVM",
            "ALL CPUs/TCG",
            "IO io0",
            "IO mon_iothread",
            "worker",
            "call_rcu",
            "qemu-system-x86",
        )
    ] == ["vcpu", "vcpu", "iothread", "monitor", "worker", "other", "other"]
    assert guest.thread_class("qemu-system-x86", 5, 5) == "main"
    snap = guest.thread_times(int(pid), proc=FIX / "proc")
    assert len(snap["threads"]) == 5 and all(
        u >= 0 and s >= 0 for _, u, s in snap["threads"].values()
    )


def test_thread_delta_counts_new_and_exited_threads():
    before = {
        "process": (1.0, 0.5),
        "threads": {
            10: ("qemu-system-x86", 0.8, 0.4),
            11: ("CPU 0/TCG", 0.1, 0.0),
            12: ("worker", 0.1, 0.1),
        },
    }
    after = {
        "process": (3.0, 1.5),
        "threads": {
            10: ("qemu-system-x86", 1.0, 0.6),
            11: ("CPU 0/TCG", 1.1, 0.1),
            13: ("IO io0", 0.3, 0.2),
        },
    }
    d = guest.thread_delta(before, after, pid=10)
    assert d["main"] == pytest.approx({"threads": 1, "user_s": 0.2, "sys_s": 0.2})
    assert d["vcpu"] == pytest.approx({"threads": 1, "user_s": 1.0, "sys_s": 0.1})
    assert d["iothread"] == pytest.approx({"threads": 1, "user_s": 0.3, "sys_s": 0.2})
    # worker 12 ended: the process's 2.0 + 1.0 s less the live threads' 1.5 + 0.5 s
    assert d["exited"] == pytest.approx({"threads": 0, "user_s": 0.5, "sys_s": 0.5})
    assert d["worker"]["threads"] == 0


def test_thread_times_of_live_named_threads():
    """This process's own threads, named with prctl as QEMU names its threads."""
    import ctypes
    import threading

    libc = ctypes.CDLL(None)
    go, stop = threading.Barrier(3), threading.Event()

    def body(name):
        libc.prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME
        go.wait()
        stop.wait()

    ts = [threading.Thread(target=body, args=(n,)) for n in ("CPU 0/TCG", "IO io0")]
    for t in ts:
        t.start()
    go.wait()
    try:
        snap = guest.thread_times(os.getpid())
    finally:
        stop.set()
        for t in ts:
            t.join()
    classes = [
        guest.thread_class(c, tid, os.getpid()) for tid, (c, _, _) in snap["threads"].items()
    ]
    assert {"main", "vcpu", "iothread"} <= set(classes)


LDD = """\tlinux-vdso.so.1 (0x00007ffd2b3f2000)
\tlibaio.so.1 => /lib/x86_64-linux-gnu/libaio.so.1 (0x00007f5c8a3e5000)
\tlibceph-common.so.2 => /usr/lib/x86_64-linux-gnu/ceph/libceph-common.so.2 (0x00007fda0c800000)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f5c8a204000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f5c8a40f000)
"""


def test_parse_ldd_and_bundle(tmp_path):
    from perfbook.core.errors import MissingPrerequisite

    got = guest_image.parse_ldd(LDD)
    assert got == [
        ("libaio.so.1", "/lib/x86_64-linux-gnu/libaio.so.1"),
        ("libceph-common.so.2", "/usr/lib/x86_64-linux-gnu/ceph/libceph-common.so.2"),
        ("libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"),
        ("ld.so", "/lib64/ld-linux-x86-64.so.2"),
    ]
    assert guest_image.parse_ldd("\tnot a dynamic executable\n") == []
    with pytest.raises(MissingPrerequisite, match="libfoo.so.3"):
        guest_image.parse_ldd("\tlibfoo.so.3 => not found\n", "fio")
    with pytest.raises(MissingPrerequisite, match="missing"):
        guest_image.binary_bundle({"x": tmp_path / "nope"})
    b = guest_image.binary_bundle({"python3": Path(sys.executable).resolve()})
    assert b["bin/python3"].startswith(
        b"#!/bin/sh\nexec /perfbook/lib/ld.so --library-path /perfbook/lib "
    )
    assert Path(b["perfbook/lib/ld.so"]).is_file() and "perfbook/lib/libc.so.6" in b
    guest.GuestConfig(files={**b, "bin/bonnie++": b"x"}).validate()  # '+' in names


def _unpack_like_linux(data: bytes) -> dict[str, bytes]:
    """The kernel's initramfs rule (init/initramfs.c unpack_to_rootfs): concatenated archives,
    each gzip'd or plain; zero bytes between them are skipped, and a plain one must start at a
    multiple of 4 bytes."""
    import zlib

    files, off = {}, 0
    while off < len(data):
        if data[off] == 0:
            off += 1
            continue
        plain = data[off : off + 6] == b"070701"
        if plain:
            assert off % 4 == 0, f"plain cpio at offset {off}: broken padding"
            arc = data[off:]
        else:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            arc = d.decompress(data[off:])
            off = len(data) - len(d.unused_data)
        pos = 0
        while True:
            f = [int(arc[pos + 6 + 8 * i : pos + 14 + 8 * i], 16) for i in range(13)]
            name = arc[pos + 110 : pos + 110 + f[11] - 1].decode()
            pos += 110 + f[11]
            pos += -pos % 4
            files[name] = arc[pos : pos + f[6]]
            pos += f[6] + (-(pos + f[6]) % 4)
            if name == "TRAILER!!!":
                break
        if plain:
            off += pos
    return files


@pytest.mark.parametrize("plain", [False, True])
def test_initrd_with_files_and_streamed_lines(tmp_path, monkeypatch, plain):
    """A fake QEMU (a shell script) prints lines on the second serial port as a guest would:
    on_line gets each line once, with QEMU's pid, before the run ends; the initrd holds the
    base archive, the files (plain and aligned when large) and the script."""
    fake = tmp_path / "qemu"
    fake.write_text(
        textwrap.dedent("""\
        #!/bin/sh
        for a in "$@"; do case "$a" in file:*result.log) out=${a#file:};; esac; prev=$a; done
        for a in "$@"; do [ "$p" = "-initrd" ] && cp "$a" "$(dirname "$out")/../initrd.copy"; p=$a; done
        printf '@@PERFBOOK-BEGIN@@\\nREADY\\nJOB a\\r\\n' >> "$out"; sleep 0.3
        printf 'JOB b\\npartial' >> "$out"; sleep 0.3
        printf ' line\\n@@PERFBOOK-END rc=0@@\\n' >> "$out"
        """)
    )
    fake.chmod(0o755)
    monkeypatch.setattr(guest, "QEMU", str(fake))
    monkeypatch.setattr(guest, "FILES_GZIP_MAX", 16 if plain else 1 << 30)
    art = tmp_path / "art"
    art.mkdir()
    (art / "initramfs.cpio.gz").write_bytes(
        gzip.compress(guest_image.build_cpio([("init", 0o100755, b"base")]))
    )
    seen = []
    r = guest.Runner(accel="tcg", timeout=30)
    r.artefacts = {"dir": str(art), "kernel_package": "k", "kernel_version": "1"}
    r.scratch = tmp_path
    cfg = guest.GuestConfig(
        files={"bin/tool": b"T" * 33, "etc/x": b"y"},
        on_line=lambda line, live: seen.append((line, live.pid, live.qmp)),
        qmp=True,
    )
    res = r.run("echo hi", cfg)
    assert res.rc == 0 and res.output == "READY\nJOB a\nJOB b\npartial line\n"
    assert [s[0] for s in seen] == ["READY", "JOB a", "JOB b", "partial line"]
    assert {s[1] for s in seen} == {res.qemu_pid} and seen[0][2].name == "qmp.sock"
    files = _unpack_like_linux((tmp_path / "initrd.copy").read_bytes())
    assert files["init"] == b"base" and files["bin/tool"] == b"T" * 33
    assert files["perfbook/script.sh"] == b"echo hi"
    assert len(list(tmp_path.glob("files-*.cpio" + ("" if plain else ".gz")))) == 1


def test_boot_params_check_their_bounds():
    ps = guest.boot_params(60)
    assert set(ps) == {"accel", "kvm_boot_timeout", "boot_timeout"}
    assert ps["boot_timeout"].check("boot_timeout", 30) == 30.0
    with pytest.raises(ParameterError, match="<= 60"):
        ps["boot_timeout"].check("boot_timeout", 61)
    with pytest.raises(ParameterError, match="auto, kvm, tcg"):
        ps["accel"].check("accel", "hvf")


def test_setup_prefetches_the_guest_kernel_and_a_failure_is_one_line(monkeypatch):
    """tools/setup.sh runs `python -m perfbook prefetch-guest` beside the packages' install: it says
    where the artefacts are, or in one line why not (exit 1; the first guest chapter retries)."""
    from perfbook.core import proc
    from perfbook.core.errors import MissingPrerequisite
    from perfbook.qemu import guest_image

    said = []
    monkeypatch.setattr(proc, "term_with_parent", lambda: None)  # not for the test process
    monkeypatch.setattr(guest_image, "ensure_artefacts", lambda say: {"dir": "/b/guest/6.1"})
    assert guest_image.prefetch(said.append) == 0 and said == ["cached in /b/guest/6.1"]

    def missing(say):
        raise MissingPrerequisite(
            "apt-get is missing: the guest kernel\n comes from Debian's packages"
        )

    monkeypatch.setattr(guest_image, "ensure_artefacts", missing)
    assert guest_image.prefetch(said.append) == 1
    assert said[-1] == "apt-get is missing: the guest kernel comes from Debian's packages"
    setup = (ROOT / "tools" / "setup.sh").read_text()
    assert (
        '"$PY" -m perfbook prefetch-guest' in setup
        and "trap " in setup
        and 'wait "$prefetch"' in setup
    )
