"""No local user can turn a root measure run against the machine.

The attacks run as the unprivileged user `nobody` (uid 65534) against state a root run
uses: the lock, the tracefs registry, the scratch parent, planted symlinks and crafted
holder lines. Each must end in a one-line refusal or a safe wait, and no file outside
our private directories may change. The attacker tests need root to become `nobody`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import NOBODY, ROOT, as_nobody, need_root
from perfbook.core.errors import LockBusy
from perfbook.hoststate import lock, statedir


@pytest.fixture
def victim(tmp_path):
    """A root-owned file of mode 0600 that no run of ours may touch."""
    v = tmp_path / "victim"
    v.write_text("precious\n")
    v.chmod(0o600)
    return v


@pytest.fixture
def world():
    """A world-writable sticky directory, like /run/lock or /var/tmp (under /tmp, so that
    another user can reach it)."""
    import shutil
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="perfbook-test-world-", dir="/tmp"))
    d.chmod(0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


# ---- the private directory itself -------------------------------------------------------


def test_state_dir_is_private_and_tightened(tmp_path, monkeypatch):
    d = tmp_path / "state"
    d.mkdir(mode=0o777)
    d.chmod(0o777)
    monkeypatch.setenv("PERFBOOK_STATE_DIR", str(d))
    assert statedir.state_dir() == d
    assert d.stat().st_mode & 0o777 == 0o700, "a loose mode of our own directory is tightened"


def test_symlinked_state_dir_is_refused(tmp_path, monkeypatch, victim):
    link = tmp_path / "state"
    link.symlink_to(victim.parent)
    monkeypatch.setenv("PERFBOOK_STATE_DIR", str(link))
    with pytest.raises(statedir.UnsafePath, match="symlink"):
        statedir.state_dir()


def test_symlinked_lock_file_is_refused_and_target_untouched(tmp_path, monkeypatch, victim):
    monkeypatch.setenv("PERFBOOK_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "state").mkdir(mode=0o700)
    (tmp_path / "state" / "measure.lock").symlink_to(victim)
    with pytest.raises(statedir.UnsafePath, match="symlink"):
        with lock.measure_lock("test", wait=0):
            pass
    assert victim.read_text() == "precious\n"


def test_flock_holders_reads_the_kernel_table(tmp_path):
    import fcntl

    f = tmp_path / "l"
    fd = os.open(f, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert lock.flock_holders(fd) == [os.getpid()]
        st = os.fstat(fd)
        key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        text = (
            f"1: FLOCK  ADVISORY  WRITE 4242 {key} 0 EOF\n"
            f"1: -> FLOCK  ADVISORY  WRITE 4343 {key} 0 EOF\n"  # a waiter
            f"2: POSIX  ADVISORY  WRITE 4444 {key} 0 EOF\n"  # not a flock
            "3: FLOCK  ADVISORY  WRITE 4545 00:01:1 0 EOF\n"
        )  # another file
        assert lock.flock_holders(fd, text) == [4242]
    finally:
        os.close(fd)


def test_crafted_holder_line_does_not_bypass_the_lock(tmp_path, monkeypatch):
    """The file's text once decided who held the lock ('pid 1' made pid 1 our ancestor and
    the run went on without the lock). Now the holder comes from /proc/locks."""
    monkeypatch.setenv("PERFBOOK_LOCK", str(tmp_path / "lock"))
    hold = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import sys, time; sys.path.insert(0, {str(ROOT)!r})
        from perfbook.hoststate.lock import measure_lock
        with measure_lock('holder', wait=0):
            open({str(tmp_path / "lock")!r}, 'w').write('pid 1 crafted\\n')
            print('held', flush=True); time.sleep(60)
        """),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PERFBOOK_LOCK": str(tmp_path / "lock")},
    )
    try:
        assert hold.stdout.readline().strip() == "held"
        with pytest.raises(LockBusy, match=f"pid {hold.pid} "):
            with lock.measure_lock("test", wait=0):
                pass
    finally:
        hold.kill()
        hold.wait()


# ---- attacks by an unprivileged local user on a root run ----------------------------------


def test_nobody_cannot_reach_the_private_directories():
    need_root("becoming another user")
    state, scratch = statedir.state_dir(), statedir.scratch_parent()
    r = as_nobody(f"""
        import fcntl, os
        out = []
        for path in ({str(state / "measure.lock")!r}, {str(state / "tracefs" / "mounted")!r},
                     {str(scratch / "x")!r}):
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                out.append('OPENED ' + path)
            except PermissionError:
                out.append('denied')
        for path in ({str(state / "planted")!r}, {str(scratch / "planted")!r}):
            try:
                os.symlink('/etc/shadow', path)
                out.append('PLANTED ' + path)
            except PermissionError:
                out.append('denied')
        print(' '.join(out))
        """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["denied"] * 5, r.stdout


def test_planted_paths_are_refused_with_one_line(world, monkeypatch, victim):
    """A user plants our state or scratch path in a world-writable directory before the root
    run creates it: as a symlink to a root file, or as a directory of their own."""
    need_root("becoming another user")
    r = as_nobody(f"""
        import os
        os.symlink({str(victim)!r}, {str(world / "state")!r})
        os.mkdir({str(world / "scratch")!r}, 0o777)
        os.symlink({str(victim)!r}, {str(world / "scratch" / "measure.lock")!r})
        """)
    assert r.returncode == 0, r.stderr
    monkeypatch.setenv("PERFBOOK_STATE_DIR", str(world / "state"))
    monkeypatch.setenv("PERFBOOK_SCRATCH_DIR", str(world / "scratch"))
    with pytest.raises(statedir.UnsafePath) as e:
        statedir.state_dir()
    assert "symlink" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(statedir.UnsafePath) as e:
        statedir.scratch_parent()
    assert "belongs to uid 65534" in str(e.value)
    assert victim.read_text() == "precious\n" and victim.stat().st_uid == 0


def test_root_run_ignores_the_old_world_writable_lock_path(victim, tmp_path, monkeypatch):
    """The lock used to live in /run/lock; a symlink planted there is no longer opened."""
    need_root("becoming another user")
    from perfbook.hoststate.sweep import _legacy_state

    old = Path("/run/lock/perfbook-measure.lock")
    _legacy_state()  # an older version's own lock file goes
    if old.exists() or old.is_symlink():
        pytest.skip(f"{old} exists on this machine; not touching it")
    r = as_nobody(f"import os; os.symlink({str(victim)!r}, {str(old)!r})")
    if r.returncode != 0:
        pytest.skip(f"nobody cannot write /run/lock here: {r.stderr.strip()[-100:]}")
    try:
        monkeypatch.delenv("PERFBOOK_LOCK", raising=False)
        monkeypatch.setenv("PERFBOOK_STATE_DIR", str(tmp_path / "state"))
        with lock.measure_lock("test", wait=0) as path:
            assert path == tmp_path / "state" / "measure.lock"
        assert victim.read_text() == "precious\n"
    finally:
        old.unlink()


def test_sweep_leaves_other_users_scratch_alone(monkeypatch, tmp_path):
    """Only our own directories of dead runs are swept, never another user's, never via a link."""
    need_root("becoming another user")
    from perfbook.hoststate import scratch, sweep

    parent = tmp_path / "scratch"
    monkeypatch.setenv("PERFBOOK_SCRATCH_DIR", str(parent))
    statedir.scratch_parent()
    dead = 2**22 + 12345  # above pid_max's default: never a live pid
    ours = parent / f"demo-{dead}-abc"
    ours.mkdir()
    theirs = parent / f"demo-{dead}-def"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    target = tmp_path / "keep"
    target.mkdir()
    (target / "file").write_text("keep")
    (parent / f"demo-{dead}-lnk").symlink_to(target)
    removed = scratch.sweep(parent)
    assert ours in removed and not ours.exists()
    assert theirs.exists(), "another user's directory was swept"
    assert (target / "file").read_text() == "keep", "the sweep followed a symlink"
    legacy = Path("/var/tmp") / f"perfbook-demo-{dead}"
    r = as_nobody(
        f"import os; os.mkdir({str(legacy)!r}); open({str(legacy / 'owner')!r}, 'w').write('{dead}')"
    )
    assert r.returncode == 0, r.stderr
    try:
        os.utime(legacy, (0, 0))
        sweep._legacy_scratch(print)
        assert legacy.exists(), "a legacy directory of another user was swept"
    finally:
        subprocess.run(["rm", "-rf", str(legacy)])


def test_a_tracefs_mount_recorded_by_an_older_version_is_released():
    """Older versions kept 'we mounted tracefs' in /run/lock/perfbook-tracefs/mounted; the
    sweep that retires that directory must hand the flag over, not orphan the mount."""
    need_root("mounting tracefs")
    from perfbook.hoststate import tracefs
    from perfbook.hoststate.sweep import sweep_all

    if tracefs.find_tracefs() is not None:
        pytest.skip("tracefs is mounted by someone else here; not unmounting it")
    old = Path("/run/lock/perfbook-tracefs")
    if old.exists() or old.is_symlink():
        pytest.skip(f"{old} exists on this machine; not touching it")
    r = subprocess.run(
        ["mount", "-t", "tracefs", "nodev", str(tracefs.DEFAULT_MOUNT)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount tracefs here: {r.stderr.strip()}")
    old.mkdir()
    (old / "mounted").write_text("4242\n")
    try:
        sweep_all(log=lambda s: None)
        assert tracefs.find_tracefs() is None, "the mount an older version recorded was left"
        assert not old.exists()
    finally:
        if tracefs.find_tracefs() is not None:
            subprocess.run(["umount", str(tracefs.DEFAULT_MOUNT)])
        shutil.rmtree(old, ignore_errors=True)


# ---- half-written datasets (issue #43) ----------------------------------------------------

DEAD = 2**22 + 4343  # above pid_max's default: never a live pid


def test_the_dataset_sweep_never_follows_a_symlink(tmp_path, monkeypatch):
    """A dead run's half-written dataset behind a symlink (a data dir's host directory, or a
    directory above a recorded one) is left alone, and so is one of another name."""
    from perfbook.hoststate import sweep

    monkeypatch.setenv("PERFBOOK_STATE_DIR", str(tmp_path / "state"))
    elsewhere = tmp_path / "elsewhere" / "h-x" / "demo" / f".tmp-{DEAD}-20260101T000000Z-abcd"
    elsewhere.mkdir(parents=True)
    (elsewhere / "keep").write_text("keep\n")
    data = tmp_path / "data"
    (data / "runs").mkdir(parents=True)
    (data / "runs" / "h-x").symlink_to(tmp_path / "elsewhere" / "h-x")
    assert sweep._dataset_tmp(data) == []
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    via_link = link / "h-x" / "demo" / elsewhere.name
    rec = statedir.subdir("datasets") / elsewhere.name.lstrip(".")
    statedir.write_file(rec, f"{via_link}\n")
    refused: list[str] = []
    assert sweep._recorded_datasets(refused) == [] and refused == [str(via_link)]
    assert (elsewhere / "keep").read_text() == "keep\n" and rec.exists()
    statedir.write_file(rec, f"{elsewhere.parent / 'not-its-name'}\n")
    assert sweep._recorded_datasets([]) == [] and not rec.exists()
    statedir.write_file(rec, f"{elsewhere}\n")
    assert (
        sweep._recorded_datasets([]) == [str(elsewhere)]
        and not elsewhere.exists()
        and not rec.exists()
    )


# ---- a planted private directory fails the run and is reported by the sweep (issue #43) ----

PY = sys.executable


def _plant(tmp_path) -> tuple[Path, Path]:
    """A symlink where a private directory is to be, and the directory it points to."""
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "planted"
    link.symlink_to(target)
    return link, target


@pytest.mark.parametrize("planted", ["PERFBOOK_SCRATCH_DIR", "PERFBOOK_STATE_DIR"])
def test_a_planted_private_dir_fails_every_chapter_with_one_line(planted, tmp_path):
    """Chapters whose preflight checked the scratch parent said SKIPPED and exited 0 when it
    was planted, as if the host lacked something. Every chapter that can collect here fails
    instead, before measuring, with one line naming the path; the exit is 1 and the summary
    says which chapter failed and why."""
    from perfbook.chapters import CHAPTERS, EXAMPLE

    ready = [c.name for c in CHAPTERS + [EXAMPLE] if not c.load().preflight()]
    if not ready:
        pytest.skip("no chapter can collect here")
    link, target = _plant(tmp_path)
    env = {**os.environ, planted: str(link), "PERFBOOK_BUILD": str(tmp_path / "build")}
    r = subprocess.run(
        [
            PY,
            "-m",
            "perfbook",
            "measure",
            "--chapters",
            ",".join(ready),
            "--profile",
            "quick",
            "--param",
            f"data_dir={tmp_path / 'data'}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=900,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "SKIPPED" not in out and "Traceback" not in out, out
    for name in ready:
        failed = [ln for ln in out.splitlines() if f"] {name}: FAILED: " in ln]
        assert len(failed) == 1 and f"{link} is a symlink" in failed[0], (name, out)
    s = subprocess.run(
        [PY, "-m", "perfbook", "summary"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    ).stdout
    for name in set(ready) - {EXAMPLE.name}:  # the summary's chapters: the book's
        assert re.search(rf"^{name}\s+failed\s+{re.escape(str(link))} is a symlink", s, re.M), s
    assert list(target.iterdir()) == [], "something was written through the planted link"


@pytest.mark.parametrize("planted", ["scratch", "state"])
def test_the_sweep_sweeps_all_else_then_names_a_planted_dir_and_exits_1(planted, tmp_path):
    """`python -m perfbook sweep` stopped (exit 2) at the first private directory it refused,
    before it swept the rest. It sweeps every other kind first, then reports the refused path
    in one line at the end, and exits 1 (perfbook.cli.cmd_sweep says why 1)."""
    link, target = _plant(tmp_path)
    state, scratch_dir = tmp_path / "state", tmp_path / "scratch"
    if planted == "state":  # a dead run's scratch, in the scratch parent that is fine
        scratch_dir.mkdir(mode=0o700)
        left = scratch_dir / f"demo-{DEAD}-abcdefgh"
        left.mkdir()
    else:  # a dead run's kernel connection file, recorded in the state dir
        (state / "kernelfiles").mkdir(parents=True, mode=0o700)
        state.chmod(0o700)
        left = tmp_path / "kernel-dead.json"
        left.write_text("{}\n")
        (state / "kernelfiles" / str(DEAD)).write_text(f"{left}\n")
    env = {
        **os.environ,
        "PERFBOOK_STATE_DIR": str(link if planted == "state" else state),
        "PERFBOOK_SCRATCH_DIR": str(link if planted == "scratch" else scratch_dir),
    }
    r = subprocess.run(
        [PY, "-m", "perfbook", "sweep"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode == 1, lines
    assert not left.exists(), f"the sweep stopped before it removed {left}"
    assert [ln for ln in lines if str(link) in ln] == [lines[-1]] == [r.stderr.strip()], lines
    assert lines[-1].startswith("error: ") and f"{link} is a symlink" in lines[-1]
    assert list(target.iterdir()) == [], "something was written through the planted link"


# ---- notebook kernels: what another user can reach ----------------------------------------

# subscribe to a kernel's output channel (IOPub) with nothing but its address, as the attack
# of issue #43 did: the HMAC key stops tampering, not reading
SUBSCRIBE = """
    import json, sys, zmq
    info = json.loads(sys.argv[1])
    port = info["iopub_port"]
    addr = f"tcp://{info['ip']}:{port}" if info["transport"] == "tcp" else f"ipc://{info['ip']}-{port}"
    s = zmq.Context().socket(zmq.SUB)
    s.linger = 0
    s.subscribe(b"")
    s.connect(addr)
    print("READ" if s.poll(5000) else "NOTHING")
    """


def _kernel_clients(nb: Path, out: Path) -> dict:
    """How each of our notebook clients starts a kernel on `nb`: papermill's CLI as the README
    gives it, nbval as `make test` runs it, and `python -m perfbook refresh`'s own way (a kernel
    forked from its zygote; refresh only runs the chapters, so its code is called here)."""
    refresh = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        import nbformat
        from perfbook.book.jupyter import execute as nbrun, zygote as warmkernel
        nb = nbformat.read({str(nb)!r}, as_version=4)
        with warmkernel.warm_kernels(), nbrun.interruptible():
            nbrun.execute(nb, {str(nb.parent)!r})
        """)
    return {
        "papermill": [
            str(Path(sys.executable).with_name("papermill")),
            str(nb),
            str(out),
            "--no-progress-bar",
            "--log-level",
            "WARNING",
        ],
        "nbval": [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(ROOT / "pyproject.toml"),
            "-q",
            "-p",
            "no:cacheprovider",
            str(nb),
            "--nbval",
            "--nbval-current-env",
        ],
        "refresh": [sys.executable, "-c", refresh],
    }


@pytest.mark.parametrize("client", ["papermill", "nbval", "refresh"])
def test_nobody_cannot_read_a_root_notebook_kernel(client, tmp_path):
    """A root papermill collect's kernel talked TCP on 127.0.0.1, and user nobody subscribed to
    its output channel and read every message. Each client's kernel must be unreachable to
    another user; root (the control) reads it with the same code."""
    need_root("becoming another user")
    from conftest import short_state_dir, ticker_notebook, wait_for_file

    state = short_state_dir()
    conn = tmp_path / "conn.json"
    nb = ticker_notebook(tmp_path / "ticker.ipynb")
    env = {
        k: v for k, v in os.environ.items() if k != "JUPYTER_DEFAULT_PROVISIONER_NAME"
    }  # as a shell has it
    p = subprocess.Popen(
        _kernel_clients(nb, tmp_path / "out.ipynb")[client],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**env, "PERFBOOK_STATE_DIR": str(state), "PERFBOOK_TEST_CONN": str(conn)},
    )
    try:
        wait_for_file(conn, p)
        info = conn.read_text()
        root = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(SUBSCRIBE), info],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert root.stdout.strip() == "READ", (
            f"the control read nothing: {root.stdout}{root.stderr}"
        )
        attack = as_nobody(SUBSCRIBE, args=[info], site=True)
        assert attack.stdout.strip() == "NOTHING", (
            f"user nobody read the {client} kernel's output channel "
            f"({json.loads(info)['transport']} {json.loads(info)['ip']}): {attack.stdout}{attack.stderr}"
        )
    finally:
        Path(f"{conn}.stop").touch()
        try:
            p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
        shutil.rmtree(state, ignore_errors=True)
