"""The whole book builds with Sphinx warnings as errors, and every chapter renders."""

import pytest
import yaml

from conftest import ROOT


def _chapters():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [c["file"] for part in toc["parts"] for c in part["chapters"]]


def test_every_registered_chapter_is_in_the_toc():
    from perfbook.chapters import CHAPTERS

    toc = set(_chapters())
    for ch in CHAPTERS:
        assert ch.notebook.removesuffix(".ipynb") in toc, f"{ch.name} is not in _toc.yml"
        assert ch.path.is_file()


def test_every_chapter_package_and_notebook_is_registered():
    """The registry (perfbook.chapters.CHAPTERS, and EXAMPLE) names every chapter package and
    every notebook in chapters/, and the book's chapter pages are the registered chapters': a
    chapter copied from the example but not registered is walked by none of the tests."""
    from perfbook.chapters import CHAPTERS, EXAMPLE

    registered = CHAPTERS + [EXAMPLE]
    pkgs = ROOT / "tools" / "perfbook" / "chapters"
    packages = {
        f"perfbook.chapters.{d.name}" for d in pkgs.iterdir() if (d / "__init__.py").exists()
    }
    assert packages == {c.module for c in registered}, packages ^ {c.module for c in registered}
    notebooks = {f"chapters/{p.name}" for p in (ROOT / "chapters").glob("*.ipynb")}
    assert notebooks == {c.notebook for c in registered}, notebooks ^ {
        c.notebook for c in registered
    }
    pages = {f for f in _chapters() if f.startswith("chapters/")}
    assert pages == {c.notebook.removesuffix(".ipynb") for c in CHAPTERS}


@pytest.mark.slow
def test_book_builds_without_warnings(built_book):
    """The session's one build of the book (conftest.built_book: in a scratch copy that also holds
    a synthetic fleet), also used by the browser test."""
    assert built_book.returncode == 0, built_book.log[-4000:]
    html = built_book.html
    assert (html / "index.html").is_file()
    for page in _chapters():
        f = html / f"{page}.html"
        assert f.is_file(), f"{page} did not render"
        text = f.read_text()
        assert "{glue" not in text and "glue:text" not in text, (
            f"unresolved glue reference in {page}"
        )
        if page.startswith("chapters/"):
            assert "<img" in text, f"{page} has no figure"


@pytest.mark.slow
def test_the_site_holds_each_dataset_once(built_book):
    """Every dataset file in data/runs and every reference figure of a chapter is in exactly
    one archive under datasets/, and nothing else is there (no raw copies beside them): the
    committed datasets and the synthetic fleet's of the copy the book was built in."""
    import zipfile

    from perfbook.book.sphinx_site import SITE_DIR, chapter_data, run_chapters
    from perfbook.chapters import CHAPTERS

    assert built_book.returncode == 0, built_book.log[-4000:]
    site = built_book.html / SITE_DIR
    members, others = [], []
    for f in sorted(p for p in site.rglob("*") if p.is_file()):
        if f.suffix != ".zip":
            others.append(f)
            continue
        with zipfile.ZipFile(f) as z:
            members += z.namelist()
    assert others == [], f"files beside the archives: {others[:5]}"
    data = built_book.data
    chapters = sorted({c.name for c in CHAPTERS} | set(run_chapters(data)))
    want = sorted(f"data/{rel}" for c in chapters for _, rel in chapter_data(c, data).members())
    assert len(members) == len(set(members)), "a file is in two archives"
    assert sorted(members) == want


def page_text(html: str) -> str:
    """What a reader sees of a built page: its text without scripts, styles, code blocks and
    inline code (a Python literal in a code sample is not debris), tags dropped."""
    import html as H
    import re

    html = re.sub(r"(?is)<(script|style|pre|code|head)\b.*?</\1>", " ", html)
    return H.unescape(re.sub(r"(?s)<[^>]+>", " ", html))


@pytest.mark.slow
def test_no_built_page_shows_debris(built_book):
    """#42: every page of the built site (chapters, overview, hosts, methods, glossary) reads
    without a missing number printed as such (nan, inf, <NA>), a sign without its number
    (+-), or a Python repr (a numpy scalar, a list or dict, a string in its quotes)."""
    from conftest import debris

    assert built_book.returncode == 0, built_book.log[-4000:]
    found = {}
    for f in sorted(built_book.html.rglob("*.html")):
        rel = f.relative_to(built_book.html).as_posix()
        if rel.startswith(("_", "genindex", "search")):
            continue
        bad = debris(page_text(f.read_text()))
        if bad:
            found[rel] = bad[:3]
    assert not found, f"pages with debris: {found}"


def test_the_page_scan_finds_debris_in_text_and_not_in_code():
    """The scan itself: a NaN in a table cell or a '+-' in prose is found; the same in a code
    block is not."""
    from conftest import debris

    assert debris(page_text("<td>NaN</td><p>cached +-23.6 µs</p>"))
    assert not debris(page_text("<pre>x = float('nan')</pre><p>a <code>['a']</code></p>"))


# The project's own words, as the pages use them: each must be a glossary entry (#41).
PROJECT_TERMS = (
    "Key finding",
    "Interval",
    "Round",
    "Profile",
    "Disturbed run",
    "Seed article",
    "This host",
    "Reference host",
    "Machine label",
    "This machine",
    "One-liner",
    "Host id",
    "TCG",
    "PVM",
    "Hodges–Lehmann",
)


def glossary_terms() -> set[str]:
    """The terms glossary.md defines: the unindented lines of its {glossary} block."""
    text = (ROOT / "glossary.md").read_text()
    block = text.split("```{glossary}", 1)[1].split("```", 1)[0]
    return {line.strip() for line in block.splitlines() if line and not line[0].isspace()}


def test_the_glossary_defines_every_project_term():
    missing = [t for t in PROJECT_TERMS if t not in glossary_terms()]
    assert not missing, f"glossary.md does not define: {missing}"
