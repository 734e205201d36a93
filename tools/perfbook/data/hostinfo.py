"""Host facts for a dataset manifest, and the anonymous host id.

Nothing here records a hostname, an IP or MAC address, a user name or a home
path unless the user opts in (PERFBOOK_HOST_LABEL names the host on purpose).
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from perfbook.core.errors import ParameterError
from perfbook.core.paths import repo_root
from perfbook.data import identity
from perfbook.hoststate.mounts import mounts  # noqa: F401  (hostinfo.mounts, as before)

TSC_FLAGS = (
    "tsc",
    "constant_tsc",
    "nonstop_tsc",
    "tsc_known_freq",
    "tsc_adjust",
    "rdtscp",
    "tsc_reliable",
    "tsc_deadline_timer",
)


def _read(path: str | Path, default: str | None = None) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return default


_FMS = {"cpu family": "cpu_family", "model": "cpu_model_number", "stepping": "cpu_stepping"}


def cpuinfo() -> dict:
    """The first CPU's model name, flags, and family/model/stepping (x86; absent elsewhere)."""
    model, flags, fms = None, set(), {}
    text = _read("/proc/cpuinfo", "") or ""
    for line in text.splitlines():
        key, _, val = line.partition(":")
        key = key.strip()
        if key == "model name" and model is None:
            model = val.strip()
        elif key == "flags" and not flags:
            flags = set(val.split())
        elif key in _FMS and _FMS[key] not in fms:
            fms[_FMS[key]] = val.strip()
    return {"model": model or platform.processor() or "unknown", "flags": flags, "fms": fms}


_KERNEL_LOG: list[str] = []


def kernel_log() -> str:
    """The kernel log (dmesg), read once per process; '' where it can't be read."""
    if not _KERNEL_LOG:
        try:
            out = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        _KERNEL_LOG.append(out)
    return _KERNEL_LOG[0]


def _detect_virt(flag: str) -> str | None:
    exe = shutil.which("systemd-detect-virt")
    if not exe:
        return None
    r = subprocess.run([exe, flag], capture_output=True, text=True)
    return r.stdout.strip() or None


def container() -> str:
    """'none' or the container runtime (systemd-detect-virt --container)."""
    return _detect_virt("--container") or "none"


def virtualization() -> str:
    """'none', or the hypervisor's name (systemd-detect-virt --vm), ignoring containers."""
    out = _detect_virt("--vm")
    if out:
        return out
    if "hypervisor" in cpuinfo()["flags"]:
        vendor = _read("/sys/class/dmi/id/sys_vendor") or "unknown"
        return f"hypervisor ({vendor})"
    return "none"


def pmu() -> dict:
    """The perf event sources, and whether one is a hardware PMU ('cpu', 'cpu_core', 'cpu_atom'
    or an ARM/POWER core PMU): a guest without a virtual PMU has only software sources."""
    d = Path("/sys/bus/event_source/devices")
    names = sorted(p.name for p in d.iterdir()) if d.is_dir() else []
    hw = [
        n
        for n in names
        if n in ("cpu", "cpu_core", "cpu_atom")
        or n.startswith("armv8_pmuv3")
        or n.startswith("power")
    ]
    return {"hardware": bool(hw), "sources": names}


def lockdown() -> str:
    """Kernel lockdown: securityfs's [selected] mode when it is mounted, else what the kernel
    log says ("restricted (kernel log)" once a Lockdown: line was printed), else "unknown"."""
    text = _read("/sys/kernel/security/lockdown")
    if text and "[" in text:
        return text.split("[", 1)[1].split("]", 1)[0]
    return "restricted (kernel log)" if "Lockdown:" in kernel_log() else "unknown"


def clocksource() -> dict:
    base = "/sys/devices/system/clocksource/clocksource0"
    return {
        "current": _read(f"{base}/current_clocksource"),
        "available": (_read(f"{base}/available_clocksource") or "").split(),
    }


def mitigations() -> dict:
    d = Path("/sys/devices/system/cpu/vulnerabilities")
    if not d.is_dir():
        return {}
    return {p.name: _read(p) for p in sorted(d.iterdir())}


def governor() -> str | None:
    return _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")


def tool_version(cmd: list[str]) -> str | None:
    """First line of `cmd` (e.g. ['gcc', '--version']), None if not installed."""
    if not shutil.which(cmd[0]):
        return None
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = (r.stdout or r.stderr).strip().splitlines()
    return out[0].strip() if out else None


def python_packages(
    names=("pandas", "numpy", "seaborn", "papermill", "pyelftools", "jupyter-book", "scipy"),
) -> dict:
    vers = {}
    for n in names:
        try:
            vers[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            vers[n] = None
    return vers


def machine_secret() -> str:
    """A stable per-machine string that never leaves this module un-hashed."""
    for p in ("/etc/machine-id", "/var/lib/dbus/machine-id", "/sys/class/dmi/id/product_uuid"):
        v = _read(p)
        if v:
            return v
    # Last resort: facts that are stable but not identifying on their own.
    ci = cpuinfo()
    return f"{ci['model']}|{os.cpu_count()}|{platform.machine()}"


def machine_key() -> str:
    """The salted hash of the machine-id: shared by every machine cloned from one image."""
    digest = hashlib.sha256(("perfbook-host-v1:" + machine_secret()).encode()).hexdigest()
    return "h-" + digest[:12]


def _id_override() -> str | None:
    env = os.environ.get("PERFBOOK_HOST_ID")
    if env and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", env):
        raise ParameterError(
            f"PERFBOOK_HOST_ID={env!r} is not a valid id; use letters, digits, '.', '_' or '-'"
        )
    return env or None


def machine() -> dict:
    """This machine's identity facts (perfbook.data.identity): the machine key plus stable hardware."""
    ci = cpuinfo()
    base = {
        "machine_key": machine_key(),
        "cpu_model": ci["model"],
        "cpus_online": os.cpu_count(),
        "mem_total_gib": mem_total_gib(),
        "arch": platform.machine(),
        "tsc_flags": sorted(f for f in TSC_FLAGS if f in ci["flags"]),
    }
    m = identity.local_machine(base, ci["fms"], kernel_log())
    if _id_override():
        m["id_override"] = True
    return m


def host_id() -> str:
    """Anonymous id of this machine: 'h-' + 12 hex (perfbook.data.identity: the machine-id's salted hash
    combined with CPU model, CPU count, memory, architecture and TSC frequency).

    PERFBOOK_HOST_ID overrides it (useful for labelling a second machine).
    """
    return _id_override() or identity.derive(machine())


def kvm_modules(sys_module: Path = Path("/sys/module")) -> list[str]:
    """The kvm modules present, loaded or built in (kvm, kvm_intel, kvm_amd, kvm_pvm ...)."""
    return sorted(p.name for p in sys_module.glob("kvm*"))


def mem_total_gib() -> float | None:
    for line in (_read("/proc/meminfo", "") or "").splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 1024 / 1024, 1)
    return None


def describe(label: str | None = None) -> str:
    """A short non-identifying description, e.g. 'AMD EPYC, 2 CPUs, kvm guest'."""
    if label:
        return label
    virt = virtualization()
    where = "bare metal" if virt == "none" else f"{virt} guest"
    return f"{cpuinfo()['model']}, {os.cpu_count()} CPUs, {where}"


def host_facts() -> dict:
    """Everything a manifest records about this host."""
    ci = cpuinfo()
    label = os.environ.get("PERFBOOK_HOST_LABEL")  # opt-in, may identify the host
    mach = machine()
    return {
        "host_id": _id_override() or identity.derive(mach),
        "machine_key": mach["machine_key"],
        "machine": mach,
        "description": describe(label)
        if label
        else identity.with_tsc(describe(), {"machine": mach}),
        "label_opt_in": bool(label),
        "note": os.environ.get("PERFBOOK_HOST_NOTE")
        or None,  # opt-in: what kind of machine this is
        "cpu_model": ci["model"],
        "cpus_online": os.cpu_count(),
        "mem_total_gib": mem_total_gib(),
        "arch": platform.machine(),
        "kernel_release": platform.release(),
        "kernel_version": platform.version(),
        "os_release": _os_release(),
        "virtualization": virtualization(),
        "container": container(),
        "clocksource": clocksource(),
        "tsc_flags": sorted(f for f in TSC_FLAGS if f in ci["flags"]),
        "cpu_flags_hypervisor": "hypervisor" in ci["flags"],
        "mitigations": mitigations(),
        "governor": governor(),
        "kvm_modules": kvm_modules(),
        "dev_kvm": os.path.exists("/dev/kvm"),
        "pmu": pmu(),
        "lockdown": lockdown(),
        "hz_guess": _config_hz(),
        "preempt": _preempt(),
        "virtio_devices": virtio_devices(),
    }


VIRTIO_DEVICE_NAMES = {
    1: "net",
    2: "blk",
    3: "console",
    4: "rng",
    5: "balloon",
    8: "scsi",
    9: "9p",
    16: "gpu",
    18: "input",
    19: "vsock",
    26: "fs",
}


def virtio_devices() -> list[dict]:
    """This machine's own virtio devices (if it is a guest): type and feature bits."""
    out = []
    for d in sorted(Path("/sys/bus/virtio/devices").glob("virtio*")):
        dev = _read(d / "device")
        try:
            kind = VIRTIO_DEVICE_NAMES.get(int(dev, 16), dev) if dev else None
        except ValueError:
            kind = dev
        bits = _read(d / "features") or ""
        out.append({"device": kind, "features": [i for i, c in enumerate(bits) if c == "1"]})
    return sorted(out, key=lambda x: (str(x["device"]), x["features"]))


def _os_release() -> str | None:
    for line in (_read("/etc/os-release", "") or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip('"')
    return None


def _config_hz() -> int | None:
    for p in (f"/boot/config-{platform.release()}",):
        for line in (_read(p, "") or "").splitlines():
            if line.startswith("CONFIG_HZ="):
                return int(line.split("=")[1])
    return None


def _preempt() -> str | None:
    v = platform.version()
    for word in ("PREEMPT_DYNAMIC", "PREEMPT_RT", "PREEMPT"):
        if word in v:
            return word
    return None


def tool_versions(extra: dict[str, list[str]] | None = None) -> dict:
    cmds = {"gcc": ["gcc", "--version"], "perf": ["perf", "--version"], "python": None}
    if extra:
        cmds.update(extra)
    out = {}
    for name, cmd in cmds.items():
        out[name] = sys.version.split()[0] if cmd is None else tool_version(cmd)
    out["python_packages"] = python_packages()
    return out


def git_commit() -> dict:
    root = repo_root()
    if not shutil.which("git"):
        return {"commit": None, "dirty": None}
    r = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    commit = r.stdout.strip() if r.returncode == 0 else None
    d = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    )
    dirty = bool(d.stdout.strip()) if d.returncode == 0 else None
    return {"commit": commit, "dirty": dirty}


def is_root() -> bool:
    return os.geteuid() == 0
