"""Key findings of the qcow2 overlap-check chapter, from the chapter's values for one dataset."""
from __future__ import annotations

from ...findings import Finding, Outcome, from_glue, num


def _g(D):
    from . import findings
    return findings(D)


def prealloc_share(g):
    share = num(g["pre_big_share"])
    return Outcome(share > 10, f"cached adds {g['pre_big_extra']} s of CPU ({share:g} %) preallocating "
                   f"{g['pre_big_mib']} MiB with 512-byte clusters (2014: {g['seed_pct_create']} % of cycles "
                   f"creating a {g['seed_create_gib']} GB image)")


def superlinear(g):
    k = num(g["pre_slope"])
    return Outcome(k > 1, f"log-log slope of the extra CPU against image size: {k:g}")


def formula(g):
    lo, hi = num(g["formula_ratio_min"]), num(g["formula_ratio_max"])
    return Outcome(lo >= 0.99 and hi <= 1.01, f"counted / predicted metadata clusters: {lo:g} to {hi:g}")


def all_snapshots(g):
    a, c = num(g["sn_all_us"]), num(g["sn_cached_us"])
    return Outcome(a > 10 * max(abs(c), 1.0), f"per write with {g['sn_snapshots']} snapshots: all +{a:g} µs, "
                   f"cached +{c:g} µs")


KEY_FINDINGS = (
    Finding("prealloc_share", "The cached overlap check adds more than 10 % CPU time to preallocating "
            "the largest image measured", from_glue(_g, prealloc_share),
            contrary="The cached overlap check adds at most 10 % CPU time to preallocation"),
    Finding("superlinear", "The check's extra CPU grows faster than the image size", from_glue(_g, superlinear),
            contrary="The check's extra CPU grows no faster than the image size"),
    Finding("formula", "The seed's metadata formula predicts the images' metadata clusters within 1 %",
            from_glue(_g, formula)),
    Finding("all_snapshots", "With internal snapshots, mode all adds more than ten times what cached adds per write",
            from_glue(_g, all_snapshots)),
)
