"""Key findings of the qcow2 overlap-check chapter, each decided on one number with its interval.

Every timed experiment (one preallocation size, one write workload) runs each mode once per
round, in a shuffled order: a row of the prealloc or writes table is one mode's run in one
round, and the round is the unit of repetition. So a mode's cost is set against `none` on those
per-run CPU times (a ratio or a Hodges-Lehmann shift with its distribution-free interval), and
two rounds against two give a 66.67 % interval: undecided, whatever the Mann-Whitney p. The
exponent of the extra CPU's growth is one number per round, its interval the median's over the
rounds (6 rounds: 96.9 %), not the scatter of a few sizes about a line.
"""

from __future__ import annotations

from perfbook.analysis import decide
from perfbook.analysis.decide import fmt
from perfbook.analysis.findings import Finding, Measured, Takeaway

from .analysis import (
    PRE_KEYS,
    exponent,
    formula_table,
    largest_compared,
    overhead,
    seed_size,
)
from .parse import GiB, MiB
from .prose import SNAPSHOTS

SHARE_LIMIT = 1.10  # cached / none CPU time: the check adds more than 10 %
FACTOR = 10  # all's extra CPU per write against cached's
FORMULA_PCT = 1.0  # the formula's largest miss, in % of the predicted clusters


def _resizes(run, cluster_size: int = 512):
    """The dataset's timed metadata preallocations (no flushes) at one cluster size."""
    pre = run["prealloc"]
    return pre[(pre.command == "resize_no_flush") & (pre.cluster_size == cluster_size)]


def prealloc_share(run):
    """cached / none CPU time at the largest 512-byte-cluster size compared (per-round runs of
    each mode); None where the dataset ran no size with both modes."""
    if "prealloc" not in run:
        return None
    rs = _resizes(run)
    size = largest_compared(rs, "cached")
    if size is None:
        return None
    at = rs[rs.image_size == size]
    cached, none = at[at["mode"] == "cached"].cpu_s, at[at["mode"] == "none"].cpu_s
    ref = run.reference("qcow2_overlap")
    seed = ref[
        (ref.metric == "cycles_share_pct")
        & (ref.experiment == "create_prealloc_metadata_512")
        & (ref.variant == "before_series")
    ].value.iloc[0]
    return Measured(
        decide.ratio(cached, none, what="rounds"),
        f"{size // MiB} MiB: cached {fmt(cached.median())} s, none {fmt(none.median())} s of CPU "
        f"(medians; the seed's 2014 figure, {fmt(seed)} % of cycles in the check at "
        f"{seed_size(ref) // GiB} GiB on its own machine and QEMU, is another quantity)",
    )


def superlinear(run):
    """The exponent of the power law in cached's extra CPU over the 512-byte-cluster sizes, with
    its interval from the rounds (analysis.exponent(): the median of the rounds' exponents, each
    round's log-log slope over the sizes whose shift stands clear of zero). Where that leaves
    no round, the line through the sizes' extras gives the exponent without an interval
    (undecided). None where the dataset measured fewer than two sizes (no growth to fit) or
    fewer than two sizes have a positive extra CPU (a power law's exponent does not exist)."""
    if "prealloc" not in run:
        return None
    rs = _resizes(run)
    if rs.image_size.nunique() < 2 or not (rs["mode"] == "cached").any():
        return None
    ov = overhead(rs, PRE_KEYS, modes=("cached",))
    est = exponent(rs, ov)
    if est.value != est.value:  # fewer than two positive extras: no line to fit
        return None
    sizes = sorted(rs.image_size.unique() // MiB)
    n = rs[rs["mode"] == "cached"].groupby("image_size").size()
    return Measured(
        est,
        f"{len(sizes)} sizes measured, {sizes[0]}–{sizes[-1]} MiB, "
        + (
            f"{int(n.min())} rounds each"
            if n.min() == n.max()
            else f"{int(n.min())}–{int(n.max())} rounds"
        )
        + (" (one run per mode)" if n.max() < 2 else ""),
    )


def formula(run):
    """The largest miss of the seed's 10 * IS / CS² against the metadata clusters counted in
    the dataset's images: a count, exact."""
    if "metadata" not in run:
        return None
    ft = formula_table(run["metadata"])
    if ft.empty:
        return None
    r = ft.measured_clusters / ft.formula_virtual
    return Measured(
        decide.exact(100 * float((r - 1).abs().max()), f"{len(ft)} images counted"),
        f"counted / predicted {fmt(r.min(), 4)} to {fmt(r.max(), 4)} over {len(ft)} images",
    )


def all_snapshots(run):
    """all's extra CPU per write over none minus ten times cached's, after internal snapshots:
    the two Hodges-Lehmann shifts (per-round runs) at 97.5 % each, joined by the union bound
    (95 % when each has its 97.5 %). None where the dataset did not run all, cached and none
    after snapshots."""
    if "writes" not in run:
        return None
    sn = run["writes"]
    sn = sn[sn.workload == SNAPSHOTS]
    if not {"all", "cached", "none"} <= set(sn["mode"]):
        return None
    us = sn.cpu_s * 1e6 / sn.requests  # µs of CPU per write, per run
    per = {m: us[sn["mode"] == m] for m in ("all", "cached", "none")}
    a = decide.shift(per["all"], per["none"], 0.975, what="rounds")
    c = decide.shift(per["cached"], per["none"], 0.975, what="rounds")
    est = decide.minus(
        a,
        decide.scaled(c, 1 / FACTOR),
        f"all's and {FACTOR} × cached's Hodges-Lehmann shifts over none ({len(per['all'])}, "
        f"{len(per['cached'])} against {len(per['none'])} rounds), union bound",
    )
    return Measured(
        est,
        f"per write with {int(sn.snapshots.iloc[0])} snapshots: all {fmt(a.value)} µs, "
        f"cached {fmt(c.value)} µs more than none",
    )


FINDINGS = (
    Finding(
        "prealloc_share",
        "With 512-byte clusters, the cached overlap check adds more than 10 % to the CPU time of "
        "preallocating the largest image compared",
        prealloc_share,
        quantity="cached / none CPU time",
        side=">",
        threshold=SHARE_LIMIT,
        unit="×",
        contrary="With 512-byte clusters, the cached overlap check adds at most 10 % to the CPU "
        "time of preallocating the largest image compared",
        reproduce=(
            "f=/tmp/ovl.qcow2;for m in none cached;do qemu-img create -qf qcow2 "
            '-ocluster_size=512 $f 0;TIMEFORMAT="$m %U+%S s CPU";time qemu-img resize -q '
            "--preallocation=metadata --image-opts "
            "driver=qcow2,overlap-check=$m,cache.no-flush=on,file.filename=$f 128M;done;rm $f"
        ),
    ),
    Finding(
        "superlinear",
        "The cached check's extra CPU while preallocating 512-byte-cluster images grows faster "
        "than the image size: the fitted power law's exponent is above 1",
        superlinear,
        quantity="fitted exponent",
        side=">",
        threshold=1.0,
        contrary="The cached check's extra CPU while preallocating 512-byte-cluster images grows "
        "no faster than the image size: the fitted power law's exponent is 1 or below",
        reproduce=(
            "f=/tmp/ovl.qcow2;for s in 64M 128M;do qemu-img create -qf qcow2 -ocluster_size=512 "
            "$f 0;echo $s $(perf record -qo- qemu-img resize -q --preallocation=metadata $f $s|"
            "perf report -qi- -n --sort sym|grep check_metadata);done;rm $f"
        ),
    ),
    Finding(
        "formula",
        "The seed's metadata formula predicts the images' metadata clusters within 1 %",
        formula,
        quantity="largest miss of the formula",
        side="<",
        threshold=FORMULA_PCT,
        unit="%",
        contrary="The seed's metadata formula misses some image's metadata clusters by 1 % or more",
        reproduce=(
            "f=/tmp/meta.qcow2;qemu-img create -qf qcow2 "
            '-ocluster_size=512,preallocation=metadata $f 64M;.venv/bin/python -c "from '
            "perfbook.probes.qcow2 import "
            "*;print('counted',Qcow2Image('$f').metadata_summary()['n_formula_scope'],"
            "'predicted',10*2**26/512**2)\";rm $f"
        ),
    ),
    Finding(
        "all_snapshots",
        "With internal snapshots, mode all adds more than ten times what cached adds per write",
        all_snapshots,
        quantity="all's extra CPU per write − 10 × cached's",
        side=">",
        threshold=0.0,
        unit="µs",
        contrary="With internal snapshots, mode all adds at most ten times what cached adds per "
        "write",
        reproduce=(
            "f=/tmp/snap.qcow2;qemu-img create -qf qcow2 "
            "-ocluster_size=512,preallocation=metadata $f 64M;for i in 1 2 3 4;"
            "do qemu-img snapshot -c$i $f;done;for m in none cached all;do cp $f $f.$m;"
            'TIMEFORMAT="$m %U+%S s CPU";time qemu-img bench -wc1000 -s512 -S4054528 '
            "--image-opts driver=qcow2,overlap-check=$m,file.filename=$f.$m>/dev/null;done;rm $f*"
        ),
    ),
)


def _seed_text(D) -> str:
    ref = D.reference("qcow2_overlap")
    r = ref[(ref.experiment == "create_prealloc_metadata_512") & (ref.metric == "cycles_share_pct")]
    before = r[r.variant == "before_series"]["value"].iloc[0]
    return (
        f"2014 (the patch series' cover letter, a 4 GB laptop): the overlap checks took "
        f"{fmt(before)} % of the cycles of a metadata-preallocated 512-byte-cluster image's creation"
    )


def _transfer(D, host) -> str:
    return (
        "qemu-img runs no guest, so the share is the host CPU's own and should carry over to "
        "bare metal, scaled by how fast that CPU walks the metadata"
    )


TAKEAWAY = Takeaway(
    finding="prealloc_share",
    mechanism="Before each metadata write, qcow2 checks that it overlaps no other metadata; "
    "the cached mode checks against the tables it holds in memory.",
    seed=_seed_text,
    transfer=_transfer,
)
