"""Chapter 'qcow2_overlap': the CPU cost of qcow2 metadata overlap checks.

Before QEMU's qcow2 driver writes anything (a guest data range, or an L2 table
or refcount block evicted from its cache) it asks qcow2_check_metadata_overlap()
whether the target overlaps a metadata structure. Which structures it tests is
the `overlap-check` runtime option: none, constant, cached (the default) or all.
This module times today's qemu-img binary under every mode on images
we create in a private scratch directory, and counts the metadata of real images
with our own reader (tools/qcow2.py) to test the seed's RAM formula.

Parts (each a tidy table of raw samples):
  prealloc  -- metadata preallocation (`qemu-img resize --preallocation=metadata`,
               the code path `qemu-img create -o preallocation=metadata` takes),
               per mode, cluster size and image size
  writes    -- `qemu-img bench -w`: scattered 512-byte overwrites of a
               preallocated image, and sequential 64 KiB writes that allocate
  snapshots -- the same overwrites on an image with internal snapshots, where
               mode 'all' must read every snapshot's L1 table for each check
  metadata  -- metadata clusters per kind, from the images themselves
  cycles    -- perf record: share of samples in qcow2_check_metadata_overlap (the
               Debian binary exports the symbol in .dynsym; skipped without perf)
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

from . import guard, scratch, statedir
from .dataset import DatasetWriter
from .errors import ParameterError, PerfbookError
from .lock import measure_lock
from .params import begin_collect, check_ints, is_int, merge
from .progress import Progress
from .qcow2 import Qcow2Image, formula_bytes, formula_clusters
from .stats import repetition, repetition_settings

CHAPTER = "qcow2_overlap"
TITLE = "The CPU cost of qcow2 metadata overlap checks"
SEED = "002_8365d2f6af46e24d.txt"
MODES = ("none", "constant", "cached", "all")
MiB, GiB = 1 << 20, 1 << 30

PROFILES = {
    "quick": {
        "rep_target": 0.05, "rep_min_runs": 2, "rep_max_runs": 2, "rep_budget_s": 20.0,
        "rep_warmup": 1,
        "prealloc_sizes_512": [8 * MiB, 16 * MiB], "prealloc_sizes_64k": [4 * GiB],
        "bench_size": 16 * MiB, "bench_count": 2000,
        "alloc_size": 8 * MiB,
        "snapshots": 2, "snap_size": 8 * MiB, "snap_count": 500,
        "formula_sizes_512": [16 * MiB], "formula_sizes_4k": [256 * MiB],
        "formula_sizes_64k": [16 * GiB],
        "flush_size": 4 * MiB, "perf_repeats": 1, "perf_prealloc_size": 16 * MiB,
    },
    "default": {
        "rep_target": 0.05, "rep_min_runs": 5, "rep_max_runs": 6, "rep_budget_s": 50.0,
        "rep_warmup": 1,
        "prealloc_sizes_512": [64 * MiB, 128 * MiB, 256 * MiB, 512 * MiB],
        "prealloc_sizes_64k": [256 * GiB],
        "bench_size": 256 * MiB, "bench_count": 20000,
        "alloc_size": 64 * MiB,
        "snapshots": 4, "snap_size": 64 * MiB, "snap_count": 2000,
        "formula_sizes_512": [256 * MiB, 1 * GiB, 2 * GiB],
        "formula_sizes_4k": [1 * GiB, 16 * GiB],
        "formula_sizes_64k": [64 * GiB, 1024 * GiB],
        "flush_size": 32 * MiB, "perf_repeats": 2, "perf_prealloc_size": 256 * MiB,
    },
    "full": {
        "rep_target": 0.03, "rep_min_runs": 9, "rep_max_runs": 30, "rep_budget_s": 300.0,
        "rep_warmup": 1,
        "prealloc_sizes_512": [64 * MiB, 128 * MiB, 256 * MiB, 512 * MiB, 1 * GiB, 2 * GiB],
        "prealloc_sizes_64k": [64 * GiB, 1024 * GiB, 4096 * GiB],
        "bench_size": 1 * GiB, "bench_count": 50000,
        "alloc_size": 256 * MiB,
        "snapshots": 8, "snap_size": 256 * MiB, "snap_count": 10000,
        "formula_sizes_512": [256 * MiB, 1 * GiB, 2 * GiB, 4 * GiB],
        "formula_sizes_4k": [1 * GiB, 16 * GiB, 64 * GiB],
        "formula_sizes_64k": [64 * GiB, 1024 * GiB, 4096 * GiB],
        "flush_size": 256 * MiB, "perf_repeats": 5, "perf_prealloc_size": 1 * GiB,
    },
}
# Every timed experiment (one preallocation size, the create with flushes, each write
# workload) repeats in rounds of all its modes, shuffled, adaptively (tools.stats.Repetition):
# after rep_warmup dropped rounds, until every mode's median CPU time (wall time for the
# create with flushes) has a 95 % CI narrower than rep_target (relative), or rep_budget_s
# per experiment runs out, or rep_max_runs. `repeats` fixes the number of rounds instead.
COMMON = {"modes": None, "seed": 1, "bench_step_clusters": 7919, "repeats": None}
INT_KEYS = {"bench_size": MiB, "bench_count": 1, "alloc_size": MiB,
            "snapshots": 1, "snap_size": MiB, "snap_count": 1, "seed": 0,
            "bench_step_clusters": 1, "flush_size": MiB, "perf_repeats": 0,
            "perf_prealloc_size": MiB}
LIST_KEYS = ("prealloc_sizes_512", "prealloc_sizes_64k", "formula_sizes_512",
             "formula_sizes_4k", "formula_sizes_64k")
MAX_SIZE = 64 * 1024 * GiB  # sparse files only; metadata stays small at 64 KiB clusters


def params(profile: str = "default", **overrides) -> dict:
    """Merge a profile with overrides and validate everything (ParameterError)."""
    p = merge(profile, PROFILES, COMMON, overrides)
    check_ints(p, INT_KEYS)
    if p["repeats"] is not None:
        check_ints(p, {"repeats": 1})
        p["rep_min_runs"] = p["rep_max_runs"] = p["repeats"]
    repetition_settings(p, "rep_")
    for k in ("bench_size", "alloc_size", "snap_size", "flush_size", "perf_prealloc_size"):
        if p[k] % MiB:
            raise ParameterError(f"{k} must be a multiple of 1 MiB (1048576), got {p[k]!r}")
    for k in LIST_KEYS:
        v = p[k]
        if isinstance(v, (int, str)) and not isinstance(v, bool):
            v = [v]
        if isinstance(v, (list, tuple)):
            v = [int(x) if isinstance(x, str) and x.isdigit() else x for x in v]
        if (not isinstance(v, (list, tuple)) or not v
                or not all(is_int(x) and MiB <= x <= MAX_SIZE and x % MiB == 0 for x in v)):
            raise ParameterError(f"{k} must be a non-empty list of sizes in bytes, multiples of "
                                 f"1 MiB up to {MAX_SIZE}, got {p[k]!r}")
        p[k] = sorted(set(v))
    for k in ("prealloc_sizes_512", "formula_sizes_512"):
        if max(p[k]) > 8 * GiB:
            raise ParameterError(f"{k}: images above 8 GiB at 512-byte clusters take hours to "
                                 f"preallocate; pick smaller sizes, got {max(p[k])}")
    modes = p["modes"]
    if modes is None:
        modes = list(MODES)
    elif isinstance(modes, str):
        modes = [m.strip() for m in modes.split(",") if m.strip()]
    if not isinstance(modes, (list, tuple)):
        raise ParameterError(f"modes must be a list or a comma-separated string, got {modes!r}")
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ParameterError(f"unknown overlap-check mode {', '.join(map(str, bad)) or '(empty list)'};"
                             f" choose from {', '.join(MODES)}")
    if "none" not in modes:
        modes = ["none", *modes]  # the baseline every cost is measured against
    p["modes"] = [m for m in MODES if m in modes]
    return p


def preflight() -> list[str]:
    reasons = []
    for tool in ("qemu-img",):
        if not shutil.which(tool):
            reasons.append(f"{tool} is not installed (apt-get install qemu-utils)")
    try:
        statedir.scratch_parent()
    except statedir.UnsafePath as e:
        reasons.append(f"no place for scratch images: {e}")
    return reasons


# --- scratch directory and child processes ------------------------------------------

class Scratch(scratch.Scratch):
    """A private scratch directory (tools.scratch) for images, and the children we started.

    On exit (normal, exception, or a signal that tools.guard turned into
    KeyboardInterrupt) the children are killed and waited for and the directory is
    removed.
    """

    def __init__(self, parent: Path | str | None = None, say=None):
        super().__init__(CHAPTER, parent=parent, say=say)
        self.children: set[subprocess.Popen] = set()

    def close(self) -> None:
        with guard.restoring():
            for c in list(self.children):
                _kill(c)
            self.children.clear()
        super().close()

    def run(self, cmd: list[str], what: str) -> dict:
        """Run a child to completion; its wall time and its own CPU time (wait4)."""
        err = self.dir / ".stderr"
        with open(err, "wb") as ef:
            t0 = time.perf_counter()
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=ef, start_new_session=True)
            self.children.add(proc)
            try:
                _, status, ru = os.wait4(proc.pid, 0)
            except BaseException:
                _kill(proc)
                self.children.discard(proc)
                raise
            wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        self.children.discard(proc)
        if proc.returncode != 0:
            msg = err.read_text(errors="replace").strip().splitlines()
            raise PerfbookError(f"{what} failed (exit {proc.returncode}): "
                                f"{msg[-1] if msg else 'no message'}")
        return {"wall_s": wall, "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
                "cpu_s": ru.ru_utime + ru.ru_stime, "maxrss_kib": ru.ru_maxrss}


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover
        pass


# --- qemu command lines ------------------------------------------------------------------

def image_opts(path: Path, mode: str, no_flush: bool = True) -> str:
    """The --image-opts string that selects an overlap-check mode (QEMU >= 2.x syntax)."""
    opts = ["driver=qcow2", f"overlap-check={mode}"]
    if no_flush:
        opts.append("cache.no-flush=on")
    opts.append(f"file.filename={path}")
    return ",".join(opts)


def create_cmd(path: Path, cluster_size: int, size: int = 0, prealloc: str | None = None) -> list[str]:
    o = f"cluster_size={cluster_size}" + (f",preallocation={prealloc}" if prealloc else "")
    return ["qemu-img", "create", "-q", "-f", "qcow2", "-o", o, str(path), str(size)]


def prealloc_cmd(path: Path, size: int, mode: str) -> list[str]:
    return ["qemu-img", "resize", "-q", "--preallocation=metadata", "--image-opts",
            image_opts(path, mode), str(size)]


def bench_cmd(path: Path, mode: str, count: int, buf: int, step: int) -> list[str]:
    return ["qemu-img", "bench", "-q", "-w", "-c", str(count), "-s", str(buf), "-S", str(step),
            "-t", "writeback", "--image-opts", image_opts(path, mode, no_flush=True)]


def _rotations(modes: list[str], rep: int, rng: random.Random) -> list[str]:
    order = list(modes)
    rng.shuffle(order)
    return order


# --- collect -----------------------------------------------------------------------------

def collect(data_dir=None, profile: str = "default", **overrides) -> Path:
    """Measure this host; returns the new dataset's directory."""
    import pandas as pd
    p, data = begin_collect(params, preflight, profile, overrides, data_dir)
    rng = random.Random(p["seed"])
    modes = p["modes"]
    RW = p["rep_min_runs"] + p["rep_warmup"]  # rounds at least; adaptive repetition may add more
    n_prealloc = ((len(p["prealloc_sizes_512"]) + len(p["prealloc_sizes_64k"])) * len(modes) + 1) * RW
    n_bench = 2 * len(modes) * RW
    snap_modes = [m for m in modes if m in ("none", "cached", "all")]
    n_snap = len(snap_modes) * RW
    n_formula = sum(len(p[k]) for k in ("formula_sizes_512", "formula_sizes_4k", "formula_sizes_64k"))
    perf_modes = [m for m in modes if m in ("cached", "all")]
    n_perf = len(PERF_WORKLOADS) * len(perf_modes) * p["perf_repeats"]
    prog = Progress(CHAPTER, n_prealloc + n_bench + n_snap + n_formula + n_perf)

    with guard.interruptible(), measure_lock(CHAPTER), \
            DatasetWriter(CHAPTER, data, {**p, "profile": profile}) as w, Scratch() as s:
        w.extra["_tool_cmds"] = {"qemu-img": ["qemu-img", "--version"],
                                 "qemu-io": ["qemu-io", "--version"]}
        w.extra["scratch"] = {"parent": str(s.dir.parent), "filesystem": _fstype(str(s.dir.parent)),
                              "flushes": "disabled (cache.no-flush=on) in every timed run"}
        w.extra["perf_symbols"] = perf_symbol_check()
        if not w.extra["perf_symbols"]["resolvable"]:
            w.skip("cycles_share", "perf cannot attribute cycles to qcow2_check_metadata_overlap: "
                   + w.extra["perf_symbols"]["reason"])
        for m in MODES:
            if m not in modes:
                w.skip(f"mode_{m}", "left out by the modes parameter")

        reps: list = []
        prealloc, meta = _prealloc(s, p, rng, prog, reps)
        writes = _writes(s, p, rng, prog, reps)
        snaps, snap_meta = _snapshots(s, p, rng, prog, snap_modes, reps)
        formula = _formula(s, p, prog)
        cycles = []
        if p["perf_repeats"] and not shutil.which("perf"):
            w.skip("cycles_share", "perf is not installed (apt-get install linux-perf)")
        elif p["perf_repeats"] and w.extra["perf_symbols"]["resolvable"] and perf_modes:
            cycles = _perf_shares(s, p, rng, prog, perf_modes)
        if cycles:
            w.add_table("cycles", pd.DataFrame(cycles))
        w.add_table("prealloc", pd.DataFrame(prealloc))
        w.add_table("repetition", pd.DataFrame([r for rep in reps for r in rep.records()]))
        w.add_table("writes", pd.DataFrame(writes + snaps))
        w.add_table("metadata", pd.DataFrame(meta + snap_meta + formula))
        leftovers = [x.name for x in s.dir.iterdir() if not x.name.startswith(".") and x.name != "owner"]
        if leftovers:
            w.notes.append(f"scratch files still present before cleanup: {leftovers}")
    return w.published


def _fstype(path: str) -> str | None:
    best, fs = "", None
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            dev, mnt, typ = line.split()[:3]
            if path.startswith(mnt) and len(mnt) > len(best):
                best, fs = mnt, typ
    except OSError:
        return None
    return fs


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


def _prealloc(s: Scratch, p: dict, rng, prog, reps: list) -> tuple[list[dict], list[dict]]:
    rows, meta = [], []
    cases = [(512, z) for z in p["prealloc_sizes_512"]] + [(65536, z) for z in p["prealloc_sizes_64k"]]
    img = s.path("prealloc.qcow2")
    for cs, size in cases:
        rep = repetition(f"prealloc cs={cs} size={size >> 20} MiB", p["modes"], p, "rep_")
        reps.append(rep)
        for r, warm in _rounds(rep, prog, len(p["modes"])):
            for pos, mode in enumerate(_rotations(p["modes"], r, rng)):
                if img.exists():
                    img.unlink()
                s.run(create_cmd(img, cs), "qemu-img create")
                t = s.run(prealloc_cmd(img, size, mode), "qemu-img resize --preallocation=metadata")
                rep.add(mode, t["cpu_s"])
                if not warm:
                    rows.append({"command": "resize_no_flush", "cluster_size": cs,
                                 "image_size": size, "mode": mode,
                                 "repeat": r, "position": pos, **t})
                    if r == 0:
                        meta.append(_meta_row(img, "prealloc", mode=mode))
                img.unlink()
                prog.step(f"prealloc cs={cs} size={size >> 20} MiB {mode}"
                          + (" (warm-up)" if warm else f" round {r + 1}"))
    # the real command, flushes included (qemu-img create offers no overlap-check option:
    # it opens the new image with the default, cached); its wall time is what it is about
    rep = repetition("create_with_flushes (wall time)", ["cached"], p, "rep_")
    reps.append(rep)
    for r, warm in _rounds(rep, prog, 1):
        t = s.run(create_cmd(img, 512, p["flush_size"], "metadata"),
                  "qemu-img create -o preallocation=metadata")
        img.unlink()
        rep.add("cached", t["wall_s"])
        if not warm:
            rows.append({"command": "create_with_flushes", "cluster_size": 512,
                         "image_size": p["flush_size"], "mode": "cached",
                         "repeat": r, "position": 0, **t})
        prog.step("qemu-img create with flushes" + (" (warm-up)" if warm else f" round {r + 1}"))
    return rows, meta


def _writes(s: Scratch, p: dict, rng, prog, reps: list) -> list[dict]:
    rows = []
    # scattered 512-byte overwrites of a metadata-preallocated 512-byte-cluster image
    over = s.path("overwrite.qcow2")
    s.run(create_cmd(over, 512), "qemu-img create")
    s.run(prealloc_cmd(over, p["bench_size"], "none"), "qemu-img resize")
    step = 512 * p["bench_step_clusters"]
    rep = repetition("overwrite_scattered_512", p["modes"], p, "rep_")
    reps.append(rep)
    for r, warm in _rounds(rep, prog, len(p["modes"])):
        for pos, mode in enumerate(_rotations(p["modes"], r, rng)):
            t = s.run(bench_cmd(over, mode, p["bench_count"], 512, step), "qemu-img bench")
            rep.add(mode, t["cpu_s"])
            if not warm:
                rows.append({"workload": "overwrite_scattered_512", "cluster_size": 512,
                             "image_size": p["bench_size"], "snapshots": 0, "mode": mode,
                             "requests": p["bench_count"], "request_bytes": 512,
                             "repeat": r, "position": pos, **t})
            prog.step(f"writes overwrite {mode}" + (" (warm-up)" if warm else f" round {r + 1}"))
    over.unlink()
    # sequential 64 KiB writes that allocate every cluster of an empty image
    alloc = s.path("alloc.qcow2")
    n = p["alloc_size"] // 65536
    rep = repetition("allocate_sequential_64k", p["modes"], p, "rep_")
    reps.append(rep)
    for r, warm in _rounds(rep, prog, len(p["modes"])):
        for pos, mode in enumerate(_rotations(p["modes"], r, rng)):
            if alloc.exists():
                alloc.unlink()
            s.run(create_cmd(alloc, 512, p["alloc_size"]), "qemu-img create")
            t = s.run(bench_cmd(alloc, mode, n, 65536, 65536), "qemu-img bench")
            rep.add(mode, t["cpu_s"])
            if not warm:
                rows.append({"workload": "allocate_sequential_64k", "cluster_size": 512,
                             "image_size": p["alloc_size"], "snapshots": 0, "mode": mode,
                             "requests": n, "request_bytes": 65536,
                             "repeat": r, "position": pos, **t})
            alloc.unlink()
            prog.step(f"writes allocate {mode}" + (" (warm-up)" if warm else f" round {r + 1}"))
    return rows


def _snapshots(s: Scratch, p: dict, rng, prog, modes, reps: list) -> tuple[list[dict], list[dict]]:
    """Overwrites after internal snapshots: every first write to a cluster copies it."""
    rows = []
    tmpl = s.path("snap-template.qcow2")
    s.run(create_cmd(tmpl, 512), "qemu-img create")
    s.run(prealloc_cmd(tmpl, p["snap_size"], "none"), "qemu-img resize")
    for i in range(p["snapshots"]):
        s.run(["qemu-img", "snapshot", "-c", f"s{i}", str(tmpl)], "qemu-img snapshot -c")
    meta = [_meta_row(tmpl, "snapshots", mode="")]
    img = s.path("snap.qcow2")
    step = 512 * p["bench_step_clusters"]
    rep = repetition("overwrite_after_snapshots_512", modes, p, "rep_")
    reps.append(rep)
    for r, warm in _rounds(rep, prog, len(modes)):
        for pos, mode in enumerate(_rotations(modes, r, rng)):
            shutil.copyfile(tmpl, img)  # every run starts from the same snapshotted state
            t = s.run(bench_cmd(img, mode, p["snap_count"], 512, step), "qemu-img bench")
            rep.add(mode, t["cpu_s"])
            if not warm:
                rows.append({"workload": "overwrite_after_snapshots_512", "cluster_size": 512,
                             "image_size": p["snap_size"], "snapshots": p["snapshots"],
                             "mode": mode, "requests": p["snap_count"], "request_bytes": 512,
                             "repeat": r, "position": pos, **t})
            img.unlink()
            prog.step(f"snapshots {mode}" + (" (warm-up)" if warm else f" round {r + 1}"))
    tmpl.unlink()
    return rows, meta


def _formula(s: Scratch, p: dict, prog) -> list[dict]:
    rows = []
    img = s.path("formula.qcow2")
    for cs, key in ((512, "formula_sizes_512"), (4096, "formula_sizes_4k"),
                    (65536, "formula_sizes_64k")):
        for size in p[key]:
            s.run(create_cmd(img, cs), "qemu-img create")
            t = s.run(prealloc_cmd(img, size, "none"), "qemu-img resize")
            rows.append({**_meta_row(img, "formula", mode="none"), "prealloc_wall_s": t["wall_s"]})
            img.unlink()
            prog.step(f"metadata cs={cs} size={size >> 20} MiB")
    return rows


PERF_WORKLOADS = ("prealloc_512", "allocate_sequential_64k", "overwrite_scattered_512",
                  "overwrite_after_snapshots_512")
OVERLAP_SYMBOLS = ("qcow2_check_metadata_overlap", "qcow2_pre_write_overlap_check")


def _perf_shares(s: Scratch, p: dict, rng, prog, modes) -> list[dict]:
    """Share of sampled cycles in the overlap-check functions (perf record, no call graph)."""
    rows = []
    img, tmpl = s.path("perf.qcow2"), s.path("perf-template.qcow2")
    step = 512 * p["bench_step_clusters"]
    for rep in range(p["perf_repeats"]):
        for wl in PERF_WORKLOADS:
            for mode in _rotations(modes, rep, rng):
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
                            s.run(["qemu-img", "snapshot", "-c", f"s{i}", str(img)],
                                  "qemu-img snapshot -c")
                    count = p["snap_count"] if "snapshots" in wl else p["bench_count"]
                    cmd = bench_cmd(img, mode, count, 512, step)
                data = s.path("perf.data")
                s.run(["perf", "record", "-q", "-F", "1999", "-o", str(data), "--", *cmd],
                      "perf record")
                shares, event, total = perf_report_shares(s, data)
                rows.append({"workload": wl, "mode": mode, "image_size": size, "repeat": rep,
                             "event": event, "samples": total,
                             "check_pct": shares.get(OVERLAP_SYMBOLS[0], 0.0),
                             "pre_write_pct": shares.get(OVERLAP_SYMBOLS[1], 0.0),
                             "top_symbol": shares.get("_top", "")})
                data.unlink()
                prog.step(f"perf {wl} {mode}")
    for f in (img, tmpl):
        if f.exists():
            f.unlink()
    return rows


def perf_report_shares(s: Scratch, data: Path) -> tuple[dict, str, int]:
    """{symbol: percent of samples} for qemu-img, the event name and the sample count."""
    out = s.path("perf.txt")
    with open(out, "wb") as f:
        proc = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--no-children", "-n",
                               "--sort", "symbol", "--percent-limit", "0"],
                              stdout=f, stderr=subprocess.DEVNULL, start_new_session=True)
    if proc.returncode != 0:
        raise PerfbookError(f"perf report failed (exit {proc.returncode}); run perf report -i on a "
                            "perf.data by hand to see why")
    return parse_perf_report(out.read_text(errors="replace"))


def parse_perf_report(text: str) -> tuple[dict, str, int]:
    import re
    shares, event, total, top, counted = {}, "", 0, None, 0
    for line in text.splitlines():
        m = re.match(r"#\s*Samples:\s*([\d.]+)([KM]?)\s+of event '([^']+)'", line)
        if m:
            mult = {"": 1, "K": 1000, "M": 1000000}[m.group(2)]
            total, event = int(float(m.group(1)) * mult), m.group(3)
            continue
        m = re.match(r"\s*([\d.]+)%\s+(?:(\d+)\s+)?\[[.k]\]\s+(\S+)", line)
        if m:
            pct, sym = float(m.group(1)), m.group(3)
            counted += int(m.group(2) or 0)
            shares[sym] = shares.get(sym, 0.0) + pct
            if top is None:
                top = sym
    shares["_top"] = top or ""
    # the header rounds large counts ("2K"); with -n the per-symbol counts add up exactly
    return shares, event, counted or total


def perf_symbol_check(binary: str | None = None) -> dict:
    """Can perf name qcow2_check_metadata_overlap in this qemu-img? (symbols)"""
    exe = binary or shutil.which("qemu-img")
    out = {"binary": exe, "symbol": "qcow2_check_metadata_overlap", "resolvable": False}
    if not exe:
        out["reason"] = "qemu-img is not installed"
        return out
    try:
        from elftools.elf.elffile import ELFFile
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
    out["reason"] = ("the Debian qemu-img is stripped (no .symtab) and no debug symbols "
                     "(qemu-utils-dbgsym from the debian-debug archive) are installed"
                     if not out["has_symtab"] else "the symbol is not in the binary")
    out["debug_dir_present"] = debug.is_dir()
    return out


# --- analysis (the notebook calls these) -------------------------------------------------

def load(data_dir=None) -> dict:
    from .dataset import load_manifests, load_reference, load_table
    return {
        "repetition": load_table(CHAPTER, "repetition", data_dir),
        "prealloc": load_table(CHAPTER, "prealloc", data_dir),
        "writes": load_table(CHAPTER, "writes", data_dir),
        "metadata": load_table(CHAPTER, "metadata", data_dir),
        "cycles": load_table(CHAPTER, "cycles", data_dir),
        "manifests": load_manifests(CHAPTER, data_dir),
        "reference": load_reference(CHAPTER, data_dir),
    }


def latest(manifests: list[dict]) -> dict | None:
    """The dataset the prose talks about: of those that measured every mode, the newest
    default/full run (a quick run is a test; tools.dataset.newest); else of all."""
    from .dataset import newest
    if not manifests:
        return None
    full = [m for m in manifests if set(MODES) <= set(m["parameters"].get("modes") or [])]
    return newest(full or manifests)


def shown(df, manifests: list[dict]):
    """One dataset per host, side by side: the prose's dataset for its host, the newest
    dataset for each other host."""
    from .dataset import only_shown
    return only_shown(df, manifests, latest(manifests))


def host_comparison(d: dict):
    """Each other host's CPU time per run against the prose's dataset, case by case where
    both measured the same case (tools.stats.compare_frame; identical sizes and modes)."""
    import pandas as pd
    from .stats import compare_frame
    ms = d["manifests"]
    if len({m["host"]["host_id"] for m in ms}) < 2:
        return pd.DataFrame()
    base = latest(ms)["host"]["host_id"]
    pre = shown(d["prealloc"], ms)
    pre = pre[pre.command == "resize_no_flush"].assign(
        case=lambda t: "prealloc cs=" + t.cluster_size.astype(str) + " " + (t.image_size // MiB).astype(str) + " MiB")
    wr = shown(d["writes"], ms).assign(
        case=lambda t: t.workload + " " + (t.image_size // MiB).astype(str) + " MiB x" + t.requests.astype(str))
    both = pd.concat([pre[["host_id", "case", "mode", "cpu_s"]], wr[["host_id", "case", "mode", "cpu_s"]]])
    return compare_frame(both, by="host_id", value="cpu_s", baseline=base, within=["case", "mode"])


def caption_for(df, manifests: list[dict], what: str, by: list[str], ci: bool = True,
                extra: str = "") -> str:
    """Caption from the runs shown: runs per group, warm-up rounds excluded, hosts."""
    from .stats import caption, hosts_of
    runs = set(zip(df["host_id"], df["run_id"]))
    ms = [m for m in manifests if (m["host"]["host_id"], m["run_id"]) in runs]
    # warm-up rounds: rep_warmup now, warmup in the datasets of fixed repetition
    wu = [m["parameters"].get("rep_warmup", m["parameters"].get("warmup", 0)) for m in ms] or [0]
    return caption(what, n=df.groupby(by).size().to_numpy(), unit="runs", warmup=wu,
                   hosts=hosts_of(ms), ci=ci, extra=extra)


def summary(df, by: list[str]):
    """Median + CI etc. of wall and CPU time per group (tidy, one row per metric)."""
    import pandas as pd
    from .stats import summarize_frame
    out = []
    for metric in ("wall_s", "cpu_s", "user_s"):
        s = summarize_frame(df, by, metric)
        s.insert(len(by), "metric", metric)
        out.append(s)
    return pd.concat(out, ignore_index=True)


def overhead(df, by: list[str], metric: str = "cpu_s"):
    """Extra seconds of each mode over 'none' in the same group, from the raw runs.

    tools.stats.compare of the mode's runs against the 'none' runs: `extra` is the
    Hodges-Lehmann shift with its distribution-free interval (extra_ci_low/high; nominal
    95 %, real coverage from n and n_none: shift_ci_label),
    `p_value` the Mann-Whitney test's, `verdict` says "not significant" where it is not.
    """
    import numpy as np
    import pandas as pd
    from .stats import compare
    rows = []
    keys = [k for k in by if k != "mode"]
    for key, g in df.groupby(keys):
        key = key if isinstance(key, tuple) else (key,)
        base = g.loc[g["mode"] == "none", metric].to_numpy(float)
        if len(base) < 2:
            continue
        for mode in [m for m in MODES if m in set(g["mode"])]:
            x = g.loc[g["mode"] == mode, metric].to_numpy(float)
            if len(x) < 2:
                continue
            c = compare(x, base, names=(mode, "none"))
            med = float(np.median(x))
            rows.append({**dict(zip(keys, key)), "mode": mode, "median": med,
                         "none_median": c.median_b, "extra": c.shift, "extra_ci_low": c.shift_low,
                         "extra_ci_high": c.shift_high, "n": len(x), "n_none": len(base),
                         "p_value": c.p_value,
                         "cliffs_delta": c.cliffs_delta, "significant": c.significant,
                         "verdict": c.verdict, "share_pct": 100 * c.shift / med if med else np.nan})
    return pd.DataFrame(rows)


def shift_ci_label(ov) -> str:
    """The real coverage of overhead()'s Hodges-Lehmann intervals in `ov`, e.g.
    '90–95.88 % CI' (tools.stats.hl_ci_label over the rows' (n, n_none))."""
    from .stats import hl_ci_label
    if "n_none" not in ov.columns or ov.empty:
        return "CI of unknown coverage"
    return hl_ci_label(list(zip(ov["n"].astype(int), ov["n_none"].astype(int))))


def prealloc_bars_text(ov_cpu) -> str:
    """Caption sentence for plot_prealloc's bars, with the coverage of the plotted rows."""
    g = ov_cpu[(ov_cpu.cluster_size == 512) & ov_cpu["mode"].isin(["cached", "all"])]
    return ("Bars: Hodges-Lehmann interval of the shift against none (distribution-free), "
            f"{shift_ci_label(g)}")


def fit_quadratic(ov, mode: str = "cached"):
    """Fit extra CPU = a * size^2 (cluster size 512) and return a; the check is O(size) per
    write and the number of writes is O(size), so the total should grow with size^2."""
    import numpy as np
    g = ov[(ov["mode"] == mode) & (ov.cluster_size == 512)]
    x = g.image_size.to_numpy(float)
    y = g.extra.to_numpy(float)
    if len(x) == 0:
        return float("nan"), float("nan")
    a = float(np.sum(x ** 2 * y) / np.sum(x ** 4))
    # log-log slope as a check on the exponent
    ok = y > 0
    slope = float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0]) if ok.sum() >= 2 else float("nan")
    return a, slope


def formula_table(meta):
    """Measured metadata against the seed's 10 * IS / CS^2 (and 40 * IS / CS^2 bytes)."""
    import pandas as pd
    f = meta[meta.experiment.isin(["formula", "snapshots"])].copy()
    f = f.drop_duplicates(["host_id", "experiment", "cluster_size", "virtual_size", "nb_snapshots"],
                          keep="last")
    rows = []
    for r in f.itertuples():
        rows.append({
            "host_id": r.host_id, "cluster_size": r.cluster_size,
            "virtual_size_mib": r.virtual_size / MiB, "snapshots": r.nb_snapshots,
            "l2_tables": r.n_active_l2 + r.n_inactive_l2, "refcount_blocks": r.n_refcount_block,
            "measured_clusters": r.n_formula_scope,
            "formula_virtual": formula_clusters(r.virtual_size, r.cluster_size),
            "formula_file": formula_clusters(r.file_size, r.cluster_size),
            "formula_disk": formula_clusters(r.disk_usage, r.cluster_size),
            "measured_list_kib": 4 * r.n_formula_scope / 1024,
            "runs_list_kib": 4 * r.formula_scope_runs / 1024,
            "formula_virtual_kib": formula_bytes(r.virtual_size, r.cluster_size) / 1024,
            "formula_disk_kib": formula_bytes(r.disk_usage, r.cluster_size) / 1024,
            "disk_usage_mib": r.disk_usage / MiB, "file_size_mib": r.file_size / MiB,
        })
    return pd.DataFrame(rows).sort_values(["cluster_size", "virtual_size_mib", "snapshots"])


def host_labels(manifests: list[dict]) -> dict[str, str]:
    out = {}
    for m in sorted(manifests, key=lambda m: m["run_id"]):
        h = m["host"]
        q = (m.get("tools") or {}).get("qemu-img") or "qemu-img ?"
        out[h["host_id"]] = f"{h['host_id']}: {h['description']}, {q.split('(')[0].strip()}"
    return out


def plot_prealloc(ov_cpu, ref, fit_host=None):
    """Extra CPU seconds of each mode over 'none' versus image size (512-byte clusters),
    per host if `ov_cpu` has a host_id column; the quadratic fit is `fit_host`'s."""
    import matplotlib.pyplot as plt
    # constant scatters around zero (see the table); a log axis can only show the two
    # modes whose cost is real
    g = ov_cpu[(ov_cpu.cluster_size == 512) & ov_cpu["mode"].isin(["cached", "all"])]
    if "host_id" not in g.columns:
        g = g.assign(host_id="this host")
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for (host, mode), d in g.groupby(["host_id", "mode"]):
        d = d.sort_values("image_size")
        x = d.image_size / MiB
        # the HL interval need not contain the point estimate's sign; clip the bars at zero
        ax.errorbar(x, d.extra, yerr=[(d.extra - d.extra_ci_low).clip(lower=0),
                                      (d.extra_ci_high - d.extra).clip(lower=0)],
                    fmt="o-", capsize=3, label=f"overlap-check={mode} ({host})")
    r = ref[ref.experiment == "create_prealloc_metadata_512"]
    fit = ov_cpu if fit_host is None or "host_id" not in ov_cpu else ov_cpu[ov_cpu.host_id == fit_host]
    a, _ = fit_quadratic(fit)
    if len(r) and a == a and a > 0:
        import numpy as np
        xs = np.geomspace(g.image_size.min(), r.image_size_mib.iloc[0] * MiB, 50)
        ax.plot(xs / MiB, a * xs ** 2, ls="--", color="grey", lw=1,
                label="cached: fit extra = a · size², extrapolated")
    if len(r):
        before = r[r.variant == "before_series"].user_s.iloc[0]
        after = r[r.variant == "after_series"].user_s.iloc[0]
        ax.scatter([r.image_size_mib.iloc[0]], [before - after], marker="*", s=180, color="black",
                   label="seed 2014: user time saved by the series", zorder=5)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("virtual image size, MiB (cluster size 512 B)")
    ax.set_ylabel("extra CPU s over overlap-check=none")
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def plot_modes(summ, workload_col: str = "workload"):
    """Median CPU time per mode and workload with its CI; one row of panels per host."""
    import seaborn as sns
    d = summ[summ.metric == "cpu_s"].copy()
    if "host_id" not in d.columns:
        d["host_id"] = "this host"
    order = [m for m in MODES if m in set(d["mode"])]
    g = sns.catplot(data=d, kind="bar", x="mode", y="median", col=workload_col, row="host_id",
                    sharey=False, order=order, height=3.4, aspect=0.9, color="steelblue",
                    col_order=sorted(set(d[workload_col])), row_order=sorted(set(d.host_id)))
    for (host, wl), ax in g.axes_dict.items():
        sub = d[(d.host_id == host) & (d[workload_col] == wl)]
        sub = sub.set_index("mode").reindex(order)
        ax.errorbar(range(len(sub)), sub["median"],
                    yerr=[sub["median"] - sub.ci_low, sub.ci_high - sub["median"]],
                    fmt="none", color="black", capsize=3)
    g.set_titles("{row_name}\n{col_name}", size="small")
    for ax in g.axes.flat:
        ax.tick_params(axis="x", labelrotation=30)
    from .stats import ci_label
    g.set_axis_labels("overlap-check", f"CPU s per run (median, {ci_label(d['n'])})")
    return g


def plot_formula(ft):
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for cs, d in ft.groupby("cluster_size"):
        ax.scatter(d.formula_virtual, d.measured_clusters, label=f"{cs} B clusters", s=40)
    lo = max(1.0, min(ft.formula_virtual.min(), ft.measured_clusters.min()) / 2)
    hi = max(ft.formula_virtual.max(), ft.measured_clusters.max()) * 2
    ax.plot([lo, hi], [lo, hi], color="grey", lw=1, ls="--", label="measured = formula")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("formula 10 · IS / CS² with IS = virtual size (clusters)")
    ax.set_ylabel("measured L2 tables + refcount blocks")
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


# --- numbers the chapter's prose quotes (every one computed from the data) -----------------

def this_run(df, manifest):
    """Rows of one dataset (the newest one: the prose talks about it)."""
    if df is None or df.empty or manifest is None:
        return df
    return df[(df.host_id == manifest["host"]["host_id"]) & (df.run_id == manifest["run_id"])]


# Decimals the chapter shows of each float headline() returns (its {glue:text}`k:.Nf`
# references and comparison_table()); headline() rounds to them at the source, so that
# the glued text/plain repr is what the page shows and does not differ in its 16th digit
# between numpy/BLAS builds (nbval compares it). Floats not listed: GLUE_DEFAULT_DIGITS.
GLUE_DIGITS = {
    "pre_big_cached_cpu": 2, "pre_big_none_cpu": 2, "pre_big_extra": 2, "pre_big_extra_lo": 2,
    "pre_big_extra_hi": 2, "pre_big_share": 0, "pre_slope": 1, "pre_prev_extra": 2,
    "pre_size_step": 0, "pre_size_sq": 0, "pre_growth": 1, "pre_extrap_2g": 1,
    "seed_user_saved": 1, "seed_create_before": 1, "seed_create_after": 1, "k64_extra_ms": 0,
    "flush_wall": 2, "flush_cpu": 2,
    "ow_cached_us": 1, "ow_cached_share": 0, "ow_cached_lo_us": 1, "ow_cached_hi_us": 1,
    "al_cached_us": 1, "al_cached_share": 1, "al_cached_lo_us": 0, "al_cached_hi_us": 0,
    "sn_cached_us": 1, "sn_cached_lo_us": 0, "sn_cached_hi_us": 0,
    "sn_all_us": 0, "sn_all_share": 0, "sn_all_lo_us": 0, "sn_all_hi_us": 0,
    "seed_random_factor": 0, "formula_ratio_min": 3, "formula_ratio_max": 3,
    "f2_list_kib": 0, "f2_runs_kib": 0, "f2_disk_mib": 0, "f2_formula_disk_kib": 0,
    "seed_list_kib": 0, "seed_formula_kib": 0, "seed_disk_mib": 0,
    "perf_pre_cached": 2, "perf_ow_cached": 2, "perf_al_cached": 2, "perf_sn_all": 1,
    "perf_size_ratio": 0, "perf_pre_pred_2g": 0,
    "seed_pct_create": 2, "seed_pct_dd": 2, "seed_pct_random": 2,
    "run_minutes": 1, "seed_create_gib": 0, "l2_cov_kib": 0,
}
GLUE_DEFAULT_DIGITS = 3


def headline(d: dict) -> dict:
    """The figures the text quotes, from the newest dataset and the seed's table.

    pre_big_mib is the largest 512-byte-cluster size overhead() compared (>= 2 runs of
    'cached' and of 'none'); pre_max_mib the largest measured, pre_big_note a sentence
    when they differ. Floats are rounded to the decimals shown (GLUE_DIGITS).
    """
    import numpy as np
    m = latest(d["manifests"])
    ref = d["reference"]
    out: dict = {}
    pre = this_run(d["prealloc"], m)
    rs = pre[pre.command == "resize_no_flush"]
    by = ["cluster_size", "image_size", "mode"]
    ov = overhead(rs, by)
    # the largest 512-byte-cluster size overhead() kept: a size whose group stopped on its
    # time budget with one run has no comparison (pre_max_mib says what was measured)
    kept = ov[(ov.cluster_size == 512) & (ov["mode"] == "cached")]
    if kept.empty:
        raise ValueError("no 512-byte-cluster size has >= 2 runs of 'cached' and 'none'; "
                         "nothing to quote")
    big = int(kept.image_size.max())
    row = kept[kept.image_size == big].iloc[0]
    out["pre_big_mib"] = big // MiB
    out["pre_max_mib"] = int(rs[rs.cluster_size == 512].image_size.max()) // MiB
    out["pre_big_note"] = ("" if out["pre_max_mib"] == out["pre_big_mib"] else
                           f"the {out['pre_max_mib']} MiB case has fewer than 2 runs per mode, "
                           f"so the largest compared size is {out['pre_big_mib']} MiB")
    out["pre_big_cached_cpu"] = row["median"]
    out["pre_big_none_cpu"] = row.none_median
    out["pre_big_extra"] = row.extra
    out["pre_big_extra_lo"], out["pre_big_extra_hi"] = row.extra_ci_low, row.extra_ci_high
    out["pre_big_share"] = row.share_pct
    out["pre_n"] = int(row.n)
    a, slope = fit_quadratic(ov)
    out["pre_slope"] = slope
    c512 = ov[(ov.cluster_size == 512) & (ov["mode"] == "cached")].sort_values("image_size")
    if len(c512) >= 2:
        last, prev = c512.iloc[-1], c512.iloc[-2]
        out["pre_prev_mib"] = int(prev.image_size) // MiB
        out["pre_prev_extra"] = prev.extra
        out["pre_size_step"] = last.image_size / prev.image_size
        out["pre_size_sq"] = out["pre_size_step"] ** 2
        out["pre_growth"] = last.extra / prev.extra if prev.extra > 0 else float("nan")
    seed_size = int(ref[ref.experiment == "create_prealloc_metadata_512"].image_size_mib.iloc[0]) * MiB
    out["pre_extrap_2g"] = a * seed_size ** 2
    r = ref[(ref.experiment == "create_prealloc_metadata_512") & (ref.metric == "wall_s")]
    before = r[r.variant == "before_series"].iloc[0]
    after = r[r.variant == "after_series"].iloc[0]
    out["seed_user_saved"] = before.user_s - after.user_s
    out["seed_create_before"], out["seed_create_after"] = before.value, after.value
    k64 = ov[(ov.cluster_size == 65536) & (ov["mode"] == "cached")]
    out["k64_size_gib"] = int(k64.image_size.max()) // GiB
    out["k64_extra_ms"] = 1000 * k64.sort_values("image_size").extra.iloc[-1]
    cf = pre[pre.command == "create_with_flushes"]
    out["flush_size_mib"] = int(cf.image_size.iloc[0]) // MiB if len(cf) else 0
    out["flush_wall"] = float(cf.wall_s.median()) if len(cf) else float("nan")
    out["flush_cpu"] = float(cf.cpu_s.median()) if len(cf) else float("nan")
    # writes
    wr = this_run(d["writes"], m)
    byw = ["workload", "mode"]
    ovw = overhead(wr, byw)
    for wl, key in (("overwrite_scattered_512", "ow"), ("allocate_sequential_64k", "al"),
                    ("overwrite_after_snapshots_512", "sn")):
        g = ovw[ovw.workload == wl].set_index("mode")
        nreq = int(wr[wr.workload == wl].requests.iloc[0])
        for mode in ("cached", "all"):
            if mode in g.index:
                out[f"{key}_{mode}_us"] = 1e6 * g.loc[mode, "extra"] / nreq
                out[f"{key}_{mode}_share"] = g.loc[mode, "share_pct"]
                out[f"{key}_{mode}_lo_us"] = 1e6 * g.loc[mode, "extra_ci_low"] / nreq
                out[f"{key}_{mode}_hi_us"] = 1e6 * g.loc[mode, "extra_ci_high"] / nreq
        out[f"{key}_requests"] = nreq
        out[f"{key}_n"] = int(g.n.min())
    out["ow_size_mib"] = int(wr[wr.workload == "overwrite_scattered_512"].image_size.iloc[0]) // MiB
    seed_rand = ref[ref.experiment == "guest_random_512_odirect"].image_size_mib.iloc[0]
    out["seed_random_factor"] = float(seed_rand) / out["ow_size_mib"]
    out["sn_snapshots"] = int(wr[wr.workload == "overwrite_after_snapshots_512"].snapshots.iloc[0])
    # metadata: the seed's 2 GiB image at 512-byte clusters, if measured
    ft = formula_table(this_run(d["metadata"], m))
    ratio = ft.measured_clusters / ft.formula_virtual
    out["formula_ratio_min"], out["formula_ratio_max"] = float(ratio.min()), float(ratio.max())
    s2 = ft[(ft.cluster_size == 512) & (ft.snapshots == 0)].sort_values("virtual_size_mib").iloc[-1]
    out["f2_size_mib"] = int(s2.virtual_size_mib)
    out["f2_clusters"] = int(s2.measured_clusters)
    out["f2_list_kib"] = s2.measured_list_kib
    out["f2_runs_kib"] = s2.runs_list_kib
    out["f2_disk_mib"] = s2.disk_usage_mib
    out["f2_formula_disk_kib"] = s2.formula_disk_kib
    out["f2_formula_virtual_kib"] = s2.formula_virtual_kib
    rl = ref[ref.experiment == "ram_formula"]
    out["seed_list_kib"] = float(rl[rl.variant == "measured_list"].value.iloc[0])
    out["seed_formula_kib"] = float(rl[rl.variant == "formula_disk_size"].value.iloc[0])
    out["seed_disk_mib"] = float(rl[rl.variant == "formula_disk_size"].image_size_mib.iloc[0])
    # perf
    cy = this_run(d.get("cycles"), m)
    if cy is not None and len(cy):
        g = cy.groupby(["workload", "mode"]).check_pct.median()
        out["perf_event"] = str(cy.event.iloc[0])
        out["perf_pre_cached"] = float(g.get(("prealloc_512", "cached"), np.nan))
        out["perf_ow_cached"] = float(g.get(("overwrite_scattered_512", "cached"), np.nan))
        out["perf_al_cached"] = float(g.get(("allocate_sequential_64k", "cached"), np.nan))
        out["perf_sn_all"] = float(g.get(("overwrite_after_snapshots_512", "all"), np.nan))
        out["perf_n"] = int(cy.groupby(["workload", "mode"]).size().min())
        out["perf_pre_size_mib"] = int(cy[cy.workload == "prealloc_512"].image_size.iloc[0]) // MiB
        out["perf_size_ratio"] = seed_size / MiB / out["perf_pre_size_mib"]
        out["perf_work_ratio"] = out["perf_size_ratio"] ** 2
        # if the check's work grows with size^2 and the rest with size, its share at the
        # seed's size follows from ours: odds scale with the size ratio
        odds = out["perf_pre_cached"] / (100 - out["perf_pre_cached"]) * out["perf_size_ratio"]
        out["perf_pre_pred_2g"] = 100 * odds / (1 + odds)
    seed = ref[ref.metric == "cycles_share_pct"].set_index(["experiment", "variant"]).value
    out["seed_pct_create"] = float(seed[("create_prealloc_metadata_512", "before_series")])
    out["seed_pct_dd"] = float(seed[("guest_dd_64k", "before_series")])
    out["seed_pct_random"] = float(seed[("guest_random_512_odirect", "before_series")])
    import datetime as dt
    t0, t1 = (dt.datetime.fromisoformat(m[k]) for k in ("started", "finished"))
    out["run_minutes"] = (t1 - t0).total_seconds() / 60
    out["host_cpus"] = m["host"]["cpus_online"]
    out["scratch_fs"] = (m.get("scratch") or {}).get("filesystem") or "unknown"
    out["seed_create_gib"] = seed_size / GiB
    out["step_clusters"] = m["parameters"]["bench_step_clusters"]
    out["l2_cov_kib"] = 512 * (512 // 8) / 1024  # guest bytes one L2 table maps at 512 B clusters
    out["qemu_version"] = (m["tools"].get("qemu-img") or "").split("(")[0].replace("qemu-img version", "").strip()
    # plain Python numbers: glue formats their repr, and numpy 2 spells np.float64(...)
    out = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in out.items()}
    return {k: (round(v, GLUE_DIGITS.get(k, GLUE_DEFAULT_DIGITS)) if isinstance(v, float) else v)
            for k, v in out.items()}


def comparison_table(h: dict):
    """The seed's 2014 figures next to ours (self share of sampled CPU in the check)."""
    import pandas as pd
    rows = [
        ("metadata preallocation, 512 B clusters",
         f"2 GiB create: {h['seed_pct_create']:.2f} %", f"{h.get('perf_pre_size_mib', 0)} MiB: "
         f"{h.get('perf_pre_cached', float('nan')):.2f} %"),
        ("sequential 64 KiB writes that allocate",
         f"guest dd, 1 GB: {h['seed_pct_dd']:.2f} %", f"{h.get('perf_al_cached', float('nan')):.2f} %"),
        ("scattered 512 B overwrites, preallocated image",
         f"guest O_DIRECT, 1 GB: {h['seed_pct_random']:.2f} %",
         f"{h['ow_size_mib']} MiB: {h.get('perf_ow_cached', float('nan')):.2f} %"),
    ]
    return pd.DataFrame(rows, columns=["workload", "seed 2014, before the series",
                                       "this host, overlap-check=cached"])


class Plain:
    """A string that glue shows without quotes (its text/plain repr is the text itself)."""

    def __init__(self, text: str):
        self.text = str(text)

    def __repr__(self) -> str:
        return self.text
