"""measure(ctx): the lab, the interleaved adaptive rounds of both instruments, ping -f, and one
traced run per pinning mode (sched_stage). The only part of the chapter that touches the
network; everything it creates is registered on ctx.undo (the framework unwinds it)."""
from __future__ import annotations

import math
import os
import random
import shutil
import time

import numpy as np

from perfbook.core.errors import MissingPrerequisite
from perfbook.analysis.repetition import repetition
from .lab import Lab, Netserver, netperf_cmd, run_netperf, run_ping, run_rrbench
from .netperf_hist import netperf_rank_samples, netperf_style_percentiles
from .parse import log_histogram, num, parse_sched_trace, sample_stats
from .spec import CLI_ADDR, HIST_LO_US, HIST_PER_DECADE, PIN_HELP, RANK_RULE, SCHED_PINS, SRV_ADDR

# Each path and protocol is warmed by one unrecorded netperf run of this many transactions
# (~0.1 s at loopback latencies): the netserver's first connection, the route and the caches.
# A 1 s run did the same and cost 4 s of every profile.
WARMUP_TRANSACTIONS = 2000
_NQ_NR_NAN = {f"{k}_{pc}_us": math.nan for k in ("nq", "nr") for pc in ("p50", "p90", "p99")}


def measure(ctx) -> None:
    import pandas as pd

    from perfbook.probes import cbuild
    p, w = ctx.p, ctx.writer
    binary = cbuild.binary("rrbench")
    have_netperf = bool(shutil.which("netperf") and shutil.which("netserver"))
    have_ping = bool(shutil.which("ping")) and p["ping_count"] > 0
    ncpu = len(os.sched_getaffinity(0))
    pins = [x for x in p["pins"] if x == "none" or ncpu >= 2]
    cells = [(proto, pin) for proto in p["protos"] for pin in pins]
    tools = ["rrbench", "netperf"] if have_netperf else ["rrbench"]
    runs_per_round = len(cells) * len(tools)
    total = (p["rep_warmup"] + p["rep_min_runs"]) * runs_per_round * len(p["paths"])
    total += len(p["paths"]) * (1 + have_ping)
    total += len([x for x in SCHED_PINS if x in pins]) if p["sched_seconds"] > 0 else 0
    prog = ctx.progress(total)
    tmp = ctx.scratch().dir
    lab = ctx.undo.enter_context(Lab(log=prog.note))

    w.extra["_tool_cmds"] = {"netperf": ["netperf", "-V"], "ping": ["ping", "-V"], "ip": ["ip", "-V"]}
    w.extra["paths_setup"] = {
        "loopback": f"client and server in netns {lab.ns_lo}, 127.0.0.1 on its own lo; "
                    "removed at the end",
        "veth": f"client in netns {lab.ns_cli} ({CLI_ADDR}), server in netns {lab.ns_srv} "
                f"({SRV_ADDR}), one veth pair; both namespaces removed at the end"}
    w.extra["pins"] = {k: PIN_HELP[k] for k in pins}
    w.extra["cpus_usable"] = ncpu
    if ncpu < 2 and len(pins) < len(p["pins"]):
        w.skip("pinning split/same", f"only {ncpu} usable CPU: client and server can't be placed apart")
    if not have_netperf:
        w.skip("netperf", "netperf/netserver are not installed (apt-get install netperf, from "
                          "Debian's non-free component; tools/setup.sh enables it)")
    if not have_ping:
        w.skip("ping", "ping is not installed (apt-get install iputils-ping)" if p["ping_count"]
               else "ping_count=0")
    for path in p["paths"]:  # the namespaces no other user can reach (#43)
        lab.open(path)
        prog.note(f"namespace {lab.ns_lo} for the loopback path" if path == "loopback" else
                  f"namespaces {lab.ns_cli} and {lab.ns_srv} joined by a veth pair")
    servers = {}
    for path in p["paths"]:
        if have_netperf:
            servers[path] = Netserver(lab, path, tmp).start()
            for proto in p["protos"]:  # warm-up run per path/protocol, not recorded
                run_netperf(lab, servers[path], path, proto, "none", p, WARMUP_TRANSACTIONS)
            prog.step(f"netserver up and warmed on {path}")
        else:
            prog.step(f"{path}: netperf missing")
    ping_rows = []
    if have_ping:
        for path in p["paths"]:
            ping_rows.append({"path": path, "count": p["ping_count"], **run_ping(lab, path, p["ping_count"])})
            prog.step(f"ping -f on {path}")

    rows, hist_rows, kv_rows, reps = _rounds(lab, binary, servers, p, cells, tools, tmp, prog)
    for s in servers.values():
        s.stop()
    sched_rows = sched_stage(lab, binary, p, pins, tmp, w, prog) if p["sched_seconds"] > 0 else []
    w.add_table("runs", pd.DataFrame(rows))
    if rows:
        from .analysis import quantization
        qc = quantization(pd.DataFrame(rows).assign(host_id=""))  # load() adds host_id
        w.extra["netperf_rank_check"] = {
            "rule": RANK_RULE, "percentiles_checked": int(qc["in_rank_bucket"].notna().sum()),
            "in_rank_bucket": int((qc["in_rank_bucket"] == True).sum())}  # noqa: E712
    w.add_table("repetition", pd.DataFrame([r for rep in reps for r in rep.records()]))
    w.extra["warmup_runs"] = {
        "netperf_per_path_and_protocol": 1 if have_netperf else 0,
        "netperf_warmup_transactions": WARMUP_TRANSACTIONS,
        "rrbench_unrecorded_seconds_per_run": p["warmup"],
        "warmup_rounds_per_path": p["rep_warmup"]}
    if sched_rows:
        w.add_table("sched", pd.DataFrame(sched_rows))
    w.add_table("hist", pd.DataFrame(hist_rows))
    if kv_rows:
        w.add_table("netperf_all", pd.DataFrame(kv_rows))
    if ping_rows:
        w.add_table("ping", pd.DataFrame(ping_rows))
    w.extra["hist_bins"] = {"per_decade": HIST_PER_DECADE, "lo_us": HIST_LO_US}
    w.notes.append("rrbench latencies are CLOCK_MONOTONIC ns around send()+recv(); the hist "
                   "table holds every recorded transaction in log bins")
    if have_netperf:
        w.notes.append("netperf: " + " ".join(netperf_cmd("<addr>", 0, "udp", "split", p)))


def _rounds(lab, binary, servers, p, cells, tools, tmp, prog):
    """Every path in adaptive rounds (perfbook.analysis.repetition.Repetition, one experiment per path): a
    round runs each protocol x pinning cell with both tools, in a shuffled order, and the
    tools alternate which goes first. Returns (runs rows, hist rows, netperf -k rows, reps)."""
    rows, hist_rows, kv_rows, reps = [], [], [], []
    runs_per_round = len(cells) * len(tools)
    rng = random.Random(p["seed"])
    order = 0
    t0 = time.monotonic()
    for path in p["paths"]:
        rep = repetition(path, [f"{proto}/{pin}/{tool}" for proto, pin in cells for tool in tools], p, "rep_")
        reps.append(rep)
        for rd in rep.rounds():
            if rd.index:
                prog.note(f"{path} after {rd.index} round(s): {rep.status()}")
            if rd.index >= rep.warmup + rep.min_runs:  # a round beyond the planned ones
                prog.total += runs_per_round
            rnd = rd.index - rep.warmup  # measured rounds are numbered from 0 per path
            label = (f"{path} warm-up round {rd.index + 1}" if rd.warmup
                     else f"{path} round {rnd + 1} (at most {rep.max_runs})")
            seq = cells[:]
            rng.shuffle(seq)
            for proto, pin in seq:
                pair = tools[:]
                if (rd.index + order) % 2:
                    pair.reverse()
                for tool in pair:
                    order += 1
                    key = dict(rep=rnd, order=order, path=path, proto=proto, pin=pin, tool=tool,
                               t_s=round(time.monotonic() - t0, 3),
                               request_size=p["request_size"], response_size=p["response_size"])
                    if tool == "rrbench":
                        f = tmp / f"rr-{order}.bin"
                        summ, lat, phase = run_rrbench(lab, binary, path, proto, pin, p, f)
                        f.unlink()
                        st = sample_stats(lat)
                        rep.add(f"{proto}/{pin}/{tool}", st["p50_us"])
                        if not rd.warmup:
                            rows.append(_rrbench_row(key, summ, st, lat, phase))
                            bins, counts = log_histogram(lat)
                            hist_rows += [{"rep": rnd, "order": order, "path": path, "proto": proto,
                                           "pin": pin, "bin": b, "count": c}
                                          for b, c in zip(bins.tolist(), counts.tolist())]
                    else:
                        kv = run_netperf(lab, servers[path], path, proto, pin, p)
                        rep.add(f"{proto}/{pin}/{tool}", num(kv.get("P50_LATENCY")))
                        if not rd.warmup:
                            rows.append(_netperf_row(key, kv))
                            kv_rows += [{"rep": rnd, "order": order, "path": path, "proto": proto,
                                         "pin": pin, "key": k, "value": v}
                                        for k, v in kv.items() if k not in ("UUID", "COMMAND_LINE")]
                    prog.step(f"{label} {proto}/{pin} {tool}")
        prog.total -= max(0, rep.warmup + rep.min_runs - rep.rounds_done) * runs_per_round
        prog.note(f"{path} stopped by {rep.stopped_by}: {rep.status()}")
    return rows, hist_rows, kv_rows, reps


def _rrbench_row(key, summ, st, lat, phase) -> dict:
    nq = netperf_style_percentiles(lat, phase)
    nr = netperf_rank_samples(lat, phase)
    return {**key, "n": summ["n"], "lost": summ["lost"], "seconds": summ["elapsed_ns"] / 1e9,
            "rate_tps": summ["n"] / (summ["elapsed_ns"] / 1e9), **st, "rt_latency_us": math.nan,
            "nq_p50_us": nq[0.5], "nq_p90_us": nq[0.9], "nq_p99_us": nq[0.99],
            "nr_p50_us": nr[0.5], "nr_p90_us": nr[0.9], "nr_p99_us": nr[0.99]}


def _netperf_row(key, kv) -> dict:
    rate, secs = num(kv.get("THROUGHPUT")), num(kv.get("ELAPSED_TIME"))
    return {**key, "n": int(round(rate * secs)) if rate == rate else -1, "lost": 0, "seconds": secs,
            "rate_tps": rate, "min_us": num(kv.get("MIN_LATENCY")), "mean_us": num(kv.get("MEAN_LATENCY")),
            "std_us": num(kv.get("STDDEV_LATENCY")), "p50_us": num(kv.get("P50_LATENCY")),
            "p90_us": num(kv.get("P90_LATENCY")), "p99_us": num(kv.get("P99_LATENCY")),
            "p999_us": math.nan, "max_us": num(kv.get("MAX_LATENCY")),
            "rt_latency_us": num(kv.get("RT_LATENCY")), **_NQ_NR_NAN}


def sched_stage(lab, binary, p: dict, pins, tmp, w, prog) -> list[dict]:
    """One traced rrbench run per pinning mode (loopback, UDP) with sched_wakeup and
    sched_switch enabled in a private ftrace instance: how long a woken harness process
    waits before it runs. Skipped (recorded in the manifest) where tracing is unavailable."""
    from perfbook.hoststate.tracefs import TraceError, TraceSession
    rows = []
    todo = [x for x in SCHED_PINS if x in pins]
    if not todo:
        return rows
    try:
        with TraceSession("rrsched", log=prog.note) as ts:
            ts.set_option("buffer_size_kb", "16384")
            # a wake-up on one CPU and the switch-in on another must be ordered correctly:
            # the default 'local' clock is per CPU; 'mono' is one clock for all CPUs
            ts.set_option("trace_clock", "mono")
            for pin in todo:
                ts.clear()
                pids: dict = {}
                # no warm-up: the trace then covers exactly the recorded transactions
                q = {**p, "seconds": p["sched_seconds"], "warmup": 0.0}
                ts.enable("sched/sched_wakeup")
                ts.enable("sched/sched_switch")
                try:
                    summ, lat, _ = run_rrbench(lab, binary, "loopback", "udp", pin, q,
                                               tmp / f"sched-{pin}.bin", pids)
                finally:
                    ts.disable("sched/sched_wakeup")
                    ts.disable("sched/sched_switch")
                overrun = ts.buffer_stats().get("overrun", 0)
                with open(ts.file("trace")) as f:
                    delays = parse_sched_trace(f, pids)
                rows += _sched_rows(pin, delays, summ, sample_stats(lat), overrun)
                prog.step(f"sched tracepoints, loopback/udp/{pin}")
    except (TraceError, MissingPrerequisite, OSError) as e:
        w.skip("sched breakdown", f"scheduler tracepoints unavailable: {e}")
    return rows


def _sched_rows(pin, delays, summ, st, overrun) -> list[dict]:
    rows = []
    for role, d in delays.items():
        some = len(d) > 0
        rows.append({"path": "loopback", "proto": "udp", "pin": pin, "role": role, "wakeups": len(d),
                     "wakeups_per_transaction": len(d) / max(summ["n"], 1),
                     "delay_sum_us": float(d.sum()),
                     "delay_mean_us": float(d.mean()) if some else math.nan,
                     "delay_p50_us": float(np.median(d)) if some else math.nan,
                     "delay_p99_us": float(np.percentile(d, 99)) if some else math.nan,
                     "delay_max_us": float(d.max()) if some else math.nan,
                     "traced_transactions": summ["n"], "traced_rr_mean_us": st["mean_us"],
                     "traced_rr_p50_us": st["p50_us"], "overrun": overrun})
    return rows
