"""Network namespaces of ours: perfbook_<pid>_<role>, listed, removed, and swept when their
owner died (a SIGKILLed run). Shared because tools/perfbook/hoststate/sweep.py sweeps them for every run; the
netperf_latency chapter creates them (perfbook.chapters.netperf_latency.collect)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess

from perfbook.core.proc import pid_alive

NS_PREFIX = "perfbook_"


def _ip(args: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=timeout)


def list_netns() -> list[str]:
    """The names of every network namespace (`ip netns list`)."""
    r = _ip(["netns", "list"])
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def kill_netns(name: str) -> None:
    """SIGKILL every process inside namespace `name`, then delete it."""
    r = _ip(["netns", "pids", name])
    for tok in r.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(tok), signal.SIGKILL)
    _ip(["netns", "del", name])


def sweep_stale_netns(log=print) -> list[str]:
    """Delete perfbook_<pid>_* namespaces whose owner pid is dead (a SIGKILLed run)."""
    removed = []
    for name in list_netns():
        m = re.match("^" + NS_PREFIX + r"(\d+)_", name)
        if m and not pid_alive(int(m.group(1))):
            kill_netns(name)
            removed.append(name)
    if removed:
        log(f"swept network namespaces left by a killed run: {', '.join(removed)}")
    return removed
