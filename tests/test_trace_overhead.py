"""The trace-overhead chapter: parameters, harness, a quick live run, and cleanup."""
import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import papermill as pm
import pytest

from conftest import ROOT, need_preflight, need_tool
from tools import trace_overhead as T, tracefs
from tools.errors import ParameterError

NB = ROOT / "chapters" / "trace_overhead.ipynb"


@pytest.mark.parametrize("bad,match", [
    ({"iterations": -5}, "iterations must be an integer >= 1"),
    ({"iterations": 0}, "iterations must be an integer >= 1"),
    ({"rounds": 1.5}, "rounds must be an integer"),
    ({"warmup": True}, "warmup must be an integer"),
    ({"mechanisms": "marker,kprobe"}, "unknown mechanism kprobe"),
    ({"mechanisms": ""}, "unknown mechanism"),
    ({"pin_cpu": 4096}, "pin_cpu must be"),
    ({"colour": "red"}, "unknown parameter 'colour'"),
])
def test_bad_parameters_are_one_clear_error(bad, match):
    with pytest.raises(ParameterError, match=match):
        T.params("quick", **bad)


def test_parameters_merge_and_keep_the_baseline():
    p = T.params("default", mechanisms="uprobe,marker", iterations=10)
    assert p["mechanisms"] == ["none", "uprobe", "marker"]
    assert p["iterations"] == 10 and p["rounds"] == T.PROFILES["default"]["rounds"]
    with pytest.raises(ParameterError, match="profile"):
        T.params("huge")


def test_harness_output_and_errors():
    need_tool("gcc")
    b = str(T.cbuild.binary("probench"))
    r = subprocess.run([b, "--target", "none", "--iters", "1000", "--batches", "4", "--warmup", "1"],
                       capture_output=True, text=True, check=True)
    df, timer = T.parse_harness(r.stdout)
    assert list(df.columns) == ["batch", "iters", "ns"] and len(df) == 4 and timer > 0
    assert (df.ns > 0).all()
    for args, msg in ((["--target", "bogus"], "unknown target"),
                      (["--target", "none", "--iters", "-5"], "--iters must be an integer >= 1"),
                      (["--target", "marker"], "needs --marker")):
        r = subprocess.run([b, *args], capture_output=True, text=True)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and msg in r.stderr


def test_decompose_isolates_steps():
    med = pd.Series({"none": 2.0, "syscall": 200.0, "marker": 600.0, "uprobe": 4000.0,
                     "uprobe_push": 1000.0, "uprobe_nop5": 800.0, "uretprobe": 5000.0,
                     "perf_stat": 3900.0})
    steps = T.decompose(med).set_index("key").ns
    assert steps["marker_buffer"] == 400 and steps["sstep"] == 3000 and steps["ret"] == 1000
    assert pd.isna(steps["consumer_bpf"])  # bpf_uprobe was not measured


def test_committed_data_is_consistent():
    """Every committed run hit the tracer once per call, and has every table."""
    d = T.load()
    if d["samples"].empty:
        pytest.skip("no committed trace_overhead dataset")
    chk = d["checks"].dropna(subset=["expected_hits"])
    assert (chk.expected_hits == chk.observed_hits).all()
    assert {"none", "marker", "uprobe"} <= set(d["samples"].mechanism)
    for m in d["manifests"]:
        assert m["host"]["host_id"] and m["kernel_features"] is not None


def _papermill_error(tmp_path, **params):
    out = tmp_path / "out.ipynb"
    with pytest.raises(pm.PapermillExecutionError) as ei:
        pm.execute_notebook(str(NB), str(out), parameters={"mode": "collect", **params},
                            progress_bar=False, cwd=str(NB.parent), kernel_name="python3")
    return ei.value


@pytest.mark.parametrize("params,ename,text", [
    ({"iterations": -5}, "ParameterError", "iterations must be an integer >= 1, got -5"),
    ({"mechanisms": "marker,bogus"}, "ParameterError", "unknown mechanism bogus"),
    ({"mode": "measure"}, "ParameterError", "mode must be one of"),
])
def test_papermill_bad_parameters(tmp_path, scratch_data, params, ename, text):
    err = _papermill_error(tmp_path, data_dir=str(scratch_data), **params)
    assert err.ename == ename and text in err.evalue
    assert len(err.traceback) == 1, "the notebook shows one line, not a traceback wall"
    assert not any(p.is_file() for p in (scratch_data / "runs").rglob("*"))


def test_papermill_unwritable_data_dir(tmp_path):
    need_preflight(T)
    bad = tmp_path / "nope"
    bad.write_text("a file, not a directory")
    err = _papermill_error(tmp_path, data_dir=str(bad), profile="quick")
    assert err.ename == "DatasetError" and "not writable" in err.evalue
    assert len(err.traceback) == 1


def test_quick_collect_through_papermill(tmp_path, scratch_data):
    need_preflight(T)
    before = tracefs.snapshot()
    pm.execute_notebook(str(NB), str(tmp_path / "out.ipynb"),
                        parameters={"mode": "collect", "profile": "quick", "data_dir": str(scratch_data)},
                        progress_bar=False, cwd=str(NB.parent), kernel_name="python3")
    assert tracefs.snapshot() == before
    runs = T.load(scratch_data)
    assert len(runs["manifests"]) == 1
    m = runs["manifests"][0]
    assert m["parameters"]["profile"] == "quick" and m["git"]["commit"] is not None or True
    s = runs["samples"]
    measured = set(T.MECHANISMS) - set(m["skipped"])
    assert set(s.mechanism) == measured
    p = T.params("quick")
    assert len(s) == len(measured) * p["rounds"] * p["batches"]
    chk = runs["checks"].dropna(subset=["expected_hits"])
    assert (chk.expected_hits == chk.observed_hits).all(), chk
    # the armed mechanisms cost more than the bare loop, every time
    med = s.groupby("mechanism").ns_per_call.median()
    for mech in measured - {"none"}:
        assert med[mech] > med["none"], (mech, med.to_dict())


RUN = r"""
import sys
from tools import trace_overhead as T
T.collect(sys.argv[1], profile="quick", iterations=20000, rounds=50)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_collect_restores_state_and_writes_nothing(scratch_data, sig):
    need_preflight(T)
    before = tracefs.snapshot()
    p = subprocess.Popen([sys.executable, "-c", RUN, str(scratch_data)], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in p.stdout:  # wait until it is in the middle of a run
        seen.append(line)
        if "round 1/50" in line and len(seen) >= 3:
            break
    p.send_signal(sig)
    p.communicate(timeout=60)
    assert p.returncode != 0
    assert tracefs.snapshot() == before
    assert not any(p for p in (scratch_data / "runs").rglob("*") if p.is_file())
    assert not [d for d in (scratch_data / "runs").rglob(".tmp-*")]
    left = subprocess.run(["pgrep", "-x", "probench"], capture_output=True, text=True).stdout
    left += subprocess.run(["pgrep", "-f", "bpftrace -e uprobe:.*probench"], capture_output=True, text=True).stdout
    assert not left.strip(), f"processes left behind: {left}"
