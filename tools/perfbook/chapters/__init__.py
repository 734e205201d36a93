"""The chapters, one package each (tools/perfbook/chapters/<name>/), and their registry.

Each package defines `chapter`, an instance of a perfbook.framework.contract.Chapter subclass (the
contract: declared parameters and tables, preflight(), measure(ctx), load()). The measure
CLI, the tests and the site walk CHAPTERS. No chapter imports another: what two chapters
need lives in the layers below (perfbook.analysis and down).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from perfbook.core.errors import ParameterError
from perfbook.core.paths import repo_root


@dataclass(frozen=True)
class Entry:
    name: str
    module: str
    notebook: str

    def load(self):
        """The chapter object (perfbook.framework.contract.Chapter); a page's module."""
        mod = importlib.import_module(self.module)
        return getattr(mod, "chapter", mod)

    def package(self):
        return importlib.import_module(self.module)

    @property
    def path(self):
        return repo_root() / self.notebook


CHAPTERS: list[Entry] = [
    Entry("trace_overhead", "perfbook.chapters.trace_overhead", "chapters/trace_overhead.ipynb"),
    Entry(
        "iostat_internals", "perfbook.chapters.iostat_internals", "chapters/iostat_internals.ipynb"
    ),
    Entry(
        "qemu_cache_modes", "perfbook.chapters.qemu_cache_modes", "chapters/qemu_cache_modes.ipynb"
    ),
    Entry("qcow2_overlap", "perfbook.chapters.qcow2_overlap", "chapters/qcow2_overlap.ipynb"),
    Entry(
        "virtio_blk_latency",
        "perfbook.chapters.virtio_blk_latency",
        "chapters/virtio_blk_latency.ipynb",
    ),
    Entry(
        "virtio_blk_iothread",
        "perfbook.chapters.virtio_blk_iothread",
        "chapters/virtio_blk_iothread.ipynb",
    ),
    Entry("virtio_features", "perfbook.chapters.virtio_features", "chapters/virtio_features.ipynb"),
    Entry("tsc_alignment", "perfbook.chapters.tsc_alignment", "chapters/tsc_alignment.ipynb"),
    Entry("netperf_latency", "perfbook.chapters.netperf_latency", "chapters/netperf_latency.ipynb"),
    Entry("cpu_pinning", "perfbook.chapters.cpu_pinning", "chapters/cpu_pinning.ipynb"),
    Entry("sched_callers", "perfbook.chapters.sched_callers", "chapters/sched_callers.ipynb"),
]


# Pages that read data/ but measure nothing: refreshed like the chapters.
PAGES: list[Entry] = [
    Entry("summary", "perfbook.book.summary", "summary.ipynb"),
    Entry("hosts", "perfbook.analysis.hosts", "hosts.ipynb"),
]


# The smallest chapter of the contract, the one to copy: not in the book (_toc.yml) or in a
# bare `measure`, driven by tests/test_contract.py and tests/test_example.py, shown in
# tools/README.md. Its notebook is refreshed by name (`perfbook refresh --chapters example`).
EXAMPLE = Entry("example", "perfbook.chapters.example", "chapters/example.ipynb")


def by_name(name: str) -> Entry:
    for c in CHAPTERS + PAGES + [EXAMPLE]:
        if c.name == name:
            return c
    raise ParameterError(f"unknown chapter {name!r}; known: {', '.join(c.name for c in CHAPTERS)}")


def plan_seconds(chapter, profile: str) -> int | None:
    """The seconds `chapter` (a Chapter or its name) is planned to take under `profile`: its
    `plan_s` (perfbook.framework.contract.Chapter); None for "full", which takes as long as its
    targets need. Here, beside the registry, so that `perfbook measure` reads it without loading
    the summary page (pandas, IPython: an IPython in the measure process printed a traceback
    when a signal landed in its exit hook)."""
    if isinstance(chapter, str):
        chapter = by_name(chapter).load()
    return (getattr(chapter, "plan_s", None) or {}).get(profile)
