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
"""

import os

from perfbook.book.jupyter.kernel import PROVISIONER

GLUED_IMAGES = ("application/papermill.record/image/png", "application/papermill.record/image/jpeg")


def pytest_collection_modifyitems(items):
    for item in items:
        parent = getattr(item, "parent", None)
        skip = getattr(parent, "skip_compare", None)
        if skip is not None and "image/png" in skip and GLUED_IMAGES[0] not in skip:
            parent.skip_compare = tuple(skip) + GLUED_IMAGES


def pytest_configure(config):
    os.environ.setdefault("JUPYTER_DEFAULT_PROVISIONER_NAME", PROVISIONER)
