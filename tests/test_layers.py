"""The house the code lives in: the perfbook package's layers point down, no module imports
itself back through others, imports sit at the top where a reader and the tools see them, and
the package installs as what it is."""

import ast
import importlib
import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import grimp
import pytest

from conftest import ROOT

PKG = ROOT / "tools" / "perfbook"
BIN = Path(sys.executable).parent
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
# Where a function may import without saying why: the command line dispatches each command to
# what it runs, so `perfbook sweep` and the kernel launcher `python -m perfbook kernel` start in
# 0.25 s instead of the 5.8 s of importing every layer (measured with `python -X importtime`).
DISPATCH = {PKG / "cli.py", PKG / "__main__.py"}


def _contract(kind):
    return next(c for c in CONFIG["contracts"] if c["type"] == kind)


def test_the_layers_point_down():
    """import-linter's contracts in pyproject.toml: the layers, and no chapter importing another."""
    out = subprocess.run(
        [str(BIN / "lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]


def test_every_layer_and_chapter_is_under_contract():
    """Every layer is listed, and the independence contract's expressions (a wildcard,
    perfbook.chapters.*) match every chapter package, as lint-imports expands them: a new
    chapter is covered without anyone listing it."""
    layers = {d.name for d in PKG.iterdir() if d.is_dir() and (d / "__init__.py").exists()}
    layers |= {p.stem for p in PKG.glob("*.py") if p.stem not in ("__init__", "__main__")}
    assert {m.removeprefix("perfbook.") for m in _contract("layers")["layers"]} == layers
    chapters = {d.name for d in (PKG / "chapters").iterdir() if (d / "__init__.py").exists()}
    graph = grimp.build_graph("perfbook", cache_dir=None)
    matched = set()
    for expr in _contract("independence")["modules"]:
        matched |= graph.find_matching_modules(expr) if "*" in expr else {expr}
    assert {m.removeprefix("perfbook.chapters.") for m in matched} == chapters


def test_a_chapter_that_imports_another_breaks_the_contract(tmp_path):
    """The independence contract is not a list that a new chapter can miss: in a copy of the
    package, one chapter importing another (even a part of it) fails lint-imports."""
    shutil.copytree(
        PKG, tmp_path / "tools" / "perfbook", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    tables = tmp_path / "tools" / "perfbook" / "chapters" / "tsc_alignment" / "tables.py"
    tables.write_text(tables.read_text() + "\nfrom perfbook.chapters.example import analysis\n")
    out = subprocess.run(
        [str(BIN / "lint-imports"), "--no-cache"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(tmp_path / "tools"), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-1000:]
    assert "no chapter imports another BROKEN" in out.stdout, out.stdout[-2000:]
    assert "perfbook.chapters.tsc_alignment.tables -> perfbook.chapters.example" in out.stdout


def circles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph.find_modules_directly_imported_by(nxt)))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_module_imports_itself_back():
    """No import circle anywhere in perfbook, inside a chapter too: a circle hides which module
    a reader should read first, and breaks when someone moves an import to the top."""
    graph = grimp.build_graph("perfbook", cache_dir=None)
    assert circles(graph) == []


def test_the_circle_finder_finds_a_circle():
    class Graph:
        modules = {"a", "b", "c", "d"}
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

        def find_modules_directly_imported_by(self, m):
            return self.edges.get(m, set())

    assert circles(Graph()) == [["a", "b", "c"]]


def lazy_imports(path: Path) -> list[str]:
    """Imports inside a function without a `# lazy: why` comment on their lines or above them."""
    src = path.read_text()
    lines = src.splitlines()
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                said = lines[max(child.lineno - 2, 0) : child.end_lineno]  # the line above too
                if not any(
                    line.strip().startswith("# lazy:") or "# lazy:" in line for line in said
                ):
                    found.append(f"{path.relative_to(ROOT)}:{child.lineno}: {ast.unparse(child)}")
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(ast.parse(src), False)
    return found


def test_imports_sit_at_the_top():
    """An import inside a function hides the module graph from readers and from
    import-linter; where one earns its place (a start-up cost it keeps out of a light
    command, an import that must follow a fork), its line says why after `# lazy:`."""
    found = [f for p in sorted(PKG.rglob("*.py")) if p not in DISPATCH for f in lazy_imports(p)]
    assert not found, f"{len(found)} imports inside functions without `# lazy: why`:\n" + "\n".join(
        found[:40]
    )


def test_the_import_check_sees_a_hidden_import(tmp_path):
    p = ROOT / "tools" / "perfbook" / "core" / "_probe_layers_test.py"
    try:
        p.write_text(
            "def f():\n    import json\n    import os   # lazy: a reason\n    return json, os\n"
        )
        assert lazy_imports(p) == ["tools/perfbook/core/_probe_layers_test.py:2: import json"]
    finally:
        p.unlink()


def test_the_package_has_one_name():
    """From the checkout's top directory `tools` is a plain directory: `import tools.perfbook`
    would load a second copy of every module, with its own state (locks, the signal guard)."""
    out = subprocess.run(
        [sys.executable, "-c", "import tools.perfbook"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 1 and "import perfbook, not tools.perfbook" in out.stderr


def test_the_wheel_installs_a_working_command(tmp_path):
    """`pip install .` gives every module of tools/perfbook and a `perfbook` that runs outside the
    checkout (a subpackage without __init__.py, or an entry point naming a moved function, fails
    here). The wheel is built by setuptools' PEP 517 hook, as pip would, from a copy of what
    pyproject.toml packages; a wheel is a zip, so unpacking it is installing it."""
    src = tmp_path / "src"
    shutil.copytree(PKG, src / "tools" / "perfbook", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", src)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from setuptools import build_meta; "
            "print(build_meta.build_wheel(sys.argv[1]))",
            str(tmp_path / "wheel"),
        ],
        cwd=src,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    wheel = zipfile.ZipFile(tmp_path / "wheel" / out.stdout.split()[-1])
    names = set(wheel.namelist())
    want = {
        str(p.relative_to(PKG.parent)) for p in PKG.rglob("*.py") if "__pycache__" not in p.parts
    }
    assert want <= names, f"not in the wheel: {sorted(want - names)[:10]}"
    entry = wheel.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "perfbook = perfbook.cli:main" in entry
    wheel.extractall(tmp_path / "site")
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "import perfbook, sys; print(perfbook.__file__); "
            "from perfbook.cli import main; sys.argv = ['perfbook', '--help']; main()",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.startswith(str(tmp_path / "site")) and "measure" in run.stdout


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]])
def test_the_linter_and_the_formatter_are_clean(command):
    """ruff, configured in pyproject.toml: `ruff check --fix` and `ruff format` mend most of
    what this finds."""
    out = subprocess.run(
        [str(BIN / "ruff"), *command, "--no-cache"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-1000:]


def test_every_chapter_has_the_one_shape():
    """Each chapter package holds the contract's parts (perfbook.framework.contract.PARTS) and
    nothing else at its top; a one-off lives inside a part or in a subfolder named for what it
    does. parse.py may be absent where a chapter parses no text (the example writes its rows
    directly); every other part is there even when short."""
    from perfbook.framework.contract import PARTS

    for pkg in sorted(d for d in (PKG / "chapters").iterdir() if (d / "__init__.py").exists()):
        modules = {p.stem for p in pkg.glob("*.py")}
        assert modules <= {"__init__", *PARTS}, (
            f"{pkg.name}: {sorted(modules - {'__init__', *PARTS})}"
        )
        missing = {"__init__", *PARTS} - modules - {"parse"}
        assert not missing, f"{pkg.name} lacks {sorted(missing)}"


DOCS = ("README.md", "methods.md", "glossary.md", "intro.md", "tools/README.md", "Makefile",
        "tools/setup.sh")  # fmt: skip
DOTTED = re.compile(r"\b(perfbook(?:\.\w+)+)\b")


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def test_every_perfbook_name_resolves():
    """Every dotted perfbook name in the code (code in strings too: a guest's or a child's
    script) and in the docs is a module or one of its attributes, and every `module.attr` a
    module's importer reads is there: a name a move or the linter's unused-import fix left
    behind fails here, not in a collect on a reader's machine."""
    bad = set()
    files = [*PKG.rglob("*.py"), *(ROOT / "tests").glob("*.py"), *(ROOT / d for d in DOCS)]
    for f in files:
        text = f.read_text()
        bad |= {
            f"{f.relative_to(ROOT)}: {n}" for n in set(DOTTED.findall(text)) if not _resolves(n)
        }
        if f.suffix != ".py":
            continue
        tree = ast.parse(text)
        alias = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("perfbook"):
                for a in node.names:
                    alias[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Import):
                alias |= {
                    a.asname: a.name
                    for a in node.names
                    if a.asname and a.name.startswith("perfbook")
                }
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                base = alias.get(node.value.id)
                if base and _is_module(base):
                    if not _resolves(f"{base}.{node.attr}"):
                        bad.add(f"{f.relative_to(ROOT)}:{node.lineno}: {node.value.id}.{node.attr}")
    bad.discard("tools/perfbook/core/codedigest.py: " + "perfbook" + ".x.y")  # a placeholder
    assert not bad, "names that resolve to nothing:\n" + "\n".join(sorted(bad))


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, AttributeError):  # a name below a module that is no package
        return False
