"""Shared test helpers: skips that say why, and a scratch data directory."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def need_root(reason_what: str = "this test") -> None:
    if os.geteuid() != 0:
        pytest.skip(f"{reason_what} needs root (kernel interfaces); run the tests as root to include it")


def need_tool(name: str, package: str | None = None) -> str:
    exe = shutil.which(name)
    if not exe:
        pytest.skip(f"{name} is not installed (apt-get install {package or name}); tools/setup.sh installs it as root")
    return exe


def need_preflight(module) -> None:
    """Skip with the chapter's own reason when it can't collect on this host."""
    reasons = module.preflight()
    if reasons:
        pytest.skip(f"{module.name} can't collect here: {reasons[0]}")


def fake_manifest(host_id: str, run: str, chapter: str = "demo", **fields) -> dict:
    """A complete manifest (every field tools.dataset.REQUIRED lists) for a synthetic dataset;
    `fields` override or add top-level fields, `host` facts go in fields["host"]."""
    m = {"schema": 1, "chapter": chapter, "run_id": run, "host": {"host_id": host_id},
         "parameters": {}, "started": "2026-01-01T00:00:00+00:00",
         "finished": "2026-01-01T00:01:00+00:00", "tables": {}, "skipped": {}, "notes": []}
    host_facts = fields.pop("host", {})
    m.update(fields)
    m["host"].update(host_facts)
    # an explicitly labelled host (as PERFBOOK_HOST_ID gives), with identity facts to compare
    m["host"].setdefault("machine", {"version": 2, "machine_key": host_id, "id_override": True,
                                     "cpu_model": "test CPU", "cpus": 2, "mem_gib": 4,
                                     "arch": "x86_64", "tsc_mhz": 2000})
    return m


def read_until(p, ready: str, timeout: float) -> tuple[list[str], bool]:
    """(the lines a child (stdout a pipe) printed until one matched the regex `ready`, that one
    included, then whatever it had printed after it; whether one matched before it ended or
    `timeout` seconds passed). The pipe is read raw: a line left in a text wrapper's buffer is
    invisible to select(), and would be seen only when more output comes (seconds later)."""
    import re
    import selectors
    import time
    fd = p.stdout.fileno()
    seen, pending, deadline = [], b"", time.monotonic() + timeout
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    while time.monotonic() < deadline:
        if not sel.select(timeout=1):
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        for i, line in enumerate(lines):
            seen.append(line.decode(errors="replace") + "\n")
            if re.search(ready, seen[-1]):
                rest = b"\n".join(lines[i + 1:] + [pending])
                return seen + ([rest.decode(errors="replace")] if rest else []), True
    return seen + ([pending.decode(errors="replace")] if pending else []), False


@pytest.fixture
def scratch_data(tmp_path):
    """An empty data directory (runs/ inside it) for collect runs in tests."""
    d = tmp_path / "data"
    (d / "runs").mkdir(parents=True)
    return d


# ---- the built site, shared by tests/test_book.py and tests/test_site_browser.py ----------

# The test build's launch buttons point here unless PERFBOOK_REPOSITORY_URL is set; a placeholder,
# so that the buttons are rendered and checked. The published site gets the real repository.
TEST_REPOSITORY_URL = "https://github.com/perfbook-test/perfbook"


def toc_pages() -> list[str]:
    """Every page of the book in _toc.yml order (root first), as Sphinx docnames."""
    import yaml
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(entries):
        for e in entries or []:
            if "file" in e:
                pages.append(e["file"])
            walk(e.get("sections"))
    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return [p.removesuffix(".md").removesuffix(".ipynb") for p in pages]


@pytest.fixture(scope="session")
def built_book(tmp_path_factory):
    """The whole book built once per session with Sphinx warnings as errors (the `make book`
    flags); returns (returncode, log, html dir, repository url used for the launch buttons)."""
    import subprocess
    import sys
    from types import SimpleNamespace
    out = tmp_path_factory.mktemp("book")
    env = dict(os.environ)
    env.setdefault("PERFBOOK_REPOSITORY_URL", TEST_REPOSITORY_URL)
    env.setdefault("PERFBOOK_REPOSITORY_BRANCH", "main")
    jb = Path(sys.executable).with_name("jupyter-book")
    r = subprocess.run([str(jb), "build", str(ROOT), "--path-output", str(out), "-W", "-n",
                        "--keep-going"], capture_output=True, text=True, env=env)
    return SimpleNamespace(returncode=r.returncode, log=(r.stdout + r.stderr),
                           html=out / "_build" / "html",
                           repository_url=env["PERFBOOK_REPOSITORY_URL"].rstrip("/").removesuffix(".git"),
                           branch=env["PERFBOOK_REPOSITORY_BRANCH"] or "main")


# A synthetic fleet (tools.synthfleet) for the scaling checks of the site: how many hosts.
# 12 in `make test` (more hosts than a legend or a drop-down may list, in a few minutes);
# `make test-fleet` builds the 100-host fleet (about 15 minutes on 2 cores).
FLEET_HOSTS = int(os.environ.get("PERFBOOK_TEST_FLEET", "12"))


@pytest.fixture(scope="session")
def fleet_book(tmp_path_factory, pytestconfig):
    """The book built once per session in a SCRATCH COPY of this checkout (tools.bench's
    scratch_checkout: never this checkout's data/, build/ or _build/) whose data/runs also
    holds FLEET_HOSTS synthetic hosts (`python -m tools.synthfleet N DEST`, then moved in),
    with hosts.ipynb re-executed there on that data (papermill, in place). The chapters keep
    their stored outputs: only their Datasets sections and the hosts page follow data/.
    Returns (returncode, log, html dir, the copy, number of synthetic hosts, failed step)."""
    import subprocess
    import sys
    from types import SimpleNamespace
    from tools.bench import check_copy, copy_env, scratch_checkout
    base = tmp_path_factory.mktemp("fleetbook")
    fleet, out = base / "fleet", base / "out"
    repo = scratch_checkout(base / "repo", ROOT)
    env = copy_env(repo)
    env["PERFBOOK_STATE_DIR"] = str(base / "state")
    env.setdefault("PERFBOOK_REPOSITORY_URL", TEST_REPOSITORY_URL)
    env.setdefault("PERFBOOK_REPOSITORY_BRANCH", "main")
    check_copy(repo, env)
    say = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    bindir = Path(sys.executable).parent
    log = []

    def step(what, cmd):
        if say:
            say.write_line(f"[fleet book] {what} ...")
        r = subprocess.run([str(c) for c in cmd], cwd=repo, env=env, capture_output=True, text=True)
        killed = f"(killed by signal {-r.returncode})\n" if r.returncode < 0 else ""
        log.append(f"$ {' '.join(map(str, cmd))}\n{r.stdout}{r.stderr}{killed}")
        return r.returncode

    def result(rc, failed=""):
        return SimpleNamespace(returncode=rc, log="\n".join(log), html=out / "_build" / "html",
                               repo=repo, hosts=FLEET_HOSTS, failed=failed)

    if step(f"generating {FLEET_HOSTS} synthetic hosts",
            [sys.executable, "-m", "tools.synthfleet", FLEET_HOSTS, fleet]):
        return result(1, "synthfleet")
    for host in sorted((fleet / "runs").iterdir()):
        shutil.move(str(host), str(repo / "data" / "runs" / host.name))
    if step("re-executing hosts.ipynb on the fleet",
            [bindir / "papermill", "hosts.ipynb", "hosts.ipynb", "-k", "python3", "--cwd", repo,
             "--no-progress-bar", "--log-level", "WARNING"]):
        return result(1, "hosts.ipynb")
    rc = step("building the book", [bindir / "jupyter-book", "build", repo, "--path-output", out,
                                    "-W", "-n", "--keep-going"])
    return result(rc, "jupyter-book build" if rc else "")


def scratch_owner(d: Path) -> int | None:
    """The pid in a scratch directory's 'owner' file (the convention of tools.scratch)."""
    try:
        return int((d / "owner").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def need_guest():
    """Skip unless the tiny QEMU guest (tools.guest) can boot here."""
    from tools import guest
    reasons = guest.preflight()
    if reasons:
        pytest.skip(f"no tiny guest here: {reasons[0]}")
    try:
        guest.ensure_artefacts()
    except guest.MissingPrerequisite as e:
        pytest.skip(f"no guest kernel: {e}")


def qemu_children(pid: int) -> list[str]:
    """QEMU processes whose parent is pid."""
    import subprocess
    from tools import guest
    r = subprocess.run(["pgrep", "-P", str(pid), "-f", guest.QEMU], capture_output=True, text=True)
    return r.stdout.split()


def owned_by(pid: int) -> list[Path]:
    """The guest scratch directories that process pid owns."""
    from tools.scratch import live_dirs
    out = []
    for d in live_dirs("guest"):
        try:
            if int((d / "owner").read_text().split()[0]) == pid:
                out.append(d)
        except (OSError, ValueError, IndexError):
            pass
    return out
