"""qemu_cache_modes: parameters, the strace parser and the semantics table (fixture and live),
the analysis helpers, page-cache residency, the host facts from perfbook.probes.blockdev, the findings of
the committed data, and a quick collect run (live, skipped with a reason where QEMU or strace is
missing). Cleanup on signals is tests/test_contract.py's matrix (LIVE)."""

from __future__ import annotations

import json
import os
import random
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT, need_tool
from perfbook.analysis import decide
from perfbook.chapters import qemu_cache_modes as Q
from perfbook.chapters.qemu_cache_modes import analysis as A
from perfbook.chapters.qemu_cache_modes import collect as C
from perfbook.chapters.qemu_cache_modes import parse as P
from perfbook.chapters.qemu_cache_modes import prose
from perfbook.core.errors import ParameterError
from perfbook.data.dataset import table_path
from perfbook.framework import sequence as framework
from perfbook.hoststate.scratch import live_dirs
from perfbook.qemu import guest

FIX = ROOT / "tests" / "fixtures" / "qemu_cache_modes"
params = Q.chapter.parameters


def collect(data, profile="quick", **over):
    return framework.collect(Q.chapter, profile, data, say=lambda s: None, **over)


# ---------------------------------------------------------------- parameters
def test_params_validate():
    q = params("quick")
    assert q["modes"] == list(P.MODES) and q["parts"] == list(P.PARTS)
    d = params("default")
    assert d["guest_modes"] == list(P.MODES) and d["bench_depths"] == [1, 16]
    assert params("quick", modes="unsafe,none")["modes"] == ["none", "unsafe"]  # book order
    assert params("quick", bench_depths="4,1")["bench_depths"] == [1, 4]
    assert params("quick")["guest_modes"] == ["none", "writeback"]
    assert params("quick", modes="writeback,unsafe")["guest_modes"] == ["writeback"]
    assert params("quick", modes="directsync")["guest_modes"] == ["directsync"]
    for bad in (
        {"modes": "fast"},
        {"modes": ""},
        {"parts": "semantics,nope"},
        {"bench_depths": [0]},
        {"bench_depths": "one"},
        {"bench_size": 1000},
        {"bench_size": True},
        {"bench_flush_intervals": [-1]},
        {"accel": "xen"},
        {"sem_writes": 100},
        {"dd_mib": 0},
        {"dd_mib": 5000},
        {"kvm_boot_timeout": "soon"},
        {"boot_timeout": 0},
        {"bench_aio": "posix"},
        {"sem_aio": "io_uring"},
        {"guest_modes": "safe"},
        {"bench_warmup": 0},
        {"colour": 1},
        {"bench_repeats": 9},
        {"bench_target": 0},
        {"bench_min_runs": 0},
        {"bench_min_runs": 9, "bench_max_runs": 3},
        {"bench_budget_s": "long"},
        {"host_dd_budget_s": 0},
        {"host_dd_warmup": -1},
        {"host_dd_max_runs": 1.5},
    ):
        with pytest.raises(ParameterError):
            params("quick", **bad)
    with pytest.raises(ParameterError):
        params("huge")
    # adaptive repetition: the default budgets keep the book's measure run short
    d = params("default")
    assert d["bench_budget_s"] <= 60 and d["host_dd_budget_s"] <= 15 and d["bench_warmup"] >= 1
    assert params("quick")["bench_budget_s"] <= 30


def test_bad_parameter_writes_no_dataset(scratch_data):
    with pytest.raises(ParameterError):
        collect(scratch_data, modes="none,bogus")
    assert not any((scratch_data / "runs").iterdir())
    assert not [d for d in live_dirs(Q.chapter.name) if _owner(d) == os.getpid()]


def test_bench_configs_and_command():
    p = params("default")
    cfg = C.bench_configs(p)
    # writes: formats x depths x flush intervals x modes; reads: no flush interval
    assert len(cfg) == 2 * 5 * (2 * 2 + 2)
    assert not [c for c in cfg if c["op"] == "read" and c["flush_interval"]]
    cmd = C.bench_cmd(Path("/x.img"), "raw", "none", "write", 16, 8, 100, 65536, "threads")
    assert cmd[:2] == ["qemu-img", "bench"] and "-w" in cmd and "--flush-interval=8" in cmd
    assert cmd[cmd.index("-t") + 1] == "none" and cmd[cmd.index("-d") + 1] == "16"
    rcmd = C.bench_cmd(Path("/x.img"), "qcow2", "unsafe", "read", 1, 8, 100, 65536, "threads")
    assert "-w" not in rcmd and not any(a.startswith("--flush") for a in rcmd)
    native = C.bench_configs(params("quick", bench_aio="native"))
    assert {c["mode"] for c in native} == {"none", "directsync"}


# ---------------------------------------------------------------- strace parsing
def test_parse_strace_joins_unfinished_calls():
    text = textwrap.dedent("""\
        100 openat(AT_FDCWD, "/var/tmp/x/sem.raw", O_RDWR|O_DIRECT|O_CLOEXEC) = 4
        101 pwrite64(4, "ZZ"..., 65536, 0 <unfinished ...>
        100 io_uring_enter(8, 1, 0, 0, NULL, 8) = 1
        101 <... pwrite64 resumed>)             = 65536
        102 fdatasync(4 <unfinished ...>
        101 pread64(4, "ZZ"..., 12288, 6291456) = 12288
        102 <... fdatasync resumed>)            = 0
        101 pread64(4, 0x55a8df7f2000, 1, 0)  = -1 EINVAL (Invalid argument)
        101 pread64(7, "ZZ"..., 20480, 7340032) = 20480
        101 +++ exited with 0 +++
        """)
    ev = P.parse_strace(text)
    assert [e["syscall"] for e in ev] == [
        "openat",
        "pwrite64",
        "io_uring_enter",
        "fdatasync",
        "pread64",
        "pread64",
        "pread64",
    ]
    assert ev[1]["ret"] == 65536 and ev[3]["ret"] == 0  # joined across the interleaving
    assert ev[5]["ret"] == -1 and ev[5]["errno"] == "EINVAL"
    rows = P.classify(ev, "sem.raw")
    kinds = [(r["syscall"], r["kind"], r["bytes"], r["offset"]) for r in rows]
    # fd 7 is not the image: dropped; the io_uring_enter is kept as an opaque 'uring' row
    assert kinds == [
        ("openat", "open", None, None),
        ("pwrite64", "write", 65536, 0),
        ("io_uring_enter", "uring", None, None),
        ("fdatasync", "sync", None, None),
        ("pread64", "read", 12288, 6291456),
        ("pread64", "read", 1, 0),
    ]
    ph = P.assign_phases(rows)
    assert [r["phase"] for r in ph] == ["open", "write", "write", "write", "flush", "flush"]
    assert ph[4]["marker"] == "flush_begin"


def test_parse_io_submit_and_preadv():
    text = textwrap.dedent("""\
        1 openat(AT_FDCWD, "S/img", O_RDWR|O_DIRECT|O_CLOEXEC) = 5
        1 io_submit(0x7f, 1, [{aio_data=0, aio_lio_opcode=IOCB_CMD_PWRITEV, aio_fildes=5, aio_buf=[{iov_base="Z"..., iov_len=32768}, {iov_base="Z"..., iov_len=32768}], aio_offset=131072, aio_flags=IOCB_FLAG_RESFD, aio_resfd=8}]) = 1
        2 preadv(5, [{iov_base="Z"..., iov_len=20480}], 1, 7340032) = 20480
        2 pwritev2(5, [{iov_base="Z"..., iov_len=4096}], 1, 8192, RWF_DSYNC) = 4096
        """)
    rows = P.classify(P.parse_strace(text), "img")
    got = [(r["syscall"], r["kind"], r["bytes"], r["offset"]) for r in rows]
    assert got == [
        ("openat", "open", None, None),
        ("io_submit:PWRITEV", "write", 65536, 131072),
        ("preadv", "read", 20480, 7340032),
        ("pwritev2", "write", 4096, 8192),
    ]
    assert [r["dsync"] for r in rows] == [False, False, False, True]  # a FUA write via RWF_DSYNC
    # a writethrough trace whose writes carry RWF_DSYNC instead of a separate fdatasync is
    # still write-through (newer QEMUs can do FUA that way)
    ev = pd.DataFrame(
        [
            {"mode": "writethrough", "format": "raw", "aio": "threads", "phase": "write", **r}
            for r in rows
        ]
    )
    ev.loc[ev.kind == "open", "phase"] = "open"
    ev = ev[ev.syscall.isin(["openat", "pwritev2"])]
    sem = A.semantics_table(ev).iloc[0]
    assert sem.writes == 1 and sem.dsync_writes == 1 and not sem.writeback and not sem.no_flush


def test_parse_io_submit_fdsync_pwrite_and_exact_image():
    """Real strace lines (tests/fixtures/qemu_cache_modes/libaio-iocbs.txt): IOCB_CMD_FDSYNC
    iocbs (no aio_offset) sharing an io_submit with writes, non-vector IOCB_CMD_PWRITE
    (aio_nbytes), and a decoy xsem.raw next to sem.raw."""
    text = (FIX / "libaio-iocbs.txt").read_text()
    want = [
        ("openat", "open", 3, None, None),
        ("io_submit:FDSYNC", "sync", 3, None, None),
        ("io_submit:PWRITEV", "write", 3, 8192, 65536),
        ("io_submit:PWRITE", "write", 3, 4096, 8192),
        ("io_submit:FDSYNC", "sync", 3, None, None),
        ("io_submit:FSYNC", "sync", 3, None, None),
    ]
    for name in ("sem.raw", "/var/tmp/qcm-fixture/sem.raw"):
        rows = P.classify(P.parse_strace(text), name)
        got = [(r["syscall"], r["kind"], r["fd"], r["bytes"], r["offset"]) for r in rows]
        assert got == want, name
        assert not any(r["dsync"] for r in rows)
    # the writes and flushes of one io_submit keep their order (one call, several rows)
    assert [r["seq"] for r in rows[1:]] == [4, 4, 5, 5, 6]
    for name in ("em.raw", "ixture/sem.raw", "/other/sem.raw", "/var/tmp/qcm-fixture"):
        assert P.classify(P.parse_strace(text), name) == [], name
    # xsem.raw (fd 4) by its own name: its PWRITE only, not sem.raw's FSYNC
    rows = P.classify(P.parse_strace(text), "xsem.raw")
    assert [(r["syscall"], r["fd"], r["bytes"]) for r in rows] == [
        ("openat", 4, None),
        ("io_submit:PWRITE", 4, 512),
    ]


def _fixture_events() -> pd.DataFrame:
    rows = []
    for f in sorted(FIX.glob("trace-*.txt")):
        mode, fmt, aio = f.stem.split("-")[1:]
        rows += [
            {"mode": mode, "format": fmt, "aio": aio, **r}
            for r in P.trace_rows(f.read_text(), f"sem.{fmt}")
        ]
    return pd.DataFrame(rows)


def _check_shape(sem: pd.DataFrame, n_writes: int | None = None):
    """The measured semantics have the shape of QEMU's documented mapping."""
    assert set(P.MODES) <= set(sem["mode"])
    for r in sem.itertuples():
        wb, direct, nf = P.DOC_MAPPING[r.mode]
        assert r.writes > 0, r
        if n_writes is not None:
            assert r.writes == n_writes, r
        assert r.o_direct == direct, r  # cache.direct <=> O_DIRECT
        if not wb:  # writethrough / directsync
            assert r.o_dsync or r.syncs_write >= r.writes or r.dsync_writes == r.writes, r
        else:  # no sync per write
            assert r.syncs_write == 0 and not r.o_dsync and r.dsync_writes == 0, r
        if nf:  # unsafe: nothing reaches the disk
            assert r.syncs_write + r.syncs_flush + r.syncs_close + r.dsync_writes == 0, r
        elif wb:  # the guest's flush reaches the host
            assert r.syncs_flush >= 1, r
    chk = A.check_documented(sem)
    assert len(chk) == len(sem) and chk["agrees"].all(), chk[~chk["agrees"]]


def test_semantics_table_from_fixture():
    sem = A.semantics_table(_fixture_events())
    assert len(sem) == 7  # 5 modes with aio=threads, 2 O_DIRECT modes with aio=native
    _check_shape(sem, n_writes=4)
    t = sem.set_index(["mode", "aio"])
    assert t.loc[("writethrough", "threads"), "open_flags"] == "O_RDWR|O_CLOEXEC"
    assert t.loc[("directsync", "native"), "syncs_per_write"] == 1.0


def test_semantics_check_can_fail():
    """A trace whose per-write syncs are gone no longer matches the documented mapping."""
    ev = _fixture_events()
    broken = ev[~((ev["mode"] == "writethrough") & (ev["kind"] == "sync"))]
    chk = A.check_documented(A.semantics_table(broken))
    bad = chk[~chk["agrees"]]
    assert list(bad["mode"]) == ["writethrough"]
    # and an unsafe trace with a flush that reached the disk is caught too
    ev2 = ev.copy()
    i = ev2[(ev2["mode"] == "writeback") & (ev2["kind"] == "sync")].index
    moved = ev2.loc[i].assign(mode="unsafe")
    chk2 = A.check_documented(
        A.semantics_table(pd.concat([ev2, moved]).sort_values(["mode", "seq"]))
    )
    assert not chk2.set_index("mode").loc["unsafe", "agrees"]


def test_semantics_live(scratch_data):
    need_tool("strace")
    need_tool("qemu-io", "qemu-utils")
    out = collect(scratch_data, parts="semantics", sem_aio="threads,native")
    ev = pd.read_csv(table_path(out, "trace"))
    sem = A.semantics_table(ev)
    _check_shape(sem, n_writes=params("quick")["sem_writes"])
    man = json.loads((out / "manifest.json").read_text())
    assert set(man["tables"]) == {"trace"} and "semantics" not in man["skipped"]
    assert len(list((out / "strace").glob("trace-*.txt"))) == len(sem)
    assert not any("/var/tmp/perfbook" in f.read_text() for f in (out / "strace").iterdir())


# ---------------------------------------------------------------- analysis helpers
def test_orderings():
    v = {"a": (10, 9, 11), "b": (20, 19, 21), "c": (21, 20.5, 22), "d": (50, 45, 55)}
    assert A.order_with_ties(v) == "a < b = c < d"
    # no overlap, but within the relative tolerance: equal; outside it: a step
    assert A.order_with_ties({"a": (100, 99.9, 100.1), "b": (103, 102.9, 103.1)}) == "a = b"
    assert (
        A.order_with_ties({"a": (100, 99.9, 100.1), "b": (103, 102.9, 103.1)}, rel_tol=0.01)
        == "a < b"
    )
    assert A.order_by_value({"x": 0.0, "y": 0.4, "z": 32.0}, 1.0) == "x = y < z"
    assert A.parse_order("a < b = c < d") == [["a"], ["b", "c"], ["d"]]
    assert A.pairwise_disagreements("a < b < c", "a < b < c") == []
    dis = A.pairwise_disagreements("a < b < c", "b < a = c")
    assert dis == ["2013: a < b, today: a > b", "2013: a < c, today: a = c"]


def test_guest_script_and_parser():
    rng = random.Random(1)
    order = C.guest_order(params("quick", dd_repeats=2, dd_warmup=1), rng)
    assert len(order) == 9 and {v for _, _, v in order} == {"normal", "direct", "stamps"}
    assert [r for r, _, _ in order].count(-1) == 3
    sc = C.guest_script(4, order)
    assert "bs=64k count=64 oflag=direct" in sc and sc.count("\none ") == 9
    out = (
        "CACHE_TYPE write back\nWRITE_CACHE write back\nSIZE 8192\n"
        "DD 0 0 normal 1000000 1080000 0 64+0_records_out\nDD 0 1 stamps 1090000 1100000 0 none\n"
        "DD 0 2 direct 1100000 1140000 0 64+0_records_out\nGUEST_BUFFERS 4200\n"
    )
    info, rows = P.parse_guest(out)
    assert info == {
        "cache_type": "write back",
        "write_cache": "write back",
        "size": "8192",
        "guest_buffers": "4200",
    }
    assert [r["variant"] for r in rows] == ["normal", "stamps", "direct"]
    df = pd.DataFrame(rows).assign(
        host_id="h", run_id="r", boot=0, mode="none", accel="tcg", bytes=[4 << 20, 0, 4 << 20]
    )
    t = A.guest_dd_table(df).set_index("variant")
    # 4 MiB in 80 ms minus the 10 ms the two stamps cost
    assert t.loc["normal", "mb_per_s"] == pytest.approx(4 * 1048576 / 0.070 / 1e6)
    assert t.loc["direct", "mb_per_s_raw"] == pytest.approx(4 * 1048576 / 0.040 / 1e6)


def test_reference_table_has_provenance():
    ref = pd.read_csv(ROOT / "data" / "reference" / "qemu_cache_modes.csv")
    for col in ("seed_file", "title", "date", "environment", "note"):
        assert ref[col].notna().all(), col
    assert set(ref.seed_file) == {P.SEED}
    dd = A.seed_dd(ref)
    assert len(dd) == 12 and set(dd["mode"]) == set(P.MODES) | {"host"}
    # every cell has either a figure or a range
    assert (dd["mb_per_s"].notna() | (dd["low"].notna() & dd["high"].notna())).all()
    sem = (
        ref[ref.kind == "semantics"].pivot(index="mode", columns="item", values="value").astype(int)
    )
    for m, (wb, direct, nf) in P.DOC_MAPPING.items():  # the seed's table says what the manual says
        assert (
            sem.loc[m, "host_page_cache"],
            sem.loc[m, "disk_write_cache"],
            sem.loc[m, "no_flush"],
        ) == (int(not direct), int(wb), int(nf)), m
    assert set(ref[ref.kind == "ranking"]["item"]) == {"memory", "performance", "safety"}


def test_resident_bytes(tmp_path):
    f = tmp_path / "f.bin"
    f.write_bytes(os.urandom(1 << 20))
    fd = os.open(f, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        assert C.resident_bytes(f) == 0
        os.read(fd, 1 << 20)
        assert C.resident_bytes(f) == 1 << 20
    finally:
        os.close(fd)
    (tmp_path / "empty").write_bytes(b"")
    assert C.resident_bytes(tmp_path / "empty") == 0


def test_host_disk_facts_from_blockdev(tmp_path):
    """The disk under a path and its queue facts (perfbook.probes.blockdev); none for a path that is not
    on a block device."""
    from perfbook.probes import blockdev

    assert C.host_disk(Path("/proc")) == {"device": None}
    got = C.host_disk(tmp_path)
    if got["device"] is None:
        pytest.skip(f"{tmp_path} is not on a block device here")
    assert set(blockdev.QUEUE_KEYS) <= set(got) and got["rotational"] in ("0", "1")
    assert Path(f"/sys/block/{got['device']}").is_dir()  # a whole disk, not a partition


def test_parse_bench_and_dd_output():
    assert (
        P.bench_seconds(
            "Sending 256 write requests, 65536 bytes each, 1 in parallel\n"
            "Run completed in 0.051 seconds.\n"
        )
        == 0.051
    )
    assert P.bench_seconds("qemu-img: Could not open 'x'") is None
    err = (
        "512+0 records in\n512+0 records out\n"
        "33554432 bytes (34 MB, 32 MiB) copied, 0.00756422 s, 4.4 GB/s\n"
    )
    assert P.dd_summary(err) == (33554432, 0.00756422)
    assert P.dd_summary("dd: failed to open 'x': Permission denied") is None


def test_meminfo_has_the_counters():
    m = C.meminfo()
    assert set(C.MEMINFO_KEYS) <= set(m) and m["Cached"] > 0


# ---------------------------------------------------------------- live: collect and cleanup
def _owner(d: Path):
    try:
        return int((d / "owner").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _need_everything():
    need_tool("qemu-img", "qemu-utils")
    need_tool("strace")
    reasons = guest.preflight()
    if reasons:
        pytest.skip(f"no tiny guest here: {reasons[0]}")
    try:
        guest.ensure_artefacts()
    except guest.MissingPrerequisite as e:
        pytest.skip(f"no guest kernel: {e}")


def test_quick_collect_live(scratch_data):
    _need_everything()
    out = collect(scratch_data)
    man = json.loads((out / "manifest.json").read_text())
    assert man["chapter"] == Q.chapter.name and man["skipped"] == {}
    assert set(man["tables"]) == {
        "trace",
        "bench",
        "host_dd",
        "guest_dd",
        "guest_boots",
        "pagecache",
        "pagecache_samples",
        "repetition",
    }
    p = params("quick")
    bench = pd.read_csv(table_path(out, "bench"))
    rep = pd.read_csv(table_path(out, "repetition"))
    configs = C.bench_configs(p)
    assert set(rep.experiment) == {C.bench_experiment(c) for c in configs} | {"host_dd"}
    assert set(rep.stopped_by) <= {"ci_target", "time_budget", "max_runs"}
    bn = rep[rep.experiment != "host_dd"].set_index(["experiment", "key"])["n"]
    assert (
        len(bench) == bn.sum()
        and (rep[rep.experiment != "host_dd"].warmup == p["bench_warmup"]).all()
    )
    assert (
        len(pd.read_csv(table_path(out, "host_dd"))) == rep[rep.experiment == "host_dd"]["n"].sum()
    )
    assert (bench["mb_per_s"] > 0).all() and (bench["count"] >= p["bench_count"]).all()
    boots = pd.read_csv(table_path(out, "guest_boots")).set_index("mode")
    assert set(boots["accel"]) <= {"kvm", "tcg"} and boots["accel_note"].notna().all()
    # what the guest sees: a write cache in writeback mode
    assert boots.loc["writeback", "guest_cache_type"] == "write back"
    dd = pd.read_csv(table_path(out, "guest_dd")).assign(host_id="h", run_id="r")
    s = A.guest_dd_summary(dd)
    assert set(s["variant"]) == {"normal", "direct"} and (s["median"] > 0).all()
    pc = A.pagecache_table(pd.read_csv(table_path(out, "pagecache"))).set_index("mode")
    # double caching, measured: the writeback image sits in the host page cache, the O_DIRECT one not
    assert pc.loc["writeback", "image_resident_peak_mib"] >= 0.9 * p["dd_mib"]
    assert pc.loc["none", "image_resident_peak_mib"] < 0.1 * p["dd_mib"]
    sem = A.semantics_table(pd.read_csv(table_path(out, "trace")))
    assert A.check_documented(sem)["agrees"].all()
    # the host facts come from perfbook.probes.blockdev (findmnt and sysfs), under "facts"
    facts = man["facts"]
    assert facts["scratch_fs"]["fstype"] and facts["scratch_fs"]["mount"]
    assert "device" in facts["host_disk"] and set(facts["documented_mapping"]["modes"]) == set(
        P.MODES
    )
    D = Q.chapter.load(scratch_data)  # the dataset loads through the declared schemas
    assert D.quoted.path == out and len(D.sem) == len(sem) and len(D.gs)
    assert not [d for d in live_dirs(Q.chapter.name) if _owner(d) == os.getpid()]
    assert not [d for d in live_dirs("guest") if _owner(d) == os.getpid()]


def test_no_strace_skips_the_semantics(monkeypatch, scratch_data):
    need_tool("qemu-img", "qemu-utils")
    real = C.shutil.which
    monkeypatch.setattr(
        C.shutil, "which", lambda n, *a, **k: None if n == "strace" else real(n, *a, **k)
    )
    out = collect(scratch_data, parts="semantics,host_dd")
    man = json.loads((out / "manifest.json").read_text())
    assert man["skipped"]["semantics"].startswith("strace is not installed")
    assert set(man["tables"]) == {"host_dd", "repetition"}
    assert "left out by the parts parameter" in man["skipped"]["bench"]


# ---------------------------------------------------------------- the committed data
def test_committed_semantics_match_the_manual(book_data):
    ev = Q.chapter.load(book_data.data_dir)["trace"]
    if ev.empty:
        pytest.skip("no committed qemu_cache_modes dataset yet")
    for run, g in ev.groupby("run_id"):
        _check_shape(A.semantics_table(g))


def test_findings_of_the_committed_data(monkeypatch, book_data):
    """Every value the prose quotes is text or an integer, the semantics the book quotes match
    the manual, and nothing depends on the order rows were stored in."""
    D = Q.chapter.load(book_data.data_dir)
    if D.quoted is None:
        pytest.skip("no committed qemu_cache_modes dataset yet")
    f = prose.values(D)
    assert all(isinstance(v, (str, int)) for v in f.values())
    assert f["n_sem_agree"] == f["n_sem_rows"] and f["newest_host"] == D.quoted.host_id
    assert f["spw_writethrough"] == "1" and f["sfl_unsafe"] == f["scl_unsafe"] == 0
    monkeypatch.setenv("PERFBOOK_SHUFFLE_ROWS", "7")
    assert prose.values(Q.chapter.load(book_data.data_dir)) == f


def test_rankings_state_the_real_coverage_of_the_overlapping_cis():
    ref = pd.DataFrame([{"kind": "ranking", "item": "performance", "value": "none > writeback"}])
    gs = pd.DataFrame(
        [
            {
                "variant": "direct",
                "mode": m,
                "median": v,
                "ci_low": v - 1,
                "ci_high": v + 1,
                "accel": "kvm",
                "n": 3,
            }
            for m, v in (("none", 10.0), ("writeback", 20.0))
        ]
    )
    bs = pd.DataFrame(
        [
            {
                "format": "raw",
                "op": "write",
                "depth": 1,
                "flush_interval": 0,
                "mode": m,
                "median": v,
                "ci_low": v - 1,
                "ci_high": v + 1,
                "n": 6,
            }
            for m, v in (("none", 10.0), ("writeback", 20.0))
        ]
    )
    rk = A.rankings(ref, guest_summary=gs, bench_summary=bs)
    ev = list(rk["evidence today"])
    assert any("equal if the 75 % CIs overlap" in e for e in ev)  # n = 3: [min, max]
    assert any("equal if the 96.87 % CIs overlap" in e for e in ev)  # n = 6
    assert not any("95 %" in e for e in ev)


# ---------------------------------------------------------------- the key findings
KF = {f.key: f for f in Q.chapter.key_findings}


class _Run:
    """A dataset as a finding's measure() sees it: its parameters, its tables, the seed."""

    def __init__(self, tables: dict, guest_modes=P.MODES):
        self.tables = tables
        self.manifest = {"parameters": {"guest_modes": list(guest_modes)}, "tables": list(tables)}

    def __contains__(self, name):
        return name in self.tables

    def __getitem__(self, name):
        return self.tables[name]

    def reference(self, name, dtype=None):
        from perfbook.data.dataset import load_reference

        return load_reference(name, None, dtype)


def _guest_dd(rates: dict, mib=16, rounds=4, accel="kvm"):
    """guest_dd rows: mode -> MB/s of each boot of that mode, every boot `rounds` timed
    oflag=direct rounds around its rate (and a stamps round of zero cost per boot, and a
    warm-up round that must not count)."""
    rows, boot = [], 0
    for mode, per_boot in rates.items():
        for rate in per_boot:
            base = {"host_id": "h", "run_id": "r", "boot": boot, "mode": mode, "accel": accel}
            boot += 1
            for rnd, mbs in [(-1, 1.0), *((i, rate * (1 + 0.01 * i)) for i in range(rounds))]:
                us = int(mib * 2**20 / mbs)  # bytes / (MB/s) = microseconds
                rows += [
                    {**base, "round": rnd, "variant": "direct", "t0_us": 0, "t1_us": us,
                     "bytes": mib * 2**20},
                    {**base, "round": rnd, "variant": "stamps", "t0_us": 0, "t1_us": 0,
                     "bytes": 0},
                ]  # fmt: skip
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    "directsync,verdict",
    [
        ([80, 82, 79, 81], "holds"),
        ([30, 31, 29, 32], "does not hold"),
        ([35, 42, 58, 66], "undecided"),  # the ratio's interval straddles 0.5
    ],
)
def test_direct_penalty_is_the_ratio_of_the_guest_boots(directsync, verdict):
    """One value per boot (the median of its dd rounds): 4 boots against 4 decide."""
    f = KF["direct_penalty"]
    got = f.measure(_Run({"guest_dd": _guest_dd({"directsync": directsync, "none": [100] * 4})}))
    assert "4 against 4 guest boots (median of 4 dd rounds each)" in got.estimate.basis
    assert "2013: 0.0886×" in got.context and "KVM guests" in got.context
    assert f.outcome(got).verdict == verdict, f.outcome(got)


def test_direct_penalty_of_dd_rounds_inside_one_boot_per_mode_is_undecided():
    """The old design: one boot per mode, its dd rounds taken as the repetitions. However many
    rounds a boot runs they share it, so they are one value: 1 against 1 boots, no coverage."""
    f = KF["direct_penalty"]
    one = _Run({"guest_dd": _guest_dd({"directsync": [80], "none": [100]}, rounds=15)})
    o = f.outcome(f.measure(one))
    assert o.verdict == "undecided" and "n too small" in o.why, o
    assert "1 against 1 guest boots" in o.estimate.basis and o.estimate.coverage == 0
    quick = _Run({"guest_dd": _guest_dd({"none": [100] * 4})}, guest_modes=["none", "writeback"])
    assert f.measure(quick) is None


def test_direct_penalty_compares_boots_of_one_accelerator():
    """Boots under KVM and under TCG are not mixed: where both modes booted under KVM, only
    those boots count."""
    kvm = _guest_dd({"directsync": [80, 82, 79, 81], "none": [100] * 4})
    tcg = _guest_dd({"directsync": [5] * 4, "none": [400] * 4}, accel="tcg")
    tcg["boot"] += 100
    got = KF["direct_penalty"].measure(_Run({"guest_dd": pd.concat([kvm, tcg])}))
    assert "4 against 4 guest boots" in got.estimate.basis and "KVM guests" in got.context
    assert got.estimate.value == pytest.approx(0.805, rel=0.02)


def test_profiles_boot_each_mode_often_enough_for_their_claims():
    """full boots every mode 4 times, so direct_penalty can decide there; the default boots
    once per mode (time), and its dd rounds claim no coverage."""
    for prof, decides in (("full", True), ("default", False), ("quick", False)):
        n = params(prof)["guest_boots"]
        cov = decide.ratio([1.0 + 0.01 * i for i in range(n)], [2.0] * n).coverage
        assert (cov >= 0.95) is decides, (prof, n, cov)


def _bench(rates: dict):
    """bench rows: mode -> MB/s per round of raw 64 KiB writes at depth 1 without flushes
    (plus depth-16 rows, which the finding must not read)."""
    rows = []
    for mode, rs in rates.items():
        for rnd, mbs in enumerate(rs):
            for depth, k in ((1, 1), (16, 10)):
                rows.append(
                    {"round": rnd, "format": "raw", "op": "write", "depth": depth,
                     "flush_interval": 0, "mode": mode, "mb_per_s": mbs * k}
                )  # fmt: skip
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    "writeback,verdict",
    [
        ([1000, 1100, 1050, 990, 1200, 1020], "holds"),
        ([200, 210, 190, 220, 205, 195], "does not hold"),
        ([200, 250, 290, 310, 350, 420], "undecided"),
    ],
)
def test_wb_over_wt_is_the_ratio_of_the_bench_rounds(writeback, verdict):
    f = KF["wb_over_wt"]
    got = f.measure(_Run({"bench": _bench({"writeback": writeback, "writethrough": [100] * 6})}))
    assert got.estimate.basis.endswith("6 against 6 bench rounds")
    assert f.outcome(got).verdict == verdict, f.outcome(got)


def _main_rounds(prof: str) -> int:
    """The measured rounds a profile gives the experiment wb_over_wt reads (collect's own
    settings for it: Repetition runs min_runs at least, unless the budget runs out)."""
    p = params(prof)
    assert C.main_experiment(p) == "bench raw write d=1 fi=0"
    return C.main_settings(p)["bench_min_runs"]


def test_default_bench_rounds_cover_the_wb_over_wt_ratio():
    """The default's rounds of raw writes at depth 1 without flushes reach 95 % coverage
    (decide.ratio's own coverage at that n), the other experiments keep their 2 rounds; the
    old design's 2 against 2 rounds did not reach it."""
    n = _main_rounds("default")
    cov = decide.ratio([1000.0 + i for i in range(n)], [100.0] * n).coverage
    assert cov >= 0.95, (n, cov)
    p = params("default")
    assert p["bench_max_runs"] == 2 and C.main_settings(p)["bench_max_runs"] == n
    old = decide.ratio([1000.0, 1001.0], [100.0, 100.0]).coverage
    assert old < 0.95
    assert _main_rounds("full") >= n


def test_wb_over_wt_decides_on_the_default_design_and_not_on_the_old():
    """Synthetic bench rounds of the default's design decide (holds, and does not hold);
    the old design's 2 rounds of the same rates stay undecided."""
    f = KF["wb_over_wt"]
    n = _main_rounds("default")
    wt = [100.0 + 3 * i for i in range(n)]
    for k, verdict in ((10, "holds"), (1.5, "does not hold")):
        wb = [k * 100.0 * (1 + 0.02 * i) for i in range(n)]
        o = f.outcome(f.measure(_Run({"bench": _bench({"writeback": wb, "writethrough": wt})})))
        assert o.verdict == verdict and f"{n} against {n} bench rounds" in o.estimate.basis, o
        two = _Run({"bench": _bench({"writeback": wb[:2], "writethrough": wt[:2]})})
        assert f.outcome(f.measure(two)).verdict == "undecided"


def test_main_experiment_is_absent_where_the_profile_leaves_it_out():
    assert C.main_experiment(params("default", bench_formats="qcow2")) is None
    assert C.main_experiment(params("default", bench_flush_intervals="16")) is None
    assert C.main_experiment(params("default", bench_depths="4,16")) == "bench raw write d=4 fi=0"


def test_semantics_counts_the_traced_runs_that_differ_from_the_manual():
    f = KF["semantics"]
    ev = _fixture_events()
    good = f.outcome(f.measure(_Run({"trace": ev})))
    assert good.verdict == "holds" and good.estimate.exact and good.estimate.value == 0
    broken = ev[~((ev["mode"] == "writethrough") & (ev["kind"] == "sync"))]
    bad = f.outcome(f.measure(_Run({"trace": broken})))
    assert bad.verdict == "does not hold" and bad.estimate.value == 1, bad
    assert f.measure(_Run({})) is None


def _pagecache(resident_mib: dict, disk=32):
    return pd.DataFrame(
        [
            {"boot": i, "mode": m, "disk_mib": disk, "image_resident_peak_kb": int(r * 1024),
             "cached_base_kb": 0, "cached_peak_kb": 0, "dirty_base_kb": 0, "dirty_peak_kb": 0,
             "writeback_peak_kb": 0}
            for i, (m, r) in enumerate(resident_mib.items())
        ]
    )  # fmt: skip


@pytest.mark.parametrize(
    "unsafe,verdict", [(32, "holds"), (17, "holds"), (16, "does not hold"), (3, "does not hold")]
)
def test_pagecache_is_the_least_share_the_caching_modes_left(unsafe, verdict):
    f = KF["pagecache"]
    res = {"none": 0, "directsync": 0, "writethrough": 32, "writeback": 32, "unsafe": unsafe}
    got = f.measure(_Run({"pagecache": _pagecache(res)}))
    assert got.estimate.value == pytest.approx(100 * unsafe / 32) and got.estimate.exact
    assert "none 0 %, directsync 0 %" in got.context
    assert f.outcome(got).verdict == verdict
    quick = _Run({"pagecache": _pagecache(res)}, guest_modes=["none", "writeback"])
    assert f.measure(quick) is None


def test_key_findings_of_the_committed_data(book_data):
    """Every finding gives every host a verdict on the committed data; the rates rest on their
    rounds, the semantics and the page cache are exact facts of the dataset."""
    from perfbook.analysis.findings import VERDICTS, evaluate

    D = Q.chapter.load(book_data.data_dir)
    if not D.hosts:
        pytest.skip("no committed qemu_cache_modes dataset yet")
    for f in Q.chapter.key_findings:
        for h in D.hosts:
            v = evaluate(D, f, h)
            assert v.verdict in VERDICTS, v
            for _, o in v.runs:
                if o is None:
                    continue
                if f.key in ("direct_penalty", "wb_over_wt"):
                    assert "rounds" in o.estimate.basis and o.estimate.scale == "log", o
                else:
                    assert o.estimate.exact, o
