"""Errors that a reader can act on.

Each one carries a message that says what to fix. The CLI and the notebooks show
only that message (one line), never a traceback wall.
"""

from __future__ import annotations


class PerfbookError(Exception):
    """Base class: the message is complete and tells the user what to do."""


class ParameterError(PerfbookError, ValueError):
    """A papermill/CLI parameter is wrong."""


class MissingPrerequisite(PerfbookError):
    """Something this host lacks (a tool, root, tracefs, /dev/kvm ...).

    In a measure run this turns into a *skip* with the message as the reason.
    """


class DatasetError(PerfbookError):
    """A dataset can't be written (exists already, unwritable directory ...)."""


class LockBusy(PerfbookError):
    """Another measure run holds the machine-wide lock."""


class BootTimeout(PerfbookError):
    """A KVM guest did not reach init in time (perfbook.qemu.guest then tries TCG)."""


class GuestStalled(PerfbookError):
    """A guest's script printed nothing for GuestConfig.stall_seconds (perfbook.qemu.guest); the
    caller may boot it again."""


def one_line(exc: BaseException) -> str:
    """Format an exception as the single line we show to users."""
    msg = str(exc).strip().splitlines()
    text = msg[0] if msg else exc.__class__.__name__
    return f"error: {text}"


def install_notebook_handler() -> None:
    """In a notebook, show our errors as one line instead of a traceback.

    The cell still fails (so papermill exits non-zero); the notebook's error
    output is only 'ParameterError: ...' for PerfbookError subclasses.
    """
    try:
        # lazy: the bottom layer; the run monitor (python -S) has no IPython
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return
    ip = get_ipython()
    if ip is None:
        return

    def _handler(shell, etype, value, tb, tb_offset=None):
        # Show it as IPython's 'Minimal' traceback: just "ParameterError: ...".
        itb = shell.InteractiveTB
        old = itb.mode
        itb.set_mode("Minimal")
        try:
            shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        finally:
            itb.set_mode(old)
        return None

    ip.set_custom_exc((PerfbookError,), _handler)
