"""`python -m perfbook bench reproducibility`: do the book's findings survive a rerun (#40)?

    python -m perfbook bench reproducibility [--runs 3] [--profile default] [--chapters a,b]
    python -m perfbook bench reproducibility --from DIR [--host H] [--profile default] [--chapters a,b]

The first form measures this host `--runs` times (`python -m perfbook measure`, every chapter
or --chapters) into a scratch data directory, removed at the end; the checkout is only read.
The second reads datasets already measured (for example the data/ of a fresh clone after
three `make all`): this host's datasets of the profile in DIR's runs/, copied into a scratch
directory so that nothing else (the committed hosts) enters the pooled verdicts.

It prints, and asserts nothing:
  * per finding, the verdict each run decides on its own (perfbook.analysis.findings.outcomes)
    and the host's pooled verdict over all of them (findings.evaluate), with its interval;
  * per run, the decided fraction: findings whose verdict is holds or does not hold;
  * every contradiction: a finding that holds in one run and does not hold in another;
  * per chapter, precision per second: the seconds a run took (and where they went, the
    manifest's `phases`), each finding's reach (its interval's half-width over its distance from
    the threshold: below 1 it decides), and the seconds the same design would need to bring the
    widest to 1 (`reach`, `to_decide`).
Runs the monitor marked disturbed, and runs of another profile, are shown and marked.
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from perfbook.analysis.decide import FAILS, HOLDS, interval_text
from perfbook.analysis.findings import evaluate, outcomes
from perfbook.chapters import CHAPTERS
from perfbook.core.errors import PerfbookError
from perfbook.core.paths import repo_root
from perfbook.core.phases import breakdown_text
from perfbook.data.dataset import load_manifest
from perfbook.data.hostinfo import host_facts
from perfbook.hoststate.scratch import Scratch


def _chapters(names: str) -> list:
    want = [n for n in names.split(",") if n]
    chs = [c for c in CHAPTERS if not want or c.name in want]
    bad = sorted(set(want) - {c.name for c in chs})
    if bad:
        raise PerfbookError(f"no such chapter: {', '.join(bad)}")
    return [c.load() for c in chs if c.name != "example"]


def measure_into(data: Path, runs: int, profile: str, chapters: str, say=print) -> list[int]:
    """`perfbook measure` `runs` times into `data`; the exit status of each."""
    cmd = [sys.executable, "-m", "perfbook", "measure", "--profile", profile]
    cmd += ["--chapters", chapters] if chapters else []
    cmd += ["--param", f"data_dir={data}"]
    codes = []
    for i in range(runs):
        say(f"[reproducibility] measure {i + 1}/{runs}: {' '.join(cmd[1:])}")
        codes.append(subprocess.run(cmd, cwd=repo_root(), check=False).returncode)
        if codes[-1] in (129, 130, 143):
            raise KeyboardInterrupt
    return codes


def gather(src: Path, dest: Path, host_id: str, profile: str, names) -> int:
    """Copy this host's datasets of `profile` from src/runs into dest/runs; how many."""
    n = 0
    for name in names:
        for run in sorted((src / "runs" / host_id / name).glob("[0-9]*")):
            if run.is_symlink() or not run.is_dir():
                continue
            if load_manifest(run).get("profile") != profile:
                continue
            shutil.copytree(run, dest / "runs" / host_id / name / run.name, symlinks=True)
            n += 1
    return n


def reach(e, threshold: float) -> float | None:
    """How far the interval is from deciding: its half-width at 95 % over the estimate's distance
    from the threshold (on the log scale for a ratio). Below 1 the interval clears the threshold
    (decided, if it is centred); 2 means it is twice too wide. The half-width at the interval's
    own coverage is brought to 95 % with the normal quantile (hard bounds, coverage 1, read as
    95 %: as decide.pool does); an approximation, since the distribution-free intervals'
    coverage moves in steps. 0 for an exact value; None where the interval claims no coverage or
    is not finite."""
    if e is None or not math.isfinite(e.value):
        return None
    if e.exact:
        return 0.0
    if not 0 < e.coverage <= 1 or not all(map(math.isfinite, (e.low, e.high))):
        return None
    f = math.log if e.scale == "log" and min(e.low, e.value, threshold) > 0 else (lambda x: x)
    z = statistics.NormalDist().inv_cdf
    half = (f(e.high) - f(e.low)) / 2 * z(0.975) / z((1 + min(e.coverage, 0.95)) / 2)
    dist = abs(f(e.value) - f(threshold))
    return half / dist if dist else math.inf


def to_decide(r: float, seconds: float) -> float:
    """Seconds the same design would need to bring `reach` r to 1: a half-width shrinks as
    1/sqrt(n), so as 1/sqrt(seconds), while the distance stays (if the effect does)."""
    return seconds * r * r


def report(data: Path, profile: str, chapters, host_id: str, say=print) -> dict:
    """Print the report on host_id's datasets under data/runs; return its figures."""
    decided: dict[int, list[int]] = {}  # run index -> [decided, told]
    pooled_decided = [0, 0]
    contradictions, widths = [], {}
    for ch in chapters:
        D = ch.load(data)
        ms = sorted(
            (m for m in D.manifests if m.host_id == host_id and m.get("profile") == profile),
            key=lambda m: m["run_id"],
        )
        if not ms:
            say(f"\n{ch.name}: no {profile} dataset of {host_id}")
            continue
        say(f"\n{ch.name}: {len(ms)} run(s)")
        got = [outcomes(D, m) for m in ms]
        reaches: dict[str, list[float]] = {}
        secs = []
        for i, m in enumerate(ms):
            s = m.seconds
            mark = " (disturbed)" if (m.get("disturbance") or {}).get("disturbed") else ""
            phases = breakdown_text(m.get("phases"))
            say(
                f"  run {i + 1} {m['run_id']}{mark}: "
                + (f"{s:.0f} s" if s is not None else "time not recorded")
                + (f"; {phases}" if phases else "")
            )
            if s:
                secs.append(s)
            for f in ch.key_findings:
                o = got[i].get(f.key)
                r = reach(o.estimate if o else None, f.threshold)
                if r is not None:
                    reaches.setdefault(f.key, []).append(r)
        for f in ch.key_findings:
            per_run = [g.get(f.key) for g in got]
            verdicts = [o.verdict if o else "not measured" for o in per_run]
            for i, v in enumerate(verdicts):
                told = decided.setdefault(i, [0, 0])
                told[1] += 1
                told[0] += v in (HOLDS, FAILS)
            pooled = evaluate(D, f, host_id)
            e = pooled.estimate
            pooled_decided[0] += pooled.verdict in (HOLDS, FAILS)
            pooled_decided[1] += 1
            say(
                f"  {f.key}: "
                + ", ".join(verdicts)
                + f" | pooled: {pooled.verdict}"
                + (f" ({interval_text(e, f.unit)})" if e is not None else "")
            )
            if HOLDS in verdicts and FAILS in verdicts:
                contradictions.append((ch.name, f.key, verdicts))
        if reaches and secs:
            per = {k: statistics.median(v) for k, v in reaches.items()}
            widths[ch.name] = (per, statistics.median(secs))
    say(
        "\ndecided fraction (holds or does not hold) per run, where run i is each chapter's i-th"
        " dataset:"
    )
    for i, (k, n) in sorted(decided.items()):
        say(f"  run {i + 1}: {k} of {n} ({100 * k / n:.0f} %)" if n else f"  run {i + 1}: none")
    k, n = pooled_decided
    if n:
        say(f"  pooled over the runs: {k} of {n} ({100 * k / n:.0f} %)")
    say("\ncontradictions (holds in one run, does not hold in another):")
    for name, key, verdicts in contradictions:
        say(f"  {name}.{key}: {', '.join(verdicts)}")
    if not contradictions:
        say("  none")
    say(
        "\nprecision per second: each finding's reach (its interval's half-width at 95 % over its"
        " distance from the threshold; below 1 it decides) and the seconds this design would need"
        " to bring the widest to 1:"
    )
    for name, (per, s) in widths.items():
        worst = max(per, key=per.get)
        r = per[worst]
        need = (
            "every finding clears its threshold"
            if r < 1
            else "never: the estimate sits on the threshold"
            if math.isinf(r)
            else f"~{to_decide(r, s):,.0f} s for {worst} (reach {r:.2g})"
        )
        say(f"  {name:22s} {s:.0f} s; median reach {statistics.median(per.values()):.2g}; {need}")
    return {
        "decided": decided,
        "pooled": tuple(pooled_decided),
        "contradictions": contradictions,
        "widths": widths,
    }


def reproducibility(
    runs: int, profile: str, chapters: str = "", source: str = "", host: str = "", say=print
) -> dict:
    """The benchmark: `host` (with --from only; default this host) picks whose datasets."""
    chs = _chapters(chapters)
    if host and not source:
        raise PerfbookError("--host reads another host's datasets: it needs --from")
    host = host or host_facts()["host_id"]
    with Scratch("reproducibility", say=say) as scratch:
        data = scratch.path("data")
        data.mkdir()
        if source:
            src = Path(source)
            if not (src / "runs").is_dir():
                raise PerfbookError(f"{src}: no runs/ directory (a data directory is wanted)")
            n = gather(src, data, host, profile, [c.name for c in chs])
            say(f"[reproducibility] {n} {profile} dataset(s) of {host} from {src}")
        else:
            codes = measure_into(data, runs, profile, chapters, say)
            say(f"[reproducibility] measure exit codes: {codes}")
        env_store = os.environ.get("PERFBOOK_VERDICT_STORE")
        os.environ["PERFBOOK_VERDICT_STORE"] = "off"  # a scratch copy: nothing to keep
        try:
            return report(data, profile, chs, host, say)
        finally:
            if env_store is None:
                os.environ.pop("PERFBOOK_VERDICT_STORE", None)
            else:
                os.environ["PERFBOOK_VERDICT_STORE"] = env_store
