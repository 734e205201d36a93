"""Every value the prose quotes, formatted as it shows, from the quoted dataset
(D.quoted: the newest default/full run that measured the KVM brackets)."""

from __future__ import annotations

from perfbook.analysis.findings import Run, counted_runs, glued
from perfbook.analysis.stats import summarize
from perfbook.data.machine import legend

from . import analysis as A


def values(D) -> dict:
    """All glue values of the chapter (strings and integers)."""
    out = quoted_values(D)
    out.update(_platform(D, out))
    return out


def quoted_values(D) -> dict:
    """The quoted dataset's values (values() without the per-host caveats)."""
    b, fd, khz_kvm = _basics(D)
    out = _dataset(D, b, fd, khz_kvm)
    out.update(_skew(D))
    out.update(_offsets(D, khz_kvm))
    out.update(_brackets(D, b, khz_kvm))
    out.update(_variants(b))
    out.update(_timeline(D))
    out["host_sentence"] = _host_sentence(D)
    ref = D.reference("tsc_alignment").set_index("quantity")
    out["ref_writes"] = str(ref.loc["tsc_offset_writes_at_guest_start", "value"])
    out["n_skips"] = sum(len(m.skipped) for m in D.manifests)
    return out


def key_values(D) -> dict:
    """The quoted dataset's values that the per-host caveats read: its facts, TSC frequency
    and brackets, not its skew, offsets, timeline or comparisons (each host's are computed
    once, through this function, and kept in the verdict store)."""
    b, fd, khz_kvm = _basics(D)
    return {**_dataset(D, b, fd, khz_kvm), **_brackets(D, b, khz_kvm)}


def _basics(D) -> tuple:
    """(the quoted dataset's bracket_frame, its facts as key -> value, KVM's TSC kHz)."""
    f = A.facts(D)
    fd = dict(zip(f["key"], f["value"]))
    return (
        A.brackets(D, "quoted"),
        fd,
        float(fd["kvm_get_tsc_khz"]) if "kvm_get_tsc_khz" in fd else float("nan"),
    )


def _dataset(D, b, fd: dict, khz_kvm: float) -> dict:
    """The quoted dataset, its parameters, and its TSC facts and frequency."""
    q = D.quoted
    ex = q.facts.get("tsc_alignment", {})
    p = q.parameters
    khz_measured = float(D.of_quoted(D["tsc_freq"])["khz"].median())
    return {
        "n_datasets": len(D),
        "n_hosts": len(D.hosts),
        "host": q.host_id,
        "desc": q.host["description"],
        "kernel": q.host["kernel_release"],
        "vendor": " ".join(ex.get("kvm_vendor_modules", [])) or "none",
        "date": q["started"][:10],
        "p_rounds": A.measured_rounds(b).get(q.key, 0) if len(b) else 0,
        "p_samples": p["samples"],
        "p_warmup": p["warmup"],
        "p_pristine": p["pristine"],
        "p_cpus": ", ".join(map(str, p["cpus"])),
        "nested_word": "is" if ex.get("nested") else "is not",
        # the host's TSC
        "freq_reps": p["freq_reps"],
        "freq_ms": p["freq_ms"],
        "khz_kvm": f"{khz_kvm:,.0f}",
        "khz_measured": f"{khz_measured:,.0f}",
        "khz_diff_ppm": f"{(khz_measured - khz_kvm) / khz_kvm * 1e6:.1f}",
        "clocksource": fd.get("clocksource_current", "?"),
        "clocksources": fd.get("clocksources_available", "?"),
        "hv_sig": fd.get("hypervisor_signature", "none"),
        "ns_per_cycle": f"{1e6 / khz_kvm:.2f}",
        "cap_tsc_control": fd.get("cap_tsc_control", "not reported"),
        "tl_samples": p["timeline_samples"],
    }


def _skew(D) -> dict:
    sb = A.skew_bounds(D.of_quoted(D["skew_pingpong"]))
    a = sb[sb["round"] == "all"].iloc[0]
    rounds = sb[sb["round"] != "all"]["bound"]
    return {
        "skew_round_min": f"{int(rounds.min()):,}",
        "n_skew_rounds": int(len(rounds)),
        "skew_lo": f"{int(a['lo']):+,}",
        "skew_hi": f"{int(a['hi']):+,}",
        "skew_bound": f"{int(a['bound']):,}",
        "skew_n": f"{int(a['n']):,}",
        "skew_rtt": f"{a['rtt_median']:,.0f}",
        "skew_rtt_min": f"{int(a['rtt_min']):,}",
        "skew_round_max": f"{int(sb[sb['round'] != 'all']['bound'].max()):,}",
        "skew_verdict": "contains 0: no skew is detectable"
        if a["consistent"]
        else "excludes 0: the CPUs disagree",
    }


def _offsets(D, khz_kvm: float) -> dict:
    oc = D.of_quoted(A.offsets(D))
    n_ops = int((oc["kind"] != "count_mismatch").sum())
    msr = oc[oc["kind"] == "set_msr"]["trace_next"].astype(float)
    again = oc[oc["kind"] == "set_msr_again"]
    att = oc[oc["kind"] == "set_attr"]
    cr = oc[oc["kind"] == "create_vcpu"]
    lag = float((cr["event_ts"] - cr["kernel_tsc"].astype(float)).median())
    return {
        "n_ops": n_ops,
        "n_match": int(oc["match"].sum()),
        "api_zero": int((oc["api_offset"] == 0).sum()),
        "prev_zero": int((oc["trace_prev"] == 0).sum()),
        "n_attr": int(len(att)),
        "attr_exact": int((att["trace_next"] == att["requested_signed"]).sum()),
        "create_lag": f"{lag:,.0f}",
        "events_word": "Each" if n_ops == len(oc) else "Not each",
        "in_ioctl_word": "every" if oc["event_in_ioctl"].all() else "not every",
        "n_zero_next": int((oc["trace_next"] == 0).sum()),
        # the MSR path: the offset is short of 0 by the time from our RDTSC to the kernel's
        "msr_err_median": f"{-msr.median():,.0f}",
        "msr_err_min": f"{-msr.max():,.0f}",
        "msr_err_max": f"{-msr.min():,.0f}",
        "n_msr": int(len(msr)),
        "msr_err_us": f"{-msr.median() / khz_kvm * 1e3:.1f}",
        "msr_again": int(again["same_as_prev"].sum()),
        "n_msr_again": int(len(again)),
    }


def _brackets(D, b, khz_kvm: float) -> dict:
    w = b[b["warmup"] == 0]
    s = summarize(w["width"])
    att = w[w["variant"] == "attr"]
    ins = A.inside_summary(b)
    inside = dict(zip(ins["variant"], ins["inside_share"]))
    honoured = A.offset_honored(b)
    # if guest = true host time of the read + e, then before < guest - e < after
    # for every sample, so max(guest - after) < e < min(guest - before)
    return {
        "honoured_word": "honours" if honoured else "does not honour",
        "inside_created": f"{100 * inside.get('created', float('nan')):.1f}",
        "inside_attr": f"{100 * inside.get('attr', float('nan')):.1f}",
        "n_samples": f"{s.n:,}",
        "honour_sentence": "On this host the guest reads the host TSC already, and the API's offset "
        "changes nothing the guest sees."
        if not honoured
        else "On this host the offset takes effect: only after alignment do the readings "
        "fall inside.",
        "acc_lo": f"{int(-att['exit'].min()):+,}",
        "acc_hi": f"{int(att['entry'].min()):+,}",
        "width_median": f"{s.median:,.0f}",
        "width_ci": f"{s.ci_low:,.0f} to {s.ci_high:,.0f}",
        "width_p99": f"{s.p99:,.0f}",
        "width_p5": f"{s.p5:,.0f}",
        "width_max": f"{s.max:,.0f}",
        "width_us": f"{s.median / khz_kvm * 1e3:.1f}",
        "entry_median": f"{w['entry'].median():,.0f}",
        "exit_median": f"{w['exit'].median():,.0f}",
    }


def _variants(b) -> dict:
    """Each offset variant's round trip against the default's, per round (variant_comparison)."""
    vc = A.variant_comparison(b)
    return {
        "variant_verdicts": "; ".join(r.verdict for r in vc.itertuples())
        if len(vc)
        else "no comparison (fewer than two rounds)",
        "variant_rounds": int(vc["n_a"].min()) if len(vc) else 0,
    }


def _timeline(D) -> dict:
    ev = D.of_quoted(D["timeline_events"])
    counts = ev["event"].value_counts(sort=False) if len(ev) else {}
    n_exit, n_emul = int(counts.get("kvm_exit", 0)), int(counts.get("kvm_emulate_insn", 0))
    tlw = A.bracket_frame(D.of_quoted(D["timeline_samples"]))
    if n_emul:
        sentence = (
            f"The timeline below has {n_emul} kvm_emulate_insn events and {n_exit} kvm_exit events: "
            "this real-mode guest is not executed but emulated by KVM's instruction emulator, one "
            "instruction at a time, and its RDTSC is an emulated read of IA32_TSC (host TSC plus the "
            "vCPU offset the vendor module keeps)."
        )
    else:
        sentence = (
            f"The timeline below has {n_exit} kvm_exit events and no emulated instructions: the guest "
            "runs on the CPU and exits to KVM for its OUT."
        )
    return {
        "n_kvm_exit": n_exit,
        "n_emulate": n_emul,
        "emulated_sentence": sentence,
        "tl_width": f"{tlw[tlw['warmup'] == 0]['width'].median():,.0f}",
    }


def _host_sentence(D) -> str:
    if len(D.hosts) < 2:
        return "Only one host has measured this chapter so far, so there is nothing to compare yet."
    hc = A.host_comparison(D)
    if hc.empty:
        return "The other hosts' datasets have too few rounds for a rank comparison."
    return "; ".join(f"{r.variant}: {r.verdict}" for r in hc.itertuples()) + "."


# -- what the platform lets this chapter conclude, per host, from the manifests and the data ----
def tcg_equal_reads(pp) -> tuple[int, int]:
    """(exchanges in which the responder read the initiator's value again, exchanges): under TCG
    QEMU serves every vCPU's RDTSC from one host-tick counter that it never lets go backwards
    (cpu_get_ticks in softmmu/cpu-timers.c), so a read that would fall behind the last value
    served returns that value again."""
    return int((pp["t2_minus_t1"] == 0).sum()), int(len(pp))


def _kvm_modules(m) -> list[str] | None:
    """The KVM vendor modules of a dataset: the manifest's host.kvm_modules (hostinfo), else the
    chapter's own fact (older datasets)."""
    mods = m["host"].get("kvm_modules")
    if mods is None:
        mods = m.facts.get("tsc_alignment", {}).get("kvm_vendor_modules")
    return None if mods is None else [x for x in mods if x != "kvm"]


def _platform(D, g: dict) -> dict:
    """The up-front caveats: for each host, whether the before/after check can fail there and
    what its skew bound means, from its newest counted manifest and its data."""
    pvm, tcg, other = [], [], []
    for h in D.hosts:
        m = counted_runs([x for x in D.manifests if x.host_id == h])[-1]
        mods = _kvm_modules(m)
        if m["host"].get("virtualization") == "qemu":
            pp = Run(D, m)["skew_pingpong"]
            if pp is not None and len(pp):
                sb = A.skew_bounds(pp)
                a = sb[sb["round"] == "all"].iloc[0]
                eq, n = tcg_equal_reads(pp)
                tcg.append(
                    f"on {legend(m['host'])}, run {m['run_id']}, the bounds are {int(a['lo']):+,} to "
                    f"{int(a['hi']):+,} cycles, and in {eq:,} of {n:,} exchanges the second vCPU read "
                    "exactly the value the first had read"
                )
            continue
        gm = glued(Run(D, m), key_values) if mods and "bracket" in m["tables"] else None
        where = f"{legend(m['host'])}, whose manifest lists the KVM modules {', '.join(mods or ['none'])}"
        if mods and "kvm_pvm" in mods and gm is not None:
            pvm.append(
                f"on {where}, {gm['inside_created']} % of the readings taken with the offset KVM chose at "
                f"vCPU creation already lie inside their host brackets (run {m['run_id']})"
            )
        elif gm is not None:
            other.append(
                f"on {where}, {gm['inside_created']} % of the readings taken with KVM's creation "
                f"offset lie inside their brackets (run {m['run_id']}), so the check can fail there"
            )
    out = {}
    out["pvm_caveat"] = (
        "Under PVM the before/after alignment check cannot fail. The check asks whether the guest's RDTSC "
        "lands between the two host TSC reads around its KVM_RUN; with a working offset it fails before the "
        "offset is set to 0 and passes after. PVM's write_tsc_offset hook keeps the offset the guest runs "
        "with at 0 whatever x86.c computed, so the guest's RDTSC, run natively or emulated by KVM, is a read "
        "of the host's TSC taken during that KVM_RUN, on the same CPU, between the two host reads: it lands "
        "inside in every variant, before alignment as well as after. The data agree: "
        + "; ".join(pvm)
        + ". On such a host a pass says the bracket works, not that the alignment did"
        if pvm
        else "No host in the data runs PVM, so on every host with KVM brackets the before/after "
        "alignment check can fail"
    )
    if other:
        out["pvm_caveat"] += ". Elsewhere: " + "; ".join(other)
    out["tcg_caveat"] = (
        "A TCG guest's skew bound of 0 cycles is an emulator artefact, not perfect synchronisation: "
        "QEMU serves every vCPU's RDTSC from one host-tick counter, under one lock, that it never lets go "
        "backwards, so in every exchange t1 ≤ t2 ≤ t3, the bounds contain 0 whatever the hardware's "
        "TSCs do, and a read that would fall behind the last value served returns that value again: "
        + "; ".join(tcg)
        + ". That is how the bounds close to exactly 0 (see the TCG row of the first figure)"
        if tcg
        else "No host in the data is a TCG guest."
    )
    mods = _kvm_modules(D.quoted) or []
    if "kvm_pvm" in mods:
        out["roundtrip_kind"] = (
            f"On the quoted host ({g['host']}, KVM module {', '.join(mods)}) the bracket below is not a hardware "
            "VM exit: PVM enters and leaves its guest by switching page tables and stacks in software, so a "
            "KVM_RUN round trip there is a system call plus PVM's world switch."
        )
    elif mods:
        out["roundtrip_kind"] = (
            f"On the quoted host ({g['host']}, KVM module {', '.join(mods)}) the bracket below contains a "
            "hardware VM entry and exit, plus the system call around them."
        )
    else:
        out["roundtrip_kind"] = f"The quoted host ({g['host']}) recorded no KVM vendor module."
    pvm_here = "kvm_pvm" in mods and g["api_zero"] == g["n_ops"]
    out["api_sentence"] = (
        f"On this host's {g['vendor']} module that is what the source predicts: x86.c computes an offset and "
        "traces it, and the vendor hook throws it away. The tracepoint's next was 0 in "
        f"{g['n_zero_next']} writes (our attribute writes of 0), which accounts for the matches"
        if pvm_here
        else f"On this host's {g['vendor']} module the readback follows the tracepoint in {g['n_match']} of "
        f"{g['n_ops']} writes; a VMX or SVM module should match in every write"
    )
    out["offset_limit"] = (
        "On this host the guest reads the host TSC whatever the offset is (the readings taken with KVM's "
        f'creation offset are {g["inside_created"]} % inside their brackets), so the "before alignment, '
        'outside the bracket" half of the experiment cannot happen here. The chapter shows it from the '
        "source and the tracepoint, not from guest readings. A run on a host whose KVM applies the offset "
        '(kvm_intel or kvm_amd; see "Rerun this chapter" below) adds that dataset, and '
        "the same cells then show its readings outside their brackets until the attribute is set"
        if g["honoured_word"] != "honours"
        else "Not a limit here: this host's KVM applies the offset, and the readings taken with KVM's creation "
        f"offset are {g['inside_created']} % inside their brackets against {g['inside_attr']} % after "
        "the attribute is set"
    )
    out["nested_sentence"] = (
        'Everything called "host" below is then the first-level guest, and the test VM is nested inside it. '
        "This matters here, as the caveats below say"
        if g["nested_word"] == "is"
        else "The test VM below is a first-level guest of this host"
    )
    bound = int(g["skew_bound"].replace(",", ""))
    msr = float(g["msr_err_median"].replace(",", ""))
    out["skew_vs_msr"] = (
        f"the median MSR alignment error measured below, {g['msr_err_median']} cycles, is "
        f"{msr / bound:,.0f} times this bound"
        if bound
        else "this bound is 0, so no alignment error can be set beside it"
    )
    out["guest_kind"] = (
        "the helper's TSC read, then the kernel emulating the guest's instructions (jmp, the nops, "
        "RDTSC), then the guest's stamp, just after the event for the emulated RDTSC and before the "
        "emulated stores and the OUT. Then kvm_pio, kvm_userspace_exit, and the helper's second read"
        if g["n_emulate"]
        else "the helper's TSC read, kvm_entry, the guest's stamp, kvm_exit for the OUT, kvm_pio, "
        "kvm_userspace_exit, and the helper's second read"
    )
    out["exit_kind"] = (
        f"The traced run had no kvm_exit event ({g['n_emulate']} emulated instructions instead): the real-mode "
        "guest is emulated, so the round-trip distribution is the cost of an emulated KVM_RUN on this host, "
        "not of a VMX/SVM exit"
        if g["n_emulate"] and not g["n_kvm_exit"]
        else f"The traced run recorded {g['n_kvm_exit']} kvm_exit events, so the guest ran on the CPU"
    )
    return out
