"""tools.contrib: a contribution may only add datasets, and every dataset must validate."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from conftest import ROOT
from tools import contrib


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    r = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(r)], check=True)
    _git(r, "config", "user.email", "t@example.org")
    _git(r, "config", "user.name", "t")
    _git(r, "branch", "base")
    monkeypatch.setenv("PERFBOOK_ROOT", str(r))
    return r


def _commit(repo, msg="c"):
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", msg)


def _a_dataset(repo):
    return sorted((repo / "data" / "runs").glob("*/tsc_alignment/*"))[0]


def test_a_new_dataset_is_a_valid_contribution(repo):
    src = _a_dataset(repo)
    new = src.parent / "20300101T000000Z"
    shutil.copytree(src, new)
    m = json.loads((new / "manifest.json").read_text())
    m["run_id"] = new.name
    (new / "manifest.json").write_text(json.dumps(m))
    _commit(repo)
    assert contrib.problems("base") == []


def test_a_changed_or_extended_dataset_is_refused(repo):
    src = _a_dataset(repo)
    t = sorted(src.glob("tsc_freq.csv*"))[0]
    t.write_bytes(t.read_bytes() + b"\n")
    (src / "extra.csv").write_text("a\n1\n")
    _commit(repo)
    found = contrib.problems("base")
    assert any(f"{t.name}: modified, but datasets are immutable" in p for p in found), found
    assert any("extra.csv: added to the existing dataset" in p for p in found), found


def test_a_dataset_under_another_machines_host_id_is_refused(repo, capsys):
    src = _a_dataset(repo)
    new = src.parent / "20300101T000000Z"
    shutil.copytree(src, new)
    m = json.loads((new / "manifest.json").read_text())
    m["run_id"] = new.name
    m["host"]["machine"]["cpus"] = 64          # another machine filed under this id
    (new / "manifest.json").write_text(json.dumps(m))
    _commit(repo)
    assert contrib.main(["base"]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "does not follow from its machine facts" in out[0], out
