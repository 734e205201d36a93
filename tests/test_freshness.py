"""No chapter is stale: every stored notebook was executed on the data data/ holds now.

perfbook.book.freshness digests exactly the files a notebook reads; `python -m perfbook
refresh` stores that digest in the notebook's metadata. The unit tests pin the
digest's properties; the last tests compare every stored notebook with data/.
"""

import json
import os
import shutil
import sys

import nbformat
import pytest
import yaml

from conftest import ROOT
from perfbook import chapters
from perfbook.book import freshness
from perfbook.data import digest


def _dataset(data, host, chapter, run, rows="x\n1\n"):
    d = data / "runs" / host / chapter / run
    d.mkdir(parents=True)
    (d / "t.csv").write_text(rows)
    (d / "manifest.json").write_text(
        json.dumps({"chapter": chapter, "run_id": run, "host": {"host_id": host}})
    )
    return d


@pytest.fixture
def data(tmp_path):
    d = tmp_path / "data"
    (d / "reference").mkdir(parents=True)
    (d / "reference" / "trace_overhead.csv").write_text("a,b\n1,2\n")
    (d / "reference" / "tsc_alignment.csv").write_text("a\n3\n")
    _dataset(d, "h-aaaaaaaaaaaa", "trace_overhead", "20260101T000000Z")
    _dataset(d, "h-aaaaaaaaaaaa", "tsc_alignment", "20260101T000000Z")
    return d


def test_digest_covers_the_chapters_runs_and_its_reference_only(data):
    files = digest.data_files("trace_overhead", data)
    from perfbook.core.paths import reference_dir

    # the chapter's other reference tables (published figures beside the seed's) come from the
    # committed data/reference when the scratch data dir has none, as load_reference does
    committed = sorted(
        f"reference/{p.name}"
        for p in reference_dir().glob("trace_overhead*.csv")
        if p.name != "trace_overhead.csv"
    )
    assert sorted(files) == sorted(
        [
            "reference/trace_overhead.csv",
            "runs/h-aaaaaaaaaaaa/trace_overhead/20260101T000000Z/manifest.json",
            "runs/h-aaaaaaaaaaaa/trace_overhead/20260101T000000Z/t.csv",
            *committed,
            "reference/reference_host.json",
        ]
    )  # every figure marks it
    assert not any("tsc_alignment" in f for f in files)


def test_digest_does_not_depend_on_order_or_location(data, tmp_path):
    other = tmp_path / "elsewhere" / "data"
    (other / "reference").mkdir(parents=True)
    # the same files, created in the opposite order, in another directory
    _dataset(other, "h-aaaaaaaaaaaa", "tsc_alignment", "20260101T000000Z")
    _dataset(other, "h-aaaaaaaaaaaa", "trace_overhead", "20260101T000000Z")
    (other / "reference" / "tsc_alignment.csv").write_text("a\n3\n")
    (other / "reference" / "trace_overhead.csv").write_text("a,b\n1,2\n")
    for ch in ("trace_overhead", "tsc_alignment"):
        assert freshness.data_digest(ch, data) == freshness.data_digest(ch, other)


def test_a_new_dataset_changes_only_the_affected_chapter(data):
    before = {ch: freshness.data_digest(ch, data) for ch in ("trace_overhead", "tsc_alignment")}
    _dataset(data, "h-bbbbbbbbbbbb", "trace_overhead", "20260102T000000Z")
    assert freshness.data_digest("trace_overhead", data) != before["trace_overhead"]
    assert freshness.data_digest("trace_overhead", data)[1] == before["trace_overhead"][1] + 2
    assert freshness.data_digest("tsc_alignment", data) == before["tsc_alignment"]


def test_content_reference_and_renames_count_but_mtimes_and_hidden_files_do_not(data):
    run = data / "runs" / "h-aaaaaaaaaaaa" / "trace_overhead" / "20260101T000000Z"
    d0 = freshness.data_digest("trace_overhead", data)
    os.utime(run / "t.csv", (0, 0))
    (data / "runs" / "h-aaaaaaaaaaaa" / "trace_overhead" / ".tmp-20260103T000000Z-1234").mkdir()
    (
        data / "runs" / "h-aaaaaaaaaaaa" / "trace_overhead" / ".tmp-20260103T000000Z-1234" / "t.csv"
    ).write_text("9")
    assert freshness.data_digest("trace_overhead", data) == d0
    (run / "t.csv").write_text("x\n2\n")
    d1 = freshness.data_digest("trace_overhead", data)
    assert d1 != d0
    (data / "reference" / "trace_overhead.csv").write_text("a,b\n1,3\n")
    d2 = freshness.data_digest("trace_overhead", data)
    assert d2 != d1
    run.rename(run.with_name("20260101T000001Z"))
    assert freshness.data_digest("trace_overhead", data) != d2


def test_a_page_that_reads_every_chapter_digests_all_of_data(data):
    d0 = freshness.data_digest("some_page", data)
    files = digest.data_files("some_page", data, chapter=False)
    assert len([f for f in files if f.startswith("runs/")]) == 4
    assert {"reference/trace_overhead.csv", "reference/tsc_alignment.csv"} <= set(files)
    _dataset(data, "h-bbbbbbbbbbbb", "tsc_alignment", "20260102T000000Z")
    assert freshness.data_digest("some_page", data) != d0


def test_missing_reference_in_a_scratch_dir_falls_back_to_the_committed_one(tmp_path):
    scratch = tmp_path / "data"
    _dataset(scratch, "h-aaaaaaaaaaaa", "trace_overhead", "20260101T000000Z")
    files = digest.data_files("trace_overhead", scratch)
    assert (
        files["reference/trace_overhead.csv"] == ROOT / "data" / "reference" / "trace_overhead.csv"
    )


def test_record_then_stale_round_trip(data, tmp_path, monkeypatch):
    nb_path = tmp_path / "ch.ipynb"
    nb = nbformat.v4.new_notebook()
    nbformat.write(nb, nb_path)
    fake = [chapters.Entry("trace_overhead", "perfbook.chapters.trace_overhead", str(nb_path))]
    monkeypatch.setattr(chapters, "CHAPTERS", fake)
    monkeypatch.setattr(chapters, "PAGES", [], raising=False)
    assert "no data digest" in freshness.stale(data_dir=data)[0][1]
    freshness.record(nb, "trace_overhead", freshness.data_digest("trace_overhead", data))
    nbformat.write(nb, nb_path)
    assert freshness.stale(data_dir=data) == []
    _dataset(data, "h-bbbbbbbbbbbb", "trace_overhead", "20260102T000000Z")
    assert "other data" in freshness.stale(data_dir=data)[0][1]


def test_the_book_renders_the_stored_outputs_not_an_execution_cache():
    """With execution off, the digest-checked stored outputs are exactly what renders."""
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert str(cfg["execute"]["execute_notebooks"]).lower() in ("off", "false"), (
        "_config.yml must keep execute_notebooks off: an execution cache could keep a render "
        "made from old data"
    )


def _all_pages():
    return list(chapters.CHAPTERS) + list(getattr(chapters, "PAGES", []))


@pytest.mark.parametrize("page", _all_pages(), ids=lambda c: c.name)
def test_stored_notebook_follows_the_data(page):
    nb = nbformat.read(page.path, as_version=4)
    want, n = freshness.data_digest(page.name)
    have = freshness.stored_digest(nb)
    assert have is not None, (
        f"{page.notebook} carries no data digest; run `make notebooks` "
        f"(or `python -m perfbook refresh --chapters {page.name}`) and commit the notebook"
    )
    assert have == want, (
        f"{page.notebook} is stale: its outputs were computed from other data than the {n} files "
        f"it reads in data/ now; run `make notebooks` (or `python -m perfbook refresh --chapters "
        f"{page.name}`) and commit the notebook"
    )


@pytest.mark.slow  # re-executes notebooks or a measure in child processes
def test_refresh_records_the_digest_of_the_data_it_read(tmp_path, monkeypatch, capsys):
    """`python -m perfbook refresh` stores the digest; the notebook then counts as fresh."""
    from perfbook.cli import main

    nb_path = tmp_path / "trace_overhead.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, nb_path)
    fake = [chapters.Entry("trace_overhead", "perfbook.chapters.trace_overhead", str(nb_path))]
    monkeypatch.setattr(chapters, "CHAPTERS", fake)
    monkeypatch.setattr(chapters, "PAGES", [], raising=False)
    assert main(["refresh", "--chapters", "trace_overhead"]) == 0
    done = nbformat.read(nb_path, as_version=4)
    assert done.cells[0].outputs[0]["text"] == "42\n"
    assert freshness.stored_digest(done) == freshness.data_digest("trace_overhead")[0]
    assert freshness.stale() == []
    assert main(["stale"]) == 0
    assert "every stored notebook follows the data" in capsys.readouterr().out


def test_a_notebook_is_re_executed_only_when_its_data_or_code_changed(data, monkeypatch):
    """`make notebooks` (refresh --changed): the stored digests decide, per notebook."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1")]
    assert freshness.changed(nb, "trace_overhead", data) == "its data changed"
    freshness.record(nb, "trace_overhead", freshness.data_digest("trace_overhead", data))
    assert freshness.changed(nb, "trace_overhead", data) == "no code digest stored yet"
    freshness.record(
        nb,
        "trace_overhead",
        freshness.data_digest("trace_overhead", data),
        freshness.code_digest("trace_overhead", nb),
    )
    assert freshness.changed(nb, "trace_overhead", data) is None
    nb.cells[0].source = "x = 2"  # its own cells
    assert "code" in freshness.changed(nb, "trace_overhead", data)
    nb.cells[0].source = "x = 1"
    assert freshness.changed(nb, "trace_overhead", data) is None
    _dataset(data, "h-bbbbbbbbbbbb", "trace_overhead", "20260102T000000Z")  # its data
    assert freshness.changed(nb, "trace_overhead", data) == "its data changed"


@pytest.mark.slow  # re-executes notebooks or a measure in child processes
def test_the_code_digest_follows_the_code_the_notebook_runs(tmp_path, monkeypatch):
    """A notebook's code digest covers its chapter's package and the perfbook modules that
    package imports (perfbook.core.codedigest): a shared module it uses changes it; another
    chapter, a dev tool or the CLI does not (issue #39: 18 of 212 commits had re-executed
    every notebook for an edit none of them runs)."""
    from perfbook.core import codedigest

    root = tmp_path / "repo"
    shutil.copytree(
        ROOT / "tools" / "perfbook",
        root / "tools" / "perfbook",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(ROOT / "tools" / "requirements.lock", root / "tools" / "requirements.lock")
    nbs = {
        n: nbformat.read(c.path, as_version=4)
        for c in [*chapters.CHAPTERS, *chapters.PAGES]
        for n in [c.name]
        if n in ("trace_overhead", "tsc_alignment", "summary")
    }
    monkeypatch.setenv("PERFBOOK_ROOT", str(root))
    monkeypatch.setattr(codedigest, "PACKAGE", root / "tools" / "perfbook")
    pkg = root / "tools" / "perfbook"

    def digests():
        codedigest._imports.cache_clear()
        return {n: freshness.code_digest(n, nb) for n, nb in nbs.items()}

    def edit(rel):
        p = pkg / rel
        p.write_text(p.read_text() + "\n# edited\n")

    base = digests()
    for rel in ("dev/bench.py", "dev/synthfleet.py", "cli.py", "chapters/example/analysis.py"):
        edit(rel)
    assert digests() == base, "a dev tool, the CLI or the example chapter made a notebook stale"
    edit("chapters/trace_overhead/analysis.py")
    now = digests()
    assert now["trace_overhead"] != base["trace_overhead"]  # its own package
    assert now["tsc_alignment"] == base["tsc_alignment"]  # another chapter's is not its code
    assert now["summary"] != base["summary"]  # a page reads every chapter
    edit("analysis/stats.py")
    assert all(digests()[n] != now[n] for n in now)  # a shared module every one of them runs
    (root / "tools" / "requirements.lock").write_text("numpy==0.0.0\n")
    assert all(d != now[n] for n, d in digests().items())  # the pinned environment


# -- make notebooks runs notebooks side by side --------------------------------------------------

CHILD = """
import os, sys, time
log, name, secs, rc = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
with open(log, "a") as f:
    f.write(f"start {name} {time.time():.3f} {os.getpid()}\\n")
print(f"[refresh] {name}: re-executing", flush=True)
time.sleep(secs)
with open(log, "a") as f:
    f.write(f"end {name} {time.time():.3f} {os.getpid()}\\n")
print(f"[refresh] {name}: re-executed in explain mode in 0 s", flush=True)
sys.exit(rc)
"""


def _parallel(monkeypatch, tmp_path, secs=0.4, failing=(), pages=("summary",)):
    """_refresh_in_parallel over four chapters and the given pages, each a stand-in process
    that logs when it starts and ends; returns (the chapters and pages, the log)."""
    import perfbook.book.refresh as M

    log = tmp_path / "log"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    entries = [chapters.Entry(n, "x", f"{n}.ipynb") for n in ("a", "b", "c", "d", *pages)]
    monkeypatch.setattr(M, "PAGES", [e for e in entries if e.name in pages])
    monkeypatch.setattr(
        M,
        "_refresh_child",
        lambda ch: [
            sys.executable,
            str(script),
            str(log),
            ch.name,
            str(secs),
            str(dict(failing).get(ch.name, 0)),
        ],
    )
    return M, entries, log


def _events(log):
    return [
        (kind, name, float(t), int(pid))
        for kind, name, t, pid in (line.split() for line in log.read_text().splitlines())
    ]


def test_notebooks_run_side_by_side_and_the_pages_after_the_chapters(monkeypatch, tmp_path, capsys):
    M, entries, log = _parallel(monkeypatch, tmp_path)
    assert M._refresh_in_parallel(entries, 2) == 0
    ev = _events(log)
    running, most = 0, 0
    for kind, *_ in sorted(ev, key=lambda e: e[2]):
        running += 1 if kind == "start" else -1
        most = max(most, running)
    assert most == 2, f"want two at a time, at most: {ev}"
    page_start = next(t for k, n, t, _ in ev if k == "start" and n == "summary")
    assert all(t <= page_start for k, n, t, _ in ev if k == "end" and n != "summary")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "[refresh] 5 notebooks, 2 at a time"
    for e in entries:  # every line of every child, whole
        assert f"[refresh] {e.name}: re-executing" in out
        assert f"[refresh] {e.name}: re-executed in explain mode in 0 s" in out


def test_a_failing_notebook_fails_the_refresh_and_the_others_still_run(monkeypatch, tmp_path):
    M, entries, log = _parallel(monkeypatch, tmp_path, secs=0.05, failing={"b": 1})
    assert M._refresh_in_parallel(entries, 2) == 1
    assert sorted(n for k, n, *_ in _events(log) if k == "end") == ["a", "b", "c", "d", "summary"]


def test_the_biggest_stored_notebooks_start_first(monkeypatch, tmp_path):
    """Within a phase the chapters start by stored size, biggest first (less idle CPU at the
    end of the phase); the pages still come after every chapter."""
    M, entries, log = _parallel(monkeypatch, tmp_path, secs=0.05)
    sizes = {"a": 10, "b": 300, "c": 20, "d": 300}
    for e in entries:
        p = tmp_path / f"{e.name}.ipynb"
        p.write_bytes(b"x" * sizes.get(e.name, 1))
    entries = [chapters.Entry(e.name, "x", str(tmp_path / f"{e.name}.ipynb")) for e in entries]
    monkeypatch.setattr(M, "PAGES", [e for e in entries if e.name == "summary"])
    assert M._refresh_in_parallel(entries, 1) == 0
    assert [n for k, n, *_ in _events(log) if k == "start"] == ["b", "d", "c", "a", "summary"]


def test_an_interrupted_parallel_refresh_leaves_no_child(monkeypatch, tmp_path):
    import signal
    import threading

    from perfbook.core.proc import pid_alive

    M, entries, log = _parallel(monkeypatch, tmp_path, secs=120)
    threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        M._refresh_in_parallel(entries, 2)
    started = [pid for k, _, _, pid in _events(log) if k == "start"]
    assert len(started) == 2 and not any(pid_alive(p) for p in started)


@pytest.mark.slow  # re-executes notebooks or a measure in child processes
def test_a_notebook_that_meets_a_cut_table_fails_in_one_line_and_keeps_its_stored_version(
    tmp_path, monkeypatch, capsys
):
    """A refresh reads no table before its notebooks: the notebook reading a cut table fails
    with the one line that names it, and the stored notebook stays as it was."""
    from perfbook.cli import main
    from perfbook.data.dataset import list_runs, table_path

    src = list_runs("trace_overhead")[0]
    run = tmp_path / "data" / "runs" / src.parent.parent.name / "trace_overhead" / src.name
    shutil.copytree(src, run)
    cut = table_path(run, "samples")
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    nb_path = tmp_path / "trace_overhead.ipynb"
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "from perfbook.book import notebook as nb\n"
                "from perfbook.chapters import trace_overhead as T\n"
                f"D = nb.start(T.chapter, {str(tmp_path / 'data')!r})\n"
                "D['samples']"
            )
        ]
    )
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, nb_path)
    before = nb_path.read_bytes()
    monkeypatch.setattr(
        chapters,
        "CHAPTERS",
        [chapters.Entry("trace_overhead", "perfbook.chapters.trace_overhead", str(nb_path))],
    )
    monkeypatch.setattr(chapters, "PAGES", [], raising=False)
    assert main(["refresh", "--chapters", "trace_overhead"]) == 1
    failed = [ln for ln in capsys.readouterr().out.splitlines() if "FAILED" in ln]
    assert len(failed) == 1 and str(cut) in failed[0] and "malformed CSV" in failed[0], failed
    assert nb_path.read_bytes() == before
