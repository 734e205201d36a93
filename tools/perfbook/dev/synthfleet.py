"""A synthetic fleet for tests and benchmarks: N made-up hosts built from the committed data.

    python -m perfbook synthfleet N DEST [--seed S]

DEST is a data directory (DEST/runs/ is created) outside the repository's data/: the
generator refuses the book's own data. Each synthetic host takes, per chapter, the committed
dataset its chapter shows for one real host (perfbook.data.dataset.shown_datasets) and changes what
a fleet varies:

* the manifest's host block: CPU vendor and model, CPU count, memory, kernel release,
  bare metal / KVM guest / TCG guest, and identity facts from which its host id is derived
  as for a real machine (perfbook.data.identity), so validation treats it like any contribution;
* its measured values: every floating-point column is scaled by one factor per host
  (log-normal, sigma 0.15), so that hosts differ while each dataset stays self-consistent
  (ratios, sums and orderings within a dataset are kept; integer counts are not touched).

Everything it makes is marked: ``host.synthetic`` is true and the description begins with
"synthetic". Tables keep their names, row counts and columns, so every chapter reads them.

The same generator makes the two states of a clone the tests hold every chapter to (tests/
conftest.py, book_data), each in a copy of data/:

* add_host: a reader's machine after ``sudo make all``: one new host (another CPU model and
  kernel build) with one default-profile dataset per chapter, newer than every other, derived
  from the chapter's newest dataset: where the chapter repeats adaptively, one measured round
  of it (ROUNDS), what a slow machine's time budget leaves (n = 1; its values are that round's,
  not the run's medians); elsewhere its values scaled by one seeded factor;
* add_build: one host measured again after a kernel update: a newer dataset per chapter on
  another build of its kernel (one round fewer where it repeats adaptively, its values scaled
  elsewhere), so that the host's runs span two builds and the newest is on the new one.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import random
import re
import shutil
import sys
from concurrent.futures import FIRST_EXCEPTION, wait
from pathlib import Path

from perfbook.analysis.repetition import STOP_BUDGET
from perfbook.chapters import CHAPTERS
from perfbook.core.errors import PerfbookError, one_line
from perfbook.core.paths import data_dir as book_data_dir
from perfbook.core.paths import runs_dir
from perfbook.core.proc import die_with_parent, fork_pool
from perfbook.data import identity
from perfbook.data.dataset import (
    MANIFEST,
    list_runs,
    load_manifest,
    quoted,
    read_csv,
    shown_datasets,
    table_path,
    write_table,
)

CPUS = (
    ("AMD", "AMD EPYC 7B13", 2450),
    ("AMD", "AMD EPYC 9B14", 2600),
    ("AMD", "AMD Ryzen 9 7950X", 4500),
    ("Intel", "Intel Xeon Platinum 8375C", 2900),
    ("Intel", "Intel Xeon Gold 6338", 2000),
    ("Intel", "Intel Core i7-1185G7", 3000),
    ("Intel", "Intel Core i9-13900K", 3000),
    ("ARM", "Neoverse-N1", None),
)
KERNELS = (
    "5.10.0-28-amd64",
    "5.15.0-91-generic",
    "6.1.0-18-amd64",
    "6.6.13-200.fc39",
    "6.8.0-31-generic",
    "6.12.9-arch1-1",
    "6.18.44",
)
KINDS = (("none", "none"), ("kvm", "none"), ("kvm", "docker"), ("qemu", "none"))


def _refuse_book_data(dest: Path) -> None:
    book = book_data_dir().resolve()
    d = dest.resolve()
    if d == book or book in d.parents or d in book.parents:
        raise PerfbookError(
            f"{dest}: the synthetic fleet never goes into the book's data/ "
            "(or a directory holding it); give a scratch directory"
        )


def synthetic_facts(base: dict, key: str, note: str, tsc_mhz: int | None, **facts) -> dict:
    """A synthetic host's manifest host block: `base` (a real one) with `facts` changed, marked
    synthetic, and identity facts (machine key `key`) from which its host id is derived as for
    a real machine (perfbook.data.identity), so that validation treats it like any contribution."""
    h = dict(base)
    h.update(facts)
    h.update({"synthetic": True, "label_opt_in": False, "note": note, "machine_key": key})
    h["machine"] = identity.machine_facts(
        h, tsc_mhz * 1000 if tsc_mhz else None, "synthetic", {"synthetic": True}
    )
    h["host_id"] = identity.derive(h["machine"])
    virt = h.get("virtualization")
    where = "bare metal" if virt == "none" else f"{virt} guest"
    h["description"] = f"synthetic: {h.get('cpu_model')}, {h.get('cpus_online')} CPUs, {where}"
    return h


def _host(rng: random.Random, i: int, seed: int, base: dict) -> dict:
    vendor, model, tsc = rng.choice(CPUS)
    virt, cont = rng.choice(KINDS)
    cpus = rng.choice((2, 4, 8, 16, 64))
    return synthetic_facts(
        base,
        f"synthetic-{seed}-{i}",
        f"synthetic host {i} of seed {seed}",
        tsc,
        cpu_model=model,
        cpus_online=cpus,
        mem_total_gib=round(cpus * rng.choice((1.9, 3.8, 7.7)), 1),
        arch="aarch64" if vendor == "ARM" else "x86_64",
        kernel_release=rng.choice(KERNELS),
        virtualization=virt,
        container=cont,
        cpu_vendor=vendor,
    )


# The repetition table's settings and ratios (perfbook.framework.contract.REPETITION) are not measured
# values: a host's factor leaves them as they are.
NOT_SCALED = {"repetition": ("target", "budget_s", "elapsed_s", "ci_coverage", "rel_ci_width")}


def _scaled(df, factor: float, table: str, schema):
    """The columns `schema` declares as float scaled by `factor`, with no more digits than the
    source shows (a portable output); a column of 0s and 1s is a flag, not a measure, and is
    left as it is."""
    keep = NOT_SCALED.get(table, ())
    for c, kind in schema.columns.items() if schema else ():
        if (
            kind == "float"
            and c in df.columns
            and c not in keep
            and not df[c].dropna().isin((0, 1)).all()
        ):
            df[c] = (df[c] * factor).map(lambda v: float(f"{v:.6g}") if v == v else v)
    return df


def _copy_scaled(
    src: Path,
    dest: Path,
    factor: float,
    tables,
    schemas: dict,
    chapter: str | None = None,
    one: bool = True,
) -> dict:
    """Copy a dataset's tables. Where `chapter` repeats adaptively (ROUNDS) its rounds are
    kept whole, one of them (`one`) or all but the first (keep_rounds); elsewhere the columns
    its chapter declares as float are scaled by `factor`. Returns {table: rows written}."""
    dest.mkdir(parents=True)
    frames = {t: read_csv(table_path(src, t)) for t in tables}
    if chapter in ROUNDS:
        frames = keep_rounds(chapter, frames, one)
    else:
        frames = {t: _scaled(df, factor, t, schemas.get(t)) for t, df in frames.items()}
    for t, df in frames.items():
        write_table(dest / t, df, preset=XZ_PRESET)
    return {t: len(df) for t, df in frames.items()}


# A synthetic fleet is scratch data (benchmarks, tests), never committed: its tables are xz at
# preset 0, which wrote the 40 largest committed tables (28 MB of CSV) in 1.0 s against 14.8 s
# at the book's preset 6, in files 36 % larger (5.0 MB against 3.7 MB). Readers read both alike.
XZ_PRESET = 0


# -- what a slow machine's default run keeps -------------------------------------------------

# The rounds of each chapter's adaptive repetition (perfbook.analysis.repetition), as (column, which,
# tables): the column that numbers them in the tables that share that numbering (warm-up
# rounds negative or flagged warmup_round, _warm; the measured ones after them). A run whose time budget was spent after one measured
# round has one: `which` says which of the source's rounds stands for it, "last" where one
# numbering spans the run (past the first rounds, which a busy start may disturb) and "first"
# where each experiment numbers its own rounds (only round 0 is in all of them). Tables that
# repeat a fixed number of times (dd_repeats, skew_rounds) are not listed: a slow machine runs
# them all. tests/test_synthfleet.py checks that every chapter whose datasets repeat
# adaptively is listed.
# "first" where a chapter's first rounds are its context rounds (every cell: the default then
# repeats only the cells its findings read), as a real run cut short after one round has them
ROUNDS = {
    "cpu_pinning": (
        ("round", "context", ("trials", "tasks", "cores", "latency_hist", "migrations")),
    ),
    "iostat_internals": (
        ("round", "last", ("phases", "intervals", "windows", "trace_windows", "trace_sample")),
    ),
    "netperf_latency": (("rep", "context", ("runs", "hist", "netperf_all")),),
    "qcow2_overlap": (("repeat", "first", ("prealloc", "writes", "cycles")),),
    "qemu_cache_modes": (("round", "context", ("bench",)), ("round", "last", ("host_dd",))),
    "sched_callers": (("round", "context", ("runs", "stacks", "sessions")),),
    "trace_overhead": (("round", "last", ("samples", "checks")),),
    "tsc_alignment": (("round", "last", ("bracket",)),),
    "virtio_blk_latency": (("round", "last", ("jobs",)),),
}
# Tables whose rows belong to the rows of a table with rounds: {table: (key column, that table)}.
ROUND_LINKS = {"virtio_blk_latency": {"requests": ("job", "jobs"), "calib": ("job", "jobs")}}


def _warm(df, col: str):
    """The rows of warm-up rounds: numbered below 0, or flagged (warmup_round, where the
    warm-up round is numbered 0 and the measured ones follow it)."""
    warm = df[col] < 0
    if "warmup_round" in df.columns:
        warm = warm | df["warmup_round"].fillna(False).astype(bool)
    return warm


def keep_rounds(chapter: str, frames: dict, one: bool = True) -> dict:
    """A dataset's tables ({name: frame}) with some of the measured rounds of each adaptive
    repetition (ROUNDS), renumbered from the first, and the warm-up rounds. `one`: a single round (what
    a default run writes where its time budget was spent after one round: n = 1, stopped by
    the time budget, perfbook.analysis.repetition.STOP_BUDGET); otherwise every round but the first
    (the last, for a chapter whose first rounds are its context rounds: ROUNDS' "context"), a run
    that had one round fewer. The repetition table's n follows."""
    out = dict(frames)
    kept_n = None
    for col, which, tables in ROUNDS.get(chapter, ()):
        tables = [t for t in tables if t in out]
        if not tables:
            continue
        first = out[tables[0]]
        measured = sorted(int(r) for r in first[col][~_warm(first, col)].unique())
        if not measured:
            continue
        if one:
            kept = measured[-1:] if which == "last" else measured[:1]
        else:  # one round fewer: a chapter's context rounds are the only ones with every cell
            kept = (measured[:-1] if which == "context" else measured[1:]) or measured
        for t in tables:
            df = out[t]
            # a table recorded in fewer rounds than the first (qcow2's perf recording: its
            # first round only) keeps as many of its own rounds as it has, up to len(kept): a
            # run with one round fewer still records it in its first round
            own = sorted(int(r) for r in df[col][~_warm(df, col)].unique())
            mine = kept if set(own) & set(kept) else own[: len(kept)]
            number = {r: measured[0] + i for i, r in enumerate(mine)}  # measured rounds start
            df = df[df[col].isin(mine) | _warm(df, col)].copy()
            df.loc[~_warm(df, col), col] = df.loc[~_warm(df, col), col].map(number)
            out[t] = df.reset_index(drop=True)
        kept_n = len(kept) if one else None
    for t, (key, parent) in ROUND_LINKS.get(chapter, {}).items():
        if t in out and parent in out:
            out[t] = out[t][out[t][key].isin(out[parent][key])].reset_index(drop=True)
    if ROUNDS.get(chapter) and "repetition" in out:
        rep = out["repetition"].copy()
        adaptive = (rep["min_runs"] < rep["max_runs"]) & (rep["n"] > 1)
        if one:
            rep.loc[adaptive, "n"] = kept_n
            rep.loc[adaptive, "ci_low"] = rep.loc[adaptive, "median"]
            rep.loc[adaptive, "ci_high"] = rep.loc[adaptive, "median"]
            if "ci_coverage" in rep.columns:
                rep.loc[adaptive, "ci_coverage"] = 0.0
            rep.loc[adaptive, "rel_ci_width"] = float("nan")
            rep.loc[adaptive, "met_target"] = False
            rep.loc[adaptive, "stopped_by"] = STOP_BUDGET
        else:
            rep.loc[adaptive, "n"] = rep.loc[adaptive, "n"] - 1
        out["repetition"] = rep
    return out


def _worker_start(schemas: dict) -> None:
    """A worker of generate's pool: it dies with its parent and knows every chapter's table
    schemas (given once, not with each host)."""
    die_with_parent()
    global _schemas
    _schemas = schemas


def _make_host(jobs) -> None:
    """Write one synthetic host's datasets: [(source run, new run, factor, tables, chapter,
    manifest text)] (a worker of generate's pool)."""
    for src, run, factor, tables, chapter, man_text in jobs:
        _copy_scaled(src, run, factor, tables, _schemas[chapter])
        (run / MANIFEST).write_text(man_text)


def generate(n: int, dest: Path, seed: int = 1, source: Path | None = None, say=print) -> list[str]:
    """Make n synthetic hosts under dest/runs from the shown dataset per (host, chapter) of
    `source` (default: the book's data/); returns their host ids. The hosts are drawn in
    order from one seeded generator, then written side by side, one process per CPU (xz
    compression is most of the time, at XZ_PRESET), so the same seed gives the same fleet."""

    dest = Path(dest)
    _refuse_book_data(dest)
    rng = random.Random(seed)
    newest: dict[str, list[Path]] = {}
    schemas = _all_schemas()
    for ch in CHAPTERS:
        mans = [load_manifest(r) for r in list_runs(ch.name, source)]
        shown = shown_datasets(mans)  # one dataset per host: the one a chapter shows (quoted())
        if shown:
            newest[ch.name] = [m.path for m in mans if shown.get(m.host_id) == m["run_id"]]
    ids, hosts = [], []
    for i in range(n):
        factor = rng.lognormvariate(0.0, 0.15)
        host, jobs = None, []
        for chapter, runs in sorted(newest.items()):
            src = runs[i % len(runs)]
            man = dict(load_manifest(src))
            if host is None:
                host = _host(rng, i, seed, man["host"])
            man["host"] = host
            run = dest / "runs" / host["host_id"] / chapter / src.name
            if run.exists():
                raise PerfbookError(
                    f"{run}: exists already; use an empty directory or another seed"
                )
            jobs.append(
                (
                    src,
                    run,
                    factor,
                    man["tables"],
                    chapter,
                    json.dumps(man, indent=1, sort_keys=True) + "\n",
                )
            )
        ids.append(host["host_id"])
        hosts.append(jobs)
    with fork_pool(_worker_start, (schemas,)) as pool:
        pending = {pool.submit(_make_host, jobs) for jobs in hosts}
        done_n = 0
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                for f in done:
                    f.result()  # a worker's error, here
                    done_n += 1
                    if done_n % 10 == 0 or done_n == n:
                        say(f"[synthfleet] {done_n}/{n} hosts")
        except BaseException:
            for f in pending:
                f.cancel()
            raise
    ref = dest / "reference"
    if not ref.exists() and (source or book_data_dir()).joinpath("reference").is_dir():
        shutil.copytree((source or book_data_dir()) / "reference", ref)
    return ids


# -- one more host, or one more kernel build, in a copy of the book's data ----------------------

# A reader's machine: another CPU model and another kernel build than any committed host.
READER = {
    "cpu_model": "Intel Xeon Gold 6338",
    "cpu_vendor": "Intel",
    "kernel_release": "6.8.0-31-generic",
}
READER_TSC_MHZ = 2000


def after_every_run(data_dir: Path) -> str:
    """A run id one day after the newest dataset's under data_dir/runs: the newest, whenever
    the copy is made (new_run_id() follows the clock, and committed runs may be newer)."""
    ids = [
        p.name for p in runs_dir(data_dir).glob("*/*/*") if re.fullmatch(r"\d{8}T\d{6}Z", p.name)
    ]
    if not ids:
        raise PerfbookError(f"{runs_dir(data_dir)}: no dataset to start from")
    t = _dt.datetime.strptime(max(ids), "%Y%m%dT%H%M%SZ") + _dt.timedelta(days=1)
    return t.strftime("%Y%m%dT%H%M%SZ")


def _factor(rng: random.Random) -> float:
    """A host's or a run's scale factor: 10-30 % up or down, so that every number differs."""
    return math.exp(rng.choice((-1, 1)) * rng.uniform(0.1, 0.3))


def _newest(chapter: str, data_dir: Path, host_id: str | None = None):
    """The dataset of a chapter (of one host) that its prose would quote (dataset.quoted: the
    newest of a real profile that was not disturbed, a reader's make all being such a one; a
    disturbed source would be copied with its mark); None if there is none."""
    mans = [load_manifest(r) for r in list_runs(chapter, data_dir)]
    return quoted([m for m in mans if host_id is None or m.host_id == host_id])


def _derive(
    src, host: dict, run_id: str, factor: float, data_dir: Path, schemas: dict, one: bool
) -> Path:
    """Write a dataset of `host` with run id `run_id` from dataset `src` (a Manifest): where
    its chapter repeats adaptively, one of its rounds (`one`) or all but the first
    (keep_rounds), elsewhere its values scaled by `factor`; its manifest the source's with the
    new host, run id, default profile, times and row counts."""
    man = json.loads(json.dumps(dict(src)))
    chapter = man["chapter"]
    run = runs_dir(data_dir) / host["host_id"] / chapter / run_id
    if run.exists():
        raise PerfbookError(f"{run}: exists already")
    rows = _copy_scaled(src.path, run, factor, man["tables"], schemas, chapter, one)
    started = _dt.datetime.strptime(run_id, "%Y%m%dT%H%M%SZ").replace(tzinfo=_dt.UTC)
    took = _dt.datetime.fromisoformat(man["finished"]) - _dt.datetime.fromisoformat(man["started"])
    man.update(
        host=host,
        run_id=run_id,
        profile="default",
        tables=rows,
        started=started.isoformat(timespec="seconds"),
        finished=(started + took).isoformat(timespec="seconds"),
    )
    (run / MANIFEST).write_text(json.dumps(man, indent=2, sort_keys=True) + "\n")
    return run


def _all_schemas() -> dict:
    """{chapter: {table: perfbook.framework.contract.Table}} of every chapter."""
    return {ch.name: getattr(ch.load(), "tables", {}) for ch in CHAPTERS}


def add_host(data_dir: Path, seed: int = 2) -> tuple[str, dict[str, Path]]:
    """A reader's machine after `sudo make all`, in data_dir (a copy of the book's data/): a new
    host (READER's CPU model and kernel build, the rest of its facts from the newest dataset's
    host) with one default-profile dataset per chapter that has one, newer than every dataset
    there, each derived from its chapter's newest dataset: one round of each adaptive
    repetition (keep_rounds), so that the n = 1 paths run, and elsewhere its values scaled by one
    seeded factor. Returns (host id, {chapter: dataset directory})."""
    data_dir = Path(data_dir)
    _refuse_book_data(data_dir)
    rng = random.Random(seed)
    factor, run_id, schemas = _factor(rng), after_every_run(data_dir), _all_schemas()
    sources = {ch.name: m for ch in CHAPTERS if (m := _newest(ch.name, data_dir)) is not None}
    base = max(sources.values(), key=lambda m: m["run_id"])["host"]
    host = synthetic_facts(
        base,
        f"synthetic-reader-{seed}",
        f"a reader's machine (seed {seed})",
        READER_TSC_MHZ,
        **READER,
    )
    return host["host_id"], {
        name: _derive(m, host, run_id, factor, data_dir, schemas[name], True)
        for name, m in sources.items()
    }


def other_build(release: str, taken=()) -> str:
    """Another build of a kernel release: the first number after its version raised until no
    release in `taken` has it ('6.18.44-fc-v657' -> '6.18.44-fc-v658', '6.1.0-56-amd64' ->
    '6.1.0-57-amd64'); a release without one gets '-rebuild1'."""
    base, _, local = release.partition("-")
    m = re.search(r"\d+", local)
    if m:
        head, n, tail = f"{base}-{local[: m.start()]}", int(m.group()), local[m.end() :]
    else:
        head, n, tail = f"{release}-rebuild", 0, ""
    while True:
        n += 1
        out = f"{head}{n}{tail}"
        if out not in taken:
            return out


def add_build(data_dir: Path, host_id: str, seed: int = 3) -> dict[str, Path]:
    """Host `host_id` measured again after a kernel update, in data_dir (a copy of the book's
    data/): for each chapter it has data of, a default-profile dataset newer than every dataset
    there, made from its newest one (all its rounds but the first where the chapter repeats
    adaptively, keep_rounds; elsewhere its values scaled by one seeded factor), on another build
    of that dataset's kernel (other_build). Its runs then span two kernel builds and the newest
    is on the other one. Returns {chapter: new dataset directory}."""
    data_dir = Path(data_dir)
    _refuse_book_data(data_dir)
    rng = random.Random(seed)
    factor, run_id, schemas = _factor(rng), after_every_run(data_dir), _all_schemas()
    out = {}
    for ch in CHAPTERS:
        src = _newest(ch.name, data_dir, host_id)
        if src is None:
            continue
        taken = {
            m["host"].get("kernel_release")
            for m in (load_manifest(r) for r in list_runs(ch.name, data_dir))
        }
        host = dict(src["host"], kernel_release=other_build(src["host"]["kernel_release"], taken))
        out[ch.name] = _derive(src, host, run_id, factor, data_dir, schemas[ch.name], False)
    if not out:
        raise PerfbookError(f"{runs_dir(data_dir) / host_id}: no dataset of that host")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfbook synthfleet")
    ap.add_argument("n", type=int)
    ap.add_argument("dest", type=Path)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    try:
        generate(a.n, a.dest, a.seed)
    except PerfbookError as e:
        print(one_line(e), file=sys.stderr)
        return 2
    return 0
