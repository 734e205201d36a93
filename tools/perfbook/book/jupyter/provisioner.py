"""How every notebook kernel of ours is reached: over Unix sockets in the private state directory.

A kernel that jupyter_client starts the usual way listens on five TCP ports of 127.0.0.1, which
every local user can connect to. Its messages are signed with the key in its connection file,
which stops another user from sending one, not from reading: subscribed to the output channel
(IOPub) of a root papermill collect, user nobody read every message, progress, paths, code and
outputs (issue #43). So the environment's `python3` kernelspec (perfbook.book.jupyter.kernel) names this
provisioner, and it starts the kernel with transport "ipc": the kernel's sockets and its
connection file live in <state dir>/kernels (perfbook.hoststate.statedir: 0700, ours), where no other user can
reach them. It serves every client that starts a kernel from that spec (papermill,
`python -m perfbook refresh`, a notebook server); nbval's current-environment kernel gets it as the
default provisioner (perfbook.book.jupyter.nbval_plugin).

Names carry the pid of the process that started the kernel (its owner): the connection file
k<pid>-<n>.json and the sockets k<pid>-<n>-<port>. jupyter_client removes them when it shuts
the kernel down; perfbook.hoststate.sweep removes those of owners that died before it could. While a zygote
serves the process (`python -m perfbook refresh`), a kernel of ours is forked from it
(perfbook.book.jupyter.zygote).
"""

from __future__ import annotations

import itertools
import os
import weakref
from pathlib import Path

from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
from jupyter_client.provisioning import LocalProvisioner
from jupyter_core.utils import ensure_async, run_sync

from perfbook.book.jupyter.kernel import PROVISIONER
from perfbook.book.jupyter.zygote import fork_kernel
from perfbook.core.errors import PerfbookError
from perfbook.core.guard import restoring
from perfbook.hoststate.statedir import subdir

SOCKET_PATH_MAX = 107  # bytes of a Unix socket's path (sun_path holds 108, with its NUL)
_numbers = itertools.count(1)
_unfinished: weakref.WeakSet = weakref.WeakSet()  # kernels started here, not yet cleaned up


def kernel_base(directory: Path) -> Path:
    """A new k<pid>-<n> name in `directory`, short enough for its sockets' paths."""
    while True:
        base = directory / f"k{os.getpid()}-{next(_numbers)}"
        longest = len(os.fsencode(f"{base}-99"))
        if longest > SOCKET_PATH_MAX:
            raise PerfbookError(
                f"{directory} is too long a path for a kernel's Unix sockets "
                f"({longest} of at most {SOCKET_PATH_MAX} bytes): set "
                "PERFBOOK_STATE_DIR to a shorter directory"
            )
        if not any(directory.glob(f"{base.name}[.-]*")):
            return base


def check_kernelspec(name: str) -> None:
    """Refuse, in one line, a kernelspec `name` that does not name this provisioner: its kernels
    would listen on TCP (ipykernel reinstalled puts its own spec back; tools/setup.sh writes ours)."""
    try:
        spec = KernelSpecManager().get_kernel_spec(name)
    except NoSuchKernel:
        raise PerfbookError(
            f"no {name} kernelspec (bash tools/setup.sh writes the python3 one)"
        ) from None
    if spec.metadata.get("kernel_provisioner", {}).get("provisioner_name") != PROVISIONER:
        raise PerfbookError(
            f"the {name} kernelspec in {spec.resource_dir} does not name perfbook's "
            "kernel provisioner, and its kernels would listen on TCP "
            "(bash tools/setup.sh writes the python3 one)"
        )


# The environment the kernels this process starts get on top of its own: set by the nbval plugin
# for nbval's kernels, in the pytest process only. A variable of this process, not of its
# environment: a papermill collect a test starts, and the kernel that runs it, stay this machine
# (an environment variable here once gave a collect libfaketime, which hung it in a futex).
EXTRA_ENV: dict[str, str] = {}


class PrivateProvisioner(LocalProvisioner):
    """jupyter_client's LocalProvisioner, with the kernel on ipc sockets in the private state
    directory, and forked from the zygote that serves this process if one does."""

    _base: Path | None = None  # kept across a restart: the same file and sockets

    async def pre_launch(self, **kwargs):
        km = self.parent
        if km is not None:
            if self._base is None:
                self._base = kernel_base(subdir("kernels"))
            km.transport = "ipc"
            km.cache_ports = False  # TCP ports: none to reserve
            km.ip = str(self._base)  # the sockets: <ip>-<port>
            km.connection_file = f"{self._base}.json"
            _unfinished.add(self)
        return await super().pre_launch(**kwargs)

    def _finalize_env(self, env: dict) -> None:
        """The kernel's environment: its parent's, with EXTRA_ENV on top (nbval's kernels run
        as another machine: perfbook.book.jupyter.othermachine)."""
        super()._finalize_env(env)
        env.update(EXTRA_ENV)

    async def cleanup(self, restart=False):
        await super().cleanup(restart)
        if not restart:  # jupyter_client removed the file and the sockets
            _unfinished.discard(self)

    async def launch_kernel(self, cmd, **kwargs):
        with restoring():  # a signal can't fall between the fork and our record of it
            # a zygote's fork would keep the zygote's numpy and clock: another machine needs exec
            proc = None if EXTRA_ENV else fork_kernel(cmd, kwargs)
            if proc is not None:
                self.process, self.pid, self.pgid = proc, proc.pid, proc.pid  # its own session
        if proc is None:
            return await super().launch_kernel(cmd, **kwargs)
        self.cwd = kwargs.get("cwd") or os.getcwd()
        return self.connection_info


def shut_down_unfinished() -> None:
    """Shut down every kernel this process started and has not cleaned up after, and remove its
    connection file and sockets. nbclient does so only for a kernel that has finished starting;
    a signal that lands while a kernel starts leaves it to us (perfbook.book.jupyter.execute)."""

    async def stop(km):
        if km.has_kernel:
            await ensure_async(km.shutdown_kernel(now=True))
        await ensure_async(km.cleanup_resources())

    for prov in list(_unfinished):
        if prov.parent is not None:
            run_sync(stop)(prov.parent)
