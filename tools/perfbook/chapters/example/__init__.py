"""Chapter 'example': the smallest chapter that follows the contract (tools/README.md).

Not in the book's table of contents. It shows how a chapter is written, and lets
tests/test_contract.py drive every path of the framework on something quick: it changes
kernel state the way real chapters do (a private ftrace instance with an event enabled, as
root), makes a scratch directory and starts a child process, then measures how long
`getppid()` takes, in rounds. `fail_after` makes it raise midway and `hold_s` makes it wait
with all of that state in place, so that a test can signal it.

The package is split by concern, with the files every chapter has (the one shape of issue
#39, tools/README.md); its notebook is chapters/example.ipynb, its tests tests/test_example.py:
  __init__.py      what the chapter declares: name, profiles, parameters, tables (this file)
  collect.py       measure(ctx): the only code that touches the host
  analysis.py      frames -> frames: the median cost per call of each dataset
  figures.py       D -> (figure, caption), one function per figure the notebook shows
  tables.py        D -> the tables the notebook shows
  prose.py         values(D): every value the notebook's text quotes, formatted as it shows it
  key_findings.py  FINDINGS: the chapter's conclusion, decided on a number and its interval
A chapter that reads a tool's text output adds parse.py (text -> rows, and the names collect
and analysis share); this one writes its rows directly, so it has none.
"""

from __future__ import annotations

from perfbook.framework.contract import Chapter, Param, Table


class Example(Chapter):
    name = "example"
    title = "Example chapter (not in the book)"
    profiles = {
        "quick": {"rounds": 3, "calls": 2000, "hold_s": 0, "fail_after": 0},
        "default": {"rounds": 10, "calls": 20000, "hold_s": 0, "fail_after": 0},
        "full": {"rounds": 30, "calls": 100000, "hold_s": 0, "fail_after": 0},
    }
    # seconds a collect is planned to take on the book's 2-CPU host (`perfbook measure` prints
    # the plan beside the time taken; every book chapter has one, tests/test_summary.py): both
    # profiles took about 1 s here, default with ten times quick's calls
    plan_s = {"quick": 1, "default": 2}
    params = {
        "rounds": Param(int, min=1, help="timed rounds"),
        "calls": Param(int, min=1, help="getppid() calls per round"),
        "hold_s": Param(int, min=0, help="seconds to wait with the state in place"),
        "fail_after": Param(int, min=0, help="raise after this many rounds (0: never)"),
    }
    tables = {"calls": Table(round="int", ns_per_call="float")}


chapter = Example()
