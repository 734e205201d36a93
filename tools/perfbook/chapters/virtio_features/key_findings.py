"""Key findings of the virtio feature-bits chapter, from the chapter's values for one dataset."""

from __future__ import annotations

from perfbook.analysis.findings import Finding, Outcome, from_glue, num, sections

from .prose import guest_rules, host_findings, overview, seed_findings

# what the tests below read, not every value the prose quotes
_g = sections(overview, host_findings, seed_findings, guest_rules)


def longer(g):
    h, s = int(num(g["host_chars"])), int(num(g["seed_len"]))
    return Outcome(
        h > s, f"this host's features files: {h} bits; the guest's: {g['guest_chars']}; 2013: {s}"
    )


def rules(g):
    ok, n = int(num(g["n_rule_ok"])), int(num(g["n_rule_checked"]))
    return Outcome(n > 0 and ok == n, f"{ok} of {n} checked rules hold")


def wce(g):
    c, w = int(num(g["n_cwce"])), int(num(g["n_writable"]))
    return Outcome(
        w > 0 and c == w, f"CONFIG_WCE in {c} of {w} guest configurations with a writable cache"
    )


def named(g):
    n = int(num(g["n_unknown_devices"]))
    return Outcome(
        n == 0,
        "every bit named" if n == 0 else f"{n} device(s) with unnamed bits: {g['unknown_where']}",
    )


FINDINGS = (
    Finding(
        "longer",
        "Today's features files are longer than the 64 bits the 2013 article read",
        from_glue(_g, longer),
        contrary="Today's features files are no longer than the 64 bits of 2013",
    ),
    Finding(
        "rules",
        "Every negotiated bit obeys the spec's dependency rules checked here",
        from_glue(_g, rules),
    ),
    Finding(
        "wce",
        "QEMU offers CONFIG_WCE in every guest configuration with a writable cache",
        from_glue(_g, wce),
    ),
    Finding(
        "named",
        "Every negotiated bit of this host's devices has a name in the decoder's tables",
        from_glue(_g, named),
        contrary="Some negotiated bit of this host's devices has no name in the decoder's tables",
    ),
)
