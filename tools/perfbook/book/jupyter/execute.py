"""Running a notebook in a kernel from our own processes, and stopping it on a signal.

Two of our processes run notebooks through nbclient: papermill (its engine,
perfbook.book.jupyter.papermill_engine) and `python -m perfbook refresh`. In both, SIGINT, SIGTERM and SIGHUP
raise KeyboardInterrupt (perfbook.core.guard); nbclient then shuts the kernel down, which removes its
connection file and sockets (perfbook.book.jupyter.provisioner), and the process ends with one line.

nbclient runs each cell as an asyncio task of a loop that jupyter_core keeps for the thread.
A KeyboardInterrupt raised while that loop waits leaves the cell's task pending; the shutdown
that follows interrupts the kernel, the cell's reply arrives, and the task ends with an error
nobody reads, which asyncio reports with a traceback ("Task exception was never retrieved").
`interruptible()` keeps the tasks the loop creates meanwhile and, when a signal stopped the
run, reads their errors: the interrupt is the one report. nbclient shuts down only a kernel that
has finished starting; one that a signal caught starting is shut down here
(perfbook.book.jupyter.provisioner.shut_down_unfinished).
"""

from __future__ import annotations

import asyncio
from contextlib import contextmanager

from jupyter_core.utils import ensure_event_loop
from nbclient import NotebookClient

from perfbook.book.jupyter.provisioner import shut_down_unfinished
from perfbook.core import guard


@contextmanager
def interruptible():
    """perfbook.core.guard.interruptible(), around code that runs nbclient in this thread."""
    loop = ensure_event_loop()  # the loop nbclient's synchronous calls run on
    tasks: list[asyncio.Task] = []
    before = loop.get_task_factory()

    def keep(loop, coro, **kw):
        task = (
            before(loop, coro, **kw) if before is not None else asyncio.Task(coro, loop=loop, **kw)
        )
        tasks.append(task)
        return task

    loop.set_task_factory(keep)
    try:
        with guard.interruptible():
            try:
                yield
            finally:
                if guard.received():
                    shut_down_unfinished()  # a kernel the signal caught starting
                    for task in tasks:
                        if task.done() and not task.cancelled():
                            task.exception()  # read: not reported when the task is freed
    finally:
        loop.set_task_factory(before)


def execute(nb, cwd: str, timeout: int = 1800) -> None:
    """Execute every cell of `nb` in a kernel started from our `python3` kernelspec, in `cwd`;
    a cell's error raises nbclient's CellExecutionError. As nbclient's execute(), but without
    the asyncio signal handlers its asynchronous path installs (they would replace
    perfbook.core.guard's, and on a signal they only schedule the kernel's shutdown): as papermill
    runs a notebook. Call it inside interruptible()."""
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": cwd}}
    )
    client.reset_execution_trackers()
    with client.setup_kernel():
        info = client.wait_for_reply(client.kc.kernel_info())
        nb.metadata["language_info"] = info["content"]["language_info"]
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index, execution_count=client.code_cells_executed + 1)
        client.set_widgets_metadata()
