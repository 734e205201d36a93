"""The notebook kernel this book's notebooks run in: ipykernel, started the private way.

tools/setup.sh points the environment's `python3` kernelspec at this module
(`install_kernelspec`), with perfbook's kernel provisioner (perfbook.book.jupyter.provisioner) named in it:
every client that starts a kernel from that spec (papermill, `python -m perfbook refresh`, a
notebook server) reaches it over Unix sockets in the private state directory, never TCP.

The kernel itself is ipykernel's, with one change: a shutdown request that arrives while a
cell still runs waits for that cell's reply. jupyter_client interrupts a kernel and asks it to
shut down at once (nbclient does so on Ctrl-C); ipykernel then closed its sockets under the
interrupted cell, which printed a ZMQError traceback ("Socket operation on non-socket") when
the cell ended. jupyter_client still SIGTERMs a kernel that takes too long.

And one repair of ipykernel 7.4.0's IOPub thread (_quiet_schedule): a message flushed while
the kernel shuts down (the control thread flushes stderr after the shutdown request) could
find the thread still alive, then its event pipe closed by stop() before the wake-up was
sent, and tornado printed a ZMQError traceback ("Socket operation on non-socket") into the
collect's output. Seen once in a `make test` of 2026-11-29 (a SIGTERM of a papermill collect);
ipykernel's pull request 1518 caught the same race in the send itself, not in this wake-up.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from pathlib import Path

PROVISIONER = (
    "perfbook-private"  # the entry point of perfbook.book.jupyter.provisioner.PrivateProvisioner
)


def install_kernelspec(prefix: str | None = None) -> Path:
    """Write <prefix>/share/jupyter/kernels/python3/kernel.json to start this module."""
    d = Path(prefix or sys.prefix) / "share" / "jupyter" / "kernels" / "python3"
    d.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": ["python", "-m", "perfbook", "kernel", "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
        "metadata": {"debugger": True, "kernel_provisioner": {"provisioner_name": PROVISIONER}},
        "kernel_protocol_version": "5.5",
    }
    (d / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n")
    return d / "kernel.json"


def _kernel_class():
    from ipykernel.ipkernel import IPythonKernel  # lazy: see launch()

    class Kernel(IPythonKernel):
        """IPythonKernel whose shutdown waits for the shell request in progress."""

        def __init__(self, **kw):
            super().__init__(**kw)
            self._running = 0  # shell requests being handled (main, subshells)
            self._running_lock = threading.Lock()

        def pre_handler_hook(self):
            with self._running_lock:
                self._running += 1
            super().pre_handler_hook()

        def post_handler_hook(self):
            try:
                super().post_handler_hook()
            finally:
                with self._running_lock:
                    self._running -= 1

        async def do_shutdown(self, restart):
            while self._running:  # the interrupted cell sends its reply first
                await asyncio.sleep(0.02)
            return super().do_shutdown(restart)

    return Kernel


def _client_gone(argv: list[str]) -> bool:
    """The connection file our client named (`-f PATH`) is gone: the client gave up (a signal
    stopped it while this kernel started) and removed it. ipykernel would write a new one and
    listen on TCP; this kernel ends instead."""
    for flag, value in zip(argv, argv[1:]):
        if flag == "-f" and os.path.isabs(value):
            return not os.path.exists(value)
    return False


def _quiet_schedule() -> None:
    """IOPubThread.schedule that, where stop() closed the calling thread's event pipe between
    schedule's is_alive() check and its send (ENOTSOCK: the IO thread is stopping), runs the
    function here, as schedule itself does once the thread has stopped."""
    import zmq  # lazy: as launch()'s ipykernel
    from ipykernel.iostream import IOPubThread  # lazy: as launch()'s

    if getattr(IOPubThread.schedule, "perfbook_quiet", False):
        return
    schedule = IOPubThread.schedule

    def quiet(self, f):
        try:
            schedule(self, f)
        except zmq.ZMQError as e:
            if e.errno != zmq.ENOTSOCK:
                raise
            f()

    quiet.perfbook_quiet = True
    IOPubThread.schedule = quiet


def launch(**traits) -> None:
    """Start the kernel with sys.argv's options; `traits` set IPKernelApp's
    (perfbook.book.jupyter.zygote passes parent_handle)."""
    if _client_gone(sys.argv):
        sys.exit(1)
    # lazy: pytest loads this module's PROVISIONER through the nbval plugin in every session;
    # ipykernel at the top would cost each one 0.25 s (2 ms without)
    from ipykernel.kernelapp import IPKernelApp  # lazy: see above

    _quiet_schedule()
    IPKernelApp.launch_instance(kernel_class=_kernel_class(), **traits)


def main(argv: list[str]) -> int:
    """`perfbook kernel -f CONNECTION_FILE ...`, the kernelspec's command."""
    if sys.path and sys.path[0] == "":
        del sys.path[
            0
        ]  # as ipykernel_launcher does: the notebook's directory is not a package root
    sys.argv = [sys.argv[0], *argv]
    launch()
    return 0
