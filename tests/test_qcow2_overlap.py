"""Tests of the qcow2 reader (tools/qcow2.py) and the qcow2_overlap chapter module."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from conftest import ROOT, need_tool, need_preflight
from tools import qcow2_overlap as qo
from tools.scratch import live_dirs
from tools.errors import MissingPrerequisite, ParameterError
from tools.qcow2 import Qcow2Image, formula_bytes, formula_clusters, parse_header

MiB = 1 << 20


def qemu_img() -> str:
    return need_tool("qemu-img", "qemu-utils")


def run(*cmd):
    subprocess.run(list(map(str, cmd)), check=True, capture_output=True)


def info(path) -> dict:
    r = subprocess.run(["qemu-img", "info", "--output=json", str(path)], check=True,
                       capture_output=True, text=True)
    return json.loads(r.stdout)


def qemu_children() -> list[str]:
    """qemu-img/qemu-io processes whose parent is this test process."""
    r = subprocess.run(["ps", "-o", "pid=,ppid=,comm=", "-e"], capture_output=True, text=True)
    out = []
    for line in r.stdout.splitlines():
        pid, ppid, comm = line.split(None, 2)
        if comm.strip() in ("qemu-img", "qemu-io") and int(ppid) == os.getpid():
            out.append(line)
    return out


# --- the reader -------------------------------------------------------------------------

@pytest.mark.parametrize("cs,size", [(512, 4 * MiB), (4096, 64 * MiB), (65536, 1024 * MiB)])
def test_reader_header_and_l2_count(tmp_path, cs, size):
    qemu_img()
    img = tmp_path / "a.qcow2"
    run("qemu-img", "create", "-q", "-f", "qcow2", "-o",
        f"cluster_size={cs},preallocation=metadata", img, size)
    q = Qcow2Image(img)
    h, i = q.header, info(img)
    assert h.cluster_size == i["cluster-size"] == cs
    assert h.size == i["virtual-size"] == size
    assert h.version == 3 and h.refcount_bits == 16
    # preallocation allocates every L2 table: one per (cs / 8) guest clusters
    per_l2 = cs // 8 * cs
    expected_l2 = -(-size // per_l2)
    m = q.metadata_clusters()
    assert len(m["active_l2"]) == expected_l2
    assert h.l1_size >= expected_l2
    # every metadata cluster is referenced exactly once
    for kind in ("header", "active_l1", "refcount_table", "active_l2", "refcount_block"):
        for c in m[kind][:50]:
            assert q.refcount(c) == 1, (kind, c)
    # refcount blocks must cover every cluster of the file
    st = os.stat(img)
    assert len(m["refcount_block"]) >= -(-st.st_size // cs) / h.refblock_entries
    s = q.metadata_summary()
    assert s["n_formula_scope"] == expected_l2 + len(m["refcount_block"])
    assert s["metadata_runs"] <= s["n_metadata"]


def test_reader_guest_to_host_matches_qemu_img_map(tmp_path):
    qemu_img()
    need_tool("qemu-io", "qemu-utils")
    img = tmp_path / "m.qcow2"
    run("qemu-img", "create", "-q", "-f", "qcow2", "-o", "cluster_size=4096", img, 8 * MiB)
    for off in (0, 3 * MiB + 4096, 7 * MiB):
        run("qemu-io", "-c", f"write -P 0x5a {off} 4k", img)
    q = Qcow2Image(img)
    r = subprocess.run(["qemu-img", "map", "--output=json", str(img)], check=True,
                       capture_output=True, text=True)
    extents = [e for e in json.loads(r.stdout) if e["data"]]
    assert len(extents) == 3
    for e in extents:
        assert q.guest_to_host(e["start"]) == e["offset"]
        with open(img, "rb") as f:
            f.seek(e["offset"])
            assert f.read(4096) == b"\x5a" * 4096
    assert q.guest_to_host(1 * MiB) is None
    assert q.refcount(q.guest_to_host(0) // 4096) == 1



def _map_extents(img) -> list[dict]:
    r = subprocess.run(["qemu-img", "map", "--output=json", str(img)], check=True,
                       capture_output=True, text=True)
    return json.loads(r.stdout)


def _assert_reader_agrees_with_map(q, img, step):
    """Every `step` bytes: data extents map to their host offset, zero extents
    (present, no data) to "zero", absent ones to "unallocated"."""
    seen = set()
    for e in _map_extents(img):
        for off in range(e["start"], e["start"] + e["length"], step):
            kind, host = q.guest_status(off)
            want = "data" if e["data"] else ("zero" if e["present"] else "unallocated")
            assert kind == want, (off, e, kind)
            seen.add(kind)
            if e["data"]:
                assert host == q.guest_to_host(off) == e["offset"] + off - e["start"]
            else:
                assert host is None and q.guest_to_host(off) is None, (off, e)
    return seen


def test_reader_zero_flag_with_kept_allocation_reads_zeros(tmp_path):
    """write -z on an allocated cluster sets the zero flag (bit 0) and keeps the host
    offset in the L2 entry; the cluster reads zeros, not the old data."""
    qemu_img()
    need_tool("qemu-io", "qemu-utils")
    img = tmp_path / "z.qcow2"
    run("qemu-img", "create", "-q", "-f", "qcow2", "-o", "cluster_size=4096", img, MiB)
    run("qemu-io", "-c", "write -P 0x5a 0 16k", "-c", "write -z 4k 4k", img)
    zero_ext = [e for e in _map_extents(img) if e["start"] == 4096]
    assert zero_ext and zero_ext[0]["zero"] and not zero_ext[0]["data"]
    assert "offset" in zero_ext[0], "qemu-io no longer keeps the allocation; test is moot"
    q = Qcow2Image(img)
    assert q.guest_to_host(4096 + 100) is None  # was the old data's host offset
    assert q.guest_status(4096) == ("zero", None)
    assert _assert_reader_agrees_with_map(q, img, 4096) == {"data", "zero", "unallocated"}


@pytest.mark.parametrize("cs", [16384, 65536])
def test_reader_extended_l2_subclusters(tmp_path, cs):
    """extended_l2=on: 128-bit L2 entries, 32 subclusters per cluster, each one
    allocated, reading as zero, or unallocated on its own."""
    qemu_img()
    need_tool("qemu-io", "qemu-utils")
    img = tmp_path / "e.qcow2"
    sc = cs // 32
    run("qemu-img", "create", "-q", "-f", "qcow2", "-o",
        f"extended_l2=on,cluster_size={cs}", img, 4 * MiB)
    run("qemu-io",
        "-c", f"write -P 0x5a {sc} {sc}",           # subcluster 1 of cluster 0
        "-c", f"write -z {4 * sc} {sc}",            # subcluster 4: reads as zero
        "-c", f"write -P 0x33 {cs + 3 * sc} {2 * sc}",
        "-c", f"write -z {2 * cs} {cs}",            # a whole zero cluster
        "-c", f"write -P 0x77 {MiB + 31 * sc} {sc}",  # the last subcluster
        img)
    q = Qcow2Image(img)
    assert q.guest_to_host(0) is None  # host cluster allocated, subcluster 0 is not
    assert q.guest_to_host(4 * sc) is None  # reads as zero
    assert q.header.extended_l2 and q.header.l2_entries == cs // 16
    assert q.guest_status(0) == ("unallocated", None)  # allocated cluster, free subcluster
    assert q.guest_status(4 * sc) == ("zero", None)
    kinds = _assert_reader_agrees_with_map(q, img, sc)
    assert kinds == {"data", "zero", "unallocated"}
    with open(img, "rb") as f:
        for off, byte in ((sc, 0x5a), (cs + 4 * sc, 0x33), (MiB + 31 * sc, 0x77)):
            f.seek(q.guest_to_host(off))
            assert f.read(sc) == bytes([byte]) * sc, off
    # l2_table() gives the entries, not the interleaved bitmaps
    l2 = q.l2_table(q.l1_table()[0] & 0x00FFFFFFFFFFFE00)
    assert len(l2) == q.header.l2_entries
    assert l2[0] & 0x00FFFFFFFFFFFE00 == q.guest_to_host(sc) - sc

def test_reader_snapshots_and_inactive_l2(tmp_path):
    qemu_img()
    need_tool("qemu-io", "qemu-utils")
    img = tmp_path / "s.qcow2"
    run("qemu-img", "create", "-q", "-f", "qcow2", "-o", "cluster_size=512", img, 2 * MiB)
    run("qemu-io", "-c", "write 0 64k", img)
    run("qemu-img", "snapshot", "-c", "first", img)
    run("qemu-img", "snapshot", "-c", "second-snapshot", img)
    q0 = Qcow2Image(img)
    snaps = q0.snapshots()
    assert [s.name for s in snaps] == ["first", "second-snapshot"]
    assert [s.name for s in snaps] == [s["name"] for s in info(img)["snapshots"]]
    assert all(s.l1_size == q0.header.l1_size for s in snaps)
    m0 = q0.metadata_clusters()
    assert m0["inactive_l2"] == []  # all L2 tables are still shared with the active L1
    shared = m0["active_l2"][0]
    assert q0.refcount(shared) == 3
    # a write after the snapshots copies the L2 table: the old one becomes inactive-only
    run("qemu-io", "-c", "write 0 512", img)
    m1 = Qcow2Image(img).metadata_clusters()
    assert shared in m1["inactive_l2"]
    assert Qcow2Image(img).refcount(shared) == 2


def test_reader_refuses_non_qcow2(tmp_path):
    p = tmp_path / "raw.img"
    p.write_bytes(b"\0" * 4096)
    with pytest.raises(ValueError, match="not a qcow2 image"):
        Qcow2Image(p)
    with pytest.raises(ValueError, match="version"):
        parse_header(b"QFI\xfb" + (9).to_bytes(4, "big") + b"\0" * 100)


def test_formula_matches_the_seed_arithmetic():
    # the seed: 266 MB disk size at 512-byte clusters -> about 42 kB of list
    assert round(formula_bytes(266 * MiB, 512) / 1024) == 42
    assert formula_clusters(2 ** 40, 65536) == pytest.approx(2560.0)
    assert formula_bytes(2 ** 40, 65536) == pytest.approx(10 * 1024)  # "10 kB for 1 TB"


# --- parameters -------------------------------------------------------------------------

def test_params_defaults_and_baseline():
    p = qo.params("quick")
    assert p["modes"] == list(qo.MODES)
    assert qo.params("quick", modes="cached")["modes"] == ["none", "cached"]
    assert qo.params("quick", prealloc_sizes_512=8 * MiB)["prealloc_sizes_512"] == [8 * MiB]
    fixed = qo.params("default", repeats=3)  # a fixed number of rounds, as before
    assert fixed["rep_min_runs"] == fixed["rep_max_runs"] == 3
    assert qo.params("default")["rep_target"] == 0.05


@pytest.mark.parametrize("over,match", [
    ({"modes": "fast"}, "unknown overlap-check mode"),
    ({"modes": ""}, "unknown overlap-check mode"),
    ({"repeats": 0}, "repeats must be"),
    ({"repeats": "3"}, "repeats must be"),
    ({"rep_warmup": True}, "rep_warmup must be"),
    ({"warmup": 1}, "unknown parameter 'warmup'"),
    ({"rep_target": -0.1}, "rep_target must be a relative CI width"),
    ({"rep_budget_s": float("nan")}, "rep_budget_s must be a number of seconds"),
    ({"rep_min_runs": 0}, "rep_min_runs must be an integer"),
    ({"rep_min_runs": 6, "rep_max_runs": 2}, "rep_max_runs .2. must be >= rep_min_runs .6."),
    ({"bench_size": 1000}, "bench_size must be"),
    ({"bench_size": 3 * MiB + 1}, "multiple of 1 MiB"),
    ({"prealloc_sizes_512": []}, "prealloc_sizes_512 must be"),
    ({"prealloc_sizes_512": [12345]}, "prealloc_sizes_512 must be"),
    ({"formula_sizes_512": [16 << 30]}, "take hours"),
    ({"colour": 1}, "unknown parameter 'colour'"),
])
def test_params_rejects_bad_input(over, match):
    with pytest.raises(ParameterError, match=match):
        qo.params("quick", **over)


def test_bad_profile_and_no_dataset(tmp_path):
    with pytest.raises(ParameterError, match="profile must be"):
        qo.collect(data_dir=tmp_path, profile="huge")
    with pytest.raises(ParameterError):
        qo.collect(data_dir=tmp_path, profile="quick", modes="turbo")
    assert not (tmp_path / "runs").exists()


def test_missing_qemu_img_is_a_prerequisite(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no qemu-img on this PATH
    assert any("qemu-img is not installed" in r for r in qo.preflight())
    with pytest.raises(MissingPrerequisite, match="apt-get install qemu-utils"):
        qo.collect(data_dir=tmp_path, profile="quick")
    assert not (tmp_path / "runs").exists()


def test_image_opts_syntax_is_accepted(tmp_path):
    """The option string we build is what the installed QEMU parses."""
    qemu_img()
    img = tmp_path / "o.qcow2"
    run("qemu-img", "create", "-q", "-f", "qcow2", img, MiB)
    for mode in qo.MODES:
        run("qemu-img", "info", "--image-opts", qo.image_opts(img, mode))
    r = subprocess.run(["qemu-img", "info", "--image-opts", qo.image_opts(img, "sometimes")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "overlap" in r.stderr.lower()


def test_perf_symbol_check_says_why():
    c = qo.perf_symbol_check()
    assert c["symbol"] == "qcow2_check_metadata_overlap"
    assert c["resolvable"] or c["reason"]


# --- cleanup --------------------------------------------------------------------------------

def test_scratch_removed_on_error(tmp_path):
    qemu_img()
    before = set(live_dirs(qo.CHAPTER))
    with pytest.raises(Exception, match="failed"):
        with qo.Scratch() as s:
            d = s.dir
            s.run(qo.create_cmd(s.path("x.qcow2"), 512, 4 * MiB), "qemu-img create")
            assert (d / "x.qcow2").exists()
            s.run(["qemu-img", "info", str(s.path("missing.qcow2"))], "qemu-img info")
    assert not d.exists()
    assert set(live_dirs(qo.CHAPTER)) == before


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_collect_interrupted_leaves_nothing(tmp_path, sig):
    """SIGINT/SIGTERM in the middle of a collect: no scratch dir, no qemu-img, no dataset."""
    qemu_img()
    need_preflight(qo)
    before = set(live_dirs(qo.CHAPTER))
    data = tmp_path / "data"
    code = ("import tools.qcow2_overlap as q\n"
            f"q.collect(data_dir={str(data)!r}, profile='quick', repeats=50, rep_budget_s=3600,"
            " prealloc_sizes_512=[64 << 20])\n")
    env = {**os.environ, "PERFBOOK_LOCK": str(tmp_path / "lock")}
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # wait until it is busy (scratch dir exists and a qemu-img is running)
    deadline = time.monotonic() + 30
    mine = []
    while time.monotonic() < deadline:
        mine = [d for d in live_dirs(qo.CHAPTER) if d not in before]
        if mine and _children_of(proc.pid):
            break
        time.sleep(0.05)
    assert mine, "collect never created its scratch directory"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert not any(d.exists() for d in mine), "scratch directory left behind"
    assert _children_of(proc.pid) == []
    assert not _qemu_processes_using(mine)
    runs = data / "runs"  # no dataset, and no half-written one either
    assert not runs.exists() or not any(p.name.startswith(("2", ".tmp-")) for p in runs.rglob("*"))


def _children_of(pid: int) -> list[str]:
    r = subprocess.run(["ps", "-o", "pid=,ppid=,comm=", "-e"], capture_output=True, text=True)
    return [l for l in r.stdout.splitlines()
            if l.split()[1] == str(pid) and l.split()[2] in ("qemu-img", "qemu-io")]


def _qemu_processes_using(dirs) -> list[str]:
    r = subprocess.run(["ps", "-o", "pid=,args=", "-e"], capture_output=True, text=True)
    return [l for l in r.stdout.splitlines()
            if "qemu-" in l and any(str(d) in l for d in dirs)]


# --- a real (quick) collect run ----------------------------------------------------------------

def test_quick_collect(scratch_data):
    qemu_img()
    need_preflight(qo)
    before = set(live_dirs(qo.CHAPTER))
    out = qo.collect(data_dir=scratch_data, profile="quick")
    assert set(live_dirs(qo.CHAPTER)) == before
    p = qo.params("quick")
    # the repetition table: one row per experiment and mode, the warm-up round counted there
    rep = pd.read_csv(out / "repetition.csv")
    n_cases = len(p["prealloc_sizes_512"]) + len(p["prealloc_sizes_64k"])
    assert rep.experiment.nunique() == n_cases + 4  # + create with flushes, 3 write workloads
    assert (rep.warmup == p["rep_warmup"]).all()
    assert set(rep.stopped_by) <= {"ci_target", "time_budget", "max_runs"}
    assert rep.n.between(1, p["rep_max_runs"]).all()
    man = json.loads((out / "manifest.json").read_text())
    assert man["tables"]["prealloc"] > 0 and man["tables"]["writes"] > 0
    assert man["tools"]["qemu-img"].startswith("qemu-img version")
    d = qo.load(scratch_data)
    pre = d["prealloc"]
    p = qo.params("quick")
    assert set(pre["mode"]) == set(qo.MODES)
    pre = pre[pre.command == "resize_no_flush"]
    n_pre = rep[rep.experiment.str.startswith("prealloc")].groupby("experiment").n.first()
    assert len(pre) == int(n_pre.sum()) * len(qo.MODES), "warm-up rounds are not in the table"
    assert pre.groupby(["cluster_size", "image_size"])["repeat"].nunique().sort_values().tolist() \
        == sorted(n_pre.tolist())
    assert (pre.cpu_s > 0).all() and (pre.wall_s > 0).all()
    # every mode produced the same metadata layout
    meta = d["metadata"]
    pm = meta[meta.experiment == "prealloc"]
    assert pm.groupby(["cluster_size", "virtual_size"]).n_active_l2.nunique().eq(1).all()
    ft = qo.formula_table(meta)
    assert (ft.measured_clusters > 0).all()
    ov = qo.overhead(pre, ["cluster_size", "image_size", "mode"])
    assert set(ov["mode"]) == set(qo.MODES)
    assert ov.extra_ci_low.le(ov.extra_ci_high).all()
    assert qo_children_none()


def qo_children_none() -> bool:
    return qemu_children() == []


# --- analysis on canned input and on the committed data (runs everywhere) ----------------------

PERF_TEXT = """# Total Lost Samples: 0
#
# Samples: 1K  of event 'cpu-clock:ppp'
# Event count (approx.): 223611750
#
# Overhead  Symbol
# ........  ......
#
    22.15%  [k] finish_task_switch.isra.0
     3.80%  [.] qcow2_check_metadata_overlap
     0.20%  [.] qcow2_pre_write_overlap_check
"""


def test_parse_perf_report():
    shares, event, total = qo.parse_perf_report(PERF_TEXT)
    assert event == "cpu-clock:ppp" and total == 1000  # no -n counts: the header's 1K
    shares, _, total = qo.parse_perf_report(PERF_TEXT.replace("22.15%", "22.15%    1107")
                                            .replace("3.80%", "3.80%     190"))
    assert total == 1297 and shares["qcow2_check_metadata_overlap"] == pytest.approx(3.80)
    assert shares["qcow2_check_metadata_overlap"] == pytest.approx(3.80)
    assert shares["qcow2_pre_write_overlap_check"] == pytest.approx(0.20)
    assert shares["_top"] == "finish_task_switch.isra.0"


def test_overhead_is_a_rank_comparison_against_none():
    import numpy as np
    rng = np.random.default_rng(3)
    rows = [{"host_id": "h", "case": 1, "mode": m, "cpu_s": base * (1 + rng.normal(0, 0.01))}
            for m, base in (("none", 1.0), ("constant", 1.0), ("cached", 1.3)) for _ in range(8)]
    ov = qo.overhead(pd.DataFrame(rows), ["host_id", "case", "mode"]).set_index("mode")
    assert ov.loc["cached", "extra"] == pytest.approx(0.3, abs=0.03)
    assert ov.loc["cached", "significant"] and ov.loc["cached", "extra_ci_low"] > 0
    assert not ov.loc["constant", "significant"]
    assert "not significant" in ov.loc["constant", "verdict"]


def test_host_comparison_and_caption(tmp_path):
    """A second host (a copy of a dataset under another id) shows up side by side."""
    d0 = qo.load()
    if not d0["manifests"]:
        pytest.skip("no committed qcow2_overlap dataset")
    import shutil
    from tools.paths import data_dir
    src = data_dir() / "runs" / d0["manifests"][0]["host"]["host_id"] / qo.CHAPTER / d0["manifests"][0]["run_id"]
    dst = tmp_path / "runs" / "h-00000000fa4e" / qo.CHAPTER / "20300101T000000Z"
    shutil.copytree(src, dst)
    man = json.loads((dst / "manifest.json").read_text())
    man["host"]["host_id"], man["run_id"] = "h-00000000fa4e", dst.name
    (dst / "manifest.json").write_text(json.dumps(man))
    shutil.copytree(src, tmp_path / "runs" / d0["manifests"][0]["host"]["host_id"] / qo.CHAPTER / src.name)
    d = qo.load(tmp_path)
    assert qo.shown(d["prealloc"], d["manifests"]).host_id.nunique() == 2
    hc = qo.host_comparison(d)
    assert len(hc) and not hc["significant"].any(), "the same runs under two ids: no difference"
    cap = qo.caption_for(d["writes"], d["manifests"], "CPU", by=["host_id", "workload", "mode"])
    assert "h-00000000fa4e" in cap and "runs per group" in cap


def test_committed_data_tells_a_consistent_story():
    d = qo.load()
    if not d["manifests"]:
        pytest.skip("no committed qcow2_overlap dataset yet (python -m tools measure --chapters qcow2_overlap)")
    h = qo.headline(d)
    # the formula with IS = virtual size is a close upper estimate of L2 tables + refblocks
    assert 0.95 < h["formula_ratio_min"] <= h["formula_ratio_max"] < 1.1
    # reference figures come from the seed's table, not from the code
    assert h["seed_pct_create"] == pytest.approx(48.91)
    ft = qo.formula_table(qo.this_run(d["metadata"], qo.latest(d["manifests"])))
    assert (ft.l2_tables > 0).all()
    ref = d["reference"]
    assert {"seed_file", "title", "date", "environment", "note"} <= set(ref.columns)
    assert (ref.seed_file == qo.SEED).all()



def _committed_or_skip() -> dict:
    d = qo.load()
    if not d["manifests"]:
        pytest.skip("no committed qcow2_overlap dataset yet (python -m tools measure --chapters qcow2_overlap)")
    return d


def test_headline_skips_a_size_that_stopped_with_one_run():
    """The largest 512 B size stopped on its time budget after one run (n = 1 per mode):
    overhead() drops it, so headline() quotes the next size and says so."""
    d = _committed_or_skip()
    m = qo.latest(d["manifests"])
    pre = d["prealloc"]
    mine = (pre.host_id == m["host"]["host_id"]) & (pre.run_id == m["run_id"])
    rs = mine & (pre.command == "resize_no_flush") & (pre.cluster_size == 512)
    sizes = sorted(pre[rs].image_size.unique())
    assert len(sizes) >= 2
    big = rs & (pre.image_size == sizes[-1])
    first = pre[big].groupby("mode")["repeat"].transform("min")
    drop = pre[big].index[pre.loc[big, "repeat"] != first]
    d = {**d, "prealloc": pre.drop(index=drop)}
    assert d["prealloc"][big.reindex(d["prealloc"].index)].groupby("mode").size().eq(1).all()
    h = qo.headline(d)
    assert h["pre_big_mib"] == sizes[-2] // MiB
    assert h["pre_max_mib"] == sizes[-1] // MiB
    assert f"{sizes[-1] // MiB} MiB" in h["pre_big_note"] and f"{sizes[-2] // MiB} MiB" in h["pre_big_note"]
    assert h["pre_n"] >= 2
    # with every run the largest size is the one quoted, and nothing to explain
    h0 = qo.headline(_committed_or_skip())
    assert h0["pre_big_mib"] == h0["pre_max_mib"] == sizes[-1] // MiB and h0["pre_big_note"] == ""


def test_headline_floats_are_rounded_to_the_digits_shown():
    """nbval compares a glued float's full repr; headline() rounds each float to the decimals
    the chapter shows, so a last-digit difference between numpy builds can't fail it."""
    import re
    d = _committed_or_skip()
    h = qo.headline(d)
    assert h["pre_slope"] == round(h["pre_slope"], 1)  # shown as :.1f; was 1.3914918610261091
    nb = json.loads((ROOT / "chapters" / "qcow2_overlap.ipynb").read_text())
    shown: dict[str, int] = {}
    for c in nb["cells"]:
        if c["cell_type"] == "markdown":
            for k, n in re.findall(r"\{glue(?::text)?\}`(\w+):\.(\d+)f`", "".join(c["source"])):
                shown[k] = max(shown.get(k, 0), int(n))
    assert "pre_slope" in shown
    for k, n in shown.items():
        if isinstance(h.get(k), float):
            assert qo.GLUE_DIGITS.get(k, qo.GLUE_DEFAULT_DIGITS) >= n, k
    for k, v in h.items():
        if isinstance(v, float) and v == v:
            digits = qo.GLUE_DIGITS.get(k, qo.GLUE_DEFAULT_DIGITS)
            assert v == round(v, digits), (k, v)
            assert len(repr(v).partition(".")[2]) <= max(digits, 1), (k, v)

def test_failing_qemu_img_leaves_no_dataset(tmp_path, monkeypatch):
    """A qemu-img that fails mid-run: one-line error, no dataset, no scratch directory."""
    qemu_img()
    need_preflight(qo)
    monkeypatch.setenv("PERFBOOK_LOCK", str(tmp_path / "lock"))  # fails within a second
    monkeypatch.setattr(qo, "prealloc_cmd", lambda path, size, mode: ["qemu-img", "resize", "--no-such-option"])
    before = set(live_dirs(qo.CHAPTER))
    data = tmp_path / "data"
    with pytest.raises(qo.PerfbookError) as e:
        qo.collect(data_dir=data, profile="quick")
    assert "failed (exit" in str(e.value) and "\n" not in str(e.value)
    assert set(live_dirs(qo.CHAPTER)) == before
    runs = data / "runs"
    assert not runs.exists() or not any(p.name.startswith(("2", ".tmp-")) for p in runs.rglob("*"))


def test_shift_and_median_labels_state_the_real_coverage():
    """The caption's HL bars and plot_modes' axis say what the intervals really cover."""
    import matplotlib
    matplotlib.use("Agg")
    rows = [{"cluster_size": 512, "image_size": 1 << 20, "mode": mode, "repeat": r,
             "cpu_s": 1.0 + 0.1 * r + (0.5 if mode != "none" else 0.0)}
            for mode in ("none", "cached", "all") for r in range(3)]
    ov = qo.overhead(pd.DataFrame(rows), ["cluster_size", "image_size", "mode"])
    assert (ov["n"] == 3).all() and (ov["n_none"] == 3).all()
    assert qo.shift_ci_label(ov) == "90 % CI"            # 3 vs 3: [min, max] of the differences
    text = qo.prealloc_bars_text(ov)
    assert "90 % CI" in text and "95" not in text
    assert qo.shift_ci_label(ov.drop(columns="n_none")) == "CI of unknown coverage"
    summ = pd.DataFrame([{"metric": "cpu_s", "mode": m, "workload": "w", "median": 1.0, "ci_low": 0.9,
                          "ci_high": 1.1, "n": n} for m, n in (("none", 3), ("cached", 6))])
    g = qo.plot_modes(summ)
    assert g.axes.flat[0].get_ylabel() == "CPU s per run (median, 75–96.87 % CI)"
