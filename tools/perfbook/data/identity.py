"""Which machine measured a dataset: a host id that tells machines apart.

Machines cloned from one image share /etc/machine-id (this project's own sessions land on
different physical machines with one machine-id). So the host id combines the salted hash of
the machine-id, the *machine key*, with stable hardware facts that every manifest records:

    ID_FACTS     cpu_model, cpus, mem_gib (MemTotal rounded up to whole GiB), arch,
                 tsc_mhz (the TSC frequency to the nearest 50 MHz)

A machine whose ID_FACTS differ gets a different host id. Facts a manifest records but the id
leaves out, because older datasets lack them, are compared between all datasets of one id:

    CHECK_FACTS  cpu_family, cpu_model_number, cpu_stepping, tsc_khz (when the kernel was
                 told the frequency, not calibrated), dmi_uuid_hash

Two datasets of one id that disagree there are labelled "same id, different machine" on the
hosts page and by `python -m perfbook validate`; they are never merged silently.

Rounding. A TSC frequency the kernel *calibrates* varies from boot to boot (by up to about
1 MHz when calibrated against the PIT), so the id takes it to the nearest 50 MHz: nominal
frequencies sit on multiples of 50 or 100 MHz, at the middle of a bin, and a value such as
this project's 2,445.4 MHz (a 2.45 GHz part) stays 20 MHz from a bin's edge. Machines whose
TSCs differ by less than that share the id unless another fact tells them apart; where the
kernel was told the exact frequency, the kHz value is a check fact (below). MemTotal depends
on the kernel build by a few MiB and always sits below the installed size, so it is rounded
up to whole GiB from the manifest's 0.1 GiB figure.

The DMI product UUID (root-only) enters only as a salted hash; the raw machine-id never
leaves perfbook.data.hostinfo. Older datasets are brought to this identity once, by
`python -m perfbook identity migrate`, which records where each fact came from.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import re
import shutil
from pathlib import Path

from perfbook.data.dataset import RUN_DEPTH, read_csv, read_data, table_path

VERSION = 2
ID_FACTS = ("cpu_model", "cpus", "mem_gib", "arch", "tsc_mhz")
CHECK_FACTS = ("cpu_family", "cpu_model_number", "cpu_stepping", "tsc_khz", "dmi_uuid_hash")
_SALT = "perfbook-host-v2"

_KVM_CREATE_VM, _KVM_CREATE_VCPU, _KVM_GET_TSC_KHZ = 0xAE01, 0xAE41, 0xAEA3
_DMESG_TSC = (
    re.compile(r"tsc: Refined TSC clocksource calibration: ([0-9.]+) MHz"),
    re.compile(r"tsc: Detected ([0-9.]+) MHz processor"),
)


def tsc_from_kernel_log(text: str) -> int | None:
    """The TSC frequency in kHz from kernel log text: the refined calibration if the kernel
    printed one, else its first estimate; None if neither line is there."""
    for pat in _DMESG_TSC:
        found = pat.findall(text)
        if found:
            return round(float(found[-1]) * 1000)
    return None


def _tsc_kvm() -> int | None:
    """KVM_GET_TSC_KHZ on a throwaway vCPU: the frequency the host kernel uses (x86 KVM)."""
    try:
        kvm = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return None
    vm = vcpu = -1
    try:
        vm = fcntl.ioctl(kvm, _KVM_CREATE_VM, 0)
        vcpu = fcntl.ioctl(vm, _KVM_CREATE_VCPU, 0)
        khz = fcntl.ioctl(vcpu, _KVM_GET_TSC_KHZ, 0)
        return khz if khz > 0 else None
    except OSError:
        return None
    finally:
        for fd in (vcpu, vm, kvm):
            if fd >= 0:
                os.close(fd)


def tsc(kernel_log: str) -> tuple[int | None, str]:
    """(kHz, source) of this machine's TSC, from its kernel log (perfbook.data.hostinfo.kernel_log)
    or KVM; (None, why) where neither can tell."""
    khz = tsc_from_kernel_log(kernel_log)
    if khz:
        return khz, "kernel log"
    khz = _tsc_kvm()
    if khz:
        return khz, "KVM_GET_TSC_KHZ"
    return None, "unavailable: kernel log not readable (dmesg_restrict) and no /dev/kvm access"


def _dmi_uuid_hash() -> str | None:
    try:
        raw = Path("/sys/class/dmi/id/product_uuid").read_text().strip()
    except OSError:
        return None
    if not raw:
        return None
    return hashlib.sha256(f"{_SALT}:dmi:{raw.lower()}".encode()).hexdigest()[:12]


def mem_gib(mem_total_gib) -> int | None:
    return None if mem_total_gib is None else math.ceil(float(mem_total_gib))


def tsc_mhz(khz) -> int | None:
    return None if khz is None else int(round(float(khz) / 50000.0)) * 50


def machine_facts(host: dict, khz: int | None, khz_source: str, extra: dict | None = None) -> dict:
    """The identity facts of a manifest's host block plus the TSC reading. The exact kHz is a
    check fact only where the kernel was told the frequency (the tsc_known_freq flag)."""
    known_freq = "tsc_known_freq" in (host.get("tsc_flags") or ())
    m = {
        "version": VERSION,
        "machine_key": host.get("machine_key") or host.get("host_id"),
        "cpu_model": host.get("cpu_model"),
        "cpus": host.get("cpus_online"),
        "mem_gib": mem_gib(host.get("mem_total_gib")),
        "arch": host.get("arch"),
        "tsc_mhz": tsc_mhz(khz),
        "tsc_source": khz_source,
        "tsc_khz": int(khz) if (khz is not None and known_freq) else None,
    }
    m.update(extra or {})
    for k in CHECK_FACTS:
        m.setdefault(k, None)
    return m


def local_machine(host: dict, fms: dict, kernel_log: str) -> dict:
    """This machine's identity facts: `host` is the manifest host block being built, `fms`
    the CPU's family/model/stepping (perfbook.data.hostinfo.cpuinfo)."""
    khz, source = tsc(kernel_log)
    return machine_facts(host, khz, source, {**fms, "dmi_uuid_hash": _dmi_uuid_hash()})


def with_tsc(description: str | None, host: dict) -> str | None:
    """A host description with its TSC bin, so that two machines of one CPU model read apart
    ('AMD EPYC, 2 CPUs, kvm guest, TSC ~2450 MHz'); an opt-in label is left as it is."""
    mhz = (host.get("machine") or {}).get("tsc_mhz")
    if not description or host.get("label_opt_in") or mhz is None or "TSC ~" in description:
        return description
    return f"{description}, TSC ~{mhz} MHz"


def derive(machine: dict) -> str:
    """The host id of a set of identity facts."""
    parts = [f"{k}={machine.get(k)}" for k in ID_FACTS]
    text = "|".join([_SALT, str(machine.get("machine_key")), *parts])
    return "h-" + hashlib.sha256(text.encode()).hexdigest()[:12]


def check(manifest: dict) -> str | None:
    """Why a manifest's host id does not follow from its facts; None when it does."""
    host = manifest.get("host") or {}
    m = host.get("machine")
    if not isinstance(m, dict):
        return (
            "its host block predates host identity v2 (no 'machine' facts); "
            "run python -m perfbook identity migrate"
        )
    if m.get("id_override"):
        return None
    want = derive(m)
    if host.get("host_id") != want:
        return (
            f"host_id {host.get('host_id')!r} does not follow from its machine facts "
            f"(they give {want}): an edited or reused host id"
        )
    return None


def _disagree(manifests, names) -> dict[str, list[str]]:
    seen: dict[str, dict[str, set]] = {}
    for man in manifests:
        host = man.get("host") or {}
        m = host.get("machine") or {}
        facts = seen.setdefault(host.get("host_id"), {})
        for k in names:
            if m.get(k) is not None:
                facts.setdefault(k, set()).add(str(m[k]))
    return {
        h: [f"{k}: {' vs '.join(sorted(v))}" for k, v in sorted(f.items()) if len(v) > 1]
        for h, f in seen.items()
        if any(len(v) > 1 for v in f.values())
    }


def conflicts(manifests) -> dict[str, list[str]]:
    """host id -> the CHECK_FACTS on which its datasets disagree, as 'fact: a vs b': shown as
    "same id, different machine"."""
    return _disagree(manifests, CHECK_FACTS)


def clashes(manifests) -> dict[str, list[str]]:
    """host id -> the identity facts on which its datasets disagree: only an edited or reused
    host id (an explicit PERFBOOK_HOST_ID given to two machines) can do that; an error."""
    return _disagree(manifests, ("machine_key", *ID_FACTS))


# -- migration of datasets written before identity v2 --------------------------------------


def _tsc_evidence(runs_root: Path) -> dict[tuple[str, str], tuple[int, str]]:
    """(old host id, kernel release) -> (kHz, source) from tsc_alignment datasets:
    the same machine key and kernel build means the same boot image series on one machine."""
    ev = {}
    for mf in sorted(runs_root.glob("*/tsc_alignment/*/manifest.json")):
        run, facts = mf.parent, table_path(mf.parent, "tsc_facts")
        if facts is None:
            continue
        try:
            man = json.loads(read_data(mf, RUN_DEPTH)[1])
            t = read_csv(facts, dtype=str, keep_default_na=False)
            rows = dict(zip(t["key"], t["value"]))
        except (ValueError, KeyError):
            continue
        host = man.get("host") or {}
        khz = rows.get("kvm_get_tsc_khz")
        src = "KVM_GET_TSC_KHZ"
        if not khz:
            text = "\n".join(v for k, v in rows.items() if k.startswith("dmesg_tsc_"))
            khz, src = tsc_from_kernel_log(text), "kernel log"
        if not khz:
            continue
        key = (host.get("host_id"), host.get("kernel_release"))
        ev.setdefault(
            key,
            (
                int(float(khz)),
                f"inferred from tsc_alignment/{run.name} ({src}): same machine key "
                f"and kernel build {host.get('kernel_release')}",
            ),
        )
    return ev


def migrate(data_dir: Path, extra_evidence: dict | None = None, say=print) -> list[tuple[str, str]]:
    """Give every dataset under data_dir/runs written before identity v2 its machine facts and
    its v2 host id, moving it to data/runs/<new id>/. Tables are not touched. Returns
    (old path, new path) pairs. extra_evidence: {(old id, kernel release): (kHz, source)}."""
    root = Path(data_dir) / "runs"
    ev = _tsc_evidence(root)
    ev.update(extra_evidence or {})
    moved = []
    for mpath in sorted(root.glob("*/*/*/manifest.json")):
        run = mpath.parent
        man = json.loads(read_data(mpath, RUN_DEPTH)[1])
        host = man["host"]
        if isinstance(host.get("machine"), dict):
            continue
        old = host["host_id"]
        khz, source = ev.get(
            (old, host.get("kernel_release")), (None, "not recorded (dataset predates this fact)")
        )
        host["machine_key"] = old
        host["machine"] = machine_facts(host, khz, source, {"migrated_from": old})
        host["description"] = with_tsc(host.get("description"), host)
        new = derive(host["machine"])
        host["host_id"] = new
        dest = root / new / run.parent.name / run.name
        if dest.exists():
            raise SystemExit(f"error: {dest} exists already; not merging {run} into it")
        tmp = mpath.with_name(".manifest.json.tmp")
        tmp.write_text(json.dumps(man, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, mpath)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.rename(run, dest)
        moved.append((str(run), str(dest)))
        say(f"{old}/{run.parent.name}/{run.name} -> {new} (TSC {host['machine']['tsc_mhz']} MHz)")
    for d in sorted(root.glob("*/*"), reverse=True):
        if d.is_dir() and not any(d.iterdir()):
            d.rmdir()
    for d in sorted(root.glob("*")):
        if d.is_dir() and not any(d.iterdir()):
            shutil.rmtree(d)
    return moved
