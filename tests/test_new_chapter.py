"""Adding a chapter by the guide (tools/README.md, "Adding a chapter"), followed mechanically.

In a scratch copy of this checkout (perfbook.dev.bench.scratch_checkout: its files, not build/
or .git, run with the copy's own package first on PYTHONPATH), the example chapter is copied
under a new name and every step of the guide is done, in its order (STEPS, one function each,
named as the guide names them). Then the tests that hold a book chapter to the contract run in
the copy, on the new chapter: the contract (test_contract.py), the layers and the one shape
(test_layers.py, all of it), the registry and the table of contents (test_book.py), the plan
(test_summary.py), the key findings and figures on the committed data and on a new host's
(test_findings.py, test_new_host.py), the figures' registry (test_fleetview.py), the stored
notebooks' freshness (test_freshness.py), the site's page section (test_site_publish.py), and
nbval on the new notebook; a second test builds the copy's book and opens the new page in
chromium (test_book.py, test_site_browser.py).

Leaving a step out must fail them: `PERFBOOK_NEWCHAP_SKIP=<step> pytest tests/test_new_chapter.py`
does every step but that one (a check made by hand; a green run with a step skipped means the
step, or the test, is not what the suite requires). Checked for each step: every one fails but
plan_its_time, whose plan (1 s, 2 s) the copy inherits from the example. Without
register_the_chapter the measure step refuses the unknown chapter; without add_it_to_the_toc
test_book.py fails; without list_its_figures test_fleetview.py and test_new_host.py; with one
key finding test_findings.py; without format_the_code ruff's format check; without
measure_a_dataset the contract's committed-dataset test and test_findings.py; without
refresh_the_notebooks test_freshness.py (the chapter, summary and hosts) and nbval.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from perfbook.dev.bench import check_copy, copy_env, scratch_checkout

NAME = "newchap"
GUIDE = ROOT / "tools" / "README.md"
SKIP = os.environ.get("PERFBOOK_NEWCHAP_SKIP", "")


# ---- the guide's steps, in its order --------------------------------------------------------


def _edit(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    assert text.count(old) >= count, f"{path}: {old!r} not found (the guide is stale)"
    path.write_text(text.replace(old, new))


def copy_the_package(repo: Path) -> None:
    """tools/perfbook/chapters/example/ -> <name>/, renamed, no longer "not in the book"."""
    pkg = repo / "tools" / "perfbook" / "chapters"
    shutil.copytree(pkg / "example", pkg / NAME, ignore=shutil.ignore_patterns("__pycache__"))
    init = pkg / NAME / "__init__.py"
    _edit(init, "class Example(Chapter):", "class Newchap(Chapter):")
    _edit(init, 'name = "example"', f'name = "{NAME}"')
    _edit(init, 'title = "Example chapter (not in the book)"', 'title = "A new chapter"')
    _edit(init, "chapter = Example()", "chapter = Newchap()")


def copy_the_notebook(repo: Path) -> None:
    """chapters/example.ipynb -> chapters/<name>.ipynb, importing the new package."""
    nb = repo / "chapters" / f"{NAME}.ipynb"
    shutil.copy(repo / "chapters" / "example.ipynb", nb)
    _edit(nb, "perfbook.chapters.example", f"perfbook.chapters.{NAME}")
    _edit(nb, "fig-example-per-round", f"fig-{NAME}-per-round")


def register_the_chapter(repo: Path) -> None:
    """An Entry in perfbook.chapters.CHAPTERS."""
    _edit(
        repo / "tools" / "perfbook" / "chapters" / "__init__.py",
        "]\n\n\n# Pages that read data/",
        f'    Entry("{NAME}", "perfbook.chapters.{NAME}", "chapters/{NAME}.ipynb"),\n'
        "]\n\n\n# Pages that read data/",
    )


def add_it_to_the_toc(repo: Path) -> None:
    """A `- file: chapters/<name>` line in a part of _toc.yml."""
    _edit(
        repo / "_toc.yml",
        "      - file: chapters/sched_callers\n",
        f"      - file: chapters/sched_callers\n      - file: chapters/{NAME}\n",
    )


def list_its_figures(repo: Path) -> None:
    """tests/conftest.py FIGURES: each nb.figure key of the notebook -> its figures function."""
    _edit(
        repo / "tests" / "conftest.py",
        "FIGURES = {\n",
        f'FIGURES = {{\n    "{NAME}": {{"per_round": "per_round"}},\n',
    )


def write_two_to_five_key_findings(repo: Path) -> None:
    """key_findings.FINDINGS: 2 to 5 claims, each decided on a number and its interval. The
    example has one; two more on the same dataset, as a chapter author would add."""
    kf = repo / "tools" / "perfbook" / "chapters" / NAME / "key_findings.py"
    _edit(kf, "\n\nFINDINGS = (\n", f"\n\n{EXTRA_DECIDERS}\n\nFINDINGS = (\n")
    _edit(kf, "    ),\n)\n", f"    ),\n{EXTRA_FINDINGS})\n")


EXTRA_DECIDERS = '''def near_median(run):
    """The share of rounds whose cost lies within 20 % of the median, k of n."""
    if "calls" not in run:
        return None
    x = run["calls"]["ns_per_call"]
    if x.empty:
        return None
    med = float(x.median())
    k = int(((x - med).abs() <= 0.2 * med).sum())
    return Measured(decide.share(k, len(x), what=" rounds"), f"median {decide.fmt(med)} ns")'''

EXTRA_FINDINGS = """    Finding(
        "over_ten_nanoseconds",
        "A getppid() call from Python costs more than 10 ns",
        per_call,
        quantity="median cost per call",
        side=">",
        threshold=10,
        unit="ns",
        reproduce="python3 -m timeit -s 'import os' 'os.getppid()'",
    ),
    Finding(
        "rounds_agree",
        "The rounds agree: most of them cost within 20 % of the median",
        near_median,
        quantity="share of rounds within 20 % of the median",
        side=">",
        threshold=0.5,
        contrary="The rounds disagree: most of them cost more than 20 % away from the median",
        reproduce="python3 -m timeit -v -r 10 -s 'import os' 'os.getppid()'",
    ),
"""


def plan_its_time(repo: Path) -> None:
    """plan_s within the budget of `make all`, and the parameters cell's comment quoting it. The
    example's plan (1 s, 2 s) is this copy's too: its collect is the example's."""
    init = repo / "tools" / "perfbook" / "chapters" / NAME / "__init__.py"
    assert 'plan_s = {"quick": 1, "default": 2}' in init.read_text()
    nb = (repo / "chapters" / f"{NAME}.ipynb").read_text()
    assert '\\"quick\\" (~1 s here), \\"default\\" (~2 s)' in nb


def format_the_code(repo: Path) -> None:
    """ruff format and ruff check --fix on what was added."""
    bindir = Path(sys.executable).parent
    for cmd in (["format"], ["check", "--fix"]):
        r = subprocess.run(
            [str(bindir / "ruff"), *cmd, "--no-cache", "tools", "tests"],
            cwd=repo,
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, r.stdout + r.stderr


def measure_a_dataset(repo: Path, env: dict) -> None:
    """`perfbook measure --chapters <name>` (a real profile: a quick run gets no verdict)."""
    _run(repo, env, [_perfbook(), "measure", "--chapters", NAME, "--profile", "default"])
    runs = list((repo / "data" / "runs").glob(f"*/{NAME}/*/manifest.json"))
    assert len(runs) == 1, runs


def refresh_the_notebooks(repo: Path, env: dict) -> None:
    """`perfbook refresh --chapters <name>,summary,hosts`: its notebook, and the two pages that
    read every chapter's data."""
    _run(repo, env, [_perfbook(), "refresh", "--chapters", f"{NAME},summary,hosts"])


STEPS = (
    copy_the_package,
    copy_the_notebook,
    register_the_chapter,
    add_it_to_the_toc,
    list_its_figures,
    write_two_to_five_key_findings,
    plan_its_time,
    format_the_code,
    measure_a_dataset,
    refresh_the_notebooks,
)


def _perfbook() -> str:
    return str(Path(sys.executable).with_name("perfbook"))


def _run(repo: Path, env: dict, argv: list[str], timeout: float = 1200):
    r = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"$ {' '.join(argv)}\n{r.stdout[-3000:]}{r.stderr[-3000:]}"
    return r


# ---- the copy, with the chapter added -------------------------------------------------------


@pytest.fixture(scope="module")
def added(tmp_path_factory):
    """(the copy, its environment): the example copied to NAME by every step of the guide."""
    if os.geteuid() != 0:
        pytest.skip("measuring the new chapter's dataset needs root (the example's ftrace part)")
    repo = scratch_checkout(tmp_path_factory.mktemp("newchap") / "repo", ROOT)
    env = copy_env(repo)
    check_copy(repo, env)
    for step in STEPS:
        if step.__name__ == SKIP:
            continue
        if step in (measure_a_dataset, refresh_the_notebooks):
            step(repo, env)
        else:
            step(repo)
    return repo, env


def _pytest(repo: Path, env: dict, *args: str) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    return r.stdout


CHECKS = [
    *(
        f"tests/test_contract.py::{t}[{NAME}]"
        for t in (
            "test_bad_parameters_are_one_line_and_write_nothing",
            "test_measure_cli_rejects_a_bad_value_with_one_line",
            "test_unwritable_data_dir_stops_before_measuring",
            "test_committed_datasets_load_typed_and_match_the_declared_tables",
            "test_chapter_declares_the_contract",
            "test_papermill_parses_every_parameter_line",
        )
    ),
    "tests/test_layers.py",
    "tests/test_book.py::test_every_registered_chapter_is_in_the_toc",
    "tests/test_book.py::test_every_chapter_package_and_notebook_is_registered",
    "tests/test_summary.py::test_every_chapter_has_a_plan_and_the_plans_keep_the_issue_19_targets",
    "tests/test_summary.py::test_each_notebook_tells_its_reader_the_plan_of_each_profile",
    *(
        f"tests/test_findings.py::{t}[{state}-{NAME}]"
        for t in ("test_every_finding_evaluates_on_every_committed_host",)
        for state in ("committed", "new_host")
    ),
    *(
        f"tests/test_new_host.py::{t}[{NAME}-{state}]"
        for t in (
            "test_prose_values_and_key_findings_hold_whichever_host_is_this_host",
            "test_figures_mark_this_host_and_the_reference_host_apart",
        )
        for state in ("committed", "new_host")
    ),
    f"tests/test_findings.py::test_every_finding_has_a_one_liner_a_reader_can_run[{NAME}]",
    "tests/test_fleetview.py::test_every_notebook_figure_is_covered",
    *(
        f"tests/test_freshness.py::test_stored_notebook_follows_the_data[{p}]"
        for p in (NAME, "summary", "hosts")
    ),
    "tests/test_site_publish.py::test_every_registered_chapter_gets_a_page_section",
    "tests/test_secondhost.py::test_default_plan_leaves_out_nested_qemu_chapters",
    "tests/test_synthfleet.py::test_every_chapter_that_repeats_adaptively_has_its_rounds_listed",
]
NBVAL = ["--nbval", "--nbval-current-env", "--nbval-sanitize-with", "tests/nbval_sanitize.cfg"]


@pytest.mark.live  # its fixture measures a dataset as root
def test_the_new_chapter_passes_the_chapter_tests(added):
    repo, env = added
    out = _pytest(repo, env, *CHECKS, f"chapters/{NAME}.ipynb", *NBVAL)
    assert re.search(r"\b\d+ passed\b", out) and " skipped" not in out, out[-3000:]


@pytest.mark.live  # its fixture measures a dataset as root
def test_the_new_chapter_renders_in_the_book(added):
    """The copy's book builds with warnings as errors, and the new page opens in chromium with
    its figure, Key findings, banner, rerun box, Datasets section and Binder button."""
    repo, env = added
    page = f"chapters/{NAME}"
    out = _pytest(
        repo,
        {**env, "PERFBOOK_TEST_FLEET": "0"},  # its page, not a fleet's hosts page (conftest)
        "tests/test_book.py::test_book_builds_without_warnings",
        *(
            f"tests/test_site_browser.py::{t}[{page}]"
            for t in (
                "test_page_renders_in_chromium",
                "test_chapter_offers_its_data_and_a_binder_button",
                "test_chapter_reads_like_a_book",
            )
        ),
    )
    assert "4 passed" in out, out[-3000:]


def test_the_guide_names_these_steps_in_this_order():
    """The guide's numbered steps are this test's STEPS: a step added to one is added to the
    other, so the guide stays what the tests require."""
    text = GUIDE.read_text()
    section = text.split("## Adding a chapter", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"^\d+\. \*\*(.+?)\*\*", section, re.M)
    assert [n.lower().replace(" ", "_").rstrip(".:") for n in named] == [
        s.__name__ for s in STEPS
    ], named
