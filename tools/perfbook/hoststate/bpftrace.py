"""One bpftrace session: start a program, wait until its probes are attached, stop it with
SIGINT and read what it printed (its maps). Used by every chapter that runs bpftrace.

    bt = bpftrace.start(prog, log)          # returns once bpftrace printed "Attaching ..."
    ctx.undo.callback(proc.kill_group, bt)  # register right away: never an orphan attached to us
    ...                                     # the workload under the probes
    text = bpftrace.stop(bt, log)           # everything printed after "Attaching" (the maps)

bpftrace runs in its own session, with SIGINT at its default action (a run started from
`nohup ... &` inherits it ignored; perfbook.core.proc.interruptible_child) and PR_SET_PDEATHSIG, so it
dies with the measuring process even on SIGKILL (and the run's cgroup catches anything else,
perfbook.hoststate.cgroup).
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import time

from perfbook.core.errors import PerfbookError
from perfbook.core.proc import interruptible_child, kill_group

ATTACH_TIMEOUT_S = 60.0
# bpftrace 0.17 prints this as an ERROR when setrlimit(RLIMIT_MEMLOCK, infinity) fails (a
# container without CAP_SYS_RESOURCE), then goes on: since Linux 5.11 BPF memory is charged to
# the memory cgroup, not to RLIMIT_MEMLOCK. There it names no failure, and no error of ours
# quotes it; on an older kernel it may be the cause, and stays in.
HARMLESS = "couldn't set RLIMIT_MEMLOCK"


def _memcg_charged(release: str) -> bool:
    """Whether a kernel of this release charges BPF memory to its cgroup (5.11 and later)."""
    m = re.match(r"(\d+)\.(\d+)", release)
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (5, 11)


STOP_TRIES, STOP_WAIT_S = 12, 5.0  # now and then a SIGINT is lost: send it again


def start(prog: str, log=lambda s: None, timeout: float = ATTACH_TIMEOUT_S) -> subprocess.Popen:
    """bpftrace -e prog, returned once its probes are attached. If it exits first or does not
    attach within `timeout` seconds, it is killed and PerfbookError says what it printed."""
    bt = subprocess.Popen(
        ["bpftrace", "-e", prog],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=interruptible_child,
    )
    out: list[str] = []
    try:
        sel = selectors.DefaultSelector()
        sel.register(bt.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise PerfbookError(
                    f"bpftrace did not attach within {timeout:.0f} s: " + " ".join(out)[-300:]
                )
            line = bt.stdout.readline()
            if not line:
                raise PerfbookError("bpftrace exited before attaching: " + " ".join(out)[-300:])
            if HARMLESS not in line or not _memcg_charged(os.uname().release):
                out.append(line.strip())
            if line.startswith("Attaching"):
                log(f"bpftrace {bt.pid} attached ({line.strip()})")
                return bt
    except BaseException:
        kill_group(bt)
        raise


def stop(bt: subprocess.Popen, log=lambda s: None) -> str:
    """SIGINT bpftrace (again if a signal is lost) and return what it printed as it exited;
    its process group is killed in any case. PerfbookError if it printed nothing in time."""
    rest = None
    try:
        for attempt in range(STOP_TRIES):
            bt.send_signal(signal.SIGINT)
            try:
                rest, _ = bt.communicate(timeout=STOP_WAIT_S)
                break
            except subprocess.TimeoutExpired:
                log(
                    f"bpftrace has not exited {STOP_WAIT_S * (attempt + 1):.0f} s after SIGINT; "
                    "sending it again"
                )
    finally:
        kill_group(bt)
    if rest is None:
        raise PerfbookError(
            f"bpftrace did not print its maps within {STOP_TRIES * STOP_WAIT_S:.0f} s of SIGINT"
        )
    return rest
