"""The rerun story: a reader's own host's datasets arrive, and every affected chapter changes.

A scratch copy of data/ gets one dataset per chapter from a new host, the state after a reader's
`sudo make all` on a new machine (conftest.book_data's "new_host": perfbook.dev.synthfleet.add_host, one
round of each adaptive repetition, as a slow machine's default run gives). Each chapter and data
page is then executed once in explain mode against that copy (papermill, -p data_dir): it must
run without an error, its outputs must differ from the stored ones and name the new host, and
what it tells a reader (every glued value, every Markdown and HTML output outside its tables)
must hold no debris: no 'nan', no sign without its number, no Python repr.

The stored outputs are what the committed data gives (tests/test_freshness.py checks that), and
they are compared with nbval's sanitizers and without the cells nbval ignores, so a difference
comes from the added datasets alone.
"""

import ast
import configparser
import json
import re
import shutil

import nbformat
import pytest

from conftest import ROOT, debris
from perfbook import chapters
from perfbook.book import freshness
from perfbook.book.jupyter import zygote
from perfbook.data.dataset import MANIFEST, list_runs, load_manifest, table_path, write_table
from perfbook.dev import synthfleet

PAGES = list(chapters.CHAPTERS) + list(getattr(chapters, "PAGES", []))
TEXT = ("text/plain", "text/html", "text/markdown", "text/latex", "application/json")
GLUE = "application/papermill.record/text/plain"


def _sanitizers():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "tests" / "nbval_sanitize.cfg")
    return [(re.compile(cfg[s]["regex"]), cfg[s]["replace"]) for s in cfg.sections()]


SANITIZE = _sanitizers()


@pytest.fixture(scope="module", autouse=True)
def _kernels_as_refresh_starts_them():
    """The notebooks here run as a reader's `perfbook refresh` runs them: their kernels forked
    from one zygote (perfbook.book.jupyter.zygote), which has imported numpy, pandas and
    matplotlib once. (nbval's kernels can't be: they run as another machine, which needs an exec.)"""
    with zygote.warm_kernels():
        yield


@pytest.fixture(scope="module")
def second_host(book_datasets):
    """(data dir, {chapter: new dataset}, the new host's id): the new_host state of the book's data."""
    bd = book_datasets("new_host")
    return bd.data_dir, bd.added, bd.host


def _ignored(cell) -> bool:
    return "NBVAL_IGNORE_OUTPUT" in cell.source or "NBVAL_SKIP" in cell.source


def _cell_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif out.get("output_type") == "error":
            parts.append(f"{out.get('ename')}: {out.get('evalue')}")
        for mime in TEXT:
            val = out.get("data", {}).get(mime)
            if val is not None:
                parts.append(val if isinstance(val, str) else json.dumps(val, sort_keys=True))
    text = "\n".join(parts)
    for rx, rep in SANITIZE:
        text = rx.sub(rep, text)
    return text


def _told(cell):
    """(what, text) of what a cell's outputs tell a reader: each glued value (its repr read back),
    Markdown, HTML without its tables (a table's missing value is a cell of its own), streams."""
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            yield "stream", out.get("text", "")
        data = out.get("data", {})
        if GLUE in data:
            name = out.get("metadata", {}).get("scrapbook", {}).get("name", "?")
            try:
                value = ast.literal_eval(data[GLUE])
            except (ValueError, SyntaxError):
                value = data[GLUE]
            yield f"glue {name}", str(value)
        if "text/markdown" in data:
            yield "markdown", data["text/markdown"]
        if "text/html" in data:
            yield "html", re.sub(r"<table.*?</table>", "", data["text/html"], flags=re.S)


def _code_cells(nb):
    return [
        c
        for c in nb.cells
        if c.cell_type == "code" and "injected-parameters" not in c.metadata.get("tags", [])
    ]


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=lambda c: c.name)
def test_a_second_hosts_dataset_changes_the_chapter(page, second_host, tmp_path):
    import papermill as pm

    data, added, new_host = second_host
    if page in chapters.CHAPTERS and page.name not in added:
        pytest.skip(f"{page.name} has no committed dataset to copy for a second host")
    stored = nbformat.read(page.path, as_version=4)
    have, (want, _) = freshness.stored_digest(stored), freshness.data_digest(page.name)
    assert have == want, (
        f"{page.notebook}'s stored outputs are stale, so they can't serve as the "
        f"before picture: run `make notebooks` first"
    )
    assert freshness.data_digest(page.name, data) != want, (
        "the fixture did not touch this page's data"
    )

    out = tmp_path / f"{page.name}.ipynb"
    pm.execute_notebook(
        str(page.path),
        str(out),
        parameters={"data_dir": str(data)},
        kernel_name="python3",
        progress_bar=False,
        cwd=str(page.path.parent),
    )
    fresh = nbformat.read(out, as_version=4)

    before, after = _code_cells(stored), _code_cells(fresh)
    assert [c.source for c in before] == [c.source for c in after]
    problems = []
    changed = [
        i
        for i, (b, a) in enumerate(zip(before, after))
        if not _ignored(b) and _cell_text(b) != _cell_text(a)
    ]
    if not changed:
        problems.append(f"adding {new_host}'s dataset changed none of the checked outputs")
    if not any(new_host in _cell_text(c) for c in after):
        problems.append(f"no output names the new host {new_host}")
    assert not problems, (
        f"{page.name}: "
        + "; ".join(problems)
        + ". A chapter should show every host's data, labelled with its host id."
    )
    found = [
        f"cell {i} {what}: {bad}"
        for i, c in enumerate(after)
        for what, text in _told(c)
        for bad in debris(text)
    ]
    assert not found, f"{page.name} on a new host's data tells a reader: " + "; ".join(found[:10])


def _contra_host(facts: dict) -> dict:
    """The host block of a second synthetic host, whose datasets contradict a finding."""
    return synthfleet.synthetic_facts(
        facts,
        "synthetic-contra",
        "a host that contradicts a finding",
        2900,
        cpu_model="Intel Xeon Platinum 8375C",
        cpu_vendor="Intel",
        kernel_release="6.6.13-200.fc39",
    )


@pytest.mark.slow
def test_a_host_that_contradicts_a_finding_flips_its_verdict(second_host, tmp_path):
    """A second host's trace_overhead dataset whose marker costs as much as its uprobe: the
    headline finding (a uprobe costs more than twice a marker) must not hold for that host,
    in the chapter's Key findings block and on the hosts page, while it still holds for the
    committed host it was copied from (its runs pooled)."""
    import pandas as pd
    import papermill as pm

    from perfbook.analysis.findings import FAILS, HOLDS, build_of, evaluate
    from perfbook.chapters import trace_overhead as T

    data = tmp_path / "data"
    shutil.copytree(ROOT / "data", data, ignore=shutil.ignore_patterns(".*"))
    # the run with the most rounds (each finding's unit of repetition), newest first: a run
    # of 3 rounds gives 90 % intervals, which decide nothing at 95 %; of a host whose runs are
    # of one kernel build (runs of two builds are not replicates: such a host is undecided by
    # design, as after a reader's make all on a clone of a committed host with a newer kernel)
    runs = [
        r
        for r in list_runs("trace_overhead", data)
        if load_manifest(r).get("profile") != "quick"  # smoke tests decide nothing
    ]
    builds: dict = {}
    for r in runs:
        builds.setdefault(r.parts[-3], set()).add(build_of(load_manifest(r)))
    src = max(
        (r for r in runs if len(builds[r.parts[-3]]) == 1),
        key=lambda r: (pd.read_csv(table_path(r, "samples"))["round"].nunique(), r.name),
    )
    m = json.loads((src / MANIFEST).read_text())
    m["host"] = _contra_host(m["host"])
    contra = m["host"]["host_id"]
    dst = data / "runs" / contra / "trace_overhead" / synthfleet.after_every_run(data)
    shutil.copytree(src, dst)
    m["run_id"] = dst.name
    (dst / MANIFEST).write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")
    s = pd.read_csv(table_path(dst, "samples"))
    marker = s["mechanism"] == "marker"
    # the marker made as slow as the uprobe: the ratio is 1, whatever the source run measured
    k = (
        s.loc[s["mechanism"] == "uprobe", "ns_per_call"].median()
        / s.loc[marker, "ns_per_call"].median()
    )
    s.loc[marker, "ns"] = (s.loc[marker, "ns"] * k).round()
    s.loc[marker, "ns_per_call"] = (s.loc[marker, "ns_per_call"] * k).round(3)
    write_table(dst / "samples", s)

    finding = next(f for f in T.chapter.key_findings if f.key == "uprobe_vs_marker")
    D = T.chapter.load(data)
    assert evaluate(D, finding, src.parts[-3]).verdict == HOLDS
    assert evaluate(D, finding, contra).verdict == FAILS

    def outputs(nb_path, name):
        out = tmp_path / f"{name}.ipynb"
        pm.execute_notebook(
            str(nb_path),
            str(out),
            parameters={"data_dir": str(data)},
            kernel_name="python3",
            progress_bar=False,
            cwd=str(nb_path.parent),
        )
        nb = nbformat.read(out, as_version=4)
        return "\n".join(_cell_text(c) for c in _code_cells(nb))

    chapter_text = outputs(ROOT / "chapters" / "trace_overhead.ipynb", "trace_overhead")
    block = chapter_text[chapter_text.index('class="key-findings') :]
    item = block.split('<p class="kf-claim"><strong>')[1]  # the first finding: the headline
    strip = item.split('<ul class="kf-strip">')[1].split("</ul>")[0]
    from perfbook.analysis.findings import _code

    assert item.startswith(_code(finding.claim)), item[:200]

    def entry(verdict, host):  # the host's entry in the strip: its verdict, then its machine
        return re.search(
            rf'kf-{verdict.replace(" ", "-")}"[^>]*>{verdict}</span>[^<]*(<span class="kf-number">'
            rf'.*?</span>)? on <span class="kf-machine" title="{host}">',
            strip,
        )

    assert entry("does not hold", contra), strip[:2000]
    assert entry("holds", src.parts[-3]), strip[:2000]

    out = tmp_path / "hosts.ipynb"
    pm.execute_notebook(
        str(ROOT / "hosts.ipynb"),
        str(out),
        parameters={"data_dir": str(data)},
        kernel_name="python3",
        progress_bar=False,
        cwd=str(ROOT),
    )
    html = next(
        o["data"]["text/html"]
        for c in _code_cells(nbformat.read(out, as_version=4))
        for o in c.get("outputs", [])
        if 'id="pb-findings"' in o.get("data", {}).get("text/html", "")
    )
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")

    def rows(table_id):
        table = soup.find(id=table_id).find("table")
        head = [th.get_text(strip=True) for th in table.find("thead").find_all("th")]
        return [
            dict(zip(head, tr.find_all(["th", "td"]))) for tr in table.find("tbody").find_all("tr")
        ]

    # per finding: its number, and the hosts it does not hold on
    claim = next(f.claim for f in T.chapter.key_findings if f.key == "uprobe_vs_marker")
    row = next(r for r in rows("pb-findings") if claim.replace("`", "") in r["finding"].get_text())
    number = row["#"].get_text(strip=True)
    # a host by its machine's label, its id the tooltip (#41)
    against = [s["title"] for s in row["does not hold on"].select(".kf-machine")]
    assert contra in against and src.parts[-3] not in against, against
    # per host: that finding's column carries the verdict in its class and its tooltip
    per_host = {
        r["host"].select_one(".kf-machine")["title"]: r[number] for r in rows("pb-findings-hosts")
    }
    for host, verdict in ((contra, FAILS), (src.parts[-3], HOLDS)):
        cell = per_host[host]
        assert f"kf-{verdict.replace(' ', '-')}" in cell.get("class", []), (host, cell)
        assert cell.get("title", "").endswith(f": {verdict}"), (host, cell)
