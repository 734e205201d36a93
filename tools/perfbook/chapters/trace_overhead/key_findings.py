"""Key findings of the trace-overhead chapter, computed per dataset (perfbook.analysis.findings)."""

from __future__ import annotations

from perfbook.analysis.findings import Finding, Outcome

from .analysis import decompose, published_current, summary_table


def _medians(run):
    """Each mechanism's median ns per call in this dataset (its key findings read it)."""
    s = run["samples"]
    if s is None or s.empty:
        return None
    return summary_table(s).set_index("mechanism")["median"]


def _seed(run):
    ref = run.reference("trace_overhead")
    return ref[ref.run == "uprobe-based event tracer"].set_index("mechanism").per_call_us * 1000


def _ns(x):
    return f"{x:,.0f} ns"


def _ratio(a, b, what_a, what_b, threshold, run, seed_text=""):
    m = _medians(run)
    if m is None or a not in m or b not in m:
        return None
    r = m[a] / m[b]
    return Outcome(
        bool(r > threshold), f"{what_a} {_ns(m[a])}, {what_b} {_ns(m[b])}: {r:.1f}×{seed_text}"
    )


def uprobe_vs_marker(run):
    seed = _seed(run)
    return _ratio(
        "uprobe",
        "marker",
        "uprobe on ret",
        "marker",
        2.0,
        run,
        f" (2013: {_ns(seed['uprobe'])} and {_ns(seed['marker'])}, "
        f"{seed['uprobe'] / seed['marker']:.1f}×)",
    )


def marker_cheaper(run):
    m = _medians(run)
    if m is None or "marker" not in m:
        return None
    seed = _seed(run)["marker"]
    return Outcome(
        bool(m["marker"] < seed),
        f"marker {_ns(m['marker'])} against 2013's {_ns(seed)} ({m['marker'] / seed:.2f}×)",
    )


def nop5_cheap(run):
    out = _ratio("uprobe_nop5", "uprobe", "uprobe on a 5-byte nop", "on ret", 0, run)
    if out is None:
        return None
    m = _medians(run)
    return Outcome(bool(m["uprobe_nop5"] < 0.5 * m["uprobe"]), out.evidence)


def sstep_dearer(run):
    """The single step (uprobe on `ret` minus on `push %rbp`, Hodges-Lehmann shift) against the
    kernel developers' published bare-metal benchmarks (ns per hit = 1000 / the posted M/s)."""
    m = _medians(run)
    if m is None or "uprobe" not in m or "uprobe_push" not in m:
        return None
    step = decompose(run["samples"], keys=("sstep",)).set_index("key").loc["sstep", "ns"]
    if step != step:
        return None
    pub = published_current(run)
    return Outcome(
        bool(step > pub.sstep.max()),
        f"single step {_ns(step)} (ret/push {m['uprobe'] / m['uprobe_push']:.1f}×), "
        f"published at most {_ns(pub.sstep.max())} ({pub.ret_push.max():.1f}×)",
    )


def bpf_cheaper(run):
    m = _medians(run)
    if m is None or "bpf_uprobe" not in m or "uprobe" not in m:
        return None
    return Outcome(
        bool(m["bpf_uprobe"] < m["uprobe"]),
        f"BPF count {_ns(m['bpf_uprobe'])}, ftrace uprobe event {_ns(m['uprobe'])}",
    )


FINDINGS = (
    Finding(
        "uprobe_vs_marker",
        "A uprobe on `ret` costs more than twice a marker write, as it did in 2013",
        uprobe_vs_marker,
        contrary="A uprobe on `ret` no longer costs twice a marker write",
    ),
    Finding(
        "marker_cheaper",
        "A marker write costs less than the 2013 article measured",
        marker_cheaper,
        contrary="A marker write costs no less than the 2013 article measured",
    ),
    Finding(
        "nop5_cheap",
        "A uprobe on a 5-byte nop costs less than half of one on `ret`",
        nop5_cheap,
        contrary="A uprobe on a 5-byte nop costs as much as one on `ret` (no optimization)",
    ),
    Finding(
        "sstep_dearer",
        "The single step of a uprobe on `ret` (its cost above one on `push %rbp`) is "
        "dearer than in every published bare-metal benchmark",
        sstep_dearer,
        contrary="The single step of a uprobe on `ret` is no dearer than in the published bare-metal "
        "benchmarks",
    ),
    Finding(
        "bpf_cheaper",
        "Counting hits in BPF costs less than recording a uprobe event in the ftrace buffer",
        bpf_cheaper,
        contrary="Counting hits in BPF costs no less than recording a uprobe event",
    ),
)
