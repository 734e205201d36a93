"""Datasets: data/runs/<host-id>/<chapter>/<run-id>/{*.csv.xz, manifest.json}.

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

from . import hostinfo, identity
from .errors import DatasetError
from .paths import runs_dir

MANIFEST = "manifest.json"
SCHEMA = 2   # see Manifest and migrate() for what each version changed


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
                 run_id: str | None = None, profile: str | None = None, schemas: dict | None = None):
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
        """Store a tidy pandas DataFrame as <name>.csv.xz (write_table)."""
        if not name.replace("_", "").isalnum():
            raise DatasetError(f"table name {name!r} must be alphanumeric")
        if self.schemas:
            if name not in self.schemas:
                raise DatasetError(f"table {name!r} is not declared in the {self.chapter} chapter's tables")
            self.schemas[name].check(df, f"{self.chapter} table {name}")  # raises on a mismatch
        p = write_table(self.tmp / name, df)
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


# -- tables on disk: CSV text, xz-compressed ----------------------------------------------
#
# Every sample is kept, as the CSV text pandas writes, compressed with xz (lzma, the default
# preset): about 70 % of gzip -9's size on these tables, readable by pandas, xzcat and any
# CSV reader behind a pipe. Datasets written before this (and test fixtures) hold plain .csv;
# both are read alike. `python -m tools compact` compresses plain tables in place, byte for
# byte (the decompressed file is the original).

TABLE_EXT, PLAIN_EXT = ".csv.xz", ".csv"


def table_path(run: Path, table: str) -> Path | None:
    """The file of table `table` in dataset `run` (compressed or plain), None if neither."""
    for ext in (TABLE_EXT, PLAIN_EXT):
        p = Path(run) / f"{table}{ext}"
        if p.is_file():
            return p
    return None


def table_name(run: Path, table: str) -> Path:
    """The path a message names for a table: the file if it exists, else the one we write."""
    return table_path(run, table) or Path(run) / f"{table}{TABLE_EXT}"


def write_table(base: Path, df) -> Path:
    """Write `df` as base + '.csv.xz' (deterministic bytes for the same frame)."""
    import lzma
    p = Path(f"{base}{TABLE_EXT}")
    p.write_bytes(lzma.compress(df.to_csv(index=False).encode()))
    return p


def compact(data_dir: Path | None = None, say=print) -> tuple[int, int, int]:
    """Compress every plain table of every dataset under data_dir/runs in place (atomic per
    file; the decompressed bytes are checked against the original before it is removed).
    Returns (tables, bytes before, bytes after)."""
    import lzma
    n = before = after = 0
    for mf in sorted(runs_dir(data_dir).glob(f"*/*/*/{MANIFEST}")):
        run = mf.parent
        for table in json.loads(mf.read_text()).get("tables", {}):
            plain = run / f"{table}{PLAIN_EXT}"
            if not plain.is_file() or (run / f"{table}{TABLE_EXT}").exists():
                continue
            raw = plain.read_bytes()
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
    m = Manifest(migrate(m), path=Path(run))
    _manifest_cache[key] = m
    return m


# The manifest's own fields; everything a chapter records beyond them lives in "facts".
FIELDS = ("schema", "chapter", "run_id", "host", "profile", "parameters", "tools", "git",
          "started", "finished", "tables", "skipped", "notes", "facts")


def migrate(m: dict) -> dict:
    """A manifest of any schema this code reads, as the current schema (in memory: a
    committed dataset is never rewritten).

    1 -> 2: the profile moves from parameters["profile"] to its own field (None when the
            run did not record it), and a chapter's own facts (top-level keys beyond the
            manifest's fields) move under "facts".
    """
    m = dict(m)
    if m["schema"] == 1:
        params = dict(m["parameters"])
        m["profile"] = params.pop("profile", None)
        m["parameters"] = params
        m["facts"] = {k: m.pop(k) for k in list(m) if k not in FIELDS}
        m["schema"] = 2
    m.setdefault("skipped", {})
    m.setdefault("notes", [])
    m.setdefault("tools", {})
    return m


class Manifest(dict):
    """A dataset's manifest, validated and migrated to the current schema (load_manifest).

    The fields (FIELDS) are also attributes: m.run_id, m.host_id, m.profile, m.parameters,
    m.facts (what the chapter recorded), m.host (the host facts), m.path (the directory)."""

    def __init__(self, data: dict, path: Path | None = None):
        super().__init__(data)
        self.path = path

    def __getattr__(self, name):
        if name in FIELDS:
            return self[name]
        raise AttributeError(name)

    @property
    def host_id(self) -> str:
        return self["host"]["host_id"]

    @property
    def key(self) -> tuple[str, str]:
        return (self.host_id, self["run_id"])

    @property
    def label(self) -> str:
        """host/run, as tables and legends name a dataset."""
        return f"{self.host_id}/{self['run_id']}"


def read_table(run: Path, table: str, manifest: dict | None = None, schema=None):
    """One table of one dataset, checked against its manifest's row count and, given a
    tools.chapter.Table, against its declared columns and types."""
    import pandas as pd
    import lzma
    man = manifest or load_manifest(run)
    p = table_path(run, table)
    if p is None:
        raise DatasetError(f"{table_name(run, table)}: listed in its manifest but missing")
    try:
        df = pd.read_csv(p, on_bad_lines="error")
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError,
            lzma.LZMAError, EOFError) as e:
        msg = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise DatasetError(f"{p}: malformed CSV ({msg}); restore it from git") from None
    seed = os.environ.get("PERFBOOK_SHUFFLE_ROWS")
    if seed:  # tests: the analysis must not depend on the order rows were written in
        df = df.sample(frac=1, random_state=int(seed)).reset_index(drop=True)
    want = man["tables"].get(table)
    if want is not None and len(df) != want:
        raise DatasetError(f"{p}: {len(df)} rows, but its manifest lists {want} "
                           "(truncated or edited); restore it from git")
    if schema is not None:
        df = schema.check(df, str(p))
    return df


def load_table(chapter: str, table: str, data_dir: Path | None = None, schema=None):
    """Concatenate table `table` of every run of `chapter`, with host_id/run_id columns."""
    import pandas as pd
    frames = []
    for run in list_runs(chapter, data_dir):
        if table_path(run, table) is None:
            continue
        man = load_manifest(run)
        df = read_table(run, table, man, schema)
        df.insert(0, "run_id", man["run_id"])
        df.insert(0, "host_id", man["host"]["host_id"])
        frames.append(df)
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)


def validate_all(data_dir: Path | None = None, names=None) -> int:
    """Load every dataset of every chapter (or of the chapters `names`) and every table,
    checked against the chapter's schemas (DatasetError on the first problem); returns the
    number of datasets checked."""
    from .chapters import CHAPTERS
    n, seen = 0, []
    for ch in CHAPTERS:
        if names is not None and ch.name not in names:
            continue
        schemas = getattr(ch.load(), "tables", {})
        for run in list_runs(ch.name, data_dir):
            man = load_manifest(run)
            if man["chapter"] != ch.name:
                raise DatasetError(f"{run / MANIFEST}: chapter {man['chapter']!r} in the directory of {ch.name}")
            why = identity.check(man)
            if why:
                raise DatasetError(f"{run / MANIFEST}: {why}")
            for table in man["tables"]:
                if table_path(run, table) is None:
                    raise DatasetError(f"{table_name(run, table)}: listed in its manifest but missing")
                if schemas and table not in schemas:
                    raise DatasetError(f"{table_name(run, table)}: not a table the {ch.name} chapter declares")
                read_table(run, table, man, schemas.get(table))
            seen.append(man)
            n += 1
    for hid, what in identity.clashes(seen).items():
        raise DatasetError(f"{runs_dir(data_dir) / hid}: its datasets disagree on {'; '.join(what)}: "
                           "one host id given to two machines (PERFBOOK_HOST_ID?); give each its own")
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


# -- which dataset the prose quotes: defined once, here ------------------------------------

REAL_PROFILES = ("default", "full")


def quoted(manifests: list[dict], needs: tuple = ()) -> dict | None:
    """The dataset a chapter's prose quotes: among those that have every table in `needs`,
    the newest (by run id, a UTC timestamp) measured with a real profile (REAL_PROFILES),
    so that a quick test run never replaces a real one; else the newest whose profile was
    not recorded; else the newest of all."""
    ms = [m for m in manifests if all(t in m["tables"] for t in needs)] or list(manifests)
    if not ms:
        return None
    real = [m for m in ms if m.get("profile") in REAL_PROFILES]
    unknown = [m for m in ms if m.get("profile") is None]
    return max(real or unknown or ms, key=lambda m: m["run_id"])



def shown_datasets(manifests: list[dict], ref: dict | None = None, needs: tuple = ()) -> dict[str, str]:
    """host_id -> run_id of the one dataset per host a chapter shows side by side: the
    quoted dataset `ref` (default: quoted()) for its host, quoted() of each other host's."""
    hosts = sorted({m["host"]["host_id"] for m in manifests})
    chosen = {h: quoted([m for m in manifests if m["host"]["host_id"] == h], needs)["run_id"] for h in hosts}
    ref = ref if ref is not None else quoted(manifests, needs)
    if ref is not None:
        chosen[ref["host"]["host_id"]] = ref["run_id"]
    return chosen


def only_shown(df, manifests: list[dict], ref: dict | None = None, needs: tuple = ()):
    """The rows of a loaded table (host_id, run_id columns) from shown_datasets()."""
    if df is None or len(df) == 0:
        return df
    chosen = shown_datasets(manifests, ref, needs)
    return df[[chosen.get(h) == r for h, r in zip(df["host_id"], df["run_id"])]]


def in_order(df, keys, **ranks):
    """Rows by host, run and `keys`; each rank name=(column, order) sorts a column in a given
    order (values not in it last). The analysis must not depend on the order rows were written in."""
    if df is None or df.empty:
        return df
    d = df.assign(**{k: df[c].map({v: i for i, v in enumerate(o)}).fillna(len(o))
                     for k, (c, o) in ranks.items()})
    return (d.sort_values(["host_id", "run_id", *keys], kind="stable")
            .drop(columns=list(ranks)).reset_index(drop=True))


class Data:
    """Every dataset of one chapter, loaded and checked: what analysis and figures read.

    D.manifests      the Manifests (all hosts, sorted by host then run)
    D[name]          table `name` of every dataset, with host_id and run_id columns,
                     checked against the chapter's schema (empty frame: no dataset has it)
    D.quoted         the Manifest the prose quotes (quoted(), with the chapter's quote_needs)
    D.shown          host_id -> run_id, one dataset per host for side-by-side views
    D.reference(n)   data/reference/<n>.csv (the seed's figures, with provenance)
    D.of_quoted(df)  the rows of df from the quoted dataset; D.of_shown(df) likewise
    """

    def __init__(self, chapter, data_dir=None, manifests=None):
        self.chapter = chapter
        self.data_dir = Path(data_dir) if data_dir else None
        self.manifests = (manifests if manifests is not None
                          else load_manifests(chapter.name, self.data_dir))
        # given manifests: this Data is those datasets only (a finding's view of one run)
        self._only = None if manifests is None else {(m.host_id, m["run_id"]) for m in manifests}
        self._tables: dict = {}

    @classmethod
    def load(cls, chapter, data_dir=None):
        return cls(chapter, data_dir)

    def __getitem__(self, name: str):
        if name not in self._tables:
            if self.chapter.tables and name not in self.chapter.tables:
                raise KeyError(f"{self.chapter.name} declares no table {name!r}")
            df = load_table(self.chapter.name, name, self.data_dir, self.chapter.tables.get(name))
            if self._only is not None and df is not None and len(df):
                df = df[[k in self._only for k in zip(df["host_id"], df["run_id"])]].reset_index(drop=True)
            self._tables[name] = self.prepare(name, df)
        return self._tables[name]

    def prepare(self, name: str, df):
        """A chapter's Data subclass puts a table in its natural row order, or adds derived
        columns, here (once per table; the result is cached). The default keeps it as read."""
        return df

    def __contains__(self, name: str) -> bool:
        return any(name in m["tables"] for m in self.manifests)

    @property
    def hosts(self) -> list[str]:
        return sorted({m.host_id for m in self.manifests})

    @property
    def quoted(self):
        return quoted(self.manifests, self.chapter.quote_needs)

    @property
    def shown(self) -> dict[str, str]:
        return shown_datasets(self.manifests, None, self.chapter.quote_needs)

    def of_quoted(self, df):
        q = self.quoted
        if q is None or df is None or len(df) == 0:
            return df
        return df[(df["host_id"] == q.host_id) & (df["run_id"] == q["run_id"])]

    def of_shown(self, df):
        return only_shown(df, self.manifests, None, self.chapter.quote_needs)

    def reference(self, name: str, dtype=None):
        return load_reference(name, self.data_dir, dtype)

    def __len__(self):
        return len(self.manifests)
