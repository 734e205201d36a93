"""tools.guard: the one place that turns SIGINT/SIGTERM/SIGHUP into KeyboardInterrupt."""
from __future__ import annotations

import signal
import time

import pytest

from tools import guard


def test_first_signal_raises_later_ones_let_cleanup_finish():
    cleaned = []
    with guard.interruptible():
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            try:
                signal.raise_signal(signal.SIGTERM)
                time.sleep(5)
            finally:
                signal.raise_signal(signal.SIGINT)   # a second Ctrl-C during the cleanup
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
            _releaseLock()           # the handler must not raise inside it
            reached = True
            time.sleep(5)            # ... but shortly after, outside it
    assert reached


def test_no_signal_no_interrupt_and_received_is_empty_outside():
    with guard.interruptible():
        guard.check_interrupted()
    assert guard.received() == []
