"""Bring datasets measured on other hosts into data/runs/, never overwriting one.

ansible/measure.yml measures a fleet of hosts and fetches each host's
data/runs/<host-id>/ back as a tar archive. This module adopts such an archive:

    python -m perfbook fleet import ARCHIVE [--dest data/runs]

Every dataset in it (<host-id>/<chapter>/<run-id>/ with a manifest.json that
agrees with those three names) is checked, unpacked next to the destination
and renamed into place. A dataset the destination already holds is left alone:
identical content is reported as already there, different content as a
conflict (exit status 1). Datasets are immutable; nothing is ever replaced.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tarfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from perfbook.chapters import by_name
from perfbook.core.errors import DatasetError, PerfbookError, one_line
from perfbook.core.paths import runs_dir
from perfbook.data import identity
from perfbook.data.dataset import (
    MANIFEST,
    MAX_MANIFEST_BYTES,
    RUN_DEPTH,
    load_manifest,
    read_data,
    read_table,
    table_path,
    visible_files,
)
from perfbook.data.digest import dir_digest

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


@dataclass
class Adopted:
    new: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)


def _check_members(tar: tarfile.TarFile) -> None:
    for m in tar.getmembers():
        parts = Path(m.name).parts
        if m.name.startswith("/") or ".." in parts:
            raise DatasetError(f"archive member {m.name!r} points outside the archive; refusing it")
        if not (m.isdir() or m.isfile()):
            raise DatasetError(
                f"archive member {m.name!r} is not a plain file or directory; refusing it"
            )


def _validate(run: Path, host: str, chapter: str, run_id: str) -> None:
    rel = f"{host}/{chapter}/{run_id}"
    for name in (host, chapter, run_id):
        if not NAME.fullmatch(name):
            raise DatasetError(f"{rel}: {name!r} is not a valid dataset path component")
    visible_files(run)  # regular files only: a link or a FIFO in it is refused
    m = load_manifest(run)  # JSON, required fields, schema, run and host ids vs the directories
    why = identity.check(m)  # the host id must follow from the machine facts it carries
    if why:
        raise DatasetError(f"{rel}: {why}")
    if m["chapter"] != chapter:
        raise DatasetError(
            f"{rel}: its manifest says chapter {m['chapter']!r}; "
            "refusing a dataset filed under another name"
        )
    try:
        schemas = by_name(chapter).load().tables
    except PerfbookError:
        raise DatasetError(f"{rel}: {chapter!r} is not a chapter of this book") from None
    for table in m["tables"]:
        if table_path(run, table) is None:
            raise DatasetError(
                f"{rel}: the manifest lists table {table!r} but {table}.csv.xz is missing"
            )
        if table not in schemas:
            raise DatasetError(f"{rel}: table {table!r} is not one the {chapter} chapter declares")
        read_table(run, table, m, schemas[table])  # row count, columns and types


def _check_identity(found, dest: Path) -> None:
    """A host id already in `dest` must come with the same machine facts: a contribution
    never hides under another machine's id."""
    hosts = {host for host, *_ in found}
    mans = [load_manifest(run) for *_, run in found]
    mans += [
        load_manifest(mf.parent)
        for h in sorted(hosts)
        for mf in sorted((dest / h).glob(f"*/*/{MANIFEST}"))
    ]
    for hid, what in identity.clashes(mans).items():
        raise DatasetError(
            f"{hid}: the archive's datasets and those already here disagree on "
            f"{'; '.join(what)}: a host id reused by another machine; refusing them"
        )


def _datasets(top: Path):
    """(host, chapter, run_id, path) of every published dataset below an unpacked runs dir."""
    for mf in sorted(top.glob(f"*/*/*/{MANIFEST}")):
        run = mf.parent
        host, chapter, run_id = run.relative_to(top).parts
        if any(p.startswith(".") for p in (host, chapter, run_id)):
            continue
        yield host, chapter, run_id, run


def adopt_tree(src: Path, dest: Path) -> Adopted:
    """Move every valid dataset from an unpacked runs tree `src` into `dest` (same file system)."""
    found = list(_datasets(src))
    for host, chapter, run_id, run in found:  # all checks first: a bad archive adds nothing
        _validate(run, host, chapter, run_id)
    _check_identity(found, dest)
    out = Adopted()
    for host, chapter, run_id, run in found:
        rel = f"{host}/{chapter}/{run_id}"
        target = dest / host / chapter / run_id
        if target.exists():
            (out.present if dir_digest(target) == dir_digest(run) else out.conflicts).append(rel)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(run, target)  # fails if a non-empty dataset appeared meanwhile
        except OSError:
            out.conflicts.append(rel)
            continue
        out.new.append(rel)
    return out


def adopt_archive(archive: Path, dest: Path | None = None) -> Adopted:
    """Unpack a tar archive of <host-id>/<chapter>/<run-id>/ trees and adopt its datasets."""
    dest = Path(dest) if dest else runs_dir()
    dest.mkdir(parents=True, exist_ok=True)
    stage = dest / f".fleet-import-{uuid.uuid4().hex[:8]}"
    stage.mkdir()
    try:
        try:
            with tarfile.open(archive) as tar:
                _check_members(tar)
                tar.extractall(stage, filter="data")
        except (OSError, tarfile.TarError) as e:
            raise DatasetError(f"cannot read the archive {archive}: {e}") from None
        return adopt_tree(stage, dest)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfbook fleet")
    sub = ap.add_subparsers(dest="cmd", required=True)
    imp = sub.add_parser("import", help="adopt the datasets of a fetched archive")
    imp.add_argument("archive", type=Path)
    imp.add_argument("--dest", type=Path, default=None, help="runs directory (default: data/runs)")
    args = ap.parse_args(argv)
    try:
        res = adopt_archive(args.archive, args.dest)
    except PerfbookError as e:
        print(one_line(e), file=sys.stderr)
        return 2
    for rel in res.new:
        print(f"[fleet] new dataset: {rel}")
    for rel in res.present:
        print(f"[fleet] already here, identical: {rel}")
    for rel in res.conflicts:
        print(f"[fleet] CONFLICT: {rel} exists with other content; left it as it was")
    print(
        f"[fleet] {len(res.new)} new, {len(res.present)} already here, {len(res.conflicts)} conflicting"
    )
    return 1 if res.conflicts else 0


def import_datasets(src_runs: Path, dest_runs: Path, host_id: str, note: str):
    """Adopt <src_runs>/<host_id>/<chapter>/<run-id>/ into dest_runs with perfbook.book.fleet.

    A dataset that is not in dest_runs yet must carry this second host's `note`
    in its manifest; existing ones are left alone (identical: 'present', else a
    'conflict'). Returns perfbook.book.fleet.Adopted (relative names)."""
    base, dest_runs = Path(src_runs) / host_id, Path(dest_runs)
    if not base.is_dir():
        return Adopted()
    for mf in sorted(base.glob("*/*/manifest.json")):
        run = mf.parent
        if run.name.startswith(".") or (dest_runs / host_id / run.parent.name / run.name).exists():
            continue
        try:
            host = json.loads(read_data(mf, RUN_DEPTH, MAX_MANIFEST_BYTES)[1]).get("host", {})
        except ValueError as e:
            raise PerfbookError(f"{run}: unreadable manifest.json ({e})") from None
        if host.get("note") != note:
            raise PerfbookError(
                f"{run.parent.name}/{run.name}: its manifest's host.note is not this "
                "second host's; not importing it"
            )
    dest_runs.mkdir(parents=True, exist_ok=True)
    stage = (
        dest_runs / f".tmp-secondhost-import-{uuid.uuid4().hex[:8]}"
    )  # same file system: renames
    try:
        shutil.copytree(base, stage / host_id, symlinks=True)  # a link stays one, and is refused
        return adopt_tree(stage, dest_runs)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
