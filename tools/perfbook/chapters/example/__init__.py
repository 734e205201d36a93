"""Chapter 'example': the smallest chapter that follows the contract (tools/README.md).

Not in the book's table of contents. It shows how a chapter is written, and lets
tests/test_contract.py drive every path of the framework on something quick: it changes
kernel state the way real chapters do (a private ftrace instance with an event enabled, as
root), makes a scratch directory and starts a child process, then measures how long
`getppid()` takes, in rounds. `fail_after` makes it raise midway and `hold_s` makes it wait
with all of that state in place, so that a test can signal it.

The package is split by concern, as every chapter's is:
  __init__.py  what the chapter declares: name, profiles, parameters, tables
  collect.py   measure(ctx): the only code that touches the host
  analysis.py  frames -> frames, and findings() for the prose
  figures.py   frames -> (figure, caption)
"""
from __future__ import annotations

from perfbook.framework.contract import Chapter, Param, Table
from . import analysis, collect, figures  # noqa: F401  (the notebook's entry points)
from .analysis import findings  # noqa: F401


class Example(Chapter):
    name = "example"
    title = "Example chapter (not in the book)"
    profiles = {"quick": {"rounds": 3, "calls": 2000, "hold_s": 0, "fail_after": 0},
                "default": {"rounds": 10, "calls": 20000, "hold_s": 0, "fail_after": 0},
                "full": {"rounds": 30, "calls": 100000, "hold_s": 0, "fail_after": 0}}
    params = {"rounds": Param(int, min=1, help="timed rounds"),
              "calls": Param(int, min=1, help="getppid() calls per round"),
              "hold_s": Param(int, min=0, help="seconds to wait with the state in place"),
              "fail_after": Param(int, min=0, help="raise after this many rounds (0: never)")}
    tables = {"calls": Table(round="int", ns_per_call="float")}
    key_findings = ()   # none yet



chapter = Example()
