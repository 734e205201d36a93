"""The built site in a real browser: Debian's chromium, headless, driven by selenium.

The site is the session's one build of the book (conftest.built_book), served over HTTP on
127.0.0.1. Every page in _toc.yml is opened: it loads, every image on it is complete and not
broken, no glue reference is left unresolved, and every chapter page has figures, its Binder
button, and a link to its part of the appendix, which lists its runs and whose Datasets links
(one archive per dataset, one for the reference figures) download the committed data byte for
byte, each file once. The hosts page filters its
rows as one types in its search box, narrows by a facet, and sorts numeric columns as numbers;
it links every dataset the site holds. The book is built in a scratch copy of the repository
whose data/ also holds a synthetic fleet (conftest.built_book: 12 hosts in make test, 100 in make
test-fleet), so the hosts page and the archives are checked at a fleet's scale. Every
chapter reads like a book: Key findings before the first section, the platform banner, the rerun
box, no visible code cell longer than 10 lines, math rendered with the network cut, numbered
figures with real alt text. Screenshots of two chapters (top and first figure) are kept in
build/artifacts/screenshots/.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import io
import json
import os
import re
import shutil
import tempfile
import threading
import time
import urllib.request
import zipfile
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest

from conftest import ROOT, need_tool, toc_pages

SCREENSHOTS = ROOT / "build" / "artifacts" / "screenshots"
PAGES = toc_pages()

pytestmark = pytest.mark.slow


def _chapters() -> dict[str, str]:
    """docname -> chapter name for the registered chapters (perfbook.chapters.CHAPTERS)."""
    from perfbook.book.sphinx_site import chapter_docnames

    return chapter_docnames()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output for failures
        pass


@pytest.fixture(scope="module")
def browser():
    chromium = need_tool("chromium")
    driver_exe = need_tool("chromedriver", "chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in (
        "--headless=new",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1400",
        "--hide-scrollbars",
        "--no-first-run",
    ):
        opts.add_argument(arg)
    if os.geteuid() == 0:
        opts.add_argument("--no-sandbox")  # chromium's sandbox refuses to run as root
    # Offline and hermetic: only the local server resolves, so an outside resource (the MathJax
    # CDN) fails at once instead of waiting on a network the CI machine may not have.
    opts.add_argument("--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # chromium's own temporary files (its singleton socket dir, org.chromium.Chromium.*, which it
    # leaves behind) go to a directory of ours, removed with the browser
    tmp = tempfile.mkdtemp(prefix="perfbook-chromium-")
    try:
        drv = webdriver.Chrome(
            service=Service(driver_exe, env={**os.environ, "TMPDIR": tmp}), options=opts
        )
        drv.set_page_load_timeout(120)
        try:
            yield drv
        finally:
            drv.quit()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def _serve(html: Path):
    """The directory served over HTTP on 127.0.0.1; yields its URL."""
    handler = functools.partial(_QuietHandler, directory=str(html))
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/"
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(10)


@pytest.fixture(scope="module")
def site(built_book):
    html = built_book.html
    if not (html / "index.html").is_file():
        pytest.fail(
            "the book did not build, so there is no site to open:\n" + built_book.log[-3000:]
        )
    with _serve(html) as url:
        yield SimpleNamespace(url=url, html=html, book=built_book)


def _fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as r:
        assert r.status == 200, f"{url}: HTTP {r.status}"
        return r.read()


def _open(browser, site, page: str) -> None:
    """Load a page and wait until every image on it has finished loading (or failed)."""
    browser.get_log("browser")  # drop what earlier pages logged
    url = site.url + f"{page}.html"
    _fetch(url)  # the server has the page (a 404 would raise here)
    browser.get(url)
    browser.execute_script(  # lazy images below the fold would otherwise never load
        "for (const i of document.images) { i.loading = 'eager'; }"
    )
    deadline = time.monotonic() + 60
    while True:
        pending = browser.execute_script(
            "return document.readyState !== 'complete' ? -1 : "
            "Array.from(document.images).filter(i => !i.complete).length;"
        )
        if pending == 0:
            return
        assert time.monotonic() < deadline, f"{page}: images still loading after 60 s ({pending})"
        time.sleep(0.2)


def _source(page: str) -> Path:
    return next(p for p in (ROOT / f"{page}.ipynb", ROOT / f"{page}.md") if p.is_file())


def _markdown(page: str) -> str:
    """The prose of a page's source: its markdown cells (a notebook), or the file (a .md)."""
    src = _source(page)
    if src.suffix != ".ipynb":
        return src.read_text()
    nb = json.loads(src.read_text())
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")


def _glue_text_refs(page: str) -> int:
    """How many {glue:text} references the page's source holds (markdown cells only)."""
    return len(re.findall(r"\{glue:text\}`", _markdown(page)))


def _glue_warnings(log: str, page: str) -> list[str]:
    plain = re.sub(r"\x1b\[[0-9;]*m", "", log)
    return [
        line.strip()
        for line in plain.splitlines()
        if str(_source(page)) + ":" in line and "glue" in line and "WARNING" in line
    ]


def _images(browser) -> list[dict]:
    return browser.execute_script(
        "return Array.from(document.images).map(i => ({src: i.currentSrc || i.src, "
        "complete: i.complete, width: i.naturalWidth, "
        "figure: !!i.closest('article.bd-article')}));"
    )


@pytest.mark.parametrize("page", PAGES)
def test_page_renders_in_chromium(browser, site, page):
    _open(browser, site, page)
    title = browser.title
    assert title and "404" not in title and "Error response" not in title, (
        f"{page}: title {title!r}"
    )
    assert browser.find_elements("css selector", "article.bd-article h1"), f"{page}: no heading"

    imgs = _images(browser)
    broken = [i["src"] for i in imgs if not (i["complete"] and i["width"] > 0)]
    assert not broken, f"{page}: broken images: {broken}"
    if page in _chapters():
        figures = [i for i in imgs if i["figure"]]
        assert figures, f"{page}: no figure in the chapter"

    # Glue: myst-nb renders an unresolved {glue:text} as nothing at all, so count them. Every
    # reference in the source must be a pasted value on the page, and the build must not have
    # warned about this page's glue; no raw role may be left in the text either.
    text = browser.execute_script("return document.body.innerText;")
    for marker in ("{glue", "glue:text", "glue:figure"):
        assert marker not in text and marker not in browser.page_source, (
            f"{page}: raw glue ({marker})"
        )
    pasted = len(browser.find_elements("css selector", "article.bd-article .pasted-text"))
    refs = _glue_text_refs(page)
    assert pasted == refs, f"{page}: {refs - pasted} of {refs} glue references are unresolved"
    warned = _glue_warnings(site.book.log, page)
    assert not warned, f"{page}: the build could not resolve glue: {warned[:5]}"

    # Every resource must load with the network cut (the browser resolves only 127.0.0.1):
    # the site serves its own MathJax, so nothing may come from outside.
    origin = site.url.rstrip("/")
    errors = [
        e["message"]
        for e in browser.get_log("browser")
        if e["level"] == "SEVERE" and not e["message"].startswith(f"{origin}/favicon.ico ")
    ]  # chromium's own guess
    assert not errors, f"{page}: the browser reported errors: {errors}"


def _zip_members(url: str) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(_fetch(url))) as z:
        assert z.testzip() is None, f"{url}: corrupt member"
        return {n: z.read(n) for n in z.namelist()}


@pytest.mark.parametrize("page", [p for p in PAGES if p in _chapters()])
def test_chapter_offers_its_data_and_a_binder_button(browser, site, page):
    """A chapter page ends with a link to its part of the appendix ("How this was measured");
    that part lists each of its runs and links each dataset's archive, and the archives hold
    every file the chapter reads, each once."""
    from perfbook.book.sphinx_site import SITE_DIR, chapter_data, measured_id

    chapter = _chapters()[page]
    data = chapter_data(chapter, site.book.data)
    _open(browser, site, page)
    pointer = [
        a.get_attribute("href")
        for a in browser.find_elements("css selector", "section#measured a.perfbook-measured-link")
    ]
    assert pointer, f"{page}: no link to its part of the appendix"
    assert urlsplit(pointer[0]).path == "/appendix.html"
    assert urlsplit(pointer[0]).fragment == measured_id(chapter)

    _open(browser, site, "appendix")
    part = f"section#{measured_id(chapter)}"
    # one link per dataset (and one to the reference figures), each to its own archive; together
    # they hold every file the chapter reads, each file once
    links = [
        a.get_attribute("href")
        for a in browser.find_elements(
            "css selector", f"{part} section[id^='datasets'] a.perfbook-dataset-archive"
        )
    ]
    assert links, f"{page}: no dataset download link"
    names = [urlsplit(h).path.split(f"/{SITE_DIR}/", 1)[1] for h in links]
    assert sorted(names) == sorted(a.name for a in data.archives()), (
        f"{page}: linked archives differ"
    )
    want = {f"data/{rel}": src for src, rel in data.members()}
    got = []
    for href in links:
        members = _zip_members(href)
        got += list(members)
        for name, blob in members.items():
            assert blob == want[name].read_bytes(), f"{href}: {name} differs from {want[name]}"
    assert sorted(got) == sorted(want), f"{page}: the archives do not hold exactly data/"
    # the runs table: one row per run, its machine named (the id its tooltip), its archive linked
    rows = browser.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0] + ' table.perfbook-runs tbody tr'))"
        ".map(r => ({host: r.querySelector('.kf-machine').getAttribute('title'),"
        " run: r.cells[1].innerText.trim()}));",
        part,
    )
    assert sorted((r["host"], r["run"]) for r in rows) == sorted(
        (r.host, r.run_id) for r in data.runs
    ), f"{page}: the appendix's runs table does not list exactly its runs"
    hosts_link = browser.find_elements("css selector", f"{part} a.perfbook-hosts-link")
    assert hosts_link and urlsplit(hosts_link[0].get_attribute("href")).path == "/hosts.html"

    _open(browser, site, page)
    # the Binder button opens this notebook in the configured repository
    org_repo = "/".join(site.book.repository_url.rsplit("/", 2)[-2:])
    binder = [
        a.get_attribute("href")
        for a in browser.find_elements("css selector", "a[href*='mybinder.org']")
    ]
    want = f"https://mybinder.org/v2/gh/{org_repo}/{site.book.branch}?urlpath=lab/tree/{page}.ipynb"
    assert want in binder, f"{page}: Binder link {binder} is not {want}"
    assert (ROOT / f"{page}.ipynb").is_file()


# ---- the hosts page: search, facets, sorting, and every host's datasets ---------------------


def _rows(browser, table: str) -> list[str]:
    """The visible rows of one of the page's tables, as the text of their cells (tab-separated)."""
    return browser.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0] + ' tbody tr'))"
        ".filter(r => !r.hidden && r.offsetParent !== null)"
        ".map(r => Array.from(r.cells).map(c => c.innerText.trim()).join('\\t'));",
        table,
    )


def _column(browser, table: str, header: str) -> list[str]:
    """A column's sort values (its span.pb-key, else its text) in the visible rows' order."""
    return browser.execute_script(
        "const t = document.querySelector(arguments[0] + ' table');"
        "const i = Array.from(t.tHead.rows[0].cells).findIndex(th => th.innerText.trim() === arguments[1]);"
        "return Array.from(t.tBodies[0].rows).filter(r => !r.hidden).map(r => {"
        "  const k = r.cells[i].querySelector('.pb-key'); return (k || r.cells[i]).innerText.trim(); });",
        table,
        header,
    )


def _sort_by(browser, table: str, header: str) -> None:
    btn = [
        b
        for b in browser.find_elements("css selector", f"{table} th button.pb-sort")
        if b.text.strip() == header
    ]
    assert btn, f"{table}: no sortable header {header!r}"
    btn[0].click()


def _hosts_page_checks(browser, url_base: str, html: Path, n_hosts: int) -> None:
    """The hosts page at url_base: one row per host, a search that filters, numeric sorting, a
    facet, and every dataset linked once to an archive the site holds."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    browser.get_log("browser")
    browser.get(url_base + "hosts.html")
    WebDriverWait(browser, 60).until(
        lambda b: (
            b.execute_script("return document.readyState") == "complete"
            and b.find_elements(By.CSS_SELECTOR, "#pb-hosts input.pb-search")
        )
    )
    rows = _rows(browser, "#pb-hosts")
    assert len(rows) == n_hosts, f"hosts page: {len(rows)} rows for {n_hosts} hosts"
    # a row names its machine by label, then "host id h-…" (#41)
    ids = [m.group(0) if (m := _HOST_ID.search(r)) else r[:40] for r in rows]
    assert len(set(ids)) == n_hosts and all(i.startswith("h-") for i in ids), ids[:5]

    # search: the typed text filters rows (any column), and clearing it brings them back
    box = browser.find_element(By.CSS_SELECTOR, "#pb-hosts input.pb-search")
    box.send_keys(ids[-1])
    WebDriverWait(browser, 10).until(lambda b: len(_rows(b, "#pb-hosts")) == 1)  # typed: filtered
    assert ids[-1] in _rows(browser, "#pb-hosts")[0]
    box.clear()
    box.send_keys("TCG guest")  # rows holding both words, in any column (the page says so)
    tcg = _rows(browser, "#pb-hosts")
    assert tcg == [r for r in rows if "tcg" in r.lower() and "guest" in r.lower()], tcg[:3]
    assert 0 < len(tcg) < n_hosts and any("\tTCG guest\t" in r for r in tcg), tcg[:3]
    box.send_keys(" no-such-word-anywhere")
    assert _rows(browser, "#pb-hosts") == []
    box.clear()
    box.send_keys(" ")  # an input event with nothing to match: every row again
    assert len(_rows(browser, "#pb-hosts")) == n_hosts

    # a facet: choosing a machine kind keeps exactly that kind's rows
    kinds = _column(browser, "#pb-hosts", "machine kind")
    sel = Select(
        browser.find_element(
            By.XPATH,
            "//div[@id='pb-hosts']//label[starts-with(normalize-space(.), 'machine kind')]/select",
        )
    )
    sel.select_by_value(kinds[0])
    assert _column(browser, "#pb-hosts", "machine kind") == [k for k in kinds if k == kinds[0]]
    sel.select_by_value("")

    # sorting: numeric columns as numbers (10 after 9), a second click reverses
    for header in ("datasets", "CPUs", "TSC MHz"):
        _sort_by(browser, "#pb-hosts", header)
        vals = [float(v) for v in _column(browser, "#pb-hosts", header) if v not in ("", "—")]
        assert vals == sorted(vals), f"{header} ascending: {vals[:10]}"
        _sort_by(browser, "#pb-hosts", header)
        vals = [float(v) for v in _column(browser, "#pb-hosts", header) if v not in ("", "—")]
        assert vals == sorted(vals, reverse=True), f"{header} descending: {vals[:10]}"
    _sort_by(browser, "#pb-hosts", "first run")  # run ids: fixed-width UTC timestamps
    assert _column(browser, "#pb-hosts", "first run") == sorted(
        _column(browser, "#pb-hosts", "first run")
    )

    # the findings: a row per finding, and a row per host with data in the per-host matrix
    assert _rows(browser, "#pb-findings"), "no findings table"
    assert len(_rows(browser, "#pb-findings-hosts")) == n_hosts
    # every dataset in data/ linked once from the hosts table, to an archive the site holds
    from perfbook.book.sphinx_site import SITE_DIR

    hrefs = browser.execute_script(
        "return Array.from(document.querySelectorAll('#pb-hosts a.pb-dataset')).map(a => a.getAttribute('href'));"
    )
    runs = sorted(p.relative_to(html).as_posix() for p in (html / SITE_DIR / "runs").rglob("*.zip"))
    assert sorted(hrefs) == runs, "the hosts page links other datasets than the site holds"
    errors = [
        e["message"]
        for e in browser.get_log("browser")
        if e["level"] == "SEVERE" and "favicon.ico" not in e["message"]
    ]
    assert not errors, f"hosts page: the browser reported errors: {errors}"


def test_hosts_page_with_a_fleet_searches_sorts_and_links(browser, site, capsys):
    """The hosts page of the site, whose copy holds the committed hosts and a synthetic fleet (12
    hosts in make test, 100 in make test-fleet): it loads, has a row per host, searches and
    sorts, and a linked archive is the dataset it names, unzipping into a clone."""
    from perfbook.analysis.hosts import host_records

    book = site.book
    n = len([p for p in (book.data / "runs").iterdir() if p.is_dir()])
    assert n >= book.hosts + 1 and len(host_records(book.data)) == n
    _hosts_page_checks(browser, site.url, site.html, n)
    a = browser.find_element("css selector", "#pb-hosts a.pb-dataset")
    host, chapter, run = urlsplit(a.get_attribute("href")).path.removesuffix(".zip").split("/")[-3:]
    members = _zip_members(a.get_attribute("href"))
    src = book.data / "runs" / host / chapter / run
    assert members and all(n.startswith(f"data/runs/{host}/{chapter}/{run}/") for n in members)
    for name, blob in members.items():
        assert blob == (book.repo / name).read_bytes(), name
    assert f"data/runs/{host}/{chapter}/{run}/manifest.json" in members and src.is_dir()
    mb = sum(p.stat().st_size for p in site.html.rglob("*") if p.is_file()) / 1e6
    data_mb = sum(p.stat().st_size for p in book.data.rglob("*") if p.is_file()) / 1e6
    with capsys.disabled():
        print(f"\nthe site ({n} hosts): {mb:.0f} MB in {site.html}, for {data_mb:.0f} MB of data/")


_HASHLIKE = re.compile(r"^(?:\.\./)*(?:_images/)?[0-9a-f]{16,}(?:\.png|\.svg|\.jpg)?$")


@pytest.mark.parametrize("page", [p for p in PAGES if p in _chapters()])
def test_chapter_reads_like_a_book(browser, site, page):
    """Key findings near the top, the platform banner, no long visible code, math rendered
    with the network cut (the browser resolves only 127.0.0.1), numbered figures with alt text."""
    _open(browser, site, page)
    q = browser.find_elements
    findings = q("css selector", "article.bd-article .key-findings")
    assert findings, f"{page}: no Key findings block"
    assert findings[0].find_elements("css selector", ".kf-verdict"), (
        f"{page}: findings without verdicts"
    )
    before_sections = browser.execute_script(
        "const k = document.querySelector('article.bd-article .key-findings');"
        "const h = document.querySelector('article.bd-article h2');"
        "return !h || !!(k.compareDocumentPosition(h) & Node.DOCUMENT_POSITION_FOLLOWING);"
    )
    assert before_sections, f"{page}: the Key findings block is not before the first section"
    assert q("css selector", "article.bd-article .platform-banner"), f"{page}: no platform banner"
    assert q("css selector", "article.bd-article .rerun-box"), f"{page}: no rerun box"

    long_code = browser.execute_script(
        "return Array.from(document.querySelectorAll('article.bd-article div.cell'))"
        ".filter(c => !c.classList.contains('tag_teaching'))"
        ".map(c => c.querySelector('div.cell_input'))"
        ".filter(i => i && i.offsetParent !== null && i.getClientRects().length > 0)"
        ".map(i => i.innerText.trim().split('\\n').length).filter(n => n > 10);"
    )
    assert not long_code, f"{page}: visible code cells longer than 10 lines: {long_code}"

    text = browser.execute_script("return document.querySelector('article.bd-article').innerText;")
    for raw in ("\\(", "\\[", "$$"):
        assert raw not in text, f"{page}: raw TeX {raw!r} in the visible text (math not rendered)"
    # the prose's math (markdown cells), not a shell variable in an output's one-liner
    if re.search(r"\$[^$\s][^$]*\$|\\\\\(", _markdown(page)):
        assert q("css selector", "article.bd-article mjx-container"), f"{page}: math not rendered"

    imgs = browser.execute_script(
        "return Array.from(document.querySelectorAll('article.bd-article img')).map(i => ({"
        "alt: i.getAttribute('alt') || '', src: i.getAttribute('src'),"
        "numbered: !!(i.closest('figure') && i.closest('figure').querySelector('.caption-number'))}));"
    )
    assert imgs, f"{page}: no figure"
    for i in imgs:
        assert i["numbered"], f"{page}: figure {i['src']} has no number"
        assert len(i["alt"]) >= 20 and not _HASHLIKE.match(i["alt"]), (
            f"{page}: figure {i['src']} has no real alt text ({i['alt']!r})"
        )


# words of the code, not of the reader (the glossary's terms say it: This host, Profile)
JARGON = ("real profile", "the dataset the prose quotes", "REAL_PROFILES")
_HOST_ID = re.compile(r"\bh-[0-9a-f]{12}\b")


def _finding_keys() -> set[str]:
    """Every declared finding's key that is an identifier rather than a word (it has an '_')."""
    from perfbook.chapters import CHAPTERS

    return {f.key for e in CHAPTERS for f in e.load().key_findings if "_" in f.key}


def _shown_text(browser) -> str:
    """The article's text as a reader sees it before opening anything: innerText leaves out the
    content of a closed <details> and every attribute (a tooltip)."""
    return browser.execute_script("return document.querySelector('article.bd-article').innerText;")


def _all_text(browser) -> str:
    """Every word of the article, a closed <details> included (textContent), without a host-id
    column (perfbook.data.machine.HOST_ID_CELL: the hosts page's one place for an id)."""
    return browser.execute_script(
        "const a = document.querySelector('article.bd-article').cloneNode(true);"
        "a.querySelectorAll('code.pb-hostid, script, style').forEach(e => e.remove());"
        "return a.textContent;"
    )


@pytest.mark.parametrize("page", PAGES)
def test_no_bare_host_id_and_no_finding_id_or_jargon_in_the_text(browser, site, page):
    """A host is named by its machine's label (its id is the tooltip), in every table, caption,
    sentence and collapsed evidence of every page; a finding by its claim; the glossary's terms,
    not the code's words."""
    _open(browser, site, page)
    ids = sorted(set(_HOST_ID.findall(_all_text(browser))))
    assert not ids, f"{page}: bare host ids {ids[:5]}"
    text = _shown_text(browser)
    keys = sorted(k for k in _finding_keys() if re.search(rf"\b{re.escape(k)}\b", text))
    assert not keys, f"{page}: internal finding ids in the text: {keys}"
    jargon = [j for j in JARGON if j in text]
    assert not jargon, f"{page}: the project's jargon instead of the glossary's terms: {jargon}"


def test_the_landing_page_is_first_and_each_takeaway_agrees_with_its_chapter(browser, site):
    """The site opens on the landing page; each takeaway links to its chapter's finding, and the
    verdict it shows is the one the chapter's Key findings give that machine."""
    first = _fetch(site.url + "index.html").decode()
    assert "summary.html" in first, "the site's first page is not the landing page"
    browser.set_window_size(1280, 800)
    try:
        _open(browser, site, "summary")
        top, h = browser.execute_script(
            "window.scrollTo(0, 0); const t = document.querySelector('li.takeaway');"
            "return [t ? t.getBoundingClientRect().top : null, window.innerHeight];"
        )
    finally:
        browser.set_window_size(1280, 1400)
    assert top is not None and top < h - 40, f"no takeaway on the first screen ({top} of {h} px)"
    _open(browser, site, "summary")
    items = browser.execute_script(
        "return Array.from(document.querySelectorAll('li.takeaway')).map(li => ({"
        "verdict: li.querySelector('.kf-verdict').innerText.trim(),"
        "host: li.querySelector('.kf-machine').getAttribute('title'),"
        "href: li.querySelector('a.takeaway-link').getAttribute('href')}));"
    )
    chapters = {p.rsplit("/", 1)[-1]: p for p in PAGES if p in _chapters()}
    assert len(items) >= 8, f"only {len(items)} takeaways"
    linked = set()
    for it in items:
        m = re.fullmatch(r"chapters/(\w+)\.html#(kf-\w+)", it["href"])
        assert m and m.group(1) in chapters, f"a takeaway links elsewhere: {it['href']}"
        linked.add(m.group(1))
        _open(browser, site, chapters[m.group(1)])
        there = browser.execute_script(
            "const li = document.getElementById(arguments[0]);"
            "if (!li) { return null; }"
            "for (const e of li.querySelectorAll('.kf-strip li.kf-host')) {"
            "  const who = e.querySelector('.kf-machine');"
            "  if (who && who.getAttribute('title') === arguments[1]) {"
            "    return e.querySelector('.kf-verdict').innerText.trim(); } }"
            "return undefined;",
            m.group(2),
            it["host"],
        )
        assert there is not None, f"{it['href']}: no such finding on the chapter page"
        assert there == it["verdict"], (
            f"{it['href']}: the landing page says {it['verdict']!r}, the chapter {there!r} "
            f"for {it['host']}"
        )
    assert len(linked) == len(items), "two takeaways link one chapter"


@pytest.mark.parametrize("page", [p for p in PAGES if p in _chapters()])
def test_a_chapters_first_screen_shows_title_banner_and_findings_and_no_console(
    browser, site, page
):
    """At 1280x800 a chapter's first screen holds its title, the platform banner and the start
    of its Key findings, and no cell prints console output anywhere on the page."""
    browser.set_window_size(1280, 800)
    try:
        _open(browser, site, page)
        got = browser.execute_script(
            "window.scrollTo(0, 0);"
            "const a = document.querySelector('article.bd-article');"
            "const top = s => { const e = a.querySelector(s); "
            "  return e ? e.getBoundingClientRect().top : null; };"
            "return {h: window.innerHeight, title: top('h1'), banner: top('.platform-banner'),"
            "  findings: top('.key-findings'),"
            "  console: Array.from(a.querySelectorAll('.output.stream, .output.stderr'))"
            "    .filter(e => e.offsetParent !== null).map(e => e.innerText.slice(0, 80))};"
        )
    finally:
        browser.set_window_size(1280, 1400)
    for what in ("title", "banner", "findings"):
        assert got[what] is not None and got[what] < got["h"] - 40, (
            f"{page}: the {what} is not on the first screen ({got[what]} of {got['h']} px)"
        )
    assert not got["console"], f"{page}: console output on the page: {got['console']}"


def _nonblank_png(path: Path) -> None:
    from PIL import Image

    with Image.open(path) as im:
        assert im.format == "PNG" and im.width >= 800 and im.height >= 600, (path, im.size)
        colors = im.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colors is None or len(colors) > 50, f"{path} looks blank ({len(colors)} colours)"


def test_screenshots(browser, site, capsys):
    """The landing page and two chapters' first screens at 1280x800, and the two chapters at
    their first figure, kept as test artifacts."""
    two = [p for p in PAGES if p in _chapters()][:2]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    saved = []
    shots = [("summary", "landing-first-screen.png", "first")] + [
        (p, f"{p.rsplit('/', 1)[-1]}-{where}.png", where)
        for p in two
        for where in ("first", "figure")
    ]
    for page, name, where in shots:
        browser.set_window_size(1280, 800 if where == "first" else 1400)
        _open(browser, site, page)
        if where == "figure":
            browser.execute_script(
                "const i = document.querySelector('article.bd-article img');"
                "if (i) { i.scrollIntoView({block: 'center'}); }"
            )
            time.sleep(0.5)
        out = SCREENSHOTS / name
        tmp = out.with_suffix(".tmp.png")
        assert browser.save_screenshot(str(tmp)), f"chromium could not save {name}"
        os.replace(tmp, out)
        browser.set_window_size(1280, 1400)
        _nonblank_png(out)
        saved.append(f"{out} ({page})")
    with capsys.disabled():
        print("\nscreenshots: " + "; ".join(saved))
