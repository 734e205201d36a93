"""Key findings of the TSC alignment chapter, from the chapter's values for one dataset."""

from __future__ import annotations

from perfbook.analysis.findings import Finding, Outcome, from_glue, num

from .analysis import skew_bounds
from .prose import key_values, tcg_equal_reads

# what the tests below read, not every value the prose quotes; the per-host caveats read every
# host's values through the same function, so each dataset's are computed once
_g = key_values


def skew(run):
    """From the ping-pong table alone, so that a host where the KVM parts could not run still
    gets a verdict. Under TCG QEMU serves every vCPU's RDTSC from one counter that never goes
    backwards (softmmu/cpu-timers.c, cpu_get_ticks), so t1 <= t2 <= t3 and the bounds contain 0
    by construction: the evidence says so, with the exchanges that read one value twice."""
    pp = run["skew_pingpong"] if "skew_pingpong" in run else None
    if pp is None or pp.empty:
        return None
    a = skew_bounds(pp)
    a = a[a["round"] == "all"].iloc[0]
    tcg = ""
    if run.manifest["host"].get("virtualization") == "qemu":
        eq, n = tcg_equal_reads(pp)
        tcg = (
            f" (TCG: an emulator artefact, not synchronisation; QEMU serves every vCPU's TSC from one "
            f"counter it never lets go backwards, so the bounds contain 0 by construction, and in {eq:,} of "
            f"{n:,} exchanges the second vCPU read the first one's value again)"
        )
    return Outcome(
        bool(a["consistent"]),
        f"CPU {a['cpu_b']} minus CPU {a['cpu_a']}: between {int(a['lo']):+,} "
        f"and {int(a['hi']):+,} cycles over {int(a['n']):,} exchanges{tcg}",
    )


def freq(g):
    d = num(g["khz_diff_ppm"])
    return Outcome(
        abs(d) < 10, f"KVM {g['khz_kvm']} kHz, measured {g['khz_measured']} kHz ({d:g} ppm)"
    )


def honoured(g):
    ok = g["honoured_word"] == "honours"
    return Outcome(
        ok,
        f"KVM_SET_TSC offset: the guest's reads {'follow' if ok else 'ignore'} it "
        f"(KVM module: {g['vendor']}); {g['inside_created']} % of the readings with the offset KVM "
        "chose at vCPU creation lie inside their host brackets"
        + ("" if ok else ", so the before/after alignment check cannot fail here"),
    )


def roundtrip(g):
    us = num(g["width_us"])
    return Outcome(us < 20, f"median KVM_RUN round trip {g['width_median']} cycles ({us:g} µs)")


FINDINGS = (
    Finding(
        "skew",
        "No TSC skew between this machine's CPUs is detectable (the ping-pong bounds contain 0)",
        skew,
        contrary="This machine's CPUs' TSCs are skewed: the ping-pong bounds exclude 0",
    ),
    Finding(
        "freq",
        "KVM reports the TSC frequency within 10 ppm of the measured one",
        from_glue(_g, freq),
    ),
    Finding(
        "honoured",
        "The TSC offset set through the KVM API changes what the guest reads",
        from_glue(_g, honoured),
        contrary="The TSC offset set through the KVM API does not change what the guest reads",
    ),
    Finding(
        "roundtrip",
        "A KVM_RUN round trip into the guest takes less than 20 µs",
        from_glue(_g, roundtrip),
    ),
)
