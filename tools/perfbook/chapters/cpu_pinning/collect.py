"""measure(ctx): the prefork harness, variant by variant, in shuffled interleaved rounds.

The only part of the chapter that touches the kernel: the debugfs mount and sched knobs
(SchedKnobs: inventory, writes, their undoing), a private ftrace instance with
sched:sched_migrate_task, and the harness's processes. Every change sits on ctx.undo, which
the framework unwinds on every exit path.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import random
import shutil
import subprocess
from pathlib import Path

import pandas as pd

from perfbook.analysis.repetition import (
    Repetition,
    interleave,
    repetition,
    repetition_settings,
)
from perfbook.core.errors import PerfbookError
from perfbook.core.proc import die_with_parent, kill_group
from perfbook.hoststate.knobs import KnobSession
from perfbook.hoststate.tracefs import TraceSession, write_knob
from perfbook.hoststate.tracefs import preflight as tracefs_preflight
from perfbook.probes import cbuild

from .analysis import derive
from .key_findings import FINDING_TRIALS
from .parse import (
    BASELINE,
    DEBUGFS,
    DISTURBED_PCT,
    HELPER,
    PERF_EVENTS,
    RATE_KEPT_UP,
    SEED_KNOBS,
    VARIANTS,
    cpu_deltas,
    l2_bytes,
    parse_migrations,
    parse_output,
    parse_perf,
    parse_sched_debug,
    thread_deltas,
)

ROLES = ("worker", "loadgen", "backend")


def too_disturbed(trials) -> str | None:
    """Why the run is doubtful, or None: when other processes took more than DISTURBED_PCT of a
    CPU in more than half of the trials, the comparisons would rest on too few trials (every
    summary leaves disturbed trials out), so the run is not published."""
    if trials is None or trials.empty:
        return "no trial completed"
    other = derive(trials)["other_cpu_pct"]
    bad = int((other > DISTURBED_PCT).sum())
    if bad > len(other) / 2:
        return (
            f"the machine was busy: other processes took more than {DISTURBED_PCT:.0f} % of a CPU "
            f"in {bad} of {len(other)} trials (median {other.median():.0f} %); rerun on a quieter machine"
        )
    return None


# -- the scheduler's debugfs knobs ------------------------------------------------------------
class SchedKnobs(KnobSession):
    """The scheduler's debugfs directory (perfbook.hoststate.knobs.KnobSession: debugfs mounted if it is
    not, every knob written put back when the session ends, and recorded so that the sweep
    restores it after a SIGKILL), with the inventory this chapter needs. `root` and `mount`
    exist for tests on a fake tree."""

    def __init__(self, root: Path = DEBUGFS, mount: bool = True, log=print):
        super().__init__(root, mount=mount, log=log)

    @property
    def sched(self) -> Path:
        return self.root / "sched"

    def set(self, name: str, value: str) -> None:
        super().set(Path("sched") / name, value)

    def restore(self, name: str) -> None:
        super().restore(Path("sched") / name)

    def available(self) -> bool:
        return self.sched.is_dir()

    def files(self) -> list[str]:
        if not self.available():
            return []
        return sorted(p.name for p in self.sched.iterdir() if p.is_file())

    def probe(self, name: str) -> dict:
        """Can this knob be read / opened for writing? (nothing is written)"""
        path = self.sched / name
        out = {
            "name": name,
            "exists": path.is_file(),
            "readable": False,
            "writable": False,
            "value": None,
            "error": None,
        }
        if not out["exists"]:
            return out
        try:
            out["value"] = path.read_text().strip()
            out["readable"] = True
        except OSError as e:
            out["error"] = f"read: {errno.errorcode.get(e.errno, e.errno)}"
        try:
            fd = os.open(path, os.O_WRONLY)
            os.close(fd)
            out["writable"] = True
        except OSError as e:
            w = f"open for writing: {errno.errorcode.get(e.errno, e.errno)}"
            out["error"] = f"{out['error']}; {w}" if out["error"] else w
        return out


def lockdown_hint() -> str | None:
    """'Lockdown: ...' from the kernel log, if the kernel said so (best effort)."""
    try:
        r = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [ln for ln in r.stdout.splitlines() if "Lockdown:" in ln and "debugfs" in ln]
    if not lines:
        return None
    return lines[-1].split("Lockdown:", 1)[1].split(":", 1)[-1].strip()


def knob_inventory(knobs: SchedKnobs) -> tuple[list[dict], dict]:
    """Which scheduler knobs exist here, and which the seed's kernel had."""
    rows = []
    debug_vals = {}
    if knobs.available() and (knobs.sched / "debug").is_file():
        try:
            debug_vals = parse_sched_debug((knobs.sched / "debug").read_text())
        except OSError:
            pass
    files = knobs.files()
    for name in files:
        if name == "debug":
            continue
        pr = knobs.probe(name)
        rows.append(
            {
                "knob": f"debugfs sched/{name}",
                "era": "now",
                "exists_here": True,
                "readable_here": pr["readable"],
                "writable_here": pr["writable"],
                "value_here": pr["value"],
                "error": pr["error"],
                "seed_value": None,
                "tuned_value": None,
            }
        )
    for old, info in SEED_KNOBS.items():
        proc = Path("/proc/sys/kernel") / old
        rows.append(
            {
                "knob": f"sysctl kernel.{old}",
                "era": "seed (procfs, until 5.12)",
                "exists_here": proc.exists(),
                "readable_here": None,
                "writable_here": None,
                "value_here": None,
                "error": None,
                "seed_value": info["seed_value"],
                "tuned_value": info["tuned_value"],
            }
        )
        mid = info["debugfs_5_13"]
        if mid not in files:
            rows.append(
                {
                    "knob": f"debugfs sched/{mid}",
                    "era": "5.13 to 6.5 (debugfs)",
                    "exists_here": False,
                    "readable_here": None,
                    "writable_here": None,
                    "value_here": None,
                    "error": None,
                    "seed_value": None,
                    "tuned_value": None,
                }
            )
    for k, v in sorted(debug_vals.items()):
        rows.append(
            {
                "knob": f"sched/debug {k}",
                "era": "now",
                "exists_here": True,
                "readable_here": True,
                "writable_here": False,
                "value_here": v,
                "error": None,
                "seed_value": None,
                "tuned_value": None,
            }
        )
    return rows, debug_vals


def debugfs_unusable(knobs: SchedKnobs, name: str, is_root: bool) -> str | None:
    """Why the debugfs knob sched/<name> can't be written here (None: it can)."""
    if not is_root:
        return f"not root: debugfs knob sched/{name} needs root"
    if not knobs.available():
        return "debugfs has no sched/ directory here (not mounted, or not mountable)"
    pr = knobs.probe(name)
    if not pr["exists"]:
        return f"this kernel has no debugfs knob sched/{name}"
    if not pr["writable"] or not pr["readable"]:
        hint = lockdown_hint()
        why = f"sched/{name} exists but can't be used even as root ({pr['error']})"
        if hint:
            why += f"; the kernel log says: Lockdown: {hint}"
        return why
    return None


# -- the run -------------------------------------------------------------------------------
def measure(ctx) -> None:
    p, w = ctx.p, ctx.writer
    # a private copy: a rebuild of build/bin/prefork during the run can't mix two binaries
    binary = ctx.scratch().path(HELPER)
    shutil.copy2(cbuild.binary(HELPER), binary)
    rng = random.Random(p["seed"])
    is_root = os.geteuid() == 0
    prog = ctx.progress(1)
    w.extra["harness"] = {
        "source": "tools/c/prefork.c",
        "cflags": cbuild.CFLAGS,
        "variants": {v: VARIANTS[v]["what"] for v in p["variants"]},
        "l2_bytes": l2_bytes(),
        "ws_bytes": p["ws_kib"] * 1024,
        "sha256": hashlib.sha256(binary.read_bytes()).hexdigest(),
    }
    knobs = ctx.undo.enter_context(SchedKnobs(mount=is_root, log=prog.note))
    rows, debug_vals = knob_inventory(knobs) if is_root else ([], {})
    w.extra["debugfs"] = {
        "mounted_by_us": knobs.mounted_by_us,
        "available": knobs.available(),
        "sched_debug": debug_vals,
    }
    if rows:
        w.add_table("knobs", pd.DataFrame(rows))
    else:
        w.skip("knobs", "not root: debugfs (/sys/kernel/debug/sched) needs root")
    variants = list(p["variants"])
    for v in list(variants):
        for name in VARIANTS[v].get("debugfs", {}):
            why = debugfs_unusable(knobs, name, is_root)
            if why:
                w.skip(v, why)
                variants.remove(v)
    perf_why = perf_problem()
    if perf_why:
        w.skip("cache_misses", perf_why)
    if not p["trace"]:
        trace_why = "disabled by the trace=False parameter"
    else:
        tr = tracefs_preflight(need_uprobes=False)
        trace_why = tr[0] if tr else None
    if trace_why:
        w.skip(
            "migrations_tracepoint",
            trace_why + "; migrations come from /proc/<pid>/sched se.nr_migrations only",
        )
    w.extra["variants_measured"] = variants
    session = None
    if not trace_why:
        session = ctx.undo.enter_context(TraceSession("pinning", log=prog.note))
        session.set_option("buffer_size_kb", "4096")
        try:
            write_knob(session.buffer / "events/sched/sched_migrate_task/filter", 'comm ~ "pf-*"')
        except OSError:
            pass
        session.enable("sched/sched_migrate_task")
    prog.note(
        "state changed: "
        + ("debugfs mounted, " if knobs.mounted_by_us else "")
        + ("ftrace instance" if session is not None else "no ftrace instance")
    )
    _rounds(w, p, binary, variants, rng, knobs, session, perf_why is None, prog, ctx.phase)


def _calibrate(binary, p, timeout, prog) -> tuple[float | None, list[float]]:
    """The fixed rate: a fraction of the baseline's best saturation throughput."""
    calib = []
    if "rate" not in p["loads"]:
        return None, calib
    for i in range(p["calib_runs"]):
        r = _trial(binary, p, BASELINE, "sat", None, p["seed"] + 10_000 + i, None, False, timeout)
        sc = r["scalars"]
        calib.append(sc["completed"] / (sc["window_ns"] / 1e9))
        prog.step(f"calibration {i + 1}/{p['calib_runs']}: {calib[-1]:.0f} req/s at saturation")
    # other load on the host can only lower a calibration run, so take the best one
    rate = round(p["rate_fraction"] * max(calib), 1)
    prog.note(
        f"fixed rate: {rate:.0f} req/s ({p['rate_fraction']:.0%} of the best "
        "baseline saturation throughput)"
    )
    return rate, calib


def split_trials(p: dict, variants) -> tuple[dict, dict]:
    """({load: variants run in every round}, {load: variants run in the first context_rounds
    rounds only}). Every round runs the trials a key finding reads (key_findings.FINDING_TRIALS:
    unpinned, pinned and batch at the fixed rate); the others, which only the tables and figures
    show, run in the first p["context_rounds"] rounds (None: every trial in every round). With
    none of the findings' trials among the parameters every trial runs in every round."""
    every = {ld: [v for v in variants] for ld in p["loads"]}
    if p.get("context_rounds") is None or not any(
        (ld, v) in FINDING_TRIALS for ld in p["loads"] for v in variants
    ):
        return every, {}
    core = {ld: [v for v in vs if (ld, v) in FINDING_TRIALS] for ld, vs in every.items()}
    rest = {ld: [v for v in vs if (ld, v) not in FINDING_TRIALS] for ld, vs in every.items()}
    return {ld: v for ld, v in core.items() if v}, {ld: v for ld, v in rest.items() if v}


CONTEXT = " (first rounds)"  # the suffix of a context experiment's name while it runs


def _repetitions(p: dict, variants) -> dict:
    """{name: Repetition}: one experiment per load over the variants it runs in every round,
    and one per load over its context variants (split_trials), fixed at context_rounds rounds.
    Both of a load are recorded under the load's name (the repetition table's experiment)."""
    core, context = split_trials(p, variants)
    reps = {ld: repetition(ld, vs, p, "rep_") for ld, vs in core.items()}
    if context:
        n = p["context_rounds"]
        kw = {**repetition_settings(p, "rep_"), "min_runs": n, "max_runs": n}
        reps.update(
            {ld + CONTEXT: Repetition(ld + CONTEXT, vs, **kw) for ld, vs in context.items()}
        )
    return reps


def _rounds(w, p, binary, variants, rng, knobs, session, use_perf, prog, phase=None) -> None:
    phase = phase or (lambda kind: contextlib.nullcontext())
    timeout = 60 + 3 * (p["warmup_ms"] + p["duration_ms"]) / 1000
    marker = session.file("trace_marker") if session is not None else None
    out = {"trials": [], "tasks": [], "cores": [], "latency_hist": [], "migrations": []}
    prog.total = max(p["calib_runs"] * ("rate" in p["loads"]) + len(variants) * len(p["loads"]), 1)
    with phase("setup"):
        rate, calib = _calibrate(binary, p, timeout, prog)
    w.extra["calibration"] = {
        "saturation_req_s": calib,
        "rate_req_s": rate,
        "rate_fraction": p["rate_fraction"],
    }
    reps = _repetitions(p, variants)
    core, context = split_trials(p, variants)
    w.extra["trials_per_round"] = {
        "every_round": [f"{v}/{ld}" for ld, vs in core.items() for v in vs],
        "first_rounds_only": [f"{v}/{ld}" for ld, vs in context.items() for v in vs],
        "context_rounds": p.get("context_rounds"),
    }
    warm = []
    for rounds in interleave(reps.values()):
        # every experiment still running gets the same round number; warm-up rounds are negative
        rd = next(iter(rounds.values()))
        rnd = rd.index - p["rep_warmup"]
        if rd.index:
            prog.note("; ".join(f"{e}: {reps[e].status()}" for e in rounds))
        order = [(v, e) for e in rounds for v in reps[e].keys]
        rng.shuffle(order)
        prog.expect(len(order))
        with phase("warmup" if rd.warmup else "measured"):
            for pos, (variant, exp) in enumerate(order):
                load = exp.removesuffix(CONTEXT)
                if session is not None:
                    session.clear()
                for name, value in VARIANTS[variant].get("debugfs", {}).items():
                    knobs.set(name, value)
                try:
                    r = _trial(
                        binary,
                        p,
                        variant,
                        load,
                        rate,
                        p["seed"] + rd.index,
                        marker,
                        use_perf,
                        timeout,
                    )
                finally:
                    for name in VARIANTS[variant].get("debugfs", {}):
                        knobs.restore(name)
                key = {"round": rnd, "position": pos, "variant": variant, "load": load}
                sc = r["scalars"]
                td = thread_deltas(r["threads"])
                reps[exp].add(
                    variant,
                    sum(t["exec_ns"] for t in td if t["role"] == "worker")
                    / max(sc["completed"], 1)
                    / 1e3,
                )
                if rounds[exp].warmup:  # counted by the Repetition, kept apart from the data
                    warm.append(
                        {**key, "completed": sc["completed"], "window_s": sc["window_ns"] / 1e9}
                    )
                    prog.step(f"warm-up round {variant} {load}")
                    continue
                _record(out, key, r, td, variant, load, rate, session)
                prog.step(
                    f"round {rnd + 1} {variant} {load}: "
                    f"{sc['completed'] / (sc['window_ns'] / 1e9):.0f} req/s, "
                    f"p99 {sc['lat_p99_ns'] / 1e3:.0f} us"
                )
    prog.note(
        "repetition stopped: "
        + "; ".join(f"{e} by {r.stopped_by} ({r.status()})" for e, r in reps.items())
    )
    tdf = pd.DataFrame(out["trials"])
    w.add_table("trials", tdf)
    reason = too_disturbed(tdf)
    if reason:
        w.reject(reason)
    recs = [
        {**r, "experiment": r["experiment"].removesuffix(CONTEXT)}
        for rp in reps.values()
        for r in rp.records()
    ]
    w.add_table("repetition", pd.DataFrame(recs))
    if warm:
        w.add_table("warmup_trials", pd.DataFrame(warm))
    for name in ("tasks", "cores", "latency_hist"):
        w.add_table(name, pd.DataFrame(out[name]))
    if session is not None:
        w.add_table(
            "migrations",
            pd.DataFrame(
                out["migrations"],
                columns=[
                    "round",
                    "position",
                    "variant",
                    "load",
                    "t_s",
                    "pid",
                    "role",
                    "orig_cpu",
                    "dest_cpu",
                ],
            ),
        )
    _notes(w, p, tdf, session)


def _record(out, key, r, td, variant, load, rate, session) -> None:
    """One measured trial's rows: trials, tasks, cores, latency_hist and migrations."""
    sc = r["scalars"]
    cd = cpu_deltas(r["cpus"])
    # a fixed-rate trial that served under RATE_KEPT_UP of the offered requests ran at
    # saturation instead: recorded, and left out of the fixed-rate comparisons
    row = {
        **key,
        "offered_rate": rate if load == "rate" else None,
        "rate_saturated": bool(
            load == "rate" and sc["completed"] < RATE_KEPT_UP * rate * sc["window_ns"] / 1e9
        ),
        "window_s": sc["window_ns"] / 1e9,
        "completed": sc["completed"],
        "issued": sc["issued"],
        "queue_max": sc["queue_max"],
        "dropped": sc["dropped"],
        "lat_n": sc["lat_n"],
        "lat_mean_ns": sc["lat_mean_ns"],
        **{
            k: sc[k]
            for k in ("lat_p50_ns", "lat_p90_ns", "lat_p99_ns", "lat_p999_ns", "lat_max_ns")
        },
    }
    for role in ROLES:
        sel = [t for t in td if t["role"] == role]
        for f in ("exec_ns", "migrations", "nvcsw", "nivcsw"):
            row[f"{role}_{f}"] = sum(t[f] for t in sel)
    row["busy_ticks"] = sum(c["total_ticks"] - c["idle"] - c["iowait"] for c in cd)
    row["total_ticks"] = sum(c["total_ticks"] for c in cd)
    row["steal_ticks"] = sum(c["steal"] for c in cd)
    row["clk_tck"] = os.sysconf("SC_CLK_TCK")
    v = VARIANTS[variant]
    want_policy = 3 if v.get("policy") == "batch" else 0
    want_slice = v.get("slice_ns")
    wk = [t for t in td if t["role"] == "worker"]
    row["policy_ok"] = all(t["policy"] == want_policy for t in wk)
    row["slice_ok"] = all(t["slice_ns"] == want_slice for t in wk) if want_slice else True
    row["worker_slice_ns"] = wk[0]["slice_ns"] if wk else None
    if session is not None:
        mg = parse_migrations(
            session.file("trace").read_text(errors="replace"), {t["pid"]: t["role"] for t in td}
        )
        row["trace_markers"] = mg["markers"]
        row["trace_window_s"] = mg["window_s"]
        row["trace_overrun"] = session.buffer_stats().get("overrun", 0)
        for role in ROLES:
            row[f"{role}_migrations_trace"] = mg["by_role"].get(role, 0)
        out["migrations"] += [
            {**key, "t_s": ts, "pid": pid, "role": role, "orig_cpu": o, "dest_cpu": d}
            for ts, pid, role, o, d in mg["events"]
        ]
    for ev, val in (r.get("perf") or {}).items():
        row[f"perf_{ev.replace('-', '_')}"] = val
    out["trials"].append(row)
    out["tasks"] += [{**key, **t} for t in td]
    out["cores"] += [{**key, **c} for c in cd]
    out["latency_hist"] += [{**key, **h} for h in r["hist"]]


def _notes(w, p, tdf, session) -> None:
    """What the manifest says about doubtful trials."""
    bad = tdf[~(tdf.policy_ok & tdf.slice_ok)]
    if len(bad):
        w.notes.append(
            f"{len(bad)} trial(s) where a worker's policy or slice differed from the "
            f"variant's request (first: variant {bad.iloc[0]['variant']}, "
            f"load {bad.iloc[0]['load']})"
        )
    if session is not None and (tdf.get("trace_markers", pd.Series([2])) != 2).any():
        w.notes.append(
            "some trials lack one of the two trace markers; their tracepoint "
            "migration counts are incomplete"
        )
    if session is not None and tdf.get("trace_overrun", pd.Series([0])).sum() > 0:
        w.notes.append(
            "the ftrace buffer overran in some trials; tracepoint counts are lower bounds"
        )
    if "rate" in p["loads"]:
        short = tdf[tdf.rate_saturated]
        if len(short):
            w.notes.append(
                f"{len(short)} fixed-rate trial(s) completed under "
                f"{RATE_KEPT_UP:.0%} of the offered requests (variants: "
                f"{', '.join(sorted(set(short.variant)))}): they ran saturated, not at the "
                "fixed rate, and are left out of the fixed-rate comparisons"
            )


# ----------------------------------------------------------------- harness --
def harness_cmd(
    binary: Path,
    p: dict,
    variant: str,
    load: str,
    rate: float | None,
    seed: int,
    marker: Path | None = None,
) -> list[str]:
    v = VARIANTS[variant]
    cmd = [
        str(binary),
        "--mode",
        load,
        "--workers",
        str(p["workers"]),
        "--pin",
        str(v.get("pin", 0)),
        "--policy",
        v.get("policy", "normal"),
        "--slice-ns",
        str(v.get("slice_ns", 0)),
        "--all-tasks",
        str(v.get("all_tasks", 0)),
        "--ws-bytes",
        str(p["ws_kib"] * 1024),
        "--lookups",
        str(p["lookups"]),
        "--warmup-ms",
        str(p["warmup_ms"]),
        "--duration-ms",
        str(p["duration_ms"]),
        "--seed",
        str(seed),
    ]
    if load == "rate":
        cmd += ["--rate", f"{rate:.3f}"]
    if marker is not None:
        cmd += ["--marker", str(marker)]
    return cmd


def _trial(binary, p, variant, load, rate, seed, marker, use_perf, timeout) -> dict:
    cmd = harness_cmd(binary, p, variant, load, rate, seed, marker)
    if use_perf:
        cmd = [
            "perf",
            "stat",
            "-x",
            ",",
            "-e",
            ",".join(PERF_EVENTS),
            "-D",
            str(p["warmup_ms"]),
            "--",
            *cmd,
        ]
    r = _run(cmd, timeout)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
        raise PerfbookError(f"prefork ({variant}, {load}) failed: {last}")
    out = parse_output(r.stdout)
    if use_perf:
        out["perf"] = parse_perf(r.stderr)
    return out


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run the harness in its own process group (dying with us); the whole group is killed
    on any exit path."""
    p = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(p)
        raise PerfbookError(f"prefork did not finish within {timeout:.0f} s") from None
    finally:
        kill_group(p)
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def perf_problem() -> str | None:
    """Why cache misses can't be counted here (None: they can)."""
    if not shutil.which("perf"):
        return "perf is not installed (apt-get install linux-perf)"
    r = subprocess.run(
        ["perf", "stat", "-x", ",", "-e", ",".join(PERF_EVENTS), "true"],
        capture_output=True,
        text=True,
    )
    bad = [
        ln.split(",")[2]
        for ln in r.stderr.splitlines()
        if ln.count(",") >= 2 and ln.split(",")[0].strip() in ("<not supported>", "<not counted>")
    ]
    if r.returncode != 0 or bad:
        pmus = sorted(p.name for p in Path("/sys/bus/event_source/devices").glob("*"))
        what = ", ".join(bad) or (r.stderr.strip().splitlines() or ["perf stat failed"])[-1]
        return (
            f"perf stat reports {what} as <not supported>: this (virtual) machine exposes "
            f"no hardware PMU (event sources here: {', '.join(pmus) or 'none'})"
        )
    return None
