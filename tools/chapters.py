"""The chapter registry: which notebook goes with which tools module.

The measure CLI walks this list. A chapter module provides:
  CHAPTER: str                  -- its dataset name (data/runs/<host>/<CHAPTER>/)
  TITLE: str
  PROFILES: dict[str, dict]     -- 'quick' (tests), 'default' (minutes), 'full'
  params(profile, **overrides) -> dict  -- merged, validated (ParameterError)
  preflight() -> list[str]      -- why collect can't run here (empty: it can)
  collect(data_dir=None, profile='default', **overrides) -> Path
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from .paths import repo_root


@dataclass(frozen=True)
class Chapter:
    name: str
    module: str
    notebook: str

    def load(self):
        return importlib.import_module(self.module)

    @property
    def path(self):
        return repo_root() / self.notebook


CHAPTERS: list[Chapter] = [
    Chapter("trace_overhead", "tools.trace_overhead", "chapters/trace_overhead.ipynb"),
    Chapter("tsc_alignment", "tools.tsc_alignment", "chapters/tsc_alignment.ipynb"),
    Chapter("netperf_latency", "tools.netperf_latency", "chapters/netperf_latency.ipynb"),
    Chapter("qcow2_overlap", "tools.qcow2_overlap", "chapters/qcow2_overlap.ipynb"),
    Chapter("iostat_internals", "tools.iostat_internals", "chapters/iostat_internals.ipynb"),
    Chapter("virtio_features", "tools.virtio_features", "chapters/virtio_features.ipynb"),
    Chapter("qemu_cache_modes", "tools.qemu_cache_modes", "chapters/qemu_cache_modes.ipynb"),
    Chapter("virtio_blk_latency", "tools.virtio_blk_latency", "chapters/virtio_blk_latency.ipynb"),
    Chapter("cpu_pinning", "tools.cpu_pinning", "chapters/cpu_pinning.ipynb"),
]


# Pages that read data/ but measure nothing: refreshed like the chapters.
PAGES: list[Chapter] = [
    Chapter("hosts", "tools.hosts", "hosts.ipynb"),
]


# The smallest chapter of the contract: not in the book or in `measure`, driven by
# tests/test_contract.py and shown in tools/README.md.
EXAMPLE = Chapter("example", "tools.example", "")


def by_name(name: str) -> Chapter:
    for c in CHAPTERS + PAGES + [EXAMPLE]:
        if c.name == name:
            return c
    from .errors import ParameterError
    raise ParameterError(f"unknown chapter {name!r}; known: {', '.join(c.name for c in CHAPTERS)}")
