"""Scratch directories: one per run, inside our private scratch parent, removed on every
exit path; a SIGKILLed run's directory is removed by the next run or `make sweep`.

  <scratch parent>/<chapter>-<pid>-XXXXXXXX/      (perfbook.hoststate.statedir.scratch_parent(), 0700)

The owner's pid is in the name (and in an `owner` file for people). The sweep looks only
inside the private parent, at directories of ours (lstat: no symlink is followed), whose
pid is dead.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

from perfbook.core import guard
from perfbook.core.proc import pid_alive
from perfbook.hoststate.statedir import scratch_parent

_NAME = re.compile(r"^(?P<chapter>[a-z0-9_]+)-(?P<pid>\d+)-")


class Scratch:
    """A private directory for one run's scratch files."""

    def __init__(self, chapter: str, parent: Path | str | None = None, say=None):
        if not re.fullmatch(r"[a-z0-9_]+", chapter):
            raise ValueError(f"bad scratch name {chapter!r}")
        self.chapter = chapter
        self.parent = Path(parent) if parent else None
        self.say = say or (lambda s: None)
        self.dir: Path | None = None

    def __enter__(self):
        parent = self.parent or scratch_parent()
        if self.parent is None:
            sweep(parent)
        self.dir = Path(tempfile.mkdtemp(prefix=f"{self.chapter}-{os.getpid()}-", dir=parent))
        (self.dir / "owner").write_text(f"{os.getpid()} tools.{self.chapter}\n")
        self.say(f"scratch directory {self.dir}")
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self) -> None:
        if self.dir is not None:
            with guard.restoring():
                shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def path(self, name: str) -> Path:
        assert self.dir is not None, "scratch directory used outside its with-block"
        return self.dir / name


def live_dirs(chapter: str | None = None, parent: Path | None = None) -> list[Path]:
    """Scratch directories that exist now (of one chapter, or all); tests use it."""
    parent = parent or scratch_parent()
    return sorted(
        d
        for d in parent.iterdir()
        if (m := _NAME.match(d.name)) and (chapter is None or m["chapter"] == chapter)
    )


def sweep(parent: Path | None = None, log=None) -> list[Path]:
    """Remove the scratch directories of dead runs (never through a symlink, only ours)."""
    parent = parent or scratch_parent()
    removed = []
    for d in parent.iterdir():
        m = _NAME.match(d.name)
        try:
            st = os.lstat(d)
        except FileNotFoundError:
            continue
        if not m or st.st_uid != os.geteuid() or pid_alive(int(m["pid"])):
            continue
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(d, ignore_errors=True)  # rmtree never follows symlinks inside
        else:
            d.unlink(missing_ok=True)
        removed.append(d)
    if removed and log:
        log("swept scratch left by a killed run: " + ", ".join(str(d) for d in removed))
    return removed
