"""Key findings of the virtio_blk_iothread chapter, computed per dataset (perfbook.analysis.findings)."""

from __future__ import annotations

from perfbook.analysis.findings import Finding, Outcome

from .analysis import bonnie_beside_seed, cpu_rates, effects, storm_effects, table


def _eff(r) -> str:
    return f"{100 * r.rel_shift:+.1f} % (CI {100 * r.rel_low:+.1f} to {100 * r.rel_high:+.1f} %)"


def _effect(run, job: str, storm: bool = False):
    """effects() of one job (its rows alone: each job's comparison is its own)."""
    fio = table(run.data, "fio")
    e = effects(fio[(fio.job == job) & (fio.storm == storm)] if len(fio) else fio)
    return e.iloc[0] if len(e) else None


def _rates(run):
    """CPU seconds per second of each thread class, outside the storm (two findings read it)."""
    t = table(run.data, "threads")
    return cpu_rates(t[~t.storm]) if len(t) else None


def io_leaves_main_loop(run):
    r = _rates(run)
    if r is None or not {"off", "on"} <= set(r.variant):
        return None
    job = max(set(r.job), key=lambda j: (int(j.rsplit("qd", 1)[1]), j.startswith("randread")))
    g = r[r.job == job].set_index(["variant", "cls"])["rate"]
    main_off, main_on, io_on = (
        g.get(("off", "main"), 0.0),
        g.get(("on", "main"), 0.0),
        g.get(("on", "iothread"), 0.0),
    )
    return Outcome(
        bool(main_on < main_off and io_on > main_on),
        f"{job}: main loop {main_off:.2f} s/s with iothread off, {main_on:.2f} s/s on; "
        f"the I/O thread {io_on:.2f} s/s",
    )


def qd1_randread(run):
    e = _effect(run, "randread_qd1")
    if e is None:
        return None
    return Outcome(
        bool(abs(e.rel_shift) > 0.05 and (e.rel_low > 0 or e.rel_high < 0)),
        f"QD1 randread IOPS, iothread on against off: {_eff(e)}",
    )


def storm_hurts_off_more(run):
    s = storm_effects(table(run.data, "fio"))
    s = s[s.job == "randread_qd1"].set_index("variant") if len(s) else s
    if not len(s) or not {"off", "on"} <= set(s.index):
        return None
    off, on = s.loc["off"], s.loc["on"]
    return Outcome(
        bool(off.rel_high < 0 and on.rel_shift > off.rel_high),
        f"QD1 randread IOPS under the QMP storm against without: iothread off {_eff(off)}, "
        f"on {_eff(on)}",
    )


def bonnie_close(run):
    b = bonnie_beside_seed(run.data)
    b = b.set_index("test")
    if "ours on/off" not in b.columns:
        return None
    items = [
        i
        for i in ("block_output", "block_input")
        if i in b.index and b.loc[i, "ours on/off"] == b.loc[i, "ours on/off"]
    ]
    if not items:
        return None
    ok = all(0.8 <= b.loc[i, "ours on/off"] <= 1.25 for i in items)
    return Outcome(
        ok,
        "; ".join(
            f"{i.replace('_', ' ')} on/off {b.loc[i, 'ours on/off']:.2f} "
            f"(2013: {b.loc[i, '2013 on/off']:.2f})"
            for i in items
        ),
    )


def none_saturated(run):
    r = _rates(run)
    if r is None or not len(r):
        return None
    w = r.pivot_table(
        index=["job", "variant"], columns="cls", values="rate", aggfunc="first"
    ).fillna(0.0)
    io = sum(w[c] for c in ("main", "iothread", "worker") if c in w.columns)
    vc = w["vcpu"] if "vcpu" in w.columns else 0.0 * io
    return Outcome(
        bool(vc.max() < 0.5 and io.max() < 0.5),
        f"vCPU thread {vc.min():.2f} to {vc.max():.2f} s/s; main loop, I/O thread and workers together "
        f"{io.min():.2f} to {io.max():.2f} s/s, over {len(w)} job × variant cells",
    )


FINDINGS = (
    Finding(
        "io_leaves_main_loop",
        "With iothread=on the disk's work leaves QEMU's main loop: at the deepest queue "
        "the main loop's CPU time falls, and the I/O thread's exceeds it",
        io_leaves_main_loop,
        contrary="With iothread=on the main loop still does as much of the disk's work as the I/O thread",
    ),
    Finding(
        "qd1_randread",
        "An iothread changes QD1 4 KiB random-read IOPS by more than 5 %, with an interval "
        "that excludes zero",
        qd1_randread,
        contrary="An iothread does not change QD1 4 KiB random-read IOPS measurably (by more than 5 %)",
    ),
    Finding(
        "storm_hurts_off_more",
        "A QMP storm on QEMU's main loop costs the guest without an iothread QD1 "
        "random-read IOPS, and costs the guest with one less",
        storm_hurts_off_more,
        contrary="A QMP storm on QEMU's main loop does not cost the guest without an iothread measurably more "
        "than the guest with one",
    ),
    Finding(
        "bonnie_close",
        "As the 2013 article concluded, bonnie++'s block write and read rates differ by less "
        "than 20 % between iothread on and off",
        bonnie_close,
        contrary="bonnie++'s block write or read rate differs by 20 % or more between iothread on and off",
    ),
    Finding(
        "none_saturated",
        "In every fio job the vCPU thread, and QEMU's I/O threads together, each stay below half "
        "a CPU: no thread is saturated, and a request's time goes to hand-offs and waiting",
        none_saturated,
        contrary="In some fio job the vCPU thread or QEMU's I/O threads use half a CPU or more",
    ),
)
