"""Publishing the site: the Pages workflow, the Binder setup, and the dataset downloads
(tools/perfbook/book/sphinx_site.py). The rendered result is checked in a browser by test_site_browser.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import zipfile
from types import SimpleNamespace

import pytest
import yaml

from conftest import ROOT, fake_manifest
from perfbook.book import sphinx_site as S

WORKFLOW = ROOT / ".github" / "workflows" / "pages.yml"


def _workflow() -> dict:
    wf = yaml.safe_load(WORKFLOW.read_text())
    wf["on"] = wf.pop(True, wf.get("on"))  # YAML 1.1 reads the key `on` as true
    return wf


def _steps(job: dict) -> list[dict]:
    return job["steps"]


def _uses(job: dict, action: str) -> dict:
    found = [s for s in _steps(job) if s.get("uses", "").split("@")[0] == action]
    assert found, f"no step uses {action}"
    return found[0]


# ---- the GitHub Pages workflow ---------------------------------------------------------


def test_pages_workflow_triggers_and_permissions():
    wf = _workflow()
    assert "main" in wf["on"]["push"]["branches"]
    assert "workflow_dispatch" in wf["on"]
    assert wf["permissions"]["pages"] == "write" and wf["permissions"]["id-token"] == "write"


def test_pages_workflow_builds_with_the_repository_tools():
    build = _workflow()["jobs"]["build"]
    _uses(build, "actions/checkout")
    py = _uses(build, "actions/setup-python")["with"]["python-version"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert f"python={py}" in env["dependencies"], "the workflow's Python is not environment.yml's"

    runs = [s["run"] for s in _steps(build) if "run" in s]
    commands = [c.strip() for r in runs for c in r.splitlines() if c.strip()]
    assert "bash tools/setup.sh" in commands and (ROOT / "tools" / "setup.sh").is_file()
    assert "make book" in commands
    book = subprocess.run(["make", "-n", "book"], cwd=ROOT, capture_output=True, text=True)
    recipe = [ln for ln in book.stdout.splitlines() if not ln.startswith("make")]  # under make
    assert book.returncode == 0 and recipe[-1].endswith("perfbook book"), (
        f"Makefile's book target changed: {book.stdout}{book.stderr}"
    )
    main = (ROOT / "tools" / "perfbook" / "cli.py").read_text()
    assert '"build", str(repo_root()), "--all", "-W", "-n"' in main, "the book is built without -W"

    # the Binder buttons get the repository from the environment the build step sets
    step = next(s for s in _steps(build) if s.get("run", "").strip() == "make book")
    assert step["env"][S.ENV_URL] == "${{ github.server_url }}/${{ github.repository }}"
    assert S.ENV_BRANCH in step["env"]

    upload = _uses(build, "actions/upload-pages-artifact")
    assert upload["with"]["path"] == "_build/html"
    assert '"_build" / "html"' in main  # where `make book` says the site is


def test_pages_workflow_deploys_the_uploaded_site():
    deploy = _workflow()["jobs"]["deploy"]
    assert deploy["needs"] == "build"
    assert deploy["environment"]["name"] == "github-pages"
    _uses(deploy, "actions/deploy-pages")


# ---- Binder ----------------------------------------------------------------------------

_CONDA_SPEC = re.compile(
    r"[A-Za-z0-9_.\-]+(?:[=<>!~]{1,2}[A-Za-z0-9_.*+!]+(?:,[<>=!~]{1,2}[A-Za-z0-9_.*]+)*)?"
)


def test_environment_yml_is_a_conda_environment_for_binder():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert set(env) <= {"name", "channels", "dependencies", "variables", "prefix"}, set(env)
    assert isinstance(env["name"], str) and env["name"]
    assert all(isinstance(c, str) and c for c in env["channels"])
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    other = [d for d in env["dependencies"] if not isinstance(d, str)]
    for spec in conda:
        assert _CONDA_SPEC.fullmatch(spec), f"not a conda match spec: {spec!r}"
    assert any(re.fullmatch(r"python=3\.\d+", s) for s in conda), "Python must be pinned for Binder"
    assert len(other) == 1 and set(other[0]) == {"pip"}, other
    assert "pip" in conda, "a pip: section needs pip among the conda dependencies"
    assert all(isinstance(p, str) and "==" in p for p in other[0]["pip"])


def test_binder_installs_the_tools_package_the_chapters_import():
    post = ROOT / "postBuild"
    assert post.is_file() and os.access(post, os.X_OK), "postBuild must be executable"
    subprocess.run(["bash", "-n", str(post)], check=True)
    assert re.search(r"pip install .*-e \.", post.read_text())
    assert not (ROOT / "binder").exists(), "a binder/ folder would hide the top-level files"
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert cfg["launch_buttons"]["binderhub_url"] == "https://mybinder.org"
    assert "url" not in cfg.get("repository", {}), "the URL comes from PERFBOOK_REPOSITORY_URL"
    assert cfg["sphinx"]["local_extensions"] == {"perfbook.book.sphinx_site": "."}


@pytest.mark.parametrize(
    "url, branch, want",
    [
        ("https://github.com/o/r", "", ("https://github.com/o/r", "main")),
        ("https://github.com/o/r.git", "dev", ("https://github.com/o/r", "dev")),
        ("https://gitlab.com/o/r/", "main", ("https://gitlab.com/o/r", "main")),
    ],
)
def test_repository_options_from_the_environment(url, branch, want):
    got = S.repository_options({S.ENV_URL: url, S.ENV_BRANCH: branch})
    assert (got["repository_url"], got["repository_branch"]) == want


@pytest.mark.parametrize(
    "env, message",
    [
        ({S.ENV_URL: "github.com/o/r"}, S.ENV_URL),
        ({S.ENV_URL: "https://example.org/o/r"}, S.ENV_URL),
        ({S.ENV_URL: "https://github.com/o"}, S.ENV_URL),
        ({S.ENV_URL: "https://github.com/o/r", S.ENV_BRANCH: "a b"}, S.ENV_BRANCH),
    ],
)
def test_a_bad_repository_setting_is_one_clear_error(env, message):
    with pytest.raises(ValueError, match=message):
        S.repository_options(env)


def test_without_a_repository_there_is_no_launch_button(monkeypatch):
    """Jupyter Book's default repository url is its own; the button must not open it."""
    monkeypatch.delenv(S.ENV_URL, raising=False)
    cfg = SimpleNamespace(
        html_context={},
        html_theme_options={
            "launch_buttons": {"binderhub_url": "https://mybinder.org"},
            "repository_url": "https://github.com/executablebooks/jupyter-book",
        },
    )
    S._on_config_inited(None, cfg)
    assert cfg.html_theme_options["launch_buttons"]["binderhub_url"] == ""
    assert cfg.html_theme_options["repository_url"] == ""
    monkeypatch.setenv(S.ENV_URL, "https://github.com/o/r")
    cfg.html_theme_options["launch_buttons"]["binderhub_url"] = "https://mybinder.org"
    S._on_config_inited(None, cfg)
    assert cfg.html_theme_options["repository_url"] == "https://github.com/o/r"
    assert cfg.html_theme_options["launch_buttons"]["binderhub_url"] == "https://mybinder.org"


# ---- dataset downloads -----------------------------------------------------------------


@pytest.fixture
def two_hosts(tmp_path):
    d = tmp_path / "data"
    for host, run in (
        ("h-aaaaaaaaaaaa", "20260101T000000Z"),
        ("h-aaaaaaaaaaaa", "20260102T000000Z"),
        ("h-bbbbbbbbbbbb", "20260103T000000Z"),
    ):
        r = d / "runs" / host / "demo" / run
        (r / "strace").mkdir(parents=True)
        (r / "manifest.json").write_text(
            json.dumps(
                fake_manifest(
                    host,
                    run,
                    host={"description": f"{host} box"},
                    parameters={"profile": "quick"},
                    tables={"samples": 1},
                )
            )
        )
        (r / "samples.csv").write_text(f"x\n{run}\n")
        (r / "strace" / "t.txt").write_text("open\n")
        (r / ".hidden").write_text("not data")
    (d / "runs" / "h-aaaaaaaaaaaa" / "demo" / ".tmp-20260104T000000Z-1234").mkdir()  # unfinished
    (d / "reference").mkdir()
    (d / "reference" / "demo.csv").write_text("seed_file,value\ns.txt,1\n")
    return d


def test_chapter_data_lists_every_host_and_run(two_hosts):
    data = S.chapter_data("demo", two_hosts)
    assert data.hosts == ["h-aaaaaaaaaaaa", "h-bbbbbbbbbbbb"]
    assert [r.run_id for r in data.runs] == [
        "20260101T000000Z",
        "20260102T000000Z",
        "20260103T000000Z",
    ]
    assert data.runs[0].files == ["manifest.json", "samples.csv", "strace/t.txt"]
    assert data.runs[0].profile == "quick" and data.runs[0].description == "h-aaaaaaaaaaaa box"
    rels = [rel for _, rel in data.members()]
    assert rels == sorted(rels) and len(rels) == 3 * 3 + 1
    assert "reference/demo.csv" in rels and not any(".hidden" in r or ".tmp-" in r for r in rels)
    assert [a.name for a in data.archives()] == [
        "runs/h-aaaaaaaaaaaa/demo/20260101T000000Z.zip",
        "runs/h-aaaaaaaaaaaa/demo/20260102T000000Z.zip",
        "runs/h-bbbbbbbbbbbb/demo/20260103T000000Z.zip",
        "reference/demo.zip",
    ]


def _site_members(site) -> list[str]:
    """Every member of every archive under site/datasets, and every file there that is not one."""
    out = []
    for f in sorted((site / S.SITE_DIR).rglob("*")):
        if f.is_file() and f.suffix == ".zip":
            with zipfile.ZipFile(f) as z:
                assert z.testzip() is None, f
                out += z.namelist()
        elif f.is_file():
            out.append(f"not an archive: {f}")
    return out


def test_archives_are_deterministic_and_hold_the_data(two_hosts, tmp_path):
    archives = S.site_archives(two_hosts)
    a = S.publish(tmp_path / "site1", archives)
    for p in two_hosts.rglob("*"):
        os.utime(p, (1, 1))  # timestamps must not matter
    b = S.publish(tmp_path / "site2", S.site_archives(two_hosts))
    assert [x.read_bytes() for x in a] == [y.read_bytes() for y in b]
    for path, archive in zip(a, archives):
        assert path == tmp_path / "site1" / S.SITE_DIR / archive.name
        with zipfile.ZipFile(path) as z:
            assert z.namelist() == [f"data/{rel}" for _, rel in archive.members]
            for src, rel in archive.members:
                assert z.read(f"data/{rel}") == src.read_bytes()
    run = S.chapter_data("demo", two_hosts).runs[0]
    with zipfile.ZipFile(tmp_path / "site1" / S.SITE_DIR / run.archive) as z:  # unzips into a clone
        assert z.namelist() == [f"data/runs/{run.host}/demo/{run.run_id}/{f}" for f in run.files]
    assert not list((tmp_path / "site1" / S.SITE_DIR).rglob(".*.tmp"))


def test_the_site_holds_each_dataset_once(two_hosts, tmp_path):
    """Two chapters share a host: every dataset file and reference figure is in exactly one
    archive, nothing else is published, and a stale archive of an earlier build goes."""
    for run in ("20260101T000000Z", "20260107T000000Z"):
        r = two_hosts / "runs" / "h-aaaaaaaaaaaa" / "other" / run
        r.mkdir(parents=True)
        (r / "manifest.json").write_text(json.dumps(fake_manifest("h-aaaaaaaaaaaa", run, "other")))
        (r / "t.csv").write_text("y\n1\n")
    (two_hosts / "reference" / "other.csv").write_text("a\n1\n")
    (two_hosts / "reference" / "demo_extra.csv").write_text("a\n2\n")  # demo's own
    (two_hosts / "reference" / "notes.txt").write_text("not a reference table")
    stale = tmp_path / "site" / S.SITE_DIR / "demo.zip"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"old")
    S.publish(tmp_path / "site", S.site_archives(two_hosts))
    members = _site_members(tmp_path / "site")
    want = sorted(
        f"data/{p.relative_to(two_hosts).as_posix()}"
        for p in two_hosts.rglob("*")
        if p.is_file()
        and p.name != "notes.txt"
        and not any(part.startswith(".") for part in p.relative_to(two_hosts).parts)
    )
    assert sorted(members) == want
    assert len(members) == len(set(members)), "a file is in two archives"
    zips = sorted(
        p.relative_to(tmp_path / "site" / S.SITE_DIR).as_posix()
        for p in (tmp_path / "site" / S.SITE_DIR).rglob("*.zip")
    )
    assert zips == sorted(
        [
            "reference/demo.zip",
            "reference/other.zip",
            "runs/h-aaaaaaaaaaaa/demo/20260101T000000Z.zip",
            "runs/h-aaaaaaaaaaaa/demo/20260102T000000Z.zip",
            "runs/h-aaaaaaaaaaaa/other/20260101T000000Z.zip",
            "runs/h-aaaaaaaaaaaa/other/20260107T000000Z.zip",
            "runs/h-bbbbbbbbbbbb/demo/20260103T000000Z.zip",
        ]
    )


def test_a_reference_belongs_to_the_longest_chapter_name(tmp_path):
    (tmp_path / "reference").mkdir()
    for name in ("demo.csv", "demo_bare.csv", "demo_two.csv", "demo_two_b.csv"):
        (tmp_path / "reference" / name).write_text("a\n1\n")
    names = ("demo", "demo_two")
    assert [p.name for p in S.reference_files("demo", tmp_path, names)] == [
        "demo.csv",
        "demo_bare.csv",
    ]
    assert [p.name for p in S.reference_files("demo_two", tmp_path, names)] == [
        "demo_two.csv",
        "demo_two_b.csv",
    ]


def test_signature_follows_the_data(two_hosts):
    before = S.chapter_data("demo", two_hosts).signature()
    assert S.chapter_data("demo", two_hosts).signature() == before
    r = two_hosts / "runs" / "h-bbbbbbbbbbbb" / "demo" / "20260105T000000Z"
    r.mkdir()
    (r / "manifest.json").write_text(
        json.dumps(fake_manifest("h-bbbbbbbbbbbb", "20260105T000000Z"))
    )
    assert S.chapter_data("demo", two_hosts).signature() != before


def test_section_links_each_dataset_once(two_hosts):
    from docutils import nodes
    from docutils.utils import new_document

    data = S.chapter_data("demo", two_hosts)
    sec = S.datasets_section(data, new_document("x"))
    targets = [n["perfbook_target"] for n in sec.findall(nodes.reference)]
    archives = [f"{S.SITE_DIR}/{a.name}" for a in data.archives()]
    assert sorted(t for t in targets if t.startswith(f"{S.SITE_DIR}/")) == sorted(archives)
    assert "hosts.html" in targets and len(targets) == len(archives) + 1
    text = sec.astext()
    assert all(h in text for h in data.hosts) and "3 runs from 2 hosts" in text
    assert "20260103T000000Z (profile quick, 3 files" in text
    no_hosts_page = S.datasets_section(data, new_document("y"), hosts_page=False)
    assert "hosts.html" not in [
        n["perfbook_target"] for n in no_hosts_page.findall(nodes.reference)
    ]


def test_a_chapter_without_runs_still_offers_its_reference(tmp_path):
    (tmp_path / "reference").mkdir()
    (tmp_path / "reference" / "demo.csv").write_text("a\n1\n")
    data = S.chapter_data("demo", tmp_path)
    assert data.runs == [] and [rel for _, rel in data.members()] == ["reference/demo.csv"]
    assert [a.name for a in data.archives()] == ["reference/demo.zip"]
    from docutils.utils import new_document

    assert (
        "No host has measured this chapter yet"
        in S.datasets_section(data, new_document("x")).astext()
    )


def test_every_registered_chapter_gets_a_page_section():
    from perfbook.chapters import CHAPTERS

    names = S.chapter_docnames()
    assert sorted(names.values()) == sorted(c.name for c in CHAPTERS)
    for doc in names:
        assert (ROOT / f"{doc}.ipynb").is_file()


def test_the_appendix_lists_each_run_of_a_chapter_with_its_plan_rounds_and_archive(two_hosts):
    """A chapter's part of the appendix ("How this was measured"): a link to the chapter, its
    plan, one row per run (machine named, id as tooltip; archive linked; time taken against the
    plan; rounds; the rule that stopped them; disturbed or not), then its Datasets section; and
    the chapter page's pointer to that part."""
    from types import SimpleNamespace

    from docutils import nodes
    from docutils.utils import new_document

    rep = two_hosts / "runs" / "h-bbbbbbbbbbbb" / "demo" / "20260103T000000Z" / "repetition.csv"
    rep.write_text(
        "experiment,key,n,warmup,rel_ci_width,target,budget_s,elapsed_s,met_target,stopped_by\n"
        "main,a,6,1,0.04,0.05,30,12.5,True,ci_target\n"
        "main,b,8,1,0.06,0.05,30,12.5,False,ci_target\n"
    )
    chapter = SimpleNamespace(name="demo", title="A demo", plan_s={"quick": 5, "default": 60})
    data = S.chapter_data("demo", two_hosts)
    sec = S.measured_section(chapter, "chapters/demo", data, new_document("x"), True, two_hosts)
    assert sec["ids"] == [S.measured_id("demo")] == ["measured-demo"]
    targets = [n["perfbook_target"] for n in sec.findall(nodes.reference)]
    assert targets[0] == "chapters/demo.html" and "hosts.html" in targets
    assert "quick 5 s, default 60 s" in sec.astext()
    table = next(iter(sec.findall(nodes.raw))).astext()
    rows = table.split("<tbody>")[1].split("</tr>")[:-1]
    assert len(rows) == 3
    last = rows[-1]
    assert 'title="h-bbbbbbbbbbbb"' in last and ">h-bbbbbbbbbbbb<" not in last
    assert f'href="{S.SITE_DIR}/runs/h-bbbbbbbbbbbb/demo/20260103T000000Z.zip"' in last
    assert "<td>quick</td>" in last and "<td>5 s</td>" in last  # the plan of its profile
    assert "<td>6–8</td>" in last and "<td>CI target reached</td>" in last
    assert "<td>—</td><td>fixed repetition" in rows[0]  # a dataset without a repetition table
    sub = [s for s in sec.findall(nodes.section) if s is not sec]
    assert [s["ids"] for s in sub] == [["datasets-demo"]]
    pointer = S.pointer_section(chapter, new_document("y"))
    ref = next(iter(pointer.findall(nodes.reference)))
    assert ref["perfbook_target"] == "appendix.html#measured-demo"
