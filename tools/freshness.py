"""Is a stored notebook up to date with data/? A digest of the data it reads.

The book renders the outputs stored in the notebooks (execute_notebooks is
off), so a dataset added without `make notebooks` would leave a chapter that
silently shows the old data. `python -m tools refresh` therefore records, in
each notebook's metadata, a digest of exactly the files that notebook reads:

* a chapter: every file under data/runs/*/<chapter>/, data/reference/<chapter>*.csv and the
  reference host's file (data/reference/reference_host.json, tools.fleetview);
* a page that reads every chapter (tools.chapters.PAGES): all of data/runs and
  data/reference.

The digest is a SHA-256 over sorted (path relative to the data directory,
SHA-256 of the content) pairs: it does not depend on the order in which the
file system lists the files, on where the checkout lives, or on mtimes, and it
ignores hidden entries (a dataset still being written, .tmp-*), which no
reader loads. A link among the files is refused, never read through (tools.dataset).
`stale()` compares the stored digests with the current data.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .dataset import data_depth, is_regular, subdirs
from .fleetview import REFERENCE_FILE as REFERENCE_HOST_FILE
from .paths import reference_dir, resolve_data_dir, runs_dir

METADATA_KEY = "perfbook"
DIGEST_KEY = "data_digest"
FILES_KEY = "data_files"
CODE_KEY = "code_digest"
ALGO = "sha256"


def file_sha256(path: Path, depth: int = 0) -> str:
    """SHA-256 of a file's content. depth > 0: a file of a data directory, whose last `depth`
    components are opened without following a link (tools.dataset.open_data)."""
    from .dataset import open_data
    h = hashlib.sha256()
    with (os.fdopen(open_data(path, depth), "rb") if depth else open(path, "rb")) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _visible_files(top: Path) -> list[Path]:
    """Every regular file under `top` whose path below it has no hidden part; a link or a FIFO
    there is refused (tools.dataset.visible_files)."""
    from .dataset import visible_files
    return visible_files(top)


def tree_digest(files: dict[str, Path], depth=None) -> str:
    """Digest of {relative name: file}: sorted names and content hashes. depth(name): the files
    of a data directory, the last depth(name) components of each opened without following a
    link (file_sha256); None: other files (the code)."""
    h = hashlib.sha256()
    for name in sorted(files):
        digest = file_sha256(files[name], depth(name) if depth else 0)
        h.update(name.encode() + b"\0" + digest.encode() + b"\n")
    return f"{ALGO}:{h.hexdigest()}"


def dir_digest(top: Path) -> str:
    """Digest of a directory's visible files, named relative to it (datasets); none of them
    read through a link below `top`."""
    top = Path(top)
    return tree_digest({p.relative_to(top).as_posix(): p for p in _visible_files(top)},
                       lambda name: name.count("/") + 1)


def _is_chapter(name: str) -> bool:
    from .chapters import CHAPTERS
    return any(c.name == name for c in CHAPTERS)


def data_files(name: str, data_dir: str | Path | None = None) -> dict[str, Path]:
    """The files notebook `name` reads, keyed by their path relative to the data dir.

    A reference table missing from a scratch data_dir comes from the committed
    data/reference, as tools.dataset.load_reference does.
    """
    data = resolve_data_dir(data_dir)
    runs = runs_dir(data)
    chapter = _is_chapter(name)
    out: dict[str, Path] = {}
    if chapter:     # host directories that hold one of this chapter (a link is refused)
        tops = [runs / h / name for h in subdirs(runs) if name in subdirs(runs / h)]
    else:
        tops = [runs]
    for top in tops:
        for f in _visible_files(top):
            out[f"runs/{f.relative_to(runs).as_posix()}"] = f
    out.update(reference_files(name, data_dir))
    return out


def reference_files(name: str, data_dir: str | Path | None = None) -> dict[str, Path]:
    """The reference files notebook `name` reads (data_files without the datasets): its seed
    tables and the reference host's file, keyed as in data_files."""
    data = resolve_data_dir(data_dir)
    refs = reference_dir(data)
    chapter = _is_chapter(name)
    out: dict[str, Path] = {}
    # every notebook marks the reference host (tools.fleetview), so its file counts for all
    patterns = (f"{name}*.csv" if chapter else "*.csv", REFERENCE_HOST_FILE)
    found = {p.name: p for pat in patterns for p in (refs.glob(pat) if refs.is_dir() else [])
             if is_regular(p)}
    committed = reference_dir()
    if committed != refs and committed.is_dir():
        for p in (p for pat in patterns for p in committed.glob(pat)):
            if is_regular(p):
                found.setdefault(p.name, p)
    for fname, p in found.items():
        if not fname.startswith("."):
            out[f"reference/{fname}"] = p
    return out


def data_digest(name: str, data_dir: str | Path | None = None) -> tuple[str, int]:
    """(digest, number of files) of the data notebook `name` reads."""
    files = data_files(name, data_dir)
    return tree_digest(files, data_depth), len(files)


def code_files(name: str) -> dict[str, Path]:
    """The code a notebook's outputs follow from: the shared layer (tools/*.py), the chapter's
    own package (every chapter's, for a page that reads them all) and the pinned environment.
    The C harnesses are left out: they run only in collect mode."""
    from .paths import repo_root
    root = repo_root()
    tools = root / "tools"
    pkgs = [tools / "chapters" / name] if _is_chapter(name) else [tools / "chapters"]
    files = [*tools.glob("*.py"), tools / "chapters" / "__init__.py", root / "environment.yml"]
    for pkg in pkgs:
        files += [p for p in pkg.rglob("*.py") if "__pycache__" not in p.parts]
    return {p.relative_to(root).as_posix(): p for p in files if p.is_file()}


def code_digest(name: str, nb) -> str:
    """Digest of code_files(name) and the notebook's own cell sources (not its outputs)."""
    h = hashlib.sha256(tree_digest(code_files(name)).encode())
    for cell in nb.cells:
        h.update(cell.cell_type.encode() + b"\0" + cell.source.encode() + b"\n")
    return f"{ALGO}:{h.hexdigest()}"


def record(nb, name: str, digest: tuple[str, int], code: str | None = None) -> None:
    """Store a data digest (from data_digest), and the code digest, in a notebook's metadata."""
    meta = nb.metadata.setdefault(METADATA_KEY, {})
    meta[DIGEST_KEY], meta[FILES_KEY] = digest
    if code is not None:
        meta[CODE_KEY] = code


def changed(nb, name: str, data_dir: str | Path | None = None) -> str | None:
    """Why notebook `name` must be re-executed (its data or its code changed since it was
    stored); None when neither did. `make notebooks` re-executes only these."""
    meta = nb.metadata.get(METADATA_KEY) or {}
    if meta.get(DIGEST_KEY) != data_digest(name, data_dir)[0]:
        return "its data changed"
    if meta.get(CODE_KEY) is None:
        return "no code digest stored yet"
    if meta[CODE_KEY] != code_digest(name, nb):
        return "its code (tools/, its package, its cells or environment.yml) changed"
    return None


def stored_digest(nb) -> str | None:
    return (nb.metadata.get(METADATA_KEY) or {}).get(DIGEST_KEY)


def stale(names: list[str] | None = None, data_dir: str | Path | None = None) -> list[tuple[str, str]]:
    """[(name, why)] of every notebook whose stored outputs don't follow the data."""
    import nbformat
    from . import chapters
    pages = list(chapters.CHAPTERS) + list(getattr(chapters, "PAGES", []))
    out = []
    for ch in pages:
        if names is not None and ch.name not in names:
            continue
        nb = nbformat.read(ch.path, as_version=4)
        have = stored_digest(nb)
        want, n = data_digest(ch.name, data_dir)
        if have is None:
            out.append((ch.name, f"{ch.notebook} has no data digest: it was not re-executed by "
                                  "`python -m tools refresh`"))
        elif have != want:
            out.append((ch.name, f"{ch.notebook} was executed on other data than the {n} files "
                                  f"it reads now in data/"))
    return out
