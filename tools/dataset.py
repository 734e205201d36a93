"""Datasets: data/runs/<host-id>/<chapter>/<run-id>/{*.csv, manifest.json}.

Writing is atomic: everything goes into a hidden temporary directory next to
the destination, which is renamed into place only when the run succeeded. An
existing dataset is never overwritten. Reading gathers every run of a chapter,
all hosts, into tidy pandas frames with host_id and run_id columns.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import uuid
from pathlib import Path

from . import hostinfo
from .errors import DatasetError
from .paths import runs_dir

MANIFEST = "manifest.json"
SCHEMA = 1


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def new_run_id() -> str:
    now = _dt.datetime.now(_dt.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ")


def check_writable(data_dir: Path) -> None:
    """Fail early, before any measurement, if datasets can't be written there."""
    target = runs_dir(data_dir)
    try:
        target.mkdir(parents=True, exist_ok=True)
        probe = target / f".perfbook-write-test-{os.getpid()}"
        probe.write_text("x")
        probe.unlink()
    except OSError as e:
        raise DatasetError(
            f"data directory {data_dir} is not writable ({e.strerror}); "
            "pass a writable data_dir parameter") from None


class DatasetWriter:
    """Collects tables and a manifest, then publishes them atomically.

    Use as a context manager: on an exception the temporary directory is
    removed and nothing appears under data/runs.
    """

    def __init__(self, chapter: str, data_dir: Path, parameters: dict,
                 run_id: str | None = None):
        self.chapter = chapter
        self.data_dir = Path(data_dir)
        self.parameters = dict(parameters)
        self.host = hostinfo.host_facts()
        self.run_id = run_id or new_run_id()
        self.dest = runs_dir(self.data_dir) / self.host["host_id"] / chapter / self.run_id
        self.tmp = self.dest.parent / f".tmp-{os.getpid()}-{self.run_id}-{uuid.uuid4().hex[:8]}"
        self.tables: dict[str, int] = {}
        self.notes: list[str] = []
        self.skipped: dict[str, str] = {}
        self.rejected: list[str] = []
        self.extra: dict = {}
        self.started = utc_now()
        self.published: Path | None = None

    def __enter__(self):
        check_writable(self.data_dir)
        if self.dest.exists():
            raise DatasetError(f"dataset {self.dest} exists already; refusing to overwrite it")
        self.tmp.mkdir(parents=True)
        return self

    def __exit__(self, etype, exc, tb):
        from . import guard
        if etype is None and guard.received():
            # a signal arrived but its KeyboardInterrupt was swallowed on the way (a thread,
            # a finalizer): the run was asked to stop, so it is not published either
            shutil.rmtree(self.tmp, ignore_errors=True)
            self._prune_empty()
            raise KeyboardInterrupt(f"{guard.interrupted_by()} arrived during the run; nothing was published")
        if etype is None:
            self._publish()
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self._prune_empty()
        return False

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
        """Store a tidy pandas DataFrame as <name>.csv."""
        if not name.replace("_", "").isalnum():
            raise DatasetError(f"table name {name!r} must be alphanumeric")
        p = self.tmp / f"{name}.csv"
        df.to_csv(p, index=False)
        self.tables[name] = int(len(df))
        return p

    def reject(self, reason: str) -> None:
        """A sanity check failed: the run is doubtful and will not be published."""
        self.rejected.append(reason)

    def skip(self, part: str, reason: str) -> None:
        """Record that part of the experiment was not measured, and why."""
        self.skipped[part] = reason

    def manifest(self) -> dict:
        return {
            "schema": SCHEMA,
            "chapter": self.chapter,
            "run_id": self.run_id,
            "host": self.host,
            "parameters": self.parameters,
            "tools": hostinfo.tool_versions(self.extra.pop("_tool_cmds", None)),
            "git": hostinfo.git_commit(),
            "started": self.started,
            "finished": utc_now(),
            "tables": self.tables,
            "skipped": self.skipped,
            "notes": self.notes,
            **self.extra,
        }

    def _publish(self):
        if self.rejected:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self._prune_empty()
            raise DatasetError("the run failed its sanity checks, so nothing was published: "
                               + "; ".join(self.rejected))
        if not self.tables:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self._prune_empty()
            raise DatasetError("the run produced no table; nothing was saved")
        with open(self.tmp / MANIFEST, "w") as f:
            json.dump(self.manifest(), f, indent=2, sort_keys=True, default=str)
            f.write("\n")
        if self.dest.exists():
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise DatasetError(f"dataset {self.dest} appeared during the run; refusing to overwrite it")
        os.rename(self.tmp, self.dest)
        self.published = self.dest


REQUIRED = ("schema", "chapter", "run_id", "host", "parameters", "started", "finished", "tables")


def list_runs(chapter: str, data_dir: Path | None = None) -> list[Path]:
    """Every published dataset of a chapter, all hosts, sorted by host then run. Two datasets
    that claim the same run id (a copy that kept its manifest) are an error, never merged."""
    base = runs_dir(data_dir)
    if not base.is_dir():
        return []
    found = []
    for host in sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")):
        chap = host / chapter
        if chap.is_dir():
            found += sorted(r for r in chap.iterdir()
                            if r.is_dir() and not r.name.startswith(".") and (r / MANIFEST).is_file())
    seen: dict[tuple, Path] = {}
    for run in found:
        key = (run.parent.parent.name, load_manifest(run)["run_id"])
        if key in seen:
            raise DatasetError(f"{run / MANIFEST}: run id {key[1]} is also the run id of "
                               f"{seen[key]}; a copied dataset must get its own run id")
        seen[key] = run
    return found


_manifest_cache: dict[tuple, dict] = {}


def load_manifest(run: Path) -> dict:
    """A dataset's manifest, checked: valid JSON, the required fields, a schema this code
    reads, and a run id and host id that match its directory. One line names the file."""
    p = Path(run) / MANIFEST
    try:
        st = p.stat()
        key = (str(p), st.st_mtime_ns, st.st_size)
        if key in _manifest_cache:
            return _manifest_cache[key]
        with open(p) as f:
            m = json.load(f)
    except OSError as e:
        raise DatasetError(f"{p}: cannot read it ({e.strerror})") from None
    except ValueError as e:
        raise DatasetError(f"{p}: not valid JSON ({e}); restore it from git or remove the dataset") from None
    if not isinstance(m, dict):
        raise DatasetError(f"{p}: a manifest must be a JSON object")
    missing = [k for k in REQUIRED if k not in m]
    if missing:
        raise DatasetError(f"{p}: missing field(s) {', '.join(missing)}")
    if not isinstance(m["schema"], int) or not 1 <= m["schema"] <= SCHEMA:
        raise DatasetError(f"{p}: schema {m['schema']!r} is not one this code reads (1..{SCHEMA}); "
                           "update the checkout")
    if m["run_id"] != Path(run).name:
        raise DatasetError(f"{p}: run_id {m['run_id']!r} does not match its directory "
                           f"{Path(run).name!r} (a copied dataset?)")
    host = m["host"].get("host_id") if isinstance(m["host"], dict) else None
    if host != Path(run).parent.parent.name:
        raise DatasetError(f"{p}: host_id {host!r} does not match its directory "
                           f"{Path(run).parent.parent.name!r}")
    if not isinstance(m["tables"], dict):
        raise DatasetError(f"{p}: 'tables' must map table names to row counts")
    _manifest_cache[key] = m
    return m


def read_table(run: Path, table: str, manifest: dict | None = None):
    """One table of one dataset, checked against its manifest's row count."""
    import pandas as pd
    man = manifest or load_manifest(run)
    p = Path(run) / f"{table}.csv"
    try:
        df = pd.read_csv(p, on_bad_lines="error")
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as e:
        msg = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise DatasetError(f"{p}: malformed CSV ({msg}); restore it from git") from None
    seed = os.environ.get("PERFBOOK_SHUFFLE_ROWS")
    if seed:  # tests: the analysis must not depend on the order rows were written in
        df = df.sample(frac=1, random_state=int(seed)).reset_index(drop=True)
    want = man["tables"].get(table)
    if want is not None and len(df) != want:
        raise DatasetError(f"{p}: {len(df)} rows, but its manifest lists {want} "
                           "(truncated or edited); restore it from git")
    return df


def load_table(chapter: str, table: str, data_dir: Path | None = None):
    """Concatenate <table>.csv of every run of `chapter`, with host_id/run_id columns."""
    import pandas as pd
    frames = []
    for run in list_runs(chapter, data_dir):
        p = run / f"{table}.csv"
        if not p.is_file():
            continue
        man = load_manifest(run)
        df = read_table(run, table, man)
        df.insert(0, "run_id", man["run_id"])
        df.insert(0, "host_id", man["host"]["host_id"])
        frames.append(df)
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)


def validate_all(data_dir: Path | None = None) -> int:
    """Load every dataset of every chapter and every table (DatasetError on the first
    problem); returns the number of datasets checked."""
    from .chapters import CHAPTERS
    n = 0
    for ch in CHAPTERS:
        for run in list_runs(ch.name, data_dir):
            man = load_manifest(run)
            if man["chapter"] != ch.name:
                raise DatasetError(f"{run / MANIFEST}: chapter {man['chapter']!r} in the directory of {ch.name}")
            for table in man["tables"]:
                if not (run / f"{table}.csv").is_file():
                    raise DatasetError(f"{run / (table + '.csv')}: listed in its manifest but missing")
                read_table(run, table, man)
            n += 1
    return n


def load_manifests(chapter: str, data_dir: Path | None = None) -> list[dict]:
    return [load_manifest(r) for r in list_runs(chapter, data_dir)]


def load_reference(name: str, data_dir: Path | None = None, dtype=None):
    """A seed's historical figures: data/reference/<name>.csv (provenance in columns)."""
    import pandas as pd
    from .paths import reference_dir
    p = reference_dir(data_dir) / f"{name}.csv"
    if not p.is_file():  # a scratch data_dir (tests) has runs only: use the committed ones
        p = reference_dir() / f"{name}.csv"
    if not p.is_file():
        raise DatasetError(f"reference table {p} is missing")
    return pd.read_csv(p, dtype=dtype)


def skipped_table(manifests: list[dict]):
    """What each dataset did not measure, and why (its skips and notes)."""
    import pandas as pd
    rows = []
    for m in sorted(manifests, key=lambda m: m["run_id"]):
        for part, why in m.get("skipped", {}).items():
            rows.append({"host": m["host"]["host_id"], "run": m["run_id"], "what": part, "why": why})
        for note in m.get("notes", []):
            rows.append({"host": m["host"]["host_id"], "run": m["run_id"], "what": "note", "why": note})
    return pd.DataFrame(rows, columns=["host", "run", "what", "why"])


def newest(manifests: list[dict], profiles=("default", "full")) -> dict | None:
    """The dataset a chapter's prose quotes: the newest (by run id) measured with one of
    `profiles`, so that a quick test run does not replace a real one; else the newest that
    does not record its profile (older manifests); else the newest of all."""
    if not manifests:
        return None
    prof = [m.get("parameters", {}).get("profile") for m in manifests]
    real = [m for m, q in zip(manifests, prof) if q in profiles]
    unknown = [m for m, q in zip(manifests, prof) if q is None]
    return max(real or unknown or manifests, key=lambda m: m["run_id"])


def shown_datasets(manifests: list[dict], ref: dict | None = None) -> dict[str, str]:
    """host_id -> run_id of the one dataset per host a chapter shows side by side: the
    prose's dataset `ref` (default: newest()) for its host, newest() of each other host's."""
    hosts = sorted({m["host"]["host_id"] for m in manifests})
    chosen = {h: newest([m for m in manifests if m["host"]["host_id"] == h])["run_id"] for h in hosts}
    ref = ref if ref is not None else newest(manifests)
    if ref is not None:
        chosen[ref["host"]["host_id"]] = ref["run_id"]
    return chosen


def only_shown(df, manifests: list[dict], ref: dict | None = None):
    """The rows of a loaded table (host_id, run_id columns) from shown_datasets()."""
    if df is None or len(df) == 0:
        return df
    chosen = shown_datasets(manifests, ref)
    return df[[chosen.get(h) == r for h, r in zip(df["host_id"], df["run_id"])]]
