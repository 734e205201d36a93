"""Every value the prose quotes (values(D)), formatted as it shows, from the quoted dataset
(D.quoted: the newest default/full run), except where the prose names another scope (every
dataset, every host's shown dataset)."""

from __future__ import annotations

import math
from math import comb

import numpy as np

from perfbook.data import machine

from . import analysis as A
from . import tables as T
from .parse import HIST_PER_DECADE, REL_TOL, netperf_bucket_width_us, netperf_style_percentiles


def f1(v) -> str:
    return f"{v:,.1f}"


def f0(v) -> str:
    return f"{v:,.0f}"


def values(D) -> dict:
    """All glue values of the chapter (strings and integers)."""
    if D.quoted is None:
        return {"n_datasets": 0}
    out = {}
    for part in (
        run,
        loopback_setup,
        platform,
        distribution,
        pinning,
        maxima,
        crossval,
        quantization,
        decades,
        ping,
        sched,
        seed,
        hosts,
    ):
        out.update(part(D))
    return out


def seed_selectors(D) -> dict:
    """The seed's run with the article's selectors: its latencies."""
    sel = A.seed_metrics(D.ref)["selectors"]
    return {
        name: f"{sel[k]:g}"
        for k, name in (
            ("MIN_LATENCY", "seed_min"),
            ("MEAN_LATENCY", "seed_mean"),
            ("P90_LATENCY", "seed_p90"),
            ("P99_LATENCY", "seed_p99"),
            ("MAX_LATENCY", "seed_max"),
        )
    }


def run(D) -> dict:
    """The seed's selectors, the quoted dataset and its parameters."""
    M, R, P = D.quoted, D.R, D.p
    return {
        **seed_selectors(D),
        "n_datasets": len(D),
        "n_hosts": len(D.hosts),
        "host": M.host_id,
        "host_desc": M.host["description"],
        "kernel": M.host["kernel_release"],
        "virt": M.host["virtualization"],
        "measured": M["started"][:10],
        "cpus": int(M.host["cpus_online"]) if M.host.get("cpus_online") else "?",
        "rounds_text": T.rounds_text(R),
        "rr_seconds": f"{P['seconds']:g}",
        "rr_warmup": f"{P['warmup']:g}",
        "np_length": T.netperf_length(P),
        "req": int(P["request_size"]),
        "resp": int(P["response_size"]),
        "ping_count": f0(P["ping_count"]),
        "n_cells": len(R.groupby(["path", "proto", "pin"])),
        "n_transactions": f0(R[R.tool == "rrbench"].n.sum()),
        "n_np_transactions": f0(R[R.tool == "netperf"].n.sum()),
        "bin_pct": f"{100 * (10 ** (1 / HIST_PER_DECADE) - 1):.1f}",
    }


def loopback_setup(D) -> dict:
    """Where the quoted dataset ran its loopback path, as its manifest records it (paths_setup):
    in a namespace of the run's own (since #43) or, in older datasets, the host's."""
    said = (D.quoted.facts.get("paths_setup") or {}).get("loopback") or ""
    if said.startswith("client and server in netns "):
        text = "The dataset quoted here measured loopback in such a namespace."
    elif "host's network namespace" in said:
        text = (
            "The dataset quoted here is older: its manifest records that client and server ran in "
            "the host's own network namespace, as every run did before the servers were closed to "
            "other users."
        )
    else:
        text = "The dataset quoted here does not record in which namespace it measured loopback."
    return {"lo_ns_said": text}


def is_guest(host: dict) -> bool:
    return (host.get("virtualization") or "none") != "none"


def platform(D) -> dict:
    """What the quoted host is (its manifest's host facts), and the sentences that depend on it."""
    h = D.quoted.host
    v = h.get("virtualization") or "none"
    guest = is_guest(h)
    if v == "qemu":
        ipi = (
            "in a TCG guest such as the quoted host, that takes an inter-processor interrupt that QEMU "
            "emulates, to a vCPU that is a "
            "QEMU thread on the host and, if its guest CPU had halted, must first be woken there"
        )
    elif guest:
        ipi = (
            f"in a {machine.short_kind(h)} such as the quoted host, that takes an inter-processor interrupt, "
            "which the hypervisor "
            "typically has to deliver, to a vCPU that may have halted and must first be run again by the host"
        )
    else:
        ipi = (
            "on bare metal, as on the quoted host, that takes an inter-processor interrupt to a CPU that "
            "may have gone idle and must first "
            "leave its idle state"
        )
    return {
        "machine": dict(machine.facts(h))["machine"],
        "cpu_word": "vCPU" if guest else "CPU",
        "disturb_sources": (
            f"another process on it, or, since it is a {machine.short_kind(h)}, the host "
            "descheduling its vCPUs"
            if guest
            else "another process or interrupt on it"
        ),
        "ipi_said": ipi,
        "cause_said": (
            "From inside a guest we cannot tell whether the guest's own scheduler or the host "
            "(descheduling a vCPU) caused it."
            if guest
            else "No scheduler trace covers these runs, so the data do not say which task or interrupt "
            "held the CPU."
        ),
        "nic_said": (
            "the guest's network device, and the host and hypervisor behind it, are not exercised. An "
            "RR test across it would add the device's queue notifications and the host's path"
            if guest
            else "the machine's network card is not exercised. An RR test across it would "
            "add the driver, the card and the wire"
        ),
        "unseen_said": (
            f"from inside a {machine.short_kind(h)} we cannot see when the host descheduled our vCPUs, "
            "which is one plausible source of the millisecond maxima"
            if guest
            else "interrupts and other tasks on the CPUs were not traced during the measured runs, so "
            "what held a CPU during the millisecond maxima is not recorded"
        ),
    }


def decade(v: float) -> str:
    """The decade a latency in µs falls in, as the prose names it."""
    names = ["below 1 µs", "1–10 µs", "10–100 µs", "100 µs–1 ms", "1–10 ms", "10–100 ms"]
    i = 0 if v < 1 else min(len(names) - 1, 1 + int(math.floor(math.log10(v))))
    return names[i]


def decades(D) -> dict:
    """Per shown host: the range of the cells' pooled medians and the netperf decade(s) they fall in."""
    lad = A.ladder(D.of_shown(D["runs"]), D.of_shown(D["hist"]))
    hosts = {m.host_id: m.host for m in D.manifests}
    parts = []
    for i, (hid, g) in enumerate(lad.groupby("host_id")):
        lo, hi = g.P50.min(), g.P50.max()
        ds = sorted({decade(lo), decade(hi)}, key=[decade(10**k) for k in range(-1, 5)].index)
        where = (
            f"in the {ds[0]} decade" if len(ds) == 1 else f"across the {' and '.join(ds)} decades"
        )
        what = f"the medians of the {len(g)} cells lie" if i == 0 else "they lie"
        parts.append(
            f"on {machine.legend(hosts.get(hid, {'host_id': hid}))} {what} between {f1(lo)} and "
            f"{f1(hi)} µs, {where}"
        )
    return {"decade_text": "; ".join(parts)}


def cells(D) -> dict:
    """The pooled ladder per cell, the spread between the lines, loopback UDP's tail and what
    veth and TCP add to its median (the part of distribution() that needs no exceedance curve)."""
    lad = D.ladder
    L = lad.set_index(["path", "proto", "pin"])
    out = {
        f"{path}_{proto}_{pin}_{c}": f1(r[c])
        for (path, proto, pin), r in L.iterrows()
        for c in ("P50", "P99", "max")
    }
    lo_udp = L.loc[("loopback", "udp", "none")]
    # veth against loopback with both ends on one CPU, as the veth finding compares them: the
    # scheduler's placement of an unpinned pair moves its median more than the path does
    lo_same = L.loc[("loopback", "udp", "same"), "P50"]
    veth_d = L.loc[("veth", "udp", "same"), "P50"] - lo_same
    return {
        **out,
        **spread(lad),
        "tail_ratio": f1(lo_udp["P99"] / lo_udp["P50"]),
        "max_ratio": f0(lo_udp["max"] / lo_udp["P50"]),
        "veth_minus_lo_udp": f1(veth_d),
        "veth_minus_lo_pct": f"{100 * veth_d / lo_same:.0f}",
        "tcp_minus_udp_lo": f1(L.loc[("loopback", "tcp", "none"), "P50"] - lo_udp["P50"]),
    }


def distribution(D) -> dict:
    """The pooled ladder per cell, the tail, and the cell with the largest P99.9."""
    lad = D.ladder
    cc = A.ccdf(D.H)
    slow100 = cc[
        (cc.path == "loopback") & (cc.proto == "udp") & (cc.pin == "none") & (cc.latency_us >= 100)
    ]
    worst = lad.sort_values("P99.9", kind="stable").iloc[-1]
    R = D.R
    wr = R[
        (R.tool == "rrbench")
        & (R.path == worst.path)
        & (R.proto == worst.proto)
        & (R.pin == worst.pin)
    ]
    disturbed = wr.rate_tps.min() < 0.7 * wr.rate_tps.median()
    return {
        **cells(D),
        # no exceedance point at 100 us or beyond: no transaction took that long
        "slow100_lo_udp": f"{100 * float(slow100['slower_than'].max()) if len(slow100) else 0.0:.3f}",
        "worst_cell": f"{worst.path} / {worst.proto} / {worst.pin}",
        "worst_p999": f1(worst["P99.9"]),
        "worst_rate_min": f0(wr.rate_tps.min()),
        "worst_rate_med": f0(wr.rate_tps.median()),
        "worst_verdict": "One of its runs was clearly disturbed."
        if disturbed
        else "No run of it stands out by its rate, so this tail belongs to the cell, not to one bad run.",
    }


def spread(lad) -> dict:
    """Per protocol, the slowest line (path and pinning mode) over the fastest at P50, P99,
    P99.9 and the maximum, and whether that ratio is larger in the tail than at the median."""
    out = {}
    for proto, g in lad.groupby("proto"):
        r = {c: g[c].max() / g[c].min() for c in ("P50", "P99", "P99.9", "max")}
        out.update({f"spread_{proto}_{c.replace('.', '')}": f1(v) for c, v in r.items()})
        wider = r["P99.9"] > 1.5 * r["P50"]
        out[f"spread_{proto}_text"] = (
            f"the lines are {'further apart' if wider else 'not much further apart'} in the tail than at "
            f"the median (slowest / fastest: {f1(r['P50'])} at P50, {f1(r['P99'])} at P99, "
            f"{f1(r['P99.9'])} at P99.9)"
        )
    return out


def pin_ratios(D) -> dict:
    """Each pinning mode's pooled P50 and P99 over the unpinned ones (pinning()'s ratios,
    without its rank tests)."""
    out = {}
    for _, r in A.pin_effect(D.ladder).iterrows():
        out[f"pin_{r.path}_{r.proto}_{r.pin}_p50"] = f"{r.P50_vs_none:.2f}"
        out[f"pin_{r.path}_{r.proto}_{r.pin}_p99"] = f"{r.P99_vs_none:.2f}"
    return out


def pinning(D) -> dict:
    """Each pinning mode against none: ratios, rank tests, the unpinned runs' spread."""
    lad = D.ladder
    out = pin_ratios(D)
    pcn = A.pin_comparison(D.R).set_index(["path", "proto", "pin"])
    for pin in ("same", "split"):
        key = ("loopback", "udp", pin)
        out[f"pin_verdict_lo_udp_{pin}"] = (
            pcn.loc[key, "verdict"] if key in pcn.index else "not compared (fewer than two runs)"
        )
    out["pin_n_sig"] = int(pcn["significant"].sum()) if len(pcn) else 0
    out["pin_n_cmp"] = len(pcn)
    # the smallest two-sided p an exact rank test can give with these n
    out["pin_min_p"] = (
        f"{min(2 / comb(int(a + b), int(a)) for a, b in zip(pcn.n_a, pcn.n_b)):.2g}"
        if len(pcn)
        else "n/a"
    )
    lu = A.none_vs_pinned(D.R).set_index(["path", "proto"]).loc[("loopback", "udp")]
    out.update(
        {
            "none_lo_udp_min": f1(lu.none_p50_min),
            "none_lo_udp_max": f1(lu.none_p50_max),
            "same_lo_udp": f1(lu.same_p50),
            "split_lo_udp": f1(lu.split_p50),
            "none_verdict": none_verdict(lu),
        }
    )
    for path, proto in (("loopback", "udp"), ("veth", "tcp")):
        sub = lad[(lad.path == path) & (lad.proto == proto)]
        out[f"best_pin_{'lo' if path == 'loopback' else path}_{proto}"] = sub.loc[
            sub.P50.idxmin(), "pin"
        ]
    return out


def none_verdict(lu) -> str:
    """How far the unpinned runs' P50 spread, against the gap between the pinned modes."""
    gap = abs(lu.split_p50 - lu.same_p50)
    cover = (lu.none_p50_max - lu.none_p50_min) / gap if gap else float("nan")
    mid = (lu.none_p50_min + lu.none_p50_max) / 2
    near = "split" if abs(mid - lu.split_p50) < abs(mid - lu.same_p50) else "same"
    if cover > 0.5:
        return (
            f"Here the unpinned runs spread over {100 * cover:.0f} % of the gap between the two pinned "
            "modes: where the scheduler puts the pair in a given run can move its median by much of the "
            "pinning effect, so a single unpinned RR run is a poor estimate."
        )
    return (
        f"Here the unpinned runs stayed close together ({100 * cover:.0f} % of the gap between the pinned "
        f"modes), nearer to `{near}`: in this dataset the scheduler placed the pair consistently."
    )


def maxima(D) -> dict:
    """Millisecond maxima: with both processes on one CPU or not, and their usual values."""
    R = D.R
    ms = R.max_us >= 1000
    same = R.pin == "same"
    big = A.max_clusters(R)
    big = big[big.max_us_rounded >= 1000]
    top = R[((R.max_us / 100).round() * 100).isin(big.max_us_rounded.iloc[:2])]
    seen = {c: sorted(top[c].unique()) for c in ("path", "proto", "tool")}
    where = "; ".join(f"{c}: {', '.join(map(str, v))}" for c, v in seen.items())
    cpu = "vCPU" if is_guest(D.quoted.host) else "CPU"
    return {
        "mc_where": where,
        "mc_verdict": "A cost of the network path would differ between loopback and veth; the same values "
        "on both paths do not."
        if len(seen["path"]) > 1
        else "They occur on one path only here, so this dataset cannot tell a cost of that path from a "
        "scheduling interval.",
        "ms_same": int(ms[same].sum()),
        "n_same": int(same.sum()),
        "ms_other": int(ms[~same].sum()),
        "n_other": int((~same).sum()),
        "same_verdict": f"That the runs confined to one {cpu} have them far less often points at the "
        f"cross-{cpu} wake-up, but that is a hypothesis this chapter does not test."
        if ms[same].mean() < ms[~same].mean() / 2
        else f"Confining both processes to one {cpu} does not make them clearly rarer here, so the cross-{cpu} "
        "wake-up is not the whole story.",
        "mc_top1": f0(big.max_us_rounded.iloc[0]),
        "mc_top1_n": int(big.runs.iloc[0]),
        "mc_top2": f0(big.max_us_rounded.iloc[1]),
        "mc_top2_n": int(big.runs.iloc[1]),
    }


def crossval(D) -> dict:
    """netperf's P50/P90/P99 against rrbench's, within the stated tolerance."""
    cv = A.crossval(D.R)
    rel = cv.percentile.str.lower().map(REL_TOL) * cv.ours_us
    med = cv.diff_us.median()
    return {
        "tol_p50": f"{100 * REL_TOL['p50']:.0f}",
        "tol_p99": f"{100 * REL_TOL['p99']:.0f}",
        "cv_agree": int(cv.agree.sum()),
        "cv_total": len(cv),
        "cv_max_abs": f1(cv.diff_us.abs().max()),
        "cv_max_rel": f1(100 * cv.rel_diff.abs().max()),
        "cv_med_diff": f1(med),
        "cv_by_range": int((cv.run_range_us > rel).sum()),
        "cv_direction": "high" if med > 0 else "low" if med < 0 else "neither high nor low",
        **{
            f"cv_{pc}_maxabs": f1(cv[cv.percentile == pc].diff_us.abs().max())
            for pc in ("P50", "P90", "P99")
        },
    }


def hist_struct_bytes(buckets: int) -> int:
    """sizeof(struct histogram_struct) of hist.h on x86-64: 8 rows of B ints, then ridiculous,
    total (int), sum (int64), sumsquare (double), hmin, hmax, limit, count, producer, consumer
    (int), time_ones (pointer), time_two (struct timeval)."""
    return 8 * buckets * 4 + 2 * 4 + 8 + 8 + 6 * 4 + 8 + 16


def quantization(D) -> dict:
    """netperf's bucketing: its sizes, and its error on the quoted dataset's own samples."""
    c150 = netperf_style_percentiles(np.full(1000, 150_000))
    q = A.quantization(D.R)
    small, big = q[q.exact_us < 100], q[q.exact_us >= 100]
    npr = D["runs"][D["runs"].tool == "netperf"]  # every committed netperf run
    return {
        "hist_bytes": f"{hist_struct_bytes(100)} (0x{hist_struct_bytes(100):x})",
        "hist_bytes_10": hist_struct_bytes(10),
        **{f"bw_{v}": f"{float(netperf_bucket_width_us(v * 1.5)):g}" for v in (10, 100, 1000)},
        "q_const150_p50": int(c150[0.5]),
        "q_const150_p99": int(c150[0.99]),
        "q_max_abs": f"{q.error_us.abs().max():.2f}",
        "q_mean": f"{q.error_us.mean():+.2f}",
        "q_max_small": f"{small.error_us.abs().max():.2f}",
        "q_n_small": len(small),
        "q_big_clause": big_clause(q, big),
        "q_n": len(q),
        "mean_rt_ok": int(((npr.mean_us / npr.rt_latency_us - 1).abs() < 0.05).sum()),
        "mean_rt_n": len(npr),
    }


def big_clause(q, big) -> str:
    """The percentiles above 100 µs: their buckets, their largest error, and whether that error
    exceeds one bucket (the exact percentile interpolates between sparse tail samples; netperf
    takes the sample at its rank, which tools/perfbook/chapters/netperf_latency/parse.py checks)."""
    if not len(big):
        return "No percentile of this run reached 100 µs, where buckets become 10 µs wide."
    widths = " and ".join(f"{w:g} µs" for w in sorted(big.bucket_us.unique()))
    over = (big.error_us.abs() > big.bucket_us + 1).sum()
    checked = q.in_rank_bucket.notna().sum()
    inb = int((q.in_rank_bucket == True).sum())  # noqa: E712
    said = (
        f"The {len(big)} percentile(s) above 100 µs fall in buckets {widths} wide, and there the error reaches "
        f"{big.error_us.abs().max():.2f} µs."
    )
    if over:
        said += (
            f" In {over} of them it exceeds one bucket plus 1 µs: in a sparse tail the exact percentile, "
            "interpolated between two samples far apart, can lie buckets away from the sample at netperf's rank."
        )
    if checked:
        said += (
            f" Against that sample, netperf's value lies in the sample's bucket in {inb} of {checked} "
            "percentiles"
            + (", as the bound says." if inb == checked else "; the others break the bound.")
        )
    return said


def ping(D) -> dict:
    pn = A.ping_vs_rr(D.R, D.of_quoted(D["ping"])).set_index(["path", "proto"])
    lo, ve = pn.loc[("loopback", "udp")], pn.loc[("veth", "udp")]
    return {
        "ping_lo": f1(lo.ping_mean_us),
        "ping_veth": f1(ve.ping_mean_us),
        "rr_ping_ratio_lo": f1(lo.rr_over_ping_mean),
        "rr_ping_ratio_veth": f1(ve.rr_over_ping_mean),
        "rr_minus_ping_lo": f1(lo.rr_mean_us - lo.ping_mean_us),
    }


def sched(D) -> dict:
    """The scheduler's share of a transaction, from the traced runs (none: no values)."""
    Sn = D.of_quoted(D["sched"])
    if Sn is None or Sn.empty:
        return {}
    out = {"sched_seconds": f"{D.p.get('sched_seconds', 0):g}"}
    for pin, r in A.sched_per_transaction(Sn, D.R).iterrows():
        out.update(
            {
                f"sched_wait_{pin}": f1(r.wait_us),
                f"sched_share_{pin}": f"{100 * r.wait_share:.0f}",
                f"sched_traced_{pin}": f1(r.traced_mean_us),
                f"sched_untraced_{pin}": f1(r.untraced_mean_us),
            }
        )
    for _, r in Sn.iterrows():
        out[f"sched_{r.pin}_{r.role}_mean"] = f1(r.delay_mean_us)
    return out


def seed(D) -> dict:
    """The seed's loopback UDP numbers beside the quoted dataset's."""
    vs = D.versus_seed
    here, then = vs["netperf here"], vs["seed (median of its runs)"]
    ref, R = D.ref, D.R
    np_lo = R[
        (R.tool == "netperf") & (R.path == "loopback") & (R.proto == "udp") & (R.pin == "none")
    ]
    vh = A.versus_seed_histogram(D.H, ref, D.quoted.host_id).set_index("bucket")
    seed_mode, ours_mode = vh.seed_fraction.idxmax(), vh.ours_fraction.idxmax()
    p50_r = vs.loc["P50_LATENCY", "seed / netperf here"]
    min_r = then["MIN_LATENCY"] / here["MIN_LATENCY"]
    mom_now, mom_seed = (
        here["P50_LATENCY"] / here["MIN_LATENCY"],
        then["P50_LATENCY"] / then["MIN_LATENCY"],
    )
    return {
        **seed_conditions(ref),
        "max_said": max_said(R, here, then),
        "seed_mode_bucket": seed_mode,
        "seed_mode_pct": f1(100 * vh.loc[seed_mode, "seed_fraction"]),
        "ours_mode_bucket": ours_mode,
        "ours_mode_pct": f1(100 * vh.loc[ours_mode, "ours_fraction"]),
        "seed_over_now_min": f1(min_r),
        "min_verdict": (
            "The minimum moved much less than the median: the best case of a round trip changed "
            "less than the typical one."
            if min_r < p50_r / 2
            else "The minimum moved about as much as the median, so the whole distribution shifted, "
            "not only its typical case."
        ),
        "med_over_min_verdict": (
            "The seed's median sits further above its own minimum than ours does, which suggests that its "
            "typical transaction paid a delay its best case did not, such as a CPU that had gone idle or a "
            "frequency that had dropped between transactions, rather than more work per packet."
            if mom_seed > 1.5 * mom_now
            else "Both medians sit about as far above their minima, so this comparison gives no sign of a delay "
            "that only the seed's typical transaction paid."
        ),
        "seed_over_now_p50": f1(vs.loc["P50_LATENCY", "seed / netperf here"]),
        **seed_ratio(D),
        "now_np_min": f0(here["MIN_LATENCY"]),
        "now_np_max": f0(here["MAX_LATENCY"]),
        "seed_med_max": f0(then["MAX_LATENCY"]),
        "seed_rate": f0(ref[(ref.run == "k_all") & (ref.metric == "THROUGHPUT")].value.iloc[0]),
        "now_rate": f0(np_lo.rate_tps.median()),
        "now_med_over_min": f1(here["P50_LATENCY"] / here["MIN_LATENCY"]),
        "seed_med_over_min": f1(then["P50_LATENCY"] / then["MIN_LATENCY"]),
    }


def seed_ratio(D) -> dict:
    """The seed's mean round trip over netperf's here (loopback UDP, no pinning), and ours."""
    vs = D.versus_seed
    return {
        "seed_over_now_mean": f1(vs.loc["MEAN_LATENCY", "seed / netperf here"]),
        "now_np_mean": f1(vs.loc["MEAN_LATENCY", "netperf here"]),
    }


def max_said(R, here, then) -> str:
    """Whether both maxima are single events far above the median, and whether ours point at the
    network path (only one path has millisecond maxima) or not (both paths have them)."""
    now_r, seed_r = (
        here["MAX_LATENCY"] / here["P50_LATENCY"],
        then["MAX_LATENCY"] / then["P50_LATENCY"],
    )
    if min(now_r, seed_r) < 10:
        return (
            f"The maximum is {f0(now_r)} times the median here and {f0(seed_r)} times in the seed, so at "
            "least one of them is no single event far above the rest, and the comparison says nothing about "
            "its cause."
        )
    paths = R[R.max_us >= 1000].path.nunique()
    head = (
        f"Both are single events far above the median ({f0(now_r)} times it here, {f0(seed_r)} times in the "
        "seed)."
    )
    if paths > 1:
        return (
            f"{head} Ours occur on loopback and veth alike (the millisecond maxima above), which fits the "
            "seed's explanation that they are scheduling events, not a cost of the network path."
        )
    return (
        f"{head} Our millisecond maxima occur on {'one path only' if paths else 'neither path'}, so this "
        "dataset cannot tell the seed's explanation, a scheduling event, from a cost of the path."
    )


def seed_conditions(ref) -> dict:
    """How long the seed's runs lasted (its -k all run's ELAPSED_TIME) and its CPU count
    (data/reference: an empty value means the article does not state it)."""
    el = ref[(ref.run == "k_all") & (ref.metric == "ELAPSED_TIME")].value
    cpu = ref[ref.metric == "CPU_COUNT"].value.dropna()
    return {
        "seed_seconds": f"{float(el.iloc[0]):g}",
        "seed_cpus": f"{int(cpu.iloc[0])} CPUs" if len(cpu) else "not stated in the article",
    }


def hosts(D) -> dict:
    hc = T.hosts_compared(D)
    if len(D.shown) < 2:
        text = "Only one host has measured this chapter so far, so there is nothing to compare yet."
    elif hc.empty:
        text = "The other hosts' datasets have fewer than two runs per cell, too few for a rank comparison."
    else:
        hlu = hc[(hc.path == "loopback") & (hc.proto == "udp") & (hc.pin == "none")]
        text = "Loopback UDP without pinning: " + "; ".join(hlu.verdict) + "."
    return {"host_sentence": text}
