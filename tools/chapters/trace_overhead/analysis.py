"""trace_overhead: the analysis (frames in, frames and the prose's findings out)."""
from __future__ import annotations

from .spec import KERNEL_FEATURES, MECHANISMS

def summary_table(samples):
    """Per host and mechanism: median per-call ns with CI, percentiles, n."""
    from ...stats import summarize_frame
    t = summarize_frame(samples, ["dataset", "mechanism"], "ns_per_call")
    return t


def round_cv(samples):
    """Coefficient of variation of the per-round medians, per host and mechanism."""
    from ...stats import cv
    med = samples.groupby(["dataset", "mechanism", "round"])["ns_per_call"].median().reset_index()
    return (med.groupby(["dataset", "mechanism"])["ns_per_call"]
               .agg(rounds="count", cv=cv).reset_index())


def overhead_table(samples, baseline: str = "none"):
    """Per dataset: each mechanism's cost above the baseline, from all its batches.

    tools.stats.compare: the Hodges-Lehmann shift (ns per call) with its
    distribution-free 95 % CI, the Mann-Whitney p-value, Cliff's delta and a verdict
    that says "not significant" where it is not.
    """
    from ...stats import compare_frame
    t = compare_frame(samples, by="mechanism", value="ns_per_call", baseline=baseline,
                      within="dataset")
    return t.rename(columns={"shift": "overhead_ns", "shift_low": "ci_low", "shift_high": "ci_high"})


def dataset_key(m: dict) -> str:
    """How a dataset is named in tables and plots: '<host id>/<run id>'."""
    return f"{m['host']['host_id']}/{m['run_id']}"


def host_labels(manifests: list[dict]) -> dict[str, str]:
    out = {}
    for m in sorted(manifests, key=lambda m: m["run_id"]):
        h = m["host"]
        out[dataset_key(m)] = f"{dataset_key(m)}: {h['description']}, Linux {h['kernel_release']}"
    return out


def comparison(summary, reference, manifests):
    """Seed vs our hosts, per mechanism, in microseconds per call (tidy)."""
    import pandas as pd
    ref = reference[reference.run == "uprobe-based event tracer"]
    rows = [{"source": f"seed 2013 ({r.seed_file[:3]}), Linux 3.x", "mechanism": r.mechanism,
             "per_call_us": r.per_call_us} for r in ref.itertuples()]
    st = reference[reference.mechanism == "systemtap"]
    rows += [{"source": f"seed 2013 ({r.seed_file[:3]}), Linux 3.x", "mechanism": "systemtap / BPF",
              "per_call_us": r.per_call_us} for r in st.itertuples()]
    labels = {dataset_key(m): f"{dataset_key(m)}, Linux {m['host']['kernel_release']}"
              for m in manifests}
    for r in summary.itertuples():
        mech = {"bpf_uprobe": "systemtap / BPF"}.get(r.mechanism, r.mechanism)
        if mech in ("none", "marker", "uprobe", "systemtap / BPF"):
            rows.append({"source": labels.get(r.dataset, r.dataset), "mechanism": mech,
                         "per_call_us": r.median / 1000})
    return pd.DataFrame(rows)


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


def decompose(samples):
    """Differences between mechanisms that isolate one step each (ns per call).

    `samples` are one dataset's batches. Each step is compared with tools.stats.compare
    (Hodges-Lehmann shift with its 95 % CI, Mann-Whitney p); the verdict says "not
    significant" where the two mechanisms can't be told apart.
    """
    import math
    import pandas as pd
    from ...stats import compare
    by = {m: g["ns_per_call"].to_numpy() for m, g in samples.groupby("mechanism")}
    rows = []
    for key, step, expr in STEPS:
        a, b = (x.strip() for x in expr.split("-"))
        row = {"key": key, "step": step, "computed as": expr, "ns": math.nan,
               "ci_low": math.nan, "ci_high": math.nan, "p_value": math.nan, "verdict": "not measured"}
        if a in by and b in by and len(by[a]) > 1 and len(by[b]) > 1:
            c = compare(by[a], by[b], names=(a, b))
            row.update(ns=c.shift, ci_low=c.shift_low, ci_high=c.shift_high, p_value=c.p_value,
                       verdict="not significant" if not c.significant else
                       f"significant, {c.magnitude} effect")
        rows.append(row)
    return pd.DataFrame(rows)


def host_comparison(samples, manifests, mechanisms=("marker", "uprobe")):
    """Each other host's newest dataset against the host the prose quotes (dataset.quoted),
    per mechanism, with tools.stats.compare."""
    import pandas as pd
    from ...dataset import only_shown, quoted, shown_datasets
    from ...stats import compare_frame
    if len(shown_datasets(manifests)) < 2:
        return pd.DataFrame()
    ref = quoted(manifests)
    sel = only_shown(samples, manifests)
    sel = sel[sel.mechanism.isin(mechanisms)]
    from ...machine import host_pairs
    return compare_frame(sel, by="host_id", value="ns_per_call", baseline=ref["host"]["host_id"],
                         within="mechanism", pair_check=host_pairs(manifests))


def caption_for(samples, manifests, what: str, ci: bool = True, extra: str = "") -> str:
    """A figure caption from the data shown: batches per group, excluded warm-up, hosts."""
    from ...stats import caption, hosts_of
    n = samples.groupby(["dataset", "mechanism"]).size()
    excluded = []
    for m in manifests:
        q = m["parameters"]
        rounds = samples.loc[samples.dataset == dataset_key(m), "round"].nunique()
        wr = q.get("rep_warmup", 0)
        # untimed batches of every run, and whole warm-up rounds (timed, then dropped)
        excluded.append((rounds + wr) * q["warmup"] + wr * q["batches"])
    return caption(what, n=n.to_numpy(), unit="batches", warmup=excluded,
                   hosts=hosts_of(manifests), ci=ci, extra=extra)


# ---- what the chapter shows -------------------------------------------------------------

def rounds_of(D):
    """Measured rounds per dataset ('host/run' -> n)."""
    return D["samples"].groupby("dataset")["round"].nunique()


def runs_columns(m, D) -> dict:
    """The chapter's columns of the shared runs table."""
    q = m["parameters"]
    return {"rounds x batches x calls": f'{rounds_of(D).get(dataset_key(m), 0)} x {q["batches"]} x {q["iterations"]}',
            "rounds": "adaptive" if "rep_target" in q else "fixed"}


def symbols_table(D):
    """Where the harness's probe targets are in its ELF file, and where `perf probe` put them."""
    import pandas as pd
    q = D.quoted
    sym = pd.DataFrame(q.facts["symbols"]).T[["elf_type", "vaddr", "seg_vaddr", "seg_offset", "file_offset"]]
    sym = sym.map(lambda v: hex(v) if isinstance(v, int) else v)
    chk = q.facts.get("perf_probe_check") or {}
    sym["perf probe put it at"] = [hex(chk[s]["perf_probe"]) if chk.get(s, {}).get("perf_probe") is not None
                                   else "n/a" for s in sym.index]
    return sym


def cost_table(D):
    """Per dataset and mechanism: the median cost per call with its CI and tail, and the
    overhead above the unprobed baseline with its CI."""
    summary, over = summary_table(D["samples"]), overhead_table(D["samples"])
    table = summary.merge(over[["dataset", "mechanism", "overhead_ns", "ci_low", "ci_high", "verdict"]],
                          on=["dataset", "mechanism"], how="left", suffixes=("", "_over"))
    table = table.rename(columns={"ci_low_over": "over_ci_low", "ci_high_over": "over_ci_high"})
    table = table[["dataset", "mechanism", "n", "median", "ci_low", "ci_high", "p5", "p95", "p99",
                   "overhead_ns", "over_ci_low", "over_ci_high"]]
    order = {m: i for i, m in enumerate(MECHANISMS)}
    table = table.sort_values(["dataset", "mechanism"],
                              key=lambda s: s.map(order) if s.name == "mechanism" else s)
    return table.round(1).reset_index(drop=True)


def steps_table(D):
    """decompose() of the quoted dataset, as shown."""
    steps = decompose(D["samples"][D["samples"].dataset == dataset_key(D.quoted)])
    return steps[["step", "computed as", "ns", "ci_low", "ci_high", "p_value", "verdict"]].round(
        {"ns": 0, "ci_low": 0, "ci_high": 0})


def features_table(D):
    """Which uprobe fast paths each host's kernel has (from /proc/kallsyms at run time)."""
    import pandas as pd
    feat = pd.DataFrame({"what it enables": KERNEL_FEATURES})
    for m in D.manifests:
        col = f'{m.host_id} (Linux {m["host"]["kernel_release"]})'
        feat[col] = [("yes" if m.facts["kernel_features"].get(k) else "no") for k in feat.index]
    return feat


def mitigations_table(D):
    """Each host's virtualization, KVM modules and the CPU mitigations that apply to it."""
    import pandas as pd
    return pd.DataFrame([{"host": m.host_id, "virtualization": m["host"]["virtualization"],
                          "kvm_modules": " ".join(m["host"].get("kvm_modules", [])) or "not recorded",
                          **{k: v for k, v in m["host"]["mitigations"].items()
                             if not v.startswith("Not affected")}}
                         for m in D.manifests]).drop_duplicates("host").set_index("host").T


def cv_table(D):
    return round_cv(D["samples"]).pivot(index="mechanism", columns="dataset", values="cv").round(3)


def host_table(D):
    hc = host_comparison(D["samples"], D.manifests)
    if not len(hc):
        return "no host comparison (see the text above)"
    return hc[["mechanism", "host_id", "baseline", "median_a", "median_b", "shift", "shift_low",
               "shift_high", "cliffs_delta", "p_value", "verdict"]].round(3)


def findings(D) -> dict:
    """Every value the prose quotes, formatted as it shows."""
    samples, q = D["samples"], D.quoted
    p, h = q["parameters"], dataset_key(q)
    f = {"n_datasets": len(D), "n_hosts": len(D.hosts), "p_iterations": f"{p['iterations']:,}",
         "p_batches": p["batches"], "p_rounds": int(rounds_of(D)[h]), "p_warmup": p["warmup"],
         "p_cpu": p["pin_cpu"], "newest_host": q.host_id, "newest_desc": q["host"]["description"],
         "newest_kernel": q["host"]["kernel_release"], "newest_virt": q["host"]["virtualization"],
         "newest_date": q["started"][:10]}
    chk = q.facts.get("perf_probe_check") or {}
    f["perf_wrong"] = sum(1 for s in chk.values() if s.get("perf_probe") not in (None, s["pyelftools"]))
    f["perf_version"] = q["tools"].get("perf") or "perf (not installed)"
    over_all = overhead_table(samples)
    f["n_not_sig"] = int((~over_all["significant"]).sum())
    S = summary_table(samples)
    S = S[S.dataset == h].set_index("mechanism")
    O = over_all[over_all.dataset == h].set_index("mechanism")
    for m in S.index:
        f[f"med_{m}"] = f"{S.loc[m, 'median']:,.0f}"
        f[f"lo_{m}"] = f"{S.loc[m, 'ci_low']:,.0f}"
        f[f"hi_{m}"] = f"{S.loc[m, 'ci_high']:,.0f}"
        f[f"us_{m}"] = f"{S.loc[m, 'median'] / 1000:.2f}"
        f[f"over_{m}"] = f"{O.loc[m, 'overhead_ns']:,.0f}" if m in O.index else "0"
    f["none_ns"] = f"{S.loc['none', 'median']:.1f}"
    timer = samples[samples.dataset == h].timer_ns.median()
    f["timer_ns"] = f"{timer:.0f}"
    f["timer_per_call"] = f"{timer / p['iterations']:.4f}"
    ref = D.reference("trace_overhead")
    seed = ref[ref.run == "uprobe-based event tracer"].set_index("mechanism").per_call_us
    f["seed_marker"] = f"{seed['marker']:.2f}"
    f["seed_uprobe"] = f"{seed['uprobe']:.2f}"
    f["seed_stap"] = f"{ref[ref.mechanism == 'systemtap'].per_call_us.iloc[0]:.2f}"
    f["seed_none_ns"] = f"{seed['none'] * 1000:.0f}"
    f["seed_ratio"] = f"{seed['uprobe'] / seed['marker']:.1f}"
    f["our_ratio"] = f"{S.loc['uprobe', 'median'] / S.loc['marker', 'median']:.1f}"
    for r in decompose(samples[samples.dataset == h]).itertuples():
        f[f"step_{r.key}"] = "n/a" if r.ns != r.ns else f"{r.ns:,.0f}"
        f[f"step_{r.key}_verdict"] = r.verdict
    cvs = round_cv(samples)
    mc = cvs[(cvs.dataset == h) & (cvs.mechanism == "marker")].iloc[0]
    f["marker_cv"] = f"{mc.cv:.3f}"
    f["marker_cv_n"] = int(mc.rounds)
    c = D["checks"].dropna(subset=["expected_hits"])
    c = c[c.dataset == h]
    f["checks_ok"] = int((c.expected_hits == c.observed_hits).sum())
    f["checks_n"] = len(c)
    hc = host_comparison(samples, D.manifests)
    f["host_sentence"] = ("Only one host has measured this chapter so far, so there is nothing to compare yet."
                          if len(D.hosts) < 2 else "The other hosts' datasets are too small for a rank "
                          "comparison." if hc.empty else
                          "; ".join(f"{r.mechanism}: {r.verdict}" for r in hc.itertuples()) + ".")
    return f
