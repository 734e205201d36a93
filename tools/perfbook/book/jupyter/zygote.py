"""Notebook kernels forked from a process that has already imported what every notebook imports.

A chapter's kernel spends about 2.5 s of CPU before the notebook's first line of analysis:
ipykernel's start and the imports of numpy, pandas, scipy.stats, matplotlib and seaborn.
`refresh` re-executes 13 notebooks; on 2 cores that is about 15 s of a quick `make all`.

So a refresh process starts one *zygote*, `python -m perfbook zygote FD`, which imports those
(PRELOAD) and nothing of ours, then forks one kernel per notebook. A fork of a process that has
run nothing else starts with those modules loaded and every other state fresh (`random`
reseeds itself in a forked child). The child becomes the ordinary kernel (perfbook.book.jupyter.kernel), with the
command line, environment and working directory jupyter_client gives a kernel it starts itself,
and a session of its own, as a Popen'd kernel has: jupyter_client's interrupt and kill reach its
process group. The kernel provisioner (perfbook.book.jupyter.provisioner) asks for it while a zygote serves the
process (`serving`), and jupyter_client sees it through a pidfd the zygote passes back
(`_Forked`: poll, wait and signals, as on a Popen).

Lifetimes: the zygote dies with the refresh process, and each kernel with the zygote
(PR_SET_PDEATHSIG). A kernel command that is not perfbook.book.jupyter.kernel's, or a zygote that failed, starts
the kernel the usual way. PERFBOOK_WARM_KERNELS=off always does.

Measured 2026-11-28 on the project's machine (2 cores shared with other work, Debian 12; medians
of 3 runs, in turn): `python -m perfbook refresh` of all 14 notebooks of the committed data took
69 s wall and 74 s CPU with the zygote, 98 s and 95 s without (an earlier, quieter measurement:
32 s against 46 s). `python -m perfbook bench zygote` prints these figures.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import traceback
from contextlib import contextmanager

from perfbook.core.proc import die_with_parent

# what a chapter's first cells import (perfbook.book.notebook.init, perfbook.analysis.stats, the figures); importing
# them changes no state a kernel reads later: matplotlib picks its backend when a figure is first
# drawn, from the MPLBACKEND ipykernel sets (and the zygote sets the same before importing it).
# Not matplotlib_inline's backend: importing it is what hooks figures into the kernel's display,
# and that needs the kernel's shell.
PRELOAD = (
    "numpy",
    "pandas",
    "scipy.stats",
    "matplotlib",
    "matplotlib.pyplot",
    "seaborn",
    "IPython",
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "myst_nb",
    "nbformat",
)
KERNEL_COMMAND = ["-m", "perfbook", "kernel"]  # the kernelspec's argv after the interpreter
INLINE = "module://matplotlib_inline.backend_inline"
MAX_MSG = 1 << 20


def enabled() -> bool:
    return os.environ.get("PERFBOOK_WARM_KERNELS", "on") != "off" and hasattr(os, "pidfd_open")


class _Forked:
    """What jupyter_client's LocalProvisioner uses of a Popen, for a kernel the zygote forked: it
    is not our child, so it is watched and signalled through its pidfd. Its exit status stays
    with the zygote (which reaps it); poll() and wait() report 0 once it has ended."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int, pidfd: int):
        self.pid, self._fd, self.returncode = pid, pidfd, None

    def _ended(self, timeout: float | None) -> bool:
        if self.returncode is None and self._fd >= 0:
            if not select.select([self._fd], [], [], timeout)[0]:
                return False
            self.returncode = 0
            os.close(self._fd)
            self._fd = -1
        return True

    def poll(self):
        return self.returncode if self._ended(0) else None

    def wait(self, timeout: float | None = None):
        if not self._ended(timeout):
            raise subprocess.TimeoutExpired(f"kernel {self.pid}", timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self._fd >= 0:
            signal.pidfd_send_signal(self._fd, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def __del__(self):
        if getattr(self, "_fd", -1) >= 0:
            os.close(self._fd)


ZYGOTE_FD = "PERFBOOK_KERNEL_ZYGOTE_FD"  # a refresh child's end of its parent's zygote


class Zygote:
    """Our end of a zygote: `start()` starts one (`python -m perfbook zygote`); `client()`
    gives a child process a socket of its own to the same zygote (its fd number passed in
    ZYGOTE_FD), and `from_env()` is that child's end."""

    def __init__(self, sock: socket.socket, proc: subprocess.Popen | None = None):
        self.sock, self.proc = sock, proc

    @classmethod
    def start(cls) -> Zygote:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "perfbook", "zygote", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        finally:
            theirs.close()
        return cls(ours, proc)

    @classmethod
    def from_env(cls) -> Zygote | None:
        fd = os.environ.pop(ZYGOTE_FD, "")
        if not fd.isdigit():
            return None
        try:
            return cls(socket.socket(fileno=int(fd)))
        except OSError:
            return None

    def client(self) -> socket.socket | None:
        """A new connection to this zygote, for a child process (pass_fds), or None."""
        if self.sock is None:
            return None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            socket.send_fds(self.sock, [b"client"], [theirs.fileno()])
        except OSError:
            ours.close()
            return None
        finally:
            theirs.close()
        return ours

    def fork(self, argv: list[str], env: dict, cwd: str) -> _Forked | None:
        """A kernel for this command, or None when the zygote can't give one (it failed to
        start or died): the caller starts the kernel the usual way."""
        if self.sock is None:
            return None
        try:
            self.sock.sendall(
                json.dumps({"argv": argv, "env": env, "cwd": cwd, "client": os.getpid()}).encode()
            )
            data, fds, _, _ = socket.recv_fds(self.sock, 4096, 1)
        except OSError:
            data, fds = b"", []
        if not data or not fds:
            for fd in fds:
                os.close(fd)
            self.close()
            return None
        return _Forked(json.loads(data)["pid"], fds[0])

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()  # the zygote ends when its first socket closes
            self.sock = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


_serving: Zygote | None = None  # the zygote that forks this process's kernels, if any


@contextmanager
def serving(zygote: Zygote | None):
    """While the block runs, the kernels this process starts from our kernelspec are forked by
    `zygote` (perfbook.book.jupyter.provisioner asks fork_kernel); None: started the usual way."""
    global _serving
    before, _serving = _serving, zygote
    try:
        yield
    finally:
        _serving = before


@contextmanager
def warm_kernels(zygote: Zygote | None = None, wanted: bool = True):
    """While the block runs, this process's kernels fork from `zygote` (this process's
    connection to a parent's, from Zygote.from_env), else from one started here when `wanted`
    and enabled(); either is closed when the block ends. Yields the zygote that serves (None:
    kernels start the usual way). What refresh, the rerun story and the security test use."""
    if zygote is None and wanted and enabled():
        zygote = Zygote.start()
    try:
        with serving(zygote):
            yield zygote
    finally:
        if zygote is not None:
            zygote.close()


def fork_kernel(cmd: list[str], launch: dict) -> _Forked | None:
    """The kernel for `cmd` forked by the zygote serving this process, with the env and cwd of
    jupyter_client's launch arguments; None when none serves, the command is not perfbook.book.jupyter.kernel's,
    or the zygote can't give one (the caller starts the kernel the usual way)."""
    if _serving is None or not _is_ours(cmd):
        return None
    env = dict(launch.get("env") or os.environ)
    return _serving.fork(cmd, env, str(launch.get("cwd") or os.getcwd()))


def _is_ours(cmd: list[str]) -> bool:
    return cmd[1 : 1 + len(KERNEL_COMMAND)] == KERNEL_COMMAND


# ---- the zygote's side ----------------------------------------------------------------------


def _become_kernel(req: dict, start_dir: str) -> None:
    """In the forked child: the kernel jupyter_client would have started with req's argv, env
    and cwd. It ends with the zygote, and with the process that asked for it, as a Popen'd
    kernel ends with its parent (ipykernel's parent poller, here on a pidfd). Never returns."""
    code = 1
    try:
        zygote = os.getppid()
        os.setsid()
        die_with_parent()
        if os.getppid() != zygote:
            os._exit(1)
        try:
            client = os.pidfd_open(int(req["client"]))
        except ProcessLookupError:  # it asked, then died (a refresh killed on Ctrl-C):
            os._exit(1)  # nobody wants this kernel
        threading.Thread(
            target=lambda: (select.select([client], [], []), os._exit(1)), daemon=True
        ).start()
        # signal dispositions: the zygote's, which are a fresh interpreter's (it sets none), as a
        # kernel exec'd from the refresh process would have
        fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(fd, 0)
        os.close(fd)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        if sys.path and sys.path[0] == start_dir:  # `python -m` put its directory first
            sys.path[0] = os.getcwd()
        # lazy: imported in the forked child, after its env is set
        from perfbook.book.jupyter import kernel

        sys.argv = [kernel.__file__, *req["argv"][1 + len(KERNEL_COMMAND) :]]
        # ipykernel watches its parent, as for a kernel jupyter_client starts (JPY_PARENT_PID,
        # read when the zygote imported it), and then prints no how-to-connect banner
        kernel.launch(parent_handle=zygote)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported, then the child ends
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve(fd: int) -> int:
    """Import PRELOAD, then fork a kernel for each request on the socket `fd`, and on every
    client socket passed over it, until `fd` closes."""
    parent = os.getppid()
    die_with_parent()
    if os.getppid() != parent:
        return 1
    first = socket.socket(fileno=fd)
    os.environ.setdefault("MPLBACKEND", INLINE)
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a missing module is imported by the kernel, as before
            pass
    start_dir = os.getcwd()
    socks = [first]
    while True:
        while True:  # reap the kernels that ended
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if not pid:
                break
        for sock in select.select(socks, [], [], 1.0)[0]:
            try:
                msg, fds, _, _ = socket.recv_fds(sock, MAX_MSG, 1)
            except OSError:
                msg, fds = b"", []
            if msg == b"client" and fds:
                socks.append(socket.socket(fileno=fds[0]))
                continue
            for f in fds:
                os.close(f)
            if not msg:
                if sock is first:
                    return 0
                socks.remove(sock)
                sock.close()
                continue
            req = json.loads(msg)
            pid = os.fork()
            if pid == 0:
                for s in socks:
                    s.close()
                _become_kernel(req, start_dir)
            pidfd = os.pidfd_open(pid)
            try:
                socket.send_fds(sock, [json.dumps({"pid": pid}).encode()], [pidfd])
            except OSError:
                pass
            finally:
                os.close(pidfd)


def main(argv: list[str]) -> int:
    """`perfbook zygote FD` (Zygote.start runs it)."""
    return serve(int(argv[0]))
