"""The run monitor: what else the machine did while a chapter measured, and whether the run
itself made progress (a gap: it was stopped, frozen, paused or starved).

perfbook.framework.sequence.collect starts one for every collect, just before the chapter's measure(ctx),
and stops it when measure returns; its record is the manifest's `disturbance` field
(perfbook.data.dataset, schema 3). A chapter marks the parts whose numbers it reports with
`with ctx.window("name"):` (perfbook.framework.contract.Context.window); the record then has the same
figures per window, and `ctx.window(name, gap_rejects=True)` says that a gap inside that window
makes its numbers wrong, so the run is not published (perfbook.data.writer.DatasetWriter.reject).

What it records, every PERIOD_S (SLOW_EVERY-th tick and at each window edge for /proc/stat):

* the measuring thread's state (/proc/<pid>/stat: 'T' = stopped by SIGSTOP or a debugger) and
  its schedstat (/proc/<pid>/schedstat: ns on the CPU, ns runnable but waiting on a run queue);
* the monitor's own CLOCK_MONOTONIC: a tick that comes much later than planned means the
  monitor itself did not run (the run's cgroup frozen, the VM paused where its monotonic
  clock goes on, or the whole machine starved);
* /proc/loadavg (1-minute load, runnable tasks, which count the monitor itself while it reads),
  /proc/stat (steal time and all CPU time, context switches) and, where /sys exposes it, the
  CPUs' current frequency (cpufreq scaling_cur_freq, kHz).

Why a process and not a thread of the measuring process: a thread needs the GIL to take its
timestamp, and a C extension that holds the GIL for a second (a regex over a large trace, a
numpy reduction) would look like a gap of a second. The monitor is a separate process, in a
session of its own (a SIGSTOP of the run's process group does not stop it: it sees the run in
state 'T'), but in the run's cgroup (a freeze of the group stops it too: it sees its own clock
jump). It reads a few small /proc files per tick and uses only the standard library.

Its cost, measured on the book's 2-CPU VM: 30-65 ms of CPU to start (`python -S`), then
0.15-0.2 % of one CPU (ten ticks a second of small /proc reads; 0.14 s of CPU in a 35 s quick
iostat_internals collect, start included). Each run's own figure is in its record
(monitor_cpu_s, monitor_start_cpu_s); tests/test_monitor.py prints it. Each window edge adds
one wakeup of the monitor.

The thresholds (GAP_S per kind of gap, STARVED_RAN, STEAL_PCT) are explained where they are
defined.
"""

from __future__ import annotations

import json
import os
import resource
import select
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from perfbook.core.proc import die_with_parent
from perfbook.hoststate import cgroup

PERIOD_S = 0.1  # a tick every 100 ms: a gap's start and end are known to +-0.1 s
SLOW_EVERY = 10  # /proc/stat and cpufreq every 10th tick (1 s): /proc/stat is the costly read
# one sample, as a list in this order (a long run holds tens of thousands)
FIELDS = (
    "t_ns",
    "edge",
    "state",
    "run_ns",
    "wait_ns",
    "load1",
    "runnable",
    "cpu_ticks",
    "steal_ticks",
    "ctxt",
    "cpu_khz",
    "busy_ticks",
    "cg_usec",
)

# A gap is a stretch in which the run made no progress, at least GAP_S[kind] long: each well
# above what the book's 2-CPU VM does on its own. Measured there with monitors watching a
# sleeping, a busy and a 10-ms-sleeping child for 40-60 s, ten times, idle and with two busy
# loops `while :; do :; done` on its two CPUs, while other helpers ran test suites (load 4-10):
#   stopped      never seen: nothing stops a run but a signal or a debugger, so 0.3 s (three
#                ticks) is enough; a stop of half a second already spoils a phase of seconds
#   not running  the monitor's ticks were at most 0.09 s late (0.03 s with the busy loops): 1 s
#   starved      a runnable child ran for at most STARVED_RAN of consecutive ticks for up to
#                0.6 s (the 10-ms sleeper, busy loops, load 10): 2 s
GAP_S = {"stopped": 0.3, "not running": 1.0, "starved": 2.0}
# A tick is starved when the measuring thread was runnable (state R) at both of its ends but
# ran for at most this share of it. CFS gives a runnable task a slice within a few ms: with the
# busy loops, a CPU-bound child ran for at most 10 % of consecutive ticks for up to 2.5 s, but
# at most 1 % of them for 0.1 s. A throttled cgroup or real-time hogs leave it 0 %.
STARVED_RAN = 0.01
# Steal time at or above this share of all CPU time over the run marks it disturbed. On the
# book's VM (firecracker on a shared host) it was 0.2-1.1 % over those minutes and 1.9-3.5 %
# since boot: a few percent is this VM's normal, not a disturbance. #42 compares it with the
# host's own distribution.
STEAL_PCT = 25.0
# CPU time used outside the run's cgroup at or above this share of all CPU time (both CPUs of
# the book's VM) marks the run disturbed: a busy neighbour competes for the CPUs the run
# measures on, without stopping it (CFS shares the CPUs, so no gap shows). Measured on the
# book's VM with an example collect of 4 s: 0.3-0.9 % idle (3 runs), 97 % with two busy loops
# `while :; do :; done` started mid-run, 42 % beside another session's test suite.
FOREIGN_PCT = 30.0


# -- the monitor process (python -S -m perfbook monitor PID PERIOD_S) ---------------------------


def _proc_stat() -> tuple[int | None, int | None, int | None, int | None]:
    """(all CPU time, steal time, context switches, busy time) from /proc/stat, in USER_HZ
    ticks; busy is user + nice + system + irq + softirq (all but idle, iowait and steal)."""
    try:
        with open("/proc/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None, None, None, None
    cpu = steal = ctxt = busy = None
    for line in text.splitlines():
        if line.startswith(b"cpu "):
            nums = [int(x) for x in line.split()[1:]]
            # user nice system idle iowait irq softirq steal [guest guest_nice]: guest time
            # is already in user/nice, so the total is the first eight
            cpu, steal = sum(nums[:8]), (nums[7] if len(nums) > 7 else None)
            busy = sum(nums[:3]) + sum(nums[5:7])
        elif line.startswith(b"ctxt "):
            ctxt = int(line.split()[1])
    return cpu, steal, ctxt, busy


def _own_cgroup_stat() -> str | None:
    """The cpu.stat file of the cgroup v2 group this process is in (the run's: the monitor
    starts in it; perfbook.hoststate.cgroup), None without one or where it can't be read.
    cgroup v2 keeps usage_usec in every group, with or without the cpu controller."""
    root, here = cgroup.mount(), cgroup.current()
    if root is None or here is None:
        return None
    path = f"{root}{here.rstrip('/')}/cpu.stat"
    return path if os.path.isfile(path) else None


def _cg_usec(fd: int | None) -> int | None:
    """usage_usec of a cgroup's cpu.stat: the CPU time of every task in the run's cgroup."""
    raw = _pread(fd)
    if not raw:
        return None
    for line in raw.splitlines():
        if line.startswith(b"usage_usec "):
            return int(line.split()[1])
    return None


def _freq_files() -> list[str]:
    base = "/sys/devices/system/cpu"
    try:
        cpus = [d for d in os.listdir(base) if d.startswith("cpu") and d[3:].isdigit()]
    except OSError:
        return []
    out = [f"{base}/{c}/cpufreq/scaling_cur_freq" for c in sorted(cpus, key=lambda c: int(c[3:]))]
    return [p for p in out if os.path.exists(p)]


def _cpu_khz(files: list[str]) -> int | None:
    """The mean current frequency of the CPUs that expose one (kHz), None when none does."""
    vals = []
    for p in files:
        try:
            with open(p, "rb") as f:
                vals.append(int(f.read()))
        except (OSError, ValueError):
            continue
    return round(sum(vals) / len(vals)) if vals else None


def _open(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


def _pread(fd: int | None) -> bytes | None:
    """A /proc file read again from its start (pread at 0 has the kernel generate it anew)."""
    if fd is None:
        return None
    try:
        return os.pread(fd, 4096, 0)
    except OSError:
        return None


def _child(pid: int, period_s: float) -> None:
    """Sample until stdin reaches EOF (the run closed it, or died); a byte on stdin asks for a
    full sample now (a window edge). Then print the samples as one JSON object."""
    stat_fd, sched_fd = _open(f"/proc/{pid}/stat"), _open(f"/proc/{pid}/schedstat")
    load_fd = _open("/proc/loadavg")
    cg = _own_cgroup_stat()
    cg_fd = _open(cg) if cg else None
    freqs = _freq_files()
    samples: list = []
    period = int(period_s * 1e9)
    poll = select.poll()
    poll.register(0, select.POLLIN | select.POLLHUP)
    tick, nxt, edge, done = 0, time.monotonic_ns(), 0, False
    start_cpu = None
    while True:
        t = time.monotonic_ns()
        st, sc, la = _pread(stat_fd), _pread(sched_fd), _pread(load_fd)
        state = st.rsplit(b")", 1)[1].split()[0].decode() if st else None
        run_ns, wait_ns = (int(x) for x in sc.split()[:2]) if sc else (None, None)
        lf = la.split() if la else None
        row = [
            t,
            edge,
            state,
            run_ns,
            wait_ns,
            float(lf[0]) if lf else None,
            int(lf[3].split(b"/")[0]) if lf else None,
            None,
            None,
            None,
            None,
            None,
            None,
        ]
        if edge or done or tick % SLOW_EVERY == 0:
            cpu, steal, ctxt, busy = _proc_stat()
            row[7:10] = cpu, steal, ctxt
            row[10] = _cpu_khz(freqs)
            row[11], row[12] = busy, _cg_usec(cg_fd)
        samples.append(row)
        if start_cpu is None:
            ru = resource.getrusage(resource.RUSAGE_SELF)
            start_cpu = ru.ru_utime + ru.ru_stime
        if done:
            break
        tick, edge = tick + 1, 0
        nxt += period
        now = time.monotonic_ns()
        if nxt <= now:  # late (a gap): the next tick a period from now
            nxt = now + period
        for _fd, _ev in poll.poll(max(0, (nxt - now) // 1_000_000)):
            data = os.read(0, 4096)
            if data:
                edge = 1
            else:
                done = True  # one last full sample, then the record
    ru = resource.getrusage(resource.RUSAGE_SELF)
    json.dump(
        {
            "pid": pid,
            "period_ns": period,
            "fields": FIELDS,
            "samples": samples,
            "cpu_s": ru.ru_utime + ru.ru_stime,
            "start_cpu_s": start_cpu,
            "hz": os.sysconf("SC_CLK_TCK"),
        },
        sys.stdout,
    )
    sys.stdout.flush()


# -- in the measuring process ----------------------------------------------------------------


class RunMonitor:
    """The monitor process of one run (see the module doc): start(), window(name) around the
    parts a chapter reports, then stop() for the record (summarize()); close() on every path."""

    def __init__(self, pid: int | None = None, period_s: float = PERIOD_S):
        self.pid = pid or os.getpid()
        self.period_s = period_s
        self.windows: list[dict] = []
        self.proc = None

    def start(self) -> RunMonitor:
        """Start the monitor process; if it can't start, the record will say it recorded
        nothing (a run is not failed for lack of a witness)."""
        # -S: the standard library is all it needs (the venv's site hooks cost 20 ms of CPU);
        # run from the directory that holds this package, whatever PERFBOOK_ROOT says
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-S",
                    "-m",
                    "perfbook",
                    "monitor",
                    str(self.pid),
                    repr(self.period_s),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd=Path(__file__).resolve().parents[2],
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        except OSError:
            self.proc = None
        return self

    def mark(self) -> None:
        """Ask the monitor for a full sample now (a window edge); a no-op once it is gone."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.stdin.write(b"w")
                self.proc.stdin.flush()
            except OSError:
                pass

    def window(self, name: str, gap_rejects: bool = False):
        """A context manager around a measured window (see perfbook.framework.contract.Context.window)."""

        @contextmanager
        def cm():
            self.mark()
            w = {
                "name": str(name),
                "start_ns": time.monotonic_ns(),
                "end_ns": None,
                "gap_rejects": bool(gap_rejects),
            }
            self.windows.append(w)
            try:
                yield w
            finally:
                w["end_ns"] = time.monotonic_ns()
                self.mark()

        return cm()

    def stop(self, timeout: float = 10.0) -> dict:
        """End the monitor and return the run's record (summarize()). A monitor that died or
        printed nothing gives a record that says so (and no verdict): a run is not failed for
        lack of a witness."""
        raw = None
        if self.proc is not None:
            try:
                out, _ = self.proc.communicate(timeout=timeout)  # closes stdin: the monitor ends
                raw = json.loads(out) if out else None
            except (ValueError, OSError, subprocess.TimeoutExpired):
                raw = None
            finally:
                self.close()
        return summarize(raw, self.windows)

    def close(self) -> None:
        """Kill and reap the monitor if it still runs (every exit path)."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    f.close()
                except (OSError, ValueError):
                    pass


# -- the record: raw samples -> figures, gaps, verdict ---------------------------------------


def _stats(vals: list) -> dict | None:
    v = [x for x in vals if x is not None]
    if not v:
        return None
    return {"min": min(v), "mean": round(sum(v) / len(v), 3), "max": max(v)}


def _over(rows: list[dict], hz: int | None = None) -> dict:
    """Steal share, context-switch rate, the share of CPU time used outside the run's cgroup,
    load, runnable tasks, frequency and the measuring thread's run-queue wait over the
    samples `rows` (first to last; `hz`: USER_HZ, the ticks of /proc/stat)."""
    out: dict = {}
    slow = [r for r in rows if r["cpu_ticks"] is not None]
    if len(slow) >= 2:
        a, b = slow[0], slow[-1]
        dcpu = b["cpu_ticks"] - a["cpu_ticks"]
        if dcpu > 0 and a["steal_ticks"] is not None:
            out["steal_pct"] = round(100 * (b["steal_ticks"] - a["steal_ticks"]) / dcpu, 2)
        dt = (b["t_ns"] - a["t_ns"]) / 1e9
        if dt > 0 and a["ctxt"] is not None:
            out["ctxt_per_s"] = round((b["ctxt"] - a["ctxt"]) / dt)
        if dcpu > 0 and hz and a.get("busy_ticks") is not None and a.get("cg_usec") is not None:
            # CPU time spent outside the run's cgroup, as a share of all CPU time: another
            # user's work, a busy neighbour (the run's own children are in its cgroup)
            other = (b["busy_ticks"] - a["busy_ticks"]) / hz - (b["cg_usec"] - a["cg_usec"]) / 1e6
            out["foreign_pct"] = round(max(0.0, 100 * other * hz / dcpu), 2)
    out["load1"] = _stats([r["load1"] for r in rows])
    out["runnable"] = _stats([r["runnable"] for r in rows])
    out["cpu_khz"] = _stats([r["cpu_khz"] for r in rows])
    waits = [r for r in rows if r["wait_ns"] is not None]
    if len(waits) >= 2 and waits[-1]["t_ns"] > waits[0]["t_ns"]:
        out["wait_pct"] = round(
            100
            * (waits[-1]["wait_ns"] - waits[0]["wait_ns"])
            / (waits[-1]["t_ns"] - waits[0]["t_ns"]),
            2,
        )
    return out


def find_gaps(rows: list[dict], period_ns: int, min_s: float | None = None) -> list[dict]:
    """Every stretch in which the run made no progress, at least GAP_S[kind] (or `min_s`)
    long, in time order.
    Each: kind, start_ns/end_ns, seconds; the samples place each end within a tick
    (PERIOD_S), and the last tick may already be after the run went on.

      stopped      the measuring thread was in state T (SIGSTOP, SIGTSTP, a debugger)
      starved      it was runnable (state R) from one tick to the next but ran for at most
                   STARVED_RAN of it: it waited for a CPU (a throttled cgroup, real-time
                   hogs). Read from its CPU time, not from schedstat's wait, which the kernel
                   adds only when the wait ends (sched_info_arrive): a thread starved for 5 s
                   shows no wait until it runs again
      not running  the monitor's own tick came late (it did not run either: the run's cgroup
                   frozen, the VM paused, the whole machine starved)"""
    gaps = []

    def stretches(kind, flags):
        run = None
        for (a, b), on in zip(zip(rows, rows[1:]), flags):
            if on:
                run = run or [a["t_ns"], b["t_ns"]]
                run[1] = b["t_ns"]
            elif run is not None:
                gaps.append({"kind": kind, "start_ns": run[0], "end_ns": run[1]})
                run = None
        if run is not None:
            gaps.append({"kind": kind, "start_ns": run[0], "end_ns": run[1]})

    pairs = list(zip(rows, rows[1:]))
    # stopped: from the first sample that saw state T to the first that did not
    stretches("stopped", [a["state"] in ("T", "t") for a, _ in pairs])
    stretches(
        "starved",
        [
            a["state"] == "R"
            and b["state"] == "R"
            and a["run_ns"] is not None
            and b["run_ns"] - a["run_ns"] <= STARVED_RAN * (b["t_ns"] - a["t_ns"])
            for a, b in pairs
        ],
    )
    for a, b in pairs:  # not running: the tick itself was late
        if b["t_ns"] - a["t_ns"] > period_ns:
            gaps.append(
                {"kind": "not running", "start_ns": a["t_ns"] + period_ns, "end_ns": b["t_ns"]}
            )
    for g in gaps:
        g["seconds"] = round((g["end_ns"] - g["start_ns"]) / 1e9, 2)
    return sorted(
        (g for g in gaps if g["seconds"] >= (GAP_S[g["kind"]] if min_s is None else min_s)),
        key=lambda g: g["start_ns"],
    )


def summarize(raw: dict | None, windows: list[dict] = ()) -> dict:
    """The manifest's `disturbance` record from the monitor's output `raw` and the windows the
    chapter marked: the run's figures, each window's, the gaps, and the verdict
    (`disturbed`, `reasons`; `rejects`: gaps inside windows marked gap_rejects)."""
    base = {
        "thresholds": {
            "gap_s": GAP_S,
            "starved_ran": STARVED_RAN,
            "steal_pct": STEAL_PCT,
            "foreign_pct": FOREIGN_PCT,
        }
    }
    if not raw or not raw.get("samples"):
        return {
            **base,
            "recorded": False,
            "disturbed": None,
            "reasons": ["the run monitor recorded nothing"],
            "rejects": [],
        }
    rows = [dict(zip(raw["fields"], s)) for s in raw["samples"]]
    hz = raw.get("hz")
    t0 = rows[0]["t_ns"]
    span = (rows[-1]["t_ns"] - t0) / 1e9
    gaps = find_gaps(rows, raw["period_ns"])

    def at(ns):
        return round((ns - t0) / 1e9, 2)

    wins = []
    for w in windows:
        end = w["end_ns"] if w["end_ns"] is not None else rows[-1]["t_ns"]
        inside = [r for r in rows if w["start_ns"] <= r["t_ns"] <= end]
        # a window's counters from the samples that bracket it (its edges asked for them)
        before = [r for r in rows if r["t_ns"] <= w["start_ns"] and r["cpu_ticks"] is not None][-1:]
        after = [r for r in rows if r["t_ns"] >= end and r["cpu_ticks"] is not None][:1]
        # a gap hits the window if they overlap once the gap's last tick is left out (the run
        # may have gone on, and entered the window, just before the monitor's next sample)
        hit = [
            i
            for i, g in enumerate(gaps)
            if g["start_ns"] < end and w["start_ns"] < g["end_ns"] - raw["period_ns"]
        ]
        wins.append(
            {
                "name": w["name"],
                "at_s": at(w["start_ns"]),
                "seconds": round((end - w["start_ns"]) / 1e9, 3),
                **_over(before + inside + after, hz),
                "gaps": hit,
                "gap_rejects": w["gap_rejects"],
            }
        )
    for i, g in enumerate(gaps):
        g["windows"] = [w["name"] for w in wins if i in w["gaps"]]
    reasons = [_gap_text(g, at(g["start_ns"])) for g in gaps]
    run = _over(rows, hz)
    if run.get("steal_pct") is not None and run["steal_pct"] >= STEAL_PCT:
        reasons.append(
            f"steal time was {run['steal_pct']:g} % of all CPU time over the run "
            f"(a disturbance from {STEAL_PCT:g} %)"
        )
    if run.get("foreign_pct") is not None and run["foreign_pct"] >= FOREIGN_PCT:
        reasons.append(
            f"work outside the run used {run['foreign_pct']:g} % of all CPU time over the run "
            f"(a busy neighbour; a disturbance from {FOREIGN_PCT:g} %)"
        )
    rejects = [
        f"{_gap_text(gaps[i], at(gaps[i]['start_ns']))}, inside the measured window "
        f"{w['name']!r}, whose numbers assume the run went on throughout"
        for w in wins
        if w["gap_rejects"]
        for i in w["gaps"]
    ]
    return {
        **base,
        "recorded": True,
        "disturbed": bool(reasons),
        "reasons": reasons,
        "rejects": rejects,
        "clock": "CLOCK_MONOTONIC",
        "t0_ns": t0,
        "seconds": round(span, 2),
        "period_s": raw["period_ns"] / 1e9,
        "samples": len(rows),
        "monitor_cpu_s": round(raw.get("cpu_s", 0.0), 3),
        "monitor_start_cpu_s": round(raw.get("start_cpu_s") or 0.0, 3),
        "monitor_cpu_pct": round(100 * raw.get("cpu_s", 0.0) / span, 3) if span > 0 else None,
        **run,
        "gaps": [
            {
                "kind": g["kind"],
                "at_s": at(g["start_ns"]),
                "seconds": g["seconds"],
                "windows": g["windows"],
            }
            for g in gaps
        ],
        "windows": wins,
    }


def _gap_text(g: dict, at_s: float) -> str:
    what = {
        "stopped": "stopped",
        "starved": "starved (runnable, waiting for a CPU)",
        "not running": "not running, nor was the monitor (a frozen cgroup, a paused VM?)",
    }[g["kind"]]
    return f"{what} for {g['seconds']:g} s at {at_s:g} s into the run"


def verdict_text(rec: dict | None) -> str:
    """One cell for a runs table: 'no', 'yes: <reasons>', or 'not recorded' (older runs)."""
    if not rec or not rec.get("recorded"):
        return "not recorded"
    return "yes: " + "; ".join(rec["reasons"]) if rec["disturbed"] else "no"


def main(argv: list[str]) -> int:
    """`perfbook monitor PID [PERIOD_S]` (RunMonitor starts it, with python -S)."""
    _child(int(argv[0]), float(argv[1]) if len(argv) > 1 else PERIOD_S)
    return 0
