"""iostat_internals: the tables the page shows, each from D (its quoted dataset's analysis,
D.analysis(), or every host's, D.host_analyses()), and the chapter's columns of the runs table."""

from __future__ import annotations

import pandas as pd
from IPython.display import HTML, Markdown

from perfbook.analysis.repetition import FIXED_REPETITION

from .analysis import compare_hosts, in_written_order
from .parse import PHASES


def run_columns(m, data) -> dict:
    """The chapter's columns of the runs table for dataset m (data: the Data of m alone)."""
    ph = data["phases"]
    nwin = (
        data["windows"].groupby(["host_id", "run_id"])["window"].nunique()
        if len(data["windows"])
        else {}
    )
    mine = (
        ph[(ph["host_id"] == m.host_id) & (ph["run_id"] == m["run_id"]) & (ph["round"] >= 0)]
        if len(ph)
        else ph
    )
    return {
        "device": m.facts.get("device", {}).get("name"),
        "rounds": mine["round"].nunique() if len(mine) else 0,
        "intervals": m["tables"].get("intervals", 0),
        "trace windows": int(nwin.get((m.host_id, m["run_id"]), 0)) if len(nwin) else 0,
        "repetition": "adaptive" if "repetition" in m["tables"] else "fixed",
    }


def phase_table(D):
    """Per phase: what it runs (the chapter's own description, parse.PHASES, where the dataset's
    wording is older), the rounds and fio's median IOPS."""
    A = D.analysis()
    ph = D["phases"][
        (D["phases"]["host_id"] == A["manifest"]["host"]["host_id"])
        & (D["phases"]["run_id"] == A["run_id"])
    ]
    ph = ph.assign(what=[PHASES.get(p, {}).get("what", w) for p, w in zip(ph["phase"], ph["what"])])
    return (
        ph.groupby("phase", sort=False)
        .agg(
            what=("what", "first"),
            runs=("round", "size"),
            fio_read_iops=("fio_read_iops", "median"),
            fio_write_iops=("fio_write_iops", "median"),
        )
        .round(0)
    )


def _ci(m, lo, hi, fmt: str) -> list[str]:
    """'median [low, high]' strings, formatted at the source."""
    return [f"{a:{fmt}} [{b:{fmt}}, {c:{fmt}}]" for a, b, c in zip(m, lo, hi)]


def repetition_table(D):
    """Per dataset and phase: the rounds, the median IOPS with its 95 % interval, the relative
    width reached and whether it met the target (the rest of repetition.csv is linked under
    Datasets)."""
    rk = in_written_order(D["repetition"], "repetition")
    if not len(rk):
        return Markdown(
            f"No dataset of this chapter has a repetition table yet: all of them used {FIXED_REPETITION}."
        )
    out = rk[["host_id", "run_id", "key", "n"]].rename(columns={"key": "phase", "n": "rounds"})
    return out.assign(
        **{
            "median IOPS [95 % CI]": _ci(rk["median"], rk["ci_low"], rk["ci_high"], ".0f"),
            "rel. CI width": rk["rel_ci_width"].round(3),
            "met target": rk["met_target"],
        }
    )


def phase_glance(D):
    """Phases at a glance: per phase, the steady intervals, IOPS median [95 % CI] and the medians
    of the columns the prose discusses (the CIs of the others, and rareq-sz/wareq-sz, are in
    the analysis' phase_summary; the per-interval values are intervals.csv)."""
    ps = D.analysis()["phase_summary"]
    out = ps[["phase", "n"]].rename(columns={"n": "intervals"})
    return out.assign(
        **{
            "IOPS [95 % CI]": _ci(ps["IOPS"], ps["IOPS lo"], ps["IOPS hi"], ".0f"),
            "await ms": ps["await"].round(3),
            "aqu-sz": ps["aqu-sz"].round(2),
            "%util": ps["%util"].round(1),
            "f/s": ps["f/s"].round(0),
            "%wrqm": ps["%wrqm"].round(1),
        }
    )


def disagreement(D):
    """Per column: the intervals compared with sysstat, the share within the stated tolerance,
    the largest gaps (analysis.disagreement_table of the quoted dataset)."""
    return D.analysis()["disagree"].round(4)


def outside_tolerance(D):
    """Every value of ours outside the tolerance that sysstat's own divisor does not explain."""
    c = D.analysis()["cmp"]
    return c[~c["agree"]][
        ["seq", "phase", "prev_phase", "column", "ours", "ours_nominal", "sysstat", "count"]
    ].round(3)


def trace_await_table(D):
    """Per phase and direction: the tracepoints' mean latency beside await (medians over the
    trace windows)."""
    ta = D.analysis()["trace_await"]
    return (
        ta[ta["op"] != "all"]
        .groupby(["phase", "op"], sort=False)[
            [
                "n_trace",
                "trace_mean_ms",
                "await_ms",
                "diff_ms",
                "device_mean_ms",
                "trace_p50_ms",
                "trace_p99_ms",
            ]
        ]
        .median()
        .round(4)
    )


def trace_util_table(D):
    """Per phase: the tracepoints' busy time and occupancy beside %util and aqu-sz (medians over
    the trace windows)."""
    return (
        D.analysis()["trace_util"]
        .groupby("phase", sort=False)[
            ["trace_busy_pct", "device_busy_pct", "%util", "occupancy", "aqu-sz"]
        ]
        .median()
        .round(2)
    )


def host_overview(D):
    """One row per host (its shown dataset): how well its counters agree with sysstat and
    with the tracepoints."""
    rows = [S["overview"] for S in D.host_analyses().values() if "overview" in S]
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def host_comparison(D):
    """Each host against the first, phase by phase, on the IOPS of its steady intervals."""
    cmp = compare_hosts(D.host_analyses())
    if not len(cmp):
        return None
    return cmp[
        [
            "phase",
            "host_id",
            "baseline",
            "n_a",
            "n_b",
            "median_a",
            "median_b",
            "rel_shift",
            "rel_low",
            "rel_high",
            "p_value",
            "cliffs_delta",
            "verdict",
        ]
    ].round(4)


def seed(D, values: dict):
    """The seed's reading of each counter beside today's, with the evidence from our data
    (`values`: the prose's, prose.values(D)), long cells shown whole."""
    f = values
    verdict = {
        "merges": (
            "held",
            "counted when a bio joins an existing request, now in the plug or the scheduler",
            f"%wrqm {f.get('seqwrite_4k_qd16_wrqm', 'n/a')} % for sequential 4 KiB writes sent 16 at a time",
        ),
        "ios": (
            "held",
            "counted at completion (blk_account_io_done)",
            f"our counts agree with sysstat's: {f.get('agree_pct', 'n/a')} % of all values",
        ),
        "sectors": (
            "held",
            "counted per completed chunk (blk_update_request)",
            f"rareq-sz {f.get('seqread_1m_qd1_rareq', 'n/a')} kB for 1 MiB O_DIRECT reads "
            "(what reached the device, after the queue limits split them)",
        ),
        "avgrq-sz": (
            "split",
            "per direction, in kB: rareq-sz, wareq-sz, dareq-sz",
            f"rareq-sz {f.get('buffered_seqread_rareq', 'n/a')} kB for 128 KiB buffered reads (readahead)",
        ),
        "ticks": (
            "changed unit and start point",
            "ns sums from blk_account_io_start() (the bio becomes a request) to completion, printed in ms",
            f"trace mean vs await: median gap {f.get('trace_med_rel_pct', 'n/a')} %",
        ),
        "time_in_queue": (
            "changed",
            "sum of completed requests' latencies; in-flight requests add nothing until they end",
            f"time_in_queue - sum of ticks: at most {f.get('tiq_max_resid', 'n/a')} ms per interval",
        ),
        "io_ticks": (
            "changed",
            "jiffies between accounting events while requests are in flight (update_io_ticks; since 6.10 a start adds time only if requests were in flight)",
            f"{f.get('jiffy_share_pct', 'n/a')} % of deltas are whole {f.get('jiffy_ms', '?')} ms jiffies",
        ),
        "svctm": ("gone", "removed from sysstat in 12.1.2", "-"),
        "in_flight": (
            "changed mechanism",
            "per-CPU counts raised at request start and lowered at completion, summed when the file is read (bdev_count_inflight)",
            "-",
        ),
        "interval": (
            "changed",
            "sysstat 12.x divides by /proc/uptime deltas in 1/100 s",
            f"rate gaps {f.get('max_rate_rel_pct', 'n/a')} % (ns clock) vs {f.get('max_rate_rel_pct_uptime', 'n/a')} % (uptime clock)",
        ),
    }
    rows = []
    for _, r in D.reference("iostat_internals").iterrows():
        v = verdict.get(r["item"], ("?", "?", "?"))
        rows.append(
            {
                "counter": r["counter"],
                "3.x column": r["iostat_column_3x"],
                "seed's reading (3.x)": r["seed_reading"],
                "today (6.x, sysstat 12.x)": v[1],
                "verdict": v[0],
                "evidence in our data": v[2],
            }
        )
    with pd.option_context("display.max_colwidth", 200):
        return HTML(pd.DataFrame(rows).set_index("counter").to_html())
