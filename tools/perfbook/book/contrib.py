"""Check a contribution (a pull request) against the branch it goes into.

    python -m perfbook contrib BASE        # e.g. origin/main

Datasets are immutable, so a contribution may only *add* datasets under data/runs/. This
fails, with one line per problem and exit status 1, when the change since BASE
(git diff BASE...HEAD):

* modifies, deletes or renames a file of an existing dataset;
* adds a file to an existing dataset;
* adds a dataset that does not validate (perfbook.book.validation.validate_all: JSON, schemas, row
  counts, a table beyond perfbook.data.dataset's limits, a link or a FIFO in it, a run id reused
  under one host, a host id that does not follow from its machine facts, or one host id
  carried by two machines);
* adds a symlink anywhere (git mode 120000), or anything but a regular file under data/ (a
  submodule). The book's build reads data/ as root or on the Pages runner and publishes it:
  a link there would publish whatever it points to on that machine, and no part of the
  book needs one.

The CI workflow .github/workflows/contributions.yml runs it, beside the unprivileged tests.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from perfbook.book.validation import validate_all
from perfbook.core.errors import PerfbookError, one_line
from perfbook.core.paths import repo_root


def _git(*args: str) -> str:
    r = subprocess.run(["git", "-C", str(repo_root()), *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise PerfbookError(f"git {' '.join(args)} failed: {r.stderr.strip().splitlines()[-1:]}")
    return r.stdout


def _dataset_of(path: str) -> str | None:
    parts = Path(path).parts
    if len(parts) >= 6 and parts[:2] == ("data", "runs"):
        return "/".join(parts[2:5])
    return None


REGULAR = ("100644", "100755")
LINK = "120000"


def _not_regular(base: str) -> list[str]:
    """A line for each symlink the change since `base` adds anywhere, and for each entry under
    data/ that is not a regular file (git's modes, so that nothing is checked out first)."""
    found = {}
    raw = _git("diff", "--raw", "--no-renames", "-z", f"{base}...HEAD").split("\0")
    for meta, path in zip(raw[0::2], raw[1::2]):  # ":old new sha sha status", then the path
        mode = meta.split()[1] if meta.startswith(":") else ""
        if mode == LINK:
            found[path] = mode
    for entry in _git("ls-tree", "-r", "-z", "HEAD", "--", "data").split("\0"):
        if entry:
            meta, path = entry.split("\t", 1)
            if meta.split()[0] not in REGULAR:
                found[path] = meta.split()[0]
    return [
        f"{path}: a symlink; a contribution adds no links (read by the book's build, as root "
        "or on the Pages runner, one would reveal what it points to there)"
        if mode == LINK
        else f"{path}: git mode {mode}, not a regular file; data/ holds regular files only"
        for path, mode in sorted(found.items())
    ]


def problems(base: str) -> list[str]:
    """Every reason the change since `base` is not a valid contribution ([] when it is)."""
    out = _not_regular(base)
    base_sets = {
        _dataset_of(p) for p in _git("ls-tree", "-r", "--name-only", base, "data/runs").split()
    }
    for line in _git(
        "diff", "--name-status", "--no-renames", f"{base}...HEAD", "--", "data/runs"
    ).splitlines():
        status, path = line.split("\t", 1)
        ds = _dataset_of(path)
        if ds is None:
            continue
        if status != "A":
            out.append(
                f"{path}: {'deleted' if status == 'D' else 'modified'}, but datasets are "
                "immutable; add a new dataset instead"
            )
        elif ds in base_sets:
            out.append(f"{path}: added to the existing dataset {ds}; datasets are immutable")
    try:
        validate_all()
    except PerfbookError as e:
        out.append(str(e))
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m perfbook contrib BASE   (for example origin/main)", file=sys.stderr)
        return 2
    try:
        found = problems(argv[0])
    except PerfbookError as e:
        print(one_line(e), file=sys.stderr)
        return 2
    for p in found:
        print(f"contribution: {p}")
    if not found:
        print(f"contribution: only new datasets since {argv[0]}, and every dataset validates")
    return 1 if found else 0
