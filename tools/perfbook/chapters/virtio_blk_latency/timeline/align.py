"""virtio_blk_latency: one time axis. The guest's TSC is put on the host's with a causality
bracket (the TSC alignment chapter's method), QEMU's gettimeofday() stamps with a calibration
line checked by another bracket. Pure: arrays and frames in, numbers out."""

from __future__ import annotations

import math

import numpy as np

from ..parse import BASES


def offset_bracket(g_notify, h_after_notify, g_irq, h_before_irq) -> dict:
    """Bounds on the constant `off` with host_tsc = guest_tsc + off, from causality.

    Each guest notify happens before the host sees it: g_notify + off <= h_after_notify, so
    off <= min(h_after_notify - g_notify). Each host event that leads to the interrupt happens
    before the guest's handler runs: h_before_irq <= g_irq + off, so off >= max(h_before_irq - g_irq).
    NaN pairs are ignored. Returns lo, hi, width, mid, n_lo, n_hi, consistent (lo <= hi)."""
    a = np.asarray(h_after_notify, dtype="float64") - np.asarray(g_notify, dtype="float64")
    b = np.asarray(h_before_irq, dtype="float64") - np.asarray(g_irq, dtype="float64")
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    hi = float(a.min()) if len(a) else math.nan
    lo = float(b.max()) if len(b) else math.nan
    return {
        "lo": lo,
        "hi": hi,
        "width": hi - lo,
        "mid": (lo + hi) / 2,
        "n_lo": int(len(b)),
        "n_hi": int(len(a)),
        "consistent": bool(lo <= hi) if len(a) and len(b) else None,
    }


def fit_clock(calib) -> dict:
    """TSC against CLOCK_REALTIME and CLOCK_MONOTONIC_RAW from calibration samples (the clock read
    between two TSC reads; the narrower half of the samples), as least-squares lines around a
    reference point: tsc = tsc_ref + slope * (real_ns - 1000 * real_ref_us). Also the TSC rate in
    Hz. The reference is a whole microsecond, so that QEMU's microsecond stamps subtract exactly
    in float64."""
    c = calib.copy()
    w = (c.tsc1 - c.tsc0).astype("float64")
    c = c[w <= w.quantile(0.5)]
    tsc_ref, raw_ref = int(c.tsc0.iloc[0]), int(c.raw_ns.iloc[0])
    real_ref_us = int(c.real_ns.iloc[0]) // 1000
    real_ref = real_ref_us * 1000
    mid = np.array(
        [(int(a) + int(b)) / 2 - tsc_ref for a, b in zip(c.tsc0, c.tsc1)], dtype="float64"
    )
    real = np.array([int(x) - real_ref for x in c.real_ns], dtype="float64")
    raw = np.array([int(x) - raw_ref for x in c.raw_ns], dtype="float64")
    s_real, i_real = np.polyfit(real, mid, 1)
    s_raw, _ = np.polyfit(raw, mid, 1)
    resid = mid - (s_real * real + i_real)
    return {
        "tsc_ref": tsc_ref + i_real,
        "real_ref_us": real_ref_us,
        "slope": float(s_real),
        "tsc_hz": float(s_raw * 1e9),
        "resid_max": float(np.abs(resid).max()),
        "span_s": float(real.max() - real.min()) / 1e9,
    }


def real_to_tsc(us, fit: dict):
    """QEMU's microsecond stamps (gettimeofday) -> host TSC through the fit (start of the µs)."""
    x = np.asarray(us, dtype="float64")
    return fit["tsc_ref"] + fit["slope"] * ((x - fit["real_ref_us"]) * 1000.0)


def qemu_bracket(q_after, h_before, q_before, h_after, res_cyc: float) -> dict:
    """Bounds on a correction c of mapped QEMU stamps (true = mapped + c + u, u in [0, res)):
    a QEMU event that follows a host event (q_after after h_before) gives c > h_before - q_after - res;
    one that precedes a host event (q_before before h_after) gives c < h_after - q_before."""
    lo_v = np.asarray(h_before, dtype="float64") - np.asarray(q_after, dtype="float64") - res_cyc
    hi_v = np.asarray(h_after, dtype="float64") - np.asarray(q_before, dtype="float64")
    lo_v, hi_v = lo_v[~np.isnan(lo_v)], hi_v[~np.isnan(hi_v)]
    lo = float(lo_v.max()) if len(lo_v) else math.nan
    hi = float(hi_v.min()) if len(hi_v) else math.nan
    return {
        "lo": lo,
        "hi": hi,
        "mid": (lo + hi) / 2,
        "width": hi - lo,
        "n_lo": int(len(lo_v)),
        "n_hi": int(len(hi_v)),
        "consistent": bool(lo <= hi) if len(lo_v) and len(hi_v) else None,
    }


def qemu_correction(b: dict) -> float:
    """The calibration line is far more precise than the causality bracket (tens of cycles
    against tens of microseconds), so it is kept as it is (0) when the bracket allows that, and
    moved to the nearest bound when it does not."""
    lo, hi = b["lo"], b["hi"]
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
        return 0.0
    return float(min(max(0.0, lo), hi))


def alignment_summary(req, jrow: dict) -> dict:
    """The guest->host offset bracket and the QEMU clock correction bracket of one boot."""
    out = {}
    need_g = {"g_notify", "g_irq"} <= set(req.columns)
    has_h = "h_anchor" in req.columns
    fit = {
        "tsc_ref": jrow.get("q_tsc_ref"),
        "real_ref_us": jrow.get("q_real_ref_us"),
        "slope": jrow.get("q_slope"),
    }
    if need_g and has_h:
        kick = (
            req.h_anchor + req.h_kick
            if req.h_kick.notna().any()
            else req.h_anchor + req.h_kvm_notify
        )
        before = (
            req.h_anchor + req.h_notifier
            if req.h_notifier.notna().any()
            else req.h_anchor + req.h_kvm_irq
        )
        b = offset_bracket(req.t0 + req.g_notify, kick, req.t0 + req.g_irq, before)
        out.update(
            {
                "off_lo": b["lo"],
                "off_hi": b["hi"],
                "off_n_lo": b["n_lo"],
                "off_n_hi": b["n_hi"],
                "off_consistent": b["consistent"],
                "off_lo_from": "host notifier write",
            }
        )
        if "q_apic" in req.columns and req.q_apic.notna().any():
            # QEMU's apic_deliver_irq is closer to the guest's handler; its microsecond stamp
            # starts no later than the event, so it is a valid lower bound too
            qb = offset_bracket(
                req.t0 + req.g_notify,
                kick,
                req.t0 + req.g_irq,
                real_to_tsc(req.q_anchor + req.q_apic, fit),
            )
            if math.isfinite(qb["lo"]) and qb["lo"] > b["lo"]:
                out.update(
                    {
                        "off_lo": qb["lo"],
                        "off_n_lo": qb["n_lo"],
                        "off_lo_from": "QEMU apic_deliver_irq",
                        "off_consistent": bool(qb["lo"] <= b["hi"]),
                    }
                )
    if has_h and "q_anchor" in req.columns:
        qa = req.q_anchor
        res_cyc = 1000.0 * jrow["q_slope"]
        h = req.h_anchor
        # after-host: virtio_queue_notify follows the vCPU kick; virtio_blk_rw_complete follows the
        # block completion. before-host: virtio_queue_notify precedes the submission syscall (the
        # notify runs the request up to its submission).
        q_after = list(real_to_tsc(qa, fit)) + list(real_to_tsc(qa + req.q_rw, fit))
        h_before = list(h + req.h_kick) + list(h + req.h_complete)
        q_before = real_to_tsc(qa, fit)
        h_after = h + req.h_sub
        b = qemu_bracket(q_after, h_before, q_before, h_after, res_cyc)
        out.update(
            {
                "qc_lo": b["lo"],
                "qc_hi": b["hi"],
                "qc_consistent": b["consistent"],
                "qc": qemu_correction(b),
            }
        )
    return out


def relative_to_bases(req) -> dict:
    """Store the absolute anchors (guest TSC, host TSC, QEMU microseconds) relative to the
    boot's smallest one (in place); the bases go into the job's row."""
    out = {}
    for col, base in BASES.items():
        if col in req.columns and req[col].notna().any():
            b = int(req[col].min())
            req[col] = req[col] - b
            out[base] = b
    return out
