"""The hosts page's tables (hosts.ipynb): as readable with 3 hosts as with 100.

Each function returns an HTML block the notebook displays: a plain table that reads without
JavaScript, and that _static/perfbook-tables.js (loaded on every page by _config.yml; no CDN,
so it works offline) turns into a searchable, sortable one: a search box that filters rows on
any column, a click on a header to sort (numbers as numbers, versions such as 6.2 < 6.18 in
order), and a drop-down per column whose header has the class ``pb-facet``.

The markup is the one contract between this module and the script, all in classes (stored
notebook outputs hold no scripts, inputs or data attributes; tests/test_published_outputs.py):

* ``div.pb-table > table``: one widget; ``th.pb-num``: a numeric column, ``th.pb-facet``: a
  column offered as a drop-down filter;
* ``span.pb-key`` in a cell: the value sorting and facets use instead of the cell's text;
  a cell's class ``pb-rank-N`` sorts by N (verdicts: the contrary first);
* ``.pb-more``: a long list the script folds behind a "show" button.

Every piece of text from a manifest (descriptions, opt-in labels, notes, tool versions) is
escaped here (tests/test_hosts.py checks it with a hostile label).
"""

from __future__ import annotations

import html

from IPython.display import HTML

from perfbook.analysis import hosts
from perfbook.analysis.findings import _code, machine
from perfbook.book.sphinx_site import dataset_url
from perfbook.book.summary import findings_matrix

VERDICT_RANK = {"does not hold": 0, "undecided": 1, "holds": 2, "not measured": 3, "no data": 4}
GLYPH = {"holds": "✓", "does not hold": "✗", "undecided": "?", "not measured": "–", "no data": "·"}
FOLD = 8  # a list of more than this many hosts or links is folded (.pb-more)


def _e(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _th(name: str, cls: str = "", title: str = "") -> str:
    attrs = (f' class="{_e(cls)}"' if cls else "") + (f' title="{_e(title)}"' if title else "")
    return f"<th{attrs}>{_e(name)}</th>"


def _table(tid: str, columns: list[tuple], rows: list[list[str]], cls: str = "") -> str:
    """columns: (header text, th classes[, tooltip]); rows: cells as HTML (escaped by the
    caller). A cell is '<td ...>...</td>' already when it starts with '<td', else it is wrapped."""
    head = "".join(_th(*c) for c in columns)
    body = "".join(
        "<tr>" + "".join(c if c.startswith("<td") else f"<td>{c}</td>" for c in row) + "</tr>"
        for row in rows
    )
    return (
        f'<div class="pb-table {_e(cls)}" id="{_e(tid)}"><table class="pb-sortable">'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )


def _list(items: list[str], fold: int = FOLD) -> str:
    """A comma-separated list of HTML items, folded by the script past `fold` items."""
    if len(items) <= fold:
        return ", ".join(items)
    return f'<span class="pb-more">{", ".join(items)}</span>'


def _num(v, digits: int | None = None) -> str:
    if v is None or v != v:
        return "—"
    return _e(f"{float(v):.{digits}f}" if digits is not None else v)


def _machine(r: dict) -> str:
    """A host record by its machine's label, its id as the tooltip (findings.machine)."""
    return machine(r["host_id"], {r["host_id"]: r["label"]})


def _host_cell(r: dict) -> str:
    desc = _e(r["description"] or "")
    label = (
        ' <span class="pb-sub">(label set by its contributor)</span>' if r["label_opt_in"] else ""
    )
    note = f' title="{_e(r["note"])}"' if r["note"] else ""
    return (
        f"<td>{_machine(r)}<br>"
        f'<span class="pb-sub">host id <code class="pb-hostid">{_e(r["host_id"])}</code></span><br>'
        f'<span class="pb-sub"{note}>{desc}</span>{label}</td>'
    )


def dataset_links(runs, base: str = "") -> list[str]:
    """<a> to each dataset's archive on the site (perfbook.book.sphinx_site.dataset_url), for a page
    at the site's top (base: the path from the page up to it)."""
    out = []
    for chapter, run_id, profile, host in runs:
        tip = f"{chapter}, run {run_id}" + (f", profile {profile}" if profile else "")
        out.append(
            f'<a class="pb-dataset" href="{_e(base + dataset_url(host, chapter, run_id))}" '
            f'title="{_e(tip)}">{_e(run_id)}</a>'
        )
    return out


def hosts_table(data_dir=None, records: list[dict] | None = None, base: str = ""):
    """Every host, one row each: its key facts, its datasets (links), first and last run,
    and whether its datasets look like one machine."""
    recs = hosts.host_records(data_dir) if records is None else records
    cols = [
        ("host", ""),
        ("machine kind", "pb-facet"),
        ("CPU vendor", "pb-facet"),
        ("CPU model", ""),
        ("CPUs", "pb-num"),
        ("memory GiB", "pb-num"),
        ("kernel", ""),
        ("kernel series", "pb-facet"),
        ("accelerator", "pb-facet"),
        ("container", "pb-facet"),
        ("TSC MHz", "pb-num"),
        ("datasets", "pb-num"),
        ("first run", ""),
        ("last run", ""),
        ("identity", "pb-facet"),
    ]
    rows = []
    for r in recs:
        links = dataset_links([(c, run, prof, r["host_id"]) for c, run, prof in r["runs"]], base)
        by_chapter = [f"{_e(c)}: {a}" for (c, _, _), a in zip(r["runs"], links)]
        same = r["machine"] == hosts.SAME_MACHINE
        ident = (
            f'<span class="pb-key">{_e(hosts.SAME_MACHINE if same else hosts.DIFFERENT_MACHINE)}</span>'
            + (
                ""
                if same
                else f'<br><span class="pb-sub">{_e(r["machine"].split(": ", 1)[-1])}</span>'
            )
        )
        rows.append(
            [
                _host_cell(r),
                _e(r["kind"]),
                _e(r["cpu_vendor"]),
                _e(r["cpu"]),
                _num(r["cpus"]),
                _num(r["mem_gib"], 1),
                _e(r["kernel"]),
                _e(r["kernel_series"]),
                _e(r["accelerator"]),
                _e(r["container"] or "none"),
                _num(r["tsc_mhz"]),
                f'<span class="pb-key">{r["datasets"]}</span> in {r["chapters"]} '
                f"chapter{'s' * (r['chapters'] != 1)}: " + _list(by_chapter, fold=3),
                _e(r["first_run"]),
                _e(r["last_run"]),
                ident,
            ]
        )
    return HTML(_table("pb-hosts", cols, rows, "pb-hosts"))


def coverage_table(data_dir=None, records: list[dict] | None = None, base: str = ""):
    """Host x chapter: how many datasets each host has of each chapter, each linked."""
    recs = hosts.host_records(data_dir) if records is None else records
    chapters = sorted({c for r in recs for c, _, _ in r["runs"]})
    cols = [
        ("host", ""),
        ("machine kind", "pb-facet"),
        *[(c, "pb-num pb-chapter") for c in chapters],
    ]
    rows = []
    for r in recs:
        cells = [f'<td><code class="pb-hostid">{_e(r["host_id"])}</code></td>', _e(r["kind"])]
        for c in chapters:
            runs = [(c, run, prof, r["host_id"]) for ch, run, prof in r["runs"] if ch == c]
            cells.append(
                f'<span class="pb-key">{len(runs)}</span>'
                + (": " + _list(dataset_links(runs, base), fold=2) if runs else "")
            )
        rows.append(cells)
    return HTML(_table("pb-coverage", cols, rows, "pb-coverage"))


def findings_tables(data_dir=None, records: list[dict] | None = None):
    """The findings x hosts verdicts as two tables that stay readable at any fleet size:
    per finding, how many hosts it holds on and where it does not; per host, one compact
    column per finding (F1, F2, ... as numbered in the first table)."""
    recs = {r["host_id"]: r for r in (hosts.host_records(data_dir) if records is None else records)}
    mx = findings_matrix(data_dir)
    hids = [c for c in mx.columns if c not in ("chapter", "finding", "claim")]
    kinds = {h: recs[h]["kind"] if h in recs else "?" for h in hids}
    who = {h: _machine(recs[h]) if h in recs else f"<code>{_e(h)}</code>" for h in hids}
    cols = [
        ("#", "pb-num"),
        ("chapter", "pb-facet"),
        ("finding", ""),
        *[(v, "pb-num") for v in GLYPH],
        ("does not hold on", ""),
    ]
    rows = []
    for i, f in enumerate(mx.to_dict("records"), 1):
        per = {h: str(f[h]) for h in hids}
        counts = {v: sum(1 for x in per.values() if x == v) for v in VERDICT_RANK}
        against = [who[h] for h in hids if per[h] == "does not hold"]
        rows.append(
            [
                f"F{i}",
                _e(f["chapter"]),
                _code(str(f["claim"])),
                *[str(counts[v]) for v in GLYPH],
                _list(against) or "—",
            ]
        )
    summary = _table("pb-findings", cols, rows, "pb-findings")

    cols = [
        ("host", ""),
        ("machine kind", "pb-facet"),
        ("CPU vendor", "pb-facet"),
        ("kernel series", "pb-facet"),
        ("holds", "pb-num"),
        ("does not hold", "pb-num"),
    ]
    cols += [(f"F{i}", "pb-num pb-verdict", str(claim)) for i, claim in enumerate(mx["claim"], 1)]
    rows = []
    for h in hids:
        r = recs.get(h, {})
        labels = [str(x) for x in mx[h]]  # in finding order: F1, F2, ...
        verdicts = [str(x) for x in labels]
        cells = [
            f"<td>{who[h]}</td>",
            _e(kinds[h]),
            _e(r.get("cpu_vendor", "?")),
            _e(r.get("kernel_series", "?")),
            str(verdicts.count("holds")),
            str(verdicts.count("does not hold")),
        ]
        for i, (label, v) in enumerate(zip(labels, verdicts), 1):
            cells.append(
                f'<td class="pb-rank-{VERDICT_RANK.get(v, 5)} kf-{_e(v.replace(" ", "-"))}" '
                f'title="F{i} on {_e(recs[h]["label"] if h in recs else h)}: {_e(label)}">'
                f"{GLYPH.get(v, '?')}</td>"
            )
        rows.append(cells)
    legend = (
        '<p class="pb-legend">'
        + " ".join(
            f'<span class="kf-verdict kf-{v.replace(" ", "-")}">{g}</span> {_e(v)}'
            for v, g in GLYPH.items()
        )
        + "; hover a cell for the verdict, a header for the finding.</p>"
    )
    return HTML(summary + legend + _table("pb-findings-hosts", cols, rows, "pb-verdicts"))


def env_diff_table(data_dir=None, manifests: list[dict] | None = None):
    """The facts that differ between hosts (their newest manifests), one row per value with
    the hosts that have it; returns (HTML, number of facts that differ)."""
    ms = hosts.all_manifests(data_dir) if manifests is None else manifests
    groups = hosts.env_diff_groups(ms)
    cols = [("fact", "pb-facet"), ("value", ""), ("hosts", "pb-num"), ("which", "")]
    rows = [
        [
            _e(g["fact"]),
            f"<code>{_e(g['value'])}</code>",
            str(len(g["hosts"])),
            _list([f"<code>{_e(h)}</code>" for h in g["hosts"]]),
        ]
        for g in groups
    ]
    return HTML(_table("pb-envdiff", cols, rows, "pb-envdiff")), len({g["fact"] for g in groups})
