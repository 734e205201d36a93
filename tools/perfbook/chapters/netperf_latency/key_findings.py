"""Key findings of the netperf latency chapter, from the chapter's values for one dataset."""

from __future__ import annotations

from perfbook.analysis.findings import Finding, Outcome, from_glue, num, sections

from .prose import cells, crossval, pin_ratios, seed_ratio, seed_selectors

# what the tests below read, not every value the prose quotes
_g = sections(seed_selectors, cells, pin_ratios, crossval, seed_ratio)


def faster(g):
    r = num(g["seed_over_now_mean"])
    return Outcome(
        r > 2,
        f"netperf mean round trip {g['now_np_mean']} µs against 2013's {g['seed_mean']} µs "
        f"(2013 / now: {r:g}); loopback UDP P50 {g['loopback_udp_none_P50']} µs",
    )


def pin_same(g):
    r = num(g["pin_loopback_udp_same_p50"])
    return Outcome(r < 0.9, f"loopback UDP P50 pinned to one CPU / unpinned: {r:g}")


def veth(g):
    d = num(g["veth_minus_lo_udp"])
    return Outcome(
        d < 2,
        f"veth minus loopback, UDP P50 unpinned: {d:g} µs ({g['veth_minus_lo_pct']} % of "
        f"loopback's {g['loopback_udp_none_P50']} µs)",
    )


def crossval(g):
    a, n = int(num(g["cv_agree"])), int(num(g["cv_total"]))
    return Outcome(
        a == n, f"{a} of {n} percentiles within tolerance (largest difference {g['cv_max_abs']} µs)"
    )


def tail(g):
    r = num(g["tail_ratio"])
    return Outcome(r < 3, f"loopback UDP, unpinned: P99 / P50 {r:g}, max / P50 {g['max_ratio']}")


FINDINGS = (
    Finding(
        "faster",
        "Loopback round trips are more than twice as fast as the 2013 article measured",
        from_glue(_g, faster),
        contrary="Loopback round trips are not twice as fast as in 2013",
    ),
    Finding(
        "pin_same",
        "Pinning client and server to one CPU lowers the loopback UDP median by more than 10 %",
        from_glue(_g, pin_same),
    ),
    Finding(
        "veth",
        "A veth pair between namespaces adds less than 2 µs to the UDP median",
        from_glue(_g, veth),
        contrary="A veth pair between namespaces adds 2 µs or more to the UDP median",
    ),
    Finding(
        "crossval",
        "netperf's percentiles agree with our own histogram within the stated tolerance",
        from_glue(_g, crossval),
    ),
    Finding(
        "tail",
        "On loopback UDP without pinning, the P99 is less than three times the median",
        from_glue(_g, tail),
        contrary="On loopback UDP without pinning, the P99 is three times the median or more",
    ),
)
