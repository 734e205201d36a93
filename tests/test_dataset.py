"""Datasets are atomic, never overwritten, and publish no identifying facts."""
import json
import os
import pwd
import socket
import subprocess
import sys

import pandas as pd
import pytest

from tools import dataset, hostinfo, lock
from tools.errors import DatasetError, LockBusy


def _write(data, run_id="20260101T000000Z", fail=False):
    with dataset.DatasetWriter("unit", data, {"x": 1}, run_id=run_id) as w:
        w.add_table("samples", pd.DataFrame({"a": [1, 2]}))
        if fail:
            raise RuntimeError("boom")
    return w.published


def test_publish_and_load(scratch_data):
    out = _write(scratch_data)
    assert (out / "samples.csv").is_file() and (out / "manifest.json").is_file()
    df = dataset.load_table("unit", "samples", scratch_data)
    assert list(df.columns) == ["host_id", "run_id", "a"] and len(df) == 2
    man = dataset.load_manifests("unit", scratch_data)[0]
    for key in ("host", "tools", "parameters", "started", "finished", "git"):
        assert key in man
    for key in ("cpu_model", "cpus_online", "kernel_release", "virtualization", "clocksource", "tsc_flags"):
        assert key in man["host"]


def test_failure_leaves_nothing(scratch_data):
    with pytest.raises(RuntimeError):
        _write(scratch_data, fail=True)
    assert not any(p for p in (scratch_data / "runs").rglob("*") if p.is_file())
    assert dataset.list_runs("unit", scratch_data) == []


def test_never_overwrites(scratch_data):
    _write(scratch_data)
    with pytest.raises(DatasetError, match="refusing to overwrite"):
        _write(scratch_data)
    assert len(dataset.list_runs("unit", scratch_data)) == 1


def test_unwritable_data_dir_is_a_clear_error(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "runs").write_text("a file where a directory should be")
    with pytest.raises(DatasetError, match="not writable"):
        _write(ro)


def test_manifest_has_no_identifying_facts(scratch_data):
    text = (_write(scratch_data) / "manifest.json").read_text()
    secrets = {socket.gethostname(), pwd.getpwuid(os.getuid()).pw_name, os.path.expanduser("~")}
    try:
        secrets.add(open("/etc/machine-id").read().strip())
    except OSError:
        pass
    for s in secrets:
        if s and s not in ("root", "/root") and len(s) > 3:
            assert s not in text, f"manifest leaks {s!r}"
    assert not any(ch in text for ch in ("ether ", "inet "))
    man = json.loads(text)
    assert man["host"]["host_id"].startswith("h-") or "PERFBOOK_HOST_ID" in os.environ


def test_host_id_is_stable_and_overridable(monkeypatch):
    a, b = hostinfo.host_id(), hostinfo.host_id()
    assert a == b
    monkeypatch.setenv("PERFBOOK_HOST_ID", "lab-box-2")
    assert hostinfo.host_id() == "lab-box-2"
    monkeypatch.setenv("PERFBOOK_HOST_ID", "../evil")
    with pytest.raises(Exception, match="not a valid id"):
        hostinfo.host_id()


HOLD = """
import sys, time
from tools.lock import measure_lock
with measure_lock('holder', wait=0):
    print('held', flush=True)
    time.sleep(60)
"""
TRY = """
from tools.lock import measure_lock
from tools.errors import LockBusy
try:
    with measure_lock('t', wait=0): print('got it')
except LockBusy as e: print('busy:', e)
"""


def test_lock_excludes_a_second_process(tmp_path):
    env = {**os.environ, "PERFBOOK_LOCK": str(tmp_path / "lock")}
    holder = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "held"
        r = subprocess.run([sys.executable, "-c", TRY], capture_output=True, text=True, env=env)
        assert r.stdout.startswith("busy:") and "holder" in r.stdout, r.stdout + r.stderr
    finally:
        holder.kill()
        holder.wait()
    r = subprocess.run([sys.executable, "-c", TRY], capture_output=True, text=True, env=env)
    assert r.stdout.strip() == "got it", "a dead holder's lock is released (flock)"


def test_lock_is_reentrant_and_passes_to_children(tmp_path, monkeypatch):
    """`python -m tools measure` holds the lock while papermill's kernel, its
    child, runs collect(): the child must not wait for its own parent."""
    monkeypatch.setenv("PERFBOOK_LOCK", str(tmp_path / "lock"))
    with lock.measure_lock("outer", wait=0):
        with lock.measure_lock("inner", wait=0):
            pass
        r = subprocess.run([sys.executable, "-c", TRY], capture_output=True, text=True,
                           env={**os.environ})
        assert r.stdout.strip() == "got it", r.stdout + r.stderr


def test_newest_prefers_real_runs_and_shown_datasets_pick_one_per_host():
    import pandas as pd
    from tools.dataset import newest, only_shown, shown_datasets
    ms = [{"host": {"host_id": "h-a"}, "run_id": "r1", "parameters": {"profile": "default"}},
          {"host": {"host_id": "h-a"}, "run_id": "r3", "parameters": {"profile": "quick"}},
          {"host": {"host_id": "h-b"}, "run_id": "r2", "parameters": {}},   # no profile: a default run
          {"host": {"host_id": "h-c"}, "run_id": "r4", "parameters": {"profile": "quick"}}]
    assert newest(ms)["run_id"] == "r1", "a run of a known real profile comes first"
    assert newest(ms[1:])["run_id"] == "r2", "then one that does not record its profile"
    assert newest(ms[:2])["run_id"] == "r1", "a newer quick run does not replace a real one"
    assert newest([ms[1]])["run_id"] == "r3" and newest([]) is None
    assert shown_datasets(ms) == {"h-a": "r1", "h-b": "r2", "h-c": "r4"}
    assert shown_datasets(ms, ref=ms[1])["h-a"] == "r3"
    df = pd.DataFrame({"host_id": ["h-a", "h-a", "h-b", "h-c"], "run_id": ["r1", "r3", "r2", "r4"], "x": range(4)})
    assert only_shown(df, ms).x.tolist() == [0, 2, 3]


def test_begin_collect_validates_then_checks_the_host(tmp_path):
    from tools.errors import MissingPrerequisite, ParameterError
    from tools.params import begin_collect
    calls = []

    def params_fn(profile, **kw):
        calls.append("params")
        if kw.get("bad"):
            raise ParameterError("bad must be falsy")
        return {"profile": profile, **kw}

    def preflight_fn():
        calls.append("preflight")
        return ["no tracefs"] if len(calls) > 2 else []

    p, data = begin_collect(params_fn, preflight_fn, "quick", {"x": 1}, str(tmp_path))
    assert p == {"profile": "quick", "x": 1} and data == tmp_path
    with pytest.raises(MissingPrerequisite, match="no tracefs"):
        begin_collect(params_fn, preflight_fn, "quick", {}, "")
    n = len(calls)
    with pytest.raises(ParameterError):
        begin_collect(params_fn, preflight_fn, "quick", {"bad": True}, "")
    assert calls[n:] == ["params"]  # bad input stops before the host is touched


def test_guest_boot_params_are_checked():
    from tools.errors import ParameterError
    from tools.guest import check_boot_params
    p = check_boot_params({"accel": "tcg", "kvm_boot_timeout": 10, "boot_timeout": 60})
    assert p["boot_timeout"] == 60.0 and isinstance(p["kvm_boot_timeout"], float)
    for bad in ({"accel": "xen"}, {"kvm_boot_timeout": 0}, {"boot_timeout": True},
                {"boot_timeout": 1000}):
        with pytest.raises(ParameterError):
            check_boot_params({"accel": "auto", "kvm_boot_timeout": 10, "boot_timeout": 60, **bad})
    assert check_boot_params({"accel": "auto", "kvm_boot_timeout": 10, "boot_timeout": 1000}, 1800)
