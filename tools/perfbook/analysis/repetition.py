"""Adaptive repetition: run rounds until every key's median is tight enough, or the time
budget or the round limit is reached (perfbook.analysis.stats re-exports these names)."""

from __future__ import annotations

import math
import time as _time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfbook.analysis.stats import median_ci, summarize
from perfbook.core.errors import ParameterError
from perfbook.core.paths import resolve_data_dir
from perfbook.data.dataset import list_runs, load_manifest, read_csv, table_path

STOP_TARGET = "ci_target"
STOP_BUDGET = "time_budget"
STOP_MAX = "max_runs"
# derived, never written by Repetition: min_runs == max_runs (a fixed number of rounds), and a
# dataset whose repetition table lacks the reason (stop_rule)
STOP_FIXED = "fixed_rounds"
NOT_RECORDED = "not_recorded"
STOP_TEXT = {
    STOP_TARGET: "CI target reached",
    STOP_MAX: "max runs",
    STOP_BUDGET: "time budget",
    STOP_FIXED: "fixed rounds",
    "not run": "not run",
    NOT_RECORDED: "not recorded",
}


class Repetition:
    """Repeat an experiment until every tracked median is tight enough, or time is up.

    Usage (one round = one repetition of every variant, interleaved)::

        rep = Repetition("marker", keys=["a", "b"], target=0.05, min_runs=5,
                         max_runs=200, budget_s=30, warmup=2)
        for rnd in rep.rounds():            # yields Round(index, warmup)
            for k in keys:
                rep.add(k, run_one(k))      # warm-up rounds' values are dropped, counted
        rep.records()                       # one row per key for the dataset

    Stops after a round when (a) at least `min_runs` measured rounds are in and
    every key's relative CI width (high - low) / median is <= `target`
    ("ci_target"), or (b) the measured rounds reach `max_runs` ("max_runs"),
    or (c) at least `min_runs` measured rounds are in and the time budget is spent
    ("time_budget"): `budget_s` seconds have passed since the first round began, or the next
    round would end past them if it lasts as long as the last one did. The budget never stops
    a run short of `min_runs` (#40): a chapter's min_runs is the n its findings' intervals need
    for their coverage, and rounds cut short of it buy a run that decides nothing. A round is never cut short, and no round is started that
    the last one says would overrun, so the budget bounds the rounds' time (give or take
    how much one round differs from the next) instead of overrunning it by a round.
    Warm-up rounds count toward the time budget but never toward n, and at least one
    measured round always runs. With min_runs == max_runs the rounds are fixed (the
    `rounds` / `reps` parameters): stop_rule() reports that as "fixed_rounds".
    """

    def __init__(
        self,
        experiment: str,
        keys=("value",),
        *,
        target: float = 0.05,
        min_runs: int = 5,
        max_runs: int = 200,
        budget_s: float = 60.0,
        warmup: int = 1,
        confidence: float = 0.95,
        clock=None,
    ):
        if not (0 < target < 10):
            raise ValueError("target is a relative CI width, e.g. 0.05 for 5 %")
        if min_runs < 1 or max_runs < min_runs:
            raise ValueError("need 1 <= min_runs <= max_runs")
        if budget_s <= 0 or warmup < 0:
            raise ValueError("budget_s must be > 0 and warmup >= 0")
        self.experiment = experiment
        self.keys = list(keys)
        self.target, self.min_runs, self.max_runs = float(target), int(min_runs), int(max_runs)
        self.budget_s, self.warmup, self.confidence = float(budget_s), int(warmup), confidence
        self.clock = clock or _time.monotonic
        self.values: dict = {k: [] for k in self.keys}
        self.warmup_values: dict = {k: 0 for k in self.keys}
        self._in_warmup = False
        self._t0: float | None = None
        self.elapsed_s = 0.0
        self.last_round_s = 0.0
        self.stopped_by: str | None = None
        self.rounds_done = 0

    # -- per-key state
    def rel_ci(self, key) -> float:
        x = self.values[key]
        if len(x) < 2:
            return math.inf
        lo, hi, _ = median_ci(x, self.confidence)
        med = float(np.median(x))
        return abs(hi - lo) / abs(med) if med else math.inf

    def met(self, key) -> bool:
        return len(self.values[key]) >= self.min_runs and self.rel_ci(key) <= self.target

    @property
    def n(self) -> int:
        return min((len(v) for v in self.values.values()), default=0)

    def add(self, key, value) -> None:
        if key not in self.values:
            raise KeyError(f"{self.experiment}: unknown key {key!r}")
        if self._in_warmup:
            self.warmup_values[key] += 1
        else:
            self.values[key].append(float(value))

    def _decide(self) -> str | None:
        if self.n >= self.min_runs and all(self.met(k) for k in self.keys):
            return STOP_TARGET
        if self.n >= self.max_runs:
            return STOP_MAX
        if self.n < self.min_runs:
            return None  # the budget never stops a design short of the n its intervals need
        if self.elapsed_s + self.last_round_s > self.budget_s or self.elapsed_s >= self.budget_s:
            return STOP_BUDGET  # spent, or the next round (as long as the last) would overrun it
        return None

    def rounds(self):
        """Yield Round(index, warmup) until a stop rule fires."""
        self._t0 = self.clock()
        i = 0
        while True:
            self._in_warmup = i < self.warmup
            started = self.clock()
            yield Round(i, self._in_warmup)
            i += 1
            self.rounds_done = i
            now = self.clock()
            self.last_round_s = now - started
            self.elapsed_s = now - self._t0
            if not self._in_warmup:
                why = self._decide()
                if why:
                    self.stopped_by = why
                    self._in_warmup = False
                    return

    def status(self) -> str:
        worst = max((self.rel_ci(k) for k in self.keys), default=math.inf)
        w = "inf" if math.isinf(worst) else f"{worst * 100:.1f} %"
        return f"n={self.n}, widest CI {w} (target {self.target * 100:.0f} %), {self.elapsed_s:.0f}/{self.budget_s:.0f} s"

    def records(self) -> list[dict]:
        """One row per key: n, warm-ups, the CI reached and why repetition stopped."""
        rows = []
        for k in self.keys:
            x = self.values[k]
            s = summarize(x, self.confidence)
            rel = self.rel_ci(k)
            rows.append(
                {
                    "experiment": self.experiment,
                    "key": str(k),
                    "n": len(x),
                    "warmup": self.warmup_values[k],
                    "median": s.median,
                    "ci_low": s.ci_low,
                    "ci_high": s.ci_high,
                    "ci_coverage": s.ci_coverage,
                    "rel_ci_width": rel if math.isfinite(rel) else math.nan,
                    "target": self.target,
                    "min_runs": self.min_runs,
                    "max_runs": self.max_runs,
                    "budget_s": self.budget_s,
                    "elapsed_s": round(self.elapsed_s, 3),
                    "met_target": self.met(k),
                    # the experiment's reason, and per key whether the target was reached
                    "stopped_by": self.stopped_by or "not run",
                }
            )
        return rows


@dataclass
class Round:
    index: int
    warmup: bool


def repetition_summary(df) -> dict:
    """Counts over a `repetition` table: experiments by stop reason, keys meeting target."""
    if df is None or len(df) == 0:
        return {
            "experiments": 0,
            STOP_TARGET: 0,
            STOP_BUDGET: 0,
            STOP_MAX: 0,
            "keys": 0,
            "keys_met": 0,
        }
    cols = [c for c in ("host_id", "run_id", "experiment") if c in df.columns]
    exp = df.drop_duplicates(cols)
    out = {"experiments": len(exp), "keys": len(df), "keys_met": int(df["met_target"].sum())}
    for why in (STOP_TARGET, STOP_BUDGET, STOP_MAX):
        out[why] = int((exp["stopped_by"] == why).sum())
    return out


def stop_rule(rec) -> str:
    """The rule that stopped one experiment, from a row of its `repetition` table (a dict or a
    pandas row): stopped_by as recorded, except that an experiment whose min_runs equals its
    max_runs ran a fixed number of rounds (STOP_FIXED, unless the time budget cut them short),
    and a row without a reason is NOT_RECORDED."""
    why = rec.get("stopped_by")
    if not isinstance(why, str) or not why:
        return NOT_RECORDED
    lo, hi = rec.get("min_runs"), rec.get("max_runs")
    fixed = lo is not None and hi is not None and lo == lo and hi == hi and int(lo) == int(hi)
    if fixed and why in (STOP_TARGET, STOP_MAX):
        return STOP_FIXED
    return why


# --------------------------------------------------------------------------
# captions generated from the data
# --------------------------------------------------------------------------
REPETITION_SETTINGS = ("target", "min_runs", "max_runs", "budget_s", "warmup")


def repetition_settings(p: dict, prefix: str = "") -> dict:
    """Validate `<prefix>target`, `<prefix>min_runs`, `<prefix>max_runs`, `<prefix>budget_s`
    and `<prefix>warmup` of merged chapter parameters; return Repetition's keyword arguments.

    Bad values raise one ParameterError line that names the parameter, before anything runs.
    """
    out = {}
    for name in REPETITION_SETTINGS:
        key = prefix + name
        v = p.get(key)
        if name in ("target", "budget_s"):
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            lo, hi = (0.001, 1.0) if name == "target" else (0.1, 86400.0)
            if not ok or not lo <= v <= hi:
                what = "a relative CI width" if name == "target" else "a number of seconds"
                raise ParameterError(f"{key} must be {what} in {lo:g}..{hi:g}, got {v!r}")
            out[name] = float(v)
        else:
            lo = 0 if name == "warmup" else 1
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= 100_000:
                raise ParameterError(f"{key} must be an integer in {lo}..100000, got {v!r}")
            out[name] = v
    if out["max_runs"] < out["min_runs"]:
        raise ParameterError(
            f"{prefix}max_runs ({out['max_runs']}) must be >= {prefix}min_runs ({out['min_runs']})"
        )
    return out


def repetition(experiment: str, keys, p: dict, prefix: str = "", clock=None) -> Repetition:
    """A Repetition configured from validated chapter parameters (see repetition_settings)."""
    return Repetition(experiment, keys, clock=clock, **repetition_settings(p, prefix))


def interleave(reps):
    """Drive several Repetitions in the same rounds, so their variants can share one shuffled
    order: yields {experiment: Round} with every experiment that has not stopped yet.

    Each experiment keeps its own stop rule and budget (its clock starts with the first round);
    one that has stopped drops out of later rounds while the others go on.
    """
    gens = {r.experiment: r.rounds() for r in reps}
    active = {e: next(g) for e, g in gens.items()}
    while active:
        yield dict(active)
        nxt = {}
        for e in active:
            try:
                nxt[e] = next(gens[e])
            except StopIteration:
                pass
        active = nxt


# the stop rule said of a dataset written before adaptive repetition existed (it has no
# repetition table): the notebooks' repetition overview and the chapters that mention it
FIXED_REPETITION = "fixed repetition, before adaptive repetition existed"


def repetition_overview(chapter: str, data_dir=None):
    """(table, counts) of how every dataset of `chapter` repeated its measurements.

    One row per (host, run, experiment) of the datasets' `repetition` tables: keys, n
    (a range over the keys), warm-up rounds, the widest relative CI reached, the target,
    the budget and the stop rule. A dataset without that table (older than adaptive
    repetition) gets one row whose stop rule says so. `counts` has repetition_summary's
    numbers plus `datasets` and `fixed` (datasets with fixed repetition).
    """
    rows, tables = [], []
    for run in list_runs(chapter, resolve_data_dir(data_dir) if data_dir else None):
        man = load_manifest(run)
        base = {"host_id": man["host"]["host_id"], "run_id": man["run_id"]}
        p = table_path(run, "repetition")
        if p is None:
            rows.append({**base, "experiment": "(all)", "stopped_by": FIXED_REPETITION})
            continue
        t = read_csv(p)
        tables.append(t.assign(**base))
        for exp, g in t.groupby("experiment", sort=False):
            n_lo, n_hi = int(g["n"].min()), int(g["n"].max())
            rows.append(
                {
                    **base,
                    "experiment": exp,
                    "keys": len(g),
                    "n": str(n_lo) if n_lo == n_hi else f"{n_lo}–{n_hi}",
                    "warm-up": int(g["warmup"].max()),
                    "widest CI %": round(100 * g["rel_ci_width"].max(), 2),
                    "target %": round(100 * g["target"].max(), 2),
                    "budget s": g["budget_s"].max(),
                    "elapsed s": round(g["elapsed_s"].max(), 1),
                    "keys met": f"{int(g['met_target'].sum())}/{len(g)}",
                    "stopped_by": g["stopped_by"].iloc[0],
                }
            )
    cols = [
        "host_id",
        "run_id",
        "experiment",
        "keys",
        "n",
        "warm-up",
        "widest CI %",
        "target %",
        "budget s",
        "elapsed s",
        "keys met",
        "stopped_by",
    ]
    table = pd.DataFrame(rows, columns=cols)
    counts = repetition_summary(pd.concat(tables, ignore_index=True) if tables else None)
    counts["datasets"] = int(table[["host_id", "run_id"]].drop_duplicates().shape[0])
    counts["fixed"] = int((table["stopped_by"] == FIXED_REPETITION).sum())
    return table, counts
