"""perfbook.hoststate.bpftrace on a stand-in bpftrace (a shell script on PATH that behaves like the real one:
"Attaching N probes...", then its maps on SIGINT), so start/stop are tested without root."""

from __future__ import annotations

import os
import stat

import pytest

from perfbook.core.errors import PerfbookError
from perfbook.core.proc import pid_alive
from perfbook.hoststate import bpftrace

ATTACHES = """#!/bin/sh
trap 'echo; echo "@hits: 42"; exit 0' INT
echo "Attaching 1 probe..."
while :; do sleep 0.05; done
"""
IGNORES_FIRST_INT = """#!/bin/sh
n=0
trap 'n=$((n+1)); if [ $n -ge 2 ]; then echo "@hits: 7"; exit 0; fi' INT
echo "Attaching 1 probe..."
while :; do sleep 0.05; done
"""
FAILS = """#!/bin/sh
echo "ERROR: uprobe target file does not exist"
exit 1
"""
SILENT = """#!/bin/sh
echo $$ > "$(dirname "$0")/pid"
exec sleep 30
"""


@pytest.fixture
def fake(tmp_path, monkeypatch):
    def make(script: str):
        exe = tmp_path / "bpftrace"
        exe.write_text(script)
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
        monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")

    return make


def test_start_returns_once_attached_and_stop_reads_the_maps(fake):
    fake(ATTACHES)
    said = []
    bt = bpftrace.start("uprobe:/x:f { @hits = count(); }", said.append)
    assert bt.poll() is None and "attached" in said[0]
    assert "@hits: 42" in bpftrace.stop(bt)
    assert not pid_alive(bt.pid)


def test_stops_when_we_run_with_sigint_ignored(fake):
    """Started from `nohup make test &` (or any script's background job), every process
    inherits SIGINT ignored, and a shell cannot trap a signal ignored on entry: bpftrace must
    get SIGINT back at its default before it starts, or stop() waits out its minute."""
    import signal

    fake(ATTACHES)
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        bt = bpftrace.start("p")
    finally:
        signal.signal(signal.SIGINT, old)
    assert "@hits: 42" in bpftrace.stop(bt)


def test_a_lost_sigint_is_sent_again(fake, monkeypatch):
    fake(IGNORES_FIRST_INT)
    monkeypatch.setattr(bpftrace, "STOP_WAIT_S", 0.5)
    said = []
    bt = bpftrace.start("p", said.append)
    assert "@hits: 7" in bpftrace.stop(bt, said.append)
    assert any("sending it again" in s for s in said)


def test_exit_before_attaching_is_one_error_with_its_words(fake):
    fake(FAILS)
    with pytest.raises(PerfbookError, match="exited before attaching.*does not exist"):
        bpftrace.start("p")


def test_no_attach_within_the_timeout_kills_it(fake, tmp_path):
    fake(SILENT)
    with pytest.raises(PerfbookError, match="did not attach within 1 s"):
        bpftrace.start("p", timeout=1)
    assert not pid_alive(int((tmp_path / "pid").read_text()))  # killed, and reaped


MEMLOCK_THEN_FAILS = """#!/bin/sh
echo "ERROR: Unknown error -1: couldn't set RLIMIT_MEMLOCK for bpftrace. If your program is not loading, you can try \\"ulimit -l 8192\\" to fix the problem"
echo "ERROR: uprobe target file does not exist"
exit 1
"""


@pytest.mark.parametrize("release,quoted", [("6.1.0-18-amd64", False), ("5.10.0", True)])
def test_the_memlock_warning_is_quoted_only_where_memlock_still_limits_bpf(
    fake, monkeypatch, release, quoted
):
    """bpftrace 0.17 in a container without CAP_SYS_RESOURCE prints an ERROR about
    RLIMIT_MEMLOCK and goes on; since 5.11 it names no failure, so the real cause is the message."""
    fake(MEMLOCK_THEN_FAILS)
    monkeypatch.setattr(
        os, "uname", lambda: os.uname_result(("Linux", "h", release, "#1", "x86_64"))
    )
    with pytest.raises(PerfbookError, match="does not exist") as e:
        bpftrace.start("p")
    assert ("RLIMIT_MEMLOCK" in str(e.value)) == quoted
