"""virtio_blk_latency: every value the prose quotes, formatted as it shows them (D: the
chapter's analysis.VirtioData). One function per section of the chapter; values() has them all,
NOTE the one the platform note reads (the key findings decide on numbers: key_findings.py)."""

from __future__ import annotations

import math

from perfbook.analysis import stats
from perfbook.analysis.findings import per_host_note, sections
from perfbook.data.machine import kind, short_kind

from . import analysis as A
from . import tables as T
from .parse import AIO, QEMU_CORE_EVENTS, VARIANTS


def seed(D) -> dict:
    ref = D.ref
    sd = A.seed_delta(ref).set_index("layer")
    return {
        "seed_year": ref.date.iloc[0][:4],
        "seed_date": ref.date.iloc[0],
        "seed_hostio_pct": f"{sd.delta_pct['Host I/O']:.0f}",
        "seed_qemu_pct": f"{sd.delta_pct['QEMU']:.0f}",
        "seed_guest_pct": f"{sd.delta_pct['Guest']:.0f}",
        "seed_switch_pct": f"{sd.delta_pct['Host/guest switching'] + sd.delta_pct['Host/QEMU switching']:.1f}",
        "seed_env": ref[ref.kind == "cumulative"].environment.iloc[0],
    }


def method(D) -> dict:
    man, p, jobs, guest_jobs = D.quoted, D.p, D.jobs, D.guest_jobs
    h, ex, ga = (
        man.host,
        man.facts.get("virtio_blk_latency", {}),
        man.facts.get("guest_artefacts", {}),
    )
    rp = D.of_quoted(D["repetition"])
    notes = guest_jobs.accel_note.dropna()
    qemu = (
        man["tools"]
        .get("qemu-system", "?")
        .split("(")[0]
        .replace("QEMU emulator version", "")
        .strip()
    )
    return {
        "n_datasets": len(D.manifests),
        "n_hosts": len(D.hosts),
        "host_id": h["host_id"],
        "host_desc": h.get("description", ""),
        "host_kernel": h["kernel_release"],
        "host_virt": h.get("virtualization", "none"),
        "host_kind": kind(h),
        "run_date": man["started"][:10],
        "accel": D.acc,
        "accel_note": notes.iloc[0] if len(notes) else "",
        "qemu_version": qemu,
        "guest_kernel": f"{ga.get('kernel_package', '?')} {ga.get('kernel_version', '')}".strip(),
        "p_requests": p["requests"],
        "p_warmup": p["warmup"],
        "n_rounds": int(jobs["round"].nunique()),
        "rep_stopped": rp.stopped_by.iloc[0].replace("_", " ") if len(rp) else "fixed repetition",
        "rep_target_pct": f"{100 * p['rep_target']:.0f}",
        "rep_budget_s": f"{p['rep_budget_s']:.0f}",
        "rep_min": p["rep_min_runs"],
        "rep_max": p["rep_max_runs"],
        "rep_widest": widest_interval(rp),
        "p_image_mib": p["image_mib"],
        "p_aio": ", ".join(p["aio"]),
        "p_boots": boots_text(guest_jobs),
        "n_boots": len(guest_jobs),
        "n_requests": int((D.req.warm == 0).sum()),
        "tsc_ghz": f"{float(guest_jobs.tsc_hz.median()) / 1e9:.3f}",
        "host_disk": ex.get("host_block_device", {}).get("name", "not traced"),
        "n_qemu_events": len(ex.get("qemu_events", [])),
        "qemu_events": ", ".join(ex.get("qemu_events", [])),
        "host_cpus": int(h.get("cpus_online") or 0),
        "host_disk_sentence": (
            f"The quoted host is itself a {short_kind(h)}, so the image's disk "
            f"({ex.get('host_block_device', {}).get('name', 'not traced')}) is a virtual disk too"
            if h.get("virtualization") not in (None, "none")
            else f"The quoted host is bare metal; the image's disk is "
            f"{ex.get('host_block_device', {}).get('name', 'not traced')}"
        ),
    }


def boots_text(guest_jobs) -> str:
    """A round's guest boots, per aio mode in the book's order: 'threads: plain, all;
    native: all' (the variants in VARIANTS' order)."""
    cells = set(zip(guest_jobs.aio, guest_jobs.variant))
    return "; ".join(
        f"{a}: " + ", ".join(v for v in VARIANTS if (a, v) in cells)
        for a in AIO
        if any(c[0] == a for c in cells)
    )


def widest_interval(rp) -> str:
    """The widest relative interval of a dataset's repetition table, as the method's sentence
    shows it; a dataset with one round per mode has none (one value has no interval)."""
    if not len(rp):
        return "fixed repetition, no interval recorded"
    widest = rp.rel_ci_width.max()
    if widest != widest:
        return "no interval: one round per mode"
    return f"widest interval {100 * widest:.1f} %"


def boot_cv_sentence(plain_cv: float, max_cv: float) -> str:
    """How much the boots' means vary (their coefficient of variation, %): the untraced guest
    benchmark's and the most of any row; one boot per configuration gives no spread."""
    if max_cv != max_cv:
        return "one boot per configuration, so no spread between boots to show"
    plain = (
        f"boot means vary with a CV of {plain_cv:.0f} %"
        if plain_cv == plain_cv
        else "one untraced boot, so its mean has no spread between boots"
    )
    return f"{plain}; no row of the tables varies by more than {max_cv:.0f} % between boots"


def alignment(D) -> dict:
    al, jobs = T.alignment(D), D.jobs
    width = al["bracket width (µs)"]
    out = {
        "n_aligned": len(al),
        "n_consistent": int(al.consistent.sum()),
        "bracket_median_us": f"{width.median():.1f}",
        "bracket_max_us": f"{width.max():.1f}",
        "bracket_min_us": f"{width.min():.1f}",
        "half_bracket_us": f"{width.max() / 2:.1f}",
        "lb_source": ", ".join(sorted(set(al["lower bound from"].dropna()))),
        "qc_lo_max": f"{al['QEMU clock check low (µs)'].max():.1f}",
        "qc_hi_min": f"{al['QEMU clock check high (µs)'].min():.1f}",
        "qc_all_zero": "kept at 0 in every boot"
        if (al["QEMU correction (µs)"].abs() < 1e-9).all()
        else "moved off 0 in some boots (see the table)",
    }
    span = D.req.groupby("job").t0.agg(lambda t: t.max() - t.min())
    aj = jobs[jobs.off_lo.notna()].set_index("job")
    if len(aj):
        span_s = span.reindex(aj.index) / aj.tsc_hz
        ppm = (aj.off_hi - aj.off_lo) / aj.tsc_hz / span_s * 1e6
        out.update(span_s=f"{span_s.min():.1f}", rate_ppm=f"{ppm.max():.0f}")
    else:
        out.update(span_s="n/a", rate_ppm="n/a")
    hz = float(D.guest_jobs.tsc_hz.median())
    out.update(
        calib_resid=f"{jobs.calib_resid_cyc.max():.0f}",
        calib_resid_ns=f"{jobs.calib_resid_cyc.max() / hz * 1e9:.0f}",
    )
    return out


def seed_tables(D) -> dict:
    """The cumulative and delta tables: ours (o_ all at once, c_ / d_ one layer per boot) and the seed's."""
    have, iv = D.have_seed_method, D.iv
    c, c1 = D.cum.set_index("key"), D.cum1.set_index("key")
    sc = A.seed_cumulative(D.ref).set_index("layer")
    sd = A.seed_delta(D.ref).set_index("layer")
    out = {"n_core_events": len(QEMU_CORE_EVENTS)}
    for k in c1.index:
        out[f"o_{k}_us"] = f"{c1.loc[k, 'mean_ns'] / 1000:.1f}"
        out[f"o_{k}_med_us"] = f"{c1.loc[k, 'median_ns'] / 1000:.1f}"
        out[f"c_{k}_us"] = f"{c.loc[k, 'mean_ns'] / 1000:.1f}" if have else "not measured"
    gb_plain = (c if have else c1).loc["guest_benchmark"]
    hb = c1.loc["host_benchmark", "mean_ns"]
    blk = (c if have else c1).loc["host_block", "mean_ns"]
    rb = blk / hb
    out.update(
        {
            "o_n": int(c1.loc["guest_virtio_pci", "n"]),
            "c_boots": int(c1.loc["guest_virtio_pci", "boots"]),
            "boot_cv_sentence": boot_cv_sentence(
                gb_plain.boot_cv_pct, max(c1.boot_cv_pct.max(), c.boot_cv_pct.max() if have else 0)
            ),
            "seed_guest_us": f"{sc.mean_ns['Guest benchmark'] / 1000:.1f}",
            "seed_host_us": f"{sc.mean_ns['Host benchmark'] / 1000:.1f}",
            "seed_paio_us": f"{sc.mean_ns['QEMU paio'] / 1000:.1f}",
            "plain_gb_us": f"{gb_plain.mean_ns / 1000:.1f}",
            "ratio_guest_host": f"{gb_plain.mean_ns / hb:.1f}",
            "seed_ratio_guest_host": f"{sc.mean_ns['Guest benchmark'] / sc.mean_ns['Host benchmark']:.2f}",
            "blk_us": f"{blk / 1000:.1f}",
            "blk_vs_hostbench": (
                f"{rb:.2f} times the host benchmark's whole pread() ({hb / 1000:.1f} µs): "
                "the same disk answers more slowly while the guest and QEMU keep the host's CPUs busy"
                if rb > 1.1
                else f"{rb:.2f} times the host benchmark's whole pread() ({hb / 1000:.1f} µs), "
                "so the disk answers the guest's reads about as fast as the host's own"
            ),
            # the distinct labels, not a Python loop over every request's string
            "kvm_source": ", ".join(sorted(set(iv.host_kvm_source.unique()) - {""}))
            or "not measured",
        }
    )
    d1, dd = A.delta_table(D.cum1).set_index("layer"), D.delta.set_index("layer")
    names = {
        "Guest": "guest",
        "Host/guest switching": "hgs",
        "Host/QEMU switching": "hqs",
        "QEMU": "qemu",
        "Host I/O": "hostio",
    }
    for lname, key in names.items():
        out[f"o_d_{key}_us"] = (
            f"{d1.loc[lname, 'delta_ns'] / 1000:.1f}" if lname in d1.index else "not measured"
        )
        out[f"o_d_{key}_pct"] = (
            f"{d1.loc[lname, 'delta_pct']:.1f}" if lname in d1.index else "not measured"
        )
        out[f"d_{key}_pct"] = (
            f"{dd.loc[lname, 'delta_pct']:.1f}" if lname in dd.index else "not measured"
        )
        out[f"sd_{key}_us"] = f"{sd.delta_ns[lname] / 1000:.1f}"
        out[f"sd_{key}_pct"] = f"{sd.delta_pct[lname]:.1f}"
    sw = sum(v for n, v in d1.delta_pct.items() if "switching" in n and "QEMU +" not in n)
    neg = [n for n in dd.index if dd.loc[n, "delta_ns"] < 0]
    out["o_d_switch_pct"] = f"{sw:.1f}"
    out["neg_sentence"] = (
        "All its deltas are positive."
        if not neg
        else "Its negative delta ({}) means that two rows measured in different boots, under "
        "different tracing, differ by more than the layer between them.".format(", ".join(neg))
    )
    return out


def tracing_cost(D) -> dict:
    ctrl, ref = T.control(D), D.ref
    out = {
        f"ctrl_{v}_us": f"{ctrl[v]:.1f}" if v in ctrl.index else "(not measured)"
        for v in ("plain", "guest", "qemu", "host", "boundary", "all")
    }
    out["trace_cost_pct"] = (
        f"{100 * (ctrl.get('all', math.nan) / ctrl.get('plain', math.nan) - 1):.0f}"
    )
    bt = T.boot_benchmarks(D)
    bt = bt[bt.aio == "threads"]
    a_, b_ = bt[bt.variant == "all"].guest_benchmark, bt[bt.variant == "plain"].guest_benchmark
    out["trace_verdict"] = (
        stats.compare(a_, b_, names=("all layers traced", "untraced")).verdict
        if min(len(a_), len(b_)) >= 2
        else "too few boots to test"
    )
    out["trace_boots"] = f"{len(a_)} and {len(b_)}"
    sctl = ref[ref.kind == "control"].value.astype(float)
    out.update(
        seed_ctrl_lo=f"{sctl.min() / 1000:.0f}",
        seed_ctrl_hi=f"{sctl.max() / 1000:.0f}",
        seed_ctrl_spread=f"{100 * (sctl.max() / sctl.min() - 1):.1f}",
    )
    both = (
        D.cum1.set_index("key")
        .mean_ns.to_frame("one")
        .join(D.cum.set_index("key").mean_ns.rename("seed"))
        .dropna()
    )
    both = both[~both.index.isin(["host_benchmark", "guest_benchmark"])]
    infl = 100 * (both.one / both.seed - 1)
    out.update(
        infl_min=f"{infl.min():.0f}" if len(infl) else "n/a",
        infl_max=f"{infl.max():.0f}" if len(infl) else "n/a",
    )
    return out


def distributions(D) -> dict:
    pct = T.percentiles(D)
    t = pct[(pct.aio == "threads")].set_index("layer")
    allp = pct.set_index("layer")
    tails = {r: t.loc[r, "p99"] / t.loc[r, "median"] for r in t.index}
    return {
        "gb_p99_over_med": f"{t.loc['guest benchmark', 'p99'] / t.loc['guest benchmark', 'median']:.1f}",
        "hb_p99_over_med": f"{allp.loc['host benchmark', 'p99'] / allp.loc['host benchmark', 'median']:.1f}",
        "blk_p99_over_med": f"{t.loc['host block device', 'p99'] / t.loc['host block device', 'median']:.1f}",
        "tail_heaviest": max(tails, key=tails.get),
        "tail_lightest": min(tails, key=tails.get),
    }


def aio_modes(D) -> dict:
    ref, aio = D.ref, D.p["aio"]
    sa = ref[ref.kind == "aio_bench"].set_index("item")["value"].astype(float)
    a = T.aio(D).set_index("aio")
    cmps = T.aio_tests(D)
    qa = A.boot_medians(D.iv[(D.iv.kind == "guest") & (D.iv.variant == "all")], "qemu_aio").assign(
        us=lambda d: d.qemu_aio / 1000
    )
    cq = (
        stats.compare_frame(qa, "aio", "us", baseline="threads")
        if qa.groupby("aio").size().min() >= 2
        else []
    )
    out = {
        "seed_aio_gap_us": f"{sa['threads'] - sa['native']:.1f}",
        "aio_order_untraced": A.order_text(
            {m: a.loc[m, "guest benchmark, median of boot medians (µs)"] for m in aio}
        ),
        "aio_order_qaio": A.order_text({m: a.loc[m, "QEMU aio (µs)"] for m in aio}),
        "aio_order_blk": A.order_text({m: a.loc[m, "host block device (µs)"] for m in aio}),
        "aio_order_virtio": A.order_text({m: a.loc[m, "QEMU virtio (µs)"] for m in aio}),
        "aio_verdicts": "; ".join(cmps.verdict) if len(cmps) else "too few boots to test",
        "qaio_verdicts": "; ".join(cq.verdict) if len(cq) else "too few boots to test",
        "seed_aio_threads": f"{sa['threads']:.1f}",
        "seed_aio_native": f"{sa['native']:.1f}",
        "seed_aio_gain": f"{sa['threads'] - sa['native']:.1f}",
    }
    out.update(syscalls(D))
    ms = ref[ref.kind == "measure"].set_index("item")["value"].astype(float)
    out["seed_io_submit_us"] = f"{ms['vcpu_io_submit_mean']:.0f}"
    out.update(aio_power(D))
    out.update(syscall_inflation(D))
    return out


def syscalls(D) -> dict:
    """Each aio mode's submitting system call and its median time (traced boots), and for
    io_uring, which the default profile does not boot (full does), a sentence that says either."""
    out = {}
    for r in T.syscalls(D).to_dict("records"):
        out[f"sys_{r['aio']}_call"] = r["syscall"]
        out[f"sys_{r['aio']}_us"] = f"{r['median (µs)']:.1f}"
    out["sys_io_uring_sentence"] = (
        f"With io_uring it submits with {out['sys_io_uring_call']} ({out['sys_io_uring_us']} µs)."
        if "sys_io_uring_call" in out
        else "This dataset booted no io_uring guest (the default profile leaves io_uring to full)."
    )
    return out


def aio_power(D, alpha: float = 0.05, power: float = 0.8) -> dict:
    """How many untraced boots per aio mode would resolve each pair of modes
    (analysis.boots_needed: normal approximation with the Mann-Whitney ARE, and a resampling check)."""
    u, aio = T.untraced(D), D.p["aio"]
    pairs = [(m, "threads") for m in aio if m != "threads"] + (
        [("native", "io_uring")] if {"native", "io_uring"} <= set(aio) else []
    )
    told, have = [], []
    for x, y in pairs:
        a_, b_ = u[u.aio == x].us, u[u.aio == y].us
        if min(len(a_), len(b_)) < 2:
            continue
        r = A.boots_needed(a_, b_, alpha=alpha, power=power)
        have.append(r["n_have"])
        n = f"{r['n']:,}" if math.isfinite(r["n"]) else "no finite number of"
        sim = (
            f", {r['n_sim']:,} by resampling"
            if math.isfinite(r["n_sim"])
            else ""
            if not math.isfinite(r["n"]) or r["n"] > 2000
            else ", more than 4,000 by resampling"
        )
        told.append(
            f"{x} vs {y}, {n} boots per mode{sim} (Hodges-Lehmann shift {r['shift']:+.1f} µs, "
            f"boot-to-boot SD {r['sd']:.1f} µs)"
        )
    return {
        "aio_n_have": min(have) if have else 0,
        "aio_alpha_pct": f"{100 * alpha:.0f}",
        "aio_power_pct": f"{100 * power:.0f}",
        "aio_n_needed": "; ".join(told) if told else "too few untraced boots to estimate",
    }


def syscall_inflation(D) -> dict:
    """aio=threads' pread64 in the boots that trace only the host against the all-layer boots: what
    the rest of the tracing adds to a traced system call (the syscall tracepoints themselves are on in
    both, so an untraced system call time is not in the data)."""
    iv = D.iv
    t = iv[(iv.warm == 0) & (iv.kind == "guest") & (iv.aio == "threads") & iv.host_syscall.notna()]
    med = t.groupby("variant").host_syscall.median() / 1000
    if not {"host", "all"} <= set(med.index):
        return {
            "sys_host_only_us": "not measured",
            "sys_all_us": "not measured",
            "sys_infl_pct": "not measured",
        }
    return {
        "sys_host_only_us": f"{med['host']:.1f}",
        "sys_all_us": f"{med['all']:.1f}",
        "sys_infl_pct": f"{100 * (med['all'] / med['host'] - 1):+.0f}",
    }


def one_request(D) -> dict:
    lc = T.lifecycle(D).set_index("event")["t (µs)"]
    issue = lc.loc["block_rq_issue"]  # the guest's and the host's: the host's is the later one
    issue = issue.iloc[-1] if hasattr(issue, "iloc") else issue
    ms = D.ref[D.ref.kind == "measure"].set_index("item")["value"].astype(float)
    qv = (D.cum if D.have_seed_method else D.cum1).set_index("key").loc[
        "qemu_virtio", "mean_ns"
    ] / 1000
    if "native" in D.p["aio"]:
        cn = A.cumulative_table(D.iv, "one_run", aio="native", pattern="seq").set_index("key")
        native = f"{cn.loc['qemu_virtio', 'mean_ns'] / 1000:.1f}"
    else:
        native = "not measured"
    return {
        "lc_total_us": f"{lc.loc['pread() returned']:.1f}",
        "lc_notify_us": f"{lc.loc['vp_notify']:.1f}",
        "lc_qnotify_us": f"{lc.loc['virtio_queue_notify']:.1f}",
        "lc_issue_us": f"{issue:.1f}",
        "lc_irq_us": f"{lc.loc['vring_interrupt']:.1f}",
        "seed_lc_notify_to_irq": f"{ms['notify_to_irq_native']:.1f}",
        "our_notify_to_irq": f"{qv:.1f}",
        "our_notify_to_irq_native": native,
    }


def access_patterns(D) -> dict:
    sr, iv = T.patterns(D), D.iv
    hb = iv[(iv.kind == "host") & (iv.warm == 0)]
    cmp_sr = stats.compare(
        hb[hb.pattern == "rand"].host_benchmark,
        hb[hb.pattern == "seq"].host_benchmark,
        names=("random", "sequential"),
    )
    return {
        "sr_host_verdict": cmp_sr.verdict,
        "sr_seq_blk": f"{sr.loc['seq', 'host block device']:.1f}",
        "sr_rand_blk": f"{sr.loc['rand', 'host block device']:.1f}"
        if "rand" in sr.index
        else "not measured",
        "sr_sentence": "The patterns differ little at the bottom of the stack, so the breakdown does not "
        "depend on the pattern."
        if not cmp_sr.significant or abs(cmp_sr.rel_shift) < 0.1
        else "The host's own reads depend on the pattern, so the breakdown's bottom rows do too.",
    }


SECTIONS = (
    seed,
    method,
    alignment,
    seed_tables,
    tracing_cost,
    distributions,
    aio_modes,
    one_request,
    access_patterns,
)


def values(D) -> dict:
    """Every value the prose quotes (strings as it shows them, or integers)."""
    out = {}
    for section in SECTIONS:
        out.update(section(D))
    return out


# what the platform note reads (the accelerator), not every value the prose quotes
NOTE = sections(method)


def platform_notes(D) -> dict[str, list[str]]:
    """The accelerator each host's QEMU guests ran under (the platform banner)."""
    return per_host_note(
        D,
        NOTE,
        lambda g: (
            f"its QEMU guests ran under {g['accel']}"
            + (f" ({g['accel_note']})" if g.get("accel_note") else "")
        ),
    )
