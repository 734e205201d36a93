"""qemu_cache_modes, collect: the seed's guest test, with perfbook.qemu.guest.

One boot per cache mode, in shuffled order: ``dd`` of 64 KiB blocks to the guest's virtio disk,
normal and oflag=direct, a fixed number of rounds (the guest runs a script written before it
boots); every result is labelled with the accelerator (KVM or TCG). While the guest runs, a
thread samples the host's page cache: /proc/meminfo (Cached, Dirty, Writeback) and the pages of
the guest's image file that are resident, with mincore(2). QEMU and its scratch directory are
owned by perfbook.qemu.guest.Runner.
"""
from __future__ import annotations

import ctypes
import os
import re
import threading
import time

from perfbook.core.errors import PerfbookError
from perfbook.core.guard import check_interrupted
from .parse import parse_guest
from .spec import DD_BS, MEMINFO_KEYS, KiB, MiB


def resident_bytes(path) -> int:
    """How many bytes of `path` are in the host page cache now (mincore(2) on a mapping)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
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
            row = {"t": time.monotonic() - self.t0, **{f"{k.lower()}_kb": v for k, v in meminfo().items()}}
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
    lines += ["exec 3</dev/vda",
              f"dd if=/dev/zero of=/dev/vda bs=64k count={count} 2>/dev/null",
              "sync",
              "echo \"GUEST_BUFFERS $(awk '/^Buffers:/{print $2}' /proc/meminfo)\"",
              "exec 3<&-",
              "sync"]
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
    from perfbook.qemu import guest
    return " ".join(re.sub(r"/(?:[^/\s,=]+/)*guest-\d+-[^/]+/run-[^/]+/", "SCRATCH/",
                           a.replace(str(guest.guest_root()), "build/guest")) for a in cmd[1:])


def measure_guest(p: dict, rng, prog, w) -> dict[str, list[dict]]:
    """One boot per guest mode, in shuffled order: the rows of the tables guest_dd,
    guest_boots, pagecache and pagecache_samples."""
    from perfbook.qemu import guest
    dd_rows, boots, pc_summary, pc_samples = [], [], [], []
    modes = p["guest_modes"]
    order = modes[:]
    rng.shuffle(order)
    with guest.Runner(accel=p["accel"], kvm_boot_timeout=p["kvm_boot_timeout"],
                      timeout=p["boot_timeout"], progress=prog.note) as r:
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
                raise PerfbookError(f"the guest printed {len(rows)} dd results, expected {want} (cache={mode})")
            for x in rows:
                dd_rows.append({"boot": boot, "mode": mode, "accel": res.accel, **x,
                                "bytes": (p["dd_mib"] * MiB) if x["variant"] != "stamps" else 0})
            boots.append({"boot": boot, "mode": mode, "accel": res.accel, "accel_note": res.accel_note,
                          "boot_seconds": res.boot_seconds, "total_seconds": res.total_seconds,
                          "guest_cache_type": info.get("cache_type"),
                          "guest_write_cache": info.get("write_cache"),
                          "guest_disk_sectors": info.get("size"),
                          "guest_buffers_kb": int(info["guest_buffers"]) if info.get("guest_buffers", "").isdigit() else None,
                          "guest_kernel": res.kernel,
                          "qemu_version": res.qemu_version, "memory_mib": p["guest_memory_mib"],
                          "dd_mib": p["dd_mib"], "qemu_cmdline": _redact_cmd(res.cmdline)})
            sm = sampler.samples
            for x in sm:
                pc_samples.append({"boot": boot, "mode": mode, **x})

            def peak(key):
                vals = [x[key] for x in sm if x.get(key) is not None]
                return max(vals) if vals else None
            pc_summary.append({
                "boot": boot, "mode": mode, "accel": res.accel, "samples": len(sm),
                "guest_wrote_mib": p["dd_mib"] * (p["dd_warmup"] + p["dd_repeats"]) * 2,
                "disk_mib": disk.size_mib,
                "cached_base_kb": base["Cached"], "cached_peak_kb": peak("cached_kb"),
                "cached_after_kb": after["Cached"],
                "dirty_base_kb": base["Dirty"], "dirty_peak_kb": peak("dirty_kb"),
                "writeback_peak_kb": peak("writeback_kb"),
                "image_resident_peak_kb": peak("image_resident_kb"),
                "image_resident_last_kb": next((x["image_resident_kb"] for x in reversed(sm)
                                                if x.get("image_resident_kb") is not None), None)})
            prog.step(f"guest cache={mode}: {res.accel}, {res.total_seconds:.1f} s")
    return {"guest_dd": dd_rows, "guest_boots": boots, "pagecache": pc_summary,
            "pagecache_samples": pc_samples}


