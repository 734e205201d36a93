"""perfbook.core.guard: the one place that turns SIGINT/SIGTERM/SIGHUP into KeyboardInterrupt."""

from __future__ import annotations

import signal
import time

import pytest

from perfbook.core import guard


def test_first_signal_raises_later_ones_let_cleanup_finish():
    cleaned = []
    with guard.interruptible():
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            try:
                signal.raise_signal(signal.SIGTERM)
                time.sleep(5)
            finally:
                signal.raise_signal(signal.SIGINT)  # a second Ctrl-C during the cleanup
                cleaned.append("restored")
        assert guard.received() == [signal.SIGTERM, signal.SIGINT]
        assert guard.interrupted_by() == "SIGTERM"
    assert cleaned == ["restored"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, "handlers are given back"


def test_nested_stretches_share_one_handler():
    with guard.interruptible():
        inner = signal.getsignal(signal.SIGTERM)
        with guard.interruptible():
            assert signal.getsignal(signal.SIGTERM) is inner
        assert signal.getsignal(signal.SIGTERM) is inner, "the inner exit keeps the handler"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def _releaseLock():
    """Named like logging's at-fork hook, where Python drops an exception."""
    signal.raise_signal(signal.SIGTERM)


def test_a_signal_in_a_swallowing_hook_is_delivered_again():
    reached = False
    with guard.interruptible():
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            _releaseLock()  # the handler must not raise inside it
            reached = True
            time.sleep(5)  # ... but shortly after, outside it
    assert reached


def test_no_signal_no_interrupt_and_received_is_empty_outside():
    with guard.interruptible():
        guard.check_interrupted()
    assert guard.received() == []


def _after_fork():
    """Named like threading's at-fork hook; the signal lands in a function it calls."""

    def _reinit():
        signal.raise_signal(signal.SIGTERM)

    _reinit()


def test_a_signal_below_a_swallowing_hook_is_delivered_again():
    """CI printed 'Exception ignored in: <function _after_fork>' with a KeyboardInterrupt
    traceback: the signal landed in threading._after_fork, and only the innermost frame was
    checked against the swallowing hooks."""
    reached = False
    with guard.interruptible():
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            _after_fork()
            reached = True
            time.sleep(5)
    assert reached


def test_a_child_between_fork_and_exec_dies_of_the_signal_quietly():
    """A Popen preexec_fn runs Python in the child before exec; a group SIGTERM landing there
    kills the child as it would kill the exec'd program, with no traceback printed."""
    import os
    import subprocess
    import sys

    code = (
        "import os, signal, subprocess, sys\n"
        "from perfbook.core import guard\n"
        "with guard.interruptible():\n"
        "    try:\n"
        "        p = subprocess.Popen(['true'], preexec_fn=lambda: os.kill(os.getpid(), signal.SIGTERM))\n"
        "        print('child', p.wait())\n"
        "    except KeyboardInterrupt:\n"
        "        print('parent interrupted')\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert "Traceback" not in r.stderr and "ignored" not in r.stderr, r.stderr
    assert f"child {-signal.SIGTERM}" in r.stdout, r.stdout + r.stderr


def test_a_signal_inside_an_asyncio_task_is_raised_where_the_loop_waits():
    """nbclient runs a notebook's cells as asyncio tasks. A KeyboardInterrupt raised inside a
    task's step is kept as the task's result and raised again in whatever awaits it: in the
    kernel's shutdown that follows, which then left the kernel's files behind. The signal is
    delivered again once the loop waits, and the task is not left holding it."""
    import asyncio

    loop = asyncio.new_event_loop()

    async def step():
        signal.raise_signal(signal.SIGTERM)  # lands in the task's step
        await asyncio.sleep(5)

    task = loop.create_task(step())
    try:
        with guard.interruptible():
            with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
                loop.run_until_complete(task)
        assert not task.done(), f"the task holds {task.exception()!r}"
    finally:
        task.cancel()
        loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
        loop.close()
