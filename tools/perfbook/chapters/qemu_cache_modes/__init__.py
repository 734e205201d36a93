"""Chapter 'qemu_cache_modes': what each QEMU cache mode does on the host, and what it costs.

The 2013 seed (``003_a6856da90838b12c.txt``, "qemu cache mode まとめ") explained the five
``cache=`` modes with a table of three properties (host page cache, a volatile "disk write
cache" of the virtual disk, flushes disabled), measured them with ``dd`` inside a guest and
ranked them by memory, speed and safety. This chapter measures all of that on today's QEMU:

  semantics -- strace of ``qemu-io -t MODE`` writing a scratch image, then a flush: the open
               flags of the image (O_DIRECT, O_DSYNC) and the fdatasync/fsync calls per write,
               per flush and at close. ``semantics_table()`` turns the trace into the chapter's
               table; ``check_documented()`` compares it with QEMU's documented mapping.
  bench     -- ``qemu-img bench`` per mode: writes and reads, queue depth 1 and more, writes
               with and without ``--flush-interval``, raw and qcow2, repeated in shuffled order.
  host_dd   -- the seed's ``dd`` (64 KiB blocks, normal and oflag=direct) on this host.
  guest     -- the seed's guest test with ``perfbook.qemu.guest``: ``dd`` of 64 KiB blocks to the
               guest's virtio disk, normal and oflag=direct, per cache mode; every result is
               labelled with the accelerator (KVM or TCG). While the guest runs, the host's
               page cache is sampled (/proc/meminfo Cached/Dirty/Writeback, and the pages of
               the guest's image file that are resident, with mincore(2)).

QEMU sources read for the explanations (block/file-posix.c raw_parse_flags: only O_DIRECT is
added, for BDRV_O_NOCACHE; block/block-backend.c: a BlockBackend without write cache adds
BDRV_REQ_FUA to every write; block/io.c: FUA that the driver can't do is emulated by a flush after
the write, and bdrv_co_flush() returns before the driver's flush_to_disk when BDRV_O_NO_FLUSH is
set) are named in the chapter; the documented mapping is the table of ``-drive cache=`` in the
qemu-system-x86_64(1) manual page of QEMU 7.2 (generated from qemu-options.hx).

  __init__.py      what the chapter declares (this file)
  collect.py       measure(ctx): semantics, bench, host dd, the guest's dd and the page-cache
                   sampler
  parse.py         strace, guest, qemu-img bench and dd output -> rows; the modes, parts and
                   the documented mapping the other modules share
  analysis.py      CacheData (the loaded datasets in natural order, the quoted dataset's
                   frames); semantics table, summaries, rank tests, orderings
  tables.py        the chapter's tables; prose.py every value the prose quotes
  figures.py       (figure, caption) pairs; key_findings.py the chapter's conclusions
"""

from __future__ import annotations

from perfbook.core.errors import ParameterError
from perfbook.framework.contract import REPETITION, Chapter, Param, Table, repetition_params

from .parse import AIO, FORMATS, MODES, OPS, PARTS, KiB, MiB

_COMMON = {
    "modes": None,
    "parts": None,
    "bench_size": 64 * KiB,
    "bench_aio": "threads",
    "bench_image_mib": 64,
    "accel": "auto",
    "boot_timeout": 180.0,
    "guest_memory_mib": 256,
    "sample_ms": 25,
    "seed": 1,
}


class QemuCacheModes(Chapter):
    name = "qemu_cache_modes"
    title = "QEMU cache modes: what each mode does on the host, and what it costs"
    # The bench and dd on the host repeat adaptively (perfbook.analysis.repetition.Repetition, bench_* and
    # host_dd_*); the guest's dd runs a fixed script (dd_repeats after dd_warmup) in guest_boots
    # boots per mode.
    # Where the default's ~52 s go on 2 CPUs (plan_s; two measured default runs took 47 s and,
    # on a machine busy with other measurements, 58 s): the traced semantics ~5 s; the bench's
    # 60 configurations at ~35 ms of qemu-img start-up plus bench_min_ms each, ~5.4 s a round:
    # the warm-up (sizing) round and a fixed 2 measured rounds of every experiment (n = 2, for
    # the tables), ~15 s, plus 4 more rounds of the 5 configurations the findings read (raw
    # writes at depth 1 without flushes: bench_main_runs = 6, since 4 against 4 is the least n
    # a Hodges-Lehmann ratio covers 95 % with), ~2.5 s, with 30 s as the cap elsewhere; the host
    # dd ~0.5 s (6 rounds: no finding reads it, 20 rounds bought nothing); the guest 5 boots of
    # ~5 s (each ~3.5 s of boot and teardown under TCG, plus dd_warmup + dd_repeats rounds of
    # 16 MiB dd). One boot per mode: the dd rounds inside a boot are no independent repetitions,
    # so direct_penalty stays undecided in the default (four boots per mode more would cost
    # ~40 s); `full` boots each mode guest_boots = 4 times. Where /dev/kvm exists but a KVM
    # guest never reaches init, kvm_boot_timeout before the TCG fallback. A KVM guest reaches
    # init within about a second, so 4 s (quick: 3 s) is margin.
    plan_s = {
        "quick": 8,
        "default": 52,
    }  # seconds a collect should take here (perfbook.book.summary)
    profiles = {
        "quick": {
            "sem_writes": 3,
            "sem_formats": ["raw"],
            "sem_aio": ["threads"],
            "bench_formats": ["raw"],
            "bench_ops": ["write", "read"],
            "bench_depths": [1],
            "bench_flush_intervals": [0],
            "bench_count": 64,
            "bench_warmup": 1,
            "bench_min_ms": 20,
            "bench_target": 0.05,
            "bench_min_runs": 1,
            "bench_max_runs": 1,
            "bench_main_runs": 1,
            "bench_budget_s": 30.0,
            "host_dd_target": 0.05,
            "host_dd_min_runs": 1,
            "host_dd_max_runs": 1,
            "host_dd_budget_s": 10.0,
            "host_dd_warmup": 0,
            "guest_modes": ["none", "writeback"],
            "dd_mib": 4,
            "dd_repeats": 1,
            "dd_warmup": 0,
            "guest_boots": 1,
            "kvm_boot_timeout": 3.0,
            **_COMMON,
        },
        "default": {
            "sem_writes": 4,
            "sem_formats": ["raw", "qcow2"],
            "sem_aio": ["threads", "native"],
            "bench_formats": ["raw", "qcow2"],
            "bench_ops": ["write", "read"],
            "bench_depths": [1, 16],
            "bench_flush_intervals": [0, 16],
            "bench_count": 256,
            "bench_warmup": 1,
            "bench_min_ms": 50,
            "bench_target": 0.05,
            "bench_min_runs": 2,
            "bench_max_runs": 2,
            "bench_main_runs": 6,
            "bench_budget_s": 30.0,
            "host_dd_target": 0.05,
            "host_dd_min_runs": 6,
            "host_dd_max_runs": 6,
            "host_dd_budget_s": 4.0,
            "host_dd_warmup": 1,
            "guest_modes": None,
            "dd_mib": 16,
            "dd_repeats": 4,
            "dd_warmup": 1,
            "guest_boots": 1,
            "kvm_boot_timeout": 4.0,
            **_COMMON,
        },
        "full": {
            "sem_writes": 8,
            "sem_formats": ["raw", "qcow2"],
            "sem_aio": ["threads", "native"],
            "bench_formats": ["raw", "qcow2"],
            "bench_ops": ["write", "read"],
            "bench_depths": [1, 4, 32],
            "bench_flush_intervals": [0, 1, 16],
            "bench_count": 1024,
            "bench_warmup": 1,
            "bench_min_ms": 200,
            "bench_target": 0.05,
            "bench_min_runs": 10,
            "bench_max_runs": 100,
            "bench_main_runs": 10,
            "bench_budget_s": 300.0,
            "host_dd_target": 0.05,
            "host_dd_min_runs": 10,
            "host_dd_max_runs": 100,
            "host_dd_budget_s": 30.0,
            "host_dd_warmup": 1,
            "guest_modes": None,
            "dd_mib": 64,
            "dd_repeats": 15,
            "dd_warmup": 1,
            "guest_boots": 4,
            "kvm_boot_timeout": 20.0,
            **_COMMON,
        },
    }
    params = {
        "modes": Param(list, choices=MODES, nullable=True, help="cache modes (None: all five)"),
        "parts": Param(
            list, choices=PARTS, nullable=True, help="parts to measure (None: all four)"
        ),
        "sem_writes": Param(
            int, min=1, max=64, help="traced 64 KiB writes per run (the traced image is 8 MiB)"
        ),
        "sem_formats": Param(list, choices=FORMATS, help="image formats of the traced runs"),
        "sem_aio": Param(
            list, choices=("threads", "native"), help="aio backends of the traced runs"
        ),
        "bench_formats": Param(list, choices=FORMATS, help="image formats of the bench"),
        "bench_ops": Param(list, choices=OPS, help="bench operations"),
        "bench_depths": Param(
            object, help="queue depths: a list (or comma-separated string) of 1..256"
        ),
        "bench_flush_intervals": Param(
            object, help="flush intervals of the bench's writes (0: no flushes)"
        ),
        "bench_count": Param(int, min=1, help="requests per qemu-img bench run (before sizing)"),
        "bench_min_ms": Param(
            int, min=1, help="a run shorter than this gets proportionally more requests"
        ),
        "bench_size": Param(
            int,
            min=4096,
            max=16 * MiB,
            help="bytes per request, a multiple of 4096 (O_DIRECT needs aligned requests)",
        ),
        "bench_aio": Param(str, choices=AIO, help="QEMU aio backend of the bench"),
        "bench_image_mib": Param(int, min=4, max=4096, help="size of the bench's images"),
        **repetition_params("bench_"),
        "bench_main_runs": Param(
            int,
            min=1,
            max=1000,
            help="measured rounds at least of the raw writes at the smallest depth without "
            "flushes (the experiment the findings read; the others stop by bench_*)",
        ),
        "bench_warmup": Param(
            int, min=1, help="warm-up rounds of the bench (the first sizes the runs)"
        ),
        **repetition_params("host_dd_"),
        "guest_modes": Param(
            list,
            choices=MODES,
            nullable=True,
            help="cache modes the guest boots with (None: the chosen modes)",
        ),
        "dd_mib": Param(
            int, min=1, max=1024, help="MiB per dd in the guest (the guest disk is that big)"
        ),
        "dd_repeats": Param(int, min=1, help="timed rounds of dd in each guest"),
        "guest_boots": Param(
            int,
            min=1,
            max=50,
            help="boots per guest mode (the unit of repetition of the guest's dd rates)",
        ),
        "dd_warmup": Param(int, min=0, help="warm-up rounds of dd in each guest"),
        "accel": Param(
            str,
            choices=("auto", "kvm", "tcg"),
            help="KVM if the guest boots in time (auto), KVM or TCG",
        ),
        "kvm_boot_timeout": Param(
            float, min=1, max=900, help="seconds a KVM guest gets to reach init (auto)"
        ),
        "boot_timeout": Param(float, min=1, max=900, help="seconds a boot may take in all"),
        "guest_memory_mib": Param(int, min=96, max=4096, help="the guest's memory"),
        "sample_ms": Param(int, min=5, help="page-cache sampling interval while the guest runs"),
        "seed": Param(int, min=0, help="seed of the shuffled orders"),
    }
    tables = {
        "trace": Table(
            mode="str",
            format="str",
            aio="str",
            seq="int",
            pid="int",
            syscall="str",
            ret="int",
            errno="str",
            kind="str",
            fd="int",
            flags="str",
            bytes="int",
            offset="int",
            dsync="bool",
            phase="str",
            marker="str",
        ),
        "bench": Table(
            round="int",
            position="int",
            format="str",
            op="str",
            depth="int",
            flush_interval="int",
            mode="str",
            count="int",
            size="int",
            aio="str",
            seconds="float",
            wall_seconds="float",
            mb_per_s="float",
            iops="float",
            mean_latency_us="float",
        ),
        "host_dd": Table(
            round="int",
            position="int",
            variant="str",
            bytes="int",
            seconds="float",
            mb_per_s="float",
        ),
        "guest_dd": Table(
            boot="int",
            mode="str",
            accel="str",
            round="int",
            position="int",
            variant="str",
            t0_us="int",
            t1_us="int",
            rc="int",
            records_out="str",
            bytes="int",
        ),
        "guest_boots": Table(
            boot="int",
            mode="str",
            accel="str",
            accel_note="str",
            boot_seconds="float",
            total_seconds="float",
            guest_cache_type="str",
            guest_write_cache="str",
            guest_disk_sectors="int",
            guest_buffers_kb="int",
            guest_kernel="str",
            qemu_version="str",
            memory_mib="int",
            dd_mib="int",
            qemu_cmdline="str",
        ),
        "pagecache": Table(
            boot="int",
            mode="str",
            accel="str",
            samples="int",
            guest_wrote_mib="int",
            disk_mib="int",
            cached_base_kb="int",
            cached_peak_kb="int",
            cached_after_kb="int",
            dirty_base_kb="int",
            dirty_peak_kb="int",
            writeback_peak_kb="int",
            image_resident_peak_kb="int",
            image_resident_last_kb="int",
        ),
        # image_resident_kb: missing before QEMU has created the image
        "pagecache_samples": Table(
            boot="int",
            mode="str",
            t="float",
            memfree_kb="int",
            cached_kb="int",
            dirty_kb="int",
            writeback_kb="int",
            image_resident_kb="float",
        ),
        "repetition": REPETITION,
    }
    reference = ("qemu_cache_modes",)
    quote_needs = (
        "trace",
        "bench",
        "host_dd",
        "guest_dd",
        "guest_boots",
        "pagecache",
        "pagecache_samples",
    )

    needs_tools = {"qemu-img": "qemu-utils", "qemu-io": "qemu-utils"}
    needs_text = (
        "QEMU boots its guests with KVM where /dev/kvm works and under TCG elsewhere "
        "(the dataset says which)"
    )
    needs_root = False

    def check(self, p: dict) -> None:
        # lazy: scipy.stats, 0.67 s on top of the declaration's 0.35 s (-X importtime)
        from perfbook.analysis.repetition import repetition_settings

        repetition_settings(p, "bench_")
        repetition_settings(p, "host_dd_")
        p["modes"] = [m for m in MODES if m in (p["modes"] or MODES)]  # the book's order
        p["parts"] = [x for x in PARTS if x in (p["parts"] or PARTS)]
        # the guest runs the chosen modes only; a profile's guest subset that misses them all: all of them
        gm = p["guest_modes"] or p["modes"]
        p["guest_modes"] = [m for m in MODES if m in gm and m in p["modes"]] or list(p["modes"])
        p["bench_depths"] = _int_list(p, "bench_depths", 1, 256)
        p["bench_flush_intervals"] = _int_list(p, "bench_flush_intervals", 0, 1 << 20)
        if p["bench_size"] % 4096:
            raise ParameterError(
                f"bench_size must be a multiple of 4096 bytes up to 16 MiB "
                f"(O_DIRECT needs aligned requests), got {p['bench_size']!r}"
            )

    def preflight(self) -> list[str]:
        """Why collect can't run here at all ([] = it can; missing strace/QEMU only skip parts)."""
        return super().preflight()

    def load(self, data_dir=None):
        """Every dataset, in natural order, with the quoted dataset's frames (analysis.CacheData)."""
        return self.part("analysis").CacheData(self, data_dir)


def _int_list(p: dict, key: str, lo: int, hi: int) -> list[int]:
    """A sorted list of distinct integers in lo..hi: a list, one integer, or a comma-separated string."""
    v = p[key]
    if isinstance(v, int) and not isinstance(v, bool):
        v = [v]
    elif isinstance(v, str):
        try:
            v = [int(x) for x in v.split(",") if x.strip()]
        except ValueError:
            raise ParameterError(f"{key} must be a list of integers, got {p[key]!r}") from None
    if (
        not isinstance(v, (list, tuple))
        or not v
        or not all(isinstance(x, int) and not isinstance(x, bool) and lo <= x <= hi for x in v)
    ):
        raise ParameterError(
            f"{key} must be a non-empty list of integers in {lo}..{hi}, got {p[key]!r}"
        )
    return sorted(set(v))


chapter = QemuCacheModes()
