"""Key findings of the TSC alignment chapter, each decided on one number with its interval.

What repeats differs by experiment: the KVM_RUN brackets repeat in rounds (a per-round median
width is one repetition), the TSC frequency in freq_reps timed windows, and the skew is a pair
of hard bounds from the fastest ping-pong exchanges (no sampling interval applies). The offset
test counts the readings of one process taken with the offset KVM chose at vCPU creation.

None of these repeats what a claim about the host would need (#40): the skew and the frequency
are set when the kernel boots (its TSC synchronisation and calibration), and a run measures
them in one boot; the brackets' rounds and the offset's readings are windows of one kvmtsc
process, one VM with one vCPU created once. So each claim names its scope (SCOPE): this boot,
or this run's VM. A host's several runs still have to agree (perfbook.analysis.findings.judge).
"""

from __future__ import annotations

from perfbook.analysis import decide
from perfbook.analysis.decide import fmt
from perfbook.analysis.findings import Finding, Measured, Takeaway

from .analysis import bracket_frame, magnitude, round_widths, skew_bounds, skew_estimate
from .prose import _kvm_modules, tcg_equal_reads

# A cross-CPU skew below 1,000 cycles is under half a microsecond at any TSC rate above 2 GHz,
# and a few percent of one KVM_RUN round trip (20,000-40,000 cycles on the committed hosts): a
# merge of two CPUs' stamps is then as exact as the bracket that places a guest stamp.
SKEW_CYCLES = 1000
FREQ_PPM = 10
ROUNDTRIP_US = 20

# finding -> what its repetitions are drawn from, the scope its claim is worded for
SCOPE = {
    "skew": "this boot",
    "freq": "this boot",
    "honoured": "this run's VM",
    "roundtrip": "this run's VM",
}


def _kvm_khz(run) -> float | None:
    """KVM's TSC frequency (KVM_GET_TSC_KHZ, an exact fact of the dataset); None where the
    dataset has no KVM (its KVM parts skipped)."""
    if "tsc_facts" not in run:
        return None
    f = run["tsc_facts"]
    khz = f[f["key"] == "kvm_get_tsc_khz"]["value"]
    return float(khz.iloc[0]) if len(khz) else None


def skew(run):
    """|TSC(b) - TSC(a)| from the ping-pong table alone, so that a host where the KVM parts
    could not run still gets a verdict. Under TCG QEMU serves every vCPU's RDTSC from one
    counter that never goes backwards (softmmu/cpu-timers.c, cpu_get_ticks), so t1 <= t2 <= t3
    and the bounds contain 0 by construction: the context says so, with the exchanges that
    read one value twice."""
    if "skew_pingpong" not in run:
        return None
    pp = run["skew_pingpong"]
    if pp.empty:
        return None
    sb = skew_bounds(pp)
    a = sb[sb["round"] == "all"].iloc[0]
    said = (
        f"CPU {a['cpu_b']} minus CPU {a['cpu_a']} between {int(a['lo']):+,} and {int(a['hi']):+,}"
    )
    if run.manifest["host"].get("virtualization") == "qemu":
        eq, n = tcg_equal_reads(pp)
        said += (
            f" (TCG: QEMU's one never-decreasing counter, 0 by construction; {eq:,} of {n:,} "
            "exchanges read one value twice)"
        )
    return Measured(skew_estimate(a), said)


def freq(run):
    """|measured - KVM's| TSC frequency in ppm: the median of the timed windows with its
    order-statistic interval (KVM's figure is an exact fact); None without KVM."""
    khz = _kvm_khz(run)
    if khz is None or "tsc_freq" not in run:
        return None
    measured = run["tsc_freq"]["khz"]
    d = decide.location((measured - khz) / khz * 1e6, what="timed windows in one boot")
    return Measured(
        magnitude(d),
        f"KVM {fmt(khz, 7)} kHz, measured {fmt(measured.median(), 7)} kHz ({fmt(d.value)} ppm)",
    )


def honoured(run):
    """The share of the guest's readings taken with KVM's creation offset (else the default
    variant's) that fall outside their host brackets, Clopper-Pearson over the readings of
    one process; None without brackets."""
    if "bracket" not in run:
        return None
    b = bracket_frame(run["bracket"])
    b = b[b["warmup"] == 0]
    c = b[b["variant"] == "created"]
    if c.empty:
        c = b[b["variant"] == "default"]
    if c.empty:
        return None
    out = int((~c["inside"]).sum())
    return Measured(
        decide.scaled(decide.share(out, len(c), what=" readings of one vCPU"), 0.01),
        f"KVM module {', '.join(_kvm_modules(run.manifest) or ['not recorded'])}",
    )


def roundtrip(run):
    """The median of the rounds' median KVM_RUN bracket widths, in µs at KVM's TSC rate,
    with its order-statistic interval; None without brackets."""
    khz = _kvm_khz(run)
    if "bracket" not in run or khz is None:
        return None
    w = round_widths(bracket_frame(run["bracket"]))
    if w.empty:
        return None
    return Measured(
        decide.location(w / khz * 1e3, what="rounds' median widths in one VM"),
        f"{fmt(w.median())} cycles at {fmt(khz / 1e3, 4)} MHz",
    )


FINDINGS = (
    Finding(
        "skew",
        "In this boot, the two CPUs measured have TSCs within 1,000 cycles of each other (the "
        "ping-pong bounds on their skew)",
        skew,
        quantity="|skew| between two CPUs",
        side="<",
        threshold=SKEW_CYCLES,
        unit="cycles",
        contrary="In this boot, the two CPUs measured have TSCs 1,000 cycles or more apart",
        reproduce=(
            "build/bin/kvmtsc skew --cpus 0,1 --rounds 2 --iters 20000|awk -F, 'BEGIN{l=-1e18;"
            'h=1e18}{a=$2?-$5:-$6;b=$2?$6:$5;l=a>l?a:l;h=b<h?b:h}END{print "TSC(cpu1)-TSC(cpu0) '
            'between",l,"and",h,"cycles"}\''
        ),
    ),
    Finding(
        "freq",
        "In this boot, KVM reports the TSC frequency within 10 ppm of the one measured against "
        "CLOCK_MONOTONIC_RAW",
        freq,
        quantity="|measured − KVM's TSC frequency|",
        side="<",
        threshold=FREQ_PPM,
        unit="ppm",
        contrary="In this boot, KVM's TSC frequency is 10 ppm or more away from the one measured "
        "against CLOCK_MONOTONIC_RAW",
        reproduce=(
            "(build/bin/kvmtsc run;build/bin/kvmtsc facts)|awk -F, "
            "'/kvm_get_tsc_khz/{k=$3}/^freq/{m=$4/$3*1e6;printf \"KVM %d kHz, measured %.1f kHz: "
            "%+.2f ppm\\n\",k,m,(m-k)/k*1e6}'"
        ),
    ),
    Finding(
        "honoured",
        "In this run's VM, the TSC offset set through the KVM API changes what the guest reads: "
        "with the offset KVM set when it created the vCPU, most guest readings fall outside "
        "their host brackets",
        honoured,
        quantity="readings outside their brackets",
        side=">",
        threshold=50,
        unit="%",
        contrary="In this run's VM, the TSC offset set through the KVM API does not change what "
        "the guest reads: with the offset KVM set when it created the vCPU, most guest readings "
        "lie inside their host brackets",
        reproduce=(
            "build/bin/kvmtsc run --pristine 500 --variants attr|awk -F, '/^s,/&&!$6{n[$2]++;"
            'o[$2]+=$8<$7||$8>$9}END{for(v in n)print v" offset: "o[v]" of "n[v]" guest '
            "readings outside their host brackets\"}'"
        ),
    ),
    Finding(
        "roundtrip",
        "In this run's VM, a KVM_RUN round trip into the guest takes less than 20 µs",
        roundtrip,
        quantity="median KVM_RUN round trip",
        side="<",
        threshold=ROUNDTRIP_US,
        unit="µs",
        contrary="In this run's VM, a KVM_RUN round trip into the guest takes 20 µs or more",
        reproduce=(
            "build/bin/kvmtsc run|awk -F, '/kvm_get_tsc_khz/{k=$3}/^s,/&&!$6{print "
            "($9-$7)/k*1e3}'|sort -n|awk '{a[NR]=$1}END{print \"median KVM_RUN round "
            'trip:",a[int((NR+1)/2)],"us"}\''
        ),
    ),
)


def _seed_text(D) -> str:
    ref = D.reference("tsc_alignment").set_index("quantity")
    w = ref.loc["tsc_offset_writes_at_guest_start"]
    return (
        f"2013 (Intel host, kvm_intel): KVM wrote each vCPU's TSC offset {w['value']} times at "
        "guest start, and forcing it to 0 put guest and host on one TSC axis"
    )


def _transfer(D, host) -> str:
    if "kvm_pvm" in (host.get("kvm_modules") or ()):
        return (
            "The KVM here is PVM (no VMX/SVM): on Intel VMX or AMD SVM hardware the CPU applies "
            "the offset to the guest's RDTSC, so there the result is expected to differ"
        )
    return "The KVM here uses VMX or SVM, as a bare-metal KVM host does"


TAKEAWAY = Takeaway(
    finding="honoured",
    mechanism="KVM gives each vCPU a TSC offset that the guest's reads of its time stamp "
    "counter include.",
    seed=_seed_text,
    transfer=_transfer,
)
