"""Key findings of the trace-overhead chapter, computed per dataset (perfbook.analysis.findings).

Each finding is decided on the rounds of one dataset: a mechanism runs once per round in one
harness process, so its batches in that round share the process, and the round's median
(analysis.round_medians) is the unit of repetition. Ratios are Hodges-Lehmann ratios of those
per-round medians (decide.ratio); a comparison with a published figure scales our estimate by
that exact figure (decide.scaled)."""

from __future__ import annotations

import numpy as np

from perfbook.analysis import decide
from perfbook.analysis.decide import fmt
from perfbook.analysis.findings import Finding, Measured, Takeaway

from .analysis import published_current, round_medians
from .parse import DEFAULT_MECHANISMS

WHAT = "per-round medians"


def _rounds(run, *mechanisms):
    """{mechanism: its per-round medians} of this dataset; None (not measured) where the
    dataset declares it did not run one of `mechanisms`: no samples table, a subset of the
    mechanisms in its parameters, or one skipped for a missing tool (the manifest's `skipped`).
    A mechanism it planned and did not skip must have its samples (KeyError otherwise)."""
    if "samples" not in run:
        return None
    m = run.manifest
    planned = set(m["parameters"].get("mechanisms") or DEFAULT_MECHANISMS)
    if not set(mechanisms) <= planned - set(m.get("skipped") or {}):
        return None
    r = round_medians(run["samples"])
    return {m: r[m].dropna().to_numpy() for m in mechanisms}


def _seed(run):
    """The 2013 article's ns per call of each mechanism (its uprobe-based event tracer run)."""
    ref = run.reference("trace_overhead")
    return ref[ref.run == "uprobe-based event tracer"].set_index("mechanism").per_call_us * 1000


def _ns(x) -> str:
    return f"{fmt(x)} ns"


def _med(x) -> float:
    return float(np.median(x))


def uprobe_vs_marker(run):
    r = _rounds(run, "uprobe", "marker")
    if r is None:
        return None
    seed = _seed(run)
    return Measured(
        decide.ratio(r["uprobe"], r["marker"], what=WHAT),
        f"uprobe {_ns(_med(r['uprobe']))}, marker {_ns(_med(r['marker']))}; 2013: "
        f"{_ns(seed['uprobe'])} and {_ns(seed['marker'])}, "
        f"{fmt(seed['uprobe'] / seed['marker'])}× (one timed loop of 1000 calls on a 3.x "
        "machine the article does not name: a ratio from another CPU, kernel and method)",
    )


def marker_cheaper(run):
    r = _rounds(run, "marker")
    if r is None:
        return None
    seed = float(_seed(run)["marker"])
    est = decide.location(r["marker"], what="rounds' medians")
    return Measured(
        decide.scaled(est, seed),
        f"marker {_ns(est.value)} against 2013's {_ns(seed)} (another machine, CPU and "
        "kernel not given, timed with gettimeofday over one loop: two machines compared, "
        "not two kernels)",
    )


def nop5_cheap(run):
    r = _rounds(run, "uprobe_nop5", "uprobe")
    if r is None:
        return None
    return Measured(
        decide.ratio(r["uprobe_nop5"], r["uprobe"], what=WHAT),
        f"uprobe on a 5-byte nop {_ns(_med(r['uprobe_nop5']))}, on `ret` {_ns(_med(r['uprobe']))}",
    )


def sstep_dearer(run):
    """The single step (uprobe on `ret` minus on `push %rbp`: the Hodges-Lehmann shift of their
    per-round medians) over the dearest of the kernel developers' published bare-metal single
    steps (ns per hit = 1000 / the posted M/s; an exact published figure)."""
    r = _rounds(run, "uprobe", "uprobe_push")
    if r is None:
        return None
    step = decide.shift(r["uprobe"], r["uprobe_push"], what=WHAT)
    pub = published_current(run)
    dearest = float(pub.sstep.max())
    return Measured(
        decide.scaled(step, dearest),
        f"single step {_ns(step.value)}, published at most {_ns(dearest)} "
        f"(ret/push here {fmt(_med(r['uprobe']) / _med(r['uprobe_push']))}×, "
        f"published at most {fmt(pub.ret_push.max())}×)",
    )


def bpf_cheaper(run):
    r = _rounds(run, "bpf_uprobe", "uprobe")
    if r is None:
        return None
    return Measured(
        decide.ratio(r["bpf_uprobe"], r["uprobe"], what=WHAT),
        f"BPF count {_ns(_med(r['bpf_uprobe']))}, ftrace uprobe event {_ns(_med(r['uprobe']))}",
    )


FINDINGS = (
    Finding(
        "uprobe_vs_marker",
        "A uprobe on `ret` costs more than twice a marker write",
        uprobe_vs_marker,
        quantity="uprobe / marker",
        side=">",
        threshold=2.0,
        unit="×",
        contrary="A uprobe on `ret` costs no more than twice a marker write",
        reproduce=(
            'B=$PWD/build/bin/probench;(bpftrace -qe "uprobe:$B:pb_ret{}" -c "$B --target ret";'
            "cd /sys/kernel/tracing/instances&&mkdir p||exit;"
            "$B --target marker --marker p/trace_marker;rmdir p)|"
            'awk -F, \'/^9,/{print n++?"marker":"uprobe",$3/$2" ns"}\''
        ),
    ),
    Finding(
        "marker_cheaper",
        "A marker write on the measured host costs less than the one the 2013 article timed "
        "on its own, unnamed machine",
        marker_cheaper,
        quantity="marker / 2013's marker",
        side="<",
        threshold=1.0,
        unit="×",
        contrary="A marker write on the measured host costs no less than the one the 2013 "
        "article timed on its own, unnamed machine",
        reproduce=(
            "T=/sys/kernel/tracing/instances/p;mkdir $T&&{ build/bin/probench --target marker "
            '--marker $T/trace_marker|awk -F, \'END{print "marker",$3/$2" ns (2013: 1742 ns)"}\';'
            "rmdir $T;}"
        ),
    ),
    Finding(
        "nop5_cheap",
        "A uprobe on a 5-byte nop costs less than half of one on `ret`",
        nop5_cheap,
        quantity="uprobe on nop5 / on `ret`",
        side="<",
        threshold=0.5,
        unit="×",
        contrary="A uprobe on a 5-byte nop costs at least half of one on `ret`",
        reproduce=(
            'B=build/bin/probench;for t in ret nop5;do bpftrace -qe "uprobe:$B:pb_$t{}" -c "$B '
            '--target $t";done|awk -F, \'/^9,/{print n++?"nop5":"ret",$3/$2" ns"}\''
        ),
    ),
    Finding(
        "sstep_dearer",
        "The single step of a uprobe on `ret` (its cost above one on `push %rbp`) is "
        "dearer than in every published bare-metal benchmark",
        sstep_dearer,
        quantity="single step / dearest published",
        side=">",
        threshold=1.0,
        unit="×",
        contrary="The single step of a uprobe on `ret` is no dearer than in the published bare-metal "
        "benchmarks",
        reproduce=(
            'B=build/bin/probench;for t in ret push;do bpftrace -qe "uprobe:$B:pb_$t{}" -c "$B '
            '--target $t";done|awk -F, \'/^9,/{n[++i]=$3/$2}END{print "single step '
            '(ret-push)",n[1]-n[2],"ns; published at most 582"}\''
        ),
    ),
    Finding(
        "bpf_cheaper",
        "Counting hits in BPF costs less than recording a uprobe event in the ftrace buffer",
        bpf_cheaper,
        quantity="BPF count / ftrace event",
        side="<",
        threshold=1.0,
        unit="×",
        contrary="Counting hits in BPF costs no less than recording a uprobe event",
        reproduce=(
            "B=$PWD/build/bin/probench;(cd /sys/kernel/tracing/instances&&mkdir p||exit;nm $B|"
            'awk -vb=$B \'/ pb_ret/{print"p:pb/r "b":0x"$1}\'>>../uprobe_events;'
            "echo pb:r>p/set_event;$B --target ret;rmdir p;echo -:pb/r>>../uprobe_events;"
            'bpftrace -qe "uprobe:$B:pb_ret{@=count()}" -c "$B --target ret")|'
            'awk -F, \'/^9,/{print n++?"BPF":"ftrace",$3/$2" ns"}\''
        ),
    ),
)


def _seed_text(D) -> str:
    ref = D.reference("trace_overhead")
    s = ref[ref.run == "uprobe-based event tracer"].set_index("mechanism").per_call_us * 1000
    return (
        f"2013 (Linux 3.x, machine not stated): uprobe {_ns(s['uprobe'])}, marker "
        f"{_ns(s['marker'])}, {fmt(s['uprobe'] / s['marker'])}×"
    )


def _transfer(D, host) -> str:
    if host.get("virtualization") == "none":
        return "Measured on bare metal, as a bare-metal KVM host would run it"
    return (
        "Measured in a virtual machine: a uprobe on `ret` is single-stepped, and a hypervisor "
        "can intercept a single step's debug exception (KVM does, with VMX or SVM), so on bare "
        "metal expect a smaller ratio"
    )


TAKEAWAY = Takeaway(
    finding="uprobe_vs_marker",
    mechanism="A uprobe traps into the kernel at every hit; a marker write is one write "
    "system call into the ftrace buffer.",
    seed=_seed_text,
    transfer=_transfer,
)
