"""The measurement: the only part of the chapter that touches the host (KVM, ftrace).

  1. TSC facts and frequency (kvmtsc facts: cpuid, KVM_GET_TSC_KHZ, TSC against
     CLOCK_MONOTONIC_RAW), with the kernel's own view (sysfs, /proc/cpuinfo, dmesg);
  2. cross-CPU skew bounds by ping-pong (kvmtsc skew);
  3. the KVM_RUN brackets of a tiny real-mode VM in rounds of every offset variant, under
     adaptive repetition, with kvm:kvm_write_tsc_offset in a private ftrace instance whose
     trace_clock is x86-tsc;
  4. a short timeline run with the KVM entry/exit/emulation events enabled as well.

The kvmtsc helper (tools/c/kvmtsc.c) runs once, or round by round under adaptive repetition,
in a process group of its own that dies with us; on any exception (a signal's
KeyboardInterrupt included) the group is killed before it propagates.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import tempfile
import time
from contextlib import ExitStack, nullcontext

import pandas as pd

from perfbook.analysis.repetition import repetition
from perfbook.core.errors import PerfbookError
from perfbook.core.proc import die_with_parent, kill_group, run_group
from perfbook.data import hostinfo
from perfbook.hoststate.tracefs import TraceSession
from perfbook.hoststate.tracefs import preflight as trace_preflight
from perfbook.probes.cbuild import binary

from .analysis import bracket_frame
from .parse import (
    EXPERIMENT,
    HELPER,
    KVM_FACTS,
    TIMELINE_EVENTS,
    VARIANTS,
    parse_helper,
    parse_trace,
    signed,
    tsc_offset_events,
)


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


def kvm_vendor_modules() -> list[str]:
    """Which KVM vendor modules are present (built in or loaded)."""
    return [m for m in hostinfo.kvm_modules() if m in ("kvm_intel", "kvm_amd", "kvm_pvm")]


# -- the kvmtsc helper ---------------------------------------------------------------------
def _exe() -> str:
    return str(binary(HELPER))


def _failed(args: list[str], rc: int, err: str) -> PerfbookError:
    msg = (err.strip().splitlines() or [f"exit status {rc}"])[-1]
    return PerfbookError(f"{HELPER} {args[0]} failed: {msg}")


def run_helper(args: list[str], timeout: float = 600) -> str:
    """`kvmtsc <args>`'s standard output; PerfbookError with its last error line."""
    r = run_group([_exe(), *args], timeout=timeout, preexec_fn=die_with_parent)
    if r.returncode != 0:
        raise _failed(args, r.returncode, r.stderr)
    return r.stdout


def run_adaptive(args: list[str], rep, prog, phase=None) -> dict:
    """`kvmtsc run --interactive 1`: after every round, hand each variant's median bracket
    width to `rep` (a perfbook.analysis.repetition.Repetition) and tell the helper to go on or to stop.

    Readings of warm-up rounds are kept but flagged (warmup = 1, warmup_round = True),
    so every analysis that drops warm-up readings drops them too. `phase` (ctx.phase) charges
    each round's seconds to "warmup" or "measured" (the VM's creation and the pristine block
    go with the first round).
    """
    phase = phase or (lambda kind: nullcontext())
    with tempfile.TemporaryFile(mode="w+") as errf, ExitStack() as clock:
        proc = subprocess.Popen(
            [_exe(), *args, "--interactive", "1"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errf,
            text=True,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        lines: list[str] = []
        warm: set[int] = set()
        try:
            rounds = rep.rounds()
            rd = next(rounds)
            clock.enter_context(phase("warmup" if rd.warmup else "measured"))
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
                    clock.close()
                    clock.enter_context(phase("warmup" if rd.warmup else "measured"))
                    proc.stdin.write("next\n")
                except StopIteration:
                    proc.stdin.write("stop\n")
                proc.stdin.flush()
            proc.stdin.close()
            proc.wait(timeout=60)
        except BaseException:
            kill_group(proc)
            raise
        if proc.returncode != 0:
            errf.seek(0)
            raise _failed(args, proc.returncode, errf.read())
    res = parse_helper("".join(lines))
    smp = res["samples"]
    smp["warmup_round"] = smp["round"].isin(warm)
    smp.loc[smp["warmup_round"], "warmup"] = 1
    prog.note(f"KVM brackets stopped by {rep.stopped_by}: {rep.status()}")
    return res


# -- the run -------------------------------------------------------------------------------
def measure(ctx) -> None:
    p, w = ctx.p, ctx.writer
    with ctx.phase("setup"):
        binary(HELPER)  # compile before touching anything
    kvm_why = kvm_problem()
    trace_why = (trace_preflight(need_uprobes=False) or [None])[0]
    cpus = p["cpus"]
    prog = ctx.progress(2 + (0 if kvm_why else 2))
    t_start = time.monotonic()
    # 1. TSC facts and frequency
    with ctx.phase("measured"):
        facts = parse_helper(
            run_helper(
                ["facts", "--freq-ms", str(p["freq_ms"]), "--freq-reps", str(p["freq_reps"])]
            )
        )
    freq = facts["freq"]
    freq["khz"] = freq["cycles"] / freq["ns"] * 1e6
    w.add_table("tsc_freq", freq)
    prog.step("TSC facts and frequency")

    # 2. cross-CPU skew
    if len(cpus) >= 2:
        with ctx.phase("measured"):
            pp = parse_helper(
                run_helper(
                    [
                        "skew",
                        "--cpus",
                        f"{cpus[0]},{cpus[1]}",
                        "--rounds",
                        str(p["skew_rounds"]),
                        "--iters",
                        str(p["skew_iters"]),
                    ]
                )
            )["pingpong"]
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
        run_args = [
            "run",
            "--cpus",
            ",".join(map(str, cpus)),
            "--rounds",
            str(rep.warmup + rep.max_runs + 1),
            "--samples",
            str(p["samples"]),
            "--warmup",
            str(p["warmup"]),
            "--pristine",
            str(p["pristine"]),
            "--variants",
            ",".join(VARIANTS),
        ]
        if trace_why:
            res = run_adaptive(run_args, rep, prog, ctx.phase)
            w.skip("tracepoint", trace_why)
            w.skip("timeline", trace_why)
            prog.step("KVM brackets (no tracing)")
            prog.step("timeline skipped")
        else:
            res = _traced(ctx, run_args, rep, prog, meta)
        w.add_table("bracket", res["samples"])
        w.add_table("repetition", pd.DataFrame(rep.records()))
        ops = res["ops"].copy()
        ops["readback_signed"] = ops["readback"].map(signed)
        w.add_table("kvm_ops", ops)
        meta.update({f"kvm_{k}": v for k, v in res["meta"].items() if k != "pid"})
    w.add_table(
        "tsc_facts",
        facts_table(
            facts["facts"], {k[4:]: v for k, v in meta.items() if k.startswith("kvm_")}, freq
        ),
    )
    nested = "hypervisor" in hostinfo.cpuinfo()["flags"]
    w.extra["tsc_alignment"] = {
        "kvm_vendor_modules": kvm_vendor_modules(),
        "nested": nested,
        "cpus": cpus,
        "duration_s": round(time.monotonic() - t_start, 1),
        **meta,
    }
    w.notes.append(
        "guest code: real mode, RDTSC -> store EDX:EAX at 0x2000 -> OUT 0x10; "
        "one I/O exit per reading; host brackets are LFENCE;RDTSC;LFENCE"
    )
    if nested:
        w.notes.append(
            "this host is itself a virtual machine: the 'host' TSC is the L1 "
            "guest's TSC and the test VM is nested"
        )


def _traced(ctx, run_args, rep, prog, meta) -> dict:
    """The brackets with kvm_write_tsc_offset traced, then the short timeline run, in a
    private ftrace instance (x86-tsc clock) that the with-block removes on every exit path
    before this returns (a signal's KeyboardInterrupt included)."""
    w, cpus = ctx.writer, ctx.p["cpus"]
    tl_args = [
        "run",
        "--cpus",
        str(cpus[-1]),
        "--rounds",
        "1",
        "--samples",
        str(ctx.p["timeline_samples"]),
        "--warmup",
        "3",
        "--pristine",
        "0",
        "--variants",
        "attr",
    ]
    with ExitStack() as setup:
        setup.enter_context(ctx.phase("setup"))
        ts = setup.enter_context(TraceSession(tag="tsc_align", log=prog.note))
        ts.set_option("trace_clock", "x86-tsc")  # stamps are raw TSC
        ts.set_option("buffer_size_kb", "4096")
        ts.enable("kvm/kvm_write_tsc_offset")
        ts.set_option("tracing_on", "1")
        prog.note(
            "private ftrace instance ready (x86-tsc, kvm_write_tsc_offset); KVM brackets start"
        )
        res = run_adaptive(run_args, rep, prog, ctx.phase)
        tr = parse_trace(ts.file("trace").read_text(), int(res["meta"]["pid"]))
        events = tsc_offset_events(tr)
        prog.step("KVM brackets + kvm_write_tsc_offset")
        ts.clear()
        avail = [e for e in TIMELINE_EVENTS if ts.file(f"events/{e}/enable").exists()]
        for e in avail:
            if e != "kvm/kvm_write_tsc_offset":
                ts.enable(e)
        with ctx.phase("measured"):
            tl = parse_helper(run_helper(tl_args))
        tl_trace = parse_trace(ts.file("trace").read_text(), int(tl["meta"]["pid"]))
        stats = ts.buffer_stats()
        prog.step("timeline (host events + guest stamps)")
    w.add_table("timeline_events", tl_trace)
    w.add_table("timeline_samples", tl["samples"])
    w.add_table("timeline_ops", tl["ops"])
    w.add_table("tsc_offset_events", events)
    meta["timeline_events_enabled"] = avail
    meta["timeline_buffer_overrun"] = stats.get("overrun", 0)
    meta["trace_clock"] = "x86-tsc"
    return res


def facts_table(facts: dict, meta: dict, freq_df):
    """The tsc_facts table: key, value, source (the order of parse.fact_rank)."""
    hf = hostinfo.host_facts()
    cs = hf["clocksource"]
    flags = hostinfo.cpuinfo()["flags"]
    rows = [
        ("cpu_model", hf["cpu_model"], "/proc/cpuinfo"),
        ("virtualization", hf["virtualization"], "systemd-detect-virt"),
        ("clocksource_current", cs["current"], "sysfs clocksource0"),
        ("clocksources_available", " ".join(cs["available"]), "sysfs clocksource0"),
        ("kvm_vendor_modules", " ".join(kvm_vendor_modules()) or "none", "/sys/module"),
        ("cpu_flag_svm", int("svm" in flags), "/proc/cpuinfo"),
        ("cpu_flag_vmx", int("vmx" in flags), "/proc/cpuinfo"),
    ]
    for f in hostinfo.TSC_FLAGS + ("hypervisor",):
        rows.append((f"cpu_flag_{f}", int(f in flags), "/proc/cpuinfo"))
    for k, v in facts.items():
        rows.append((k, v, "cpuid (kvmtsc facts)"))
    for k in KVM_FACTS:
        if k in meta:
            rows.append((k, meta[k], "KVM ioctl"))
    for i, line in enumerate(_dmesg_tsc()):
        rows.append((f"dmesg_tsc_{i}", line, "dmesg"))
    if len(freq_df):
        khz = freq_df["cycles"] / freq_df["ns"] * 1e6
        rows.append(
            (
                "measured_tsc_khz_median",
                f"{khz.median():.0f}",
                "kvmtsc facts vs CLOCK_MONOTONIC_RAW",
            )
        )
    return pd.DataFrame(rows, columns=["key", "value", "source"])


def _dmesg_tsc() -> list[str]:
    try:
        r = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    out = []
    for line in r.stdout.splitlines():
        body = re.sub(r"^\[\s*[\d.]+\]\s*", "", line)
        if re.match(r"(tsc|clocksource): ", body) and (
            "MHz" in body or "Switched" in body or "unstable" in body or "calibrat" in body
        ):
            out.append(body)
    return out[:8]
