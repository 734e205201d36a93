"""The one sequence every chapter's collect runs through, whoever starts it
(`python -m tools measure`, `make all`, or a papermill collect of a notebook):

  parameters -> preflight -> sweep of dead runs' state -> lock -> signals -> the chapter's
  collect (which writes through tools.dataset.DatasetWriter, published only on success)
  -> status line.

The chapter module brings only params(), preflight() and collect(). A bad parameter is
one ParameterError line and nothing is measured; a host that can't run the chapter is a
skip (MissingPrerequisite); Ctrl-C, SIGTERM or SIGHUP raise KeyboardInterrupt inside the
collect, every `finally` restores what it changed, and nothing is published.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from . import guard
from .dataset import check_writable
from .errors import MissingPrerequisite
from .lock import measure_lock
from .paths import resolve_data_dir


def status(chapter: str, state: str, detail: str, **extra) -> None:
    """Append one line to the measure run's status file (PERFBOOK_STATUS_FILE), if any."""
    path = os.environ.get("PERFBOOK_STATUS_FILE")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"chapter": chapter, "status": state, "detail": detail, **extra}) + "\n")


def collect(module, profile: str = "default", data_dir=None, say=print, **overrides) -> Path | None:
    """Measure one chapter on this host. Returns the new dataset, or None when skipped."""
    from .sweep import sweep_all
    module.params(profile, **overrides)          # bad input stops here, before anything
    reasons = module.preflight()
    if reasons:
        say(f"SKIPPED: {reasons[0]}")
        status(module.CHAPTER, "skipped", "; ".join(reasons))
        return None
    data = resolve_data_dir(data_dir)
    check_writable(data)                          # an unwritable data dir stops here too
    t0 = time.monotonic()
    with guard.interruptible(), measure_lock(f"{module.CHAPTER} collect"):
        sweep_all(log=say)
        try:
            out = module.collect(data_dir=data, profile=profile, **overrides)
        except MissingPrerequisite as e:
            say(f"SKIPPED: {e}")
            status(module.CHAPTER, "skipped", str(e))
            return None
    status(module.CHAPTER, "measured", str(out), seconds=round(time.monotonic() - t0))
    say(f"new dataset: {out}")
    return out
