"""Digests of the data a notebook reads, and of a dataset: what the stored notebooks
(perfbook.book.freshness) and the verdict store (perfbook.analysis.findings) are keyed on.

A digest is a SHA-256 over sorted (path relative to the data directory, SHA-256 of the
content) pairs: it does not depend on the order in which the file system lists the files, on
where the checkout lives, or on mtimes, and it ignores hidden entries (a dataset still being
written, .tmp-*), which no reader loads. A link among the files is refused, never read through
(perfbook.data.dataset).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from perfbook.core.paths import reference_dir, resolve_data_dir, runs_dir
from perfbook.data.dataset import (
    REFERENCE_FILE,
    data_depth,
    is_regular,
    open_data,
    subdirs,
    visible_files,
)

ALGO = "sha256"


def file_sha256(path: Path, depth: int = 0) -> str:
    """SHA-256 of a file's content. depth > 0: a file of a data directory, whose last `depth`
    components are opened without following a link (perfbook.data.dataset.open_data)."""
    h = hashlib.sha256()
    with os.fdopen(open_data(path, depth), "rb") if depth else open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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
    return tree_digest(
        {p.relative_to(top).as_posix(): p for p in visible_files(top)},
        lambda name: name.count("/") + 1,
    )


def data_files(
    name: str, data_dir: str | Path | None = None, chapter: bool = True
) -> dict[str, Path]:
    """The files notebook `name` reads, keyed by their path relative to the data dir: a
    chapter's own datasets, or every dataset for a page that reads them all (chapter=False).

    A reference table missing from a scratch data_dir comes from the committed
    data/reference, as perfbook.data.dataset.load_reference does.
    """
    data = resolve_data_dir(data_dir)
    runs = runs_dir(data)
    out: dict[str, Path] = {}
    if chapter:  # host directories that hold one of this chapter (a link is refused)
        tops = [runs / h / name for h in subdirs(runs) if name in subdirs(runs / h)]
    else:
        tops = [runs]
    for top in tops:
        for f in visible_files(top):
            out[f"runs/{f.relative_to(runs).as_posix()}"] = f
    out.update(reference_files(name, data_dir, chapter))
    return out


def reference_files(
    name: str, data_dir: str | Path | None = None, chapter: bool = True
) -> dict[str, Path]:
    """The reference files notebook `name` reads (data_files without the datasets): its seed
    tables and the reference host's file, keyed as in data_files."""
    data = resolve_data_dir(data_dir)
    refs = reference_dir(data)
    out: dict[str, Path] = {}
    # every notebook marks the reference host (perfbook.analysis.fleetview), so its file counts for all
    patterns = (f"{name}*.csv" if chapter else "*.csv", REFERENCE_FILE)
    found = {
        p.name: p
        for pat in patterns
        for p in (refs.glob(pat) if refs.is_dir() else [])
        if is_regular(p)
    }
    committed = reference_dir()
    if committed != refs and committed.is_dir():
        for p in (p for pat in patterns for p in committed.glob(pat)):
            if is_regular(p):
                found.setdefault(p.name, p)
    for fname, p in found.items():
        if not fname.startswith("."):
            out[f"reference/{fname}"] = p
    return out


def data_digest(
    name: str, data_dir: str | Path | None = None, chapter: bool = True
) -> tuple[str, int]:
    """(digest, number of files) of the data notebook `name` reads."""
    files = data_files(name, data_dir, chapter)
    return tree_digest(files, data_depth), len(files)
