"""A second machine for the book: a QEMU TCG guest that runs the measure step itself.

The project has one physical machine. This module boots a *virtual* one from it
and runs the book's own ``python -m perfbook measure`` inside, so that the book
holds datasets from a host whose CPU, kernel, devices and identity differ:

* **CPU**: QEMU's TCG emulator (``-accel tcg,thread=multi -cpu max,avx=off,avx2=off``;
  MachineSpec says why AVX is off). Every guest instruction is translated in
  software; no KVM, no hardware virtualization. Costs measured there are costs
  on an emulated CPU, and each boot checks first that numpy computes right on it
  (cpu_selfcheck).
* **kernel**: Debian's generic 6.1 kernel (``linux-image-6.1.0-NN-amd64``,
  the package ``linux-image-amd64`` names), fetched with ``apt-get download``
  and cached in ``build/secondhost/<abi>/`` by ``perfbook.qemu.guest.ensure_artefacts``.
  Debian's cloud kernel (the one ``perfbook.qemu.guest`` boots) has no 9p, so the
  generic one is used here.
* **devices and size**: 2 vCPUs, its own RAM size, one virtio-blk scratch disk
  (a sparse file formatted ext4 on this host) mounted at ``/var/tmp``, a
  virtio-net card on QEMU's user network with restrict=on (an address, no way
  out), no ``/dev/kvm``.
* **identity**: its own ``/etc/machine-id``, made once and kept in
  ``build/secondhost/machine-id``, so ``perfbook.data.hostinfo.host_id()`` gives it a
  stable id of its own.

What it shares with this host is the *userland*: this host's ``/`` is exported
read-only over virtio-9p and becomes the lower layer of an overlayfs whose upper
layer is a tmpfs in the guest, so the guest runs the same Python, ``.venv`` and
checkout at the same paths, and anything it writes stays in its RAM. A second
writable 9p share (a directory in the scratch directory) brings back its
host facts, the measure status and the datasets, which perfbook.book.fleet's import then
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

    python -m perfbook secondhost                       # the TCG plan below, every chapter it can run
    python -m perfbook secondhost --chapters trace_overhead --profile quick
    python -m perfbook secondhost --facts               # boot once, print the guest's host facts
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

# bringing datasets back: perfbook.book.fleet.import_datasets
from perfbook.book.fleet import import_datasets  # noqa: E402,F401
from perfbook.chapters import CHAPTERS
from perfbook.core.errors import ParameterError, PerfbookError, one_line
from perfbook.core.paths import build_dir, repo_root, runs_dir
from perfbook.core.proc import die_with_parent, terminate
from perfbook.core.progress import Progress
from perfbook.data import hostinfo
from perfbook.hoststate.lock import measure_lock
from perfbook.qemu import guest

# what runs in the guest, and how it boots: tools/perfbook/qemu/secondhost_boot.py
from perfbook.qemu.secondhost_boot import (
    GUEST_ADDR,
    RC_MEANING,
    init_script,
    initrd_bytes,
    qemu_cmdline,
    run_script,
)

# Re-exported: the guest's boot script runs `from perfbook.dev.secondhost import cpu_selfcheck`,
# and the tests read the 9p tags here
from perfbook.qemu.secondhost_boot import OUT_TAG as OUT_TAG
from perfbook.qemu.secondhost_boot import ROOT_TAG as ROOT_TAG
from perfbook.qemu.secondhost_boot import cpu_selfcheck as cpu_selfcheck

KERNEL_META = "linux-image-amd64"
# loaded in the guest's initramfs (with their dependencies), after perfbook.qemu.guest's base ones
EXTRA_MODULES = (
    "9pnet_virtio",
    "9p",
    "overlay",
    "ext4",
    "crc32c_generic",
    "crc32c_intel",
    "veth",
    "virtio_net",
)
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
MEASURE_MAIN = (
    "import logging, sys; logging.basicConfig(level=logging.INFO, format='%(message)s', "
    "stream=sys.stdout); from perfbook.cli import main; sys.exit(main(sys.argv[1:]))"
)
# guest lines shown on the terminal (everything goes to build/secondhost/logs/*/output.log)
SHOW_RE = re.compile(
    r"^\s*\[|^error:|\w*Error\b|\b(SKIPPED|FAILED|Traceback)\b|new dataset|second host|self-check"
)
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
    scratch_gib: int = 8  # the virtio-blk scratch disk (sparse), ext4, at /var/tmp

    def validate(self) -> None:
        for k, lo, hi in (("cpus", 1, 8), ("memory_mib", 1024, 16384), ("scratch_gib", 1, 256)):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ParameterError(f"{k} must be an integer in {lo}..{hi}, got {v!r}")
        if not re.fullmatch(
            r"[A-Za-z0-9][A-Za-z0-9_.-]{0,40}(,[+-]?[A-Za-z0-9_.-]{1,40}(=[A-Za-z0-9]{1,10})?){0,40}",
            str(self.cpu_model),
        ):
            raise ParameterError(
                f"cpu_model must be a QEMU -cpu value like 'max' or 'max,avx2=off', "
                f"got {self.cpu_model!r}"
            )


@dataclass
class Step:
    """One chapter: one boot of the guest, one `python -m perfbook measure` in it."""

    chapter: str
    profile: str
    params: dict = field(default_factory=dict)
    budget_s: int = 900

    def measure_argv(self) -> list[str]:
        """`python -m perfbook measure` (its main()), with papermill's cell-output logging on, so
        that the chapter's own progress lines reach the serial port."""
        argv = [
            ".venv/bin/python",
            "-c",
            MEASURE_MAIN,
            "measure",
            "--strict",
            "--chapters",
            self.chapter,
            "--profile",
            self.profile,
        ]
        for k, v in sorted(self.params.items()):
            argv += ["--param", f"{k}={v if isinstance(v, str) else json.dumps(v)}"]
        return argv


def plan(
    chapters: list[str] | None = None, profile: str = "plan", sets: list[str] | None = None
) -> tuple[list[Step], dict[str, str]]:
    """The steps to run and the chapters left out (name -> reason).

    profile 'plan' takes each chapter's PLAN entry; 'quick'/'default'/'full'
    use that profile without the plan's parameters. `sets` are 'CHAPTER.NAME=VALUE'
    strings added on top (VALUE as JSON if it parses, else a string)."""
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
        left_out.update(
            {
                n: "not in perfbook.dev.secondhost's TCG plan yet (name it with --chapters to try it)"
                for n in names
                if n not in PLAN and n not in left_out
            }
        )
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
            raise ParameterError(f"--set {item!r}: {name} is chosen by perfbook.dev.secondhost")
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


def describe(
    spec: MachineSpec, artefacts: dict, parent_id: str, qemu: str | None
) -> tuple[str, str]:
    """(PERFBOOK_HOST_LABEL, PERFBOOK_HOST_NOTE) for the guest's manifests."""
    kver = artefacts["kernel_version"]
    label = (
        f"QEMU TCG guest (emulated x86-64, {spec.cpus} vCPUs, Debian {kver} kernel) "
        f"on host {parent_id}"
    )
    note = "; ".join(
        f"{k}={v}"
        for k, v in (
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
            ("tool", "perfbook.dev.secondhost"),
        )
    )
    return label, note


# --------------------------------------------------------------------------
# preflight
# --------------------------------------------------------------------------
def preflight() -> list[str]:
    """Why the second host can't be booted here ([] = it can)."""
    reasons = list(guest.preflight())
    if not shutil.which("mkfs.ext4"):
        reasons.append(
            "mkfs.ext4 is missing (apt-get install e2fsprogs): it formats the scratch disk"
        )
    if shutil.which(guest.QEMU):
        try:
            r = subprocess.run(
                [guest.QEMU, "-device", "help"], capture_output=True, text=True, timeout=30
            )
            if "virtio-9p-pci" not in r.stdout + r.stderr:
                reasons.append(
                    f"{guest.QEMU} has no virtio-9p-pci (VirtFS): the guest could not see the parent's /"
                )
        except (OSError, subprocess.TimeoutExpired):
            reasons.append(f"{guest.QEMU} -device help failed")
    if not (repo_root() / ".venv" / "bin" / "python").exists():
        reasons.append(
            "no .venv in this checkout: the guest runs the parent's .venv (make setup first)"
        )
    return reasons


def artefacts(progress=None) -> dict:
    return guest.ensure_artefacts(
        progress, meta=KERNEL_META, extra_modules=EXTRA_MODULES, root=build_dir() / "secondhost"
    )


# --------------------------------------------------------------------------
# booting
# --------------------------------------------------------------------------
@dataclass
class BootResult:
    rc: int | None
    output: str
    seconds: float
    boot_seconds: float | None
    out: Path  # the results share (valid until the Machine closes)
    console_tail: str


class Machine(guest.Runner):
    """Owns a scratch directory and at most one QEMU; a context manager.

    perfbook.qemu.guest.Runner's lifetime: on exit, exception, SIGINT, SIGTERM or SIGHUP, close()
    kills QEMU, removes the scratch directory (perfbook.hoststate.scratch, secondhost-<pid>-*) and
    ends the perfbook.core.guard stretch. Only the scratch name, the preflight, the artefacts
    and the boot differ."""

    scratch_chapter = "secondhost"

    def __init__(self, spec: MachineSpec | None = None, progress=None, echo=None):
        super().__init__(accel="tcg", progress=progress)
        self.spec = spec or MachineSpec()
        self.spec.validate()
        self.echo = echo or (lambda s: None)  # each line the guest prints

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
        r = subprocess.run(
            [
                "mkfs.ext4",
                "-q",
                "-F",
                "-L",
                "perfbook-scratch",
                "-E",
                "lazy_itable_init=0,lazy_journal_init=0",
                str(disk),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if r.returncode != 0:
            raise PerfbookError(
                f"mkfs.ext4 failed: {(r.stderr.strip() or f'exit {r.returncode}').splitlines()[-1]}"
            )

    def boot(self, run: str, mid: str, timeout: float) -> BootResult:
        """Boot the guest with run script `run`; stream its output; wait for the END marker."""
        if self.scratch is None or self.artefacts is None:
            raise PerfbookError("Machine.boot() outside its 'with' block")
        self._fresh()
        initrd = self.scratch / "initrd.img"
        initrd.write_bytes(
            initrd_bytes(self.artefacts, init_script(mid, self.artefacts["kernel_release"]), run)
        )
        cmd = qemu_cmdline(self.spec, self.artefacts, self.scratch, initrd)
        console, result = self.scratch / "console.log", self.scratch / "result.log"
        t0 = time.monotonic()
        with open(self.scratch / "qemu.log", "wb") as qlog:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=qlog,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
            )
        booted, rc, pos, buf, seen = None, None, 0, "", []
        try:
            while True:
                if (
                    booted is None
                    and console.exists()
                    and guest.INIT_MARK in console.read_text(errors="replace")
                ):
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
                    terminate(self.proc)
                    raise PerfbookError(
                        f"the second host did not finish within {timeout:.0f} s "
                        f"(last line: {seen[-1] if seen else 'none'})"
                    )
                time.sleep(0.2)
            if rc is not None:  # let it power off by itself, briefly
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            terminate(self.proc)
            self.proc = None
        con = console.read_text(errors="replace") if console.exists() else ""
        if rc is None:
            qerr = (self.scratch / "qemu.log").read_text(errors="replace").strip()
            why = (
                qerr.splitlines()[-1]
                if qerr
                else next(
                    (ln for ln in reversed(con.splitlines()) if "panic" in ln.lower()),
                    con.strip().splitlines()[-1] if con.strip() else "no output",
                )
            )
            raise PerfbookError(f"QEMU stopped before the second host finished: {why}")
        return BootResult(
            rc=rc,
            output="\n".join(seen),
            seconds=round(time.monotonic() - t0, 1),
            boot_seconds=None if booted is None else round(booted, 1),
            out=self.scratch / "out",
            console_tail="\n".join(con.splitlines()[-40:]),
        )


# --------------------------------------------------------------------------
# the whole run
# --------------------------------------------------------------------------
def run(
    steps: list[Step],
    spec: MachineSpec | None = None,
    progress=None,
    echo=None,
    data_dir: Path | None = None,
    facts_only: bool = False,
) -> dict:
    """Boot the second host once per step (once in all with facts_only); import datasets.

    Returns a report: guest facts, per-chapter outcome, wall time."""
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
        report.update(
            label=label,
            note=note,
            kernel=f"{m.artefacts['kernel_package']} {m.artefacts['kernel_version']}",
            qemu=guest.qemu_version(),
        )
        todo = [None] if facts_only else steps
        prog = Progress("secondhost", len(todo))
        for step in todo:
            name = "facts" if step is None else step.chapter
            budget = BOOT_ALLOWANCE + (0 if step is None else step.budget_s)
            script = run_script([] if step is None else [step], label, note)
            entry = {
                "chapter": name,
                "profile": None if step is None else step.profile,
                "params": {} if step is None else step.params,
            }
            say(f"[secondhost] booting the second host for {name} (budget {budget // 60} min)")
            # the guest keeps both CPUs busy: nobody else measures meanwhile, and it waits
            # (up to an hour) for whoever measures now
            with measure_lock(
                f"perfbook.dev.secondhost {name}",
                wait=float(os.environ.get("PERFBOOK_LOCK_WAIT", "3600")),
            ):
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
                    raise PerfbookError(
                        f"the guest has the parent's host id {parent}: its machine-id "
                        "did not take effect; not importing anything"
                    )
            log_dir = _keep_logs(res, logs, name)
            entry.update(
                _outcome(step, res, log_dir), seconds=res.seconds, boot_seconds=res.boot_seconds
            )
            added = []
            if facts and entry["status"] in ("measured", "ok"):
                adopted = import_datasets(res.out / "runs", dest_runs, facts["host_id"], note)
                added = adopted.new
                entry.update(
                    datasets=added,
                    already_there=len(adopted.present),
                    conflicts=adopted.conflicts,
                    parts_not_measured={
                        k: v
                        for rel in added
                        for k, v in (_read_json(dest_runs / rel / "manifest.json") or {})
                        .get("skipped", {})
                        .items()
                    },
                )
                if adopted.conflicts:
                    entry.update(
                        status="failed",
                        detail="dataset(s) exist with other content, left as they "
                        f"were: {', '.join(adopted.conflicts)}",
                    )
            elif facts and (res.out / "runs" / facts["host_id"]).is_dir():
                # the chapter's notebook failed after collect: its dataset would break the
                # chapter, so it is kept with the logs for diagnosis, not adopted
                src = res.out / "runs" / facts["host_id"]
                entry["not_imported"] = [
                    f"{facts['host_id']}/{r.parent.name}/{r.name}"
                    for r in sorted(src.glob("*/*"))
                    if not (dest_runs / facts["host_id"] / r.parent.name / r.name).exists()
                ]
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
        return {
            "status": "ok" if res.rc == 0 else "failed",
            "detail": "" if res.rc == 0 else f"{RC_MEANING.get(res.rc, 'failed')} (rc={res.rc})",
        }
    mine = [x for x in status if x.get("chapter") == step.chapter]
    # a notebook can fail after its dataset was written: the failure wins
    st = next((x for x in mine if x["status"] == "failed"), mine[-1] if mine else None)
    if st is None:
        where = log_dir.relative_to(repo_root()) if log_dir.is_relative_to(repo_root()) else log_dir
        return {
            "status": "failed",
            "detail": f"{RC_MEANING.get(res.rc, 'no measure status')} (rc={res.rc}); see {where}",
        }
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
    lines = [
        "=" * 72,
        f"second host: {f.get('host_id', '?')} ({report.get('label', '')})",
        f"  kernel {f.get('kernel_release')} | cpu {f.get('cpu_model')} x {f.get('cpus_online')} | "
        f"{f.get('mem_total_gib')} GiB | virtualization {f.get('virtualization')} | "
        f"container {f.get('container')} | clocksource {(f.get('clocksource') or {}).get('current')}",
        "-" * 72,
    ]
    for s in report["steps"]:
        t = f"{s['seconds']:.0f} s" if s.get("seconds") else "-"
        lines.append(
            f"{s['chapter']:<20} {s['status']:<9} {t:>7}  profile {s.get('profile')} "
            f"{json.dumps(s.get('params') or {})}"
        )
        if s.get("detail"):
            lines.append(f"{'':<20} {s['detail']}"[:200])
        for d in s.get("datasets", []):
            lines.append(f"{'':<20} new dataset data/runs/{d}")
        for part, why in (s.get("parts_not_measured") or {}).items():
            lines.append(f"{'':<20} not measured: {part}: {why}"[:200])
        for d in s.get("not_imported", []):
            lines.append(
                f"{'':<20} not imported (the notebook failed): {d}, kept in build/secondhost/logs"
            )
    for name, why in left_out.items():
        lines.append(f"{name:<20} {'not run':<9} {'':>7}  {why}")
    lines += ["-" * 72, f"wall time {report.get('wall_seconds', 0) / 60:.1f} min", "=" * 72]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m perfbook secondhost",
        description="Boot a QEMU TCG second host and run the measure step in it.",
    )
    ap.add_argument(
        "--chapters", default="", help="comma-separated (default: every chapter the guest can run)"
    )
    ap.add_argument(
        "--profile",
        default="plan",
        help="'plan' (per-chapter TCG plan, the default), quick, default or full",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="CHAPTER.NAME=VALUE",
        help="a notebook parameter of one chapter (repeatable)",
    )
    ap.add_argument("--cpus", type=int, default=MachineSpec.cpus)
    ap.add_argument("--memory-mib", type=int, default=MachineSpec.memory_mib)
    ap.add_argument("--cpu-model", default=MachineSpec.cpu_model)
    ap.add_argument("--scratch-gib", type=int, default=MachineSpec.scratch_gib)
    ap.add_argument(
        "--facts", action="store_true", help="boot once and print the guest's host facts only"
    )
    ap.add_argument(
        "--data-dir", default="", help="where the datasets go (default: the repository's data/)"
    )
    ap.add_argument("--dry-run", action="store_true", help="print the plan and stop")
    args = ap.parse_args(argv)
    try:
        chapters = [c.strip() for c in args.chapters.split(",") if c.strip()] or None
        steps, left_out = plan(chapters, args.profile, args.set)
        spec = MachineSpec(args.cpus, args.memory_mib, args.cpu_model, args.scratch_gib)
        spec.validate()
        for s in [] if args.facts else steps:
            print(
                f"[secondhost] plan: {s.chapter} profile {s.profile} {json.dumps(s.params)} "
                f"(budget {s.budget_s // 60} min + {BOOT_ALLOWANCE // 60} min boot)",
                flush=True,
            )
        for n, why in {} if args.facts else left_out.items():
            print(f"[secondhost] not run: {n}: {why}", flush=True)
        if args.dry_run:
            return 0
        report = run(
            steps,
            spec,
            progress=lambda s: print(s, flush=True),
            facts_only=args.facts,
            data_dir=Path(args.data_dir).resolve() if args.data_dir else None,
        )
        if args.facts:
            print(json.dumps(report.get("facts"), indent=1, sort_keys=True))
        print(format_report(report, {} if args.facts else left_out), flush=True)
        return (
            0 if all(s["status"] in ("measured", "skipped", "ok") for s in report["steps"]) else 1
        )
    except PerfbookError as e:
        print(one_line(e), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; QEMU stopped and the scratch directory removed", file=sys.stderr)
        return 130
