"""validate_all: every dataset of the book checked against its manifest and its chapter's
schemas (one line naming the file on the first problem): `python -m perfbook validate`, the
contribution check, and (manifests alone) a refresh before its notebooks run."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from perfbook.analysis.findings import stored
from perfbook.chapters import CHAPTERS, by_name
from perfbook.core.errors import DatasetError
from perfbook.core.paths import runs_dir
from perfbook.core.proc import fork_pool
from perfbook.data import identity
from perfbook.data.dataset import (
    MANIFEST,
    list_runs,
    load_manifest,
    read_table,
    table_name,
    table_path,
    visible_files,
)


def validate_all(data_dir: Path | None = None, names=None, tables: bool = True) -> int:
    """Load every dataset of every chapter (or of the chapters `names`) and every table,
    checked against the chapter's schemas (DatasetError on the first problem); returns the
    number of datasets checked.

    A dataset whose tables passed before, with the same files and the same code, is not read
    again: its pass is kept in the verdict store (perfbook.analysis.findings.stored, slot 'valid'), whose key
    covers the dataset's files and the code. Its manifest is always checked. Measured
    2026-11-28 on the project's machine (2 shared cores, Debian 12; medians of 3 runs in turn,
    whole process): `perfbook validate` of the committed data with 100 synthetic hosts added
    (perfbook synthfleet) took 3.2 s CPU / 6.4 s wall with the passes stored, 40.6 s / 63.7 s
    with PERFBOOK_VERDICT_STORE=off; `perfbook bench validate --data-dir FLEET` prints it.

    The datasets to read are read side by side, one process per CPU, when there are many (a
    fleet's first validation).

    Every file of a dataset must be a regular file (perfbook.data.dataset.visible_files: no link, no
    FIFO, anywhere in it), and a table must stay within perfbook.data.dataset's limits as it is read.

    tables=False checks the manifests alone (chapter, identity, listed tables present and
    declared, no host id given to two machines, no link) and reads no table: what a refresh does before
    its notebooks, which check every table they read as they read it (perfbook.data.dataset.read_table:
    row count, columns, types), so a fleet's tables are not read twice."""
    n, seen, unread = 0, [], []
    for ch in CHAPTERS:
        if names is not None and ch.name not in names:
            continue
        mod = ch.load()
        schemas = getattr(mod, "tables", {})
        for run in list_runs(ch.name, data_dir):
            man = load_manifest(run)
            if man["chapter"] != ch.name:
                raise DatasetError(
                    f"{run / MANIFEST}: chapter {man['chapter']!r} in the directory of {ch.name}"
                )
            why = identity.check(man)
            if why:
                raise DatasetError(f"{run / MANIFEST}: {why}")
            visible_files(
                run
            )  # a link or a FIFO anywhere in it is refused (the site publishes it all)
            for table in man["tables"]:
                if table_path(run, table) is None:
                    raise DatasetError(
                        f"{table_name(run, table)}: listed in its manifest but missing"
                    )
                if schemas and table not in schemas:
                    raise DatasetError(
                        f"{table_name(run, table)}: not a table the {ch.name} chapter declares"
                    )
            if tables:
                try:
                    stored(_checked(mod, data_dir), man, "valid", _unread, lambda v: v is True)
                except _Unread:
                    unread.append((ch.name, run))
            seen.append(man)
            n += 1
    _read_unread(unread, data_dir)
    for hid, what in identity.clashes(seen).items():
        raise DatasetError(
            f"{runs_dir(data_dir) / hid}: its datasets disagree on {'; '.join(what)}: "
            "one host id given to two machines (PERFBOOK_HOST_ID?); give each its own"
        )
    return n


class _Unread(Exception):
    """validate_all: this dataset's pass is not stored yet."""


def _unread():
    raise _Unread


def _checked(chapter, data_dir):
    """The part of a Data the verdict store reads (its chapter and data directory)."""
    return SimpleNamespace(chapter=chapter, data_dir=data_dir)


def _check_tables(chapter: str, run: Path, data_dir) -> str | None:
    """Read every table of one dataset against its schema and store its pass; the problem's
    one line, or None."""
    mod = by_name(chapter).load()
    schemas = getattr(mod, "tables", {})
    man = load_manifest(run)

    def read_every_table():
        for table in man["tables"]:
            read_table(run, table, man, schemas.get(table))
        return True

    try:
        stored(_checked(mod, data_dir), man, "valid", read_every_table, lambda v: v is True)
    except DatasetError as e:
        return str(e)
    return None


def _read_unread(unread: list, data_dir) -> None:
    """_check_tables of each (chapter, run), side by side when there are many; DatasetError
    with the first problem in their order."""
    if len(unread) < 8:
        problems = [_check_tables(c, r, data_dir) for c, r in unread]
    else:
        with fork_pool() as pool:
            problems = list(
                pool.map(
                    _check_tables,
                    [c for c, _ in unread],
                    [r for _, r in unread],
                    [data_dir] * len(unread),
                    chunksize=4,
                )
            )
    for problem in problems:
        if problem:
            raise DatasetError(problem)
