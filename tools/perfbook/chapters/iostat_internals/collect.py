"""iostat_internals: the measurement (the only part of the chapter, with workload.py, that
touches the host).

A phased workload (fio, plus two small phases of our own) runs on a scratch file in a private
directory (perfbook.hoststate.scratch: under the scratch parent of perfbook.hoststate.statedir, or under the
scratch_parent parameter), on whatever block device holds it. While it runs:

* sysstat's `iostat -x -d -k -y <dev> 1` reports every interval; the moment a report line
  arrives we snapshot /proc/diskstats ourselves, so our interval and sysstat's end within a
  fraction of a millisecond of each other. A report read late (the run was stopped or
  starved, and newer ones waited behind it) is marked, and the analysis pairs only reports
  read at once, one interval apart (analysis.spans_claim);
* every phase is a measured window (ctx.window, perfbook.hoststate.monitor): a gap inside one (the run
  stopped or starved) means its steady IOPS and trace window are wrong, and nothing is
  published;
* in the middle of every phase a short trace window records block:block_io_start /
  block_io_done (the points where the kernel does its accounting) and block:block_rq_issue /
  block_rq_complete (the device's share), in a private ftrace instance filtered to the
  device, bracketed by two diskstats snapshots.

Everything raw is kept (counters, sysstat's printed columns, per-window trace summaries and a
bounded random sample of per-request latencies); analysis.py recomputes the iostat columns
and the cross-checks from it.
"""
from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import time
from pathlib import Path

from perfbook.analysis import stats
from perfbook.hoststate import statedir
from perfbook.probes.blockdev import device_of, kernel_dev_t, mount_of, queue_facts
from perfbook.core.errors import ParameterError, PerfbookError
from perfbook.core.proc import die_with_parent, run_group
from perfbook.hoststate.scratch import Scratch
from perfbook.hoststate.tracefs import TraceSession, preflight as tracefs_preflight
from .analysis import off_claim, steady_iops, trace_vs_await
from .parse import occupancy, pair_requests, parse_trace
from .spec import (IOSTAT_INTERVAL_S, PHASE_TAIL_S, PHASES, SAMPLER_RT_PRIO, TRACE_EVENTS,
                   TRACE_POSTROLL_S, TRACE_PREROLL_S)
from .workload import _IostatFollower, _kill, _realtime, _Workload, snapshot
from perfbook.analysis.repetition import repetition


def scratch_parent_of(p: dict) -> Path:
    """The directory the scratch directory goes into: 'auto' is perfbook.hoststate.statedir's private one."""
    return statedir.scratch_parent() if p["scratch_parent"] == "auto" else Path(p["scratch_parent"])


def _optional() -> dict[str, str]:
    missing = {}
    if not shutil.which("iostat"):
        missing["sysstat"] = "sysstat's iostat is not installed (apt-get install sysstat)"
    elif not shutil.which("stdbuf"):
        missing["sysstat"] = "stdbuf (coreutils) is missing, so iostat's reports can't be followed line by line"
    r = tracefs_preflight(need_uprobes=False)
    if r:
        missing["tracepoints"] = r[0]
    return missing


def _round_order(p: dict, r: int) -> list[str]:
    """The phases of round r: every round starts one phase later (rotation), so order effects spread."""
    ph = p["phases"]
    k = r % len(ph)
    return ph[k:] + ph[:k]


def _layout(scratch: Path, p: dict) -> None:
    r = run_group(["fio", "--name=layout", f"--filename={scratch / 'data.bin'}",
                   f"--size={p['file_mb']}M", "--rw=write", "--bs=1M", "--direct=1",
                   "--ioengine=psync", "--output-format=json"], preexec_fn=die_with_parent)
    if r.returncode != 0:
        last = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
        raise PerfbookError(f"fio could not lay out the scratch file: {last[0]} "
                            "(does the filesystem support O_DIRECT?)")


def _arm(session: TraceSession, major: int, minor: int) -> None:
    session.set_option("tracing_on", "0")
    session.set_option("trace_clock", "mono")       # same clock as time.monotonic_ns()
    session.set_option("buffer_size_kb", "32768")
    flt = f"dev == {kernel_dev_t(major, minor)}"
    for ev in TRACE_EVENTS:
        f = session.buffer / "events" / ev / "filter"
        if f.exists():
            f.write_text(flt)
        session.enable(ev)


def _summarize_window(text: str, w0: int, w1: int, n_sample: int, rng: random.Random):
    import numpy as np
    events = parse_trace(text)
    recs, unmatched, intervals, dev_intervals = pair_requests(events, w0, w1)
    occ, busy = occupancy(intervals, w0, w1)
    dev_occ, dev_busy = occupancy(dev_intervals, w0, w1)
    rows = []
    for op in ("all", "read", "write", "discard", "flush"):
        sel = [r for r in recs if op == "all" or r["op"] == op]
        q = np.array([r["q2c_ns"] for r in sel], dtype=float) / 1000
        d = np.array([r["d2c_ns"] for r in sel if r["d2c_ns"] is not None], dtype=float) / 1000
        if op != "all" and not len(q):
            continue
        row = {"op": op, "n": len(q), "n_d2c": len(d),
               "q2c_max_us": float(q.max()) if len(q) else float("nan"),
               "q2c_sum_us": float(q.sum()) if len(q) else 0.0,
               "q2c_mean_us": float(q.mean()) if len(q) else float("nan"),
               "d2c_mean_us": float(d.mean()) if len(d) else float("nan")}
        for pct in (50, 90, 99):
            row[f"q2c_p{pct}_us"] = float(np.percentile(q, pct)) if len(q) else float("nan")
        if op == "all":
            row.update({"window_s": (w1 - w0) / 1e9, "occupancy": occ, "busy_frac": busy,
                        "dev_occupancy": dev_occ, "dev_busy_frac": dev_busy,
                        "events": len(events), **unmatched})
        rows.append(row)
    pick = recs if len(recs) <= n_sample else rng.sample(recs, n_sample)
    sample = [{"op": r["op"], "q2c_us": r["q2c_ns"] / 1000,
               "d2c_us": (r["d2c_ns"] / 1000) if r["d2c_ns"] is not None else float("nan")}
              for r in pick]
    return rows, sample


def fs_facts(mount: dict, dev: str, root: str = "/") -> dict:
    """The file system under the scratch directory, for reading the fsync phase: whether ext4
    has a journal (/sys/fs/ext4/<name>/journal_task names the jbd2 thread, '<none>' without a
    journal), its options as ext4 reports them, and the disk's largest segment. Read-only;
    None for what this kernel or file system does not expose."""
    def read(rel):
        try:
            return (Path(root) / rel).read_text().strip()
        except OSError:
            return None
    out = {"journal": None, "ext4_options": None,
           "max_segment_size": read(f"sys/block/{dev}/queue/max_segment_size")}
    src = (mount or {}).get("source") or ""
    if (mount or {}).get("fstype") == "ext4" and src.startswith("/dev/"):
        name = os.path.basename(src)
        task = read(f"sys/fs/ext4/{name}/journal_task")
        out["journal"] = None if task is None else ("none" if task == "<none>" else task)
        opts = read(f"proc/fs/ext4/{name}/options")
        out["ext4_options"] = None if opts is None else ",".join(opts.split())
    return out


def _config_hz() -> int | None:
    import gzip
    import platform
    for path in ("/proc/config.gz", f"/boot/config-{platform.release()}"):
        try:
            raw = gzip.open(path, "rt").read() if path.endswith(".gz") else Path(path).read_text()
        except OSError:
            continue
        m = re.search(r"^CONFIG_HZ=(\d+)", raw, re.M)
        if m:
            return int(m.group(1))
    return None


def measure(ctx) -> None:
    """Run the phased workload on the device under the scratch directory, with iostat
    following it and a trace window in every phase, into ctx.writer."""
    import pandas as pd
    p, w = ctx.p, ctx.writer
    optional = _optional()
    if not p["trace"]:
        optional["tracepoints"] = "disabled by the parameter trace=False"
    parent = scratch_parent_of(p)
    if not parent.is_dir():
        raise ParameterError(f"scratch_parent {parent} is not a directory")
    dev, major, minor = device_of(parent)
    if p["device"] not in ("auto", dev):
        raise ParameterError(f"scratch_parent {parent} is on {dev}, not on {p['device']}; "
                             "the workload must run on the device we measure")
    if not Path(f"/sys/block/{dev}/mq").is_dir() and "tracepoints" not in optional:
        optional["tracepoints"] = f"{dev} is not a request-based (blk-mq) device: no block_io_* events"
    for part, why in optional.items():
        w.skip(part, why)
    sd = ctx.undo.enter_context(Scratch("iostat_internals", parent=None if p["scratch_parent"] == "auto"
                                        else parent, say=ctx.say))
    scratch = sd.dir
    mount = mount_of(parent)
    w.extra["device"] = {"name": dev, "major": major, "minor": minor, **queue_facts(dev), "mount": mount}
    w.extra["filesystem"] = fs_facts(mount, dev)
    w.extra["_tool_cmds"] = {"fio": ["fio", "--version"], "iostat": ["iostat", "-V"]}
    w.extra["clock"] = {"CONFIG_HZ": _config_hz(), "USER_HZ": os.sysconf("SC_CLK_TCK")}
    rep = repetition("phases", p["phases"], p, "rep_")
    prog = ctx.progress(1 + len(p["phases"]))
    prog.note(f"device {dev} ({major}:{minor}); scratch file of {p['file_mb']} MiB under {parent}")
    _layout(scratch, p)
    prog.step("scratch file laid out")
    state = {"round": -1, "phase": "idle"}
    iostat = follower = None
    if "sysstat" not in optional:
        env = {**os.environ, "LC_ALL": "C", "S_COLORS": "never"}
        env.pop("S_TIME_FORMAT", None)
        rt = ["chrt", "-f", str(SAMPLER_RT_PRIO)] if (os.geteuid() == 0 and shutil.which("chrt")) else []
        w.extra["sampling"] = {"iostat_and_sampler_sched_fifo": bool(rt)}
        iostat = subprocess.Popen([*rt, "stdbuf", "-oL", "iostat", "-x", "-d", "-k", "-y", dev,
                                   str(int(IOSTAT_INTERVAL_S))],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True, env=env, start_new_session=True,
                                  preexec_fn=die_with_parent)
        ctx.undo.callback(_kill, iostat)
        follower = _IostatFollower(iostat, dev, lambda: (state["round"], state["phase"]))
        follower.start()
        time.sleep(1.3)                     # the first report is the baseline
    session = None
    if "tracepoints" not in optional:
        session = ctx.undo.enter_context(TraceSession(tag="iostat", log=prog.note))
        _arm(session, major, minor)
    running: list = []                      # the phase's workload while it runs
    ctx.undo.callback(lambda: running and running[0].stop())
    phase_rows, win_rows, raw_traces = [], [], []
    i = 0
    for rd in rep.rounds():
        rnd = rd.index - rep.warmup          # measured rounds from 0; warm-up rounds are negative
        if rd.index:
            prog.note(f"after round {rd.index}: {rep.status()}")
        prog.expect(len(p["phases"]))
        for name in _round_order(p, rd.index):
            state["round"], state["phase"] = rnd, name
            # the phase's numbers (its steady IOPS, its trace window) assume the run went on
            # throughout: a gap in it (perfbook.hoststate.monitor) rejects the run
            with ctx.window(f"{name} round {rd.index}", gap_rejects=True):
                t0 = time.monotonic_ns()
                running[:] = [_Workload(name, p, scratch, p["phase_seconds"], p["seed"] + i)]
                i += 1
                running[0].start()
                time.sleep(1.0)                 # warm-up before the window
                wid = len(phase_rows)           # one trace window per phase run
                if session is not None:
                    session.clear()
                    session.set_option("tracing_on", "1")
                prog.note(f"{name}: workload running, iostat sampling" + (", tracing on" if session else ""))
                if session is not None:
                    time.sleep(TRACE_PREROLL_S)  # requests completing in the window started after this
                with _realtime():
                    a = snapshot(dev)
                time.sleep(p["trace_window_s"])
                with _realtime():
                    b = snapshot(dev)
                if session is not None:
                    time.sleep(TRACE_POSTROLL_S)
                    session.set_option("tracing_on", "0")
                # the steady part of the phase ends just before the workload does
                time.sleep(max(0.0, (t0 + int((p["phase_seconds"] - PHASE_TAIL_S) * 1e9)
                                     - time.monotonic_ns()) / 1e9))
                with _realtime():
                    c = snapshot(dev)
            steady = steady_iops(a, c)
            rep.add(name, steady)
            for edge, s in (("start", a), ("end", b), ("phase_end", c)):
                win_rows.append({"window": wid, "round": rnd, "phase": name, "edge": edge, **s})
            if session is not None:
                # parsed after the run: parsing here would hold the GIL and delay the follower
                raw_traces.append((wid, rnd, name, a["t_ns"] + a["read_ns"] // 2,
                                   b["t_ns"] + b["read_ns"] // 2,
                                   session.buffer_stats().get("overrun", 0),
                                   session.file("trace").read_bytes()))
            res = running[0].wait(timeout=p["phase_seconds"] + 60)
            running.clear()
            phase_rows.append({"round": rnd, "phase": name, "what": PHASES[name]["what"],
                               "warmup": rd.warmup, "t_start_ns": t0, "t_end_ns": time.monotonic_ns(),
                               "steady_s": (c["t_ns"] - a["t_ns"]) / 1e9, "steady_iops": steady, **res})
            prog.step(f"round {rd.index + 1}{' (warm-up)' if rd.warmup else ''} {name}")
    prog.note(f"repetition stopped ({rep.stopped_by}): {rep.status()}")
    state["phase"] = "idle"
    if follower is not None:
        time.sleep(1.2)                     # one more report covers the last phase's end
        _kill(iostat)
        follower.join(5)
        if follower.error:
            raise PerfbookError(f"reading iostat's output failed: {follower.error}")
        if len(follower.rows) < 3:
            raise PerfbookError("iostat printed fewer than 3 reports; is the device name right?")
        intervals = pd.DataFrame(follower.rows)
        w.add_table("intervals", intervals)
        late = off_claim(intervals)
        if late:
            w.notes.append(f"{len(late)} of {len(intervals) - 1} iostat intervals do not span what sysstat's "
                           f"report claims (reports read late: the run was stopped or starved); the analysis "
                           f"leaves them out (seq {', '.join(map(str, late[:10]))}"
                           f"{', ...' if len(late) > 10 else ''})")
    else:
        w.notes.append("no sysstat: intervals were not recorded")
    w.add_table("phases", pd.DataFrame(phase_rows))
    w.add_table("repetition", pd.DataFrame(rep.records()))
    w.add_table("windows", pd.DataFrame(win_rows))
    _trace_tables(w, p, raw_traces, win_rows)
    prog.note("done; the scratch file is removed with its directory")


def _trace_tables(w, p: dict, raw_traces: list, win_rows: list) -> None:
    """The trace windows' summaries and request sample, and how close they came to await."""
    import pandas as pd
    rng = random.Random(p["seed"])
    tw_rows, sample_rows = [], []
    for wid, rnd, name, w0, w1, overrun, raw in raw_traces:
        tw, sample = _summarize_window(raw.decode(errors="replace"), w0, w1, p["trace_sample"], rng)
        tw_rows += [{"window": wid, "round": rnd, "phase": name, "overrun": overrun, **r} for r in tw]
        sample_rows += [{"window": wid, "round": rnd, "phase": name, **r} for r in sample]
    if not tw_rows:
        return
    w.add_table("trace_windows", pd.DataFrame(tw_rows))
    w.add_table("trace_sample", pd.DataFrame(sample_rows))
    # two instruments, two request sets at the window edges: their closeness is a result
    # (recorded here, shown by the chapter), not a pass/fail condition
    tv = trace_vs_await(pd.DataFrame(win_rows), pd.DataFrame(tw_rows))
    mv = tv[tv["op"].isin(["read", "write"]) & (tv["n_trace"] >= 200)]
    rel = (mv["diff_ms"] / mv["await_ms"]).abs()
    w.extra["trace_vs_await"] = {
        "n_compared": int(len(mv)),
        "median_abs_diff_ms": float(mv["diff_ms"].abs().median()) if len(mv) else None,
        "max_abs_diff_ms": float(mv["diff_ms"].abs().max()) if len(mv) else None,
        "median_rel_pct": float(100 * rel.median()) if len(mv) else None,
        "within_5pct_2us": float((mv["diff_ms"].abs() <= 0.05 * mv["await_ms"] + 0.002).mean())
        if len(mv) else None}
