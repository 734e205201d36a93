"""trace_overhead: the analysis (frames in, frames out): per-call costs, overheads, the step
decomposition, the host comparison, the published bare-metal benchmarks, and the chapter's Data
subclass (TraceData)."""

from __future__ import annotations

import math

import pandas as pd

from perfbook.analysis.findings import counted_runs
from perfbook.analysis.stats import caption, compare, compare_frame, cv, hosts_of, summarize_frame
from perfbook.data.dataset import Data, only_shown, quoted, shown_datasets
from perfbook.data.machine import host_pairs


class TraceData(Data):
    """The datasets, with a 'dataset' column (host/run) in every table."""

    def prepare(self, name, df):
        if len(df):
            df.insert(0, "dataset", df.host_id + "/" + df.run_id)
        return df


def summary_table(samples):
    """Per host and mechanism: median per-call ns with CI, percentiles, n."""
    t = summarize_frame(samples, ["dataset", "mechanism"], "ns_per_call")
    return t


def round_cv(samples):
    """Coefficient of variation of the per-round medians, per host and mechanism."""
    med = samples.groupby(["dataset", "mechanism", "round"])["ns_per_call"].median().reset_index()
    return (
        med.groupby(["dataset", "mechanism"])["ns_per_call"]
        .agg(rounds="count", cv=cv)
        .reset_index()
    )


def round_medians(samples):
    """Per round (rows) and mechanism (columns): the median ns per call of that round's batches.
    Each mechanism runs once per round, in one harness process, so its batches share that
    process: a round's median is the chapter's unit of repetition (key findings rest on it)."""
    return samples.groupby(["round", "mechanism"])["ns_per_call"].median().unstack("mechanism")


def overhead_table(samples, baseline: str = "none"):
    """Per dataset: each mechanism's cost above the baseline, from all its batches.

    perfbook.analysis.stats.compare: the Hodges-Lehmann shift (ns per call) with its
    distribution-free 95 % CI, the Mann-Whitney p-value, Cliff's delta and a verdict
    that says "not significant" where it is not.
    """
    t = compare_frame(
        samples, by="mechanism", value="ns_per_call", baseline=baseline, within="dataset"
    )
    return t.rename(
        columns={"shift": "overhead_ns", "shift_low": "ci_low", "shift_high": "ci_high"}
    )


def dataset_key(m: dict) -> str:
    """How a dataset is named in tables and plots: '<host id>/<run id>'."""
    return f"{m['host']['host_id']}/{m['run_id']}"


STEPS = [
    ("marker_buffer", "ring-buffer write of a marker", "marker - syscall"),
    ("syscall_entry", "system call of a 9-byte write", "syscall - none"),
    ("trap_emulate", "int3 trap + emulated push + event", "uprobe_push - none"),
    ("sstep", "single step out of line (vs emulation)", "uprobe - uprobe_push"),
    ("optimized", "optimized probe on nop5 (uprobe syscall)", "uprobe_nop5 - none"),
    ("ret", "return probe on top of the entry probe", "uretprobe - uprobe"),
    ("consumer_perf", "perf counting instead of an ftrace record", "perf_stat - uprobe"),
    ("consumer_bpf", "BPF count() instead of an ftrace record", "bpf_uprobe - uprobe"),
]


def decompose(samples, keys=None):
    """Differences between mechanisms that isolate one step each (ns per call).

    `samples` are one dataset's batches. Each step is compared with perfbook.analysis.stats.compare
    (Hodges-Lehmann shift with its 95 % CI, Mann-Whitney p); the verdict says "not
    significant" where the two mechanisms can't be told apart. `keys`: only those steps
    (a key finding reads one; each comparison sorts every pair of batches).
    """
    by = {m: g["ns_per_call"].to_numpy() for m, g in samples.groupby("mechanism")}
    rows = []
    for key, step, expr in STEPS if keys is None else [s for s in STEPS if s[0] in keys]:
        a, b = (x.strip() for x in expr.split("-"))
        row = {
            "key": key,
            "step": step,
            "computed as": expr,
            "ns": math.nan,
            "ci_low": math.nan,
            "ci_high": math.nan,
            "p_value": math.nan,
            "verdict": "not measured",
        }
        if a in by and b in by and len(by[a]) > 1 and len(by[b]) > 1:
            c = compare(by[a], by[b], names=(a, b))
            row.update(
                ns=c.shift,
                ci_low=c.shift_low,
                ci_high=c.shift_high,
                p_value=c.p_value,
                verdict=(
                    f"significant, {c.magnitude} effect"
                    if c.significant
                    else "not tested (too few rounds)"
                    if c.p_value != c.p_value
                    else "not significant"
                ),
            )
        rows.append(row)
    return pd.DataFrame(rows)


def host_comparison(samples, manifests, mechanisms=("marker", "uprobe")):
    """Each other host's newest dataset against the host the prose quotes (dataset.quoted),
    per mechanism, with perfbook.analysis.stats.compare."""
    if len(shown_datasets(manifests)) < 2:
        return pd.DataFrame()
    ref = quoted(manifests)
    sel = only_shown(samples, manifests)
    sel = sel[sel.mechanism.isin(mechanisms)]
    return compare_frame(
        sel,
        by="host_id",
        value="ns_per_call",
        baseline=ref["host"]["host_id"],
        within="mechanism",
        pair_check=host_pairs(manifests),
    )


def caption_for(samples, manifests, what: str, ci: bool = True, extra: str = "") -> str:
    """A figure caption from the data shown: batches per group, excluded warm-up, hosts."""
    n = samples.groupby(["dataset", "mechanism"]).size()
    excluded = []
    for m in manifests:
        q = m["parameters"]
        rounds = samples.loc[samples.dataset == dataset_key(m), "round"].nunique()
        wr = q.get("rep_warmup", 0)
        # untimed batches of every run, and whole warm-up rounds (timed, then dropped)
        excluded.append((rounds + wr) * q["warmup"] + wr * q["batches"])
    return caption(
        what,
        n=n.to_numpy(),
        unit="batches",
        warmup=excluded,
        hosts=hosts_of(manifests),
        ci=ci,
        extra=extra,
    )


def rounds_of(D):
    """Measured rounds per dataset ('host/run' -> n)."""
    return D["samples"].groupby("dataset")["round"].nunique()


BAREMETAL = "trace_overhead_baremetal"  # data/reference/trace_overhead_baremetal.csv


# the published benchmark's variant -> the row it is shown in (the probed instruction)
VARIANTS = {
    "uprobe-ret": "uprobe on `ret`",
    "uprobe-push": "uprobe on `push %rbp`",
    "uprobe-nop5": "uprobe on a 5-byte nop",
    "uretprobe-ret": "uretprobe on `ret`",
}


OUR_VARIANT = {
    "uprobe": "uprobe-ret",
    "uprobe_push": "uprobe-push",
    "uprobe_nop5": "uprobe-nop5",
    "uretprobe": "uretprobe-ret",
    "bpf_uprobe": "uprobe-ret",
}


def host_runs(D, host_id: str) -> list:
    """The datasets a host's figures rest on (perfbook.analysis.findings.counted_runs: real profiles first),
    oldest first."""
    return counted_runs([m for m in D.manifests if m.host_id == host_id])


def run_medians(D):
    """Per dataset and mechanism: the median ns per call with its CI, and host_id/run_id columns."""
    s = summary_table(D["samples"])
    parts = s["dataset"].str.split("/", n=1, expand=True)
    return s.assign(host_id=parts[0], run_id=parts[1])


def run_steps(D):
    """decompose() of every dataset: one row per dataset and step."""
    out = []
    for ds, g in D["samples"].groupby("dataset"):
        h, r = ds.split("/", 1)
        out.append(decompose(g).assign(dataset=ds, host_id=h, run_id=r))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def published(D):
    """The kernel developers' published uprobe benchmarks (bpf selftests' run_bench_uprobes.sh,
    quoted in the uprobe-syscall patch series), one row per figure, converted from the posted
    rate in million hits per second to nanoseconds per hit: ns_per_hit = 1000 / (M/s)."""
    ref = D.reference(BAREMETAL, dtype={"our_mechanism": str, "value": str, "plus_minus": str})
    ref["our_mechanism"] = ref["our_mechanism"].fillna("")
    ref["rate"] = ref["value"].astype(float)
    ref["ns_per_hit"] = 1000.0 / ref["rate"]  # M hits/s -> ns per hit
    ref["machine"] = [
        f"{c.split(' (')[0].split(' @')[0]} ({d[:4]})" for c, d in zip(ref.cpu, ref.date)
    ]
    return ref


def published_current(D):
    """Per published machine, the figures of the kernel state closest to the one measured here
    (the patch applied: the uretprobe syscall, or optimized nop5 uprobes): ns per hit of each
    variant, the single step (uprobe-ret minus uprobe-push) and the ret/push ratio."""
    ref = published(D)
    ref = ref[ref.patch_applied.astype(str) == "True"]
    rows = []
    for (machine, source), g in ref.groupby(["machine", "source"], sort=False):
        ns = g.set_index("bench_mechanism").ns_per_hit
        row = {
            "machine": machine,
            "source": source,
            "cpu": g.cpu.iloc[0],
            "date": g.date.iloc[0],
            **{k: ns.get(k, float("nan")) for k in VARIANTS},
        }
        row["sstep"] = row["uprobe-ret"] - row["uprobe-push"]
        row["ret_push"] = row["uprobe-ret"] / row["uprobe-push"]
        rows.append(row)
    return pd.DataFrame(rows)


# rows of the comparison: (our mechanism or step, the published variant, what it is)
COMPARED = [
    ("bpf_uprobe", "uprobe-ret", "uprobe on ret, BPF count"),
    ("uprobe", "uprobe-ret", "uprobe on ret, ftrace event"),
    ("uprobe_push", "uprobe-push", "uprobe on push %rbp, ftrace event"),
    ("uprobe_nop5", "uprobe-nop5", "uprobe on a 5-byte nop, ftrace event"),
    ("uretprobe", "uretprobe-ret", "uretprobe on ret, ftrace event"),
    ("sstep", "sstep", "single step (ret minus push)"),
]
