"""The book's overview page (summary.ipynb) and the hosts x findings matrix (hosts.ipynb).

Both read every chapter's datasets and evaluate its key findings (tools.findings) per host;
nothing here is typed prose.
"""
from __future__ import annotations

import html


def _chapters(data_dir=None):
    from .chapters import CHAPTERS
    for entry in CHAPTERS:
        ch = entry.load()
        yield entry, ch, ch.load(data_dir or None)


def findings_matrix(data_dir=None):
    """One row per (chapter, finding), one column per host: its verdict."""
    import pandas as pd
    from .findings import matrix
    frames = [matrix(D) for _, ch, D in _chapters(data_dir) if ch.key_findings and len(D)]
    if not frames:
        return pd.DataFrame(columns=["chapter", "finding", "claim"])
    out = pd.concat(frames, ignore_index=True)
    hosts = sorted(c for c in out.columns if c not in ("chapter", "finding", "claim"))
    return out[["chapter", "finding", "claim", *hosts]].fillna("no data")


def findings_table(data_dir=None):
    """findings_matrix() for the page: every claim shown whole (a DataFrame's repr cuts
    text at 50 characters), without the row numbers."""
    return findings_matrix(data_dir).style.hide(axis="index").format(escape="html")


def headlines(data_dir=None):
    """Each chapter's first key finding (its headline, which sets our figure beside the
    seed's), with every host's verdict and numbers and what kind of machine each host is."""
    from IPython.display import HTML
    from .findings import _code as esc
    from .findings import evaluate
    from .notebook import host_kinds
    rows = []
    for entry, ch, D in _chapters(data_dir):
        if not ch.key_findings or not len(D):
            continue
        f = ch.key_findings[0]
        kinds = host_kinds(D)
        cells = "".join(
            f'<li><span class="kf-verdict kf-{v.verdict.replace(" ", "-")}">{esc(v.label)}</span> on '
            f'<code>{esc(h)}</code> ({esc(kinds[h])})'
            + (f": {esc(v.evidence)}" if v.evidence else "") + "</li>"
            for h in D.hosts for v in [evaluate(D, f, h)])
        rows.append(f'<tr><td><a href="{esc(entry.notebook[:-6])}.html">{esc(ch.title)}</a></td>'
                    f'<td>{esc(f.claim)}</td><td><ul>{cells}</ul></td></tr>')
    return HTML('<table class="headline-table"><thead><tr><th>chapter</th><th>headline finding</th>'
                '<th>verdict per host, with the numbers (ours and the seed\'s)</th></tr></thead>'
                f'<tbody>{"".join(rows)}</tbody></table>')


def platforms(data_dir=None):
    """Every host in data/ with what kind of machine it is (tools.machine)."""
    import pandas as pd
    from .machine import facts
    seen = {}
    for entry, ch, D in _chapters(data_dir):
        for m in D.manifests:
            if m.host_id not in seen or m["run_id"] > seen[m.host_id]["run_id"]:
                seen[m.host_id] = m
    rows = [{"host": h, **dict(facts(m["host"]))} for h, m in sorted(seen.items())]
    return pd.DataFrame(rows)
