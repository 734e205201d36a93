"""A pytest plugin for nbval (`-p perfbook.book.jupyter.nbval_plugin`, set in pyproject.toml's addopts).

nbval compares every stored output except images. A figure glued for a numbered figure
(perfbook.book.notebook.figure) is stored as `application/papermill.record/image/png`, which nbval
does not know to be an image; its pixels are as unportable as any PNG's, so it is skipped
like one. Its caption (text) is still compared.

nbval's --nbval-current-env kernel (what `make test` uses) is ipykernel's own kernelspec, which
names no kernel provisioner: jupyter_client then takes its default, which this plugin makes
perfbook's (perfbook.book.jupyter.provisioner, through jupyter_client's JUPYTER_DEFAULT_PROVISIONER_NAME), so
that nbval's kernels, too, are reached over Unix sockets in the private state directory and
never listen on TCP. Processes the tests start inherit it.

With --nbval, nbval's kernels (and only they) run as another machine (perfbook.book.jupyter.othermachine: rows
shuffled, numpy's baseline code path, another OpenBLAS kernel set, host id, clock and time zone),
so the one nbval pass also checks that the stored outputs are portable; the report's header says
what was changed. --nbval-this-machine keeps this machine's environment (to tell a portability
failure from any other).
"""

import os
from contextlib import contextmanager

import pytest

from perfbook.book.jupyter.kernel import PROVISIONER

GLUED_IMAGES = ("application/papermill.record/image/png", "application/papermill.record/image/jpeg")


def pytest_collection_modifyitems(items):
    for item in items:
        parent = getattr(item, "parent", None)
        skip = getattr(parent, "skip_compare", None)
        if skip is not None and "image/png" in skip and GLUED_IMAGES[0] not in skip:
            parent.skip_compare = tuple(skip) + GLUED_IMAGES


_CHANGED: list[str] = []
_OTHER: dict[str, str] = {}  # the other machine's environment, for nbval's kernels


def pytest_addoption(parser):
    parser.addoption(
        "--nbval-this-machine",
        action="store_true",
        help="run nbval's kernels in this machine's environment, not as another machine",
    )


def pytest_configure(config):
    os.environ.setdefault("JUPYTER_DEFAULT_PROVISIONER_NAME", PROVISIONER)
    if getattr(config.option, "nbval", False) and not config.getoption("nbval_this_machine"):
        from perfbook.book.jupyter.othermachine import other_machine_env  # lazy: numpy

        env, said = other_machine_env()
        _OTHER.update(env)
        _CHANGED[:] = said


def _nbval_cell(item) -> bool:
    return type(getattr(item, "parent", None)).__module__.startswith("nbval")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    """nbval starts a notebook's kernel in its first cell's setup (IPyNbFile.setup): only
    while an nbval cell is set up or run do the kernels this process starts run as the other
    machine. The kernels of the other tests (papermill's in the rerun story, which is about
    another host's data, not another machine) are this machine's, and may be forked from the
    zygote. (One of those, under libfaketime, died before it answered in a full run.)"""
    with _as_other_machine(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    with _as_other_machine(item):
        yield


@contextmanager
def _as_other_machine(item):
    if not (_OTHER and _nbval_cell(item)):
        yield
        return
    from perfbook.book.jupyter import provisioner  # lazy: jupyter_client

    provisioner.EXTRA_ENV.update(_OTHER)
    try:
        yield
    finally:
        for k in _OTHER:
            provisioner.EXTRA_ENV.pop(k, None)


def pytest_report_header(config):
    if _CHANGED:
        return "nbval's kernels run as another machine: " + "; ".join(_CHANGED)
