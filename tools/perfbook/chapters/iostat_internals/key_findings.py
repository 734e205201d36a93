"""Key findings of the iostat -x chapter, each a claim about one number of one dataset,
computed by the chapter's analysis (analysis.round_columns, flush_origin) on the dataset's
own frames (run.data.analysis()).

The chapter's unit of repetition is the round (every repeated phase once, in rotating order):
the IOPS and aqu-sz findings rest on one value per measured round, each over the phase's steady
part between two of our own diskstats snapshots (analysis.steady_columns), so a dataset of two
rounds gives intervals of real coverage well below 95 % and stays undecided on its own (util
needs 4 against 4 rounds, aqu 6); a host's runs pool (perfbook.analysis.findings). Our columns against sysstat's iostat and await against the
block tracepoints' mean latency are the chapter's checks of its own arithmetic (both read the
same accounting), not findings: the chapter shows them in its tables and text."""

from __future__ import annotations

from perfbook.analysis import decide
from perfbook.analysis.decide import fmt
from perfbook.analysis.findings import Finding, Measured, Takeaway

from .analysis import flush_origin, per_round_rates, round_columns

QD1, QD16, FSYNC = "randread_4k_qd1", "randread_4k_qd16", "fsync_4k"
FIO_IODEPTH = 16  # the iodepth of the depth-16 phase (parse.PHASES)
EXTRA_FLUSH_PCT = 2  # "fewer than 2 % from anything else": of the flush requests


def _rounds(run, phase):
    """round_columns of `phase` for the dataset (its steady parts from our own snapshots, else
    its iostat intervals), or None where it did not run the phase (its parameters' phases) or
    has neither table."""
    if phase not in run.manifest["parameters"].get("phases", ()):
        return None
    if "windows" not in run and "intervals" not in run:
        return None
    return round_columns(run.data.analysis(), phase)


def util(run):
    """IOPS at depth 16 over IOPS at depth 1 (4 KiB random reads), per measured round."""
    a, b = _rounds(run, QD16), _rounds(run, QD1)
    if a is None or b is None:
        return None
    e = decide.ratio(a["iops"], b["iops"], what="rounds")
    return Measured(
        e,
        f"median %util {fmt(b['util'].median())} % at depth 1 ({fmt(b['iops'].median())} IOPS), "
        f"{fmt(a['util'].median())} % at depth 16 ({fmt(a['iops'].median())} IOPS)",
    )


def aqu(run):
    """aqu-sz of the depth-16 random reads, one time-average per measured round."""
    a = _rounds(run, QD16)
    if a is None:
        return None
    return Measured(
        decide.location(a["aqu"], what="rounds"),
        f"per round: {', '.join(fmt(x) for x in a['aqu'])}",
    )


def _journal(run) -> str:
    """What the dataset recorded about the scratch file system's journal (collect.fs_facts):
    the chapter formats no file system, it uses the one under the scratch directory. On ext4
    without a journal no journal commit exists, so the fsync finding then says only that
    nothing else sent flushes."""
    fs = (run.manifest.get("facts") or {}).get("filesystem") or {}
    j = fs.get("journal")
    if j is None:
        return "journal of the file system not recorded"
    if j == "none":
        return "ext4 without a journal, so no journal commit could add a flush"
    return f"ext4 with a jbd2 journal ({j})"


def fsync(run):
    """The share of the fsync phase's flush requests that no empty preflush write accounts
    for (journal commits, where the file system has a journal, and other flushes), counted
    in its trace windows."""
    if "trace_windows" not in run or FSYNC not in run.manifest["parameters"].get("phases", ()):
        return None
    A = run.data.analysis()
    fo = flush_origin(A.get("trace_windows_raw"), FSYNC)
    if not fo:
        return None
    extra = max(0, fo["flush_requests"] - fo["empty_preflush"])
    e = decide.share(
        extra,
        fo["flush_requests"],
        what=f" flush requests in {fo['windows']} trace windows of one run",
    )
    e = decide.scaled(e, 0.01)  # in %
    pr = per_round_rates(A.get("ours"), A.get("phases"), FSYNC, "write")
    per = (
        f"; per fsync {fmt(pr['wr_per_op'].median())} writes and "
        f"{fmt(pr['fl_per_op'].median())} flushes (median of {len(pr)} rounds)"
        if len(pr)
        else ""
    )
    return Measured(
        e,
        f"{fmt(fo['flush_requests'])} flush requests for {fmt(fo['empty_preflush'])} empty "
        f"preflush writes{per}; {_journal(run)}",
    )


FINDINGS = (
    Finding(
        "util",
        "%util at queue depth 1 was not saturation: depth 16 gave more than twice the IOPS",
        util,
        quantity="IOPS at depth 16 / depth 1",
        side=">",
        threshold=2.0,
        unit="×",
        contrary="Depth 16 did not give twice the IOPS of depth 1: the %util at depth 1 may "
        "have been close to saturation",
        reproduce=(
            "for d in 1 16;do fio --name=qd$d --directory=/tmp --size=128M --rw=randread "
            "--direct=1 --ioengine=libaio --iodepth=$d --runtime=5 --time_based --unlink=1|"
            "grep -E 'IOPS=|util=';done"
        ),
    ),
    Finding(
        "aqu",
        "aqu-sz stays below half of fio's iodepth of 16",
        aqu,
        quantity="aqu-sz at fio iodepth 16",
        side="<",
        threshold=FIO_IODEPTH / 2,
        contrary="aqu-sz reaches half of fio's iodepth of 16 or more",
        reproduce=(
            "fio --name=qd16 --directory=/tmp --size=128M --rw=randread --direct=1 "
            "--ioengine=libaio --iodepth=16 --runtime=6 --time_based --unlink=1 >/dev/null&sleep "
            "2;iostat -dxyz 1 3|awk '/^[a-z]/{print $1,\"aqu-sz\",$(NF-1)}';wait"
        ),
    ),
    Finding(
        "fsync",
        "Every flush request of the fsync phase came from an fsync's own empty preflush write "
        "(fewer than 2 % from anything else)",
        fsync,
        quantity="share of flush requests without an empty preflush",
        side="<",
        threshold=EXTRA_FLUSH_PCT,
        unit="%",
        contrary="2 % or more of the fsync phase's flush requests came from something other "
        "than the fsyncs' empty preflush writes (journal commits or other writers)",
        reproduce=(
            "bpftrace -e 't:block:block_bio_queue "
            '/args->rwbs=="FWS"/{@empty_preflush_FWS=count()} t:block:block_rq_issue '
            "/args->rwbs==\"FF\"/{@flush_requests_FF=count()}' -c '/usr/bin/fio --name=fsync "
            "--directory=/tmp --size=64M --rw=randwrite --fsync=1 --runtime=5 --time_based "
            "--unlink=1 --output=/dev/null'"
        ),
    ),
)


def _seed_text(D) -> str:
    ref = D.reference("iostat_internals")
    row = ref[ref["item"] == "io_ticks"].iloc[0]
    return f"2013 reading of the Linux 3.x source: %util is the {row['seed_reading']}"


def _transfer(D, host) -> str:
    return (
        "The accounting is the block layer's and sysstat's, the same on bare metal; how far "
        "IOPS still grows past 100 % %util depends on the device's internal parallelism"
    )


TAKEAWAY = Takeaway(
    finding="util",
    mechanism="%util counts the time at least one request is in flight, not the device's "
    "capacity in use.",
    seed=_seed_text,
    transfer=_transfer,
)
