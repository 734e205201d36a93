"""virtio_blk_latency: parameters, the parsers and the per-request matching on real traces of one
small boot (tests/fixtures/virtio_blk_latency), the alignment math (the guest->host offset bracket,
the QEMU clock fit and its check), the seed's table derivation, the benchmark binary, the committed
dataset's prose values, and a quick collect run (live, root) that must leave no QEMU, no trace instance
and no scratch file behind. Signals during a traced boot: tests/test_contract.py (LIVE)."""

from __future__ import annotations

import json
import math
import os
import random
import re
import subprocess
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT, need_root
from conftest import scratch_owner as _owner
from perfbook.analysis import decide
from perfbook.analysis import stats as tools_stats
from perfbook.analysis.findings import FAILS, HOLDS, UNDECIDED, Run
from perfbook.chapters.virtio_blk_latency import analysis as A
from perfbook.chapters.virtio_blk_latency import chapter, prose
from perfbook.chapters.virtio_blk_latency import collect as C
from perfbook.chapters.virtio_blk_latency import key_findings as KF
from perfbook.chapters.virtio_blk_latency import parse as P
from perfbook.chapters.virtio_blk_latency.timeline import align as AL
from perfbook.chapters.virtio_blk_latency.timeline import match as M
from perfbook.core.errors import MissingPrerequisite, ParameterError, PerfbookError
from perfbook.data.dataset import load_reference, table_path
from perfbook.framework import sequence as framework
from perfbook.hoststate import tracefs
from perfbook.hoststate.scratch import live_dirs
from perfbook.qemu import guest

FIX = ROOT / "tests" / "fixtures" / "virtio_blk_latency"


# ---------------------------------------------------------------- parameters
def test_params_validate():
    d = chapter.parameters("default")
    # the default boots only the cells the findings compare; aio is what they boot
    assert d["aio"] == ["threads", "native"] and d["patterns"] == list(P.PATTERNS)
    assert d["boots"] == ["threads/plain", "threads/qemu", "threads/all", "native/all"]
    f = chapter.parameters("full")
    assert f["aio"] == list(P.AIO) and len(f["boots"]) == len(P.AIO) * len(P.VARIANTS)
    assert chapter.parameters("default", aio="threads")["boots"] == [
        "threads/plain",
        "threads/qemu",
        "threads/all",
    ]
    assert chapter.parameters("full", boots="io_uring/all,threads/plain")["boots"] == [
        "threads/plain",
        "io_uring/all",
    ]
    assert chapter.parameters("quick", aio="io_uring,threads")["aio"] == [
        "threads",
        "io_uring",
    ]  # book order
    assert chapter.parameters("quick", layer_runs="none")["layer_runs"] == []
    for bad in (
        {"aio": "posix"},
        {"aio": ""},
        {"patterns": "zigzag"},
        {"variants": "all,most"},
        {"requests": 5},
        {"requests": "many"},
        {"requests": True},
        {"warmup": -1},
        {"image_mib": 2},
        {"accel": "xen"},
        {"boot_timeout": 0},
        {"kvm_boot_timeout": "soon"},
        {"layer_runs": "threads,posix"},
        {"boots": "threads/most"},
        {"boots": "posix/plain"},
        {"boots": "native/all", "aio": "threads"},
        {"colour": 1},
        {"requests": 10**6},
    ):
        with pytest.raises(ParameterError):
            chapter.parameters("quick", **bad)
    with pytest.raises(ParameterError):
        chapter.parameters("huge")


def test_bad_parameter_writes_no_dataset(scratch_data):
    with pytest.raises(ParameterError):
        framework.collect(chapter, "quick", scratch_data, say=lambda s: None, aio="threads,bogus")
    assert not any((scratch_data / "runs").iterdir())
    assert not [d for d in live_dirs(chapter.name) if _owner(d) == os.getpid()]


def test_plan_round_interleaves_and_counts():
    p = chapter.parameters("full")
    rng = random.Random(3)
    rounds = [C.plan_round(p, rng, k) for k in range(2)]
    for k, r in enumerate(rounds):
        kinds = [(j["kind"], j["aio"], j["variant"]) for j in r]
        assert kinds.count(("host", "", "host_bench")) == 1
        assert sorted((a, v) for _k, a, v in kinds if _k == "guest") == sorted(
            {(a, v) for a in p["aio"] for v in p["variants"]}
            | {(a, v) for a in p["layer_runs"] for v in P.SINGLE}
        )
        assert [j["position"] for j in r] == list(range(len(r))) and {j["round"] for j in r} == {k}
        assert all(sorted(j["patterns"]) == sorted(p["patterns"]) for j in r)
    # shuffled: the two rounds do not run in the same order
    assert [(j["aio"], j["variant"]) for j in rounds[0]] != [
        (j["aio"], j["variant"]) for j in rounds[1]
    ]
    assert (
        C.rep_variant(p, "native") == "plain"
        and C.rep_variant(chapter.parameters("quick", variants="all"), "threads") == "all"
        and C.rep_variant(chapter.parameters("default"), "native") == "all"
    )
    # the repetition tracks untraced boots: the default's aio=native has none
    assert C.rep_keys(chapter.parameters("default")) == ["threads"]
    assert C.rep_keys(p) == list(P.AIO)
    assert C.rep_keys(chapter.parameters("quick", variants="all")) == ["threads"]


def test_rounds_fix_the_repetition():
    p = chapter.parameters("default", rounds=3)
    assert p["rep_min_runs"] == p["rep_max_runs"] == 3
    for bad in (
        {"rounds": 0},
        {"rounds": 51},
        {"rep_target": 0},
        {"rep_budget_s": -1},
        {"rep_min_runs": 5, "rep_max_runs": 2},
    ):
        with pytest.raises(ParameterError):
            chapter.parameters("default", **bad)


def test_guest_script_traced_and_plain():
    p = chapter.parameters("quick")
    job = {"patterns": ["rand", "seq"], "seeds": {"rand": 7, "seq": 9}}
    s = C.guest_script(p, job, traced=True)
    assert (
        "p:perfbook/vp_notify vp_notify" in s and "p:perfbook/vring_interrupt vring_interrupt" in s
    )
    assert "echo x86-tsc > $T/trace_clock" in s and "cat /tmp/out.txt > /dev/vdb" in s
    assert s.index("-m rand") < s.index("-m seq")  # the job's order
    assert "-S 7" in s and "-S 9" in s and f"-p {P.REGION_START}" in s
    plain = C.guest_script(p, job, traced=False)
    assert "kprobe" not in plain and "@@TRACE" not in plain and "@@BENCH" in plain


def test_guest_runner_attaches_our_image(tmp_path):
    """guest.DiskSpec(path=...) attaches an existing image (ours) instead of a fresh sparse one."""
    img = tmp_path / "bench.img"
    img.write_bytes(b"\0" * 4096)
    d = guest.DiskSpec(label="bench", cache="none", aio="native", readonly=True, path=img)
    d.validate()
    with pytest.raises(ParameterError):
        guest.DiskSpec(label="gone", path=tmp_path / "missing.img").validate()
    r = guest.Runner(accel="tcg")
    r.artefacts = {"dir": str(tmp_path)}
    cmd = r.cmdline(
        guest.GuestConfig(disks=[d, guest.DiskSpec(label="out")]), "tcg", tmp_path, tmp_path / "i"
    )
    drives = [a for a in cmd if a.startswith("file=")]
    assert (
        drives[0].startswith(f"file={img},")
        and "aio=native" in drives[0]
        and "readonly=on" in drives[0]
    )
    assert drives[1].startswith(f"file={tmp_path / 'disk1.img'},")


# ---------------------------------------------------------------- parsers on the fixture
def _fixture():
    meta = json.loads((FIX / "meta.json").read_text())
    sect = P.split_output((FIX / "guest_out.txt").read_bytes())
    bench, loops = P.parse_bench(sect["BENCH"])
    return meta, sect, bench.sort_values("t0").reset_index(drop=True), loops


def test_split_output_needs_the_end_marker():
    assert P.split_output(b"@@BENCH\nr,1\n@@END\n") == {"BENCH": "r,1\n"}
    with pytest.raises(PerfbookError):
        P.split_output(b"@@BENCH\nr,1\n")


def test_parse_bench_and_stats():
    meta, sect, bench, loops = _fixture()
    assert len(bench) == 21 and bench.warm.sum() == 1 and (bench.t1 > bench.t0).all()
    assert list(bench.offset[:3]) == [P.REGION_START, P.REGION_START + 4096, P.REGION_START + 8192]
    assert len(loops) == 1 and loops.n.iloc[0] == 21
    st = P.ring_stats(sect["STATS"])
    assert st["overrun"] == 0 and st["entries"] > 0


def test_parse_ftrace_syscalls_events_and_blocks():
    text = textwrap.dedent("""\
        # tracer: nop
               CPU 0/TCG-24283   [000] ..... 27057850803446: sys_write(fd: 0xd, buf: 0x5618103674e8, count: 8)
               CPU 0/TCG-24283   [000] ..... 27057850821331: sys_write -> 0x8
                  worker-24284   [001] ..... 27057851239374: sys_pread64(fd: 3, buf: 0x7fc3, count: 0x1000, pos: 0x100000)
                  <idle>-0       [001] ..s1. 27057851587274: block_rq_complete: 254,0 RS () 349448192 + 8 be,0,4 [0]
            kworker/0:1H-35      [000] .....   9101317159: block_rq_issue: 254,0 RS 4096 () 2048 + 8 [kworker/0:1H]
        """)
    f = P.parse_ftrace(text)
    assert list(f.kind) == ["enter", "exit", "enter", "event", "event"]
    assert f.comm.iloc[0] == "CPU 0/TCG" and f.tid.iloc[0] == 24283 and f.ret.iloc[1] == 8
    assert P.syscall_args(f.detail.iloc[0]) == {"fd": 13, "buf": 0x5618103674E8, "count": 8}
    assert P.syscall_args(f.detail.iloc[2])["pos"] == 0x100000
    assert P.block_fields(f.detail.iloc[3])["sector"] == 349448192
    b = P.block_fields(f.detail.iloc[4])
    assert (b["major"], b["minor"], b["rwbs"], b["sector"], b["nr_sector"]) == (
        254,
        0,
        "RS",
        2048,
        8,
    )


def test_parse_ftrace_record_tgid_irq_info_off_and_ns_clock():
    """A guest kernel's trace with record-tgid on, irq-info off and a ns clock (x86-tsc
    refused): the old parser dropped these lines, and cut sec.usec to whole seconds."""
    text = textwrap.dedent("""\
               CPU 0/TCG-24283   (  24280) [000]  27057.850803: sys_write(fd: 0xd, buf: 0x1, count: 8)
               CPU 0/TCG-24283   (  24280) [000]  27057.850821: sys_write -> 0x8
                 seqread-80      (     80) [000]     12.000250: vp_notify: (vp_notify+0x0/0x40)
        CPU:0 [LOST 5 EVENTS]
        """)
    f = P.parse_ftrace(text)
    assert list(f.kind) == ["enter", "exit", "event"] and f.name.tolist() == [
        "write",
        "write",
        "vp_notify",
    ]
    assert f.ts.tolist() == [27057.850803, 27057.850821, 12.00025] and f.tid.iloc[2] == 80
    assert f.comm.iloc[0] == "CPU 0/TCG" and f.attrs["lost"] == 5


def test_host_loss_places_an_overrun_before_or_inside_the_measured_span():
    """The host buffers run from QEMU's start in overwrite mode: a CPU that overran kept its
    newest events. Its overrun is the boot's if its oldest kept event precedes the first
    measured request, and may be the span's otherwise; 'dropped events' can't be placed."""
    text = textwrap.dedent("""\
        ##### CPU 0 buffer started ####
               CPU 0/TCG-24283   [000] ..... 1000: sys_write(fd: 0xd, buf: 0x1, count: 8)
        ##### CPU 1 buffer started ####
                  worker-24284   [001] ..... 5000: sys_pread64(fd: 3, buf: 0x7fc3, count: 0x1000, pos: 0x100000)
        """)
    f = P.parse_ftrace(text)
    assert f.cpu.tolist() == [0, 1]
    frames = {"qemu": f, "disk": f.iloc[:0]}
    stats = {"qemu": {0: {"overrun": 7}, 1: {"overrun": 3}}, "disk": {0: {"overrun": 0}}}
    assert P.host_loss(stats, frames, 2000) == (3, 7)  # cpu1 kept nothing older than the span
    assert P.host_loss(stats, frames, 6000) == (0, 10)  # both kept events older than it
    assert P.host_loss(stats, frames, math.nan) == (10, 0)  # no request matched: can't tell
    stats["disk"] = {1: {"overrun": 2, "dropped events": 4}}  # no kept event on cpu1 of disk
    assert P.host_loss(stats, frames, 6000) == (6, 10)


def test_parse_qemu_log():
    q = P.parse_qemu_log(
        "24281@1795324725.564124:virtio_queue_notify vdev 0x5 n 0 vq 0x7\n"
        "not a trace line\n24282@1795324725.000001:apic_deliver_irq dest 1 vector 38\n"
    )
    assert list(q.us) == [1795324725564124, 1795324725000001] and list(q.tid) == [24281, 24282]
    assert P.qemu_fields(q.detail.iloc[0]) == {"vdev": "0x5", "n": "0", "vq": "0x7"}


def test_match_in_order():
    # 9 and 5 are other I/O; the second wanted 2 has no observation; nothing is reordered
    m = M.match_in_order([1, 2, 3, 2, 4], [9, 1, 2, 5, 3, 4])
    assert list(m) == [1, 2, 4, -1, 5]
    assert list(M.match_in_order([1, 1], [1])) == [0, -1]
    assert list(M.match_in_order([7], [1] * 10 + [7], lookahead=5)) == [-1]


def test_guest_stamps_on_the_fixture():
    meta, sect, bench, _ = _fixture()
    g = M.guest_stamps(bench, P.parse_ftrace(sect["TRACE"]))
    assert g.notna().all().all(), "every request has all four guest stamps"
    t0, t1 = bench.t0, bench.t1
    assert (
        (t0 <= g.g_issue)
        & (g.g_issue <= g.g_notify)
        & (g.g_notify <= g.g_irq)
        & (g.g_irq <= g.g_complete)
        & (g.g_complete <= t1)
    ).all()


def test_qemu_segments_on_the_fixture():
    meta, sect, bench, _ = _fixture()
    seg = M.qemu_segments(P.parse_qemu_log((FIX / "qemu_trace.log").read_text()))
    m = M.match_in_order(bench.offset.to_numpy(), seg.offset.to_numpy())
    assert (m >= 0).all()
    s = seg.iloc[m]
    order = [
        "q_notify",
        "q_pop",
        "q_read",
        "q_submit",
        "q_cb",
        "q_rw",
        "q_req",
        "q_flush",
        "q_irq",
        "q_apic",
    ]
    vals = s[order].astype("float64").to_numpy()
    assert np.isfinite(vals).all() and (np.diff(vals, axis=1) >= 0).all()
    assert (s.notify_tid == meta["qemu_pid"]).all(), (
        "under TCG the main loop handles the notify (ioeventfd)"
    )


def test_host_issues_on_the_fixture():
    meta, sect, bench, _ = _fixture()
    qe = P.parse_ftrace((FIX / "host_qemu_trace.txt").read_text())
    be = P.parse_ftrace((FIX / "host_disk_trace.txt").read_text())
    hi = M.host_issues(
        qe, be, meta["qemu_pid"], [tuple(e) for e in meta["extents"]], meta["part_start"]
    )
    m = M.match_in_order(bench.offset.to_numpy(), hi.offset.to_numpy())
    assert (m >= 0).all()
    h = hi.iloc[m]
    assert set(h.h_sub_call) == {"pread64"} and set(h.h_sub_thread) == {"worker"}
    assert (h.h_kick < h.h_sub).all() and (h.h_sub < h.h_issue).all()
    assert (h.h_issue < h.h_complete).all() and (h.h_complete < h.h_sub_exit).all()
    assert (h.h_sub_exit < h.h_notifier).all()
    assert h.h_kvm_notify.isna().all() and h.h_kvm_irq.isna().all()  # a TCG guest: no kvm.ko events


def test_busiest_own_fd():
    w = pd.DataFrame(
        {
            "fd": [7, 7, 12, 12, 12, 6, 8, 8],
            "who": ["vcpu", "worker", "vcpu", "vcpu", "vcpu", "vcpu", "main", "main"],
        }
    )
    assert M.busiest_own_fd(w, "vcpu") == 12 and M.busiest_own_fd(w, "main") == 8
    assert M.busiest_own_fd(w, "io_uring") is None
    assert M.busiest_own_fd(w.iloc[:0], "vcpu") is None


def test_sector_to_offset():
    ext = [(0, 10 * 4096, 8192), (8192, 100 * 4096, 4096)]
    sec = [80, 88, 800, 0, 808]  # bytes 40960, 45056, 409600, 0 (not ours), 413696 (past the end)
    off = M.sector_to_offset(sec, ext, part_start=0)
    assert list(off[:3]) == [0, 4096, 8192] and np.isnan(off[3]) and np.isnan(off[4])
    assert M.sector_to_offset([80 + 2048], ext, part_start=2048)[0] == 0


def test_fiemap_of_a_written_file(tmp_path):
    f = tmp_path / "img"
    C.fill_image(f, 1, seed=1)
    try:
        ext = C.fiemap(f)
    except MissingPrerequisite as e:
        pytest.skip(str(e))
    assert sum(e[2] for e in ext) >= 1 << 20 and ext[0][0] == 0


# ---------------------------------------------------------------- alignment math
def test_offset_bracket_contains_the_true_offset():
    rng = np.random.default_rng(1)
    off = 123_456_789
    g_notify = np.cumsum(rng.integers(10_000, 20_000, 500)).astype(float)
    kick = g_notify + off + rng.integers(2_000, 30_000, 500)  # host sees the notify later
    g_irq = g_notify + 50_000
    before = g_irq + off - rng.integers(5_000, 40_000, 500)  # host event before the irq
    b = AL.offset_bracket(g_notify, kick, g_irq, before)
    assert b["consistent"] and b["lo"] <= off <= b["hi"]
    assert (
        b["hi"] - off == (kick - g_notify - off).min()
        and off - b["lo"] == (g_irq + off - before).min()
    )
    assert b["width"] == b["hi"] - b["lo"] and b["n_lo"] == b["n_hi"] == 500
    # NaN pairs are ignored; contradicting pairs make an empty bracket
    g2 = np.append(g_notify, np.nan)
    assert (
        AL.offset_bracket(
            g2, np.append(kick, 1.0), np.append(g_irq, 1.0), np.append(before, np.nan)
        )["n_hi"]
        == 500
    )
    bad = AL.offset_bracket([0.0], [10.0], [0.0], [20.0])
    assert bad["consistent"] is False and bad["width"] < 0


def test_fit_clock_recovers_a_line():
    real0 = 1_795_324_725_000_000_000
    rows = []
    for i in range(40):
        real = real0 + i * 1_000_000 + (0 if i < 20 else 5_000_000_000)
        tsc = 27_000_000_000_000 + (real - real0) * 2.4454  # 2.4454 GHz
        rows.append(
            {
                "tsc0": int(tsc) - 40,
                "tsc1": int(tsc) + 40 + (500 if i % 7 == 0 else 0),
                "real_ns": real,
                "raw_ns": 9_000_000_000 + (real - real0),
            }
        )
    fit = AL.fit_clock(pd.DataFrame(rows))
    assert abs(fit["slope"] - 2.4454) < 1e-9 and abs(fit["tsc_hz"] - 2.4454e9) < 1
    t = AL.real_to_tsc([(real0 + 2_500_000_000) / 1000], fit)[0]
    assert abs(t - (27_000_000_000_000 + 2_500_000_000 * 2.4454)) < 2


def test_fit_clock_on_real_calibration_samples():
    cal = pd.read_csv(table_path(FIX, "calib"))
    fit = AL.fit_clock(cal)
    assert 1e8 < fit["tsc_hz"] < 1e10
    assert abs(fit["slope"] * 1e9 / fit["tsc_hz"] - 1) < 1e-3  # REALTIME and MONOTONIC_RAW agree
    assert fit["resid_max"] < 2000  # cycles: the line fits every kept sample closely


def test_qemu_bracket_and_correction():
    # QEMU stamps that are exactly right: a bracket containing 0, correction 0
    b = AL.qemu_bracket(
        q_after=[100.0], h_before=[50.0], q_before=[100.0], h_after=[180.0], res_cyc=10
    )
    assert b["lo"] == -60 and b["hi"] == 80 and AL.qemu_correction(b) == 0.0
    # QEMU's clock runs 100 cycles early: the bracket excludes 0 and the correction moves to its edge
    b = AL.qemu_bracket(
        q_after=[0.0], h_before=[150.0], q_before=[0.0], h_after=[300.0], res_cyc=10
    )
    assert b["lo"] == 140 and AL.qemu_correction(b) == 140
    assert AL.qemu_correction({"lo": 5.0, "hi": 1.0}) == 0.0  # inconsistent: keep the calibration


def test_alignment_on_the_fixture_is_causal():
    """The whole pipeline on real traces: one offset puts every guest stamp between the host
    events that cause it and those it causes, and the QEMU clock check contains 0."""
    meta, sect, bench, _ = _fixture()
    req = bench.copy()
    g = M.guest_stamps(bench, P.parse_ftrace(sect["TRACE"]))
    for c in g.columns:
        req[c] = g[c] - req.t0
    qe = P.parse_ftrace((FIX / "host_qemu_trace.txt").read_text())
    be = P.parse_ftrace((FIX / "host_disk_trace.txt").read_text())
    hi = M.host_issues(
        qe, be, meta["qemu_pid"], [tuple(e) for e in meta["extents"]], meta["part_start"]
    )
    m = M.match_in_order(bench.offset.to_numpy(), hi.offset.to_numpy())
    req["h_anchor"] = hi.h_issue.to_numpy(dtype=float)[m]
    for c in (
        "h_complete",
        "h_sub",
        "h_sub_exit",
        "h_kick",
        "h_kvm_notify",
        "h_notifier",
        "h_kvm_irq",
    ):
        req[c] = hi[c].to_numpy(dtype=float)[m] - req.h_anchor
    seg = M.qemu_segments(P.parse_qemu_log((FIX / "qemu_trace.log").read_text()))
    mq = M.match_in_order(bench.offset.to_numpy(), seg.offset.to_numpy())
    req["q_anchor"] = seg.q_notify.to_numpy(dtype=float)[mq]
    for c in ("q_pop", "q_read", "q_submit", "q_cb", "q_rw", "q_req", "q_flush", "q_irq", "q_apic"):
        req[c] = seg[c].to_numpy(dtype=float)[mq] - req.q_anchor
    fit = AL.fit_clock(pd.read_csv(table_path(FIX, "calib")))
    jrow = {
        "q_tsc_ref": fit["tsc_ref"],
        "q_real_ref_us": fit["real_ref_us"],
        "q_slope": fit["slope"],
    }
    al = AL.alignment_summary(req, jrow)
    assert al["off_consistent"] and al["off_lo"] <= al["off_hi"]
    width_us = (al["off_hi"] - al["off_lo"]) / fit["tsc_hz"] * 1e6
    assert 0 <= width_us < 200
    assert al["qc_consistent"] and al["qc_lo"] <= 0 <= al["qc_hi"] and al["qc"] == 0
    off = (al["off_lo"] + al["off_hi"]) / 2
    # the guest's notify sits before the vCPU's kick, within the bracket's slack
    assert ((req.t0 + req.g_notify + al["off_lo"]) <= req.h_anchor + req.h_kick).all()
    assert ((req.t0 + req.g_irq + al["off_hi"]) >= req.h_anchor + req.h_notifier).all()
    # the whole host request lies inside the guest's pread() on the common axis
    assert ((req.t0 + off) < req.h_anchor).all() and (
        (req.t0 + req.g_irq + off) > req.h_anchor + req.h_complete
    ).all()


# ---------------------------------------------------------------- the seed's tables
def _cum(values: dict):
    return pd.DataFrame({"key": list(values), "mean_ns": list(values.values())})


def test_delta_table_reproduces_the_seed():
    ref = load_reference(chapter.name)
    sc = A.seed_cumulative(ref)
    keys = [k for k, _l, _h in A.LAYER_ROWS if k not in ("host_block", "host_benchmark")]
    cum = _cum(dict(zip(keys, sc.mean_ns[:5])))
    d = A.delta_table(cum)
    sd = A.seed_delta(ref)
    assert list(d.layer) == list(sd.layer)
    assert np.allclose(d.delta_ns, sd.delta_ns)
    assert np.allclose(d.delta_pct, sd.delta_pct, atol=0.006)  # the seed rounds to 2 decimals


def test_delta_table_merges_an_unmeasured_layer():
    d = A.delta_table(
        _cum(
            {
                "guest_benchmark": 300.0,
                "guest_virtio_pci": 200.0,
                "host_kvm": math.nan,
                "qemu_virtio": 150.0,
                "qemu_aio": 100.0,
            }
        )
    )
    assert list(d.layer) == [
        "Guest",
        "Host/guest switching + Host/QEMU switching",
        "QEMU",
        "Host I/O",
    ]
    assert list(d.delta_ns) == [100.0, 50.0, 50.0, 100.0]
    assert abs(d.delta_pct.sum() - 100) < 1e-9
    d = A.delta_table(
        _cum(
            {
                "guest_benchmark": 300.0,
                "guest_virtio_pci": 200.0,
                "qemu_aio": math.nan,
                "host_kvm": math.nan,
                "qemu_virtio": math.nan,
            }
        )
    )
    assert list(d.layer) == [
        "Guest",
        "Host/guest switching + Host/QEMU switching + QEMU + Host I/O",
    ]


def _synthetic_requests():
    """Two boots with known layer times: 'all' (every layer) and 'plain', plus a host bench."""
    hz = 2e9  # 2 cycles per ns
    rows, jobs = [], []
    for job, variant in ((0, "all"), (1, "plain")):
        jobs.append(
            {
                "host_id": "h",
                "run_id": "r",
                "job": job,
                "kind": "guest",
                "round": 0,
                "aio": "threads",
                "variant": variant,
                "accel": "tcg",
                "tsc_hz": hz,
                "off_lo": 1000.0,
                "off_hi": 3000.0,
                "qc": 0.0,
                "q_tsc_ref": 0.0,
                "q_real_ref_us": 0,
                "q_slope": 2.0,
                "t0_base": 0,
                "h_base": 0,
                "q_base": 0,
            }
        )
        for i in range(10):
            r = {
                "host_id": "h",
                "run_id": "r",
                "job": job,
                "pattern": "seq",
                "idx": i,
                "warm": 0,
                "offset": 4096 * i,
                "bench_cyc": 2 * (300_000 + 1000 * i),
                "t0": 10_000_000 * i,
            }
            if variant == "all":
                # guest: notify at 40 us, irq at 240 us after t0 (cycles = 2 x ns)
                r.update(
                    {
                        "g_issue": 2 * 30_000,
                        "g_notify": 2 * 40_000,
                        "g_irq": 2 * 240_000,
                        "g_complete": 2 * 250_000,
                    }
                )
                # host, relative to the host block issue at t0 + 100 us (+ offset 2000 cycles)
                r["h_anchor"] = r["t0"] + 2000 + 2 * 100_000
                r.update(
                    {
                        "h_kick": -2 * 55_000,
                        "h_sub": -2 * 5_000,
                        "h_sub_exit": 2 * 60_000,
                        "h_complete": 2 * 50_000,
                        "h_notifier": 2 * 90_000,
                    }
                )
                # QEMU (us), relative to virtio_queue_notify at t0 + 50 us on the host axis
                q_notify_cyc = r["t0"] + 2000 + 2 * 50_000
                r["q_anchor"] = q_notify_cyc / 2 / 1000
                r.update(
                    {
                        "q_read": 10,
                        "q_rw": 130,
                        "q_irq": 150,
                        "q_apic": 170,
                        "q_submit": 12,
                        "q_cb": 125,
                    }
                )
            rows.append(r)
    for i in range(10):
        rows.append(
            {
                "host_id": "h",
                "run_id": "r",
                "job": 2,
                "pattern": "seq",
                "idx": i,
                "warm": 0,
                "offset": 4096 * i,
                "bench_cyc": 2 * 40_000,
                "t0": 0,
            }
        )
    jobs.append(
        {
            "host_id": "h",
            "run_id": "r",
            "job": 2,
            "kind": "host",
            "round": 0,
            "aio": "",
            "variant": "host_bench",
            "accel": "",
            "t0_base": 0,
        }
    )
    req = pd.DataFrame(rows)
    jb = pd.DataFrame(jobs)
    req = req.merge(
        jb[["host_id", "run_id", "job", "kind", "round", "aio", "variant", "accel"]],
        on=["host_id", "run_id", "job"],
    )
    return req, jb


def test_layer_intervals_and_cumulative_table():
    req, jobs = _synthetic_requests()
    iv = A.layer_intervals(req, jobs)
    a = iv[iv.variant == "all"]
    assert np.allclose(a.guest_virtio_pci, 200_000) and np.allclose(a.qemu_virtio, 150_000)
    assert np.allclose(a.qemu_aio, 120_000) and np.allclose(a.host_block, 50_000)
    assert np.allclose(a.host_syscall, 65_000) and np.allclose(a.qemu_pool, 113_000)
    # TCG stand-in: kick at t0+45 us, apic at t0+220 us on the host axis
    assert np.allclose(a.host_kvm, 175_000) and set(a.host_kvm_source) == {"TCG stand-in"}
    # kvm.ko events in a TCG boot (another VM on the host) are never taken for ours
    stray = req.assign(h_kvm_notify=-1e9, h_kvm_irq=1e9)
    assert set(A.layer_intervals(stray, jobs).query("variant == 'all'").host_kvm_source) == {
        "TCG stand-in"
    }
    assert A.aligned(stray, jobs).h_kvm_notify_ns.isna().all()
    # ... but in a KVM boot they are kvm.ko's own row
    kj = jobs.assign(accel=np.where(jobs.kind == "guest", "kvm", ""))
    kr = stray.assign(
        accel=np.where(stray.kind == "guest", "kvm", ""),
        h_kvm_notify=-2 * 50_000.0,
        h_kvm_irq=2 * 60_000.0,
    )
    k = A.layer_intervals(kr, kj).query("variant == 'all'")
    assert set(k.host_kvm_source) == {"kvm.ko"} and np.allclose(k.host_kvm, 110_000)
    cum = A.cumulative_table(iv, "one_run", aio="threads", pattern="seq").set_index("key")
    assert cum.loc["guest_benchmark", "mean_ns"] == pytest.approx(304_500)
    assert cum.loc["host_benchmark", "mean_ns"] == pytest.approx(40_000)
    assert cum.loc["guest_virtio_pci", "control_mean_ns"] == pytest.approx(304_500)
    seedm = A.cumulative_table(iv, "seed", aio="threads", pattern="seq").set_index("key")
    assert (
        seedm.loc["guest_benchmark", "from"] == "plain" and seedm.loc["guest_virtio_pci", "n"] == 0
    )
    d = A.delta_table(cum.reset_index())
    assert list(d.layer) == [n for n, _u, _l in A.DELTA_ROWS]
    assert d.delta_ns.sum() == pytest.approx(304_500)


def test_aligned_stamps_and_lifecycle():
    req, jobs = _synthetic_requests()
    a = A.aligned(req, jobs)
    r = a[(a.variant == "all")].iloc[0]
    # offset = middle of [1000, 3000] = the 2000 cycles built in: host stamps land where they were put
    assert r.h_issue_ns == pytest.approx(100_000) and r.h_kick_ns == pytest.approx(45_000)
    assert r.q_notify_ns == pytest.approx(50_000) and r.q_apic_ns == pytest.approx(220_000)
    assert r.g_notify_ns == pytest.approx(40_000)
    lc = A.lifecycle(a, job=0, n=1)
    assert lc.t_ns.is_monotonic_increasing and lc.event.iloc[0] == "pread() called"
    assert lc.event.iloc[-1] == "pread() returned" and (lc.since_prev_ns >= 0).all()
    assert {"vp_notify", "virtio_queue_notify", "block_rq_issue", "vring_interrupt"} <= set(
        lc.event
    )


def test_reference_table_has_provenance():
    ref = load_reference(chapter.name)
    for col in ("seed_file", "title", "date", "environment", "note"):
        assert ref[col].notna().all(), col
    assert set(ref.seed_file) == {P.SEED} and set(ref.also_in) == {P.SEED_TEXT}
    sc = A.seed_cumulative(ref)
    assert list(sc.layer) == [
        "Guest benchmark",
        "Guest virtio-pci",
        "Host kvm.ko",
        "QEMU virtio",
        "QEMU paio",
        "Host benchmark",
    ]
    assert sc.mean_ns.is_monotonic_decreasing
    assert A.seed_delta(ref).delta_pct.sum() == pytest.approx(100, abs=0.02)
    assert len(ref[ref.kind == "lifecycle"]) == 19 and set(ref[ref.kind == "lifecycle"].thread) == {
        "iothread",
        "vcpu",
    }
    # every figure of the seed file is in the seed's text
    text = Path("/work/shared/seeds") / P.SEED_TEXT
    if text.is_file():
        body = text.read_text()
        for v in ref[ref.kind.isin(["cumulative", "control", "delta"])].value:
            assert str(int(float(v))) in body, v


# ---------------------------------------------------------------- the benchmark binary
def test_seqread_binary(tmp_path):
    from perfbook.probes.cbuild import binary

    exe = binary(P.BENCH)
    img = tmp_path / "img"
    C.fill_image(img, 2, seed=2)
    r = subprocess.run(
        [
            str(exe),
            "read",
            "-f",
            str(img),
            "-n",
            "8",
            "-w",
            "2",
            "-m",
            "seq",
            "-p",
            str(1 << 20),
            "-s",
            str((1 << 20) + 4 * 4096),
        ],
        capture_output=True,
        text=True,
    )
    if r.returncode == 3 and "O_DIRECT" in r.stderr:
        pytest.skip(f"no O_DIRECT on {tmp_path}: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    b, loops = P.parse_bench(r.stdout)
    assert len(b) == 10 and list(b.warm) == [1, 1] + [0] * 8 and list(b.idx) == list(range(-2, 8))
    assert set(b.offset) == {(1 << 20) + k * 4096 for k in range(4)}  # wraps inside the region
    assert (b.t1 > b.t0).all() and loops.n.iloc[0] == 10
    r = subprocess.run(
        [str(exe), "read", "-f", str(img), "-n", "50", "-m", "rand", "-S", "3", "-p", str(1 << 20)],
        capture_output=True,
        text=True,
    )
    b, _ = P.parse_bench(r.stdout)
    assert b.offset.min() >= 1 << 20 and b.offset.max() < 2 << 20 and (b.offset % 4096 == 0).all()
    bad = subprocess.run(
        [str(exe), "read", "-f", str(img), "-m", "zigzag"], capture_output=True, text=True
    )
    assert bad.returncode == 2
    c = P.parse_calib(
        subprocess.run([str(exe), "calib", "-n", "5"], capture_output=True, text=True).stdout
    )
    assert len(c) == 5 and (c.tsc1 >= c.tsc0).all()


# ---------------------------------------------------------------- live: collect and cleanup
def _qemu_of(pid: int) -> list[str]:
    """QEMU processes whose command line names a scratch directory owned by `pid`."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "qemu-system" in cmd:
            for sd in live_dirs(chapter.name) + live_dirs("guest"):
                if _owner(sd) == pid and str(sd) in cmd:
                    out.append(cmd)
    return out


def _need_live():
    need_root("a collect run (host ftrace)")
    reasons = chapter.preflight()
    if reasons:
        pytest.skip(f"{chapter.name} can't collect here: {reasons[0]}")
    if C.host_layer_problem():
        pytest.skip(f"no host tracing: {C.host_layer_problem()}")
    try:
        guest.ensure_artefacts()
    except guest.MissingPrerequisite as e:
        pytest.skip(f"no guest kernel: {e}")


def _no_trace_state_of(pid: int) -> None:
    snap = tracefs.snapshot()
    assert not any(i.startswith(f"perfbook_{pid}_") for i in snap.get("our_instances", []))
    assert not any(f"perfbook_{pid}/" in p for p in snap.get("our_probes", []))


def test_quick_collect_live(scratch_data):
    _need_live()
    before = tracefs.snapshot()
    out = framework.collect(chapter, "quick", scratch_data, accel="tcg")
    assert tracefs.snapshot() == before
    _no_trace_state_of(os.getpid())
    assert not [d for d in live_dirs(chapter.name) if _owner(d) == os.getpid()]
    assert not [d for d in live_dirs("guest") if _owner(d) == os.getpid()]
    assert not _qemu_of(os.getpid())
    man = json.loads((out / "manifest.json").read_text())
    assert set(man["tables"]) == {"requests", "jobs", "calib", "repetition"}
    assert man["skipped"].get("host_kvm", "").startswith("no KVM guest ran")
    D = chapter.load(scratch_data)
    jobs, req = D["jobs"], D["requests"]
    p = chapter.parameters("quick")
    assert len(jobs) == 1 + len(p["aio"]) * len(p["variants"])
    per_boot = len(p["patterns"]) * (p["requests"] + p["warmup"])
    g = jobs[jobs.kind == "guest"].set_index("variant")
    allj = g.loc["all"]
    for layer in ("guest", "qemu", "host"):  # nearly every request is found in every layer
        assert allj[f"matched_{layer}"] >= 0.95 * per_boot, layer
    assert (
        allj.off_consistent
        and allj.qc_consistent
        and allj.guest_overrun == 0
        and allj.host_lost == 0
    )
    assert (allj.off_hi - allj.off_lo) / allj.tsc_hz < 500e-6
    iv = A.layer_intervals(req, jobs)
    cum = A.cumulative_table(iv, "one_run", aio="threads", pattern="seq").set_index("key")
    chain = [
        "guest_benchmark",
        "guest_virtio_pci",
        "host_kvm",
        "qemu_virtio",
        "qemu_aio",
        "host_block",
    ]
    med = cum.loc[chain, "median_ns"]
    assert med.notna().all() and med.is_monotonic_decreasing, (
        med
    )  # each layer nests in the one above
    assert cum.loc["host_benchmark", "n"] == p["host_requests"]


# ---------------------------------------------------------------- key findings
class _Run:
    """What a finding's measure() reads of one dataset: run.data.iv (per-request layer
    latencies), run.data.acc, the seed's table, and which tables the dataset has."""

    def __init__(self, iv):
        self.data = type("View", (), {"iv": iv, "acc": "TCG"})()

    def __contains__(self, name):
        return name == "requests"

    def reference(self, name, dtype=None):
        return load_reference(name)


def _iv(boots: dict, spread: float = 0.02, n: int = 20, seed: int = 3) -> pd.DataFrame:
    """Per-request layer latencies (ns) of synthetic boots: {(kind, aio, variant): [{column:
    value}, ...]}, one dict per boot, each request within `spread` of its boot's values."""
    rng = np.random.default_rng(seed)
    rows, job = [], 0
    for (kind, aio, variant), per_boot in boots.items():
        for vals in per_boot:
            for i in range(n):
                r = {"job": job, "kind": kind, "aio": aio, "variant": variant, "warm": 0}
                r["pattern"] = ("seq", "rand")[i % 2]
                r.update({k: v * (1 + rng.uniform(-spread, spread)) for k, v in vals.items()})
                if "host_syscall" in vals:
                    r["host_sub_call"] = {"native": "io_submit", "threads": "pread64"}[aio]
                rows.append(r)
            job += 1
    base = ["job", "kind", "aio", "variant", "warm", "pattern"]
    cols = ["guest_benchmark", "host_benchmark", "qemu_aio", "host_syscall", "host_sub_call"]
    return pd.DataFrame(rows).reindex(columns=base + cols)


def _six(**v) -> list:
    """Six boots whose values climb 3 % a boot from v."""
    return [{k: x * (1 + 0.03 * i) for k, x in v.items()} for i in range(6)]


def _kf(key):
    return next(f for f in chapter.key_findings if f.key == key)


def _verdict(key, iv):
    f = _kf(key)
    return f.outcome(f.measure(_Run(iv)))


def test_guest_host_on_boots():
    g = ("guest", "threads", "plain")
    h = ("host", "", "host_bench")
    iv = _iv({g: _six(guest_benchmark=300e3), h: _six(host_benchmark=50e3)})
    o = _verdict("guest_host", iv)
    assert o.verdict == HOLDS and o.estimate.value == pytest.approx(6, rel=0.05)
    assert "boots" in o.estimate.basis and "2010: 1.53×" in o.evidence
    # three boots each: 90 % at most, short of the finding's 95 %
    iv3 = _iv({g: _six(guest_benchmark=300e3)[:3], h: _six(host_benchmark=50e3)[:3]})
    assert _verdict("guest_host", iv3).verdict == UNDECIDED
    iv_close = _iv({g: _six(guest_benchmark=75e3), h: _six(host_benchmark=50e3)})
    assert _verdict("guest_host", iv_close).verdict == FAILS
    assert _kf("guest_host").measure(_Run(_iv({g: _six(guest_benchmark=300e3)}))) is None


def test_hostio_the_seeds_method_and_without_single_layer_boots():
    q, p = ("guest", "threads", "qemu"), ("guest", "threads", "plain")
    o = _verdict("hostio", _iv({q: _six(qemu_aio=100e3), p: _six(guest_benchmark=300e3)}))
    assert o.verdict == HOLDS and o.estimate.value == pytest.approx(33.3, rel=0.05)
    assert "as the seed's table" in o.estimate.basis
    o = _verdict("hostio", _iv({q: _six(qemu_aio=200e3), p: _six(guest_benchmark=300e3)}))
    assert o.verdict == FAILS
    # no single-layer boots: each all-layer boot's own share
    al = ("guest", "threads", "all")
    o = _verdict("hostio", _iv({al: _six(qemu_aio=100e3, guest_benchmark=320e3)}))
    assert o.verdict == HOLDS and "all-layer boots" in o.estimate.basis
    # the same share straddling 50 % from boot to boot: undecided
    mixed = [
        {"qemu_aio": x, "guest_benchmark": 300e3}
        for x in (120e3, 140e3, 150e3, 160e3, 170e3, 190e3)
    ]
    assert _verdict("hostio", _iv({al: mixed})).verdict == UNDECIDED


def test_tracing_cost_and_submit_on_boots():
    t, u = ("guest", "threads", "all"), ("guest", "threads", "plain")
    untraced = _six(guest_benchmark=300e3)
    for traced, want in (
        (_six(guest_benchmark=400e3), HOLDS),
        (_six(guest_benchmark=303e3), FAILS),
        ([{"guest_benchmark": x} for x in (250e3, 290e3, 330e3, 370e3, 410e3, 450e3)], UNDECIDED),
    ):
        assert _verdict("tracing_cost", _iv({t: traced, u: untraced})).verdict == want
    n, th = ("guest", "native", "all"), ("guest", "threads", "all")
    o = _verdict("submit", _iv({n: _six(host_syscall=20e3), th: _six(host_syscall=80e3)}))
    assert o.verdict == HOLDS and o.estimate.value == pytest.approx(0.25, rel=0.05)
    assert re.search(r"io_submit 2\d\.\d µs, pread64 8\d\.\d µs", o.evidence), o.evidence
    assert _kf("submit").measure(_Run(_iv({th: _six(host_syscall=80e3)}))) is None  # no aio=native


def _design_boots(p: dict, rounds: int) -> Counter:
    """How many boots of each (kind, aio, variant) `rounds` rounds of profile p give."""
    plan = [C.plan_round(p, random.Random(k), k) for k in range(rounds)]
    return Counter((j["kind"], j["aio"], j["variant"]) for r in plan for j in r)


def test_default_design_gives_every_finding_its_coverage():
    """The default profile's rounds boot each pair of cells a finding compares (key_findings.NEEDS)
    often enough for decide.ratio's interval to reach the finding's confidence, one round fewer
    would not, and it boots nothing else. The rounds are fixed: an adaptive budget (the old
    design: 4 to 8 rounds in 30 s) stopped after one round of 1 against 1 boots."""
    p = chapter.parameters("default")
    assert p["rep_min_runs"] == p["rep_max_runs"], "the budget must not decide the rounds"
    assert p["rep_budget_s"] >= 2 * chapter.plan_s["default"], "a cap for boots twice as slow"
    n = p["rep_min_runs"]
    have, fewer = _design_boots(p, n), _design_boots(p, n - 1)
    for f in chapter.key_findings:
        a, b = KF.NEEDS[f.key]
        cov = decide.ratio(np.arange(1.0, have[a] + 1), np.arange(1.5, have[b] + 1)).coverage
        assert cov >= f.confidence, (f.key, have[a], have[b], cov)
        cov1 = decide.ratio(np.arange(1.0, fewer[a] + 1), np.arange(1.5, fewer[b] + 1)).coverage
        assert cov1 < f.confidence, (f.key, "more rounds than the findings need")
    assert set(have) == {c for ab in KF.NEEDS.values() for c in ab}, "a boot no finding needs"


# per cell of the default design: (column, value in ns) of a boot; boots vary by `spread`
_TRUE = {
    KF.HOST: {"host_benchmark": 30e3},
    ("guest", "threads", "plain"): {"guest_benchmark": 200e3},
    ("guest", "threads", "qemu"): {"guest_benchmark": 210e3, "qemu_aio": 60e3},
    ("guest", "threads", "all"): {"guest_benchmark": 280e3, "host_syscall": 40e3},
    ("guest", "native", "all"): {"guest_benchmark": 270e3, "host_syscall": 15e3},
}
# the same design where no finding holds
_CONTRARY = {
    KF.HOST: {"host_benchmark": 120e3},
    ("guest", "threads", "plain"): {"guest_benchmark": 200e3},
    ("guest", "threads", "qemu"): {"guest_benchmark": 210e3, "qemu_aio": 140e3},
    ("guest", "threads", "all"): {"guest_benchmark": 204e3, "host_syscall": 40e3},
    ("guest", "native", "all"): {"guest_benchmark": 200e3, "host_syscall": 60e3},
}


def _design_iv(p: dict, rounds: int, true: dict, spread: float = 0.03, seed: int = 5):
    """Synthetic requests of `rounds` rounds of p's design: each boot's values are its cell's
    times a boot-to-boot factor within `spread`."""
    rng = np.random.default_rng(seed)
    boots = {
        c: [
            {k: v * (1 + rng.uniform(-spread, spread)) for k, v in true[c].items()}
            for _ in range(m)
        ]
        for c, m in _design_boots(p, rounds).items()
    }
    return _iv(boots)


def test_findings_decide_on_the_default_design_and_not_on_one_round():
    p = chapter.parameters("default")
    n = p["rep_min_runs"]
    for true, want in ((_TRUE, HOLDS), (_CONTRARY, FAILS)):
        iv = _design_iv(p, n, true)
        for f in chapter.key_findings:
            o = _verdict(f.key, iv)
            assert o.verdict == want, (f.key, o)
            assert f"{n} against {n} boots" in o.estimate.basis, o.estimate.basis
    # one round (the old default's budget): 1 against 1 boots, no coverage, whatever the values
    iv1 = _design_iv(p, 1, _TRUE)
    for f in chapter.key_findings:
        o = _verdict(f.key, iv1)
        assert o.verdict == UNDECIDED and o.estimate.coverage == 0, (f.key, o)


def test_boots_text_names_a_rounds_configurations():
    j = pd.DataFrame(
        {
            "aio": ["native", "threads", "threads", "threads", "native"],
            "variant": ["all", "all", "qemu", "plain", "all"],
        }
    )
    assert prose.boots_text(j) == "threads: plain, qemu, all; native: all"


def test_key_findings_of_the_committed_data_count_boots(book_data):
    """Every finding's interval on every dataset rests on boots, never on the requests inside
    them (tens of thousands of requests would give a falsely narrow interval)."""
    D = chapter.load(book_data.data_dir)
    if not len(D):
        pytest.skip("no committed virtio_blk_latency dataset yet")
    for m in D.manifests:
        run = Run(D, m)
        for f in chapter.key_findings:
            got = f.measure(run)
            assert got is not None and "boots" in got.estimate.basis, (f.key, m["run_id"])


# ---------------------------------------------------------------- the committed data
def test_committed_datasets_are_consistent(book_data):
    D = chapter.load(book_data.data_dir)
    if D["jobs"].empty:
        pytest.skip("no committed virtio_blk_latency dataset yet")
    j = D["jobs"]
    traced = j[(j.kind == "guest") & j.layers.str.contains("guest") & j.layers.str.contains("host")]
    assert (traced.off_consistent == 1).all(), "every all-layer boot has a non-empty offset bracket"
    iv = A.layer_intervals(D["requests"], j)
    for aio in sorted(set(iv.aio) - {""}):
        cum = A.cumulative_table(iv, "one_run", aio=aio, pattern="seq").set_index("key")
        chain = cum.loc[
            [
                "guest_benchmark",
                "guest_virtio_pci",
                "host_kvm",
                "qemu_virtio",
                "qemu_aio",
                "host_block",
            ],
            "mean_ns",
        ].dropna()
        assert chain.is_monotonic_decreasing, (aio, chain)


def test_prose_values_of_the_committed_data_do_not_depend_on_row_order(monkeypatch, book_data):
    """The prose's values are strings or integers (never floats), every request carries its
    boot's columns, and the same datasets read with shuffled rows give the same values."""
    D = chapter.load(book_data.data_dir)
    if not len(D):
        pytest.skip("no committed virtio_blk_latency dataset yet")
    f = prose.values(D)
    assert f and all(
        isinstance(v, (str, int)) and not isinstance(v, (bool, float)) for v in f.values()
    )
    req = D["requests"]
    assert {"kind", "round", "aio", "variant", "accel"} <= set(
        req.columns
    ) and req.kind.notna().all()
    monkeypatch.setenv("PERFBOOK_SHUFFLE_ROWS", "7")
    assert prose.values(chapter.load(book_data.data_dir)) == f


def test_ci_columns_state_the_real_coverage():
    iv = pd.DataFrame(
        [
            {"warm": 0, "aio": a, "host_sub_call": "io_submit", "host_syscall": 1000.0 * (i + 1)}
            for a, n in (("native", 3), ("threads", 7))
            for i in range(n)
        ]
    )
    s = A.syscall_summary(iv)
    assert "75–98.43 % CI" in s.columns and "95 % CI" not in s.columns
    from perfbook.data.dataset import load_reference

    req, jobs = _synthetic_requests()
    cum = A.cumulative_table(A.layer_intervals(req, jobs), "one_run", aio="threads", pattern="seq")
    side = A.side_by_side_cumulative(cum, load_reference(chapter.name))
    want = f"median {tools_stats.ci_label(cum['n'])} (ns)"
    assert want in side.columns and "95 %" not in " ".join(side.columns)


def test_the_io_uring_sentence_reads_for_a_dataset_without_io_uring_boots(monkeypatch):
    """The default profile boots no io_uring guest (full does): the page still gets its
    sentence (a glue name the markdown quotes and the dataset cannot give fails the book
    build), and where io_uring was booted the sentence quotes its call and time."""
    rows = [
        {"aio": "threads", "syscall": "preadv", "median (µs)": 20.0},
        {"aio": "native", "syscall": "io_submit", "median (µs)": 8.0},
    ]
    monkeypatch.setattr(prose.T, "syscalls", lambda D: pd.DataFrame(rows))
    got = prose.syscalls(None)
    assert got["sys_native_call"] == "io_submit" and "sys_io_uring_call" not in got
    assert got["sys_io_uring_sentence"].startswith("This dataset booted no io_uring guest")
    rows.append({"aio": "io_uring", "syscall": "io_uring_enter", "median (µs)": 22.8})
    got = prose.syscalls(None)
    assert got["sys_io_uring_sentence"] == "With io_uring it submits with io_uring_enter (22.8 µs)."
