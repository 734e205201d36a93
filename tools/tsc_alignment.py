"""Guest/host TSC alignment with KVM, without QEMU and without systemtap.

The seed (000_7b0d737d6588117b.txt, "systemtap で KVM ゲストとホストのTSC値を一致させる",
2013) forced KVM's TSC offset to 0 with a systemtap guru-mode probe on
vmx_write_tsc_offset, so that guest and host trace stamps shared one axis.
Today the offset is a vCPU device attribute (KVM_VCPU_TSC_CTRL /
KVM_VCPU_TSC_OFFSET, Documentation/virt/kvm/devices/vcpu.rst) and every write
is traced by kvm:kvm_write_tsc_offset.

collect() measures, on this host:
  * TSC facts: flags, clocksources, frequency (KVM_GET_TSC_KHZ, cpuid, and
    measured against CLOCK_MONOTONIC_RAW), cross-CPU skew bounds by ping-pong;
  * a tiny VM (tools/c/kvmtsc.c): real-mode guest code reads RDTSC once per
    KVM_RUN, each run bracketed by two host TSC reads; the offset is left as
    KVM chose it, restored, set through the MSR or through the attribute;
  * kvm_write_tsc_offset in a private ftrace instance (trace_clock x86-tsc),
    compared with the offset the API reads back;
  * a short timeline: host KVM events and guest TSC stamps on one axis.

The analysis helpers below are what the notebook calls.
"""
from __future__ import annotations

import os
import platform
import re
import signal
import subprocess
import time
from pathlib import Path

from . import hostinfo
from .errors import MissingPrerequisite, ParameterError, PerfbookError
from .progress import Progress
from .stats import repetition, repetition_settings

CHAPTER = "tsc_alignment"
TITLE = "Guest/host TSC alignment with KVM"
U64 = 1 << 64

# The KVM_RUN brackets repeat in rounds (every variant, on every CPU, in a rotating
# order) adaptively (tools.stats.Repetition): after rep_warmup dropped rounds, until
# each variant's per-round median bracket width has a 95 % CI narrower than
# rep_target (relative), or rep_budget_s runs out, or rep_max_runs rounds are in.
# Skew and frequency are fixed counts: a skew bound comes from the extreme exchanges,
# not from a median, and the frequency is a calibration that agrees to ppm.
PROFILES: dict[str, dict] = {
    "quick": {"samples": 100, "warmup": 20, "pristine": 100,
              "rep_target": 0.05, "rep_min_runs": 2, "rep_max_runs": 3, "rep_budget_s": 10.0,
              "rep_warmup": 0,
              "skew_rounds": 2, "skew_iters": 1000, "timeline_samples": 12,
              "freq_reps": 3, "freq_ms": 50, "cpus": None},
    # default: 200 readings per block and at most 20 rounds keep the bracket table under
    # about 2 MB for the repository; `full` is for a closer look on your own machine
    "default": {"samples": 200, "warmup": 20, "pristine": 500,
                "rep_target": 0.05, "rep_min_runs": 6, "rep_max_runs": 20, "rep_budget_s": 15.0,
                "rep_warmup": 1,
                "skew_rounds": 5, "skew_iters": 2000, "timeline_samples": 30,
                "freq_reps": 5, "freq_ms": 200, "cpus": None},
    "full": {"samples": 1000, "warmup": 100, "pristine": 1000,
             "rep_target": 0.02, "rep_min_runs": 10, "rep_max_runs": 100, "rep_budget_s": 120.0,
             "rep_warmup": 1,
             "skew_rounds": 10, "skew_iters": 5000, "timeline_samples": 60,
             "freq_reps": 10, "freq_ms": 500, "cpus": None},
}
LIMITS = {"samples": (10, 100000), "warmup": (0, 10000),
          "pristine": (0, 100000), "skew_rounds": (1, 100), "skew_iters": (100, 200000),
          "timeline_samples": (1, 1000), "freq_reps": (1, 100), "freq_ms": (10, 5000)}
EXPERIMENT = "KVM_RUN bracket width"
VARIANTS = ("default", "msr", "attr")
TIMELINE_EVENTS = ("kvm/kvm_write_tsc_offset", "kvm/kvm_entry", "kvm/kvm_exit",
                   "kvm/kvm_emulate_insn", "kvm/kvm_pio", "kvm/kvm_userspace_exit")
HELPER = "kvmtsc"


# --------------------------------------------------------------- parameters --
def _parse_cpus(value) -> list[int] | None:
    if value is None or value == "" or value == "auto":
        return None
    if isinstance(value, int):
        return [value]
    if isinstance(value, str):
        parts = [x.strip() for x in value.split(",") if x.strip()]
    else:
        parts = list(value)
    try:
        cpus = [int(x) for x in parts]
    except (TypeError, ValueError):
        raise ParameterError(f"cpus must be a list of CPU numbers like '0,1', got {value!r}") from None
    allowed = sorted(os.sched_getaffinity(0))
    bad = [c for c in cpus if c not in allowed]
    if bad or not cpus:
        raise ParameterError(f"cpus {value!r}: CPU(s) {bad or value} not usable here; allowed: {allowed}")
    return cpus


def params(profile: str = "default", **overrides) -> dict:
    if profile not in PROFILES:
        raise ParameterError(f"profile must be one of {tuple(PROFILES)}, got {profile!r}")
    p = dict(PROFILES[profile])
    for k, v in overrides.items():
        if v is None:
            continue
        if k not in p:
            raise ParameterError(f"unknown parameter {k!r} for {CHAPTER}; known: {', '.join(sorted(p))}")
        p[k] = v
    for k, (lo, hi) in LIMITS.items():
        v = p[k]
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ParameterError(f"{k} must be an integer in [{lo}, {hi}], got {v!r}")
    repetition_settings(p, "rep_")
    cpus = _parse_cpus(p["cpus"])
    if cpus is None:
        cpus = sorted(os.sched_getaffinity(0))[:2]
    p["cpus"] = cpus
    p["profile"] = profile
    return p


# ---------------------------------------------------------------- preflight --
def kvm_problem() -> str | None:
    """Why the KVM part can't run here (None: it can)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"the KVM part needs x86-64 (this is {platform.machine()})"
    if not os.path.exists("/dev/kvm"):
        return "no /dev/kvm: KVM is not available (load kvm_intel/kvm_amd, or enable nested virtualization)"
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        return f"/dev/kvm can't be opened ({e.strerror}): run as root or join the kvm group"
    os.close(fd)
    return None


def preflight() -> list[str]:
    if platform.machine() not in ("x86_64", "AMD64"):
        return [f"TSC experiments need x86-64 (this is {platform.machine()})"]
    return []


def kvm_vendor_modules() -> list[str]:
    """Which KVM vendor modules are present (built in or loaded)."""
    return sorted(m for m in ("kvm_intel", "kvm_amd", "kvm_pvm")
                  if Path("/sys/module", m).is_dir())


# ------------------------------------------------------------------ helpers --
def _run_helper(args: list[str], timeout: float = 600) -> str:
    """Run build/bin/kvmtsc; on any exception (SIGINT included) kill it first."""
    from .cbuild import binary
    exe = str(binary(HELPER))
    proc = subprocess.Popen([exe, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        _stop(proc)
        raise
    if proc.returncode != 0:
        msg = (err.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise PerfbookError(f"kvmtsc {args[0]} failed: {msg}")
    return out


def _run_adaptive(args: list[str], rep, prog) -> dict:
    """`kvmtsc run --interactive 1`: after every round, hand each variant's median bracket
    width to `rep` (a Repetition) and tell the helper to go on or to stop.

    Readings of warm-up rounds are kept but flagged (warmup = 1, warmup_round = True),
    so every analysis that drops warm-up readings drops them too.
    """
    import tempfile
    from .cbuild import binary
    exe = str(binary(HELPER))
    with tempfile.TemporaryFile(mode="w+") as errf:
        proc = subprocess.Popen([exe, *args, "--interactive", "1"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=errf, text=True,
                                start_new_session=True)
        lines: list[str] = []
        warm: set[int] = set()
        try:
            rounds = rep.rounds()
            rd = next(rounds)
            start = 0
            for line in proc.stdout:
                lines.append(line)
                if not line.startswith("round_done,"):
                    continue
                r = int(line.split(",")[1])
                block = bracket_frame(parse_helper("".join(lines[start:]))["samples"])
                start = len(lines)
                block = block[(block["round"] == r) & (block["warmup"] == 0)]
                if rd.warmup:
                    warm.add(r)
                for v, g in block.groupby("variant"):
                    rep.add(v, float(g["width"].median()))
                prog.note(f"{'warm-up ' if rd.warmup else ''}round {r + 1}: {rep.status()}")
                try:
                    rd = next(rounds)
                    proc.stdin.write("next\n")
                except StopIteration:
                    proc.stdin.write("stop\n")
                proc.stdin.flush()
            proc.stdin.close()
            proc.wait(timeout=60)
        except BaseException:
            _stop(proc)
            raise
        if proc.returncode != 0:
            errf.seek(0)
            msg = (errf.read().strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
            raise PerfbookError(f"kvmtsc {args[0]} failed: {msg}")
    res = parse_helper("".join(lines))
    smp = res["samples"]
    smp["warmup_round"] = smp["round"].isin(warm)
    smp.loc[smp["warmup_round"], "warmup"] = 1
    prog.note(f"KVM brackets stopped by {rep.stopped_by}: {rep.status()}")
    return res


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def parse_helper(text: str) -> dict:
    """Split kvmtsc output into frames/dicts by line kind."""
    import pandas as pd
    rows: dict[str, list] = {"s": [], "op": [], "pp": [], "freq": []}
    meta: dict[str, str] = {}
    facts: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(",")
        kind = parts[0]
        if kind == "meta":
            meta[parts[1]] = parts[2]
        elif kind == "fact":
            facts[parts[1]] = parts[2]
        elif kind in rows:
            rows[kind].append(parts[1:])
    cols = {
        "s": ["variant", "round", "cpu", "idx", "warmup", "before", "guest", "after"],
        "op": ["seq", "kind", "variant", "round", "tsc_before", "tsc_after", "requested", "readback"],
        "pp": ["direction", "round", "i", "t2_minus_t1", "t3_minus_t2"],
        "freq": ["rep", "ns", "cycles"],
    }
    frames = {}
    for k, c in cols.items():
        df = pd.DataFrame(rows[k], columns=c)
        for col in c:
            if col not in ("variant", "kind"):
                # u64 values fit in Python ints; keep them exact via object -> int
                df[col] = df[col].map(int) if len(df) else df[col]
        frames[k] = df
    return {"samples": frames["s"], "ops": frames["op"], "pingpong": frames["pp"],
            "freq": frames["freq"], "meta": meta, "facts": facts}


def parse_trace(text: str, pid: int | None = None):
    """ftrace text (x86-tsc clock: timestamps are raw TSC, kept exact) -> tidy frame
    pid, cpu, ts, event, detail. Any trace options parse (tools.ftrace); attrs['lost']
    and attrs['lost_lines'] say whether the ring buffer dropped events."""
    from . import ftrace
    df = ftrace.parse_lines(text)
    df = df[df["event"].notna() & ((df["pid"] == pid) if pid is not None else True)]
    out = df[["pid", "cpu", "ts"]].assign(event=df["event"], detail=df["body"].str.strip())
    out = out.reset_index(drop=True)
    out.attrs = dict(df.attrs)
    return out


def tsc_offset_events(trace_df):
    import pandas as pd
    from .ftrace import parse_kv
    rows = []
    for r in trace_df[trace_df["event"] == "kvm_write_tsc_offset"].itertuples():
        f = parse_kv(r.detail)
        if {"vcpu", "prev", "next"} <= f.keys():
            rows.append({"ts": r.ts, "cpu": r.cpu, "vcpu": int(f["vcpu"]),
                         "prev": int(f["prev"]), "next": int(f["next"])})
    return pd.DataFrame(rows, columns=["ts", "cpu", "vcpu", "prev", "next"])


def signed(u: int) -> int:
    """A u64 offset as the signed number it stands for (2^64 - x -> -x)."""
    u = int(u) % U64
    return u - U64 if u >= (1 << 63) else u


# _facts_table's row order (kvmtsc.c prints its cpuid facts in this order), for load()
FACT_ORDER = (("cpu_model", "virtualization", "clocksource_current", "clocksources_available",
               "kvm_vendor_modules", "cpu_flag_svm", "cpu_flag_vmx")
              + tuple(f"cpu_flag_{f}" for f in hostinfo.TSC_FLAGS + ("hypervisor",))
              + ("cpuid_hypervisor_bit", "hypervisor_signature", "hypervisor_max_leaf",
                 "cpuid_invariant_tsc"))
KVM_FACTS = ("kvm_get_tsc_khz", "cap_vcpu_attributes", "cap_tsc_control", "api_version")


def fact_rank(key: str) -> tuple:
    """Sort key of a tsc_facts row that reproduces the order _facts_table writes."""
    if key in FACT_ORDER:
        return (0, FACT_ORDER.index(key), "")
    if key in KVM_FACTS:
        return (2, KVM_FACTS.index(key), "")
    if key.startswith("dmesg_tsc_") and key[10:].isdigit():
        return (3, int(key[10:]), "")
    if key == "measured_tsc_khz_median":
        return (4, 0, "")
    return (1, 0, key)              # another cpuid fact: after the known ones, by name


def _facts_table(facts: dict, meta: dict, freq_df) -> "object":
    import pandas as pd
    hf = hostinfo.host_facts()
    cs = hf["clocksource"]
    flags = hostinfo.cpuinfo()["flags"]
    rows = [("cpu_model", hf["cpu_model"], "/proc/cpuinfo"),
            ("virtualization", hf["virtualization"], "systemd-detect-virt"),
            ("clocksource_current", cs["current"], "sysfs clocksource0"),
            ("clocksources_available", " ".join(cs["available"]), "sysfs clocksource0"),
            ("kvm_vendor_modules", " ".join(kvm_vendor_modules()) or "none", "/sys/module"),
            ("cpu_flag_svm", int("svm" in flags), "/proc/cpuinfo"),
            ("cpu_flag_vmx", int("vmx" in flags), "/proc/cpuinfo")]
    for f in hostinfo.TSC_FLAGS + ("hypervisor",):
        rows.append((f"cpu_flag_{f}", int(f in flags), "/proc/cpuinfo"))
    for k, v in facts.items():
        rows.append((k, v, "cpuid (kvmtsc facts)"))
    for k in KVM_FACTS:
        if k in meta:
            rows.append((k, meta[k], "KVM ioctl"))
    dm = _dmesg_tsc()
    for i, line in enumerate(dm):
        rows.append((f"dmesg_tsc_{i}", line, "dmesg"))
    if len(freq_df):
        khz = (freq_df["cycles"] / freq_df["ns"] * 1e6)
        rows.append(("measured_tsc_khz_median", f"{khz.median():.0f}", "kvmtsc facts vs CLOCK_MONOTONIC_RAW"))
    return pd.DataFrame(rows, columns=["key", "value", "source"])


def _dmesg_tsc() -> list[str]:
    try:
        r = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    out = []
    for line in r.stdout.splitlines():
        body = re.sub(r"^\[\s*[\d.]+\]\s*", "", line)
        if re.match(r"(tsc|clocksource): ", body) and ("MHz" in body or "Switched" in body
                                                      or "unstable" in body or "calibrat" in body):
            out.append(body)
    return out[:8]


# ------------------------------------------------------------------ collect --
def collect(data_dir=None, profile: str = "default", **overrides) -> Path:
    import pandas as pd
    p = params(profile, **overrides)
    from .cbuild import binary
    from .dataset import DatasetWriter, check_writable
    from .lock import measure_lock
    from .paths import resolve_data_dir
    from .tracefs import TraceSession, preflight as trace_preflight

    data = resolve_data_dir(data_dir)
    check_writable(data)
    reasons = preflight()
    if reasons:
        raise MissingPrerequisite(reasons[0])
    binary(HELPER)  # compile before touching anything
    kvm_why = kvm_problem()
    trace_why = (trace_preflight(need_uprobes=False) or [None])[0]
    cpus = p["cpus"]
    cpu_arg = ",".join(map(str, cpus))
    steps = 2 + (0 if kvm_why else 2)

    with measure_lock(CHAPTER), DatasetWriter(CHAPTER, data, p) as w:
        prog = Progress(CHAPTER, steps)
        t_start = time.monotonic()
        # 1. TSC facts and frequency
        facts = parse_helper(_run_helper(["facts", "--freq-ms", str(p["freq_ms"]),
                                          "--freq-reps", str(p["freq_reps"])]))
        freq = facts["freq"]
        freq["khz"] = freq["cycles"] / freq["ns"] * 1e6
        w.add_table("tsc_freq", freq)
        prog.step("TSC facts and frequency")

        # 2. cross-CPU skew
        if len(cpus) >= 2:
            pp = parse_helper(_run_helper(["skew", "--cpus", f"{cpus[0]},{cpus[1]}",
                                           "--rounds", str(p["skew_rounds"]),
                                           "--iters", str(p["skew_iters"])]))["pingpong"]
            pp.insert(0, "cpu_b", cpus[1])
            pp.insert(0, "cpu_a", cpus[0])
            w.add_table("skew_pingpong", pp)
        else:
            w.skip("skew", f"only one CPU usable ({cpus}); a cross-CPU test needs two")
        prog.step("cross-CPU ping-pong")

        meta: dict = {}
        if kvm_why:
            for part in ("kvm", "tracepoint", "timeline"):
                w.skip(part, kvm_why)
        else:
            rep = repetition(EXPERIMENT, VARIANTS, p, "rep_")
            # the helper's own limit is never reached: rep says stop first
            run_args = ["run", "--cpus", cpu_arg, "--rounds", str(rep.warmup + rep.max_runs + 1),
                        "--samples", str(p["samples"]), "--warmup", str(p["warmup"]),
                        "--pristine", str(p["pristine"]), "--variants", ",".join(VARIANTS)]
            tl_args = ["run", "--cpus", str(cpus[-1]), "--rounds", "1",
                       "--samples", str(p["timeline_samples"]), "--warmup", "3",
                       "--pristine", "0", "--variants", "attr"]
            if trace_why:
                res = _run_adaptive(run_args, rep, prog)
                w.skip("tracepoint", trace_why)
                w.skip("timeline", trace_why)
                events = None
                prog.step("KVM brackets (no tracing)")
                prog.step("timeline skipped")
            else:
                with TraceSession(tag="tsc_align", log=prog.note) as ts:
                    ts.set_option("trace_clock", "x86-tsc")  # stamps are raw TSC
                    ts.set_option("buffer_size_kb", "4096")
                    ts.enable("kvm/kvm_write_tsc_offset")
                    ts.set_option("tracing_on", "1")
                    res = _run_adaptive(run_args, rep, prog)
                    pid = int(res["meta"]["pid"])
                    tr = parse_trace(ts.file("trace").read_text(), pid)
                    events = tsc_offset_events(tr)
                    prog.step("KVM brackets + kvm_write_tsc_offset")
                    ts.clear()
                    avail = [e for e in TIMELINE_EVENTS
                             if ts.file(f"events/{e}/enable").exists()]
                    for e in avail:
                        if e != "kvm/kvm_write_tsc_offset":
                            ts.enable(e)
                    tl = parse_helper(_run_helper(tl_args))
                    tl_pid = int(tl["meta"]["pid"])
                    tl_trace = parse_trace(ts.file("trace").read_text(), tl_pid)
                    stats = ts.buffer_stats()
                    prog.step("timeline (host events + guest stamps)")
                w.add_table("timeline_events", tl_trace)
                tls = tl["samples"]
                w.add_table("timeline_samples", tls)
                w.add_table("timeline_ops", tl["ops"])
                w.add_table("tsc_offset_events", events)
                meta["timeline_events_enabled"] = avail
                meta["timeline_buffer_overrun"] = stats.get("overrun", 0)
                meta["trace_clock"] = "x86-tsc"
            w.add_table("bracket", res["samples"])
            w.add_table("repetition", pd.DataFrame(rep.records()))
            ops = res["ops"].copy()
            ops["readback_signed"] = ops["readback"].map(signed)
            w.add_table("kvm_ops", ops)
            meta.update({f"kvm_{k}": v for k, v in res["meta"].items() if k != "pid"})
        w.add_table("tsc_facts", _facts_table(
            facts["facts"], {k[4:]: v for k, v in meta.items() if k.startswith("kvm_")}, freq))
        w.extra["tsc_alignment"] = {
            "kvm_vendor_modules": kvm_vendor_modules(),
            "nested": "hypervisor" in hostinfo.cpuinfo()["flags"],
            "cpus": cpus, "duration_s": round(time.monotonic() - t_start, 1), **meta}
        w.notes.append("guest code: real mode, RDTSC -> store EDX:EAX at 0x2000 -> OUT 0x10; "
                       "one I/O exit per reading; host brackets are LFENCE;RDTSC;LFENCE")
        if "hypervisor" in hostinfo.cpuinfo()["flags"]:
            w.notes.append("this host is itself a virtual machine: the 'host' TSC is the L1 "
                           "guest's TSC and the test VM is nested")
    return w.published


# ----------------------------------------------------------------- analysis --
def load(data_dir=None) -> dict:
    """Every table of every committed run (tidy frames with host_id, run_id)."""
    from .dataset import load_manifests, load_table
    names = ("bracket", "kvm_ops", "tsc_offset_events", "skew_pingpong", "tsc_freq",
             "tsc_facts", "timeline_events", "timeline_samples", "timeline_ops", "repetition")
    out = {n: load_table(CHAPTER, n, data_dir) for n in names}
    f = out["tsc_facts"]
    if len(f):  # the written order, whatever order the rows come in
        out["tsc_facts"] = (f.assign(_k=f["key"].map(fact_rank))
                            .sort_values(["host_id", "run_id", "_k"], kind="stable")
                            .drop(columns="_k").reset_index(drop=True))
    out["manifests"] = load_manifests(CHAPTER, data_dir)
    return out


def bracket_frame(df):
    """Add width / entry / exit / inside columns (cycles) to bracket samples."""
    d = df.copy()
    for c in ("before", "guest", "after"):
        d[c] = d[c].astype("int64")
    d["width"] = d["after"] - d["before"]
    d["entry"] = d["guest"] - d["before"]       # KVM_RUN start -> guest RDTSC
    d["exit"] = d["after"] - d["guest"]         # guest RDTSC -> back in userspace
    d["inside"] = (d["before"] <= d["guest"]) & (d["guest"] <= d["after"])
    return d


def inside_summary(b):
    """Per variant: n, share of guest readings inside their host bracket."""
    m = b[b["warmup"] == 0]
    g = m.groupby("variant", sort=False)
    out = g.agg(n=("inside", "size"), inside=("inside", "sum"),
                median_distance=("entry", "median")).reset_index()
    out["inside_share"] = out["inside"] / out["n"]
    order = {v: i for i, v in enumerate(("created",) + VARIANTS)}
    return out.sort_values("variant", key=lambda s: s.map(order)).reset_index(drop=True)


def width_summary(b, by=("variant",)):
    from .stats import summarize_frame
    m = b[b["warmup"] == 0]
    return summarize_frame(m, list(by), "width")


def offset_check(ops, events):
    """Pair each offset-changing ioctl with its kvm_write_tsc_offset event.

    Within one run both are in the same order: create_vcpu fires one event,
    every set_attr / set_msr one more. Returns the joined frame with:
      api_offset   -- what KVM_GET_DEVICE_ATTR read back (signed)
      trace_next   -- the tracepoint's 'next' (signed)
      match        -- api == trace
      kernel_tsc   -- host TSC KVM used, when it can be inferred
                      (create: 0 - next; first msr write: written value - next;
                      a second write is 'matched' and reuses the old offset)
      same_as_prev -- next equals the previous event's next (offset reused)
      in_ioctl     -- kernel_tsc and the event stamp inside the ioctl's bracket
    """
    import pandas as pd
    rows = []
    for (host, run), o in ops.groupby(["host_id", "run_id"], sort=False):
        e = events[(events["host_id"] == host) & (events["run_id"] == run)].sort_values("ts")
        o = o.sort_values("seq")
        for (_, op), (_, ev) in zip(o.iterrows(), e.iterrows()):
            nxt = int(ev["next"])
            if op["kind"] == "create_vcpu":
                ktsc = (U64 - nxt) % U64
            elif op["kind"] == "set_msr":
                ktsc = (int(op["requested"]) - nxt) % U64
            else:
                ktsc = None
            rows.append({"host_id": host, "run_id": run, "seq": int(op["seq"]),
                         "kind": op["kind"], "variant": op["variant"],
                         "api_offset": signed(op["readback"]),
                         "requested_signed": signed(op["requested"]) if op["kind"] == "set_attr" else None,
                         "trace_prev": signed(ev["prev"]), "trace_next": signed(nxt),
                         "event_ts": int(ev["ts"]), "tsc_before": int(op["tsc_before"]),
                         "tsc_after": int(op["tsc_after"]), "kernel_tsc": ktsc})
        if len(o) != len(e):
            rows.append({"host_id": host, "run_id": run, "seq": -1, "kind": "count_mismatch",
                         "variant": f"{len(o)} ops vs {len(e)} events"})
    d = pd.DataFrame(rows)
    if len(d):
        d["same_as_prev"] = d.groupby(["host_id", "run_id"])["trace_next"].shift() == d["trace_next"]
        d["match"] = d["api_offset"] == d["trace_next"]
        d["event_in_ioctl"] = (d["tsc_before"] <= d["event_ts"]) & (d["event_ts"] <= d["tsc_after"])
        kt = d["kernel_tsc"]
        d["kernel_tsc_in_ioctl"] = [
            (None if k is None or k != k else bool(b0 <= k <= b1))
            for k, b0, b1 in zip(kt, d["tsc_before"], d["tsc_after"])]
    return d


def skew_bounds(pp):
    """Bounds on d = TSC(cpu_b) - TSC(cpu_a) from the ping-pong exchanges.

    direction 0 (a initiates): t2 - t3 < d < t2 - t1
    direction 1 (b initiates): the same for -d.
    Returns one row per (host, run, round) plus an 'all' row per run.
    """
    import pandas as pd
    rows = []
    for key, g in pp.groupby(["host_id", "run_id"], sort=False):
        for rnd, gr in list(g.groupby("round")) + [("all", g)]:
            a = gr[gr["direction"] == 0]
            b = gr[gr["direction"] == 1]
            lo0, hi0 = (-a["t3_minus_t2"]).max(), a["t2_minus_t1"].min()
            lo1, hi1 = (-b["t3_minus_t2"]).max(), b["t2_minus_t1"].min()
            lo, hi = max(lo0, -hi1), min(hi0, -lo1)
            rtt = pd.concat([a["t2_minus_t1"] + a["t3_minus_t2"],
                             b["t2_minus_t1"] + b["t3_minus_t2"]])
            rows.append({"host_id": key[0], "run_id": key[1], "round": rnd,
                         "cpu_a": int(gr["cpu_a"].iloc[0]), "cpu_b": int(gr["cpu_b"].iloc[0]),
                         "n": len(gr), "lo": int(lo), "hi": int(hi),
                         "consistent": bool(lo <= 0 <= hi),
                         "bound": int(max(abs(lo), abs(hi))),
                         "rtt_median": float(rtt.median()), "rtt_min": int(rtt.min())})
    return pd.DataFrame(rows)


def offset_honored(b) -> bool | None:
    """Does the guest see the offset KVM chose? (None: no data)"""
    c = b[(b["variant"] == "created") & (b["warmup"] == 0)]
    if not len(c):
        c = b[(b["variant"] == "default") & (b["warmup"] == 0)]
    if not len(c):
        return None
    return bool((~c["inside"]).mean() > 0.5)


def timeline_frame(events, samples, window: int = 4):
    """Host events and guest/host stamps of the first `window` non-warmup samples."""
    import pandas as pd
    s = samples[samples["warmup"] == 0].sort_values("before").head(window)
    if not len(s):
        return pd.DataFrame()
    t0, t1 = int(s["before"].min()), int(s["after"].max())
    rows = []
    for r in s.itertuples():
        rows.append({"ts": int(r.before), "source": "host user", "what": "before KVM_RUN", "sample": r.idx})
        rows.append({"ts": int(r.guest), "source": "guest", "what": "guest RDTSC", "sample": r.idx})
        rows.append({"ts": int(r.after), "source": "host user", "what": "after KVM_RUN", "sample": r.idx})
    ev = events[(events["ts"] >= t0) & (events["ts"] <= t1)]
    for r in ev.itertuples():
        what = r.event
        if r.event == "kvm_emulate_insn":
            m = re.search(r":([0-9a-f]+):([0-9a-f ]+?)\s*\(", r.detail)
            what = f"emulate {m.group(2)}" if m else what
            if "failed" in r.detail:
                what += " (failed)"
        rows.append({"ts": int(r.ts), "source": "host kernel (ftrace)", "what": what, "sample": None})
    d = pd.DataFrame(rows).sort_values("ts").reset_index(drop=True)
    d["t_cycles"] = d["ts"] - t0
    return d


def _newest(frame, run_id):
    return frame[frame["run_id"] == run_id] if len(frame) else frame


def headline(D) -> dict:
    """The figures the chapter quotes, all from the newest dataset."""
    from .stats import summarize
    from .dataset import newest
    mans = sorted(D["manifests"], key=lambda mm: mm["run_id"])
    man = newest(mans)  # the newest default/full run: a quick run is a test
    rid = man["run_id"]
    ex = man.get("tsc_alignment", {})
    h = {"run_id": rid, "host_id": man["host"]["host_id"],
         "description": man["host"]["description"], "kernel": man["host"]["kernel_release"],
         "vendor": " ".join(ex.get("kvm_vendor_modules", [])) or "none",
         "nested": bool(ex.get("nested")), "date": man["started"][:10],
         "skipped": man.get("skipped", {}), "params": man["parameters"],
         "n_datasets": len(mans), "n_hosts": len({mm["host"]["host_id"] for mm in mans})}
    facts = _newest(D["tsc_facts"], rid)
    fd = dict(zip(facts["key"], facts["value"])) if len(facts) else {}
    h["facts"] = fd
    fr = _newest(D["tsc_freq"], rid)
    h["khz_measured"] = float(fr["khz"].median()) if len(fr) else float("nan")
    h["khz_kvm"] = float(fd["kvm_get_tsc_khz"]) if "kvm_get_tsc_khz" in fd else float("nan")
    pp = _newest(D["skew_pingpong"], rid)
    if len(pp):
        sb = skew_bounds(pp)
        a = sb[sb["round"] == "all"].iloc[0]
        h.update(skew_lo=int(a["lo"]), skew_hi=int(a["hi"]), skew_bound=int(a["bound"]),
                 skew_consistent=bool(a["consistent"]), skew_rtt=float(a["rtt_median"]),
                 skew_n=int(a["n"]), skew_round_bound_max=int(sb[sb["round"] != "all"]["bound"].max()))
    br = _newest(D["bracket"], rid)
    if len(br):
        b = bracket_frame(br)
        w = b[b["warmup"] == 0]
        s = summarize(w["width"])
        h.update(width=s, width_median=s.median, width_p99=s.p99, n_samples=s.n,
                 entry_median=float(w["entry"].median()), exit_median=float(w["exit"].median()),
                 honoured=offset_honored(b))
        att = w[w["variant"] == "attr"]
        # if guest = true host time of the read + e, then before < guest - e < after
        # for every sample, so max(guest - after) < e < min(guest - before)
        h["acc_lo"] = int(-att["exit"].min()) if len(att) else None
        h["acc_hi"] = int(att["entry"].min()) if len(att) else None
        ins = inside_summary(b)
        h["inside"] = dict(zip(ins["variant"], ins["inside_share"]))
        h["width_us_median"] = s.median / h["khz_kvm"] * 1e3 if h["khz_kvm"] == h["khz_kvm"] else float("nan")
    ops, ev = _newest(D["kvm_ops"], rid), _newest(D["tsc_offset_events"], rid)
    if len(ops) and len(ev):
        oc = offset_check(ops, ev)
        h["oc"] = oc
        h["n_ops"] = int((oc["kind"] != "count_mismatch").sum())
        h["n_match"] = int(oc["match"].sum())
        h["all_events_in_ioctl"] = bool(oc["event_in_ioctl"].all())
        msr = oc[oc["kind"] == "set_msr"]["trace_next"].astype(float)
        h["msr_err_median"] = float(msr.median()) if len(msr) else float("nan")
        h["msr_err_min"] = float(msr.min()) if len(msr) else float("nan")
        h["msr_err_max"] = float(msr.max()) if len(msr) else float("nan")
        h["n_msr"] = int(len(msr))
        again = oc[oc["kind"] == "set_msr_again"]
        h["msr_again_matched"] = int(again["same_as_prev"].sum())
        h["n_msr_again"] = int(len(again))
        att = oc[oc["kind"] == "set_attr"]
        h["attr_exact"] = int((att["trace_next"] == att["requested_signed"]).sum())
        h["n_attr"] = int(len(att))
        cr = oc[oc["kind"] == "create_vcpu"]
        h["create_event_lag"] = float((cr["event_ts"] - cr["kernel_tsc"].astype(float)).median())
        h["api_zero"] = int((oc["api_offset"] == 0).sum())
        h["prev_zero"] = int((oc["trace_prev"] == 0).sum())
    tle = _newest(D["timeline_events"], rid)
    if len(tle):
        counts = tle["event"].value_counts()
        h["tl_counts"] = {k: int(v) for k, v in counts.items()}
    h["n_kvm_exit"] = int(h.get("tl_counts", {}).get("kvm_exit", 0))
    h["n_emulate"] = int(h.get("tl_counts", {}).get("kvm_emulate_insn", 0))
    return h


# ------------------------------------------------------ hosts, variants, captions --
def round_medians(b):
    """Median bracket width per host, run, variant and round (measured readings only).

    A round is the unit that repeats (and that adaptive repetition counts), so variants
    and hosts are compared on these per-round medians.
    """
    w = b[(b["warmup"] == 0) & b["variant"].isin(VARIANTS)]
    return (w.groupby(["host_id", "run_id", "variant", "round"], as_index=False)["width"].median())


def variant_comparison(b, baseline: str = "default"):
    """Each offset variant's round-trip width against `baseline`, per dataset (compare)."""
    from .stats import compare_frame
    return compare_frame(round_medians(b), by="variant", value="width", baseline=baseline,
                         within=["host_id", "run_id"])


def host_comparison(b, manifests, ref: dict):
    """Each other host's newest dataset against the prose's dataset `ref` (the one
    dataset.newest picks), per variant."""
    import pandas as pd
    from .dataset import only_shown, shown_datasets
    from .stats import compare_frame
    if len(shown_datasets(manifests)) < 2:
        return pd.DataFrame()
    rm = only_shown(round_medians(b), manifests)
    return compare_frame(rm, by="host_id", value="width", baseline=ref["host"]["host_id"],
                         within="variant")


def bracket_caption(b, manifests, what: str, by=("host_id", "variant"), ci: bool = False,
                    extra: str = "") -> str:
    """Caption for a figure of bracket readings: readings per group, the warm-up readings
    excluded (per block, and whole warm-up rounds), and the hosts."""
    from .stats import caption, hosts_of
    g = b.groupby(list(by))["warmup"]
    n = g.apply(lambda s: int((s == 0).sum())).to_numpy()
    wu = g.apply(lambda s: int((s != 0).sum())).to_numpy()
    hosts = hosts_of([m for m in manifests if m["host"]["host_id"] in set(b["host_id"])])
    return caption(what, n=n, unit="readings", warmup=wu, hosts=hosts, ci=ci, extra=extra)
