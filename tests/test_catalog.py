"""The catalog of manifests (tools/catalog.py): the same Manifests as the files give, whatever
happens to the datasets or to the catalog itself; never followed through a symlink."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from conftest import ROOT, fake_manifest
from tools import catalog, dataset, hosts, synthfleet
from tools.__main__ import main as tools_main
from tools.errors import DatasetError, PerfbookError
from tools.statedir import UnsafePath


@pytest.fixture(autouse=True)
def own_build(tmp_path, monkeypatch):
    """Every test keeps its catalogs in its own build directory, and starts as a new process."""
    monkeypatch.setenv("PERFBOOK_BUILD", str(tmp_path / "build"))
    monkeypatch.delenv("PERFBOOK_CATALOG", raising=False)
    monkeypatch.setattr(catalog, "RACY_S", 0.0)   # files made now are not "racy" (one test says)
    fresh()
    yield
    fresh()


def fresh():
    """What a new process has: no manifest cached, no catalog held."""
    dataset._manifest_cache.clear()
    catalog._open.clear()


def chapters_of(data: Path) -> list[str]:
    return sorted({p.name for p in (data / "runs").glob("*/*") if p.is_dir()})


def everything(data: Path | None, monkeypatch, mode: str):
    """Every chapter's runs and manifests, as a new process reads them (catalog on or off)."""
    monkeypatch.setenv("PERFBOOK_CATALOG", mode)
    fresh()
    out = {ch: (dataset.list_runs(ch, data), dataset.load_manifests(ch, data))
           for ch in chapters_of(data or ROOT / "data")}
    out["_all"] = hosts.all_manifests(data)
    return out


def same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert json.dumps(a[k], default=str) == json.dumps(b[k], default=str), k  # order included
    for ch, (runs, mans) in ((k, v) for k, v in a.items() if k != "_all"):
        assert [m.path for m in mans] == runs == b[ch][0]
        assert [type(m) for m in mans] == [dataset.Manifest] * len(mans)


def make(data: Path, host: str, run: str, chapter: str = "demo", **fields) -> Path:
    d = data / "runs" / host / chapter / run
    d.mkdir(parents=True)
    (d / dataset.MANIFEST).write_text(json.dumps(fake_manifest(host, run, chapter, **fields)))
    return d


def old(path: Path, seconds: float = 60) -> None:
    """Age a file past the catalog's racy window (as if it was written a minute ago)."""
    t = time.time() - seconds
    os.utime(path, (t, t))


def on_disk(data: Path | None) -> dict:
    """The catalog file's entries, read afresh."""
    cat = catalog._read(catalog.catalog_path(data), dataset.runs_dir(data).resolve())
    assert cat is not None and cat.problem is None
    return cat.entries()


# -- the same results -----------------------------------------------------------------------

def test_committed_data_reads_the_same_with_and_without_the_catalog(monkeypatch):
    without = everything(None, monkeypatch, "off")
    assert not catalog.catalog_path().exists()
    first = everything(None, monkeypatch, "on")      # builds it
    assert catalog.catalog_path().is_file()
    second = everything(None, monkeypatch, "on")     # reads it
    same(without, first)
    same(without, second)
    n = sum(len(v[1]) for k, v in without.items() if k != "_all")
    assert len(on_disk(None)) == n > 0


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    dest = tmp_path_factory.mktemp("catalog-fleet") / "data"
    synthfleet.generate(3, dest, seed=11, say=lambda *_: None)
    return dest


def test_a_synthetic_fleet_reads_the_same_with_and_without_the_catalog(fleet, monkeypatch):
    without = everything(fleet, monkeypatch, "off")
    same(without, everything(fleet, monkeypatch, "on"))
    same(without, everything(fleet, monkeypatch, "on"))
    path = catalog.catalog_path(fleet)
    assert path.parent == Path(os.environ["PERFBOOK_BUILD"]) / "catalog" and path.name != "data.json"
    entries = on_disk(fleet)
    assert len(entries) == len(list((fleet / "runs").glob("*/*/*/manifest.json")))
    e = next(iter(entries.values()))
    assert {"host_id", "chapter", "run_id", "profile", "tables", "stat", "sha256", "manifest"} <= set(e)
    man = dataset.load_manifest(fleet / "runs" / next(iter(entries)))
    assert e["tables"] == man["tables"] and e["profile"] == man.profile and e["host_id"] == man.host_id


def test_manifests_from_the_catalog_are_not_shared(tmp_path, monkeypatch):
    data = tmp_path / "data"
    for run in ("20260101T000000Z", "20260102T000000Z"):
        old(make(data, "h-aaa", run) / dataset.MANIFEST)
    dataset.load_manifests("demo", data)
    fresh()
    a, b = dataset.load_manifests("demo", data)
    assert a["host"] == b["host"] and a["host"] is not b["host"]
    a["host"]["cpu_model"] = "changed by a caller"
    fresh()
    assert [m["host"].get("cpu_model") for m in dataset.load_manifests("demo", data)] == [None, None]


# -- it follows the datasets ----------------------------------------------------------------

def test_added_changed_and_removed_datasets_are_followed(tmp_path):
    data = tmp_path / "data"
    a = make(data, "h-aaa", "20260101T000000Z", profile_note="a")
    old(a / dataset.MANIFEST)
    assert [m.run_id for m in dataset.load_manifests("demo", data)] == ["20260101T000000Z"]
    assert list(on_disk(data)) == ["h-aaa/demo/20260101T000000Z"]

    fresh()                                             # added
    b = make(data, "h-bbb", "20260102T000000Z")
    assert [m.host_id for m in dataset.load_manifests("demo", data)] == ["h-aaa", "h-bbb"]
    assert sorted(on_disk(data)) == ["h-aaa/demo/20260101T000000Z", "h-bbb/demo/20260102T000000Z"]

    fresh()                                             # changed: same size, mtime put back
    mf = a / dataset.MANIFEST
    st = mf.stat()
    text = mf.read_text()
    mf.write_text(text.replace('"profile_note": "a"', '"profile_note": "b"'))
    os.utime(mf, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert mf.stat().st_size == st.st_size
    assert dataset.load_manifests("demo", data)[0].facts["profile_note"] == "b"
    assert on_disk(data)["h-aaa/demo/20260101T000000Z"]["manifest"]["profile_note"] == "b"

    fresh()                                             # removed
    import shutil
    shutil.rmtree(b.parent.parent)
    assert [m.host_id for m in dataset.load_manifests("demo", data)] == ["h-aaa"]
    assert list(on_disk(data)) == ["h-aaa/demo/20260101T000000Z"]


def test_a_change_right_after_it_was_catalogued_is_not_missed(tmp_path, monkeypatch):
    """Within the file system's timestamp granularity an edit may keep mtime and size: a
    manifest that new is recorded without a stat, so it is hashed again next time."""
    monkeypatch.setattr(catalog, "RACY_S", 2.0)
    data = tmp_path / "data"
    run = make(data, "h-aaa", "20260101T000000Z", note_x="1")
    assert dataset.load_manifests("demo", data)[0].facts["note_x"] == "1"
    assert on_disk(data)["h-aaa/demo/20260101T000000Z"]["stat"] is None
    mf = run / dataset.MANIFEST
    st = mf.stat()
    mf.write_text(mf.read_text().replace('"note_x": "1"', '"note_x": "2"'))
    os.utime(mf, ns=(st.st_atime_ns, st.st_mtime_ns))
    fresh()
    assert dataset.load_manifests("demo", data)[0].facts["note_x"] == "2"


def test_a_copied_checkout_keeps_its_entries_by_digest(tmp_path):
    """A new inode (a copy, a checkout) with the same bytes: the entry is kept, not re-parsed."""
    data = tmp_path / "data"
    run = make(data, "h-aaa", "20260101T000000Z")
    mf = run / dataset.MANIFEST
    old(mf)
    dataset.load_manifests("demo", data)
    before = on_disk(data)["h-aaa/demo/20260101T000000Z"]
    fresh()
    mf.write_bytes(mf.read_bytes())    # same bytes, new ctime
    old(mf)
    cat = catalog.for_runs(data)
    raw = cat.by_digest("h-aaa/demo/20260101T000000Z", catalog.sha256(mf.read_bytes()), mf.stat())
    assert raw is not None and raw["run_id"] == "20260101T000000Z"
    cat.save()
    after = on_disk(data)["h-aaa/demo/20260101T000000Z"]
    assert after["sha256"] == before["sha256"] and after["stat"] == catalog.file_stat(mf.stat()) != before["stat"]


def test_a_bad_manifest_is_the_same_one_line_with_the_catalog(tmp_path, monkeypatch):
    data = tmp_path / "data"
    run = make(data, "h-aaa", "20260101T000000Z")
    old(run / dataset.MANIFEST)
    dataset.load_manifests("demo", data)               # catalogued while it was sound
    (run / dataset.MANIFEST).write_text("{not json")
    msgs = []
    for mode in ("on", "off", "on"):
        monkeypatch.setenv("PERFBOOK_CATALOG", mode)
        fresh()
        with pytest.raises(DatasetError) as e:
            dataset.load_manifests("demo", data)
        msgs.append(str(e.value))
    assert len(set(msgs)) == 1 and "manifest.json: not valid JSON" in msgs[0]
    assert len(msgs[0].splitlines()) == 1


def test_a_symlinked_manifest_is_refused_in_one_line(tmp_path):
    data = tmp_path / "data"
    run = make(data, "h-aaa", "20260101T000000Z")
    real = tmp_path / "elsewhere.json"
    (run / dataset.MANIFEST).rename(real)
    (run / dataset.MANIFEST).symlink_to(real)
    with pytest.raises(DatasetError, match="manifest.json: a symlink"):
        dataset.load_manifests("demo", data)


def test_another_process_writing_meanwhile_is_merged(tmp_path):
    data = tmp_path / "data"
    for ch in ("one", "two"):
        old(make(data, "h-aaa", "20260101T000000Z", chapter=ch) / dataset.MANIFEST)
    dataset.load_manifests("one", data)
    mine = catalog._open.pop(str(dataset.runs_dir(data).resolve()))   # this process's catalog
    dataset.load_manifests("two", data)                               # "another process"
    mine.changes.setdefault("one", {})["h-aaa/one/20260101T000000Z"] = \
        on_disk(data)["h-aaa/one/20260101T000000Z"]
    assert mine.save()
    assert sorted(on_disk(data)) == ["h-aaa/one/20260101T000000Z", "h-aaa/two/20260101T000000Z"]


# -- the catalog itself ---------------------------------------------------------------------

@pytest.mark.parametrize("damage", ["garbage", "truncated", "section", "version", "other-dir"])
def test_a_corrupt_catalog_is_rebuilt(tmp_path, monkeypatch, capsys, damage):
    data = tmp_path / "data"
    for host in ("h-aaa", "h-bbb"):
        old(make(data, host, "20260101T000000Z") / dataset.MANIFEST)
    monkeypatch.setenv("PERFBOOK_CATALOG", "off")
    want = json.dumps(dataset.load_manifests("demo", data))
    monkeypatch.setenv("PERFBOOK_CATALOG", "on")
    fresh()
    dataset.load_manifests("demo", data)
    path = catalog.catalog_path(data)
    raw = path.read_bytes()
    head, body = raw.split(b"\n", 1)
    h = json.loads(head)
    if damage == "garbage":
        path.write_bytes(b"\x00\xffnot a catalog")
    elif damage == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "section":   # a value in the demo section edited: its checksum fails
        edited = raw.replace(b'"finished":"2026-01-01T00:01:00+00:00"', b'"finished":"2026-01-01T00:01:09+00:00"')
        assert edited != raw and len(edited) == len(raw)
        path.write_bytes(edited)
    elif damage == "version":
        h["version"] = 99
        path.write_bytes(json.dumps(h).encode() + b"\n" + body)
    else:
        h["runs"] = "/elsewhere/runs"
        path.write_bytes(json.dumps(h).encode() + b"\n" + body)
    fresh()
    assert json.dumps(dataset.load_manifests("demo", data)) == want   # silently, the same
    assert len(on_disk(data)) == 2                                     # and written again, sound
    fresh()
    path.write_bytes(b"{broken")
    assert tools_main(["catalog", "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"[catalog] {path}: its header is not JSON; rebuilt"
    assert "2 datasets of 2 hosts in 1 chapters" in out[1] and "2 added" in out[1]
    assert len(on_disk(data)) == 2


def test_a_symlinked_catalog_is_refused_and_never_followed(tmp_path, monkeypatch, capsys):
    data = tmp_path / "data"
    old(make(data, "h-aaa", "20260101T000000Z") / dataset.MANIFEST)
    path = catalog.catalog_path(data)
    path.parent.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    path.symlink_to(victim)
    with pytest.raises(UnsafePath, match="is a symlink; perfbook refuses to follow it") as e:
        dataset.load_manifests("demo", data)
    assert str(path) in str(e.value) and len(str(e.value).splitlines()) == 1
    assert tools_main(["catalog", "--data-dir", str(data)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path} is a symlink")
    assert victim.read_text() == "precious\n" and path.is_symlink()


def test_a_symlinked_catalog_directory_is_refused(tmp_path):
    data = tmp_path / "data"
    old(make(data, "h-aaa", "20260101T000000Z") / dataset.MANIFEST)
    path = catalog.catalog_path(data)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path.parent.parent.mkdir(parents=True)
    path.parent.symlink_to(elsewhere)
    with pytest.raises(UnsafePath, match="is a symlink"):
        dataset.load_manifests("demo", data)
    assert list(elsewhere.iterdir()) == []


def test_another_users_catalog_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("making a file of another user needs root")
    data = tmp_path / "data"
    old(make(data, "h-aaa", "20260101T000000Z") / dataset.MANIFEST)
    dataset.load_manifests("demo", data)
    path = catalog.catalog_path(data)
    os.chown(path, 65534, 65534)
    fresh()
    with pytest.raises(UnsafePath, match="belongs to uid 65534, neither us, root nor the owner of"):
        dataset.load_manifests("demo", data)
    os.chown(data / "runs", 65534, 65534)       # the data's owner (a user's checkout under sudo)
    fresh()
    assert dataset.load_manifests("demo", data)[0].run_id == "20260101T000000Z"


def test_no_writable_build_directory_means_no_catalog_and_the_same_results(tmp_path, monkeypatch):
    data = tmp_path / "data"
    old(make(data, "h-aaa", "20260101T000000Z") / dataset.MANIFEST)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("PERFBOOK_BUILD", str(blocker / "build"))   # cannot be created
    assert dataset.load_manifests("demo", data)[0].run_id == "20260101T000000Z"
    assert dataset.load_manifests("demo", data)[0].run_id == "20260101T000000Z"


def test_the_command_prints_what_it_holds_and_follows_changes(tmp_path, capsys):
    data = tmp_path / "data"
    old(make(data, "h-aaa", "20260101T000000Z", tables={"samples": 5}) / dataset.MANIFEST)
    old(make(data, "h-bbb", "20260102T000000Z", chapter="other") / dataset.MANIFEST)
    assert tools_main(["catalog", "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "2 datasets of 2 hosts in 2 chapters" in out[0] and "2 added, 0 changed, 0 removed" in out[0]
    assert any(ln.split()[:3] == ["demo", "1", "datasets,"] and "samples 5" in ln for ln in out[1:])
    import shutil
    shutil.rmtree(data / "runs" / "h-bbb")
    fresh()
    assert tools_main(["catalog", "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "1 datasets of 1 hosts in 1 chapters" in out[0] and "0 added, 0 changed, 1 removed" in out[0]
    assert list(on_disk(data)) == ["h-aaa/demo/20260101T000000Z"]
    hosts_kept = json.loads(catalog.catalog_path(data).read_bytes().split(b"\n")[1])
    assert len(hosts_kept) == 1                       # the gone host's block was pruned


def test_catalogs_of_vanished_data_directories_are_pruned(tmp_path):
    gone = tmp_path / "gone"
    old(make(gone, "h-aaa", "20260101T000000Z") / dataset.MANIFEST)
    dataset.load_manifests("demo", gone)
    stale = catalog.catalog_path(gone)
    assert stale.is_file()
    import shutil
    shutil.rmtree(gone)
    data = tmp_path / "data"
    old(make(data, "h-aaa", "20260101T000000Z") / dataset.MANIFEST)
    dataset.load_manifests("demo", data)
    assert catalog.catalog_path(data).is_file() and not stale.exists()


def test_the_book_data_gets_the_plain_name():
    assert catalog.catalog_path().name == "data.json"
    assert catalog.catalog_path(ROOT / "data").name == "data.json"
    assert catalog.catalog_path("/somewhere/else").name.startswith("data-")


def test_errors_are_perfbook_errors():
    assert issubclass(UnsafePath, PerfbookError)


# -- tables: a Data and its one-dataset views read each table file once ----------------------

def test_views_cut_the_same_rows_and_read_each_file_once(monkeypatch):
    """A one-dataset view (tools.findings.Run.data) gets exactly the rows, columns and dtypes
    a row filter of the whole table gives, and a chapter's views read no file again."""
    import pandas as pd
    from tools.chapters import CHAPTERS
    reads = []
    real = dataset.read_table
    monkeypatch.setattr(dataset, "read_table", lambda run, table, *a, **k: reads.append((str(run), table))
                        or real(run, table, *a, **k))
    dataset._table_cache.clear()
    checked = 0
    for ch in CHAPTERS:
        mod = ch.load()
        D = dataset.Data(mod)
        if len(D) < 2:
            continue
        for table in sorted({t for m in D.manifests for t in m["tables"]}):
            full = dataset.load_table(mod.name, table, None, mod.tables.get(table))
            for m in D.manifests:
                view = dataset.Data(mod, manifests=[m])[table]
                keep = (full["host_id"] == m.host_id) & (full["run_id"] == m["run_id"])
                pd.testing.assert_frame_equal(view, full[keep].reset_index(drop=True))
                checked += 1
    assert checked > 20
    assert len(reads) == len(set(reads))        # every table file read once


def test_a_changed_table_file_is_read_again(tmp_path):
    import pandas as pd
    from tools.chapter import Table
    data = tmp_path / "data"
    run = make(data, "h-aaa", "20260101T000000Z", tables={"t": 2})
    pd.DataFrame({"x": [1, 2]}).to_csv(run / "t.csv", index=False)
    schema = Table(x="int")
    assert dataset.load_table("demo", "t", data, schema)["x"].tolist() == [1, 2]
    pd.DataFrame({"x": [3, 4]}).to_csv(run / "t.csv", index=False)
    assert dataset.load_table("demo", "t", data, schema)["x"].tolist() == [3, 4]
    got = dataset.load_table("demo", "t", data, schema)
    got.loc[0, "x"] = 99                          # a caller's change stays its own
    assert dataset.load_table("demo", "t", data, schema)["x"].tolist() == [3, 4]
