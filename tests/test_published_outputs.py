"""The site publishes the notebooks' stored outputs, so a stored output must be the one our
code makes from the data in the repository. nbval (part of `make test`, and of the
contribution check) re-executes every chapter and compares: a contribution that edits a
stored output, say a number in a table, fails."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

NBVAL = [
    "--nbval",
    "--nbval-current-env",
    "--nbval-sanitize-with",
    str(ROOT / "tests" / "nbval_sanitize.cfg"),
    "-q",
    "-p",
    "no:cacheprovider",
    "-p",
    "perfbook.book.jupyter.nbval_plugin",
]


def _nbval(path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", str(path), *NBVAL],
        capture_output=True,
        text=True,
        cwd=path.parent,
        timeout=600,
    )


def _tamper(nb: dict) -> str:
    """Change one digit of the first stored text/plain output that has a number; returns it."""
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            text = out.get("data", {}).get("text/plain")
            if not text:
                continue
            joined = "".join(text) if isinstance(text, list) else text
            m = re.search(r"\d", joined)
            if m:
                digit = str((int(m.group()) + 1) % 10)
                out["data"]["text/plain"] = joined[: m.start()] + digit + joined[m.end() :]
                return joined.strip()[:60]
    raise AssertionError("no stored number to tamper with")


def test_an_edited_stored_output_fails_the_suite(tmp_path):
    src = ROOT / "chapters" / "tsc_alignment.ipynb"
    honest = tmp_path / "honest" / src.name
    honest.parent.mkdir()
    shutil.copy(src, honest)
    r = _nbval(honest)
    assert r.returncode == 0, "the untouched copy must pass:\n" + r.stdout[-2000:]
    nb = json.loads(src.read_text())
    what = _tamper(nb)
    edited = tmp_path / "edited" / src.name
    edited.parent.mkdir()
    edited.write_text(json.dumps(nb))
    r = _nbval(edited)
    assert r.returncode != 0, f"a stored output edited by hand ({what!r}) passed nbval"


# What our code emits into stored outputs: pandas tables (Styler or to_html) and Markdown.
ALLOWED_MIME = {"text/plain", "text/html", "text/markdown", "image/png", "image/svg+xml"}
ALLOWED_TAGS = {
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "style",
    "div",
    "span",
    "p",
    "b",
    "i",
    "em",
    "strong",
    "code",
    "br",
    "caption",
    "sup",
    "sub",
    "a",
    "ul",
    "ol",
    "li",
    "pre",
    "details",  # the Key findings' per-run evidence and the banner's machine facts, collapsed
    "summary",
}
ALLOWED_ATTRS = {
    "class",
    "id",
    "scoped",
    "border",
    "style",
    "rowspan",
    "colspan",
    "valign",
    "halign",
    "type",
    "href",
    "title",
}


def _html_problems(text: str) -> list[str]:
    from html.parser import HTMLParser

    found = []

    class Scan(HTMLParser):
        def handle_starttag(self, tag, attrs):
            if tag not in ALLOWED_TAGS:
                found.append(f"<{tag}>")
            for k, v in attrs:
                if k not in ALLOWED_ATTRS or (
                    v and re.search(r"javascript:|expression\(|url\(", v, re.I)
                ):
                    found.append(f"<{tag} {k}={v!r}>")

        def handle_data(self, data):
            if self.lasttag == "style" and re.search(r"@import|url\(|expression\(", data, re.I):
                found.append("style that loads something")

    Scan().feed(text)
    return found


def test_stored_outputs_hold_only_what_our_code_emits():
    import glob

    problems = []
    for f in sorted(glob.glob(str(ROOT / "chapters" / "*.ipynb"))) + [str(ROOT / "hosts.ipynb")]:
        nb = json.loads(open(f).read())
        for i, cell in enumerate(nb["cells"]):
            for out in cell.get("outputs", []):
                for mime, value in out.get("data", {}).items():
                    text = "".join(value) if isinstance(value, list) else value
                    where = f"{Path(f).name} cell {i} {mime}"
                    if mime not in ALLOWED_MIME and not mime.startswith(
                        "application/papermill.record/"
                    ):
                        problems.append(f"{where}: output type not ours")
                    elif mime in ("text/html", "text/markdown"):
                        problems += [f"{where}: {p}" for p in _html_problems(text)]
    assert problems == [], "\n".join(problems[:20])


def test_the_html_check_can_fail():
    assert _html_problems("<table><tr><td>1</td></tr></table>") == []
    assert _html_problems("<script>alert(1)</script>") == ["<script>"]
    assert _html_problems('<td onclick="x()">1</td>') == ["<td onclick='x()'>"]
    assert _html_problems('<a href="javascript:x()">y</a>') == ["<a href='javascript:x()'>"]
    assert _html_problems("/proc/<pid>/sched") == ["<pid>"]
