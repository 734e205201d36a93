"""python -m tools compare: this host's findings beside every other host's, and its nearest hosts."""
from __future__ import annotations

import pytest

from tools import compare
from tools.chapters import CHAPTERS
from tools.errors import PerfbookError
from tools.hosts import all_manifests, latest_per_host


def test_every_finding_of_the_host_is_placed_among_the_others():
    hosts = sorted(latest_per_host(all_manifests()))
    host = hosts[0]
    lines = []
    assert compare.report(host, say=lines.append) == 0
    assert lines[0] == f"where {host} sits among {len(hosts)} host(s), per key finding"
    measured = {m["chapter"] for m in all_manifests() if m["host"]["host_id"] == host}
    for entry in CHAPTERS:
        ch = entry.load()
        if ch.key_findings and entry.name in measured:
            at = lines.index(f"{entry.name}:")
            for i, f in enumerate(ch.key_findings):
                verdict = lines[at + 1 + 2 * i]
                assert verdict.startswith(f"  {f.key}: ") and " here" in verdict, verdict
                assert "other host(s) agree" in lines[at + 2 + 2 * i] or "no other host" in lines[at + 2 + 2 * i]
    near = lines.index("nearest hosts, and what differs from this one:")
    assert all(any(ln.startswith(f"  {h} (") for ln in lines[near:]) for h in hosts[1:3])


def test_a_host_without_data_is_one_clear_error():
    with pytest.raises(PerfbookError, match="has no dataset under data/runs"):
        compare.report("h-000000000000", say=lambda s: None)
