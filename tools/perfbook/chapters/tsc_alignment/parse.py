"""What the chapter measures, by name (variants, events, the helper, the facts' order), and
text -> frames: the kvmtsc helper's CSV-like lines and the x86-tsc ftrace text."""

from __future__ import annotations

import pandas as pd

from perfbook.data.hostinfo import TSC_FLAGS
from perfbook.probes import ftrace

U64 = 1 << 64
EXPERIMENT = "KVM_RUN bracket width"
VARIANTS = ("default", "msr", "attr")
TIMELINE_EVENTS = (
    "kvm/kvm_write_tsc_offset",
    "kvm/kvm_entry",
    "kvm/kvm_exit",
    "kvm/kvm_emulate_insn",
    "kvm/kvm_pio",
    "kvm/kvm_userspace_exit",
)
HELPER = "kvmtsc"


def signed(u) -> int:
    """A u64 offset as the signed number it stands for (2^64 - x -> -x)."""
    u = int(u) % U64
    return u - U64 if u >= (1 << 63) else u


# the order collect writes the tsc_facts rows in (kvmtsc.c prints its cpuid facts in this order)
FACT_ORDER = (
    (
        "cpu_model",
        "virtualization",
        "clocksource_current",
        "clocksources_available",
        "kvm_vendor_modules",
        "cpu_flag_svm",
        "cpu_flag_vmx",
    )
    + tuple(f"cpu_flag_{f}" for f in TSC_FLAGS + ("hypervisor",))
    + ("cpuid_hypervisor_bit", "hypervisor_signature", "hypervisor_max_leaf", "cpuid_invariant_tsc")
)
KVM_FACTS = ("kvm_get_tsc_khz", "cap_vcpu_attributes", "cap_tsc_control", "api_version")


def fact_rank(key: str) -> tuple:
    """Sort key of a tsc_facts row that reproduces the order collect writes."""
    if key in FACT_ORDER:
        return (0, FACT_ORDER.index(key), "")
    if key in KVM_FACTS:
        return (2, KVM_FACTS.index(key), "")
    if key.startswith("dmesg_tsc_") and key[10:].isdigit():
        return (3, int(key[10:]), "")
    if key == "measured_tsc_khz_median":
        return (4, 0, "")
    return (1, 0, key)  # another cpuid fact: after the known ones, by name


# kvmtsc line kind -> (result name, columns); every column but variant/kind is an integer
HELPER_LINES = {
    "s": ("samples", ["variant", "round", "cpu", "idx", "warmup", "before", "guest", "after"]),
    "op": (
        "ops",
        ["seq", "kind", "variant", "round", "tsc_before", "tsc_after", "requested", "readback"],
    ),
    "pp": ("pingpong", ["direction", "round", "i", "t2_minus_t1", "t3_minus_t2"]),
    "freq": ("freq", ["rep", "ns", "cycles"]),
}


def parse_helper(text: str) -> dict:
    """Split kvmtsc output into frames (samples, ops, pingpong, freq) and dicts (meta, facts)
    by line kind. u64 values stay exact (Python ints in object columns)."""
    rows: dict[str, list] = {k: [] for k in HELPER_LINES}
    meta: dict[str, str] = {}
    facts: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(",")
        kind = parts[0]
        if kind == "meta":
            meta[parts[1]] = parts[2]
        elif kind == "fact":
            facts[parts[1]] = parts[2]
        elif kind in rows:
            rows[kind].append(parts[1:])
    out: dict = {"meta": meta, "facts": facts}
    for k, (name, cols) in HELPER_LINES.items():
        df = pd.DataFrame(rows[k], columns=cols)
        for col in cols:
            if col not in ("variant", "kind"):
                df[col] = df[col].map(int) if len(df) else df[col]
        out[name] = df
    return out


def parse_trace(text: str, pid: int | None = None):
    """ftrace text (x86-tsc clock: timestamps are raw TSC, kept exact) -> tidy frame
    pid, cpu, ts, event, detail. Any trace options parse (perfbook.probes.ftrace); attrs['lost']
    and attrs['lost_lines'] say whether the ring buffer dropped events."""
    df = ftrace.parse_lines(text)
    df = df[df["event"].notna() & ((df["pid"] == pid) if pid is not None else True)]
    out = df[["pid", "cpu", "ts"]].assign(event=df["event"], detail=df["body"].str.strip())
    out = out.reset_index(drop=True)
    out.attrs = dict(df.attrs)
    return out


def tsc_offset_events(trace_df):
    """The kvm_write_tsc_offset events of a parse_trace frame: ts, cpu, vcpu, prev, next
    (prev and next as the kernel prints them, unsigned 64-bit)."""
    rows = []
    for r in trace_df[trace_df["event"] == "kvm_write_tsc_offset"].itertuples():
        f = ftrace.parse_kv(r.detail)
        if {"vcpu", "prev", "next"} <= f.keys():
            rows.append(
                {
                    "ts": r.ts,
                    "cpu": r.cpu,
                    "vcpu": int(f["vcpu"]),
                    "prev": int(f["prev"]),
                    "next": int(f["next"]),
                }
            )
    return pd.DataFrame(rows, columns=["ts", "cpu", "vcpu", "prev", "next"])
