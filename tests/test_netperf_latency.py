"""Tests of the netperf_latency chapter.

Unit tests and fixture tests run everywhere; the live ones need root, netperf and
iproute2 and say so when they skip. Signals during a run are tests/test_contract.py's matrix.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from conftest import (
    NOBODY,
    ROOT,
    need_preflight,
    need_root,
    need_tool,
    nobody_requests,
    others_listen,
)
from perfbook.analysis.findings import FAILS, HOLDS, UNDECIDED, evaluate
from perfbook.chapters import netperf_latency as X
from perfbook.chapters.netperf_latency import analysis as A
from perfbook.chapters.netperf_latency import collect as C
from perfbook.chapters.netperf_latency import figures, prose, tables
from perfbook.chapters.netperf_latency import key_findings as KF
from perfbook.chapters.netperf_latency import parse as P
from perfbook.chapters.netperf_latency.parse import CELL, LATENCY_KEYS
from perfbook.core.errors import ParameterError, PerfbookError
from perfbook.data.dataset import table_path
from perfbook.framework import sequence as framework
from perfbook.hoststate.netns import NS_PREFIX, list_netns, sweep_stale_netns

FIX = ROOT / "tests" / "fixtures" / "netperf"
FIX_DATA = FIX / "data"
CH = X.chapter


# ------------------------------------------------------------------ parameters
def test_params_defaults_and_overrides():
    p = CH.parameters("quick")
    assert p["paths"] == ["loopback", "veth"] and p["rep_min_runs"] == p["rep_max_runs"] == 1
    p = CH.parameters("default", pins="none,same", reps=2, seconds=1)  # reps fixes the rounds
    assert p["pins"] == ["none", "same"] and p["rep_min_runs"] == p["rep_max_runs"] == 2
    assert p["seconds"] == 1.0 and isinstance(p["seconds"], float)
    p = CH.parameters("default", rep_target=0.1, rep_budget_s=5)
    assert p["rep_target"] == 0.1 and p["rep_min_runs"] == CH.profiles["default"]["rep_min_runs"]
    assert CH.profiles["default"]["pins"] == ["none", "split", "same"], (
        "a validated copy, not the profile"
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"profile": "huge"},
        {"paths": "loopback,wifi"},
        {"protos": []},
        {"reps": 0},
        {"reps": 1.5},
        {"seconds": -1},
        {"netperf_seconds": 0},
        {"bogus": 1},
        {"pins": "all"},
        {"rep_target": 0},
        {"rep_target": 2},
        {"rep_budget_s": 0},
        {"rep_warmup": -1},
        {"rep_min_runs": 0},
        {"rep_min_runs": 9, "rep_max_runs": 3},
        {"rep_max_runs": "many"},
        {"sched_seconds": 6},
        {"ping_count": -1},
        {"request_size": 70000},
    ],
)
def test_params_rejects_bad_input(bad):
    bad = dict(bad)
    profile = bad.pop("profile", "quick")
    with pytest.raises(ParameterError) as ei:
        CH.parameters(profile, **bad)
    assert "\n" not in str(ei.value)


def test_bad_parameter_writes_nothing(scratch_data):
    with pytest.raises(ParameterError):
        framework.collect(CH, "quick", scratch_data, say=lambda s: None, reps=-3)
    assert list((scratch_data / "runs").iterdir()) == []


def test_non_root_is_skipped_before_anything(scratch_data, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "root" in CH.preflight()[0]
    said = []
    assert framework.collect(CH, "quick", scratch_data, say=said.append) is None
    assert said and said[0].startswith("SKIPPED:") and "root" in said[0]
    assert list((scratch_data / "runs").iterdir()) == []


# ------------------------------------------------ netperf's histogram (netlib.c)
def test_bucket_widths_are_a_hundredth_of_the_decade():
    w = P.netperf_bucket_width_us([3, 13, 99, 100, 150, 999, 1000, 2500, 12000])
    assert list(w) == [0.1, 1, 1, 10, 10, 10, 100, 100, 1000]


def test_hist_counts_place_values_in_netperf_buckets():
    counts, ridiculous = P.netperf_hist_counts([5, 13, 13, 150, 2500, 200_000_000, -1])
    assert counts[50] == 1  # unit_usec: 5 us -> bucket 50 (0.1 us wide)
    assert counts[100 + 13] == 2  # ten_usec: 13 us -> bucket 13 (1 us wide)
    assert counts[200 + 15] == 1  # hundred_usec: 150 us -> bucket 15 (10 us wide)
    assert counts[300 + 25] == 1  # unit_msec: 2.5 ms -> bucket 25 (100 us wide)
    assert ridiculous == 2 and counts.sum() == 5


def test_percentile_interpolates_inside_the_bucket_and_truncates():
    us = np.array([13] * 50 + [14] * 40 + [24] * 9 + [300])
    c, _ = P.netperf_hist_counts(us)
    # num lands exactly at the end of bucket 13: interpolation gives its upper edge
    assert P.netperf_hist_percentile(c, len(us), 0.5) == 14
    assert P.netperf_hist_percentile(c, len(us), 0.9) == 15
    assert P.netperf_hist_percentile(c, len(us), 0.99) == 25
    # a constant 150 us is reported 5 us high: half-way through a 10-us bucket
    c, _ = P.netperf_hist_counts(np.full(1000, 150))
    assert P.netperf_hist_percentile(c, 1000, 0.5) == 155
    assert P.netperf_hist_percentile(c, 1000, 0.99) == 159


def test_netperf_style_error_is_bounded_by_one_bucket_plus_one_us():
    rng = np.random.default_rng(1)
    lat = (rng.lognormal(np.log(18_000), 0.3, 50_000)).astype(np.int64)
    phase = rng.integers(0, 1000, len(lat))
    got = P.netperf_style_percentiles(lat, phase)
    for p, v in got.items():
        exact = np.percentile(lat / 1000, p * 100)
        assert abs(v - exact) <= P.netperf_bucket_width_us(exact) + 1.0


def test_rank_rule_truncates_the_double_product():
    assert P.netperf_rank(200, 0.99) == 198 and P.netperf_rank(3, 0.5) == 1
    assert P.netperf_rank(100, 0.29) == 28  # 0.29 * 100 = 28.999999999999996 in C too
    assert P.netperf_rank(1, 0.5) == 0
    assert (
        P.netperf_rank_samples(np.array([20_000]), ps=(0.5,))[0.5]
        != P.netperf_rank_samples(np.array([20_000]), ps=(0.5,))[0.5]
    )  # rank 0: NaN, netperf reports 0


def _sparse_tail():
    """198 round trips of 20 us and two of 5 ms: P99's rank (198) is the last 20-us one."""
    lat = np.array([20_300] * 198 + [5_000_000, 5_000_000], dtype=np.int64)
    return lat, np.zeros(len(lat), dtype=np.int64)


def test_sparse_tail_interpolated_percentile_leaves_the_bucket_rank_rule_does_not():
    lat, phase = _sparse_tail()
    nq = P.netperf_style_percentiles(lat, phase)[0.99]
    nr = P.netperf_rank_samples(lat, phase)[0.99]
    exact = float(np.percentile(lat / 1000, 99))  # 20.3 + 0.01 * (5000 - 20.3)
    assert nq == 21 and nr == 20 and exact == pytest.approx(70.097)
    # the old rule (|netperf - interpolated| <= bucket + 1 us) fails here, with no defect
    assert abs(nq - exact) > P.netperf_bucket_width_us(exact) + 1.0
    # the rank rule holds: 21 is the upper edge of the bucket [20, 21] holding sample 198
    assert P.netperf_in_rank_bucket(nq, nr)
    # and it catches defects: a decade off, an off-by-one rank, a sample outside the bucket
    assert not P.netperf_in_rank_bucket(nq * 10, nr)
    assert not P.netperf_in_rank_bucket(nq, np.sort(lat // 1000)[198])
    assert not P.netperf_in_rank_bucket(22, nr) and not P.netperf_in_rank_bucket(19, nr)


def test_quantization_table_records_the_rank_check():
    lat, phase = _sparse_tail()
    st = P.sample_stats(lat)
    nq = P.netperf_style_percentiles(lat, phase)
    nr = P.netperf_rank_samples(lat, phase)
    row = {
        "rep": 0,
        "host_id": "h-x",
        "path": "loopback",
        "proto": "udp",
        "pin": "none",
        "tool": "rrbench",
        **st,
        **{f"nq_p{int(p * 100)}_us": v for p, v in nq.items()},
        **{f"nr_p{int(p * 100)}_us": v for p, v in nr.items()},
    }
    q = A.quantization(pd.DataFrame([row])).set_index("percentile")
    assert q["in_rank_bucket"].all()
    assert q.loc["P99", "rank_us"] == 20 and q.loc["P99", "netperf_style_us"] == 21
    assert (q.loc["P99", "rank_bucket_lo_us"], q.loc["P99", "rank_bucket_hi_us"]) == (20, 21)
    assert abs(q.loc["P99", "error_us"]) > 40  # the interpolated gap stays visible
    # a dataset recorded before nr_* existed: no verdict rather than a false one
    old = A.quantization(pd.DataFrame([{k: v for k, v in row.items() if not k.startswith("nr_")}]))
    assert old["in_rank_bucket"].isna().all()


@pytest.mark.parametrize("seed", range(6))
def test_rank_rule_holds_on_random_sparse_tails(seed):
    """Few samples, heavy tails across decades, microsecond phases: always the same bucket."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 400))
    lat = np.exp(rng.uniform(np.log(2_000), np.log(3_000_000), n)).astype(np.int64)
    phase = rng.integers(0, 1000, n)
    nq = P.netperf_style_percentiles(lat, phase, ps=(0.5, 0.9, 0.99, 0.999))
    nr = P.netperf_rank_samples(lat, phase, ps=(0.5, 0.9, 0.99, 0.999))
    for p in nq:
        if nr[p] == nr[p]:
            assert P.netperf_in_rank_bucket(nq[p], nr[p]), (p, nq[p], nr[p])


# ------------------------------------------------------------------ parsers
def test_parse_netperf_k_all_fixture():
    kv = P.parse_kv((FIX / "netperf_k_all_udp.txt").read_text())
    assert kv["PROTOCOL"] == "UDP" and kv["THROUGHPUT_UNITS"] == "Trans/s"
    for k in LATENCY_KEYS + ("RT_LATENCY", "REQUEST_SIZE", "RESPONSE_SIZE"):
        assert k in kv
    # MEAN_LATENCY and RT_LATENCY (1/rate) describe the same transactions
    assert abs(float(kv["MEAN_LATENCY"]) / float(kv["RT_LATENCY"]) - 1) < 0.05


def test_parse_ping_and_rrbench():
    pg = P.parse_ping((FIX / "ping_f_loopback.txt").read_text())
    assert pg["sent"] == pg["received"] == 20000
    assert pg["min_us"] == pytest.approx(4.0) and pg["max_us"] == pytest.approx(2312.0)
    assert P.parse_rrbench("n=12 lost=0 elapsed_ns=99\n") == {"n": 12, "lost": 0, "elapsed_ns": 99}
    with pytest.raises(PerfbookError):
        P.parse_rrbench("garbage")


def test_parse_sched_trace_pairs_wakeup_with_switch_in():
    lines = [
        "  rrbench-10 [001] d..2. 100.000010: sched_wakeup: comm=rrbench pid=11 prio=120 target_cpu=000",
        "  <idle>-0 [000] d..2. 100.000013: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 "
        "prev_state=R ==> next_comm=rrbench next_pid=11 next_prio=120",
        # the client is woken while still on its CPU: no wait to measure
        "  rrbench-11 [000] d..2. 100.000020: sched_wakeup: comm=rrbench pid=10 prio=120 target_cpu=001",
        "  rrbench-10 [001] d..2. 100.000021: sched_switch: prev_comm=rrbench prev_pid=10 prev_prio=120 "
        "prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120",
        "  other-99 [001] d..2. 100.000030: sched_wakeup: comm=other pid=99 prio=120 target_cpu=001",
    ]
    d = P.parse_sched_trace(lines, {"server": 11, "client": 10})
    assert list(d["server"]) == [pytest.approx(3.0)] and len(d["client"]) == 0


def test_parse_sched_trace_with_record_tgid_and_irq_info_off():
    """record-tgid on, irq-info off, a comm with a space: the same pairing."""
    lines = [
        "         rrbench-10      (     10) [001]   100.000010: sched_wakeup: comm=rrbench pid=11 prio=120 "
        "target_cpu=000",
        "          <idle>-0       (-------) [000]   100.000013: sched_switch: prev_comm=swapper/0 prev_pid=0 "
        "prev_prio=120 prev_state=R ==> next_comm=rr bench next_pid=11 next_prio=120",
    ]
    d = P.parse_sched_trace(lines, {"server": 11, "client": 10})
    assert list(d["server"]) == [pytest.approx(3.0)] and len(d["client"]) == 0


def test_log_histogram_round_trip():
    lat = np.array([500, 17_000, 17_100, 1_200_000], dtype=np.uint32)
    bins, counts = P.log_histogram(lat)
    lo, hi = P.bin_edges_us(bins)
    assert counts.sum() == 4
    for v in lat / 1000:
        k = np.searchsorted(hi, v, side="right")
        assert lo[k] <= v < hi[k]


# ------------------------------------------------------------ fixture dataset
def _check_dataset(data_dir, crossval=True, rank_check=True):
    d = CH.load(data_dir)
    runs, hist = d["runs"], d["hist"]
    assert set(runs["tool"]) == {"rrbench", "netperf"}
    rr = runs[runs["tool"] == "rrbench"]
    # the histogram holds every recorded transaction
    per_run = hist.groupby(["run_id", "order"])["count"].sum()
    for _, r in rr.iterrows():
        assert per_run[(r["run_id"], r["order"])] == r["n"]
    # cross-validation: every percentile within the stated tolerance
    cv = A.crossval(runs)
    assert len(cv) == 3 * len(rr.groupby(CELL))
    bad = cv[~cv["agree"]]
    if crossval:
        assert bad.empty, bad.to_string()
    # quantization: netperf-style percentiles of our samples beside the exact (interpolated)
    # ones; the gap is a result, not a bound (a sparse tail puts them buckets apart). The exact
    # check: netperf's value lies in the bucket of our sample at netperf's own rank
    # (netlib.c HIST_get_percentile, parse.RANK_RULE); only a defect breaks it
    q = A.quantization(runs)
    assert len(q) == 3 * len(runs[runs["tool"] == "rrbench"])
    if rank_check:  # datasets recorded before nr_* existed (the fixture) have <NA>
        assert q["in_rank_bucket"].notna().all()
        man = d.manifests[0].facts["netperf_rank_check"]
        assert man["in_rank_bucket"] == man["percentiles_checked"] == len(q)
    checked = q[q["in_rank_bucket"].notna()]
    assert checked["in_rank_bucket"].all(), checked[
        ~checked["in_rank_bucket"].astype(bool)
    ].to_string()
    # netperf's mean agrees with 1/transaction rate
    nps = runs[runs["tool"] == "netperf"]
    assert ((nps["mean_us"] / nps["rt_latency_us"] - 1).abs() < 0.05).all()
    return d


def test_fixture_dataset_cross_validates():
    d = _check_dataset(FIX_DATA, rank_check=False)
    assert set(d["ping"]["path"]) == {"loopback", "veth"}
    assert d["runs"]["nr_p50_us"].isna().all(), "an optional column absent from an older dataset"


def test_reference_table_has_provenance():
    from perfbook.data.dataset import load_reference

    ref = load_reference(CH.name)
    for col in ("seed_file", "article_title", "date", "environment", "note"):
        assert ref[col].notna().all()
    sel = ref[ref["run"] == "selectors"].set_index("metric")["value"]
    assert sel["MIN_LATENCY"] == 11 and sel["P99_LATENCY"] == 74 and sel["MAX_LATENCY"] == 3079
    hist = ref[ref["metric"] == "hist_count"]
    total = ref[(ref["metric"] == "HIST_TOTAL")]["value"].iloc[0]
    assert hist["value"].sum() == total


def test_seed_conditions_come_from_the_reference_table():
    """The seed's run length is its -k all ELAPSED_TIME; its CPU count is a provenance'd row
    whose empty value means the article does not state it."""
    from perfbook.data.dataset import load_reference

    ref = load_reference(CH.name)
    c = prose.seed_conditions(ref)
    assert c["seed_seconds"] == "10"
    assert c["seed_cpus"] == "not stated in the article"
    row = ref[ref["metric"] == "CPU_COUNT"]
    assert len(row) == 1 and row["note"].iloc[0].startswith("not stated")
    stated = pd.concat([ref, row.assign(value=4.0)], ignore_index=True)
    stated = stated[~(stated["metric"].eq("CPU_COUNT") & stated["value"].isna())]
    assert prose.seed_conditions(stated)["seed_cpus"] == "4 CPUs"


def test_seed_histogram_buckets_in_numeric_order_and_hosts_pooled(book_data):
    """Buckets in numeric order, points on a log axis; this host and the reference host have
    an entry each (one when they are one host), every other host is pooled in one entry that
    counts them, and no other host is named, whichever host is this host (book_data)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from conftest import legend_texts
    from perfbook.analysis import fleetview
    from perfbook.data.machine import short_kind

    D = CH.load(book_data.data_dir)
    fig, _ = figures.seed_histogram(D)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    lo = [float(t.split("-")[0].lstrip("<")) for t in labels]
    assert lo == sorted(lo) and len(set(labels)) == len(labels), labels
    assert ax.get_yscale() == "log" and not ax.patches, "points, not bars, on a log axis"
    legend = legend_texts(fig)
    F = fleetview.fleet(D)
    assert F.this == D.quoted.host_id
    assert F.label(fleetview.THIS) in legend and short_kind(D.quoted.host) in F.label(
        fleetview.THIS
    )
    if F.reference != F.this:  # drawn apart from this host, never pooled with the others
        assert F.label(fleetview.REFERENCE) in legend and F.reference not in F.others
    others = [h for h in D.hosts if h not in (F.this, F.reference)]
    if others:  # the other hosts are one entry, not one each
        assert f"other hosts (n = {len(others)})" in legend
    # a legend names a machine by its label (Fleet.name), never by its id
    assert not any(h in t for h in D.hosts for t in legend), legend
    named = {h for h in D.hosts if any(t.endswith(": " + F.name(h)) for t in legend)}
    assert named == {F.this, F.reference} & set(D.hosts), (named, legend)
    plt.close(fig)


def test_data_dependent_words_are_computed(book_data):
    """The bucket names and the comparisons the prose draws come from the data, not from typed words."""
    D = CH.load(book_data.data_dir)
    f = prose.values(D)
    vh = A.versus_seed_histogram(D.H, D.ref, D.quoted.host_id).set_index("bucket")
    assert f["seed_mode_bucket"] == vh.seed_fraction.idxmax()
    assert f["ours_mode_bucket"] == vh.ours_fraction.idxmax()
    for proto in ("udp", "tcp"):
        assert f[f"spread_{proto}_text"].startswith("the lines are ")
    assert "path: " in f["mc_where"]


def _glue_names() -> set[str]:
    import nbformat

    nb = nbformat.read(ROOT / "chapters" / "netperf_latency.ipynb", as_version=4)
    return {
        m
        for c in nb.cells
        if c.cell_type == "markdown"
        for m in re.findall(r"\{glue:text\}`([^`]+)`", c.source)
    }


def test_findings_give_every_value_the_prose_quotes(book_data):
    """Every glue name of the chapter's prose comes from prose.values() (or the shared repetition
    section), as a string or an integer, from the quoted dataset."""
    D = CH.load(book_data.data_dir)
    f = prose.values(D)
    import nbformat

    from perfbook.book.notebook import frame_glue

    frame = frame_glue(
        CH, nbformat.read(str(ROOT / "chapters" / "netperf_latency.ipynb"), as_version=4)
    )
    missing = {n for n in _glue_names() - set(f) - frame if not n.startswith("rep_")}
    assert not missing, missing
    assert all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in f.values())
    assert f["host"] == D.quoted.host_id and f["n_datasets"] == len(D)
    # the ladder the prose quotes is the quoted dataset's, and so is the table beside it
    lad = tables.ladder(D).set_index(["host_id", "path", "proto", "pin"])
    assert (
        f"{lad.loc[(D.quoted.host_id, 'loopback', 'udp', 'none'), 'P50']:,.1f}"
        == f["loopback_udp_none_P50"]
    )


def test_findings_do_not_depend_on_row_order(monkeypatch, book_data):
    base = prose.values(CH.load(book_data.data_dir))
    monkeypatch.setenv("PERFBOOK_SHUFFLE_ROWS", "11")
    assert prose.values(CH.load(book_data.data_dir)) == base


# -------------------------------------------------- the C harness (no root needed)
def test_rrbench_records_every_transaction(tmp_path):
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler (apt-get install gcc)")
    from perfbook.probes import cbuild

    exe = cbuild.binary("rrbench")
    for proto in ("udp", "tcp"):
        srv = subprocess.Popen(
            [str(exe), "server", "-P", proto, "-p", "0"], stdout=subprocess.PIPE, text=True
        )
        try:
            port = srv.stdout.readline().split()[1]
            out = tmp_path / f"{proto}.bin"
            r = subprocess.run(
                [
                    str(exe),
                    "client",
                    "-P",
                    proto,
                    "-p",
                    port,
                    "-l",
                    "0.2",
                    "-w",
                    "0.05",
                    "-o",
                    str(out),
                ],
                capture_output=True,
                text=True,
                timeout=20,
            )
        finally:
            srv.kill()
            srv.wait()
        assert r.returncode == 0, r.stderr
        s = P.parse_rrbench(r.stdout)
        lat, phase = P.read_rrbench_file(out)
        assert s["n"] == len(lat) > 100 and s["lost"] == 0
        assert (phase < 1000).all() and lat.min() > 0


# ------------------------------------------------------------------ live tests
def _our_leftovers(pid: int) -> list[str]:
    return [n for n in list_netns() if n.startswith(f"{NS_PREFIX}{pid}_")]


def _pids(name: str) -> set[int]:
    r = subprocess.run(["pgrep", "-x", name], capture_output=True, text=True)
    return {int(x) for x in r.stdout.split()}


def _live_ready():
    need_root("a live netperf_latency run")
    need_tool("netperf", "netperf")
    need_tool("netserver", "netperf")
    need_preflight(CH)


def test_sweep_removes_a_dead_owners_namespace():
    need_root("creating a network namespace")
    need_tool("ip", "iproute2")
    p = subprocess.Popen(["true"])
    p.wait()
    name = f"{NS_PREFIX}{p.pid}_stale"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        removed = sweep_stale_netns(log=lambda s: None)
        assert name in removed and name not in list_netns()
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _nobody_netperf(addr: str, port: int, p: dict) -> bool:
    """Did 100 netperf UDP transactions as uid 65534 get through to a netserver?"""
    cmd = [
        "setpriv",
        f"--reuid={NOBODY}",
        f"--regid={NOBODY}",
        "--clear-groups",
        *C.netperf_cmd(addr, port, "udp", "none", p, transactions=100),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd="/")
    return r.returncode == 0 and "THROUGHPUT" in P.parse_kv(r.stdout)


def _root_ns_server(cmd: list[str], port: int) -> subprocess.Popen:
    """A server in the host's network namespace, as the loopback path had it before #43
    (the control: the attacker's probes must reach it)."""
    from perfbook.core.proc import die_with_parent

    srv = subprocess.Popen(
        cmd,
        start_new_session=True,
        preexec_fn=die_with_parent,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        if subprocess.run(
            ["ss", "-Htuln", f"sport = :{port}"], capture_output=True, text=True
        ).stdout.strip():
            return srv
        time.sleep(0.05)
    os.killpg(srv.pid, 9)
    pytest.fail(f"the control server {cmd[0]} did not listen on {port}")


def test_another_user_cannot_reach_the_labs_servers(tmp_path):
    """#43: every server a collect starts (netserver, rrbench's UDP and TCP servers), on every
    path, is out of reach of another local user: a netperf run as nobody against the netserver
    fails, and nobody's request to an rrbench server is never answered. The same probes do
    get through to servers in the host's namespace (the control), so they can fail."""
    _live_ready()
    need_tool("setpriv", "util-linux")
    from perfbook.probes import cbuild

    binary = cbuild.binary("rrbench")
    p = CH.parameters("quick")
    control = []
    try:  # the control: the same servers in the host's network namespace
        port = C._free_port()
        control.append(
            _root_ns_server(["netserver", "-D", "-4", "-L", "127.0.0.1", "-p", str(port)], port)
        )
        assert _nobody_netperf("127.0.0.1", port, p), "the netperf probe does not work"
        targets = []
        for proto in ("udp", "tcp"):
            port = C._free_port()
            control.append(
                _root_ns_server(
                    [
                        str(binary),
                        "server",
                        "-P",
                        proto,
                        "-b",
                        "127.0.0.1",
                        "-p",
                        str(port),
                        "-q",
                        "1",
                        "-r",
                        "1",
                    ],
                    port,
                )
            )
            targets.append((proto, "127.0.0.1", port))
        assert nobody_requests(targets) == ["served", "served"], "the request probe does not work"
    finally:
        for c in control:
            os.killpg(c.pid, 9)
            c.wait()
    with C.Lab(log=lambda s: None) as lab:
        lab.make_veth()
        for path in ("loopback", "veth"):
            ns = C.Netserver(lab, path, tmp_path).start()
            assert not _nobody_netperf(ns.addr, ns.port, p), (
                f"nobody ran netperf against our netserver on {path}"
            )
            servers = [
                (proto, *C.rrbench_server(lab, binary, path, proto, p)) for proto in ("udp", "tcp")
            ]
            # rrbench takes any free port of its namespace: one that a server of the host's
            # namespace happens to use as well says nothing about ours
            targets = [
                (proto, lab.addr(path), port)
                for proto, srv, port in servers
                if not others_listen(proto, port, srv.pid)
            ]
            got = nobody_requests(targets)
            assert not set(got) & {"served", "accepted"}, (
                f"{path}: nobody reached our rrbench servers: {got}"
            )
            for _, srv, _ in servers:
                lab.stop(srv)
            ns.stop()
        for name in lab.netns:  # and nobody can enter our namespaces to reach them from inside
            r = subprocess.run(
                [
                    "setpriv",
                    f"--reuid={NOBODY}",
                    f"--regid={NOBODY}",
                    "--clear-groups",
                    "nsenter",
                    f"--net=/run/netns/{name}",
                    "true",
                ],
                capture_output=True,
                text=True,
            )
            assert r.returncode != 0, f"nobody entered {name}"
    assert _our_leftovers(os.getpid()) == []


def test_a_netperf_warm_up_counts_transactions_and_a_measured_run_whole_seconds():
    p = {**CH.parameters("quick"), "netperf_seconds": 2, "netperf_transactions": None}
    run = C.netperf_cmd("10.0.0.1", 9, "udp", "none", p)
    warm = C.netperf_cmd("10.0.0.1", 9, "udp", "none", p, transactions=2000)
    at = run.index("-l")
    assert run[at + 1] == "2" and warm[at + 1] == "-2000"
    assert warm[: at + 1] + warm[at + 2 :] == run[: at + 1] + run[at + 2 :]  # nothing else differs


def test_quick_counts_its_netperf_transactions_and_default_its_seconds():
    """quick's measured netperf runs are -l -N (a whole second each was most of its time);
    without a count a run is -l netperf_seconds (full; the default passes each run the count of
    its cell's rrbench run, netperf_match); an explicit count wins over both."""
    q, d = CH.parameters("quick"), CH.parameters("default")
    assert q["netperf_transactions"] and d["netperf_transactions"] is None
    assert (
        d["netperf_match"] and not q["netperf_match"] and not CH.parameters("full")["netperf_match"]
    )
    at = C.netperf_cmd("10.0.0.1", 9, "udp", "none", q).index("-l")
    assert C.netperf_cmd("10.0.0.1", 9, "udp", "none", q)[at + 1] == f"-{q['netperf_transactions']}"
    assert C.netperf_cmd("10.0.0.1", 9, "udp", "none", d)[at + 1] == str(d["netperf_seconds"])
    assert C.netperf_cmd("10.0.0.1", 9, "udp", "none", q, transactions=2000)[at + 1] == "-2000"


def test_live_quick_collect(scratch_data):
    _live_ready()
    before = _pids("netserver")
    out = framework.collect(CH, "quick", scratch_data, say=lambda s: None, rep_warmup=1)
    assert (out / "manifest.json").is_file()
    # the repetition table: one experiment for both paths (they share their rounds), one key
    # per cell and tool; the warm-up round is counted there and absent from the runs table
    rep = pd.read_csv(table_path(out, "repetition"))
    runs = pd.read_csv(table_path(out, "runs"))
    p = CH.parameters("quick")
    assert set(rep["experiment"]) == {"rounds"}
    assert len(rep) == len(p["paths"]) * len(p["protos"]) * len(p["pins"]) * 2
    assert (rep["warmup"] == 1).all() and (rep["n"] == 1).all()
    assert set(rep["stopped_by"]) <= {"ci_target", "max_runs"}
    assert set(runs["rep"]) == {0} and len(runs) == len(rep)
    # one repetition: a single disturbed run on this shared machine may spoil one P99, so
    # the cross-validation proper is test_live_crossval (medians of three repetitions)
    d = _check_dataset(scratch_data, crossval=False)
    man = d.manifests[0]
    assert man.profile == "quick" and "profile" not in man.parameters
    assert man["facts"]["warmup_runs"]["netperf_warmup_transactions"] == C.WARMUP_TRANSACTIONS
    if "sched breakdown" not in man.skipped:
        # a role whose reply always arrives before it blocks is never woken (seen once in
        # a quick run); the breakdown still needs wake-ups to measure in some role
        assert not d["sched"].empty and (d["sched"]["wakeups"] > 0).any()
        assert set(d["sched"]["role"]) == {"client", "server"}
    assert _our_leftovers(os.getpid()) == []
    assert _pids("netserver") - before == set()
    assert _pids("rrbench") == set()


def test_live_crossval(scratch_data):
    """netperf's P50/P90/P99 against our distribution on live data, within the stated
    tolerance (analysis.crossval): medians of three interleaved repetitions."""
    _live_ready()
    framework.collect(
        CH,
        "quick",
        scratch_data,
        say=lambda s: None,
        reps=3,
        pins="split",
        sched_seconds=0,
        ping_count=0,
    )
    cv = A.crossval(CH.load(scratch_data)["runs"])
    assert len(cv) == 3 * 2 * 2
    # netperf and rrbench measure different (interleaved) runs, so their closeness is
    # statistical: the chapter records and shows `agree` per percentile. The test demands
    # that the comparison was made for every cell and percentile, and a bound that only a
    # defect breaks (a unit or bucket-scale error is a factor of 1000, not of a busy CPU).
    assert cv[["ours_us", "netperf_us", "tolerance_us"]].notna().all().all(), cv.to_string()
    assert (cv["ours_us"] > 0).all() and (cv["netperf_us"] > 0).all(), cv.to_string()
    ratio = cv["netperf_us"] / cv["ours_us"]
    assert ratio.between(1 / 30, 30).all(), cv.assign(ratio=ratio).to_string()
    assert _our_leftovers(os.getpid()) == []


def test_hosts_side_by_side_and_pin_comparison(tmp_path):
    """Two hosts (the fixture and a copy under another id): comparisons and captions."""
    import json

    data = tmp_path / "data"
    shutil.copytree(FIX_DATA, data)
    src = next((data / "runs").glob("*/netperf_latency/*"))
    dst = data / "runs" / "h-00000000fa4e" / "netperf_latency" / "20300101T000000Z"
    shutil.copytree(src, dst)
    m = json.loads((dst / "manifest.json").read_text())
    m["host"]["host_id"], m["run_id"] = "h-00000000fa4e", dst.name
    m["parameters"]["profile"] = "quick"
    (dst / "manifest.json").write_text(json.dumps(m))
    d = CH.load(data)
    ms = d.manifests
    ref = d.quoted
    assert ref["run_id"] != dst.name, "a newer quick run does not become the prose's dataset"
    assert set(d.shown) == {ref.host_id, "h-00000000fa4e"}
    # the fixture has one run per cell; three slightly different copies make a comparison
    runs = pd.concat(
        [d["runs"].assign(rep=k, p50_us=d["runs"]["p50_us"] * (1 + 0.001 * k)) for k in range(3)],
        ignore_index=True,
    )
    hc = A.host_comparison(runs, d.shown, ref.host_id)
    assert len(hc) == 2 * 2 * 2 and (hc["baseline"] == ref.host_id).all()
    assert not hc["significant"].any(), "identical data on both hosts: nothing differs"
    # 3 rounds against 3 cannot reach p < 0.05 (min_p_value 0.1): the test is not run
    assert (
        hc["verdict"].str.contains("not tested \\(3 against 3").all() and hc["p_value"].isna().all()
    )
    pc = A.pin_comparison(runs)
    assert set(pc["pin"]) <= {"same", "split"} and (pc["baseline"] == "none").all()
    assert pc["shift_low"].le(pc["shift_high"]).all()
    cap = A.caption_for(d["runs"], ms, "Exceedance")
    assert "runs per group" in cap and "h-00000000fa4e" in cap and "unrecorded transactions" in cap
    assert A.host_comparison(d["runs"], {ref.host_id: ref["run_id"]}, ref.host_id).empty
    # the hosts sentence says why nothing is compared: one run per cell
    assert "fewer than two runs" in prose.hosts(d)["host_sentence"]


def test_a_server_on_every_interface_is_refused():
    """netserver must listen on the lab's address only (#20: no server on all interfaces)."""
    ours = "LISTEN 0      4096       127.0.0.1:12865      0.0.0.0:*\n"
    wide = (
        "LISTEN 0      4096         0.0.0.0:12865      0.0.0.0:*\n"
        "LISTEN 0      4096            [::]:12866         [::]:*\n"
        "LISTEN 0      4096               *:12867            *:*\n"
    )
    assert P.wildcard_listeners(ours) == []
    assert P.wildcard_listeners(wide) == ["0.0.0.0:12865", "[::]:12866", "*:12867"]


# ---------------------------------------------------------------- key findings
# Each finding is decided on the rounds of one dataset (a row of the runs table per tool, cell
# and round). A stand-in Run with made-up rounds decides each one both ways and leaves it open.
FASTER, PIN_SAME, VETH, TAIL = KF.FINDINGS


class _Run:
    """What a finding's measure reads of a dataset: its runs rows, the seed table and the
    pooled ladder of its view (run.data.ladder)."""

    def __init__(self, runs: pd.DataFrame, ladder_ratio: float = 2.0):
        from perfbook.data.dataset import load_reference

        self.runs, self._ref = runs, load_reference(CH.name)
        lad = pd.DataFrame(
            [{"path": "loopback", "proto": "udp", "pin": "none", "P50": 10.0, "max": 900.0}]
        )
        self.data = SimpleNamespace(ladder=lad.assign(P99=10.0 * ladder_ratio))

    def __getitem__(self, name):
        assert name == "runs"
        return self.runs

    def __contains__(self, name):
        return name == "runs"

    def reference(self, name, dtype=None):
        return self._ref


def _rounds(**cells) -> pd.DataFrame:
    """Rows of the runs table: cells maps 'tool path proto pin col' to the per-round values."""
    rows = {}
    for key, vals in cells.items():
        tool, path, proto, pin, col = key.split("__")
        for rep, v in enumerate(vals):
            rows.setdefault((tool, path, proto, pin, rep), {})[col] = float(v)
    return pd.DataFrame(
        [
            dict(tool=t, path=pa, proto=pr, pin=pi, rep=rep, **cols)
            for (t, pa, pr, pi, rep), cols in rows.items()
        ]
    )


def _decide(finding, runs, **kw):
    return finding.outcome(finding.measure(_Run(runs, **kw)))


def _p50(path="loopback", pin="none"):
    return f"rrbench__{path}__udp__{pin}__p50_us"


def test_key_findings_are_the_claims_not_the_crossval_check():
    """netperf agreeing with our histogram is a check of the instruments (its table shows
    it), not a finding; every finding has a threshold on one side."""
    assert [f.key for f in CH.key_findings] == ["faster", "pin_same", "veth", "tail"]
    assert (FASTER.side, FASTER.threshold) == ("<", 0.5)
    assert (PIN_SAME.side, PIN_SAME.threshold) == ("<", 0.9)
    assert (VETH.side, VETH.threshold, VETH.unit) == ("<", 2.0, "µs")
    assert (TAIL.side, TAIL.threshold) == ("<", 3.0)


def test_faster_is_netperfs_mean_over_the_seeds_exact_figure():
    seed = KF.seed_mean_us(_Run(pd.DataFrame()))
    assert seed == 44.34  # the median of the seed's three runs' MEAN_LATENCY
    key = "netperf__loopback__udp__none__mean_us"
    o = _decide(FASTER, _rounds(**{key: [12.0, 12.5, 11.8, 12.2, 13.0, 12.1]}))
    assert o.verdict == HOLDS and abs(o.estimate.value - 12.15 / 44.34) < 1e-9, o.evidence
    assert "against 2013's 44.3 µs" in o.evidence
    assert _decide(FASTER, _rounds(**{key: [30, 31, 29, 30, 32, 30]})).verdict == FAILS
    # five rounds: the median's [min, max] covers 93.75 %, short of the 95 % asked for
    o = _decide(FASTER, _rounds(**{key: [12.0, 12.5, 11.8, 12.2, 13.0]}))
    assert o.verdict == UNDECIDED and "n too small" in o.why, o.why
    # an rrbench-only dataset has no netperf mean: not measured
    rr_only = _rounds(**{"rrbench__loopback__udp__none__mean_us": [10] * 6})
    assert FASTER.measure(_Run(rr_only)) is None


def test_pin_same_is_a_ratio_of_the_rounds_medians():
    none = [11.0, 11.2, 10.9, 11.1, 11.3, 11.0]
    o = _decide(
        PIN_SAME, _rounds(**{_p50(pin="same"): [9.0, 9.1, 8.9, 9.2, 9.0, 9.1], _p50(): none})
    )
    # six rounds of both cells: each round's ratio, their median (96.9 %)
    assert o.verdict == HOLDS and o.estimate.high < 0.9, o.evidence
    assert o.estimate.basis == "median of 6 rounds' P50 pinned / unpinned", o.estimate.basis
    # four rounds (an older dataset): too few for the median of the ratios, so the two samples
    # of rounds, Hodges-Lehmann (97.1 % with 4 against 4)
    four = {_p50(pin="same"): [9.0, 9.1, 8.9, 9.2], _p50(): none[:4]}
    o = _decide(PIN_SAME, _rounds(**four))
    assert o.verdict == HOLDS and o.estimate.scale == "log", o.evidence
    assert "4 against 4 rounds" in o.estimate.basis
    o = _decide(
        PIN_SAME, _rounds(**{_p50(pin="same"): [10.8, 11.0, 10.9, 11.2, 10.7, 11.0], _p50(): none})
    )
    assert o.verdict == FAILS and o.estimate.low >= 0.9, o.evidence
    # one unpinned round far off: the interval reaches both sides of 0.9
    wide = [11.0, 62.0, 11.1, 11.0, 12.7, 9.0]
    o = _decide(
        PIN_SAME, _rounds(**{_p50(pin="same"): [10.0, 10.2, 9.6, 10.1, 9.9, 10.3], _p50(): wide})
    )
    assert o.verdict == UNDECIDED and "straddles" in o.why, o.evidence
    # a dataset without the `same` mode (the quick profile) did not measure it
    assert PIN_SAME.measure(_Run(_rounds(**{_p50(): none}))) is None


def test_veth_is_the_shift_of_the_paths_medians():
    """veth against loopback with both ends on one CPU (the scheduler's placement of an unpinned
    pair is then the same on both paths); six rounds of datasets without the run order (or that
    ran one path's rounds after the other's): the two samples' Hodges-Lehmann shift."""
    lo = [11.0, 11.2, 10.9, 11.1, 11.3, 11.0]
    ve = _p50("veth", pin="same")
    lo_same = _p50(pin="same")
    o = _decide(VETH, _rounds(**{ve: [11.7, 11.9, 11.6, 11.8, 12.0, 11.7], lo_same: lo}))
    assert o.verdict == HOLDS and 0.5 < o.estimate.value < 0.9, o.evidence
    assert "Hodges-Lehmann shift, 6 against 6" in o.estimate.basis, o.estimate.basis
    o = _decide(VETH, _rounds(**{ve: [14.0, 14.2, 13.9, 14.1, 14.3, 14.0], lo_same: lo}))
    assert o.verdict == FAILS and o.estimate.low >= 2, o.evidence
    o = _decide(VETH, _rounds(**{ve: [12.0, 13.5, 12.4, 14.0, 12.9, 13.1], lo_same: lo}))
    assert o.verdict == UNDECIDED and o.estimate.low < 2 < o.estimate.high, o.evidence
    assert VETH.measure(_Run(_rounds(**{lo_same: lo}))) is None  # loopback only
    # the unpinned cells are not what it compares
    assert VETH.measure(_Run(_rounds(**{_p50("veth"): lo, _p50(): lo}))) is None


def test_tail_is_decided_on_each_rounds_ratio_not_the_pooled_one():
    """The pooled ladder's P99 / P50 is context: one round with a high median moves the pooled
    P99 without any round having a long tail, so the rounds' own ratios decide."""
    p50 = [10.0, 10.1, 9.9, 10.0, 10.2, 10.0]
    p99 = "rrbench__loopback__udp__none__p99_us"
    o = _decide(TAIL, _rounds(**{_p50(): p50, p99: [15, 16, 14, 15, 15.5, 16]}), ladder_ratio=6.0)
    assert o.verdict == HOLDS and o.estimate.high < 3, o.evidence
    assert (
        "pooled over the rounds P99 / P50 6.00×" in o.evidence and "max / P50 90.0×" in o.evidence
    )
    o = _decide(TAIL, _rounds(**{_p50(): p50, p99: [40, 41, 39, 45, 42, 40]}))
    assert o.verdict == FAILS and o.estimate.low >= 3, o.evidence
    o = _decide(TAIL, _rounds(**{_p50(): p50, p99: [15, 41, 14, 45, 42, 16]}))
    assert o.verdict == UNDECIDED and "straddles" in o.why, o.evidence
    o = _decide(TAIL, _rounds(**{_p50(): p50[:5], p99: [15, 16, 14, 15, 15.5]}))
    assert o.verdict == UNDECIDED and "n too small" in o.why, o.why


def test_key_findings_on_the_committed_data(monkeypatch, committed_data):
    """The committed datasets decide on their rounds: the TCG guest's pinned median is
    resolvably higher; the KVM guest with a disturbed loopback round stays open, with the
    pooled P99 / P50 its disturbed round inflates only in the context."""
    monkeypatch.setenv("PERFBOOK_VERDICT_STORE", "off")
    D = CH.load(committed_data)
    v = {(f.key, h): evaluate(D, f, h) for f in CH.key_findings for h in D.hosts}
    assert v["pin_same", "h-83526585f90e"].verdict == FAILS
    # veth with both ends on one CPU: the KVM guests' paths differ by < 1 µs (h-5ab5c186a54f's
    # unpinned cells, one round placed apart at 62 µs, left it open), the TCG guest's by tens
    # of µs either way
    assert v["veth", "h-83526585f90e"].verdict == UNDECIDED
    assert v["veth", "h-82250967b8b9"].verdict == HOLDS
    assert v["veth", "h-5ab5c186a54f"].verdict == HOLDS
    t = v["tail", "h-5ab5c186a54f"]
    assert t.verdict == UNDECIDED and "5 rounds' P99 / P50" in t.evidence, t.evidence
    assert "pooled over the rounds P99 / P50 5.96×" in t.evidence
    assert all(x.verdict != FAILS for (k, _), x in v.items() if k == "tail")


# ------------------------------------------------------------- the default's design (#40)
def _coverage_of_rounds(n: int) -> dict:
    """The real coverage of each finding's interval with n rounds of each of its cells, from
    decide.py's own coverage functions: a median of the rounds (faster, tail: the order-statistic
    interval) and a two-sample Hodges-Lehmann ratio or shift (pin_same, veth: Moses')."""
    from perfbook.analysis import decide, stats

    median = decide.quantile_ci(np.arange(n, dtype=float), 0.5)[3]
    two = stats.hodges_lehmann_coverage(n, n, 0.95)[0]
    return {"faster": median, "tail": median, "pin_same": two, "veth": two}


def test_default_rounds_reach_each_findings_coverage():
    """The default's fixed rounds give every finding's cells enough rounds for a 95 % interval
    (the old default's 2 rounds per path gave 50 % and 66.7 %), and the findings' cells run in
    every round, the others only in the first context_rounds."""
    p = CH.parameters("default")
    assert p["rep_min_runs"] == p["rep_max_runs"], "fixed rounds: no stop rule can cut them"
    n = p["rep_min_runs"]
    cov = _coverage_of_rounds(n)
    assert set(cov) == {f.key for f in CH.key_findings}
    assert all(c >= 0.95 for c in cov.values()), cov
    assert _coverage_of_rounds(2)["faster"] < 0.95 and _coverage_of_rounds(2)["veth"] < 0.95
    core, context = C.split_cells(p, p["pins"])
    assert sorted(core) == sorted(KF.FINDING_CELLS) and len(core) + len(context) == 12
    assert 2 <= p["context_rounds"] < n  # the cross-validation's range needs two runs a cell
    # the time budget is a cap for a machine far slower than planned, not what stops the rounds
    assert p["rep_budget_s"] >= 2 * CH.plan_s["default"]
    # quick and full run every cell in every round
    for prof in ("quick", "full"):
        q = CH.parameters(prof)
        assert C.split_cells(q, q["pins"])[1] == []


def _design_runs(p: dict, values) -> pd.DataFrame:
    """A runs table of the default's design: every findings' cell with both tools in each of the
    rep_min_runs rounds, the other cells in the first context_rounds. values(tool, cell, rnd)
    gives a row's p50_us, p99_us and mean_us."""
    core, context = C.split_cells(p, p["pins"])
    rows = []
    for rnd in range(p["rep_min_runs"]):
        for cell in core + (context if rnd < p["context_rounds"] else []):
            for tool in ("rrbench", "netperf"):
                path, proto, pin = cell
                rows.append(
                    dict(
                        tool=tool,
                        path=path,
                        proto=proto,
                        pin=pin,
                        rep=rnd,
                        order=len(rows) + 1,
                        **values(tool, cell, rnd),
                    )
                )
    return pd.DataFrame(rows)


def _typical(rng, slow_round=None):
    """Loopback UDP near 11 µs, pinned to one CPU 10 % faster, veth 0.6 µs slower, P99 1.3x the
    median; in slow_round the unpinned loopback cell ran at 62 µs (the scheduler put client and
    server on two CPUs), as one round of a committed dataset did."""

    def values(tool, cell, rnd):
        base = {"loopback": 11.0, "veth": 11.6}[cell[0]] * (0.88 if cell[2] == "same" else 1.0)
        if cell[2] == "split":
            base = 35.0
        if rnd == slow_round and cell == ("loopback", "udp", "none"):
            base = 62.0
        p50 = base * (1 + 0.02 * rng.standard_normal())
        return {"p50_us": p50, "p99_us": p50 * 1.3, "mean_us": p50 * 1.05}

    return values


@pytest.mark.parametrize("slow_round", [None, 4])
def test_findings_decide_on_synthetic_data_of_the_default_design(slow_round):
    """On rounds of the default's design with plausible values every finding is decided, with
    an interval of at least 95 % coverage; with 15 rounds one round of the unpinned cell at 62 µs
    (a placement on two CPUs) leaves the medians' intervals (4th to 12th of 15) decided, where 6
    rounds' [min, max] would straddle."""
    p = CH.parameters("default")
    runs = _design_runs(p, _typical(np.random.default_rng(1), slow_round))
    for f in CH.key_findings:
        o = _decide(f, runs)
        assert o.verdict in (HOLDS, FAILS), (f.key, o.why, o.evidence)
        assert o.estimate.coverage >= 0.95, (f.key, o.estimate)
    expect = {"faster": HOLDS, "pin_same": HOLDS, "veth": HOLDS, "tail": HOLDS}
    assert {f.key: _decide(f, runs).verdict for f in CH.key_findings} == expect
    if slow_round is not None:  # six rounds of the same data: the median's [min, max]
        six = runs[runs["rep"] < 6]
        assert _decide(FASTER, six).verdict == UNDECIDED


def test_findings_read_only_the_cells_every_round_runs(monkeypatch):
    """Every finding reads only key_findings.FINDING_CELLS, the cells collect runs in every round:
    a finding on a context cell would get context_rounds rounds, too few to decide."""
    seen = set()
    real, real_paired = KF.per_round, KF.paired

    def spy(run, path, proto, pin, col, tool="rrbench"):
        seen.add((path, proto, pin))
        return real(run, path, proto, pin, col, tool)

    def spy_paired(run, a, b, col, tool="rrbench"):
        seen.update({a, b})
        return real_paired(run, a, b, col, tool)

    monkeypatch.setattr(KF, "per_round", spy)
    monkeypatch.setattr(KF, "paired", spy_paired)
    p = CH.parameters("default")
    runs = _design_runs(p, _typical(np.random.default_rng(2)))
    for f in CH.key_findings:
        f.measure(_Run(runs))
    assert seen == set(KF.FINDING_CELLS)


class _Prog:
    def __init__(self):
        self.total, self.done = 0, 0

    def note(self, s):
        pass

    def step(self, s=""):
        self.done += 1


def test_rounds_share_both_paths_and_match_netperfs_window(monkeypatch, tmp_path):
    """collect._rounds with stand-in instruments: each round runs the findings' cells of both
    paths in one shuffled order (a comparison of the paths is not one of two stretches of time),
    the other cells in the first context_rounds only; in every cell rrbench goes first and netperf
    counts the transactions it recorded (netperf_match), so both see a window of one size; after
    the context rounds a findings' cell runs only the instruments its findings read."""
    calls = []
    n_rr = iter(range(20000, 30000, 37))

    def rrbench(lab, binary, path, proto, pin, p, f, pids=None):
        f.write_bytes(b"")
        n = next(n_rr)
        calls.append(("rrbench", path, proto, pin, n))
        lat = np.full(n, 11_000, dtype=np.int64)
        return {"n": n, "lost": 0, "elapsed_ns": 300_000_000}, lat, np.zeros(n, dtype=np.int64)

    def netperf(lab, server, path, proto, pin, p, transactions=None):
        calls.append(("netperf", path, proto, pin, transactions))
        kv = dict(THROUGHPUT="90000", ELAPSED_TIME="0.3", MEAN_LATENCY="11", P50_LATENCY="11")
        return kv

    monkeypatch.setattr(C, "run_rrbench", rrbench)
    monkeypatch.setattr(C, "run_netperf", netperf)
    p = CH.parameters("default")
    cells = C.split_cells(p, p["pins"])
    prog = _Prog()
    prog.total = planned = C.planned_runs(p, cells, ["rrbench", "netperf"])
    rows, hist, kv, reps = C._rounds(
        None,
        None,
        {"loopback": None, "veth": None},
        p,
        cells,
        ["rrbench", "netperf"],
        tmp_path,
        prog,
    )
    runs = pd.DataFrame(rows)
    assert prog.done == planned == prog.total == len(runs)
    [rep] = reps
    assert rep.experiment == "rounds" and rep.n == p["rep_min_runs"]
    per_cell = runs.groupby(["path", "proto", "pin", "tool"])["rep"].apply(sorted)
    assert len(per_cell) == 12 * 2
    for (path, proto, pin, tool), rounds in per_cell.items():
        every = tool in KF.FINDING_CELLS.get((path, proto, pin), ())
        want = p["rep_min_runs"] if every else p["context_rounds"]
        assert rounds == list(range(want)), (path, proto, pin, tool)
    # both paths in every round, and within a round's order the paths are mixed
    assert all(set(g["path"]) == {"loopback", "veth"} for _, g in runs.groupby("rep"))
    firsts = [g.sort_values("order")["path"].tolist() for _, g in runs.groupby("rep")]
    assert any(seq != sorted(seq) and seq != sorted(seq, reverse=True) for seq in firsts)
    # rrbench, then netperf with rrbench's count, in every cell that runs both
    for i, c in enumerate(calls):
        if c[0] == "netperf":
            assert calls[i - 1][0] == "rrbench" and calls[i - 1][1:4] == c[1:4]
            assert c[4] == calls[i - 1][4]


def test_rounds_that_share_a_slow_phase_are_compared_round_by_round():
    """On this host the medians of whole rounds move between ~5.5 and ~8.5 µs (a state of the
    machine that lasts seconds: frequency, a neighbour): a factor that differs between the two
    samples of rounds, but not between two cells of one round. Compared round by round it drops
    out and pin_same and veth decide; as two samples (the old estimators) they straddle."""
    p = CH.parameters("default")
    rng = np.random.default_rng(5)
    level = [5.5, 8.5, 6.2, 7.9, 5.8, 8.8, 6.9, 5.4, 8.1, 7.3, 6.0, 8.6]

    def values(tool, cell, rnd):
        f = {("loopback", "udp", "same"): 0.98, ("veth", "udp", "same"): 1.04}.get(cell, 1.0)
        p50 = level[rnd % len(level)] * f * (1 + 0.01 * rng.standard_normal())
        return {"p50_us": p50, "p99_us": 1.3 * p50, "mean_us": 1.05 * p50}

    runs = _design_runs(p, values)
    assert KF.shared_rounds(runs[runs.tool == "rrbench"])
    assert _decide(PIN_SAME, runs).verdict == FAILS  # ~0.98: not 10 % lower
    assert _decide(VETH, runs).verdict == HOLDS  # ~0.4 µs
    same, none = (
        KF.per_round(_Run(runs), "loopback", "udp", pin, "p50_us") for pin in ("same", "none")
    )
    two = PIN_SAME.outcome(KF.Measured(KF.decide.ratio(same, none), ""))
    assert two.verdict == UNDECIDED, two.estimate


def test_paths_pair_only_where_they_shared_their_rounds():
    """A dataset that ran one path's rounds after the other's (the design before #40) has a veth
    round and a loopback round with the same number minutes apart: no pair, so the two samples;
    the oldest datasets, which ran both paths in each round, pair."""
    inter = pd.DataFrame({"rep": [0, 0, 0, 1, 1, 1], "order": [1, 2, 3, 4, 5, 6]})
    apart = pd.DataFrame({"rep": [0, 1, 2, 0, 1, 2], "order": [1, 2, 3, 4, 5, 6]})
    assert KF.shared_rounds(inter) and not KF.shared_rounds(apart)
    assert not KF.shared_rounds(inter.drop(columns="order"))
    assert KF.MIN_PAIRED == 6  # decide.location's [min, max] of 6 covers 96.9 %, of 5 93.75 %
    D = CH.load(None)
    for run_id, paired in (("20261122T030534Z", True), ("20261122T063102Z", False)):
        r = D["runs"][D["runs"].run_id == run_id]
        assert KF.shared_rounds(r[r.tool == "rrbench"]) is paired, run_id


def test_crossval_compares_the_instruments_on_the_rounds_that_ran_both():
    """A findings' cell runs rrbench alone after the context rounds: the cross-validation sets
    netperf's two rounds against rrbench's same two, not against its fifteen."""
    rows = []
    for rep in range(15):
        for tool in ("rrbench", "netperf") if rep < 2 else ("rrbench",):
            v = 10.0 if rep < 2 else 80.0  # the later rounds sit elsewhere
            rows.append(
                dict(
                    host_id="h",
                    run_id="r",
                    path="loopback",
                    proto="udp",
                    pin="none",
                    rep=rep,
                    tool=tool,
                    p50_us=v,
                    p90_us=v * 1.1,
                    p99_us=v * 1.3,
                )
            )
    cv = A.crossval(pd.DataFrame(rows))
    assert len(cv) == 3 and (cv["ours_us"] == cv["netperf_us"]).all(), cv.to_string()
    assert cv["agree"].all()
