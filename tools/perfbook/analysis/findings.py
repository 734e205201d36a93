"""Key findings: a chapter's conclusions, each a claim about one number, decided per host.

A chapter declares its findings (Chapter.key_findings). Each one names its decisive quantity,
the side of the threshold the claim puts it on, and the confidence it is decided at:

    Finding("uprobe_dearer",
            claim="A uprobe on `ret` costs more than twice a marker write",
            measure=lambda run: Measured(decide.ratio(uprobe_ns, marker_ns, what="batches"),
                                         f"uprobe {u} ns, marker {m} ns"),
            quantity="uprobe / marker", side=">", threshold=2.0, unit="×")

`measure` gets one dataset (a `Run`: its manifest, and its tables through run[name]) and
returns the number as an Estimate (perfbook.analysis.decide: value, interval, the interval's
real coverage) computed by the chapter's analysis, with the surrounding numbers as context
text; None only where the dataset declares it did not measure that quantity (a table it does
not have). Any other failure is a failure: it is raised with the finding and dataset named.

Each dataset gets a three-valued Outcome (decide.decide: holds, does not hold, undecided with
why). A host's verdict pools its runs (decide.pool: the run is the unit of repetition) within
one kernel build, from its undisturbed runs measured with a real profile; runs of another
build are not replicates, so builds that disagree leave the host undecided and say so. A
disturbed run (the run monitor's mark, perfbook.hoststate.monitor) is shown as evidence and
never decides; quick-profile runs are smoke tests and decide nothing. Every run's evidence is
kept with its run id, so a number is never shown without the dataset it comes from.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from perfbook.analysis import decide as dc
from perfbook.analysis.decide import FAILS, HOLDS, NOT_MEASURED, UNDECIDED, Estimate
from perfbook.core import codedigest
from perfbook.core.paths import repo_root, runs_dir
from perfbook.data.buildfiles import read_private, store_dir, write_private
from perfbook.data.dataset import REAL_PROFILES, data_depth
from perfbook.data.digest import dir_digest, reference_files, tree_digest
from perfbook.framework.contract import explain_modules
from perfbook.hoststate import fingerprint

VERDICTS = (HOLDS, FAILS, UNDECIDED, NOT_MEASURED)


@dataclass(frozen=True)
class Measured:
    """What a finding's measure() returns: the decisive number and the numbers around it."""

    estimate: Estimate
    context: str = ""  # the other numbers behind it, as the book shows them (not decisive)


@dataclass(frozen=True)
class Outcome:
    """One dataset's verdict on one finding, with the number it was decided on."""

    verdict: str  # HOLDS, FAILS or UNDECIDED
    evidence: str  # the decisive number with its interval, then the context
    estimate: Estimate
    why: str = ""  # what keeps an undecided verdict open

    @property
    def holds(self) -> bool:
        return self.verdict == HOLDS

    def as_doc(self) -> dict:
        return {
            "verdict": self.verdict,
            "evidence": self.evidence,
            "estimate": self.estimate.as_doc(),
            "why": self.why,
        }

    @classmethod
    def from_doc(cls, d) -> Outcome:
        return cls(d["verdict"], d["evidence"], Estimate.from_doc(d["estimate"]), d["why"])


@dataclass(frozen=True)
class Finding:
    key: str  # glue name suffix: kf_<key>
    claim: str  # the statement, in the chapter's words, without numbers
    measure: Callable  # (Run) -> Measured | None
    quantity: str  # what the decisive number is, as the reader sees it ("uprobe / marker")
    side: str  # ">" or "<": the claim is `quantity <side> threshold`
    threshold: float
    unit: str = ""  # "×", "%", "ns", "µs", ...
    contrary: str = ""  # what the prose says where it does not hold (default: "Not so: claim")
    confidence: float = 0.95
    # the shortest command that shows the finding's core observation on the reader's machine,
    # in the style of a bpftrace or perf one-liner (#41): no interval, no verdict, a first look;
    # the chapter's `perfbook measure` decides the finding. One line of shell, run as root.
    reproduce: str = ""

    def __post_init__(self):
        if self.side not in (">", "<"):
            raise ValueError(f"finding {self.key!r}: side must be '>' or '<'")

    def outcome(self, got: Measured | None) -> Outcome | None:
        """The dataset's Outcome from what measure() gave (None: not measured)."""
        if got is None:
            return None
        if not isinstance(got, Measured):
            raise TypeError(f"finding {self.key!r}: measure() gave {type(got).__name__}")
        d = dc.decide(got.estimate, self.side, self.threshold, self.confidence)
        if d.verdict == NOT_MEASURED:
            return None
        return Outcome(d.verdict, self.evidence(got.estimate, got.context), got.estimate, d.why)

    def evidence(self, e: Estimate, context: str = "") -> str:
        text = f"{self.quantity} {dc.interval_text(e, self.unit)}"
        return f"{text}; {context}" if context else text


@dataclass(frozen=True)
class Takeaway:
    """A chapter's one sentence on the book's landing page (perfbook.book.summary.takeaways):
    the mechanism in words, then the number of one of its findings (`finding`, a key of
    FINDINGS) with its interval and verdict on the dataset the prose quotes, the seed article's
    figure, and whether the result should carry over to bare-metal KVM. No number is typed:
    `seed(D)` computes the 2010-2015 figure from the chapter's reference tables and
    `transfer(D, host_facts)` says, for the machine that measured the quoted dataset, what
    carries over (a TCG guest, a PVM host and a bare-metal KVM host differ)."""

    finding: str  # the key of the finding whose number the takeaway quotes
    mechanism: str  # one sentence: what happens in the kernel or QEMU, without numbers
    seed: Callable  # (D) -> str: the seed article's figure, for example "2013: 2.44×"
    transfer: Callable  # (D, host facts of the quoted dataset) -> str


def guest_transfer(compute, under_tcg: str, under_kvm: str, key: str = "accel") -> Callable:
    """A Takeaway.transfer for a chapter whose QEMU guests run under TCG or KVM: `under_tcg` or
    `under_kvm`, on the accelerator the quoted dataset's guests ran under, read from the
    chapter's own values (compute, the function its platform note reads: glued)."""

    def transfer(D, host) -> str:
        g = glued(Run(D, D.quoted), compute) or {}
        return under_tcg if "tcg" in str(g.get(key, "")).lower() else under_kvm

    return transfer


class Run:
    """One dataset of a chapter: its manifest and its tables (the chapter's Data, cut to it)."""

    def __init__(self, D, manifest):
        self.D, self.manifest = D, manifest
        self.host_id, self.run_id = manifest.host_id, manifest["run_id"]
        self._data = None

    @property
    def data(self):
        """The chapter's Data (its own subclass) holding this dataset only (Data.view_of): the
        chapter's analysis functions run on it unchanged, and its `quoted` is this run."""
        if self._data is None:
            self._data = self.D.view_of(self.manifest)
        return self._data

    def __getitem__(self, name: str):
        """The rows of D[name] from this dataset, with their index (Data.rows_of)."""
        return self.D.rows_of(name, (self.host_id, self.run_id))

    def __contains__(self, name: str) -> bool:
        return name in self.manifest["tables"]

    def reference(self, name: str, dtype=None):
        return self.D.reference(name, dtype)


def plain(v):
    """v with numpy scalars as Python ones (what JSON, and so the verdict store, holds)."""
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    return v.item() if hasattr(v, "item") and not isinstance(v, (str, bytes)) else v


def glued(run, compute) -> dict | None:
    """compute(run.data): the chapter's own prose values for this one dataset, kept in the
    verdict store (stored(): one slot per compute function); None when this dataset can't give
    them (an older dataset without a table). The values are plain data (numbers, strings,
    lists, dicts), as glue and JSON hold them. A page or chapter that quotes every host's values
    (tsc_alignment's caveats) then computes each host's once."""

    def make():
        try:
            return {"g": plain(compute(run.data))}
        except (KeyError, IndexError, ValueError, TypeError, AttributeError, ZeroDivisionError):
            return {"g": None}

    name = f"{compute.__module__}.{compute.__qualname__}"
    return stored(
        run.D,
        run.manifest,
        "glue-" + hashlib.sha256(name.encode()).hexdigest()[:12],
        make,
        lambda v: (
            isinstance(v, dict) and set(v) == {"g"} and (v["g"] is None or isinstance(v["g"], dict))
        ),
    )["g"]


def sections(*parts):
    """The compute function (for glued, per_host_note) of a chapter's prose values made of its
    section functions `parts` (each D -> dict), merged in order. A chapter's findings() is
    every section; a per-host note needs a few, and at fleet scale each dataset's values are
    computed once, so a note computes only the sections it reads. The function is named by
    its sections, which keeps one verdict-store slot per choice."""

    def compute(D) -> dict:
        out = {}
        for part in parts:
            out.update(part(D))
        return out

    compute.__module__ = parts[0].__module__
    compute.__qualname__ = "sections(" + ", ".join(p.__qualname__ for p in parts) + ")"
    compute.__name__ = "sections"
    return compute


def per_host_note(D, compute, say) -> dict[str, list[str]]:
    """host_id -> [say(g)] from the newest counted dataset of each host (for a chapter's
    platform_notes), where glued(run, compute) gives values and say() does not fail."""
    slot = (
        "note-"
        + hashlib.sha256(f"{compute.__qualname__} {say.__qualname__}".encode()).hexdigest()[:12]
    )

    def note(m):
        g = glued(Run(D, m), compute)
        try:
            return [str(say(g))] if g else []
        except (KeyError, TypeError, ValueError):
            return []

    out = {}
    for h in D.hosts:
        m = counted_runs([m for m in D.manifests if m.host_id == h])[-1]
        out[h] = stored(
            D,
            m,
            slot,
            lambda m=m: note(m),
            lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
        )
    return out


@dataclass(frozen=True)
class BuildVerdict:
    """A host's runs of one kernel build pooled (decide.pool) and decided."""

    build: str  # kernel release and version
    run_ids: tuple
    estimate: Estimate | None
    verdict: str
    why: str = ""


@dataclass(frozen=True)
class HostVerdict:
    finding: Finding
    host_id: str
    verdict: str  # HOLDS, FAILS, UNDECIDED or NOT_MEASURED
    runs: tuple  # ((run_id, Outcome | None), ...) in run order: every counted run
    why: str = ""  # what keeps it undecided
    builds: tuple = ()  # (BuildVerdict, ...): the runs that decide, pooled per kernel build
    set_aside: tuple = ()  # ((run_id, reason), ...): runs shown but not deciding

    @property
    def estimate(self) -> Estimate | None:
        """The number the verdict rests on: the pooled estimate of the newest deciding build."""
        return self.builds[-1].estimate if self.builds else None

    @property
    def evidence(self) -> str:
        """The pooled number, then each run's numbers with its run id (one run: just its)."""
        aside = dict(self.set_aside)
        told = [(r, o) for r, o in self.runs if o is not None]
        per_run = [
            f"run {r}: {o.evidence} ({o.verdict}"
            + (f"; {aside[r]}, not counted" if r in aside else "")
            + ")"
            for r, o in told
        ]
        parts = []
        for b in self.builds:
            if b.estimate is None:
                continue
            if len(b.run_ids) > 1:
                where = f" on {b.build}" if len(self.builds) > 1 else ""
                parts.append(
                    f"pooled over {len(b.run_ids)} runs{where}: "
                    f"{self.finding.evidence(b.estimate)} ({b.verdict})"
                )
        if len(told) == 1 and not parts:
            r, o = told[0]
            extra = f"; {aside[r]}, not counted" if r in aside else ""
            text = f"{o.evidence} (run {r}{extra})"
        else:
            text = "; ".join(parts + per_run)
        return f"{text}. Undecided: {self.why}" if self.verdict == UNDECIDED else text


def counted_runs(manifests) -> list:
    """The datasets shown under a host's verdict: those measured with a real profile or with
    none recorded (older datasets, measured before the profile was recorded); quick runs
    only where a host has nothing else (they are then shown, and decide nothing)."""
    counted = [
        m for m in manifests if m.get("profile") in REAL_PROFILES or m.get("profile") is None
    ]
    return sorted(counted or list(manifests), key=lambda m: m["run_id"])


def set_aside_reason(m) -> str:
    """Why dataset m is shown but does not decide: '' when it decides."""
    if (m.get("disturbance") or {}).get("disturbed"):
        return "disturbed"
    if m.get("profile") not in REAL_PROFILES and m.get("profile") is not None:
        return f"a {m.get('profile')} (smoke-test) run"
    return ""


def _aside_reasons(manifests) -> dict:
    """run_id -> why it is set aside ('' where it decides): set_aside_reason(), or a
    fingerprint that departs from its host's other runs of the same build (fingerprint.departs:
    the machine was slower or faster than it usually is, whatever the monitor saw)."""
    out = {m["run_id"]: set_aside_reason(m) for m in manifests}
    by_build: dict = {}
    for m in manifests:
        by_build.setdefault(build_of(m), []).append(m)
    for ms in by_build.values():
        fps = {m["run_id"]: fingerprint.worst(m.get("disturbance")) for m in ms}
        known = [f for f in fps.values() if f]
        for rid, fp in fps.items():
            if not out[rid]:
                out[rid] = fingerprint.departs(fp, known)
    return out


def build_of(m) -> str:
    h = m["host"]
    return f"{h.get('kernel_release', '?')} {h.get('kernel_version', '')}".strip()


def _test(D, finding: Finding, m, run: Run | None = None) -> Outcome | None:
    try:
        return finding.outcome(finding.measure(run or Run(D, m)))
    except (KeyError, IndexError, ValueError, ZeroDivisionError, TypeError) as e:
        raise RuntimeError(
            f"finding {finding.key!r} on {m.host_id}/{m['run_id']}: {type(e).__name__}: {e}"
        ) from e


def _once(D, key, make):
    """D.once(key, make) where D has it (a chapter's Data), else make()."""
    once = getattr(D, "once", None)
    return once(key, make) if callable(once) else make()


def _manifests_of(D, host_id: str) -> list:
    """D's manifests of host_id; the manifests are split by host once per Data (every finding's
    verdict on every host asks: at a hundred hosts a scan per question was quadratic)."""

    def split():
        out: dict = {}
        for m in D.manifests:
            out.setdefault(m.host_id, []).append(m)
        return out

    return _once(D, "findings:manifests-by-host", split).get(host_id, [])


def _host_outcomes(D, host_id: str) -> list:
    """(manifest, outcomes(D, m)) of each counted dataset of host_id, once per Data: every
    declared finding's verdict on that host reads the same outcomes (one verdict-store lookup
    per dataset, not one per finding)."""
    return _once(
        D,
        ("findings:outcomes", host_id),
        lambda: [(m, outcomes(D, m)) for m in counted_runs(_manifests_of(D, host_id))],
    )


def judge(finding: Finding, host_id: str, runs: list) -> HostVerdict:
    """The host verdict from [(manifest, Outcome | None)] in run order: the deciding runs
    (set_aside_reason empty) pooled per kernel build, each build decided; builds that
    disagree leave the host undecided."""
    why_aside = _aside_reasons([m for m, _ in runs])
    aside = tuple((m["run_id"], why_aside[m["run_id"]]) for m, _ in runs if why_aside[m["run_id"]])
    out = tuple((m["run_id"], o) for m, o in runs)
    groups: dict = {}
    for m, o in runs:
        if o is not None and not why_aside[m["run_id"]]:
            groups.setdefault(build_of(m), []).append((m["run_id"], o))
    builds = []
    for build, got in groups.items():
        est = dc.pool([o.estimate for _, o in got], finding.confidence)
        if len(got) == 1:
            verdict, why = got[0][1].verdict, got[0][1].why
        elif est is None:  # no run has an interval to pool (decide.pool): measured, undecided
            verdict, why = UNDECIDED, got[-1][1].why
        else:
            d = dc.decide(est, finding.side, finding.threshold, finding.confidence)
            verdict, why = d.verdict, d.why
        builds.append(BuildVerdict(build, tuple(r for r, _ in got), est, verdict, why))
    told = [o for _, o in out if o is not None]
    if not told:
        return HostVerdict(finding, host_id, NOT_MEASURED, out, set_aside=aside)
    if not builds:
        reasons = sorted({r for _, r in aside})
        return HostVerdict(
            finding,
            host_id,
            UNDECIDED,
            out,
            "no run decides: every run measured was " + " or ".join(reasons),
            set_aside=aside,
        )
    kinds = {b.verdict for b in builds}
    if len(kinds) == 1:
        b = builds[-1]
        return HostVerdict(finding, host_id, b.verdict, out, b.why, tuple(builds), aside)
    why = "it depends on the kernel build: " + "; ".join(
        f"{b.verdict} on {b.build} ({len(b.run_ids)} run{'s' if len(b.run_ids) > 1 else ''})"
        for b in builds
    )
    return HostVerdict(finding, host_id, UNDECIDED, out, why, tuple(builds), aside)


def evaluate(D, finding: Finding, host_id: str) -> HostVerdict:
    declared = finding in getattr(D.chapter, "key_findings", ())
    if declared:
        runs = [(m, got[finding.key]) for m, got in _host_outcomes(D, host_id)]
    else:
        runs = [(m, _test(D, finding, m)) for m in counted_runs(_manifests_of(D, host_id))]
    return judge(finding, host_id, runs)


# -- each dataset's outcomes, computed once: the verdict store ---------------------------------
#
# A finding's outcome on one dataset follows from that dataset's files, the chapter's seed
# tables (its evidence quotes the seed) and the code: the chapter package and every perfbook module
# it imports (perfbook.core.codedigest), with the pinned environment, as for a
# notebook. The chapter's Key findings block, the overview page and the hosts page all ask
# for it, and the platform banner for each host's notes; at a hundred hosts, computing them
# anew for each was most of `make notebooks`. stored() keeps such a per-dataset value in
#     build/verdicts/<data>/<chapter>__<host>__<run>__<slot>.json
# (<data> names the data directory: perfbook.data.buildfiles.store_dir), under a key over those
# digests, so a changed file, seed table or line of code recomputes it. The files follow
# build/'s rules (perfbook.data.buildfiles: no symlink followed, written atomically, a
# stranger's file refused with one line). A file that is corrupt, of another key or another
# format is recomputed; a build/ we cannot write only costs the time.
# PERFBOOK_VERDICT_STORE=off computes every value anew (a test compares both ways).
# Measured 2026-11-28 on the project's machine (2 cores shared with other work, Debian 12; CPU
# seconds of the page's cells in a new process, medians of runs in turn): the summary page at
# 103 hosts (the committed ones and 100 of perfbook synthfleet) 3.0 s with the store filled,
# 122 s with PERFBOOK_VERDICT_STORE=off (2 runs each); a chapter notebook gains little
# (trace_overhead at 103 hosts: 13.8 s against 14.7 s, 3 runs each). `perfbook bench memo
# --memos verdict-store --notebooks summary --data-dir FLEET` prints it; `perfbook validate`'s
# figure is in perfbook.book.validation.

STORE_VERSION = 2
# (chapter, data dir) -> digest of its code and reference files, once per process: every
# stored() asks for it. Measured 2026-11-28 on the project's machine (2 shared cores, Debian 12;
# medians of 3 runs, CPU seconds of the page's cells, the verdict store filled): the summary
# page at 103 hosts (the committed ones and 100 of perfbook synthfleet) 3.1 s with it, 7.5 s
# without. `perfbook bench memo --memos code-digests --notebooks summary --data-dir FLEET`
# prints it (FLEET: the committed data/ with `perfbook synthfleet 100`'s hosts added).
_CODE: dict = {}


def store_enabled() -> bool:
    return os.environ.get("PERFBOOK_VERDICT_STORE", "").lower() not in ("0", "off", "no", "false")


def _safe(name: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,80}", name or ""))


def _store_file(D, m, slot: str):
    """(path, runs dir) of one stored value of a dataset; None where nothing is stored: a
    Data of no registered chapter (a test's fake) or a manifest without its directory."""
    name = D.chapter.name
    if (
        getattr(m, "path", None) is None
        or not _is_chapter(D.chapter)
        or not all(_safe(x) for x in (name, m.host_id, m["run_id"], slot))
    ):
        return None
    data = getattr(D, "data_dir", None)
    top = store_dir("verdicts", data)
    return top / f"{name}__{m.host_id}__{m['run_id']}__{slot}.json", runs_dir(data).resolve()


def _is_chapter(chapter) -> bool:
    """A chapter of the book (its class in perfbook.chapters.<name>), not a test's stand-in."""
    return type(chapter).__module__ == f"perfbook.chapters.{getattr(chapter, 'name', '')}"


def _store_key(D, m, slot: str) -> str:

    name, data = D.chapter.name, getattr(D, "data_dir", None)
    if (name, str(data)) not in _CODE:
        code = {
            f"tools/{rel}": p
            for rel, p in codedigest.closure(explain_modules(f"perfbook.chapters.{name}")).items()
        }
        lock = repo_root() / "tools" / "requirements.lock"
        if lock.is_file():
            code["tools/requirements.lock"] = lock
        refs = tree_digest(reference_files(name, data), data_depth)
        _CODE[(name, str(data))] = tree_digest(code) + " " + refs
    text = f"{STORE_VERSION} {slot} {_CODE[(name, str(data))]} {dir_digest(m.path)}"
    return hashlib.sha256(text.encode()).hexdigest()


def stored(D, m, slot: str, make, check):
    """The value make() gives for dataset m of D's chapter, kept in the verdict store under
    `slot` (a file name part) while its key holds. make() returns plain JSON data; check(value)
    is True when a stored value has the expected shape (else it is computed again). What is
    returned has been through JSON either way, so a first and a later call give the same."""
    spot = _store_file(D, m, slot) if store_enabled() else None
    if spot is None:
        return json.loads(json.dumps(make()))
    path, runs = spot
    key = _store_key(D, m, slot)
    value, raw = None, read_private(path, runs)
    try:
        doc = json.loads(raw) if raw else None
        if (
            isinstance(doc, dict)
            and doc.get("version") == STORE_VERSION
            and doc.get("key") == key
            and check(doc.get("value"))
        ):
            value = doc["value"]
    except (ValueError, TypeError, KeyError, AttributeError):
        value = None
    if value is None:
        doc = {
            "version": STORE_VERSION,
            "key": key,
            "chapter": D.chapter.name,
            "dataset": f"{m.host_id}/{m['run_id']}",
            "slot": slot,
            "value": make(),
        }
        text = json.dumps(doc, sort_keys=True)
        try:
            path.parents[2].mkdir(parents=True, exist_ok=True)  # build/
            write_private(path, text.encode(), runs)
        except OSError:
            pass  # a read-only checkout: computed again next time
        value = json.loads(text)["value"]
    return value


def _frame_doc(df) -> dict:
    """A DataFrame as plain JSON data that gives it back exactly (columns in order, their
    dtypes, every value; float64 survives JSON unchanged). Its index is a RangeIndex."""
    return {
        "columns": [str(c) for c in df.columns],
        "dtypes": [str(t) for t in df.dtypes],
        "data": [
            [None if isinstance(v, float) and math.isnan(v) else v for v in plain(list(col))]
            for _, col in df.items()
        ],
    }


def _doc_frame(doc: dict):
    df = pd.DataFrame(
        {c: pd.Series(v, dtype=object) for c, v in zip(doc["columns"], doc["data"])},
        columns=doc["columns"],
    )
    for c, t in zip(doc["columns"], doc["dtypes"]):
        df[c] = df[c].astype(t)
    return df


def _is_frames(v) -> bool:
    return isinstance(v, dict) and all(
        isinstance(d, dict)
        and set(d) == {"columns", "dtypes", "data"}
        and len(d["columns"]) == len(d["dtypes"]) == len(d["data"])
        for d in v.values()
    )


def stored_frames(D, m, slot: str, make) -> dict:
    """stored() for make() -> {name: DataFrame with a RangeIndex}: a chapter's per-dataset
    reduction (one host's summary rows) kept in the verdict store, given back with the same
    columns, dtypes and values (tests/test_findings.py compares both ways)."""
    got = stored(
        D,
        m,
        slot,
        lambda: {k: _frame_doc(df.reset_index(drop=True)) for k, df in make().items()},
        _is_frames,
    )
    return {k: _doc_frame(d) for k, d in got.items()}


def _is_outcomes(v, keys) -> bool:
    def ok(o):
        if o is None:
            return True
        try:
            Outcome.from_doc(o)
        except (KeyError, TypeError, ValueError):
            return False
        return o["verdict"] in (HOLDS, FAILS, UNDECIDED) and isinstance(o["evidence"], str)

    return isinstance(v, dict) and set(v) == set(keys) and all(ok(o) for o in v.values())


def outcomes(D, m) -> dict:
    """{finding key: Outcome or None} for every key finding of D's chapter on dataset m,
    from the verdict store while its key holds, else computed (and stored)."""
    findings = D.chapter.key_findings
    keys = [f.key for f in findings]

    def make():
        run = Run(D, m)  # one view of the dataset for all of them (what they derive is shared)
        out = {f.key: _test(D, f, m, run) for f in findings}
        return {k: None if o is None else o.as_doc() for k, o in out.items()}

    got = stored(D, m, "outcomes", make, lambda v: _is_outcomes(v, keys))
    return {k: None if o is None else Outcome.from_doc(o) for k, o in got.items()}


def verdicts(D) -> list[list[HostVerdict]]:
    """[finding][host] for every declared finding and every host with data."""
    return [[evaluate(D, f, h) for h in D.hosts] for f in D.chapter.key_findings]


def matrix(D):
    """Hosts x findings as a DataFrame (one row per finding; a column per host, the verdict)."""
    rows = []
    for f, per_host in zip(D.chapter.key_findings, verdicts(D)):
        rows.append(
            {
                "chapter": D.chapter.name,
                "finding": f.key,
                "claim": f.claim,
                **{v.host_id: v.verdict for v in per_host},
            }
        )
    return pd.DataFrame(rows)


def sentence(v: HostVerdict) -> str:
    """What the prose says for one host: the claim, its contrary or the open question, with the
    decisive number and its interval (and why it is open). Each run's numbers are the Key
    findings block's evidence: the prose refers to the finding, it does not repeat it."""
    f = v.finding
    if v.verdict == NOT_MEASURED:
        return f"{f.claim}: not measured on {v.host_id}"
    if v.verdict == HOLDS:
        said = f.claim
    elif v.verdict == FAILS:
        said = f.contrary or f"Not so: {f.claim[0].lower()}{f.claim[1:]}"
    else:
        said = f"Undecided whether {f.claim[0].lower()}{f.claim[1:]}"
    e = decisive(v)
    number = f"{f.quantity} {dc.interval_text(e, f.unit)}" if e is not None else ""
    why = v.why if v.verdict == UNDECIDED and v.why else ""
    inside = ": ".join(x for x in (number, why) if x)
    return f"{said} ({inside})" if inside else said


def _code(text: str) -> str:
    """Escaped text with `code` spans as <code> (claims are written in the prose's markdown)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def decisive(v: HostVerdict) -> Estimate | None:
    """The number a host's verdict is read on: its pooled estimate (HostVerdict.estimate), else
    its newest run's own (a host whose runs all are set aside still shows what it measured)."""
    if v.estimate is not None:
        return v.estimate
    told = [o for _, o in v.runs if o is not None]
    return told[-1].estimate if told else None


def anchor(f: Finding) -> str:
    """The id of a finding's entry in its chapter's Key findings block: a link target."""
    return f"kf-{html.escape(f.key)}"


def chip(verdict: str, why: str = "") -> str:
    """A verdict as the pages show it, with why it is what it is as its tooltip."""
    tip = f' title="{html.escape(why)}"' if why else ""
    return f'<span class="kf-verdict kf-{verdict.replace(" ", "-")}"{tip}>{html.escape(verdict)}</span>'


def machine(host_id: str, labels: dict[str, str]) -> str:
    """A host as the page names it: its label, the id as its tooltip (no bare id in the text)."""
    return (
        f'<span class="kf-machine" title="{html.escape(host_id)}">'
        f"{html.escape(labels.get(host_id, host_id))}</span>"
    )


def strip_entry(v: HostVerdict, labels: dict[str, str], role: str = "") -> str:
    """One host in a finding's strip: verdict, decisive number and interval, machine."""
    e = decisive(v)
    number = (
        f' <span class="kf-number">{_code(dc.interval_text(e, v.finding.unit))}</span>'
        if e is not None and v.verdict != NOT_MEASURED
        else ""
    )
    said = f' <span class="kf-role">({html.escape(role)})</span>' if role else ""
    return (
        f'<li class="kf-host">{chip(v.verdict, v.why)}'
        f"{number} on {machine(v.host_id, labels)}{said}</li>"
    )


def verdict_counts(per_host) -> str:
    """'12 hosts: 9 holds, 1 does not hold, 2 undecided' (verdicts in VERDICTS order)."""
    n = {k: sum(v.verdict == k for v in per_host) for k in VERDICTS}
    parts = [f"{n[k]} {k}" for k in VERDICTS if n[k]]
    return f"{len(per_host)} hosts: " + ", ".join(parts)


def reproduce_block(chapter, f: Finding) -> str:
    """A finding's two commands, collapsed: its one-liner (Finding.reproduce), a first look on
    the reader's machine, and the chapter's measure run, which decides it with its interval."""
    if not f.reproduce:
        return ""
    full = f".venv/bin/python -m perfbook measure --chapters {chapter.name}"
    return (
        '<details class="kf-try"><summary>Try it on your machine</summary><p>In one line, the '
        f"core observation (no interval, no verdict):</p><pre>{html.escape(f.reproduce)}</pre>"
        "<p>The whole finding, decided with its interval (after <code>sudo make setup</code>):"
        f"</p><pre>{'sudo ' if chapter.needs_root else ''}{html.escape(full)}</pre></details>"
    )


def html_block(
    D, labels: dict[str, str], highlight: dict[str, str] | None = None, most: int = 5
) -> str:
    """The Key findings block, findings at a glance: each claim, then a strip with one entry per
    host (its verdict, decisive number with interval and machine), and each run's evidence in
    a collapsed detail. Beyond `most` hosts the strip shows the hosts in `highlight` (host_id ->
    role: this host, the reference host) and counts the verdicts of all; the detail, the hosts
    page and the chapter's figures show every one."""
    esc = _code
    highlight = highlight or {}
    items = []
    for f, per_host in zip(D.chapter.key_findings, verdicts(D)):
        if len(per_host) > most:
            shown = [v for v in per_host if v.host_id in highlight]
            strip = "".join(strip_entry(v, labels, highlight[v.host_id]) for v in shown) + (
                f'<li class="kf-host kf-count">{html.escape(verdict_counts(per_host))}</li>'
            )
        else:
            strip = "".join(strip_entry(v, labels) for v in per_host)
        told = [v for v in per_host if v.verdict != NOT_MEASURED]
        runs = sum(1 for v in told for _, o in v.runs if o is not None)
        detail = "".join(
            f"<li>{chip(v.verdict)} on {machine(v.host_id, labels)}: {esc(v.evidence)}</li>"
            for v in told
        )
        evidence = (
            f'<details class="kf-evidence"><summary>Evidence: {runs} run'
            f"{'s' if runs != 1 else ''} on {len(told)} host{'s' if len(told) != 1 else ''}"
            f"</summary><ul>{detail}</ul></details>"
            if told
            else ""
        )
        items.append(
            f'<li id="{anchor(f)}"><p class="kf-claim"><strong>'
            f'{esc(f.claim)}</strong> <span class="kf-quantity">({esc(f.quantity)})</span></p>'
            f'<ul class="kf-strip">{strip}</ul>{evidence}{reproduce_block(D.chapter, f)}</li>'
        )
    if not items:
        return ""
    return (
        '<div class="key-findings admonition"><p class="admonition-title">Key findings</p>'
        f'<ol>{"".join(items)}</ol><p class="kf-note">Each finding is a claim about one '
        "number, decided for every host on that number's interval: it holds, does not hold, "
        "or stays undecided (hover over the verdict for why). A host's verdict pools its "
        "undisturbed runs of one kernel build; each run's numbers are under Evidence.</p></div>"
    )
