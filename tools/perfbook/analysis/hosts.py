"""The hosts in the data: who measured what, and how two hosts' environments differ.

* ``host_records()`` / ``host_table()``: one row per host id found in any manifest under
  data/runs, with its key facts (CPU vendor and model, kernel series, machine kind,
  accelerator, ...) and the datasets it contributed; tools/perfbook/book/hostspage.py renders them.
* ``env_facts(manifest)``: the flat environment facts a comparison needs
  (kernel, CPU, virtualization, clocksource, mitigations, governor, this
  machine's virtio features, QEMU and tool versions).
* ``env_diff(manifests)``: only the facts that differ between hosts, one
  column per host. A chapter shows it wherever two hosts disagree.
  ``env_diff_groups`` is the same grouped by value, for a page with many hosts.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from perfbook.core.paths import resolve_data_dir
from perfbook.data.dataset import list_runs, load_manifest, load_manifests, subdirs
from perfbook.data.identity import conflicts
from perfbook.data.machine import labels, short_kind

# (section, label) in display order; facts outside this list still diff, after them
KEY_FACTS = (
    ("kernel", "kernel_release"),
    ("kernel", "preempt"),
    ("kernel", "os_release"),
    ("cpu", "cpu_model"),
    ("cpu", "cpus_online"),
    ("cpu", "mem_total_gib"),
    ("cpu", "tsc_flags"),
    ("virtualization", "virtualization"),
    ("virtualization", "container"),
    ("virtualization", "kvm_modules"),
    ("clock", "clocksource"),
    ("cpu", "governor"),
)


def _fmt(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v)) if v else "(none)"
    return str(v)


def env_facts(manifest: dict) -> dict[str, str]:
    """Flatten a manifest into {fact name: text} for comparison."""
    h = manifest.get("host", {})
    out: dict[str, str] = {}
    for _, key in KEY_FACTS:
        val = h.get(key)
        if key == "clocksource" and isinstance(val, dict):
            val = val.get("current")
        out[key] = _fmt(val)
    mach = h.get("machine") or {}
    out["tsc_mhz"] = _fmt(mach.get("tsc_mhz"))
    for name, val in sorted((h.get("mitigations") or {}).items()):
        out[f"mitigation: {name}"] = _fmt(val)
    for dev in h.get("virtio_devices") or []:
        out[f"virtio {dev.get('device')} features"] = _fmt(dev.get("features"))
    tools = manifest.get("tools") or {}
    for name, val in sorted(tools.items()):
        if name == "python_packages" and isinstance(val, dict):
            for pkg, ver in sorted(val.items()):
                out[f"python: {pkg}"] = _fmt(ver)
        elif not isinstance(val, dict):
            out[f"tool: {name}"] = _fmt(val)
    return out


def latest_per_host(manifests: list[dict]) -> dict[str, dict]:
    """The most recent manifest of each host (run ids sort by time)."""
    best: dict[str, dict] = {}
    for m in manifests:
        hid = m.get("host", {}).get("host_id", "?")
        if hid not in best or str(m.get("run_id", "")) > str(best[hid].get("run_id", "")):
            best[hid] = m
    return dict(sorted(best.items()))


def env_diff(manifests: list[dict], only_different: bool = True):
    """DataFrame: fact x host, keeping only facts whose values differ between hosts.

    A fact a host does not report at all shows as "(not recorded)".
    """
    per_host = {hid: env_facts(m) for hid, m in latest_per_host(manifests).items()}
    if not per_host:
        return pd.DataFrame(columns=["fact"])
    order = [k for _, k in KEY_FACTS]
    names = list(dict.fromkeys(order + sorted({k for f in per_host.values() for k in f})))
    rows = []
    for name in names:
        vals = {hid: f.get(name, "(not recorded)") for hid, f in per_host.items()}
        if only_different and len(set(vals.values())) < 2:
            continue
        rows.append({"fact": name, **vals})
    return pd.DataFrame(rows, columns=["fact", *per_host])


def chapter_env_diff(chapter: str, data_dir: Path | None = None):
    """env_diff over the datasets of one chapter (empty with fewer than two hosts)."""
    return env_diff(load_manifests(chapter, data_dir))


def all_manifests(data_dir: Path | None = None) -> list[dict]:
    """Every dataset's manifest, chapter by chapter (each chapter's runs listed once)."""
    root = resolve_data_dir(data_dir) / "runs"
    chapters = sorted({c for h in subdirs(root) for c in subdirs(root / h)})  # a link is refused
    return [
        load_manifest(run) for c in chapters for run in list_runs(c, resolve_data_dir(data_dir))
    ]


SAME_MACHINE = "one machine as far as its facts show"
DIFFERENT_MACHINE = "same id, different machine"


def cpu_vendor(host: dict) -> str:
    """AMD, Intel, ARM, ... from the manifest (its cpu_vendor, else the CPU model's words)."""
    if host.get("cpu_vendor"):
        return str(host["cpu_vendor"])
    model = str(host.get("cpu_model") or "")
    for word, vendor in (
        ("AMD", "AMD"),
        ("Intel", "Intel"),
        ("QEMU", "QEMU (emulated CPU)"),
        ("Neoverse", "ARM"),
        ("Cortex", "ARM"),
        ("Ampere", "Ampere"),
    ):
        if word.lower() in model.lower():
            return vendor
    if str(host.get("arch") or "").startswith(("aarch64", "arm")):
        return "ARM"
    return "unknown"


def kernel_series(release) -> str:
    """'6.18' from '6.18.44-fc-v657' (the major.minor a kernel's behaviour follows)."""
    m = re.match(r"(\d+\.\d+)", str(release or ""))
    return m.group(1) if m else "unknown"


def accelerator(host: dict) -> str:
    """What this host gives its own guests: its KVM flavour, or none (QEMU then emulates)."""
    mods = host.get("kvm_modules")
    if mods is None:
        return "not recorded"
    flavours = [m for m in mods if m != "kvm"]
    names = {"kvm_intel": "KVM (VMX)", "kvm_amd": "KVM (SVM)", "kvm_pvm": "KVM (PVM)"}
    return ", ".join(names.get(f, f) for f in flavours) if flavours else "none (TCG only)"


def host_records(data_dir: Path | None = None, manifests: list[dict] | None = None) -> list[dict]:
    """One record per host: its key facts from its newest manifest, its datasets (chapter,
    run id, profile), first and last run, and whether its datasets look like one machine."""
    ms = all_manifests(data_dir) if manifests is None else manifests
    differ = conflicts(ms)
    latest = latest_per_host(ms)
    names = labels({hid: m.get("host", {}) for hid, m in latest.items()})
    out = []
    for hid, m in latest.items():
        mine = sorted(
            (x for x in ms if x.get("host", {}).get("host_id") == hid),
            key=lambda x: (str(x.get("chapter")), str(x.get("run_id"))),
        )
        h = m.get("host", {})
        cs = h.get("clocksource")
        out.append(
            {
                "host_id": hid,
                "label": names[hid],
                "description": h.get("description"),
                "label_opt_in": bool(h.get("label_opt_in")),
                "note": h.get("note") or "",
                "kind": short_kind(h),
                "cpu_vendor": cpu_vendor(h),
                "kernel": h.get("kernel_release"),
                "kernel_series": kernel_series(h.get("kernel_release")),
                "os": h.get("os_release"),
                "cpu": h.get("cpu_model"),
                "cpus": h.get("cpus_online"),
                "mem_gib": h.get("mem_total_gib"),
                "tsc_mhz": (h.get("machine") or {}).get("tsc_mhz"),
                "virtualization": h.get("virtualization"),
                "container": h.get("container"),
                "accelerator": accelerator(h),
                "clocksource": cs.get("current") if isinstance(cs, dict) else cs,
                "chapters": len({x.get("chapter") for x in mine}),
                "datasets": len(mine),
                "first_run": min(str(x.get("run_id")) for x in mine),
                "last_run": max(str(x.get("run_id")) for x in mine),
                "machine": (f"{DIFFERENT_MACHINE}: " + "; ".join(differ[hid]))
                if hid in differ
                else SAME_MACHINE,
                "runs": [
                    (str(x.get("chapter")), str(x.get("run_id")), x.get("profile")) for x in mine
                ],
            }
        )
    return out


def host_table(data_dir: Path | None = None):
    """One row per host: key facts, datasets per chapter, first and last run."""
    return pd.DataFrame(
        [{k: v for k, v in r.items() if k != "runs"} for r in host_records(data_dir)]
    )


def env_diff_groups(manifests: list[dict]) -> list[dict]:
    """The facts that differ between hosts, grouped by value: one record per (fact, value)
    with the hosts that have it, in env_diff's fact order. It stays one short table however
    many hosts there are (env_diff has a column per host)."""
    diff = env_diff(manifests)
    out = []
    for _, row in diff.iterrows():
        by_value: dict[str, list[str]] = {}
        for hid in diff.columns[1:]:
            by_value.setdefault(str(row[hid]), []).append(hid)
        for value, hids in sorted(by_value.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            out.append({"fact": row["fact"], "value": value, "hosts": hids})
    return out


def datasets_per_chapter(data_dir: Path | None = None):
    """host x chapter counts of datasets."""
    ms = all_manifests(data_dir)
    rows = [{"host_id": m.get("host", {}).get("host_id"), "chapter": m.get("chapter")} for m in ms]
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame(rows)
    return df.groupby(["chapter", "host_id"]).size().unstack(fill_value=0)
