"""tsc_alignment: parameters, parsers and analysis on fixtures, the committed data, live KVM runs.

Ctrl-C/SIGTERM/SIGKILL during a collect are tests/test_contract.py's signal matrix (LIVE)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT, need_root
from perfbook.analysis.decide import FAILS, HOLDS, UNDECIDED
from perfbook.chapters import tsc_alignment as X
from perfbook.chapters.tsc_alignment import analysis as A
from perfbook.chapters.tsc_alignment import collect as C
from perfbook.chapters.tsc_alignment import key_findings as KF
from perfbook.chapters.tsc_alignment import parse as P
from perfbook.chapters.tsc_alignment import prose
from perfbook.chapters.tsc_alignment.parse import U64, fact_rank, signed
from perfbook.core.errors import ParameterError
from perfbook.data.dataset import table_path
from perfbook.framework import sequence as framework

FIX = Path(__file__).parent / "fixtures" / "tsc_alignment"
HELPER_OUT = (FIX / "helper_run.txt").read_text()
TRACE = (FIX / "trace_x86_tsc.txt").read_text()


# ------------------------------------------------------------ parameters --
def test_params_defaults_and_errors():
    ch = X.chapter
    p = ch.parameters("quick")
    assert p["rep_min_runs"] == ch.profiles["quick"]["rep_min_runs"]
    assert p["cpus"] == sorted(os.sched_getaffinity(0))[:2]  # None: the first two usable
    assert ch.parameters("quick", cpus="0")["cpus"] == [0]
    with pytest.raises(ParameterError, match="profile"):
        ch.parameters("huge")
    with pytest.raises(ParameterError, match="unknown parameter"):
        ch.parameters("quick", bogus=1)
    with pytest.raises(ParameterError, match="samples"):
        ch.parameters("quick", samples="many")
    with pytest.raises(ParameterError, match="samples"):
        ch.parameters("quick", samples=1)
    with pytest.raises(ParameterError, match="cpus"):
        ch.parameters("quick", cpus="0,9999")
    with pytest.raises(ParameterError, match="cpus"):
        ch.parameters("quick", cpus="zero")
    for bad, msg in (
        ({"rep_target": 0}, "rep_target must be a relative CI width"),
        ({"rep_budget_s": "long"}, "rep_budget_s must be a number of seconds"),
        ({"rep_warmup": -1}, "rep_warmup must be an integer"),
        ({"rep_min_runs": 10, "rep_max_runs": 5}, "rep_max_runs .5. must be >= rep_min_runs"),
        ({"rounds": 8}, "unknown parameter 'rounds'"),
    ):
        with pytest.raises(ParameterError, match=msg):
            ch.parameters("quick", **bad)


def test_signed():
    assert signed(0) == 0
    assert signed(U64 - 5) == -5
    assert signed(12345) == 12345
    assert signed(str(U64 - 5)) == -5  # as the tables store u64 offsets


# --------------------------------------------------------------- parsers --
def test_parse_helper_and_trace():
    r = P.parse_helper(HELPER_OUT)
    assert r["meta"]["pid"] == "42"
    assert list(r["samples"]["variant"]) == ["created", "created", "attr"]
    assert r["samples"]["guest"].tolist() == [4500, 6600, 9400]
    assert len(r["ops"]) == 2 and len(r["pingpong"]) == 2 and len(r["freq"]) == 1
    tr = P.parse_trace(TRACE, pid=42)
    assert len(tr) == 3 and set(tr["pid"]) == {42}  # the other pid is dropped
    ev = P.tsc_offset_events(tr)
    assert ev["next"].tolist() == [U64 - 2000, 0]


def test_parse_trace_with_record_tgid_and_irq_info_off():
    """The old parser required the irq-info column and no tgid column: it returned nothing."""
    alt = (
        TRACE.replace("      [000] d..1. 2500:", " (     42) [000]         2500:")
        .replace("      [001] d..1. 8050:", " (     42) [001]         8050:")
        .replace("        [001] d..1. 8060:", " (      7) [001]         8060:")
        .replace("      [001] ..... 9300:", " (     42) [001]         9300:")
    )
    assert alt.count("(") >= 4
    tr = P.parse_trace(alt + "CPU:1 [LOST 2 EVENTS]\n", pid=42)
    assert len(tr) == 3 and tr["ts"].tolist() == [2500, 8050, 9300] and tr.attrs["lost"] == 2
    assert P.tsc_offset_events(tr)["next"].tolist() == [U64 - 2000, 0]


def _tagged(df):
    df = df.copy()
    df.insert(0, "run_id", "r1")
    df.insert(0, "host_id", "h")
    return df


@pytest.mark.parametrize("as_text", [False, True], ids=["ints", "u64-text"])
def test_offset_check_and_brackets(as_text):
    r = P.parse_helper(HELPER_OUT)
    ops, ev = _tagged(r["ops"]), _tagged(P.tsc_offset_events(P.parse_trace(TRACE, pid=42)))
    if as_text:  # the tables store u64 columns as their decimal text
        ops[["requested", "readback"]] = ops[["requested", "readback"]].astype(str)
        ev[["prev", "next"]] = ev[["prev", "next"]].astype(str)
    oc = A.offset_check(ops, ev)
    create = oc[oc["kind"] == "create_vcpu"].iloc[0]
    assert create["trace_next"] == -2000 and create["kernel_tsc"] == 2000
    assert bool(create["kernel_tsc_in_ioctl"]) and bool(create["event_in_ioctl"])
    assert not bool(create["match"])  # API said 0, the tracepoint -2000
    assert bool(oc[oc["kind"] == "set_attr"].iloc[0]["match"])
    b = A.bracket_frame(r["samples"])
    assert b["inside"].all()
    assert b["width"].tolist() == [1000, 1000, 900]
    assert b["entry"].tolist() == [500, 600, 400]
    # guest readings far below their brackets: the offset is honoured
    far = r["samples"].copy()
    far.loc[far["variant"] == "created", "guest"] = [10, 20]
    assert A.offset_honored(A.bracket_frame(far)) is True
    assert A.offset_honored(b) is False


def test_offset_check_reports_a_missing_event():
    r = P.parse_helper(HELPER_OUT)
    ev = P.tsc_offset_events(P.parse_trace(TRACE, pid=42)).head(1)
    oc = A.offset_check(_tagged(r["ops"]), _tagged(ev))
    assert oc["kind"].tolist() == ["create_vcpu", "count_mismatch"]


def test_timeline_puts_host_events_and_guest_stamps_on_one_axis():
    r = P.parse_helper(HELPER_OUT)
    tr = P.parse_trace(TRACE, pid=42)
    tl = A.timeline_frame(tr, r["samples"], window=1)  # the first non-warm-up reading: 6000..7000
    assert tl["what"].tolist() == ["before KVM_RUN", "guest RDTSC", "after KVM_RUN"]
    tl = A.timeline_frame(tr, r["samples"][r["samples"]["variant"] == "attr"], window=1)
    assert tl["what"].tolist() == [
        "before KVM_RUN",
        "emulate 0f 31",
        "guest RDTSC",
        "after KVM_RUN",
    ]
    assert tl["t_cycles"].tolist() == [0, 300, 400, 900]


def test_skew_bounds_contain_a_known_skew():
    # CPU b runs 300 cycles ahead; one-way trips of 200..400 cycles.
    rows = []
    for i, trip in enumerate(range(200, 400, 10)):
        # a initiates: t1=0, t2 = trip + 300 (b clock), t3 = 2*trip (a clock)
        rows.append((0, 0, i, trip + 300, 2 * trip - (trip + 300)))
        # b initiates: t1=0 (b), t2 = trip - 300 (a clock), t3 = 2*trip (b)
        rows.append((1, 0, i, trip - 300, 2 * trip - (trip - 300)))
    pp = pd.DataFrame(rows, columns=["direction", "round", "i", "t2_minus_t1", "t3_minus_t2"])
    pp.insert(0, "cpu_b", 1)
    pp.insert(0, "cpu_a", 0)
    sb = A.skew_bounds(_tagged(pp))
    allrow = sb[sb["round"] == "all"].iloc[0]
    assert allrow["lo"] <= 300 <= allrow["hi"]
    assert not allrow["consistent"]  # 0 is excluded: the skew is proven


# ---------------------------------------------------------- key findings --
FIND = {f.key: f for f in KF.FINDINGS}
KHZ = 2_000_000  # KVM's TSC rate in the fake datasets


class _Run:
    """What a finding's measure() reads of one dataset: its tables and its manifest."""

    def __init__(self, virtualization="kvm", khz=KHZ, **tables):
        if khz is not None:
            tables.setdefault(
                "tsc_facts",
                pd.DataFrame([{"key": "kvm_get_tsc_khz", "value": str(khz), "source": "t"}]),
            )
        self.tables = tables
        self.manifest = {"host": {"virtualization": virtualization, "kvm_modules": ["kvm"]}}

    def __getitem__(self, name):
        return self.tables[name]

    def __contains__(self, name):
        return name in self.tables


def _outcome(key, run):
    f = FIND[key]
    return f.outcome(f.measure(run))


def _pingpong(skew: int):
    """Exchanges with CPU b `skew` cycles ahead, one-way trips of 200..390 cycles."""
    rows = []
    for i, trip in enumerate(range(200, 400, 10)):
        rows.append((0, 0, i, trip + skew, 2 * trip - (trip + skew)))
        rows.append((1, 0, i, trip - skew, 2 * trip - (trip - skew)))
    pp = pd.DataFrame(rows, columns=["direction", "round", "i", "t2_minus_t1", "t3_minus_t2"])
    pp.insert(0, "cpu_b", 1)
    pp.insert(0, "cpu_a", 0)
    return _tagged(pp)


@pytest.mark.parametrize(
    "skew,verdict", [(0, HOLDS), (300, HOLDS), (5000, FAILS), (1000, UNDECIDED)]
)
def test_skew_is_decided_on_the_bounds_of_its_size(skew, verdict):
    """|d| between the ping-pong bounds: below 1,000 cycles where the upper bound is, 1,000 or
    more where the lower bound is (a skew proven), open where the bounds reach across."""
    o = _outcome("skew", _Run(skew_pingpong=_pingpong(skew)))
    assert o.verdict == verdict, o
    assert o.estimate.low <= skew <= o.estimate.high and o.estimate.coverage == 1.0
    if verdict == UNDECIDED:
        assert "straddles 1,000" in o.why


def test_skew_under_tcg_is_exact_and_says_why():
    pp = _pingpong(0)
    pp["t2_minus_t1"], pp["t3_minus_t2"] = 0, 5  # one never-decreasing counter: t1 = t2
    o = _outcome("skew", _Run("qemu", None, skew_pingpong=pp))
    assert o.verdict == HOLDS and o.estimate.exact and o.estimate.value == 0
    assert "TCG" in o.evidence and "40 of 40" in o.evidence
    assert FIND["skew"].measure(_Run()) is None


@pytest.mark.parametrize(
    "ppm,n,verdict",
    [([0.5], 5, UNDECIDED), ([0.5], 6, HOLDS), ([50], 6, FAILS), ([-50], 6, FAILS)],
    ids=["5-windows", "6-windows", "fast", "slow"],
)
def test_freq_is_the_median_window_against_kvm(ppm, n, verdict):
    """Five timed windows give the median a 93.75 % interval at best: too few to decide."""
    khz = [KHZ * (1 + (ppm[0] + 0.1 * i) / 1e6) for i in range(n)]
    f = pd.DataFrame({"rep": range(n), "ns": 1, "cycles": 1, "khz": khz})
    o = _outcome("freq", _Run(tsc_freq=f))
    assert o.verdict == verdict, o
    if n == 5:
        assert "n too small" in o.why and "93.75 %" in o.why
    assert FIND["freq"].measure(_Run(khz=None, tsc_freq=f)) is None  # no KVM: not measured


def _brackets(width: int, rounds: int, created_inside: bool = True):
    """Bracket readings: a 'created' block (round -1) inside or far outside its brackets, and
    every variant in each round, `width` cycles wide (+- a little by round)."""
    rows = []
    t = 10_000_000
    for i in range(20):
        guest = t + 10 if created_inside else 5
        rows.append(("created", -1, 0, i, 0, t, guest, t + width))
        t += 100_000
    for r in range(rounds):
        for v in ("default", "msr", "attr"):
            for i in range(10):
                w = width + 50 * r
                rows.append((v, r, 0, i, 0, t, t + w // 2, t + w))
                t += 100_000
    cols = ["variant", "round", "cpu", "idx", "warmup", "before", "guest", "after"]
    return _tagged(pd.DataFrame(rows, columns=cols))


@pytest.mark.parametrize("inside,verdict", [(False, HOLDS), (True, FAILS)])
def test_honoured_is_the_share_of_creation_readings_outside(inside, verdict):
    o = _outcome("honoured", _Run(bracket=_brackets(20_000, 6, inside)))
    assert o.verdict == verdict, o
    assert o.estimate.value == (0 if inside else 100) and "20 readings" in o.estimate.basis


@pytest.mark.parametrize(
    "width,rounds,verdict",
    [(20_000, 6, HOLDS), (60_000, 6, FAILS), (20_000, 5, UNDECIDED)],
)
def test_roundtrip_is_the_median_of_the_rounds(width, rounds, verdict):
    """One value per round (its median width) at KVM's rate: 20,000 cycles at 2 GHz is 10 µs;
    five rounds cannot give the median a 95 % interval."""
    o = _outcome("roundtrip", _Run(bracket=_brackets(width, rounds)))
    assert o.verdict == verdict, o
    assert f"{rounds} rounds" in o.estimate.basis
    assert A.round_widths(A.bracket_frame(_brackets(width, rounds))).tolist() == [
        width + 50 * r for r in range(rounds)
    ]


def test_fact_rank_restores_the_written_order():
    keys = [
        "measured_tsc_khz_median",
        "dmesg_tsc_10",
        "dmesg_tsc_2",
        "kvm_get_tsc_khz",
        "some_new_cpuid_fact",
        "cpu_flag_tsc",
        "cpu_model",
    ]
    assert sorted(keys, key=fact_rank) == [
        "cpu_model",
        "cpu_flag_tsc",
        "some_new_cpuid_fact",
        "kvm_get_tsc_khz",
        "dmesg_tsc_2",
        "dmesg_tsc_10",
        "measured_tsc_khz_median",
    ]


def test_params_reject_before_touching_anything(tmp_path):
    with pytest.raises(ParameterError):
        framework.collect(X.chapter, "quick", tmp_path, say=lambda s: None, rep_min_runs=0)
    assert not (tmp_path / "runs").exists()


def test_without_kvm_the_kvm_parts_are_skipped(scratch_data, monkeypatch):
    """No /dev/kvm: facts and skew are measured, the KVM parts skipped with the reason."""
    if X.chapter.preflight():
        pytest.skip(X.chapter.preflight()[0])
    reason = "no /dev/kvm: KVM is not available (test)"
    monkeypatch.setattr(C, "kvm_problem", lambda: reason)
    out = framework.collect(
        X.chapter, "quick", scratch_data, say=lambda s: None, skew_iters=100, skew_rounds=1
    )
    man = json.loads((out / "manifest.json").read_text())
    assert man["skipped"] == {"kvm": reason, "tracepoint": reason, "timeline": reason}
    assert man["profile"] == "quick" and "tsc_alignment" in man["facts"]
    assert (table_path(out, "tsc_facts") is not None) and not (
        table_path(out, "bracket") is not None
    )


# ------------------------------------------------------- committed data --
def _committed(book_data):
    D = X.chapter.load(book_data.data_dir)
    if D["bracket"].empty:
        pytest.skip(
            "no committed tsc_alignment dataset yet (run python -m perfbook measure --chapters tsc_alignment)"
        )
    return D


def test_committed_dataset_is_consistent(book_data):
    D = _committed(book_data)
    b = A.bracket_frame(D["bracket"])
    assert (b["width"] > 0).all()
    att = b[(b["variant"] == "attr") & (b["warmup"] == 0)]
    assert len(att) and att["inside"].all(), (
        "after KVM_VCPU_TSC_OFFSET=0 every guest reading is bracketed"
    )
    oc = A.offset_check(D["kvm_ops"], D["tsc_offset_events"])
    assert (oc["kind"] != "count_mismatch").all(), "one kvm_write_tsc_offset per offset ioctl"
    assert oc["event_in_ioctl"].all()
    attr = oc[oc["kind"] == "set_attr"]
    assert (attr["trace_next"] == attr["requested_signed"]).all()
    k = oc[oc["kind"].isin(["create_vcpu", "set_msr"])]
    assert k["kernel_tsc_in_ioctl"].astype(bool).all()
    again = oc[oc["kind"] == "set_msr_again"]
    assert again["same_as_prev"].all(), "a second TSC MSR write within 1 s is matched"
    honoured = A.offset_honored(b)
    created = b[(b["variant"] == "created") & (b["warmup"] == 0)]
    if honoured:
        assert oc["match"].all()
        assert not created["inside"].any()
    else:
        assert created["inside"].all()
        assert (oc["api_offset"] == 0).all()


def test_u64_offsets_load_exactly(book_data):
    """Offsets near 2^64 must not wrap: the tables keep them as exact decimal text."""
    D = _committed(book_data)
    nxt = D["tsc_offset_events"]["next"].map(int)
    assert (nxt >= 0).all() and (nxt >= 1 << 63).any()  # creation offsets: 2^64 - host TSC
    ops = D["kvm_ops"]
    assert (ops["readback"].map(signed) == ops["readback_signed"]).all()


def test_findings_quote_one_dataset(book_data):
    """Every glued value is text or an integer, and the skew figures come from the quoted
    dataset only (the fastest round trip once came from another host's quick run)."""
    D = _committed(book_data)
    f = prose.values(D)
    assert all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in f.values())
    q = D.quoted
    assert q.profile in ("default", "full") and "bracket" in q.tables
    assert f["host"] == q.host_id and f["p_rounds"] > 0
    sb = A.skew_bounds(D.of_quoted(D["skew_pingpong"]))
    assert f["skew_rtt_min"] == f"{int(sb[sb['round'] == 'all']['rtt_min'].iloc[0]):,}"
    assert f["n_skips"] == sum(len(m.skipped) for m in D.manifests)


def test_key_findings_on_the_book_data(book_data):
    """Every finding gives every host a verdict from the book's data; the round trip rests on
    the quoted dataset's rounds and the skew on its ping-pong bounds."""
    from perfbook.analysis.findings import VERDICTS, Run, evaluate

    D = _committed(book_data)
    assert X.chapter.key_findings == KF.FINDINGS
    for f in KF.FINDINGS:
        for h in D.hosts:
            assert evaluate(D, f, h).verdict in VERDICTS
    run = Run(D, D.quoted)
    rt = KF.roundtrip(run).estimate
    assert f"{A.measured_rounds(A.brackets(D, 'quoted'))[D.quoted.key]} rounds" in rt.basis
    sb = A.skew_bounds(D.of_quoted(D["skew_pingpong"]))
    a = sb[sb["round"] == "all"].iloc[0]
    assert KF.skew(run).estimate.high == max(abs(a["lo"]), abs(a["hi"]))


def test_claims_are_worded_for_their_unit_of_repetition(book_data):
    """#40: a claim may not reach past what repeats under it. The skew and the TSC frequency are
    fixed when the kernel boots (TSC synchronisation, calibration) and are measured in one boot;
    the brackets' rounds and the creation offset's readings are windows of one kvmtsc process,
    one VM whose vCPU is created once. So every claim, and its contrary, is scoped to this boot or
    to this run's VM, and each interval's basis says what it was drawn from. The old wording
    ("This machine's CPUs' TSCs agree ...", "A KVM_RUN round trip ... takes less than 20 µs")
    claimed the machine from one boot and one VM."""
    from perfbook.analysis.findings import Run

    assert set(KF.SCOPE) == {f.key for f in KF.FINDINGS}
    for f in KF.FINDINGS:
        lead = f"In {KF.SCOPE[f.key]}, "
        assert f.claim.startswith(lead) and f.contrary.startswith(lead), f.key
    assert set(KF.SCOPE.values()) == {"this boot", "this run's VM"}
    D = _committed(book_data)
    # what "this run's VM" rests on: every dataset created its one vCPU once
    ops = D["kvm_ops"]
    created = ops[ops["kind"] == "create_vcpu"].groupby(["host_id", "run_id"]).size()
    assert len(created) and (created == 1).all(), created
    run = Run(D, D.quoted)
    assert "in one VM" in KF.roundtrip(run).estimate.basis
    assert "of one vCPU" in KF.honoured(run).estimate.basis
    assert "in one boot" in KF.freq(run).estimate.basis


# ------------------------------------------------------------------ live --
def _need_kvm():
    need_root("the KVM + ftrace test")
    why = C.kvm_problem()
    if why:
        pytest.skip(why)


def _snap():
    """Tracing state that matters here; other chapters' live instances are ignored."""
    from perfbook.hoststate.tracefs import snapshot

    s = snapshot()
    s["our_instances"] = [i for i in s.get("our_instances", []) if "_tsc_" in i]
    return s


def _kvm_fds(pid="self") -> list[str]:
    out = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            t = os.readlink(fd)
        except OSError:
            continue
        if "kvm" in t:
            out.append(t)
    return out


def _helper_pids() -> list[int]:
    exe = str((ROOT / "build" / "bin" / "kvmtsc").resolve())
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if os.readlink(p / "exe").startswith(exe):
                    pids.append(int(p.name))
            except OSError:
                pass
    return pids


def test_live_alignment_inside_bracket_after_not_before():
    """On this machine: readings bracketed after alignment; before, it depends on the vendor."""
    _need_kvm()
    from perfbook.hoststate.tracefs import TraceSession

    with TraceSession(tag="tsc_test") as ts:
        ts.set_option("trace_clock", "x86-tsc")
        ts.enable("kvm/kvm_write_tsc_offset")
        out = C.run_helper(
            [
                "run",
                "--cpus",
                "0",
                "--rounds",
                "1",
                "--samples",
                "50",
                "--warmup",
                "5",
                "--pristine",
                "50",
                "--variants",
                "attr",
            ]
        )
        r = P.parse_helper(out)
        ev = P.tsc_offset_events(P.parse_trace(ts.file("trace").read_text(), int(r["meta"]["pid"])))
    b = A.bracket_frame(r["samples"])
    after = b[(b["variant"] == "attr") & (b["warmup"] == 0)]
    before = b[(b["variant"] == "created") & (b["warmup"] == 0)]
    assert after["inside"].all()
    ops = r["ops"]
    assert len(ev) == len(ops) == 2
    create_next = int(ev["next"].iloc[0])
    assert ops["tsc_before"].iloc[0] <= (U64 - create_next) % U64 <= ops["tsc_after"].iloc[0]
    if int(ops["readback"].iloc[0]) != 0:
        # VMX/SVM: the guest counts from creation; the API agrees with the tracepoint
        assert not before["inside"].any()
        assert (ops["readback"].values == ev["next"].values).all()
    else:
        # a vendor that drops the offset (PVM): the guest reads the host TSC anyway
        assert before["inside"].all()
        assert create_next != 0 and (ev["prev"] == 0).all()
    assert not _kvm_fds()


def test_quick_collect(scratch_data):
    need_root("collect (ftrace + /dev/kvm)")
    before = _snap()
    out = framework.collect(X.chapter, "quick", scratch_data, say=lambda s: None, rep_warmup=1)
    assert (out / "manifest.json").is_file() and (table_path(out, "tsc_facts") is not None)
    if not C.kvm_problem():
        for t in ("bracket", "kvm_ops", "tsc_offset_events", "timeline_events", "repetition"):
            assert table_path(out, f"{t}") is not None, t
        rep = pd.read_csv(table_path(out, "repetition")).set_index("key")
        assert set(rep.index) == set(P.VARIANTS) and set(rep.experiment) == {P.EXPERIMENT}
        assert (rep.warmup == 1).all()
        assert set(rep.stopped_by) <= {"ci_target", "time_budget", "max_runs"}
        b = pd.read_csv(table_path(out, "bracket"))
        warm = b[b["warmup_round"]]
        assert len(warm) and (warm["warmup"] == 1).all() and set(warm["round"]) == {0}
        measured = b[(b["round"] >= 0) & ~b["warmup_round"]]
        assert (rep.n == measured["round"].nunique()).all()
        p = X.chapter.parameters("quick")
        assert p["rep_min_runs"] <= rep.n.iloc[0] <= p["rep_max_runs"]
        w = A.bracket_frame(measured[measured["warmup"] == 0])
        per_round = w.groupby(["variant", "round"])["width"].median().groupby("variant").median()
        assert (rep["median"] == per_round.reindex(rep.index)).all()
        # the new dataset loads through the declared schemas, u64 offsets exact
        D = X.chapter.load(scratch_data)
        assert len(D) == 1 and D.quoted.profile == "quick"
        assert len(A.offsets(D)) == len(D["kvm_ops"])
    assert _snap() == before
    assert not _kvm_fds() and not _helper_pids()


def test_helper_exits_cleanly_on_sigint():
    _need_kvm()
    from perfbook.probes.cbuild import binary

    exe = binary("kvmtsc")
    proc = subprocess.Popen(
        [
            str(exe),
            "run",
            "--cpus",
            "0",
            "--rounds",
            "200",
            "--samples",
            "100000",
            "--warmup",
            "0",
            "--variants",
            "attr",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.5)
    kvm_open = _kvm_fds(proc.pid)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=20)
    assert kvm_open, "the helper held KVM fds while running"
    assert proc.returncode == 130
    assert proc.pid not in _helper_pids()


def test_interactive_helper_stops_when_told():
    """--interactive 1: one round per 'next'; 'stop' or end of input ends the run cleanly."""
    _need_kvm()
    from perfbook.probes.cbuild import binary

    args = [
        str(binary("kvmtsc")),
        "run",
        "--cpus",
        "0",
        "--rounds",
        "50",
        "--samples",
        "5",
        "--warmup",
        "1",
        "--variants",
        "attr",
        "--interactive",
        "1",
    ]
    for stdin, rounds in (("next\nnext\nstop\n", 3), ("", 1)):
        r = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        parsed = P.parse_helper(r.stdout)
        assert parsed["samples"]["round"].nunique() == rounds
        assert r.stdout.count("round_done,") == rounds
    assert not _kvm_fds() and not _helper_pids()
