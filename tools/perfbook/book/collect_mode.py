"""A chapter notebook's first step: in collect mode, measure this host; in explain mode, nothing.

A chapter's import cell calls this before it imports the book's display code and the chapter's
figures (perfbook.book.notebook and what it imports: matplotlib, seaborn, scipy.stats, IPython's
display), so a collect starts without waiting for them. Here that wait was 1.6 s of CPU per
collect-mode notebook (`python -X importtime`, 2026-11-28): the kernel imported them, then
started `python -m perfbook collect`. It counts where a notebook is stopped while it measures
(the 40 papermill cases of tests/test_contract.py's signal matrix), and costs nothing elsewhere:
an explain run imports the same modules one cell later.

    from perfbook.book.collect_mode import run_mode
    from perfbook.chapters.example import chapter
    run_mode(chapter, mode, profile, data_dir, rounds=rounds)   # collect mode measures here
    from perfbook.book import notebook as nb
    from perfbook.chapters.example import figures, tables, prose
    D = nb.start(chapter, data_dir)
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from perfbook.core.errors import ParameterError, PerfbookError, install_notebook_handler
from perfbook.core.paths import repo_root, resolve_data_dir
from perfbook.core.proc import term_with_parent
from perfbook.data.dataset import check_writable

MODES = ("explain", "collect")


def run_mode(chapter, mode: str, profile: str, data_dir: str, **overrides) -> Path | None:
    """Measure this host in collect mode; do nothing in explain mode.

    The measurement does not run in the notebook kernel: jupyter_client SIGKILLs a kernel's
    process group a few seconds after a Ctrl-C to papermill, whatever it is doing. It runs in
    `python -m perfbook collect` (perfbook.framework.sequence.collect, as `measure` does), in a session of
    its own with PR_SET_PDEATHSIG = SIGTERM: however the kernel ends, that process gets an
    ordinary SIGTERM, restores what it changed and publishes nothing. The kernel asks for
    SIGTERM when papermill dies as well, so the chain papermill -> kernel -> helper is
    immediate. A parameter's error is one line in the notebook (install_notebook_handler)."""
    install_notebook_handler()
    if mode not in MODES:
        raise ParameterError(f"mode must be one of {MODES}, got {mode!r}")
    chapter.parameters(profile, **overrides)  # validates the profile and overrides in every mode
    data = resolve_data_dir(data_dir)
    if mode == "explain":  # silent: the page's banner says which datasets it reads (#41:
        return None  # a chapter's first screen shows no console output)
    check_writable(data)  # DatasetError here, in the notebook, before anything starts
    term_with_parent()  # this kernel, too, gets SIGTERM the moment papermill dies (and
    # dies of it), so the helper's own PR_SET_PDEATHSIG fires at once: no run can finish
    # and publish in the second ipykernel's parent poller takes to notice
    given = {k: v for k, v in overrides.items() if v is not None}
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "perfbook",
            "collect",
            chapter.name,
            "--profile",
            profile,
            "--data-dir",
            str(data),
            "--params",
            json.dumps(given),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        cwd=repo_root(),
        start_new_session=True,
        preexec_fn=term_with_parent,
    )
    last = ""
    try:
        for line in p.stdout:
            print(line, end="", flush=True)
            last = line.strip() or last
        rc = p.wait()
    except BaseException:  # the kernel was interrupted: the collect stops, restores, and we wait
        p.send_signal(signal.SIGTERM)
        p.wait()
        raise
    if rc == 3:
        return None
    if rc != 0 or not last.startswith("new dataset: "):
        raise PerfbookError(f"{chapter.name} collect failed (exit {rc}): {last}")
    return Path(last.removeprefix("new dataset: "))
