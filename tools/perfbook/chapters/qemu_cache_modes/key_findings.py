"""Key findings of the cache-modes chapter, each a claim about one number of one dataset,
computed by the chapter's analysis (analysis.guest_dd_table, semantics_table,
check_documented, pagecache_table, seed_dd) on the dataset's own tables.

The rates rest on the chapter's repetitions: the bench's rounds (each configuration once per
round, in shuffled order) and the guest's boots (guest_boots per mode, in shuffled rounds of
modes). A boot's timed dd rounds share the boot, so they are one value (their median), not
independent repetitions: a profile that boots each mode once (the default, for time) leaves
direct_penalty undecided, 1 against 1 boots. The traced semantics and
the page-cache residency are facts of one traced run and one boot per mode (exact values)."""

from __future__ import annotations

from perfbook.analysis import decide
from perfbook.analysis.decide import fmt
from perfbook.analysis.findings import Finding, Measured, Takeaway, guest_transfer

from . import analysis as A
from .prose import key_values

CACHING = ("writethrough", "writeback", "unsafe")  # the modes without O_DIRECT
DIRECT = ("none", "directsync")


def _guest_modes(run) -> list:
    p = run.manifest["parameters"]
    return list(p.get("guest_modes") or p.get("modes") or ())


def per_boot(t):
    """One value per guest boot (the guest's unit of repetition: its dd rounds share the boot,
    its page cache and its vCPU threads, so they are no independent repetitions): the median
    MB/s of the boot's timed rounds, with its mode and accelerator."""
    return t.groupby(["boot", "mode", "accel"], as_index=False)["mb_per_s"].median()


def direct_penalty(run):
    """directsync / none of the guest's dd rate with oflag=direct, one value per guest boot
    (per_boot). Boots under different accelerators are not compared: where both modes booted
    under KVM, those boots; else those under TCG."""
    if "guest_dd" not in run or not all(m in _guest_modes(run) for m in ("directsync", "none")):
        return None
    t = A.guest_dd_table(run["guest_dd"])
    b = per_boot(t[(t["variant"] == "direct") & t["mode"].isin(["directsync", "none"])])
    both = [a for a in ("kvm", "tcg") if set(b[b["accel"] == a]["mode"]) == {"directsync", "none"}]
    if both:
        b = b[b["accel"] == both[0]]
    ds, no = (b[b["mode"] == m]["mb_per_s"] for m in ("directsync", "none"))
    if ds.empty or no.empty:
        return None
    d = t[(t["variant"] == "direct") & t["boot"].isin(b["boot"])]
    rounds = int(d.groupby("boot").size().min())
    e = decide.ratio(ds, no, what=f"guest boots (median of {rounds} dd rounds each)")
    S = A.seed_dd(run.reference("qemu_cache_modes")).set_index(["mode", "variant"])["mb_per_s"]
    seed = S[("directsync", "direct")] / S[("none", "direct")]
    accel = "/".join(sorted(a.upper() for a in set(b["accel"])))
    return Measured(
        e,
        f"medians directsync {fmt(ds.median())}, none {fmt(no.median())} MB/s; {accel} guests; "
        f"the 2013 article's ratio, from another host and guest and so set beside this one, "
        f"not compared: 2013: {fmt(seed)}×",
    )


def wb_over_wt(run):
    """writeback / writethrough of qemu-img bench's raw writes at the smallest depth without
    flushes, one value per bench round."""
    if "bench" not in run:
        return None
    b = run["bench"]
    b = b[(b["format"] == "raw") & (b["op"] == "write") & (b["flush_interval"] == 0)]
    b = b[(b["depth"] == b["depth"].min()) & (b["round"] >= 0)]
    wb, wt = (b[b["mode"] == m]["mb_per_s"] for m in ("writeback", "writethrough"))
    if wb.empty or wt.empty:
        return None  # the dataset's modes left one of them out
    return Measured(
        decide.ratio(wb, wt, what="bench rounds"),
        f"medians writeback {fmt(wb.median())}, writethrough {fmt(wt.median())} MB/s",
    )


def semantics(run):
    """How many traced runs (mode, format, aio) differ from QEMU's documented mapping."""
    if "trace" not in run:
        return None
    chk = A.check_documented(A.semantics_table(run["trace"]))
    n, agree = len(chk), int(chk["agrees"].sum())
    return Measured(
        decide.exact(n - agree, f"{n} traced runs"),
        f"{agree} of {n} traced runs open and flush the image as documented",
    )


def pagecache(run):
    """The least share of the guest's disk the host's page cache held of the image under
    writethrough, writeback and unsafe (each mode's last boot, peak mincore residency)."""
    if "pagecache" not in run or not all(m in _guest_modes(run) for m in CACHING):
        return None
    t = A.pagecache_table(run["pagecache"]).drop_duplicates("mode", keep="last")
    share = (100 * t["image_resident_peak_mib"] / t["disk_mib"]).set_axis(t["mode"])
    least = min(share[m] for m in CACHING)
    direct = ", ".join(f"{m} {fmt(share[m])} %" for m in DIRECT if m in share)
    return Measured(
        decide.exact(least, "peak mincore residency, one guest boot per mode"),
        f"{', '.join(f'{m} {fmt(share[m])} %' for m in CACHING)} of "
        f"{int(t['disk_mib'].max())} MiB" + (f"; O_DIRECT modes {direct}" if direct else ""),
    )


FINDINGS = (
    Finding(
        "direct_penalty",
        "With oflag=direct in the guest, directsync keeps more than half of none's write rate",
        direct_penalty,
        quantity="directsync / none",
        side=">",
        threshold=0.5,
        unit="×",
        contrary="With oflag=direct in the guest, directsync keeps at most half of none's write rate",
        reproduce=(
            '.venv/bin/python -c "from perfbook.qemu.guest import *;'
            "[print(m,run_script('time dd if=/dev/zero of=/dev/vda bs=64k oflag=direct 2>&1|"
            "grep real',GuestConfig([DiskSpec(cache=m)])).output,end='') for m "
            "in('none','directsync')]\""
        ),
    ),
    Finding(
        "wb_over_wt",
        "writeback writes more than three times as fast as writethrough (qemu-img bench, raw "
        "image, smallest queue depth, no flushes)",
        wb_over_wt,
        quantity="writeback / writethrough",
        side=">",
        threshold=3.0,
        unit="×",
        contrary="writeback writes at most three times as fast as writethrough (qemu-img bench, "
        "raw image, smallest queue depth, no flushes)",
        reproduce=(
            "f=/tmp/wb.img;qemu-img create -qf raw -opreallocation=full $f 64M;sync $f;"
            "for m in writeback writethrough;do echo $m $(qemu-img bench -fraw -wt$m -d1 -s64k "
            "-c4096 $f|tail -1);done;rm $f"
        ),
    ),
    Finding(
        "semantics",
        "Every cache mode opens and flushes the image as QEMU documents it",
        semantics,
        quantity="traced runs that differ from QEMU's documented mapping",
        side="<",
        threshold=1,
        contrary="Some cache mode does not open or flush the image as QEMU documents it",
        reproduce=(
            "f=/tmp/sem.img;truncate -s1M $f;for m in writeback none writethrough directsync "
            "unsafe;do echo $m: $(strace -fe openat,fdatasync qemu-io -fraw -t$m -c'write 0 4k' "
            "-c'write 0 4k' -cflush $f 2>&1|grep -Eo 'O_DIRECT\\b|fdatasync');done;rm $f"
        ),
    ),
    Finding(
        "pagecache",
        "writethrough, writeback and unsafe each leave more than half of the guest's disk in "
        "the host page cache",
        pagecache,
        quantity="least share held (writethrough, writeback, unsafe)",
        side=">",
        threshold=50,
        unit="%",
        contrary="A caching mode (writethrough, writeback or unsafe) left half of the guest's "
        "disk or less in the host page cache",
        reproduce=(
            "f=/tmp/pc.img;for m in writethrough writeback unsafe none;do truncate -s64M $f;"
            "qemu-img bench -fraw -wt$m -s64k -c1024 $f>/dev/null;echo $m $(fincore -no RES $f);"
            "done;rm $f"
        ),
    ),
)


def _seed_text(D) -> str:
    S = A.seed_dd(D.reference("qemu_cache_modes")).set_index(["mode", "variant"])["mb_per_s"]
    ds, no = S[("directsync", "direct")], S[("none", "direct")]
    return (
        f"2013 (QEMU 1.4, KVM): directsync {fmt(ds)} MB/s against none's {fmt(no)}, {fmt(ds / no)}×"
    )


_TRANSFER = guest_transfer(
    key_values,
    under_tcg=(
        "The guests here ran under TCG (an emulated CPU): each write spends far more guest "
        "CPU time than under KVM, which dilutes the cost of the flush, so expect a bare-metal "
        "KVM host to lose more to directsync than this ratio says"
    ),
    under_kvm="The guests ran under KVM; the ratio depends on how fast the host's disk flushes",
)


TAKEAWAY = Takeaway(
    finding="direct_penalty",
    mechanism="directsync adds a flush after every guest write to what none does (both bypass "
    "the host's page cache).",
    seed=_seed_text,
    transfer=_TRANSFER,
)
