"""qemu_cache_modes, findings: every value the prose quotes, formatted as it shows them (D: the
chapter's data.CacheData). One function per section of the chapter; findings() has them all."""
from __future__ import annotations

from ... import stats
from . import analysis as A
from . import views as V
from .spec import DD_BS, MODES, SEM_WRITE


def method(D) -> dict:
    """The datasets, the quoted host and tools, and the parameters the Method section names."""
    man, p, ref = D.quoted, D.p, D.ref
    h, facts, tools = man.host, man.facts, man["tools"]
    default = D.chapter.profiles["default"]
    disk = facts.get("host_disk", {})
    return {
        "seed_date": ref.date.iloc[0], "seed_year": ref.date.iloc[0][:4],
        "n_datasets": len(D.manifests), "n_hosts": len(D.hosts), "rep_datasets": len(D.manifests),
        "newest_host": h["host_id"], "newest_desc": h["description"],
        "newest_kernel": h["kernel_release"], "newest_virt": h["virtualization"],
        "newest_date": man["started"][:10],
        "qemu_img_version": tools.get("qemu-img", "?").split("(")[0].replace("qemu-img version", "").strip(),
        "strace_version": tools.get("strace", "?").replace("strace -- version", "").strip(),
        "p_sem_writes": p["sem_writes"], "p_sem_write_kib": SEM_WRITE // 1024,
        "p_bench_size_kib": p["bench_size"] // 1024, "p_bench_count": p["bench_count"],
        "p_bench_min_ms": p["bench_min_ms"], "p_bench_image_mib": p["bench_image_mib"],
        "p_depths": " and ".join(map(str, p["bench_depths"])), "p_depth_max": max(p["bench_depths"]),
        "p_flush": " and ".join(str(x) for x in p["bench_flush_intervals"] if x),
        "p_bench_warmup": p["bench_warmup"],
        "p_bench_target_pct": f'{100 * p.get("bench_target", default["bench_target"]):g}',
        "p_bench_budget_default": f'{default["bench_budget_s"]:.0f}',
        "p_bench_min_default": default["bench_min_runs"],
        "p_host_dd_budget_default": f'{default["host_dd_budget_s"]:.0f}',
        "p_dd_mib": p["dd_mib"], "p_dd_kib": DD_BS // 1024, "p_dd_count": p["dd_mib"] * 1024 * 1024 // DD_BS,
        "p_dd_repeats": p["dd_repeats"], "p_dd_warmup": p["dd_warmup"],
        "p_guest_mem": p["guest_memory_mib"], "p_sample_ms": p["sample_ms"],
        "scratch_fs": facts.get("scratch_fs", {}).get("fstype"),
        "host_disk": f'{disk.get("device")} ({disk.get("driver")}, write cache: {disk.get("write_cache")})'}


def semantics(D) -> dict:
    """The traced semantics: agreement with the manual, syncs per phase, the seed's switches."""
    sem, raw = D.sem, D.raw
    chk = A.check_documented(sem)
    out = {"n_sem_rows": len(sem), "n_sem_agree": int(chk["agrees"].sum()),
           "n_o_dsync": int(sem["o_dsync"].sum() + sem["dsync_writes"].gt(0).sum()),
           "n_fmt": sem.format.nunique()}
    for m in MODES:
        out[f"spw_{m}"] = f'{raw.loc[m, "syncs_per_write"]:.0f}'
        out[f"sfl_{m}"] = int(raw.loc[m, "syncs_flush"])
        out[f"scl_{m}"] = int(raw.loc[m, "syncs_close"])
    cmp_sem = V.seed_semantics(D)
    out.update(n_seed_sem_same=int(cmp_sem["same as 2013"].sum()), n_modes=len(cmp_sem))
    return out


def bench(D) -> dict:
    """qemu-img bench: raw writes per mode, what syncs, flushes, depth and the page cache do."""
    bs, p = D.bs, D.p

    def med(op, d, fi, m, f="raw"):
        r = bs[(bs.op == op) & (bs.depth == d) & (bs.flush_interval == fi) & (bs["mode"] == m) & (bs.format == f)]
        return r.iloc[0]
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
        d1=d1, dn=dn, fmax=fmax, bench_cv_max=f"{bs.cv.max():.2f}", bench_cv_med=f"{bs.cv.median():.2f}",
        bench_n=int(bs.n.min()))
    if "qcow2" in set(bs.format):
        q = bs[(bs.op == "write") & (bs.depth == d1) & (bs.flush_interval == 0)].pivot(
            index="mode", columns="format", values="median")
        out.update(qcow2_ratio_lo=f"{(q.qcow2 / q.raw).min():.2f}", qcow2_ratio_hi=f"{(q.qcow2 / q.raw).max():.2f}")
    CB = A.compare_modes(D.bench)
    main = V.main_bench(CB, d1)
    out.update(compare_method=stats.COMPARE_METHOD, sig_bench_text=stats.significance_text(CB),
               cmp_bench_main="; ".join(main.verdict) if len(main) else
               "not measured (fewer than two runs per mode)")
    return out


def guest(D) -> dict:
    """The seed's guest test: the accelerator, the stamps, our figures and the seed's."""
    gs, boots, ref = D.gs, D.boots, D.ref
    tt = A.guest_dd_table(D.gdd)
    out = {"accel": D.acc, "accel_note": boots["accel_note"].iloc[0],
           "boot_s": f"{boots.boot_seconds.median():.1f}",
           "stamp_ms": f"{tt.stamp_us.median() / 1000:.1f}",
           "stamp_pct": f"{100 * (tt.stamp_us / (tt.t1_us - tt.t0_us)).median():.0f}"}
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
    sp, op_ = S[("directsync", "direct")] / S[("none", "direct")], G[("directsync", "direct")] / G[("none", "direct")]
    out.update(
        h_normal=f"{H['normal']:,.0f}", h_direct=f"{H['direct']:,.0f}",
        s_range=f"{rng_.low:g}–{rng_.high:g}", seed_pen=f"{sp:.2f}", our_pen=f"{op_:.2f}",
        seed_pen_wt=f"{S[('writethrough', 'direct')] / S[('none', 'direct')]:.2f}",
        our_pen_wt=f"{G[('writethrough', 'direct')] / G[('none', 'direct')]:.2f}",
        normal_spread=f"{norm['median'].max() / norm['median'].min():.2f}",
        direct_spread=f"{dirg['median'].max() / dirg['median'].min():.1f}",
        wbu_cv_max=f"{gs[gs['mode'].isin(['writeback', 'unsafe'])].cv.max():.2f}",
        dd_n=int(gs.n.min()), guest_cpus=boots.qemu_cmdline.iloc[0].split("-smp ")[1].split()[0],
        **seed_environment(ref))
    if op_ >= 1:
        pen = "On this host the per-write sync no longer makes directsync slower than none with oflag=direct."
    elif op_ > sp:
        pen = (f"With oflag=direct the per-write sync still leaves directsync's median below none's, but the "
               f"penalty shrank: directsync now keeps {op_:.0%} of none's rate instead of {sp:.0%}.")
    else:
        pen = f"The penalty of the per-write sync is as large as in {ref.date.iloc[0][:4]} or larger."
    CG = A.compare_modes(A.guest_dd_table(D.gdd).query("variant == 'direct'"))
    out.update(pen_sentence=pen, cmp_guest_direct="; ".join(CG.verdict) if len(CG) else "not measured")
    return out


def seed_environment(ref) -> dict:
    """The seed's QEMU, host and guest memory and dd size, from its environment text."""
    env = ref[ref.kind == "dd"].environment.iloc[0]

    def after(key, end=","):
        return env.split(key)[1].split(end)[0] if key in env else "?"
    return {"seed_qemu": after("qemu "), "seed_host_mem": after("host memory "),
            "seed_guest_mem": after("guest memory "), "seed_dd_size": after("count=8K (", ")")}


def memory(D) -> dict:
    """The host's copy of the guest's data: residency, Dirty, Writeback, Cached per mode."""
    mem, pc, gb = D.mem, D.pc, D.boots.drop_duplicates("mode", keep="last").set_index("mode")
    out = {}
    for m in MODES:
        out[f"res_{m}"] = f"{mem.loc[m, 'image_resident_peak_mib']:.1f}"
        out[f"dirty_{m}"] = f"{mem.loc[m, 'dirty_growth_mib']:.1f}"
        out[f"wbk_{m}"] = f"{mem.loc[m, 'writeback_peak_mib']:.1f}"
        out[f"cg_{m}"] = f"{mem.loc[m, 'cached_growth_mib']:.1f}"
    full = all(mem.loc[m, "image_resident_peak_mib"] >= 0.95 * mem.loc[m, "disk_mib"]
               for m in ("writethrough", "writeback", "unsafe"))
    ps = D.samples
    u = ps[ps["mode"] == "unsafe"]
    base = ps["mode"].map(mem["cached_base_kb"])
    noise = (ps.cached_kb - base - ps.image_resident_kb.fillna(0)).abs().max()
    out.update(disk_mib=int(mem.disk_mib.max()), guest_copy=f"{(gb.guest_buffers_kb / 1024).median():.1f}",
               pc_samples=int(pc.samples.min()),
               res_note="in each case the whole disk" if full else "part of the disk",
               dirty_last_unsafe=f"{(u.dirty_kb.iloc[-1] - mem.loc['unsafe', 'dirty_base_kb']) / 1024:.1f}",
               cached_noise=f"{noise / 1024:.0f}")
    return out


def ranking(D) -> dict:
    """The three orderings, then and now, and the sentence on the speed orderings."""
    rk = V.rankings_table(D)
    out = {"n_rk": len(rk), "rank_rel_pct": f"{100 * A.RANK_REL_TOL:g}",
           "rank_mem_mib": f"{A.RANK_MEM_TOL_MIB:g}"}
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
            f"In the two speed orderings that carry over from TCG (the guest's oflag=direct runs and the "
            f"host bench), {len(diffs)} pair comparisons differ from the seed's: {n_tie} where the seed saw "
            f"a step and today's figures are equal by the rule above, and {len(diffs) - n_tie} where today's "
            f"order is reversed.")
    return out


def hosts(D) -> dict:
    """The sentence on the hosts side by side."""
    CHB = V.host_compare(D)
    if len(CHB):
        return {"host_cmp_sentence": (
            f"Each host is compared with {CHB.baseline.iloc[0]} on the bench's raw writes per "
            f"mode ({stats.COMPARE_METHOD}): {stats.significance_text(CHB)}. The environment diff above "
            "lists the facts in which the hosts' manifests differ, QEMU's version among them.")}
    return {"host_cmp_sentence": (
        "Only one host has data for this chapter, so there is no second host to compare "
        "with and no environment diff. Another host's dataset would appear in the figure and table above, "
        "with a rank test per mode against this one.")}


def findings(D) -> dict:
    """Every value the prose quotes."""
    return {**method(D), **semantics(D), **bench(D), **guest(D), **memory(D), **ranking(D), **hosts(D)}
