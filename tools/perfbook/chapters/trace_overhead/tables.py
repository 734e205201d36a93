"""trace_overhead: the tables the page shows (D -> DataFrame), and the chapter's columns of the
runs table."""

from __future__ import annotations

import math

import pandas as pd

from perfbook.data.machine import legend

from .analysis import (
    COMPARED,
    dataset_key,
    decompose,
    host_comparison,
    host_runs,
    overhead_table,
    published_current,
    round_cv,
    rounds_of,
    run_medians,
    run_steps,
    summary_table,
)
from .parse import KERNEL_FEATURES, MECHANISMS


def run_columns(m, data) -> dict:
    """The chapter's columns of the shared runs table for dataset m (data: the Data of m alone)."""
    q = m["parameters"]
    return {
        "rounds x batches x calls": f"{rounds_of(data).get(dataset_key(m), 0)} x {q['batches']} x {q['iterations']}",
        "rounds": "adaptive" if "rep_target" in q else "fixed",
    }


def symbols_table(D):
    """Where the harness's probe targets are in its ELF file, and where `perf probe` put them."""
    q = D.quoted
    sym = pd.DataFrame(q.facts["symbols"]).T[
        ["elf_type", "vaddr", "seg_vaddr", "seg_offset", "file_offset"]
    ]
    sym = sym.map(lambda v: hex(v) if isinstance(v, int) else v)
    chk = q.facts.get("perf_probe_check") or {}
    sym["perf probe put it at"] = [
        hex(chk[s]["perf_probe"]) if chk.get(s, {}).get("perf_probe") is not None else "n/a"
        for s in sym.index
    ]
    return sym


def cost_table(D):
    """Per dataset and mechanism: the median cost per call with its CI and tail, and the
    overhead above the unprobed baseline with its CI."""
    summary, over = summary_table(D["samples"]), overhead_table(D["samples"])
    table = summary.merge(
        over[["dataset", "mechanism", "overhead_ns", "ci_low", "ci_high", "verdict"]],
        on=["dataset", "mechanism"],
        how="left",
        suffixes=("", "_over"),
    )
    table = table.rename(columns={"ci_low_over": "over_ci_low", "ci_high_over": "over_ci_high"})
    table = table[
        [
            "dataset",
            "mechanism",
            "n",
            "median",
            "ci_low",
            "ci_high",
            "p5",
            "p95",
            "p99",
            "overhead_ns",
            "over_ci_low",
            "over_ci_high",
        ]
    ]
    order = {m: i for i, m in enumerate(MECHANISMS)}
    table = table.sort_values(
        ["dataset", "mechanism"],
        key=lambda s: s.map(order) if s.name == "mechanism" else s,
        kind="stable",
    )
    return table.round(1).reset_index(drop=True)


def _with_ci(value, low, high) -> str:
    """'value [low, high]', one decimal; '-' where there is no value (none against itself)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.1f} [{low:.1f}, {high:.1f}]"


def cost_view(D):
    """cost_table() as shown: the key columns only, each estimate with its 95 % interval in one
    cell (the percentiles p5/p95/p99 stay in cost_table; the batches are in samples.csv)."""
    t = cost_table(D)
    return pd.DataFrame(
        {
            "dataset": t["dataset"],
            "mechanism": t["mechanism"],
            "n": t["n"],
            "median ns (95 % CI)": [
                _with_ci(*r) for r in zip(t["median"], t["ci_low"], t["ci_high"])
            ],
            "overhead ns (95 % CI)": [
                _with_ci(*r) for r in zip(t["overhead_ns"], t["over_ci_low"], t["over_ci_high"])
            ],
        }
    )


def steps_table(D):
    """decompose() of the quoted dataset, as shown."""
    steps = decompose(D["samples"][D["samples"].dataset == dataset_key(D.quoted)])
    return steps[["step", "computed as", "ns", "ci_low", "ci_high", "p_value", "verdict"]].round(
        {"ns": 0, "ci_low": 0, "ci_high": 0}
    )


def features_table(D):
    """Which uprobe fast paths each host's kernel has (from /proc/kallsyms at run time)."""
    feat = pd.DataFrame({"what it enables": KERNEL_FEATURES})
    for m in D.manifests:
        col = f"{m.host_id} (Linux {m['host']['kernel_release']})"
        feat[col] = [("yes" if m.facts["kernel_features"].get(k) else "no") for k in feat.index]
    return feat


def mitigations_table(D):
    """Each host's virtualization, KVM modules and the CPU mitigations that apply to it."""
    return (
        pd.DataFrame(
            [
                {
                    "host": m.host_id,
                    "virtualization": m["host"]["virtualization"],
                    "kvm_modules": " ".join(m["host"].get("kvm_modules", [])) or "not recorded",
                    **{
                        k: v
                        for k, v in m["host"]["mitigations"].items()
                        if not v.startswith("Not affected")
                    },
                }
                for m in D.manifests
            ]
        )
        .drop_duplicates("host")
        .set_index("host")
        .T
    )


def cv_table(D):
    return round_cv(D["samples"]).pivot(index="mechanism", columns="dataset", values="cv").round(3)


def host_table(D):
    hc = host_comparison(D["samples"], D.manifests)
    if not len(hc):
        return "no host comparison (see the text above)"
    return hc[
        [
            "mechanism",
            "host_id",
            "baseline",
            "median_a",
            "median_b",
            "shift",
            "shift_low",
            "shift_high",
            "cliffs_delta",
            "p_value",
            "verdict",
        ]
    ].round(3)


def host_label(D, host_id: str) -> str:
    """A host as tables and legends name it: its id and its kind (perfbook.data.machine.legend)."""
    return legend(host_runs(D, host_id)[-1]["host"])


def spread_table(D):
    """Per mechanism, for every host: the range of its per-run medians over its counted runs
    (the run-to-run spread) beside its newest run's median with the 95 % CI within that run."""
    med = run_medians(D)
    order = [m for m in MECHANISMS if m in set(med.mechanism)]
    out = pd.DataFrame(index=pd.Index(order, name="mechanism"))
    for h in D.hosts:
        runs = [m.run_id for m in host_runs(D, h)]
        g = med[(med.host_id == h) & med.run_id.isin(runs)]
        label = host_label(D, h)
        out[f"{label}: per-run medians, ns"] = [
            _range(dict(zip(x.run_id, x["median"]))) for x in (g[g.mechanism == m] for m in order)
        ]
        last = g[g.run_id == runs[-1]].set_index("mechanism").reindex(order)
        out[f"{label}: run {runs[-1]}, median (95 % CI)"] = [
            "n/a"
            if r["median"] != r["median"]
            else f"{r['median']:,.0f} ({r.ci_low:,.0f}–{r.ci_high:,.0f})"
            for _, r in last.iterrows()
        ]
    return out


def published_table(D):
    """The published figures beside ours, as shown: per variant, each published machine's ns per
    hit (1000 / the posted M/s) and the range of our per-run medians on every host."""
    pub = published_current(D).to_dict("records")
    med, steps = run_medians(D), run_steps(D)
    rows = []
    for mech, variant, label in COMPARED:
        row = {"variant": label, "ours": "uprobe - uprobe_push" if mech == "sstep" else mech}
        for p in pub:
            v = p[variant]
            row[f"{p['machine']}, published"] = "n/a" if v != v else f"{v:,.0f}"
        for h in D.hosts:
            runs = [m.run_id for m in host_runs(D, h)]
            if mech == "sstep":
                g = steps[(steps.host_id == h) & steps.run_id.isin(runs) & (steps.key == "sstep")]
                vals = dict(zip(g.run_id, g.ns))
            else:
                g = med[(med.host_id == h) & med.run_id.isin(runs) & (med.mechanism == mech)]
                vals = dict(zip(g.run_id, g["median"]))
            row[f"{host_label(D, h)}, ours"] = _range(vals)
        rows.append(row)
    return pd.DataFrame(rows).set_index("variant")


def _range(vals: dict) -> str:
    vals = [v for v in vals.values() if v == v]
    if not vals:
        return "n/a"
    lo, hi = min(vals), max(vals)
    return f"{lo:,.0f} (1 run)" if len(vals) == 1 else f"{lo:,.0f}–{hi:,.0f} ({len(vals)} runs)"
