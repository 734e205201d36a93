"""qcow2_overlap: the measurement, the only part of the chapter that runs anything.

Everything happens in a private scratch directory (ctx.scratch()) with the host's qemu-img:
timed preallocations, `qemu-img bench` write workloads, images with internal snapshots,
metadata counted by tools/perfbook/probes/qcow2.py, and perf recordings of where the
cycles go. Every child runs in its own process group; the framework's undo stack kills any that is still running and
removes the directory, on every exit path.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
from pathlib import Path

import pandas as pd
from elftools.elf.elffile import ELFFile

from perfbook.analysis.repetition import repetition
from perfbook.core.errors import PerfbookError
from perfbook.core.proc import die_with_parent, kill_group
from perfbook.probes.blockdev import fstype
from perfbook.probes.qcow2 import Qcow2Image

from .parse import MODES, OVERLAP_SYMBOLS, PERF_QUOTED, PERF_WORKLOADS, parse_perf_report


# ---------------------------------------------------------------- the qemu-img command lines
def rotation(modes, rng) -> list[str]:
    """The modes in a fresh shuffled order (one round), from the run's seeded generator."""
    order = list(modes)
    rng.shuffle(order)
    return order


def image_opts(path: Path, mode: str, no_flush: bool = True) -> str:
    """The --image-opts string that selects an overlap-check mode (QEMU >= 2.x syntax)."""
    opts = ["driver=qcow2", f"overlap-check={mode}"]
    if no_flush:
        opts.append("cache.no-flush=on")
    opts.append(f"file.filename={path}")
    return ",".join(opts)


def create_cmd(
    path: Path, cluster_size: int, size: int = 0, prealloc: str | None = None
) -> list[str]:
    o = f"cluster_size={cluster_size}" + (f",preallocation={prealloc}" if prealloc else "")
    return ["qemu-img", "create", "-q", "-f", "qcow2", "-o", o, str(path), str(size)]


def prealloc_cmd(path: Path, size: int, mode: str) -> list[str]:
    return [
        "qemu-img",
        "resize",
        "-q",
        "--preallocation=metadata",
        "--image-opts",
        image_opts(path, mode),
        str(size),
    ]


def bench_cmd(path: Path, mode: str, count: int, buf: int, step: int) -> list[str]:
    return [
        "qemu-img",
        "bench",
        "-q",
        "-w",
        "-c",
        str(count),
        "-s",
        str(buf),
        "-S",
        str(step),
        "-t",
        "writeback",
        "--image-opts",
        image_opts(path, mode, no_flush=True),
    ]


def snapshot_cmd(path: Path, name: str) -> list[str]:
    return ["qemu-img", "snapshot", "-c", name, str(path)]


# ---------------------------------------------------------------- the measurement
class Runner:
    """Runs qemu-img children to completion inside a scratch directory, timing each one.

    close() (registered on the undo stack) kills the process group of any child still
    running: the framework calls it, signals blocked, before anything is published."""

    def __init__(self, scratch):
        self.scratch = scratch
        self.children: set[subprocess.Popen] = set()

    @property
    def dir(self) -> Path:
        return self.scratch.dir

    def path(self, name: str) -> Path:
        return self.scratch.path(name)

    def close(self) -> None:
        for c in list(self.children):
            kill_group(c)
        self.children.clear()

    def run(self, cmd: list[str], what: str) -> dict:
        """Run a child to completion; its wall time and its own CPU time (wait4)."""
        err = self.path(".stderr")
        with open(err, "wb") as ef:
            t0 = time.perf_counter()
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=ef,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
            self.children.add(proc)
            try:
                _, status, ru = os.wait4(proc.pid, 0)
            except BaseException:
                kill_group(proc)
                self.children.discard(proc)
                raise
            wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        self.children.discard(proc)
        if proc.returncode != 0:
            msg = err.read_text(errors="replace").strip().splitlines()
            raise PerfbookError(
                f"{what} failed (exit {proc.returncode}): {msg[-1] if msg else 'no message'}"
            )
        return {
            "wall_s": wall,
            "user_s": ru.ru_utime,
            "sys_s": ru.ru_stime,
            "cpu_s": ru.ru_utime + ru.ru_stime,
            "maxrss_kib": ru.ru_maxrss,
        }


def measure(ctx) -> None:
    """Measure this host into ctx.writer (the framework validated ctx.p and holds the lock)."""
    p, w = ctx.p, ctx.writer
    rng = random.Random(p["seed"])
    modes = p["modes"]
    RW = p["rep_min_runs"] + p["rep_warmup"]  # rounds at least; adaptive repetition may add more
    n_prealloc = (
        (len(p["prealloc_sizes_512"]) + len(p["prealloc_sizes_64k"])) * len(p["prealloc_modes"]) + 1
    ) * RW
    n_bench = 2 * len(modes) * RW
    snap_modes = [m for m in modes if m in ("none", "cached", "all")]
    n_snap = len(snap_modes) * RW
    n_formula = sum(
        len(p[k]) for k in ("formula_sizes_512", "formula_sizes_4k", "formula_sizes_64k")
    )
    perf_modes = [m for m in modes if m in ("cached", "all")]
    n_perf = len(perf_cells(p, perf_modes)) * p["perf_repeats"]

    s = Runner(ctx.scratch())
    ctx.undo.callback(s.close)  # registered before the first child starts
    prog = ctx.progress(n_prealloc + n_bench + n_snap + n_formula + n_perf)
    w.extra["_tool_cmds"] = {
        "qemu-img": ["qemu-img", "--version"],
        "qemu-io": ["qemu-io", "--version"],
    }
    w.extra["scratch"] = {
        "parent": str(s.dir.parent),
        "filesystem": fstype(s.dir.parent),
        "flushes": "disabled (cache.no-flush=on) in every timed run",
    }
    w.extra["perf_symbols"] = perf_symbol_check()
    if not w.extra["perf_symbols"]["resolvable"]:
        w.skip(
            "cycles_share",
            "perf cannot attribute cycles to qcow2_check_metadata_overlap: "
            + w.extra["perf_symbols"]["reason"],
        )
    for m in MODES:
        if m not in modes:
            w.skip(f"mode_{m}", "left out by the modes parameter")

    reps: list = []
    # where the seconds go (the manifest's `phases`): the timed rounds are "measured", the images
    # they start from "setup" (inside them), the formula images and perf recordings "measured"
    prealloc, meta = _prealloc(ctx, s, p, rng, prog, reps)
    writes = _writes(ctx, s, p, rng, prog, reps)
    snaps, snap_meta = _snapshots(ctx, s, p, rng, prog, snap_modes, reps)
    with ctx.phase("measured"):
        formula = _formula(s, p, prog)
    cycles = []
    if p["perf_repeats"] and not shutil.which("perf"):
        w.skip("cycles_share", "perf is not installed (apt-get install linux-perf)")
    elif p["perf_repeats"] and w.extra["perf_symbols"]["resolvable"] and perf_modes:
        with ctx.phase("measured"):
            cycles = perf_shares(s, p, rng, prog, perf_modes)
    if cycles:
        w.add_table("cycles", pd.DataFrame(cycles))
    w.add_table("prealloc", pd.DataFrame(prealloc))
    w.add_table("repetition", pd.DataFrame([r for rep in reps for r in rep.records()]))
    w.add_table("writes", pd.DataFrame(writes + snaps))
    w.add_table("metadata", pd.DataFrame(meta + snap_meta + formula))
    leftovers = [
        x.name for x in s.dir.iterdir() if not x.name.startswith(".") and x.name != "owner"
    ]
    if leftovers:
        w.notes.append(f"scratch files still present before cleanup: {', '.join(leftovers)}")


def _meta_row(img: Path, experiment: str, **extra) -> dict:
    return {"experiment": experiment, **extra, **Qcow2Image(img).metadata_summary()}


def _rounds(rep, prog, steps_per_round: int):
    """rep.rounds() as (measured round index, warm-up?), with progress while it goes on."""
    for rd in rep.rounds():
        if rd.index:
            prog.note(f"{rep.experiment} after {rd.index} round(s): {rep.status()}")
        if rd.index >= rep.warmup + rep.min_runs:  # a round beyond the planned ones
            prog.total += steps_per_round
        yield rd.index - rep.warmup, rd.warmup
    # stopped by the budget before the planned rounds: those steps will not come
    prog.total -= max(0, rep.warmup + rep.min_runs - rep.rounds_done) * steps_per_round
    prog.note(f"{rep.experiment}: stopped by {rep.stopped_by}: {rep.status()}")


def _round_label(r: int, warm: bool) -> str:
    return " (warm-up)" if warm else f" round {r + 1}"


def _prealloc(ctx, s: Runner, p: dict, rng, prog, reps: list) -> tuple[list[dict], list[dict]]:
    with ctx.phase("measured"):
        return _prealloc_rounds(ctx, s, p, rng, prog, reps)


def _prealloc_rounds(ctx, s: Runner, p, rng, prog, reps: list) -> tuple[list[dict], list[dict]]:
    rows, meta = [], []
    modes = p["prealloc_modes"]
    cases = [(512, z) for z in p["prealloc_sizes_512"]] + [
        (65536, z) for z in p["prealloc_sizes_64k"]
    ]
    img = s.path("prealloc.qcow2")
    for cs, size in cases:
        rep = repetition(f"prealloc cs={cs} size={size >> 20} MiB", modes, p, "rep_")
        reps.append(rep)
        for r, warm in _rounds(rep, prog, len(modes)):
            for pos, mode in enumerate(rotation(modes, rng)):
                if img.exists():
                    img.unlink()
                with ctx.phase("setup"):
                    s.run(create_cmd(img, cs), "qemu-img create")
                t = s.run(prealloc_cmd(img, size, mode), "qemu-img resize --preallocation=metadata")
                rep.add(mode, t["cpu_s"])
                if not warm:
                    rows.append(
                        {
                            "command": "resize_no_flush",
                            "cluster_size": cs,
                            "image_size": size,
                            "mode": mode,
                            "repeat": r,
                            "position": pos,
                            **t,
                        }
                    )
                    if r == 0:
                        meta.append(_meta_row(img, "prealloc", mode=mode))
                img.unlink()
                prog.step(f"prealloc cs={cs} size={size >> 20} MiB {mode}" + _round_label(r, warm))
    # the real command, flushes included (qemu-img create offers no overlap-check option:
    # it opens the new image with the default, cached); its wall time is what it is about
    rep = repetition("create_with_flushes (wall time)", ["cached"], p, "rep_")
    reps.append(rep)
    for r, warm in _rounds(rep, prog, 1):
        t = s.run(
            create_cmd(img, 512, p["flush_size"], "metadata"),
            "qemu-img create -o preallocation=metadata",
        )
        img.unlink()
        rep.add("cached", t["wall_s"])
        if not warm:
            rows.append(
                {
                    "command": "create_with_flushes",
                    "cluster_size": 512,
                    "image_size": p["flush_size"],
                    "mode": "cached",
                    "repeat": r,
                    "position": 0,
                    **t,
                }
            )
        prog.step("qemu-img create with flushes" + _round_label(r, warm))
    return rows, meta


def _write_row(
    workload: str,
    size: int,
    snapshots: int,
    mode: str,
    requests: int,
    request_bytes: int,
    r: int,
    pos: int,
    t: dict,
) -> dict:
    return {
        "workload": workload,
        "cluster_size": 512,
        "image_size": size,
        "snapshots": snapshots,
        "mode": mode,
        "requests": requests,
        "request_bytes": request_bytes,
        "repeat": r,
        "position": pos,
        **t,
    }


def _writes(ctx, s: Runner, p: dict, rng, prog, reps: list) -> list[dict]:
    with ctx.phase("measured"):
        return _write_rounds(ctx, s, p, rng, prog, reps)


def _write_rounds(ctx, s: Runner, p: dict, rng, prog, reps: list) -> list[dict]:
    rows = []
    # scattered 512-byte overwrites of a metadata-preallocated 512-byte-cluster image
    over = s.path("overwrite.qcow2")
    with ctx.phase("setup"):
        s.run(create_cmd(over, 512), "qemu-img create")
        s.run(prealloc_cmd(over, p["bench_size"], "none"), "qemu-img resize")
    step = 512 * p["bench_step_clusters"]
    rep = repetition("overwrite_scattered_512", p["modes"], p, "rep_")
    reps.append(rep)
    for r, warm in _rounds(rep, prog, len(p["modes"])):
        for pos, mode in enumerate(rotation(p["modes"], rng)):
            t = s.run(bench_cmd(over, mode, p["bench_count"], 512, step), "qemu-img bench")
            rep.add(mode, t["cpu_s"])
            if not warm:
                rows.append(
                    _write_row(
                        "overwrite_scattered_512",
                        p["bench_size"],
                        0,
                        mode,
                        p["bench_count"],
                        512,
                        r,
                        pos,
                        t,
                    )
                )
            prog.step(f"writes overwrite {mode}" + _round_label(r, warm))
    over.unlink()
    # sequential 64 KiB writes that allocate every cluster of an empty image
    alloc = s.path("alloc.qcow2")
    n = p["alloc_size"] // 65536
    rep = repetition("allocate_sequential_64k", p["modes"], p, "rep_")
    reps.append(rep)
    for r, warm in _rounds(rep, prog, len(p["modes"])):
        for pos, mode in enumerate(rotation(p["modes"], rng)):
            if alloc.exists():
                alloc.unlink()
            with ctx.phase("setup"):
                s.run(create_cmd(alloc, 512, p["alloc_size"]), "qemu-img create")
            t = s.run(bench_cmd(alloc, mode, n, 65536, 65536), "qemu-img bench")
            rep.add(mode, t["cpu_s"])
            if not warm:
                rows.append(
                    _write_row(
                        "allocate_sequential_64k", p["alloc_size"], 0, mode, n, 65536, r, pos, t
                    )
                )
            alloc.unlink()
            prog.step(f"writes allocate {mode}" + _round_label(r, warm))
    return rows


def _snapshots(
    ctx, s: Runner, p: dict, rng, prog, modes, reps: list
) -> tuple[list[dict], list[dict]]:
    """Overwrites after internal snapshots: every first write to a cluster copies it."""
    with ctx.phase("measured"):
        return _snapshot_rounds(ctx, s, p, rng, prog, modes, reps)


def _snapshot_rounds(ctx, s: Runner, p, rng, prog, modes, reps: list):
    rows = []
    tmpl = s.path("snap-template.qcow2")
    with ctx.phase("setup"):
        s.run(create_cmd(tmpl, 512), "qemu-img create")
        s.run(prealloc_cmd(tmpl, p["snap_size"], "none"), "qemu-img resize")
        for i in range(p["snapshots"]):
            s.run(snapshot_cmd(tmpl, f"s{i}"), "qemu-img snapshot -c")
        meta = [_meta_row(tmpl, "snapshots", mode="")]
    img = s.path("snap.qcow2")
    step = 512 * p["bench_step_clusters"]
    rep = repetition("overwrite_after_snapshots_512", modes, p, "rep_")
    reps.append(rep)
    for r, warm in _rounds(rep, prog, len(modes)):
        for pos, mode in enumerate(rotation(modes, rng)):
            with ctx.phase("setup"):
                shutil.copyfile(tmpl, img)  # every run starts from the same snapshotted state
            t = s.run(bench_cmd(img, mode, p["snap_count"], 512, step), "qemu-img bench")
            rep.add(mode, t["cpu_s"])
            if not warm:
                rows.append(
                    _write_row(
                        "overwrite_after_snapshots_512",
                        p["snap_size"],
                        p["snapshots"],
                        mode,
                        p["snap_count"],
                        512,
                        r,
                        pos,
                        t,
                    )
                )
            img.unlink()
            prog.step(f"snapshots {mode}" + _round_label(r, warm))
    tmpl.unlink()
    return rows, meta


def _formula(s: Runner, p: dict, prog) -> list[dict]:
    rows = []
    img = s.path("formula.qcow2")
    for cs, key in (
        (512, "formula_sizes_512"),
        (4096, "formula_sizes_4k"),
        (65536, "formula_sizes_64k"),
    ):
        for size in p[key]:
            s.run(create_cmd(img, cs), "qemu-img create")
            t = s.run(prealloc_cmd(img, size, "none"), "qemu-img resize")
            rows.append({**_meta_row(img, "formula", mode="none"), "prealloc_wall_s": t["wall_s"]})
            img.unlink()
            prog.step(f"metadata cs={cs} size={size >> 20} MiB")
    return rows


# ---------------------------------------------------------------- perf: where the samples land
# perf record of one qemu-img process. The Debian qemu-img is stripped of .symtab but exports
# qcow2_check_metadata_overlap in .dynsym, so perf can name it; perf_symbol_check() says whether
# it can on this host.


def perf_cells(p: dict, modes) -> list[tuple[str, str]]:
    """The (workload, mode) pairs perf records: every workload in every mode of `modes`, or with
    perf_quoted_only only the pairs the prose quotes (parse.PERF_QUOTED) among them."""
    return [
        (wl, m)
        for wl in PERF_WORKLOADS
        for m in modes
        if not p.get("perf_quoted_only") or PERF_QUOTED[wl] == m
    ]


def perf_shares(s, p: dict, rng, prog, modes) -> list[dict]:
    """Share of sampled cycles in the overlap-check functions (perf record, no call graph);
    `s` is the Runner."""
    rows = []
    img, tmpl = s.path("perf.qcow2"), s.path("perf-template.qcow2")
    step = 512 * p["bench_step_clusters"]
    for rep in range(p["perf_repeats"]):
        for wl in PERF_WORKLOADS:
            for mode in rotation([m for w, m in perf_cells(p, modes) if w == wl], rng):
                for f in (img, tmpl):
                    if f.exists():
                        f.unlink()
                if wl == "prealloc_512":
                    s.run(create_cmd(img, 512), "qemu-img create")
                    cmd = prealloc_cmd(img, p["perf_prealloc_size"], mode)
                    size = p["perf_prealloc_size"]
                elif wl == "allocate_sequential_64k":
                    s.run(create_cmd(img, 512, p["alloc_size"]), "qemu-img create")
                    n = p["alloc_size"] // 65536
                    cmd = bench_cmd(img, mode, n, 65536, 65536)
                    size = p["alloc_size"]
                else:
                    size = p["snap_size"] if "snapshots" in wl else p["bench_size"]
                    s.run(create_cmd(img, 512), "qemu-img create")
                    s.run(prealloc_cmd(img, size, "none"), "qemu-img resize")
                    if "snapshots" in wl:
                        for i in range(p["snapshots"]):
                            s.run(snapshot_cmd(img, f"s{i}"), "qemu-img snapshot -c")
                    count = p["snap_count"] if "snapshots" in wl else p["bench_count"]
                    cmd = bench_cmd(img, mode, count, 512, step)
                data = s.path("perf.data")
                # --no-bpf-event: no side-band thread, whose 1 s poll timeout perf record
                # waits out at exit (tools/perf/util/sideband_evlist.c); no sample here is BPF
                s.run(
                    [
                        "perf",
                        "record",
                        "-q",
                        "--no-bpf-event",
                        "-F",
                        "1999",
                        "-o",
                        str(data),
                        "--",
                        *cmd,
                    ],
                    "perf record",
                )
                shares, event, total = perf_report_shares(s, data)
                rows.append(
                    {
                        "workload": wl,
                        "mode": mode,
                        "image_size": size,
                        "repeat": rep,
                        "event": event,
                        "samples": total,
                        "check_pct": shares.get(OVERLAP_SYMBOLS[0], 0.0),
                        "pre_write_pct": shares.get(OVERLAP_SYMBOLS[1], 0.0),
                        "top_symbol": shares.get("_top", ""),
                    }
                )
                data.unlink()
                prog.step(f"perf {wl} {mode}")
    for f in (img, tmpl):
        if f.exists():
            f.unlink()
    return rows


def perf_report_shares(s, data: Path) -> tuple[dict, str, int]:
    """{symbol: percent of samples} for qemu-img, the event name and the sample count."""
    out = s.path("perf.txt")
    with open(out, "wb") as f:
        proc = subprocess.run(
            [
                "perf",
                "report",
                "-i",
                str(data),
                "--stdio",
                "--no-children",
                "-n",
                "--sort",
                "symbol",
                "--percent-limit",
                "0",
            ],
            stdout=f,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    if proc.returncode != 0:
        raise PerfbookError(
            f"perf report failed (exit {proc.returncode}); run perf report -i on a "
            "perf.data by hand to see why"
        )
    text = out.read_text(errors="replace")
    out.unlink()
    return parse_perf_report(text)


def perf_symbol_check(binary: str | None = None) -> dict:
    """Can perf name qcow2_check_metadata_overlap in this qemu-img? (symbols)"""
    exe = binary or shutil.which("qemu-img")
    out = {"binary": exe, "symbol": "qcow2_check_metadata_overlap", "resolvable": False}
    if not exe:
        out["reason"] = "qemu-img is not installed"
        return out
    try:
        with open(exe, "rb") as f:
            elf = ELFFile(f)
            names = set()
            for sec in (".symtab", ".dynsym"):
                tab = elf.get_section_by_name(sec)
                if tab is not None:
                    names.update(sym.name for sym in tab.iter_symbols())
            out["has_symtab"] = elf.get_section_by_name(".symtab") is not None
            out["has_debuglink"] = elf.get_section_by_name(".gnu_debuglink") is not None
    except Exception as e:  # unreadable binary: say so, measure with time only
        out["reason"] = f"cannot read {exe}: {e}"
        return out
    if "qcow2_check_metadata_overlap" in names:
        out["resolvable"] = True
        out["reason"] = ""
        return out
    debug = Path("/usr/lib/debug/.build-id")
    out["reason"] = (
        "the Debian qemu-img is stripped (no .symtab) and no debug symbols "
        "(qemu-utils-dbgsym from the debian-debug archive) are installed"
        if not out["has_symtab"]
        else "the symbol is not in the binary"
    )
    out["debug_dir_present"] = debug.is_dir()
    return out
