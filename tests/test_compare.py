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


def test_the_page_sets_this_machine_beside_the_books_finding_by_finding(book_data):
    """The site's page view (compare.page_html): for each chapter the host measured, one row
    per finding that links to it in its chapter, this machine's verdict, number and interval,
    what the interval rests on and how many runs decide it, beside the book's machine: its
    reference host, or where this machine is that host, the host its chapter quotes, or where
    it is that one too (a clone of the reference machine on a newer kernel: spanning_builds),
    its newest build beside the book's runs on its other builds. A machine without data gets
    the command that gives it some, not an error."""
    import re

    from perfbook.analysis import fleetview
    from perfbook.analysis.findings import evaluate

    data = book_data.data_dir
    ref = fleetview.reference_host(data)["host_id"]
    host = book_data.host or ref
    page = compare.page_html(host, data)
    measured = {m["chapter"] for m in all_manifests(data) if m["host"]["host_id"] == host}
    tables = page.split('<table class="table pb-compare">')[1:]
    want = [e for e in CHAPTERS if e.load().key_findings and e.name in measured]
    assert len(tables) == len(want)
    decide = r"\d+ runs?( decides?|, none deciding|, none measured it)"
    splits = 0
    for entry, table in zip(want, tables):
        ch = entry.load()
        D = ch.load(data)
        head = table.split("</thead>")[0]
        assert f'{compare.THIS_MACHINE}: <span class="kf-machine" title="{host}">' in head
        others = re.findall(r'<th>[^<]*: <span class="kf-machine" title="(h-[0-9a-f]+)">', head)
        assert others[0] == host and all(o != host for o in others[1:])
        split = compare.SPLIT_OURS in head
        if others[1:]:
            assert others[1] in (ref, D.quoted.host_id) and not split
        else:  # this machine is the reference host and the quoted one: its builds apart
            assert host == ref == D.quoted.host_id
            assert split == any(len(evaluate(D, f, host).builds) > 1 for f in ch.key_findings)
        splits += split
        rows = table.split("<tbody>")[1].split("</tr>")[:-1]
        assert len(rows) == len(ch.key_findings)
        for f, row in zip(ch.key_findings, rows):
            assert f'href="{entry.notebook[:-6]}.html#kf-{f.key}"' in row
            cells = row.split("<td")[2:]
            v = evaluate(D, f, host)
            if split and v.builds:
                builds = sorted(v.builds, key=lambda b: max(b.run_ids))
                assert (
                    f">{builds[-1].verdict}</span> <small>on {builds[-1].build.split()[0]}<"
                    in (cells[0])
                )
                for b in builds[:-1]:
                    assert f">{b.verdict}</span> <small>on {b.build.split()[0]}<" in cells[1]
                assert len(cells) == 2
                continue
            for h, cell in zip(others, cells):
                assert f">{evaluate(D, f, h).verdict}</span>" in cell
                assert re.search(decide, cell), cell
    # a clone of the reference machine on a newer kernel sees its two builds apart
    if book_data.scenario == "spanning_builds":
        assert splits == len(want)
    assert "pb-compare-none" not in page
    none = compare.page_html("h-000000000000", data)
    assert "pb-compare-none" in none and "sudo make all" in none
