"""The dataset writer: tables and a manifest gathered during a run, published atomically.

Everything goes into a hidden temporary directory next to the destination, which is renamed
into place only when the run succeeded; an existing dataset is never overwritten
(perfbook.data.dataset reads what it publishes, and still exports DatasetWriter).

The temporary directory is removed on every other way out: a failed run, a signal, and a
write of ours that fails (a full disk, a quota, an I/O error: a table, the manifest, the
rename), which is one DatasetError line naming the file and the cause. It is recorded in the
private state directory before it is made (perfbook.hoststate.sweep.remember_dataset), so that after a
SIGKILL the sweep removes it in whatever data directory the run wrote to.
"""

from __future__ import annotations

import errno
import json
import lzma
import os
import shutil
import uuid
from pathlib import Path

from perfbook.core import guard
from perfbook.core.errors import DatasetError
from perfbook.core.paths import runs_dir
from perfbook.data import hostinfo
from perfbook.data.dataset import (
    MANIFEST,
    PLAIN_EXT,
    RUN_DEPTH,
    TABLE_EXT,
    check_writable,
    is_regular,
    new_run_id,
    read_data,
    utc_now,
    write_table,
)
from perfbook.data.manifest import SCHEMA
from perfbook.hoststate.sweep import forget_dataset, remember_dataset

_CAUSES = {
    errno.ENOSPC: "no space left on device (the disk is full)",
    errno.EDQUOT: "disk quota exceeded (the disk is full for this user)",
    errno.EIO: "I/O error (the disk failed the write)",
    errno.EROFS: "read-only file system",
}


def write_error(path: Path, e: OSError, action: str = "write") -> DatasetError:
    """The one line for a write of the writer that failed: the file and the cause."""
    cause = _CAUSES.get(e.errno) or e.strerror or str(e)
    return DatasetError(f"can't {action} {path}: {cause}; nothing was published")


class DatasetWriter:
    """Collects tables and a manifest, then publishes them atomically.

    Use as a context manager: on an exception the temporary directory is
    removed and nothing appears under data/runs.
    """

    def __init__(
        self,
        chapter: str,
        data_dir: Path,
        parameters: dict,
        run_id: str | None = None,
        profile: str | None = None,
        schemas: dict | None = None,
    ):
        self.chapter = chapter
        self.data_dir = Path(data_dir)
        self.parameters = dict(parameters)
        self.profile = profile
        self.schemas = schemas or {}
        self.host = hostinfo.host_facts()
        self.run_id = run_id or new_run_id()
        self.dest = runs_dir(self.data_dir) / self.host["host_id"] / chapter / self.run_id
        self.tmp = self.dest.parent / f".tmp-{os.getpid()}-{self.run_id}-{uuid.uuid4().hex[:8]}"
        self.tables: dict[str, int] = {}
        self.notes: list[str] = []
        self.skipped: dict[str, str] = {}
        self.rejected: list[str] = []
        self.extra: dict = {}
        self.disturbance: dict | None = (
            None  # the run monitor's record (perfbook.hoststate.monitor)
        )
        self.phases: dict | None = None  # seconds per kind (perfbook.core.phases)
        self.started = utc_now()
        self.published: Path | None = None

    def __enter__(self):
        check_writable(self.data_dir)
        if self.dest.exists():
            raise DatasetError(f"dataset {self.dest} exists already; refusing to overwrite it")
        try:
            self.tmp.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise write_error(self.tmp.parent, e) from None
        remember_dataset(self.tmp)  # before it exists: a SIGKILL may come at any time
        try:
            self.tmp.mkdir()
        except OSError as e:
            self._discard()
            raise write_error(self.tmp, e) from None
        return self

    def __exit__(self, etype, exc, tb):
        if etype is None and guard.received():
            # a signal arrived but its KeyboardInterrupt was swallowed on the way (a thread,
            # a finalizer): the run was asked to stop, so it is not published either
            self._discard()
            raise KeyboardInterrupt(
                f"{guard.interrupted_by()} arrived during the run; nothing was published"
            )
        if etype is None:
            try:
                self._publish()
            except BaseException:
                self._discard()
                raise
        else:
            self._discard()
        return False

    def _discard(self):
        """Remove the temporary directory (and the empty directories above it), then its
        record; a directory that could not be removed keeps its record for the sweep."""
        with guard.restoring():
            shutil.rmtree(self.tmp, ignore_errors=True)
            self._prune_empty()
            if not os.path.lexists(self.tmp):
                forget_dataset(self.tmp)

    def _prune_empty(self):
        for d in (self.dest.parent, self.dest.parent.parent):
            try:
                d.rmdir()
            except OSError:
                break

    def path(self, name: str) -> Path:
        """A file inside the (temporary) dataset directory, for raw artefacts."""
        return self.tmp / name

    def add_table(self, name: str, df) -> Path:
        """Store a tidy pandas DataFrame as <name>.csv.xz (write_table)."""
        if not name.replace("_", "").isalnum():
            raise DatasetError(f"table name {name!r} must be alphanumeric")
        if self.schemas:
            if name not in self.schemas:
                raise DatasetError(
                    f"table {name!r} is not declared in the {self.chapter} chapter's tables"
                )
            self.schemas[name].check(df, f"{self.chapter} table {name}")  # raises on a mismatch
        try:
            p = write_table(self.tmp / name, df)
        except OSError as e:
            raise write_error(self.tmp / f"{name}{TABLE_EXT}", e) from None
        self.tables[name] = int(len(df))
        return p

    def reject(self, reason: str) -> None:
        """A sanity check failed: the run is doubtful and will not be published."""
        self.rejected.append(reason)

    def skip(self, part: str, reason: str) -> None:
        """Record that part of the experiment was not measured, and why."""
        self.skipped[part] = reason

    def manifest(self) -> dict:
        extra = {k: v for k, v in self.extra.items() if k != "_tool_cmds"}
        return {
            "schema": SCHEMA,
            "chapter": self.chapter,
            "run_id": self.run_id,
            "host": self.host,
            "profile": self.profile,
            "parameters": self.parameters,
            "tools": hostinfo.tool_versions(self.extra.pop("_tool_cmds", None)),
            "git": hostinfo.git_commit(),
            "started": self.started,
            "finished": utc_now(),
            "tables": self.tables,
            "skipped": self.skipped,
            "notes": self.notes,
            "facts": extra,
            "disturbance": self.disturbance,
            "phases": self.phases,
        }

    def _publish(self):
        """Write the manifest and rename the directory into place; the caller (__exit__)
        discards the temporary directory when this raises."""
        if self.rejected:
            raise DatasetError(
                "the run failed its sanity checks, so nothing was published: "
                + "; ".join(self.rejected)
            )
        if not self.tables:
            raise DatasetError("the run produced no table; nothing was saved")
        try:
            with open(self.tmp / MANIFEST, "w") as f:
                json.dump(self.manifest(), f, indent=2, sort_keys=True, default=str)
                f.write("\n")
        except OSError as e:
            raise write_error(self.tmp / MANIFEST, e) from None
        if self.dest.exists():
            raise DatasetError(
                f"dataset {self.dest} appeared during the run; refusing to overwrite it"
            )
        try:
            os.rename(self.tmp, self.dest)
        except OSError as e:
            raise write_error(self.dest, e, f"rename {self.tmp.name} to") from None
        self.published = self.dest
        forget_dataset(self.tmp)


def compact(data_dir: Path | None = None, say=print) -> tuple[int, int, int]:
    """Compress every plain table of every dataset under data_dir/runs in place (atomic per
    file; the decompressed bytes are checked against the original before it is removed).
    Returns (tables, bytes before, bytes after)."""
    n = before = after = 0
    for mf in sorted(runs_dir(data_dir).glob(f"*/*/*/{MANIFEST}")):
        run = mf.parent
        for table in json.loads(read_data(mf, RUN_DEPTH)[1]).get("tables", {}):
            plain = run / f"{table}{PLAIN_EXT}"
            if not is_regular(plain) or os.path.lexists(run / f"{table}{TABLE_EXT}"):
                continue
            raw = read_data(plain, RUN_DEPTH)[1]  # never through a link
            packed = lzma.compress(raw)
            if lzma.decompress(packed) != raw:
                raise DatasetError(f"{plain}: compression did not round-trip; left as it is")
            tmp = run / f".{table}{TABLE_EXT}.tmp"
            tmp.write_bytes(packed)
            os.replace(tmp, run / f"{table}{TABLE_EXT}")
            plain.unlink()
            n, before, after = n + 1, before + len(raw), after + len(packed)
    say(f"compacted {n} tables: {before / 1e6:.1f} MB of CSV into {after / 1e6:.1f} MB")
    return n, before, after
