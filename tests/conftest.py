"""Shared test helpers: skips that say why, and a scratch data directory."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def need_root(reason_what: str = "this test") -> None:
    if os.geteuid() != 0:
        pytest.skip(f"{reason_what} needs root (kernel interfaces); run the tests as root to include it")


def need_tool(name: str, package: str | None = None) -> str:
    exe = shutil.which(name)
    if not exe:
        pytest.skip(f"{name} is not installed (apt-get install {package or name}); tools/setup.sh installs it as root")
    return exe


def need_preflight(module) -> None:
    """Skip with the chapter's own reason when it can't collect on this host."""
    reasons = module.preflight()
    if reasons:
        pytest.skip(f"{module.CHAPTER} can't collect here: {reasons[0]}")


@pytest.fixture
def scratch_data(tmp_path):
    """An empty data directory (runs/ inside it) for collect runs in tests."""
    d = tmp_path / "data"
    (d / "runs").mkdir(parents=True)
    return d
