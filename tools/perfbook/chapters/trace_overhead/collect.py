"""trace_overhead: the measurement (the only part of the chapter that touches the host).

The C harness tools/c/probench.c calls a target in timed batches; this module arms the
mechanism around it (a write to a private instance's trace_marker, a uprobe or uretprobe
defined through uprobe_events, a uprobe counted by perf, a BPF program on a uprobe via
bpftrace), checks that every call really hit the tracer, and disarms it again. Rounds
interleave the mechanisms in pairs of mirrored orders (round_order: a shuffled order, then the
same order reversed), so that neither drift nor a run's neighbours favour one of them, and
repeat adaptively (perfbook.analysis.repetition.Repetition) until every mechanism's median is tight
enough or the time budget is spent; the `repetition` table records which rule stopped them.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import time
from contextlib import nullcontext
from pathlib import Path

import pandas as pd

from perfbook.analysis.repetition import repetition
from perfbook.core.errors import PerfbookError
from perfbook.core.proc import kill_group, run_group
from perfbook.hoststate import bpftrace
from perfbook.hoststate.tracefs import TraceSession
from perfbook.probes import cbuild, elfsym

from .parse import (
    BASELINE_MAX_NS,
    EXPERIMENT,
    KERNEL_FEATURES,
    MECHANISMS,
    parse_harness,
    perf_count,
)


def _optional_tools() -> dict[str, str]:
    """Mechanisms that need a tool this host lacks -> reason."""
    missing = {}
    if not shutil.which("perf"):
        missing["perf_stat"] = "perf is not installed (apt-get install linux-perf)"
    if not shutil.which("bpftrace"):
        missing["bpf_uprobe"] = "bpftrace is not installed (apt-get install bpftrace)"
    return missing


def kernel_features() -> dict[str, bool]:
    names = set()
    try:
        with open("/proc/kallsyms") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[2] in KERNEL_FEATURES:
                    names.add(parts[2])
    except OSError:
        pass
    return {k: (k in names) for k in KERNEL_FEATURES}


def round_order(mechs: list[str], rng: random.Random, k: int, previous: list[str] | None):
    """The order of the mechanisms in round k (measured rounds from 0; a warm-up round has
    k < 0): an even round a fresh shuffle, an odd one the previous round reversed (#40).

    Independent shuffles balance positions only on average: in 7 rounds one mechanism can run
    before another in 6 of them, or near the end of most rounds, so that drift or a neighbour's
    teardown (bpftrace detaching its uprobe) falls on it. In a mirrored pair every mechanism's
    two positions add up to n - 1 and every two mechanisms run once in each order; the shuffle
    of the next pair keeps neighbours from being the same in every round."""
    if k < 0 or k % 2 == 0 or previous is None:
        order = mechs[:]
        rng.shuffle(order)
        return order
    return previous[::-1]


class _Runner:
    def __init__(self, p: dict, session: TraceSession, binary: Path, log, phase=None):
        self.p, self.s, self.bin, self.log = p, session, binary, log
        self.phase = phase or (lambda kind: nullcontext())
        self.timed = "measured"  # the kind of a harness run: "warmup" in a warm-up round
        # read the ELF once, not before every run
        self.offsets = {
            sym: elfsym.file_offset(binary, sym) for sym in ("pb_ret", "pb_push", "pb_nop5")
        }

    def harness_cmd(self, target: str, marker: Path | None = None) -> list[str]:
        p = self.p
        cmd = [
            str(self.bin),
            "--target",
            target,
            "--iters",
            str(p["iterations"]),
            "--batches",
            str(p["batches"]),
            "--warmup",
            str(p["warmup"]),
            "--cpu",
            str(p["pin_cpu"]),
        ]
        if marker is not None:
            cmd += ["--marker", str(marker)]
        return cmd

    @property
    def calls(self) -> int:
        return self.p["iterations"] * (self.p["batches"] + self.p["warmup"])

    def run(self, mech: str):
        """Run one mechanism once: (samples frame, timer_ns, observed hits)."""
        spec = MECHANISMS[mech]
        if spec.get("tool") == "bpftrace":
            return self._run_bpftrace(spec)
        marker = self.s.file(spec["file"]) if "file" in spec else None
        probe = None
        with self.phase("setup"):
            if "probe" in spec:
                probe = self.s.add_uprobe(
                    f"{mech}", self.bin, self.offsets[spec["probe"]], ret=spec.get("ret", False)
                )
                if spec.get("tool") != "perf":
                    self.s.enable(probe)
            self.s.clear()
        try:
            cmd = self.harness_cmd(spec["target"], marker)
            if spec.get("tool") == "perf":
                cmd = ["perf", "stat", "-x", ",", "-e", probe.replace("/", ":"), "--", *cmd]
            with self.phase(self.timed):
                r = run_group(cmd)
            if r.returncode != 0:
                raise PerfbookError(
                    f"probench ({mech}) failed: {r.stderr.strip().splitlines()[-1:]}"
                )
            df, timer = parse_harness(r.stdout)
            if spec.get("tool") == "perf":
                hits = perf_count(r.stderr)
            elif probe is not None:
                hits = self.s.uprobe_hits().get(probe, 0)
            elif marker is not None:
                st = self.s.buffer_stats()
                hits = st.get("entries", 0) + st.get("overrun", 0)
            else:
                hits = None
        finally:
            if probe is not None:
                self.s.remove_uprobe(probe)
        return df, timer, hits

    def _run_bpftrace(self, spec):
        with self.phase("setup"):  # bpftrace compiles and attaches its program: ~1.5 s
            bt = bpftrace.start(f"uprobe:{self.bin}:pb_ret {{ @hits = count(); }}", self.log)
        try:
            with self.phase("setup"):
                time.sleep(0.3)  # the probe is live once bpftrace printed "Attaching"; settle
            self.log("timing the harness under bpftrace")
            with self.phase(self.timed):
                r = run_group(self.harness_cmd(spec["target"]))
            if r.returncode != 0:
                raise PerfbookError(f"probench (bpf_uprobe) failed: {r.stderr.strip()}")
            df, timer = parse_harness(r.stdout)
        except BaseException:  # a failure or a signal: never an orphan attached to our harness
            kill_group(bt)
            raise
        with self.phase("setup"):
            rest = bpftrace.stop(bt, self.log)  # its count of hits, as it exits
        m = re.search(r"@hits:\s*(\d+)", rest)
        return df, timer, int(m.group(1)) if m else None


def foreign_attachments(binary: Path, root: Path | None = None) -> list[str]:
    """Other tracers on our harness: processes whose command line names it (bpftrace,
    perf, another run's probe tool) and uprobe definitions on it outside our group."""
    found, me = [], os.getpid()
    for cmd in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            pid = int(cmd.parent.name)
            args = cmd.read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if pid != me and args and any(str(binary).encode() in a for a in args[1:]):
            found.append(f"pid {pid} ({b' '.join(args).decode(errors='replace')[:60]})")
    if root is not None and (root / "uprobe_events").exists():
        for line in (root / "uprobe_events").read_text().splitlines():
            if str(binary) in line and not line[2:].startswith(f"perfbook_{me}/"):
                found.append(f"uprobe {line.split()[0]}")
    return found


def measure(ctx) -> None:
    """Measure this host into ctx.writer (the framework publishes it)."""
    p, w = ctx.p, ctx.writer
    with ctx.phase("setup"):
        binary = cbuild.binary("probench")
    missing = _optional_tools()
    mechs = [m for m in p["mechanisms"] if m not in missing]
    rng = random.Random(p["seed"])
    for m in p["mechanisms"]:
        if m in missing:
            w.skip(m, missing[m])
    w.extra["kernel_features"] = kernel_features()
    w.extra["harness"] = {
        "source": "tools/c/probench.c",
        "cflags": cbuild.CFLAGS,
        "targets": {m: MECHANISMS[m]["what"] for m in mechs},
    }
    w.extra["_tool_cmds"] = {"bpftrace": ["bpftrace", "--version"]}
    w.extra["symbols"] = {
        sym: {k: v for k, v in vars(elfsym.locate(binary, sym)).items() if k != "path"}
        for sym in ("pb_ret", "pb_push", "pb_nop5")
    }
    samples, checks = [], []
    rep = repetition(EXPERIMENT, mechs, p, "rep_")
    prog = ctx.progress((rep.warmup + rep.min_runs) * len(mechs))
    with ctx.phase("setup"):
        s = ctx.undo.enter_context(TraceSession("probench"))
        other = foreign_attachments(binary.resolve(), s.root)
        if other:
            raise PerfbookError(
                f"another tracer is attached to {binary}: {', '.join(other)}; "
                "stop it (or run `make sweep`) and measure again"
            )
        s.set_option("buffer_size_kb", "1024")
        runner = _Runner(p, s, binary, prog.note, ctx.phase)
        w.extra["perf_probe_check"] = _perf_probe_check(binary, s) if "perf_stat" in mechs else None
    order = None
    for rd in rep.rounds():
        if rd.index:
            prog.note(f"after {rd.index} round(s): {rep.status()}")
        if rd.index >= rep.warmup + rep.min_runs:  # a round beyond the planned ones
            prog.total += len(mechs)
        rnd = rd.index - rep.warmup  # measured rounds are numbered from 0
        label = (
            f"warm-up round {rd.index + 1}/{rep.warmup}"
            if rd.warmup
            else f"round {rnd + 1} (at most {rep.max_runs})"
        )
        order = round_order(mechs, rng, rnd, order)
        runner.timed = "warmup" if rd.warmup else "measured"
        for pos, m in enumerate(order):
            df, timer, hits = runner.run(m)
            rep.add(m, (df["ns"] / df["iters"]).median())
            if not rd.warmup:
                df.insert(0, "mechanism", m)
                df.insert(0, "position", pos)
                df.insert(0, "round", rnd)
                df["timer_ns"] = timer
                samples.append(df)
                checks.append(
                    {
                        "round": rnd,
                        "mechanism": m,
                        "expected_hits": runner.calls if m not in ("none", "syscall") else None,
                        "observed_hits": hits,
                    }
                )
            prog.step(f"{label} {m}")
    prog.total -= max(0, rep.warmup + rep.min_runs - rep.rounds_done) * len(mechs)
    prog.note(f"stopped by {rep.stopped_by}: {rep.status()}")
    w.add_table("repetition", pd.DataFrame(rep.records()))
    table = pd.concat(samples, ignore_index=True)
    table["ns_per_call"] = table["ns"] / table["iters"]
    w.add_table("samples", table)
    w.add_table(
        "checks",
        pd.DataFrame(checks, columns=["round", "mechanism", "expected_hits", "observed_hits"]),
    )
    _sanity(w, p, table, checks, missing)


def _sanity(w, p, table, checks, missing) -> None:
    """A doubtful run is rejected (not published)."""
    base = table.loc[table.mechanism == "none", "ns_per_call"].median()
    if base > BASELINE_MAX_NS:
        w.reject(
            f"the unprobed baseline costs {base:.0f} ns per call, far above a plain "
            f"function call (> {BASELINE_MAX_NS} ns): something is attached to the harness"
        )
    bad = [c for c in checks if c["expected_hits"] and c["observed_hits"] != c["expected_hits"]]
    if bad:
        w.reject(
            f"{len(bad)} run(s) where the tracer saw a different number of hits than calls "
            f"(first: {bad[0]})"
        )
    for m in p["mechanisms"]:
        if m not in missing and not (table.mechanism == m).any():
            w.reject(f"mechanism {m} was planned but has no samples")


def _perf_probe_check(binary: Path, s: TraceSession) -> dict:
    """Where does `perf probe` put a uprobe on each target, versus pyelftools?"""
    out = {}
    for sym in ("pb_ret", "pb_push", "pb_nop5"):
        ours = elfsym.file_offset(binary, sym)
        name = f"{s.group}:chk_{sym}"
        r = subprocess.run(
            ["perf", "probe", "-q", "-x", str(binary), "-a", f"{name}={sym}"],
            capture_output=True,
            text=True,
        )
        perf_off = None
        if r.returncode == 0:
            s.adopt_probe(name.replace(":", "/"))
            for line in (s.root / "uprobe_events").read_text().splitlines():
                if line.split()[0].endswith(f"/chk_{sym}"):
                    perf_off = int(line.split(":")[-1], 16)
            s.remove_uprobe(name.replace(":", "/"))
        out[sym] = {
            "pyelftools": ours,
            "perf_probe": perf_off,
            "perf_error": r.stderr.strip()[-200:] if r.returncode else None,
        }
    return out
