"""perfbook.book.contrib: a contribution may only add datasets, and every dataset must validate."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from conftest import ROOT
from perfbook.book import contrib


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


def _new_dataset(repo, edit=lambda m: None):
    """A copy of a committed dataset under a new run id (what a contribution adds); `edit`
    changes its manifest."""
    src = _a_dataset(repo)
    new = src.parent / "20300101T000000Z"
    shutil.copytree(src, new)
    m = json.loads((new / "manifest.json").read_text())
    m["run_id"] = new.name
    edit(m)
    (new / "manifest.json").write_text(json.dumps(m))
    return new


def test_a_new_dataset_is_a_valid_contribution(repo):
    _new_dataset(repo)
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
    _new_dataset(repo, lambda m: m["host"]["machine"].update(cpus=64))  # another machine, this id
    _commit(repo)
    assert contrib.main(["base"]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "does not follow from its machine facts" in out[0], out


def test_a_contribution_with_a_symlink_is_refused(repo, tmp_path):
    """A link in a dataset passed the check, and the site's build published what it points to
    (/etc/shadow, built as root); no contribution needs a link anywhere."""
    secret = tmp_path / "shadow"
    secret.write_text("root:$y$j9T$not-for-the-web:19000:0:99999:7:::\n")
    new = _new_dataset(repo)
    (new / "notes.txt").symlink_to(secret)
    (repo / "docs-link").symlink_to(secret)  # outside data/ as well
    _commit(repo)
    found = contrib.problems("base")
    rel = new.relative_to(repo) / "notes.txt"
    assert any(p.startswith(f"{rel}: a symlink") for p in found), found
    assert any(p.startswith("docs-link: a symlink") for p in found), found
    assert any(p.startswith(f"{new / 'notes.txt'}: a symlink") for p in found), found  # validation
    assert all("\n" not in p for p in found)
