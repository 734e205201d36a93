"""virtio_blk_latency, collect: the only part of the chapter that touches the host (the image,
QEMU guests, the host's ftrace instances, the benchmark on the host).

A round runs one host benchmark and a guest boot per cell of `boots` (aio/variant), in shuffled
order; rounds repeat (perfbook.analysis.repetition.Repetition: a fixed number in the default
profile, adaptively on each aio mode's untraced boots in the full one). Every boot's requests are
matched across the layers and put on one time axis (timeline/) before the next boot. The
benchmark image is mapped to disk sectors with FIEMAP, so that the host's block requests map back
to image offsets; HostTrace holds the host's two ftrace instances of a boot. The framework (perfbook.framework.sequence.collect) owns parameters,
preflight, lock, signals and the dataset writer; everything changed here is registered on
ctx.undo.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import random
import struct
import subprocess
from pathlib import Path

import pandas as pd

from perfbook.analysis.repetition import repetition
from perfbook.core.errors import MissingPrerequisite, PerfbookError
from perfbook.core.proc import run_group
from perfbook.hoststate import tracefs
from perfbook.probes.blockdev import device_of, kernel_dev_t
from perfbook.probes.cbuild import binary
from perfbook.qemu import guest

from .parse import (
    BENCH,
    BLOCK,
    EXPERIMENT,
    HOST_SYSCALLS,
    KVM_IRQ,
    KVM_NOTIFY,
    OUT_DISK_MIB,
    QEMU_CORE_EVENTS,
    QEMU_EVENTS,
    REGION_START,
    VARIANTS,
    MiB,
    host_loss,
    parse_bench,
    parse_calib,
    parse_ftrace,
    parse_qemu_log,
    ring_stats,
    split_output,
)
from .timeline.align import alignment_summary, fit_clock, relative_to_bases
from .timeline.match import guest_stamps, host_issues, match_in_order, qemu_segments

# ---- the benchmark image: its extents (FIEMAP), the disk that holds it ---------------------
FS_IOC_FIEMAP = 0xC020660B
FIEMAP_FLAG_SYNC = 0x1
FIEMAP_EXTENT_LAST = 0x1
FIEMAP_BAD = 0x2 | 0x4 | 0x8 | 0x80 | 0x100 | 0x200 | 0x800  # unknown, delalloc, encoded, ...


def fill_image(path: Path, mib: int, seed: int) -> None:
    """A raw image full of data (no holes, no unwritten extents: every read reaches the disk)."""
    rnd = random.Random(seed)
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(rnd.randbytes(MiB))
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def fiemap(path: Path) -> list[tuple[int, int, int]]:
    """The file's extents as (logical, physical, length) bytes, via FS_IOC_FIEMAP."""
    out: list[tuple[int, int, int]] = []
    start, count = 0, 256
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            buf = bytearray(
                struct.pack("=QQIIII", start, (1 << 64) - 1 - start, FIEMAP_FLAG_SYNC, 0, count, 0)
                + b"\0" * (56 * count)
            )
            try:
                fcntl.ioctl(fd, FS_IOC_FIEMAP, buf)
            except OSError as e:
                raise MissingPrerequisite(
                    f"FIEMAP is not supported for {path} ({e.strerror})"
                ) from None
            mapped = struct.unpack_from("=I", buf, 20)[0]
            last = False
            for i in range(mapped):
                lo, ph, ln, _r1, _r2, flags = struct.unpack_from("=QQQQQI", buf, 32 + 56 * i)
                if flags & FIEMAP_BAD:
                    raise MissingPrerequisite(
                        f"the image's extents can't be mapped to disk sectors "
                        f"(extent flags {flags:#x})"
                    )
                out.append((lo, ph, ln))
                last = bool(flags & FIEMAP_EXTENT_LAST)
            if last or mapped == 0:
                break
            start = out[-1][0] + out[-1][2]
    finally:
        os.close(fd)
    return out


def block_device(path: Path) -> dict:
    """The disk that holds `path`: its kernel dev_t (for trace filters), name and the partition's
    first sector (block tracepoints report sectors of the whole disk)."""
    name, major, minor = device_of(path)  # MissingPrerequisite when not on a block device
    st = os.stat(path)
    real = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}").resolve()
    if (
        (real / "dm").exists()
        or (real / "md").exists()
        or real.name.startswith(("dm-", "md", "loop"))
    ):
        raise MissingPrerequisite(
            f"the image sits on a stacked device ({real.name}); "
            "its sectors can't be mapped to the disk's requests"
        )
    start = int((real / "start").read_text()) if (real / "partition").exists() else 0
    return {
        "name": name,
        "part": real.name,
        "major": major,
        "minor": minor,
        "dev_t": kernel_dev_t(major, minor),
        "part_start": start,
    }


# ---- the host's ftrace instances of one boot: each a perfbook.hoststate.tracefs.TraceSession,
# which restores its state on every exit path ------------------------------------------------
class HostTrace:
    """The two host ftrace instances of one boot: QEMU's threads (syscalls) and the disk."""

    def __init__(self, p: dict, blockdev: dict | None, say):
        self.p, self.blockdev, self.say = p, blockdev, say
        self.q = self.b = None
        self.pid = None
        self.notes: list[str] = []

    def __enter__(self):
        self.q = tracefs.TraceSession("vbl_qemu", log=self.say).__enter__()
        try:
            self.b = tracefs.TraceSession("vbl_disk", log=self.say).__enter__()
            for t in (self.q, self.b):
                t.set_option("tracing_on", "0")
                t.set_option("trace_clock", "x86-tsc")
                t.set_option("buffer_size_kb", str(self.p["host_buffer_kb"]))
            self.q.set_trace_options(event_fork=True)  # children of the traced pid are traced too
            ev = self.q.buffer / "events" / "syscalls"
            for call in HOST_SYSCALLS:
                for side in ("enter", "exit"):
                    name = f"sys_{side}_{call}"
                    if not (ev / name).is_dir():
                        self.notes.append(f"host syscall event {name} is missing")
                        continue
                    if call == "write":
                        self.q.set_option(
                            f"events/syscalls/{name}/filter",
                            "count == 8" if side == "enter" else "ret == 8",
                        )
                    self.q.enable(f"syscalls/{name}")
            if self.blockdev is not None:
                for name in ("block_rq_issue", "block_rq_complete"):
                    self.b.set_option(
                        f"events/block/{name}/filter", f"dev == {self.blockdev['dev_t']}"
                    )
                    self.b.enable(f"block/{name}")
            # kvm.ko's events of *our* QEMU only: the notify exit runs in its vCPU thread and the
            # irqfd injection in the thread that signals the eventfd; other VMs on this host
            # (or a KVM attempt of another run) must not leak in, so they go to the pid-filtered
            # instance
            kvm = self.q.buffer / "events" / "kvm"
            for name in KVM_NOTIFY + KVM_IRQ:
                if (kvm / name).is_dir():
                    self.q.enable(f"kvm/{name}")
            self.b.set_option("tracing_on", "1")
        except BaseException:
            self.close()
            raise
        return self

    def on_start(self, pid: int) -> None:
        """QEMU has just started: trace it and every thread it creates (event-fork adds the
        children of listed tasks). A thread created before the pid was listed is appended from
        /proc. A second start in the same boot (accel=auto: the KVM attempt timed out and QEMU
        restarts under TCG) begins with empty buffers, so no event of the abandoned QEMU is kept.
        Rewriting set_event_pid with O_TRUNC stops event-fork from following new threads until
        the option is set again (seen on this kernel), so the option is toggled around it."""
        if self.pid is not None:
            self.q.set_option("tracing_on", "0")
            self.b.set_option("tracing_on", "0")
            self.q.clear()
            self.b.clear()
            self.b.set_option("tracing_on", "1")
            self.notes.append(
                "QEMU restarted within one boot (accelerator fallback); the first attempt's "
                "host trace was discarded"
            )
        self.pid = pid
        self.q.set_trace_options(event_fork=False)
        self.q.set_option("set_event_pid", str(pid))
        self.q.set_trace_options(event_fork=True)
        try:
            tids = sorted({d.name for d in Path(f"/proc/{pid}/task").iterdir()} - {str(pid)})
        except OSError:
            tids = []
        if tids:
            tracefs.write_knob(self.q.file("set_event_pid"), " ".join(tids) + "\n", append=True)
        self.q.set_option("tracing_on", "1")

    def read(self) -> tuple[str, str, dict]:
        for t in (self.q, self.b):
            t.set_option("tracing_on", "0")
        stats = {"qemu": self.q.cpu_buffer_stats(), "disk": self.b.cpu_buffer_stats()}
        return (
            self.q.file("trace").read_text(errors="replace"),
            self.b.file("trace").read_text(errors="replace"),
            stats,
        )

    def close(self):
        for t in (self.b, self.q):
            if t is not None:
                t.close()

    def __exit__(self, *exc):
        self.close()
        return False


# ---- rounds, boots and the host benchmark ----------------------------------------------------
def host_layer_problem() -> str | None:
    """Why the host layer (ftrace on this host) can't be traced, or None."""
    r = tracefs.preflight(need_uprobes=False)
    return r[0] if r else None


def plan_round(p: dict, rng, rnd: int) -> list[dict]:
    """One round's jobs, shuffled: one host benchmark and one guest boot per cell of p["boots"]
    ('aio/variant'); each with its patterns in shuffled order.

    Every boot measures one window of one cell: a traced and an untraced window can't share a
    boot, because QEMU's trace events (-trace at start) and the host's ftrace instances (set up
    around the boot) stay on for the whole boot, so an 'untraced' window inside a traced boot
    would still pay two of the three layers' tracing and tracing_cost would be understated; the
    windows would also differ in their place in the boot (the first one warms it up). The cells
    differ by what they compare only: the same image, requests, patterns and guest."""
    jobs = [{"kind": "host", "aio": "", "variant": "host_bench"}]
    for cell in p["boots"]:
        aio, v = cell.split("/")
        jobs.append({"kind": "guest", "aio": aio, "variant": v})
    rng.shuffle(jobs)
    for pos, j in enumerate(jobs):
        pats = list(p["patterns"])
        rng.shuffle(pats)
        j.update(
            {
                "round": rnd,
                "position": pos,
                "patterns": pats,
                "seeds": {x: rng.randrange(1, 1 << 30) for x in pats},
            }
        )
    return jobs


def rep_variant(p: dict, aio: str) -> str:
    """The variant of `aio` whose boots feed the adaptive repetition: its untraced boot if the
    round has one, else its first cell's."""
    vs = [c.split("/")[1] for c in p["boots"] if c.split("/")[0] == aio]
    return "plain" if "plain" in vs else vs[0]


def rep_keys(p: dict) -> list[str]:
    """The aio modes the repetition tracks: those with an untraced boot (parse.EXPERIMENT), or
    every mode where none has one."""
    plain = [a for a in p["aio"] if f"{a}/plain" in p["boots"]]
    return plain or list(p["aio"])


def bench_args(p: dict, pattern: str, seed: int, n: int, out: str, target: str) -> list[str]:
    return [
        "read",
        "-f",
        target,
        "-n",
        str(n),
        "-w",
        str(p["warmup"]),
        "-b",
        str(BLOCK),
        "-m",
        pattern,
        "-s",
        str(p["image_mib"] * MiB - REGION_START),
        "-p",
        str(REGION_START),
        "-S",
        str(seed),
        "-t",
        pattern,
        "-o",
        out,
    ]


def guest_script(p: dict, job: dict, traced: bool) -> str:
    """busybox sh for one boot: (tracing set up,) the benchmark passes, the results (and the
    trace) written to the second disk, /dev/vdb."""
    T = "/sys/kernel/tracing"
    lines = [
        "set -u",
        f"T={T}",
        "dev=$(cat /sys/block/vda/dev); maj=${dev%:*}; min=${dev#*:}",
        'echo "DEV $dev"',
    ]
    if traced:
        lines += [
            'mount -t tracefs nodev $T || { echo "ERR tracefs"; exit 3; }',
            "echo x86-tsc > $T/trace_clock",
            f"echo {p['guest_buffer_kb']} > $T/buffer_size_kb",
            "echo 'p:perfbook/vp_notify vp_notify' >> $T/kprobe_events || { echo 'ERR kprobe vp_notify'; exit 4; }",
            "echo 'p:perfbook/vring_interrupt vring_interrupt' >> $T/kprobe_events || { echo 'ERR kprobe vring_interrupt'; exit 4; }",
            'f="dev == $(( (maj << 20) | min ))"',
            'echo "$f" > $T/events/block/block_rq_issue/filter',
            'echo "$f" > $T/events/block/block_rq_complete/filter',
            "echo 1 > $T/events/perfbook/enable",
            "echo 1 > $T/events/block/block_rq_issue/enable",
            "echo 1 > $T/events/block/block_rq_complete/enable",
            "echo > $T/trace",
            "echo 1 > $T/tracing_on",
        ]
    for pat in job["patterns"]:
        args = " ".join(
            bench_args(p, pat, job["seeds"][pat], p["requests"], f"/tmp/b-{pat}.txt", "/dev/vda")
        )
        lines.append(f'/bin/seqread {args} || {{ echo "ERR bench {pat} $?"; exit 5; }}')
    if traced:
        lines.append("echo 0 > $T/tracing_on")
    dump = ['echo "@@BENCH"'] + [f"cat /tmp/b-{pat}.txt" for pat in job["patterns"]]
    if traced:
        dump += ['echo "@@STATS"', "cat $T/per_cpu/cpu0/stats", 'echo "@@TRACE"', "cat $T/trace"]
    dump.append('echo "@@END"')
    lines += [
        "{ " + "; ".join(dump) + "; } > /tmp/out.txt",
        'echo "OUT $(wc -c < /tmp/out.txt)"',
        "cat /tmp/out.txt > /dev/vdb && sync",
        'echo "DONE"',
    ]
    return "\n".join(lines) + "\n"


def calibrate(exe: Path, n: int):
    r = run_group([str(exe), "calib", "-n", str(n)], timeout=60)
    if r.returncode != 0:
        raise PerfbookError(f"seqread calib failed: {r.stderr.strip()[-200:]}")
    return parse_calib(r.stdout)


def qemu_trace_args(logfile: Path, events: list[str]) -> list[str]:
    args = []
    for e in events:
        args += ["-trace", f"enable={e}"]
    return args + ["-D", str(logfile), "-msg", "timestamp=on"]


def available_qemu_events() -> set[str]:
    r = subprocess.run([guest.QEMU, "-trace", "help"], capture_output=True, text=True, timeout=30)
    return set(r.stdout.split()) | set(r.stderr.split())


def guest_job(
    p, job, runner, exe, image, scratch, host_ok, blockdev, extents, qevents, say, phase=None
):
    """One boot: returns (request rows, job row, calibration rows). phase: ctx.phase, where the
    seconds go: the calibrations are "setup"; QEMU's run is "boot" (the guest's boot and its
    benchmark passes are one QEMU process, whose measured part the host can't tell apart);
    parsing and matching the traces is left as "other"."""
    phase = phase or (lambda kind: contextlib.nullcontext())
    layers = set(VARIANTS[job["variant"]])
    notes = []
    if "host" in layers and not host_ok:
        layers.discard("host")
        notes.append("host layer not traced (see skipped)")
    out_img = scratch / "out.img"
    with open(out_img, "wb") as f:
        f.truncate(OUT_DISK_MIB * MiB)
    qlog = scratch / "qemu-trace.log"
    qlog.unlink(missing_ok=True)
    if job["variant"] != "all":
        qevents = [e for e in qevents if e in QEMU_CORE_EVENTS]
    extra = qemu_trace_args(qlog, qevents) if "qemu" in layers else []
    if "host" in layers:  # thread names (CPU 0/TCG, worker) tell the host trace who did what
        extra += ["-name", "perfbook,debug-threads=on"]
    with phase("setup"):
        cal_before = calibrate(exe, p["calib_samples"])
    ht = HostTrace(p, blockdev, say) if "host" in layers else None
    disks = [
        guest.DiskSpec(label="bench", cache="none", aio=job["aio"], readonly=True, path=image),
        guest.DiskSpec(label="out", cache="writeback", path=out_img),
    ]
    traced = "guest" in layers
    cfg = guest.GuestConfig(
        disks=disks, memory_mib=p["guest_memory_mib"], extra_args=extra, files={"bin/seqread": exe}
    )
    htext = btext = ""
    hstats = {}
    if ht is not None:
        with phase("setup"), ht:
            cfg.on_start = ht.on_start
            with phase("boot"):
                res = runner.run(guest_script(p, job, traced), cfg)
            htext, btext, hstats = ht.read()
        notes += ht.notes
    else:
        with phase("boot"):
            res = runner.run(guest_script(p, job, traced), cfg)
    with phase("setup"):
        cal_after = calibrate(exe, p["calib_samples"])
    if res.rc != 0:
        tail = " | ".join(res.output.strip().splitlines()[-3:])
        raise PerfbookError(
            f"the guest's script failed with status {res.rc} ({job['aio']}, "
            f"{job['variant']}): {tail}"
        )
    sect = split_output(out_img.read_bytes())
    out_img.unlink()
    bench, loops = parse_bench(sect.get("BENCH", ""))
    want = len(job["patterns"]) * (p["requests"] + p["warmup"])
    if len(bench) != want:
        raise PerfbookError(f"the guest returned {len(bench)} benchmark rows, expected {want}")
    bench = bench.sort_values("t0", kind="stable").reset_index(drop=True)
    calib = pd.concat(
        [cal_before.assign(phase="before"), cal_after.assign(phase="after")], ignore_index=True
    )
    fit = fit_clock(calib)
    jrow = {
        **{k: job[k] for k in ("round", "position", "kind", "aio", "variant")},
        "layers": "+".join(sorted(layers)) or "none",
        "patterns": ",".join(job["patterns"]),
        "qemu_events": len(qevents) if "qemu" in layers else 0,
        "accel": res.accel,
        "accel_note": res.accel_note,
        "boot_seconds": res.boot_seconds,
        "total_seconds": res.total_seconds,
        "requests": p["requests"],
        "warmup": p["warmup"],
        "tsc_hz": fit["tsc_hz"],
        "q_tsc_ref": fit["tsc_ref"],
        "q_real_ref_us": fit["real_ref_us"],
        "q_slope": fit["slope"],
        "calib_resid_cyc": fit["resid_max"],
        "notes": "; ".join(notes),
    }
    if len(loops):
        mono = (loops.mono_end - loops.mono_start).sum()
        jrow["guest_tsc_hz"] = (
            float((loops.tsc_end - loops.tsc_start).sum() / mono * 1e9) if mono else math.nan
        )
    req = bench.copy()
    req["bench_cyc"] = req.t1 - req.t0
    # guest layer
    if traced:
        gstats = ring_stats(sect.get("STATS", ""))
        jrow["guest_entries"] = gstats.get("entries")
        jrow["guest_overrun"] = gstats.get("overrun")
        gev = parse_ftrace(sect.get("TRACE", ""))
        gs = guest_stamps(bench, gev)
        for c in gs.columns:
            req[c] = gs[c] - req.t0
        jrow["matched_guest"] = int(gs.g_irq.notna().sum())
    # QEMU layer
    qseg = None
    if "qemu" in layers:
        qtext = qlog.read_text(errors="replace") if qlog.exists() else ""
        qlog.unlink(missing_ok=True)
        qev = parse_qemu_log(qtext)
        jrow["qemu_lines"] = int(len(qev))
        qseg = qemu_segments(qev)
        m = match_in_order(bench.offset.to_numpy(), qseg.offset.to_numpy())
        jrow["matched_qemu"] = int((m >= 0).sum())
        anchor = qseg.q_notify.to_numpy(dtype="float64")
        req["q_anchor"] = [anchor[k] if k >= 0 else math.nan for k in m]
        for c in (
            "q_pop",
            "q_read",
            "q_submit",
            "q_cb",
            "q_rw",
            "q_req",
            "q_flush",
            "q_irq",
            "q_apic",
        ):
            col = qseg[c].to_numpy(dtype="float64")
            req[c] = [col[k] - anchor[k] if k >= 0 else math.nan for k in m]
    # host layer
    if ht is not None:
        qev_h, bev_h = parse_ftrace(htext), parse_ftrace(btext)
        jrow["host_events"] = int(len(qev_h) + len(bev_h))
        hi = host_issues(
            qev_h, bev_h, res.qemu_pid, extents or [], blockdev["part_start"] if blockdev else 0
        )
        m = match_in_order(bench.offset.to_numpy(), hi.offset.to_numpy())
        jrow["matched_host"] = int((m >= 0).sum())
        # host_lost: events lost inside the measured requests' span (a boot's overrun is not)
        cols = [
            c for c in hi.columns if c.startswith("h_") and c not in ("h_sub_call", "h_sub_thread")
        ]
        span = hi.iloc[m[m >= 0]][cols].to_numpy(dtype="float64")
        start = float(span[~pd.isna(span)].min()) if (~pd.isna(span)).any() else math.nan
        jrow["host_lost"], before = host_loss(hstats, {"qemu": qev_h, "disk": bev_h}, start)
        if before:
            notes.append(
                f"host trace: {before} events of QEMU's start and boot overwritten in the ring "
                "buffer before the first measured request (none of the measured span)"
            )
            jrow["notes"] = "; ".join(notes)
        anchor = hi.h_issue.to_numpy(dtype="float64")
        req["h_anchor"] = [anchor[k] if k >= 0 else math.nan for k in m]
        for c in (
            "h_complete",
            "h_sub",
            "h_sub_exit",
            "h_kick",
            "h_kvm_notify",
            "h_notifier",
            "h_kvm_irq",
        ):
            col = hi[c].to_numpy(dtype="float64")
            req[c] = [col[k] - anchor[k] if k >= 0 else math.nan for k in m]
        for c in ("h_sub_call", "h_sub_thread"):
            col = hi[c].to_numpy(dtype=object)
            req[c] = [col[k] if k >= 0 else None for k in m]
    req = req.drop(columns=["t1"])
    for k in ("round", "aio", "variant"):
        req.insert(0, k, job[k])
    req.insert(0, "kind", "guest")
    req["accel"] = res.accel
    jrow.update(alignment_summary(req, jrow))
    jrow.update(relative_to_bases(req))
    return req, jrow, calib


def host_job(p, job, exe, image):
    rows = []
    for pat in job["patterns"]:
        args = bench_args(p, pat, job["seeds"][pat], p["host_requests"], "/dev/stdout", str(image))
        r = run_group([str(exe), *args], timeout=600)
        if r.returncode != 0:
            raise PerfbookError(f"the host benchmark failed: {r.stderr.strip()[-200:]}")
        b, _ = parse_bench(r.stdout)
        rows.append(b)
    b = pd.concat(rows, ignore_index=True)
    b["bench_cyc"] = b.t1 - b.t0
    b = b.drop(columns=["t1"])
    for k in ("round", "aio", "variant"):
        b.insert(0, k, job[k])
    b.insert(0, "kind", "host")
    b["accel"] = ""
    bases = relative_to_bases(b)
    return b, {
        **{k: job[k] for k in ("round", "position", "kind", "aio", "variant")},
        "layers": "none",
        "patterns": ",".join(job["patterns"]),
        "requests": p["host_requests"],
        "warmup": p["warmup"],
        **bases,
    }


def measure(ctx) -> None:
    """Measure this host into ctx.writer (tables requests, jobs, repetition, calib)."""
    p, w = ctx.p, ctx.writer
    with ctx.phase("setup"):  # the image, its extents, the guest runner
        exe = binary(BENCH)
        rng = random.Random(p["seed"])
        per_round = len(plan_round(p, random.Random(0), 0))
        scratch = ctx.scratch().dir  # removed by the framework's undo stack
        rep = repetition(EXPERIMENT, rep_keys(p), p, "rep_")
        prog = ctx.progress((rep.warmup + rep.min_runs) * per_round + 1)
        prog.note(f"scratch directory {scratch}")
        say = prog.note
        w.extra["_tool_cmds"] = {"qemu-system": [guest.QEMU, "--version"]}
        image = scratch / "bench.img"
        fill_image(image, p["image_mib"], p["seed"])
        prog.step(f"benchmark image of {p['image_mib']} MiB written")
        host_why = host_layer_problem()
        blockdev = extents = None
        if host_why is None:
            try:
                blockdev = block_device(image)
                extents = fiemap(image)
            except MissingPrerequisite as e:
                w.skip("host_block", str(e))
        else:
            w.skip("host", host_why)
        have = available_qemu_events()
        qevents = [e for e in QEMU_EVENTS if e in have]
        missing = [e for e in QEMU_EVENTS if e not in have]
        if missing:
            w.notes.append(f"QEMU {guest.qemu_version()} has no trace events {', '.join(missing)}")
        w.extra["virtio_blk_latency"] = {
            "qemu_events": qevents,
            "qemu_trace_backend": "log (-trace, -D, -msg timestamp=on)",
            "host_block_device": {k: v for k, v in (blockdev or {}).items()},
            "image_extents": len(extents or []),
            "region": [REGION_START, p["image_mib"] * MiB - REGION_START],
            "block": BLOCK,
        }
        # QEMU and the guest runner's scratch directory: stopped and removed when the undo unwinds
        runner = ctx.undo.enter_context(
            guest.Runner(
                accel=p["accel"],
                kvm_boot_timeout=p["kvm_boot_timeout"],
                timeout=p["boot_timeout"],
                progress=say,
            )
        )
        w.extra["guest_artefacts"] = {
            k: v for k, v in (runner.artefacts or {}).items() if k != "dir"
        }
    reqs, jobs, cals = [], [], []
    accel_seen = set()
    jid = 0
    for rd in rep.rounds():
        if rd.index:
            prog.note(f"after {rd.index} round(s): {rep.status()}")
        rnd = rd.index - rep.warmup  # measured rounds are numbered from 0
        for job in plan_round(p, rng, rnd):
            if job["kind"] == "host":
                with ctx.phase("measured"):
                    r, j = host_job(p, job, exe, image)
                cal = None
            else:
                r, j, cal = guest_job(
                    p,
                    job,
                    runner,
                    exe,
                    image,
                    scratch,
                    host_why is None,
                    blockdev,
                    extents,
                    qevents,
                    say,
                    ctx.phase,
                )
                accel_seen.add(j["accel"])
            if (
                job["kind"] == "guest"
                and job["aio"] in rep.keys
                and job["variant"] == rep_variant(p, job["aio"])
            ):
                ok = r[r.warm == 0]
                rep.add(job["aio"], float(ok.bench_cyc.median()) / j["tsc_hz"] * 1e6)
            if not rd.warmup:  # warm-up rounds are run and counted, not kept
                r.insert(0, "job", jid)
                reqs.append(r)
                jobs.append({"job": jid, **j})
                if cal is not None:
                    cals.append(cal.assign(job=jid))
                jid += 1
            extra = f" ({j.get('accel', '').upper()})" if j.get("accel") else ""
            what = "warm-up round" if rd.warmup else "round"
            prog.step(f"{what} {rnd}: {job['kind']} {job['aio']} {job['variant']}{extra}")
        prog.expect(per_round)
    prog.total = prog.done
    prog.note(f"stopped by {rep.stopped_by}: {rep.status()}")
    if "kvm" not in accel_seen:
        w.skip(
            "host_kvm",
            "no KVM guest ran (the guests ran under "
            + "/".join(sorted(a.upper() for a in accel_seen))
            + "): kvm.ko's exit and "
            "injection tracepoints only fire for KVM guests; under TCG the notify is an "
            "MMIO write that QEMU's vCPU thread turns into an ioeventfd write, and the "
            "interrupt is delivered to QEMU's emulated APIC",
        )
    req = pd.concat(reqs, ignore_index=True)
    w.add_table("requests", compact(req))
    w.add_table("jobs", pd.DataFrame(jobs))
    w.add_table("repetition", pd.DataFrame(rep.records()))
    if cals:
        w.add_table("calib", pd.concat(cals, ignore_index=True))


def compact(req):
    """Integers where the values are whole (CSV size), the request columns in a fixed order; what
    is the same for a whole boot (kind, round, aio, variant, accel) lives in the jobs table."""
    order = [
        "job",
        "pattern",
        "idx",
        "warm",
        "offset",
        "bench_cyc",
        "t0",
        "g_issue",
        "g_notify",
        "g_irq",
        "g_complete",
        "h_anchor",
        "h_kick",
        "h_kvm_notify",
        "h_sub",
        "h_sub_exit",
        "h_complete",
        "h_notifier",
        "h_kvm_irq",
        "h_sub_call",
        "h_sub_thread",
        "q_anchor",
        "q_pop",
        "q_read",
        "q_submit",
        "q_cb",
        "q_rw",
        "q_req",
        "q_flush",
        "q_irq",
        "q_apic",
    ]
    d = req.reindex(columns=order)
    for c in order:
        if c in ("pattern", "h_sub_call", "h_sub_thread"):
            continue
        d[c] = pd.to_numeric(d[c], errors="coerce").round().astype("Int64")
    return d
