"""The network lab: namespaces, veth, netserver and the harness processes that a run starts,
and the runs of each instrument (rrbench, netperf, ping). Everything here touches the network;
Lab.close() undoes all of it and is registered on the run's undo stack (collect.measure).

Every path runs in network namespaces of the run's own, the loopback path too (#43): a server
listening on 127.0.0.1 of the host's namespace is reachable by every local user, who could
drive transactions through it while we measure. Only root can enter our namespaces."""
from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import socket
import subprocess
import time
from pathlib import Path

import numpy as np

from perfbook.core import guard
from perfbook.core.errors import PerfbookError
from perfbook.core.proc import die_with_parent
from perfbook.hoststate.netns import NS_PREFIX, kill_netns, list_netns
from .parse import parse_kv, parse_ping, parse_rrbench, read_rrbench_file, wildcard_listeners
from .spec import CLI_ADDR, LO_EXTRA_ADDR, SRV_ADDR


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
        _run(["ip", "link", "add", vc, "netns", self.ns_cli, "type", "veth",
              "peer", "name", vs, "netns", self.ns_srv])
        for ns, dev, a in ((self.ns_cli, vc, CLI_ADDR), (self.ns_srv, vs, SRV_ADDR)):
            _run(["ip", "-n", ns, "addr", "add", a + "/24", "dev", dev])
            _run(["ip", "-n", ns, "link", "set", dev, "up"])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            st = [_run(["ip", "-n", ns, "-br", "link", "show", "dev", d], check=False).stdout
                  for ns, d in ((self.ns_cli, vc), (self.ns_srv, vs))]
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
        r = _run(self.lab.prefix(self.path, "srv") + ["ss", "-Htln", f"sport = :{port}"], check=False)
        wide = wildcard_listeners(r.stdout)
        if wide:
            raise PerfbookError(f"netserver listens on {', '.join(wide)}, not only on {self.addr}; "
                                "refusing to run a server reachable from every interface")
        return bool(r.stdout.strip())

    def start(self) -> "Netserver":
        for attempt in range(4):
            port = _free_port() if self.path == "loopback" else 12865 + attempt
            with open(self.log, "a") as logf:
                self.proc = self.lab.spawn(self.lab.prefix(self.path, "srv") +
                                           ["netserver", "-D", "-4", "-L", self.addr, "-p", str(port)],
                                           stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and self.proc.poll() is None:
                if self._listening(port):
                    self.port = port
                    return self
                time.sleep(0.05)
            self.lab.stop(self.proc)
        raise PerfbookError(f"netserver did not start listening on the {self.path} path "
                            f"(see {self.log.name}); is another netserver holding the port?")

    def stop(self):
        if self.proc is not None:
            self.lab.stop(self.proc)
            self.proc = None


def rrbench_server(lab: Lab, binary: Path, path: str, proto: str, p: dict,
                   cpu: int | None = None) -> tuple[subprocess.Popen, int]:
    """An rrbench server on the path's server side, on a free port: (process, port) once it
    is ready. The caller stops it (lab.stop)."""
    srv = lab.spawn(lab.prefix(path, "srv") + _taskset(cpu) +
                    [str(binary), "server", "-P", proto, "-b", lab.addr(path), "-p", "0",
                     "-q", str(p["request_size"]), "-r", str(p["response_size"])],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    line = _read_line(srv, 5.0)
    m = re.match(r"ready (\d+)", line or "")
    if not m:
        err = srv.stderr.read() if srv.poll() is not None else ""
        lab.stop(srv)
        raise PerfbookError(f"rrbench server did not start on {path}/{proto}: {err.strip()[:200]}")
    return srv, int(m.group(1))


def run_rrbench(lab: Lab, binary: Path, path: str, proto: str, pin: str, p: dict,
                outfile: Path, pids: dict | None = None) -> tuple[dict, np.ndarray, np.ndarray]:
    ccpu, scpu = pin_cpus(pin)
    srv, port = rrbench_server(lab, binary, path, proto, p, scpu)
    try:
        cmd = (lab.prefix(path, "cli") + _taskset(ccpu) +
               [str(binary), "client", "-P", proto, "-H", lab.addr(path), "-p", str(port),
                "-l", str(p["seconds"]), "-w", str(p["warmup"]),
                "-q", str(p["request_size"]), "-r", str(p["response_size"]), "-o", str(outfile)])
        cli = lab.spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                        text=True)
        if pids is not None:  # taskset and ip netns exec exec() the harness: same pid
            pids.update({"server": srv.pid, "client": cli.pid})
        try:
            out, err = cli.communicate(timeout=p["seconds"] + p["warmup"] + 20)
        except subprocess.TimeoutExpired:
            raise PerfbookError(f"rrbench client on {path}/{proto} did not finish in time") from None
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


def netperf_cmd(path_addr: str, port: int, proto: str, pin: str, p: dict,
                transactions: int | None = None) -> list[str]:
    """netperf's omni request/response test for p['netperf_seconds'] whole seconds, or for a
    number of transactions (netperf -l with a negative value): `transactions` (a warm-up that
    needs no second), else p['netperf_transactions'] where a profile sets it (quick)."""
    ccpu, scpu = pin_cpus(pin)
    transactions = transactions or p.get("netperf_transactions")
    length = f"-{transactions}" if transactions else str(p["netperf_seconds"])
    cmd = ["netperf", "-H", path_addr, "-p", str(port), "-t", "omni", "-l", length,
           "-j", "-P", "0"]
    if pin != "none":
        cmd += ["-T", f"{ccpu},{scpu}"]
    cmd += ["--", "-d", "rr", "-T", proto.upper(), "-r", f"{p['request_size']},{p['response_size']}",
            "-k", "all"]
    return cmd


def run_netperf(lab: Lab, ns: Netserver, path: str, proto: str, pin: str, p: dict,
                transactions: int | None = None) -> dict:
    cmd = lab.prefix(path, "cli") + netperf_cmd(ns.addr, ns.port, proto, pin, p, transactions)
    proc = lab.spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        out, err = proc.communicate(timeout=p["netperf_seconds"] + 30)   # a count runs shorter
    except subprocess.TimeoutExpired:
        raise PerfbookError(f"netperf on {path}/{proto} did not finish in time") from None
    finally:
        lab.stop(proc)
    kv = parse_kv(out)
    if proc.returncode != 0 or "P50_LATENCY" not in kv:
        raise PerfbookError(f"netperf failed on {path}/{proto} (exit {proc.returncode}): "
                            f"{(err or out).strip()[:200]}")
    return kv


def run_ping(lab: Lab, path: str, count: int) -> dict:
    cmd = lab.prefix(path, "cli") + ["ping", "-f", "-q", "-n", "-c", str(count), lab.addr(path)]
    proc = lab.spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        out, err = proc.communicate(timeout=max(30, count / 1000))
    except subprocess.TimeoutExpired:
        raise PerfbookError(f"ping on {path} did not finish in time") from None
    finally:
        lab.stop(proc)
    if proc.returncode != 0:
        raise PerfbookError(f"ping on {path} failed: {(err or out).strip()[:200]}")
    return parse_ping(out)
