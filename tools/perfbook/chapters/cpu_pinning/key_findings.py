"""Key findings of the CPU pinning chapter, from the chapter's values for one dataset.

The pinning effect depends on the design: with one worker per CPU an unpinned worker has
little room to move, while the seed's prefork pools had more workers than cores. So the pinning
finding is split by design, and a dataset answers only the one its design measured (the other
is "not measured" for it)."""

from __future__ import annotations

from perfbook.analysis.findings import Finding, Outcome, from_glue, num, sections

from .prose import effects, run, seed, switches

# what the tests below read, not every value the prose quotes
_g = sections(run, effects, switches, seed)


def _ci_high(text):
    return num(str(text).split(" to ")[1].rstrip(")"))


def _pinning(g):
    hi = _ci_high(g["cpu_pinned_rate"])
    return Outcome(
        hi < 0,
        f"{g['workers']} workers on {g['ncpu']} CPUs; pinned, fixed rate: CPU per request "
        f"{g['cpu_pinned_rate']}; 2015: {g['seed_pin']} %",
    )


def pin_cpu(g):
    """One worker per CPU (the design of the first datasets)."""
    return _pinning(g) if int(g["workers"]) == int(g["ncpu"]) else None


def pin_cpu_pool(g):
    """More workers than CPUs, as in the seed's prefork pools."""
    return _pinning(g) if int(g["workers"]) > int(g["ncpu"]) else None


def no_migration(g):
    m = num(g["mig_pinned_rate"])
    return Outcome(
        m == 0,
        f"pinned workers: {g['mig_pinned_rate']} migrations/s (unpinned {g['mig_unpinned_rate']})",
    )


def batch(g):
    b, u = num(g["inv_batch_rate"]), num(g["inv_unpinned_rate"])
    return Outcome(
        b < 0.5 * u, f"involuntary switches per request: SCHED_BATCH {b:g}, default {u:g}"
    )


def counters(g):
    d = num(g["trace_maxdiff"])
    return Outcome(
        d == 0, f"{g['trace_agree']} trials agree; largest difference {g['trace_maxdiff']}"
    )


FINDINGS = (
    Finding(
        "pin_cpu_pool",
        "With more workers than CPUs, as in the seed's prefork pool, pinning the workers "
        "lowers CPU time per request by a resolvable amount, as the seed reported",
        from_glue(_g, pin_cpu_pool),
        contrary="With more workers than CPUs, pinning the workers did not lower CPU time per request "
        "resolvably",
    ),
    Finding(
        "pin_cpu",
        "With one worker per CPU, pinning the workers lowers CPU time per request by a "
        "resolvable amount",
        from_glue(_g, pin_cpu),
        contrary="With one worker per CPU, pinning the workers did not lower CPU time per request resolvably",
    ),
    Finding("no_migration", "Pinned workers never migrate", from_glue(_g, no_migration)),
    Finding(
        "batch",
        "SCHED_BATCH cuts involuntary context switches to less than half",
        from_glue(_g, batch),
    ),
    Finding(
        "counters",
        "/proc/<pid>/sched and the sched_migrate_task tracepoint count the same migrations",
        from_glue(_g, counters),
    ),
)
