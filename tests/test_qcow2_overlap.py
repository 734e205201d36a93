"""Tests of the qcow2 reader (tools/perfbook/probes/qcow2.py) and the qcow2_overlap chapter
(tools/perfbook/chapters/qcow2_overlap). Its behaviour under signals is tests/test_contract.py's."""

from __future__ import annotations

import json
import os
import subprocess

import pandas as pd
import pytest

from conftest import ROOT, need_preflight, need_tool
from perfbook.analysis.decide import FAILS, HOLDS, UNDECIDED
from perfbook.chapters import qcow2_overlap as qo
from perfbook.chapters.qcow2_overlap import analysis, collect, figures, parse, prose, tables
from perfbook.chapters.qcow2_overlap import key_findings as kf
from perfbook.chapters.qcow2_overlap.parse import parse_perf_report
from perfbook.core.errors import ParameterError, PerfbookError
from perfbook.data.dataset import Data, table_path
from perfbook.framework import sequence as framework
from perfbook.hoststate.scratch import live_dirs
from perfbook.probes.qcow2 import Qcow2Image, formula_bytes, formula_clusters, parse_header

CH = qo.chapter

MiB = 1 << 20


def qemu_img() -> str:
    return need_tool("qemu-img", "qemu-utils")


def run(*cmd):
    subprocess.run(list(map(str, cmd)), check=True, capture_output=True)


def info(path) -> dict:
    r = subprocess.run(
        ["qemu-img", "info", "--output=json", str(path)], check=True, capture_output=True, text=True
    )
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
    run(
        "qemu-img",
        "create",
        "-q",
        "-f",
        "qcow2",
        "-o",
        f"cluster_size={cs},preallocation=metadata",
        img,
        size,
    )
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
    r = subprocess.run(
        ["qemu-img", "map", "--output=json", str(img)], check=True, capture_output=True, text=True
    )
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
    r = subprocess.run(
        ["qemu-img", "map", "--output=json", str(img)], check=True, capture_output=True, text=True
    )
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
    run(
        "qemu-img",
        "create",
        "-q",
        "-f",
        "qcow2",
        "-o",
        f"extended_l2=on,cluster_size={cs}",
        img,
        4 * MiB,
    )
    run(
        "qemu-io",
        "-c",
        f"write -P 0x5a {sc} {sc}",  # subcluster 1 of cluster 0
        "-c",
        f"write -z {4 * sc} {sc}",  # subcluster 4: reads as zero
        "-c",
        f"write -P 0x33 {cs + 3 * sc} {2 * sc}",
        "-c",
        f"write -z {2 * cs} {cs}",  # a whole zero cluster
        "-c",
        f"write -P 0x77 {MiB + 31 * sc} {sc}",  # the last subcluster
        img,
    )
    q = Qcow2Image(img)
    assert q.guest_to_host(0) is None  # host cluster allocated, subcluster 0 is not
    assert q.guest_to_host(4 * sc) is None  # reads as zero
    assert q.header.extended_l2 and q.header.l2_entries == cs // 16
    assert q.guest_status(0) == ("unallocated", None)  # allocated cluster, free subcluster
    assert q.guest_status(4 * sc) == ("zero", None)
    kinds = _assert_reader_agrees_with_map(q, img, sc)
    assert kinds == {"data", "zero", "unallocated"}
    with open(img, "rb") as f:
        for off, byte in ((sc, 0x5A), (cs + 4 * sc, 0x33), (MiB + 31 * sc, 0x77)):
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
    assert formula_clusters(2**40, 65536) == pytest.approx(2560.0)
    assert formula_bytes(2**40, 65536) == pytest.approx(10 * 1024)  # "10 kB for 1 TB"


# --- parameters -------------------------------------------------------------------------


def test_params_defaults_and_baseline():
    p = CH.parameters("quick")
    assert p["modes"] == list(parse.MODES)
    assert CH.parameters("quick", modes="cached")["modes"] == ["none", "cached"]
    assert CH.parameters("quick", modes=["all", "cached", "all"])["modes"] == [
        "none",
        "cached",
        "all",
    ]
    assert CH.parameters("quick", prealloc_sizes_512=8 * MiB)["prealloc_sizes_512"] == [8 * MiB]
    assert CH.parameters("quick", prealloc_sizes_512=f"{16 * MiB},{8 * MiB}")[
        "prealloc_sizes_512"
    ] == [8 * MiB, 16 * MiB]
    fixed = CH.parameters("default", repeats=3)  # a fixed number of rounds, as before
    assert fixed["rep_min_runs"] == fixed["rep_max_runs"] == 3
    assert CH.parameters("default")["rep_target"] == 0.05


@pytest.mark.parametrize(
    "over,match",
    [
        ({"modes": "fast"}, "unknown modes fast"),
        ({"modes": ""}, "modes: an empty list"),
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
        ({"perf_prealloc_size": 0}, "perf_prealloc_size must be"),
        ({"prealloc_sizes_512": []}, "prealloc_sizes_512 must be"),
        ({"prealloc_sizes_512": [12345]}, "prealloc_sizes_512 must be"),
        ({"prealloc_sizes_64k": [True]}, "prealloc_sizes_64k must be"),
        ({"formula_sizes_512": [16 << 30]}, "take hours"),
        ({"colour": 1}, "unknown parameter 'colour'"),
    ],
)
def test_params_rejects_bad_input(over, match):
    with pytest.raises(ParameterError, match=match) as e:
        CH.parameters("quick", **over)
    assert "\n" not in str(e.value)


def test_bad_profile_and_no_dataset(tmp_path):
    with pytest.raises(ParameterError, match="profile must be"):
        framework.collect(CH, "huge", tmp_path)
    with pytest.raises(ParameterError):
        framework.collect(CH, "quick", tmp_path, modes="turbo")
    assert not (tmp_path / "runs").exists()


def test_missing_qemu_img_is_a_prerequisite(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no qemu-img on this PATH
    assert any("qemu-img is not installed" in r for r in CH.preflight())
    said = []
    assert framework.collect(CH, "quick", tmp_path, say=said.append) is None
    assert said and said[0].startswith("SKIPPED:") and "apt-get install qemu-utils" in said[0]
    assert not (tmp_path / "runs").exists()


def test_image_opts_syntax_is_accepted(tmp_path):
    """The option string we build is what the installed QEMU parses."""
    qemu_img()
    img = tmp_path / "o.qcow2"
    run("qemu-img", "create", "-q", "-f", "qcow2", img, MiB)
    for mode in parse.MODES:
        run("qemu-img", "info", "--image-opts", collect.image_opts(img, mode))
    r = subprocess.run(
        ["qemu-img", "info", "--image-opts", collect.image_opts(img, "sometimes")],
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0 and "overlap" in r.stderr.lower()


def test_perf_symbol_check_says_why():
    c = collect.perf_symbol_check()
    assert c["symbol"] == "qcow2_check_metadata_overlap"
    assert c["resolvable"] or c["reason"]


# --- cleanup --------------------------------------------------------------------------------


def test_runner_error_is_one_line_and_undo_removes_everything(tmp_path):
    """A failing child is one PerfbookError line; the undo stack (as the framework unwinds
    it) kills a child still running and removes the scratch directory."""
    from contextlib import ExitStack

    from perfbook.hoststate.scratch import Scratch

    qemu_img()
    before = set(live_dirs(CH.name))
    with pytest.raises(PerfbookError, match="failed") as e:
        with ExitStack() as undo:
            s = collect.Runner(undo.enter_context(Scratch(CH.name)))
            undo.callback(s.close)
            d = s.dir
            s.run(collect.create_cmd(s.path("x.qcow2"), 512, 4 * MiB), "qemu-img create")
            assert (d / "x.qcow2").exists()
            sleeper = subprocess.Popen(["sleep", "4242"], start_new_session=True)
            s.children.add(sleeper)  # as if a run were under way when the error came
            s.run(["qemu-img", "info", str(s.path("missing.qcow2"))], "qemu-img info")
    assert "\n" not in str(e.value)
    assert sleeper.poll() is not None, "a child outlived the undo stack"
    assert not d.exists()
    assert set(live_dirs(CH.name)) == before


# --- a real (quick) collect run ----------------------------------------------------------------


def test_quick_collect(scratch_data):
    qemu_img()
    need_preflight(CH)
    before = set(live_dirs(CH.name))
    out = framework.collect(CH, "quick", scratch_data, say=lambda s: None)
    assert set(live_dirs(CH.name)) == before
    p = CH.parameters("quick")
    # the repetition table: one row per experiment and mode, the warm-up round counted there
    rep = pd.read_csv(table_path(out, "repetition"))
    n_cases = len(p["prealloc_sizes_512"]) + len(p["prealloc_sizes_64k"])
    assert rep.experiment.nunique() == n_cases + 4  # + create with flushes, 3 write workloads
    assert (rep.warmup == p["rep_warmup"]).all()
    assert set(rep.stopped_by) <= {"ci_target", "time_budget", "max_runs"}
    assert rep.n.between(1, p["rep_max_runs"]).all()
    man = json.loads((out / "manifest.json").read_text())
    assert man["tables"]["prealloc"] > 0 and man["tables"]["writes"] > 0
    assert man["tools"]["qemu-img"].startswith("qemu-img version")
    assert man["profile"] == "quick" and "profile" not in man["parameters"]
    assert man["facts"]["scratch"]["filesystem"] and "resolvable" in man["facts"]["perf_symbols"]
    assert not any("still present" in n for n in man["notes"]), man["notes"]
    D = CH.load(scratch_data)
    pre = D["prealloc"]
    assert set(pre["mode"]) == set(parse.MODES)
    pre = pre[pre.command == "resize_no_flush"]
    n_pre = rep[rep.experiment.str.startswith("prealloc")].groupby("experiment").n.first()
    assert len(pre) == int(n_pre.sum()) * len(parse.MODES), "warm-up rounds are not in the table"
    assert pre.groupby(["cluster_size", "image_size"])[
        "repeat"
    ].nunique().sort_values().tolist() == sorted(n_pre.tolist())
    assert (pre.cpu_s > 0).all() and (pre.wall_s > 0).all()
    # every mode produced the same metadata layout
    meta = D["metadata"]
    pm = meta[meta.experiment == "prealloc"]
    assert pm.groupby(["cluster_size", "virtual_size"]).n_active_l2.nunique().eq(1).all()
    ft = analysis.formula_table(meta)
    assert (ft.measured_clusters > 0).all()
    ov = analysis.overhead(pre, ["cluster_size", "image_size", "mode"])
    assert set(ov["mode"]) == set(parse.MODES)
    assert ov.extra_ci_low.le(ov.extra_ci_high).all()
    assert qemu_children() == []


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
    shares, event, total = parse_perf_report(PERF_TEXT)
    assert event == "cpu-clock:ppp" and total == 1000  # no -n counts: the header's 1K
    shares, _, total = parse_perf_report(
        PERF_TEXT.replace("22.15%", "22.15%    1107").replace("3.80%", "3.80%     190")
    )
    assert total == 1297 and shares["qcow2_check_metadata_overlap"] == pytest.approx(3.80)
    assert shares["qcow2_pre_write_overlap_check"] == pytest.approx(0.20)
    assert shares["_top"] == "finish_task_switch.isra.0"
    assert parse_perf_report("") == ({"_top": ""}, "", 0)


def test_overhead_is_a_rank_comparison_against_none():
    import numpy as np

    rng = np.random.default_rng(3)
    rows = [
        {"host_id": "h", "case": 1, "mode": m, "cpu_s": base * (1 + rng.normal(0, 0.01))}
        for m, base in (("none", 1.0), ("constant", 1.0), ("cached", 1.3))
        for _ in range(8)
    ]
    ov = analysis.overhead(pd.DataFrame(rows), ["host_id", "case", "mode"]).set_index("mode")
    assert ov.loc["cached", "extra"] == pytest.approx(0.3, abs=0.03)
    assert ov.loc["cached", "significant"] and ov.loc["cached", "extra_ci_low"] > 0
    assert not ov.loc["constant", "significant"]
    assert "not significant" in ov.loc["constant", "verdict"]


def _book(book_data):
    """The chapter's Data on the book's data (conftest.book_data: whichever host is this host)."""
    D = CH.load(book_data.data_dir)
    if not D.manifests:
        pytest.skip(
            "no committed qcow2_overlap dataset yet (python -m perfbook measure --chapters qcow2_overlap)"
        )
    return D


def _compared(D) -> bool:
    """Whether the quoted dataset has a case with two runs of a mode and of none (overhead())."""
    return len(analysis.dataset_overhead(D, "prealloc", D.quoted.key)) > 0


def test_host_comparison_and_caption(tmp_path, book_data):
    """A second host (a copy of a dataset under another id) shows up side by side: the same runs
    under two ids differ nowhere, or, with one run per mode, are not compared (and say so)."""
    import shutil

    D0 = _book(book_data)
    m0 = D0.quoted
    dst = tmp_path / "runs" / "h-00000000fa4e" / CH.name / "20300101T000000Z"
    shutil.copytree(m0.path, dst)
    man = json.loads((dst / "manifest.json").read_text())
    man["host"]["host_id"], man["run_id"] = "h-00000000fa4e", dst.name
    man["parameters"].pop("profile", None)  # the copy records no profile (schema 1 kept it here,
    man["profile"] = None  # schema 2 at the top): the original is quoted
    (dst / "manifest.json").write_text(json.dumps(man))
    shutil.copytree(m0.path, tmp_path / "runs" / m0.host_id / CH.name / m0.path.name)
    D = CH.load(tmp_path)
    assert D.quoted.key == m0.key
    assert D.of_shown(D["prealloc"]).host_id.nunique() == 2
    hc = analysis.host_comparison(D)
    if _compared(D):
        assert len(hc) and not hc["significant"].any(), "the same runs under two ids: no difference"
        assert (
            prose.host_sentence(D)
            == f"0 of {len(hc)} case-and-mode comparisons differ significantly between hosts."
        )
    else:  # one run per mode: the same cases, none compared, and the sentence says why
        assert hc.empty and "fewer than 2 runs per case and mode" in prose.host_sentence(D)
    cap = analysis.caption_for(D["writes"], D.manifests, "CPU", by=["host_id", "workload", "mode"])
    assert "h-00000000fa4e" in cap and "runs per group" in cap
    assert set(tables.parameters_table(D).columns) == {
        f"{m0.host_id} {m0.run_id}",
        f"h-00000000fa4e {dst.name}",
    }


def test_committed_data_tells_a_consistent_story(book_data):
    D = _book(book_data)
    h = prose.headline(D)
    # the formula with IS = virtual size is a close upper estimate of L2 tables + refblocks
    assert 0.95 < h["formula_ratio_min"] <= h["formula_ratio_max"] < 1.1
    # reference figures come from the seed's table, not from the code
    assert h["seed_pct_create"] == pytest.approx(48.91)
    ft = analysis.formula_table(D.of_quoted(D["metadata"]))
    assert (ft.l2_tables > 0).all()
    ref = D.reference("qcow2_overlap")
    assert {"seed_file", "title", "date", "environment", "note"} <= set(ref.columns)
    assert (ref.seed_file == parse.SEED).all()
    nm = tables.not_measured(D)
    assert set(zip(nm.host, nm.run)) == {m.key for m in D.manifests}
    assert (nm[nm.what == "perf event"].why != "none").all()


class _FirstRunOnly(Data):
    """The datasets, with the largest 512 B preallocation size of `run` cut to one run per mode."""

    def __getitem__(self, name):
        df = super().__getitem__(name)
        if name != "prealloc":
            return df
        q = self.quoted
        rs = (
            (df.host_id == q.host_id)
            & (df.run_id == q.run_id)
            & (df.command == "resize_no_flush")
            & (df.cluster_size == 512)
        )
        big = rs & (df.image_size == df[rs].image_size.max())
        first = df[big].groupby("mode")["repeat"].transform("min")
        return df.drop(index=df[big].index[df.loc[big, "repeat"] != first])


def _largest_compared(pre) -> int | None:
    """The largest 512 B resize_no_flush size of one dataset's prealloc rows at which every mode
    has two runs or more (what overhead() compares), None if none has."""
    rs = pre[(pre.command == "resize_no_flush") & (pre.cluster_size == 512)]
    runs = rs.groupby(["image_size", "mode"])["repeat"].nunique().groupby("image_size").min()
    ok = runs[runs >= 2]
    return int(ok.index.max()) if len(ok) else None


def test_headline_skips_a_size_that_stopped_with_one_run(book_data):
    """The largest 512 B size stopped on its time budget after one run (n = 1 per mode):
    overhead() drops it, so headline() quotes the largest size that has two runs and says so.
    The sizes come from the quoted dataset: after a reader's make all it is theirs, whose own
    largest size may already have stopped after one run."""
    D0 = _book(book_data)
    pre = D0.of_quoted(D0["prealloc"])
    sizes = sorted(
        pre[(pre.command == "resize_no_flush") & (pre.cluster_size == 512)].image_size.unique()
    )
    assert len(sizes) >= 2
    if not _compared(D0):
        pytest.skip(
            f"the quoted dataset of the {book_data} data has one run per mode at every size: "
            "test_one_run_per_mode_is_quoted_as_not_compared covers it"
        )
    D = _FirstRunOnly(CH, book_data.data_dir)
    cut = D.of_quoted(D["prealloc"])
    assert (
        cut[
            (cut.image_size == sizes[-1])
            & (cut.cluster_size == 512)
            & (cut.command == "resize_no_flush")
        ]
        .groupby("mode")
        .size()
        .eq(1)
        .all()
    )
    for data, rows in ((D, cut), (D0, pre)):
        h, big = prose.headline(data), _largest_compared(rows)
        if big is None:
            continue
        assert h["pre_max_mib"] == sizes[-1] // MiB and h["pre_big_mib"] == big // MiB
        if big == sizes[-1]:  # the largest size is the one quoted: nothing to explain
            assert h["pre_big_note"] == ""
        else:
            assert (
                f"{sizes[-1] // MiB} MiB" in h["pre_big_note"]
                and f"{big // MiB} MiB" in h["pre_big_note"]
            )
        assert h["pre_n"] >= 2
    assert _largest_compared(cut) != sizes[-1], "the cut left two runs at the largest size"


def test_findings_are_what_the_prose_shows(book_data):
    """Every {glue:text} name in the chapter is glued (its prose values, or the frame's),
    as text formatted the way the prose shows it, or as an int: never a float, whose
    repr would carry digits the page does not show."""
    import re

    D = _book(book_data)
    f, h = prose.values(D), prose.headline(D)
    nb = json.loads((ROOT / "chapters" / "qcow2_overlap.ipynb").read_text())
    refs = set()
    for c in nb["cells"]:
        if c["cell_type"] == "markdown":
            refs |= set(re.findall(r"\{glue:text\}`([^`]+)`", "".join(c["source"])))
    assert refs and all(re.fullmatch(r"\w+", r) for r in refs), "a format spec is left in the prose"
    from perfbook.book.notebook import frame_glue

    missing = refs - set(f) - frame_glue(qo.chapter, nb)
    assert not missing, missing
    assert not [k for k, v in f.items() if isinstance(v, float)]
    for k, fmt in prose.FORMATS.items():  # a value the dataset does not define is not glued
        assert f[k] == format(h[k], fmt) if k in h and h[k] == h[k] else k not in f, k
    if _compared(D):
        if h["pre_k"] == h["pre_k"]:  # an exponent needs two sizes with a positive extra
            assert f["pre_k"] == f"{h['pre_k']:.2f}" and "." in f["pre_k"]
        assert "R²" not in f["pre_fit_sentence"]
        assert "median of" in f["pre_fit_sentence"] or "no round" in f["pre_fit_sentence"]
        assert f["pre_big_sentence"].startswith(
            f"At {h['pre_big_mib']} MiB the default mode `cached` needed "
        )
    else:
        assert (
            "pre_k" not in f
            and "no shift of `cached` over `none` to quote" in f["pre_big_sentence"]
        )


def test_failing_qemu_img_leaves_no_dataset(tmp_path, monkeypatch):
    """A qemu-img that fails mid-run: one-line error, no dataset, no scratch directory."""
    qemu_img()
    need_preflight(CH)
    monkeypatch.setenv("PERFBOOK_LOCK", str(tmp_path / "lock"))  # fails within a second
    monkeypatch.setattr(
        collect, "prealloc_cmd", lambda path, size, mode: ["qemu-img", "resize", "--no-such-option"]
    )
    before = set(live_dirs(CH.name))
    data = tmp_path / "data"
    with pytest.raises(PerfbookError) as e:
        framework.collect(CH, "quick", data, say=lambda s: None)
    assert "failed (exit" in str(e.value) and "\n" not in str(e.value)
    assert set(live_dirs(CH.name)) == before
    runs = data / "runs"
    assert not runs.exists() or not any(p.name.startswith(("2", ".tmp-")) for p in runs.rglob("*"))
    assert qemu_children() == []


def test_shift_and_median_labels_state_the_real_coverage():
    """The caption's HL bars and plot_modes' axis say what the intervals really cover."""
    import matplotlib

    matplotlib.use("Agg")
    rows = [
        {
            "cluster_size": 512,
            "image_size": 1 << 20,
            "mode": mode,
            "repeat": r,
            "cpu_s": 1.0 + 0.1 * r + (0.5 if mode != "none" else 0.0),
        }
        for mode in ("none", "cached", "all")
        for r in range(3)
    ]
    ov = analysis.overhead(pd.DataFrame(rows), ["cluster_size", "image_size", "mode"])
    assert (ov["n"] == 3).all() and (ov["n_none"] == 3).all()
    assert analysis.shift_ci_label(ov) == "90 % CI"  # 3 vs 3: [min, max] of the differences
    text = analysis.prealloc_bars_text(ov)
    assert "90 % CI" in text and "95" not in text
    assert analysis.shift_ci_label(ov.drop(columns="n_none")) == "CI of unknown coverage"
    summ = pd.DataFrame(
        [
            {
                "metric": "cpu_s",
                "mode": m,
                "workload": "w",
                "median": 1.0,
                "ci_low": 0.9,
                "ci_high": 1.1,
                "n": n,
            }
            for m, n in (("none", 3), ("cached", 6))
        ]
    )
    g = figures.plot_modes(summ)
    assert g.axes.flat[0].get_ylabel() == "CPU s per run\n(median, 75–96.87 % CI)"


def test_figures_have_captions_from_the_data(book_data):
    import matplotlib

    matplotlib.use("Agg")
    D = _book(book_data)
    for make in (figures.prealloc, figures.modes, figures.formula):
        fig, cap = make(D)
        assert fig.axes and cap and "host" in cap


def test_power_law_fit_describes_its_points_and_refuses_to_extrapolate():
    """fit_power_law: least squares in log-log space through the sizes' positive shifts, a
    description with no interval and no R² (the old fit claimed a t interval and "R² 1.00" from
    three points); a shift <= 0 is left out and counted; a size outside the fitted range is
    refused (the old fit carried the line 8× beyond its largest size)."""
    import numpy as np

    rng = np.random.default_rng(7)
    sizes = [64 * MiB, 128 * MiB, 256 * MiB, 512 * MiB, 1024 * MiB]
    rows = [
        {
            "cluster_size": 512,
            "image_size": z,
            "mode": "cached",
            "extra": 3e-14 * z**1.4 * float(np.exp(rng.normal(0, 0.05))),
        }
        for z in sizes
    ]
    ov = pd.DataFrame(rows)
    f = analysis.fit_power_law(ov, at=512 * MiB)
    assert f["n"] == 5 and f["dropped"] == 0
    assert f["k"] == pytest.approx(1.4, abs=0.1)
    assert not {"k_lo", "k_hi", "r2", "pred_lo", "pred_hi"} & set(f)  # no claim it cannot back
    assert f["pred"] == pytest.approx(3e-14 * (512 * MiB) ** 1.4, rel=0.2)
    for beyond in (4096 * MiB, 2 * 1024 * MiB, 32 * MiB):  # outside 64-1024 MiB: refused
        with pytest.raises(ValueError, match="no extrapolation"):
            analysis.fit_power_law(ov, at=beyond)
        with pytest.raises(ValueError, match="no extrapolation"):
            analysis.predict(f, beyond)
    three = analysis.fit_power_law(ov.iloc[:3])
    assert three["n"] == 3 and three["hi"] == 256 * MiB and not {"k_lo", "r2"} & set(three)
    ov.loc[0, "extra"] = -0.01
    f = analysis.fit_power_law(ov)
    assert f["n"] == 4 and f["dropped"] == 1 and f["lo"] == 128 * MiB
    with pytest.raises(ValueError):  # the size left out is outside the fit too
        analysis.predict(f, 64 * MiB)


class _SeedAt512(Data):
    """The committed data with the seed's dd figure said to be at 512-byte clusters."""

    def reference(self, name, dtype=None):
        ref = super().reference(name, dtype)
        ref.loc[ref.experiment == "guest_dd_64k", "cluster_size"] = 512
        return ref


def test_dd_comparison_shows_both_cluster_sizes_and_says_when_they_differ(book_data):
    """The seed's dd share is at 64 KiB clusters (assumed, data/reference says so); ours at the
    cluster size the writes table records: not like with like, and the prose says why."""
    D = _book(book_data)
    ref = D.reference("qcow2_overlap")
    assert ref.cluster_size_basis.notna().all()
    assert ref[ref.experiment == "guest_dd_64k"].cluster_size_basis.str.startswith("assumed").all()
    f = prose.values(D)
    assert f["seed_dd_cluster"] == "64 KiB" and f["al_cluster"] == "512 B"
    assert "not a like-with-like comparison" in f["dd_sentence"] and "assumed" in f["dd_sentence"]
    t = tables.comparison_table(D).set_index("workload")
    row = t.loc["sequential 64 KiB writes that allocate"]
    assert row["seed cluster size"] == "64 KiB (assumed)" and row["our cluster size"] == "512 B"
    assert row["same cluster size"].startswith("no")
    assert t.loc["metadata preallocation", "same cluster size"] == "yes"
    same = prose.values(_SeedAt512(CH, book_data.data_dir))
    assert "like with like" in same["dd_sentence"] and "not a like" not in same["dd_sentence"]


def _measured_mib(D) -> set:
    """The largest 512-byte-cluster size (MiB) of every dataset with preallocations."""
    pre = D["prealloc"]
    pre = pre[pre.cluster_size == 512]
    return set((pre.groupby(["host_id", "run_id"]).image_size.max() // MiB).astype(float))


def _prealloc_drawable(D, host) -> bool:
    """Whether the prealloc figure has a point for `host`: a run of it the figure shows with a
    positive shift of cached over none at 512-byte clusters (a shift of zero or below has no
    place on its log axis; the caption counts those)."""
    from perfbook.analysis import fleetview

    measured = sorted(analysis.measured_datasets(D, "prealloc"))
    keep = fleetview.runs(D, fleetview.fleet(D, {h for h, _ in measured}))
    for key in (k for k in measured if k[0] == host and k in keep):
        ov = analysis.dataset_overhead(D, "prealloc", key)
        if (
            not ov.empty
            and ((ov.cluster_size == 512) & (ov["mode"] == "cached") & (ov.extra > 0)).any()
        ):
            return True
    return False


def test_prealloc_figure_marks_this_host_pools_the_others_and_draws_the_fitted_model(book_data):
    """This host and the reference host have an entry each (one when they are one host), or the
    caption says that one has nothing to draw; every other host is pooled in "other hosts
    (n = K)", K their number (all of them measured preallocations); no other host is named."""
    import matplotlib

    matplotlib.use("Agg")
    from conftest import legend_texts
    from perfbook.analysis import fleetview

    D = _book(book_data)
    fig, cap = figures.prealloc(D)
    labels = legend_texts(fig)
    F = fleetview.fleet(D)
    assert F.this == D.quoted.host_id
    for role, host in ((fleetview.THIS, F.this), (fleetview.REFERENCE, F.reference)):
        if role == fleetview.REFERENCE and F.reference == F.this:
            assert not any(x.startswith("reference host") for x in labels)
            continue
        if not _prealloc_drawable(D, host):
            assert f"({host}): no mark, it has nothing to draw here" in cap, cap
            assert not any(x.startswith(role) for x in labels), labels
        else:
            assert F.label(role) in labels, (role, labels)
    others = sorted(set(D.hosts) - {F.this, F.reference})
    if others:  # every other host in one entry, whatever their number
        assert (
            F.label(fleetview.OTHER) in labels
            and F.label(fleetview.OTHER) == f"other hosts (n = {len(others)})"
        )
    named = {h for h in D.hosts if any(h in x for x in labels)}
    assert named <= {F.this, F.reference}, labels
    if any(m["host"].get("virtualization") == "qemu" for m in D.manifests):
        assert "TCG guest" in cap
    # the lines stop at the sizes measured: nothing extrapolated, no quadratic carried on
    assert not any("extrapolat" in x or "quadratic" in x for x in labels), labels
    assert "extrapolat" not in cap and "R²" not in cap
    import numpy as np

    top = max(_measured_mib(D)) * 1.07  # each host's points are set up to 6 % apart
    for ax in fig.axes:
        for line in ax.get_lines():
            x = np.asarray(line.get_xdata(), float)
            assert len(x) < 2 or x.max() <= top, (x.max(), top)


class _OneRunPerMode(Data):
    """The data, with every dataset of the quoted host cut to its first run of every mode in
    every case (what a default run gives on a machine whose time budget allows one run per
    mode: a TCG guest's). Every one: a figure draws each counted run of this host, and after a
    reader's make all this host has two (the committed one and theirs, disturbed or not)."""

    def __getitem__(self, name):
        df = super().__getitem__(name)
        if name not in ("prealloc", "writes") or not len(df):
            return df
        mine = df.host_id == self.quoted.host_id
        first = df.groupby("run_id")["repeat"].transform("min")
        return df[~mine | (df.repeat == first)].reset_index(drop=True)


def test_one_run_per_mode_is_quoted_as_not_compared():
    """A dataset with one run per mode compares no mode with none: the chapter renders (it
    raised 'no 512-byte-cluster size has >= 2 runs' and, before that, an AttributeError on the
    empty comparison), every value the prose quotes is there, and each sentence says that
    nothing was compared instead of quoting a shift, a 'nan' or an interval."""
    import re

    from conftest import debris

    D = _OneRunPerMode(CH)
    assert not _compared(D) and analysis.dataset_overhead(D, "writes", D.quoted.key).empty
    f = prose.values(D)
    nb = json.loads((ROOT / "chapters" / "qcow2_overlap.ipynb").read_text())
    refs = {
        r
        for c in nb["cells"]
        if c["cell_type"] == "markdown"
        for r in re.findall(r"\{glue:text\}`([^`]+)`", "".join(c["source"]))
    }
    from perfbook.book.notebook import frame_glue

    assert not refs - set(f) - frame_glue(qo.chapter, nb)
    assert not {k: debris(v) for k, v in f.items() if debris(v)}
    for key in (
        "pre_big_sentence",
        "pre_sig_sentence",
        "pre_constant_sentence",
        "ow_cached_sentence",
        "al_cached_sentence",
        "sn_sentence",
        "sn_all_share_sentence",
        "k64_sentence",
    ):
        said = f[key]  # a mode the dataset left out (default: constant) says so instead
        assert "compare" in said or "was not measured" in said, (key, said)
        assert not re.search(r"\d µs|\d s\b", said), (key, said)
    assert "nothing to fit" in f["pre_fit_sentence"] and "extrapolat" not in f["pre_seed_sentence"]
    h = prose.headline(D)
    assert f["ow_n"] == h["al_n"] == h["sn_n"] == 1 and f["pre_max_mib"] == h["pre_max_mib"] > 0
    fig, cap = figures.prealloc(D)  # this host has no shift to draw, and the caption says so
    assert f"({D.quoted.host_id}): no mark, it has nothing to draw here" in cap


# --- the key findings, each decided on one number with its interval ------------------------------

KF = {f.key: f for f in kf.FINDINGS}


class _Run:
    """What a finding's measure() reads of one dataset: its tables and the seed's table."""

    def __init__(self, **tables):
        self.tables = tables
        self.manifest = {"host": {}}

    def __getitem__(self, name):
        return self.tables[name]

    def __contains__(self, name):
        return name in self.tables

    def reference(self, name, dtype=None):
        return pd.read_csv(ROOT / "data" / "reference" / f"{name}.csv")


def _pre(runs: dict, cluster_size=512):
    """prealloc rows: {(image size, mode): [cpu_s of each round]}."""
    return pd.DataFrame(
        [
            {
                "command": "resize_no_flush",
                "cluster_size": cluster_size,
                "image_size": size,
                "mode": mode,
                "repeat": i,
                "cpu_s": v,
            }
            for (size, mode), vals in runs.items()
            for i, v in enumerate(vals)
        ]
    )


def _outcome(key, run):
    f = KF[key]
    return f.outcome(f.measure(run))


@pytest.mark.parametrize(
    "cached,none,verdict",
    [
        ([1.50, 1.52], [1.00, 1.01], UNDECIDED),  # 2 against 2: Mann-Whitney p = 0.33, 66.67 %
        ([1.50, 1.51, 1.52, 1.53, 1.54], [1.00, 1.01, 1.02, 1.03, 1.04], HOLDS),
        ([1.00, 1.01, 1.02, 1.03, 1.04], [1.00, 1.01, 1.02, 1.03, 1.04], FAILS),
        ([1.00, 1.60, 1.10, 1.50, 1.20], [1.00, 1.05, 1.10, 1.03, 1.02], UNDECIDED),
    ],
    ids=["2v2", "holds", "fails", "straddles"],
)
def test_prealloc_share_is_decided_on_the_ratio_of_rounds(cached, none, verdict):
    """cached / none CPU time at the largest size compared, from the rounds' runs: two rounds
    against two (the old test called that significant where the share was large) cannot give
    a 95 % interval, so the claim stays open whatever the medians say."""
    size = 256 * MiB
    o = _outcome(
        "prealloc_share",
        _Run(prealloc=_pre({(size, "cached"): cached, (size, "none"): none})),
    )
    assert o.verdict == verdict, o
    assert o.evidence.startswith("cached / none CPU time ") and "256 MiB" in o.evidence
    if cached[:2] == [1.50, 1.52]:
        assert "n too small" in o.why and "66.66 %" in o.why
    if verdict == UNDECIDED and len(cached) == 5:
        assert "straddles 1.10" in o.why


def test_prealloc_share_takes_the_largest_size_with_two_rounds():
    rows = {
        (64 * MiB, "cached"): [1.5, 1.51, 1.52, 1.53],
        (64 * MiB, "none"): [1.0, 1.01, 1.02, 1.03],
        (128 * MiB, "cached"): [3.0],  # one round each: not compared
        (128 * MiB, "none"): [2.0],
    }
    rs = _pre(rows)
    assert analysis.largest_compared(rs, "cached") == 64 * MiB
    assert analysis.largest_compared(rs[rs.image_size == 128 * MiB], "cached") == 128 * MiB
    assert analysis.largest_compared(rs[rs["mode"] == "none"], "cached") is None
    o = _outcome("prealloc_share", _Run(prealloc=rs))
    assert o.verdict == HOLDS and o.evidence.count("64 MiB") == 1
    assert KF["prealloc_share"].measure(_Run(writes=pd.DataFrame())) is None


def _grown(power: float, rounds: int, sizes=(128, 256, 512)):
    """prealloc rows: none linear in the size, cached's extra growing as size^power, `rounds`
    rounds with a little jitter (every extra positive)."""
    rows = {}
    for mib in sizes:
        none = 0.5 * mib / 64
        extra = 0.05 * (mib / 64) ** power
        rows[(mib * MiB, "none")] = [none + 0.002 * i for i in range(rounds)]
        rows[(mib * MiB, "cached")] = [
            none + 0.002 * i + extra * (1 + 0.02 * ((i * 7 + mib) % 5 - 2)) for i in range(rounds)
        ]
    return rows


@pytest.mark.parametrize("power,verdict", [(2.0, HOLDS), (0.5, FAILS), (1.0, UNDECIDED)])
def test_superlinear_is_decided_on_the_rounds_exponents(power, verdict):
    """Extra CPU growing as size^2 (size^0.5, size^1), six rounds per mode and size: each
    round's exponent, their median's 96.9 % interval lies above (below, around) 1."""
    o = _outcome("superlinear", _Run(prealloc=_pre(_grown(power, 6))))
    assert o.verdict == verdict, o
    assert o.estimate.coverage >= 0.95 and "median of 6 rounds' exponents" in o.estimate.basis
    assert abs(o.estimate.value - power) < 0.05
    assert "3 sizes measured" in o.evidence and "6 rounds each" in o.evidence


@pytest.mark.parametrize("rounds", [1, 2, 3, 5])
def test_superlinear_with_too_few_rounds_does_not_decide(rounds):
    """The old design (2 runs per mode) decided on a t interval through 3 sizes' shifts; an
    exponent per round needs 6 rounds for 95 %: 2, 3 or 5 rounds stay undecided however clear
    the growth, and 1 round (a line through 3 points) claims no interval at all."""
    o = _outcome("superlinear", _Run(prealloc=_pre(_grown(2.0, rounds))))
    assert o.verdict == UNDECIDED, o
    assert o.estimate.coverage < 0.95 and abs(o.estimate.value - 2.0) < 0.1
    if rounds == 1:  # nothing compared: a line through the sizes, and no interval
        assert o.estimate.low != o.estimate.low and "one run per mode" in o.estimate.basis
    else:
        assert "n too small" in o.why


def test_superlinear_leaves_out_a_round_without_an_exponent_and_says_so():
    """A round whose extra is zero or below at some size has no log, hence no exponent: it is
    left out, named in the basis, and the interval rests on the rounds that remain (7 of 8)."""
    rows = _grown(2.0, 8)
    rows[(128 * MiB, "cached")][3] = rows[(128 * MiB, "none")][3] - 0.01
    rs = _pre(rows)
    ov = analysis.overhead(rs, analysis.PRE_KEYS, modes=("cached",))
    assert 128 * MiB in analysis.exponent_sizes(ov)  # one bad round of 8: still clear of zero
    e = KF["superlinear"].measure(_Run(prealloc=rs)).estimate
    assert "median of 7 rounds' exponents" in e.basis and "1 round(s) with an extra ≤ 0" in e.basis
    assert e.coverage == pytest.approx(1 - 2 * 0.5**7)  # [min, max] of 7 rounds: 98.4 %
    re = analysis.round_exponents(rs, [128 * MiB, 256 * MiB, 512 * MiB])
    assert len(re) == 8 and re.exponent.isna().sum() == 1


def test_superlinear_uses_only_sizes_clear_of_zero():
    """A size whose shift's interval reaches zero (the extra lost in the noise) gives no exponent
    a log can carry: the rounds' exponents use the other sizes; with fewer than two such sizes
    the finding has no interval, and with one size there is nothing to fit."""
    rows = _grown(2.0, 6)
    none = rows[(128 * MiB, "none")]
    rows[(128 * MiB, "cached")] = [
        v + d for v, d in zip(none, (-0.01, 0.01, 0.0, 0.02, -0.02, 0.01))
    ]
    rs = _pre(rows)
    ov = analysis.overhead(rs, analysis.PRE_KEYS, modes=("cached",))
    assert analysis.exponent_sizes(ov) == [256 * MiB, 512 * MiB]
    e = analysis.exponent(rs, ov)
    assert "256–512 MiB" in e.basis and e.coverage >= 0.95 and abs(e.value - 2.0) < 0.05
    two = _pre({k: v for k, v in rows.items() if k[0] <= 256 * MiB})
    o = _outcome("superlinear", _Run(prealloc=two))
    assert o.verdict == UNDECIDED and o.estimate.coverage == 0.0
    one = _pre({k: v for k, v in rows.items() if k[0] == 512 * MiB})
    assert KF["superlinear"].measure(_Run(prealloc=one)) is None  # one size: nothing to fit


def test_default_profile_reaches_the_coverage_the_findings_need():
    """The default's fixed rounds give every finding's estimator its 95 %: the median of the
    rounds' exponents, cached against none at the largest size, and the union bound over all's
    and cached's shifts after snapshots at 97.5 % each (the old default's 2 rounds gave 50 %,
    66.7 % and 33 %). And it measures what the findings compare: two sizes or more at 512-byte
    clusters, cached and none there, all, cached and none after snapshots."""
    from perfbook.analysis import decide
    from perfbook.analysis.stats import hodges_lehmann_coverage, median_ci

    p = dict(CH.profiles["default"])
    CH.check(p)
    n = p["rep_min_runs"]
    assert p["rep_max_runs"] == n and p["rep_warmup"] == 0
    assert median_ci(list(range(n)), 0.95)[2] >= 0.95
    assert hodges_lehmann_coverage(n, n, 0.95)[0] >= 0.95
    each = hodges_lehmann_coverage(n, n, 0.975)[0]
    pair = decide.minus(decide.Estimate(0, 0, 0, each, ""), decide.Estimate(0, 0, 0, each, ""))
    assert pair.coverage >= 0.95
    assert len(p["prealloc_sizes_512"]) >= 2 and {"none", "cached"} <= set(p["prealloc_modes"])
    assert {"none", "cached", "all"} <= set(p["modes"])
    # and the estimators themselves, on rows of the default's shape
    o = _outcome("superlinear", _Run(prealloc=_pre(_grown(2.0, n, (128, 256)))))
    assert o.verdict == HOLDS and o.estimate.coverage >= 0.95
    o = _outcome("all_snapshots", _Run(writes=_snap_writes({"all": 400, "cached": 5}, n)))
    assert o.verdict == HOLDS and o.estimate.coverage >= 0.95
    # the old default: 2 rounds decide nothing
    old = _outcome("superlinear", _Run(prealloc=_pre(_grown(2.0, 2, (32, 64, 128, 256)))))
    assert old.verdict == UNDECIDED


def test_default_drops_only_cells_no_finding_or_quoted_value_needs():
    """perf records in the default what the prose quotes (cached's three workloads, all's after
    snapshots); the full profile records every workload in both modes and times every mode."""
    from perfbook.chapters.qcow2_overlap.collect import perf_cells  # a pure function, no run

    p = dict(CH.profiles["default"])
    CH.check(p)
    cells = perf_cells(p, [m for m in p["modes"] if m in ("cached", "all")])
    assert sorted(cells) == sorted(parse.PERF_QUOTED.items())
    full = dict(CH.profiles["full"])
    CH.check(full)
    assert len(perf_cells(full, ["cached", "all"])) == 2 * len(parse.PERF_WORKLOADS)
    assert full["prealloc_modes"] == list(parse.MODES) == full["modes"]


def _snap_writes(extra_us: dict, n: int):
    """writes after snapshots: none at 300 µs per write, each mode `extra_us` more, n rounds."""
    reqs = 1000
    return pd.DataFrame(
        [
            {
                "workload": prose.SNAPSHOTS,
                "mode": mode,
                "snapshots": 4,
                "requests": reqs,
                "repeat": i,
                "cpu_s": (300 + extra + 0.5 * i) * reqs / 1e6,
            }
            for mode, extra in {"none": 0, **extra_us}.items()
            for i in range(n)
        ]
    )


@pytest.mark.parametrize(
    "extra,n,verdict",
    [
        ({"all": 400, "cached": 5}, 6, HOLDS),
        ({"all": 400, "cached": 60}, 6, FAILS),
        ({"all": 400, "cached": 5}, 2, UNDECIDED),
        ({"all": 400, "cached": 5}, 4, UNDECIDED),  # 97.14 % each: 94.3 % together
    ],
)
def test_all_snapshots_is_all_minus_ten_times_cached(extra, n, verdict):
    o = _outcome("all_snapshots", _Run(writes=_snap_writes(extra, n)))
    assert o.verdict == verdict, o
    want = extra["all"] - 10 * extra["cached"]
    assert o.estimate.value == pytest.approx(want, abs=1e-3)
    assert "union bound" in o.estimate.basis and "4 snapshots" in o.evidence
    if n == 6:  # each shift's 97.5 % interval: together at least 95 %
        assert o.estimate.coverage >= 0.95
    no_all = _snap_writes({"cached": 5}, 6)
    assert KF["all_snapshots"].measure(_Run(writes=no_all)) is None


def test_key_findings_on_the_book_data(book_data):
    """Every finding gives every host a verdict from the book's data, and the numbers are the
    chapter's: the formula's miss is the table's, the share's ratio the quoted rows'."""
    from perfbook.analysis.findings import VERDICTS, Run, evaluate

    D = _book(book_data)
    assert CH.key_findings == kf.FINDINGS
    for f in kf.FINDINGS:
        for h in D.hosts:
            assert evaluate(D, f, h).verdict in VERDICTS
    run = Run(D, D.quoted)
    ft = analysis.formula_table(D.of_quoted(D["metadata"]))
    r = ft.measured_clusters / ft.formula_virtual
    got = kf.formula(run).estimate
    assert got.exact and got.value == pytest.approx(100 * (r - 1).abs().max())
    m = kf.prealloc_share(run)
    if m is not None:
        rs = kf._resizes(run)
        size = analysis.largest_compared(rs, "cached")
        assert f"{size // MiB} MiB" in m.context and m.estimate.scale == "log"


def test_a_dataset_without_perf_still_gives_every_perf_value_the_page_quotes():
    """perf missing, its symbol unresolvable or no recording in the profile: the perf section's
    glue names still exist (a missing one fails the book build), and say so."""
    got = prose.formatted({})
    assert {k: got[k] for k in prose.PERF_KEYS} == dict.fromkeys(prose.PERF_KEYS, "not measured")
    assert prose.formatted({"perf_ow_cached": 12.34})["perf_ow_cached"] == "12.3"
