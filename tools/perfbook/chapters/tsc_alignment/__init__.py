"""Chapter 'tsc_alignment': guest/host TSC alignment with KVM, without QEMU and without systemtap.

The seed (000_7b0d737d6588117b.txt, "systemtap で KVM ゲストとホストのTSC値を一致させる",
2013) forced KVM's TSC offset to 0 with a systemtap guru-mode probe on
vmx_write_tsc_offset, so that guest and host trace stamps shared one axis.
Today the offset is a vCPU device attribute (KVM_VCPU_TSC_CTRL /
KVM_VCPU_TSC_OFFSET, Documentation/virt/kvm/devices/vcpu.rst) and every write
is traced by kvm:kvm_write_tsc_offset.

  collect.py        measure(ctx): TSC facts and frequency, cross-CPU skew, the KVM_RUN
                    brackets of a tiny VM (tools/c/kvmtsc.c) with kvm_write_tsc_offset traced
                    (x86-tsc clock), and a short timeline run; running kvmtsc, once or round
                    by round (adaptive repetition)
  parse.py          variants, events, the helper's name, the facts' order, signed(); kvmtsc
                    output and the ftrace text
  analysis.py       brackets, offsets, skew bounds, the timeline, comparisons
  tables.py         the tables the chapter shows, and its columns of the runs table
  figures.py        ping-pong bounds, brackets, round trips, the timeline
  prose.py          values(D): every value the prose quotes
  key_findings.py   FINDINGS: the chapter's conclusions
"""

from __future__ import annotations

import os
import platform

from perfbook.core.errors import ParameterError
from perfbook.framework.contract import REPETITION, Chapter, Param, Table, repetition_params

# The KVM_RUN brackets repeat in rounds (every variant, on every CPU, in a rotating
# order) adaptively (perfbook.analysis.repetition.Repetition): after rep_warmup flagged rounds, until
# each variant's per-round median bracket width has a 95 % CI narrower than
# rep_target (relative), or rep_budget_s runs out, or rep_max_runs rounds are in.
# Skew and frequency are fixed counts: a skew bound comes from the extreme exchanges,
# not from a median, and the frequency is a calibration that agrees to ppm.
_SAMPLES = dict(
    variant="str",
    round="int",
    cpu="int",
    idx="int",
    warmup="int",
    before="int",
    guest="int",
    after="int",
    warmup_round="bool",
)
# offsets are unsigned 64-bit: stored as their decimal text, exact (int columns are int64)
_OPS = dict(
    seq="int",
    kind="str",
    variant="str",
    round="int",
    tsc_before="int",
    tsc_after="int",
    requested="str",
    readback="str",
    readback_signed="int",
)


class TscAlignment(Chapter):
    name = "tsc_alignment"
    title = "Guest/host TSC alignment with KVM"
    plan_s = {
        "quick": 2,
        "default": 4,
    }  # seconds a collect should take here (perfbook.book.summary)
    profiles = {
        "quick": {
            "samples": 100,
            "warmup": 20,
            "pristine": 100,
            "rep_target": 0.05,
            "rep_min_runs": 2,
            "rep_max_runs": 3,
            "rep_budget_s": 10.0,
            "rep_warmup": 0,
            "skew_rounds": 2,
            "skew_iters": 1000,
            "timeline_samples": 12,
            "freq_reps": 3,
            "freq_ms": 50,
            "cpus": None,
        },
        # default: 200 readings per block and at most 20 rounds keep the bracket table under
        # about 2 MB for the repository; `full` is for a closer look on your own machine.
        # A round takes ~0.05 s: the committed default runs reached the CI target within 1 s
        # (about 2 s for the whole chapter), so 5 s of rounds is a real bound, not a target.
        # The TSC frequency: 6 windows of 150 ms, not 5 of 200 (#40): the same second, and a
        # median of 6 has a 96.87 % interval where 5 reach 93.75 %, short of the finding's
        # 95 %. Measured 2026-11-29 on a 2-CPU PVM guest: all four findings decided, 4 s.
        "default": {
            "samples": 200,
            "warmup": 20,
            "pristine": 500,
            "rep_target": 0.05,
            "rep_min_runs": 6,
            "rep_max_runs": 20,
            "rep_budget_s": 5.0,
            "rep_warmup": 1,
            "skew_rounds": 5,
            "skew_iters": 2000,
            "timeline_samples": 30,
            "freq_reps": 6,
            "freq_ms": 150,
            "cpus": None,
        },
        "full": {
            "samples": 1000,
            "warmup": 100,
            "pristine": 1000,
            "rep_target": 0.02,
            "rep_min_runs": 10,
            "rep_max_runs": 100,
            "rep_budget_s": 120.0,
            "rep_warmup": 1,
            "skew_rounds": 10,
            "skew_iters": 5000,
            "timeline_samples": 60,
            "freq_reps": 10,
            "freq_ms": 500,
            "cpus": None,
        },
    }
    params = {
        "samples": Param(
            int, min=10, max=100000, help="bracketed guest readings per variant, round and CPU"
        ),
        "warmup": Param(int, min=0, max=10000, help="readings discarded before each block"),
        "pristine": Param(int, min=0, max=100000, help="readings before any offset write"),
        **repetition_params("rep_"),
        "skew_rounds": Param(int, min=1, max=100, help="ping-pong rounds"),
        "skew_iters": Param(
            int, min=100, max=200000, help="exchanges per ping-pong round and direction"
        ),
        "timeline_samples": Param(int, min=1, max=1000, help="readings of the traced timeline run"),
        "freq_reps": Param(int, min=1, max=100, help="TSC frequency measurements"),
        "freq_ms": Param(
            int, min=10, max=5000, help="ms of CLOCK_MONOTONIC_RAW per frequency measurement"
        ),
        "cpus": Param(object, nullable=True, help="CPUs, e.g. '0,1' (None: the first two usable)"),
    }
    tables = {
        "bracket": Table(**_SAMPLES, optional=("warmup_round",)),  # no flag before adaptive rounds
        "timeline_samples": Table(**_SAMPLES, optional=("warmup_round",)),
        "kvm_ops": Table(**_OPS),
        "timeline_ops": Table(**_OPS, optional=("readback_signed",)),
        "tsc_offset_events": Table(ts="int", cpu="int", vcpu="int", prev="str", next="str"),
        "skew_pingpong": Table(
            cpu_a="int",
            cpu_b="int",
            direction="int",
            round="int",
            i="int",
            t2_minus_t1="int",
            t3_minus_t2="int",
        ),
        "tsc_freq": Table(rep="int", ns="int", cycles="int", khz="float"),
        "tsc_facts": Table(key="str", value="str", source="str"),
        "timeline_events": Table(pid="int", cpu="int", ts="int", event="str", detail="str"),
        "repetition": REPETITION,
    }
    reference = ("tsc_alignment",)
    needs_text = "/dev/kvm (the KVM API, no QEMU)"
    quote_needs = (
        "bracket",
    )  # the prose quotes the KVM brackets: a run without KVM can't be quoted

    def check(self, p: dict) -> None:
        # lazy: scipy.stats, 0.67 s on top of the declaration's 0.35 s (-X importtime)
        from perfbook.analysis.repetition import repetition_settings

        repetition_settings(p, "rep_")
        p["cpus"] = _parse_cpus(p["cpus"]) or sorted(os.sched_getaffinity(0))[:2]

    def preflight(self) -> list[str]:
        if platform.machine() not in ("x86_64", "AMD64"):
            return [f"TSC experiments need x86-64 (this is {platform.machine()})"]
        return []


def _parse_cpus(value) -> list[int] | None:
    """'0,1', [0, 1] or 3 -> CPU numbers usable here; None, '' or 'auto' -> None."""
    if value is None or value == "" or value == "auto":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, str):
        parts = [x.strip() for x in value.split(",") if x.strip()]
    elif isinstance(value, (list, tuple)):
        parts = list(value)
    else:
        raise ParameterError(f"cpus must be a list of CPU numbers like '0,1', got {value!r}")
    try:
        cpus = [int(x) for x in parts]
    except (TypeError, ValueError):
        raise ParameterError(
            f"cpus must be a list of CPU numbers like '0,1', got {value!r}"
        ) from None
    allowed = sorted(os.sched_getaffinity(0))
    bad = [c for c in cpus if c not in allowed]
    if bad or not cpus:
        raise ParameterError(
            f"cpus {value!r}: CPU(s) {bad or value} not usable here; allowed: {allowed}"
        )
    return cpus


chapter = TscAlignment()
