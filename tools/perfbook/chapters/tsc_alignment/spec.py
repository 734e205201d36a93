"""What the chapter measures, by name: variants, events, the helper, the facts' order."""
from __future__ import annotations

from perfbook.data.hostinfo import TSC_FLAGS

U64 = 1 << 64
EXPERIMENT = "KVM_RUN bracket width"
VARIANTS = ("default", "msr", "attr")
TIMELINE_EVENTS = ("kvm/kvm_write_tsc_offset", "kvm/kvm_entry", "kvm/kvm_exit",
                   "kvm/kvm_emulate_insn", "kvm/kvm_pio", "kvm/kvm_userspace_exit")
HELPER = "kvmtsc"


def signed(u) -> int:
    """A u64 offset as the signed number it stands for (2^64 - x -> -x)."""
    u = int(u) % U64
    return u - U64 if u >= (1 << 63) else u


# the order collect writes the tsc_facts rows in (kvmtsc.c prints its cpuid facts in this order)
FACT_ORDER = (("cpu_model", "virtualization", "clocksource_current", "clocksources_available",
               "kvm_vendor_modules", "cpu_flag_svm", "cpu_flag_vmx")
              + tuple(f"cpu_flag_{f}" for f in TSC_FLAGS + ("hypervisor",))
              + ("cpuid_hypervisor_bit", "hypervisor_signature", "hypervisor_max_leaf",
                 "cpuid_invariant_tsc"))
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
    return (1, 0, key)              # another cpuid fact: after the known ones, by name
