"""Key findings of the qcow2 overlap-check chapter, from the chapter's values for one dataset."""

from __future__ import annotations

from perfbook.analysis.findings import Finding, Outcome, from_glue, num

from .prose import key_values as _g  # what the tests below read, not every value the prose quotes


def prealloc_share(g):
    share, lo = num(g["pre_big_share"]), num(g["pre_big_extra_lo"])
    return Outcome(
        share > 10 and lo > 0,
        f"cached {g['pre_big_extra']} s more CPU than none ({share:g} % of the run; interval "
        f"{g['pre_big_extra_lo']} to {g['pre_big_extra_hi']} s, {g['pre_big_sig']}) preallocating "
        f"{g['pre_big_mib']} MiB with 512-byte clusters (2014: {g['seed_pct_create']} % of cycles "
        f"creating a {g['seed_create_gib']} GB image)",
    )


def superlinear(g):
    lo = num(g["pre_k_lo"])
    if lo != lo:  # NaN: fewer than 3 sizes with a positive shift, no interval
        return None
    return Outcome(
        lo > 1,
        f"fitted exponent {g['pre_k']} (95 % interval {g['pre_k_lo']} to "
        f"{g['pre_k_hi']}, R² {g['pre_r2']}, {g['pre_fit_n']} sizes)",
    )


def formula(g):
    lo, hi = num(g["formula_ratio_min"]), num(g["formula_ratio_max"])
    return Outcome(
        lo >= 0.99 and hi <= 1.01, f"counted / predicted metadata clusters: {lo:g} to {hi:g}"
    )


def all_snapshots(g):
    a, c, lo = num(g["sn_all_us"]), num(g["sn_cached_us"]), num(g["sn_all_lo_us"])
    return Outcome(
        a > 10 * max(abs(c), 1.0) and lo > 0,
        f"per write with {g['sn_snapshots']} snapshots: all {a:+g} µs (interval {g['sn_all_lo_us']} to "
        f"{g['sn_all_hi_us']} µs), cached {c:+g} µs",
    )


FINDINGS = (
    Finding(
        "prealloc_share",
        "With 512-byte clusters, the cached overlap check adds a significant shift of "
        "more than 10 % to the CPU time of preallocating the largest image measured",
        from_glue(_g, prealloc_share),
        contrary="The data do not show the cached overlap check adding more than 10 % CPU time to "
        "preallocation: the share is smaller or the shift is not significant",
    ),
    Finding(
        "superlinear",
        "The check's extra CPU grows faster than the image size: the 95 % interval of the "
        "fitted power law's exponent lies above 1",
        from_glue(_g, superlinear),
        contrary="The data do not establish that the check's extra CPU grows faster than the image size: "
        "the 95 % interval of the fitted exponent reaches 1 or below",
    ),
    Finding(
        "formula",
        "The seed's metadata formula predicts the images' metadata clusters within 1 %",
        from_glue(_g, formula),
    ),
    Finding(
        "all_snapshots",
        "With internal snapshots, mode all adds more than ten times what cached adds per write",
        from_glue(_g, all_snapshots),
        contrary="The data do not show mode all adding more than ten times what cached adds per write with "
        "internal snapshots",
    ),
)
