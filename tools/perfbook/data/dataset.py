"""Datasets: data/runs/<host-id>/<chapter>/<run-id>/{*.csv.xz, manifest.json}.

Writing is atomic: everything goes into a hidden temporary directory next to
the destination, which is renamed into place only when the run succeeded. An
existing dataset is never overwritten. Reading gathers every run of a chapter,
all hosts, into tidy pandas frames with host_id and run_id columns.
"""

from __future__ import annotations

import ast
import datetime as _dt
import io
import json
import lzma
import os
import re
import stat
from pathlib import Path

import numpy as np
import pandas as pd

from perfbook.core.errors import DatasetError
from perfbook.core.paths import reference_dir, runs_dir
from perfbook.data.manifest import FIELDS, REQUIRED, SCHEMA, Manifest, migrate  # noqa: F401  (the schema: tools/perfbook/data/manifest.py)
from perfbook.hoststate.statedir import UnsafePath, open_file

MANIFEST = "manifest.json"


def utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def new_run_id() -> str:
    now = _dt.datetime.now(_dt.UTC)
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
            "pass a writable data_dir parameter"
        ) from None


# -- what a data directory holds: regular files, read within limits, never through a link ----
#
# Anyone may contribute a dataset, and the book is built as root or on a CI runner: a link in
# one (notes.txt -> /etc/shadow, or a host, chapter or run directory that is a link) would be
# read, digested and published in the site's archives; a small .csv.xz may expand to millions
# of rows. So below a runs/ or reference/ directory (the caller's, used as given), everything
# is listed with lstat and opened with O_NOFOLLOW, each directory on the way as well
# (perfbook.hoststate.statedir.open_file), anything but a regular file or a directory is refused, and a
# file is read within the limits below: on disk before it is opened, and a table's text while
# it is decompressed, in chunks, stopping at the first chunk that crosses one.
#
# The limits, from the committed data (data/runs: 3 hosts, 11 chapters, the default profile on
# 2 CPUs; data/reference), measured 2026-11: the largest table is virtio_blk_latency's
# requests, 1.13 MB of xz and 4.4 MB of CSV text (42,241 lines); the longest, cpu_pinning's
# migrations, 68,857 lines (3.4 MB); the largest reference table 35 KB, the largest manifest
# 7.8 KB. A full profile multiplies a chapter's rows by about 12 at most (virtio_blk_latency:
# 1000 instead of 300 requests, up to 30 instead of 8 rounds: ~55 MB, ~530k lines; cpu_pinning
# ~8x), more CPUs add some (cpu_pinning's workers). A fleet of 100 hosts has more files, not
# larger ones: the limits are per file. What a bomb costs before it is refused follows from
# them (pandas parses what streams in until then): measured here, the 10-million-row bomb of
# #43 (53 KB of xz, 270 MB of text) is refused at the line limit after 54 MB, ~0.45 s of CPU;
# a bomb without a newline at the byte limit, ~0.65 s.
MAX_FILE_BYTES = 128 << 20  # on disk, any file of data/; and a table's CSV text once
#                                decompressed: 29x the largest committed table, 2.3x a full
#                                profile's largest
MAX_TABLE_LINES = 2_000_000  # 29x the longest committed table; 2.4x twelve times it (~830k).
#                                Lines, not rows: a newline inside a quoted field counts too.
MAX_MANIFEST_BYTES = 1 << 20  # a manifest or another JSON file of data/: 134x the largest
RUN_DEPTH = 4  # host/chapter/run/file: a dataset's file below runs/
REF_DEPTH = 1  # file: a reference file below reference/

_NO_LINK = (
    "data/ holds regular files and directories only, and perfbook never follows a "
    "link there (replace it with what it points to)"
)


def _refused(path, what: str) -> DatasetError:
    return DatasetError(f"{path}: {what}; {_NO_LINK}")


def is_regular(path: Path) -> bool:
    """Whether `path` is a regular file (False: nothing is there). A symlink or anything else
    in its place is a DatasetError that names it."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    if stat.S_ISREG(st.st_mode):
        return True
    raise _refused(path, "a symlink" if stat.S_ISLNK(st.st_mode) else "not a regular file")


def subdirs(d: Path) -> list[str]:
    """The names of the directories in `d` that are not hidden, sorted ([] when `d` is not a
    directory); files beside them are left out. A symlink among them is a DatasetError."""
    try:
        entries = list(os.scandir(d))
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for e in entries:
        if e.name.startswith("."):
            continue
        if e.is_symlink():
            raise _refused(os.path.join(d, e.name), "a symlink")
        if e.is_dir(follow_symlinks=False):
            out.append(e.name)
    return sorted(out)


def visible_files(top: Path) -> list[Path]:
    """Every file below directory `top` (the caller's) whose path below it has no hidden part,
    sorted; [] when `top` is not a directory. A symlink, a FIFO, a device ... anywhere below
    it is a DatasetError that names it: never followed, never listed."""
    out, todo = [], [Path(top)]
    while todo:
        d = todo.pop()
        try:
            entries = list(os.scandir(d))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for e in entries:
            if e.name.startswith("."):
                continue
            p = d / e.name
            if e.is_symlink():
                raise _refused(p, "a symlink")
            if e.is_dir(follow_symlinks=False):
                todo.append(p)
            elif e.is_file(follow_symlinks=False):
                out.append(p)
            else:
                raise _refused(p, "not a regular file")
    return sorted(out)


def data_depth(rel: str) -> int:
    """How many components of `rel`, a path relative to a data directory (runs/<host>/...,
    reference/...), are below runs/ or reference/: the `depth` open_data walks for it."""
    return rel.count("/")


def open_data(path: Path, depth: int) -> int:
    """A read-only fd of regular file `path` of a data directory, whose last `depth` components
    (the file and the directories above it, up to runs/ or reference/) are each opened without
    following a link; refused before it is read when larger than MAX_FILE_BYTES on disk."""
    path = Path(path)
    try:
        fd = open_file(path, os.O_RDONLY, below=path.parents[depth - 1], ours=False)
    except UnsafePath as e:
        raise _refused(e.path, e.what) from None
    except OSError as e:
        raise DatasetError(f"{path}: cannot read it ({e.strerror})") from None
    size = os.fstat(fd).st_size
    if size > MAX_FILE_BYTES:
        os.close(fd)
        raise DatasetError(
            f"{path}: {size / 2**20:,.0f} MiB on disk, more than the "
            f"{MAX_FILE_BYTES >> 20} MiB a file of data/ may have; not reading it"
        )
    return fd


def read_data(path: Path, depth: int, limit: int | None = None) -> tuple[os.stat_result, bytes]:
    """(stat, bytes) of a file of a data directory (open_data), refused unread when larger on
    disk than `limit` (default MAX_FILE_BYTES)."""
    fd = open_data(path, depth)
    try:
        st = os.fstat(fd)
        if limit is not None and st.st_size > limit:
            raise DatasetError(
                f"{path}: {st.st_size:,} bytes, more than the {limit:,} a file like "
                "it may have; not reading it"
            )
        with os.fdopen(fd, "rb", closefd=False) as f:
            return st, f.read()
    except OSError as e:
        raise DatasetError(f"{path}: cannot read it ({e.strerror})") from None
    finally:
        os.close(fd)


class _Capped(io.RawIOBase):
    """A table's CSV text as pandas reads it, from `source` (the file, or its xz stream, which
    decompresses only what is asked for), CHUNK bytes at most at a time; DatasetError naming the
    file as soon as it passes MAX_FILE_BYTES or MAX_TABLE_LINES. `bytes` and `lines` say how
    far it got."""

    CHUNK = 1 << 20

    def __init__(self, source, path):
        super().__init__()
        self.source, self.path = source, path
        self.bytes = self.lines = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        data = self.source.read(min(len(buf), self.CHUNK))
        self.bytes += len(data)
        self.lines += data.count(b"\n")
        if self.bytes > MAX_FILE_BYTES:
            raise DatasetError(
                f"{self.path}: more than {MAX_FILE_BYTES >> 20} MiB of CSV text, the "
                "limit for a table; stopped reading it (a compression bomb?)"
            )
        if self.lines > MAX_TABLE_LINES:
            raise DatasetError(
                f"{self.path}: more than {MAX_TABLE_LINES:,} lines, the limit for a "
                "table; stopped reading it (a compression bomb?)"
            )
        buf[: len(data)] = data
        return len(data)


def read_csv(path: Path, depth: int = RUN_DEPTH, **kw):
    """pd.read_csv(**kw) of a table of a data directory, plain or .csv.xz: opened by open_data
    and read within the limits as it streams. A malformed one is a DatasetError naming it."""

    fd = open_data(path, depth)
    with os.fdopen(fd, "rb") as raw:
        try:
            with lzma.LZMAFile(raw) if str(path).endswith(".xz") else raw as src:
                return pd.read_csv(io.BufferedReader(_Capped(src, path), _Capped.CHUNK), **kw)
        except (
            pd.errors.ParserError,
            UnicodeDecodeError,
            pd.errors.EmptyDataError,
            lzma.LZMAError,
            EOFError,
        ) as e:
            msg = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            raise DatasetError(f"{path}: malformed CSV ({msg}); restore it from git") from None


# -- tables on disk: CSV text, xz-compressed ----------------------------------------------
#
# Every sample is kept, as the CSV text pandas writes, compressed with xz (lzma, the default
# preset): about 70 % of gzip -9's size on these tables, readable by pandas, xzcat and any
# CSV reader behind a pipe. Datasets written before this (and test fixtures) hold plain .csv;
# both are read alike. `python -m perfbook compact` compresses plain tables in place, byte for
# byte (the decompressed file is the original).

TABLE_EXT, PLAIN_EXT = ".csv.xz", ".csv"


def table_path(run: Path, table: str) -> Path | None:
    """The file of table `table` in dataset `run` (compressed or plain), None if neither."""
    for ext in (TABLE_EXT, PLAIN_EXT):
        p = Path(run) / f"{table}{ext}"
        if is_regular(p):
            return p
    return None


def table_name(run: Path, table: str) -> Path:
    """The path a message names for a table: the file if it exists, else the one we write."""
    return table_path(run, table) or Path(run) / f"{table}{TABLE_EXT}"


def write_table(base: Path, df, preset: int = 6) -> Path:
    """Write `df` as base + '.csv.xz' (deterministic bytes for the same frame and preset; the
    book's datasets use xz's default, 6)."""
    p = Path(f"{base}{TABLE_EXT}")
    p.write_bytes(lzma.compress(df.to_csv(index=False).encode(), preset=preset))
    return p


def list_runs(chapter: str, data_dir: Path | None = None) -> list[Path]:
    """Every published dataset of a chapter, all hosts, sorted by host then run. Two datasets
    that claim the same run id (a copy that kept its manifest) are an error, never merged."""
    return [run for run, _ in _listed(chapter, data_dir)]


def _listed(chapter: str, data_dir: Path | None = None) -> list[tuple[Path, Manifest]]:
    """(directory, Manifest) of every dataset of a chapter (list_runs, load_manifests), its
    directories listed and its manifests read every time."""
    base = runs_dir(data_dir)
    seen: dict[tuple, Path] = {}
    out = []
    for host in subdirs(base):  # each a directory, never a link (a link is refused)
        if chapter not in subdirs(os.path.join(base, host)):
            continue
        top = base / host / chapter
        for name in subdirs(top):
            if not is_regular(os.path.join(top, name, MANIFEST)):
                continue
            run = top / name
            man = _load(run, f"{host}/{chapter}/{name}")
            key = (host, man["run_id"])
            if key in seen:
                raise DatasetError(
                    f"{run / MANIFEST}: run id {key[1]} is also the run id of "
                    f"{seen[key]}; a copied dataset must get its own run id"
                )
            seen[key] = run
            out.append((run, man))
    return out


def _read_manifest(p: str) -> tuple[os.stat_result, bytes]:
    """A manifest's stat and bytes, never through a link (read_data)."""
    return read_data(Path(p), RUN_DEPTH, MAX_MANIFEST_BYTES)


def load_manifest(run: Path) -> dict:
    """A dataset's manifest, checked: valid JSON, the required fields, a schema this code
    reads, and a run id and host id that match its directory. One line names the file."""
    run = Path(run)
    return _load(run, "/".join(run.parts[-3:]))


def _load(run: Path, rel: str) -> Manifest:
    """load_manifest, given the dataset's name (<host>/<chapter>/<run>)."""
    p = os.path.join(run, MANIFEST)  # strings, not Paths: this runs for every dataset
    _, data = _read_manifest(p)
    try:
        raw = json.loads(data)
    except ValueError as e:
        raise DatasetError(
            f"{p}: not valid JSON ({e}); restore it from git or remove the dataset"
        ) from None
    return _checked(raw, run, p, rel)


def _checked(m, run: Path, p: str, rel: str) -> Manifest:
    """A manifest as parsed from file `p`, checked against its directory `run` (named
    <host>/<chapter>/<run> in `rel`) and migrated."""
    host_dir, _, run_dir = rel.split("/")
    if not isinstance(m, dict):
        raise DatasetError(f"{p}: a manifest must be a JSON object")
    missing = [k for k in REQUIRED if k not in m]
    if missing:
        raise DatasetError(f"{p}: missing field(s) {', '.join(missing)}")
    if not isinstance(m["schema"], int) or not 1 <= m["schema"] <= SCHEMA:
        raise DatasetError(
            f"{p}: schema {m['schema']!r} is not one this code reads (1..{SCHEMA}); "
            "update the checkout"
        )
    if m["run_id"] != run_dir:
        raise DatasetError(
            f"{p}: run_id {m['run_id']!r} does not match its directory "
            f"{run_dir!r} (a copied dataset?)"
        )
    host = m["host"].get("host_id") if isinstance(m["host"], dict) else None
    if host != host_dir:
        raise DatasetError(f"{p}: host_id {host!r} does not match its directory {host_dir!r}")
    if not isinstance(m["tables"], dict):
        raise DatasetError(f"{p}: 'tables' must map table names to row counts")
    return Manifest(migrate(m), path=run)


def read_table(run: Path, table: str, manifest: dict | None = None, schema=None):
    """One table of one dataset, checked against its manifest's row count and, given a
    perfbook.framework.contract.Table, against its declared columns and types."""
    man = manifest or load_manifest(run)
    p = table_path(run, table)
    if p is None:
        raise DatasetError(f"{table_name(run, table)}: listed in its manifest but missing")
    df = read_csv(p, RUN_DEPTH, on_bad_lines="error")
    seed = os.environ.get("PERFBOOK_SHUFFLE_ROWS")
    if seed:  # tests: the analysis must not depend on the order rows were written in
        df = df.sample(frac=1, random_state=int(seed)).reset_index(drop=True)
    want = man["tables"].get(table)
    if want is not None and len(df) != want:
        raise DatasetError(
            f"{p}: {len(df)} rows, but its manifest lists {want} "
            "(truncated or edited); restore it from git"
        )
    if schema is not None:
        df = schema.check(df, str(p))
    return df


def load_table(chapter: str, table: str, data_dir: Path | None = None, schema=None):
    """Concatenate table `table` of every run of `chapter`, with host_id/run_id columns."""
    return _table_rows(chapter, table, data_dir, schema)[0]


def _table_rows(chapter: str, table: str, data_dir: Path | None, schema, only=None):
    """(frame of table `table` of every dataset of `chapter` (or of the datasets whose keys
    are in `only`), {(host, run): (first row, end)}): what load_table returns, and where each
    dataset's rows are in it. A Data reads each table once and shares it with its views (its
    _source). A cache of these frames across a process's Data objects was measured and removed,
    with its `bench memo` switch: no gain at 33 hosts (2026-11-28, CPU s with it against
    without: netperf_latency 9.52 against 9.56, 16.68 against 16.03 with the verdict store off;
    summary 2.35 against 2.05, 70.2 against 71.5)."""
    frames, spans, at = [], {}, 0
    for run, man in _listed(chapter, data_dir):
        if only is not None and man.key not in only:
            continue
        if table_path(run, table) is None:
            continue
        df = read_table(run, table, man, schema)
        df.insert(0, "run_id", man["run_id"])
        df.insert(0, "host_id", man["host"]["host_id"])
        frames.append(df)
        spans[man.key] = (at, at + len(df))
        at += len(df)
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()), spans


def load_manifests(chapter: str, data_dir: Path | None = None) -> list[dict]:
    """The Manifests of every dataset of a chapter, in list_runs order."""
    return [man for _, man in _listed(chapter, data_dir)]


def load_reference(name: str, data_dir: Path | None = None, dtype=None):
    """A seed's historical figures: data/reference/<name>.csv (provenance in columns)."""
    p = reference_dir(data_dir) / f"{name}.csv"
    if not is_regular(p):  # a scratch data_dir (tests) has runs only: use the committed ones
        p = reference_dir() / f"{name}.csv"
    if not is_regular(p):
        raise DatasetError(f"reference table {p} is missing")
    return read_csv(p, REF_DEPTH, dtype=dtype)


REFERENCE_FILE = "reference_host.json"
HOST_ID = re.compile(r"^h-[0-9a-f]{12}$")


def reference_host(data_dir=None) -> dict:
    """The book's reference host: {"host_id", "why"} from data/reference/reference_host.json
    (the data directory's, else the committed one, as load_reference does)."""
    p = reference_dir(data_dir) / REFERENCE_FILE
    if not is_regular(p):
        p = reference_dir() / REFERENCE_FILE
    try:
        d = json.loads(read_data(p, REF_DEPTH, MAX_MANIFEST_BYTES)[1])  # never through a link
    except ValueError as e:
        raise DatasetError(f"{p}: not valid JSON ({e}); restore it from git") from None
    if not isinstance(d, dict) or not HOST_ID.match(str(d.get("host_id", ""))) or not d.get("why"):
        raise DatasetError(
            f"{p}: must be a JSON object with a host_id like h-0123456789ab and a "
            "'why'; restore it from git"
        )
    return d


def skipped_table(manifests: list[dict]):
    """What each dataset did not measure, and why (its skips and notes)."""
    rows = []
    for m in sorted(manifests, key=lambda m: m["run_id"]):
        for part, why in m.get("skipped", {}).items():
            rows.append(
                {"host": m["host"]["host_id"], "run": m["run_id"], "what": part, "why": why}
            )
        for note in m.get("notes", []):
            rows.append(
                {
                    "host": m["host"]["host_id"],
                    "run": m["run_id"],
                    "what": "note",
                    "why": plain_note(note),
                }
            )
    return pd.DataFrame(rows, columns=["host", "run", "what", "why"])


_LITERAL = re.compile(r"\[[^\[\]{}]*\]|\{[^\[\]{}]*\}")


def plain_note(text: str) -> str:
    """A manifest note with any Python list or dict literal in it written as words: datasets
    measured before 2026-11-29 put `['perf.txt']` or `{'variant': 'x', 'load': 'sat'}` in
    their notes (the data stay as measured; the page reads 'perf.txt', 'variant x, load sat')."""

    def words(m):
        try:
            v = ast.literal_eval(m.group(0))
        except (ValueError, SyntaxError):
            return m.group(0)
        if isinstance(v, dict):
            return ", ".join(f"{k} {x}" for k, x in v.items())
        if isinstance(v, list):
            return ", ".join(str(x) for x in v)
        return m.group(0)

    return _LITERAL.sub(words, str(text))


# -- which dataset the prose quotes: defined once, here ------------------------------------

REAL_PROFILES = ("default", "full")


def quoted(manifests: list[dict], needs: tuple = ()) -> dict | None:
    """The dataset a chapter's prose quotes: among those that have every table in `needs`,
    the newest (by run id, a UTC timestamp) measured with a real profile (REAL_PROFILES)
    that the run monitor did not mark disturbed, so that neither a quick test run nor a
    disturbed one replaces a real one in the prose; else the newest real one; else the
    newest whose profile was not recorded; else the newest of all."""
    ms = [m for m in manifests if all(t in m["tables"] for t in needs)] or list(manifests)
    if not ms:
        return None
    real = [m for m in ms if m.get("profile") in REAL_PROFILES]
    real = [m for m in real if not (m.get("disturbance") or {}).get("disturbed")] or real
    unknown = [m for m in ms if m.get("profile") is None]
    return max(real or unknown or ms, key=lambda m: m["run_id"])


def shown_datasets(
    manifests: list[dict], ref: dict | None = None, needs: tuple = ()
) -> dict[str, str]:
    """host_id -> run_id of the one dataset per host a chapter shows side by side: the
    quoted dataset `ref` (default: quoted()) for its host, quoted() of each other host's."""
    by_host: dict = {}  # each host's manifests, in their order (one pass, not one per host)
    for m in manifests:
        by_host.setdefault(m["host"]["host_id"], []).append(m)
    chosen = {h: quoted(by_host[h], needs)["run_id"] for h in sorted(by_host)}
    ref = ref if ref is not None else quoted(manifests, needs)
    if ref is not None:
        chosen[ref["host"]["host_id"]] = ref["run_id"]
    return chosen


def only_shown(
    df,
    manifests: list[dict],
    ref: dict | None = None,
    needs: tuple = (),
    chosen: dict | None = None,
):
    """The rows of a loaded table (host_id, run_id columns) from shown_datasets() (or
    `chosen`, its result where the caller has it)."""
    if df is None or len(df) == 0:
        return df
    chosen = shown_datasets(manifests, ref, needs) if chosen is None else chosen
    # vectorized (a row-by-row zip was most of a notebook's time for a large table)
    want = pd.Series(df["host_id"].astype(str).to_numpy()).map(chosen).to_numpy()
    return df[np.asarray(want == df["run_id"].astype(str).to_numpy(), dtype=bool)]


def in_order(df, keys, **ranks):
    """Rows by host, run and `keys`; each rank name=(column, order) sorts a column in a given
    order (values not in it last). The analysis must not depend on the order rows were written in."""
    if df is None or df.empty:
        return df
    d = df.assign(
        **{
            k: df[c].map({v: i for i, v in enumerate(o)}).fillna(len(o))
            for k, (c, o) in ranks.items()
        }
    )
    return (
        d.sort_values(["host_id", "run_id", *keys], kind="stable")
        .drop(columns=list(ranks))
        .reset_index(drop=True)
    )


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
        self.manifests = (
            manifests if manifests is not None else load_manifests(chapter.name, self.data_dir)
        )
        # given manifests: this Data is those datasets only (a finding's view of one run)
        self._only = None if manifests is None else {(m.host_id, m["run_id"]) for m in manifests}
        self._own_files = False  # a view that reads its datasets' files alone (view())
        self._tables: dict = {}
        self._source: dict = {}  # table -> _table_rows of every dataset, shared with views
        # what view_of, rows_of and once worked out, for this Data's life. Measured here (CPU s
        # of a notebook's cells, medians of 3 runs, committed data, `perfbook bench memo --memos
        # verdict-store,verdict-store+data-memos`): with the verdict store off (a new host's
        # first refresh) netperf_latency 5.3 s with them against 8.5 s without, trace_overhead
        # 2.8 against 3.5, sched_callers 1.7 against 2.3; with the store filled netperf_latency
        # 5.0 against 5.7 (`--memos data-memos`)
        self._views: dict = {}  # (host, run) -> view_of()
        self._rows: dict = {}  # table -> (frame, {(host, run): row positions}): rows_of()
        self._once: dict = {}  # once()

    @classmethod
    def load(cls, chapter, data_dir=None):
        return cls(chapter, data_dir)

    def __getitem__(self, name: str):
        if name not in self._tables:
            if self.chapter.tables and name not in self.chapter.tables:
                raise KeyError(f"{self.chapter.name} declares no table {name!r}")
            schema = self.chapter.tables.get(name)
            if self._only is not None and self._own_files and name not in self._source:
                full, spans = _table_rows(
                    self.chapter.name, name, self.data_dir, schema, self._only
                )
            else:
                if name not in self._source:
                    self._source[name] = _table_rows(self.chapter.name, name, self.data_dir, schema)
                full, spans = self._source[name]
            if not len(full.columns):
                df = pd.DataFrame()
            elif self._only is None:
                df = full.copy(deep=False)
            else:  # this Data's datasets' rows, in order: what a row filter would keep
                cut = [full.iloc[a:b] for k, (a, b) in spans.items() if k in self._only] or [
                    full.iloc[0:0]
                ]
                df = (cut[0] if len(cut) == 1 else pd.concat(cut)).reset_index(drop=True)
            self._tables[name] = self.prepare(name, df)
        return self._tables[name]

    def view(self, manifests, own_files: bool = False):
        """This chapter's Data of `manifests` alone (a finding's view of one dataset). It cuts
        their rows from the tables this Data has read, each read once for it and all its views
        (at a hundred hosts, checking every file's stat again for each view's table cost more
        than the findings). With own_files it reads only their files, unless the whole table is
        loaded already: what a notebook quotes from one dataset costs one file, not one per
        host in the fleet."""
        view = type(self)(self.chapter, self.data_dir, manifests=list(manifests))
        view._source = self._source
        view._own_files = own_files
        return view

    def view_of(self, m):
        """The view of dataset m alone (view([m])), one per dataset: whoever reads a dataset's
        values (the key findings, the platform note, a chapter's per-host reductions) shares
        it and what it derives (its cached properties). This Data, if it is that view."""
        key = (m.host_id, m["run_id"])
        if self._only == {key}:
            return self
        v = self._views.get(key)
        if v is None or v.manifests[0] is not m:
            v = self._views[key] = self.view([m])
        return v

    def rows_of(self, name: str, key: tuple):
        """The rows of self[name] from dataset key = (host_id, run_id), with their index: what
        the row filter host_id == ... & run_id == ... keeps. Each table's row positions per
        dataset are found once (one grouping, not two string comparisons over every host's
        rows per dataset)."""
        df = self[name]
        if df is None or len(df) == 0:
            return df
        hit = self._rows.get(name)
        if hit is None or hit[0] is not df:
            hit = self._rows[name] = (
                df,
                df.groupby(["host_id", "run_id"], sort=False, observed=True).indices,
            )
        at = hit[1].get(key)
        return df.iloc[at] if at is not None else df.iloc[0:0]

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
        """shown_datasets() of this Data's manifests, worked out once (a copy each time)."""
        return dict(
            self.once(
                "shown", lambda: shown_datasets(self.manifests, None, self.chapter.quote_needs)
            )
        )

    def of_quoted(self, df):
        q = self.quoted
        if q is None or df is None or len(df) == 0:
            return df
        key = (q.host_id, q["run_id"])
        if self._only == {key}:  # a view of the quoted dataset alone: every row is quoted; a
            return df.copy(deep=False)  # new frame (copy-on-write), as a row filter gives
        name = next((n for n, t in self._tables.items() if t is df), None)
        if name is not None:  # one of this Data's tables: its rows by position (rows_of)
            return self.rows_of(name, key)
        return df[(df["host_id"] == key[0]) & (df["run_id"] == key[1])]

    def quoted_rows(self, name: str):
        """Table `name` of the quoted dataset alone, read from its own files (view(own_files=
        True)) where this Data holds many datasets: a fleet's notebook quoting one dataset reads
        one file, not one per host. Its index is then a new RangeIndex (of_quoted keeps the
        whole table's)."""
        q = self.quoted
        if q is None or self._only is not None:
            return self.of_quoted(self[name])
        return self.view([q], own_files=True)[name]

    def once(self, key, make):
        """make(), once per Data and key: what several of a chapter's tables, figures and prose
        values derive from the same rows (a Data's tables do not change once read)."""
        if key not in self._once:
            self._once[key] = make()
        return self._once[key]

    def of_shown(self, df):
        return only_shown(df, self.manifests, None, self.chapter.quote_needs, chosen=self.shown)

    def reference(self, name: str, dtype=None):
        return load_reference(name, self.data_dir, dtype)

    def __len__(self):
        return len(self.manifests)
