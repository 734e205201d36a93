"""What kind of machine measured a dataset, in a reader's words, from its manifest's host facts.

Half of this book's conclusions depend on it: a nested guest, a PVM-flavoured KVM, a container,
no hardware PMU, kernel lockdown, guests under TCG. Every chapter opens with this banner
(perfbook.book.notebook.platform), and every legend names hosts by kind() as well as by id.
"""

from __future__ import annotations

import html
import re

VIRT = {
    "none": "bare metal",
    "kvm": "KVM guest",
    "qemu": "TCG guest (QEMU emulation, no KVM)",
    "microsoft": "Hyper-V guest",
    "vmware": "VMware guest",
    "xen": "Xen guest",
    "amazon": "AWS Nitro (KVM) guest",
    "oracle": "VirtualBox guest",
}


def kind(host: dict) -> str:
    """'KVM guest', 'TCG guest (...)', 'bare metal', ... (manifest host facts)."""
    v = host.get("virtualization") or "unknown"
    return VIRT.get(v, f"{v} guest")


def short_kind(host: dict) -> str:
    """For legends: 'KVM guest', 'TCG guest', 'bare metal'."""
    return kind(host).split(" (")[0]


def legend(host: dict) -> str:
    """A host in a legend: its id and its kind, e.g. 'h-61b2186b600e (TCG guest)'."""
    return f"{host.get('host_id')} ({short_kind(host)})"


def kernel_series(host: dict) -> str:
    """'Linux 6.1', 'Linux 6.18': the kernel's major.minor, the series a figure facets on."""
    rel = str(host.get("kernel_release") or "")
    parts = rel.split("-")[0].split(".")
    return (
        f"Linux {parts[0]}.{parts[1]}"
        if len(parts) >= 2 and parts[0].isdigit()
        else "kernel not recorded"
    )


def cpu_vendor(host: dict) -> str:
    """'AMD', 'Intel', 'ARM', 'emulated (TCG)', ...: the CPU's maker, from the manifest's
    cpu_vendor where it has one, else from the CPU model string."""
    if host.get("virtualization") == "qemu":
        return "emulated (TCG)"
    if host.get("cpu_vendor"):
        return str(host["cpu_vendor"])
    model = str(host.get("cpu_model") or "").lower()
    for word, name in (
        ("amd", "AMD"),
        ("intel", "Intel"),
        ("neoverse", "ARM"),
        ("cortex", "ARM"),
        ("ampere", "ARM"),
        ("apple", "Apple"),
    ):
        if word in model:
            return name
    return "other CPU" if model else "CPU not recorded"


def _own_kvm(host: dict) -> str | None:
    mods = host.get("kvm_modules")
    if mods is None:
        return None
    flavours = [m for m in mods if m != "kvm"]
    if not flavours:
        return "none (no kvm module loaded)"
    if "kvm_pvm" in flavours:
        return "kvm_pvm (PVM: KVM without VMX/SVM, for nested guests; a guest needs a PVM-enabled kernel)"
    return ", ".join(flavours)


def _cpu_name(host: dict) -> str:
    """'AMD EPYC 7B13', 'Intel Xeon Gold 6248': the model string without its trade marks, clock
    and core-count words (the count is in the label's own words)."""
    model = str(host.get("cpu_model") or "")
    model = re.sub(r"\((R|TM|tm|r)\)|\bCPU\b|\bProcessor\b|@.*$|\d+-Core", " ", model)
    words = model.split()
    return " ".join(words[:4]) if words else cpu_vendor(host)


def label(host: dict) -> str:
    """A host as a reader names it, from its facts: 'AMD EPYC 2-vCPU KVM guest with PVM, Linux
    6.18.44-fc-v657', 'emulated 2-vCPU TCG guest, Linux 6.1.0-56-amd64'. Hosts of one kind can
    share it: labels() tells them apart. The host id stays with the label as its tooltip."""
    n = host.get("cpus_online")
    virt = host.get("virtualization")
    cpus = f"{n}-{'CPU' if virt == 'none' else 'vCPU'}" if n else ""
    cpu = "emulated" if virt == "qemu" else _cpu_name(host)
    what = short_kind(host)
    if "kvm_pvm" in (host.get("kvm_modules") or ()):
        what += " with PVM"
    rel = host.get("kernel_release")
    return " ".join(x for x in (cpu, cpus, what) if x) + (f", Linux {rel}" if rel else "")


def labels(hosts: dict[str, dict]) -> dict[str, str]:
    """host_id -> label(facts), made unique: hosts whose facts give one label are numbered in
    host-id order ('…, Linux 6.18.44 #2')."""
    first = {h: label(f) for h, f in hosts.items()}
    seen: dict[str, list] = {}
    for h in sorted(first):
        seen.setdefault(first[h], []).append(h)
    return {
        h: first[h] if len(seen[first[h]]) == 1 else f"{first[h]} #{seen[first[h]].index(h) + 1}"
        for h in hosts
    }


# -- hosts by name (#41): a page names a host by its label, never by its bare id ------------

HOST_ID = re.compile(r"\b(?:([Hh])ost )?(h-[0-9a-f]{12})(?:/(\d{8}T\d{6}Z))?\b")
# a host id, with the word "host" before it and its run id after it when they are there
HOST_ID_CELL = '<code class="pb-hostid">'  # the one place an id stays: a host-id column


def _naming(m: re.Match, names: dict[str, str]) -> tuple[str, str]:
    """(the words a host id and its run id are shown as, the ids for a tooltip). A host that
    has no data in the book (the machine a TCG guest ran on) is 'another host'."""
    word, host, run = m.group(1), m.group(2), m.group(3)
    ids = host + (f"/{run}" if run else "")
    if host in names:
        shown = (f"{word}ost " if word else "") + names[host]
    else:
        shown = f"{'A' if word == 'H' else 'a'}nother host"
    return shown + (f", run {run}" if run else ""), ids


def name_ids(text: str, names: dict[str, str]) -> str:
    """Text with every host id (and run id) shown by the host's label (names: host_id -> label)."""
    return HOST_ID.sub(lambda m: _naming(m, names)[0], text)


def name_ids_html(text: str, names: dict[str, str]) -> str:
    """HTML with every host id in its text shown by its label, the id as the label's tooltip.
    Tags and their attributes are left alone, and so is a host-id column (HOST_ID_CELL)."""

    def span(m):
        shown, ids = _naming(m, names)
        return f'<span class="pb-host" title="{html.escape(ids)}">{html.escape(shown)}</span>'

    out, keep = [], False
    for part in re.split(r"(<[^>]*>)", text):
        if part.startswith("<"):
            keep = part.startswith(HOST_ID_CELL) or (keep and not part.startswith("</code"))
            out.append(part)
        else:
            out.append(part if keep else HOST_ID.sub(span, part))
    return "".join(out)


NOT_RECORDED = "not recorded"


def facts(host: dict) -> list[tuple[str, str]]:
    """(what, value) pairs for the banner; a fact the dataset predates says so."""

    def rec(v):
        return f"{NOT_RECORDED} (dataset predates this fact)" if v is None else v

    pmu = host.get("pmu")
    pmu_s = (
        None
        if pmu is None
        else (
            "yes"
            if pmu.get("hardware")
            else f"none (event sources: {', '.join(pmu.get('sources', []))})"
        )
    )
    cont = host.get("container")
    return [
        ("machine", kind(host) + ("" if cont in (None, "none") else f", in a {cont} container")),
        ("CPU", f"{host.get('cpu_model')}, {host.get('cpus_online')} CPUs"),
        ("kernel", f"Linux {host.get('kernel_release')}"),
        ("hardware PMU", rec(pmu_s)),
        ("kernel lockdown", rec(host.get("lockdown"))),
        ("its own KVM", rec(_own_kvm(host))),
    ]


def comparable(a: dict, b: dict) -> tuple[bool, str]:
    """Whether a rank test between two hosts' numbers can say something about the kernel or
    the hardware: (True, "") or (False, why). An emulated CPU (TCG) against a real one measures
    the emulator, so such a comparison is not made; the hosts are still shown side by side."""
    ka, kb = a.get("virtualization"), b.get("virtualization")
    if (ka == "qemu") != (kb == "qemu"):
        tcg, other = (a, b) if ka == "qemu" else (b, a)
        return False, (
            f"not compared: {tcg.get('host_id')} is a TCG guest (an emulated CPU) and "
            f"{other.get('host_id')} a {short_kind(other)}; a difference would measure "
            "QEMU's emulation, not the kernel or the machine"
        )
    return True, ""


def host_pairs(manifests):
    """A pair_check for perfbook.analysis.stats.compare_frame(by="host_id"): comparable() on the hosts'
    facts from their manifests."""
    facts = {m["host"]["host_id"]: m["host"] for m in manifests}

    def check(a, b):
        if a in facts and b in facts:
            return comparable(facts[a], facts[b])
        return True, ""

    return check
