"""Is a stored notebook up to date with data/? A digest of the data it reads.

The book renders the outputs stored in the notebooks (execute_notebooks is
off), so a dataset added without `make notebooks` would leave a chapter that
silently shows the old data. `python -m perfbook refresh` therefore records, in
each notebook's metadata, a digest of exactly the files that notebook reads:

* a chapter: every file under data/runs/*/<chapter>/, data/reference/<chapter>*.csv and the
  reference host's file (data/reference/reference_host.json, perfbook.analysis.fleetview);
* a page that reads every chapter (perfbook.chapters.PAGES): all of data/runs and
  data/reference.

The digest is a SHA-256 over sorted (path relative to the data directory,
SHA-256 of the content) pairs: it does not depend on the order in which the
file system lists the files, on where the checkout lives, or on mtimes, and it
ignores hidden entries (a dataset still being written, .tmp-*), which no
reader loads. A link among the files is refused, never read through (perfbook.data.dataset).
`stale()` compares the stored digests with the current data.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import nbformat

from perfbook import chapters
from perfbook.chapters import CHAPTERS, EXAMPLE
from perfbook.core import codedigest
from perfbook.core.paths import repo_root
from perfbook.data.digest import ALGO, tree_digest
from perfbook.data.digest import data_digest as _data_digest
from perfbook.framework.contract import explain_modules

METADATA_KEY = "perfbook"
DIGEST_KEY = "data_digest"
FILES_KEY = "data_files"
CODE_KEY = "code_digest"


def _is_chapter(name: str) -> bool:
    """A chapter's notebook (the book's, or the example's) reads its own package and data; a
    page's reads every chapter's."""
    return any(c.name == name for c in [*CHAPTERS, EXAMPLE])


def data_digest(name: str, data_dir: str | Path | None = None) -> tuple[str, int]:
    """(digest, number of files) of the data notebook `name` reads (perfbook.data.digest)."""
    return _data_digest(name, data_dir, _is_chapter(name))


LOCK = "tools/requirements.lock"  # the pinned environment: a new version may change an output


def code_files(name: str, nb=None) -> dict[str, Path]:
    """The code a notebook's outputs follow from: the perfbook modules its cells import and every
    perfbook module those import (perfbook.core.codedigest), its chapter's package, every
    chapter's package for a page that reads them all (through the registry, by name), and the
    pinned environment. A dev tool, the CLI, a test or another chapter is not among them; nor
    are the C harnesses and a chapter's collect, which run only in collect mode."""
    modules = (
        codedigest.cell_imports(c.source for c in nb.cells if c.cell_type == "code")
        if nb
        else set()
    )
    names = [name] if _is_chapter(name) else [c.name for c in CHAPTERS]
    modules |= {m for n in names for m in explain_modules(f"perfbook.chapters.{n}")} | {
        "perfbook.chapters"
    }
    files = {f"tools/{rel}": p for rel, p in codedigest.closure(modules).items()}
    lock = repo_root() / LOCK
    if lock.is_file():
        files[LOCK] = lock
    return files


def code_digest(name: str, nb) -> str:
    """Digest of code_files(name, nb) and the notebook's own cell sources (not its outputs)."""
    h = hashlib.sha256(tree_digest(code_files(name, nb)).encode())
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
        return (
            "its code (the perfbook modules it runs, its cells or the pinned environment) changed"
        )
    return None


def stored_digest(nb) -> str | None:
    return (nb.metadata.get(METADATA_KEY) or {}).get(DIGEST_KEY)


def stale(
    names: list[str] | None = None, data_dir: str | Path | None = None
) -> list[tuple[str, str]]:
    """[(name, why)] of every notebook whose stored outputs don't follow the data."""
    pages = list(chapters.CHAPTERS) + list(getattr(chapters, "PAGES", []))
    out = []
    for ch in pages:
        if names is not None and ch.name not in names:
            continue
        nb = nbformat.read(ch.path, as_version=4)
        have = stored_digest(nb)
        want, n = data_digest(ch.name, data_dir)
        if have is None:
            out.append(
                (
                    ch.name,
                    f"{ch.notebook} has no data digest: it was not re-executed by "
                    "`python -m perfbook refresh`",
                )
            )
        elif have != want:
            out.append(
                (
                    ch.name,
                    f"{ch.notebook} was executed on other data than the {n} files "
                    f"it reads now in data/",
                )
            )
    return out
