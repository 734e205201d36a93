"""The chapter contract, in code: what a chapter declares and the parts it brings.

A chapter is a package `tools/perfbook/chapters/<name>/` whose `__init__.py` only declares: a
subclass of `Chapter` and one instance of it called `chapter`:

    class Example(Chapter):
        name = "example"                                   # data/runs/<host>/<name>/<run>/
        title = "..."
        profiles = {"quick": {...}, "default": {...}, "full": {...}}
        params = {"rounds": Param(int, min=1, help="..."), ...}   # types and bounds
        tables = {"calls": Table(round="int", ns_per_call="float")}  # column schemas
        needs_tools = {"hackbench": "rt-tests"}            # program -> Debian package
        def preflight(self) -> list[str]: ...              # optional: why it can't run here
    chapter = Example()

The rest of the package is one file per part, the same in every chapter (tools/README.md):
`collect.py` (`measure(ctx)`: the only code that touches the kernel, QEMU or the network),
`parse.py` (text -> DataFrame, tested on fixtures; absent where nothing is parsed),
`analysis.py` (frames -> frames), `figures.py`, `tables.py`, `prose.py` (`values(D)`: the values
the text quotes) and `key_findings.py` (FINDINGS, the chapter's `key_findings`): PARTS below.
`Chapter.measure` calls the collect part;
`perfbook.framework.sequence.collect` owns the sequence around it: parameters -> preflight ->
lock -> sweep -> cgroup -> undo stack -> collect -> publish.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from perfbook.core.errors import DatasetError, ParameterError
from perfbook.core.phases import KINDS as PHASE_KINDS
from perfbook.core.progress import Progress
from perfbook.data.dataset import Data
from perfbook.hoststate.scratch import Scratch

_KINDS = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "true or false",
    list: "a list",
    object: "a value (checked by the chapter)",
}


@dataclass(frozen=True)
class Param:
    """One chapter parameter: its type, bounds or choices, and what it means.

    `None` always means "the profile's value". A `list` parameter also accepts a
    comma-separated string; its items must come from `choices`. `min_of`/`max_of` name another
    parameter that bounds this one (checked after all values are known)."""

    kind: type = int
    min: float | None = None
    max: float | None = None
    choices: tuple | None = None
    help: str = ""
    nullable: bool = False  # None is a meaningful value even after the profile merge

    def check(self, name: str, v):
        if v is None:
            if self.nullable:
                return None
            raise ParameterError(f"{name} needs a value ({self.help or _KINDS[self.kind]})")
        k = self.kind
        if k is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if k is list:
            if isinstance(v, str):
                v = [x.strip() for x in v.split(",") if x.strip()]
            if not isinstance(v, (list, tuple)):
                raise ParameterError(
                    f"{name} must be a list (or a comma-separated string), got {v!r}"
                )
            if not v:
                raise ParameterError(
                    f"{name}: an empty list; choose from {', '.join(map(str, self.choices or ()))}"
                )
            v = list(dict.fromkeys(v))
            bad = [x for x in v if self.choices is not None and x not in self.choices]
            if bad:
                raise ParameterError(
                    f"unknown {name} {', '.join(map(str, bad))}; "
                    f"choose from {', '.join(map(str, self.choices))}"
                )
            return v
        ok = isinstance(v, k) and not (k in (int, float) and isinstance(v, bool))
        if not ok:
            raise ParameterError(f"{name} must be {_KINDS[k]}, got {v!r}")
        if self.choices is not None and v not in self.choices:
            raise ParameterError(
                f"{name} must be one of {', '.join(map(str, self.choices))}, got {v!r}"
            )
        if self.min is not None and v < self.min:
            raise ParameterError(f"{name} must be {_KINDS[k]} >= {_num(self.min)}, got {v!r}")
        if self.max is not None and v > self.max:
            raise ParameterError(f"{name} must be {_KINDS[k]} <= {_num(self.max)}, got {v!r}")
        return v


def choose_list(value, allowed, what: str, default=None) -> list[str]:
    """A list (or comma-separated string) whose items all come from `allowed`, for a check()
    that allows a list parameter to hold other values too."""
    if value is None:
        value = list(default if default is not None else allowed)
    elif isinstance(value, str):
        value = [x.strip() for x in value.split(",") if x.strip()]
    value = list(value)
    unknown = [x for x in value if x not in allowed]
    if unknown or not value:
        raise ParameterError(
            f"unknown {what} {', '.join(map(str, unknown)) or '(empty list)'}; "
            f"choose from {', '.join(allowed)}"
        )
    return list(dict.fromkeys(value))


def repetition_params(prefix: str = "rep_") -> dict[str, Param]:
    """The parameters of adaptive repetition (perfbook.analysis.repetition.Repetition). Their bounds are
    checked by perfbook.analysis.repetition.repetition_settings, which a chapter's check() calls."""
    return {
        prefix + "target": Param(
            object, help="stop when every median's 95 % CI is this narrow (relative)"
        ),
        prefix + "min_runs": Param(object, help="measured rounds at least"),
        prefix + "max_runs": Param(object, help="measured rounds at most"),
        prefix + "budget_s": Param(
            object, help="seconds for all rounds (checked after each round)"
        ),
        prefix + "warmup": Param(object, help="whole rounds run first and dropped"),
    }


def _num(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


DTYPES = ("int", "float", "str", "bool")


class Table:
    """A table's column schema: name -> one of DTYPES. Columns listed in `optional` may be
    absent from older datasets (they are added as missing values on load); `extra=True`
    allows columns that are not declared (for tables whose columns vary by host, such as
    one column per CPU)."""

    def __init__(self, optional: tuple = (), extra: bool = False, **columns: str):
        bad = {c: t for c, t in columns.items() if t not in DTYPES}
        if bad:
            raise ValueError(f"column types must be one of {DTYPES}: {bad}")
        self.columns, self.optional, self.extra = dict(columns), tuple(optional), extra

    def check(self, df, where: str):
        """The frame, with declared columns in their types; DatasetError naming `where`.
        A column already in its type (what read_csv gives a well-formed table: int64, float64,
        bool, str) is kept as it is: converting it again would give the same values, and cost
        a fleet's thousands of small tables more than parsing them."""
        missing = [c for c in self.columns if c not in df.columns and c not in self.optional]
        if missing:
            raise DatasetError(f"{where}: missing column(s) {', '.join(missing)}")
        unknown = [
            c for c in df.columns if c not in self.columns and c not in ("host_id", "run_id")
        ]
        if unknown and not self.extra:
            raise DatasetError(f"{where}: undeclared column(s) {', '.join(map(str, unknown))}")
        done = {"int": np.dtype("int64"), "float": np.dtype("float64"), "bool": np.dtype(bool)}
        changed = {}
        for c, t in self.columns.items():
            if c not in df.columns:
                changed[c] = pd.Series(
                    [None] * len(df),
                    index=df.index,
                    dtype={"int": "Int64", "float": "float64", "bool": "boolean"}.get(t, "object"),
                )
                continue
            col = df[c]
            if isinstance(col.dtype, pd.StringDtype) if t == "str" else col.dtype == done[t]:
                continue
            try:
                changed[c] = _as_declared(col, t)
            except (ValueError, TypeError) as e:
                raise DatasetError(
                    f"{where}: column {c!r} is not {t} ({str(e).splitlines()[0]})"
                ) from None
        return df.assign(**changed) if changed else df.copy(deep=False)


def _as_declared(col, t: str):
    """Table.check: one column converted to its declared type t (ValueError if it is not)."""
    if t == "int":
        num = pd.to_numeric(col)
        if (num.dropna() % 1 != 0).any():
            raise ValueError("not whole numbers")
        if num.dtype == object or str(num.dtype).startswith("uint") and (num > 2**63 - 1).any():
            raise ValueError("beyond 64-bit signed integers (declare it 'str')")
        return num.astype("Int64") if num.isna().any() else num.astype("int64")
    if t == "float":
        return pd.to_numeric(col).astype("float64")
    if t == "bool":
        m = col.map(
            {True: True, False: False, "True": True, "False": False, "true": True, "false": False}
        )  # 1 and 0 are True and False
        if (m.isna() & col.notna()).any():
            raise ValueError("not true/false")
        return m.astype("boolean") if col.isna().any() else m.astype(bool)
    col = col.astype("object").where(col.notna(), None)  # str: each value as its text
    return col.map(lambda x: x if x is None or isinstance(x, str) else str(x))


@dataclass
class Context:
    """What a chapter's measure() gets from the framework.

    p        the validated parameters of this run (profile merged with the overrides)
    profile  the profile's name
    writer   the dataset writer (perfbook.data.writer.DatasetWriter): add_table (checked against the
             chapter's schemas), skip, reject, note, path, extra
    undo     the kernel-state guard: a stack. Register every change right after making it,
             with `ctx.undo.callback(fn, *args)` or `ctx.undo.enter_context(cm)`; the framework
             unwinds it (signals blocked) before anything is published, on every exit path.
    say      print a line of progress
    monitor  the run monitor (perfbook.hoststate.monitor.RunMonitor), or None; chapters use window()
    clock    where the seconds go (perfbook.core.phases.PhaseClock), or None; chapters use phase()
    """

    chapter: Chapter
    p: dict
    profile: str
    writer: Any
    undo: ExitStack
    say: Callable[[str], None] = print
    monitor: Any = None
    clock: Any = None

    def phase(self, kind: str):
        """`with ctx.phase("boot"):` around a part of the collect: "boot", "setup", "warmup" or
        "measured" (perfbook.core.phases.KINDS; the innermost counts). The manifest's `phases`
        then says where the run's seconds went, and `perfbook summary` prints it (#40)."""
        if kind not in PHASE_KINDS:
            raise ValueError(f"unknown phase {kind!r}: one of {', '.join(PHASE_KINDS)}")
        if self.clock is None:
            return nullcontext()
        return self.clock.phase(kind)

    def window(self, name: str, gap_rejects: bool = False):
        """`with ctx.window("phase x round 2"):` around a part whose numbers the chapter
        reports. The manifest's `disturbance` record then has steal time, load, runnable
        tasks, context switches, CPU frequency and the gaps for that window too. With
        gap_rejects=True a gap inside it (the run stopped, frozen or starved for longer than
        perfbook.hoststate.monitor.GAP_S allows for its kind) means its numbers are wrong, and the run is
        not published."""
        if self.monitor is None:
            return nullcontext()
        return self.monitor.window(name, gap_rejects)

    def progress(self, total: int, **kw):
        """A Progress line printer for a loop of `total` steps (perfbook.core.progress)."""
        return Progress(self.chapter.name, total, **kw)

    def scratch(self):
        """A private scratch directory for this run, removed when the run ends
        (perfbook.hoststate.scratch.Scratch, registered on the undo stack)."""
        return self.undo.enter_context(Scratch(self.chapter.name, say=self.say))


# The files of every chapter package, each with one role (tools/README.md, "A chapter's shape"):
#   __init__      the declaration: this Chapter subclass and `chapter`, nothing else
#   collect       measure(ctx): the only code that touches the kernel, QEMU or the network
#   parse         text -> rows or frames, tested on fixtures
#   analysis      frames -> frames (and the chapter's Data subclass, when it prepares tables)
#   figures       D -> (figure, caption)
#   tables        D -> the tables a page shows (and run_columns(m, data): its runs table's columns)
#   prose         D -> the values the prose glues (and platform_notes(D): the banner's notes)
#   key_findings  FINDINGS: the chapter's conclusions, each decided per host (perfbook.analysis.findings)
PARTS = ("collect", "parse", "analysis", "figures", "tables", "prose", "key_findings")
EXPLAIN_PARTS = PARTS[1:]  # what a notebook runs in explain mode: every part but collect


def explain_modules(package: str) -> list[str]:
    """The modules a chapter notebook runs in explain mode: the package and its EXPLAIN_PARTS
    that exist (perfbook.core.codedigest follows their imports from there)."""
    return [package] + [
        f"{package}.{p}"
        for p in EXPLAIN_PARTS
        if importlib.util.find_spec(f"{package}.{p}") is not None
    ]


class Chapter:
    """Base class of every chapter (see the module doc)."""

    name: str = ""
    title: str = ""
    profiles: dict[str, dict] = {}
    # seconds a collect is planned to take per profile on the book's own 2-CPU host ("full" has
    # none: it takes as long as its targets need); `python -m perfbook measure` prints the plan
    # beside the time taken, and tests keep the sum within the budget of `make all`
    plan_s: dict[str, int] = {}
    params: dict[str, Param] = {}
    tables: dict[str, Table] = {}
    reference: tuple[str, ...] = ()  # data/reference/<name>.csv tables this chapter shows
    quote_needs: tuple[str, ...] = ()  # tables the quoted dataset must have (see dataset.quoted)
    # the rerun box: what a collect needs beyond root and needs_tools, in a reader's words
    needs_text: str = ""
    needs_root: bool = True  # the rerun box: does a collect need root

    def part(self, name: str):
        """The module <this chapter's package>.<name> (one of PARTS), imported on first use:
        the declaration in __init__ stays light (measure imports every chapter's)."""
        return importlib.import_module(f"{type(self).__module__}.{name}")

    def _hook(self, part: str, name: str):
        """Function `name` of part `part`, None when the chapter has no such part or function."""
        if importlib.util.find_spec(f"{type(self).__module__}.{part}") is None:
            return None
        return getattr(self.part(part), name, None)

    @property
    def key_findings(self) -> tuple:
        """The chapter's conclusions, each computed per host from the data
        (perfbook.analysis.findings.Finding): its key_findings module's FINDINGS. The chapter
        opens with them and the hosts page shows them for every host."""
        return self.part("key_findings").FINDINGS

    @property
    def takeaway(self):
        """The chapter's line on the book's landing page (perfbook.analysis.findings.Takeaway):
        its key_findings module's TAKEAWAY, None where it declares none."""
        return getattr(self.part("key_findings"), "TAKEAWAY", None)

    def platform_notes(self, D) -> dict[str, list[str]]:
        """host_id -> facts of this chapter's runs that the platform banner adds (for example
        the accelerator its guests ran under): its prose module's platform_notes(D), if any."""
        fn = self._hook("prose", "platform_notes")
        return fn(D) if fn is not None else {}

    def run_columns(self, m, data) -> dict:
        """Columns of dataset m (its manifest; `data` the Data of it alone) that this chapter
        adds to the runs table: its tables module's run_columns(m, data), if any."""
        fn = self._hook("tables", "run_columns")
        return fn(m, data) if fn is not None else {}

    # -- parameters ---------------------------------------------------------------------
    def parameters(self, profile: str = "default", **overrides) -> dict:
        """The profile's values with the non-None overrides, each checked against its Param,
        then check(); every problem is one ParameterError line."""
        if profile not in self.profiles:
            raise ParameterError(f"profile must be one of {tuple(self.profiles)}, got {profile!r}")
        p = dict(self.profiles[profile])
        for k, v in overrides.items():
            if k not in self.params:
                raise ParameterError(
                    f"unknown parameter {k!r}; known: {', '.join(sorted(self.params))}"
                )
            if v is not None:
                p[k] = v
        for k, spec in self.params.items():
            p[k] = spec.check(k, p.get(k))
        self.check(p)
        return p

    def check(self, p: dict) -> None:
        """Cross-parameter checks (raise ParameterError); may normalise values in p (an
        'auto' resolved, a baseline added). The default has none."""

    # -- the steps a chapter implements --------------------------------------------------
    needs_tools: dict[str, str] = {}  # program -> the Debian package that has it

    def preflight(self) -> list[str]:
        """Why this chapter cannot measure on this host ([] when it can): the programs in
        needs_tools. A chapter adds its own checks to super().preflight(). A private directory
        that is refused (perfbook.hoststate.statedir: the scratch parent or the state dir planted) is no
        such reason: it is an attack or a mistake to mend, and the collect fails on it (its
        lock or its sweep refuses the directory, perfbook.framework.sequence.collect)."""
        return [
            f"{tool} is not installed (apt-get install {pkg})"
            for tool, pkg in self.needs_tools.items()
            if not shutil.which(tool)
        ]

    def measure(self, ctx: Context) -> None:
        """The measurement: `measure(ctx)` of the chapter package's collect module."""
        self.part("collect").measure(ctx)

    def load(self, data_dir=None):
        """Every dataset of this chapter, checked and typed (perfbook.data.dataset.Data)."""
        return Data.load(self, data_dir)

    def __repr__(self):
        return f"<chapter {self.name}>"


# The table perfbook.analysis.repetition.Repetition.records() writes, in every chapter that repeats adaptively.
REPETITION = Table(
    experiment="str",
    key="str",
    n="int",
    warmup="int",
    median="float",
    ci_low="float",
    ci_high="float",
    ci_coverage="float",
    rel_ci_width="float",
    target="float",
    min_runs="int",
    max_runs="int",
    budget_s="float",
    elapsed_s="float",
    met_target="bool",
    stopped_by="str",
    optional=("ci_coverage",),
)
