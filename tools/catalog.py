"""The catalog: one file that indexes the manifests of a data directory, so that a chapter,
or the hosts page, finds its datasets without opening every manifest.json.

    build/catalog/data.json               the checkout's data/
    build/catalog/data-<hash>.json        any other data directory (a scratch fleet, a test's)

`python -m tools catalog [--data-dir D]` builds it and prints what it holds. Nothing else has
to: tools.dataset keeps it up to date as it lists a chapter's datasets (list_runs), and
reads it instead of the manifests. The manifests stay the truth; the catalog is a cache of
them, in git's way (build/ is not committed), and it is never trusted over the files:

* The datasets are listed from the directories on every load, so a new dataset is added to
  the catalog and a removed one dropped from it.
* An entry is used only while its manifest.json has the stat recorded with it (inode, size,
  mtime and ctime in ns; ctime cannot be set back by a user). Otherwise the file is read
  again, and its SHA-256 decides: the same bytes (a copy, a touch) keep the entry under the
  new stat, other bytes replace it. A manifest changed less than RACY_S before it was
  recorded gets no stat (its next load hashes it again), so an edit within the file
  system's timestamp granularity is not missed.
* Every manifest taken from the catalog is validated and migrated exactly as one read from
  its file is (tools.dataset.load_manifest), so a chapter gets the same Manifests, or the
  same one-line error, with or without it.
* A catalog that does not parse, fails its checksum, or has another format is discarded and
  rebuilt (silently when loading data; `python -m tools catalog` says so in one line).
* It is read and written without following symlinks (O_NOFOLLOW, then fstat): a symlink in
  its place or in place of its directory, or a file that belongs neither to us nor to root,
  is refused with one line (tools.statedir.UnsafePath). A new catalog is written to a
  temporary file beside it and renamed into place, so a reader never sees half of one.
  When the directory is not writable (a read-only checkout) the catalog is used as it is,
  or not at all, and the manifests are read.

Format: plain JSON lines, one section a line, so that a chapter parses only its own.
Line 1, the header:
    {"format": "perfbook-catalog", "version": 1, "runs": "<runs dir>",
     "sections": {"hosts": [offset, length, sha256], "<chapter>": [...], ...}}
(offsets into the rest of the file). The "hosts" section holds the host blocks of the
manifests, deduplicated: {"<key>": {...}} (key: SHA-256 of the block). A chapter's section:
    {"<host>/<chapter>/<run>": {"host_id", "chapter", "run_id", "profile",
        "tables": {table: rows}, "stat": [ino, size, mtime_ns, ctime_ns] or null,
        "sha256": "<of manifest.json>",
        "manifest": {the manifest as written, its "host" replaced by the key of its block}}}
A section whose checksum does not match is dropped (its datasets are read from their files
and it is written again); a header that does not parse discards the whole catalog.

PERFBOOK_CATALOG=off disables it (every manifest is read from its file; tests and
`python -m tools.bench` compare both ways).
"""
from __future__ import annotations

import hashlib
import json
import marshal
import os
import stat
import time
from pathlib import Path

from .paths import build_dir, runs_dir
from .statedir import UnsafePath

FORMAT, VERSION = "perfbook-catalog", 1
RACY_S = 2.0          # a manifest changed this recently gets no stat: it is hashed next time
KEEP_OTHER = 32       # catalogs of other data directories kept (the least recently used go)


def enabled() -> bool:
    return os.environ.get("PERFBOOK_CATALOG", "").lower() not in ("0", "off", "no", "false")


def catalog_path(data_dir: Path | str | None = None) -> Path:
    """Where the catalog of a data directory lives (build/catalog/)."""
    runs = runs_dir(data_dir).resolve()
    top = build_dir() / "catalog"
    if runs == runs_dir().resolve():
        return top / "data.json"
    return top / f"data-{hashlib.sha256(str(runs).encode()).hexdigest()[:16]}.json"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_stat(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _trusted_owner(path: Path, st: os.stat_result, kind: str, runs: Path) -> None:
    """Refuse a symlink, the wrong kind of file, or one owned by someone other than us, root
    or the owner of the data directory `runs` indexes (whose files the catalog repeats)."""
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"{path} is a symlink; perfbook refuses to follow it "
                         "(remove it: the catalog is rebuilt by itself)")
    if not (stat.S_ISDIR if kind == "directory" else stat.S_ISREG)(st.st_mode):
        raise UnsafePath(f"{path} is not a {kind}; perfbook refuses to use it (remove it)")
    if st.st_uid not in (os.geteuid(), 0):
        try:
            data_owner = os.stat(runs).st_uid
        except OSError:
            data_owner = None
        if st.st_uid != data_owner:
            raise UnsafePath(f"{path} belongs to uid {st.st_uid}, neither us, root nor the owner of "
                             f"{runs}; perfbook refuses to use it (remove it: the catalog is "
                             "rebuilt by itself)")


class CorruptCatalog(ValueError):
    pass


def _header(path: Path, raw: bytes, runs: Path) -> tuple[dict, int]:
    """(sections, body offset) of a catalog file's bytes; CorruptCatalog says why not."""
    end = raw.find(b"\n")
    head, nl = (raw[:end], True) if end >= 0 else (raw, False)
    try:
        h = json.loads(head)
    except ValueError:
        raise CorruptCatalog("its header is not JSON") from None
    if not isinstance(h, dict) or h.get("format") != FORMAT:
        raise CorruptCatalog("it is not a perfbook catalog")
    if h.get("version") != VERSION:
        raise CorruptCatalog(f"it has format version {h.get('version')!r}, this code reads {VERSION}")
    if h.get("runs") != str(runs):
        raise CorruptCatalog(f"it indexes {h.get('runs')!r}, not {runs}")
    secs = h.get("sections")
    if not nl or not isinstance(secs, dict) or not all(
            isinstance(v, list) and len(v) == 3 and isinstance(v[0], int) and isinstance(v[1], int)
            and isinstance(v[2], str) for v in secs.values()):
        raise CorruptCatalog("its section index is malformed")
    return secs, len(head) + 1


def _entry_ok(rel: str, e, chapter: str) -> bool:
    return (isinstance(e, dict) and isinstance(e.get("manifest"), dict)
            and isinstance(e["manifest"].get("host"), str) and isinstance(e.get("sha256"), str)
            and (e.get("stat") is None or (isinstance(e["stat"], list) and len(e["stat"]) == 4))
            and e.get("chapter") == chapter and rel.count("/") == 2 and rel.split("/")[1] == chapter)


def _copy(obj):
    """A fresh copy of JSON data (marshal: the fastest deep copy of these types)."""
    return marshal.loads(marshal.dumps(obj))


class Catalog:
    """The catalog of one data directory, in memory.

    What the file holds (raw, index) is the truth this process builds on: a section is
    parsed for lookups when a chapter first needs it (view), and each manifest of that parse
    is handed out once, to tools.dataset, which caches the Manifest it makes of it; what a
    caller does with it never reaches the file. Changes (new, changed and removed entries)
    are kept apart, as copies, and applied to a fresh parse of the file when it is saved."""

    def __init__(self, runs: Path, path: Path | None):
        self.runs = Path(runs)
        self.path = path               # None: not kept on disk (disabled, or no build dir)
        self.raw: bytes | memoryview = b""        # the file's bytes after the header
        self.index: dict[str, list] = {}          # section -> [offset, length, sha256] in raw
        self.view: dict[str, dict] = {}           # section -> its entries, parsed for lookups
        self.given: set[str] = set()              # host blocks of the view handed out once
        self.changes: dict[str, dict] = {}        # section -> {rel: entry, or None: removed}
        self.restat: dict[str, dict] = {}         # section -> {rel: new stat} (same bytes)
        self.cleared: set[str] = set()            # sections dropped as a whole
        self.problem: str | None = None           # why (part of) the file was discarded
        self.sig: list | None = None              # stat of the file we read or wrote

    @property
    def dirty(self) -> bool:
        return bool(self.problem or self.cleared or any(self.changes.values())
                    or any(self.restat.values()))

    # -- sections --------------------------------------------------------------------------

    def _parse(self, name: str) -> dict | None:
        """A fresh parse of section `name` as the file holds it, checked (None: damaged)."""
        where = self.index.get(name)
        if where is None:
            return {}
        off, n, digest = where
        blob = bytes(self.raw[off:off + n])
        try:
            if len(blob) != n or sha256(blob) != digest:
                raise CorruptCatalog(f"its section {name!r} fails its checksum (truncated or edited)")
            try:
                sec = json.loads(blob)
            except ValueError:
                raise CorruptCatalog(f"its section {name!r} is not JSON") from None
            if not isinstance(sec, dict) or not all(
                    isinstance(v, dict) if name == "hosts" else _entry_ok(k, v, name)
                    for k, v in sec.items()):
                raise CorruptCatalog(f"its section {name!r} is malformed")
        except CorruptCatalog as e:
            self.problem = str(e)
            return None
        return sec

    def section(self, name: str) -> dict:
        """Section `name` (a chapter, or "hosts") as this process looks it up."""
        sec = self.view.get(name)
        if sec is None:
            sec = {} if name in self.cleared else self._parse(name)
            if sec is None:           # damaged: dropped, and written again from the files
                sec = {}
                self.cleared.add(name)
            self.view[name] = sec
        return sec

    def entries(self) -> dict[str, dict]:
        """Every entry of every chapter as the file holds it (a fresh parse; for reports)."""
        out: dict[str, dict] = {}
        for ch in sorted(set(self.index) - {"hosts"}):
            out.update(self._parse(ch) or {})
        return out

    def chapters(self) -> list[str]:
        return sorted((set(self.index) | set(self.view) | set(self.changes)) - {"hosts"})

    # -- entries ---------------------------------------------------------------------------

    def has(self, rel: str, st: os.stat_result) -> bool:
        """Whether the entry of `rel` was recorded with the file's current stat."""
        e = self.section(rel.split("/")[1]).get(rel)
        return e is not None and e["stat"] == file_stat(st)

    def lookup(self, rel: str, st: os.stat_result) -> dict | None:
        """The manifest of dataset `rel` as written, while the entry's stat still is the
        file's (handed out once: None after that, and the file is read)."""
        e = self.section(rel.split("/")[1]).get(rel)
        if e is None or e["stat"] != file_stat(st):
            return None
        return self._hand_out(e)

    def by_digest(self, rel: str, digest: str, st: os.stat_result) -> dict | None:
        """The manifest of `rel` if its entry has this content digest (the file was copied or
        touched, not changed); the entry is kept under the new stat."""
        chapter = rel.split("/")[1]
        e = self.section(chapter).get(rel)
        if e is None or e["sha256"] != digest:
            return None
        new = self._stat_or_none(st)
        if e["stat"] != new:
            e["stat"] = new
            self.restat.setdefault(chapter, {})[rel] = new
        return self._hand_out(e)

    def _hand_out(self, e: dict) -> dict | None:
        m = e["manifest"]
        if m is None:
            return None
        key = m["host"]
        hosts = self.section("hosts")
        if key not in hosts:          # its host block is gone (a damaged hosts section)
            return None
        e["manifest"] = None
        if key in self.given:         # a second manifest of this host: its own copy
            m["host"] = _copy(hosts[key])
        else:
            m["host"] = hosts[key]
            self.given.add(key)
        return m

    @staticmethod
    def digest(data: bytes) -> str:
        return sha256(data)

    def remember(self, rel: str, st: os.stat_result, digest: str, raw: dict, man) -> None:
        """Record dataset `rel`, read from its file (raw: the manifest as written; man: it
        validated). The catalog keeps its own copy."""
        chapter = rel.split("/")[1]
        view = self.section(chapter)
        host = raw["host"]
        key = sha256(json.dumps(host, sort_keys=True, default=str).encode())[:16]
        if key not in self.section("hosts") and key not in self.changes.get("hosts", {}):
            self.changes.setdefault("hosts", {})[key] = _copy(host)
        old = view.get(rel)
        new_stat = self._stat_or_none(st)
        if old is not None and old["sha256"] == digest:
            if old["stat"] != new_stat:
                old["stat"] = new_stat
                self.restat.setdefault(chapter, {})[rel] = new_stat
            return
        entry = {"host_id": man.host_id, "chapter": man["chapter"], "run_id": man["run_id"],
                 "profile": man.get("profile"), "tables": dict(man["tables"]),
                 "stat": new_stat, "sha256": digest, "manifest": dict(raw, host=key)}
        self.changes.setdefault(chapter, {})[rel] = _copy(entry)
        self.restat.get(chapter, {}).pop(rel, None)
        view[rel] = {"stat": new_stat, "sha256": digest, "manifest": None}

    def forget_missing(self, chapter: str, present: set[str]) -> None:
        """Drop the entries of `chapter` whose dataset is gone (present: rels that exist)."""
        view = self.section(chapter)
        for rel in [r for r in view if r not in present]:
            del view[rel]
            self.changes.setdefault(chapter, {})[rel] = None

    def forget_chapters_except(self, chapters: set[str]) -> None:
        for ch in self.chapters():
            if ch not in chapters:
                self.view[ch] = {}
                self.changes.pop(ch, None)
                self.cleared.add(ch)

    @staticmethod
    def _stat_or_none(st: os.stat_result):
        racy = time.time() - max(st.st_mtime_ns, st.st_ctime_ns) / 1e9 < RACY_S
        return None if racy else file_stat(st)

    # -- the file --------------------------------------------------------------------------

    def _merged(self, name: str) -> dict:
        """Section `name` as it is saved: a fresh parse of the file, our changes on top."""
        sec = {} if name in self.cleared else (self._parse(name) or {})
        for rel, e in self.changes.get(name, {}).items():
            if e is None:
                sec.pop(rel, None)
            else:
                sec[rel] = e
        for rel, st in self.restat.get(name, {}).items():
            if rel in sec:
                sec[rel]["stat"] = st
        return sec

    def save(self, prune: bool = False) -> bool:
        """Write the catalog if anything changed since it was read (merged with what another
        process wrote meanwhile); False when it cannot be kept (read-only build directory).
        prune: drop the host blocks no entry uses (parses every section)."""
        if self.path is None or not (self.dirty or prune):
            return False
        on_disk = _read(self.path, self.runs)
        if on_disk is not None and on_disk.sig != self.sig and not on_disk.problem:
            self.raw, self.index = on_disk.raw, on_disk.index   # another process wrote it since
        blobs = {}
        for name in self.chapters():
            changed = name in self.cleared or self.changes.get(name) or self.restat.get(name)
            if changed or name not in self.index:
                sec = self._merged(name)
                blobs[name] = _dump(sec) if sec else None
            else:
                off, n, _ = self.index[name]
                blobs[name] = bytes(self.raw[off:off + n])
        hosts = self._merged("hosts")
        if prune:
            used = {e["manifest"]["host"] for name, b in blobs.items() if b
                    for e in json.loads(b).values()}
            if not self.dirty and used >= set(hosts):
                return False      # nothing to prune, nothing changed
            hosts = {k: v for k, v in hosts.items() if k in used}
        index, parts, off = {}, [], 0
        for name, blob in [("hosts", _dump(hosts) if hosts else None), *sorted(blobs.items())]:
            if blob is None:
                continue
            index[name] = [off, len(blob), sha256(blob)]
            parts.append(blob + b"\n")
            off += len(blob) + 1
        head = json.dumps({"format": FORMAT, "version": VERSION, "runs": str(self.runs),
                           "sections": index}, separators=(",", ":")).encode()
        body = b"".join(parts)
        try:
            self.sig = _write(self.path, head + b"\n" + body, self.runs)
        except OSError:
            return False      # not writable here: the manifests are read instead, as without it
        self.raw, self.index, self.problem = body, index, None
        self.changes, self.restat, self.cleared = {}, {}, set()
        if self.path.name != "data.json":
            _prune(self.path.parent, keep=self.path)
        return True


def _dump(sec: dict) -> bytes:
    return json.dumps(dict(sorted(sec.items())), separators=(",", ":"), default=str).encode()


def _check_dir(d: Path, create: bool, runs: Path) -> bool:
    """The catalog directory is a real directory of ours or root's (True), or absent (False)."""
    for p in (d.parent, d):
        try:
            st = os.lstat(p)
        except (FileNotFoundError, NotADirectoryError):
            if not create:
                return False
            try:
                os.mkdir(p, 0o755)
            except OSError:
                return False
            st = os.lstat(p)
        _trusted_owner(p, st, "directory", runs)
    return True


def _read_bytes(path: Path, runs: Path) -> tuple[bytes, os.stat_result] | None:
    """(bytes, stat) of a file under build/ kept by the catalog's rules: None when it or its
    directory is absent; UnsafePath for a symlink or a stranger's file in its place; OSError
    when it cannot be read."""
    if not _check_dir(path.parent, create=False, runs=runs):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        if e.errno == 40:   # ELOOP: the last component is a symlink
            _trusted_owner(path, os.lstat(path), "file", runs)
        raise
    try:
        st = os.fstat(fd)
        _trusted_owner(path, st, "file", runs)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(), st
    finally:
        os.close(fd)


def _read(path: Path, runs: Path) -> Catalog | None:
    """The catalog file at `path` (None if there is none; problem set if it is unusable)."""
    try:
        got = _read_bytes(path, runs)
    except OSError as e:
        cat = Catalog(runs, path)
        cat.problem = f"cannot read it ({e.strerror})"
        return cat
    if got is None:
        return None
    raw, st = got
    cat = Catalog(runs, path)
    cat.sig = file_stat(st)
    try:
        cat.index, start = _header(path, raw, runs)
        cat.raw = memoryview(raw)[start:]
    except CorruptCatalog as e:
        cat.problem = str(e)      # written again, sound, at the next save
    return cat


def read_private(path: Path, runs: Path) -> bytes | None:
    """The bytes of a file kept under build/ by the catalog's rules (no symlink followed; ours,
    root's or the data owner's): None when it or its directory is absent or it is unreadable;
    UnsafePath for a symlink or a stranger's file in its place. tools.findings' store uses it."""
    try:
        got = _read_bytes(path, runs)
    except OSError:
        return None
    return None if got is None else got[0]


def write_private(path: Path, data: bytes, runs: Path) -> list[int]:
    """Replace a file under build/ atomically, by the catalog's rules (_write)."""
    return _write(path, data, runs)


def _write(path: Path, data: bytes, runs: Path) -> list[int]:
    """Replace the catalog atomically (temporary file beside it, O_EXCL|O_NOFOLLOW, rename)."""
    if not _check_dir(path.parent, create=True, runs=runs):
        raise PermissionError(f"cannot create {path.parent}")
    try:
        st = os.lstat(path)
        _trusted_owner(path, st, "file", runs)   # refuse to replace a planted symlink silently
    except FileNotFoundError:
        pass
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            st = os.fstat(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:   # a rename may change the ctime: the stat a later lstat will see
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    return file_stat(st)


def _prune(top: Path, keep: Path) -> None:
    """Remove catalogs of other data directories that are gone, and all but the KEEP_OTHER
    most recently written ones (tests make many scratch data directories)."""
    others = []
    for p in top.glob("data-*.json"):
        try:
            st = os.lstat(p)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                continue
            with open(os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as f:
                head = json.loads(f.readline())
            gone = not Path(head.get("runs", "")).is_dir()
        except (OSError, ValueError, AttributeError):
            gone, st = True, None
        if p != keep and gone:
            p.unlink(missing_ok=True)
        elif st is not None:
            others.append((st.st_mtime_ns, p))
    for _, p in sorted(others, reverse=True)[KEEP_OTHER:]:
        if p != keep:
            p.unlink(missing_ok=True)


_open: dict[str, Catalog] = {}   # per runs directory: the catalog this process holds


def for_runs(data_dir: Path | str | None = None) -> Catalog:
    """The catalog of a data directory, as this process holds it: re-read when another process
    rewrote the file, empty (and rebuilt as datasets are listed) when it is missing or corrupt.
    Raises UnsafePath for a symlink or a file not ours in its place."""
    runs = runs_dir(data_dir).resolve()
    if not enabled():
        return Catalog(runs, None)
    path = catalog_path(data_dir)
    held = _open.get(str(runs))
    if held is not None and held.path == path:
        try:
            st = os.lstat(path)
            now = file_stat(st) if stat.S_ISREG(st.st_mode) else False
        except (FileNotFoundError, NotADirectoryError):
            now = None
        if now == held.sig:       # the file we read or wrote, or still none (read-only)
            return held
    cat = _read(path, runs) or Catalog(runs, path)
    _open[str(runs)] = cat
    return cat


# -- python -m tools catalog ------------------------------------------------------------------

def build(data_dir: Path | str | None = None, say=print) -> Catalog:
    """Bring the catalog of a data directory up to date with every dataset in it (validating
    each manifest, tools.dataset.list_runs) and print what it holds."""
    from .dataset import list_runs
    runs = runs_dir(data_dir)
    path = catalog_path(data_dir)
    t0 = time.monotonic()
    if not enabled():
        say("[catalog] PERFBOOK_CATALOG is off: nothing is built, every manifest is read from its file")
        return Catalog(runs.resolve(), None)
    before = for_runs(data_dir)
    if before.problem:
        say(f"[catalog] {path}: {before.problem}; rebuilt")
    old = before.entries()
    chapters = sorted({p.name for p in runs.glob("*/*")
                       if p.is_dir() and not p.name.startswith(".") and not p.parent.name.startswith(".")}) \
        if runs.is_dir() else []
    for ch in chapters:
        list_runs(ch, data_dir)
    cat = for_runs(data_dir)
    cat.forget_chapters_except(set(chapters))
    cat.save(prune=True)
    entries = (_read(path, runs.resolve()) or cat).entries()   # what the file now holds
    took = time.monotonic() - t0
    added = sorted(set(entries) - set(old))
    removed = sorted(set(old) - set(entries))
    changed = sorted(r for r in entries if r in old and old[r]["sha256"] != entries[r]["sha256"])
    kept = f"{path} ({path.stat().st_size / 1e3:.0f} kB)" if cat.path and path.is_file() \
        else "not kept on disk (PERFBOOK_CATALOG=off or an unwritable build directory)"
    say(f"[catalog] {len(entries)} datasets of {len({e['host_id'] for e in entries.values()})} "
        f"hosts in {len(chapters)} chapters under {runs}: {kept}; "
        f"{len(added)} added, {len(changed)} changed, {len(removed)} removed, in {took:.2f} s")
    for ch in chapters:
        es = [e for e in entries.values() if e["chapter"] == ch]
        tables: dict[str, int] = {}
        for e in es:
            for t, n in e["tables"].items():
                tables[t] = tables.get(t, 0) + int(n)
        profiles = sorted({str(e["profile"]) for e in es})
        say(f"  {ch:<22} {len(es):>4} datasets, {len({e['host_id'] for e in es}):>4} hosts, "
            f"profiles {','.join(profiles)}; rows: "
            + ", ".join(f"{t} {n}" for t, n in sorted(tables.items())))
    return cat
