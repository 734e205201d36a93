"""Key findings of the TSC alignment chapter, from the chapter's values for one dataset."""
from __future__ import annotations

from ...findings import Finding, Outcome, from_glue, num


def _g(D):
    from . import findings
    return findings(D)


def skew(run):
    """From the ping-pong table alone, so that a host where the KVM parts could not run still
    gets a verdict; under TCG every vCPU reads a TSC QEMU derives from one host clock, so the
    bounds contain 0 by construction and the verdict says nothing about hardware."""
    from .analysis import skew_bounds
    pp = run["skew_pingpong"] if "skew_pingpong" in run else None
    if pp is None or pp.empty:
        return None
    a = skew_bounds(pp)
    a = a[a["round"] == "all"].iloc[0]
    tcg = (" (TCG: every vCPU reads one emulated clock, so the bounds contain 0 by construction)"
           if run.manifest["host"].get("virtualization") == "qemu" else "")
    return Outcome(bool(a["consistent"]), f"CPU {a['cpu_b']} minus CPU {a['cpu_a']}: between {int(a['lo']):+,} "
                   f"and {int(a['hi']):+,} cycles over {int(a['n']):,} exchanges{tcg}")


def freq(g):
    d = num(g["khz_diff_ppm"])
    return Outcome(abs(d) < 10, f"KVM {g['khz_kvm']} kHz, measured {g['khz_measured']} kHz ({d:g} ppm)")


def honoured(g):
    ok = g["honoured_word"] == "honours"
    return Outcome(ok, f"KVM_SET_TSC offset: the guest's reads {'follow' if ok else 'ignore'} it "
                   f"(KVM module: {g['vendor']})")


def roundtrip(g):
    us = num(g["width_us"])
    return Outcome(us < 20, f"median KVM_RUN round trip {g['width_median']} cycles ({us:g} µs)")


KEY_FINDINGS = (
    Finding("skew", "No TSC skew between this machine's CPUs is detectable (the ping-pong bounds contain 0)",
            skew, contrary="This machine's CPUs' TSCs are skewed: the ping-pong bounds exclude 0"),
    Finding("freq", "KVM reports the TSC frequency within 10 ppm of the measured one", from_glue(_g, freq)),
    Finding("honoured", "The TSC offset set through the KVM API changes what the guest reads", from_glue(_g, honoured),
            contrary="The TSC offset set through the KVM API does not change what the guest reads"),
    Finding("roundtrip", "A KVM_RUN round trip into the guest takes less than 20 µs", from_glue(_g, roundtrip)),
)
