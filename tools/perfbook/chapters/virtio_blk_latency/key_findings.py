"""Key findings of the virtio-blk latency chapter, each decided on one number with its interval
(perfbook.analysis.decide), computed per dataset from the chapter's per-request layer latencies
(analysis.layer_intervals: run.data.iv).

The unit of repetition is the boot: requests inside one boot share its conditions (the guest's
placement, its tracing, the host's state), so every comparison counts boots, each boot one
value, as the chapter's own tests between aio modes do (analysis.boot_medians). The seed's 2010
figures are exact published numbers, shown beside ours."""

from __future__ import annotations

import numpy as np

from perfbook.analysis import decide
from perfbook.analysis.decide import fmt
from perfbook.analysis.findings import Finding, Measured, Takeaway, guest_transfer

from . import analysis as A
from .prose import NOTE

# The two cells (kind, aio, variant) of boots each finding compares: every round boots each
# once (collect.plan_round), so n rounds give n against n boots. The default profile's cells
# and rounds are chosen from this (tests/test_virtio_blk_latency.py checks that they reach the
# coverage decide.ratio needs).
HOST = ("host", "", "host_bench")
NEEDS = {
    "guest_host": (("guest", "threads", "plain"), HOST),
    "hostio": (("guest", "threads", "qemu"), ("guest", "threads", "plain")),
    "tracing_cost": (("guest", "threads", "all"), ("guest", "threads", "plain")),
    "submit": (("guest", "native", "all"), ("guest", "threads", "all")),
}


def _cell(c: tuple) -> dict:
    return dict(zip(("kind", "aio", "variant"), c))


def _timed(run, pattern: str | None = "seq"):
    """The dataset's timed requests (of `pattern`; None: both)."""
    iv = run.data.iv
    iv = iv[iv.warm == 0]
    return iv[iv.pattern == pattern] if pattern else iv


def _per_boot(iv, key: str, how: str = "median", **where):
    """One value per boot of `key` over the boots matching `where` (column = value)."""
    for c, v in where.items():
        iv = iv[iv[c] == v]
    d = iv[iv[key].notna()]
    return d.groupby("job")[key].agg(how).to_numpy(float)


def _med(x) -> str:
    return fmt(float(np.median(x)) / 1000)


def _seed(run):
    ref = run.reference("virtio_blk_latency")
    cum = A.seed_cumulative(ref).set_index("layer").mean_ns
    return cum, A.seed_delta(ref).set_index("layer").delta_pct


def guest_host(run):
    """aio=threads' untraced guest boots against the host benchmark's boots, sequential 4 KiB
    reads: the ratio of their boot medians."""
    if "requests" not in run:
        return None
    iv = _timed(run)
    gc, hc = NEEDS["guest_host"]
    g = _per_boot(iv, "guest_benchmark", **_cell(gc))
    h = _per_boot(iv, "host_benchmark", **_cell(hc))
    if not len(g) or not len(h):
        return None
    cum, _ = _seed(run)
    return Measured(
        decide.ratio(g, h, what="boots (each the median of its requests)"),
        f"guest {_med(g)} µs, host {_med(h)} µs per read (medians of boot medians; 2010: "
        f"{fmt(cum['Guest benchmark'] / cum['Host benchmark'])}×); guest under {run.data.acc}",
    )


def hostio(run):
    """The host's own I/O (the QEMU aio layer, virtio_blk_handle_read -> rw_complete) as a share
    of the guest's read, from boot means as the seed's delta table: with the single-layer boots,
    the 'qemu' boots' QEMU aio against the untraced boots' guest benchmark (the seed's method;
    the ratio of the two sets of boot means); without them, each all-layer boot's own share."""
    if "requests" not in run:
        return None
    iv = _timed(run)
    qc, gc = NEEDS["hostio"]
    q = _per_boot(iv, "qemu_aio", "mean", **_cell(qc))
    g = _per_boot(iv, "guest_benchmark", "mean", **_cell(gc))
    if len(q) and len(g):
        e = decide.ratio(q, g, what="boots (each the mean of its requests, as the seed's table)")
        e = decide.scaled(e, 0.01)  # a fraction -> percent
    else:
        a = iv[(iv.kind == "guest") & (iv.aio == "threads") & (iv.variant == "all")]
        a = a[a.qemu_aio.notna() & a.guest_benchmark.notna()]
        if not len(a):
            return None
        m = a.groupby("job")[["qemu_aio", "guest_benchmark"]].mean()
        e = decide.location(
            100 * m.qemu_aio / m.guest_benchmark,
            what="all-layer boots' shares (each of the boot's means)",
        )
    _, delta = _seed(run)
    return Measured(
        e, f"2010, a KVM guest: {fmt(delta['Host I/O'])} %; guest here under {run.data.acc}"
    )


def tracing_cost(run):
    """aio=threads, sequential reads: the guest benchmark of the boots that trace every layer
    against the untraced boots, the ratio of their boot medians."""
    if "requests" not in run:
        return None
    iv = _timed(run)
    tc, uc = NEEDS["tracing_cost"]
    t = _per_boot(iv, "guest_benchmark", **_cell(tc))
    u = _per_boot(iv, "guest_benchmark", **_cell(uc))
    if not len(t) or not len(u):
        return None
    return Measured(
        decide.ratio(t, u, what="boots (each the median of its requests)"),
        f"all layers traced {_med(t)} µs, untraced {_med(u)} µs (medians of boot medians)",
    )


def submit(run):
    """The host's submitting system call in the all-layer boots, aio=native against aio=threads
    (both access patterns): the ratio of their boot medians."""
    if "requests" not in run:
        return None
    iv = _timed(run, None)
    nc, tc = NEEDS["submit"]
    n = _per_boot(iv, "host_syscall", **_cell(nc))
    t = _per_boot(iv, "host_syscall", **_cell(tc))
    iv = iv[(iv.kind == "guest") & (iv.variant == nc[2])]
    if not len(n) or not len(t):
        return None

    def call(aio):
        c = iv[(iv.aio == aio) & iv.host_syscall.notna()].host_sub_call
        return ", ".join(sorted(set(c.dropna()))) or "?"

    return Measured(
        decide.ratio(n, t, what="boots (each the median of its requests)"),
        f"{call('native')} {_med(n)} µs, {call('threads')} {_med(t)} µs per request "
        "(traced; medians of boot medians)",
    )


FINDINGS = (
    Finding(
        "guest_host",
        "A 4 KiB O_DIRECT read takes the guest more than twice as long as the host",
        guest_host,
        quantity="guest / host time per read",
        side=">",
        threshold=2.0,
        unit="×",
        contrary="A 4 KiB O_DIRECT read takes the guest at most twice as long as the host",
        reproduce=(
            "head -c64M /dev/zero>/tmp/vbl.img;sync;dd if=/tmp/vbl.img of=/dev/null bs=4k "
            'iflag=direct;.venv/bin/python -c "from perfbook.qemu.guest import*;'
            "print(run_script('time dd if=/dev/vda of=/dev/null bs=4k iflag=direct',"
            "GuestConfig([DiskSpec(path='/tmp/vbl.img',cache='none')])).output)\";rm /tmp/vbl.img"
        ),
    ),
    Finding(
        "hostio",
        "The host I/O layer (QEMU's aio round trip, the seed's bottom row) takes less than half "
        "of a guest read's time",
        hostio,
        quantity="host I/O share of a guest read",
        side="<",
        threshold=50.0,
        unit="%",
        contrary="The host I/O layer (QEMU's aio round trip, the seed's bottom row) takes half of "
        "a guest read's time or more",
        reproduce=(
            'head -c64M /dev/zero>/tmp/vbl.img;sync;.venv/bin/python -c "from perfbook.qemu.guest '
            "import*;run_script('dd if=/dev/vda of=/dev/null bs=4k iflag=direct',"
            "GuestConfig([DiskSpec(path='/tmp/vbl.img',cache='none')],extra_args='-trace "
            "virtio_blk_* -D /tmp/vbl.log -msg timestamp=on'.split()))\";awk -F'[@:]' "
            '\'/_read/{if($2-t<.1)c+=$2-t;t=$2}/rw_c/{s+=$2-t}END{print "host I/O",s,"of",c,"s"}\' '
            "/tmp/vbl.log;rm /tmp/vbl.*"
        ),
    ),
    Finding(
        "tracing_cost",
        "Tracing every layer makes a request more than 10 % slower",
        tracing_cost,
        quantity="traced / untraced guest read",
        side=">",
        threshold=1.10,
        unit="×",
        contrary="Tracing every layer makes a request at most 10 % slower",
        reproduce=(
            'head -c64M /dev/zero>/tmp/vbl.img;sync;.venv/bin/python -c "from perfbook.qemu.guest '
            "import*;[print(a,run_script('time -f%e dd if=/dev/vda of=/dev/null bs=4k iflag=direct "
            "status=none',GuestConfig([DiskSpec(path='/tmp/vbl.img',cache='none')],"
            "extra_args=a.split())).output) for a in ('','-trace virt* -trace thread_pool* -D "
            "/tmp/vbl.log -msg timestamp=on')]\";rm /tmp/vbl.*"
        ),
    ),
    Finding(
        "submit",
        "aio=native submits a request faster (io_submit) than aio=threads reads it (pread64)",
        submit,
        quantity="aio=native's submitting call / aio=threads'",
        side="<",
        threshold=1.0,
        unit="×",
        contrary="aio=native does not submit a request faster (io_submit) than aio=threads "
        "reads it (pread64)",
        reproduce=(
            "for e in libaio psync;do fio --name=$e --ioengine=$e --filename=/tmp/vbl.img "
            '--size=64M --direct=1 --unlink=1|grep -E "^$e|[sc]lat \\(";done'
        ),
    ),
)


def _seed_text(D) -> str:
    ref = D.reference("virtio_blk_latency").set_index(["kind", "item"])["value"]
    g, h = ref[("cumulative", "Guest benchmark")], ref[("cumulative", "Host benchmark")]
    return (
        f"2010 (KVM wiki, 8-core host, LVM stripe): guest {fmt(g / 1000)} µs against host "
        f"{fmt(h / 1000)} µs, {fmt(g / h)}×"
    )


_TRANSFER = guest_transfer(
    NOTE,
    under_tcg=(
        "The guest here ran under TCG (an emulated CPU), so its share of the time is far "
        "larger than a KVM guest's; on a bare-metal KVM host expect a ratio nearer the 2010 one"
    ),
    under_kvm="The guest ran under KVM: the ratio should carry over to a bare-metal KVM host",
)


TAKEAWAY = Takeaway(
    finding="guest_host",
    mechanism="A guest's read passes its own block layer, a virtqueue kick that exits to QEMU, "
    "QEMU's virtio-blk and the host's I/O before it completes.",
    seed=_seed_text,
    transfer=_TRANSFER,
)
