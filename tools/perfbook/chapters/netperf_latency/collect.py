"""measure(ctx): the lab, the interleaved adaptive rounds of both instruments, ping -f, and one
traced run per pinning mode (sched_stage). The only part of the chapter that touches the
network; everything it creates is registered on ctx.undo (the framework unwinds it).

The lab (the second half of this file): namespaces, veth, netserver and the harness processes
that a run starts, and the runs of each instrument (rrbench, netperf, ping). Lab.close() undoes
all of it and is registered on the run's undo stack (measure). Every path runs in network
namespaces of the run's own, the loopback path too (#43): a server listening on 127.0.0.1 of
the host's namespace is reachable by every local user, who could drive transactions through it
while we measure. Only root can enter our namespaces."""

from __future__ import annotations

import contextlib
import math
import os
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd

from perfbook.analysis.repetition import repetition
from perfbook.core import guard
from perfbook.core.errors import MissingPrerequisite, PerfbookError
from perfbook.core.proc import die_with_parent
from perfbook.hoststate.netns import NS_PREFIX, kill_netns, list_netns
from perfbook.hoststate.tracefs import TraceError, TraceSession
from perfbook.probes import cbuild

from .analysis import quantization
from .key_findings import FINDING_CELLS
from .parse import (
    CLI_ADDR,
    HIST_LO_US,
    HIST_PER_DECADE,
    LO_EXTRA_ADDR,
    PIN_HELP,
    RANK_RULE,
    SCHED_PINS,
    SRV_ADDR,
    log_histogram,
    netperf_rank_samples,
    netperf_style_percentiles,
    num,
    parse_kv,
    parse_ping,
    parse_rrbench,
    parse_sched_trace,
    read_rrbench_file,
    sample_stats,
    wildcard_listeners,
)

# Each path and protocol is warmed by one unrecorded netperf run of this many transactions
# (~0.1 s at loopback latencies): the netserver's first connection, the route and the caches.
# A 1 s run did the same and cost 4 s of every profile.
WARMUP_TRANSACTIONS = 2000
# netperf_match: a cell's netperf run counts the transactions its rrbench run just recorded, but
# never fewer than this (netperf's percentiles of a handful of transactions say little)
MIN_MATCHED_TRANSACTIONS = 1000
_NQ_NR_NAN = {f"{k}_{pc}_us": math.nan for k in ("nq", "nr") for pc in ("p50", "p90", "p99")}


def measure(ctx) -> None:
    p, w = ctx.p, ctx.writer
    binary = cbuild.binary("rrbench")
    have_netperf = bool(shutil.which("netperf") and shutil.which("netserver"))
    have_ping = bool(shutil.which("ping")) and p["ping_count"] > 0
    ncpu = len(os.sched_getaffinity(0))
    pins = [x for x in p["pins"] if x == "none" or ncpu >= 2]
    core, context = split_cells(p, pins)
    tools = ["rrbench", "netperf"] if have_netperf else ["rrbench"]
    total = planned_runs(p, (core, context), tools)
    total += len(p["paths"]) * (1 + have_ping)
    total += len([x for x in SCHED_PINS if x in pins]) if p["sched_seconds"] > 0 else 0
    prog = ctx.progress(total)
    tmp = ctx.scratch().dir
    lab = ctx.undo.enter_context(Lab(log=prog.note))

    w.extra["_tool_cmds"] = {
        "netperf": ["netperf", "-V"],
        "ping": ["ping", "-V"],
        "ip": ["ip", "-V"],
    }
    w.extra["paths_setup"] = {
        "loopback": f"client and server in netns {lab.ns_lo}, 127.0.0.1 on its own lo; "
        "removed at the end",
        "veth": f"client in netns {lab.ns_cli} ({CLI_ADDR}), server in netns {lab.ns_srv} "
        f"({SRV_ADDR}), one veth pair; both namespaces removed at the end",
    }
    w.extra["pins"] = {k: PIN_HELP[k] for k in pins}
    w.extra["cpus_usable"] = ncpu
    w.extra["cells"] = {
        "every_round": ["/".join(c) for c in core],
        "first_rounds_only": ["/".join(c) for c in context],
        "context_rounds": p["context_rounds"],
    }
    if ncpu < 2 and len(pins) < len(p["pins"]):
        w.skip(
            "pinning split/same", f"only {ncpu} usable CPU: client and server can't be placed apart"
        )
    if not have_netperf:
        w.skip(
            "netperf",
            "netperf/netserver are not installed (apt-get install netperf, from "
            "Debian's non-free component; tools/setup.sh enables it)",
        )
    if not have_ping:
        w.skip(
            "ping",
            "ping is not installed (apt-get install iputils-ping)"
            if p["ping_count"]
            else "ping_count=0",
        )
    servers = {}
    with ctx.phase("setup"):
        for path in p["paths"]:  # the namespaces no other user can reach (#43)
            lab.open(path)
            prog.note(
                f"namespace {lab.ns_lo} for the loopback path"
                if path == "loopback"
                else f"namespaces {lab.ns_cli} and {lab.ns_srv} joined by a veth pair"
            )
        for path in p["paths"]:
            if not have_netperf:
                prog.step(f"{path}: netperf missing")
                continue
            servers[path] = Netserver(lab, path, tmp).start()
            with ctx.phase("warmup"):
                for proto in p["protos"]:  # warm-up run per path/protocol, not recorded
                    run_netperf(lab, servers[path], path, proto, "none", p, WARMUP_TRANSACTIONS)
            prog.step(f"netserver up and warmed on {path}")
    ping_rows = []
    with ctx.phase("measured"):
        if have_ping:
            for path in p["paths"]:
                ping_rows.append(
                    {"path": path, "count": p["ping_count"], **run_ping(lab, path, p["ping_count"])}
                )
                prog.step(f"ping -f on {path}")
        rows, hist_rows, kv_rows, reps = _rounds(
            lab, binary, servers, p, (core, context), tools, tmp, prog, ctx.phase
        )
        for s in servers.values():
            s.stop()
        sched_rows = (
            sched_stage(lab, binary, p, pins, tmp, w, prog) if p["sched_seconds"] > 0 else []
        )
    w.add_table("runs", pd.DataFrame(rows))
    if rows:
        qc = quantization(pd.DataFrame(rows).assign(host_id=""))  # load() adds host_id
        w.extra["netperf_rank_check"] = {
            "rule": RANK_RULE,
            "percentiles_checked": int(qc["in_rank_bucket"].notna().sum()),
            "in_rank_bucket": int(qc["in_rank_bucket"].eq(True).sum()),
        }
    w.add_table("repetition", pd.DataFrame([r for rep in reps for r in rep.records()]))
    w.extra["warmup_runs"] = {
        "netperf_per_path_and_protocol": 1 if have_netperf else 0,
        "netperf_warmup_transactions": WARMUP_TRANSACTIONS,
        "netperf_matches_rrbench_transactions": bool(p["netperf_match"]),
        "rrbench_unrecorded_seconds_per_run": p["warmup"],
        "warmup_rounds_per_path": p["rep_warmup"],
    }
    if sched_rows:
        w.add_table("sched", pd.DataFrame(sched_rows))
    w.add_table("hist", pd.DataFrame(hist_rows))
    if kv_rows:
        w.add_table("netperf_all", pd.DataFrame(kv_rows))
    if ping_rows:
        w.add_table("ping", pd.DataFrame(ping_rows))
    w.extra["hist_bins"] = {"per_decade": HIST_PER_DECADE, "lo_us": HIST_LO_US}
    w.notes.append(
        "rrbench latencies are CLOCK_MONOTONIC ns around send()+recv(); the hist "
        "table holds every recorded transaction in log bins"
    )
    if have_netperf:
        w.notes.append("netperf: " + " ".join(netperf_cmd("<addr>", 0, "udp", "split", p)))


def split_cells(p: dict, pins) -> tuple[list[tuple], list[tuple]]:
    """(cells run in every round, cells run only in the first context_rounds rounds), each a
    (path, proto, pin) in declaration order. Every round runs the cells a key finding reads
    (key_findings.FINDING_CELLS); the others, which only the tables and figures show, run in
    the first p["context_rounds"] rounds (None: every cell in every round). With none of the
    findings' cells among the parameters every cell runs in every round."""
    cells = [(path, proto, pin) for path in p["paths"] for proto in p["protos"] for pin in pins]
    if p.get("context_rounds") is None:
        return cells, []
    core = [c for c in cells if c in FINDING_CELLS]
    if not core:
        return cells, []
    return core, [c for c in cells if c not in core]


def planned_runs(p: dict, cells, tools) -> int:
    """The runs the rounds will make as planned (rep_warmup + rep_min_runs rounds): every cell
    with every tool in the first context_rounds measured rounds, and in the others (warm-up
    rounds too) the findings' cells with the instruments their findings read (cell_tools)."""
    core, context = cells
    n_ctx = context_rounds(p)
    every = (len(core) + len(context)) * len(tools)
    later = sum(len(cell_tools(p, c, tools, False)) for c in core)
    return (p["rep_warmup"] + p["rep_min_runs"] - n_ctx) * later + n_ctx * every


def cell_tools(p: dict, cell: tuple, tools, context_round: bool) -> list[str]:
    """The instruments a cell runs with in a round: all of them in a context round (the first
    context_rounds, or every round when context_rounds is None), else the ones its findings read
    (key_findings.FINDING_CELLS)."""
    if context_round or p.get("context_rounds") is None or cell not in FINDING_CELLS:
        return list(tools)
    return [t for t in tools if t in FINDING_CELLS[cell]]


def context_rounds(p: dict) -> int:
    """How many measured rounds run the context cells (split_cells): p["context_rounds"], at
    most the rounds planned, or every planned round when it is None."""
    n = p.get("context_rounds")
    return p["rep_min_runs"] if n is None else min(n, p["rep_min_runs"])


def _rounds(lab, binary, servers, p, cells, tools, tmp, prog, phase=None):
    """Rounds over every path at once (perfbook.analysis.repetition.Repetition, one experiment):
    a round runs each of its cells with both tools, the cells of both paths in one shuffled
    order, and the tools alternate which goes first; with p["netperf_match"] rrbench goes first
    and the cell's netperf run then counts as many transactions as rrbench recorded, so that
    both instruments see a window of one size. `cells` is (core, context)
    (split_cells): the core cells run in every round and are what the repetition tracks, the
    context cells only in the first p["context_rounds"] measured rounds. phase(kind) is
    ctx.phase (a warm-up round is "warmup"). Returns (runs rows, hist rows, netperf -k rows,
    [the Repetition])."""
    core, context = cells
    phase = phase or (lambda kind: contextlib.nullcontext())
    rows, hist_rows, kv_rows = [], [], []
    rng = random.Random(p["seed"])
    order = steps = extra = 0
    t0 = time.monotonic()
    rep = repetition(
        "rounds",
        [
            f"{path}/{proto}/{pin}/{tool}"
            for path, proto, pin in core
            for tool in cell_tools(p, (path, proto, pin), tools, False)
        ],
        p,
        "rep_",
    )

    n_context = p.get("context_rounds")
    for rd in rep.rounds():
        if rd.index:
            prog.note(f"after {rd.index} round(s): {rep.status()}")
        rnd = rd.index - rep.warmup  # measured rounds are numbered from 0
        in_context = n_context is None or (not rd.warmup and rnd < n_context)
        seq = core[:] + (context if in_context else [])
        if rd.index >= rep.warmup + rep.min_runs:  # a round beyond the planned ones
            more = sum(len(cell_tools(p, c, tools, in_context)) for c in seq)
            prog.total += more
            extra += more
        label = (
            f"warm-up round {rd.index + 1}"
            if rd.warmup
            else f"round {rnd + 1} (at most {rep.max_runs})"
        )
        rng.shuffle(seq)
        with phase("warmup" if rd.warmup else "measured"):
            for path, proto, pin in seq:
                pair = cell_tools(p, (path, proto, pin), tools, in_context)
                if (rd.index + order) % 2 and not p["netperf_match"]:
                    pair.reverse()
                count = None  # netperf_match: the transactions the cell's rrbench run recorded
                for tool in pair:
                    order += 1
                    cell_key = f"{path}/{proto}/{pin}/{tool}"
                    tracked = cell_key in rep.values
                    key = dict(
                        rep=rnd,
                        order=order,
                        path=path,
                        proto=proto,
                        pin=pin,
                        tool=tool,
                        t_s=round(time.monotonic() - t0, 3),
                        request_size=p["request_size"],
                        response_size=p["response_size"],
                    )
                    if tool == "rrbench":
                        f = tmp / f"rr-{order}.bin"
                        summ, lat, rphase = run_rrbench(lab, binary, path, proto, pin, p, f)
                        f.unlink()
                        st = sample_stats(lat)
                        count = max(int(summ["n"]), MIN_MATCHED_TRANSACTIONS)
                        if tracked:
                            rep.add(cell_key, st["p50_us"])
                        if not rd.warmup:
                            rows.append(_rrbench_row(key, summ, st, lat, rphase))
                            bins, counts = log_histogram(lat)
                            hist_rows += [
                                {
                                    "rep": rnd,
                                    "order": order,
                                    "path": path,
                                    "proto": proto,
                                    "pin": pin,
                                    "bin": b,
                                    "count": c,
                                }
                                for b, c in zip(bins.tolist(), counts.tolist())
                            ]
                    else:
                        kv = run_netperf(
                            lab,
                            servers[path],
                            path,
                            proto,
                            pin,
                            p,
                            count if p["netperf_match"] else None,
                        )
                        if tracked:
                            rep.add(cell_key, num(kv.get("P50_LATENCY")))
                        if not rd.warmup:
                            rows.append(_netperf_row(key, kv))
                            kv_rows += [
                                {
                                    "rep": rnd,
                                    "order": order,
                                    "path": path,
                                    "proto": proto,
                                    "pin": pin,
                                    "key": k,
                                    "value": v,
                                }
                                for k, v in kv.items()
                                if k not in ("UUID", "COMMAND_LINE")
                            ]
                    steps += 1
                    prog.step(f"{label} {path}/{proto}/{pin} {tool}")
    prog.total -= planned_runs(p, cells, tools) + extra - steps  # planned runs that did not run
    prog.note(f"stopped by {rep.stopped_by}: {rep.status()}")
    return rows, hist_rows, kv_rows, [rep]


def _rrbench_row(key, summ, st, lat, phase) -> dict:
    nq = netperf_style_percentiles(lat, phase)
    nr = netperf_rank_samples(lat, phase)
    return {
        **key,
        "n": summ["n"],
        "lost": summ["lost"],
        "seconds": summ["elapsed_ns"] / 1e9,
        "rate_tps": summ["n"] / (summ["elapsed_ns"] / 1e9),
        **st,
        "rt_latency_us": math.nan,
        "nq_p50_us": nq[0.5],
        "nq_p90_us": nq[0.9],
        "nq_p99_us": nq[0.99],
        "nr_p50_us": nr[0.5],
        "nr_p90_us": nr[0.9],
        "nr_p99_us": nr[0.99],
    }


def _netperf_row(key, kv) -> dict:
    rate, secs = num(kv.get("THROUGHPUT")), num(kv.get("ELAPSED_TIME"))
    return {
        **key,
        "n": int(round(rate * secs)) if rate == rate else -1,
        "lost": 0,
        "seconds": secs,
        "rate_tps": rate,
        "min_us": num(kv.get("MIN_LATENCY")),
        "mean_us": num(kv.get("MEAN_LATENCY")),
        "std_us": num(kv.get("STDDEV_LATENCY")),
        "p50_us": num(kv.get("P50_LATENCY")),
        "p90_us": num(kv.get("P90_LATENCY")),
        "p99_us": num(kv.get("P99_LATENCY")),
        "p999_us": math.nan,
        "max_us": num(kv.get("MAX_LATENCY")),
        "rt_latency_us": num(kv.get("RT_LATENCY")),
        **_NQ_NR_NAN,
    }


def sched_stage(lab, binary, p: dict, pins, tmp, w, prog) -> list[dict]:
    """One traced rrbench run per pinning mode (loopback, UDP) with sched_wakeup and
    sched_switch enabled in a private ftrace instance: how long a woken harness process
    waits before it runs. Skipped (recorded in the manifest) where tracing is unavailable."""
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
                    summ, lat, _ = run_rrbench(
                        lab, binary, "loopback", "udp", pin, q, tmp / f"sched-{pin}.bin", pids
                    )
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
        rows.append(
            {
                "path": "loopback",
                "proto": "udp",
                "pin": pin,
                "role": role,
                "wakeups": len(d),
                "wakeups_per_transaction": len(d) / max(summ["n"], 1),
                "delay_sum_us": float(d.sum()),
                "delay_mean_us": float(d.mean()) if some else math.nan,
                "delay_p50_us": float(np.median(d)) if some else math.nan,
                "delay_p99_us": float(np.percentile(d, 99)) if some else math.nan,
                "delay_max_us": float(d.max()) if some else math.nan,
                "traced_transactions": summ["n"],
                "traced_rr_mean_us": st["mean_us"],
                "traced_rr_p50_us": st["p50_us"],
                "overrun": overrun,
            }
        )
    return rows


# ------------------------------------------------------------------ the lab
def _run(cmd, check=True, timeout=30, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise PerfbookError(f"{' '.join(cmd)} failed: {(r.stderr or r.stdout).strip()[:200]}")
    return r


class Lab:
    """Namespaces, veth and child processes that we create; `close()` undoes all of it.
    Children run in process groups of their own and die with this process (SIGKILLed run).
    A path's namespaces are made the first time something runs on it (`open`)."""

    def __init__(self, log=print):
        self.log = log
        self.pid = os.getpid()
        self.ns_lo = f"{NS_PREFIX}{self.pid}_lo"
        self.ns_cli = f"{NS_PREFIX}{self.pid}_cli"
        self.ns_srv = f"{NS_PREFIX}{self.pid}_srv"
        self.netns: list[str] = []
        self.procs: list[subprocess.Popen] = []
        self.closed = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def open(self, path: str) -> bool:
        """Make the namespaces of `path` unless they exist; True when it made them."""
        if path == "loopback":
            if self.ns_lo in self.netns:
                return False
            self._add_netns(self.ns_lo)
            _run(["ip", "-n", self.ns_lo, "addr", "add", LO_EXTRA_ADDR + "/32", "dev", "lo"])
            return True
        if self.ns_srv in self.netns:
            return False
        self.make_veth()
        return True

    def _add_netns(self, ns: str) -> None:
        """A new network namespace with its loopback device up (registered before it is
        configured, so that close() removes a half-made one)."""
        _run(["ip", "netns", "add", ns])
        self.netns.append(ns)
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])

    def make_veth(self) -> None:
        for ns in (self.ns_cli, self.ns_srv):
            self._add_netns(ns)
        vc, vs = f"pb{self.pid}c", f"pb{self.pid}s"
        _run(
            [
                "ip",
                "link",
                "add",
                vc,
                "netns",
                self.ns_cli,
                "type",
                "veth",
                "peer",
                "name",
                vs,
                "netns",
                self.ns_srv,
            ]
        )
        for ns, dev, a in ((self.ns_cli, vc, CLI_ADDR), (self.ns_srv, vs, SRV_ADDR)):
            _run(["ip", "-n", ns, "addr", "add", a + "/24", "dev", dev])
            _run(["ip", "-n", ns, "link", "set", dev, "up"])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            st = [
                _run(["ip", "-n", ns, "-br", "link", "show", "dev", d], check=False).stdout
                for ns, d in ((self.ns_cli, vc), (self.ns_srv, vs))
            ]
            if all(" UP " in s for s in st):
                return
            time.sleep(0.05)
        raise PerfbookError("the veth pair between our namespaces did not come up within 5 s")

    def spawn(self, cmd, **kw) -> subprocess.Popen:
        p = subprocess.Popen(cmd, start_new_session=True, preexec_fn=die_with_parent, **kw)
        self.procs.append(p)
        return p

    def stop(self, p: subprocess.Popen, timeout: float = 2.0) -> None:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout)
        # the group may hold children (netserver forks one per test)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        for s in (p.stdout, p.stderr):
            if s:
                with contextlib.suppress(Exception):
                    s.close()
        if p in self.procs:
            self.procs.remove(p)

    def close(self) -> None:
        if self.closed:
            return
        with guard.restoring():  # a second Ctrl-C cannot cut the cleanup in half
            try:
                for p in list(self.procs):
                    with contextlib.suppress(Exception):
                        self.stop(p)
                for ns in reversed(self.netns):
                    kill_netns(ns)
                self.netns.clear()
                left = [n for n in list_netns() if n in (self.ns_lo, self.ns_cli, self.ns_srv)]
                if left:
                    self.log(f"warning: could not delete namespaces {left}")
            finally:
                self.closed = True

    # -- helpers
    def prefix(self, path: str, side: str) -> list[str]:
        """The command prefix that runs a program on `side` ('cli' or 'srv') of `path`: in
        the loopback namespace for both sides of loopback, else in that side's namespace."""
        self.open(path)
        ns = self.ns_lo if path == "loopback" else self.ns_cli if side == "cli" else self.ns_srv
        return ["ip", "netns", "exec", ns]

    @staticmethod
    def addr(path: str) -> str:
        return "127.0.0.1" if path == "loopback" else SRV_ADDR


def pin_cpus(pin: str) -> tuple[int | None, int | None]:
    """(client CPU, server CPU) for a pinning mode."""
    return {"none": (None, None), "split": (0, 1), "same": (1, 1)}[pin]


def _taskset(cpu):
    return [] if cpu is None else ["taskset", "-c", str(cpu)]


def _free_port() -> int:
    """A TCP port free on 127.0.0.1 of the host's namespace, for the loopback netserver in
    ours: no server of the host then answers at the same address and port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _read_line(p: subprocess.Popen, timeout: float) -> str:
    r, _, _ = select.select([p.stdout], [], [], timeout)
    if not r:
        return ""
    return p.stdout.readline()


class Netserver:
    """netserver -D on a free port in a path's server namespace; ready when it listens."""

    def __init__(self, lab: Lab, path: str, logdir: Path):
        self.lab, self.path = lab, path
        self.addr = lab.addr(path)
        self.proc = None
        self.port = None
        self.log = logdir / f"netserver-{path}.log"

    def _listening(self, port: int) -> bool:
        r = _run(
            self.lab.prefix(self.path, "srv") + ["ss", "-Htln", f"sport = :{port}"], check=False
        )
        wide = wildcard_listeners(r.stdout)
        if wide:
            raise PerfbookError(
                f"netserver listens on {', '.join(wide)}, not only on {self.addr}; "
                "refusing to run a server reachable from every interface"
            )
        return bool(r.stdout.strip())

    def start(self) -> Netserver:
        for attempt in range(4):
            port = _free_port() if self.path == "loopback" else 12865 + attempt
            with open(self.log, "a") as logf:
                self.proc = self.lab.spawn(
                    self.lab.prefix(self.path, "srv")
                    + ["netserver", "-D", "-4", "-L", self.addr, "-p", str(port)],
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and self.proc.poll() is None:
                if self._listening(port):
                    self.port = port
                    return self
                time.sleep(0.05)
            self.lab.stop(self.proc)
        raise PerfbookError(
            f"netserver did not start listening on the {self.path} path "
            f"(see {self.log.name}); is another netserver holding the port?"
        )

    def stop(self):
        if self.proc is not None:
            self.lab.stop(self.proc)
            self.proc = None


def rrbench_server(
    lab: Lab, binary: Path, path: str, proto: str, p: dict, cpu: int | None = None
) -> tuple[subprocess.Popen, int]:
    """An rrbench server on the path's server side, on a free port: (process, port) once it
    is ready. The caller stops it (lab.stop)."""
    srv = lab.spawn(
        lab.prefix(path, "srv")
        + _taskset(cpu)
        + [
            str(binary),
            "server",
            "-P",
            proto,
            "-b",
            lab.addr(path),
            "-p",
            "0",
            "-q",
            str(p["request_size"]),
            "-r",
            str(p["response_size"]),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    line = _read_line(srv, 5.0)
    m = re.match(r"ready (\d+)", line or "")
    if not m:
        err = srv.stderr.read() if srv.poll() is not None else ""
        lab.stop(srv)
        raise PerfbookError(f"rrbench server did not start on {path}/{proto}: {err.strip()[:200]}")
    return srv, int(m.group(1))


def run_rrbench(
    lab: Lab,
    binary: Path,
    path: str,
    proto: str,
    pin: str,
    p: dict,
    outfile: Path,
    pids: dict | None = None,
) -> tuple[dict, np.ndarray, np.ndarray]:
    ccpu, scpu = pin_cpus(pin)
    srv, port = rrbench_server(lab, binary, path, proto, p, scpu)
    try:
        cmd = (
            lab.prefix(path, "cli")
            + _taskset(ccpu)
            + [
                str(binary),
                "client",
                "-P",
                proto,
                "-H",
                lab.addr(path),
                "-p",
                str(port),
                "-l",
                str(p["seconds"]),
                "-w",
                str(p["warmup"]),
                "-q",
                str(p["request_size"]),
                "-r",
                str(p["response_size"]),
                "-o",
                str(outfile),
            ]
        )
        cli = lab.spawn(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
        )
        if pids is not None:  # taskset and ip netns exec exec() the harness: same pid
            pids.update({"server": srv.pid, "client": cli.pid})
        try:
            out, err = cli.communicate(timeout=p["seconds"] + p["warmup"] + 20)
        except subprocess.TimeoutExpired:
            raise PerfbookError(
                f"rrbench client on {path}/{proto} did not finish in time"
            ) from None
        finally:
            lab.stop(cli)
        if cli.returncode != 0:
            raise PerfbookError(f"rrbench client failed on {path}/{proto}: {err.strip()[:200]}")
        summary = parse_rrbench(out)
    finally:
        lab.stop(srv)
    lat, phase = read_rrbench_file(outfile)
    if len(lat) != summary["n"]:
        raise PerfbookError(f"rrbench wrote {len(lat)} samples but counted {summary['n']}")
    return summary, lat, phase


def netperf_cmd(
    path_addr: str, port: int, proto: str, pin: str, p: dict, transactions: int | None = None
) -> list[str]:
    """netperf's omni request/response test for p['netperf_seconds'] whole seconds, or for a
    number of transactions (netperf -l with a negative value): `transactions` (a warm-up that
    needs no second), else p['netperf_transactions'] where a profile sets it (quick)."""
    ccpu, scpu = pin_cpus(pin)
    transactions = transactions or p.get("netperf_transactions")
    length = f"-{transactions}" if transactions else str(p["netperf_seconds"])
    cmd = ["netperf", "-H", path_addr, "-p", str(port), "-t", "omni", "-l", length, "-j", "-P", "0"]
    if pin != "none":
        cmd += ["-T", f"{ccpu},{scpu}"]
    cmd += [
        "--",
        "-d",
        "rr",
        "-T",
        proto.upper(),
        "-r",
        f"{p['request_size']},{p['response_size']}",
        "-k",
        "all",
    ]
    return cmd


def run_netperf(
    lab: Lab,
    ns: Netserver,
    path: str,
    proto: str,
    pin: str,
    p: dict,
    transactions: int | None = None,
) -> dict:
    cmd = lab.prefix(path, "cli") + netperf_cmd(ns.addr, ns.port, proto, pin, p, transactions)
    proc = lab.spawn(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
    )
    try:
        out, err = proc.communicate(timeout=p["netperf_seconds"] + 30)  # a count runs shorter
    except subprocess.TimeoutExpired:
        raise PerfbookError(f"netperf on {path}/{proto} did not finish in time") from None
    finally:
        lab.stop(proc)
    kv = parse_kv(out)
    if proc.returncode != 0 or "P50_LATENCY" not in kv:
        raise PerfbookError(
            f"netperf failed on {path}/{proto} (exit {proc.returncode}): "
            f"{(err or out).strip()[:200]}"
        )
    return kv


def run_ping(lab: Lab, path: str, count: int) -> dict:
    cmd = lab.prefix(path, "cli") + ["ping", "-f", "-q", "-n", "-c", str(count), lab.addr(path)]
    proc = lab.spawn(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
    )
    try:
        out, err = proc.communicate(timeout=max(30, count / 1000))
    except subprocess.TimeoutExpired:
        raise PerfbookError(f"ping on {path} did not finish in time") from None
    finally:
        lab.stop(proc)
    if proc.returncode != 0:
        raise PerfbookError(f"ping on {path} failed: {(err or out).strip()[:200]}")
    return parse_ping(out)
