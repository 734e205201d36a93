"""The chapter's vocabulary and its parsers.

What the experiment is: the variants, the loads, the seed's knobs and the rules fixed in
advance (disturbed trials, fixed-rate trials that could not keep up); no I/O beyond reading
this CPU's L2 size from sysfs. Text -> rows: the prefork harness's output, the ftrace text,
sched/debug and perf stat (pure functions, tested on fixtures)."""

from __future__ import annotations

import math
import re
from pathlib import Path

from perfbook.core.errors import PerfbookError
from perfbook.probes import ftrace

HELPER = "prefork"  # tools/c/prefork.c
SLICE_10MS = 10_000_000
VARIANTS: dict[str, dict] = {
    "unpinned": {"what": "default: no affinity, SCHED_OTHER, default slice"},
    "pinned": {"pin": 1, "what": "worker i pinned to CPU i mod NCPU with sched_setaffinity()"},
    "slice_10ms": {
        "slice_ns": SLICE_10MS,
        "all_tasks": 1,
        "what": "every task of the experiment asks for a 10 ms EEVDF slice "
        "(sched_setattr sched_runtime)",
    },
    "batch": {
        "policy": "batch",
        "all_tasks": 1,
        "what": "every task of the experiment is SCHED_BATCH (no wakeup preemption)",
    },
    "pinned_tuned": {
        "pin": 1,
        "slice_ns": SLICE_10MS,
        "policy": "batch",
        "all_tasks": 1,
        "what": "pinned + 10 ms slice + SCHED_BATCH",
    },
    "base_slice_10ms": {
        "debugfs": {"base_slice_ns": str(SLICE_10MS)},
        "what": "global debugfs knob sched/base_slice_ns = 10 ms",
    },
}
ORDER = list(VARIANTS)
BASELINE = "unpinned"
LOADS = ("sat", "rate")
LOAD_TITLE = {"rate": "fixed rate", "sat": "saturation"}

DEBUGFS = Path("/sys/kernel/debug")
# The knobs of the seed's era and where they went (kernel/sched/debug.c, fair.c).
SEED_KNOBS = {
    "sched_min_granularity_ns": {
        "seed_value": "10000",
        "tuned_value": "10000000",
        "debugfs_5_13": "min_granularity_ns",
        "now": "base_slice_ns",
    },
    "sched_wakeup_granularity_ns": {
        "seed_value": "15000",
        "tuned_value": "15000000",
        "debugfs_5_13": "wakeup_granularity_ns",
        "now": None,
    },
    "sched_latency_ns": {
        "seed_value": None,
        "tuned_value": None,
        "debugfs_5_13": "latency_ns",
        "now": None,
    },
    "sched_migration_cost_ns": {
        "seed_value": None,
        "tuned_value": None,
        "debugfs_5_13": "migration_cost_ns",
        "now": "migration_cost_ns",
    },
    "sched_nr_migrate": {
        "seed_value": None,
        "tuned_value": None,
        "debugfs_5_13": "nr_migrate",
        "now": "nr_migrate",
    },
    "sched_tunable_scaling": {
        "seed_value": None,
        "tuned_value": None,
        "debugfs_5_13": "tunable_scaling",
        "now": "tunable_scaling",
    },
}

# The scheduler features of Linux v6.18 in the order of kernel/sched/features.h, with their
# defaults: bit i of sysctl_sched_features (printed in sched/debug) is feature i. Read from the
# v6.18.2 stable tree (x86-64: CONFIG_PREEMPT_RT off, HAVE_RT_PUSH_IPI defined).
SCHED_FEATURES_6_18 = (
    ("PLACE_LAG", True),
    ("PLACE_DEADLINE_INITIAL", True),
    ("PLACE_REL_DEADLINE", True),
    ("RUN_TO_PARITY", True),
    ("PREEMPT_SHORT", True),
    ("NEXT_BUDDY", False),
    ("PICK_BUDDY", True),
    ("CACHE_HOT_BUDDY", True),
    ("DELAY_DEQUEUE", True),
    ("DELAY_ZERO", True),
    ("WAKEUP_PREEMPTION", True),
    ("HRTICK", False),
    ("HRTICK_DL", False),
    ("NONTASK_CAPACITY", True),
    ("TTWU_QUEUE", True),
    ("SIS_UTIL", True),
    ("WARN_DOUBLE_CLOCK", False),
    ("RT_PUSH_IPI", True),
    ("RT_RUNTIME_SHARE", False),
    ("LB_MIN", False),
    ("ATTACH_AGE_LOAD", True),
    ("WA_IDLE", True),
    ("WA_WEIGHT", True),
    ("WA_BIAS", True),
    ("UTIL_EST", True),
    ("LATENCY_WARN", False),
)

PERF_EVENTS = ("cache-misses", "cache-references", "instructions", "cycles")

# A trial is "disturbed" when the rest of the host used more than this share of one CPU
# during its window (busy ticks in /proc/stat minus our tasks' run time). Declared before
# looking at effects; disturbed trials are kept in the data and counted in the chapter.
DISTURBED_PCT = 20.0

# A fixed-rate trial must serve at least this share of the offered requests; below it the
# variant could not keep up, the trial ran saturated, and its CPU per request or latency is
# not comparable with trials at the fixed rate (column rate_saturated, declared in advance).
RATE_KEPT_UP = 0.9

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


def l2_bytes() -> int | None:
    """Size of CPU 0's level-2 cache from sysfs (None if unknown)."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for d in sorted(base.glob("index*")):
        try:
            if (d / "level").read_text().strip() == "2":
                s = (d / "size").read_text().strip().upper()
                m = re.fullmatch(r"(\d+)([KMG]?)", s)
                if m:
                    return (
                        int(m.group(1)) * {"": 1, "K": 1024, "M": 1 << 20, "G": 1 << 30}[m.group(2)]
                    )
        except OSError:
            continue
    return None


THREAD_COLS = [
    "phase",
    "role",
    "idx",
    "pid",
    "exec_ns",
    "migrations",
    "nvcsw",
    "nivcsw",
    "policy",
    "slice_ns",
]
CPU_COLS = ["phase", "cpu", "user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]


def parse_output(text: str) -> dict:
    """prefork stdout -> {'scalars', 'threads', 'cpus', 'hist', 'rusage'} (lists of dicts)."""
    scalars, threads, cpus, hist, rusage = {}, [], [], [], []
    for line in text.splitlines():
        if line.startswith("T,"):
            f = line.split(",")[1:]
            threads.append(
                {
                    **dict(zip(THREAD_COLS[:2], f[:2])),
                    **{k: int(x) for k, x in zip(THREAD_COLS[2:], f[2:])},
                }
            )
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
    for k in (
        "completed",
        "window_ns",
        "lat_n",
        "lat_p50_ns",
        "lat_p90_ns",
        "lat_p99_ns",
        "lat_p999_ns",
        "lat_max_ns",
        "workers",
        "queue_max",
        "dropped",
        "issued",
    ):
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
        out.append(
            {
                "role": t["role"],
                "idx": t["idx"],
                "pid": t["pid"],
                "exec_ns": t["exec_ns"] - s["exec_ns"],
                "migrations": t["migrations"] - s["migrations"],
                "nvcsw": t["nvcsw"] - s["nvcsw"],
                "nivcsw": t["nivcsw"] - s["nivcsw"],
                "policy": t["policy"],
                "slice_ns": t["slice_ns"],
            }
        )
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
        out.append(
            {
                "cpu": c["cpu"],
                **d,
                "total_ticks": total,
                "busy_frac": (total - idle) / total if total else math.nan,
                "steal_frac": d["steal"] / total if total else math.nan,
            }
        )
    return out


def parse_migrations(trace: str, pids: dict[int, str]) -> dict:
    """Count sched_migrate_task events of our tasks between our two trace markers.

    `pids` maps pid -> role. Returns {'by_role': {role: n}, 'window_s': float|None,
    'events': [(ts, pid, role, orig, dest)], 'markers': n, 'lost': n} -- 'lost' > 0: the
    ring buffer dropped events (the count, or the number of LOST markers without one), so
    by_role is a lower bound. Any trace option layout parses (perfbook.probes.ftrace).
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
    return {
        "by_role": by_role,
        "window_s": (t1 - t0) if (t0 is not None and t1 is not None) else None,
        "events": events,
        "markers": markers,
        "lost": st["lost"] or st["lost_lines"],
    }


def parse_sched_debug(text: str) -> dict[str, str]:
    """The 'sysctl_sched' block of sched/debug (readable even where the knobs are not)."""
    out = {}
    for m in re.finditer(r"^\s*\.(sysctl_sched_\w+)\s*:\s*(.+?)\s*$", text, re.M):
        out[m.group(1)] = m.group(2)
    return out


def parse_perf(stderr: str) -> dict[str, float]:
    """perf stat -x , output -> {event: count} (NaN where not counted)."""
    out = {}
    for ln in stderr.splitlines():
        f = ln.split(",")
        if len(f) >= 3 and f[2] in PERF_EVENTS:
            try:
                out[f[2]] = float(f[0])
            except ValueError:
                out[f[2]] = math.nan
    return out
