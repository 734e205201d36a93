"""Every value the prose quotes, formatted as it shows, from the quoted dataset
(D.quoted: the newest default/full run that measured the KVM brackets)."""
from __future__ import annotations

from . import analysis as A


def findings(D) -> dict:
    """All glue values of the chapter (strings and integers)."""
    q = D.quoted
    ex = q.facts.get("tsc_alignment", {})
    p = q.parameters
    b = A.brackets(D, "quoted")
    fd = dict(zip(A.facts(D)["key"], A.facts(D)["value"]))
    khz_kvm = float(fd["kvm_get_tsc_khz"]) if "kvm_get_tsc_khz" in fd else float("nan")
    khz_measured = float(D.of_quoted(D["tsc_freq"])["khz"].median())
    out = {"n_datasets": len(D), "n_hosts": len(D.hosts), "host": q.host_id,
           "desc": q.host["description"], "kernel": q.host["kernel_release"],
           "vendor": " ".join(ex.get("kvm_vendor_modules", [])) or "none", "date": q["started"][:10],
           "p_rounds": A.measured_rounds(b).get(q.key, 0) if len(b) else 0,
           "p_samples": p["samples"], "p_warmup": p["warmup"], "p_pristine": p["pristine"],
           "p_cpus": ", ".join(map(str, p["cpus"])), "nested_word": "is" if ex.get("nested") else "is not",
           # the host's TSC
           "freq_reps": p["freq_reps"], "freq_ms": p["freq_ms"],
           "khz_kvm": f"{khz_kvm:,.0f}", "khz_measured": f"{khz_measured:,.0f}",
           "khz_diff_ppm": f"{(khz_measured - khz_kvm) / khz_kvm * 1e6:.1f}",
           "clocksource": fd.get("clocksource_current", "?"),
           "clocksources": fd.get("clocksources_available", "?"),
           "hv_sig": fd.get("hypervisor_signature", "none"), "ns_per_cycle": f"{1e6 / khz_kvm:.2f}",
           "cap_tsc_control": fd.get("cap_tsc_control", "not reported"),
           "tl_samples": p["timeline_samples"]}
    out.update(_skew(D))
    out.update(_offsets(D, khz_kvm))
    out.update(_brackets(D, b, khz_kvm))
    out.update(_timeline(D))
    out["host_sentence"] = _host_sentence(D)
    ref = D.reference("tsc_alignment").set_index("quantity")
    out["ref_writes"] = str(ref.loc["tsc_offset_writes_at_guest_start", "value"])
    out["n_skips"] = sum(len(m.skipped) for m in D.manifests)
    return out


def _skew(D) -> dict:
    sb = A.skew_bounds(D.of_quoted(D["skew_pingpong"]))
    a = sb[sb["round"] == "all"].iloc[0]
    return {"skew_lo": f"{int(a['lo']):+,}", "skew_hi": f"{int(a['hi']):+,}",
            "skew_bound": f"{int(a['bound']):,}", "skew_n": f"{int(a['n']):,}",
            "skew_rtt": f"{a['rtt_median']:,.0f}", "skew_rtt_min": f"{int(a['rtt_min']):,}",
            "skew_round_max": f"{int(sb[sb['round'] != 'all']['bound'].max()):,}",
            "skew_verdict": "contains 0: no skew is detectable" if a["consistent"]
            else "excludes 0: the CPUs disagree"}


def _offsets(D, khz_kvm: float) -> dict:
    oc = D.of_quoted(A.offsets(D))
    n_ops = int((oc["kind"] != "count_mismatch").sum())
    msr = oc[oc["kind"] == "set_msr"]["trace_next"].astype(float)
    again = oc[oc["kind"] == "set_msr_again"]
    att = oc[oc["kind"] == "set_attr"]
    cr = oc[oc["kind"] == "create_vcpu"]
    lag = float((cr["event_ts"] - cr["kernel_tsc"].astype(float)).median())
    return {"n_ops": n_ops, "n_match": int(oc["match"].sum()),
            "api_zero": int((oc["api_offset"] == 0).sum()), "prev_zero": int((oc["trace_prev"] == 0).sum()),
            "n_attr": int(len(att)), "attr_exact": int((att["trace_next"] == att["requested_signed"]).sum()),
            "create_lag": f"{lag:,.0f}", "events_word": "Each" if n_ops == len(oc) else "Not each",
            "in_ioctl_word": "every" if oc["event_in_ioctl"].all() else "not every",
            "n_zero_next": int((oc["trace_next"] == 0).sum()),
            # the MSR path: the offset is short of 0 by the time from our RDTSC to the kernel's
            "msr_err_median": f"{-msr.median():,.0f}", "msr_err_min": f"{-msr.max():,.0f}",
            "msr_err_max": f"{-msr.min():,.0f}", "n_msr": int(len(msr)),
            "msr_err_us": f"{-msr.median() / khz_kvm * 1e3:.1f}",
            "msr_again": int(again["same_as_prev"].sum()), "n_msr_again": int(len(again))}


def _brackets(D, b, khz_kvm: float) -> dict:
    from ...stats import summarize
    w = b[b["warmup"] == 0]
    s = summarize(w["width"])
    att = w[w["variant"] == "attr"]
    ins = A.inside_summary(b)
    inside = dict(zip(ins["variant"], ins["inside_share"]))
    honoured = A.offset_honored(b)
    vc = A.variant_comparison(b)
    # if guest = true host time of the read + e, then before < guest - e < after
    # for every sample, so max(guest - after) < e < min(guest - before)
    return {"honoured_word": "honours" if honoured else "does not honour",
            "inside_created": f"{100 * inside.get('created', float('nan')):.1f}",
            "inside_attr": f"{100 * inside.get('attr', float('nan')):.1f}",
            "n_samples": f"{s.n:,}",
            "honour_sentence": "On this host the guest reads the host TSC already, and the API's offset "
                               "changes nothing the guest sees." if not honoured else
                               "On this host the offset takes effect: only after alignment do the readings "
                               "fall inside.",
            "acc_lo": f"{int(-att['exit'].min()):+,}", "acc_hi": f"{int(att['entry'].min()):+,}",
            "width_median": f"{s.median:,.0f}", "width_ci": f"{s.ci_low:,.0f} to {s.ci_high:,.0f}",
            "width_p99": f"{s.p99:,.0f}", "width_p5": f"{s.p5:,.0f}", "width_max": f"{s.max:,.0f}",
            "width_us": f"{s.median / khz_kvm * 1e3:.1f}",
            "entry_median": f"{w['entry'].median():,.0f}", "exit_median": f"{w['exit'].median():,.0f}",
            "variant_verdicts": "; ".join(r.verdict for r in vc.itertuples())
            if len(vc) else "no comparison (fewer than two rounds)",
            "variant_rounds": int(vc["n_a"].min()) if len(vc) else 0}


def _timeline(D) -> dict:
    ev = D.of_quoted(D["timeline_events"])
    counts = ev["event"].value_counts() if len(ev) else {}
    n_exit, n_emul = int(counts.get("kvm_exit", 0)), int(counts.get("kvm_emulate_insn", 0))
    tlw = A.bracket_frame(D.of_quoted(D["timeline_samples"]))
    if n_emul:
        sentence = (f"The timeline below has {n_emul} kvm_emulate_insn events and {n_exit} kvm_exit events: "
                    "this real-mode guest is not executed but emulated by KVM's instruction emulator, one "
                    "instruction at a time, and its RDTSC is an emulated read of IA32_TSC (host TSC plus the "
                    "vCPU offset, which PVM keeps at 0).")
    else:
        sentence = (f"The timeline below has {n_exit} kvm_exit events and no emulated instructions: the guest "
                    "runs on the CPU and exits to KVM for its OUT.")
    return {"n_kvm_exit": n_exit, "n_emulate": n_emul, "emulated_sentence": sentence,
            "tl_width": f"{tlw[tlw['warmup'] == 0]['width'].median():,.0f}"}


def _host_sentence(D) -> str:
    if len(D.hosts) < 2:
        return "Only one host has measured this chapter so far, so there is nothing to compare yet."
    hc = A.host_comparison(D)
    if hc.empty:
        return "The other hosts' datasets have too few rounds for a rank comparison."
    return "; ".join(f"{r.variant}: {r.verdict}" for r in hc.itertuples()) + "."
