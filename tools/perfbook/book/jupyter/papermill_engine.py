"""papermill's engine in this environment: nbclient's, and a signal ends the run in one line.

papermill's CLI turned Ctrl-C into click's "Aborted!" and exit status 1, and SIGTERM or SIGHUP
killed it before it shut its kernel down (the kernel noticed a second later, and its files
stayed). With this engine SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt while a notebook
runs (perfbook.book.jupyter.execute, with perfbook.core.guard as in `python -m perfbook measure`); nbclient shuts the kernel
down and removes its files, and papermill's CLI ends with one line and exit status 128 + the signal's number. A
collect's measurement runs in `python -m perfbook collect`, a process of its own that restores what
it changed when its kernel ends, and publishes nothing (perfbook.book.collect_mode.run_mode); a later signal
only waits for the cleanup. An error of ours before or while the kernel starts (a kernelspec
that does not name our provisioner, an unsafe state directory) is one line and exit status 2,
as with `python -m perfbook`.

papermill looks engines up by name, and the one it uses without `--engine` is registered
under the name None before the entry points of group `papermill.engine` are loaded
(papermill/engines.py); an entry point's name is a string. So loading this module, which
papermill does for our entry point `perfbook` (pyproject.toml), also registers the engine as
papermill's default: the README's plain `papermill ...` runs it. The engine delegates to
papermill's NBClientEngine instead of subclassing it, so that importing this module never
imports papermill.engines, which loads this module (its entry point) in turn.
"""

from __future__ import annotations

import signal
import sys

import click

from perfbook.book.jupyter import execute as nbrun
from perfbook.book.jupyter.provisioner import check_kernelspec
from perfbook.core import guard
from perfbook.core.errors import PerfbookError, one_line


def _end_cli(line: str, code: int) -> None:
    """Under papermill's CLI: print `line` and exit with `code` (click's own way, its Exit).
    A program that called papermill as a library gets the exception instead."""
    ctx = click.get_current_context(silent=True)
    if ctx is None or ctx.find_root().command.name != "papermill":
        return
    print(line, file=sys.stderr, flush=True)
    raise click.exceptions.Exit(code)


class PerfbookEngine:
    """papermill's NBClientEngine inside perfbook.book.jupyter.execute's signal handling."""

    @classmethod
    def execute_notebook(cls, nb, kernel_name, **kwargs):
        from papermill.engines import NBClientEngine  # lazy: papermill.engines loads this module

        with nbrun.interruptible():
            try:
                check_kernelspec(kernel_name)
                return NBClientEngine.execute_notebook(nb, kernel_name, **kwargs)
            except KeyboardInterrupt:
                sig = guard.interrupted_by() or "SIGINT"
                _end_cli(
                    f"interrupted by {sig}: the notebook's kernel was shut down; a collect it "
                    "ran restores what it changed and publishes nothing",
                    128 + int(getattr(signal, sig)),
                )
                raise
            except PerfbookError as e:
                _end_cli(one_line(e), 2)
                raise

    @classmethod
    def nb_kernel_name(cls, nb, name=None):
        from papermill.engines import NBClientEngine  # lazy: papermill.engines loads this module

        return NBClientEngine.nb_kernel_name(nb, name)

    @classmethod
    def nb_language(cls, nb, language=None):
        from papermill.engines import NBClientEngine  # lazy: papermill.engines loads this module

        return NBClientEngine.nb_language(nb, language)


def _make_default() -> None:
    engines = sys.modules.get("papermill.engines")  # loading us: papermill_engines exists
    if engines is None or not hasattr(engines, "papermill_engines"):
        import papermill.engines as engines  # lazy: loads our entry point (this module) too
    engines.papermill_engines.register(None, PerfbookEngine)


_make_default()
