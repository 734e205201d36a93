"""What the experiment is: the variants, the loads, the seed's knobs and the rules fixed in
advance (disturbed trials, fixed-rate trials that could not keep up). No I/O beyond
reading this CPU's L2 size from sysfs."""
from __future__ import annotations

import re
from pathlib import Path

HELPER = "prefork"                      # tools/c/prefork.c
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
ORDER = list(VARIANTS)
BASELINE = "unpinned"
LOADS = ("sat", "rate")
LOAD_TITLE = {"rate": "fixed rate", "sat": "saturation"}

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

# The scheduler features of Linux v6.18 in the order of kernel/sched/features.h, with their
# defaults: bit i of sysctl_sched_features (printed in sched/debug) is feature i. Read from the
# v6.18.2 stable tree (x86-64: CONFIG_PREEMPT_RT off, HAVE_RT_PUSH_IPI defined).
SCHED_FEATURES_6_18 = (
    ("PLACE_LAG", True), ("PLACE_DEADLINE_INITIAL", True), ("PLACE_REL_DEADLINE", True),
    ("RUN_TO_PARITY", True), ("PREEMPT_SHORT", True), ("NEXT_BUDDY", False), ("PICK_BUDDY", True),
    ("CACHE_HOT_BUDDY", True), ("DELAY_DEQUEUE", True), ("DELAY_ZERO", True),
    ("WAKEUP_PREEMPTION", True), ("HRTICK", False), ("HRTICK_DL", False), ("NONTASK_CAPACITY", True),
    ("TTWU_QUEUE", True), ("SIS_UTIL", True), ("WARN_DOUBLE_CLOCK", False), ("RT_PUSH_IPI", True),
    ("RT_RUNTIME_SHARE", False), ("LB_MIN", False), ("ATTACH_AGE_LOAD", True), ("WA_IDLE", True),
    ("WA_WEIGHT", True), ("WA_BIAS", True), ("UTIL_EST", True), ("LATENCY_WARN", False),
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
                    return int(m.group(1)) * {"": 1, "K": 1024, "M": 1 << 20, "G": 1 << 30}[m.group(2)]
        except OSError:
            continue
    return None
