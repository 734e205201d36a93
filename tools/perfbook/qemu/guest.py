"""A tiny Linux guest under QEMU, for chapters that look at a machine from inside.

The guest is made of Debian's own packages, extracted and never installed:

* the kernel (``linux-image-<abi>-cloud-amd64`` by default) and the few
  modules it needs for virtio over PCI (virtio_pci, virtio_blk and their
  dependencies, read from each module's ``.modinfo`` section);
* ``busybox-static`` as the whole user space, in a gzip'd cpio initramfs that
  this module writes itself (no cpio tool needed).

They are cached under ``build/guest/<kernel-abi>/`` (git ignores build/).

A run boots QEMU with scratch virtio-blk disks (sparse raw files in a private
``guest-<pid>-*`` directory from perfbook.hoststate.scratch), runs a shell script as the
guest's only job and returns what the script printed. The script's output
travels over a second serial port (``ttyS1``) between two markers, so kernel
messages on the console (``ttyS0``) never mix with it.

Acceleration: ``accel="auto"`` tries KVM first and keeps it only if the guest's
init starts within ``kvm_boot_timeout`` seconds; otherwise QEMU is stopped and
the same guest is booted under TCG. Every result says which accelerator ran it
and why (``GuestResult.accel``, ``GuestResult.accel_note``). A KVM boot that timed out is
not tried again in the same process (the next chapters of one `python -m perfbook measure`)
with no longer a ``kvm_boot_timeout``; their notes say so (``_KVM_TIMED_OUT``).

Cleanup: QEMU is killed and the scratch directory removed on success, on an
exception, on SIGINT, SIGTERM and SIGHUP (perfbook.core.guard turns them into
KeyboardInterrupt while a Runner is active). QEMU also gets PR_SET_PDEATHSIG, so
it dies with us even on SIGKILL; perfbook.hoststate.scratch.sweep() (every run, `make sweep`)
removes a scratch directory whose owner process is gone.

Usage::

    from perfbook.qemu import guest
    reasons = guest.preflight()            # [] if QEMU is here
    with guest.Runner(progress=print) as r:
        res = r.run("cat /sys/block/vda/cache_type",
                    guest.GuestConfig(disks=[guest.DiskSpec(label="wt", cache="writethrough")]))
    res.accel, res.output, res.boot_seconds

``GuestConfig(files={"bin/tool": Path("build/bin/tool")})`` adds host files
(static binaries, data) to the guest. ``DiskSpec`` covers the -drive cache mode and aio and
the virtio-blk-pci properties (write-cache, config-wce, scsi, num-queues, packed, event_idx,
indirect_desc, disable-modern/legacy, discard, write-zeroes, anything else through ``extra``,
and ``tcg_extra`` for a guest under TCG only). Disks appear in the guest as
/dev/vda, vdb ... in order; ``/sys/block/vdX/serial`` holds each disk's label.
Hold ``perfbook.hoststate.lock.measure_lock()`` around runs that measure anything.

For looking at QEMU from the host while the guest runs: ``GuestConfig(iothreads=["io0"])``
with ``DiskSpec(iothread="io0")`` gives a disk its own I/O thread; ``thread_names=True`` names
QEMU's threads (main loop, "CPU n/TCG", "IO io0", "worker"); ``qmp=True`` opens a QMP socket;
``on_line(line, live)`` is called with each line the script prints, as it prints it, and ``live``
(a LiveGuest) holds QEMU's pid and the QMP socket, so that the host can sample ``thread_times(pid)``
or load the main loop at moments the guest chooses. ``stall_seconds`` stops a guest whose script
has printed nothing for that long since init (GuestStalled says where it stood), and
``guest_image.binary_bundle`` carries a host program (fio, bonnie++) in with its libraries and ld.so.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from perfbook.core import guard
from perfbook.core.errors import (
    BootTimeout,
    GuestStalled,
    MissingPrerequisite,
    ParameterError,
    PerfbookError,
)
from perfbook.core.proc import die_with_parent, terminate

# the image (kernel, modules, busybox, initramfs): tools/perfbook/qemu/guest_image.py
from perfbook.data.hostinfo import kvm_modules
from perfbook.framework.contract import Param
from perfbook.hoststate import scratch
from perfbook.qemu.guest_image import (
    BEGIN,
    DIR,
    END_RE,
    INIT_MARK,
    REG,
    artefacts_cached,
    build_cpio,
    ensure_artefacts,
)

# Re-exported: the chapters' collects and the tests reach QEMU's threads and the guest's root
# through this module (perfbook.qemu.guest is the QEMU layer's face)
from perfbook.qemu.guest_image import guest_root as guest_root
from perfbook.qemu.guest_threads import THREAD_CLASSES as THREAD_CLASSES
from perfbook.qemu.guest_threads import parse_task_stat as parse_task_stat

# QEMU's threads seen from the host (/proc/<pid>/task): tools/perfbook/qemu/guest_threads.py
from perfbook.qemu.guest_threads import stall_report
from perfbook.qemu.guest_threads import thread_class as thread_class
from perfbook.qemu.guest_threads import thread_delta as thread_delta
from perfbook.qemu.guest_threads import thread_times as thread_times

QEMU = "qemu-system-x86_64"


CACHE_MODES = ("none", "writeback", "writethrough", "directsync", "unsafe")
FILES_GZIP_MAX = 4 << 20  # GuestConfig.files archives up to this size are gzip'd


# --------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------
def _onoff(v) -> str:
    return "on" if v else "off"


@dataclass
class DiskSpec:
    """One virtio-blk disk: a -drive backend plus a virtio-blk-pci front end.

    None leaves QEMU's default in place. `extra` adds any other device
    property (name -> value), e.g. {"queue-size": "128"}.
    """

    label: str = "disk"
    size_mib: int = 16
    cache: str = "writeback"  # -drive cache=
    aio: str | None = None  # -drive aio= (threads, native, io_uring)
    write_cache: bool | None = None  # device write-cache=on/off (None: auto)
    config_wce: bool | None = None  # device config-wce=
    scsi: bool | None = None  # device scsi= (needs a legacy device)
    num_queues: int | None = None  # device num-queues=
    packed: bool | None = None  # device packed=
    event_idx: bool | None = None  # device event_idx=
    indirect_desc: bool | None = None  # device indirect_desc=
    disable_modern: bool | None = None  # legacy-only (virtio 0.9) device
    disable_legacy: bool | None = None
    discard: bool | None = None
    write_zeroes: bool | None = None
    readonly: bool = False
    iothread: str | None = None  # device iothread= (an id from GuestConfig.iothreads)
    extra: dict = field(default_factory=dict)
    # device properties for a guest under TCG only (e.g. {"event_idx": "off"}); KVM keeps the rest
    tcg_extra: dict = field(default_factory=dict)
    # an existing raw image file to attach instead of a fresh sparse one (the caller owns it,
    # keeps it in its own scratch directory and removes it; size_mib is then ignored)
    path: Path | None = None

    def validate(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,19}", self.label):
            raise ParameterError(
                f"disk label {self.label!r}: use 1-20 letters, digits, '.', '_' or '-'"
            )
        if self.cache not in CACHE_MODES:
            raise ParameterError(
                f"disk {self.label}: cache must be one of {CACHE_MODES}, got {self.cache!r}"
            )
        if self.aio not in (None, "threads", "native", "io_uring"):
            raise ParameterError(f"disk {self.label}: aio must be threads, native or io_uring")
        if self.aio == "native" and self.cache not in ("none", "directsync"):
            raise ParameterError(f"disk {self.label}: aio=native needs cache=none or directsync")
        if not (1 <= int(self.size_mib) <= 4096):
            raise ParameterError(f"disk {self.label}: size_mib must be 1..4096")
        if self.num_queues is not None and not (1 <= int(self.num_queues) <= 64):
            raise ParameterError(f"disk {self.label}: num_queues must be 1..64")
        for k in [*self.extra, *self.tcg_extra]:
            if not re.fullmatch(r"[a-z][a-z0-9_-]*", str(k)):
                raise ParameterError(f"disk {self.label}: bad device property name {k!r}")
        if self.path is not None and not Path(self.path).is_file():
            raise ParameterError(f"disk {self.label}: image {self.path} is not a file")

    def device_props(self) -> dict[str, str]:
        p: dict[str, str] = {}
        for attr, name in (
            ("write_cache", "write-cache"),
            ("config_wce", "config-wce"),
            ("scsi", "scsi"),
            ("packed", "packed"),
            ("event_idx", "event_idx"),
            ("indirect_desc", "indirect_desc"),
            ("discard", "discard"),
            ("write_zeroes", "write-zeroes"),
            ("disable_modern", "disable-modern"),
        ):
            v = getattr(self, attr)
            if v is not None:
                p[name] = _onoff(v)
        if self.disable_legacy is not None:
            p["disable-legacy"] = _onoff(self.disable_legacy)
        if self.iothread is not None:
            p["iothread"] = self.iothread
        if self.num_queues is not None:
            p["num-queues"] = str(int(self.num_queues))
        p.update({str(k): str(v) for k, v in self.extra.items()})
        return p

    def describe(self) -> str:
        """QEMU options in a short human form: 'cache=writeback write-cache=off'."""
        parts = [f"cache={self.cache}"] + ([f"aio={self.aio}"] if self.aio else [])
        parts += [f"{k}={v}" for k, v in self.device_props().items()]
        return " ".join(parts)


@dataclass
class GuestConfig:
    disks: list[DiskSpec] = field(default_factory=lambda: [DiskSpec()])
    cpus: int = 1
    memory_mib: int = 256
    rng: bool = False  # add a virtio-rng-pci device
    balloon: bool = False  # add a virtio-balloon-pci device
    machine: str = "pc"
    extra_args: list[str] = field(default_factory=list)
    # extra files for the guest: guest path (relative, e.g. "bin/probe") -> host Path or bytes;
    # they are made executable (0755) and ride in the per-run initramfs
    files: dict = field(default_factory=dict)
    # called with QEMU's pid right after QEMU starts (e.g. to point host tracing at its
    # threads); an exception stops the run and QEMU with it
    on_start: object = None
    iothreads: list = field(default_factory=list)  # -object iothread,id=<id> for each
    thread_names: bool = False  # -name ...,debug-threads=on
    qmp: bool = False  # a QMP socket (LiveGuest.qmp)
    # called with (line, LiveGuest) for each line the script prints, while the guest runs;
    # an exception stops the run and QEMU with it
    on_line: object = None
    # after init, seconds without a new byte of the script's output: QEMU is stopped, GuestStalled
    stall_seconds: float | None = None

    def validate(self) -> None:
        if not self.disks:
            raise ParameterError("a guest needs at least one disk")
        labels = [d.label for d in self.disks]
        if len(set(labels)) != len(labels):
            raise ParameterError(f"disk labels must be unique, got {labels}")
        if len(self.disks) > 20:
            raise ParameterError("at most 20 disks per guest (PCI slots)")
        for d in self.disks:
            d.validate()
        if not (1 <= int(self.cpus) <= 8):
            raise ParameterError("cpus must be 1..8")
        if not (96 <= int(self.memory_mib) <= 4096):
            raise ParameterError("memory_mib must be 96..4096")
        if self.stall_seconds is not None and not self.stall_seconds > 0:
            raise ParameterError("stall_seconds must be positive (or None)")
        for io in self.iothreads:
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,19}", str(io)):
                raise ParameterError(
                    f"iothread id {io!r}: use a letter, then letters, digits, '_' or '-'"
                )
        for d in self.disks:
            if d.iothread is not None and d.iothread not in self.iothreads:
                raise ParameterError(
                    f"disk {d.label}: iothread {d.iothread!r} is not in iothreads {self.iothreads}"
                )
        for gp, src in self.files.items():
            if not re.fullmatch(r"[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.+-]+)*", str(gp)) or ".." in str(
                gp
            ):
                raise ParameterError(f"guest file path {gp!r} must be relative, without '..'")
            if not isinstance(src, (bytes, bytearray)) and not Path(src).is_file():
                raise ParameterError(f"guest file {gp}: {src} is not a file")


@dataclass(frozen=True)
class LiveGuest:
    """What a callback knows about the running guest."""

    pid: int  # QEMU's process id
    qmp: Path | None = None  # its QMP socket (GuestConfig.qmp)


@dataclass
class GuestResult:
    output: str  # what the script printed (between the markers)
    rc: int | None  # the script's exit status (None: no END marker)
    accel: str  # 'kvm' or 'tcg'
    accel_note: str  # why this accelerator
    boot_seconds: float | None  # QEMU start -> guest init
    total_seconds: float
    kernel: str  # kernel package and version
    qemu_version: str | None
    cmdline: list[str]
    console: str  # the guest's console log (ttyS0), for diagnosis
    qemu_pid: int | None = None  # QEMU's process id while it ran

    def as_dict(self) -> dict:
        d = asdict(self)
        d.pop("console")
        return d


# --------------------------------------------------------------------------
# preflight
# --------------------------------------------------------------------------
def qemu_version() -> str | None:
    exe = shutil.which(QEMU)
    if not exe:
        return None
    try:
        r = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"version (\S+)", r.stdout)
    return m.group(1) if m else (r.stdout.strip().splitlines() or [None])[0]


def kvm_usable(modules: list[str] | None = None) -> tuple[bool, str]:
    if not os.path.exists("/dev/kvm"):
        return False, "/dev/kvm is missing"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "/dev/kvm is not accessible to this user"
    mods = set(kvm_modules() if modules is None else modules)
    if "kvm_pvm" in mods and not mods & {"kvm_intel", "kvm_amd"}:  # PVM serves /dev/kvm
        return False, (
            "/dev/kvm is PVM (kvm_pvm), which boots only a PVM-enabled guest kernel; "
            "the guest kernel here is Debian's stock cloud kernel"
        )
    return True, "/dev/kvm is present"


def preflight() -> list[str]:
    """Why no guest can run here ([] = it can, with KVM or TCG)."""
    reasons = []
    if not shutil.which(QEMU):
        reasons.append(f"{QEMU} is not installed (apt-get install qemu-system-x86)")
    have = artefacts_cached()
    if have is None and not shutil.which("apt-get"):
        reasons.append(
            "no cached guest kernel in build/guest and no apt-get to fetch Debian's kernel"
        )
    if have is None and not shutil.which("dpkg-deb"):
        reasons.append("dpkg-deb is missing: it extracts the guest kernel and busybox packages")
    return reasons


# --------------------------------------------------------------------------
# scratch directories and processes
# --------------------------------------------------------------------------
def boot_params(max_seconds: float = 900) -> dict:
    """The parameters of a chapter that boots guests (perfbook.framework.contract.Param): accel,
    kvm_boot_timeout and boot_timeout."""
    return {
        "accel": Param(
            str,
            choices=("auto", "kvm", "tcg"),
            help="KVM if the guest boots in time (auto), KVM or TCG",
        ),
        "kvm_boot_timeout": Param(
            float, min=1, max=max_seconds, help="seconds a KVM guest gets to reach init (auto)"
        ),
        "boot_timeout": Param(
            float, min=1, max=max_seconds, help="seconds one boot may take in all"
        ),
    }


def check_boot_params(p: dict, max_seconds: float = 900) -> dict:
    """Validate a chapter's `accel`, `kvm_boot_timeout` and `boot_timeout` in place."""
    if p["accel"] not in ("auto", "kvm", "tcg"):
        raise ParameterError(f"accel must be auto, kvm or tcg, got {p['accel']!r}")
    for k, v in [(k, p[k]) for k in ("kvm_boot_timeout", "boot_timeout")]:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 1 <= v <= max_seconds:
            raise ParameterError(
                f"{k} must be a number of seconds between 1 and {max_seconds:g}, got {v!r}"
            )
        p[k] = float(v)
    return p


_KVM_TIMED_OUT: dict[tuple[str, str], tuple[float, str]] = {}
_KVM_SKIP_TOLD: set[str] = set()  # why KVM was not tried, said once per process


class Runner:
    """Boots guests; owns one scratch directory and at most one QEMU at a time.

    Use as a context manager. `accel` is 'auto' (KVM if the guest boots within
    kvm_boot_timeout, else TCG), 'kvm' or 'tcg'. The first auto decision is kept
    for later runs of the same Runner (a KVM boot that timed out: see the module doc).
    """

    # what a subclass (perfbook.dev.secondhost.Machine) changes: the scratch directory's name
    # (perfbook.hoststate.scratch), and where preflight and artefacts come from
    scratch_chapter = "guest"

    def _preflight(self) -> list[str]:
        return preflight()

    def _artefacts(self) -> dict:
        return ensure_artefacts(self.say, self.kernel_pkg)

    def __init__(
        self,
        accel: str = "auto",
        kvm_boot_timeout: float = 10.0,
        timeout: float = 180.0,
        progress=None,
        kernel_pkg: str | None = None,
    ):
        if accel not in ("auto", "kvm", "tcg"):
            raise ParameterError(f"accel must be auto, kvm or tcg, got {accel!r}")
        if kvm_boot_timeout <= 0 or timeout <= 0:
            raise ParameterError("timeouts must be positive")
        self.accel = accel
        self.kvm_boot_timeout = float(kvm_boot_timeout)
        self.timeout = float(timeout)
        self.say = progress or (lambda s: None)
        self.kernel_pkg = kernel_pkg
        self.scratch: Path | None = None
        self.proc: subprocess.Popen | None = None
        self.artefacts: dict | None = None
        self._decided: tuple[str, str] | None = None
        self._scratch: scratch.Scratch | None = None
        self._guarded = False

    # -- lifetime ------------------------------------------------------------
    def __enter__(self):
        if self.scratch is not None:  # entered already (idempotent)
            return self
        reasons = self._preflight()
        if reasons:
            raise MissingPrerequisite(reasons[0])
        guard.enter()  # SIGINT/SIGTERM/SIGHUP -> KeyboardInterrupt until close()
        self._guarded = True
        try:
            self.artefacts = self._artefacts()
            self._scratch = scratch.Scratch(
                self.scratch_chapter
            ).__enter__()  # sweeps dead runs' too
            self.scratch = self._scratch.dir
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self) -> None:
        try:
            with guard.restoring():  # a second Ctrl-C cannot cut the cleanup in half
                terminate(self.proc)
                self.proc = None
                if self._scratch is not None:
                    self._scratch.close()
                    self._scratch = None
                self.scratch = None
        finally:
            if self._guarded:
                self._guarded = False
                guard.leave()

    # -- running -----------------------------------------------------------------
    def cmdline(self, cfg: GuestConfig, accel: str, rundir: Path, initrd: Path) -> list[str]:
        a = self.artefacts
        assert a is not None
        cmd = [
            QEMU,
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
            "-machine",
            cfg.machine,
            "-accel",
            accel,
            "-m",
            str(int(cfg.memory_mib)),
            "-smp",
            str(int(cfg.cpus)),
            "-kernel",
            str(Path(a["dir"]) / "vmlinuz"),
            "-initrd",
            str(initrd),
            "-append",
            "console=ttyS0 panic=-1 quiet loglevel=3 cryptomgr.notests rdinit=/init",  # appendix.md
            "-serial",
            f"file:{rundir / 'console.log'}",
            "-serial",
            f"file:{rundir / 'result.log'}",
        ]
        if cfg.thread_names:
            cmd += ["-name", "perfbook,debug-threads=on"]
        if cfg.qmp:
            cmd += ["-qmp", f"unix:{rundir / 'qmp.sock'},server=on,wait=off"]
        for io in cfg.iothreads:
            cmd += ["-object", f"iothread,id={io}"]
        for i, d in enumerate(cfg.disks):
            img = Path(d.path) if d.path is not None else rundir / f"disk{i}.img"
            drive = f"file={img},format=raw,if=none,id=d{i},cache={d.cache}"
            drive += (f",aio={d.aio}" if d.aio else "") + (",readonly=on" if d.readonly else "")
            props = {
                **d.device_props(),
                **({str(k): str(v) for k, v in d.tcg_extra.items()} if accel == "tcg" else {}),
            }
            dev = f"virtio-blk-pci,drive=d{i},serial={d.label}" + "".join(
                f",{k}={v}" for k, v in props.items()
            )
            cmd += ["-drive", drive, "-device", dev]
        if cfg.rng:
            cmd += ["-device", "virtio-rng-pci"]
        if cfg.balloon:
            cmd += ["-device", "virtio-balloon-pci"]
        return cmd + list(cfg.extra_args)

    def _files_archive(self, files: dict) -> Path:
        """The cpio archive of GuestConfig.files, written once per Runner into its scratch
        directory: gzip'd when small, plain when large (a large bundle such as fio's libraries
        unpacks faster than it inflates in a TCG guest)."""
        key = tuple(
            sorted(
                (
                    str(gp),
                    hashlib.sha256(bytes(src)).hexdigest()
                    if isinstance(src, (bytes, bytearray))
                    else f"{Path(src).resolve()}:{Path(src).stat().st_size}:{Path(src).stat().st_mtime_ns}",
                )
                for gp, src in files.items()
            )
        )
        name = hashlib.sha256(repr(key).encode()).hexdigest()[:16]
        for have in (self.scratch / f"files-{name}.cpio.gz", self.scratch / f"files-{name}.cpio"):
            if have.is_file():
                return have
        entries, dirs = [], set()
        for gp, src in sorted(files.items()):
            parts = str(gp).split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    entries.append((d, DIR | 0o755, b""))
            data = bytes(src) if isinstance(src, (bytes, bytearray)) else Path(src).read_bytes()
            entries.append((str(gp), REG | 0o755, data))
        arc = build_cpio(entries)
        small = len(arc) < FILES_GZIP_MAX
        dest = self.scratch / (f"files-{name}.cpio" + (".gz" if small else ""))
        tmp = self.scratch / f"files-{name}.tmp"
        tmp.write_bytes(gzip.compress(arc) if small else arc)
        tmp.rename(dest)
        return dest

    def run(self, script: str, cfg: GuestConfig | None = None) -> GuestResult:
        """Boot a guest with `cfg`, run `script` (busybox sh) in it, return its output."""
        if self.scratch is None:
            raise PerfbookError("Runner.run() outside its 'with' block")
        cfg = cfg or GuestConfig()
        cfg.validate()
        key = (QEMU, str(self.artefacts.get("dir", "")))  # _KVM_TIMED_OUT's
        if self._decided:
            accels = [self._decided]
        elif self.accel == "auto":
            ok, why = kvm_usable()
            failed = _KVM_TIMED_OUT.get(key)
            if ok and failed and self.kvm_boot_timeout <= failed[0]:
                ok, why = False, f"{failed[1]} (an earlier guest of this run; not retried)"
                self.say(f"KVM not tried: {why}")
            elif not ok and why not in _KVM_SKIP_TOLD:  # e.g. a PVM /dev/kvm: say why TCG
                _KVM_SKIP_TOLD.add(why)
                self.say(f"KVM not tried: {why}; the guests run under TCG")
            accels = (
                [("kvm", f"KVM: the guest booted within {self.kvm_boot_timeout:.0f} s")]
                if ok
                else []
            )
            accels.append(("tcg", "TCG fallback: " + (why if not ok else "")))
        else:
            accels = [(self.accel, f"{self.accel} requested")]
        last_err = None
        for accel, note in accels:
            try:
                res = self._boot(
                    script,
                    cfg,
                    accel,
                    note,
                    boot_timeout=self.kvm_boot_timeout
                    if (accel == "kvm" and self.accel == "auto" and not self._decided)
                    else None,
                )
            except BootTimeout as e:
                last_err = e
                self.say(f"{e}; falling back to TCG")
                if accel == "kvm":  # a shorter timeout is never tried after this one
                    _KVM_TIMED_OUT[key] = (self.kvm_boot_timeout, str(e))
                accels[-1] = ("tcg", f"TCG fallback: {e}")
                continue
            if self.accel == "auto" and not self._decided:
                self._decided = (res.accel, res.accel_note)
            return res
        raise last_err or PerfbookError("no accelerator could boot the guest")

    def _boot(
        self, script: str, cfg: GuestConfig, accel: str, note: str, boot_timeout: float | None
    ) -> GuestResult:
        assert self.scratch is not None and self.artefacts is not None
        rundir = Path(tempfile.mkdtemp(prefix="run-", dir=self.scratch))
        try:
            for i, d in enumerate(cfg.disks):
                if d.path is not None:
                    continue  # the caller's own image
                with open(rundir / f"disk{i}.img", "wb") as f:
                    f.truncate(int(d.size_mib) * 1024 * 1024)
            # the extra files and the per-run script ride in archives appended to the base one
            initrd = rundir / "initrd.img"
            with open(initrd, "wb") as out:
                out.write((Path(self.artefacts["dir"]) / "initramfs.cpio.gz").read_bytes())
                if cfg.files:
                    files = self._files_archive(cfg.files)
                    if not files.name.endswith(".gz"):  # a plain cpio starts 4-byte aligned
                        out.write(b"\0" * (-out.tell() % 4))
                    with open(files, "rb") as f:
                        shutil.copyfileobj(f, out)
                out.write(
                    gzip.compress(
                        build_cpio(
                            [
                                ("perfbook", DIR | 0o755, b""),
                                ("perfbook/script.sh", REG | 0o755, script.encode()),
                            ]
                        )
                    )
                )
            cmd = self.cmdline(cfg, accel, rundir, initrd)
            self.say(f"booting a {accel.upper()} guest with {len(cfg.disks)} disk(s)")
            t0 = time.monotonic()
            with open(rundir / "qemu.log", "wb") as qlog:
                self.proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=qlog,
                    stderr=subprocess.STDOUT,
                    preexec_fn=die_with_parent,
                )
            qemu_pid = self.proc.pid
            if callable(cfg.on_start):
                cfg.on_start(qemu_pid)
            live = LiveGuest(qemu_pid, rundir / "qmp.sock" if cfg.qmp else None)
            console, result = rundir / "console.log", rundir / "result.log"
            booted_at = None
            deadline = t0 + self.timeout
            rc, lines_seen, grew = (
                None,
                0,
                (0, t0),
            )  # (length of the script's output, when it last grew)
            while True:
                now = time.monotonic()
                con = console.read_text(errors="replace") if console.exists() else ""
                if booted_at is None and INIT_MARK in con:
                    booted_at = now - t0
                res = result.read_text(errors="replace") if result.exists() else ""
                grew = (len(res), now) if len(res) != grew[0] or booted_at is None else grew
                if callable(cfg.on_line) and BEGIN in res:
                    done = res[res.find(BEGIN) + len(BEGIN) :].replace("\r", "").split("\n")[1:-1]
                    for line in done[lines_seen:]:
                        if not END_RE.search(line):
                            cfg.on_line(line, live)
                    lines_seen = len(done)
                m = END_RE.search(res)
                if m:
                    rc = int(m.group(1))
                    break
                if self.proc.poll() is not None:
                    if boot_timeout is not None and booted_at is None:
                        qerr = (rundir / "qemu.log").read_text(errors="replace").strip()
                        raise BootTimeout(
                            "KVM QEMU exited before the guest's init ran"
                            + (f" ({qerr.splitlines()[-1][:160]})" if qerr else "")
                        )
                    break
                if boot_timeout is not None and booted_at is None and now - t0 > boot_timeout:
                    terminate(self.proc)
                    raise BootTimeout(f"KVM guest did not reach init within {boot_timeout:.0f} s")
                stalled = cfg.stall_seconds is not None and now - grew[1] > cfg.stall_seconds
                if (
                    now > deadline or stalled
                ):  # where it stood, read while QEMU's threads are still there
                    why = stall_report(res, con, qemu_pid)
                    terminate(self.proc)
                    if stalled:
                        raise GuestStalled(
                            f"{accel.upper()} guest printed nothing for {cfg.stall_seconds:g} s ({why})"
                        )
                    raise PerfbookError(
                        f"{accel.upper()} guest did not finish within {self.timeout:.0f} s ({why})"
                    )
                time.sleep(0.05)
            # let the guest reboot (QEMU exits with -no-reboot); don't wait long
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            terminate(self.proc)
            total = time.monotonic() - t0
            qerr = (rundir / "qemu.log").read_text(errors="replace").strip()
            con = console.read_text(errors="replace") if console.exists() else ""
            res = result.read_text(errors="replace") if result.exists() else ""
            if rc is None:
                why = (
                    qerr.splitlines()[-1]
                    if qerr
                    else (con.strip().splitlines()[-1] if con.strip() else "no output")
                )
                raise PerfbookError(f"QEMU ({accel}) stopped before the script finished: {why}")
            body = res.replace("\r", "")
            start = body.find(BEGIN)
            body = body[start + len(BEGIN) :] if start >= 0 else body
            body = END_RE.split(body)[0].lstrip("\n")
            return GuestResult(
                output=body,
                rc=rc,
                accel=accel,
                accel_note=note,
                boot_seconds=None if booted_at is None else round(booted_at, 2),
                total_seconds=round(total, 2),
                kernel=f"{self.artefacts['kernel_package']} {self.artefacts['kernel_version']}",
                qemu_version=qemu_version(),
                cmdline=[str(c) for c in cmd],
                console=con.replace("\r", ""),
                qemu_pid=qemu_pid,
            )
        finally:
            terminate(self.proc)
            self.proc = None
            shutil.rmtree(rundir, ignore_errors=True)


def run_script(script: str, cfg: GuestConfig | None = None, **runner_kw) -> GuestResult:
    """One guest, one script: a Runner used once."""
    with Runner(**runner_kw) as r:
        return r.run(script, cfg)
