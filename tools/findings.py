"""Key findings: a chapter's conclusions, computed from data, with a verdict per host.

A chapter declares its findings (Chapter.key_findings). Each one is a claim and a test:

    Finding("uprobe_dearer",
            claim="A uprobe on `ret` costs more than twice a marker write",
            test=lambda run: Outcome(ratio > 2, f"uprobe {u} ns, marker {m} ns: {r}×"))

`test` gets one dataset (a `Run`: its manifest, and its tables through run[name]) and returns
an Outcome (does the claim hold in this dataset, and the numbers behind that, formatted as
shown), or None when the dataset did not measure what the claim needs.

A host's verdict combines its datasets measured with a real profile (a quick run is a test):
"holds" or "does not hold" when they all agree, "mixed" with the count when they do not (the
same host id can be different machines cloned from one image, or a noisy rerun), and
"not measured" when none could say. Every run's evidence is kept with its run id, so a number
is never shown without the dataset it comes from, and the spread between runs is visible.
"""
from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Callable

from .dataset import REAL_PROFILES

HOLDS, FAILS, MIXED, NOT_MEASURED = "holds", "does not hold", "mixed", "not measured"
VERDICTS = (HOLDS, FAILS, MIXED, NOT_MEASURED)


@dataclass(frozen=True)
class Outcome:
    holds: bool
    evidence: str          # the numbers behind the verdict, as the book shows them


@dataclass(frozen=True)
class Finding:
    key: str               # glue name suffix: kf_<key>
    claim: str             # the statement, in the chapter's words, without numbers
    test: Callable         # (Run) -> Outcome | None
    contrary: str = ""     # what the prose says where it does not hold (default: "Not so: claim")


class Run:
    """One dataset of a chapter: its manifest and its tables (the chapter's Data, cut to it)."""

    def __init__(self, D, manifest):
        self.D, self.manifest = D, manifest
        self.host_id, self.run_id = manifest.host_id, manifest["run_id"]
        self._data = None

    @property
    def data(self):
        """The chapter's Data (its own subclass) holding this dataset only: the chapter's
        analysis functions run on it unchanged, and its `quoted` is this run."""
        if self._data is None:
            self._data = type(self.D)(self.D.chapter, self.D.data_dir, manifests=[self.manifest])
        return self._data

    def __getitem__(self, name: str):
        df = self.D[name]
        if df is None or len(df) == 0:
            return df
        return df[(df["host_id"] == self.host_id) & (df["run_id"] == self.run_id)]

    def __contains__(self, name: str) -> bool:
        return name in self.manifest["tables"]

    def reference(self, name: str, dtype=None):
        return self.D.reference(name, dtype)


_GLUE_CACHE: dict = {}


def glued(run, compute) -> dict | None:
    """compute(run.data): the chapter's own prose values for this one dataset, cached per
    dataset; None when this dataset can't give them (an older dataset without a table)."""
    key = (run.D.chapter.name, str(run.D.data_dir), run.host_id, run.run_id, compute.__qualname__)
    if key not in _GLUE_CACHE:
        try:
            _GLUE_CACHE[key] = compute(run.data)
        except (KeyError, IndexError, ValueError, TypeError, AttributeError, ZeroDivisionError):
            _GLUE_CACHE[key] = None
    return _GLUE_CACHE[key]


def per_host_note(D, compute, say) -> dict[str, list[str]]:
    """host_id -> [say(g)] from the newest counted dataset of each host (for a chapter's
    platform_notes), where glued(run, compute) gives values and say() does not fail."""
    out = {}
    for h in D.hosts:
        m = counted_runs([m for m in D.manifests if m.host_id == h])[-1]
        g = glued(Run(D, m), compute)
        try:
            out[h] = [say(g)] if g else []
        except (KeyError, TypeError, ValueError):
            out[h] = []
    return out


def num(text) -> float:
    """A number as the prose shows it ('1,927', '+122', '-4.4 % (CI ...)', '74%') as a float."""
    t = str(text).strip().replace(",", "").replace("\u2212", "-").split()[0].rstrip("%")
    return float(t)


def from_glue(compute, decide):
    """A finding test from the chapter's prose values: decide(g) -> Outcome, where g is
    glued(run, compute); a missing value means this dataset did not measure it."""
    def test(run):
        g = glued(run, compute)
        if g is None:
            return None
        try:
            return decide(g)
        except (KeyError, ValueError, IndexError, TypeError):
            return None
    test.__name__ = getattr(decide, "__name__", "test")
    return test


@dataclass(frozen=True)
class HostVerdict:
    finding: Finding
    host_id: str
    verdict: str
    runs: tuple            # ((run_id, Outcome | None), ...) in run order

    @property
    def evidence(self) -> str:
        """Each run's numbers with its run id; one run: just its numbers."""
        told = [(r, o) for r, o in self.runs if o is not None]
        if len(told) == 1:
            return f"{told[0][1].evidence} (run {told[0][0]})"
        return "; ".join(f"run {r}: {o.evidence}{'' if o.holds else ' (does not hold)'}" for r, o in told)

    @property
    def label(self) -> str:
        if self.verdict == MIXED:
            told = [o for _, o in self.runs if o is not None]
            return f"mixed: holds in {sum(o.holds for o in told)} of {len(told)} runs"
        return self.verdict


def counted_runs(manifests) -> list:
    """The datasets a host's verdict rests on: those measured with a real profile or with
    none recorded (older datasets, measured before the profile was recorded); quick runs are
    tests and count only where a host has nothing else."""
    counted = [m for m in manifests if m.get("profile") in REAL_PROFILES or m.get("profile") is None]
    return sorted(counted or list(manifests), key=lambda m: m["run_id"])


def evaluate(D, finding: Finding, host_id: str) -> HostVerdict:
    runs = []
    for m in counted_runs([m for m in D.manifests if m.host_id == host_id]):
        try:
            out = finding.test(Run(D, m))
        except (KeyError, IndexError, ValueError, ZeroDivisionError) as e:
            raise RuntimeError(f"finding {finding.key!r} on {host_id}/{m['run_id']}: "
                               f"{type(e).__name__}: {e}") from e
        runs.append((m["run_id"], out))
    told = [o for _, o in runs if o is not None]
    if not told:
        verdict = NOT_MEASURED
    elif all(o.holds for o in told):
        verdict = HOLDS
    elif not any(o.holds for o in told):
        verdict = FAILS
    else:
        verdict = MIXED
    return HostVerdict(finding, host_id, verdict, tuple(runs))


def verdicts(D) -> list[list[HostVerdict]]:
    """[finding][host] for every declared finding and every host with data."""
    return [[evaluate(D, f, h) for h in D.hosts] for f in D.chapter.key_findings]


def matrix(D):
    """Hosts x findings as a DataFrame (one row per finding; a column per host, the verdict)."""
    import pandas as pd
    rows = []
    for f, per_host in zip(D.chapter.key_findings, verdicts(D)):
        rows.append({"chapter": D.chapter.name, "finding": f.key, "claim": f.claim,
                     **{v.host_id: v.label for v in per_host}})
    return pd.DataFrame(rows)


def sentence(v: HostVerdict) -> str:
    """What the prose says for one host: the claim or its contrary, and the numbers."""
    f = v.finding
    if v.verdict == NOT_MEASURED:
        return f"{f.claim}: not measured on {v.host_id}"
    said = f.claim if v.verdict == HOLDS else (f.contrary or f"Not so: {f.claim[0].lower()}{f.claim[1:]}")
    if v.verdict == MIXED:
        said = f"{f.claim}? It depends on the run ({v.label})"
    return f"{said} ({v.evidence})"


def _code(text: str) -> str:
    """Escaped text with `code` spans as <code> (claims are written in the prose's markdown)."""
    import re
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def html_block(D, kinds: dict[str, str]) -> str:
    """The Key findings block: each claim with every host's verdict and numbers."""
    esc = _code
    items = []
    for f, per_host in zip(D.chapter.key_findings, verdicts(D)):
        hosts = "".join(
            f'<li><span class="kf-verdict kf-{v.verdict.replace(" ", "-")}">{esc(v.label)}</span> '
            f'on <code>{esc(v.host_id)}</code> ({esc(kinds.get(v.host_id, "?"))})'
            + (f": {esc(v.evidence)}" if v.verdict != NOT_MEASURED else "") + "</li>"
            for v in per_host)
        items.append(f"<li><strong>{esc(f.claim)}</strong><ul>{hosts}</ul></li>")
    if not items:
        return ""
    return ('<div class="key-findings admonition"><p class="admonition-title">Key findings</p>'
            f'<ol>{"".join(items)}</ol><p class="kf-note">Each finding is computed from the data '
            'for every host: its verdict counts the host\'s datasets measured with a real '
            'profile, and each number names the run it comes from.</p></div>')
