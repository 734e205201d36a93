"""QEMU's threads seen from the host: the CPU time of each thread of a QEMU process, from
/proc/<pid>/task/<tid>/stat, by class (main loop, vCPU, I/O thread, QMP monitor, workers).
perfbook.qemu.guest re-exports these names; GuestConfig(thread_names=True) makes QEMU name its threads."""

from __future__ import annotations

import os
import re
from pathlib import Path

THREAD_CLASSES = ("main", "vcpu", "iothread", "monitor", "worker", "other", "exited")


def parse_task_stat(text: str) -> tuple[str, int, int]:
    """(comm, utime, stime) in clock ticks from a /proc/<pid>[/task/<tid>]/stat line; comm may
    hold spaces and parentheses ("CPU 0/TCG"), so the fields are read after the last ')'."""
    a, b = text.index("("), text.rindex(")")
    f = text[b + 2 :].split()
    return text[a + 1 : b], int(f[11]), int(f[12])


def thread_class(comm: str, tid: int | None = None, pid: int | None = None) -> str:
    """main (QEMU's main loop: the thread whose id is the pid), vcpu ("CPU n/TCG", "CPU n/KVM",
    "ALL CPUs/TCG"), monitor (the QMP monitor's own I/O thread, "IO mon_iothread"), iothread
    ("IO <id>" of an -object iothread), worker (the block layer's thread pool), or other
    (call_rcu and the rest). Names need GuestConfig(thread_names=True)."""
    if tid is not None and tid == pid:
        return "main"
    if re.fullmatch(r"(CPU \d+|ALL CPUs)/\w+", comm):
        return "vcpu"
    if comm == "IO mon_iothread":
        return "monitor"
    if comm.startswith("IO "):
        return "iothread"
    if comm == "worker":
        return "worker"
    return "other"


def thread_times(pid: int, proc: Path = Path("/proc")) -> dict:
    """A snapshot of a process's CPU time: {"process": (user_s, sys_s), "threads": {tid: (comm,
    user_s, sys_s)}}. The process's own line includes the threads that have exited."""
    tick = os.sysconf("SC_CLK_TCK")
    _, u, s = parse_task_stat((proc / str(pid) / "stat").read_text())
    threads = {}
    for t in (proc / str(pid) / "task").iterdir():
        try:
            comm, tu, ts = parse_task_stat((t / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue  # the thread ended while we looked: its time is in the process line
        threads[int(t.name)] = (comm, tu / tick, ts / tick)
    return {"process": (u / tick, s / tick), "threads": threads}


def thread_delta(before: dict, after: dict, pid: int) -> dict[str, dict]:
    """CPU seconds between two thread_times() snapshots per thread class: {class: {"threads",
    "user_s", "sys_s"}}. A thread that appeared counts from zero; the time of threads that
    ended in between is the process's delta less the live threads' ("exited")."""
    out = {c: {"threads": 0, "user_s": 0.0, "sys_s": 0.0} for c in THREAD_CLASSES}
    tu = ts = 0.0
    for tid, (comm, u, s) in after["threads"].items():
        _, u0, s0 = before["threads"].get(tid, (comm, 0.0, 0.0))
        c = out[thread_class(comm, tid, pid)]
        c["threads"] += 1
        c["user_s"] += u - u0
        c["sys_s"] += s - s0
        tu, ts = tu + u - u0, ts + s - s0
    pu = after["process"][0] - before["process"][0]
    ps = after["process"][1] - before["process"][1]
    out["exited"].update(user_s=max(pu - tu, 0.0), sys_s=max(ps - ts, 0.0))
    return out


def stall_report(result: str, console: str, pid: int, proc: Path = Path("/proc")) -> str:
    """Where a guest that ran out of time stood, in one line, read before QEMU is stopped: the
    last line of its script's output and of its console, and each QEMU thread's scheduler state
    (R running, S sleeping, D in the kernel) with its CPU seconds so far."""

    def last(text: str) -> str:
        lines = [ln.strip() for ln in text.replace("\r", "").splitlines() if ln.strip()]
        return repr(lines[-1][:120]) if lines else "nothing"

    tick, threads = os.sysconf("SC_CLK_TCK"), []
    for t in sorted((proc / str(pid) / "task").glob("*"), key=lambda t: int(t.name)):
        try:
            text = (t / "stat").read_text()
            comm, u, s = parse_task_stat(text)
        except (OSError, ValueError, IndexError):
            continue  # ended while we looked
        threads.append(f"{comm} {text[text.rindex(')') + 2]} {(u + s) / tick:.1f} s")
    return (
        f"the script's last line: {last(result)}; the console's: {last(console)}; "
        f"QEMU's threads (state, CPU): {', '.join(threads) or 'gone'}"
    )
