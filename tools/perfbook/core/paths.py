"""Locations inside the repository, independent of the current directory."""

from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path:
    """The checkout's top directory (the one holding _toc.yml)."""
    env = os.environ.get("PERFBOOK_ROOT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve().parent
    for cand in (here, *here.parents):
        if (cand / "_toc.yml").is_file():
            return cand
    return here.parent


def data_dir() -> Path:
    return repo_root() / "data"


def runs_dir(data: Path | str | None = None) -> Path:
    return Path(data) / "runs" if data else data_dir() / "runs"


def reference_dir(data: Path | str | None = None) -> Path:
    return Path(data) / "reference" if data else data_dir() / "reference"


def build_dir() -> Path:
    """Where compiled C harnesses go (ignored by git)."""
    return Path(os.environ.get("PERFBOOK_BUILD", repo_root() / "build"))


def resolve_data_dir(value: str | os.PathLike | None) -> Path:
    """A notebook's data_dir parameter: empty means the repository's data/."""
    if value in (None, ""):
        return data_dir()
    p = Path(value)
    return p if p.is_absolute() else (repo_root() / p)
