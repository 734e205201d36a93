"""A second machine for the book: a QEMU TCG guest that runs the measure step itself.

The project has one physical machine. This module boots a *virtual* one from it
and runs the book's own ``python -m tools measure`` inside, so that the book
holds datasets from a host whose CPU, kernel, devices and identity differ:

* **CPU**: QEMU's TCG emulator (``-accel tcg,thread=multi -cpu max,avx=off,avx2=off``;
  MachineSpec says why AVX is off). Every guest instruction is translated in
  software; no KVM, no hardware virtualization. Costs measured there are costs
  on an emulated CPU, and each boot checks first that numpy computes right on it
  (cpu_selfcheck).
* **kernel**: Debian's generic 6.1 kernel (``linux-image-6.1.0-NN-amd64``,
  the package ``linux-image-amd64`` names), fetched with ``apt-get download``
  and cached in ``build/secondhost/<abi>/`` by ``tools.guest.ensure_artefacts``.
  Debian's cloud kernel (the one ``tools.guest`` boots) has no 9p, so the
  generic one is used here.
* **devices and size**: 2 vCPUs, its own RAM size, one virtio-blk scratch disk
  (a sparse file formatted ext4 on this host) mounted at ``/var/tmp``, a
  virtio-net card on QEMU's user network with restrict=on (an address, no way
  out), no ``/dev/kvm``.
* **identity**: its own ``/etc/machine-id``, made once and kept in
  ``build/secondhost/machine-id``, so ``tools.hostinfo.host_id()`` gives it a
  stable id of its own.

What it shares with this host is the *userland*: this host's ``/`` is exported
read-only over virtio-9p and becomes the lower layer of an overlayfs whose upper
layer is a tmpfs in the guest, so the guest runs the same Python, ``.venv`` and
checkout at the same paths, and anything it writes stays in its RAM. A second
writable 9p share (a directory in the scratch directory) brings back its
host facts, the measure status and the datasets, which tools.fleet's import then
adopts into ``data/runs/<guest-host-id>/`` (a dataset is never overwritten; one
whose chapter notebook failed in the guest stays with the logs in
``build/secondhost/logs/`` instead).

Every manifest says what the machine is: ``PERFBOOK_HOST_LABEL`` becomes the
host description and ``PERFBOOK_HOST_NOTE`` the ``host.note`` field, a list of
``key=value`` pairs (kind, parent host, accelerator, CPU model, vCPUs, memory,
kernel, QEMU version, root file system).

One guest is booted per chapter, each under this host's measure lock (the guest
keeps both CPUs busy, so nothing else should measure meanwhile). QEMU is killed
and the scratch directory removed on success, failure, SIGINT and SIGTERM; QEMU
also gets PR_SET_PDEATHSIG, and a scratch directory whose owner died is swept
by the next run. Nothing is mounted on this host.

Usage::

    python -m tools.secondhost                       # the TCG plan below, every chapter it can run
    python -m tools.secondhost --chapters trace_overhead --profile quick
    python -m tools.secondhost --facts               # boot once, print the guest's host facts
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from . import guest
from .errors import ParameterError, PerfbookError, one_line
from .paths import build_dir, repo_root, runs_dir
from .proc import die_with_parent

KERNEL_META = "linux-image-amd64"
# loaded in the guest's initramfs (with their dependencies), after tools.guest's base ones
EXTRA_MODULES = ("9pnet_virtio", "9p", "overlay", "ext4", "crc32c_generic", "crc32c_intel", "veth",
                 "virtio_net")
GUEST_ADDR = "10.0.2.15/24"  # QEMU user networking's guest address; restrict=on: no way out
ROOT_TAG, OUT_TAG = "hostroot", "out"
PROFILES = ("quick", "default", "full")
END_RE = guest.END_RE

# Chapters that cannot run in this guest, and why (a recorded skip, not a failure).
NOT_IN_GUEST = {
    "virtio_features": "boots QEMU guests itself: TCG inside a TCG guest (nested emulation) "
                       "would take hours per boot",
    "qemu_cache_modes": "boots QEMU guests itself: TCG inside a TCG guest (nested emulation) "
                        "would take hours per boot",
    "virtio_blk_latency": "boots QEMU guests itself: TCG inside a TCG guest (nested emulation) "
                          "would take hours per boot",
}

# Chapters left out unless named with --chapters, and why.
NOT_BY_DEFAULT = {
    "iostat_internals": "Debian's 6.1 kernel has no block:block_io_start/block_io_done tracepoints "
                        "(Linux 6.5 added them), which the chapter traces; with trace=False its "
                        "notebook stops at KeyError 'trace_await', so the dataset would break the chapter",
}

# The plan for an emulated CPU: (profile, notebook parameters, wall budget in seconds).
# TCG runs code 10-50x slower than the hardware, and every boot pays about 3 minutes
# of Python and Jupyter start-up. The profiles keep each chapter's repeats and
# interleaving and cut the work per repeat (quick) or the time budget of the
# adaptive repetition (rep_budget_s), so that the whole plan takes about half an hour.
PLAN: dict[str, tuple[str, dict, int]] = {
    # quick's 2000-call batches; 5..12 rounds of all mechanisms within 90 s
    "trace_overhead": ("quick", {"rep_min_runs": 5, "rep_max_runs": 12, "rep_budget_s": 90}, 900),
    # quick's small images, 3 timed repeats per variant
    "qcow2_overlap": ("quick", {"repeats": 3}, 900),
    # default: time-based cells (0.5 s rrbench, 1 s netperf), 45 s per path
    "netperf_latency": ("default", {}, 900),
    # default: 1 s per cell, at most 60 s of rounds per load
    "cpu_pinning": ("default", {"rep_budget_s": 60}, 900),
    # collect finds no /dev/kvm in the guest and records that; the TSC facts and the
    # cross-CPU skew ping-pong still run
    "tsc_alignment": ("quick", {}, 600),
    "iostat_internals": ("default", {"trace": False}, 900),
}
MEASURE_MAIN = ("import logging, sys; logging.basicConfig(level=logging.INFO, format='%(message)s', "
                "stream=sys.stdout); from tools.__main__ import main; sys.exit(main(sys.argv[1:]))")
# guest lines shown on the terminal (everything goes to build/secondhost/logs/*/output.log)
SHOW_RE = re.compile(r"^\s*\[|^error:|\w*Error\b|\b(SKIPPED|FAILED|Traceback)\b|new dataset|second host|self-check")
BOOT_ALLOWANCE = 240  # seconds for boot, Python start-up and copying the results back


# --------------------------------------------------------------------------
# the machine
# --------------------------------------------------------------------------
@dataclass
class MachineSpec:
    cpus: int = 2
    memory_mib: int = 3072
    # -cpu: every feature TCG emulates except AVX/AVX2. QEMU 7.2's TCG AVX2 miscomputes:
    # numpy's AVX2 argsort of uint64 returned a wrong order there, and one run died with a
    # general protection fault in numpy; cpu_selfcheck() guards every boot against such a CPU.
    cpu_model: str = "max,avx=off,avx2=off"
    scratch_gib: int = 8        # the virtio-blk scratch disk (sparse), ext4, at /var/tmp

    def validate(self) -> None:
        for k, lo, hi in (("cpus", 1, 8), ("memory_mib", 1024, 16384), ("scratch_gib", 1, 256)):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ParameterError(f"{k} must be an integer in {lo}..{hi}, got {v!r}")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,40}(,[+-]?[A-Za-z0-9_.-]{1,40}(=[A-Za-z0-9]{1,10})?){0,40}",
                            str(self.cpu_model)):
            raise ParameterError(f"cpu_model must be a QEMU -cpu value like 'max' or 'max,avx2=off', "
                                 f"got {self.cpu_model!r}")


@dataclass
class Step:
    """One chapter: one boot of the guest, one `python -m tools measure` in it."""
    chapter: str
    profile: str
    params: dict = field(default_factory=dict)
    budget_s: int = 900

    def measure_argv(self) -> list[str]:
        """`python -m tools measure` (its main()), with papermill's cell-output logging on, so
        that the chapter's own progress lines reach the serial port."""
        argv = [".venv/bin/python", "-c", MEASURE_MAIN, "measure", "--strict",
                "--chapters", self.chapter, "--profile", self.profile]
        for k, v in sorted(self.params.items()):
            argv += ["--param", f"{k}={v if isinstance(v, str) else json.dumps(v)}"]
        return argv


def plan(chapters: list[str] | None = None, profile: str = "plan",
         sets: list[str] | None = None) -> tuple[list[Step], dict[str, str]]:
    """The steps to run and the chapters left out (name -> reason).

    profile 'plan' takes each chapter's PLAN entry; 'quick'/'default'/'full'
    use that profile without the plan's parameters. `sets` are 'CHAPTER.NAME=VALUE'
    strings added on top (VALUE as JSON if it parses, else a string)."""
    from .chapters import CHAPTERS
    known = [c.name for c in CHAPTERS]
    if profile != "plan" and profile not in PROFILES:
        raise ParameterError(f"profile must be 'plan' or one of {PROFILES}, got {profile!r}")
    if chapters is None:
        names = list(known)
    else:
        names = list(dict.fromkeys(chapters))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ParameterError(f"unknown chapter {unknown[0]!r}; known: {', '.join(known)}")
    left_out = {n: NOT_IN_GUEST[n] for n in names if n in NOT_IN_GUEST}
    if chapters is None:
        left_out.update({n: NOT_BY_DEFAULT[n] for n in names if n in NOT_BY_DEFAULT})
        left_out.update({n: "not in tools.secondhost's TCG plan yet (name it with --chapters to try it)"
                         for n in names if n not in PLAN and n not in left_out})
    steps = []
    for n in names:
        if n in left_out:
            continue
        prof, params, budget = PLAN.get(n, ("quick", {}, 900))
        if profile != "plan":
            prof, params = profile, {}
        steps.append(Step(n, prof, dict(params), budget))
    for item in sets or ():
        target, eq, raw = item.partition("=")
        ch, dot, name = target.partition(".")
        if not eq or not dot or not name.isidentifier():
            raise ParameterError(f"--set wants CHAPTER.NAME=VALUE, got {item!r}")
        step = next((s for s in steps if s.chapter == ch), None)
        if step is None:
            raise ParameterError(f"--set {item!r}: {ch} is not among the chapters of this run")
        if name in ("mode", "profile", "data_dir"):
            raise ParameterError(f"--set {item!r}: {name} is chosen by tools.secondhost")
        try:
            step.params[name] = json.loads(raw)
        except ValueError:
            step.params[name] = raw
    return steps, left_out


def machine_id(path: Path | None = None) -> str:
    """The guest's /etc/machine-id: made once (random), then read back forever."""
    path = Path(path) if path else build_dir() / "secondhost" / "machine-id"
    try:
        v = path.read_text().strip()
        if re.fullmatch(r"[0-9a-f]{32}", v):
            return v
    except OSError:
        pass
    v = uuid.uuid4().hex
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(v + "\n")
    tmp.replace(path)
    return v


def describe(spec: MachineSpec, artefacts: dict, parent_id: str, qemu: str | None) -> tuple[str, str]:
    """(PERFBOOK_HOST_LABEL, PERFBOOK_HOST_NOTE) for the guest's manifests."""
    kver = artefacts["kernel_version"]
    label = (f"QEMU TCG guest (emulated x86-64, {spec.cpus} vCPUs, Debian {kver} kernel) "
             f"on host {parent_id}")
    note = "; ".join(f"{k}={v}" for k, v in (
        ("kind", "qemu-tcg-guest"),
        ("parent_host", parent_id),
        ("accel", "tcg,thread=multi"),
        ("cpu_model", spec.cpu_model),
        ("vcpus", spec.cpus),
        ("memory_mib", spec.memory_mib),
        ("kernel_package", artefacts["kernel_package"]),
        ("kernel_version", kver),
        ("qemu", qemu or "unknown"),
        ("rootfs", "parent's / read-only over virtio-9p, tmpfs overlay"),
        ("scratch", f"virtio-blk ext4 {spec.scratch_gib} GiB sparse file, cache=none"),
        ("net", f"virtio-net on QEMU user networking, restrict=on (no way out), {GUEST_ADDR}"),
        ("timings", "emulated CPU: not comparable with hardware in absolute terms"),
        ("tool", "tools.secondhost"),
    ))
    return label, note


# --------------------------------------------------------------------------
# what runs in the guest
# --------------------------------------------------------------------------
INIT_TEMPLATE = r"""#!/bin/busybox sh
# tools.secondhost: PID 1 in the initramfs; builds the root and switches to it
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
echo "@@PERFBOOK-INIT@@ $(cut -d' ' -f1 /proc/uptime)" > /dev/console
fail() {
  echo "secondhost init: $*" > /dev/console
  { echo "@@PERFBOOK-BEGIN@@"; echo "secondhost init failed: $*"; echo "@@PERFBOOK-END rc=99@@"; } > /dev/ttyS1
  sync; poweroff -f
}
for m in $(cat /etc/modules.order); do
  insmod /lib/modules/$m.ko 2>/dev/console || echo "insmod $m failed" > /dev/console
done
mkdir -p /lower /upper /newroot
mount -t 9p -o ro,trans=virtio,version=9p2000.L,cache=loose,msize=262144 @ROOT_TAG@ /lower \
  || fail "cannot mount the parent's / (9p tag @ROOT_TAG@)"
mount -t tmpfs -o mode=0755 upper /upper && mkdir -p /upper/u /upper/w || fail "tmpfs"
mount -t overlay -o lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w overlay /newroot \
  || fail "overlayfs over 9p"
# this machine's own identity; nothing of the parent's container
echo @MACHINE_ID@ > /newroot/etc/machine-id
rm -f /newroot/.dockerenv /newroot/run/.containerenv
mkdir -p /newroot/boot && cp /secondhost/config /newroot/boot/config-@RELEASE@
mkdir -p /newroot/out
mount -t 9p -o trans=virtio,version=9p2000.L,cache=none,msize=262144 @OUT_TAG@ /newroot/out \
  || fail "cannot mount the results share (9p tag @OUT_TAG@)"
mount -t ext4 /dev/vda /newroot/var/tmp || fail "cannot mount the scratch disk /dev/vda at /var/tmp"
chmod 1777 /newroot/var/tmp
mount --move /proc /newroot/proc
mount --move /sys /newroot/sys
mount --move /dev /newroot/dev
mount -t tmpfs -o mode=0755,nosuid,nodev run /newroot/run
mount -t tmpfs -o mode=1777,nosuid,nodev tmp /newroot/tmp
cp /secondhost/run.sh /newroot/run/perfbook-secondhost.sh
exec switch_root /newroot /bin/bash /run/perfbook-secondhost.sh
fail "switch_root"
"""

RUN_TEMPLATE = r"""#!/bin/bash
# tools.secondhost: PID 1 of the second host after switch_root (the parent's userland)
exec >/dev/ttyS1 2>&1
stty -F /dev/ttyS1 raw -echo 2>/dev/null
echo "@@PERFBOOK-BEGIN@@"
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 TERM=dumb PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
export PERFBOOK_HOST_LABEL=@LABEL@
export PERFBOOK_HOST_NOTE=@NOTE@
finish() {
  echo "@@PERFBOOK-END rc=$1@@"
  sync
  echo o > /proc/sysrq-trigger
  sleep 120
}
mkdir -p /dev/shm /dev/pts /run/lock
mount -t tmpfs -o mode=1777,nosuid,nodev shm /dev/shm
mount -t devpts -o mode=620,ptmxmode=666 devpts /dev/pts
ln -sf /proc/self/fd /dev/fd; ln -sf fd/0 /dev/stdin; ln -sf fd/1 /dev/stdout; ln -sf fd/2 /dev/stderr
hostname perfbook-secondhost
ip link set lo up || finish 97
# a NIC with an IPv4 address, as on any machine (getaddrinfo's AI_ADDRCONFIG wants one);
# QEMU's user network with restrict=on lets nothing out
nic=$(ls /sys/class/net | grep -v '^lo$' | head -n 1)
[ -n "$nic" ] && ip addr add @GUEST_ADDR@ dev "$nic" && ip link set "$nic" up || finish 94
cd @REPO@ || finish 96
echo "second host up at $(cut -d' ' -f1 /proc/uptime) s; kernel $(uname -r)"
.venv/bin/python -c '
import json
from tools import hostinfo
f = hostinfo.host_facts()
json.dump(f, open("/out/facts.json", "w"), indent=1, sort_keys=True)
open("/out/host_id", "w").write(f["host_id"])
print("second host id", f["host_id"], "-", f["description"])
' || finish 98
.venv/bin/python -c 'from tools.secondhost import cpu_selfcheck; print(cpu_selfcheck())' || finish 93
rc=0
@COMMANDS@
cp build/measure-status.jsonl /out/status.jsonl 2>/dev/null
mkdir -p /out/notebooks
@NOTEBOOKS@
gid=$(cat /out/host_id)
if [ -d "data/runs/$gid" ]; then mkdir -p /out/runs && cp -a "data/runs/$gid" /out/runs/ || rc=95; fi
dmesg 2>/dev/null | tail -n 60 > /out/dmesg-tail.log
finish $rc
"""


# what the guest script's exit codes mean (besides the measure step's own)
RC_MEANING = {99: "the initramfs could not build the root (see the console log)",
              98: "the guest could not read its host facts", 97: "loopback did not come up",
              96: "the checkout is not at the same path in the guest", 95: "copying the results back failed",
              94: "the network card did not come up",
              93: "the emulated CPU failed the numerical self-check: choose another --cpu-model"}


def cpu_selfcheck(n: int = 100001, seed: int = 1) -> str:
    """Check numpy's vectorized sort, argsort, median and matmul against plain Python.

    An emulator that gets a SIMD instruction wrong makes every statistic wrong
    without a sign; this runs in the guest before anything is measured."""
    import statistics
    import numpy as np
    rng = np.random.default_rng(seed)
    n |= 1  # odd: the median is one element, exact in every dtype
    for dt in (np.uint64, np.int64, np.float64, np.uint32, np.int32, np.float32):
        a = (rng.random(n) * 1e6).astype(dt)
        ref = sorted(a.tolist())
        if np.sort(a).tolist() != ref or a[np.argsort(a)].tolist() != ref:
            raise PerfbookError(f"emulated CPU self-check failed: numpy sorts {dt.__name__} wrongly")
        if float(np.median(a)) != float(statistics.median(ref)):
            raise PerfbookError(f"emulated CPU self-check failed: numpy's median of {dt.__name__} is wrong")
    m = rng.random((24, 24))
    ref = [[sum(m[i, k] * m[k, j] for k in range(24)) for j in range(24)] for i in range(24)]
    if float(np.max(np.abs(m @ m - np.array(ref)))) > 1e-9:
        raise PerfbookError("emulated CPU self-check failed: numpy's matrix product is wrong")
    return f"emulated CPU self-check passed (numpy {np.__version__}: sort, argsort, median of 6 dtypes; matmul)"


def init_script(mid: str, release: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{32}", mid):
        raise ParameterError(f"machine id must be 32 hex digits, got {mid!r}")
    if not re.fullmatch(r"[A-Za-z0-9._+-]+", release):
        raise ParameterError(f"bad kernel release {release!r}")
    return (INIT_TEMPLATE.replace("@ROOT_TAG@", ROOT_TAG).replace("@OUT_TAG@", OUT_TAG)
            .replace("@MACHINE_ID@", mid).replace("@RELEASE@", release))


def run_script(steps: list[Step], label: str, note: str, repo: Path | None = None) -> str:
    cmds = []
    for s in steps:
        argv = " ".join(shlex.quote(a) for a in s.measure_argv())
        cmds.append(f"echo '[secondhost] measure {s.chapter} (profile {s.profile})'\n"
                    f"{argv} || rc=$?")
    return (RUN_TEMPLATE.replace("@LABEL@", shlex.quote(label)).replace("@NOTE@", shlex.quote(note))
            .replace("@REPO@", shlex.quote(str(repo or repo_root()))).replace("@GUEST_ADDR@", GUEST_ADDR)
            .replace("@COMMANDS@", "\n".join(cmds) if cmds else ":")
            .replace("@NOTEBOOKS@", "\n".join(f"cp build/measure/{s.chapter}.ipynb /out/notebooks/ 2>/dev/null"
                                              for s in steps) or ":"))


def qemu_cmdline(spec: MachineSpec, artefacts: dict, scratch: Path, initrd: Path) -> list[str]:
    """The QEMU command: TCG, the parent's / read-only as 9p, a results share, a scratch disk."""
    return [guest.QEMU, "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
            "-machine", "pc", "-accel", "tcg,thread=multi", "-cpu", spec.cpu_model,
            "-m", str(int(spec.memory_mib)), "-smp", str(int(spec.cpus)),
            "-kernel", str(Path(artefacts["dir"]) / "vmlinuz"), "-initrd", str(initrd),
            "-append", "console=ttyS0 panic=-1 loglevel=4 rdinit=/secondhost/init",
            "-serial", f"file:{scratch / 'console.log'}",
            "-serial", f"file:{scratch / 'result.log'}",
            "-virtfs", f"local,path=/,mount_tag={ROOT_TAG},security_model=none,readonly=on,"
                       "multidevs=remap",
            "-virtfs", f"local,path={scratch / 'out'},mount_tag={OUT_TAG},security_model=none,"
                       "multidevs=remap",
            "-drive", f"file={scratch / 'disk.img'},format=raw,if=none,id=scratch,cache=none,aio=threads",
            "-device", "virtio-blk-pci,drive=scratch,serial=scratch",
            "-netdev", "user,id=net0,restrict=on", "-device", "virtio-net-pci,netdev=net0",
            "-device", "virtio-rng-pci"]


def initrd_bytes(artefacts: dict, init: str, run: str) -> bytes:
    """tools.guest's initramfs (busybox + modules) plus our init, script and kernel config."""
    base = (Path(artefacts["dir"]) / "initramfs.cpio.gz").read_bytes()
    config = (Path(artefacts["dir"]) / "config").read_bytes()
    extra = guest.build_cpio([("secondhost", guest.DIR | 0o755, b""),
                              ("secondhost/init", guest.REG | 0o755, init.encode()),
                              ("secondhost/run.sh", guest.REG | 0o755, run.encode()),
                              ("secondhost/config", guest.REG | 0o644, config)])
    return base + gzip.compress(extra)


# --------------------------------------------------------------------------
# preflight
# --------------------------------------------------------------------------
def preflight() -> list[str]:
    """Why the second host can't be booted here ([] = it can)."""
    reasons = list(guest.preflight())
    if not shutil.which("mkfs.ext4"):
        reasons.append("mkfs.ext4 is missing (apt-get install e2fsprogs): it formats the scratch disk")
    if shutil.which(guest.QEMU):
        try:
            r = subprocess.run([guest.QEMU, "-device", "help"], capture_output=True, text=True, timeout=30)
            if "virtio-9p-pci" not in r.stdout + r.stderr:
                reasons.append(f"{guest.QEMU} has no virtio-9p-pci (VirtFS): the guest could not see the parent's /")
        except (OSError, subprocess.TimeoutExpired):
            reasons.append(f"{guest.QEMU} -device help failed")
    if not (repo_root() / ".venv" / "bin" / "python").exists():
        reasons.append("no .venv in this checkout: the guest runs the parent's .venv (make setup first)")
    return reasons


def artefacts(progress=None) -> dict:
    return guest.ensure_artefacts(progress, meta=KERNEL_META, extra_modules=EXTRA_MODULES,
                                  root=build_dir() / "secondhost")


# --------------------------------------------------------------------------
# booting
# --------------------------------------------------------------------------
@dataclass
class BootResult:
    rc: int | None
    output: str
    seconds: float
    boot_seconds: float | None
    out: Path               # the results share (valid until the Machine closes)
    console_tail: str


class Machine(guest.Runner):
    """Owns a scratch directory and at most one QEMU; a context manager.

    tools.guest.Runner's lifetime: on exit, exception, SIGINT, SIGTERM or SIGHUP, close()
    kills QEMU, removes the scratch directory (tools.scratch, secondhost-<pid>-*) and
    ends the tools.guard stretch. Only the scratch name, the preflight, the artefacts
    and the boot differ."""
    scratch_chapter = "secondhost"

    def __init__(self, spec: MachineSpec | None = None, progress=None, echo=None):
        super().__init__(accel="tcg", progress=progress)
        self.spec = spec or MachineSpec()
        self.spec.validate()
        self.echo = echo or (lambda s: None)   # each line the guest prints

    def _preflight(self) -> list[str]:
        return preflight()

    def _artefacts(self) -> dict:
        return artefacts(self.say)

    def _fresh(self) -> None:
        """A new scratch disk and an empty results share for the next boot."""
        assert self.scratch is not None
        for name in ("out", "console.log", "result.log", "qemu.log", "disk.img", "initrd.img"):
            p = self.scratch / name
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()
        (self.scratch / "out").mkdir()
        disk = self.scratch / "disk.img"
        with open(disk, "wb") as f:
            f.truncate(int(self.spec.scratch_gib) << 30)
        # initialise inode tables and journal now, so that no lazy-init thread writes
        # in the background of the guest's measurements
        r = subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "perfbook-scratch",
                            "-E", "lazy_itable_init=0,lazy_journal_init=0", str(disk)],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise PerfbookError(f"mkfs.ext4 failed: {(r.stderr.strip() or 'exit %d' % r.returncode).splitlines()[-1]}")

    def boot(self, run: str, mid: str, timeout: float) -> BootResult:
        """Boot the guest with run script `run`; stream its output; wait for the END marker."""
        if self.scratch is None or self.artefacts is None:
            raise PerfbookError("Machine.boot() outside its 'with' block")
        self._fresh()
        initrd = self.scratch / "initrd.img"
        initrd.write_bytes(initrd_bytes(self.artefacts, init_script(mid, self.artefacts["kernel_release"]), run))
        cmd = qemu_cmdline(self.spec, self.artefacts, self.scratch, initrd)
        console, result = self.scratch / "console.log", self.scratch / "result.log"
        t0 = time.monotonic()
        with open(self.scratch / "qemu.log", "wb") as qlog:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=qlog,
                                         stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        booted, rc, pos, buf, seen = None, None, 0, "", []
        try:
            while True:
                if booted is None and console.exists() and guest.INIT_MARK in console.read_text(errors="replace"):
                    booted = time.monotonic() - t0
                    self.say(f"guest kernel booted in {booted:.0f} s")
                if result.exists():
                    with open(result, "rb") as f:
                        f.seek(pos)
                        chunk = f.read()
                    pos += len(chunk)
                    buf += chunk.decode(errors="replace").replace("\r", "")
                    *lines, buf = buf.split("\n")
                    for line in lines:
                        m = END_RE.search(line)
                        if m:
                            rc = int(m.group(1))
                            break
                        if line.strip() and guest.BEGIN not in line:
                            seen.append(line)
                            self.echo(line)
                    if rc is not None:
                        break
                if self.proc.poll() is not None:
                    break
                if time.monotonic() - t0 > timeout:
                    guest._kill(self.proc)
                    raise PerfbookError(f"the second host did not finish within {timeout:.0f} s "
                                        f"(last line: {seen[-1] if seen else 'none'})")
                time.sleep(0.2)
            if rc is not None:  # let it power off by itself, briefly
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            guest._kill(self.proc)
            self.proc = None
        con = console.read_text(errors="replace") if console.exists() else ""
        if rc is None:
            qerr = (self.scratch / "qemu.log").read_text(errors="replace").strip()
            why = qerr.splitlines()[-1] if qerr else next(
                (ln for ln in reversed(con.splitlines()) if "panic" in ln.lower()),
                con.strip().splitlines()[-1] if con.strip() else "no output")
            raise PerfbookError(f"QEMU stopped before the second host finished: {why}")
        return BootResult(rc=rc, output="\n".join(seen), seconds=round(time.monotonic() - t0, 1),
                          boot_seconds=None if booted is None else round(booted, 1),
                          out=self.scratch / "out", console_tail="\n".join(con.splitlines()[-40:]))


# --------------------------------------------------------------------------
# bringing datasets back
# --------------------------------------------------------------------------
def import_datasets(src_runs: Path, dest_runs: Path, host_id: str, note: str):
    """Adopt <src_runs>/<host_id>/<chapter>/<run-id>/ into dest_runs with tools.fleet.

    A dataset that is not in dest_runs yet must carry this second host's `note`
    in its manifest; existing ones are left alone (identical: 'present', else a
    'conflict'). Returns tools.fleet.Adopted (relative names)."""
    from .fleet import Adopted, adopt_tree
    base, dest_runs = Path(src_runs) / host_id, Path(dest_runs)
    if not base.is_dir():
        return Adopted()
    for mf in sorted(base.glob("*/*/manifest.json")):
        run = mf.parent
        if run.name.startswith(".") or (dest_runs / host_id / run.parent.name / run.name).exists():
            continue
        try:
            host = json.loads(mf.read_text()).get("host", {})
        except ValueError as e:
            raise PerfbookError(f"{run}: unreadable manifest.json ({e})") from None
        if host.get("note") != note:
            raise PerfbookError(f"{run.parent.name}/{run.name}: its manifest's host.note is not this "
                                "second host's; not importing it")
    dest_runs.mkdir(parents=True, exist_ok=True)
    stage = dest_runs / f".tmp-secondhost-import-{uuid.uuid4().hex[:8]}"  # same file system: renames
    try:
        shutil.copytree(base, stage / host_id)
        return adopt_tree(stage, dest_runs)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


# --------------------------------------------------------------------------
# the whole run
# --------------------------------------------------------------------------
def run(steps: list[Step], spec: MachineSpec | None = None, progress=None, echo=None,
        data_dir: Path | None = None, facts_only: bool = False) -> dict:
    """Boot the second host once per step (once in all with facts_only); import datasets.

    Returns a report: guest facts, per-chapter outcome, wall time."""
    from . import hostinfo
    from .lock import measure_lock
    from .progress import Progress
    say = progress or print
    spec = spec or MachineSpec()
    spec.validate()
    parent = hostinfo.host_id()
    mid = machine_id()
    dest_runs = runs_dir(data_dir)
    logs = build_dir() / "secondhost" / "logs"
    report = {"parent_host": parent, "steps": [], "facts": None, "started": time.time()}
    t0 = time.monotonic()
    with Machine(spec, progress=say, echo=echo or _show) as m:
        label, note = describe(spec, m.artefacts, parent, guest.qemu_version())
        report.update(label=label, note=note, kernel=f"{m.artefacts['kernel_package']} "
                      f"{m.artefacts['kernel_version']}", qemu=guest.qemu_version())
        todo = [None] if facts_only else steps
        prog = Progress("secondhost", len(todo))
        for step in todo:
            name = "facts" if step is None else step.chapter
            budget = BOOT_ALLOWANCE + (0 if step is None else step.budget_s)
            script = run_script([] if step is None else [step], label, note)
            entry = {"chapter": name, "profile": None if step is None else step.profile,
                     "params": {} if step is None else step.params}
            say(f"[secondhost] booting the second host for {name} (budget {budget // 60} min)")
            # the guest keeps both CPUs busy: nobody else measures meanwhile, and it waits
            # (up to an hour) for whoever measures now
            with measure_lock(f"tools.secondhost {name}", wait=float(os.environ.get("PERFBOOK_LOCK_WAIT", "3600"))):
                try:
                    res = m.boot(script, mid, timeout=budget)
                except PerfbookError as e:
                    entry.update(status="failed", detail=str(e), seconds=None)
                    report["steps"].append(entry)
                    prog.step(f"{name}: failed")
                    continue
            facts = _read_json(res.out / "facts.json")
            if facts:
                report["facts"] = facts
                if facts["host_id"] == parent:
                    raise PerfbookError(f"the guest has the parent's host id {parent}: its machine-id "
                                        "did not take effect; not importing anything")
            log_dir = _keep_logs(res, logs, name)
            entry.update(_outcome(step, res, log_dir), seconds=res.seconds, boot_seconds=res.boot_seconds)
            added = []
            if facts and entry["status"] in ("measured", "ok"):
                adopted = import_datasets(res.out / "runs", dest_runs, facts["host_id"], note)
                added = adopted.new
                entry.update(datasets=added, already_there=len(adopted.present), conflicts=adopted.conflicts,
                             parts_not_measured={k: v for rel in added for k, v in (_read_json(
                                 dest_runs / rel / "manifest.json") or {}).get("skipped", {}).items()})
                if adopted.conflicts:
                    entry.update(status="failed", detail="dataset(s) exist with other content, left as they "
                                 f"were: {', '.join(adopted.conflicts)}")
            elif facts and (res.out / "runs" / facts["host_id"]).is_dir():
                # the chapter's notebook failed after collect: its dataset would break the
                # chapter, so it is kept with the logs for diagnosis, not adopted
                src = res.out / "runs" / facts["host_id"]
                entry["not_imported"] = [f"{facts['host_id']}/{r.parent.name}/{r.name}"
                                         for r in sorted(src.glob("*/*"))
                                         if not (dest_runs / facts["host_id"] / r.parent.name / r.name).exists()]
                shutil.copytree(src, log_dir / "runs" / facts["host_id"], dirs_exist_ok=True)
            report["steps"].append(entry)
            prog.step(f"{name}: {entry['status']}, {len(added)} new dataset(s)")
    report["wall_seconds"] = round(time.monotonic() - t0, 1)
    out = build_dir() / "secondhost" / "last-run.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    return report


def _outcome(step: Step | None, res: BootResult, log_dir: Path) -> dict:
    """status and detail of one boot, from the measure step's status lines and the exit code."""
    status = [json.loads(x) for x in _read(res.out / "status.jsonl").splitlines() if x.strip()]
    if step is None:
        return {"status": "ok" if res.rc == 0 else "failed",
                "detail": "" if res.rc == 0 else f"{RC_MEANING.get(res.rc, 'failed')} (rc={res.rc})"}
    mine = [x for x in status if x.get("chapter") == step.chapter]
    # a notebook can fail after its dataset was written: the failure wins
    st = next((x for x in mine if x["status"] == "failed"), mine[-1] if mine else None)
    if st is None:
        where = log_dir.relative_to(repo_root()) if log_dir.is_relative_to(repo_root()) else log_dir
        return {"status": "failed", "detail": f"{RC_MEANING.get(res.rc, 'no measure status')} "
                                              f"(rc={res.rc}); see {where}"}
    return {"status": st["status"], "detail": "" if st["status"] == "measured" else st["detail"]}


def _show(line: str) -> None:
    if SHOW_RE.search(line):
        print(f"  [guest] {line}", flush=True)


def _read(p: Path) -> str:
    try:
        return p.read_text()
    except OSError:
        return ""


def _read_json(p: Path) -> dict | None:
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def _keep_logs(res: BootResult, logs: Path, name: str) -> Path:
    """The guest's output, console tail and executed notebook, for diagnosis (build/ is not committed)."""
    d = logs / f"{time.strftime('%Y%m%dT%H%M%S')}-{name}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "output.log").write_text(res.output + "\n")
    (d / "console-tail.log").write_text(res.console_tail + "\n")
    if (res.out / "dmesg-tail.log").is_file():
        shutil.copy2(res.out / "dmesg-tail.log", d / "dmesg-tail.log")
    for nb in (res.out / "notebooks").glob("*.ipynb") if (res.out / "notebooks").is_dir() else ():
        shutil.copy2(nb, d / nb.name)
    return d


def format_report(report: dict, left_out: dict[str, str]) -> str:
    f = report.get("facts") or {}
    lines = ["=" * 72,
             f"second host: {f.get('host_id', '?')} ({report.get('label', '')})",
             f"  kernel {f.get('kernel_release')} | cpu {f.get('cpu_model')} x {f.get('cpus_online')} | "
             f"{f.get('mem_total_gib')} GiB | virtualization {f.get('virtualization')} | "
             f"container {f.get('container')} | clocksource {(f.get('clocksource') or {}).get('current')}",
             "-" * 72]
    for s in report["steps"]:
        t = f"{s['seconds']:.0f} s" if s.get("seconds") else "-"
        lines.append(f"{s['chapter']:<20} {s['status']:<9} {t:>7}  profile {s.get('profile')} "
                     f"{json.dumps(s.get('params') or {})}")
        if s.get("detail"):
            lines.append(f"{'':<20} {s['detail']}"[:200])
        for d in s.get("datasets", []):
            lines.append(f"{'':<20} new dataset data/runs/{d}")
        for part, why in (s.get("parts_not_measured") or {}).items():
            lines.append(f"{'':<20} not measured: {part}: {why}"[:200])
        for d in s.get("not_imported", []):
            lines.append(f"{'':<20} not imported (the notebook failed): {d}, kept in build/secondhost/logs")
    for name, why in left_out.items():
        lines.append(f"{name:<20} {'not run':<9} {'':>7}  {why}")
    lines += ["-" * 72, f"wall time {report.get('wall_seconds', 0) / 60:.1f} min", "=" * 72]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.secondhost",
                                 description="Boot a QEMU TCG second host and run the measure step in it.")
    ap.add_argument("--chapters", default="", help="comma-separated (default: every chapter the guest can run)")
    ap.add_argument("--profile", default="plan",
                    help="'plan' (per-chapter TCG plan, the default), quick, default or full")
    ap.add_argument("--set", action="append", default=[], metavar="CHAPTER.NAME=VALUE",
                    help="a notebook parameter of one chapter (repeatable)")
    ap.add_argument("--cpus", type=int, default=MachineSpec.cpus)
    ap.add_argument("--memory-mib", type=int, default=MachineSpec.memory_mib)
    ap.add_argument("--cpu-model", default=MachineSpec.cpu_model)
    ap.add_argument("--scratch-gib", type=int, default=MachineSpec.scratch_gib)
    ap.add_argument("--facts", action="store_true", help="boot once and print the guest's host facts only")
    ap.add_argument("--data-dir", default="", help="where the datasets go (default: the repository's data/)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and stop")
    args = ap.parse_args(argv)
    try:
        chapters = [c.strip() for c in args.chapters.split(",") if c.strip()] or None
        steps, left_out = plan(chapters, args.profile, args.set)
        spec = MachineSpec(args.cpus, args.memory_mib, args.cpu_model, args.scratch_gib)
        spec.validate()
        for s in [] if args.facts else steps:
            print(f"[secondhost] plan: {s.chapter} profile {s.profile} {json.dumps(s.params)} "
                  f"(budget {s.budget_s // 60} min + {BOOT_ALLOWANCE // 60} min boot)", flush=True)
        for n, why in {} if args.facts else left_out.items():
            print(f"[secondhost] not run: {n}: {why}", flush=True)
        if args.dry_run:
            return 0
        report = run(steps, spec, progress=lambda s: print(s, flush=True), facts_only=args.facts,
                     data_dir=Path(args.data_dir).resolve() if args.data_dir else None)
        if args.facts:
            print(json.dumps(report.get("facts"), indent=1, sort_keys=True))
        print(format_report(report, {} if args.facts else left_out), flush=True)
        return 0 if all(s["status"] in ("measured", "skipped", "ok") for s in report["steps"]) else 1
    except PerfbookError as e:
        print(one_line(e), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; QEMU stopped and the scratch directory removed", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
