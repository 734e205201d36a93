"""Every value the prose quotes, formatted as it shows, from the quoted dataset (D.quoted:
the newest default/full run) and, for the hosts section, each host's shown dataset."""
from __future__ import annotations

import math

import pandas as pd

from ... import stats
from . import analysis as A
from .spec import DISTURBED_PCT, RATE_KEPT_UP, SLICE_10MS

TUNED = ("pinned", "slice_10ms", "batch", "pinned_tuned")      # the variants with an effect
ALL = ("unpinned", *TUNED)
SHORT = (("cpu_per_req_us", "cpu"), ("lat_mean_ms", "mean"), ("lat_p99_ms", "p99"),
         ("throughput", "thr"), ("all_cpu_per_req_us", "allcpu"), ("machine_busy_pct", "busy"))


def findings(D) -> dict:
    """All glue values of the chapter (strings and integers)."""
    if D.quoted is None:
        return {"n_datasets": 0}
    out = {}
    for part in (run, knobs, repetition, effects, comparisons, switches, balance, hosts, seed,
                 not_measured):
        out.update(part(D))
    return out


def run(D) -> dict:
    """The quoted dataset: host, parameters, calibration, exclusions."""
    M, TL = D.quoted, D.TL
    p, h, cal = M.parameters, M.host, M.facts["calibration"]
    minutes = (pd.Timestamp(M["finished"]) - pd.Timestamp(M["started"])).total_seconds() / 60
    return {"n_datasets": len(D), "n_hosts": len(D.hosts), "host": M.host_id,
            "desc": h["description"], "kernel": h["kernel_release"], "date": M["started"][:10],
            "virt": h["virtualization"], "ncpu": int(h["cpus_online"]),
            "rounds": int(TL["round"].nunique()), "workers": int(p["workers"]),
            "ws_kib": int(p["ws_kib"]), "l2_kib": int(M.facts["harness"]["l2_bytes"] // 1024),
            "lookups": f'{p["lookups"]:,}', "warmup_ms": int(p["warmup_ms"]),
            "duration_ms": int(p["duration_ms"]), "n_variants": len(M.facts["variants_measured"]),
            "n_trials": len(TL), "calib_runs": len(cal["saturation_req_s"]),
            "calib_best": f'{max(cal["saturation_req_s"]):,.0f}', "rate": f'{cal["rate_req_s"]:,.0f}',
            "rate_pct": f'{100 * p["rate_fraction"]:.0f}', "run_minutes": f"{minutes:.1f}",
            "n_disturbed": int((TL.other_cpu_pct > DISTURBED_PCT).sum()),
            "disturbed_pct": f"{DISTURBED_PCT:.0f}", "other_median": f"{TL.other_cpu_pct.median():.1f}",
            "n_rate_saturated": int(TL.rate_saturated.sum()),
            "rate_kept_up_pct": f"{100 * RATE_KEPT_UP:.0f}",
            "rate_saturated_variants": ", ".join(sorted(set(TL[TL.rate_saturated].variant))) or "none"}


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
    return {"n_knob_files": len(files),
            "n_writable": int(files.writable_here.fillna(False).astype(bool).sum()),
            "n_readable": int(files.readable_here.fillna(False).astype(bool).sum()),
            "old_present": int(K[K.era != "now"].exists_here.astype(bool).sum()),
            "base_slice_ms": dbg.get("sysctl_sched_base_slice", "not shown"),
            "scaling": dbg.get("sysctl_sched_tunable_scaling", "not shown"),
            "base_slice_why": skipped.get("base_slice_10ms", "it could be used here"),
            "lockdown_sentence": "Kernel lockdown blocks debugfs files that can be written; read-only "
                                 "files stay readable." if locked else "",
            "global_sentence": "So the global knob can't be changed on this host."
            if "base_slice_10ms" in skipped
            else "Here the global knob could be changed, and the base_slice_10ms variant ran.",
            "base_slice_formula": f"{0.70 * (1 + int(math.log2(min(ncpu, 8)))):.2f}",
            "slice_ms": f"{SLICE_10MS / 1e6:.0f}",
            "tuned_min": f"{int(tm.tuned_value):,}", "tuned_wake": f"{int(tw.tuned_value):,}",
            "tuned_min_ms": f"{int(tm.tuned_value) / 1e6:.0f}",
            "seed_min": f"{int(R.loc['sched_min_granularity_ns', 'value']):,}",
            "seed_wake": f"{int(R.loc['sched_wakeup_granularity_ns', 'value']):,}"}


def repetition(D) -> dict:
    """The profiles' repetition settings (nb.repetition glues the counts)."""
    prof = D.chapter.profiles
    return {"rep_datasets": len(D),
            "rep_target_pct": f'{100 * D.p.get("rep_target", prof["default"]["rep_target"]):g}',
            "rep_min_default": prof["default"]["rep_min_runs"],
            "rep_warm_default": prof["default"]["rep_warmup"],
            "rep_budget_default": f'{prof["default"]["rep_budget_s"]:.0f}',
            "rep_budget_full": f'{prof["full"]["rep_budget_s"]:.0f}'}


def effect_words(D) -> dict:
    """(short metric, variant, load) -> analysis.effect() of the quoted dataset."""
    return {(short, v, load): A.effect(D.E, load, v, m)
            for load in ("rate", "sat") for v in TUNED for m, short in SHORT}


def effects(D) -> dict:
    """The paired effects: n, coverage, and every variant x load x metric in words."""
    E = D.E
    nr = (int(E.n_rounds.min()), int(E.n_rounds.max())) if len(E) else (0, 0)
    out = {"cov": f"{100 * E.ci_coverage.min():.1f}" if len(E) else "n/a",
           "n_pairs": f"{nr[0]}" if nr[0] == nr[1] else f"{nr[0]} to {nr[1]}"}
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
    out["cmp_cpu_list"] = ("; ".join(f"{r.load}: {r.verdict}"
                                     for r in CV[CV.metric == "cpu_per_req_us"].itertuples())
                           if len(CV) else "none (no comparison possible)")
    return out


def switch_medians(D):
    """Median migrations/s and switches per request, per load and variant (a pivot)."""
    med = A.summary(D.TL, metrics=("worker_migr_per_s", "invol_per_req", "vol_per_req"))
    return med.pivot_table(index=["load", "variant"], columns="metric", values="median")


def switches(D) -> dict:
    """Migrations (two sources) and context switches."""
    TL = D.TL
    out = {}
    if "worker_migrations_trace" in TL and TL.worker_migrations_trace.notna().all():
        diff = (TL.worker_migrations_trace - TL.worker_migrations).abs()
        out.update(trace_agree=f"{int((diff == 0).sum())} of {len(TL)}", trace_maxdiff=int(diff.max()))
    else:
        out.update(trace_agree="none (the tracepoint was not recorded)", trace_maxdiff="n/a")
    mm = switch_medians(D)

    def val(load, v, m):
        try:
            return float(mm.loc[(load, v), m])
        except KeyError:
            return math.nan

    def fmt(x, spec):
        return "n/a" if math.isnan(x) else format(x, spec)

    for load in ("rate", "sat"):
        for v in ALL:
            out[f"mig_{v}_{load}"] = fmt(val(load, v, "worker_migr_per_s"), ".0f")
            out[f"inv_{v}_{load}"] = fmt(val(load, v, "invol_per_req"), ".2f")
            out[f"vol_{v}_{load}"] = fmt(val(load, v, "vol_per_req"), ".2f")
    S = D.S
    thr = S[S.metric == "throughput"].set_index(["load", "variant"])["median"]
    mig_kreq = 1000 * val("rate", "unpinned", "worker_migr_per_s") / thr.get(("rate", "unpinned"), math.nan)
    out["mig_per_kreq"] = "n/a" if math.isnan(mig_kreq) else f"{mig_kreq:.1f}"
    out["mig_where"] = ("more often at the fixed rate than at saturation"
                        if val("rate", "unpinned", "worker_migr_per_s") > val("sat", "unpinned", "worker_migr_per_s")
                        else "no more often at the fixed rate than at saturation")
    ib, iu, isl = (val("rate", v, "invol_per_req") for v in ("batch", "unpinned", "slice_10ms"))
    out["batch_inv_word"] = "drops to" if ib < 0.5 * iu else "is"
    out["slice_inv_word"] = "stays near" if abs(isl - iu) < 0.25 * iu else "moves to"
    eb = A.effect(D.E, "rate", "batch", "cpu_per_req_us")["verdict"]
    out["batch_cpu_sentence"] = (
        "Fewer preemptions did not turn into less CPU per request: the batch variant's change was "
        f"{eb} at the fixed rate. On this machine, a switch to a small load-generator thread and back "
        "does not cost the worker a measurable amount of cache." if eb != "lower" else
        "Fewer preemptions did turn into less CPU per request at the fixed rate.")
    return out


def balance(D) -> dict:
    """Per-core balance, and how much the helper threads of pinned workers move."""
    busy = A.busy_cores(D.of_quoted(D["cores"]), D.TL)
    out = {f"spread_{v}_{load}": f"{val:.1f}" for (load, v), val in A.core_spread(busy).items()}
    helpers = D.TL[D.TL.variant == "pinned"]
    out["helper_migr_pinned"] = \
        f"{((helpers.loadgen_migrations + helpers.backend_migrations) / helpers.window_s).median():.0f}"
    return out


def host_summary(D):
    """Each host's shown dataset: worker CPU, p99 and throughput per load and variant."""
    return A.summary(D.of_shown(D["trials"]), metrics=("cpu_per_req_us", "lat_p99_ms", "throughput"))


def hosts(D) -> dict:
    CH = A.compare_hosts(D.of_shown(D["trials"]), manifests=D.manifests)
    if len(CH):
        sentence = (f"Each host is compared with {CH.baseline.iloc[0]} on worker CPU per request, "
                    f"per load and variant ({stats.COMPARE_METHOD}): {stats.significance_text(CH)}. "
                    "The environment diff above lists the facts in which the hosts' manifests differ.")
    else:
        sentence = ("Only one host has data for this chapter, so there is no second host to compare "
                    "with and no environment diff. Another host's dataset would appear in the table and "
                    "the figure above, with a rank test per load and variant against this one.")
    return {"n_hosts_side": int(host_summary(D).host_id.nunique()), "host_cmp_sentence": sentence}


def seed_claims(D) -> dict:
    """The seed's figures (data/reference/cpu_pinning.csv) and ours beside them."""
    ref = D.reference("cpu_pinning")
    S = D.S
    mean = S[(S.load == "rate") & (S.metric == "lat_mean_ms")].set_index("variant")["median"]
    mrt = ref[ref.quantity == "mean_response_time"].set_index("applies_to").value
    return {"ref": ref, "cpu_claims": ref[ref.quantity == "cpu_usage_change"].set_index("applies_to").value,
            "before": mrt["before"], "after": mrt["both"],
            "lat_un": mean.get("unpinned", math.nan), "lat_tu": mean.get("pinned_tuned", math.nan)}


def seed(D) -> dict:
    c = seed_claims(D)
    claims = c["cpu_claims"]
    words = effect_words(D)
    out = {"seed_before": f"{c['before']:.0f}", "seed_after": f"{c['after']:.0f}",
           "lat_un": f"{c['lat_un']:.3f}", "lat_tu": f"{c['lat_tu']:.3f}"}
    checks = [("pinned", claims["pinned"]), ("slice_10ms", claims["scheduler tunables"]),
              ("batch", claims["scheduler tunables"]), ("pinned_tuned", claims["both"])]
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
    S = D.S
    cpu_sat = S[(S.load == "sat") & (S.variant == "unpinned") & (S.metric == "cpu_per_req_us")]["median"]
    out["cpu_ms_sat"] = f"{cpu_sat.iloc[0] / 1000:.2f}" if len(cpu_sat) else "n/a"
    return out


def not_measured(D) -> dict:
    from ...dataset import skipped_table
    sk = D.quoted.skipped
    return {"n_skips": len(skipped_table(D.manifests)),
            "knob_status": "did not run: " + sk["base_slice_10ms"] if "base_slice_10ms" in sk
            else "ran in the newest dataset",
            "perf_status": "were not counted: " + sk["cache_misses"] if "cache_misses" in sk
            else "were counted (the perf_* columns of the trials table)"}
