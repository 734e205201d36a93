"""trace_overhead: every value the prose quotes (values(D)), formatted as it shows."""

from __future__ import annotations

from collections import Counter

from perfbook.data.machine import kind

from .analysis import (
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
from .parse import MECHANISMS


def values(D) -> dict:
    """Every value the prose quotes, formatted as it shows."""
    samples, q = D["samples"], D.quoted
    p, h = q["parameters"], dataset_key(q)
    f = {
        "n_datasets": len(D),
        "n_hosts": len(D.hosts),
        "p_iterations": f"{p['iterations']:,}",
        "p_batches": p["batches"],
        "p_rounds": int(rounds_of(D)[h]),
        "p_warmup": p["warmup"],
        "p_cpu": p["pin_cpu"],
        "newest_host": q.host_id,
        "newest_desc": q["host"]["description"],
        "newest_kernel": q["host"]["kernel_release"],
        "newest_virt": q["host"]["virtualization"],
        "newest_date": q["started"][:10],
    }
    chk = q.facts.get("perf_probe_check") or {}
    f["perf_wrong"] = sum(
        1 for s in chk.values() if s.get("perf_probe") not in (None, s["pyelftools"])
    )
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
    f["marker_cv"] = (
        f"{mc.cv:.3f} over {int(mc.rounds)} rounds"
        if mc.rounds >= 2 and mc.cv == mc.cv
        else "not defined, as the run has one round"
    )
    c = D["checks"].dropna(subset=["expected_hits"])
    c = c[c.dataset == h]
    f["checks_ok"] = int((c.expected_hits == c.observed_hits).sum())
    f["checks_n"] = len(c)
    f.update(_host_spread(D, q))
    f.update(_ratio_parts(D))
    f.update(_published_findings(D))
    f["virt_note"] = virt_note(q["host"])
    tp = S.drop(index=[k for k in ("none", "syscall") if k in S.index])["median"]
    share = (S.loc["none", "median"] + timer / p["iterations"]) / tp.min()
    f["harness_share"] = (
        f"{share * 100:.1f} % of the cheapest trace point in this run "
        f"({tp.idxmin()}, {tp.min():,.0f} ns)"
    )
    hc = host_comparison(samples, D.manifests)
    f["host_sentence"] = (
        "Only one host has measured this chapter so far, so there is nothing to compare yet."
        if len(D.hosts) < 2
        else "The other hosts' datasets are too small for a rank comparison."
        if hc.empty
        else "; ".join(f"{r.mechanism}: {r.verdict}" for r in hc.itertuples()) + "."
    )
    return f


def spread(values: dict, fmt=lambda v: f"{v:,.0f}", unit=" ns") -> str:
    """The run-to-run spread of one quantity on one host, as the prose shows it: the range of
    the per-run values with the runs that gave its ends, or the single run it comes from."""
    vals = {r: v for r, v in values.items() if v == v}
    if not vals:
        return "not measured"
    if len(vals) == 1:
        ((r, v),) = vals.items()
        return f"{fmt(v)}{unit} (one run, {r})"
    lo, hi = min(vals, key=vals.get), max(vals, key=vals.get)
    return (
        f"{fmt(vals[lo])}–{fmt(vals[hi])}{unit} across {len(vals)} runs "
        f"(lowest in run {lo}, highest in run {hi})"
    )


def _host_spread(D, q) -> dict:
    """The quoted host's run-to-run spread: every value as the range of its per-run medians over
    the host's counted runs, naming the runs at its ends (one run: that run), so that a single
    run's interval is never shown as the uncertainty of the host."""
    runs = host_runs(D, q.host_id)
    ids = [m.run_id for m in runs]
    med = run_medians(D)
    med = med[(med.host_id == q.host_id) & med.run_id.isin(ids)]
    by = {m: dict(zip(g.run_id, g["median"])) for m, g in med.groupby("mechanism")}
    f = {
        "host_n_runs": len(ids),
        "newest_run": q.run_id,
        "host_first_date": runs[0]["started"][:10],
        "host_last_date": runs[-1]["started"][:10],
    }
    kernels = Counter(m["host"]["kernel_release"] for m in runs)
    f["host_kernels"] = (
        f"the same kernel build, {next(iter(kernels))}, in every run"
        if len(kernels) == 1
        else "different kernel builds under the same host id: "
        + ", ".join(f"{k} in {n} run{'s' * (n != 1)}" for k, n in kernels.items())
    )
    for m in MECHANISMS:
        f[f"runs_{m}"] = spread(
            by.get(m, {}), (lambda v: f"{v:.2f}") if m == "none" else (lambda v: f"{v:,.0f}")
        )
    ratio = lambda a, b: {r: by[a][r] / by[b][r] for r in by.get(a, {}) if r in by.get(b, {})}
    x = lambda v: f"{v:.1f}"
    f["runs_ratio"] = spread(ratio("uprobe", "marker"), x, "×")
    f["runs_ret_push"] = spread(ratio("uprobe", "uprobe_push"), x, "×")
    f["runs_nop5_marker"] = spread(ratio("uprobe_nop5", "marker"), x, "×")
    st = run_steps(D)
    st = st[(st.host_id == q.host_id) & st.run_id.isin(ids)] if len(st) else st
    step = {k: dict(zip(g.run_id, g.ns)) for k, g in st.groupby("key")} if len(st) else {}
    f["runs_sstep"] = spread(step.get("sstep", {}))
    share = {
        r: v / by["uprobe"][r] * 100
        for r, v in step.get("sstep", {}).items()
        if r in by.get("uprobe", {})
    }
    f["runs_sstep_share"] = spread(share, lambda v: f"{v:.0f}", " %")
    smaller = [
        r
        for r in step.get("sstep", {})
        if max(abs(step.get(c, {}).get(r, float("inf"))) for c in ("consumer_perf", "consumer_bpf"))
        < step["sstep"][r]
    ]
    told = [
        r
        for r in step.get("sstep", {})
        if all(r in step.get(c, {}) for c in ("consumer_perf", "consumer_bpf"))
    ]
    f["consumer_vs_sstep"] = (
        f"in {len(smaller)} of {len(told)} run(s) of this host both changes are smaller "
        f"than the single step of the same run"
        if told
        else "this host measured too few of these mechanisms to compare them with the single step"
    )
    return f


def _ratio_parts(D) -> dict:
    """The uprobe/marker ratio of each host's shown dataset, split into its parts: the marker,
    the uprobe on `ret`, the single step in it (the `sstep` step, ret minus push) and the ratio
    the uprobe would have without it (uprobe on `push %rbp` / marker). It says which part makes
    one host's ratio differ from another's; it does not say why that part differs."""
    med = run_medians(D)
    st = run_steps(D)
    by = {(h, r, m): v for h, r, m, v in zip(med.host_id, med.run_id, med.mechanism, med["median"])}
    step = (
        {(h, r): v for h, r, k, v in zip(st.host_id, st.run_id, st.key, st.ns) if k == "sstep"}
        if len(st)
        else {}
    )
    kinds = {m.host_id: kind(m["host"]) for m in D.manifests}
    parts, ratios, bare = [], [], []
    for h, r in sorted(D.shown.items()):
        u, mk, p = (by.get((h, r, m)) for m in ("uprobe", "marker", "uprobe_push"))
        if u is None or mk is None:
            continue
        ratios.append(u / mk)
        text = f"{h} ({kinds.get(h, 'host')}, run {r}): {u / mk:.1f}× = uprobe {u:,.0f} ns / marker {mk:,.0f} ns"
        if p is not None:
            bare.append(p / mk)
        if p is not None and (h, r) in step:
            text += (
                f"; the single step is {step[(h, r)]:,.0f} ns of the uprobe, and without it "
                f"(uprobe on push / marker) the ratio would be {p / mk:.1f}×"
            )
        parts.append(text)
    return {
        "ratio_parts": "; ".join(parts)
        if parts
        else "no host measured both the uprobe and the marker",
        "ratio_nosstep": (
            f"{min(bare):.1f}× to {max(bare):.1f}×" if len(bare) > 1 else f"{bare[0]:.1f}×"
        )
        if bare
        else "not measured",
        "ratio_hosts": (
            f"{min(ratios):.1f}× to {max(ratios):.1f}× over the {len(ratios)} hosts in the data"
            if len(ratios) > 1
            else f"{ratios[0]:.1f}× on the one host in the data"
            if ratios
            else "not measured"
        ),
    }


def _published_findings(D) -> dict:
    """The published bare-metal figures as the prose quotes them (ns per hit = 1000 / M/s)."""
    pub = published_current(D)
    rng = lambda col, fmt="{:,.0f}", unit=" ns": (
        "n/a"
        if pub[col].isna().all()
        else (
            fmt.format(pub[col].min()) + unit
            if pub[col].nunique() == 1 or pub[col].count() == 1
            else f"{fmt.format(pub[col].min())}–{fmt.format(pub[col].max())}{unit}"
        )
    )
    return {
        "pub_n": len(pub),
        "pub_machines": "; ".join(pub.machine),
        "pub_ret": rng("uprobe-ret"),
        "pub_push": rng("uprobe-push"),
        "pub_nop5": rng("uprobe-nop5"),
        "pub_uret": rng("uretprobe-ret"),
        "pub_sstep": rng("sstep"),
        "pub_ret_push": rng("ret_push", "{:.1f}", "×"),
    }


def virt_note(host: dict) -> str:
    """What the measured host's virtualization means for the #BP/#DB of a uprobe, from its
    manifest: bare metal, TCG, a PVM-flavoured KVM guest, or another guest."""
    v, mods = host.get("virtualization"), host.get("kvm_modules") or []
    hid = host.get("host_id")
    if v == "none":
        return (
            f"{hid} is bare metal: the #BP and the #DB reach its kernel directly, with no "
            "hypervisor in between"
        )
    if v == "qemu":
        return (
            f"{hid} is a TCG guest: QEMU emulates every instruction, the int3, the trap flag "
            "and both exceptions included, so no hardware VM exit is involved and every step "
            "costs emulation instead"
        )
    if "kvm_pvm" in mods:
        return (
            f"{hid} is a {kind(host)} whose own KVM module is kvm_pvm, not kvm_intel or "
            "kvm_amd: it runs its own guests with PVM, which is neither VMX nor SVM, and "
            "nothing inside it shows how the hypervisor underneath runs it or delivers its "
            "#BP and #DB. The VMX and SVM interception above is the mechanism of a "
            "hardware-virtualized KVM guest; it is not known to be this host's"
        )
    return (
        f"{hid} is a {kind(host)} (its own KVM modules: {', '.join(mods) or 'none loaded'}); "
        "whether its hypervisor uses VMX or SVM, and so which of the two interception paths "
        "above applies, is not recorded in its datasets"
    )
