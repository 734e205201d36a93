"""Where does my machine sit? This host's key findings beside every other host's.

    python -m perfbook compare [--host ID] [--data-dir DIR]

For each chapter finding (perfbook.analysis.findings): this host's verdict with its numbers, and how many
hosts share that verdict. Then the hosts nearest to this one (the most identity and
environment facts in common) and the facts in which they differ, since those are what a
different verdict is most likely to come from. `make all` ends with it.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from perfbook.analysis.findings import evaluate
from perfbook.analysis.hosts import all_manifests, env_facts, latest_per_host
from perfbook.book.summary import _chapters
from perfbook.core.errors import PerfbookError, one_line
from perfbook.data import hostinfo


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
