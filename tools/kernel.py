"""The notebook kernel this book's notebooks run in: ipykernel, without one warning.

ipykernel warns on every start that a kernel reached over TCP is not encrypted. papermill
and nbval start kernels over TCP on 127.0.0.1 with HMAC-signed messages (the key is in a
0600 connection file), and no measurement runs inside a kernel: a collect runs in
`python -m tools collect`, a process of its own (tools.notebook.run_mode), and our own
`refresh` uses Unix sockets in the private state directory. The warning is dropped here, and
only that one; every other kernel message still reaches the terminal. tools/setup.sh points
the environment's `python3` kernelspec at this module (`install_kernelspec`).
"""
from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

DROPPED = "Kernel is running over TCP without encryption"


class _DropTransportWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return DROPPED not in record.getMessage()


def install_kernelspec(prefix: str | None = None) -> Path:
    """Write <prefix>/share/jupyter/kernels/python3/kernel.json to start this module."""
    d = Path(prefix or sys.prefix) / "share" / "jupyter" / "kernels" / "python3"
    d.mkdir(parents=True, exist_ok=True)
    spec = {"argv": ["python", "-m", "tools.kernel", "-f", "{connection_file}"],
            "display_name": "Python 3 (ipykernel)", "language": "python",
            "metadata": {"debugger": True}, "kernel_protocol_version": "5.5"}
    (d / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n")
    return d / "kernel.json"


def main(**traits) -> None:
    """Start the kernel; `traits` set IPKernelApp's (tools.warmkernel passes parent_handle)."""
    from ipykernel import kernelapp

    class IPKernelApp(kernelapp.IPKernelApp):  # the same name: its config section and aliases
        def init_sockets(self):
            log = getattr(self.log, "logger", self.log)  # a Logger or a LoggerAdapter
            log.addFilter(_DropTransportWarning())
            super().init_sockets()

    IPKernelApp.launch_instance(**traits)


if __name__ == "__main__":
    if sys.path and sys.path[0] == "":
        del sys.path[0]   # as ipykernel_launcher does: the notebook's directory is not a package root
    main()
