"""Build the C harnesses in tools/c on demand (the setup builds them too).

binary("probench") returns the path of build/bin/probench, compiling it first
if it is missing or older than its source. A missing compiler is a
MissingPrerequisite with the package to install.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from perfbook.core.errors import MissingPrerequisite, PerfbookError
from perfbook.core.paths import build_dir, repo_root

CFLAGS = ["-O2", "-g", "-Wall", "-Wextra", "-fno-omit-frame-pointer"]
# Per-binary extra flags (kept here so that Makefile and Python agree).
EXTRA: dict[str, list[str]] = {}
EXTRA["seqread"] = ["-static"]  # also runs in the tiny guest, whose user space is busybox only
LIBS: dict[str, list[str]] = {}


def source(name: str) -> Path:
    return repo_root() / "tools" / "c" / f"{name}.c"


def binary(name: str) -> Path:
    src = source(name)
    if not src.is_file():
        raise PerfbookError(f"no C source {src}")
    out = build_dir() / "bin" / name
    headers = list(src.parent.glob("*.h"))
    newest = max([src.stat().st_mtime] + [h.stat().st_mtime for h in headers])
    if out.is_file() and out.stat().st_mtime >= newest:
        return out
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise MissingPrerequisite("no C compiler: install gcc (apt-get install gcc make)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    cmd = [cc, *CFLAGS, *EXTRA.get(name, []), "-o", str(tmp), str(src), *LIBS.get(name, [])]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise PerfbookError(
            f"compiling {src.name} failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}"
        )
    tmp.replace(out)
    return out
