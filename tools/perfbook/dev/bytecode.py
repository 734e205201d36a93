"""Write the bytecode of the modules this project's runs import, once, when setup installs them.

    python -m perfbook bytecode notebooks|book     (tools/setup.sh runs both, side by side)

Compiling the whole environment at install (uv's --compile-bytecode) took 20 of a fresh setup's
30 s on 2 cores: 8,600 files, most of which no run of ours imports. Without any bytecode, and
with PYTHONDONTWRITEBYTECODE=1 set (as on this project's own machines), every process would
compile what it imports again. So setup imports the entry points of measuring, the notebook
kernels, the book build and the tests with that variable unset for this one process: Python
writes the bytecode of what they import, about 2,900 files with WHOLE, and nothing else. A module missed
here is compiled in memory when it is imported, as before: slower, never wrong. Nothing is
written outside the environment and this checkout's own __pycache__ directories (ignored by git).
"""

from __future__ import annotations

import compileall
import importlib
import importlib.util
import os
import pkgutil
import sys

import perfbook
from perfbook.core.proc import die_with_parent

# What each group's processes import first; each pulls in most of what they use.
GROUPS = {
    # `python -m perfbook measure` and the notebook kernels (perfbook.book.jupyter.kernel, papermill, nbclient)
    "notebooks": [
        "perfbook.cli",
        "numpy",
        "pandas",
        "scipy.stats",
        "scipy.optimize",
        "matplotlib.pyplot",
        "matplotlib_inline.backend_inline",
        "seaborn",
        "PIL.Image",
        "IPython",
        "ipykernel.kernelapp",
        "ipykernel.ipkernel",
        "nbclient",
        "nbformat",
        "jupyter_client",
        "papermill",
        "elftools.elf.elffile",
        "yaml",
    ],
    # `python -m perfbook book` (Jupyter Book's Sphinx build and its extensions) and `make test`
    "book": [
        "jupyter_book.cli.main",
        "jupyter_book.config",
        "sphinx.application",
        "sphinx.builders.html",
        "sphinx.cmd.build",
        "myst_nb.sphinx_ext",
        "myst_parser.sphinx_ext",
        "sphinx_book_theme",
        "pydata_sphinx_theme",
        "sphinxcontrib.bibtex",
        "sphinx_design",
        "sphinx_togglebutton",
        "sphinx_copybutton",
        "sphinx_comments",
        "sphinx_external_toc",
        "sphinx_multitoc_numbering",
        "sphinx_jupyterbook_latex",
        "sphinx_thebe",
        "jupyter_cache.cache.main",
        "pytest",
        "_pytest.python",
        "nbval.plugin",
        "bs4",
    ],
}
# Small packages that load more of themselves than the imports above reach (Sphinx's builders
# and domains, pytest's plugins, the kernel's debugger): compiled whole, without importing. The
# kernel's debugpy is compiled by the book's process: the notebooks' imports take the longer
# (about 9 s against 6 s here), and the two run side by side.
WHOLE = {
    "notebooks": ["IPython", "PIL"],
    "book": [
        "sphinx",
        "docutils",
        "_pytest",
        "a11y_pygments",
        "sphinx_design",
        "sphinxcontrib",
        "pybtex",
        "myst_nb",
        "myst_parser",
        "debugpy",
    ],
}


def warm(group: str) -> list[str]:
    """Import every module of `group` (and, for the notebooks, every module of perfbook), and
    compile its WHOLE packages; returns the names that could not be imported or found (an
    optional package that is not installed, a module an upgrade renamed)."""
    names = list(GROUPS[group])
    if group == "notebooks":
        names += [m.name for m in pkgutil.walk_packages(perfbook.__path__, "perfbook.")]
    missed = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - compiling ahead is an optimisation only
            missed.append(name)
    for name in WHOLE[group]:
        spec = importlib.util.find_spec(name)
        for d in (spec.submodule_search_locations or []) if spec else []:
            compileall.compile_dir(d, quiet=2)
        if not spec:
            missed.append(name)
    return missed


def main(argv: list[str]) -> int:
    """Dies with the setup that started it (PR_SET_PDEATHSIG: a stopped setup leaves no
    compiler behind; each bytecode file is written whole, by rename, so none is cut short)."""
    if len(argv) != 1 or argv[0] not in GROUPS:
        print(f"usage: python -m perfbook bytecode {'|'.join(GROUPS)}", file=sys.stderr)
        return 2
    parent = os.getppid()
    die_with_parent()
    if os.getppid() != parent:  # the setup was gone before the request took effect
        return 1
    missed = warm(argv[0])
    # setup sends this to build/bytecode.log: a module an upgrade renamed shows there
    print(
        f"[bytecode] {argv[0]}: compiled; not found or not importable: {', '.join(missed) or 'none'}"
    )
    return 0
