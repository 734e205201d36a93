"""Helpers the chapter notebooks call: parameter handling, collect-or-explain.

A chapter's first code cell (tagged 'parameters') sets mode/profile/data_dir
and its own overrides; the next cell calls run_mode(), which measures only in
collect mode and otherwise just says that it reads the committed data.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from .errors import MissingPrerequisite, ParameterError, install_notebook_handler
from .paths import resolve_data_dir

MODES = ("explain", "collect")


def setup_plots():
    import matplotlib
    import seaborn as sns
    matplotlib.rcParams.update({"figure.dpi": 96, "savefig.dpi": 96,
                                "figure.figsize": (8, 4.2), "svg.hashsalt": "perfbook"})
    sns.set_theme(style="whitegrid", context="notebook")


def init():
    """Call first in every chapter: one-line errors and the plot style."""
    install_notebook_handler()
    setup_plots()
    import pandas as pd
    pd.set_option("display.width", 120)
    pd.set_option("display.max_columns", 30)


def _status(chapter: str, status: str, detail: str) -> None:
    path = os.environ.get("PERFBOOK_STATUS_FILE")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"chapter": chapter, "status": status, "detail": detail}) + "\n")


def run_mode(module, mode: str, profile: str, data_dir: str, **overrides) -> Path | None:
    """Measure this host in collect mode; do nothing in explain mode."""
    if mode not in MODES:
        raise ParameterError(f"mode must be one of {MODES}, got {mode!r}")
    if profile not in module.PROFILES:
        raise ParameterError(f"profile must be one of {tuple(module.PROFILES)}, got {profile!r}")
    module.params(profile, **overrides)  # validates overrides in every mode
    data = resolve_data_dir(data_dir)
    if mode == "explain":
        print("explain mode: reading the committed datasets; nothing is measured.")
        return None
    try:
        out = module.collect(data_dir=data, profile=profile, **overrides)
    except MissingPrerequisite as e:
        print(f"SKIPPED: {e}")
        _status(module.CHAPTER, "skipped", str(e))
        return None
    _status(module.CHAPTER, "measured", str(out))
    print(f"new dataset: {out}")
    return out


def show_figure(fig, caption: str) -> None:
    """Display a figure followed by its caption (generated from data, see stats.caption)."""
    import matplotlib.pyplot as plt
    from IPython.display import Markdown, display
    display(fig)
    plt.close(fig)
    display(Markdown(f"**Figure.** {caption}"))
