"""The code a notebook's outputs follow from: the perfbook modules it imports, and every
perfbook module those import, found by reading their import statements (ast; nothing is
imported). A stored notebook's code digest (perfbook.book.freshness) and the verdict store's key
(perfbook.analysis.findings) cover these files, so editing a module a chapter does not import
(a dev tool, the CLI, another chapter, a test) leaves its stored outputs fresh.

Every import statement counts, at module level or inside a function: a function's import is
code the notebook may run. A package's __init__.py counts for every module below it (Python
runs it first). Modules loaded by name (importlib) are not seen: the one such place that
matters to a notebook, a page reading every chapter through the registry, names its chapter
packages itself (perfbook.book.freshness.code_files).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # tools/perfbook
ROOT_NAME = "perfbook"


def module_file(name: str) -> Path | None:
    """The file of module `name` (perfbook.x.y), None if it is not one of ours."""
    if name != ROOT_NAME and not name.startswith(ROOT_NAME + "."):
        return None
    base = PACKAGE.joinpath(*name.split(".")[1:])
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


@cache
def _imports(path: Path, name: str) -> frozenset[str]:
    """The perfbook modules module `name` (file `path`) imports, by absolute name.

    Parsed once per process (functools.cache): a page that reads every chapter digests each
    chapter's code, and their modules overlap. Measured 2026-11-28 on the project's machine
    (2 shared cores, Debian 12; medians of 3 runs, CPU seconds of the page's cells, the verdict
    store filled): the summary page 1.2 s with it, 2.7 s without on the committed data; 3.1 s
    and 4.7 s at 103 hosts. `perfbook bench memo --memos module-imports --notebooks summary`
    prints it."""
    is_pkg = path.name == "__init__.py"
    package = name.split(".") if is_pkg else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.add(target)
            out.update(f"{target}.{a.name}" for a in node.names)  # `from pkg import module`
    return frozenset(m for m in out if module_file(m) is not None)


def closure(modules) -> dict[str, Path]:
    """{path relative to the package's parent: file} of `modules` and every perfbook module
    they import, directly or not, with the __init__.py of each package on the way."""
    todo, seen = [m for m in modules if module_file(m) is not None], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # the packages above it
        todo += sorted(_imports(module_file(name), name))
    files = {module_file(m) for m in seen}
    return {p.relative_to(PACKAGE.parent).as_posix(): p for p in sorted(files)}


def cell_imports(sources) -> set[str]:
    """The perfbook modules imported by code `sources` (a notebook's code cells; a cell that
    does not parse as Python, such as one holding a magic, is passed over)."""
    out = set()
    for src in sources:
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                out.add(node.module)
                out.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in out if module_file(m) is not None}
