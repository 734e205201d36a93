"""qemu_cache_modes, collect: the only part of the chapter that touches the host.

  semantics -- strace of ``qemu-io -t MODE`` writing a scratch image, then a flush; the raw
               traces go into the dataset's strace/ directory, the classified rows into `trace`.
  bench     -- ``qemu-img bench`` per mode and configuration, rounds repeated adaptively in a
               shuffled order (perfbook.analysis.repetition.Repetition).
  host_dd   -- the seed's ``dd`` (64 KiB blocks, normal and oflag=direct) on this host.
  guest     -- the seed's guest test with perfbook.qemu.guest: one boot per cache mode, in
               shuffled order, ``dd`` of 64 KiB blocks to the guest's virtio disk, normal and
               oflag=direct, a fixed number of rounds (the guest runs a script written before
               it boots); every result is labelled with the accelerator (KVM or TCG). While the
               guest runs, a thread samples the host's page cache: /proc/meminfo (Cached,
               Dirty, Writeback) and the pages of the guest's image file that are resident,
               with mincore(2). QEMU and its scratch directory are owned by
               perfbook.qemu.guest.Runner.

Scratch images live in the run's scratch directory (ctx.scratch(), on the framework's undo
stack); every child (strace, qemu-io, qemu-img, dd) runs in its own process group, killed with
it on any exception, and dies with this process (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import math
import os
import random
import re
import shutil
import subprocess
import threading
import time
from contextlib import nullcontext
from pathlib import Path

import pandas as pd

from perfbook.analysis.repetition import interleave, repetition
from perfbook.core.errors import MissingPrerequisite, PerfbookError
from perfbook.core.guard import check_interrupted
from perfbook.core.proc import die_with_parent, run_group
from perfbook.probes import blockdev
from perfbook.qemu import guest

from .parse import (
    DD_BS,
    DOC_MAPPING,
    DOC_SOURCE,
    MARK_FLUSH_BEGIN,
    MARK_FLUSH_END,
    PARTS,
    SEM_WRITE,
    KiB,
    MiB,
    bench_seconds,
    dd_summary,
    parse_guest,
    trace_rows,
)

TRACED = (
    "openat",
    "pread64",
    "preadv",
    "preadv2",
    "pwrite64",
    "pwritev",
    "pwritev2",
    "fdatasync",
    "fsync",
    "sync_file_range",
    "io_submit",
    "io_uring_enter",
)
SEM_IMAGE_MIB = 8
MEMINFO_KEYS = ("Cached", "Dirty", "Writeback", "MemFree")


def needs_direct(aio: str, mode: str) -> bool:
    """QEMU refuses aio=native without O_DIRECT: such a (aio, mode) pair is not run."""
    return aio == "native" and mode not in ("none", "directsync")


def run(cmd: list[str], what: str, timeout: float = 300, env=None) -> subprocess.CompletedProcess:
    """Run a child in its own process group (perfbook.core.proc.run_group); a failure is one line."""
    check_interrupted()
    try:
        r = run_group(
            cmd, timeout=timeout, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent, env=env
        )
    except subprocess.TimeoutExpired:
        raise PerfbookError(f"{what} did not finish within {timeout:.0f} s") from None
    check_interrupted()
    if r.returncode != 0:
        last = (r.stderr.strip() or r.stdout.strip() or f"exit {r.returncode}").splitlines()[-1]
        raise PerfbookError(f"{what} failed (exit {r.returncode}): {last}")
    return r


def create_image(path: Path, fmt: str, size_mib: int) -> None:
    """A fully preallocated image, so that runs overwrite allocated blocks (no allocation cost)."""
    run(
        [
            "qemu-img",
            "create",
            "-q",
            "-f",
            fmt,
            "-o",
            "preallocation=full",
            str(path),
            f"{size_mib}M",
        ],
        f"qemu-img create {fmt}",
    )
    sync_file(path)


def sync_file(path: Path) -> None:
    """Write back this one file's dirty pages (untimed, between runs) so that no run pays
    for the previous run's dirty data. Only our own scratch file is touched."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------- part 1: semantics (strace)
def qemu_io_trace_cmd(
    trace_file: Path, image: Path, fmt: str, mode: str, aio: str, n_writes: int
) -> list[str]:
    cmds: list[str] = []
    for i in range(n_writes):
        cmds += ["-c", f"write -P 0x5a {i * SEM_WRITE} {SEM_WRITE}"]
    cmds += [
        "-c",
        f"read {MARK_FLUSH_BEGIN[0]} {MARK_FLUSH_BEGIN[1]}",
        "-c",
        "flush",
        "-c",
        f"read {MARK_FLUSH_END[0]} {MARK_FLUSH_END[1]}",
    ]
    return [
        "strace",
        "-f",
        "-qq",
        "-s",
        "16",
        "-e",
        "trace=" + ",".join(TRACED),
        "-o",
        str(trace_file),
        "qemu-io",
        "-f",
        fmt,
        "-t",
        mode,
        "-i",
        aio,
        *cmds,
        str(image),
    ]


def semantics_runs(p: dict) -> list[tuple[str, str, str]]:
    """(format, aio, mode) of every traced run."""
    return [
        (fmt, aio, mode)
        for fmt in p["sem_formats"]
        for aio in p["sem_aio"]
        for mode in p["modes"]
        if not needs_direct(aio, mode)
    ]


def _semantics(s, p: dict, prog, w) -> list[dict]:
    rows = []
    imgs = {}
    for fmt in p["sem_formats"]:
        imgs[fmt] = s.path(f"sem.{fmt}")
        create_image(imgs[fmt], fmt, SEM_IMAGE_MIB)
    w.path("strace").mkdir(exist_ok=True)
    for fmt, aio, mode in semantics_runs(p):
        tf = s.path(f"trace-{mode}-{fmt}-{aio}.txt")
        run(
            qemu_io_trace_cmd(tf, imgs[fmt], fmt, mode, aio, p["sem_writes"]),
            f"strace qemu-io -t {mode} ({fmt}, aio={aio})",
            timeout=120,
        )
        text = tf.read_text(errors="replace").replace(str(s.dir), "SCRATCH")
        (w.path("strace") / tf.name).write_text(text)
        tf.unlink()
        for r in trace_rows(text, imgs[fmt].name):
            rows.append({"mode": mode, "format": fmt, "aio": aio, **r})
        prog.step(f"semantics {mode} {fmt} aio={aio}")
    for img in imgs.values():
        img.unlink()
    return rows


# ---------------------------------------------------------------- part 2: qemu-img bench
def bench_cmd(
    image: Path,
    fmt: str,
    mode: str,
    op: str,
    depth: int,
    flush_interval: int,
    count: int,
    size: int,
    aio: str,
) -> list[str]:
    cmd = [
        "qemu-img",
        "bench",
        "-f",
        fmt,
        "-t",
        mode,
        "-i",
        aio,
        "-c",
        str(count),
        "-d",
        str(depth),
        "-s",
        str(size),
    ]
    if op == "write":
        cmd += ["-w", "--pattern=90"]
        if flush_interval:
            cmd.append(f"--flush-interval={flush_interval}")
    return cmd + [str(image)]


def bench_configs(p: dict) -> list[dict]:
    out = []
    for fmt in p["bench_formats"]:
        for op in p["bench_ops"]:
            for depth in p["bench_depths"]:
                for fi in p["bench_flush_intervals"] if op == "write" else [0]:
                    for mode in p["modes"]:
                        if needs_direct(p["bench_aio"], mode):
                            continue
                        out.append(
                            {
                                "format": fmt,
                                "op": op,
                                "depth": depth,
                                "flush_interval": fi,
                                "mode": mode,
                            }
                        )
    return out


def bench_experiment(c: dict) -> str:
    """The adaptive-repetition experiment a bench config belongs to: its modes are the keys."""
    return f"bench {c['format']} {c['op']} d={c['depth']} fi={c['flush_interval']}"


def main_experiment(p: dict) -> str | None:
    """The bench experiment the key findings read (key_findings.wb_over_wt, the comparisons
    table): raw writes at the smallest depth without flushes; None where the profile leaves it
    out."""
    if "raw" not in p["bench_formats"] or "write" not in p["bench_ops"]:
        return None
    if 0 not in p["bench_flush_intervals"]:
        return None
    return bench_experiment(
        {"format": "raw", "op": "write", "depth": min(p["bench_depths"]), "flush_interval": 0}
    )


def main_settings(p: dict) -> dict:
    """p with the main experiment's rounds: at least bench_main_runs measured rounds (4 against
    4 is the least a Hodges-Lehmann ratio of two modes covers 95 % with), the other
    experiments' settings otherwise."""
    n = p["bench_main_runs"]
    return {
        **p,
        "bench_min_runs": max(p["bench_min_runs"], n),
        "bench_max_runs": max(p["bench_max_runs"], n),
    }


def _no_phase(kind: str):
    """ctx.phase's stand-in where the caller gives none: no accounting."""
    return nullcontext()


def _bench(s, p: dict, rng, prog, rest: int = 0, phase=_no_phase) -> tuple[list[dict], list[dict]]:
    """Rounds of every config still running, in shuffled order, repeated adaptively.

    One Repetition per (format, op, depth, flush interval), keyed by mode, tracks MB/s; all of
    them share the rounds, and each stops on its own (CI target, budget or maximum). The first
    warm-up round also sizes each config: qemu-img bench reports its run time in milliseconds,
    so a config that finishes in less than bench_min_ms gets proportionally more requests (at
    most 64 times bench_count) for all its timed runs. Returns (rows, repetition records)."""
    imgs = {}
    for fmt in p["bench_formats"]:
        imgs[fmt] = s.path(f"bench.{fmt}")
        with phase("setup"):
            create_image(imgs[fmt], fmt, p["bench_image_mib"])
    configs = bench_configs(p)
    counts = {i: p["bench_count"] for i in range(len(configs))}
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(configs):
        groups.setdefault(bench_experiment(c), []).append(i)
    main = main_experiment(p)
    reps = {
        e: repetition(e, [configs[i]["mode"] for i in ix], pe, "bench_")
        for e, ix in groups.items()
        for pe in [main_settings(p) if e == main else p]
    }
    rows = []
    for rounds in interleave(reps.values()):
        first = next(iter(rounds.values()))
        rnd = first.index - p["bench_warmup"]
        if first.index > p["bench_warmup"]:
            met = sum(1 for r in reps.values() for k in r.keys if r.met(k))
            prog.note(
                f"bench round {rnd}: {len(rounds)} of {len(reps)} experiments still running, "
                f"{met} of {sum(len(r.keys) for r in reps.values())} configs within the CI target"
            )
        order = [i for e in rounds for i in groups[e]]
        rng.shuffle(order)
        prog.expect(len(order) + rest)
        for pos, i in enumerate(order):
            c = configs[i]
            count = counts[i]
            cmd = bench_cmd(
                imgs[c["format"]],
                c["format"],
                c["mode"],
                c["op"],
                c["depth"],
                c["flush_interval"],
                count,
                p["bench_size"],
                p["bench_aio"],
            )
            with phase("warmup" if rnd < 0 else "measured"):
                t0 = time.perf_counter()
                r = run(cmd, f"qemu-img bench -t {c['mode']}", timeout=600)
                wall = time.perf_counter() - t0
                sync_file(imgs[c["format"]])
            sec = bench_seconds(r.stdout)
            if sec is None:
                raise PerfbookError(
                    f"qemu-img bench printed no run time: {r.stdout.strip()[-120:]}"
                )
            reps[bench_experiment(c)].add(
                c["mode"], count * p["bench_size"] / sec / 1e6 if sec else math.nan
            )
            if first.index == 0:  # the calibration round (always a warm-up round)
                want = p["bench_min_ms"] / 1000
                if sec < want:
                    counts[i] = count * min(64, math.ceil(want / max(sec, 0.0005)))
            if rnd >= 0:
                nbytes = count * p["bench_size"]
                rows.append(
                    {
                        "round": rnd,
                        "position": pos,
                        **c,
                        "count": count,
                        "size": p["bench_size"],
                        "aio": p["bench_aio"],
                        "seconds": sec,
                        "wall_seconds": wall,
                        "mb_per_s": nbytes / sec / 1e6 if sec else math.nan,
                        "iops": count / sec if sec else math.nan,
                        "mean_latency_us": sec * 1e6 * c["depth"] / count if count else math.nan,
                    }
                )
            prog.step(
                f"bench {c['op']} {c['mode']} {c['format']} d={c['depth']} "
                f"fi={c['flush_interval']}" + (" (warm-up)" if rnd < 0 else "")
            )
    for img in imgs.values():
        img.unlink()
    stopped = [r.stopped_by for r in reps.values()]
    prog.note(
        "bench: repetition stopped, "
        + ", ".join(f"{stopped.count(x)} by {x}" for x in sorted(set(stopped)))
    )
    return rows, [r for rp in reps.values() for r in rp.records()]


# ---------------------------------------------------------------- part 3: dd on this host
def _host_dd(
    s, p: dict, rng, prog, rest: int = 0, phase=_no_phase
) -> tuple[list[dict], list[dict]]:
    img = s.path("host-dd.img")
    count = p["dd_mib"] * MiB // (64 * KiB)
    env = {**os.environ, "LC_ALL": "C"}
    run(
        ["dd", "if=/dev/zero", f"of={img}", "bs=64k", f"count={count}", "conv=fsync"],
        "dd (preallocate)",
        env=env,
    )
    rows = []
    rep = repetition("host_dd", ["normal", "direct"], p, "host_dd_")
    for rd in rep.rounds():
        rnd = rd.index - rep.warmup
        prog.expect(2 + rest)
        order = ["normal", "direct"]
        rng.shuffle(order)
        for pos, variant in enumerate(order):
            cmd = ["dd", "if=/dev/zero", f"of={img}", "bs=64k", f"count={count}", "conv=notrunc"]
            if variant == "direct":
                cmd.append("oflag=direct")
            with phase("warmup" if rnd < 0 else "measured"):
                r = run(cmd, f"dd ({variant})", env=env)
                sync_file(img)
            got = dd_summary(r.stderr)
            if got is None:
                raise PerfbookError(f"dd printed no summary: {r.stderr.strip()[-120:]}")
            nb, sec = got
            rep.add(variant, nb / sec / 1e6 if sec else math.nan)
            if rnd >= 0:
                rows.append(
                    {
                        "round": rnd,
                        "position": pos,
                        "variant": variant,
                        "bytes": nb,
                        "seconds": sec,
                        "mb_per_s": nb / sec / 1e6 if sec else math.nan,
                    }
                )
            prog.step(f"host dd {variant}" + (" (warm-up)" if rnd < 0 else ""))
    img.unlink()
    prog.note(f"host dd: repetition stopped by {rep.stopped_by}: {rep.status()}")
    return rows, rep.records()


# ---------------------------------------------------------------- part 4: the guest's dd, the page cache
def resident_bytes(path) -> int:
    """How many bytes of `path` are in the host page cache now (mincore(2) on a mapping)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0
        addr = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap failed")
        try:
            ps = os.sysconf("SC_PAGE_SIZE")
            vec = (ctypes.c_ubyte * ((size + ps - 1) // ps))()
            if libc.mincore(ctypes.c_void_p(addr), size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore failed")
            return sum(1 for b in bytes(vec) if b & 1) * ps
        finally:
            libc.munmap(ctypes.c_void_p(addr), size)
    finally:
        os.close(fd)


def meminfo() -> dict[str, int]:
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in MEMINFO_KEYS:
                out[k] = int(v.split()[0])
    return out


class PageCacheSampler(threading.Thread):
    """Samples /proc/meminfo and the residency of the guest's disk image while it runs."""

    def __init__(self, find_image, interval: float):
        super().__init__(daemon=True)
        self.find_image, self.interval = find_image, interval
        self.samples: list[dict] = []
        self._halt = threading.Event()
        self.t0 = time.monotonic()

    def run(self):
        while not self._halt.is_set():
            row = {
                "t": time.monotonic() - self.t0,
                **{f"{k.lower()}_kb": v for k, v in meminfo().items()},
            }
            img = self.find_image()
            res = None
            if img is not None:
                try:
                    res = resident_bytes(img) // KiB
                except OSError:
                    res = None
            row["image_resident_kb"] = res
            self.samples.append(row)
            self._halt.wait(self.interval)

    def stop(self):
        self._halt.set()
        self.join(timeout=5)


def guest_script(dd_mib: int, order: list[tuple[int, int, str]]) -> str:
    """busybox sh: dd of 64 KiB blocks to /dev/vda in the given (round, position, variant) order.

    Each dd opens and closes /dev/vda; the last close writes the device's dirty pages back
    (blkdev_put -> sync_blockdev) and drops them, so a 'normal' run's time includes getting its
    data to the virtual disk. A last, untimed dd runs with the device held open, so the guest
    keeps its pages: GUEST_BUFFERS (Buffers in the guest's /proc/meminfo, the page cache of
    block devices) is the guest's copy, for the double-caching comparison.

    Time stamps come from adjtimex (microseconds); the 'stamps' variant measures the cost of
    taking two stamps around nothing.
    """
    count = dd_mib * MiB // DD_BS
    lines = [
        "ts() { adjtimex | awk '/tv_sec/{s=$2} /tv_usec/{u=$2} END{printf \"%d%06d\\n\", s, u}'; }",
        'echo "CACHE_TYPE $(cat /sys/block/vda/cache_type 2>/dev/null)"',
        'echo "WRITE_CACHE $(cat /sys/block/vda/queue/write_cache 2>/dev/null)"',
        'echo "SIZE $(cat /sys/block/vda/size)"',
        "one() {",
        "  a=$(ts)",
        '  case "$3" in',
        f"    normal) dd if=/dev/zero of=/dev/vda bs=64k count={count} 2>/tmp/dd.err;;",
        f"    direct) dd if=/dev/zero of=/dev/vda bs=64k count={count} oflag=direct 2>/tmp/dd.err;;",
        "    *) : > /tmp/dd.err;;",
        "  esac",
        "  rc=$?",
        "  b=$(ts)",
        '  out=$(grep "records out" /tmp/dd.err | tr " " _)',
        '  echo "DD $1 $2 $3 $a $b $rc ${out:-none}"',
        "}",
    ]
    lines += [f"one {rnd} {pos} {variant}" for rnd, pos, variant in order]
    # double caching: with /dev/vda held open, the guest keeps the pages of one more (untimed)
    # normal dd in its page cache after dd exits; sync sends them to the host
    lines += [
        "exec 3</dev/vda",
        f"dd if=/dev/zero of=/dev/vda bs=64k count={count} 2>/dev/null",
        "sync",
        "echo \"GUEST_BUFFERS $(awk '/^Buffers:/{print $2}' /proc/meminfo)\"",
        "exec 3<&-",
        "sync",
    ]
    return "\n".join(lines) + "\n"


def guest_order(p: dict, rng) -> list[tuple[int, int, str]]:
    """(round, position, variant) of every dd in the guest: warm-up rounds first (negative),
    each round's variants shuffled."""
    order = []
    for rnd in range(-p["dd_warmup"], p["dd_repeats"]):
        vs = ["normal", "direct", "stamps"]
        rng.shuffle(vs)
        order += [(rnd, pos, v) for pos, v in enumerate(vs)]
    return order


def _redact_cmd(cmd: list[str]) -> str:
    return " ".join(
        re.sub(
            r"/(?:[^/\s,=]+/)*guest-\d+-[^/]+/run-[^/]+/",
            "SCRATCH/",
            a.replace(str(guest.guest_root()), "build/guest"),
        )
        for a in cmd[1:]
    )


def measure_guest(p: dict, rng, prog, w) -> dict[str, list[dict]]:
    """guest_boots boots per guest mode, in rounds of every mode in shuffled order: the rows
    of the tables guest_dd, guest_boots, pagecache and pagecache_samples."""
    dd_rows, boots, pc_summary, pc_samples = [], [], [], []
    modes = p["guest_modes"]
    order = []
    for _ in range(p["guest_boots"]):  # rounds of boots, every mode once per round, shuffled
        rnd = modes[:]
        rng.shuffle(rnd)
        order += rnd
    with guest.Runner(
        accel=p["accel"],
        kvm_boot_timeout=p["kvm_boot_timeout"],
        timeout=p["boot_timeout"],
        progress=prog.note,
    ) as r:
        w.extra["guest_artefacts"] = {k: v for k, v in (r.artefacts or {}).items() if k != "dir"}

        def find_image():
            if r.scratch is None:
                return None
            hits = sorted(r.scratch.glob("run-*/disk0.img"))
            return hits[-1] if hits else None

        for boot, mode in enumerate(order):
            check_interrupted()
            seq = guest_order(p, rng)
            disk = guest.DiskSpec(label="dd", cache=mode, size_mib=max(p["dd_mib"], 4))
            cfg = guest.GuestConfig(disks=[disk], memory_mib=p["guest_memory_mib"])
            base = meminfo()
            sampler = PageCacheSampler(find_image, p["sample_ms"] / 1000)
            sampler.start()
            try:
                res = r.run(guest_script(p["dd_mib"], seq), cfg)
            finally:
                sampler.stop()
            check_interrupted()
            after = meminfo()
            if res.rc != 0:
                raise PerfbookError(f"the guest script failed with status {res.rc} (cache={mode})")
            info, rows = parse_guest(res.output)
            want = len(seq)
            if len(rows) != want:
                raise PerfbookError(
                    f"the guest printed {len(rows)} dd results, expected {want} (cache={mode})"
                )
            for x in rows:
                dd_rows.append(
                    {
                        "boot": boot,
                        "mode": mode,
                        "accel": res.accel,
                        **x,
                        "bytes": (p["dd_mib"] * MiB) if x["variant"] != "stamps" else 0,
                    }
                )
            boots.append(
                {
                    "boot": boot,
                    "mode": mode,
                    "accel": res.accel,
                    "accel_note": res.accel_note,
                    "boot_seconds": res.boot_seconds,
                    "total_seconds": res.total_seconds,
                    "guest_cache_type": info.get("cache_type"),
                    "guest_write_cache": info.get("write_cache"),
                    "guest_disk_sectors": info.get("size"),
                    "guest_buffers_kb": int(info["guest_buffers"])
                    if info.get("guest_buffers", "").isdigit()
                    else None,
                    "guest_kernel": res.kernel,
                    "qemu_version": res.qemu_version,
                    "memory_mib": p["guest_memory_mib"],
                    "dd_mib": p["dd_mib"],
                    "qemu_cmdline": _redact_cmd(res.cmdline),
                }
            )
            sm = sampler.samples
            for x in sm:
                pc_samples.append({"boot": boot, "mode": mode, **x})

            def peak(key, sm=sm):
                vals = [x[key] for x in sm if x.get(key) is not None]
                return max(vals) if vals else None

            pc_summary.append(
                {
                    "boot": boot,
                    "mode": mode,
                    "accel": res.accel,
                    "samples": len(sm),
                    "guest_wrote_mib": p["dd_mib"] * (p["dd_warmup"] + p["dd_repeats"]) * 2,
                    "disk_mib": disk.size_mib,
                    "cached_base_kb": base["Cached"],
                    "cached_peak_kb": peak("cached_kb"),
                    "cached_after_kb": after["Cached"],
                    "dirty_base_kb": base["Dirty"],
                    "dirty_peak_kb": peak("dirty_kb"),
                    "writeback_peak_kb": peak("writeback_kb"),
                    "image_resident_peak_kb": peak("image_resident_kb"),
                    "image_resident_last_kb": next(
                        (
                            x["image_resident_kb"]
                            for x in reversed(sm)
                            if x.get("image_resident_kb") is not None
                        ),
                        None,
                    ),
                }
            )
            prog.step(f"guest cache={mode}: {res.accel}, {res.total_seconds:.1f} s")
    return {
        "guest_dd": dd_rows,
        "guest_boots": boots,
        "pagecache": pc_summary,
        "pagecache_samples": pc_samples,
    }


# ---------------------------------------------------------------- facts and the sequence
def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def host_disk(path: Path) -> dict:
    """The whole disk under `path` and its queue facts (perfbook.probes.blockdev), or {"device": None}."""
    try:
        disk = blockdev.device_of(path)[0]
    except (MissingPrerequisite, OSError):
        return {"device": None}
    return {"device": disk, **blockdev.queue_facts(disk)}


def available_parts(p: dict) -> tuple[list[str], dict[str, str]]:
    """The chosen parts this host can run, and why the others can't (strace, dd, a guest)."""
    skipped = {}
    if "semantics" in p["parts"] and not shutil.which("strace"):
        skipped["semantics"] = "strace is not installed (apt-get install strace)"
    if "host_dd" in p["parts"] and not shutil.which("dd"):
        skipped["host_dd"] = "dd is not installed (coreutils)"
    if "guest" in p["parts"] and (g := guest.preflight()):
        skipped["guest"] = g[0]
    return [x for x in p["parts"] if x not in skipped], skipped


def measure(ctx) -> None:
    """Measure this host into ctx.writer (tables trace, bench, host_dd, repetition, guest_dd,
    guest_boots, pagecache, pagecache_samples; the raw traces under strace/)."""
    p, w = ctx.p, ctx.writer
    rng = random.Random(p["seed"])
    parts, skipped = available_parts(p)
    n_sem = len(semantics_runs(p)) if "semantics" in parts else 0
    # step counts at the least; adaptive rounds raise them as they go
    n_bench = (
        len(bench_configs(p)) * (p["bench_min_runs"] + p["bench_warmup"]) if "bench" in parts else 0
    )
    n_dd = 2 * (p["host_dd_min_runs"] + p["host_dd_warmup"]) if "host_dd" in parts else 0
    n_guest = len(p["guest_modes"]) * p["guest_boots"] if "guest" in parts else 0
    s = ctx.scratch()  # removed by the framework's undo stack
    prog = ctx.progress(n_sem + n_bench + n_dd + n_guest)
    w.extra["_tool_cmds"] = {
        "qemu-img": ["qemu-img", "--version"],
        "qemu-io": ["qemu-io", "--version"],
        "strace": ["strace", "-V"],
        "qemu-system": [guest.QEMU, "--version"],
        "dd": ["dd", "--version"],
    }
    w.extra["documented_mapping"] = {
        "source": DOC_SOURCE,
        "columns": ["cache.writeback", "cache.direct", "cache.no-flush"],
        "modes": {k: list(v) for k, v in DOC_MAPPING.items()},
    }
    w.extra["scratch_fs"] = blockdev.mount_of(s.dir.parent)
    w.extra["host_disk"] = host_disk(s.dir.parent)
    w.extra["vm_dirty"] = {
        k: _read(f"/proc/sys/vm/{k}")
        for k in (
            "dirty_ratio",
            "dirty_background_ratio",
            "dirty_expire_centisecs",
            "dirty_writeback_centisecs",
        )
    }
    for part, why in skipped.items():
        w.skip(part, why)
    for part in PARTS:
        if part not in p["parts"]:
            w.skip(part, "left out by the parts parameter")
    if "semantics" in parts:
        with ctx.phase("measured"):
            sem = _semantics(s, p, prog, w)
        w.add_table("trace", pd.DataFrame(sem).drop(columns=["args"]))
    rep_rows = []
    if "bench" in parts:
        rows, recs = _bench(s, p, rng, prog, rest=n_dd + n_guest, phase=ctx.phase)
        w.add_table("bench", pd.DataFrame(rows))
        rep_rows += recs
    if "host_dd" in parts:
        rows, recs = _host_dd(s, p, rng, prog, rest=n_guest, phase=ctx.phase)
        w.add_table("host_dd", pd.DataFrame(rows))
        rep_rows += recs
    if rep_rows:
        w.add_table("repetition", pd.DataFrame(rep_rows))
    if "guest" in parts:
        try:
            # each guest run is one QEMU process: its boot and teardown (~3.5 s under TCG) and
            # its dd script (~1.5 s) can't be told apart from here; the boot is most of it
            with ctx.phase("boot"):
                tables = measure_guest(p, rng, prog, w)
        except MissingPrerequisite as e:  # e.g. the guest kernel can't be fetched
            w.skip("guest", str(e))
        else:
            for name, rows in tables.items():
                w.add_table(name, pd.DataFrame(rows))
