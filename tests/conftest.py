"""Shared test helpers: skips that say why, a scratch data directory, the book's data in the
states a reader's clone holds it (book_data), and every figure each chapter shows."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def need_root(reason_what: str = "this test") -> None:
    if os.geteuid() != 0:
        pytest.skip(
            f"{reason_what} needs root (kernel interfaces); run the tests as root to include it"
        )


def need_tool(name: str, package: str | None = None) -> str:
    exe = shutil.which(name)
    if not exe:
        pytest.skip(
            f"{name} is not installed (apt-get install {package or name}); tools/setup.sh installs it as root"
        )
    return exe


NOBODY = 65534


def as_nobody(
    code: str, timeout: float = 30, args: list[str] = (), site: bool = False
) -> subprocess.CompletedProcess:
    """Run Python code as uid/gid 65534 (not root, no capabilities), with argv[1:] = args; with
    site=True it imports from this environment's site-packages too (pyzmq)."""

    def drop():
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)

    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    path = [str(ROOT)] + ([p for p in sys.path if p.endswith("site-packages")] if site else [])
    return subprocess.run(
        [py, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=drop,
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(path)},
    )


def nobody_requests(targets: list[tuple[str, str, int]], payload: bytes = b"x") -> list[str]:
    """Another local user's attempt at one request/response transaction with each server
    (proto 'tcp' or 'udp', address, port): connect, send `payload`, wait 1 s for an answer.
    Per target: 'served' (an answer came back), 'accepted' (a TCP connection was taken but not
    answered), or the error that stopped it (ConnectionRefusedError, a timeout, no route...)."""
    r = as_nobody(f"""
        import json, socket
        out = []
        for proto, addr, port in {json.dumps(targets)}:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM)
            s.settimeout(1.0)
            connected = False
            try:
                s.connect((addr, port))
                connected = proto == "tcp"
                s.send({payload!r})
                out.append("served" if s.recv(64) else "accepted")
            except OSError as e:
                out.append("accepted" if connected else type(e).__name__)
            finally:
                s.close()
        print(json.dumps(out))
    """)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def others_listen(proto: str, port: int, group: int) -> bool:
    """Does a process outside process group `group` (a server we started in a session of its
    own) listen on `port` in the host's network namespace? Then a request to that port from
    the host's namespace reaches that process, and says nothing about ours."""
    r = subprocess.run(
        ["ss", "-Hlnp", "-t" if proto == "tcp" else "-u", f"sport = :{port}"],
        capture_output=True,
        text=True,
    )
    for pid in {int(x) for x in re.findall(r"pid=(\d+)", r.stdout)}:
        try:
            if os.getpgid(pid) != group:
                return True
        except ProcessLookupError:
            pass
    return False


def need_preflight(module) -> None:
    """Skip with the chapter's own reason when it can't collect on this host."""
    reasons = module.preflight()
    if reasons:
        pytest.skip(f"{module.name} can't collect here: {reasons[0]}")


def fake_manifest(host_id: str, run: str, chapter: str = "demo", **fields) -> dict:
    """A complete manifest (every field perfbook.data.dataset.REQUIRED lists) for a synthetic dataset;
    `fields` override or add top-level fields, `host` facts go in fields["host"]."""
    m = {
        "schema": 1,
        "chapter": chapter,
        "run_id": run,
        "host": {"host_id": host_id},
        "parameters": {},
        "started": "2026-01-01T00:00:00+00:00",
        "finished": "2026-01-01T00:01:00+00:00",
        "tables": {},
        "skipped": {},
        "notes": [],
    }
    host_facts = fields.pop("host", {})
    m.update(fields)
    m["host"].update(host_facts)
    # an explicitly labelled host (as PERFBOOK_HOST_ID gives), with identity facts to compare
    m["host"].setdefault(
        "machine",
        {
            "version": 2,
            "machine_key": host_id,
            "id_override": True,
            "cpu_model": "test CPU",
            "cpus": 2,
            "mem_gib": 4,
            "arch": "x86_64",
            "tsc_mhz": 2000,
        },
    )
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
                rest = b"\n".join(lines[i + 1 :] + [pending])
                return seen + ([rest.decode(errors="replace")] if rest else []), True
    return seen + ([pending.decode(errors="replace")] if pending else []), False


@pytest.fixture
def scratch_data(tmp_path):
    """An empty data directory (runs/ inside it) for collect runs in tests."""
    d = tmp_path / "data"
    (d / "runs").mkdir(parents=True)
    return d


# ---- the book's data, whichever host is "this host" --------------------------------------------
#
# Every test that reads the book's data reads it through `book_data`, once per state a reader's
# clone can be in (the developers' clones are always the first):
#
#   committed        data/ as committed: this host (the host of D.quoted) is the reference host
#   new_host         a reader's `sudo make all` on a new machine: a copy of data/ plus one dataset
#                    per chapter from a new host, the newest, with one round of each adaptive
#                    repetition (perfbook.dev.synthfleet.add_host): this host is that host, with one run
#   spanning_builds  a copy of data/ in which the reference host measured every chapter again on
#                    another build of its kernel (perfbook.dev.synthfleet.add_build): this host's runs
#                    span two kernel builds, and the newest is on the new one
#
# Each copy is made once per session, when a test first asks for it.

BOOK_DATA = ("committed", "new_host", "spanning_builds")


@dataclass(frozen=True)
class BookData:
    scenario: str
    data_dir: Path | None  # None: the committed data/ itself
    host: str | None = None  # the host whose datasets the scenario added
    added: dict = field(default_factory=dict)  # chapter -> the dataset directory it added

    def __str__(self):
        return self.scenario


def _make_book_data(scenario: str, tmp_path_factory) -> BookData:
    from perfbook.analysis import fleetview
    from perfbook.dev import synthfleet

    if scenario == "committed":
        return BookData(scenario, None)
    data = tmp_path_factory.mktemp(scenario) / "data"
    shutil.copytree(ROOT / "data", data, ignore=shutil.ignore_patterns(".*"))
    if scenario == "new_host":
        host, added = synthfleet.add_host(data)
    elif scenario == "spanning_builds":
        host = fleetview.reference_host()["host_id"]
        added = synthfleet.add_build(data, host)
    else:
        raise ValueError(f"unknown book_data scenario {scenario!r}")
    return BookData(scenario, data, host, added)


@pytest.fixture(scope="session")
def book_datasets(tmp_path_factory):
    """scenario -> BookData, each made on first use. At the end of the session the
    verdict-store entries of the copies (build/verdicts) are removed with them."""
    made: dict[str, BookData] = {}

    def get(scenario: str) -> BookData:
        if scenario not in made:
            made[scenario] = _make_book_data(scenario, tmp_path_factory)
        return made[scenario]

    yield get
    from perfbook.data.buildfiles import store_dir

    for bd in made.values():
        if bd.data_dir is not None:
            shutil.rmtree(store_dir("verdicts", bd.data_dir), ignore_errors=True)


def readers_runs() -> set[Path]:
    """The run directories under data/runs that git does not track: a reader's own make all
    (or a contribution not yet committed). Empty outside a git checkout."""
    r = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--others", "--exclude-standard", "data/runs"],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        return set()
    return {(ROOT / p).parent for p in r.stdout.splitlines() if p.endswith("/manifest.json")}


@pytest.fixture(scope="session")
def committed_data(tmp_path_factory) -> Path | None:
    """data/ as committed, for a test about the committed datasets' own numbers: None (data/
    itself) when git tracks every run in it, else a copy without the runs a reader's make all
    added (on a clone of a committed host, those pool with its committed runs)."""
    extra = readers_runs()
    if not extra:
        return None
    dst = tmp_path_factory.mktemp("committed") / "data"

    def ignore(d, names):
        return [n for n in names if n.startswith(".") or Path(d, n) in extra]

    shutil.copytree(ROOT / "data", dst, ignore=ignore)
    return dst


@pytest.fixture(params=BOOK_DATA)
def book_data(request, book_datasets) -> BookData:
    """The book's data in each state a reader's clone holds it (BOOK_DATA)."""
    return book_datasets(request.param)


# ---- every figure each chapter's notebook shows (nb.figure key -> how it is made) -------------

FIGURES = {
    "trace_overhead": {
        "costs": "costs",
        "seed_comparison": "seed_comparison",
        "published": "published",
    },
    "qemu_cache_modes": {
        "bench": "bench",
        "guest_dd": "guest_dd",
        "pagecache": "pagecache",
        "hosts": "hosts",
    },
    "qcow2_overlap": {"prealloc": "prealloc", "modes": "modes", "formula": "formula"},
    "virtio_blk_latency": {
        "delta_bars": "delta_bars",
        "cdfs": "cdfs",
        "lifecycle_timeline": "lifecycle_timeline",
    },
    "virtio_blk_iothread": {"iops": "iops", "cpu": "cpu", "hosts": "hosts"},
    "virtio_features": {"block_bits": "block_bits", "type_bits": "type_bits"},
    "tsc_alignment": {
        "pingpong": "pingpong",
        "inside": "inside",
        "widths": "widths",
        "timeline": "timeline",
    },
    "netperf_latency": {
        "exceedance": "exceedance",
        "ladder": "ladder",
        "seed_histogram": "seed_histogram",
    },
    "cpu_pinning": {
        "results": "results",
        "migrations": "migrations",
        "core_balance": "core_balance",
        "hosts": "hosts",
    },
    "sched_callers": {"callers_hackbench": "callers", "probe_effect": "probe_effect"},
    "iostat_internals": {
        k: k
        for k in ("timeseries", "disagreement", "little", "latency", "saturation", "hosts_iops")
    },
}
IOSTAT_FIGURES = tuple(FIGURES["iostat_internals"])
# the cross-host figures: this host, the reference host and the other hosts in their roles
CROSS_HOST = {("trace_overhead", k) for k in ("costs", "seed_comparison", "published")} | {
    ("iostat_internals", "hosts_iops"),
    ("qemu_cache_modes", "hosts"),
    ("qcow2_overlap", "prealloc"),
    ("qcow2_overlap", "modes"),
    ("tsc_alignment", "pingpong"),
    ("tsc_alignment", "inside"),
    ("tsc_alignment", "widths"),
    ("netperf_latency", "exceedance"),
    ("netperf_latency", "ladder"),
    ("netperf_latency", "seed_histogram"),
    ("cpu_pinning", "hosts"),
    ("sched_callers", "probe_effect"),
    ("virtio_blk_iothread", "hosts"),
}
HEATMAP = {("virtio_features", "block_bits")}  # roles are columns of a grid, not marks


def makers(entry, D) -> dict:
    """nb.figure key -> a function that makes that (figure, caption) of a chapter's Data."""
    args = {"callers_hackbench": ("hackbench",)}
    figures = entry.load().part("figures")  # a chapter's __init__ need not import its figures
    return {
        k: (lambda fn=getattr(figures, fn), a=args.get(k, ()): fn(D, *a))
        for k, fn in FIGURES[entry.name].items()
    }


def legend_texts(fig) -> list[str]:
    """The entries of every legend of a figure (the figure's and its axes')."""
    return [t.get_text() for lg in fig.legends for t in lg.get_texts()] + [
        t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()
    ]


def figure_colours(fig) -> set:
    """Every colour a figure's marks use (lines, markers, collections), as RGB tuples."""
    from matplotlib.colors import to_rgba

    out = set()
    for ax in fig.axes:
        for ln in ax.get_lines():
            for c in (ln.get_color(), ln.get_markerfacecolor()):
                try:
                    out.add(tuple(round(v, 3) for v in to_rgba(c)[:3]))
                except ValueError:
                    pass
        for col in ax.collections:
            for arr in (col.get_facecolors(), col.get_edgecolors()):
                for c in arr:
                    out.add(tuple(round(float(v), 3) for v in c[:3]))
    return out


def rgb(colour) -> tuple:
    from matplotlib.colors import to_rgba

    return tuple(round(v, 3) for v in to_rgba(colour)[:3])


# What a reader must never find in a prose value, a caption or a findings block: a number that
# is missing printed as such (nan, inf, <NA>), a sign left without its number, a Python repr (a
# numpy scalar, a list or dict, a string still in its quotes).
DEBRIS = re.compile(
    r"(?<![\w.-])(?:nan|NaN|inf|<NA>)(?![\w-])|\+-|np\.float64|\[\s*'|\{\s*'"
    r"|^(['\"]).*\1$",
    re.S,
)


def debris(text) -> list[str]:
    """The debris (DEBRIS) in a text, each with a little of its context."""
    text = str(text)
    return [text[max(0, m.start() - 60) : m.end() + 30] for m in DEBRIS.finditer(text)]


def prose_values(entry, D) -> dict:
    """Every value a chapter's prose quotes, as its notebook glues them (nb.glue_all)."""
    return prose_function(entry.name)(D)


def prose_function(name: str):
    """The chapter's function of every value its prose quotes: values() of its prose module
    (the chapter shape of tools/README.md), else the package's older findings(); None: neither."""
    import importlib
    import importlib.util

    module = f"perfbook.chapters.{name}"
    if importlib.util.find_spec(f"{module}.prose") is not None:
        f = getattr(importlib.import_module(f"{module}.prose"), "values", None)
        if callable(f):
            return f
    f = getattr(importlib.import_module(module), "findings", None)
    return f if callable(f) else None


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


# The synthetic fleet (perfbook.dev.synthfleet) in the copy the book is built in: how many hosts.
# 12 in `make test` (more hosts than a legend or a drop-down may list, in a few minutes);
# `make test-fleet` builds the 100-host fleet (about 15 minutes on 2 cores); 0: the committed
# data alone (tests/test_new_chapter.py's copy, which checks its new chapter's page).
FLEET_HOSTS = int(os.environ.get("PERFBOOK_TEST_FLEET", "12"))


@pytest.fixture(scope="session")
def built_book(tmp_path_factory, pytestconfig):
    """The book, built once per session with Sphinx warnings as errors (the `make book` flags),
    in a SCRATCH COPY of this checkout (perfbook.dev.bench's scratch_checkout: never this
    checkout's data/, build/ or _build/) whose data/runs also holds FLEET_HOSTS synthetic hosts
    (`python -m perfbook synthfleet N DEST`, then moved in), with hosts.ipynb re-executed there
    on that data (papermill, in place). The chapters keep their stored outputs: only their
    Datasets sections and the hosts page follow data/, so every page is checked as committed
    and the hosts page and the archives at a fleet's scale, from one build (tests/test_book.py,
    tests/test_site_browser.py). Returns (returncode, log, html dir, the copy, its data dir,
    number of synthetic hosts, failed step, repository url and branch of the launch buttons)."""
    import subprocess
    import sys
    from types import SimpleNamespace

    from perfbook.dev.bench import check_copy, copy_env, scratch_checkout

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
            say.write_line(f"[the book] {what} ...")
        r = subprocess.run([str(c) for c in cmd], cwd=repo, env=env, capture_output=True, text=True)
        killed = f"(killed by signal {-r.returncode})\n" if r.returncode < 0 else ""
        log.append(f"$ {' '.join(map(str, cmd))}\n{r.stdout}{r.stderr}{killed}")
        return r.returncode

    def result(rc, failed=""):
        return SimpleNamespace(
            returncode=rc,
            log="\n".join(log),
            html=out / "_build" / "html",
            repo=repo,
            data=repo / "data",
            hosts=FLEET_HOSTS,
            failed=failed,
            repository_url=env["PERFBOOK_REPOSITORY_URL"].rstrip("/").removesuffix(".git"),
            branch=env["PERFBOOK_REPOSITORY_BRANCH"] or "main",
        )

    if FLEET_HOSTS and step(
        f"generating {FLEET_HOSTS} synthetic hosts",
        [sys.executable, "-m", "perfbook", "synthfleet", FLEET_HOSTS, fleet],
    ):
        return result(1, "synthfleet")
    for host in sorted((fleet / "runs").iterdir()) if FLEET_HOSTS else ():
        shutil.move(str(host), str(repo / "data" / "runs" / host.name))
    if FLEET_HOSTS and step(
        "re-executing hosts.ipynb on the fleet",
        [
            bindir / "papermill",
            "hosts.ipynb",
            "hosts.ipynb",
            "-k",
            "python3",
            "--cwd",
            repo,
            "--no-progress-bar",
            "--log-level",
            "WARNING",
        ],
    ):
        return result(1, "hosts.ipynb")
    rc = step(
        "building the book",
        [bindir / "jupyter-book", "build", repo, "--path-output", out, "-W", "-n", "--keep-going"],
    )
    return result(rc, "jupyter-book build" if rc else "")


def scratch_owner(d: Path) -> int | None:
    """The pid in a scratch directory's 'owner' file (the convention of perfbook.hoststate.scratch)."""
    try:
        return int((d / "owner").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def need_guest():
    """Skip unless the tiny QEMU guest (perfbook.qemu.guest) can boot here."""
    from perfbook.qemu import guest

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

    from perfbook.qemu import guest

    r = subprocess.run(["pgrep", "-P", str(pid), "-f", guest.QEMU], capture_output=True, text=True)
    return r.stdout.split()


def owned_by(pid: int) -> list[Path]:
    """The guest scratch directories that process pid owns."""
    from perfbook.hoststate.scratch import live_dirs

    out = []
    for d in live_dirs("guest"):
        try:
            if int((d / "owner").read_text().split()[0]) == pid:
                out.append(d)
        except (OSError, ValueError, IndexError):
            pass
    return out


# ---- a notebook that keeps its kernel busy, for kernel and signal tests -------------------


def ticker_notebook(path: Path) -> Path:
    """A one-cell notebook whose kernel writes its connection info to $PERFBOOK_TEST_CONN
    (atomically), then prints a tick every 0.1 s until $PERFBOOK_TEST_CONN.stop exists (at
    most 120 s): a kernel that publishes on its output channel while a test looks at it."""
    import nbformat

    code = (
        "# NBVAL_IGNORE_OUTPUT\n"
        "import os, time\n"
        "from ipykernel.connect import get_connection_info\n"
        "conn = os.environ['PERFBOOK_TEST_CONN']\n"
        "with open(conn + '.tmp', 'w') as f:\n"
        "    f.write(get_connection_info())\n"
        "os.rename(conn + '.tmp', conn)\n"
        "deadline = time.monotonic() + 120\n"
        "while not os.path.exists(conn + '.stop') and time.monotonic() < deadline:\n"
        "    print('tick', flush=True)\n"
        "    time.sleep(0.1)\n"
    )
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, str(path))
    return path


def wait_for_file(path: Path, proc, timeout: float = 120) -> None:
    """Wait until `path` exists; fail with proc's output if proc ends first or time runs out."""
    import time

    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out = proc.communicate()
            pytest.fail(
                f"{path.name} never appeared (exit {proc.returncode}):\n"
                + "".join(o or "" for o in out)[-3000:]
            )
        time.sleep(0.1)


def processes_with_env(marker: str) -> list[int]:
    """Live processes whose environment holds `marker` (NAME=value): what a run under test
    started, however it was started (a kernel, a zygote, a child in a session of its own)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker.encode() in (d / "environ").read_bytes().split(b"\0"):
                    out.append(int(d.name))
            except OSError:
                pass
    return out


def short_state_dir() -> Path:
    """A private PERFBOOK_STATE_DIR under /tmp with a short path: a kernel's Unix sockets live
    in it, and a socket's path has at most 107 bytes (pytest's tmp_path can be longer)."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix="pbk-", dir="/tmp"))


def stop_with(p, sig: int, target: str, timeout: float = 90) -> tuple[str, str]:
    """Send `sig` to `p`'s process group ("group", as the terminal's Ctrl-C does) or to `p`
    alone ("parent"), wait for it, and check the contract of every signal exit: status 128 +
    the signal's number, and stderr is one line that names the signal. Returns (out, err)."""
    import signal

    if target == "group":
        os.killpg(p.pid, sig)
    else:
        os.kill(p.pid, sig)
    out, err = p.communicate(timeout=timeout)
    name = signal.Signals(sig).name
    assert p.returncode == 128 + sig, (
        f"exit {p.returncode} after {name} to the {target}:\n{out}{err}"
    )
    assert len(err.splitlines()) == 1 and f"interrupted by {name}" in err, err
    return out, err


# ---- tiers (pyproject.toml's markers; `make test-unit`, `test-notebooks`, `test-site`, `test-live`)
NOTEBOOK_TESTS = {"test_rerun_story.py"}  # files whose every test executes notebooks
SITE_TESTS = {"test_book.py", "test_site_browser.py"}  # the book built, or opened in a browser
OTHER_TIERS = {"notebooks", "site", "live", "slow"}
# What a test reaches (its body, the functions of its module and of this file it calls, and the
# fixtures defined there that it asks for) decides its tier when no marker does: a name of
# LIVE makes it live (root, kernel state, a collect, a guest), one of SPAWN slow (a child
# process, a notebook kernel, a copy of the checkout, a synthetic fleet). Anything else runs in this process: unit.
LIVE = {
    "need_root", "need_guest", "need_preflight", "root_tracefs", "measure_lock", "TraceSession",
    "collect", "ensure_artefacts", "Runner", "bpftrace",
}  # fmt: skip
SPAWN = {
    "subprocess", "Popen", "check_output", "fork", "papermill", "NotebookClient", "nbclient",
    "scratch_checkout", "run_cli", "as_nobody", "sleep", "_serve", "webdriver", "Zygote",
    "execute_notebook", "synthfleet",
}  # fmt: skip


def _runs_a_collect(node) -> bool:
    """A literal that starts a collect in a child: a command line holding `measure` or `collect`
    (`perfbook measure ...`), a notebook's `{"mode": "collect"}`, the fleet playbook."""
    import ast

    def s(n):
        return n.value if isinstance(n, ast.Constant) and isinstance(n.value, str) else None

    if isinstance(node, ast.List | ast.Tuple):
        return any(s(e) in ("measure", "collect") for e in node.elts)
    if isinstance(node, ast.Dict):
        return any(s(k) == "mode" and s(v) == "collect" for k, v in zip(node.keys, node.values))
    return s(node) == "ansible-playbook"


def _reach(path: Path, name: str, fixtures, cache={}) -> set[str]:  # noqa: B006 - a memo
    """The identifiers test `name` of `path` reaches through its module's and this file's
    functions and fixtures (ast; nothing is run)."""
    import ast

    def defs(p: Path) -> dict:
        if p not in cache:
            tree = ast.parse(p.read_text())
            cache[p] = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        return cache[p]

    scope = {**defs(Path(__file__)), **defs(path)}
    seen, todo, names = set(), [name, *fixtures], set()
    while todo:
        fn = todo.pop()
        if fn in seen or fn not in scope:
            continue
        seen.add(fn)
        for node in ast.walk(scope[fn]):
            ident = node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)
            if isinstance(node, ast.arg):
                ident = node.arg
            if _runs_a_collect(node):
                ident = "collect"
            if ident:
                names.add(ident)
                todo.append(ident)
    return names


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """Each test gets its tier: nbval's items and NOTEBOOK_TESTS are notebooks, SITE_TESTS site,
    a test marked root, or reaching LIVE, live; one reaching SPAWN slow; the rest unit. Then
    its group for pytest-xdist (_group), and the groups are put in the order they should start."""
    _tiers(items)
    grouped = getattr(config.option, "loadgroup", False)  # a --dist loadgroup worker
    tiers = [_tier(item) for item in items]
    groups = [_group(item, tier) for item, tier in zip(items, tiers)]
    rank = {}
    for item, tier, group in zip(items, tiers, groups):
        rank[group] = min(rank.get(group, 9), _RANK[tier])
        if grouped:
            _join(item, group)
    order = sorted(range(len(items)), key=lambda i: rank[groups[i]])  # stable: groups keep order
    items[:] = [items[i] for i in order]


def _join(item, group: str) -> None:
    """Put item in xdist group `group`: the scheduler reads the group from the node id's
    "@group" suffix. pytest-xdist 3.8.0 writes that suffix into Node._nodeid, which pytest 9.2
    no longer reads (its node ids are structured: Node._id), so every test would be scheduled
    on its own (pytest-xdist issue 1386; pull request 1388 does this). Harmless once fixed:
    the scheduler splits at the last "@"."""
    from _pytest.nodeid import coerce_node_id

    item.add_marker(pytest.mark.xdist_group(group))
    item._id = coerce_node_id(f"{item.nodeid}@{group}")


# `make test` runs the tests in parallel (pytest-xdist, --dist loadgroup; the Makefile says how
# many workers): a group runs on one worker, in its order, and the groups start in this order of
# their tiers: the live tests first, as one group (one at a time: they change the kernel's state
# and take the machine-wide lock, and they take the longest), then the site's (the session's
# book builds, made once), then the others, a group per file (its fixtures made once, a
# notebook's cells in one kernel).
_RANK = {"live": 0, "site": 1, "notebooks": 2, "slow": 3, "unit": 4}


def _tier(item) -> str:
    """The first of its tiers in _RANK's order: test_book.py's build test, marked slow and
    given site by _tiers, is site (in the site group, which builds the book once), not slow."""
    return min((m.name for m in item.iter_markers() if m.name in _RANK), key=_RANK.get)


# Live tests that measure in a scratch copy or data directory of their own, through the
# machine-wide lock like any run (they wait for the live group's run of the moment), and check
# nothing machine-wide (no mount, no knob, no other run's leftovers): each file is a group of
# its own, beside the live group, rather than in it (the new chapter's steps and the fleet
# playbook took 60 s and 55 s of the live group, the longest, in a run on 2 CPUs)
BESIDE_LIVE = {"test_new_chapter.py", "test_fleet.py"}


def _group(item, tier: str) -> str:
    if tier == "site" or (tier == "live" and item.path.name not in BESIDE_LIVE):
        return tier
    return item.path.name


def _tiers(items) -> None:
    for item in items:
        name = item.path.name
        if item.path.suffix == ".ipynb" or name in NOTEBOOK_TESTS:
            item.add_marker(pytest.mark.notebooks)
        elif name in SITE_TESTS:
            item.add_marker(pytest.mark.site)
        marks = {m.name for m in item.iter_markers()}
        if marks & OTHER_TIERS:
            continue
        reach = set()
        if item.path.suffix == ".py" and hasattr(item, "originalname"):
            reach = _reach(item.path, item.originalname, getattr(item, "fixturenames", ()))
        if "root" in marks or reach & LIVE:
            item.add_marker(pytest.mark.live)
        elif reach & SPAWN:
            item.add_marker(pytest.mark.slow)
        else:
            item.add_marker(pytest.mark.unit)


@pytest.fixture(autouse=True)
def _environment_leak_check():
    """A test leaves perfbook's environment variables as it found them: code under test that
    sets one (a benchmark's switch, the nbval plugin's configure) would otherwise change every
    later test (a verdict store off, kernels never forked from the zygote)."""
    before = {k: v for k, v in os.environ.items() if k.startswith("PERFBOOK_")}
    yield
    after = {k: v for k, v in os.environ.items() if k.startswith("PERFBOOK_")}
    if after != before:
        for k in set(after) - set(before):
            del os.environ[k]
        os.environ.update(before)
        changed = sorted(set(before.items()) ^ set(after.items()))
        pytest.fail(f"the test left perfbook's environment changed: {changed}")
