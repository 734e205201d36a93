"""`perfbook refresh`: the stored notebooks re-executed in explain mode, so that their outputs
(what nbval checks and the book shows) follow data/."""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time

import nbformat
from nbclient.exceptions import CellExecutionError

from perfbook.book import freshness
from perfbook.book.jupyter import execute as nbrun
from perfbook.book.jupyter import zygote as warmkernel
from perfbook.book.jupyter.provisioner import check_kernelspec
from perfbook.book.jupyter.zygote import ZYGOTE_FD, Zygote, enabled
from perfbook.book.validation import validate_all
from perfbook.chapters import CHAPTERS, PAGES, by_name
from perfbook.core import guard
from perfbook.core.proc import die_with_parent, kill_group, usable_cpus
from perfbook.hoststate.sweep import kernel_files


def refresh(names: str = "", changed: bool = False, jobs: int = 0, validated: bool = False) -> int:
    """`perfbook refresh`: re-execute the notebooks `names` (comma-separated; default every chapter,
    then the pages) in place in explain mode; with `changed`, only those whose data or code
    changed since they were stored (perfbook.book.freshness)."""
    chapters = [by_name(n) for n in names.split(",")] if names else CHAPTERS + PAGES
    if not validated:
        # a bad manifest: one line that names the file, before any notebook runs (a page reads
        # all); in this one process: in each child it would import every chapter's code again.
        # The tables are checked by the notebooks as they read them (read_table: row count,
        # columns, types): one that meets a bad table fails with a line naming it and keeps its
        # stored version. Reading every table here first read a fleet's data twice (15 of a
        # 100-host refresh's 120 s); `python -m perfbook validate` and the contribution check
        # read every table.
        validate_all(
            names=None if any(c in PAGES for c in chapters) else {c.name for c in chapters},
            tables=False,
        )
    if changed:
        todo = []
        for ch in chapters:
            why = freshness.changed(nbformat.read(ch.path, as_version=4), ch.name)
            if why is None:
                print(
                    f"[refresh] {ch.name}: unchanged (same data and code), not re-executed",
                    flush=True,
                )
            else:
                print(f"[refresh] {ch.name}: {why}; re-executing", flush=True)
                todo.append(ch)
        chapters = todo
    check_kernelspec("python3")
    jobs = refresh_jobs(jobs)
    if jobs > 1 and len(chapters) > 1:
        return _refresh_in_parallel(chapters, jobs)
    parents = warmkernel.Zygote.from_env()  # our parent's (_refresh_in_parallel), else ours
    with warmkernel.warm_kernels(parents, wanted=bool(chapters)), nbrun.interruptible():
        return _refresh_each(chapters)


def _refresh_each(chapters) -> int:
    """refresh(), one notebook after the other, in this process (which it leaves with the
    environment it found)."""
    held = os.environ.get(REFRESHING)
    try:
        return _refresh_each_with_name(chapters)
    finally:
        if held is None:
            os.environ.pop(REFRESHING, None)
        else:
            os.environ[REFRESHING] = held


def _refresh_each_with_name(chapters) -> int:
    failed = []
    for ch in chapters:
        t0 = time.monotonic()
        os.environ[REFRESHING] = ch.name  # its kernel inherits it (the fleet benchmark reads it)
        nb = nbformat.read(ch.path, as_version=4)
        digest = freshness.data_digest(ch.name)  # before the run: what it is about to read
        code = freshness.code_digest(ch.name, nb)
        try:
            nbrun.execute(nb, str(ch.path.parent))
        except CellExecutionError as e:
            failed.append(ch.name)
            print(
                f"[refresh] {ch.name}: FAILED, the stored notebook is unchanged: "
                f"{e.ename}: {str(e.evalue).strip().splitlines()[0] if e.evalue else ''}",
                flush=True,
            )
            continue
        for cell in nb.cells:
            cell.metadata.pop("execution", None)
        nb.metadata.pop("papermill", None)
        freshness.record(nb, ch.name, digest, code)
        tmp = ch.path.with_suffix(".ipynb.tmp")
        nbformat.write(nb, tmp)
        tmp.replace(ch.path)
        print(
            f"[refresh] {ch.name}: re-executed in explain mode in {time.monotonic() - t0:.0f} s",
            flush=True,
        )
    return 1 if failed else 0


REFRESHING = "PERFBOOK_REFRESHING"  # the notebook a refresh process is executing


def refresh_jobs(value: int | None) -> int:
    """How many notebooks `refresh` executes at once: --jobs, else one per CPU we may run on,
    at most 4 (each is one kernel, mostly on one CPU)."""
    return max(1, value) if value else usable_cpus()


def _refresh_child(ch) -> list[str]:
    """The command that refreshes one notebook for _refresh_in_parallel."""
    return [
        sys.executable,
        "-m",
        "perfbook",
        "refresh",
        "--chapters",
        ch.name,
        "--jobs",
        "1",
        "--validated",
    ]


def _stored_size(ch) -> int:
    try:
        return os.stat(ch.path).st_size
    except (OSError, TypeError):
        return 0


def _refresh_in_parallel(chapters, jobs: int) -> int:
    """refresh(), `jobs` notebooks at a time, each in a `python -m perfbook refresh` process of
    its own (its own kernel, its own atomic write), the chapters first, then the pages: a page
    reads every chapter's key findings, which the chapters have just stored (perfbook.analysis.findings).
    Within each phase the biggest stored notebooks start first: their size follows the work of
    re-executing them closely enough that fewer CPUs idle at the end of the phase. Their lines
    are passed on whole, as they come. An interrupt, or our death, stops them all (process
    groups, PR_SET_PDEATHSIG), and the connection files and sockets of their kernels go with
    them (perfbook.hoststate.sweep): a stored notebook is only ever replaced whole."""
    phases = [[c for c in chapters if c not in PAGES], [c for c in chapters if c in PAGES]]
    print(f"[refresh] {len(chapters)} notebooks, {jobs} at a time", flush=True)
    failed = 0
    running: dict = {}
    sel = selectors.DefaultSelector()
    zygote = None
    with guard.interruptible():
        try:
            zygote = Zygote.start() if enabled() else None  # one for every child's kernels
            for phase in phases:
                todo = sorted(
                    phase, key=_stored_size, reverse=True
                )  # stable: ties keep their order
                while todo or running:
                    while todo and len(running) < jobs:
                        ch = todo.pop(0)
                        conn = zygote.client() if zygote is not None else None
                        env = (
                            {**os.environ, ZYGOTE_FD: str(conn.fileno())}
                            if conn is not None
                            else None
                        )
                        try:
                            p = subprocess.Popen(
                                _refresh_child(ch),
                                stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL,
                                text=True,
                                bufsize=1,
                                env=env,
                                pass_fds=(conn.fileno(),) if conn is not None else (),
                                start_new_session=True,
                                preexec_fn=die_with_parent,
                            )
                        finally:
                            if conn is not None:
                                conn.close()
                        running[p.stdout] = p
                        sel.register(p.stdout, selectors.EVENT_READ)
                    for key, _ in sel.select(timeout=1.0):
                        line = key.fileobj.readline()
                        if line:
                            print(line, end="", flush=True)
                            continue
                        p = running.pop(key.fileobj)
                        sel.unregister(key.fileobj)
                        key.fileobj.close()
                        failed += p.wait() != 0
                    guard.check_interrupted()
        finally:
            with guard.restoring():
                for p in running.values():
                    kill_group(p)
                sel.close()
                if zygote is not None:
                    zygote.close()  # and with it any kernel a killed child left
                kernel_files()  # and the files of the kernels the killed children started
    return 1 if failed else 0
