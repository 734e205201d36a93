"""A contributed dataset can neither publish a file the builder can read nor exhaust it (#43).

Two attacks worked: a symlink in a dataset (or a symlinked host, chapter or run directory)
passed validation and the contributions check, and `make book` wrote its *target* into the
site's archive; and a 28 KB .csv.xz that expands to 10 million rows (or a 2 GB sparse CSV)
was read to the end before anything was refused. Only regular files are read, listed,
digested or published, never through a link, and a table is read within limits that stop
the reading as soon as one is crossed.
"""

from __future__ import annotations

import json
import lzma
import shutil
import subprocess
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT, fake_manifest
from perfbook.analysis.repetition import repetition_overview
from perfbook.book import freshness, validation
from perfbook.book import sphinx_site as S
from perfbook.core.errors import DatasetError
from perfbook.data import dataset
from perfbook.data.dataset import table_path

SECRET = "root:$y$j9T$not-for-the-web:19000:0:99999:7:::\n"


@pytest.fixture
def secret(tmp_path):
    """A file the builder can read and nobody should publish (/etc/shadow, on a root build)."""
    p = tmp_path / "outside" / "shadow"
    p.parent.mkdir()
    p.write_text(SECRET)
    return p


def _one_line(e) -> str:
    text = str(e.value)
    assert "\n" not in text, text
    return text


def _copy_committed(data: Path, chapter: str = "trace_overhead") -> Path:
    """A scratch data dir holding the newest committed dataset of `chapter`; its run dir."""
    src = dataset.list_runs(chapter)[-1]
    run = data / "runs" / src.parent.parent.name / chapter / src.name
    shutil.copytree(src, run)
    return run


@pytest.fixture
def data(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFBOOK_BUILD", str(tmp_path / "build"))
    monkeypatch.setenv("PERFBOOK_VERDICT_STORE", "off")
    d = tmp_path / "data"
    (d / "runs").mkdir(parents=True)
    return d


# ---- symlinks: never followed, one line naming the link ------------------------------------


def test_a_symlinked_file_in_a_dataset_fails_validation(data, secret):
    run = _copy_committed(data)
    assert validation.validate_all(data, names={"trace_overhead"}) == 1
    (run / "notes.txt").symlink_to(secret)
    with pytest.raises(DatasetError) as e:
        validation.validate_all(data, names={"trace_overhead"})
    assert _one_line(e).startswith(f"{run / 'notes.txt'}: a symlink")


def test_a_symlinked_table_is_never_read(data, tmp_path):
    run = _copy_committed(data)
    p = table_path(run, "samples")
    elsewhere = tmp_path / "outside.csv.xz"
    p.rename(elsewhere)  # the same bytes, reached through a link
    p.symlink_to(elsewhere)
    with pytest.raises(DatasetError) as e:
        dataset.read_table(run, "samples")
    assert _one_line(e).startswith(f"{p}: a symlink")
    with pytest.raises(DatasetError, match="a symlink"):
        validation.validate_all(data, names={"trace_overhead"})


@pytest.mark.parametrize("level", ["host", "chapter", "run"])
def test_a_symlinked_directory_of_the_datasets_is_refused(data, tmp_path, level):
    run = _copy_committed(data)
    link = {"host": run.parent.parent, "chapter": run.parent, "run": run}[level]
    moved = tmp_path / "elsewhere" / link.name
    moved.parent.mkdir()
    link.rename(moved)
    link.symlink_to(moved)
    with pytest.raises(DatasetError) as e:
        dataset.list_runs("trace_overhead", data)
    assert _one_line(e).startswith(f"{link}: a symlink")
    real = moved / run.relative_to(link)
    with pytest.raises(DatasetError, match="a symlink"):  # a path through the link, given directly
        dataset.read_table(run, "samples", json.loads((real / "manifest.json").read_text()))


def test_the_site_never_publishes_a_linked_file(tmp_path, secret):
    """As root, a dataset holding `notes.txt -> /etc/shadow` put /etc/shadow in the site."""
    d = tmp_path / "data"
    run = d / "runs" / "h-aaaaaaaaaaaa" / "demo" / "20260101T000000Z"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps(fake_manifest("h-aaaaaaaaaaaa", run.name)))
    (run / "samples.csv").write_text("x\n1\n")
    (run / "notes.txt").symlink_to(secret)
    with pytest.raises(DatasetError) as e:
        S.publish(tmp_path / "site", S.site_archives(d))
    assert _one_line(e).startswith(f"{run / 'notes.txt'}: a symlink")
    (run / "notes.txt").unlink()
    (d / "reference").mkdir()
    (d / "reference" / "demo.csv").symlink_to(secret)
    with pytest.raises(DatasetError) as e:
        S.publish(tmp_path / "site", S.site_archives(d))
    assert _one_line(e).startswith(f"{d / 'reference' / 'demo.csv'}: a symlink")
    published = [
        z.read(n)
        for f in (tmp_path / "site").rglob("*.zip")
        for z in [zipfile.ZipFile(f)]
        for n in z.namelist()
    ]
    assert not any(SECRET.encode() in b for b in published)


def test_an_archive_is_written_from_regular_files_only(tmp_path, secret):
    """write_archive itself refuses a member that became a link after it was listed."""
    run = tmp_path / "runs" / "h-aaaaaaaaaaaa" / "demo" / "20260101T000000Z"
    run.mkdir(parents=True)
    (run / "manifest.json").symlink_to(secret)
    with pytest.raises(DatasetError, match="a symlink"):
        S.write_archive(
            tmp_path / "a.zip",
            [(run / "manifest.json", "runs/h-aaaaaaaaaaaa/demo/20260101T000000Z/manifest.json")],
        )
    assert not (tmp_path / "a.zip").exists()


def test_the_data_digest_never_reads_through_a_link(tmp_path, secret):
    d = tmp_path / "data"
    run = d / "runs" / "h-aaaaaaaaaaaa" / "trace_overhead" / "20260101T000000Z"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text("{}")
    (run / "t.csv").symlink_to(secret)
    with pytest.raises(DatasetError) as e:
        freshness.data_digest("trace_overhead", d)
    assert _one_line(e).startswith(f"{run / 't.csv'}: a symlink")


def test_the_repetition_overview_reads_no_link(data, tmp_path):
    run = _copy_committed(data)
    p = table_path(run, "repetition")
    assert p is not None
    p.rename(tmp_path / "rep.csv.xz")
    p.symlink_to(tmp_path / "rep.csv.xz")
    with pytest.raises(DatasetError, match="a symlink"):
        repetition_overview("trace_overhead", data)


def test_a_symlinked_reference_table_is_refused(tmp_path, secret):
    (tmp_path / "reference").mkdir()
    (tmp_path / "reference" / "trace_overhead.csv").symlink_to(secret)
    with pytest.raises(DatasetError) as e:
        dataset.load_reference("trace_overhead", tmp_path)
    assert _one_line(e).startswith(f"{tmp_path / 'reference' / 'trace_overhead.csv'}: a symlink")


def test_the_sweep_never_removes_through_a_linked_host_directory(tmp_path):
    """The sweep removes a killed run's .tmp-<pid>-* dataset; through a linked host directory
    it removed someone else's directory of that name."""
    from perfbook.hoststate import sweep

    dead = subprocess.Popen(["true"])
    dead.wait()
    theirs = tmp_path / "theirs" / "h-aaaaaaaaaaaa"
    victim = theirs / "demo" / f".tmp-{dead.pid}-keep"
    victim.mkdir(parents=True)
    (tmp_path / "data" / "runs").mkdir(parents=True)
    (tmp_path / "data" / "runs" / "h-aaaaaaaaaaaa").symlink_to(theirs)
    assert sweep._dataset_tmp(tmp_path / "data") == []  # a linked directory is passed over
    assert victim.is_dir()


# ---- limits, checked while a table streams in -----------------------------------------------


class _Spy:
    """Records the capped readers read_table opens: how far each got before it stopped."""

    def __init__(self, monkeypatch):
        self.seen = []
        real = dataset._Capped
        spy = self

        class Capped(real):
            def __init__(self, *a, **k):
                super().__init__(*a, **k)
                spy.seen.append(self)

        monkeypatch.setattr(dataset, "_Capped", Capped)


def _bomb(path: Path, rows: int) -> int:
    """A .csv.xz of `rows` rows of 27 bytes made of one small xz stream repeated (concatenated
    streams are one valid .xz file); returns the bytes it expands to."""
    header = b"a,b,c\n"
    per = 100_000
    block = lzma.compress(b"1.000000,2.000000,3.000000\n" * per)
    with open(path, "wb") as f:
        f.write(lzma.compress(header))
        for _ in range(rows // per):
            f.write(block)
    return len(header) + 27 * rows


def _with_table(run: Path, table: str, rows: int) -> None:
    """List `table` with `rows` rows in the run's manifest (what a bomb's author writes)."""
    m = json.loads((run / "manifest.json").read_text())
    m["tables"][table] = rows
    (run / "manifest.json").write_text(json.dumps(m))


def test_a_compression_bomb_is_refused_as_soon_as_it_crosses_a_limit(data, monkeypatch):
    """A 28 KB .csv.xz expanding to 10 million rows passed; this one (53 KB, 270 MB of text)
    is refused at the line limit, after a fifth of it is decompressed (~0.4 s of CPU here)."""
    run = _copy_committed(data)
    p = table_path(run, "samples")
    p.unlink()
    full = _bomb(p, 10_000_000)
    assert p.stat().st_size < 64 * 1024 and full > 250_000_000
    _with_table(run, "samples", 10_000_000)
    spy = _Spy(monkeypatch)
    with pytest.raises(DatasetError) as e:
        dataset.read_table(run, "samples")
    text = _one_line(e)
    assert text.startswith(f"{p}: ") and f"{dataset.MAX_TABLE_LINES:,} lines" in text
    (got,) = spy.seen
    assert got.lines <= dataset.MAX_TABLE_LINES + got.CHUNK and got.bytes < full / 4
    with pytest.raises(DatasetError, match="lines"):
        validation.validate_all(data, names={"trace_overhead"})


def test_a_bomb_of_long_lines_stops_at_the_byte_limit(data, monkeypatch):
    """Few newlines, many bytes: the byte limit stops it (a lower one here, to keep it fast)."""
    monkeypatch.setattr(dataset, "MAX_FILE_BYTES", 8 << 20)
    run = _copy_committed(data)
    p = table_path(run, "samples")
    p.unlink()
    block = lzma.compress(b"9" * (1 << 20))
    p.write_bytes(lzma.compress(b"a\n") + block * 64 + lzma.compress(b"\n"))  # 64 MiB, one line
    spy = _Spy(monkeypatch)
    with pytest.raises(DatasetError) as e:
        dataset.read_table(run, "samples")
    assert _one_line(e).startswith(f"{p}: ") and "8 MiB of CSV text" in str(e.value)
    (got,) = spy.seen
    assert got.bytes <= (8 << 20) + got.CHUNK


def _rchar() -> int:
    """Bytes this process has read so far (read(2) and friends, /proc/self/io)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_a_huge_sparse_csv_is_refused_before_it_is_read(data):
    """A 2 GB sparse CSV was refused only after 50 s of reading it."""
    run = _copy_committed(data)
    p = table_path(run, "samples")
    p.unlink()
    p = p.with_name("samples.csv")
    with open(p, "wb") as f:
        f.write(b"a,b\n")
        f.truncate(2 << 30)
    before = _rchar()
    with pytest.raises(DatasetError) as e:
        dataset.read_table(run, "samples")
    assert _rchar() - before < (1 << 20), "the file was read before it was refused"
    text = _one_line(e)
    assert text.startswith(f"{p}: ") and f"{dataset.MAX_FILE_BYTES >> 20} MiB" in text


def test_the_committed_tables_are_far_inside_the_limits():
    """The limits leave the real data (and a full profile's) its headroom: every committed
    table reads with ten times less room than it has."""
    biggest = (0, 0)
    for p in sorted((ROOT / "data" / "runs").glob("*/*/*/*.csv*")) + sorted(
        (ROOT / "data" / "reference").glob("*.csv")
    ):
        text = lzma.decompress(p.read_bytes()) if p.suffix == ".xz" else p.read_bytes()
        biggest = max(biggest[0], len(text)), max(biggest[1], text.count(b"\n"))
    assert 10 * biggest[0] < dataset.MAX_FILE_BYTES and 10 * biggest[1] < dataset.MAX_TABLE_LINES
    assert len(pd.read_csv(ROOT / "data" / "reference" / "trace_overhead.csv")) == len(
        dataset.load_reference("trace_overhead")
    )
