"""Key findings of the virtio-blk latency chapter, from the chapter's values for one dataset
(prose.KEY: the sections of the prose values the tests below read)."""

from __future__ import annotations

from perfbook.analysis.findings import Finding, Outcome, from_glue, num

from .prose import KEY


def guest_host(g):
    r, s = num(g["ratio_guest_host"]), num(g["seed_ratio_guest_host"])
    return Outcome(
        r > 2,
        f"guest {g['c_guest_benchmark_us']} µs, host {g['c_host_benchmark_us']} µs per 4 KiB "
        f"read: {r:g}× (2010: {s:g}×); guest under {g['accel']}",
    )


def hostio(g):
    ours, seed = num(g["d_hostio_pct"]), num(g["seed_hostio_pct"])
    return Outcome(ours < 50, f"host I/O {ours:g} % of a request (2010: {seed:g} %)")


def tracing_cost(g):
    c = num(g["trace_cost_pct"])
    return Outcome(
        c > 10,
        f"all layers traced: {g['ctrl_all_us']} µs, untraced {g['ctrl_plain_us']} µs ({c:+g} %)",
    )


def submit(g):
    n, t = num(g["sys_native_us"]), num(g["sys_threads_us"])
    return Outcome(
        n < t,
        f"{g['sys_native_call']} {n:g} µs, {g['sys_threads_call']} {t:g} µs per request (traced)",
    )


FINDINGS = (
    Finding(
        "guest_host",
        "A 4 KiB O_DIRECT read takes the guest more than twice as long as the host",
        from_glue(KEY, guest_host),
        contrary="A 4 KiB O_DIRECT read takes the guest less than twice as long as the host",
    ),
    Finding(
        "hostio",
        "The host's own I/O is less than half of a guest read's time, where it was two thirds in 2010",
        from_glue(KEY, hostio),
        contrary="The host's own I/O is still more than half of a guest read's time",
    ),
    Finding(
        "tracing_cost",
        "Tracing every layer makes a request more than 10 % slower",
        from_glue(KEY, tracing_cost),
    ),
    Finding(
        "submit",
        "aio=native submits a request faster (io_submit) than aio=threads reads it (pread64)",
        from_glue(KEY, submit),
    ),
)
