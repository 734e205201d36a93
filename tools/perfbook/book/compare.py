"""Where does my machine sit? This host's key findings beside every other host's.

    python -m perfbook compare [--host ID] [--data-dir DIR]

For each chapter finding (perfbook.analysis.findings): this host's verdict with its numbers, and how many
hosts share that verdict. Then the hosts nearest to this one (the most identity and
environment facts in common) and the facts in which they differ, since those are what a
different verdict is most likely to come from. `make all` ends with it.

The site's page view ("Your run against ours", compare.md) is page_html(): per finding, the
machine that builds the site, labelled "this machine", beside the book's reference host, each
with its verdict, number, interval, what the interval rests on and how many runs decide it. It
is generated when the site is built (perfbook.book.sphinx_site), never stored in a notebook: a
stored output must not depend on the machine that executes it.
"""

from __future__ import annotations

import argparse
import html
import sys
from collections import Counter

from perfbook.analysis import decide as dc
from perfbook.analysis.findings import (
    HostVerdict,
    _code,
    anchor,
    chip,
    decisive,
    evaluate,
    machine,
)
from perfbook.analysis.hosts import all_manifests, env_facts, latest_per_host
from perfbook.book.summary import _chapters
from perfbook.core.errors import PerfbookError, one_line
from perfbook.data import hostinfo
from perfbook.data.dataset import reference_host
from perfbook.data.machine import labels


def _nearest(me: dict, others: dict[str, dict], k: int = 2) -> list[tuple[str, int, list[str]]]:
    """(host, facts in common, facts that differ) of the k hosts sharing most facts with me."""
    out = []
    for hid, facts in others.items():
        keys = set(me) | set(facts)
        same = sum(me.get(x) == facts.get(x) for x in keys)
        diff = [
            f"{x}: {me.get(x, '(not recorded)')} here, {facts.get(x, '(not recorded)')} there"
            for x in sorted(keys)
            if me.get(x) != facts.get(x)
        ]
        out.append((hid, same, diff))
    return sorted(out, key=lambda t: (-t[1], t[0]))[:k]


def report(host: str | None = None, data_dir=None, say=print) -> int:
    host = host or hostinfo.host_id()
    latest = latest_per_host(all_manifests(data_dir))
    if host not in latest:
        raise PerfbookError(
            f"host {host} has no dataset under data/runs; measure first "
            "(sudo make all) or pass --host with an id from the hosts page"
        )
    say(f"where {host} sits among {len(latest)} host(s), per key finding")
    for entry, ch, D in _chapters(data_dir):
        if not ch.key_findings or host not in D.hosts:
            continue
        say(f"{entry.name}:")
        for f in ch.key_findings:
            mine = evaluate(D, f, host)
            tally = Counter(evaluate(D, f, h).verdict for h in D.hosts)
            shared = tally[mine.verdict] - 1
            others = len(D.hosts) - 1
            told = f"; {mine.evidence}" if mine.evidence else ""
            say(f"  {f.key}: {mine.verdict} here{told}")
            say(
                f"    {shared} of {others} other host(s) agree"
                if others
                else "    no other host yet"
            )
    facts = {h: env_facts(m) for h, m in latest.items()}
    me = facts.pop(host)
    if facts:
        say("nearest hosts, and what differs from this one:")
        for hid, same, diff in _nearest(me, facts):
            say(
                f"  {hid} ({same} facts in common): "
                + ("; ".join(diff[:8]) or "nothing recorded differs")
                + (f"; and {len(diff) - 8} more" if len(diff) > 8 else "")
            )
    return 0


THIS_MACHINE = "this machine"
SPLIT_MINE = "its newest kernel build"
SPLIT_OURS = "the book's runs under the same host id, on its other kernel builds"


def _number(e, unit: str) -> str:
    """The decisive number with its interval, and what the interval rests on (the counts)."""
    if e is None:
        return ""
    basis = f"<br><small>{html.escape(e.basis)}</small>" if e.basis else ""
    return f"<br>{html.escape(dc.interval_text(e, unit))}{basis}"


def _cell(v: HostVerdict) -> str:
    """A host's entry for one finding: verdict (why as tooltip), the decisive number with its
    interval, what the interval rests on (the sample counts), and how many runs decide it."""
    e = decisive(v)
    deciding = len(v.builds[-1].run_ids) if v.builds else 0
    measured = sum(1 for _, o in v.runs if o is not None)
    n = len(v.runs)
    runs = (
        f"{deciding} run{'s' * (deciding != 1)} decide{'s' * (deciding == 1)}"
        if deciding
        else f"{measured} run{'s' * (measured != 1)}, none deciding"
        if measured
        else f"{n} run{'s' * (n != 1)}, none measured it"
    )
    return f"<td>{chip(v.verdict, v.why)}{_number(e, v.finding.unit)}<br><small>{runs}</small></td>"


def _builds_cell(builds, unit: str) -> str:
    """The entries of some kernel builds of one host for one finding (findings.BuildVerdict:
    a build's runs pooled and decided), each with its build, number, interval and runs."""
    if not builds:
        return '<td class="pb-none">no run of another build decides it</td>'
    out = []
    for b in builds:
        n = len(b.run_ids)
        out.append(
            f"{chip(b.verdict, b.why)} <small>on {html.escape(b.build.split()[0])}</small>"
            f"{_number(b.estimate, unit)}<br><small>{n} run{'s' * (n != 1)} "
            f"decide{'s' * (n == 1)}</small>"
        )
    return "<td>" + "<br><br>".join(out) + "</td>"


def page_html(host: str | None = None, data_dir=None) -> str:
    """The page view: every finding with this machine (`host`, default the machine that runs
    this) beside the book's reference host; where this machine is that host, beside the host
    whose dataset the chapter quotes, or where this machine is that one too (a reader's clone
    of the reference machine, whose id it shares), its newest kernel build beside the book's
    runs on its other builds. A machine without a dataset gets the command that gives it one.
    HTML for a page at the site's top."""
    host = host or hostinfo.host_id()
    latest = latest_per_host(all_manifests(data_dir))
    names = labels({h: m.get("host", {}) for h, m in latest.items()})
    ref = reference_host(data_dir)["host_id"]
    if host not in latest:
        return (
            '<p class="pb-compare-none">The machine that built this site has no dataset in '
            "<code>data/runs/</code>, so there is nothing of its own to set beside the book's "
            "runs. <code>sudo make all</code> measures it (about ten minutes) and rebuilds the "
            "site; this page then shows its run beside ours, labelled "
            f"<em>{THIS_MACHINE}</em>.</p>"
        )
    parts = []
    for entry, ch, D in _chapters(data_dir):
        if not ch.key_findings or host not in D.hosts:
            continue
        # the book's machine: its reference host; where this machine is that host, the host
        # whose dataset the chapter quotes
        quoted = D.quoted.host_id if D.quoted is not None else None
        ours = next((h for h in (ref, quoted) if h and h != host and h in D.hosts), None)
        role = "the book's reference host" if ours == ref else "the host the chapter quotes"
        mine = {f.key: evaluate(D, f, host) for f in ch.key_findings}
        split = ours is None and any(len(v.builds) > 1 for v in mine.values())
        head = f"<th>finding</th><th>{THIS_MACHINE}: {machine(host, names)}" + (
            f"</th><th>{role}: {machine(ours, names)}</th>"
            if ours
            else f", {SPLIT_MINE}</th><th>{SPLIT_OURS}</th>"
            if split
            else "</th>"
        )
        rows = []
        for f in ch.key_findings:
            link = f"{entry.notebook[:-6]}.html#{anchor(f)}"
            v = mine[f.key]
            if split and v.builds:
                bs = sorted(v.builds, key=lambda b: max(b.run_ids))  # the newest build last
                cells = _builds_cell(bs[-1:], f.unit) + _builds_cell(bs[:-1], f.unit)
            else:
                cells = _cell(v) + (
                    _cell(evaluate(D, f, ours))
                    if ours
                    else _builds_cell((), f.unit)
                    if split
                    else ""
                )
            rows.append(
                f'<tr><td><a href="{html.escape(link)}">{_code(f.claim)}</a> '
                f"<small>({_code(f.quantity)})</small></td>{cells}</tr>"
            )
        parts.append(
            f'<p class="pb-compare-chapter"><strong>{html.escape(ch.title or ch.name)}</strong></p>'
            f'<table class="table pb-compare"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>"
        )
    if not parts:
        return f"<p>{THIS_MACHINE.capitalize()} has datasets, but of no chapter with findings.</p>"
    return "".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfbook compare")
    ap.add_argument("--host", default=None, help="a host id (default: this machine's)")
    ap.add_argument("--data-dir", default=None)
    a = ap.parse_args(argv)
    try:
        return report(a.host, a.data_dir)
    except PerfbookError as e:
        print(one_line(e), file=sys.stderr)
        return 2
