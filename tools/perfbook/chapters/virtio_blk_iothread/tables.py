"""virtio_blk_iothread: the tables the page shows (D -> DataFrame), and the runs table's columns."""

from __future__ import annotations

from .analysis import (
    bonnie_beside_seed,
    boots_table,
    cpu_rates,
    dataset_key,
    every_effect,
    in_job_order,
    table,
)

CLASSES = (
    "main",
    "vcpu",
    "iothread",
    "monitor",
    "worker",
    "other",
    "exited",
)  # the CPU table's columns


def cpu_table(D, dataset: str | None = None):
    """The quoted dataset's CPU per thread class (s per s of job), a column per class."""
    r = cpu_rates(table(D, "threads"))
    r = r[r.dataset == (dataset or dataset_key(D.quoted))]
    w = r.pivot_table(
        index=["job", "storm", "variant"], columns="cls", values="rate", aggfunc="first"
    )
    w = w[[c for c in CLASSES if c in w.columns]]
    return in_job_order(w.reset_index()).set_index(["job", "storm", "variant"]).round(3)


def effects_table(D):
    """Every dataset's on/off effects (analysis.effects: one value per boot, at one event_idx
    per row), n_on and n_off in boots."""
    e = every_effect(D)
    if not len(e):
        return e
    t = e[
        [
            "dataset",
            "job",
            "storm",
            "event_idx",
            "n_a",
            "n_b",
            "median_b",
            "median_a",
            "rel_shift",
            "rel_low",
            "rel_high",
            "p_value",
            "cliffs_delta",
        ]
    ].copy()
    for c in ("rel_shift", "rel_low", "rel_high"):
        t[c] = (100 * t[c]).round(1)
    t = t.rename(
        columns={
            "n_a": "n_on",
            "n_b": "n_off",
            "median_b": "iops_off",
            "median_a": "iops_on",
            "rel_shift": "on_vs_off_%",
            "rel_low": "ci_low_%",
            "rel_high": "ci_high_%",
        }
    )
    return t.round({"iops_off": 0, "iops_on": 0, "p_value": 4, "cliffs_delta": 2}).reset_index(
        drop=True
    )


def bonnie_table(D):
    """The seed's bonnie++ figures beside the quoted dataset's (analysis.bonnie_beside_seed)."""
    return bonnie_beside_seed(D)


def run_columns(m, data) -> dict:
    p = m["parameters"]
    b = boots_table(data)
    b = b[b.dataset == dataset_key(m)] if len(b) else b
    return {
        "boots": len(b),
        "accel": ", ".join(sorted(set(b.accel))) if len(b) else "n/a",
        "fio": f"{p['runtime_ms']} ms × {p['repeats']} per boot",
        "disk": f"{p['cache']}/{p['aio']}",
        "event_idx": ", ".join(sorted(set(b.event_idx))) if len(b) else "n/a",
    }
