"""Every value the prose quotes, formatted as it shows, from the quoted dataset (D.quoted:
the newest default/full run) and, for the hosts section, each host's shown dataset."""

from __future__ import annotations

import math

import pandas as pd

from perfbook.analysis import stats
from perfbook.data import machine
from perfbook.data.dataset import skipped_table

from . import analysis as A
from .analysis import ALL, effect, effect_words, seed_claims, switch_medians
from .parse import DISTURBED_PCT, RATE_KEPT_UP, SCHED_FEATURES_6_18, SLICE_10MS


def values(D) -> dict:
    """All glue values of the chapter (strings and integers)."""
    if D.quoted is None:
        return {"n_datasets": 0}
    out = {}
    for part in (
        run,
        design,
        host_kind_sentences,
        knobs,
        features,
        repetition,
        effects,
        comparisons,
        switches,
        balance,
        hosts,
        seed,
        not_measured,
    ):
        out.update(part(D))
    return out


def run(D) -> dict:
    """The quoted dataset: host, parameters, calibration, exclusions."""
    M, TL = D.quoted, D.TL
    p, h, cal = M.parameters, M.host, M.facts["calibration"]
    minutes = (pd.Timestamp(M["finished"]) - pd.Timestamp(M["started"])).total_seconds() / 60
    return {
        "n_datasets": len(D),
        "n_hosts": len(D.hosts),
        "host": M.host_id,
        "desc": h["description"],
        "kernel": h["kernel_release"],
        "date": M["started"][:10],
        "virt": h["virtualization"],
        "ncpu": int(h["cpus_online"]),
        "rounds": int(TL["round"].nunique()),
        "workers": int(p["workers"]),
        "ws_kib": int(p["ws_kib"]),
        "l2_kib": int(M.facts["harness"]["l2_bytes"] // 1024),
        "lookups": f"{p['lookups']:,}",
        "warmup_ms": int(p["warmup_ms"]),
        "duration_ms": int(p["duration_ms"]),
        "n_variants": len(M.facts["variants_measured"]),
        "n_trials": len(TL),
        "calib_runs": len(cal["saturation_req_s"]),
        "calib_best": f"{max(cal['saturation_req_s']):,.0f}",
        "rate": f"{cal['rate_req_s']:,.0f}",
        "rate_pct": f"{100 * p['rate_fraction']:.0f}",
        "run_minutes": f"{minutes:.1f}",
        "n_disturbed": int((TL.other_cpu_pct > DISTURBED_PCT).sum()),
        "disturbed_pct": f"{DISTURBED_PCT:.0f}",
        "other_median": f"{TL.other_cpu_pct.median():.1f}",
        "n_rate_saturated": int(TL.rate_saturated.sum()),
        "rate_kept_up_pct": f"{100 * RATE_KEPT_UP:.0f}",
        "rate_saturated_variants": ", ".join(sorted(set(TL[TL.rate_saturated].variant))) or "none",
    }


def design(D) -> dict:
    """Workers and CPUs of every dataset, from the manifests. The seed's migrations need a pool
    larger than the machine; a dataset with at most one worker per CPU cannot show them."""
    rows = [(m, int(m.parameters["workers"]), int(m.host["cpus_online"])) for m in D.manifests]
    pool = [r for r in rows if r[1] > r[2]]
    listing = "; ".join(
        f"{m.host_id} run {m.run_id} ({m.get('profile') or 'profile not recorded'}): "
        f"{w} workers on {c} CPUs"
        for m, w, c in rows
    )
    if not pool:
        sentence = (
            "None of them had more workers than CPUs. So none can show the seed's setting, a pool "
            "larger than the machine, where an unpinned worker that wakes may find its last CPU "
            "busy and run elsewhere. The key finding on pinning such a pool reads “not measured” "
            "for every host, and the pinning results below are for the designs listed here."
        )
    else:
        sentence = (
            f"{len(pool)} of them had more workers than CPUs, the seed's setting; the key finding on "
            "pinning such a pool rests on those, and the finding on one worker per CPU on the others."
        )
    M = D.quoted
    w, c = int(M.parameters["workers"]), int(M.host["cpus_online"])
    prof = D.chapter.profiles
    return {
        "design_list": listing,
        "n_design": len(rows),
        "n_pool": len(pool),
        "pool_sentence": sentence,
        "design_default_sentence": default_sentence(rows, prof["default"]["workers_per_cpu"]),
        "quoted_design": f"{w} workers on {c} CPUs",
        "quoted_pool_word": (
            "more workers than CPUs"
            if w > c
            else "one worker per CPU"
            if w == c
            else "fewer workers than CPUs"
        ),
        "wpc_default": prof["default"]["workers_per_cpu"],
        "wpc_full": prof["full"]["workers_per_cpu"],
        "wpc_quick": prof["quick"]["workers_per_cpu"],
    }


def default_sentence(rows, wpc: int) -> str:
    """How many datasets ran with the profiles' workers_per_cpu, from their manifests: one that
    records no workers_per_cpu was measured before the parameter existed."""
    at = [m for m, w, c in rows if m.parameters.get("workers_per_cpu") == wpc and w == wpc * c]
    before = [m for m, _, _ in rows if m.parameters.get("workers_per_cpu") is None]
    other = len(rows) - len(at) - len(before)
    parts = [
        f"{len(at)} of the {len(rows)} dataset(s) in this book ran with that default"
        + (f" (run {', '.join(m.run_id for m in at)})" if at else "")
    ]
    if before:
        parts.append(f"{len(before)} predate it: their manifests record no workers_per_cpu")
    if other:
        parts.append(f"{other} set another pool size")
    return "; ".join(parts) + "."


def host_kind_sentences(D) -> dict:
    """What kind of CPU "CPU" means, and what became of the global knob, from the quoted
    dataset's host facts (perfbook.data.machine) and knob inventory."""
    M, K = D.quoted, D.K
    h = M.host
    virt, kind, cont = h.get("virtualization"), machine.kind(h), h.get("container")
    in_cont = "" if cont in (None, "none") else f", and the chapter ran in a {cont} container"
    if virt == "none":
        cpu = (
            f'The host reports no virtualization layer ({kind}), so "CPU" below means a CPU of the '
            f"machine itself{in_cont}."
        )
        vcpu = (
            "This host is bare metal, like the seed's servers: a pinned worker stays on one "
            "physical core and its L2."
        )
    else:
        cpu = (
            f'The host reports virtualization {virt} ({machine.short_kind(h)}), so "CPU" below means a virtual CPU '
            f"of a guest{in_cont}."
        )
        vcpu = (
            f"This host is a {machine.short_kind(h)}. A guest's CPU is a thread of the hypervisor's "
            "host, and its L2 is the L2 of whatever physical core that host runs it on at the "
            "moment. Pinning inside the guest fixes the vCPU, not the cache. The seed pinned to "
            "physical cores."
        )
    knob = K[(K.knob == "debugfs sched/base_slice_ns") & (K.era == "now")]
    exists = bool(len(knob)) and bool(knob.exists_here.iloc[0])
    writable = exists and bool(knob.writable_here.fillna(False).iloc[0])
    lock = h.get("lockdown")
    why = M.skipped.get("base_slice_10ms", "")
    locked = (lock not in (None, "none", "unknown")) or "Lockdown" in why
    if writable:
        knob_s = (
            "The knobs table shows base_slice_ns as writable here, so the base_slice_10ms variant "
            "made a global change like the seed's through tuned."
        )
    elif exists and locked:
        mode = (
            "reported in the kernel log"
            if lock in (None, "none", "unknown")
            else lock.replace(" (kernel log)", ", as the kernel log reports")
        )
        knob_s = (
            f"Kernel lockdown ({mode}) keeps base_slice_ns out of "
            "reach even for root (the knobs table shows it as not writable), so the global change "
            "the seed made through tuned could not be made here. The per-task settings were applied "
            "to every task of the experiment instead, but not to the rest of the system."
        )
    elif exists:
        err = knob.error.iloc[0]
        knob_s = (
            f"base_slice_ns exists but could not be opened for writing even by root ({err}), so the "
            "global change the seed made through tuned could not be made here. The per-task "
            "settings were applied to every task of the experiment instead, but not to the rest "
            "of the system."
        )
    else:
        knob_s = (
            "This kernel has no base_slice_ns knob, so the global change the seed made through tuned "
            "could not be made here. The per-task settings were applied to every task of the "
            "experiment instead, but not to the rest of the system."
        )
    return {"cpu_kind_sentence": cpu, "vcpu_sentence": vcpu, "global_knob_sentence": knob_s}


def features(D) -> dict:
    """The scheduler features of the quoted dataset's kernel: sysctl_sched_features (a bit mask,
    from sched/debug) read in the order of Linux v6.18's kernel/sched/features.h."""
    M = D.quoted
    raw = M.facts.get("debugfs", {}).get("sched_debug", {}).get("sysctl_sched_features")
    kernel = M.host["kernel_release"]
    names = [n for n, _ in SCHED_FEATURES_6_18]
    if raw is None or not kernel.startswith("6.18"):
        why = "not recorded" if raw is None else f"kernel {kernel} is not a 6.18 kernel"
        return {
            "feat_value": raw or "not recorded",
            "feat_r2p": "unknown",
            "feat_short": "unknown",
            "feat_sentence": f"The scheduler features of this dataset were not decoded ({why}).",
        }
    v = int(raw)
    bits = [(v >> i) & 1 for i in range(max(v.bit_length(), len(names)))]
    match = next(
        (i for i, (b, (_, d)) in enumerate(zip(bits, SCHED_FEATURES_6_18)) if b != int(d)),
        min(len(bits), len(names)),
    )
    same = match == len(names) == len(bits)
    state = {n: "on" if bits[i] else "off" for i, n in enumerate(names)}
    last = max(names.index("RUN_TO_PARITY"), names.index("PREEMPT_SHORT"))
    tail = (
        "all of them equal v6.18's defaults"
        if same
        else f"its first {match} bits equal v6.18's defaults, but it has {v.bit_length()} bits where v6.18 "
        f"lists {len(names)} features, so this kernel's list differs from v6.18's after bit {match - 1}. "
        + (
            "Both bits read here lie in the part that matches."
            if last < match
            else "The bits read here lie beyond the part that matches, so this reading is uncertain."
        )
    )
    return {
        "feat_value": str(v),
        "feat_r2p": state["RUN_TO_PARITY"],
        "feat_short": state["PREEMPT_SHORT"],
        "feat_sentence": (
            f"sched/debug shows sysctl_sched_features = {v}, one bit per feature. Read in "
            f"the order of v6.18's features.h, RUN_TO_PARITY is {state['RUN_TO_PARITY']} "
            f"and PREEMPT_SHORT is {state['PREEMPT_SHORT']}; {tail}"
        ),
    }


def knobs(D) -> dict:
    """What the kernel offers now: the knob inventory of the quoted dataset."""
    M, K = D.quoted, D.K
    dbg = M.facts["debugfs"]["sched_debug"]
    files = K[(K.era == "now") & K.knob.str.startswith("debugfs")]
    skipped = M.skipped
    locked = "Lockdown" in skipped.get("base_slice_10ms", "")
    old = K[K.era.str.startswith("seed")].set_index("knob")
    tm = old.loc["sysctl kernel.sched_min_granularity_ns"]
    tw = old.loc["sysctl kernel.sched_wakeup_granularity_ns"]
    R = D.reference("cpu_pinning").set_index("quantity")
    ncpu = M.host["cpus_online"]
    return {
        "n_knob_files": len(files),
        "n_writable": int(files.writable_here.fillna(False).astype(bool).sum()),
        "n_readable": int(files.readable_here.fillna(False).astype(bool).sum()),
        "old_present": int(K[K.era != "now"].exists_here.astype(bool).sum()),
        "base_slice_ms": dbg.get("sysctl_sched_base_slice", "not shown"),
        "scaling": dbg.get("sysctl_sched_tunable_scaling", "not shown"),
        "base_slice_why": skipped.get("base_slice_10ms", "it could be used here"),
        "lockdown_sentence": "Under kernel lockdown debugfs refuses to open any file whose mode "
        "allows writing, even for reading (debugfs_locked_down() in fs/debugfs/file.c); files of "
        "mode 0444, such as sched/debug, stay readable."
        if locked
        else "",
        "global_sentence": "So the global knob can't be changed on this host."
        if "base_slice_10ms" in skipped
        else "Here the global knob could be changed, and the base_slice_10ms variant ran.",
        "base_slice_formula": f"{0.70 * (1 + int(math.log2(min(ncpu, 8)))):.2f}",
        "slice_ms": f"{SLICE_10MS / 1e6:.0f}",
        **slices_seen(D),
        "tuned_min": f"{int(tm.tuned_value):,}",
        "tuned_wake": f"{int(tw.tuned_value):,}",
        "tuned_min_ms": f"{int(tm.tuned_value) / 1e6:.0f}",
        "seed_min": f"{int(R.loc['sched_min_granularity_ns', 'value']):,}",
        "seed_wake": f"{int(R.loc['sched_wakeup_granularity_ns', 'value']):,}",
    }


def slices_seen(D) -> dict:
    """The slice every task of the quoted dataset reported (/proc/<pid>/sched), per variant."""
    T = D.tasks_quoted

    def span(v):
        x = T[T.variant == v].slice_ns
        if not len(x):
            return "not measured"
        lo, hi = x.min() / 1e6, x.max() / 1e6
        return f"{lo:g} ms" if lo == hi else f"{lo:g} to {hi:g} ms"

    return {"slice_seen_10ms": span("slice_10ms"), "slice_seen_base": span("unpinned")}


def repetition(D) -> dict:
    """The profiles' repetition settings (nb.repetition glues the counts)."""
    prof = D.chapter.profiles
    return {
        "rep_datasets": len(D),
        "rep_target_pct": f"{100 * D.p.get('rep_target', prof['default']['rep_target']):g}",
        "rep_min_default": prof["default"]["rep_min_runs"],
        "rep_warm_default": prof["default"]["rep_warmup"],
        "rep_budget_default": f"{prof['default']['rep_budget_s']:.0f}",
        "rep_budget_full": f"{prof['full']['rep_budget_s']:.0f}",
    }


def effects(D) -> dict:
    """The paired effects: n, coverage, and every variant x load x metric in words."""
    E = D.E
    nr = (int(E.n_rounds.min()), int(E.n_rounds.max())) if len(E) else (0, 0)
    out = {
        "cov": f"{100 * E.ci_coverage.min():.1f}" if len(E) else "n/a",
        "n_pairs": f"{nr[0]}" if nr[0] == nr[1] else f"{nr[0]} to {nr[1]}",
    }
    for (short, v, load), e in effect_words(D).items():
        out[f"{short}_{v}_{load}"] = e["text"]
        out[f"{short}_{v}_{load}_v"] = e["verdict"]
    return out


def comparisons(D) -> dict:
    """The unpaired rank tests of every variant against the baseline."""
    CV = A.compare_variants(D.TL)
    out = {"compare_method": stats.COMPARE_METHOD}
    for m, short in (("cpu_per_req_us", "cpu"), ("lat_p99_ms", "p99")):
        g = CV[CV.metric == m] if len(CV) else CV
        out[f"n_cmp_{short}"] = len(g)
        out[f"n_sig_{short}"] = int(g.significant.sum()) if len(g) else 0
    out["cmp_cpu_list"] = (
        "; ".join(f"{r.load}: {r.verdict}" for r in CV[CV.metric == "cpu_per_req_us"].itertuples())
        if len(CV)
        else "none (no comparison possible)"
    )
    return out


def switches(D) -> dict:
    """Migrations (two sources) and context switches."""
    TL = D.TL
    out = {}
    if "worker_migrations_trace" in TL and TL.worker_migrations_trace.notna().all():
        diff = (TL.worker_migrations_trace - TL.worker_migrations).abs()
        out.update(
            trace_agree=f"{int((diff == 0).sum())} of {len(TL)}", trace_maxdiff=int(diff.max())
        )
        out["trace_sentence"] = (
            f"The two ways of counting migrations agree: the tracepoint count equals the se.nr_migrations "
            f"difference in {out['trace_agree']} trials."
            if diff.max() == 0
            else f"The two ways of counting migrations differ: the tracepoint count equals the se.nr_migrations "
            f"difference in {out['trace_agree']} trials, and they differ by up to {int(diff.max())}."
        )
    else:
        out.update(
            trace_agree="none (the tracepoint was not recorded)",
            trace_maxdiff="n/a",
            trace_sentence="The tracepoint was not recorded, so migrations were counted only once.",
        )
    mm = switch_medians(D).to_dict("index")

    def val(load, v, m):
        try:
            return float(mm[(load, v)][m])
        except KeyError:
            return math.nan

    def fmt(x, spec):
        return "n/a" if math.isnan(x) else format(x, spec)

    for load in ("rate", "sat"):
        for v in ALL:
            out[f"mig_{v}_{load}"] = fmt(val(load, v, "worker_migr_per_s"), ".0f")
            out[f"inv_{v}_{load}"] = fmt(val(load, v, "invol_per_req"), ".2f")
            out[f"vol_{v}_{load}"] = fmt(val(load, v, "vol_per_req"), ".2f")
    thr = D.M["throughput"]
    mig_kreq = (
        1000
        * val("rate", "unpinned", "worker_migr_per_s")
        / thr.get(("rate", "unpinned"), math.nan)
    )
    out["mig_per_kreq"] = "n/a" if math.isnan(mig_kreq) else f"{mig_kreq:.1f}"
    sw = val("rate", "unpinned", "invol_per_req") + val("rate", "unpinned", "vol_per_req")
    mig_req = mig_kreq / 1000
    if math.isnan(sw) or math.isnan(mig_req):
        out["switch_mig_sentence"] = "Switches and migrations per request were not both measured."
    else:
        per = (
            f"and migrated {mig_req:.4f} times per request: {sw / mig_req:,.0f} context switches per "
            "migration"
            if mig_req > 0
            else "and never migrated"
        )
        out["switch_mig_sentence"] = (
            f"At the fixed rate an unpinned worker was switched out {sw:.2f} times "
            f"per request {per}."
        )
    out["mig_where"] = (
        "more often at the fixed rate than at saturation"
        if val("rate", "unpinned", "worker_migr_per_s")
        > val("sat", "unpinned", "worker_migr_per_s")
        else "no more often at the fixed rate than at saturation"
    )
    ib, iu, isl = (val("rate", v, "invol_per_req") for v in ("batch", "unpinned", "slice_10ms"))
    out["batch_inv_word"] = "drops to" if ib < 0.5 * iu else "is"
    out["slice_inv_word"] = "stays near" if abs(isl - iu) < 0.25 * iu else "moves to"
    e = effect(D, "rate", "batch", "cpu_per_req_us")
    out["batch_cpu_sentence"] = (
        "Fewer preemptions did not show as less CPU per request: the batch variant's change at the fixed "
        f"rate was {e['text']}, {e['verdict']}. A cost of the preemptions smaller than that interval "
        "would not show here."
        if e["verdict"] != "lower"
        else f"Fewer preemptions did show as less CPU per request at the fixed rate: {e['text']}."
    )
    return out


def balance(D) -> dict:
    """Per-core balance, and how much the helper threads of pinned workers move."""
    busy = A.busy_cores(D.cores_quoted, D.TL)
    out = {f"spread_{v}_{load}": f"{val:.1f}" for (load, v), val in A.core_spread(busy).items()}
    helpers = D.TL[D.TL.variant == "pinned"]
    out["helper_migr_pinned"] = (
        f"{((helpers.loadgen_migrations + helpers.backend_migrations) / helpers.window_s).median():.0f}"
    )
    return out


def hosts(D) -> dict:
    CH = D.CH
    if len(CH):
        sentence = (
            f"Each host is compared with {CH.baseline.iloc[0]} on worker CPU per request, "
            f"per load and variant ({stats.COMPARE_METHOD}): {stats.significance_text(CH)}. "
            "The environment diff above lists the facts in which the hosts' manifests differ."
        )
    else:
        sentence = (
            "Only one host has data for this chapter, so there is no second host to compare "
            "with and no environment diff. Another host's dataset would appear in the table and "
            "the figure above, with a rank test per load and variant against this one."
        )
    # the hosts host_summary() has rows for (a group of comparable trials), without its intervals
    t = A.comparable(D.of_shown(D["trials"])).dropna(
        subset=["host_id", "run_id", "load", "variant"]
    )
    return {"n_hosts_side": int(t.host_id.nunique()), "host_cmp_sentence": sentence}


def seed(D) -> dict:
    c = seed_claims(D)
    claims = c["cpu_claims"]
    words = effect_words(D)
    out = {
        "seed_before": f"{c['before']:.0f}",
        "seed_after": f"{c['after']:.0f}",
        "lat_un": A.mean_ms(c["lat_un"]),
        "lat_tu": A.mean_ms(c["lat_tu"]),
    }
    checks = [
        ("pinned", claims["pinned"]),
        ("slice_10ms", claims["scheduler tunables"]),
        ("batch", claims["scheduler tunables"]),
        ("pinned_tuned", claims["both"]),
    ]
    for short in ("cpu", "busy"):
        inside, outside = [], []
        for v, claim in checks:
            e = words[(short, v, "rate")]
            if e["n"] == 0:
                continue
            (inside if e["lo"] <= claim <= e["hi"] else outside).append(f"{v} ({claim:+.0f} %)")
        out[f"claims_outside_{short}"] = ", ".join(outside) if outside else "none"
        out[f"claims_inside_{short}"] = ", ".join(inside) if inside else "none"
    for k, q in (("seed_pin", "pinned"), ("seed_tun", "scheduler tunables"), ("seed_both", "both")):
        out[k] = f"{claims[q]:+.0f}"
    cpu_sat = D.M["cpu_per_req_us"].get(("sat", "unpinned"))
    out["cpu_ms_sat"] = "n/a" if cpu_sat is None else f"{cpu_sat / 1000:.2f}"
    return out


def not_measured(D) -> dict:
    sk = D.quoted.skipped
    return {
        "n_skips": len(skipped_table(D.manifests)),
        "knob_status": "did not run: " + sk["base_slice_10ms"]
        if "base_slice_10ms" in sk
        else "ran in the newest dataset",
        "perf_status": "were not counted: " + sk["cache_misses"]
        if "cache_misses" in sk
        else "were counted (the perf_* columns of the trials table)",
    }
