"""A run's fingerprint: how fast this machine did three small fixed tasks, before and after.

Machines cloned from one image share a host id but not a speed (one class measured the same
system call at 236 ns one day and 319 ns another), and a busy neighbour or a throttled CPU
slows a run without stopping it. The framework (perfbook.framework.sequence) takes a
fingerprint just before a chapter measures and just after, into the manifest's `disturbance`
record; perfbook.analysis.findings sets aside a run whose fingerprint departs from the rest
of its host's runs (departs()), as it does a run the monitor marked disturbed.

Each figure is the median of REPS timings, in the units a reader compares:
  syscall_ns   one getppid() from Python (the interpreter's call overhead included: it is
               the same interpreter in every run of one checkout)
  memcpy_gbs   copying a 16 MiB buffer, GB/s
  loopback_us  one round trip of 64 bytes through a connected AF_UNIX socket pair, µs
Measured on the book's 2-CPU VM: about 50 ms for the three, idle; in six processes in a row
the system call took 158-209 ns, the copy ran at 9.7-11.8 GB/s and the round trip took
2.4-3.8 µs.
"""

from __future__ import annotations

import os
import socket
import statistics
import time

REPS = 5
CALLS = 4000
MIB = 16
TRIPS = 400
# A run is set aside when two of its figures are this many times slower than the median of
# its host's runs of the same kernel build (or faster by as much: a different machine class).
DEPARTS = 1.5


def _timed(fn) -> float:
    t0 = time.perf_counter_ns()
    fn()
    return time.perf_counter_ns() - t0


def _syscall() -> float:
    getppid = os.getppid

    def calls():
        for _ in range(CALLS):
            getppid()

    return statistics.median(_timed(calls) for _ in range(REPS)) / CALLS


def _memcpy() -> float:
    src, dst = bytearray(MIB << 20), bytearray(MIB << 20)  # both touched once, then reused:
    view = memoryview(dst)  # the copy is timed, not page faults of a new buffer

    def copy():
        view[:] = src

    copy()
    ns = statistics.median(_timed(copy) for _ in range(REPS))
    return (MIB << 20) / ns  # bytes per ns = GB/s


def _loopback() -> float:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    msg = b"x" * 64
    try:

        def trips():
            for _ in range(TRIPS):
                a.sendall(msg)
                b.recv(64)
                b.sendall(msg)
                a.recv(64)

        return statistics.median(_timed(trips) for _ in range(REPS)) / TRIPS / 1000
    finally:
        a.close()
        b.close()


def take() -> dict:
    """The three figures, rounded to what their spread supports."""
    return {
        "syscall_ns": round(_syscall(), 1),
        "memcpy_gbs": round(_memcpy(), 2),
        "loopback_us": round(_loopback(), 2),
    }


SLOWER_IS_HIGHER = {"syscall_ns": True, "memcpy_gbs": False, "loopback_us": True}


def worst(rec: dict | None) -> dict | None:
    """The slower of a run's before and after fingerprints, figure by figure (None: none)."""
    fp = (rec or {}).get("fingerprint") or {}
    got = [x for x in (fp.get("before"), fp.get("after")) if x]
    if not got:
        return None
    return {
        k: (max if up else min)(x[k] for x in got if x.get(k) is not None)
        for k, up in SLOWER_IS_HIGHER.items()
        if any(x.get(k) is not None for x in got)
    }


def departs(run: dict | None, others: list[dict]) -> str:
    """'' or why fingerprint `run` (worst()) departs from the median of `others` (the host's
    runs of one build, itself included): at least two of its three figures DEPARTS times
    slower or faster. One figure alone is not enough: idle, on the book's VM, the system call
    varied 1.3x and the socket round trip 1.6x between processes, but not together, while a
    slower machine or a busy neighbour moves all three. '' with fewer than 3 runs to compare."""
    if not run or len(others) < 3:
        return ""
    far = []
    for k in SLOWER_IS_HIGHER:
        vals = [o[k] for o in others if o and o.get(k)]
        if k not in run or len(vals) < 3:
            continue
        med = statistics.median(vals)
        r = run[k] / med if med else 1.0
        if r >= DEPARTS or r <= 1 / DEPARTS:
            far.append(f"{k} {r:.2f}×")
    if len(far) < 2:
        return ""
    return "its fingerprint departs from its host's median (" + ", ".join(far) + ")"
