"""trace_overhead: the analysis (frames in, frames and the prose's findings out)."""
from __future__ import annotations

from .spec import KERNEL_FEATURES, MECHANISMS

def summary_table(samples):
    """Per host and mechanism: median per-call ns with CI, percentiles, n."""
    from perfbook.analysis.stats import summarize_frame
    t = summarize_frame(samples, ["dataset", "mechanism"], "ns_per_call")
    return t


def round_cv(samples):
    """Coefficient of variation of the per-round medians, per host and mechanism."""
    from perfbook.analysis.stats import cv
    med = samples.groupby(["dataset", "mechanism", "round"])["ns_per_call"].median().reset_index()
    return (med.groupby(["dataset", "mechanism"])["ns_per_call"]
               .agg(rounds="count", cv=cv).reset_index())


def overhead_table(samples, baseline: str = "none"):
    """Per dataset: each mechanism's cost above the baseline, from all its batches.

    perfbook.analysis.stats.compare: the Hodges-Lehmann shift (ns per call) with its
    distribution-free 95 % CI, the Mann-Whitney p-value, Cliff's delta and a verdict
    that says "not significant" where it is not.
    """
    from perfbook.analysis.stats import compare_frame
    t = compare_frame(samples, by="mechanism", value="ns_per_call", baseline=baseline,
                      within="dataset")
    return t.rename(columns={"shift": "overhead_ns", "shift_low": "ci_low", "shift_high": "ci_high"})


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
    import math
    import pandas as pd
    from perfbook.analysis.stats import compare
    by = {m: g["ns_per_call"].to_numpy() for m, g in samples.groupby("mechanism")}
    rows = []
    for key, step, expr in STEPS if keys is None else [s for s in STEPS if s[0] in keys]:
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
    per mechanism, with perfbook.analysis.stats.compare."""
    import pandas as pd
    from perfbook.data.dataset import only_shown, quoted, shown_datasets
    from perfbook.analysis.stats import compare_frame
    if len(shown_datasets(manifests)) < 2:
        return pd.DataFrame()
    ref = quoted(manifests)
    sel = only_shown(samples, manifests)
    sel = sel[sel.mechanism.isin(mechanisms)]
    from perfbook.data.machine import host_pairs
    return compare_frame(sel, by="host_id", value="ns_per_call", baseline=ref["host"]["host_id"],
                         within="mechanism", pair_check=host_pairs(manifests))


def caption_for(samples, manifests, what: str, ci: bool = True, extra: str = "") -> str:
    """A figure caption from the data shown: batches per group, excluded warm-up, hosts."""
    from perfbook.analysis.stats import caption, hosts_of
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
                              key=lambda s: s.map(order) if s.name == "mechanism" else s, kind="stable")
    return table.round(1).reset_index(drop=True)


def _with_ci(value, low, high) -> str:
    """'value [low, high]', one decimal; '-' where there is no value (none against itself)."""
    import math
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.1f} [{low:.1f}, {high:.1f}]"


def cost_view(D):
    """cost_table() as shown: the key columns only, each estimate with its 95 % interval in one
    cell (the percentiles p5/p95/p99 stay in cost_table; the batches are in samples.csv)."""
    import pandas as pd
    t = cost_table(D)
    return pd.DataFrame({
        "dataset": t["dataset"], "mechanism": t["mechanism"], "n": t["n"],
        "median ns (95 % CI)": [_with_ci(*r) for r in zip(t["median"], t["ci_low"], t["ci_high"])],
        "overhead ns (95 % CI)": [_with_ci(*r) for r in zip(t["overhead_ns"], t["over_ci_low"],
                                                          t["over_ci_high"])]})


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
    # one round has no spread between rounds (a run whose time budget was spent after it)
    f["marker_cv"] = (f"{mc.cv:.3f} over {int(mc.rounds)} rounds" if mc.rounds >= 2 and mc.cv == mc.cv else
                      "not defined, as the run has one round")
    c = D["checks"].dropna(subset=["expected_hits"])
    c = c[c.dataset == h]
    f["checks_ok"] = int((c.expected_hits == c.observed_hits).sum())
    f["checks_n"] = len(c)
    f.update(_host_spread(D, q))
    f.update(_published_findings(D))
    f["virt_note"] = virt_note(q["host"])
    tp = S.drop(index=[k for k in ("none", "syscall") if k in S.index])["median"]
    share = (S.loc["none", "median"] + timer / p["iterations"]) / tp.min()
    f["harness_share"] = (f"{share * 100:.1f} % of the cheapest trace point in this run "
                          f"({tp.idxmin()}, {tp.min():,.0f} ns)")
    hc = host_comparison(samples, D.manifests)
    f["host_sentence"] = ("Only one host has measured this chapter so far, so there is nothing to compare yet."
                          if len(D.hosts) < 2 else "The other hosts' datasets are too small for a rank "
                          "comparison." if hc.empty else
                          "; ".join(f"{r.mechanism}: {r.verdict}" for r in hc.itertuples()) + ".")
    return f


# ---- runs of one host, and the published bare-metal benchmarks ----------------------------

BAREMETAL = "trace_overhead_baremetal"   # data/reference/trace_overhead_baremetal.csv
# the published benchmark's variant -> the row it is shown in (the probed instruction)
VARIANTS = {"uprobe-ret": "uprobe on `ret`", "uprobe-push": "uprobe on `push %rbp`",
            "uprobe-nop5": "uprobe on a 5-byte nop", "uretprobe-ret": "uretprobe on `ret`"}
OUR_VARIANT = {"uprobe": "uprobe-ret", "uprobe_push": "uprobe-push", "uprobe_nop5": "uprobe-nop5",
               "uretprobe": "uretprobe-ret", "bpf_uprobe": "uprobe-ret"}


def host_runs(D, host_id: str) -> list:
    """The datasets a host's figures rest on (perfbook.analysis.findings.counted_runs: real profiles first),
    oldest first."""
    from perfbook.analysis.findings import counted_runs
    return counted_runs([m for m in D.manifests if m.host_id == host_id])


def run_medians(D):
    """Per dataset and mechanism: the median ns per call with its CI, and host_id/run_id columns."""
    s = summary_table(D["samples"])
    parts = s["dataset"].str.split("/", n=1, expand=True)
    return s.assign(host_id=parts[0], run_id=parts[1])


def run_steps(D):
    """decompose() of every dataset: one row per dataset and step."""
    import pandas as pd
    out = []
    for ds, g in D["samples"].groupby("dataset"):
        h, r = ds.split("/", 1)
        out.append(decompose(g).assign(dataset=ds, host_id=h, run_id=r))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def spread(values: dict, fmt=lambda v: f"{v:,.0f}", unit=" ns") -> str:
    """The run-to-run spread of one quantity on one host, as the prose shows it: the range of
    the per-run values with the runs that gave its ends, or the single run it comes from."""
    vals = {r: v for r, v in values.items() if v == v}
    if not vals:
        return "not measured"
    if len(vals) == 1:
        (r, v), = vals.items()
        return f"{fmt(v)}{unit} (one run, {r})"
    lo, hi = min(vals, key=vals.get), max(vals, key=vals.get)
    return (f"{fmt(vals[lo])}–{fmt(vals[hi])}{unit} across {len(vals)} runs "
            f"(lowest in run {lo}, highest in run {hi})")


def spread_table(D):
    """Per mechanism, for every host: the range of its per-run medians over its counted runs
    (the run-to-run spread) beside its newest run's median with the 95 % CI within that run."""
    import pandas as pd
    med = run_medians(D)
    order = [m for m in MECHANISMS if m in set(med.mechanism)]
    out = pd.DataFrame(index=pd.Index(order, name="mechanism"))
    for h in D.hosts:
        runs = [m.run_id for m in host_runs(D, h)]
        g = med[(med.host_id == h) & med.run_id.isin(runs)]
        label = host_label(D, h)
        out[f"{label}: per-run medians, ns"] = [
            _range(dict(zip(x.run_id, x["median"]))) for x in (g[g.mechanism == m] for m in order)]
        last = g[g.run_id == runs[-1]].set_index("mechanism").reindex(order)
        out[f"{label}: run {runs[-1]}, median (95 % CI)"] = [
            "n/a" if r["median"] != r["median"] else f"{r['median']:,.0f} ({r.ci_low:,.0f}–{r.ci_high:,.0f})"
            for _, r in last.iterrows()]
    return out


def published(D):
    """The kernel developers' published uprobe benchmarks (bpf selftests' run_bench_uprobes.sh,
    quoted in the uprobe-syscall patch series), one row per figure, converted from the posted
    rate in million hits per second to nanoseconds per hit: ns_per_hit = 1000 / (M/s)."""
    ref = D.reference(BAREMETAL, dtype={"our_mechanism": str, "value": str, "plus_minus": str})
    ref["our_mechanism"] = ref["our_mechanism"].fillna("")
    ref["rate"] = ref["value"].astype(float)
    ref["ns_per_hit"] = 1000.0 / ref["rate"]                    # M hits/s -> ns per hit
    ref["machine"] = [f"{c.split(' (')[0].split(' @')[0]} ({d[:4]})" for c, d in zip(ref.cpu, ref.date)]
    return ref


def published_current(D):
    """Per published machine, the figures of the kernel state closest to the one measured here
    (the patch applied: the uretprobe syscall, or optimized nop5 uprobes): ns per hit of each
    variant, the single step (uprobe-ret minus uprobe-push) and the ret/push ratio."""
    import pandas as pd
    ref = published(D)
    ref = ref[ref.patch_applied.astype(str) == "True"]
    rows = []
    for (machine, source), g in ref.groupby(["machine", "source"], sort=False):
        ns = g.set_index("bench_mechanism").ns_per_hit
        row = {"machine": machine, "source": source, "cpu": g.cpu.iloc[0], "date": g.date.iloc[0],
               **{k: ns.get(k, float("nan")) for k in VARIANTS}}
        row["sstep"] = row["uprobe-ret"] - row["uprobe-push"]
        row["ret_push"] = row["uprobe-ret"] / row["uprobe-push"]
        rows.append(row)
    return pd.DataFrame(rows)


# rows of the comparison: (our mechanism or step, the published variant, what it is)
COMPARED = [("bpf_uprobe", "uprobe-ret", "uprobe on ret, BPF count"),
            ("uprobe", "uprobe-ret", "uprobe on ret, ftrace event"),
            ("uprobe_push", "uprobe-push", "uprobe on push %rbp, ftrace event"),
            ("uprobe_nop5", "uprobe-nop5", "uprobe on a 5-byte nop, ftrace event"),
            ("uretprobe", "uretprobe-ret", "uretprobe on ret, ftrace event"),
            ("sstep", "sstep", "single step (ret minus push)")]


def host_label(D, host_id: str) -> str:
    """A host as tables and legends name it: its id and its kind (perfbook.data.machine.legend)."""
    from perfbook.data.machine import legend
    return legend(host_runs(D, host_id)[-1]["host"])


def published_table(D):
    """The published figures beside ours, as shown: per variant, each published machine's ns per
    hit (1000 / the posted M/s) and the range of our per-run medians on every host."""
    import pandas as pd
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


def _host_spread(D, q) -> dict:
    """The quoted host's run-to-run spread: every value as the range of its per-run medians over
    the host's counted runs, naming the runs at its ends (one run: that run), so that a single
    run's interval is never shown as the uncertainty of the host."""
    from collections import Counter
    runs = host_runs(D, q.host_id)
    ids = [m.run_id for m in runs]
    med = run_medians(D)
    med = med[(med.host_id == q.host_id) & med.run_id.isin(ids)]
    by = {m: dict(zip(g.run_id, g["median"])) for m, g in med.groupby("mechanism")}
    f = {"host_n_runs": len(ids), "newest_run": q.run_id,
         "host_first_date": runs[0]["started"][:10], "host_last_date": runs[-1]["started"][:10]}
    kernels = Counter(m["host"]["kernel_release"] for m in runs)
    f["host_kernels"] = (f"the same kernel build, {next(iter(kernels))}, in every run" if len(kernels) == 1 else
                         "different kernel builds under the same host id: " +
                         ", ".join(f"{k} in {n} run{'s' * (n != 1)}" for k, n in kernels.items()))
    for m in MECHANISMS:
        f[f"runs_{m}"] = spread(by.get(m, {}), (lambda v: f"{v:.2f}") if m == "none" else (lambda v: f"{v:,.0f}"))
    ratio = lambda a, b: {r: by[a][r] / by[b][r] for r in by.get(a, {}) if r in by.get(b, {})}
    x = lambda v: f"{v:.1f}"
    f["runs_ratio"] = spread(ratio("uprobe", "marker"), x, "×")
    f["runs_ret_push"] = spread(ratio("uprobe", "uprobe_push"), x, "×")
    f["runs_nop5_marker"] = spread(ratio("uprobe_nop5", "marker"), x, "×")
    st = run_steps(D)
    st = st[(st.host_id == q.host_id) & st.run_id.isin(ids)] if len(st) else st
    step = {k: dict(zip(g.run_id, g.ns)) for k, g in st.groupby("key")} if len(st) else {}
    f["runs_sstep"] = spread(step.get("sstep", {}))
    share = {r: v / by["uprobe"][r] * 100 for r, v in step.get("sstep", {}).items() if r in by.get("uprobe", {})}
    f["runs_sstep_share"] = spread(share, lambda v: f"{v:.0f}", " %")
    smaller = [r for r in step.get("sstep", {})
               if max(abs(step.get(c, {}).get(r, float("inf"))) for c in ("consumer_perf", "consumer_bpf"))
               < step["sstep"][r]]
    told = [r for r in step.get("sstep", {}) if all(r in step.get(c, {}) for c in ("consumer_perf", "consumer_bpf"))]
    f["consumer_vs_sstep"] = (f"in {len(smaller)} of {len(told)} run(s) of this host both changes are smaller "
                              f"than the single step of the same run" if told else
                              "this host measured too few of these mechanisms to compare them with the single step")
    return f


def _published_findings(D) -> dict:
    """The published bare-metal figures as the prose quotes them (ns per hit = 1000 / M/s)."""
    pub = published_current(D)
    rng = lambda col, fmt="{:,.0f}", unit=" ns": (
        "n/a" if pub[col].isna().all() else
        (fmt.format(pub[col].min()) + unit if pub[col].nunique() == 1 or pub[col].count() == 1 else
         f"{fmt.format(pub[col].min())}–{fmt.format(pub[col].max())}{unit}"))
    return {"pub_n": len(pub), "pub_machines": "; ".join(pub.machine),
            "pub_ret": rng("uprobe-ret"), "pub_push": rng("uprobe-push"), "pub_nop5": rng("uprobe-nop5"),
            "pub_uret": rng("uretprobe-ret"), "pub_sstep": rng("sstep"),
            "pub_ret_push": rng("ret_push", "{:.1f}", "×")}


def virt_note(host: dict) -> str:
    """What the measured host's virtualization means for the #BP/#DB of a uprobe, from its
    manifest: bare metal, TCG, a PVM-flavoured KVM guest, or another guest."""
    from perfbook.data.machine import kind
    v, mods = host.get("virtualization"), host.get("kvm_modules") or []
    hid = host.get("host_id")
    if v == "none":
        return (f"{hid} is bare metal: the #BP and the #DB reach its kernel directly, with no "
                "hypervisor in between")
    if v == "qemu":
        return (f"{hid} is a TCG guest: QEMU emulates every instruction, the int3, the trap flag "
                "and both exceptions included, so no hardware VM exit is involved and every step "
                "costs emulation instead")
    if "kvm_pvm" in mods:
        return (f"{hid} is a {kind(host)} whose own KVM module is kvm_pvm, not kvm_intel or "
                "kvm_amd: it runs its own guests with PVM, which is neither VMX nor SVM, and "
                "nothing inside it shows how the hypervisor underneath runs it or delivers its "
                "#BP and #DB. The VMX and SVM interception above is the mechanism of a "
                "hardware-virtualized KVM guest; it is not known to be this host's")
    return (f"{hid} is a {kind(host)} (its own KVM modules: {', '.join(mods) or 'none loaded'}); "
            "whether its hypervisor uses VMX or SVM, and so which of the two interception paths "
            "above applies, is not recorded in its datasets")
