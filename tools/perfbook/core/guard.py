"""The one signal and restore mechanism of a measure run.

Everything a run changes (probes, instances, knobs, namespaces, process groups, scratch
directories) is undone by the code that changed it, in `finally` blocks and context
managers. This module makes sure those run, whatever stops the run:

* `interruptible()` -- while active, SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt
  in the main thread, so every `finally` of the run executes. Where raising would lose the
  exception (an at-fork hook, a finalizer) or plant it in an asyncio task, the signal is
  delivered again shortly. Only the first signal
  raises: later ones (a second Ctrl-C, jupyter_client's SIGTERM after its SIGINT) are
  recorded in `received()` and let the cleanup finish; SIGKILL is left for impatience,
  and the sweep handles what it leaves. It is re-entrant and process-wide: the handlers
  are installed by the outermost user and given back when it leaves. This is the only
  place in tools/ that installs a handler for SIGTERM.
* `restoring()` -- blocks SIGINT/SIGTERM/SIGHUP while a cleanup runs, so a second Ctrl-C
  cannot cut a restore in half.
* A papermill collect does not measure inside the notebook kernel: jupyter_client SIGKILLs
  a kernel's process group a few seconds after Ctrl-C, whatever it is doing. The kernel
  starts `python -m perfbook collect` in a session of its own instead (perfbook.book.notebook), with
  PR_SET_PDEATHSIG set to SIGTERM, so that however the kernel ends, the process that holds
  the state gets an ordinary SIGTERM and restores it here.
* Children are started with perfbook.core.proc.die_with_parent (SIGKILL when we die) in a
  process group of their own (perfbook.core.proc.run_group / kill_group).

A SIGKILLed run cannot clean up; `python -m perfbook sweep` (and the next run) removes what
it left, see tools/perfbook/hoststate/sweep.py.
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_depth = 0
_saved: dict = {}
_received: list[int] = []


# Code that Python runs where an exception is printed and dropped ("Exception ignored in"):
# at-fork hooks (logging's lock hooks run in every fork, e.g. Popen with a preexec_fn),
# finalizers and weakref callbacks. A signal that lands there, or in anything they call,
# is delivered again, shortly.
_SWALLOWING = {
    "_releaseLock",
    "_acquireLock",
    "_after_at_fork_child_reinit_locks",
    "__del__",
    "_remove_dead_weakref",
    "_cleanup",
    "_after_fork",
    "_at_fork_reinit",
    "_reset_internal_locks",
}
_raised = False
_owner = 0  # the pid that installed the handlers


# An asyncio callback or task step (nbclient runs a notebook's cells as tasks, in papermill and
# in `python -m perfbook refresh`): a KeyboardInterrupt raised inside a task's step becomes the
# task's result and is raised again in whatever awaits it later, the kernel's shutdown that
# follows included. Delivered again, it lands where the loop waits (its selector), and leaves
# it, once.
def _in_asyncio_callback(code) -> bool:
    return code.co_name == "_run" and code.co_filename.endswith(
        os.path.join("asyncio", "events.py")
    )


def _swallowed(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_name in _SWALLOWING or _in_asyncio_callback(frame.f_code):
            return True
        frame = frame.f_back
    return False


def _handler(signum, frame):
    global _raised
    if os.getpid() != _owner:
        # a child between fork and exec (Popen with a preexec_fn runs Python there): it
        # would print a swallowed KeyboardInterrupt and exec anyway; die as exec'd code would
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    if _raised:
        _received.append(signum)
        return  # the run is already stopping: a later signal must not cut its cleanup short
    if _swallowed(frame):
        threading.Timer(0.05, signal.pthread_kill, (threading.main_thread().ident, signum)).start()
        return
    _received.append(signum)
    _raised = True
    raise KeyboardInterrupt(
        f"{signal.Signals(signum).name}: stopping, restoring what this run changed"
    )


def sigint_default() -> None:
    """In a child between fork and exec (a preexec_fn, perfbook.core.proc.interruptible_child): SIGINT
    back to its default action. A disposition of *ignore* survives exec, and a run started
    from `nohup ... &` or a script's background job inherits SIGINT ignored; a program we stop
    with SIGINT (bpftrace, perf record) that keeps inherited dispositions would never stop."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def received() -> list[int]:
    """The signals received during the current interruptible stretch (in order); [] outside one."""
    return list(_received) if _depth else []


def check_interrupted() -> None:
    """Raise again for a signal already received: Python drops an exception raised inside
    a finalizer or a callback ("Exception ignored in ..."), so long loops call this."""
    if _received and _depth:
        raise KeyboardInterrupt(f"{signal.Signals(_received[-1]).name}: stopping")


def interrupted_by() -> str | None:
    """The name of the signal that stopped the last stretch (the first one received)."""
    return signal.Signals(_received[0]).name if _received else None


def enter() -> None:
    """Start an interruptible stretch (see interruptible()); pair with leave()."""
    global _depth, _raised, _owner
    if threading.current_thread() is not threading.main_thread():
        return
    if _depth == 0:
        _raised = False
        _owner = os.getpid()
        _received.clear()
        for s in SIGNALS:
            _saved[s] = signal.signal(s, _handler)
    _depth += 1


def leave() -> None:
    """End the stretch enter() began; the outermost leave() gives the handlers back."""
    global _depth
    if threading.current_thread() is not threading.main_thread() or _depth == 0:
        return
    _depth -= 1
    if _depth == 0:
        with restoring():
            for s, h in _saved.items():
                signal.signal(s, h)
            _saved.clear()


@contextmanager
def interruptible():
    """SIGINT/SIGTERM/SIGHUP -> KeyboardInterrupt while the block runs (see module doc)."""
    enter()
    try:
        yield
    finally:
        leave()


@contextmanager
def restoring():
    """Block our signals while a cleanup runs (they are delivered when it ends)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, set(SIGNALS))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
