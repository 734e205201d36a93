"""virtio_blk_latency: the analysis (frames in, frames out; no I/O, no plotting). Per-request
layer latencies, every stamp on the host's time axis, the seed's cumulative and delta tables,
the lifecycle of one request, percentiles and per-boot summaries; and the chapter's Data
(VirtioData), with the quoted dataset's frames every table, figure and prose value starts from,
computed once."""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np
import pandas as pd
from scipy import stats as st

from perfbook.analysis.stats import ci_label, cv, hodges_lehmann, summarize
from perfbook.data.dataset import Data

from .parse import BASES, STAMPS_G, STAMPS_H, STAMPS_Q


def _with_job_cols(requests, jobs):
    """Requests plus their boot's clock facts: tsc_hz (the run's median where a job has none),
    off (guest->host TSC offset, middle of the bracket), qc (QEMU clock correction, 0 if none;
    see qemu_correction)
    and the QEMU clock fit."""
    cols = ["tsc_hz", "off_lo", "off_hi", "qc", "q_tsc_ref", "q_real_ref_us", "q_slope"] + list(
        BASES.values()
    )
    j = jobs[["host_id", "run_id", "job"] + [c for c in cols if c in jobs]].copy()
    for c in cols:
        if c not in j:
            j[c] = np.nan
    d = requests.merge(j, on=["host_id", "run_id", "job"], how="left")
    for col, base in BASES.items():  # back to absolute stamps (float64 is exact below 2**53)
        if col in d:
            d[col] = d[col].astype("float64") + d[base].astype("float64")
    if (
        d["tsc_hz"].isna().any()
    ):  # grouping by the string keys costs more than the rest; rarely needed
        d["tsc_hz"] = d["tsc_hz"].fillna(
            d.groupby(["host_id", "run_id"])["tsc_hz"].transform("median")
        )
    d["off"] = (d.off_lo + d.off_hi) / 2
    d["qc"] = d["qc"].fillna(0.0) if "qc" in d else 0.0
    return d


def _q2host(d, us):
    """QEMU microsecond stamps -> host TSC (calibration line plus the bracket's correction)."""
    return d.q_tsc_ref + d.q_slope * ((us - d.q_real_ref_us) * 1000.0) + d.qc


def layer_intervals(requests, jobs):
    """Per request, the latency of each layer in ns; NaN where the boot did not trace it.
    Intervals inside one clock domain need no alignment; the TCG stand-in for the kvm.ko row
    (vCPU kick -> apic_deliver_irq) maps QEMU's clock onto the host's TSC."""
    d = _with_job_cols(requests, jobs)
    ns = 1e9 / d.tsc_hz
    out = d[
        [
            c
            for c in (
                "host_id",
                "run_id",
                "job",
                "kind",
                "round",
                "aio",
                "variant",
                "accel",
                "pattern",
                "idx",
                "warm",
            )
            if c in d
        ]
    ].copy()

    def col(c):
        return d[c].astype("float64") if c in d else np.nan

    bench = d.bench_cyc * ns
    out["guest_benchmark"] = np.where(d.kind == "guest", bench, np.nan)
    out["host_benchmark"] = np.where(d.kind == "host", bench, np.nan)
    out["guest_virtio_pci"] = (col("g_irq") - col("g_notify")) * ns
    out["guest_block"] = (col("g_complete") - col("g_issue")) * ns
    kvm = (col("h_kvm_irq") - col("h_kvm_notify")) * ns
    kvm = kvm.where(d["accel"] == "kvm") if "accel" in d else kvm * np.nan
    if "q_anchor" in d and "h_anchor" in d:
        tcg = (_q2host(d, col("q_anchor") + col("q_apic")) - (col("h_anchor") + col("h_kick"))) * ns
    else:
        tcg = np.nan
    out["host_kvm"] = np.where(np.isfinite(kvm), kvm, tcg)
    out["host_kvm_source"] = np.where(
        np.isfinite(kvm), "kvm.ko", np.where(np.isfinite(out["host_kvm"]), "TCG stand-in", "")
    )
    out["qemu_virtio"] = col("q_irq") * 1000.0  # relative to virtio_queue_notify
    out["qemu_aio"] = (col("q_rw") - col("q_read")) * 1000.0
    out["qemu_pool"] = (col("q_cb") - col("q_submit")) * 1000.0
    out["host_block"] = col("h_complete") * ns  # relative to block_rq_issue
    out["host_syscall"] = (col("h_sub_exit") - col("h_sub")) * ns
    out["host_sub_call"] = d["h_sub_call"] if "h_sub_call" in d else None
    return out


def aligned(requests, jobs):
    """Every stamp of every request in ns on one axis, the host's TSC, relative to the request's
    start (t0 = 0): guest stamps move by the offset bracket's middle, QEMU's through the clock
    fit and its correction; 'h_issue_ns' is the host block issue. NaN where a boot lacks the
    guest or host layer (no bracket)."""
    d = _with_job_cols(requests, jobs)
    if "accel" in d:  # kvm.ko's events belong to KVM guests only
        for c in ("h_kvm_notify", "h_kvm_irq"):
            if c in d:
                d[c] = d[c].where(d["accel"] == "kvm")
    ns = 1e9 / d.tsc_hz
    d["bench_ns"] = d.bench_cyc * ns
    for c in STAMPS_G:
        if c in d:
            d[c + "_ns"] = d[c] * ns
    t0_host = d.t0 + d.off
    if "h_anchor" in d:
        base = d.h_anchor - t0_host
        d["h_issue_ns"] = base * ns
        for c in STAMPS_H:
            if c in d:
                d[c + "_ns"] = (base + d[c]) * ns
    if "q_anchor" in d:
        d["q_notify_ns"] = (_q2host(d, d.q_anchor) - t0_host) * ns
        for c in STAMPS_Q:
            if c in d:
                d[c + "_ns"] = (_q2host(d, d.q_anchor + d[c]) - t0_host) * ns
    return d


# the layers of the seed's cumulative table, top to bottom, and how each is measured today
LAYER_ROWS = [
    ("guest_benchmark", "Guest benchmark", "seqread in the guest: TSC around pread()"),
    ("guest_virtio_pci", "Guest virtio-pci", "guest ftrace: vp_notify -> vring_interrupt"),
    (
        "host_kvm",
        "Host kvm.ko",
        "KVM: kvm_mmio/kvm_fast_mmio/kvm_pio (notify) -> kvm_msi_set_irq/kvm_set_irq; "
        "TCG stand-in: the vCPU thread's ioeventfd write -> QEMU's apic_deliver_irq",
    ),
    ("qemu_virtio", "QEMU virtio", "QEMU log: virtio_queue_notify -> virtio_notify(_irqfd)"),
    ("qemu_aio", "QEMU aio", "QEMU log: virtio_blk_handle_read -> virtio_blk_rw_complete"),
    (
        "host_block",
        "Host block device",
        "host ftrace: block_rq_issue -> block_rq_complete (the image's disk)",
    ),
    ("host_benchmark", "Host benchmark", "seqread on the host, same image file"),
]
DELTA_ROWS = [
    ("Guest", "guest_benchmark", "guest_virtio_pci"),
    ("Host/guest switching", "guest_virtio_pci", "host_kvm"),
    ("Host/QEMU switching", "host_kvm", "qemu_virtio"),
    ("QEMU", "qemu_virtio", "qemu_aio"),
    ("Host I/O", "qemu_aio", None),
]


def cumulative_table(iv, method: str = "one_run", aio: str = "threads", pattern: str = "seq"):
    """The seed's cumulative table from our requests (means, like the seed, and medians with CI).

    method 'one_run': every layer from the boots that traced all layers at once (the same
    requests); 'control' is that boot's guest benchmark. 'seed': each layer from the boot that
    traced only its own layer (guest / qemu / host variants; the kvm row from the 'boundary'
    boots, which trace the host and QEMU: kvm.ko's events, or the TCG stand-in that needs both),
    the guest benchmark from the untraced boots, and 'control' the guest benchmark of the boot
    each row came from (the seed's 'benchmark control' column).
    """
    # each row's requests are boolean masks over the timed requests of `pattern`, and its boots
    # one integer per (host, run, job) numbered in their sorted order: filtering the whole frame
    # and grouping by its string columns once per row cost more than the statistics
    d = iv.loc[
        (iv.warm == 0) & (iv.pattern == pattern),
        ["host_id", "run_id", "job", "kind", "aio", "variant"] + [k for k, _, _ in LAYER_ROWS],
    ]
    guest = ((d.kind == "guest") & (d.aio == aio)).to_numpy()
    host = (d.kind == "host").to_numpy()
    variants, var_of = pd.factorize(d.variant)
    code = {v: i for i, v in enumerate(var_of)}
    boot = (
        d.groupby(["host_id", "run_id", "job"]).ngroup().to_numpy() if len(d) else np.zeros(0, int)
    )
    gb = d["guest_benchmark"].to_numpy()
    src = {
        "one_run": {k: "all" for k, _, _ in LAYER_ROWS},
        "seed": {
            "guest_benchmark": "plain",
            "guest_virtio_pci": "guest",
            "host_kvm": "boundary",
            "qemu_virtio": "qemu",
            "qemu_aio": "qemu",
            "host_block": "host",
        },
    }[method]
    rows = []
    for key, label, how in LAYER_ROWS:
        if key == "host_benchmark":
            sel, variant = host, "host bench"
        else:
            variant = src.get(key, "all")
            sel = guest & (variants == code.get(variant, -2))
        v = d[key].to_numpy()
        ok = sel & ~np.isnan(v)
        x = v[ok]
        ctrl = gb[sel] if key != "host_benchmark" and sel.any() else None
        s = summarize(x) if len(x) else None
        c = (
            summarize(ctrl[~np.isnan(ctrl)])
            if ctrl is not None and (~np.isnan(ctrl)).any()
            else None
        )
        boots = pd.Series(x).groupby(boot[ok]).mean() if len(x) else x
        rows.append(
            {
                "key": key,
                "layer": label,
                "measured by": how,
                "from": variant,
                "n": s.n if s else 0,
                "mean_ns": s.mean if s else math.nan,
                "median_ns": s.median if s else math.nan,
                "ci_low": s.ci_low if s else math.nan,
                "ci_high": s.ci_high if s else math.nan,
                "control_mean_ns": c.mean if c else math.nan,
                "boots": len(boots),
                "boot_cv_pct": 100 * cv(boots) if len(boots) > 1 else math.nan,
            }
        )
    t = pd.DataFrame(rows)
    if method == "one_run":
        t["control_mean_ns"] = [
            math.nan if k == "host_benchmark" else v for k, v in zip(t.key, t.control_mean_ns)
        ]
    return t


CHAIN = [upper for _name, upper, _lower in DELTA_ROWS]


def delta_table(cum, value: str = "mean_ns"):
    """The seed's delta table: successive differences of the cumulative rows (the last one is the
    bottom layer itself), in ns and as a percentage of the guest benchmark. A layer that was not
    measured merges its two neighbouring deltas into one row that names both."""
    v = {k: x for k, x in zip(cum.key, cum[value])}
    names = [n for n, _u, _l in DELTA_ROWS]
    have = [i for i, k in enumerate(CHAIN) if math.isfinite(v.get(k, math.nan))]
    total = v.get("guest_benchmark", math.nan)
    rows = []
    for pos, i in enumerate(have):
        j = have[pos + 1] if pos + 1 < len(have) else None
        low = v[CHAIN[j]] if j is not None else 0.0
        delta = v[CHAIN[i]] - low
        rows.append(
            {
                "layer": " + ".join(names[i:j] if j is not None else names[i:]),
                "delta_ns": delta,
                "delta_pct": 100 * delta / total if total else math.nan,
            }
        )
    return pd.DataFrame(rows, columns=["layer", "delta_ns", "delta_pct"])


def seed_cumulative(reference):
    r = reference[reference.kind == "cumulative"].sort_values("order", kind="stable")
    c = reference[reference.kind == "control"].set_index("item")["value"]
    return pd.DataFrame(
        {
            "layer": r["item"].to_numpy(),
            "mean_ns": pd.to_numeric(r["value"]).to_numpy(),
            "control_mean_ns": [pd.to_numeric(c.get(i), errors="coerce") for i in r["item"]],
        }
    )


def seed_delta(reference):
    r = reference[reference.kind == "delta"].sort_values("order", kind="stable")
    pct = reference[reference.kind == "delta_pct"].set_index("item")["value"]
    return pd.DataFrame(
        {
            "layer": r["item"].to_numpy(),
            "delta_ns": pd.to_numeric(r["value"]).to_numpy(),
            "delta_pct": [float(pct[i]) for i in r["item"]],
        }
    )


def breakdown(delta, source: str):
    """Delta rows as shares (stacked-bar input): source, layer, share_pct, ns."""
    return pd.DataFrame(
        {"source": source, "layer": delta.layer, "ns": delta.delta_ns, "share_pct": delta.delta_pct}
    )


def lifecycle(a, job: int, n: int = 1, pattern: str = "seq"):
    """The events of the request with the median total latency (of boot `job`) in time order:
    event, layer, where it runs, ns since the request started, ns since the previous event."""
    d = a[(a.job == job) & (a.warm == 0) & (a.pattern == pattern)]
    need = ["g_notify_ns", "g_irq_ns", "q_notify_ns", "h_issue_ns"]
    d = d.dropna(subset=[c for c in need if c in d])
    if d.empty:
        return pd.DataFrame()
    med = d.bench_ns.median()
    # nearest to the median first; of two as near (an even count's two middle requests), the
    # earlier request: a tie must not be left to the sort's algorithm, whose order of equal keys
    # differs between numpy's AVX-512 and AVX2 builds
    pick = (
        d.assign(_from_median=(d.bench_ns - med).abs())
        .sort_values(["_from_median", "idx"], kind="stable")
        .head(n)
    )
    where = LIFECYCLE_EVENTS
    rows = []
    for _, r in pick.iterrows():
        thread_sub = r.get("h_sub_thread") or ""
        for col, (event, layer, runs) in where.items():
            if col == "t1":
                t = r.bench_ns
            elif col == "t0":
                t = 0.0
            else:
                t = r.get(col, np.nan)
            if t is None or not np.isfinite(t):
                continue
            if col in ("h_sub_ns", "h_sub_exit_ns"):
                event = f"{event} ({r.get('h_sub_call')})"
                runs = f"QEMU {thread_sub} thread (host kernel)"
            rows.append(
                {
                    "request": int(r.idx),
                    "event": event,
                    "layer": layer,
                    "runs in": runs,
                    "t_ns": float(t),
                }
            )
    out = pd.DataFrame(rows).sort_values(["request", "t_ns"], kind="stable")
    out["since_prev_ns"] = out.groupby("request")["t_ns"].diff().fillna(0.0)
    return out.reset_index(drop=True)


LIFECYCLE_EVENTS = {
    "t0": ("pread() called", "guest", "guest user (seqread)"),
    "g_issue_ns": ("block_rq_issue", "guest", "guest kernel"),
    "g_notify_ns": ("vp_notify", "guest", "guest kernel"),
    "h_kick_ns": ("ioeventfd write (kick)", "host/QEMU boundary", "QEMU vCPU thread (host kernel)"),
    "h_kvm_notify_ns": ("kvm notify exit", "host kvm.ko", "host kernel"),
    "q_notify_ns": ("virtio_queue_notify", "QEMU", "QEMU main loop"),
    "q_pop_ns": ("virtqueue_pop", "QEMU", "QEMU main loop"),
    "q_read_ns": ("virtio_blk_handle_read", "QEMU", "QEMU main loop"),
    "q_submit_ns": ("aio submit (thread pool / io_uring)", "QEMU aio", "QEMU main loop"),
    "h_sub_ns": ("submission syscall enter", "host", "QEMU thread (host kernel)"),
    "h_issue_ns": ("block_rq_issue", "host", "host kernel"),
    "h_complete_ns": ("block_rq_complete", "host", "host kernel (interrupt)"),
    "h_sub_exit_ns": ("submission syscall exit", "host", "QEMU thread (host kernel)"),
    "q_cb_ns": ("aio completion callback", "QEMU aio", "QEMU main loop"),
    "q_rw_ns": ("virtio_blk_rw_complete", "QEMU", "QEMU main loop"),
    "q_req_ns": ("virtio_blk_req_complete", "QEMU", "QEMU main loop"),
    "q_flush_ns": ("virtqueue_flush", "QEMU", "QEMU main loop"),
    "q_irq_ns": ("virtio_notify(_irqfd)", "QEMU", "QEMU main loop"),
    "h_notifier_ns": (
        "guest notifier eventfd write",
        "host/QEMU boundary",
        "QEMU main thread (host kernel)",
    ),
    "h_kvm_irq_ns": ("MSI injection", "host kvm.ko", "host kernel"),
    "q_apic_ns": ("apic_deliver_irq", "QEMU (TCG APIC)", "QEMU main loop"),
    "g_irq_ns": ("vring_interrupt", "guest", "guest kernel (interrupt)"),
    "g_complete_ns": ("block_rq_complete", "guest", "guest kernel"),
    "t1": ("pread() returned", "guest", "guest user (seqread)"),
}


def accel_label(jobs) -> str:
    acc = sorted({a for a in jobs.get("accel", []) if isinstance(a, str) and a})
    return "/".join(a.upper() for a in acc) or "none"


def alignment_table(jobs):
    """Per boot that traced the guest and the host: the guest->host offset bracket (µs wide),
    which host event gave its lower bound, and the QEMU clock check (µs)."""
    j = (
        jobs[jobs.get("off_lo", pd.Series(dtype=float)).notna()]
        if "off_lo" in jobs
        else jobs.iloc[:0]
    )
    us = 1e6 / j.tsc_hz
    out = pd.DataFrame(
        {
            "round": j["round"],
            "aio": j.aio,
            "variant": j.variant,
            "accel": j.accel.str.upper(),
            "requests matched": j.off_n_hi.astype(int),
            "bracket width (µs)": (j.off_hi - j.off_lo) * us,
            "lower bound from": j.get("off_lo_from"),
            "consistent": j.off_consistent.astype(bool),
            "QEMU clock check low (µs)": j.qc_lo * us,
            "QEMU clock check high (µs)": j.qc_hi * us,
            "QEMU correction (µs)": j.qc * us,
        }
    )
    return out.sort_values(["aio", "round"], kind="stable").reset_index(drop=True)


def side_by_side_cumulative(cum, reference):
    """Our cumulative table beside the seed's (the seed's 'QEMU paio' sits in our 'QEMU aio' row)."""
    s = seed_cumulative(reference)
    seed_key = {
        "Guest benchmark": "guest_benchmark",
        "Guest virtio-pci": "guest_virtio_pci",
        "Host kvm.ko": "host_kvm",
        "QEMU virtio": "qemu_virtio",
        "QEMU paio": "qemu_aio",
        "Host benchmark": "host_benchmark",
    }
    s = s.assign(key=s.layer.map(seed_key)).set_index("key")
    ci_col = f"median {ci_label(cum['n'])} (ns)"  # real coverage of the rows' median CIs
    rows = []
    for r in cum.to_dict("records"):
        rows.append(
            {
                "layer": r["layer"],
                "seed 2010 (ns)": s.mean_ns.get(r["key"], math.nan),
                "seed control (ns)": s.control_mean_ns.get(r["key"], math.nan),
                "ours, mean (ns)": r["mean_ns"],
                "ours, median (ns)": r["median_ns"],
                ci_col: (
                    f"{r['ci_low']:,.0f}–{r['ci_high']:,.0f}" if math.isfinite(r["ci_low"]) else ""
                ),
                "ours, control (ns)": r["control_mean_ns"],
                "n": r["n"],
                "boots": r["boots"],
                "boot-to-boot CV (%)": r["boot_cv_pct"],
                "measured by": r["measured by"],
            }
        )
    return pd.DataFrame(rows)


def side_by_side_delta(delta, reference):
    s = seed_delta(reference).set_index("layer")
    rows = []
    for r in delta.itertuples():
        names = r.layer.split(" + ")
        seed_ns = sum(s.delta_ns.get(n, math.nan) for n in names)
        seed_pct = sum(s.delta_pct.get(n, math.nan) for n in names)
        rows.append(
            {
                "layer": r.layer,
                "seed 2010 (ns)": seed_ns,
                "seed 2010 (%)": seed_pct,
                "ours (ns)": r.delta_ns,
                "ours (%)": r.delta_pct,
            }
        )
    return pd.DataFrame(rows)


LAYER_LABELS = {
    "guest_benchmark": "guest benchmark",
    "guest_virtio_pci": "guest virtio-pci",
    "host_kvm": "host boundary (kvm.ko / TCG stand-in)",
    "qemu_virtio": "QEMU virtio",
    "qemu_aio": "QEMU aio",
    "qemu_pool": "QEMU aio submit -> callback",
    "host_syscall": "host submission syscall",
    "host_block": "host block device",
    "guest_block": "guest block layer",
    "host_benchmark": "host benchmark",
}


def percentiles(iv, keys, by=("aio",)):
    """p5 / p50 / p95 / p99 (µs) and n of each layer's per-request latency."""
    rows = []
    d = iv[iv.warm == 0]
    for key in keys:
        for grp, g in d.groupby(list(by)):
            x = g[key].dropna() / 1000
            if not len(x):
                continue
            grp = grp if isinstance(grp, tuple) else (grp,)
            rows.append(
                {
                    **dict(zip(by, grp)),
                    "layer": LAYER_LABELS.get(key, key),
                    "n": len(x),
                    "p5": x.quantile(0.05),
                    "median": x.median(),
                    "p95": x.quantile(0.95),
                    "p99": x.quantile(0.99),
                    "mean": x.mean(),
                }
            )
    return pd.DataFrame(rows)


def syscall_summary(iv):
    """The host submission syscall per aio mode: which call, how long (µs), n."""
    d = iv[(iv.warm == 0) & iv.host_syscall.notna()]
    rows = []
    for (aio, call), g in d.groupby(["aio", "host_sub_call"]):
        s = summarize(g.host_syscall / 1000)
        rows.append(
            {
                "aio": aio,
                "syscall": call,
                "n": s.n,
                "median (µs)": s.median,
                "CI": f"{s.ci_low:.1f}–{s.ci_high:.1f}",
                "mean (µs)": s.mean,
                "p95 (µs)": s.p95,
            }
        )
    t = pd.DataFrame(rows)
    # the column says the real coverage of the median CIs (below 95 % for n < 6)
    return t.rename(columns={"CI": ci_label(t["n"])}) if len(t) else t


def boot_medians(iv, key: str):
    """One value per boot: the median of `key` over its timed requests (both patterns), with
    the boot's round, aio mode and variant. Requests inside one boot share its conditions, so
    comparisons between modes count boots, not requests."""
    d = iv[(iv.warm == 0) & iv[key].notna()]
    return (
        d.groupby(["host_id", "run_id", "job", "round", "aio", "variant", "kind"])[key]
        .median()
        .reset_index()
    )


def order_text(values: dict, unit: str = "µs", fmt: str = "{:.1f}") -> str:
    """'native (193.4 µs) < threads (200.3 µs) < io_uring (210.0 µs)' from {name: value}."""
    items = sorted(((v, k) for k, v in values.items() if v == v), key=lambda t: t[0])
    return " < ".join(f"{k} ({fmt.format(v)} {unit})" for v, k in items)


def compare_cumulative(reference, tables: dict):
    """The seed's cumulative table beside ours, one column group per method: {label: cumulative}."""
    s = seed_cumulative(reference)
    seed_key = {
        "Guest benchmark": "guest_benchmark",
        "Guest virtio-pci": "guest_virtio_pci",
        "Host kvm.ko": "host_kvm",
        "QEMU virtio": "qemu_virtio",
        "QEMU paio": "qemu_aio",
        "Host benchmark": "host_benchmark",
    }
    s = s.assign(key=s.layer.map(seed_key)).set_index("key")
    out = pd.DataFrame(
        {"layer": [label for _k, label, _h in LAYER_ROWS]}, index=[k for k, _l, _h in LAYER_ROWS]
    )
    out["seed 2010 (ns)"] = s.mean_ns.reindex(out.index)
    out["seed control (ns)"] = s.control_mean_ns.reindex(out.index)
    for label, cum in tables.items():
        c = cum.set_index("key")
        out[f"{label}: mean (ns)"] = c.mean_ns
        out[f"{label}: median (ns)"] = c.median_ns
        out[f"{label}: control (ns)"] = c.control_mean_ns
        out[f"{label}: boots"] = c.boots
    out["measured by"] = [how for _k, _l, how in LAYER_ROWS]
    return out.reset_index(drop=True)


def compare_delta(reference, deltas: dict):
    """The seed's delta table beside ours ({label: delta table}); rows by the seed's layer names,
    a merged row of ours (an unmeasured layer) under its first name."""
    s = seed_delta(reference).set_index("layer")
    out = pd.DataFrame(index=[n for n, _u, _l in DELTA_ROWS])
    out["seed 2010 (ns)"] = s.delta_ns
    out["seed 2010 (%)"] = s.delta_pct
    for label, d in deltas.items():
        first = d.layer.str.split(" + ", regex=False).str[0]
        dd = d.assign(first=first).set_index("first")
        out[f"{label} (ns)"] = dd.delta_ns
        out[f"{label} (%)"] = dd.delta_pct
    return out.rename_axis("layer").reset_index()


# -- how many boots would resolve the aio modes ---------------------------------------------------
ARE_MANN_WHITNEY = 3 / math.pi  # asymptotic relative efficiency of Mann-Whitney against the t test


def boots_needed(
    a, b, alpha: float = 0.05, power: float = 0.8, reps: int = 2000, seed: int = 18
) -> dict:
    """Boots per group at which a two-sided Mann-Whitney test of `a` against `b` (per-boot medians)
    reaches `alpha` with `power`, if the observed Hodges-Lehmann shift and boot-to-boot spread were
    the truth. Normal approximation: n_t = 2 (z_{1-alpha/2} + z_power)^2 sd^2 / shift^2 for the
    t test, with sd the pooled standard deviation of the per-boot medians; Mann-Whitney needs
    n_t / (3/pi) (its asymptotic relative efficiency under normality). Checked by resampling: `reps`
    pairs of samples of that size, drawn with replacement from the observed per-boot medians
    (fixed seed), and the share the test calls significant."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    shift = float(hodges_lehmann(a, b)[0])
    sd = float(np.sqrt((a.var(ddof=1) + b.var(ddof=1)) / 2))
    z = st.norm.ppf(1 - alpha / 2) + st.norm.ppf(power)
    n = math.ceil(2 * z * z * sd * sd / (shift * shift) / ARE_MANN_WHITNEY) if shift else math.inf
    out = {
        "shift": shift,
        "sd": sd,
        "n": n,
        "n_have": min(len(a), len(b)),
        "sim_power": math.nan,
        "n_sim": math.inf,
    }
    if not math.isfinite(n) or n > 2000:
        return out

    def sim_power(k: int) -> float:
        rng = np.random.default_rng([seed, k])  # one stream per sample size: reproducible
        xa, xb = rng.choice(a, size=(reps, k)), rng.choice(b, size=(reps, k))
        return float(
            (st.mannwhitneyu(xa, xb, alternative="two-sided", axis=1).pvalue < alpha).mean()
        )

    out["sim_power"] = sim_power(n)
    lo, hi = 2, max(n, 4)  # the smallest k with sim_power(k) >= power, by bisection
    while sim_power(hi) < power:
        lo, hi = hi, hi * 2
        if hi > 4000:
            return out
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if sim_power(mid) >= power else (mid, hi)
    out["n_sim"] = hi
    return out


# ---- the chapter's Data -----------------------------------------------------------------------
# the layers of the distribution figure and the percentile table, top to bottom
KEYS = [
    "guest_benchmark",
    "guest_virtio_pci",
    "host_kvm",
    "qemu_virtio",
    "qemu_aio",
    "host_syscall",
    "host_block",
    "host_benchmark",
]

# natural keys: the analysis must not depend on the order rows were written in
ORDER = {"requests": ["job", "t0"], "jobs": ["job"], "calib": ["job", "tsc0"]}
PER_JOB = ["kind", "round", "aio", "variant", "accel"]  # what a request takes from its boot


class VirtioData(Data):
    """D["requests"], D["jobs"], D["calib"] sorted by boot and stamp; every request carries its
    boot's kind, round, aio mode, variant and accelerator. The quoted dataset's frames:
    D.req, D.jobs, D.p (its parameters), D.iv (per-request layer latencies), D.an (every stamp
    on the host's axis), D.cum / D.cum1 (the seed's cumulative table, one layer per boot / all
    at once), D.delta (the delta table the prose reads first), D.all_layers (the all-layer boots'
    and the host benchmark's timed requests), D.acc (the accelerator label) and D.hosts_caption."""

    def prepare(self, name: str, df):
        # a view of one dataset (a finding's) has one host_id and run_id on every row: sorting
        # and joining by them too (strings, hashed row by row) would change nothing
        ds = [] if self._only is not None and len(self._only) == 1 else ["host_id", "run_id"]
        if len(df) and name in ORDER:
            df = df.sort_values([*ds, *ORDER[name]], kind="stable", ignore_index=True)
        if name == "requests" and len(df):
            j = self["jobs"].reindex(columns=[*ds, "job"] + PER_JOB)
            j["aio"] = j["aio"].fillna("")
            j["accel"] = j["accel"].fillna("")
            df = df.merge(j, on=[*ds, "job"], how="left")
        return df

    # -- the quoted dataset (Data.quoted_rows: a fleet's notebook reads one requests table) --
    @cached_property
    def req(self):
        return self.quoted_rows("requests")

    @cached_property
    def jobs(self):
        return self.quoted_rows("jobs")

    @cached_property
    def guest_jobs(self):
        return self.jobs[self.jobs.kind == "guest"]

    @property
    def p(self) -> dict:
        return self.quoted.parameters

    @cached_property
    def iv(self):
        return layer_intervals(self.req, self.jobs)

    @cached_property
    def an(self):
        return aligned(self.req, self.jobs)

    @cached_property
    def cum(self):
        """The cumulative table, one layer per boot (the seed's method), aio=threads, sequential."""
        return cumulative_table(self.iv, "seed", aio="threads", pattern="seq")

    @cached_property
    def cum1(self):
        """The cumulative table, all layers at once, aio=threads, sequential."""
        return cumulative_table(self.iv, "one_run", aio="threads", pattern="seq")

    @property
    def have_seed_method(self) -> bool:
        """Whether the quoted dataset has the single-layer boots."""
        return bool(self.cum.set_index("key").loc["guest_virtio_pci", "n"])

    @cached_property
    def delta(self):
        """The delta table the prose reads first: one layer per boot when measured."""
        return delta_table(self.cum if self.have_seed_method else self.cum1)

    @cached_property
    def all_layers(self):
        """Timed requests of the all-layer boots and of the host benchmark."""
        iv = self.iv
        return iv[(iv.warm == 0) & ((iv.variant == "all") | (iv.kind == "host"))]

    def first_all_layer_boot(self, aio: str) -> int:
        j = self.jobs
        return j[(j.variant == "all") & (j.aio == aio)].job.min()

    @property
    def acc(self) -> str:
        return accel_label(self.jobs)

    @property
    def hosts_caption(self) -> list[tuple]:
        h = self.quoted.host
        return [(h["host_id"], h.get("description"))]

    @cached_property
    def ref(self):
        return self.reference(self.chapter.name)
