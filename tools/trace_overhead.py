"""Chapter 'trace_overhead': what one user-space trace point costs.

The C harness tools/c/probench.c calls a target in timed batches; this module
arms the mechanism around it (a write to a private instance's trace_marker, a
uprobe or uretprobe defined through uprobe_events, a uprobe counted by perf, a
BPF program on a uprobe via bpftrace), checks that every call really hit the
tracer, and disarms it again. Rounds interleave the mechanisms in a shuffled
order so that drift does not favour one of them, and repeat adaptively
(tools.stats.Repetition) until every mechanism's median is tight enough or the
time budget is spent; the `repetition` table records which rule stopped them.
"""
from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import time
from io import StringIO
from pathlib import Path

from . import cbuild, elfsym
from .dataset import DatasetWriter
from .errors import ParameterError, PerfbookError
from .lock import measure_lock
from .progress import Progress
from .stats import repetition, repetition_settings
from .params import begin_collect, check_ints, choose_list, merge
from .proc import die_with_parent, kill_group, run_group
from .tracefs import TraceSession, preflight as tracefs_preflight

CHAPTER = "trace_overhead"
# A call of an empty function costs ~1.5 ns on this host and ~26 ns under TCG (committed
# data); a baseline above this means something else is attached to the harness.
BASELINE_MAX_NS = 200
TITLE = "Trace overhead: ftrace marker versus uprobes"

# mechanism -> what the harness calls, and what is armed around it
MECHANISMS: dict[str, dict] = {
    "none":        {"target": "ret", "what": "empty function, nothing armed (harness cost)"},
    "syscall":     {"target": "syscall", "what": "write(2) of 9 bytes to /dev/null"},
    "marker":      {"target": "marker", "file": "trace_marker",
                    "what": "write(2) of 9 bytes to trace_marker"},
    "marker_raw":  {"target": "marker_raw", "file": "trace_marker_raw",
                    "what": "write(2) of id + 4 bytes to trace_marker_raw"},
    "uprobe":      {"target": "ret", "probe": "pb_ret",
                    "what": "uprobe event on `ret` (single-stepped out of line)"},
    "uprobe_push": {"target": "push", "probe": "pb_push",
                    "what": "uprobe event on `push %rbp` (emulated)"},
    "uprobe_nop5": {"target": "nop5", "probe": "pb_nop5",
                    "what": "uprobe event on a 5-byte nop (optimizable)"},
    "uretprobe":   {"target": "ret", "probe": "pb_ret", "ret": True,
                    "what": "uretprobe event on pb_ret"},
    "perf_stat":   {"target": "ret", "probe": "pb_ret", "tool": "perf",
                    "what": "uprobe on `ret` counted by perf stat (no ftrace buffer)"},
    "bpf_uprobe":  {"target": "ret", "tool": "bpftrace",
                    "what": "bpftrace: BPF count() on a uprobe on `ret`"},
}
DEFAULT_MECHANISMS = tuple(MECHANISMS)

# Rounds repeat adaptively (tools.stats.Repetition): after rep_warmup rounds that are
# dropped, whole rounds of every mechanism run until each mechanism's median per-round
# cost has a 95 % CI narrower than rep_target (relative), or rep_budget_s runs out, or
# rep_max_runs rounds are in. `warmup` is the harness's untimed batches inside each run.
PROFILES = {
    "quick":   {"iterations": 2000, "batches": 3, "warmup": 1, "rep_target": 0.05,
                "rep_min_runs": 2, "rep_max_runs": 2, "rep_budget_s": 30.0, "rep_warmup": 0},
    "default": {"iterations": 20000, "batches": 10, "warmup": 2, "rep_target": 0.05,
                "rep_min_runs": 6, "rep_max_runs": 30, "rep_budget_s": 45.0, "rep_warmup": 1},
    "full":    {"iterations": 100000, "batches": 20, "warmup": 3, "rep_target": 0.02,
                "rep_min_runs": 10, "rep_max_runs": 100, "rep_budget_s": 600.0, "rep_warmup": 2},
}
# rounds: a fixed number of rounds (sets rep_min_runs = rep_max_runs), for callers that
# want the fixed repetition of the datasets measured before adaptive repetition
COMMON = {"mechanisms": None, "pin_cpu": "auto", "seed": 1, "rounds": None}
EXPERIMENT = "per-call cost"


def params(profile: str = "default", **overrides) -> dict:
    """Merge a profile with overrides and validate everything (ParameterError)."""
    p = merge(profile, PROFILES, COMMON, overrides)
    check_ints(p, {"iterations": 1, "batches": 1, "warmup": 0})
    if p["rounds"] is not None:
        check_ints(p, {"rounds": 1})
        p["rep_min_runs"] = p["rep_max_runs"] = p["rounds"]
    repetition_settings(p, "rep_")
    mechs = choose_list(p["mechanisms"], list(MECHANISMS), "mechanism", DEFAULT_MECHANISMS)
    if "none" not in mechs:
        mechs = ["none", *mechs]  # every comparison needs the baseline
    p["mechanisms"] = list(dict.fromkeys(mechs))
    cpu = p["pin_cpu"]
    ncpu = os.cpu_count() or 1
    if cpu == "auto":
        cpu = ncpu - 1
    if cpu is not None and (isinstance(cpu, bool) or not isinstance(cpu, int) or not -1 <= cpu < ncpu):
        raise ParameterError(f"pin_cpu must be 'auto', -1 (no pinning) or a CPU in 0..{ncpu - 1}, got {cpu!r}")
    p["pin_cpu"] = -1 if cpu is None else cpu
    return p


def preflight() -> list[str]:
    reasons = tracefs_preflight(need_uprobes=True)
    if not (shutil.which("cc") or shutil.which("gcc")):
        reasons.append("no C compiler to build the probench harness (apt-get install gcc)")
    return reasons


def _optional_tools() -> dict[str, str]:
    """Mechanisms that need a tool this host lacks -> reason."""
    missing = {}
    if not shutil.which("perf"):
        missing["perf_stat"] = "perf is not installed (apt-get install linux-perf)"
    if not shutil.which("bpftrace"):
        missing["bpf_uprobe"] = "bpftrace is not installed (apt-get install bpftrace)"
    return missing


# Kernel symbols whose presence tells which uprobe fast paths this kernel has.
KERNEL_FEATURES = {
    "push_emulate_op": "x86 uprobes emulate `push` instead of single-stepping it",
    "branch_emulate_op": "x86 uprobes emulate jumps/calls instead of single-stepping them",
    "__x64_sys_uretprobe": "uretprobe syscall: return probes return via a syscall, not a trap",
    "__x64_sys_uprobe": "uprobe syscall: optimized uprobes enter via a syscall, not int3",
    "arch_uprobe_optimize": "uprobes on a 5-byte nop can be rewritten into a call",
}


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


def parse_harness(text: str):
    """probench stdout -> (DataFrame[batch, iters, ns], timer_ns)."""
    import pandas as pd
    m = re.search(r"timer_ns=(\d+)", text)
    if not m:
        raise PerfbookError("probench output has no header line")
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    return pd.read_csv(StringIO(body)), int(m.group(1))


class _Runner:
    def __init__(self, p: dict, session: TraceSession, binary: Path, log):
        self.p, self.s, self.bin, self.log = p, session, binary, log
        # read the ELF once, not before every run
        self.offsets = {sym: elfsym.file_offset(binary, sym) for sym in ("pb_ret", "pb_push", "pb_nop5")}

    def harness_cmd(self, target: str, marker: Path | None = None) -> list[str]:
        p = self.p
        cmd = [str(self.bin), "--target", target, "--iters", str(p["iterations"]),
               "--batches", str(p["batches"]), "--warmup", str(p["warmup"]),
               "--cpu", str(p["pin_cpu"])]
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
        if "probe" in spec:
            probe = self.s.add_uprobe(f"{mech}", self.bin, self.offsets[spec["probe"]], ret=spec.get("ret", False))
            if spec.get("tool") != "perf":
                self.s.enable(probe)
        self.s.clear()
        try:
            cmd = self.harness_cmd(spec["target"], marker)
            if spec.get("tool") == "perf":
                cmd = ["perf", "stat", "-x", ",", "-e", probe.replace("/", ":"), "--", *cmd]
            r = run_group(cmd)
            if r.returncode != 0:
                raise PerfbookError(f"probench ({mech}) failed: {r.stderr.strip().splitlines()[-1:]}")
            df, timer = parse_harness(r.stdout)
            if spec.get("tool") == "perf":
                hits = _perf_count(r.stderr)
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
        prog = f"uprobe:{self.bin}:pb_ret {{ @hits = count(); }}"
        bt = subprocess.Popen(["bpftrace", "-e", prog], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True,
                              preexec_fn=die_with_parent)  # never an orphan attached to us
        out = []
        try:
            deadline = time.monotonic() + 60
            while True:
                line = bt.stdout.readline()
                if not line:
                    raise PerfbookError("bpftrace exited before attaching: " + " ".join(out)[-200:])
                out.append(line.strip())
                if line.startswith("Attaching"):
                    break
                if time.monotonic() > deadline:
                    raise PerfbookError("bpftrace did not attach within 60 s")
            time.sleep(0.3)  # the probe is live once bpftrace printed "Attaching"; settle
            r = run_group(self.harness_cmd(spec["target"]))
            if r.returncode != 0:
                raise PerfbookError(f"probench (bpf_uprobe) failed: {r.stderr.strip()}")
            df, timer = parse_harness(r.stdout)
            rest = None
            for attempt in range(12):  # bpftrace exits in ~0.2 s; a SIGINT is now and then lost
                bt.send_signal(signal.SIGINT)
                try:
                    rest, _ = bt.communicate(timeout=5)
                    break
                except subprocess.TimeoutExpired:
                    self.log(f"bpftrace has not exited {5 * (attempt + 1)} s after SIGINT; sending it again")
            if rest is None:
                raise PerfbookError("bpftrace did not print its count within 60 s of SIGINT, "
                                    "so the bpf_uprobe hits can't be checked")
            m = re.search(r"@hits:\s*(\d+)", rest)
            hits = int(m.group(1)) if m else None
            return df, timer, hits
        finally:
            kill_group(bt)


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


def _perf_count(stderr: str) -> int | None:
    for line in stderr.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[0].strip().isdigit() and ":" in parts[2]:
            return int(parts[0])
    return None


def collect(data_dir=None, profile: str = "default", **overrides) -> Path:
    """Measure this host; returns the new dataset's directory."""
    import pandas as pd
    p, data = begin_collect(params, preflight, profile, overrides, data_dir)
    binary = cbuild.binary("probench")
    missing = _optional_tools()
    mechs = [m for m in p["mechanisms"] if m not in missing]
    rng = random.Random(p["seed"])
    with measure_lock(CHAPTER), DatasetWriter(CHAPTER, data, {**p, "profile": profile}) as w:
        for m in p["mechanisms"]:
            if m in missing:
                w.skip(m, missing[m])
        w.extra["kernel_features"] = kernel_features()
        w.extra["harness"] = {"source": "tools/c/probench.c", "cflags": cbuild.CFLAGS,
                              "targets": {m: MECHANISMS[m]["what"] for m in mechs}}
        w.extra["_tool_cmds"] = {"bpftrace": ["bpftrace", "--version"]}
        w.extra["symbols"] = {sym: {k: v for k, v in vars(elfsym.locate(binary, sym)).items()
                                    if k != "path"} for sym in ("pb_ret", "pb_push", "pb_nop5")}
        samples, checks = [], []
        rep = repetition(EXPERIMENT, mechs, p, "rep_")
        prog = Progress(CHAPTER, (rep.warmup + rep.min_runs) * len(mechs))
        with TraceSession("probench") as s:
            other = foreign_attachments(binary.resolve(), s.root)
            if other:
                raise PerfbookError(f"another tracer is attached to {binary}: {', '.join(other)}; "
                                    "stop it (or run `make sweep`) and measure again")
            s.set_option("buffer_size_kb", "1024")
            runner = _Runner(p, s, binary, prog.note)
            w.extra["perf_probe_check"] = _perf_probe_check(binary, s) if "perf_stat" in mechs else None
            for rd in rep.rounds():
                if rd.index:
                    prog.note(f"after {rd.index} round(s): {rep.status()}")
                if rd.index >= rep.warmup + rep.min_runs:  # a round beyond the planned ones
                    prog.total += len(mechs)
                rnd = rd.index - rep.warmup  # measured rounds are numbered from 0
                label = (f"warm-up round {rd.index + 1}/{rep.warmup}" if rd.warmup
                         else f"round {rnd + 1} (at most {rep.max_runs})")
                order = mechs[:]
                rng.shuffle(order)
                for pos, m in enumerate(order):
                    df, timer, hits = runner.run(m)
                    rep.add(m, (df["ns"] / df["iters"]).median())
                    if not rd.warmup:
                        df.insert(0, "mechanism", m)
                        df.insert(0, "position", pos)
                        df.insert(0, "round", rnd)
                        df["timer_ns"] = timer
                        samples.append(df)
                        checks.append({"round": rnd, "mechanism": m, "expected_hits": runner.calls
                                       if m not in ("none", "syscall") else None, "observed_hits": hits})
                    prog.step(f"{label} {m}")
            prog.total -= max(0, rep.warmup + rep.min_runs - rep.rounds_done) * len(mechs)
            prog.note(f"stopped by {rep.stopped_by}: {rep.status()}")
        w.add_table("repetition", pd.DataFrame(rep.records()))
        table = pd.concat(samples, ignore_index=True)
        table["ns_per_call"] = table["ns"] / table["iters"]
        w.add_table("samples", table)
        w.add_table("checks", pd.DataFrame(checks))
        base = table.loc[table.mechanism == "none", "ns_per_call"].median()
        if base > BASELINE_MAX_NS:
            w.reject(f"the unprobed baseline costs {base:.0f} ns per call, far above a plain "
                     f"function call (> {BASELINE_MAX_NS} ns): something is attached to the harness")
        bad = [c for c in checks if c["expected_hits"] and c["observed_hits"] != c["expected_hits"]]
        if bad:
            w.reject(f"{len(bad)} run(s) where the tracer saw a different number of hits than calls "
                     f"(first: {bad[0]})")
        for m in p["mechanisms"]:
            if m not in missing and not (table.mechanism == m).any():
                w.reject(f"mechanism {m} was planned but has no samples")
    return w.published


def _perf_probe_check(binary: Path, s: TraceSession) -> dict:
    """Where does `perf probe` put a uprobe on each target, versus pyelftools?"""
    out = {}
    for sym in ("pb_ret", "pb_push", "pb_nop5"):
        ours = elfsym.file_offset(binary, sym)
        name = f"{s.group}:chk_{sym}"
        r = subprocess.run(["perf", "probe", "-q", "-x", str(binary), "-a", f"{name}={sym}"],
                           capture_output=True, text=True)
        perf_off = None
        if r.returncode == 0:
            s.adopt_probe(name.replace(":", "/"))
            for line in (s.root / "uprobe_events").read_text().splitlines():
                if line.split()[0].endswith(f"/chk_{sym}"):
                    perf_off = int(line.split(":")[-1], 16)
            s.remove_uprobe(name.replace(":", "/"))
        out[sym] = {"pyelftools": ours, "perf_probe": perf_off,
                    "perf_error": r.stderr.strip()[-200:] if r.returncode else None}
    return out


# ---------------------------------------------------------------- explain side
def summary_table(samples):
    """Per host and mechanism: median per-call ns with CI, percentiles, n."""
    from .stats import summarize_frame
    t = summarize_frame(samples, ["dataset", "mechanism"], "ns_per_call")
    return t


def round_cv(samples):
    """Coefficient of variation of the per-round medians, per host and mechanism."""
    from .stats import cv
    med = samples.groupby(["dataset", "mechanism", "round"])["ns_per_call"].median().reset_index()
    return (med.groupby(["dataset", "mechanism"])["ns_per_call"]
               .agg(rounds="count", cv=cv).reset_index())


def overhead_table(samples, baseline: str = "none"):
    """Per dataset: each mechanism's cost above the baseline, from all its batches.

    tools.stats.compare: the Hodges-Lehmann shift (ns per call) with its
    distribution-free 95 % CI, the Mann-Whitney p-value, Cliff's delta and a verdict
    that says "not significant" where it is not.
    """
    from .stats import compare_frame
    t = compare_frame(samples, by="mechanism", value="ns_per_call", baseline=baseline,
                      within="dataset")
    return t.rename(columns={"shift": "overhead_ns", "shift_low": "ci_low", "shift_high": "ci_high"})


def load(data_dir=None) -> dict:
    """Everything the chapter shows: samples, checks, manifests, the seed's figures."""
    from .dataset import load_manifests, load_reference, load_table
    samples = load_table(CHAPTER, "samples", data_dir)
    checks = load_table(CHAPTER, "checks", data_dir)
    rep = load_table(CHAPTER, "repetition", data_dir)
    for t in (samples, checks, rep):
        if not t.empty:
            t.insert(0, "dataset", t.host_id + "/" + t.run_id)
    return {
        "samples": samples,
        "checks": checks,
        "repetition": rep,
        "manifests": load_manifests(CHAPTER, data_dir),
        "reference": load_reference(CHAPTER, data_dir),
    }


def latest(manifests: list[dict]) -> dict | None:
    """The dataset the chapter's prose talks about: the newest one measured with the
    default or full profile (a quick run is a test), else the newest of all."""
    from .dataset import newest
    return newest(manifests)


def dataset_key(m: dict) -> str:
    """How a dataset is named in tables and plots: '<host id>/<run id>'."""
    return f"{m['host']['host_id']}/{m['run_id']}"


def host_labels(manifests: list[dict]) -> dict[str, str]:
    out = {}
    for m in sorted(manifests, key=lambda m: m["run_id"]):
        h = m["host"]
        out[dataset_key(m)] = f"{dataset_key(m)}: {h['description']}, Linux {h['kernel_release']}"
    return out


def comparison(summary, reference, manifests):
    """Seed vs our hosts, per mechanism, in microseconds per call (tidy)."""
    import pandas as pd
    ref = reference[reference.run == "uprobe-based event tracer"]
    rows = [{"source": f"seed 2013 ({r.seed_file[:3]}), Linux 3.x", "mechanism": r.mechanism,
             "per_call_us": r.per_call_us} for r in ref.itertuples()]
    st = reference[reference.mechanism == "systemtap"]
    rows += [{"source": f"seed 2013 ({r.seed_file[:3]}), Linux 3.x", "mechanism": "systemtap / BPF",
              "per_call_us": r.per_call_us} for r in st.itertuples()]
    labels = {dataset_key(m): f"{dataset_key(m)}, Linux {m['host']['kernel_release']}"
              for m in manifests}
    for r in summary.itertuples():
        mech = {"bpf_uprobe": "systemtap / BPF"}.get(r.mechanism, r.mechanism)
        if mech in ("none", "marker", "uprobe", "systemtap / BPF"):
            rows.append({"source": labels.get(r.dataset, r.dataset), "mechanism": mech,
                         "per_call_us": r.median / 1000})
    return pd.DataFrame(rows)


def plot_costs(summary, labels):
    """Median cost per call and its CI, per mechanism and host, log scale."""
    import matplotlib.pyplot as plt
    order = [m for m in MECHANISMS if m in set(summary.mechanism)]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(order) + 1.2))
    hosts = sorted(summary.dataset.unique())  # one row of points per dataset
    for i, h in enumerate(hosts):
        g = summary[summary.dataset == h].set_index("mechanism").reindex(order)
        y = [k + (i - (len(hosts) - 1) / 2) * 0.25 for k in range(len(order))]
        ax.errorbar(g["median"], y, xerr=[g["median"] - g.ci_low, g.ci_high - g["median"]],
                    fmt="o", capsize=3, label=labels.get(h, h))
        ax.scatter(g["p95"], y, marker="|", s=120, color="grey")
    ax.set_yticks(range(len(order)), order)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("ns per call (median, 95 % CI; grey tick: p95)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.4, -0.12 - 0.6 / len(order)), fontsize="small")
    fig.tight_layout()
    return fig


def plot_comparison(comp):
    import seaborn as sns
    g = sns.catplot(data=comp, kind="bar", x="mechanism", y="per_call_us", hue="source",
                    order=["marker", "uprobe", "systemtap / BPF"], height=4, aspect=1.9)
    g.set_axis_labels("", "µs per trace point")
    sns.move_legend(g, "upper center", bbox_to_anchor=(0.45, 0.0), frameon=False, fontsize="small",
                    ncol=1, title=None)
    return g


STEPS = [
    ("marker_buffer", "ring-buffer write of a marker", "marker - syscall"),
    ("syscall_entry", "system call of a 9-byte write", "syscall - none"),
    ("trap_emulate", "int3 trap + emulated push + event", "uprobe_push - none"),
    ("sstep", "single step out of line (vs emulation)", "uprobe - uprobe_push"),
    ("optimized", "optimized probe on nop5 (uprobe syscall)", "uprobe_nop5 - none"),
    ("ret", "return probe on top of the entry probe", "uretprobe - uprobe"),
    ("consumer_perf", "perf counting instead of an ftrace record", "perf_stat - uprobe"),
    ("consumer_bpf", "BPF count() instead of an ftrace record", "bpf_uprobe - uprobe"),
]


def decompose(samples):
    """Differences between mechanisms that isolate one step each (ns per call).

    `samples` are one dataset's batches. Each step is compared with tools.stats.compare
    (Hodges-Lehmann shift with its 95 % CI, Mann-Whitney p); the verdict says "not
    significant" where the two mechanisms can't be told apart.
    """
    import math
    import pandas as pd
    from .stats import compare
    by = {m: g["ns_per_call"].to_numpy() for m, g in samples.groupby("mechanism")}
    rows = []
    for key, step, expr in STEPS:
        a, b = (x.strip() for x in expr.split("-"))
        row = {"key": key, "step": step, "computed as": expr, "ns": math.nan,
               "ci_low": math.nan, "ci_high": math.nan, "p_value": math.nan, "verdict": "not measured"}
        if a in by and b in by and len(by[a]) > 1 and len(by[b]) > 1:
            c = compare(by[a], by[b], names=(a, b))
            row.update(ns=c.shift, ci_low=c.shift_low, ci_high=c.shift_high, p_value=c.p_value,
                       verdict="not significant" if not c.significant else
                       f"significant, {c.magnitude} effect")
        rows.append(row)
    return pd.DataFrame(rows)


def host_comparison(samples, manifests, mechanisms=("marker", "uprobe")):
    """Each other host's newest dataset against the host the prose quotes (latest()),
    per mechanism, with tools.stats.compare."""
    import pandas as pd
    from .dataset import only_shown, shown_datasets
    from .stats import compare_frame
    if len(shown_datasets(manifests)) < 2:
        return pd.DataFrame()
    ref = latest(manifests)
    sel = only_shown(samples, manifests)
    sel = sel[sel.mechanism.isin(mechanisms)]
    return compare_frame(sel, by="host_id", value="ns_per_call", baseline=ref["host"]["host_id"],
                         within="mechanism")


def caption_for(samples, manifests, what: str, ci: bool = True, extra: str = "") -> str:
    """A figure caption from the data shown: batches per group, excluded warm-up, hosts."""
    from .stats import caption, hosts_of
    n = samples.groupby(["dataset", "mechanism"]).size()
    excluded = []
    for m in manifests:
        q = m["parameters"]
        rounds = samples.loc[samples.dataset == dataset_key(m), "round"].nunique()
        wr = q.get("rep_warmup", 0)
        # untimed batches of every run, and whole warm-up rounds (timed, then dropped)
        excluded.append((rounds + wr) * q["warmup"] + wr * q["batches"])
    return caption(what, n=n.to_numpy(), unit="batches", warmup=excluded,
                   hosts=hosts_of(manifests), ci=ci, extra=extra)


from .dataset import skipped_table as not_measured  # noqa: E402  (the chapter's name for it)
