"""Measuring a fleet: ansible/measure.yml against localhost, and perfbook.book.fleet's import.

The playbook test runs the real playbook with `-i localhost, -c local`: the
committed HEAD travels as a git bundle into a scratch checkout, one cheap
chapter is measured there with the quick profile, and the host's datasets come
back into a scratch copy of data/runs. The real data/ must not change, and a
second run must add a second dataset without touching the first.
"""

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from conftest import ROOT, fake_manifest, need_root
from perfbook.book import fleet
from perfbook.core.errors import DatasetError
from perfbook.data import hostinfo
from perfbook.data.dataset import table_path
from perfbook.data.digest import dir_digest, file_sha256

PLAYBOOK = ROOT / "ansible" / "measure.yml"
# cheapest first: each takes seconds with the quick profile where it can run at all
CHEAP = ("tsc_alignment", "trace_overhead", "qcow2_overlap")


# --- perfbook.book.fleet: adopting an archive ------------------------------------------------

CHECKS = "round,mechanism,expected_hits,observed_hits\n"  # trace_overhead's checks table


def _run(
    top: Path,
    host="h-aaaaaaaaaaaa",
    chapter="trace_overhead",
    run="20260101T000000Z",
    rows="1",
    manifest=None,
) -> Path:
    """A small dataset whose table matches the chapter's schema; `rows` marks its content."""
    d = top / host / chapter / run
    d.mkdir(parents=True)
    (d / "checks.csv").write_text(f"{CHECKS}0,marker,{rows},{rows}\n")
    m = manifest or fake_manifest(host, run, chapter, tables={"checks": 1})
    (d / "manifest.json").write_text(json.dumps(m))
    return d


def _archive(tmp_path: Path, src: Path) -> Path:
    out = tmp_path / "runs.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        for host in sorted(src.iterdir()):
            tar.add(host, arcname=host.name)
    return out


def test_import_adopts_new_datasets_and_never_overwrites(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    _run(src, run="20260101T000000Z")  # identical at the destination
    _run(src, run="20260102T000000Z", rows="2")  # different at the destination
    _run(src, run="20260103T000000Z")  # new
    (src / "h-aaaaaaaaaaaa" / "trace_overhead" / ".tmp-20260104T000000Z-abcd").mkdir()
    _run(dest, run="20260101T000000Z")
    theirs = _run(dest, run="20260102T000000Z", rows="9")
    before = dir_digest(theirs)
    res = fleet.adopt_archive(_archive(tmp_path, src), dest)
    assert res.new == ["h-aaaaaaaaaaaa/trace_overhead/20260103T000000Z"]
    assert res.present == ["h-aaaaaaaaaaaa/trace_overhead/20260101T000000Z"]
    assert res.conflicts == ["h-aaaaaaaaaaaa/trace_overhead/20260102T000000Z"]
    assert dir_digest(theirs) == before
    assert (
        dest / "h-aaaaaaaaaaaa" / "trace_overhead" / "20260103T000000Z" / "checks.csv"
    ).read_text() == f"{CHECKS}0,marker,1,1\n"
    assert sorted(p.name for p in dest.iterdir()) == ["h-aaaaaaaaaaaa"], (
        "the staging directory was left behind"
    )
    assert not (dest / "h-aaaaaaaaaaaa" / "trace_overhead" / ".tmp-20260104T000000Z-abcd").exists()


def test_import_cli_exit_status_says_conflict(tmp_path, capsys):
    src, dest = tmp_path / "src", tmp_path / "dest"
    _run(src, rows="1")
    _run(dest, rows="2")
    assert fleet.main(["import", str(_archive(tmp_path, src)), "--dest", str(dest)]) == 1
    assert "CONFLICT" in capsys.readouterr().out


@pytest.mark.parametrize(
    "manifest, why",
    [
        (
            fake_manifest(
                "h-bbbbbbbbbbbb", "20260101T000000Z", "trace_overhead", tables={"checks": 1}
            ),
            "host_id 'h-bbbbbbbbbbbb' does not match its directory",
        ),
        (
            fake_manifest(
                "h-aaaaaaaaaaaa", "20260101T000000Z", "trace_overhead", tables={"missing": 3}
            ),
            "missing.csv.xz is missing",
        ),
        (
            fake_manifest(
                "h-aaaaaaaaaaaa", "20260101T000000Z", "cpu_pinning", tables={"checks": 1}
            ),
            "manifest says chapter 'cpu_pinning'",
        ),
    ],
)
def test_import_refuses_a_dataset_filed_under_the_wrong_name(tmp_path, capsys, manifest, why):
    src, dest = tmp_path / "src", tmp_path / "dest"
    _run(src, run="20251231T000000Z")  # a good one in the same archive: all or nothing
    _run(src, manifest=manifest)
    with pytest.raises(DatasetError, match=why):
        fleet.adopt_archive(_archive(tmp_path, src), dest)
    assert list(dest.iterdir()) == []
    assert fleet.main(["import", str(_archive(tmp_path, src)), "--dest", str(dest)]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_import_refuses_a_table_that_breaks_its_schema(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    d = _run(src)
    (d / "checks.csv").write_text(f"{CHECKS}0,marker,many,1\n")
    with pytest.raises(DatasetError, match="column 'expected_hits' is not int"):
        fleet.adopt_archive(_archive(tmp_path, src), dest)
    assert list(dest.iterdir()) == []


def test_import_refuses_members_outside_the_archive(tmp_path):
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        data = b"x"
        info = tarfile.TarInfo("../outside.csv")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    dest = tmp_path / "dest"
    with pytest.raises(DatasetError, match="outside the archive"):
        fleet.adopt_archive(evil, dest)
    assert not (tmp_path / "outside.csv").exists()
    assert list(dest.iterdir()) == []


def test_import_of_an_unreadable_archive_is_one_clear_error(tmp_path):
    bad = tmp_path / "bad.tar.gz"
    bad.write_text("not a tar file")
    with pytest.raises(DatasetError, match="cannot read the archive"):
        fleet.adopt_archive(bad, tmp_path / "dest")


# --- the playbook, against localhost ---------------------------------------------------


def _datasets(runs: Path) -> set[str]:
    return {
        m.parent.relative_to(runs).as_posix()
        for m in runs.glob("*/*/*/manifest.json")
        if not any(p.startswith(".") for p in m.parent.relative_to(runs).parts)
    }


def _snapshot(top: Path) -> dict[str, str]:
    return {p.relative_to(top).as_posix(): file_sha256(p) for p in top.rglob("*") if p.is_file()}


def _scratch_dirs() -> set[str]:
    """The playbook's scratch directories: on the host (temp dir) and the controller (build/)."""
    return {
        str(p)
        for top in (Path(tempfile.gettempdir()), ROOT / "build")
        for p in top.glob("*-perfbook-fleet")
    }


def _playbook(tmp_path: Path, chapter: str, dest_runs: Path, log: str, ok=True, **over):
    exe = Path(sys.executable).with_name("ansible-playbook")
    if not exe.is_file():
        pytest.skip(
            "ansible-playbook is not installed: tools/setup.sh installs ansible-core from environment.yml"
        )
    env = dict(
        os.environ,
        LC_ALL="C.UTF-8",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-local"),
        ANSIBLE_REMOTE_TEMP=str(tmp_path / "ansible-remote"),
        ANSIBLE_ASYNC_DIR=str(tmp_path / "ansible-async"),
    )
    extra = {
        "ansible_python_interpreter": sys.executable,
        "perfbook_controller_repo": str(ROOT),
        "perfbook_dest": str(tmp_path / "host-checkout"),
        "perfbook_runs_dest": str(dest_runs),
        "perfbook_profile": "quick",
        "perfbook_chapters": chapter,
        # the scratch checkout is the same commit as this one: reuse this
        # interpreter (it has the pins) instead of a second pip install
        "perfbook_setup": False,
        "perfbook_python": sys.executable,
        # a cheap chapter measures in seconds: ask every second, not every 10 s (the default)
        "perfbook_measure_poll": 1,
        **over,
    }
    if not shutil.which("sudo"):
        extra["ansible_become_method"] = "su"  # root becomes root without a password
    cmd = [str(exe), "-i", "localhost,", "-c", "local", str(PLAYBOOK), "-e", json.dumps(extra)]
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    (tmp_path / log).write_text(r.stdout + r.stderr)
    if ok:
        assert r.returncode == 0, f"ansible-playbook failed:\n{(r.stdout + r.stderr)[-5000:]}"
    return r.stdout if ok else r


def test_playbook_rejects_a_bad_parameter_before_touching_a_host(tmp_path):
    r = _playbook(
        tmp_path,
        "trace_overhead",
        tmp_path / "runs",
        "bad.log",
        ok=False,
        perfbook_profile="fastest",
    )
    assert r.returncode != 0
    assert "perfbook_profile must be quick, default or full, got fastest" in r.stdout + r.stderr
    assert not (tmp_path / "host-checkout").exists() and not (tmp_path / "runs").exists()


@pytest.fixture
def cheap_chapter():
    need_root("the fleet playbook (it measures with become)")
    from perfbook.chapters import by_name

    why = []
    for name in CHEAP:
        reasons = by_name(name).load().preflight()
        if not reasons:
            return name
        why.append(f"{name}: {reasons[0]}")
    pytest.skip("no cheap chapter can collect here (" + "; ".join(why) + ")")


@pytest.mark.root
def test_playbook_measures_localhost_and_brings_the_dataset_home(tmp_path, cheap_chapter):
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    if not head:
        pytest.skip("the playbook sends a git commit: this checkout is not a git repository")
    real = _snapshot(ROOT / "data")
    scratch_before = _scratch_dirs()
    dest = tmp_path / "controller-runs"
    shutil.copytree(ROOT / "data" / "runs", dest)
    have = _datasets(dest)

    t0 = time.monotonic()
    out = _playbook(tmp_path, cheap_chapter, dest, "first.log")
    first = _datasets(dest) - have
    assert len(first) == 1, f"expected one new dataset, got {sorted(first)}\n{out[-3000:]}"
    rel = first.pop()
    host, chapter, run_id = rel.split("/")
    assert (host, chapter) == (hostinfo.host_id(), cheap_chapter)
    m = json.loads((dest / rel / "manifest.json").read_text())
    assert (m["host"]["host_id"], m["chapter"], m["run_id"]) == (host, chapter, run_id)
    assert m["parameters"], "the manifest has no parameters"
    assert m["git"] == {"commit": head, "dirty": False}, (
        "the host should measure a clean checkout of HEAD"
    )
    assert m["tables"] and all(table_path(dest / rel, t) is not None for t in m["tables"])
    assert "1 new" in out
    first_digest = dir_digest(dest / rel)

    out2 = _playbook(tmp_path, cheap_chapter, dest, "second.log")
    second = _datasets(dest) - have - {rel}
    assert len(second) == 1 and second.pop().split("/")[2] != run_id, out2[-3000:]
    assert dir_digest(dest / rel) == first_digest, "the second run changed the first dataset"
    assert f"already here, identical: {rel}" in out2

    # nothing of this reached the real data/, and nothing there changed
    now = _snapshot(ROOT / "data")
    assert {k: now.get(k) for k in real} == real, "a file in the repository's data/ changed"
    for d in _datasets(dest) - have:
        assert not (ROOT / "data" / "runs" / d).exists(), (
            f"{d} was written into the repository's data/"
        )
    assert _scratch_dirs() <= scratch_before, "the playbook left its scratch directories behind"
    print(f"two playbook runs in {time.monotonic() - t0:.0f} s")
