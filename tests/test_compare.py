"""python -m perfbook compare: this host's findings beside every other host's, and its nearest hosts."""

from __future__ import annotations

import pytest

from perfbook.analysis.hosts import all_manifests, latest_per_host
from perfbook.book import compare
from perfbook.chapters import CHAPTERS
from perfbook.core.errors import PerfbookError


def test_every_finding_of_the_host_is_placed_among_the_others(book_data):
    """What `make all` ends with, for the host that measured the newest datasets (the reader's
    own after their make all): each of its key findings placed among the other hosts'."""
    from perfbook.analysis import fleetview

    data = book_data.data_dir
    hosts = sorted(latest_per_host(all_manifests(data)))
    host = book_data.host or fleetview.reference_host()["host_id"]
    lines = []
    assert compare.report(host, data, say=lines.append) == 0
    assert lines[0] == f"where {host} sits among {len(hosts)} host(s), per key finding"
    measured = {m["chapter"] for m in all_manifests(data) if m["host"]["host_id"] == host}
    for entry in CHAPTERS:
        ch = entry.load()
        if ch.key_findings and entry.name in measured:
            at = lines.index(f"{entry.name}:")
            for i, f in enumerate(ch.key_findings):
                verdict = lines[at + 1 + 2 * i]
                assert verdict.startswith(f"  {f.key}: ") and " here" in verdict, verdict
                assert (
                    "other host(s) agree" in lines[at + 2 + 2 * i]
                    or "no other host" in lines[at + 2 + 2 * i]
                )
    near = lines.index("nearest hosts, and what differs from this one:")
    listed = [ln.split()[0] for ln in lines[near + 1 :] if ln.startswith("  h-")]
    assert len(listed) == min(2, len(hosts) - 1) and set(listed) <= set(hosts) - {host}, lines[
        near:
    ]


def test_a_host_without_data_is_one_clear_error():
    with pytest.raises(PerfbookError, match="has no dataset under data/runs"):
        compare.report("h-000000000000", say=lambda s: None)
