"""The tables the chapter shows, ready to display (frames in, frames out), and the chapter's
columns of the runs table."""

from __future__ import annotations

import pandas as pd

from . import analysis as A


def offsets(D):
    """Per dataset and ioctl kind: how the API's offset and the tracepoint compare."""
    oc = A.offsets(D)
    byk = (
        oc.groupby(["host_id", "run_id", "kind"], sort=False)
        .agg(
            n=("kind", "size"),
            api_equals_trace=("match", "sum"),
            api_offset_zero=("api_offset", lambda s: int((s == 0).sum())),
            event_inside_ioctl=("event_in_ioctl", "sum"),
            offset_reused=("same_as_prev", "sum"),
            median_trace_next=("trace_next", "median"),
        )
        .reset_index()
    )
    byk["median_trace_next"] = byk["median_trace_next"].round().astype("int64")
    return byk


def msr(D):
    """Per dataset: the offsets KVM computed for the two TSC MSR writes."""
    oc = A.offsets(D)
    return (
        oc[oc["kind"].isin(["set_msr", "set_msr_again"])]
        .groupby(["host_id", "run_id", "kind"], sort=False)
        .agg(
            writes=("kind", "size"),
            median_offset=("trace_next", "median"),
            min_offset=("trace_next", "min"),
            max_offset=("trace_next", "max"),
            reused_previous=("same_as_prev", "sum"),
        )
        .reset_index()
    )


def skew(D):
    return A.skew_bounds(D["skew_pingpong"])[
        [
            "host_id",
            "run_id",
            "round",
            "cpu_a",
            "cpu_b",
            "n",
            "lo",
            "hi",
            "consistent",
            "bound",
            "rtt_median",
            "rtt_min",
        ]
    ]


def timeline(D):
    return A.timeline(D)[["t_cycles", "source", "what"]]


def facts(D):
    return A.facts(D).set_index("key")[["value", "source"]]


def inside(D):
    """inside_summary of every shown dataset (one per host)."""
    bs = A.brackets(D, "shown")
    return pd.concat(
        [
            A.inside_summary(g).assign(host_id=h, run_id=r)
            for (h, r), g in bs.groupby(["host_id", "run_id"])
        ],
        ignore_index=True,
    )


def widths(D):
    ws = A.width_summary(A.brackets(D, "shown"), by=("host_id", "variant", "cpu"))
    return ws[
        ["host_id", "variant", "cpu", "n", "median", "ci_low", "ci_high", "p5", "p95", "p99", "max"]
    ].round(0)


def host_comparison(D):
    hc = A.host_comparison(D)
    if not len(hc):
        return "no host comparison (see the text above)"
    return hc[
        [
            "variant",
            "host_id",
            "baseline",
            "n_a",
            "n_b",
            "median_a",
            "median_b",
            "shift",
            "shift_low",
            "shift_high",
            "cliffs_delta",
            "p_value",
            "verdict",
        ]
    ].round(3)


def reference(D):
    return D.reference("tsc_alignment")[
        ["quantity", "value", "unit", "date", "environment", "note"]
    ]


def run_columns(m, data) -> dict:
    """The runs table's columns of this chapter: vendor module, nesting, rounds, repetition."""
    ex = m.facts.get("tsc_alignment", {})
    rounds = A.measured_rounds(data["bracket"]) if len(data["bracket"]) else {}
    return {
        "KVM vendor module": " ".join(ex.get("kvm_vendor_modules", [])) or "none",
        "nested": ex.get("nested"),
        "rounds": rounds.get(m.key, 0),
        "repetition": "adaptive" if "rep_target" in m.parameters else "fixed",
    }
