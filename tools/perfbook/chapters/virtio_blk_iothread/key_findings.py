"""Key findings of the virtio_blk_iothread chapter, each decided on one number with its interval
(perfbook.analysis.decide), computed per dataset (perfbook.analysis.findings).

The unit of repetition is the boot: each round boots every variant once, and each boot runs
each fio job once (the default's 5 rounds: 5 boots per variant). Where a dataset has two boots
or more per variant, each boot's median is one value; a dataset of one boot per variant with
several fio runs of a job inside it (the default profile before #40) has no independent
repetitions, so such an estimate keeps its number and interval but claims no coverage
(boots_only), and its finding stays undecided whatever the runs say. A claim made of two parts
is decided on the lesser or greater of its parts' estimates (decide.lesser, decide.greatest), each
at a confidence that keeps the union bound at the finding's.

The comparisons of iothread off and on hold the virtio-blk devices' event_idx equal: each boot
records it (the boots table's event_idx, inferred from the command line for older datasets),
and where a dataset's boots do not all have one known value, a comparison claims no coverage
and has no interval (same_event_idx): its number mixes the iothread's effect with event_idx's."""

from __future__ import annotations

import functools
import math
from dataclasses import replace

import numpy as np

from perfbook.analysis import decide
from perfbook.analysis.decide import fmt
from perfbook.analysis.findings import Finding, Measured, Takeaway, guest_transfer

from .analysis import PSEUDO, boots_table, per_repetition, storm_ratios, table, thread_runs
from .prose import accel

CONFIDENCE = 0.95  # every finding's (Finding's default)
HALF = 1 - (1 - CONFIDENCE) / 2  # each of two estimates a union bound combines


def boots_only(measure):
    """measure, whose estimate claims no coverage where it rests on fio runs inside one boot
    per variant (analysis.PSEUDO in its basis): pseudo-replication leaves out the spread
    between boots, the chapter's unit of repetition, so its interval covers nothing known."""

    @functools.wraps(measure)
    def measured(run):
        got = measure(run)
        if got is not None and PSEUDO in got.estimate.basis:
            return Measured(replace(got.estimate, coverage=0.0), got.context)
        return got

    return measured


def event_idx_confound(run) -> str:
    """Why the dataset's boots do not hold event_idx equal ("" where they all have one known
    value): the values each variant's boots had."""
    b = boots_table(run.data)
    if not len(b):
        return ""
    levels = {v: sorted(set(g.event_idx)) for v, g in b.groupby("variant")}
    every = {x for xs in levels.values() for x in xs}
    if len(every) == 1 and "unknown" not in every:
        return ""
    said = "; ".join(f"iothread {v}: {', '.join(xs)}" for v, xs in sorted(levels.items()))
    return (
        f"no comparison at one event_idx (the boots' event_idx, {said}): the effect of the "
        "iothread is mixed with event_idx's"
    )


def same_event_idx(measure):
    """measure, whose estimate has no interval and claims no coverage where the dataset's boots
    do not all have one known event_idx (event_idx_confound); its basis says why. The run
    decides nothing, and a host's pooled verdict leaves it out (decide.pool skips an estimate
    without an interval)."""

    @functools.wraps(measure)
    def measured(run):
        got = measure(run)
        why = event_idx_confound(run) if got is not None else ""
        if why:
            e = got.estimate
            return Measured(
                replace(e, low=math.nan, high=math.nan, coverage=0.0, basis=f"{why}; {e.basis}"),
                got.context,
            )
        return got

    return measured


def compared(measure):
    """A comparison of iothread off and on: boots_only, at one event_idx (same_event_idx)."""
    return same_event_idx(boots_only(measure))


def _med(x) -> str:
    return fmt(float(np.median(x)))


def _quiet_threads(run):
    """thread_runs() of the dataset's jobs outside the storm; None where it has no thread
    samples."""
    if "threads" not in run:
        return None
    t = table(run.data, "threads")
    t = t[~t.storm]
    return thread_runs(t) if len(t) else None


def io_leaves_main_loop(run):
    """At the deepest queue (random reads first): the main loop's drop from iothread off to on,
    and the I/O thread's lead over the main loop with iothread on, both Hodges-Lehmann shifts in
    CPU s/s; the claim is that both are positive, so the number is the lesser of the two."""
    w = _quiet_threads(run)
    if w is None or not {"off", "on"} <= set(w.variant):
        return None
    job = max(set(w.job), key=lambda j: (int(j.rsplit("qd", 1)[1]), j.startswith("randread")))
    w = w[w.job == job]
    main, what = per_repetition(w, "variant", "main")
    io_on = per_repetition(w[w.variant == "on"], "variant", "iothread")[0]["on"]
    drop = decide.shift(main["off"], main["on"], HALF, what)
    lead = decide.shift(io_on, main["on"], HALF, what)
    return Measured(
        decide.lesser(
            drop, lead, basis=f"the lesser of two Hodges-Lehmann shifts over {what}, union bound"
        ),
        f"{job}: main loop {_med(main['off'])} s/s with iothread off, {_med(main['on'])} s/s on; "
        f"the I/O thread {_med(io_on)} s/s (medians); drop {fmt(drop.value)}, "
        f"lead {fmt(lead.value)} s/s",
    )


def qd1_randread(run):
    """QD1 4 KiB random reads outside the storm: the on/off IOPS ratio, folded above 1 (the
    claim is a change either way)."""
    if "fio" not in run:
        return None
    f = table(run.data, "fio")
    f = f[(f.job == "randread_qd1") & ~f.storm]
    if not {"off", "on"} <= set(f.variant):
        return None
    v, what = per_repetition(f, "variant", "iops")
    r = decide.ratio(v["on"], v["off"], CONFIDENCE, what)
    return Measured(
        decide.fold(r),
        f"on/off {fmt(r.value)}×: {'more' if r.value >= 1 else 'fewer'} with iothread on; "
        f"median IOPS off {_med(v['off'])}, on {_med(v['on'])}",
    )


def storm_hurts_off_more(run):
    """QD1 random reads under the QMP storm against without, per variant (storm / quiet IOPS);
    the number is on's storm/quiet over off's (above 1: the storm takes more from the guest
    without an iothread). Each boot runs the job with and without the storm, so each boot gives
    one storm/quiet ratio (analysis.storm_ratios): the ratio of the on boots' ratios to the off
    boots' is one Hodges-Lehmann ratio over boots, free of the spread of IOPS between boots.
    Where a dataset has one boot per variant (runs inside it: pseudo-replication), it is the
    union bound of the two ratios over those runs, and claims no coverage (boots_only)."""
    if "fio" not in run:
        return None
    f = table(run.data, "fio")
    f = f[f.job == "randread_qd1"]
    if not f.storm.any() or not {"off", "on"} <= set(f[f.storm].variant):
        return None
    v, what = per_repetition(f, ["variant", "storm"], "iops")
    if PSEUDO not in what:
        b = storm_ratios(f)
        r = {x: b[b.variant == x].ratio.to_numpy(float) for x in ("off", "on")}
        if min(len(x) for x in r.values()) == 0:
            return None
        each = "boots (each its storm/quiet ratio)"
        return Measured(
            decide.ratio(r["on"], r["off"], CONFIDENCE, each),
            f"storm/quiet IOPS with iothread off {_med(r['off'])}×, on {_med(r['on'])}× "
            "(medians over boots)",
        )
    r = {
        x: decide.ratio(v[(x, True)], v[(x, False)], HALF, what)
        for x in ("off", "on")
        if (x, False) in v
    }
    if len(r) < 2:
        return None
    return Measured(
        decide.divide(r["on"], r["off"], f"two ratios over {what}, union bound"),
        f"storm/quiet IOPS with iothread off {fmt(r['off'].value)}×, on {fmt(r['on'].value)}×",
    )


def bonnie_close(run):
    """bonnie++'s block write and block read, each as the on/off factor folded above 1; the
    claim is that both stay below 1.25, so the number is the greater of the two. Not measured
    where bonnie++ did not time one of them (it prints +++++ for a test too fast to time) or a
    dataset ran no bonnie++."""
    if "bonnie" not in run:
        return None
    b = table(run.data, "bonnie")
    b = b[b.item.isin(["block_output", "block_input"]) & b.value.notna()]
    items = ("block_output", "block_input")
    have = {(i, x) for i, x in zip(b.item, b.variant)}
    if not all((i, x) in have for i in items for x in ("off", "on")):
        return None
    v, what = per_repetition(b, ["item", "variant"], "value", "bonnie++ run")
    r = {i: decide.ratio(v[(i, "on")], v[(i, "off")], HALF, what) for i in items}
    seed = run.reference("virtio_blk_iothread")
    seed = seed[seed.kind == "bonnie_io"].pivot_table(
        index="item", columns="variant", values="value", aggfunc="first"
    )
    s = {i: seed.loc[i, "on"] / seed.loc[i, "off"] for i in items}
    return Measured(
        decide.greatest(
            *[decide.fold(r[i]) for i in items],
            basis=f"the greater of two ratios over {what}, union bound",
        ),
        f"on/off block write {fmt(r['block_output'].value)}× (2013: {fmt(s['block_output'])}×), "
        f"block read {fmt(r['block_input'].value)}× (2013: {fmt(s['block_input'])}×)",
    )


def boot_peaks(w):
    """One row per boot (round, boot, variant): `busier`, its busiest quiet fio job's median
    over that boot's runs of the greater of the vCPU thread(s) and QEMU's I/O threads, and
    that job's name."""
    per_job = w.groupby(["round", "boot", "variant", "job"], as_index=False)["busier"].median()
    top = per_job.sort_values("busier", kind="stable").groupby(["round", "boot", "variant"]).tail(1)
    return top.sort_values(["round", "boot"], kind="stable").reset_index(drop=True)


def none_saturated(run):
    """Each boot's peak: in its busiest fio job outside the storm, the busier of the vCPU
    thread(s) and QEMU's I/O threads together (main loop, I/O thread, workers), in CPU s/s
    (boot_peaks). The number is the median peak over every boot, iothread off and on alike,
    with its order-statistic interval: one value per boot, 10 boots where each variant has 5
    (97.9 %; a median per job and variant, each at its Bonferroni share, needs 8 boots per
    variant). With a fixed number of boots per variant the count of boots below the pooled
    median is a sum of two binomials, no more spread than one binomial of all the boots, so the
    interval's coverage is at least the binomial's. Where a dataset has one boot per variant
    (runs inside it), the greatest of the per-job-and-variant medians over those runs, which
    claims no coverage (boots_only)."""
    w = _quiet_threads(run)
    if w is None:
        return None
    w = w.assign(busier=np.maximum(w.vcpu, w.io))
    v, what = per_repetition(w, ["job", "variant"], "busier")
    if PSEUDO not in what:
        b = boot_peaks(w)
        jobs = ", ".join(
            f"{j} {n}×" for j, n in b.job.value_counts(sort=False).sort_index(kind="stable").items()
        )
        return Measured(
            decide.location(b.busier, CONFIDENCE, "boots (iothread off and on; each its peak)"),
            f"each boot's busiest job: {jobs}; vCPU thread up to {fmt(w.vcpu.max())}, QEMU's "
            f"I/O threads together up to {fmt(w.io.max())} s/s in any run",
        )
    k = len(v)
    each = 1 - (1 - CONFIDENCE) / k
    cells = {c: decide.location(x, each, what) for c, x in v.items()}
    top = max(cells, key=lambda c: cells[c].value)
    return Measured(
        decide.greatest(*cells.values(), basis=f"the greatest of {k} medians over {what}"),
        f"busiest {top[0]} with iothread {top[1]}; vCPU thread up to {fmt(w.vcpu.max())}, "
        f"QEMU's I/O threads together up to {fmt(w.io.max())} s/s in any run",
    )


FINDINGS = (
    Finding(
        "io_leaves_main_loop",
        "With iothread=on the disk's work leaves QEMU's main loop: at the deepest queue "
        "the main loop's CPU time falls, and the I/O thread's exceeds it",
        compared(io_leaves_main_loop),
        quantity="the lesser of the main loop's drop (off − on) and the I/O thread's lead "
        "over it (on)",
        side=">",
        threshold=0.0,
        unit="s/s",
        contrary="With iothread=on the main loop's CPU time does not fall, or the I/O thread "
        "does no more of the disk's work than the main loop",
        reproduce=(
            ".venv/bin/python -c \"from perfbook.qemu.guest import*;[run_script('echo;timeout 2 dd "
            "if=/dev/vda of=/dev/null bs=4k iflag=direct',GuestConfig([DiskSpec(size_mib=4096,"
            "cache='none',aio='native',iothread=i)],iothreads=['io0'],thread_names=1,"
            "on_line=lambda l,g:l or os.system(f'perf stat --per-thread -e task-clock -p{g.pid} "
            "sleep 1'))) for i in (None,'io0')]\""
        ),
    ),
    Finding(
        "qd1_randread",
        "An iothread changes QD1 4 KiB random-read IOPS by more than 5 %",
        compared(qd1_randread),
        quantity="IOPS factor between iothread on and off (larger / smaller)",
        side=">",
        threshold=1.05,
        unit="×",
        contrary="An iothread changes QD1 4 KiB random-read IOPS by 5 % or less",
        reproduce=(
            'head -c64M /dev/zero>/tmp/vbl.img;sync;.venv/bin/python -c "from perfbook.qemu.guest '
            "import*;[print(i,run_script('time -f%e seqread read -f /dev/vda -n 8000 -m rand -o "
            "/dev/null',GuestConfig([DiskSpec(path='/tmp/vbl.img',cache='none',aio='native',"
            "iothread=i)],iothreads=['io0'],files={'bin/seqread':'build/bin/seqread'})).output) "
            "for i in (None,'io0')]\";rm /tmp/vbl.img"
        ),
    ),
    Finding(
        "storm_hurts_off_more",
        "A QMP storm on QEMU's main loop takes a larger share of QD1 random-read IOPS from "
        "the guest without an iothread than from the guest with one",
        compared(storm_hurts_off_more),
        quantity="storm/quiet IOPS, iothread on ÷ off",
        side=">",
        threshold=1.0,
        unit="×",
        contrary="A QMP storm on QEMU's main loop does not take a larger share of QD1 "
        "random-read IOPS from the guest without an iothread than from the guest with one",
        reproduce=(
            '.venv/bin/python -c "from perfbook.qemu.guest import*;from perfbook.chapters.'
            "virtio_blk_iothread.collect import Storm;[print(i,s,run_script('echo;time -f%e "
            "seqread read -f /dev/vda -n 4000 -m rand -o /dev/null',GuestConfig([DiskSpec("
            "size_mib=64,cache='none',aio='native',iothread=i)],iothreads=['io0'],qmp=1,files="
            "{'bin/seqread':'build/bin/seqread'},on_line=lambda l,g:l or s and Storm(g.qmp,"
            "'query-block').start())).output.split()[-1]) for s in(0,1) for i in(None,'io0')]\""
        ),
    ),
    Finding(
        "bonnie_close",
        "bonnie++'s block write and block read rates each change by less than a factor of 1.25 "
        "between iothread off and on",
        compared(bonnie_close),
        quantity="the greater on/off factor of block write and read (larger / smaller)",
        side="<",
        threshold=1.25,
        unit="×",
        contrary="bonnie++'s block write or block read rate changes by a factor of 1.25 or more "
        "between iothread off and on",
        reproduce=(
            ".venv/bin/python -c \"from perfbook.qemu.guest import*;[print(i,run_script('time -f%e "
            "dd if=/dev/zero of=/dev/vda bs=8k count=8k oflag=direct status=none;time -f%e dd "
            "if=/dev/vda of=/dev/null bs=8k iflag=direct status=none',"
            "GuestConfig([DiskSpec(size_mib=64,cache='none',aio='native',iothread=i)],"
            "iothreads=['io0'])).output) for i in (None,'io0')]\""
        ),
    ),
    Finding(
        "none_saturated",
        "In most boots, iothread off and on alike, no fio job keeps the vCPU thread, or QEMU's "
        "I/O threads together, on a CPU for half of the job's time or more",
        boots_only(none_saturated),
        quantity="the median over boots of a boot's peak CPU (its busiest job's vCPU thread or "
        "QEMU's I/O threads)",
        side="<",
        threshold=0.5,
        unit="s/s",
        contrary="In half the boots or more, some fio job keeps the vCPU thread, or QEMU's I/O "
        "threads together, on a CPU for half of the job's time or more",
        reproduce=(
            ".venv/bin/python -c \"from perfbook.qemu.guest import*;[run_script('echo;for j in "
            "\\$(seq 32);do timeout 2 dd if=/dev/vda of=/dev/null bs=4k iflag=direct& done;wait',"
            "GuestConfig([DiskSpec(size_mib=4096,cache='none',aio='native',iothread=i)],"
            "iothreads=['io0'],thread_names=1,on_line=lambda l,g:l or os.system(f'perf stat "
            "--per-thread -e task-clock -p{g.pid} sleep 1'))) for i in (None,'io0')]\""
        ),
    ),
)


def _seed_text(D) -> str:
    ref = D.reference("virtio_blk_iothread")
    b = ref[(ref.kind == "bonnie_io") & (ref["item"] == "block_input")].set_index("variant")[
        "value"
    ]
    return (
        f"2013 (QEMU 1.3 data plane, KVM, Fedora 18): bonnie++ block input {fmt(b['on'])} KiB/s "
        f"with the data plane against {fmt(b['off'])} without, {fmt(b['on'] / b['off'])}×"
    )


_TRANSFER = guest_transfer(
    accel,
    under_tcg=(
        "The guests here ran under TCG (an emulated CPU): which thread does the disk's work "
        "carries over to KVM; what an iothread gains in throughput may not"
    ),
    under_kvm="The guests ran under KVM: expect the same split of work on a bare-metal KVM host",
)


TAKEAWAY = Takeaway(
    finding="io_leaves_main_loop",
    mechanism="With iothread= the virtqueue's requests are served by an AioContext of their own "
    "instead of QEMU's main loop.",
    seed=_seed_text,
    transfer=_TRANSFER,
)
