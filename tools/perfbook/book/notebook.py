"""What a chapter notebook calls: a notebook is prose plus short calls.

    # cell 1, tagged 'parameters': mode, profile, data_dir and the chapter's overrides
    run_mode(chapter, mode, profile, data_dir, rounds=rounds)   # collect mode measures first
    D = nb.start(chapter, data_dir)      # the plot style, and the chapter's datasets
    nb.glue_all(prose.values(D))         # every number the prose quotes
    nb.figure("costs", figures.costs(D)) # a figure and its caption
    nb.runs_table(D)                     # shared sections: the runs, hosts side by side
    nb.hosts(D); nb.not_measured(D)      # and what was not measured (the plumbing: appendix.md)

run_mode (perfbook.book.collect_mode) measures before this module is imported: its plotting
stack is not needed to measure. start() returns the chapter's datasets (perfbook.data.dataset.Data).
"""

from __future__ import annotations

import html
import inspect
import re
import statistics

import matplotlib
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from IPython import get_ipython
from IPython.display import HTML, Markdown, display
from myst_nb import glue

from perfbook.analysis.findings import (
    Run,
    counted_runs,
    evaluate,
    html_block,
    machine,
    plain,
    sentence,
    stored,
)
from perfbook.analysis.fleetview import count_text, fleet
from perfbook.analysis.hosts import env_diff
from perfbook.core.errors import install_notebook_handler
from perfbook.core.paths import resolve_data_dir
from perfbook.data.dataset import (
    load_manifests,
    skipped_table,
)
from perfbook.data.machine import (
    NOT_RECORDED,
    facts,
    labels,
    name_ids,
    name_ids_html,
    short_kind,
)
from perfbook.framework.contract import Chapter
from perfbook.hoststate.monitor import verdict_text


def setup_plots():
    matplotlib.rcParams.update(
        {
            "figure.dpi": 96,
            "savefig.dpi": 96,
            "figure.figsize": (8, 4.2),
            "svg.hashsalt": "perfbook",
        }
    )
    sns.set_theme(style="whitegrid", context="notebook")


NO_VALUE = "\u2014"  # what a table shows where a value does not apply or was not measured


def init():
    """Call first in every chapter: one-line errors, the plot style, and tables that show a
    missing value as NO_VALUE, never as 'NaN' (#42: a page without debris)."""
    install_notebook_handler()
    setup_plots()
    pd.set_option("display.width", 120)
    pd.set_option("display.max_columns", 30)
    _tables_without_nan()
    _hosts_by_name()


# -- hosts by name (#41): every output names a host by its machine's label, never by its id --

_NAMES: dict[str, str] = {}  # host_id -> its machine's label, for the pages built in this kernel


def name_hosts(names: dict[str, str]) -> None:
    """From here on, outputs show these hosts (host_id -> label) by their labels."""
    _NAMES.update(names)


def named(text: str) -> str:
    """Plain text (a caption, a glued sentence, a table as text) with every host id named."""
    return name_ids(text, _NAMES)


def named_html(text: str) -> str:
    """HTML with every host id in its text named, the id as the name's tooltip."""
    return name_ids_html(text, _NAMES)


_TEXT_KINDS = ("text/plain", "text/markdown", "text/latex")


def _hosts_by_name() -> None:
    """Every output of the kernel (a displayed object, a cell's result, a glued value: myst_nb's
    glue formats with the same formatter) goes through named()/named_html(): one filter, so no
    chapter's table, caption or sentence shows a bare host id (#41)."""
    ip = get_ipython()
    if ip is None:
        return
    fmt = ip.display_formatter
    if getattr(fmt.format, "names_hosts", False):
        return
    inner = fmt.format

    def format(obj, include=None, exclude=None):
        data, md = inner(obj, include=include, exclude=exclude)
        data = dict(data)
        for kind, value in data.items():
            if not isinstance(value, str):
                continue
            if kind == "text/html":
                data[kind] = named_html(value)
            elif kind in _TEXT_KINDS:
                data[kind] = named(value)
        return data, md

    format.names_hosts = True
    fmt.format = format


def _tables_without_nan() -> None:
    """DataFrames displayed by a cell (HTML and plain text) with NO_VALUE for a missing value."""
    ip = get_ipython()
    if ip is None:
        return
    f = ip.display_formatter.formatters
    rows = pd.get_option("display.max_rows")
    f["text/html"].for_type(
        pd.DataFrame, lambda df: df.to_html(na_rep=NO_VALUE, max_rows=rows, max_cols=30)
    )
    f["text/plain"].for_type(
        pd.DataFrame,
        lambda df, p, cycle: p.text(
            df.to_string(na_rep=NO_VALUE, max_rows=rows, max_cols=30, line_width=120)
        ),
    )


def show_figure(fig, caption: str) -> None:
    """Display a figure followed by its caption (generated from data, see stats.caption)."""
    display(fig)
    plt.close(fig)
    text = (
        caption.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    )  # text, not HTML:
    display(Markdown(f"**Figure.** {text}"))  # "/proc/<pid>/sched" must not become a tag


def env_diff_view(chapter: str, data_dir=None):
    """What differs between the hosts of a chapter (hosts.chapter_env_diff), or a sentence
    saying that there is only one host, ready to display."""
    ms = load_manifests(chapter, resolve_data_dir(data_dir) if data_dir else None)
    hosts = sorted({m["host"]["host_id"] for m in ms})
    if len(hosts) < 2:
        return Markdown(
            f"Only one host ({', '.join(hosts) or 'none'}) has data for this chapter: "
            "there is no environment to compare."
        )
    d = env_diff(ms)
    return (
        d.set_index("fact")
        if len(d)
        else Markdown(f"The {len(hosts)} hosts' manifests record no differing facts.")
    )


# -- the thin-notebook API ---------------------------------------------------------------


def start(chapter, data_dir: str = ""):
    """init(), then every dataset of the chapter (perfbook.data.dataset.Data). In collect mode the
    notebook has measured already (perfbook.book.collect_mode.run_mode, its first call)."""
    init()
    D = chapter.load(data_dir or None)
    name_hosts(host_labels(D))
    return D


def glue_all(findings: dict) -> None:
    """Glue every finding for the prose ({glue:text}`name`). Values must be what the prose
    shows: strings or integers. A float is refused, because its stored repr would carry
    digits the text does not show and that another machine would not reproduce."""
    for name, value in findings.items():
        if isinstance(value, float):
            raise TypeError(f"finding {name!r} is the float {value!r}: format it (stats.fmt) first")
        glue(name, value, display=False)


def figure(key: str, item) -> None:
    """A (figure, caption) pair glued for a numbered figure in the prose: the figure as
    fig_<key>, its data-made caption as cap_<key>. The markdown cell that follows shows it:

        ```{glue:figure} fig_<key>
        :name: fig-<chapter>-<key>
        :alt: what the figure shows, in words

        {glue:text}`cap_<key>`
        ```
    """
    fig, caption = item
    glue(f"fig_{key}", fig, display=False)
    plt.close(fig)
    glue(f"cap_{key}", caption, display=False)


def frame_glue(chapter, nb) -> set[str]:
    """The glue names the book's frame provides in a chapter notebook (a dict or nbformat node):
    kf_<key> for each declared key finding (key_findings), cap_<key> for each nb.figure call."""
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    figs = set(re.findall(r'nb\.figure\("(\w+)"', code))
    return {f"kf_{f.key}" for f in chapter.key_findings} | {f"cap_{k}" for k in figs}


def show(item):
    """A (figure, caption) pair from a chapter's figures module, or a table to display."""
    if isinstance(item, tuple) and len(item) == 2:
        show_figure(*item)
        return None
    return item


def runs_table(D):
    """One row per dataset: host, run, kernel, CPU, virtualization, profile, whether the run
    was disturbed (once a dataset has the run monitor's record), plus what the chapter adds (its run_columns(manifest[, D]) method, when it has one). A run_columns that
    reads tables gets that dataset alone (perfbook.analysis.findings.Run), and its columns are kept in the
    verdict store: a fleet's runs table reads no table that has not changed."""
    own = type(D.chapter).run_columns is not Chapter.run_columns  # a method of the chapter's class
    extra = D.chapter.run_columns if own or D.chapter._hook("tables", "run_columns") else None
    with_data = extra is not None and len(inspect.signature(extra).parameters) >= 2

    def columns(m) -> dict:
        if not extra:
            return {}
        if not with_data:
            return extra(m)
        pairs = stored(
            D,
            m,
            "run-columns",
            lambda: [[k, plain(v)] for k, v in extra(m, Run(D, m).data).items()],
            lambda v: isinstance(v, list) and all(isinstance(x, list) and len(x) == 2 for x in v),
        )
        return dict(pairs)  # pairs, not a JSON object: the columns keep their order

    # whether the run monitor saw the run stopped, starved or stolen from (perfbook.hoststate.monitor): a
    # column once any dataset has its record (older ones say "not recorded")
    marked = any(m.get("disturbance") is not None for m in D.manifests)
    rows = [
        {
            "host": m.host_id,
            "run": m["run_id"],
            "kernel": m["host"].get("kernel_release"),
            "cpu": m["host"].get("cpu_model"),
            "virtualization": m["host"].get("virtualization"),
            "profile": m.get("profile") or "not recorded",
            **({"disturbed": verdict_text(m.get("disturbance"))} if marked else {}),
            **columns(m),
        }
        for m in D.manifests
    ]
    return pd.DataFrame(rows)


def hosts(D):
    """What differs between the hosts that measured D's chapter (env_diff_view)."""
    return env_diff_view(D.chapter.name, D.data_dir)


def not_measured(D):
    """What each dataset did not measure, and why (its manifest's skips and notes)."""
    return skipped_table(D.manifests)


# -- the book's frame around a chapter: banner, key findings, rerun box ----------------------


def _html(text: str):
    return HTML(text)


def _host_facts(D) -> dict[str, dict]:
    """host_id -> the host facts of its newest counted dataset."""
    out = {}
    for h in D.hosts:
        ms = counted_runs([m for m in D.manifests if m.host_id == h])
        out[h] = ms[-1]["host"]
    return out


def host_kinds(D) -> dict[str, str]:
    return {h: short_kind(f) for h, f in _host_facts(D).items()}


def host_labels(D) -> dict[str, str]:
    """host_id -> the machine's label (perfbook.data.machine.labels): how every page names a host.
    Every host with a dataset of the chapter is named, a host whose runs are all set aside too."""
    every = {m.host_id: m["host"] for m in D.manifests}
    return labels({**every, **_host_facts(D)})


BANNER_HOSTS = (
    5  # with more hosts, the banner details this and the reference host and counts the rest
)


def _highlighted(D) -> dict[str, str]:
    """host_id -> role ("this host", "reference host") beyond BANNER_HOSTS hosts, else {}."""
    return dict(fleet(D).highlighted) if len(D.hosts) > BANNER_HOSTS else {}


def platform(D):
    """The platform banner: each host that measured the data, by its machine's label (the id as
    its tooltip), with the chapter's notes on it; its facts (perfbook.data.machine), with what
    differs between a host's runs (one host id can be several cloned machines), in a collapsed
    detail. Beyond BANNER_HOSTS hosts, this host and the reference host are named and the
    others counted by machine kind: the hosts page lists every one."""
    esc = html.escape
    notes = D.chapter.platform_notes(D) if len(D) else {}
    names = host_labels(D)
    role = _highlighted(D)
    detailed = list(role) if role else D.hosts
    rest = [h for h in D.hosts if h not in detailed]
    rows, details = [], []
    for h in detailed:
        ms = counted_runs([m for m in D.manifests if m.host_id == h])
        per_run = [dict(facts(m["host"])) for m in ms]
        items = []
        for what, _ in facts(ms[-1]["host"]):
            told = [r[what] for r in per_run if not r[what].startswith(NOT_RECORDED)]
            seen = list(dict.fromkeys(told)) or [per_run[-1][what]]
            val = (
                seen[0]
                if len(seen) == 1
                else " / ".join(seen) + f" (differs between its {len(ms)} runs)"
            )
            if told and len(told) < len(per_run):
                val += f" (recorded by {len(told)} of its {len(per_run)} runs)"
            items.append(f"<b>{esc(what)}</b>: {esc(str(val))}")
        said = f" ({esc(role[h])})" if h in role else ""
        name = machine(h, names)
        # a note's gist on the banner's line ("its QEMU guests ran under tcg"), its whole text
        # (why) with the facts: the first screen holds the title, the banner and the findings
        told = "".join(f" {esc(n.split(' (')[0].rstrip('.'))}." for n in notes.get(h, []))
        rows.append(f"<li>{name}{said}, {len(ms)} dataset{'s' if len(ms) != 1 else ''}.{told}</li>")
        items += [esc(n) for n in notes.get(h, [])]
        details.append(f"<li>{name} (host id <code>{esc(h)}</code>): " + "; ".join(items) + "</li>")
    if rest:
        kinds = host_kinds(D)
        rows.append(
            f"<li>{len(rest)} other hosts: {esc(count_text(kinds[h] for h in rest))}; the "
            '<a href="../hosts.html">hosts page</a> lists each one\'s machine</li>'
        )
    if not rows:
        return _html(
            '<div class="platform-banner admonition note"><p class="admonition-title">'
            "Measured on</p><p>No dataset yet.</p></div>"
        )
    return _html(
        '<div class="platform-banner admonition note"><p class="admonition-title">Measured on</p>'
        f"<ul>{''.join(rows)}</ul>"
        '<details class="pb-facts"><summary>Machine facts</summary>'
        f"<ul>{''.join(details)}</ul></details></div>"
    )


def key_findings(D):
    """The Key findings block (perfbook.analysis.findings) with each finding's sentence for the quoted
    host glued as kf_<key> for the prose."""
    q = D.quoted
    if q is not None:
        for f in D.chapter.key_findings:
            glue(f"kf_{f.key}", sentence(evaluate(D, f, q.host_id)), display=False)
    return _html(html_block(D, host_labels(D), _highlighted(D), BANNER_HOSTS))


LISTED_DURATIONS = 5  # up to this many datasets of a profile, the rerun box lists each one's time


def _durations(D) -> dict[str, str]:
    """profile -> how long its collects took: each dataset's time and machine kind, or with
    more datasets than LISTED_DURATIONS, per machine kind the median and range (a fleet's
    hundred hosts make a few lines, not a hundred entries)."""
    out: dict[str, list] = {}
    for m in D.manifests:
        prof = m.get("profile")
        if prof is None:
            continue
        s = m.seconds
        if s is None:
            continue
        out.setdefault(prof, []).append((s, short_kind(m["host"])))
    told = {}
    for p, v in out.items():
        if len(v) <= LISTED_DURATIONS:
            told[p] = ", ".join(f"{round(s)} s ({k})" for s, k in sorted(v))
            continue
        kinds: dict[str, list] = {}
        for s, k in v:
            kinds.setdefault(k, []).append(s)
        told[p] = ", ".join(
            f"median {round(statistics.median(x))} s ({round(min(x))} to {round(max(x))} s) over {len(x)} "
            f"{k} datasets"
            if len(x) > 1
            else f"{round(x[0])} s ({k})"
            for k, x in sorted(kinds.items(), key=lambda kv: -len(kv[1]))
        )
    return told


def rerun(D):
    """The "Rerun this chapter" box: the exact commands, what the collect needs, how long each
    profile took on the hosts in data/, and where the dataset lands."""
    esc = html.escape
    ch = D.chapter
    tools = ", ".join(f"{t} (Debian {p})" for t, p in ch.needs_tools.items()) or "none beyond setup"
    took = _durations(D)
    times = (
        "; ".join(f"{p}: {took[p]}" for p in ("quick", "default", "full") if p in took)
        or "no dataset in data/ recorded its profile yet"
    )
    su = "sudo " if ch.needs_root else ""
    cmd = (
        f"sudo make setup\n"
        f"{su}.venv/bin/python -m perfbook measure --chapters {ch.name} --profile quick   # a smoke test\n"
        f"{su}.venv/bin/python -m perfbook measure --chapters {ch.name}                   # the default profile\n"
        f"make notebooks book"
    )
    tables = ", ".join(f"{t}.csv.xz" for t in ch.tables)
    return _html(
        '<div class="rerun-box admonition tip"><p class="admonition-title">Rerun this chapter</p>'
        f"<pre>{esc(cmd)}</pre><ul>"
        f"<li><b>needs</b>: {'root' if ch.needs_root else 'no root'}; tools: {esc(tools)}"
        + (f"; {esc(ch.needs_text)}" if ch.needs_text else "")
        + "</li>"
        f"<li><b>took</b>, per profile, on the hosts in data/: {esc(times)}</li>"
        f"<li><b>lands in</b> <code>data/runs/&lt;your host id&gt;/{esc(ch.name)}/&lt;run id&gt;/</code>: "
        f"manifest.json and {esc(tables)}. A failed or interrupted run writes nothing.</li>"
        f"<li>The same from the notebook: <code>papermill chapters/{esc(ch.name)}.ipynb /tmp/out.ipynb -p mode collect</code></li>"
        "</ul></div>"
    )
