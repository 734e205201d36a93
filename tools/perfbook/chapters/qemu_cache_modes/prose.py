"""qemu_cache_modes, prose: every value the prose quotes, formatted as it shows them (D: the
chapter's analysis.CacheData). One function per section of the chapter; values() has them all.
platform_notes() adds the guests' accelerator to the platform banner."""

from __future__ import annotations

from perfbook.analysis import stats
from perfbook.analysis.findings import per_host_note, sections
from perfbook.data import machine

from . import analysis as A
from . import tables as V
from .parse import DD_BS, MODES, SEM_WRITE


def method(D) -> dict:
    """The datasets, the quoted host and tools, and the parameters the Method section names."""
    man, p, ref = D.quoted, D.p, D.ref
    h, facts, tools = man.host, man.facts, man["tools"]
    default = D.chapter.profiles["default"]
    disk = facts.get("host_disk", {})
    return {
        "seed_date": ref.date.iloc[0],
        "seed_year": ref.date.iloc[0][:4],
        "n_datasets": len(D.manifests),
        "n_hosts": len(D.hosts),
        "rep_datasets": len(D.manifests),
        "newest_host": h["host_id"],
        "newest_desc": h["description"],
        "newest_kernel": h["kernel_release"],
        "newest_virt": h["virtualization"],
        "newest_machine": dict(machine.facts(h))["machine"],
        "newest_date": man["started"][:10],
        "qemu_img_version": tools.get("qemu-img", "?")
        .split("(")[0]
        .replace("qemu-img version", "")
        .strip(),
        "strace_version": tools.get("strace", "?").replace("strace -- version", "").strip(),
        "p_sem_writes": p["sem_writes"],
        "p_sem_write_kib": SEM_WRITE // 1024,
        "p_bench_size_kib": p["bench_size"] // 1024,
        "p_bench_count": p["bench_count"],
        "p_bench_min_ms": p["bench_min_ms"],
        "p_bench_image_mib": p["bench_image_mib"],
        "p_depths": " and ".join(map(str, p["bench_depths"])),
        "p_depth_max": max(p["bench_depths"]),
        "p_flush": " and ".join(str(x) for x in p["bench_flush_intervals"] if x),
        "p_bench_warmup": p["bench_warmup"],
        "p_bench_target_pct": f"{100 * p.get('bench_target', default['bench_target']):g}",
        "p_bench_budget_default": f"{default['bench_budget_s']:.0f}",
        "p_bench_min_default": default["bench_min_runs"],
        "p_bench_main_default": max(default["bench_min_runs"], default["bench_main_runs"]),
        "p_guest_boots": p.get("guest_boots") or 1,  # one boot per mode before the parameter
        "p_guest_boots_full": D.chapter.profiles["full"]["guest_boots"],
        "p_host_dd_budget_default": f"{default['host_dd_budget_s']:.0f}",
        "p_dd_mib": p["dd_mib"],
        "p_dd_kib": DD_BS // 1024,
        "p_dd_count": p["dd_mib"] * 1024 * 1024 // DD_BS,
        "p_dd_repeats": p["dd_repeats"],
        "p_dd_warmup": p["dd_warmup"],
        "p_guest_mem": p["guest_memory_mib"],
        "p_sample_ms": p["sample_ms"],
        "scratch_fs": facts.get("scratch_fs", {}).get("fstype"),
        "host_disk": f"{disk.get('device')} ({disk.get('driver')}, write cache: {disk.get('write_cache')})",
    }


def semantics(D) -> dict:
    """The traced semantics: agreement with the manual, syncs per phase, the seed's switches."""
    sem, raw = D.sem, D.raw
    chk = A.check_documented(sem)
    out = {
        "n_sem_rows": len(sem),
        "n_sem_agree": int(chk["agrees"].sum()),
        "n_o_dsync": int(sem["o_dsync"].sum() + sem["dsync_writes"].gt(0).sum()),
        "n_fmt": sem.format.nunique(),
    }
    for m in MODES:
        out[f"spw_{m}"] = f"{raw.loc[m, 'syncs_per_write']:.0f}"
        out[f"sfl_{m}"] = int(raw.loc[m, "syncs_flush"])
        out[f"scl_{m}"] = int(raw.loc[m, "syncs_close"])
    cmp_sem = V.seed_semantics(D)
    out.update(n_seed_sem_same=int(cmp_sem["same as 2013"].sum()), n_modes=len(cmp_sem))
    return out


def bench(D) -> dict:
    """qemu-img bench: raw writes per mode, what syncs, flushes, depth and the page cache do."""
    return {**bench_rates(D), **bench_tests(D)}


def bench_rates(D) -> dict:
    """bench() without its rank tests, which cost more than all the rest (a key finding reads
    only the rates)."""
    bs, p = D.bs, D.p
    # the first row of each configuration, found once: filtering bs by five columns for each of
    # the ~30 values cost more than the rest of the section
    first: dict = {}
    for i, k in enumerate(zip(bs.op, bs.depth, bs.flush_interval, bs["mode"], bs.format)):
        first.setdefault(k, i)

    def med(op, d, fi, m, f="raw"):
        return bs.iloc[first.get((op, d, fi, m, f), len(bs))]  # none: IndexError, as before

    d1, dn = min(p["bench_depths"]), max(p["bench_depths"])
    fmax = max(p["bench_flush_intervals"])
    out = {}
    for m in MODES:
        r = med("write", d1, 0, m)
        out[f"bw_{m}"] = f"{r['median']:,.0f}"
        out[f"bwci_{m}"] = f"{r.ci_low:,.0f}–{r.ci_high:,.0f}"
        out[f"lat_{m}"] = f"{r.latency_us:,.0f}"
        out[f"bwf_{m}"] = f"{med('write', d1, fmax, m)['median']:,.0f}"
        out[f"bwd_{m}"] = f"{med('write', dn, 0, m)['median']:,.0f}"
        out[f"br_{m}"] = f"{med('read', d1, 0, m)['median']:,.0f}"
    w = {m: med("write", d1, 0, m) for m in MODES}
    out.update(
        sync_cost_us=f"{w['writethrough'].latency_us - w['writeback'].latency_us:,.0f}",
        o_direct_extra_us=f"{w['directsync'].latency_us - w['none'].latency_us:,.0f}",
        wb_over_wt=f"{w['writeback']['median'] / w['writethrough']['median']:.1f}",
        wb_flush_drop=f"{w['writeback']['median'] / med('write', d1, fmax, 'writeback')['median']:.1f}",
        none_depth_gain=f"{med('write', dn, 0, 'none')['median'] / w['none']['median']:.1f}",
        read_cache_gain=f"{med('read', d1, 0, 'writeback')['median'] / med('read', d1, 0, 'none')['median']:.1f}",
        d1=d1,
        dn=dn,
        fmax=fmax,
        bench_cv_max=f"{bs.cv.max():.2f}",
        bench_cv_med=f"{bs.cv.median():.2f}",
        bench_cv_said=cv_said(D, bs.cv.median()),
        bench_n=int(bs.n.min()),
    )
    if "qcow2" in set(bs.format):
        q = bs[(bs.op == "write") & (bs.depth == d1) & (bs.flush_interval == 0)].pivot(
            index="mode", columns="format", values="median"
        )
        out.update(
            qcow2_ratio_lo=f"{(q.qcow2 / q.raw).min():.2f}",
            qcow2_ratio_hi=f"{(q.qcow2 / q.raw).max():.2f}",
        )
    return out


def bench_tests(D) -> dict:
    """Each mode against none, per bench configuration (rank tests)."""
    CB = A.compare_modes(D.bench)
    main = V.main_bench(CB, min(D.p["bench_depths"]))
    return {
        "compare_method": stats.COMPARE_METHOD,
        "sig_bench_text": stats.significance_text(CB),
        "cmp_bench_main": "; ".join(main.verdict)
        if len(main)
        else "not measured (fewer than two runs per mode)",
    }


def host_kind(D) -> tuple[dict, bool, str]:
    """The quoted host's facts, whether it is a guest, and its disk as the prose names it."""
    h, disk = D.quoted.host, D.quoted.facts.get("host_disk", {})
    guest = (h.get("virtualization") or "none") != "none"
    return h, guest, f"{disk.get('device')}, {disk.get('driver')}"


def virtual_disk(D) -> bool | None:
    """True: a virtio disk of a guest; False: a disk of a bare-metal host; None: cannot tell (a
    guest's disk with another driver may be emulated or passed through)."""
    h, guest, _ = host_kind(D)
    if not guest:
        return False
    return (
        True
        if str(D.quoted.facts.get("host_disk", {}).get("driver", "")).startswith("virtio")
        else None
    )


def cv_said(D, cv_med) -> str:
    """How much the bench's runs vary, and what the quoted host is (its manifest)."""
    h, guest, disk = host_kind(D)
    where = f"on the quoted host ({dict(machine.facts(h))['machine']}; scratch disk {disk})"
    if cv_med >= 0.05:
        return (
            f"Runs of one configuration vary this much {where}, so the intervals, not the points, are "
            "what a comparison can rely on."
        )
    return (
        f"Runs of one configuration agree closely {where}; still, a comparison rests on the intervals, "
        "not on the points."
    )


def accel_effect(D) -> dict:
    """What the guests' accelerator (guest_boots.accel) does to the guest's figures."""
    accels = set(D.gs.accel)
    h = D.quoted.host
    host_side = "the host side (pwrite, fdatasync and the page cache) runs at native speed"
    if accels == {"tcg"}:
        lead = (
            "The guests ran under TCG: every guest instruction is translated and run by QEMU on the host "
            "CPU, so the guest's own work (filling its page cache, building requests, the virtio "
            f"notifications) is much slower than on hardware, while {host_side}."
        )
    elif accels == {"kvm"}:
        lead = (
            "The guests ran under KVM: their instructions run natively on the host CPU, and each virtio "
            f"notification costs an exit to the hypervisor and QEMU, while {host_side}."
        )
    else:
        lead = (
            f"The guests ran under {D.acc}, differently from boot to boot: under TCG the guest's own work "
            f"is emulated, under KVM it runs natively; either way {host_side}."
        )
    note = D.boots["accel_note"].iloc[0]
    if "tcg" in accels and "fallback" in note.lower():
        own = dict(machine.facts(h))["its own KVM"]
        kvm = (
            f"The quoted host ({dict(machine.facts(h))['machine']}; its own KVM: {own}) did not boot the "
            "KVM guest in time, so tools/perfbook/qemu/guest.py fell back to TCG and labels every result."
        )
    elif "tcg" in accels:
        kvm = "TCG was chosen for these guests, not forced by the host; every result is labelled with it."
    else:
        kvm = "No guest fell back to TCG."
    return {
        "accel_effect": lead,
        "kvm_said": kvm,
        "rk_2_note": "Under TCG that column measures the emulated CPU, as explained above."
        if accels == {"tcg"}
        else "It compares the guest's whole write path, not the modes alone.",
    }


def guest(D) -> dict:
    """The seed's guest test: the accelerator, the stamps, our figures and the seed's."""
    return {**guest_rates(D), **guest_tests(D)}


def guest_rates(D) -> dict:
    """guest() without its rank tests, which cost more than all the rest (a key finding and the
    platform note read only the rates and the accelerator)."""
    gs, boots, ref = D.gs, D.boots, D.ref
    tt = A.guest_dd_table(D.gdd)
    out = {
        "accel": D.acc,
        "accel_note": boots["accel_note"].iloc[0],
        "boot_s": f"{boots.boot_seconds.median():.1f}",
        "stamp_ms": f"{tt.stamp_us.median() / 1000:.1f}",
        "stamp_pct": f"{100 * (tt.stamp_us / (tt.t1_us - tt.t0_us)).median():.0f}",
    }
    G = gs.set_index(["mode", "variant"])["median"]
    S = A.seed_dd(ref).set_index(["mode", "variant"])["mb_per_s"]
    for m in MODES:
        for v in ("normal", "direct"):
            out[f"g_{m}_{v}"] = f"{G[(m, v)]:,.0f}"
    for m in ("host", "directsync", "writethrough", "none"):
        for v in ("normal", "direct"):
            out[f"s_{m}_{v}"] = f"{S[(m, v)]:g}"
    H = D.hs.set_index("variant")["median"]
    rng_ = A.seed_dd(ref).dropna(subset=["low"]).iloc[0]
    norm, dirg = gs[gs.variant == "normal"], gs[gs.variant == "direct"]
    sp, op_ = (
        S[("directsync", "direct")] / S[("none", "direct")],
        G[("directsync", "direct")] / G[("none", "direct")],
    )
    out.update(
        h_normal=f"{H['normal']:,.0f}",
        h_direct=f"{H['direct']:,.0f}",
        s_range=f"{rng_.low:g}–{rng_.high:g}",
        seed_pen=f"{sp:.2f}",
        our_pen=f"{op_:.2f}",
        seed_pen_wt=f"{S[('writethrough', 'direct')] / S[('none', 'direct')]:.2f}",
        our_pen_wt=f"{G[('writethrough', 'direct')] / G[('none', 'direct')]:.2f}",
        normal_spread=f"{norm['median'].max() / norm['median'].min():.2f}",
        direct_spread=f"{dirg['median'].max() / dirg['median'].min():.1f}",
        wbu_cv_max=f"{gs[gs['mode'].isin(['writeback', 'unsafe'])].cv.max():.2f}",
        dd_n=int(gs.n.min()),
        guest_cpus=boots.qemu_cmdline.iloc[0].split("-smp ")[1].split()[0],
        **seed_environment(ref),
    )
    if op_ >= 1:
        pen = "On this host the per-write sync no longer makes directsync slower than none with oflag=direct."
    elif op_ > sp:
        pen = (
            f"With oflag=direct the per-write sync still leaves directsync's median below none's, but the "
            f"penalty shrank: directsync now keeps {op_:.0%} of none's rate instead of {sp:.0%}."
        )
    else:
        pen = (
            f"The penalty of the per-write sync is as large as in {ref.date.iloc[0][:4]} or larger."
        )
    s_norm = f"directsync {S[('directsync', 'normal')]:g}, none {S[('none', 'normal')]:g} MB/s"
    spread_n = norm["median"].max() / norm["median"].min()
    if spread_n >= 1.5:
        normal = (
            "The modes differ this much even here, so the host side shows through the guest's own path; "
            f"the seed's normal-write column ({s_norm}) is set beside ours in the figure."
        )
    elif set(gs.accel) == {"tcg"}:
        normal = (
            "That is what a common bottleneck in the emulated CPU, the same in every mode, would produce, "
            f"so absolute guest throughput does not carry over: the seed's normal-write column ({s_norm}) "
            "cannot be compared with ours."
        )
    else:
        normal = (
            "Without oflag=direct the modes share the guest's own path (its page cache and the virtio "
            f"queue), which hides their differences; the seed's normal-write column ({s_norm}) is set "
            "beside ours in the figure, not compared."
        )
    shrank = sp < op_ < 1
    vd = virtual_disk(D)
    _, _, disk = host_kind(D)
    bare = sum(
        1
        for hid in D.hosts
        if next((m.host.get("virtualization") for m in D.manifests if m.host_id == hid), None)
        == "none"
    )
    measured = (
        "no bare-metal host has measured this chapter yet, so the cause is not measured"
        if not bare
        else f"{bare} bare-metal host(s) measured this chapter (Hosts side by side, below)"
    )
    if vd:
        cause = (
            f"The quoted host's disk ({disk}) is a virtual disk whose flushes go to the hypervisor below "
            f"it. {'That may be why the penalty shrank; ' if shrank else ''}{measured}."
        )
    elif vd is False:
        cause = (
            f"The quoted host runs on bare metal, so its fdatasync reaches a physical disk ({disk})"
            f"{'; the data do not say why the penalty shrank' if shrank else ''}."
        )
    else:
        cause = (
            f"Whether the quoted host's disk ({disk}) is emulated or passed through to it is not recorded"
            f"{', so the data do not say why the penalty shrank' if shrank else ''}."
        )
    out.update(normal_said=normal, pen_cause=cause, **accel_effect(D), **throttle(D))
    out.update(pen_sentence=pen)
    return out


def guest_tests(D) -> dict:
    """Each mode against none on the guest's oflag=direct runs (rank tests)."""
    CG = A.compare_modes(A.guest_dd_table(D.gdd).query("variant == 'direct'"))
    return {"cmp_guest_direct": "; ".join(CG.verdict) if len(CG) else "not measured"}


def throttle(D) -> dict:
    """Could the host's dirty-page limits have throttled the guests' writes? The global limits
    (vm.dirty_*_ratio of the dirtyable memory, at least the free memory sampled) against the
    host's Dirty peak; a container's memory cgroup has limits of its own, which are not recorded."""
    vm = D.quoted.facts.get("vm_dirty") or {}
    ps, pc = D.samples, D.pc
    if not vm or ps is None or ps.empty or "memfree_kb" not in ps:
        return {
            "throttle_said": "The dataset does not record the host's dirty-page limits, so whether they "
            "throttled these writes is not known."
        }
    bg = float(vm["dirty_background_ratio"])
    free = ps.memfree_kb.min() / 1024
    thr = bg / 100 * free
    peak = pc.dirty_peak_kb.max() / 1024
    said = (
        f"Host Dirty peaked at {peak:,.0f} MiB during the guests' runs. The kernel starts background "
        f"writeback at vm.dirty_background_ratio = {bg:g} % of its dirtyable memory (the free memory less "
        "the kernel's reserves, plus the file cache), and throttles writers only above that: here about "
        f"{thr:,.0f} MiB or more ({bg:g} % of the smallest MemFree sampled, {free:,.0f} MiB). "
    )
    said += (
        "So the global dirty limits did not throttle these writes"
        if peak < thr / 2
        else "So the global dirty limits may have come into play; the chapter did not record throttling"
    )
    cont = D.quoted.host.get("container")
    said += (
        f"; the host ran in a {cont} container, whose memory cgroup has dirty limits of its own that the "
        "dataset does not record."
        if cont not in (None, "none")
        else "."
    )
    return {"throttle_said": said}


def seed_environment(ref) -> dict:
    """The seed's QEMU, host and guest memory and dd size, from its environment text."""
    env = ref[ref.kind == "dd"].environment.iloc[0]

    def after(key, end=","):
        return env.split(key)[1].split(end)[0] if key in env else "?"

    return {
        "seed_qemu": after("qemu "),
        "seed_host_mem": after("host memory "),
        "seed_guest_mem": after("guest memory "),
        "seed_dd_size": after("count=8K (", ")"),
    }


def memory(D) -> dict:
    """The host's copy of the guest's data: residency, Dirty, Writeback, Cached per mode."""
    mem, pc, gb = D.mem, D.pc, D.boots.drop_duplicates("mode", keep="last").set_index("mode")
    out = {}
    for m in MODES:
        out[f"res_{m}"] = f"{mem.loc[m, 'image_resident_peak_mib']:.1f}"
        out[f"dirty_{m}"] = f"{mem.loc[m, 'dirty_growth_mib']:.1f}"
        out[f"wbk_{m}"] = f"{mem.loc[m, 'writeback_peak_mib']:.1f}"
        out[f"cg_{m}"] = f"{mem.loc[m, 'cached_growth_mib']:.1f}"
    full = all(
        mem.loc[m, "image_resident_peak_mib"] >= 0.95 * mem.loc[m, "disk_mib"]
        for m in ("writethrough", "writeback", "unsafe")
    )
    ps = D.samples
    u = ps[ps["mode"] == "unsafe"]
    base = ps["mode"].map(mem["cached_base_kb"])
    noise = (ps.cached_kb - base - ps.image_resident_kb.fillna(0)).abs().max()
    out.update(
        disk_mib=int(mem.disk_mib.max()),
        guest_copy=f"{(gb.guest_buffers_kb / 1024).median():.1f}",
        pc_samples=int(pc.samples.min()),
        res_note="in each case the whole disk" if full else "part of the disk",
        dirty_last_unsafe=f"{(u.dirty_kb.iloc[-1] - mem.loc['unsafe', 'dirty_base_kb']) / 1024:.1f}",
        cached_noise=f"{noise / 1024:.0f}",
    )
    return out


def ranking(D) -> dict:
    """The three orderings, then and now, and the sentence on the speed orderings."""
    rk = V.rankings_table(D)
    out = {
        "n_rk": len(rk),
        "rank_rel_pct": f"{100 * A.RANK_REL_TOL:g}",
        "rank_mem_mib": f"{A.RANK_MEM_TOL_MIB:g}",
    }
    for i, r in rk.iterrows():
        out[f"rk_{i}_today"] = r["today"]
        out[f"rk_{i}_seed"] = r["2013 (seed)"]
        n = r["pairs ranked differently"]
        out[f"rk_{i}_n"] = "none" if not n else str(int(n))
        out[f"rk_{i}_diff"] = r["differences"] or "no pair is ranked differently"
    perf = rk[(rk.criterion == "performance") & ~rk["evidence today"].str.contains("without oflag")]
    diffs = [d for x in perf.differences for d in x.split("; ") if d]
    n_tie = sum(1 for d in diffs if " = " in d.split("today:")[1])
    if not diffs:
        out["disagree_sentence"] = "Today's speed orderings agree with the seed's."
    else:
        out["disagree_sentence"] = (
            f"In the two speed orderings that rest on the host's side (the guest's oflag=direct runs and the "
            f"host bench), {len(diffs)} pair comparisons differ from the seed's: {n_tie} where the seed saw "
            f"a step and today's figures are equal by the rule above, and {len(diffs) - n_tie} where today's "
            f"order is reversed."
        )
    return out


def hosts(D) -> dict:
    """The sentence on the hosts side by side."""
    CHB = V.host_compare(D)
    if len(CHB):
        return {
            "host_cmp_sentence": (
                f"Each host is compared with {CHB.baseline.iloc[0]} on the bench's raw writes per "
                f"mode ({stats.COMPARE_METHOD}): {stats.significance_text(CHB)}. The environment diff above "
                "lists the facts in which the hosts' manifests differ, QEMU's version among them."
            )
        }
    return {
        "host_cmp_sentence": (
            "Only one host has data for this chapter, so there is no second host to compare "
            "with and no environment diff. Another host's dataset would appear in the figure and table above, "
            "with a rank test per mode against this one."
        )
    }


def disk(D) -> dict:
    """What the quoted host's disk is (its manifest's host_disk and host facts), for the sentences
    on "none" as the middle ground and on durability."""
    vd = virtual_disk(D)
    _, _, name = host_kind(D)
    wc = D.quoted.facts.get("host_disk", {}).get("write_cache")
    below = ", and it is itself a virtual disk, so what finally holds the data is the hypervisor's storage"
    if wc == "write back":
        cache = f"The quoted host's disk reports a volatile write-back cache ({name}){below if vd else ''}."
    elif wc:
        cache = (
            f'The quoted host\'s disk reports "{wc}" ({name}), that is, no volatile cache'
            f"{', though as a virtual disk it cannot show what the hypervisor below does' if vd else ''}."
        )
    else:
        cache = "The dataset does not record whether the quoted host's disk has a volatile cache."
    if vd:
        dur = (
            f"A sync that reaches the quoted host's disk ({name}) reaches a virtual disk. Whether the data "
            "would survive a power cut depends on the hypervisor below, which cannot be seen from inside."
        )
    elif vd is False:
        dur = (
            f"A sync reaches the quoted host's physical disk ({name}); whether that disk's cache honours "
            "it was not tested (no power was cut)."
        )
    else:
        dur = f"Whether the quoted host's disk ({name}) is virtual is not recorded, so where a sync lands is not known."
    return {"none_cache_said": cache, "durability_said": dur}


def values(D) -> dict:
    """Every value the prose quotes."""
    return {
        **method(D),
        **semantics(D),
        **bench(D),
        **guest(D),
        **memory(D),
        **ranking(D),
        **hosts(D),
        **disk(D),
    }


# The sections the key findings and the platform banner read, not every value the prose quotes
# (perfbook.analysis.findings.sections: each dataset's values computed once, in the verdict store).
key_values = sections(semantics, bench_rates, guest_rates, memory)


def platform_notes(D) -> dict[str, list[str]]:
    """host_id -> the accelerator its QEMU guests ran under, for the platform banner."""
    return per_host_note(
        D,
        key_values,
        lambda g: (
            f"its QEMU guests ran under {g['accel']}"
            + (f" ({g['accel_note']})" if g.get("accel_note") else "")
        ),
    )
