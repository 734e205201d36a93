"""Chapter 'cpu_pinning': pinning prefork workers, and the scheduler tunables of this kernel.

The seed (004_b02ec4e7a2b12836.txt, "FreakOut DSP 入札サーバの CPU 使用率を 30% 削減する
Performance Tuning", 2015) pinned the workers of a prefork, CPU-bound bidding server
to cores with sched_setaffinity() and raised sched_min_granularity_ns and
sched_wakeup_granularity_ns with tuned's throughput-performance profile.

Here tools/c/prefork.c is the server: N forked workers doing a pointer chase through
a private table sized against this CPU's L2, with one loopback UDP round trip per
request, driven over loopback TCP by a load generator at saturation and at a fixed
rate. collect() runs the variants interleaved (shuffled order in every round):

  unpinned       the default
  pinned         worker i pinned to CPU i mod NCPU (sched_setaffinity)
  slice_10ms     EEVDF request size 10 ms for every task of the experiment,
                 per task through sched_setattr(sched_runtime)
  batch          SCHED_BATCH for every task of the experiment (a woken batch task
                 never preempts the running one)
  pinned_tuned   pinned + slice_10ms + batch together (the seed's two tunings at once)
  base_slice_10ms  the global debugfs knob sched/base_slice_ns = 10 ms, written
                 before and restored after each of its trials, where writable

Per trial it records throughput, CPU time per request (/proc/<pid>/sched), latency
percentiles, voluntary/involuntary context switches, migrations (/proc/<pid>/sched
and sched:sched_migrate_task in a private ftrace instance), per-CPU utilisation
(/proc/stat) and, where the PMU allows, cache misses (perf stat).

Kernel state it changes -- the debugfs mount, sched knobs, the ftrace instance, the
processes it starts -- is restored on success, error, SIGINT and SIGTERM.
"""
from __future__ import annotations

import atexit
import errno
import math
import os
import random
import re
import shutil
import subprocess
from pathlib import Path

from . import cbuild, ftrace, stats
from .dataset import DatasetWriter
from .errors import ParameterError, PerfbookError
from .hostinfo import mounts
from .lock import measure_lock
from .params import begin_collect, merge
from . import guard
from .proc import kill_group
from .progress import Progress

CHAPTER = "cpu_pinning"
TITLE = "Pinning prefork workers, and the scheduler tunables of this kernel"
HELPER = "prefork"

SLICE_10MS = 10_000_000
VARIANTS: dict[str, dict] = {
    "unpinned": {"what": "default: no affinity, SCHED_OTHER, default slice"},
    "pinned": {"pin": 1, "what": "worker i pinned to CPU i mod NCPU with sched_setaffinity()"},
    "slice_10ms": {"slice_ns": SLICE_10MS, "all_tasks": 1,
                   "what": "every task of the experiment asks for a 10 ms EEVDF slice "
                           "(sched_setattr sched_runtime)"},
    "batch": {"policy": "batch", "all_tasks": 1,
              "what": "every task of the experiment is SCHED_BATCH (no wakeup preemption)"},
    "pinned_tuned": {"pin": 1, "slice_ns": SLICE_10MS, "policy": "batch", "all_tasks": 1,
                     "what": "pinned + 10 ms slice + SCHED_BATCH"},
    "base_slice_10ms": {"debugfs": {"base_slice_ns": str(SLICE_10MS)},
                        "what": "global debugfs knob sched/base_slice_ns = 10 ms"},
}
BASELINE = "unpinned"
LOADS = ("sat", "rate")

# Rounds repeat adaptively (tools.stats.Repetition, settings rep_*): one experiment per load,
# whose keys are the variants and whose tracked value is the worker CPU time per request. Both
# experiments share the rounds (one shuffled order of every variant x load still running), and
# each stops on its own: CI target, time budget or maximum number of rounds. A default round
# takes about 15 s on 2 CPUs: its budget gives one warm-up and about 7 measured rounds.
PROFILES: dict[str, dict] = {
    "quick": {"warmup_ms": 100, "duration_ms": 300, "calib_runs": 1, "rep_target": 0.05,
              "rep_min_runs": 2, "rep_max_runs": 2, "rep_budget_s": 60.0, "rep_warmup": 0},
    "default": {"warmup_ms": 300, "duration_ms": 1000, "calib_runs": 3, "rep_target": 0.05,
                "rep_min_runs": 6, "rep_max_runs": 30, "rep_budget_s": 120.0, "rep_warmup": 1},
    "full": {"warmup_ms": 500, "duration_ms": 2000, "calib_runs": 5, "rep_target": 0.05,
             "rep_min_runs": 10, "rep_max_runs": 60, "rep_budget_s": 600.0, "rep_warmup": 1},
}
COMMON = {"variants": None, "loads": None, "workers": "auto", "ws_kib": "auto",
          "lookups": 20000, "rate_fraction": 0.6, "seed": 1, "trace": True}
LIMITS = {"warmup_ms": (0, 60000), "duration_ms": (50, 600000),
          "calib_runs": (1, 20), "lookups": (100, 10_000_000), "seed": (0, 1 << 30)}

DEBUGFS = Path("/sys/kernel/debug")
# The knobs of the seed's era and where they went (kernel/sched/debug.c, fair.c).
SEED_KNOBS = {
    "sched_min_granularity_ns": {"seed_value": "10000", "tuned_value": "10000000",
                                 "debugfs_5_13": "min_granularity_ns", "now": "base_slice_ns"},
    "sched_wakeup_granularity_ns": {"seed_value": "15000", "tuned_value": "15000000",
                                    "debugfs_5_13": "wakeup_granularity_ns", "now": None},
    "sched_latency_ns": {"seed_value": None, "tuned_value": None,
                         "debugfs_5_13": "latency_ns", "now": None},
    "sched_migration_cost_ns": {"seed_value": None, "tuned_value": None,
                                "debugfs_5_13": "migration_cost_ns", "now": "migration_cost_ns"},
    "sched_nr_migrate": {"seed_value": None, "tuned_value": None,
                         "debugfs_5_13": "nr_migrate", "now": "nr_migrate"},
    "sched_tunable_scaling": {"seed_value": None, "tuned_value": None,
                              "debugfs_5_13": "tunable_scaling", "now": "tunable_scaling"},
}


# --------------------------------------------------------------- parameters --
def _int_param(p, k):
    lo, hi = LIMITS[k]
    v = p[k]
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ParameterError(f"{k} must be an integer in [{lo}, {hi}], got {v!r}")


def _list_param(value, known, name) -> list[str]:
    if value is None:
        return list(known)
    if isinstance(value, str):
        items = [x.strip() for x in value.split(",") if x.strip()]
    elif isinstance(value, (list, tuple)):
        items = [str(x).strip() for x in value]
    else:
        raise ParameterError(f"{name} must be a comma-separated string, got {value!r}")
    bad = [x for x in items if x not in known]
    if bad or not items:
        raise ParameterError(f"unknown {name[:-1]} {', '.join(bad) or '(empty list)'}; "
                             f"choose from {', '.join(known)}")
    return list(dict.fromkeys(items))


def l2_bytes() -> int | None:
    """Size of CPU 0's level-2 cache from sysfs (None if unknown)."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for d in sorted(base.glob("index*")):
        try:
            if (d / "level").read_text().strip() == "2":
                s = (d / "size").read_text().strip().upper()
                m = re.fullmatch(r"(\d+)([KMG]?)", s)
                if m:
                    return int(m.group(1)) * {"": 1, "K": 1024, "M": 1 << 20, "G": 1 << 30}[m.group(2)]
        except OSError:
            continue
    return None


def params(profile: str = "default", **overrides) -> dict:
    """Merge a profile with overrides and validate everything (ParameterError)."""
    p = merge(profile, PROFILES, COMMON, overrides)
    for k in LIMITS:
        _int_param(p, k)
    stats.repetition_settings(p, "rep_")
    variants = _list_param(p["variants"], tuple(VARIANTS), "variants")
    if BASELINE not in variants:
        variants = [BASELINE, *variants]  # every effect is relative to it
    p["variants"] = variants
    p["loads"] = _list_param(p["loads"], LOADS, "loads")
    ncpu = os.cpu_count() or 1
    w = p["workers"]
    if w == "auto":
        w = ncpu
    if isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= 64:
        raise ParameterError(f"workers must be 'auto' or an integer in [1, 64], got {p['workers']!r}")
    p["workers"] = w
    ws = p["ws_kib"]
    if ws == "auto":
        l2 = l2_bytes() or 512 * 1024
        ws = max(16, int(l2 * 0.75) // 1024)
    if isinstance(ws, bool) or not isinstance(ws, int) or not 16 <= ws <= 4 * 1024 * 1024:
        raise ParameterError(f"ws_kib must be 'auto' or an integer in [16, 4194304], got {p['ws_kib']!r}")
    p["ws_kib"] = ws
    rf = p["rate_fraction"]
    if isinstance(rf, bool) or not isinstance(rf, (int, float)) or not 0.05 <= rf <= 1.0:
        raise ParameterError(f"rate_fraction must be a number in [0.05, 1.0], got {rf!r}")
    p["rate_fraction"] = float(rf)
    if not isinstance(p["trace"], bool):
        raise ParameterError(f"trace must be True or False, got {p['trace']!r}")
    p["profile"] = profile
    return p


def preflight() -> list[str]:
    if not Path("/proc/self/sched").is_file():
        return ["/proc/<pid>/sched is missing (kernel without scheduler statistics): "
                "no per-task CPU time, switches and migrations"]
    if not (shutil.which("cc") or shutil.which("gcc")):
        return ["no C compiler to build the prefork harness (apt-get install gcc)"]
    return []


# ------------------------------------------------------------ debugfs knobs --
def debugfs_mounted(root: Path = DEBUGFS) -> bool:
    return any(m == str(root) and t == "debugfs" for m, t in mounts())


class SchedKnobs:
    """The scheduler's debugfs directory: inventory, writes, and their undoing.

    Mounts debugfs if it is not mounted (and unmounts it at the end); every knob
    written is put back to the value read before the first write, on normal exit,
    exception, SIGINT and SIGTERM (signals are blocked while restoring). `root` and
    `mount` exist for tests on a fake tree.
    """

    def __init__(self, root: Path = DEBUGFS, mount: bool = True, log=print):
        self.root = Path(root)
        self.mount = mount
        self.log = log
        self.mounted_by_us = False
        self.saved: dict[str, str] = {}
        self._closed = True

    @property
    def sched(self) -> Path:
        return self.root / "sched"

    def __enter__(self):
        self._closed = False
        atexit.register(self.close)
        if self.mount and not debugfs_mounted(self.root):
            r = subprocess.run(["mount", "-t", "debugfs", "none", str(self.root)],
                               capture_output=True, text=True)
            if r.returncode == 0:
                self.mounted_by_us = True
            else:
                self.log(f"note: debugfs is not mounted and mounting it failed: {r.stderr.strip()}")
        return self

    def available(self) -> bool:
        return self.sched.is_dir()

    def files(self) -> list[str]:
        if not self.available():
            return []
        return sorted(p.name for p in self.sched.iterdir() if p.is_file())

    def probe(self, name: str) -> dict:
        """Can this knob be read / opened for writing? (nothing is written)"""
        path = self.sched / name
        out = {"name": name, "exists": path.is_file(), "readable": False, "writable": False,
               "value": None, "error": None}
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

    def set(self, name: str, value: str) -> None:
        path = self.sched / name
        if name not in self.saved:
            try:
                self.saved[name] = path.read_text().strip()
            except OSError as e:
                raise PerfbookError(f"can't read {path} before changing it ({e.strerror}); "
                                    "refusing to write a knob we could not restore") from None
        _write(path, value)

    def restore(self, name: str) -> None:
        if name in self.saved:
            _write(self.sched / name, self.saved[name])
            del self.saved[name]

    def close(self) -> None:
        if self._closed:
            return
        restoring = guard.restoring()  # a second signal can't cut the restore in half
        restoring.__enter__()
        try:
            for name in list(self.saved):
                try:
                    self.restore(name)
                except OSError as e:
                    self.log(f"warning: could not restore {self.sched / name} to "
                             f"{self.saved.get(name)!r}: {e.strerror}")
            if self.mounted_by_us:
                r = subprocess.run(["umount", str(self.root)], capture_output=True, text=True)
                if r.returncode != 0:
                    self.log(f"warning: could not unmount debugfs: {r.stderr.strip()}")
                self.mounted_by_us = False
        finally:
            self._closed = True
            try:
                atexit.unregister(self.close)
            except Exception:
                pass
            restoring.__exit__(None, None, None)

    def __exit__(self, *exc):
        self.close()
        return False


def _write(path: Path, text: str) -> None:
    from .tracefs import write_knob
    write_knob(path, text)


def parse_sched_debug(text: str) -> dict[str, str]:
    """The 'sysctl_sched' block of sched/debug (readable even where the knobs are not)."""
    out = {}
    for m in re.finditer(r"^\s*\.(sysctl_sched_\w+)\s*:\s*(.+?)\s*$", text, re.M):
        out[m.group(1)] = m.group(2)
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
        rows.append({"knob": f"debugfs sched/{name}", "era": "now", "exists_here": True,
                     "readable_here": pr["readable"], "writable_here": pr["writable"],
                     "value_here": pr["value"], "error": pr["error"],
                     "seed_value": None, "tuned_value": None})
    for old, info in SEED_KNOBS.items():
        proc = Path("/proc/sys/kernel") / old
        rows.append({"knob": f"sysctl kernel.{old}", "era": "seed (procfs, until 5.12)",
                     "exists_here": proc.exists(), "readable_here": None, "writable_here": None,
                     "value_here": None, "error": None,
                     "seed_value": info["seed_value"], "tuned_value": info["tuned_value"]})
        mid = info["debugfs_5_13"]
        if mid not in files:
            rows.append({"knob": f"debugfs sched/{mid}", "era": "5.13 to 6.5 (debugfs)",
                         "exists_here": False, "readable_here": None, "writable_here": None,
                         "value_here": None, "error": None, "seed_value": None,
                         "tuned_value": None})
    for k, v in sorted(debug_vals.items()):
        rows.append({"knob": f"sched/debug {k}", "era": "now", "exists_here": True,
                     "readable_here": True, "writable_here": False, "value_here": v,
                     "error": None, "seed_value": None, "tuned_value": None})
    return rows, debug_vals


# ----------------------------------------------------------------- harness --
def harness_cmd(binary: Path, p: dict, variant: str, load: str, rate: float | None,
                seed: int, marker: Path | None = None) -> list[str]:
    v = VARIANTS[variant]
    cmd = [str(binary), "--mode", load, "--workers", str(p["workers"]),
           "--pin", str(v.get("pin", 0)), "--policy", v.get("policy", "normal"),
           "--slice-ns", str(v.get("slice_ns", 0)), "--all-tasks", str(v.get("all_tasks", 0)),
           "--ws-bytes", str(p["ws_kib"] * 1024), "--lookups", str(p["lookups"]),
           "--warmup-ms", str(p["warmup_ms"]), "--duration-ms", str(p["duration_ms"]),
           "--seed", str(seed)]
    if load == "rate":
        cmd += ["--rate", f"{rate:.3f}"]
    if marker is not None:
        cmd += ["--marker", str(marker)]
    return cmd


THREAD_COLS = ["phase", "role", "idx", "pid", "exec_ns", "migrations", "nvcsw", "nivcsw",
               "policy", "slice_ns"]
CPU_COLS = ["phase", "cpu", "user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]


def parse_output(text: str) -> dict:
    """prefork stdout -> {'scalars', 'threads', 'cpus', 'hist', 'rusage'} (lists of dicts)."""
    scalars, threads, cpus, hist, rusage = {}, [], [], [], []
    for line in text.splitlines():
        if line.startswith("T,"):
            f = line.split(",")[1:]
            threads.append({**dict(zip(THREAD_COLS[:2], f[:2])),
                            **{k: int(x) for k, x in zip(THREAD_COLS[2:], f[2:])}})
        elif line.startswith("C,"):
            f = line.split(",")[1:]
            cpus.append({"phase": f[0], **{k: int(x) for k, x in zip(CPU_COLS[1:], f[1:])}})
        elif line.startswith("H,"):
            _, b, c = line.split(",")
            hist.append({"bin": int(b), "count": int(c)})
        elif line.startswith("R,"):
            f = [int(x) for x in line.split(",")[1:]]
            rusage.append(dict(zip(["idx", "pid", "utime_us", "stime_us", "nvcsw", "nivcsw"], f)))
        elif "=" in line:
            k, v = line.split("=", 1)
            scalars[k.strip()] = v.strip()
    if scalars.get("end") != "ok":
        raise PerfbookError("prefork output is incomplete (no end=ok line)")
    for k in ("completed", "window_ns", "lat_n", "lat_p50_ns", "lat_p90_ns", "lat_p99_ns",
              "lat_p999_ns", "lat_max_ns", "workers", "queue_max", "dropped", "issued"):
        scalars[k] = int(scalars[k])
    scalars["lat_mean_ns"] = float(scalars["lat_mean_ns"])
    return {"scalars": scalars, "threads": threads, "cpus": cpus, "hist": hist, "rusage": rusage}


def thread_deltas(threads: list[dict]) -> list[dict]:
    """end - start per task of one trial."""
    start = {(t["role"], t["idx"]): t for t in threads if t["phase"] == "start"}
    out = []
    for t in threads:
        if t["phase"] != "end" or (t["role"], t["idx"]) not in start:
            continue
        s = start[(t["role"], t["idx"])]
        out.append({"role": t["role"], "idx": t["idx"], "pid": t["pid"],
                    "exec_ns": t["exec_ns"] - s["exec_ns"],
                    "migrations": t["migrations"] - s["migrations"],
                    "nvcsw": t["nvcsw"] - s["nvcsw"], "nivcsw": t["nivcsw"] - s["nivcsw"],
                    "policy": t["policy"], "slice_ns": t["slice_ns"]})
    return out


def cpu_deltas(cpus: list[dict]) -> list[dict]:
    """Per-CPU tick deltas over the window and the busy fraction."""
    start = {c["cpu"]: c for c in cpus if c["phase"] == "start"}
    out = []
    for c in cpus:
        if c["phase"] != "end" or c["cpu"] not in start:
            continue
        d = {k: c[k] - start[c["cpu"]][k] for k in CPU_COLS[2:]}
        total = sum(d.values())
        idle = d["idle"] + d["iowait"]
        out.append({"cpu": c["cpu"], **d, "total_ticks": total,
                    "busy_frac": (total - idle) / total if total else math.nan,
                    "steal_frac": d["steal"] / total if total else math.nan})
    return out


def parse_migrations(trace: str, pids: dict[int, str]) -> dict:
    """Count sched_migrate_task events of our tasks between our two trace markers.

    `pids` maps pid -> role. Returns {'by_role': {role: n}, 'window_s': float|None,
    'events': [(ts, pid, role, orig, dest)], 'markers': n, 'lost': n} -- 'lost' > 0: the
    ring buffer dropped events (the count, or the number of LOST markers without one), so
    by_role is a lower bound. Any trace option layout parses (tools.ftrace).
    """
    in_win, t0, t1, markers = False, None, None, 0
    by_role: dict[str, int] = {}
    events = []
    st = ftrace.new_stats()
    for r in ftrace.records(trace, st):
        ev, rest, ts = r.event, r.body, r.ts
        if ev == "tracing_mark_write":
            if rest.strip().startswith("pf_window_start"):
                in_win, t0 = True, ts
                markers += 1
            elif rest.strip().startswith("pf_window_end"):
                in_win, t1 = False, ts
                markers += 1
            continue
        if ev != "sched_migrate_task" or not in_win:
            continue
        f = ftrace.parse_kv(rest)
        pid = int(f.get("pid", -1))
        if pid in pids:
            role = pids[pid]
            by_role[role] = by_role.get(role, 0) + 1
            events.append((ts, pid, role, int(f.get("orig_cpu", -1)), int(f.get("dest_cpu", -1))))
    return {"by_role": by_role, "window_s": (t1 - t0) if (t0 is not None and t1 is not None) else None,
            "events": events, "markers": markers, "lost": st["lost"] or st["lost_lines"]}


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run the harness in its own process group; kill the whole group on any exit path."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(p)
        raise PerfbookError(f"prefork did not finish within {timeout:.0f} s") from None
    finally:
        kill_group(p)
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


# ---------------------------------------------------------------- perf stat --
PERF_EVENTS = ("cache-misses", "cache-references", "instructions", "cycles")


def perf_problem() -> str | None:
    """Why cache misses can't be counted here (None: they can)."""
    if not shutil.which("perf"):
        return "perf is not installed (apt-get install linux-perf)"
    r = subprocess.run(["perf", "stat", "-x", ",", "-e", ",".join(PERF_EVENTS), "true"],
                       capture_output=True, text=True)
    bad = [ln.split(",")[2] for ln in r.stderr.splitlines()
           if ln.count(",") >= 2 and ln.split(",")[0].strip() in ("<not supported>", "<not counted>")]
    if r.returncode != 0 or bad:
        pmus = sorted(p.name for p in Path("/sys/bus/event_source/devices").glob("*"))
        what = ", ".join(bad) or (r.stderr.strip().splitlines() or ["perf stat failed"])[-1]
        return (f"perf stat reports {what} as <not supported>: this (virtual) machine exposes "
                f"no hardware PMU (event sources here: {', '.join(pmus) or 'none'})")
    return None


def parse_perf(stderr: str) -> dict[str, float]:
    out = {}
    for ln in stderr.splitlines():
        f = ln.split(",")
        if len(f) >= 3 and f[2] in PERF_EVENTS:
            try:
                out[f[2]] = float(f[0])
            except ValueError:
                out[f[2]] = math.nan
    return out


# ------------------------------------------------------------------ collect --
def collect(data_dir=None, profile: str = "default", **overrides) -> Path:
    """Measure this host; returns the new dataset's directory."""
    import pandas as pd
    from .tracefs import TraceSession, preflight as tracefs_preflight
    p, data = begin_collect(params, preflight, profile, overrides, data_dir)
    import tempfile
    tmpdir = Path(tempfile.mkdtemp(prefix="perfbook-prefork-"))
    # a private copy: a rebuild of build/bin/prefork during the run can't mix two binaries
    binary = tmpdir / HELPER
    shutil.copy2(cbuild.binary(HELPER), binary)
    rng = random.Random(p["seed"])
    is_root = os.geteuid() == 0
    guard.enter()  # SIGINT/SIGTERM/SIGHUP -> KeyboardInterrupt (tools.guard)
    try:
        with measure_lock(CHAPTER), DatasetWriter(CHAPTER, data, p) as w:
            prog = Progress(CHAPTER, 1)
            w.extra["harness"] = {"source": "tools/c/prefork.c", "cflags": cbuild.CFLAGS,
                                  "variants": {v: VARIANTS[v]["what"] for v in p["variants"]},
                                  "l2_bytes": l2_bytes(), "ws_bytes": p["ws_kib"] * 1024,
                                  "sha256": _sha256(binary)}
            with SchedKnobs(mount=is_root, log=prog.note) as knobs:
                rows, debug_vals = knob_inventory(knobs) if is_root else ([], {})
                w.extra["debugfs"] = {"mounted_by_us": knobs.mounted_by_us,
                                      "available": knobs.available(),
                                      "sched_debug": debug_vals}
                if rows:
                    w.add_table("knobs", pd.DataFrame(rows))
                else:
                    w.skip("knobs", "not root: debugfs (/sys/kernel/debug/sched) needs root")
                variants = list(p["variants"])
                for v in list(variants):
                    for name in VARIANTS[v].get("debugfs", {}):
                        why = _debugfs_unusable(knobs, name, is_root)
                        if why:
                            w.skip(v, why)
                            variants.remove(v)
                perf_why = perf_problem()
                if perf_why:
                    w.skip("cache_misses", perf_why)
                trace_why = None
                if not p["trace"]:
                    trace_why = "disabled by the trace=False parameter"
                else:
                    tr = tracefs_preflight(need_uprobes=False)
                    trace_why = tr[0] if tr else None
                if trace_why:
                    w.skip("migrations_tracepoint", trace_why + "; migrations come from "
                           "/proc/<pid>/sched se.nr_migrations only")
                w.extra["variants_measured"] = variants
                if trace_why:
                    _measure(w, p, binary, variants, rng, knobs, None, perf_why is None, prog)
                else:
                    with TraceSession("pinning", log=prog.note) as s:
                        s.set_option("buffer_size_kb", "4096")
                        try:
                            _write(s.buffer / "events/sched/sched_migrate_task/filter",
                                   'comm ~ "pf-*"')
                        except OSError:
                            pass
                        s.enable("sched/sched_migrate_task")
                        _measure(w, p, binary, variants, rng, knobs, s, perf_why is None, prog)
    finally:
        guard.leave()
        shutil.rmtree(tmpdir, ignore_errors=True)
    return w.published


def _sha256(path: Path) -> str:
    import hashlib
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _debugfs_unusable(knobs: SchedKnobs, name: str, is_root: bool) -> str | None:
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


def _measure(w, p, binary, variants, rng, knobs, session, use_perf, prog) -> None:
    import pandas as pd
    timeout = 60 + 3 * (p["warmup_ms"] + p["duration_ms"]) / 1000
    marker = session.file("trace_marker") if session is not None else None
    trials, tasks, cores, hists, migr = [], [], [], [], []
    prog.total = max(p["calib_runs"] * ("rate" in p["loads"]) + len(variants) * len(p["loads"]), 1)
    # calibration: the fixed rate is a fraction of the baseline's saturation throughput
    rate = None
    calib = []
    if "rate" in p["loads"]:
        for i in range(p["calib_runs"]):
            r = _trial(binary, p, BASELINE, "sat", None, p["seed"] + 10_000 + i, None, False, timeout)
            sc = r["scalars"]
            calib.append(sc["completed"] / (sc["window_ns"] / 1e9))
            prog.step(f"calibration {i + 1}/{p['calib_runs']}: {calib[-1]:.0f} req/s at saturation")
        # other load on the host can only lower a calibration run, so take the best one
        rate = round(p["rate_fraction"] * max(calib), 1)
        prog.note(f"fixed rate: {rate:.0f} req/s ({p['rate_fraction']:.0%} of the best "
                  "baseline saturation throughput)")
    w.extra["calibration"] = {"saturation_req_s": calib, "rate_req_s": rate,
                              "rate_fraction": p["rate_fraction"]}
    reps = {ld: stats.repetition(ld, variants, p, "rep_") for ld in p["loads"]}
    warm = []
    for rounds in stats.interleave(reps.values()):
        # every load still running gets the same round number; warm-up rounds are negative
        rd = next(iter(rounds.values()))
        rnd = rd.index - p["rep_warmup"]
        if rd.index:
            prog.note("; ".join(f"{ld}: {reps[ld].status()}" for ld in rounds))
        order = [(v, ld) for v in variants for ld in p["loads"] if ld in rounds]
        rng.shuffle(order)
        prog.expect(len(order))
        for pos, (variant, load) in enumerate(order):
            seed = p["seed"] + rd.index
            if session is not None:
                session.clear()
            for name, value in VARIANTS[variant].get("debugfs", {}).items():
                knobs.set(name, value)
            try:
                r = _trial(binary, p, variant, load, rate, seed, marker, use_perf, timeout)
            finally:
                for name in VARIANTS[variant].get("debugfs", {}):
                    knobs.restore(name)
            key = {"round": rnd, "position": pos, "variant": variant, "load": load}
            sc = r["scalars"]
            td = thread_deltas(r["threads"])
            reps[load].add(variant, sum(t["exec_ns"] for t in td if t["role"] == "worker")
                           / max(sc["completed"], 1) / 1e3)
            if rounds[load].warmup:      # counted by the Repetition, kept apart from the data
                warm.append({**key, "completed": sc["completed"], "window_s": sc["window_ns"] / 1e9})
                prog.step(f"warm-up round {variant} {load}")
                continue
            cd = cpu_deltas(r["cpus"])
            # a fixed-rate trial that served under RATE_KEPT_UP of the offered requests ran at
            # saturation instead: recorded, and left out of the fixed-rate comparisons
            row = {**key, "offered_rate": rate if load == "rate" else None,
                   "rate_saturated": bool(load == "rate" and sc["completed"]
                                          < RATE_KEPT_UP * rate * sc["window_ns"] / 1e9),
                   "window_s": sc["window_ns"] / 1e9, "completed": sc["completed"],
                   "issued": sc["issued"], "queue_max": sc["queue_max"], "dropped": sc["dropped"],
                   "lat_n": sc["lat_n"], "lat_mean_ns": sc["lat_mean_ns"],
                   **{k: sc[k] for k in ("lat_p50_ns", "lat_p90_ns", "lat_p99_ns", "lat_p999_ns",
                                         "lat_max_ns")}}
            for role in ("worker", "loadgen", "backend"):
                sel = [t for t in td if t["role"] == role]
                row[f"{role}_exec_ns"] = sum(t["exec_ns"] for t in sel)
                row[f"{role}_migrations"] = sum(t["migrations"] for t in sel)
                row[f"{role}_nvcsw"] = sum(t["nvcsw"] for t in sel)
                row[f"{role}_nivcsw"] = sum(t["nivcsw"] for t in sel)
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
                roles = {t["pid"]: t["role"] for t in td}
                trace_text = session.file("trace").read_text(errors="replace")
                mg = parse_migrations(trace_text, roles)
                st = session.buffer_stats()
                row["trace_markers"] = mg["markers"]
                row["trace_window_s"] = mg["window_s"]
                row["trace_overrun"] = st.get("overrun", 0)
                for role in ("worker", "loadgen", "backend"):
                    row[f"{role}_migrations_trace"] = mg["by_role"].get(role, 0)
                migr += [{**key, "t_s": ts, "pid": pid, "role": role, "orig_cpu": o, "dest_cpu": d}
                         for ts, pid, role, o, d in mg["events"]]
            if r.get("perf"):
                for ev, val in r["perf"].items():
                    row[f"perf_{ev.replace('-', '_')}"] = val
            trials.append(row)
            tasks += [{**key, **t} for t in td]
            cores += [{**key, **c} for c in cd]
            hists += [{**key, **h} for h in r["hist"]]
            prog.step(f"round {rnd + 1} {variant} {load}: "
                      f"{sc['completed'] / (sc['window_ns'] / 1e9):.0f} req/s, "
                      f"p99 {sc['lat_p99_ns'] / 1e3:.0f} us")
    prog.note("repetition stopped: " + "; ".join(f"{ld} by {r.stopped_by} ({r.status()})"
                                                 for ld, r in reps.items()))
    tdf = pd.DataFrame(trials)
    w.add_table("trials", tdf)
    w.add_table("repetition", pd.DataFrame([r for rp in reps.values() for r in rp.records()]))
    if warm:
        w.add_table("warmup_trials", pd.DataFrame(warm))
    w.add_table("tasks", pd.DataFrame(tasks))
    w.add_table("cores", pd.DataFrame(cores))
    w.add_table("latency_hist", pd.DataFrame(hists))
    if session is not None:
        w.add_table("migrations", pd.DataFrame(migr, columns=["round", "position", "variant", "load",
                                                              "t_s", "pid", "role", "orig_cpu",
                                                              "dest_cpu"]))
    bad = tdf[~(tdf.policy_ok & tdf.slice_ok)]
    if len(bad):
        w.notes.append(f"{len(bad)} trial(s) where a worker's policy or slice differed from the "
                       f"variant's request (first: {bad.iloc[0][['variant', 'load']].to_dict()})")
    if session is not None and (tdf.get("trace_markers", pd.Series([2])) != 2).any():
        w.notes.append("some trials lack one of the two trace markers; their tracepoint "
                       "migration counts are incomplete")
    if session is not None and tdf.get("trace_overrun", pd.Series([0])).sum() > 0:
        w.notes.append("the ftrace buffer overran in some trials; tracepoint counts are lower bounds")
    if "rate" in p["loads"]:
        short = tdf[tdf.rate_saturated]
        if len(short):
            w.notes.append(f"{len(short)} fixed-rate trial(s) completed under "
                           f"{RATE_KEPT_UP:.0%} of the offered requests (variants: "
                           f"{', '.join(sorted(set(short.variant)))}): they ran saturated, not at the "
                           "fixed rate, and are left out of the fixed-rate comparisons")


def _trial(binary, p, variant, load, rate, seed, marker, use_perf, timeout) -> dict:
    cmd = harness_cmd(binary, p, variant, load, rate, seed, marker)
    if use_perf:
        cmd = ["perf", "stat", "-x", ",", "-e", ",".join(PERF_EVENTS), "-D", str(p["warmup_ms"]),
               "--", *cmd]
    r = _run(cmd, timeout)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
        raise PerfbookError(f"prefork ({variant}, {load}) failed: {last}")
    out = parse_output(r.stdout)
    if use_perf:
        out["perf"] = parse_perf(r.stderr)
    return out


# -------------------------------------------------------------- explain side --
def load(data_dir=None) -> dict:
    """Everything the chapter shows: the tables of every run, manifests, the seed's figures."""
    from .dataset import load_manifests, load_reference, load_table
    out = {t: load_table(CHAPTER, t, data_dir)
           for t in ("trials", "tasks", "cores", "latency_hist", "migrations", "knobs",
                     "repetition")}
    out["manifests"] = load_manifests(CHAPTER, data_dir)
    out["reference"] = load_reference(CHAPTER, data_dir)
    # the analysis must not depend on the order rows were written in: put the display
    # tables in the order the code writes them, per host and run (list_runs order)
    out["knobs"] = _in_order(out["knobs"], knob_rank)
    out["repetition"] = _in_order(out["repetition"], lambda r: (
        _rank(LOADS, r["experiment"]), _rank(ORDER, r["key"]), r["key"]))
    if not out["trials"].empty:
        out["trials"] = derive(out["trials"])
    return out


def _rank(seq, value) -> int:
    return list(seq).index(value) if value in seq else len(seq)


def _in_order(df, key):
    """Rows sorted by host, run, then key(row): a tuple that reproduces the written order."""
    if df.empty:
        return df
    k = df.apply(key, axis=1)
    return (df.assign(_k=k).sort_values(["host_id", "run_id", "_k"], kind="stable")
            .drop(columns="_k").reset_index(drop=True))


def knob_rank(row) -> tuple:
    """knob_inventory's order: today's debugfs files by name; per SEED_KNOBS entry its sysctl
    and, if gone, its 5.13 debugfs file; then the sysctl_sched block of sched/debug by name."""
    knob = row["knob"]
    for i, (old, info) in enumerate(SEED_KNOBS.items()):
        if knob == f"sysctl kernel.{old}":
            return (1, i, 0, "")
        if row["era"] != "now" and knob == f"debugfs sched/{info['debugfs_5_13']}":
            return (1, i, 1, "")
    return (2 if knob.startswith("sched/debug") else 0, 0, 0, knob)


def derive(trials):
    """Per-trial metrics from the raw counters."""
    t = trials.copy()
    t["throughput"] = t["completed"] / t["window_s"]
    if "rate_saturated" not in t:   # datasets from before the column was recorded
        t["rate_saturated"] = (t["load"] == "rate") & \
            (t["completed"] < RATE_KEPT_UP * t["offered_rate"] * t["window_s"])
    t["rate_saturated"] = t["rate_saturated"].fillna(False).astype(bool)
    t["cpu_per_req_us"] = t["worker_exec_ns"] / t["completed"] / 1e3
    t["all_cpu_per_req_us"] = (t["worker_exec_ns"] + t["loadgen_exec_ns"] + t["backend_exec_ns"]) \
        / t["completed"] / 1e3
    t["machine_cpu_per_req_us"] = t["busy_ticks"] / t["clk_tck"] / t["completed"] * 1e6
    t["machine_busy_pct"] = 100 * t["busy_ticks"] / t["total_ticks"]
    # CPU the rest of the host used during the window (interference), in % of one CPU
    ours_s = (t["worker_exec_ns"] + t["loadgen_exec_ns"] + t["backend_exec_ns"]) / 1e9
    t["other_cpu_pct"] = 100 * (t["busy_ticks"] / t["clk_tck"] - ours_s) / t["window_s"]
    t["worker_cpu_pct"] = 100 * t["worker_exec_ns"] / 1e9 / t["window_s"]
    for q in ("p50", "p90", "p99", "p999", "max"):
        t[f"lat_{q}_ms"] = t[f"lat_{q}_ns"] / 1e6
    t["lat_mean_ms"] = t["lat_mean_ns"] / 1e6
    # Little's law: mean requests in flight (about `workers` at saturation)
    t["in_flight"] = t["completed"] * t["lat_mean_ns"] / 1e9 / t["window_s"]
    t["invol_per_req"] = t["worker_nivcsw"] / t["completed"]
    t["vol_per_req"] = t["worker_nvcsw"] / t["completed"]
    t["worker_migr_per_s"] = t["worker_migrations"] / t["window_s"]
    if "worker_migrations_trace" in t:
        t["worker_migr_trace_per_s"] = t["worker_migrations_trace"] / t["window_s"]
    return t


def warmup_rounds(repetition, run_id) -> int:
    """Warm-up rounds of one dataset (0 for datasets from before adaptive repetition)."""
    if repetition is None or repetition.empty:
        return 0
    r = repetition[repetition.run_id == run_id]
    return int(r["warmup"].max()) if len(r) else 0


def compare_variants(trials, metrics=("cpu_per_req_us", "lat_p99_ms"), baseline: str = BASELINE):
    """Every variant against the baseline, per host, run and load, with tools.stats.compare
    (Mann-Whitney U, Cliff's delta, Hodges-Lehmann shift) over undisturbed trials."""
    import pandas as pd
    from .stats import compare_frame
    t = comparable(trials)
    frames = [compare_frame(t, by="variant", value=m, baseline=baseline,
                            within=["host_id", "run_id", "load"]).assign(metric=m)
              for m in metrics if m in t]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def compare_hosts(trials, manifests, metric: str = "cpu_per_req_us"):
    """Each host's shown dataset (tools.dataset.only_shown) against the first host's, per
    load and variant."""
    from .dataset import only_shown
    from .stats import compare_frame
    t = comparable(only_shown(trials, manifests))
    if t.empty or t.host_id.nunique() < 2:
        return t.iloc[0:0]
    base = sorted(t.host_id.unique())[0]
    return compare_frame(t, by="host_id", value=metric, baseline=base, within=["load", "variant"])


METRICS = {
    "throughput": "requests/s",
    "cpu_per_req_us": "worker CPU µs per request",
    "all_cpu_per_req_us": "CPU µs per request (workers + load generator + backend)",
    "machine_busy_pct": "busy % of all CPUs (/proc/stat)",
    "lat_mean_ms": "mean latency (ms)",
    "lat_p99_ms": "p99 latency (ms)",
    "worker_migr_per_s": "worker migrations/s",
    "invol_per_req": "involuntary switches per request",
}


# A trial is "disturbed" when the rest of the host used more than this share of one CPU
# during its window (busy ticks in /proc/stat minus our tasks' run time). Declared before
# looking at effects; disturbed trials are kept in the data and counted in the chapter.
DISTURBED_PCT = 20.0


def undisturbed(trials):
    if "other_cpu_pct" not in trials:
        return trials
    return trials[~(trials["other_cpu_pct"] > DISTURBED_PCT)]


# A fixed-rate trial must serve at least this share of the offered requests; below it the
# variant could not keep up, the trial ran saturated, and its CPU per request or latency is
# not comparable with trials at the fixed rate (column rate_saturated, declared in advance).
RATE_KEPT_UP = 0.9


def comparable(trials):
    """The trials the summaries and comparisons use: undisturbed, and for the fixed-rate
    load only those that kept up with the rate."""
    t = undisturbed(trials)
    if "rate_saturated" in t:
        t = t[~t["rate_saturated"].fillna(False).astype(bool)]
    return t


def exclusions(trials):
    """Per load and variant: trials, how many were disturbed, how many ran saturated at the
    fixed rate, and how many the summaries use."""
    import pandas as pd
    if trials.empty:
        return pd.DataFrame(columns=["load", "variant", "trials", "disturbed", "rate_saturated",
                                     "used"])
    t = trials.assign(
        _dist=trials["other_cpu_pct"] > DISTURBED_PCT if "other_cpu_pct" in trials else False,
        _sat=trials["rate_saturated"].fillna(False).astype(bool) if "rate_saturated" in trials
        else False)
    t["_used"] = t.index.isin(comparable(trials).index)
    return (t.groupby(["load", "variant"]).agg(trials=("_used", "size"), disturbed=("_dist", "sum"),
                                               rate_saturated=("_sat", "sum"), used=("_used", "sum"))
            .reset_index().astype({"disturbed": int, "rate_saturated": int, "used": int}))


def summary(trials, metrics=tuple(METRICS), by=("host_id", "run_id", "load", "variant")):
    """Median over undisturbed rounds with the distribution-free CI, per group and metric."""
    import pandas as pd
    from .stats import summarize
    rows = []
    for key, g in comparable(trials).groupby(list(by), sort=True):
        for m in metrics:
            if m not in g:
                continue
            s = summarize(g[m])
            rows.append({**dict(zip(by, key)), "metric": m, "n": s.n, "median": s.median,
                         "ci_low": s.ci_low, "ci_high": s.ci_high, "ci_coverage": s.ci_coverage,
                         "p5": s.p5, "p95": s.p95})
    return pd.DataFrame(rows, columns=[*by, "metric", "n", "median", "ci_low", "ci_high",
                                       "ci_coverage", "p5", "p95"])


def paired_effects(trials, metrics=tuple(METRICS), baseline: str = BASELINE):
    """Per round, variant / baseline - 1 (same round, same load): median and CI over rounds.

    Rounds interleave the variants, so pairing by round removes slow drift of the host.
    A pair is used only if neither of its trials was disturbed.
    """
    import pandas as pd
    from .stats import summarize
    rows = []
    keys = ["host_id", "run_id", "load"]
    for key, g in comparable(trials).groupby(keys, sort=True):
        base = g[g.variant == baseline].set_index("round")
        for variant, gv in g.groupby("variant", sort=False):
            if variant == baseline:
                continue
            gv = gv.set_index("round")
            common = gv.index.intersection(base.index)
            for m in metrics:
                if m not in gv:
                    continue
                rel = (gv.loc[common, m] / base.loc[common, m] - 1) * 100
                s = summarize(rel)
                rows.append({**dict(zip(keys, key)), "variant": variant, "metric": m,
                             "n_rounds": s.n, "change_pct": s.median, "ci_low": s.ci_low,
                             "ci_high": s.ci_high, "ci_coverage": s.ci_coverage})
    return pd.DataFrame(rows, columns=[*keys, "variant", "metric", "n_rounds", "change_pct",
                                       "ci_low", "ci_high", "ci_coverage"])


def core_balance(cores, trials=None):
    """Per host/run/load/variant and CPU: median busy fraction over rounds, and the spread
    between the busiest and the idlest CPU per trial."""
    keys = ["host_id", "run_id", "load", "variant"]
    per = cores.groupby(keys + ["cpu"]).busy_frac.median().reset_index()
    spread = (cores.groupby(keys + ["round"]).busy_frac.agg(lambda s: s.max() - s.min())
              .groupby(keys).median().rename("busy_spread").reset_index())
    return per, spread


def latest(manifests: list[dict]) -> dict | None:
    """The dataset the prose quotes (tools.dataset.newest: a quick test run never wins)."""
    from .dataset import newest
    return newest(manifests)


from .dataset import skipped_table as not_measured  # noqa: E402  (the chapter's name for it)
from .dataset import only_shown  # noqa: E402,F401  (one dataset per host, side by side)


ORDER = list(VARIANTS)


def plot_metric(summ, metric, ylabel, ax):
    """Median (point) and CI (bar) per variant, one colour per load."""
    loads = [ld for ld in LOADS if ld in set(summ.load)]
    s = summ[summ.metric == metric]
    order = [v for v in ORDER if v in set(s.variant)]
    for i, ld in enumerate(loads):
        g = s[s.load == ld].set_index("variant").reindex(order)
        x = [k + (i - (len(loads) - 1) / 2) * 0.25 for k in range(len(order))]
        ax.errorbar(x, g["median"], yerr=[g["median"] - g.ci_low, g.ci_high - g["median"]],
                    fmt="o", capsize=3, label={"sat": "saturation", "rate": "fixed rate"}[ld])
    ax.set_xticks(range(len(order)), order, rotation=20)
    ax.set_ylabel(ylabel)
    return ax


def fmt_pct(x: float) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.1f} %"


def effect(eff, load: str, variant: str, metric: str) -> dict:
    """One paired effect as numbers and words (for the chapter's prose)."""
    r = eff[(eff.load == load) & (eff.variant == variant) & (eff.metric == metric)]
    if r.empty:
        return {"text": "not measured", "verdict": "not measured", "change": math.nan,
                "lo": math.nan, "hi": math.nan, "n": 0}
    r = r.iloc[0]
    if r.ci_low > 0:
        verdict = "higher"
    elif r.ci_high < 0:
        verdict = "lower"
    else:
        verdict = "not distinguishable from the baseline"
    return {"text": f"{fmt_pct(r.change_pct)} (CI {fmt_pct(r.ci_low)} to {fmt_pct(r.ci_high)})",
            "verdict": verdict, "change": float(r.change_pct), "lo": float(r.ci_low),
            "hi": float(r.ci_high), "n": int(r.n_rounds)}
