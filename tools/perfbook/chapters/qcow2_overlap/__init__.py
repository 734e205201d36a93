"""Chapter 'qcow2_overlap': the CPU cost of qcow2 metadata overlap checks.

Before QEMU's qcow2 driver writes anything (a guest data range, or an L2 table or refcount
block evicted from its cache) it asks qcow2_check_metadata_overlap() whether the target
overlaps a metadata structure. Which structures it tests is the `overlap-check` runtime
option: none, constant, cached (the default) or all. The chapter times today's qemu-img under
every mode on images it creates in a private scratch directory, and counts the metadata of real
images with the shared reader (tools/perfbook/probes/qcow2.py) to test the seed's RAM formula.

Tables (tidy, raw samples):
  prealloc    metadata preallocation (`qemu-img resize --preallocation=metadata`, the path
              `qemu-img create -o preallocation=metadata` takes), per mode, cluster and image
              size; plus the real create with flushes
  writes      `qemu-img bench -w`: scattered 512-byte overwrites of a preallocated image,
              sequential 64 KiB writes that allocate, and the overwrites after internal
              snapshots, where mode 'all' reads every snapshot's L1 table for each check
  metadata    metadata clusters per kind, read from the images themselves
  cycles      perf record: share of samples in qcow2_check_metadata_overlap
  repetition  how each timed experiment's adaptive repetition stopped

  __init__.py      what the chapter declares (this file)
  collect.py       measure(ctx): the qemu-img command lines, the timed experiments, the perf
                   recordings
  parse.py         perf report text; the modes, sizes, workloads and symbols the modules share
  analysis.py      overheads, fits, the formula check
  tables.py        the tables the chapter shows; prose.py every value the prose quotes
  figures.py       (figure, caption) pairs; key_findings.py the chapter's conclusions
"""

from __future__ import annotations

from perfbook.core.errors import ParameterError
from perfbook.framework.contract import REPETITION, Chapter, Param, Table, repetition_params

from .parse import MAX_SIZE, MODES, GiB, MiB

# Every timed experiment (one preallocation size, the create with flushes, each write
# workload) repeats in rounds of all its modes, shuffled, adaptively (perfbook.analysis.repetition.Repetition):
# after rep_warmup dropped rounds, until every mode's median CPU time (wall time for the
# create with flushes) has a 95 % CI narrower than rep_target (relative), or rep_budget_s
# per experiment runs out, or rep_max_runs. `repeats` fixes the number of rounds instead.
_COMMON = {
    "modes": None,
    "prealloc_modes": None,
    "perf_quoted_only": False,
    "seed": 1,
    "bench_step_clusters": 7919,
    "repeats": None,
}
SIZE_KEYS = ("bench_size", "alloc_size", "snap_size", "flush_size", "perf_prealloc_size")
LIST_KEYS = (
    "prealloc_sizes_512",
    "prealloc_sizes_64k",
    "formula_sizes_512",
    "formula_sizes_4k",
    "formula_sizes_64k",
)

_T = {"wall_s": "float", "user_s": "float", "sys_s": "float", "cpu_s": "float", "maxrss_kib": "int"}
_COUNTS = (
    "n_header",
    "n_active_l1",
    "n_refcount_table",
    "n_snapshot_table",
    "n_inactive_l1",
    "n_active_l2",
    "n_refcount_block",
    "n_inactive_l2",
    "cluster_size",
    "virtual_size",
    "file_size",
    "disk_usage",
    "l1_size",
    "refcount_bits",
    "nb_snapshots",
    "n_metadata",
    "n_formula_scope",
    "metadata_runs",
    "formula_scope_runs",
)


class Qcow2Overlap(Chapter):
    name = "qcow2_overlap"
    title = "The CPU cost of qcow2 metadata overlap checks"
    # Every experiment (a preallocation size, the create with flushes, three write workloads)
    # repeats in rounds of all its modes, with its own Repetition and its own rep_budget_s. The
    # cost is the preallocations: on 2 CPUs a 512-byte-cluster preallocation takes ~0.25 s at
    # 32 MiB, 0.45 s at 64, 0.9 s at 128, 1.5 s at 256 and 3 s at 512 MiB per mode. The default
    # runs only what the findings and the main figure need, in fixed rounds of 6 (the round is the
    # unit of repetition): a median over 6 rounds' exponents has a 96.9 % interval (superlinear),
    # cached against none 6 against 6 a 95.9 % Moses interval (prealloc_share), and the union
    # bound over all's and cached's shifts after snapshots two 98.5 % intervals, 97 % together
    # (all_snapshots; 5 against 5 would give 96.8 %, 4 against 4 only 94.3 %). So: the modes none,
    # cached and all (constant: no finding, the full profile keeps it), preallocations of none
    # and cached only (prealloc_modes), at 64 and 128 MiB (256 MiB took 30 of a default run's
    # 110 s here: the two smaller sizes keep the exponent's two points and a run near the plan;
    # full keeps 64 MiB-2 GiB), and at 64 KiB clusters 64 GiB (the prose's one comparison there);
    # perf records only the 4 (workload, mode) pairs the prose quotes (perf_quoted_only, ~13 s
    # here; full records all 8: the page quotes the quoted dataset's shares, so a default run
    # without them would leave its perf sentences empty), and the formula counts one image fewer
    # (1 TiB at 64 KiB clusters took 3 s);
    # the write workloads and the create with flushes, which no finding reads, run a quarter of
    # the requests / bytes. No warm-up round (qemu-img is warm from the chapters before).
    # rep_budget_s caps each experiment on a slower machine only after the 6 rounds the findings
    # need (perfbook.analysis.repetition never stops a run short of rep_min_runs). Measured here,
    # alone: 65-68 s without perf, 110 s with 128 and 256 MiB and perf; so plan_s 78.
    plan_s = {
        "quick": 12,
        "default": 78,
    }  # seconds a collect should take here (perfbook.book.summary)
    profiles = {
        "quick": {
            "rep_target": 0.05,
            "rep_min_runs": 2,
            "rep_max_runs": 2,
            "rep_budget_s": 20.0,
            "rep_warmup": 0,
            "prealloc_sizes_512": [8 * MiB, 16 * MiB],
            "prealloc_sizes_64k": [4 * GiB],
            "bench_size": 16 * MiB,
            "bench_count": 2000,
            "alloc_size": 8 * MiB,
            "snapshots": 2,
            "snap_size": 8 * MiB,
            "snap_count": 500,
            "formula_sizes_512": [16 * MiB],
            "formula_sizes_4k": [256 * MiB],
            "formula_sizes_64k": [16 * GiB],
            "flush_size": 4 * MiB,
            "perf_repeats": 1,
            "perf_prealloc_size": 16 * MiB,
            **_COMMON,
        },
        "default": {
            "rep_target": 0.05,
            "rep_min_runs": 6,
            "rep_max_runs": 6,
            "rep_budget_s": 30.0,
            "rep_warmup": 0,
            "prealloc_sizes_512": [64 * MiB, 128 * MiB],
            "prealloc_sizes_64k": [64 * GiB],
            "bench_size": 128 * MiB,
            "bench_count": 2500,
            "alloc_size": 8 * MiB,
            "snapshots": 4,
            "snap_size": 64 * MiB,
            "snap_count": 1000,
            "formula_sizes_512": [256 * MiB],
            "formula_sizes_4k": [1 * GiB, 16 * GiB],
            "formula_sizes_64k": [64 * GiB],
            "flush_size": 8 * MiB,
            "perf_repeats": 1,
            "perf_prealloc_size": 128 * MiB,
            **_COMMON,
            "modes": ["cached", "all"],
            "prealloc_modes": ["cached"],
            "perf_quoted_only": True,
        },
        "full": {
            "rep_target": 0.03,
            "rep_min_runs": 9,
            "rep_max_runs": 30,
            "rep_budget_s": 300.0,
            "rep_warmup": 1,
            "prealloc_sizes_512": [64 * MiB, 128 * MiB, 256 * MiB, 512 * MiB, 1 * GiB, 2 * GiB],
            "prealloc_sizes_64k": [64 * GiB, 1024 * GiB, 4096 * GiB],
            "bench_size": 1 * GiB,
            "bench_count": 50000,
            "alloc_size": 256 * MiB,
            "snapshots": 8,
            "snap_size": 256 * MiB,
            "snap_count": 10000,
            "formula_sizes_512": [256 * MiB, 1 * GiB, 2 * GiB, 4 * GiB],
            "formula_sizes_4k": [1 * GiB, 16 * GiB, 64 * GiB],
            "formula_sizes_64k": [64 * GiB, 1024 * GiB, 4096 * GiB],
            "flush_size": 256 * MiB,
            "perf_repeats": 5,
            "perf_prealloc_size": 1 * GiB,
            **_COMMON,
        },
    }
    params = {
        "bench_size": Param(
            int, min=1, help="bytes of the overwritten image (a multiple of 1 MiB)"
        ),
        "bench_count": Param(int, min=1, help="512-byte overwrites per qemu-img bench run"),
        "alloc_size": Param(
            int, min=1, help="bytes the sequential 64 KiB writes allocate (1 MiB multiple)"
        ),
        "snapshots": Param(int, min=1, help="internal snapshots before the overwrites"),
        "snap_size": Param(int, min=1, help="bytes of the snapshotted image (a multiple of 1 MiB)"),
        "snap_count": Param(int, min=1, help="overwrites per run after the snapshots"),
        "seed": Param(int, min=0, help="seed of the shuffled mode order"),
        "bench_step_clusters": Param(
            int, min=1, help="stride of the scattered overwrites, in clusters"
        ),
        "flush_size": Param(
            int, min=1, help="bytes of the create with flushes (a multiple of 1 MiB)"
        ),
        "perf_repeats": Param(int, min=0, help="perf recordings per workload and mode (0: none)"),
        "perf_quoted_only": Param(
            bool, help="record only the (workload, mode) pairs the prose quotes (parse.PERF_QUOTED)"
        ),
        "perf_prealloc_size": Param(
            int, min=1, help="bytes preallocated under perf (1 MiB multiple)"
        ),
        **{
            k: Param(
                object,
                help="image sizes in bytes: a list, one size or a comma-separated "
                "string, multiples of 1 MiB",
            )
            for k in LIST_KEYS
        },
        "modes": Param(
            list,
            choices=MODES,
            nullable=True,
            help="overlap-check modes (none is always added); None: all four",
        ),
        "prealloc_modes": Param(
            list,
            choices=MODES,
            nullable=True,
            help="modes of the timed preallocations (none is always added); None: as modes",
        ),
        **repetition_params("rep_"),
        "repeats": Param(
            int,
            min=1,
            nullable=True,
            help="a fixed number of rounds (sets rep_min_runs and rep_max_runs)",
        ),
    }
    tables = {
        "prealloc": Table(
            command="str",
            cluster_size="int",
            image_size="int",
            mode="str",
            repeat="int",
            position="int",
            **_T,
        ),
        "writes": Table(
            workload="str",
            cluster_size="int",
            image_size="int",
            snapshots="int",
            mode="str",
            requests="int",
            request_bytes="int",
            repeat="int",
            position="int",
            **_T,
        ),
        "metadata": Table(
            experiment="str", mode="str", prealloc_wall_s="float", **{c: "int" for c in _COUNTS}
        ),
        "cycles": Table(
            workload="str",
            mode="str",
            image_size="int",
            repeat="int",
            event="str",
            samples="int",
            check_pct="float",
            pre_write_pct="float",
            top_symbol="str",
        ),
        "repetition": REPETITION,
    }
    reference = ("qcow2_overlap",)
    quote_needs = ("prealloc", "writes", "metadata")

    needs_tools = {"qemu-img": "qemu-utils"}

    def check(self, p: dict) -> None:
        # lazy: scipy.stats, 0.67 s on top of the declaration's 0.35 s (-X importtime)
        from perfbook.analysis.repetition import repetition_settings

        if p["repeats"] is not None:
            p["rep_min_runs"] = p["rep_max_runs"] = p["repeats"]
        repetition_settings(p, "rep_")
        for k in SIZE_KEYS:
            if p[k] < MiB or p[k] % MiB:
                raise ParameterError(
                    f"{k} must be a multiple of 1 MiB (1048576), at least 1 MiB, got {p[k]!r}"
                )
        for k in LIST_KEYS:
            p[k] = _sizes(k, p[k])
        for k in ("prealloc_sizes_512", "formula_sizes_512"):
            if max(p[k]) > 8 * GiB:
                raise ParameterError(
                    f"{k}: images above 8 GiB at 512-byte clusters take hours to "
                    f"preallocate; pick smaller sizes, got {max(p[k])}"
                )
        modes = p["modes"] or list(MODES)
        p["modes"] = [m for m in MODES if m in modes or m == "none"]  # none: the baseline
        pm = p["prealloc_modes"] or p["modes"]
        p["prealloc_modes"] = [m for m in MODES if m in pm or m == "none"]


def _sizes(name: str, v) -> list[int]:
    """A list of image sizes: a list, one size, or a string of comma-separated sizes."""
    orig = v
    if isinstance(v, str):
        v = [x.strip() for x in v.split(",") if x.strip()]
    elif isinstance(v, int) and not isinstance(v, bool):
        v = [v]
    if isinstance(v, (list, tuple)):
        v = [int(x) if isinstance(x, str) and x.isdigit() else x for x in v]
    if (
        not isinstance(v, (list, tuple))
        or not v
        or not all(
            isinstance(x, int) and not isinstance(x, bool) and MiB <= x <= MAX_SIZE and x % MiB == 0
            for x in v
        )
    ):
        raise ParameterError(
            f"{name} must be a non-empty list of sizes in bytes, multiples of "
            f"1 MiB up to {MAX_SIZE}, got {orig!r}"
        )
    return sorted(set(v))


chapter = Qcow2Overlap()
