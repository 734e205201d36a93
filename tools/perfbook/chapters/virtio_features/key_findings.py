"""Key findings of the virtio feature-bits chapter: facts of one boot, decided per dataset.

A features file is an exact readout, read once per boot: nothing here is sampled, so each
finding's number is an exact count (decide.exact) from the chapter's decoded frames, and a
host's runs agree or leave it undecided (findings.judge). The decoder's own coverage (every
negotiated bit has a name) and the kernel's CONFIG_WCE-gated cache_type write are checks of
the tool and of a tautology, not findings: the page states them in words (unknown_sentence,
n_writable / n_cwce) and the unit tests check them.
"""

from __future__ import annotations

from perfbook.analysis import decide
from perfbook.analysis.findings import Finding, Measured, Takeaway

from .analysis import quoted
from .prose import guest_rules

# the 2013 article's features files: the kernel printed 64 bits (data/reference/
# virtio_features.csv holds the two strings; tests/test_virtio_features.py checks their length)
SEED_BITS = 64


def _lengths(devs) -> str:
    return ", ".join(str(n) for n in sorted(set(devs["n_chars"]))) or "none"


def host_length(run):
    """The shortest features file of this host's virtio devices, in bits (characters), an
    exact readout; None for a host without virtio devices (it has no features file)."""
    if "sysfs" not in run:
        return None
    D = run.data
    host = quoted(D, D.devices, "host")
    if host.empty:
        return None
    guests = quoted(D, D.devices, "guest")
    seed = sorted({len(f) for f in D.seed["features"]})
    return Measured(
        decide.exact(int(host["n_chars"].min()), f"{len(host)} devices' features files, read once"),
        f"{len(host)} host devices; the guests' files: {_lengths(guests)} bits; "
        f"2013: {', '.join(map(str, seed))} bits",
    )


def cache_rule(run):
    """How many guest disks without CONFIG_WCE show a cache_type other than the spec's rule
    gives from FLUSH (write back exactly when FLUSH was negotiated): an exact count over the
    disks, each read once. The default boots one guest per vCPU count with several disks, so
    the basis names the boots the disks shared, not one boot per disk (#40). None where no such
    disk was booted (no guest ran, or the profile's configurations all negotiate CONFIG_WCE)."""
    if "configs" not in run:
        return None
    g = guest_rules(run.data)
    n, ok = g["n_rule_checked"], g["n_rule_ok"]
    if n == 0:
        return None
    D = run.data
    gb = quoted(D, D.blocks, "guest")
    gb = gb[gb["cache_type_consistent"].notna()]
    flush = int(gb["flush"].astype(bool).sum())
    return Measured(
        decide.exact(
            n - ok,
            f"{n} guest disks without CONFIG_WCE in {gb['boot'].nunique()} boot(s), each read once",
        ),
        f"{n} disks without CONFIG_WCE checked, {flush} of them with FLUSH",
    )


FINDINGS = (
    Finding(
        "longer",
        "This host's kernel prints features files longer than 64 characters, one per feature bit",
        host_length,
        quantity="shortest features file on this host",
        side=">",
        threshold=SEED_BITS,
        unit="bits",
        contrary="This host's kernel prints features files of at most 64 characters",
        reproduce="uname -r;awk '{print FILENAME, length}' /sys/bus/virtio/devices/*/features",
    ),
    Finding(
        "rules",
        "On every guest disk without CONFIG_WCE, the kernel's cache_type follows the spec's "
        "rule: write back exactly when FLUSH was negotiated",
        cache_rule,
        quantity="disks whose cache_type breaks the rule",
        side="<",
        threshold=1,
        contrary="Some guest disk without CONFIG_WCE shows a cache_type the FLUSH rule does "
        "not give",
        reproduce=(
            ".venv/bin/python -c 'from perfbook.qemu.guest import*;print(run_script(\"for d in "
            "/sys/block/vd*;do echo $d FLUSH=$(cut -c10 $d/device/features) $(cat $d/cache_type);"
            'done",GuestConfig([DiskSpec("a",config_wce=0),DiskSpec("b",write_cache=0,config_wce=0)'
            "])).output)'"
        ),
    ),
)


def _seed_text(D) -> str:
    ref = D.reference("virtio_features", {"features": str})
    n = sorted(set(ref["features"].str.len()))
    return f"2013 (a local KVM guest and a VPS): features files of {' and '.join(map(str, n))} bits"


def _transfer(D, host) -> str:
    return (
        "The file is the guest kernel's view of the features it negotiated: its length follows "
        "the guest kernel's version, not the accelerator or the hardware"
    )


TAKEAWAY = Takeaway(
    finding="longer",
    mechanism="A guest's /sys/bus/virtio/devices/*/features prints the negotiated feature "
    "bits, one character per bit.",
    seed=_seed_text,
    transfer=_transfer,
)
