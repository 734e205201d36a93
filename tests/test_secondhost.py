"""perfbook.dev.secondhost: the plan, the guest's init and QEMU command, dataset import
(unit), and cleanup after SIGINT/SIGTERM of a real boot (live, skipped with a reason)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from conftest import ROOT
from perfbook.core.errors import ParameterError, PerfbookError
from perfbook.dev import secondhost as sh
from perfbook.hoststate.scratch import live_dirs
from perfbook.qemu import guest


# ---------------------------------------------------------------- the plan
def test_default_plan_leaves_out_nested_qemu_chapters():
    steps, left_out = sh.plan()
    names = [s.chapter for s in steps]
    from perfbook.chapters import CHAPTERS

    assert set(names) | set(left_out) == {c.name for c in CHAPTERS}  # every chapter, said which way
    assert set(sh.NOT_IN_GUEST) | set(sh.NOT_BY_DEFAULT) <= set(left_out)
    assert all(n in sh.PLAN for n in names)
    assert {"virtio_features", "qemu_cache_modes"} <= set(sh.NOT_IN_GUEST)
    assert all("nested" in sh.NOT_IN_GUEST[n] for n in ("virtio_features", "qemu_cache_modes"))
    assert not set(names) & set(left_out)
    assert {"trace_overhead", "netperf_latency", "cpu_pinning"} <= set(names)
    assert all(s.profile in sh.PROFILES and s.budget_s > 0 for s in steps)
    # named on purpose, a not-by-default chapter runs; a nested-QEMU one never does
    steps, left_out = sh.plan(["iostat_internals", "virtio_features"])
    assert [s.chapter for s in steps] == ["iostat_internals"] and list(left_out) == [
        "virtio_features"
    ]


def test_plan_parameters_exist_in_the_notebooks():
    """Every parameter the TCG plan passes is declared in its chapter's first cell
    (the measure step would refuse the run otherwise)."""
    from perfbook.chapters import by_name
    from perfbook.cli import _notebook_parameters

    for name, (profile, params, _budget) in sh.PLAN.items():
        declared = _notebook_parameters(by_name(name).path)
        assert {"mode", "profile", "data_dir"} <= declared
        assert set(params) <= set(declared), (name, set(params) - set(declared))
        assert profile in sh.PROFILES


def test_plan_validation_and_sets():
    with pytest.raises(ParameterError, match="unknown chapter"):
        sh.plan(["no_such_chapter"])
    with pytest.raises(ParameterError, match="profile"):
        sh.plan(["trace_overhead"], "turbo")
    steps, left = sh.plan(
        ["trace_overhead", "virtio_features"],
        "default",
        ["trace_overhead.iterations=500", "trace_overhead.mechanisms=marker,uprobe"],
    )
    assert [s.chapter for s in steps] == ["trace_overhead"] and "virtio_features" in left
    assert steps[0].profile == "default"
    assert steps[0].params == {"iterations": 500, "mechanisms": "marker,uprobe"}
    argv = steps[0].measure_argv()
    assert (
        argv[0] == ".venv/bin/python"
        and "from perfbook.cli import main" in argv[2]
        and argv[3] == "measure"
    )
    assert "--strict" in argv and argv[argv.index("--profile") + 1] == "default"
    assert "iterations=500" in argv and "mechanisms=marker,uprobe" in argv
    for bad in (
        "trace_overhead.iterations",
        "iterations=5",
        "cpu_pinning.rounds=2",
        "trace_overhead.profile=full",
    ):
        with pytest.raises(ParameterError):
            sh.plan(["trace_overhead"], "quick", [bad])


def test_machine_spec_validation():
    sh.MachineSpec().validate()
    for kw in (
        {"cpus": 0},
        {"cpus": True},
        {"memory_mib": 64},
        {"scratch_gib": 0},
        {"cpu_model": "max; rm -rf /"},
        {"cpu_model": ""},
    ):
        with pytest.raises(ParameterError):
            sh.MachineSpec(**kw).validate()


@pytest.mark.slow  # parses measure's command line; nothing is measured
def test_measure_cli_param_parsing():
    from perfbook.cli import _measure_params, main

    assert _measure_params(["a=1", "b=x,y", "c=null", "d=[1, 2]"]) == {
        "a": 1,
        "b": "x,y",
        "c": None,
        "d": [1, 2],
    }
    for bad in ("novalue", "=3", "mode=collect", "profile=full", "1x=2"):
        with pytest.raises(ParameterError):
            _measure_params([bad])
    # a name the notebook does not declare stops the run before anything is measured
    assert main(["measure", "--chapters", "trace_overhead", "--param", "no_such_param=1"]) == 2


def test_cpu_selfcheck_passes_here_and_catches_a_wrong_sort(monkeypatch):
    import numpy as np

    assert "passed" in sh.cpu_selfcheck(n=2000)
    real = np.sort
    monkeypatch.setattr(np, "sort", lambda a, *k, **kw: real(a, *k, **kw)[::-1])
    with pytest.raises(PerfbookError, match="sorts"):
        sh.cpu_selfcheck(n=2000)


# ---------------------------------------------------------------- identity and labels
def test_machine_id_is_made_once_and_kept(tmp_path):
    p = tmp_path / "sub" / "machine-id"
    a = sh.machine_id(p)
    assert len(a) == 32 and int(a, 16) >= 0
    assert sh.machine_id(p) == a == p.read_text().strip()
    p.write_text("not an id\n")
    b = sh.machine_id(p)
    assert b != a and sh.machine_id(p) == b


def test_label_and_note_say_what_the_machine_is():
    arte = {"kernel_package": "linux-image-6.1.0-99-amd64", "kernel_version": "6.1.1-1"}
    label, note = sh.describe(
        sh.MachineSpec(cpus=2, memory_mib=2048), arte, "h-000000000001", "7.2.22"
    )
    assert "TCG" in label and "h-000000000001" in label and "6.1.1-1" in label
    kv = dict(item.split("=", 1) for item in note.split("; "))
    assert kv["kind"] == "qemu-tcg-guest" and kv["parent_host"] == "h-000000000001"
    assert kv["accel"].startswith("tcg") and kv["vcpus"] == "2" and kv["memory_mib"] == "2048"
    assert kv["kernel_package"] == "linux-image-6.1.0-99-amd64" and kv["qemu"] == "7.2.22"
    assert "not comparable" in kv["timings"]


# ---------------------------------------------------------------- what the guest runs
def _fake_artefacts(tmp_path) -> dict:
    d = tmp_path / "arte"
    d.mkdir()
    (d / "vmlinuz").write_bytes(b"kernel")
    (d / "config").write_text("CONFIG_HZ=250\n")
    (d / "initramfs.cpio.gz").write_bytes(
        gzip.compress(guest.build_cpio([("init", guest.REG | 0o755, b"x")]))
    )
    return {
        "dir": str(d),
        "kernel_release": "6.1.0-99-amd64",
        "kernel_package": "linux-image-6.1.0-99-amd64",
        "kernel_version": "6.1.1-1",
    }


def _gunzip_members(data: bytes) -> list[bytes]:
    out = []
    while data:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out.append(d.decompress(data))
        data = d.unused_data
    return out


def test_init_script_and_qemu_command(tmp_path):
    mid = "0123456789abcdef0123456789abcdef"
    init = sh.init_script(mid, "6.1.0-99-amd64")
    assert f"echo {mid} > /newroot/etc/machine-id" in init
    assert "-o ro,trans=virtio" in init and f" {sh.ROOT_TAG} /lower" in init
    assert "lowerdir=/lower,upperdir=/upper/u" in init and "rm -f /newroot/.dockerenv" in init
    assert "/boot/config-6.1.0-99-amd64" in init and "switch_root /newroot" in init
    assert "mount -t ext4 /dev/vda /newroot/var/tmp" in init
    with pytest.raises(ParameterError):
        sh.init_script("xyz", "6.1")
    with pytest.raises(ParameterError):
        sh.init_script(mid, "6.1; reboot")
    arte = _fake_artefacts(tmp_path)
    cmd = sh.qemu_cmdline(
        sh.MachineSpec(cpus=2, memory_mib=2048, cpu_model="qemu64"),
        arte,
        tmp_path,
        tmp_path / "initrd.img",
    )
    joined = " ".join(cmd)
    assert cmd[cmd.index("-accel") + 1].startswith("tcg") and "kvm" not in joined
    assert cmd[cmd.index("-cpu") + 1] == "qemu64" and cmd[cmd.index("-smp") + 1] == "2"
    assert cmd[cmd.index("-m") + 1] == "2048"
    assert "rdinit=/secondhost/init" in joined
    virtfs = [cmd[i + 1] for i, a in enumerate(cmd) if a == "-virtfs"]
    root = [v for v in virtfs if f"mount_tag={sh.ROOT_TAG}" in v]
    out = [v for v in virtfs if f"mount_tag={sh.OUT_TAG}" in v]
    assert root and "path=/," in root[0] and "readonly=on" in root[0]
    assert out and f"path={tmp_path / 'out'}" in out[0] and "readonly" not in out[0]
    # the initramfs: perfbook.qemu.guest's base archive, then ours with init, script and config
    steps, _ = sh.plan(["trace_overhead"], "quick", ["trace_overhead.iterations=100"])
    run = sh.run_script(steps, "a label with 'quotes' and $dollars", "kind=x; y=z")
    members = _gunzip_members(sh.initrd_bytes(arte, init, run))
    assert len(members) == 2
    ours = members[1]
    for name in (b"secondhost/init", b"secondhost/run.sh", b"secondhost/config"):
        assert name in ours
    assert init.encode() in ours and run.encode() in ours and b"CONFIG_HZ=250" in ours


def test_scripts_are_valid_shell(tmp_path):
    steps, _ = sh.plan(["trace_overhead", "cpu_pinning"], "quick")
    run = sh.run_script(steps, "label 'q' \"d\" $(x)", "kind=qemu-tcg-guest; a=b")
    r = subprocess.run(["bash", "-n"], input=run, text=True, capture_output=True)
    assert r.returncode == 0, r.stderr
    # the label survives quoting exactly
    probe = (
        run.split("export PERFBOOK_HOST_NOTE")[0].split("export PERFBOOK_HOST_LABEL=")[1].strip()
    )
    r = subprocess.run(["bash", "-c", f"printf %s {probe}"], capture_output=True, text=True)
    assert r.stdout == "label 'q' \"d\" $(x)"
    assert "--chapters trace_overhead" in run and "--chapters cpu_pinning" in run
    assert "cp build/measure/cpu_pinning.ipynb" in run
    init = sh.init_script("0" * 32, "6.1.0-1-amd64")
    r = subprocess.run(["sh", "-n"], input=init, text=True, capture_output=True)
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------- bringing datasets back
def _dataset(
    base: Path, host: str, chapter: str, run_id: str, note: str | None, rows: str = "1"
) -> Path:
    """A copy of a committed dataset of `chapter` (so that its tables match the chapter's
    schemas), filed as `host`/`run_id` with host.note `note`; `rows` marks its content."""
    from perfbook.data.dataset import list_runs

    d = base / host / chapter / run_id
    shutil.copytree(list_runs(chapter)[0], d)
    m = json.loads((d / "manifest.json").read_text())
    # one machine's facts for every copy: after a reader's `make all` the first dataset of one
    # chapter may be theirs and of another a committed host's
    one = json.loads((list_runs("trace_overhead")[0] / "manifest.json").read_text())["host"]
    m["host"] = {**one, "host_id": host, "note": note}
    m["host"]["machine"] = dict(one.get("machine", {}))
    m["host"]["machine"]["id_override"] = True  # an explicit label, as PERFBOOK_HOST_ID gives
    m.update(run_id=run_id, notes=[f"content {rows}"])
    (d / "manifest.json").write_text(json.dumps(m))
    return d


def _content(d: Path) -> list:
    return json.loads((d / "manifest.json").read_text())["notes"]


def test_import_datasets_never_overwrites(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    note = "kind=qemu-tcg-guest"
    _dataset(src, "h-guest", "trace_overhead", "20260101T000000Z", note)
    _dataset(src, "h-guest", "cpu_pinning", "20260101T000001Z", note)
    _dataset(src, "h-guest", "qcow2_overlap", "20260101T000002Z", note)
    same = _dataset(dest, "h-guest", "cpu_pinning", "20260101T000001Z", note)
    other = _dataset(dest, "h-guest", "qcow2_overlap", "20260101T000002Z", note, rows="old")
    res = sh.import_datasets(src, dest, "h-guest", note)
    assert res.new == ["h-guest/trace_overhead/20260101T000000Z"]
    assert res.present == ["h-guest/cpu_pinning/20260101T000001Z"]
    assert res.conflicts == ["h-guest/qcow2_overlap/20260101T000002Z"]
    assert _content(other) == ["content old"] and _content(same) == ["content 1"]
    assert _content(dest / res.new[0]) == ["content 1"]
    assert not [p for p in dest.rglob("*") if p.name.startswith(".")]
    again = sh.import_datasets(src, dest, "h-guest", note)  # a second import adds nothing
    assert again.new == [] and len(again.present) == 2 and len(again.conflicts) == 1
    assert sh.import_datasets(src, dest, "h-nobody", note).new == []


def test_import_refuses_foreign_datasets(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    _dataset(src, "h-guest", "trace_overhead", "r1", "kind=something else")
    with pytest.raises(PerfbookError, match="note"):
        sh.import_datasets(src, dest, "h-guest", "kind=qemu-tcg-guest")
    assert not (dest / "h-guest" / "trace_overhead" / "r1").exists()
    src2 = tmp_path / "src2"
    d = _dataset(src2, "h-guest", "trace_overhead", "r1", "n")
    m = json.loads((d / "manifest.json").read_text())
    m["host"]["host_id"] = "h-parent"
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(PerfbookError, match="h-parent"):
        sh.import_datasets(src2, dest, "h-guest", "n")
    assert not (dest / "h-guest" / "trace_overhead" / "r1").exists()


# ---------------------------------------------------------------- live: cleanup on signals
def _need_secondhost():
    reasons = sh.preflight()
    if reasons:
        pytest.skip(f"no second host here: {reasons[0]}")
    try:
        sh.artefacts()
    except (guest.MissingPrerequisite, PerfbookError) as e:
        pytest.skip(f"no guest kernel for the second host: {e}")


def _qemu_children(pid: int) -> list[str]:
    r = subprocess.run(["pgrep", "-P", str(pid), "-f", guest.QEMU], capture_output=True, text=True)
    return r.stdout.split()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_during_boot_stops_qemu_and_removes_scratch(tmp_path, sig):
    _need_secondhost()
    env = dict(os.environ, PERFBOOK_LOCK=str(tmp_path / "lock"))  # a boot, no measurement
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "perfbook",
            "secondhost",
            "--facts",
            "--data-dir",
            str(tmp_path / "d"),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    qemu, lines = [], []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            lines.append(line)
            if "booting the second host" in line:
                break
            if not line and p.poll() is not None:
                break
        for _ in range(200):
            qemu = _qemu_children(p.pid)
            if qemu:
                break
            time.sleep(0.1)
        assert qemu, "QEMU did not start: " + "".join(lines)
        scratch = [
            d
            for d in live_dirs("secondhost")
            if (d / "owner").is_file() and (d / "owner").read_text().split()[0] == str(p.pid)
        ]
        assert len(scratch) == 1 and (scratch[0] / "disk.img").exists()
        time.sleep(2)
        p.send_signal(sig)
        rest, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 130, "".join(lines) + rest
    assert "interrupted" in rest
    assert not scratch[0].exists()
    for q in qemu:
        assert (
            not Path(f"/proc/{q}").exists()
            or "zombie" in Path(f"/proc/{q}/status").read_text().lower()
        )
    assert not list(tmp_path.rglob("manifest.json"))


def test_outcome_and_terminal_filter(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    res = sh.BootResult(rc=0, output="", seconds=1.0, boot_seconds=0.5, out=out, console_tail="")
    step = sh.Step("trace_overhead", "quick")
    (out / "status.jsonl").write_text(
        json.dumps({"chapter": "trace_overhead", "status": "measured", "detail": "/x"})
        + "\n"
        + json.dumps({"chapter": "trace_overhead", "status": "failed", "detail": "Kernel died"})
        + "\n"
    )
    assert sh._outcome(step, res, tmp_path) == {"status": "failed", "detail": "Kernel died"}
    (out / "status.jsonl").write_text(
        json.dumps({"chapter": "trace_overhead", "status": "measured", "detail": "/x"}) + "\n"
    )
    assert sh._outcome(step, res, tmp_path)["status"] == "measured"
    (out / "status.jsonl").unlink()
    res93 = sh.BootResult(rc=93, output="", seconds=1.0, boot_seconds=0.5, out=out, console_tail="")
    o = sh._outcome(step, res93, tmp_path)
    assert o["status"] == "failed" and "self-check" in o["detail"] and "rc=93" in o["detail"]
    assert sh._outcome(None, res, tmp_path)["status"] == "ok"
    shown = [
        ln
        for ln in (
            "[trace_overhead] 3/12 (25%) uprobe",
            "   runs  mean_error_us",
            "KeyError: 'trace_await'",
            "Executing Cell 4------",
            "new dataset: /x",
        )
        if sh.SHOW_RE.search(ln)
    ]
    assert shown == [
        "[trace_overhead] 3/12 (25%) uprobe",
        "KeyError: 'trace_await'",
        "new dataset: /x",
    ]
