"""Datasets are atomic, never overwritten, and publish no identifying facts."""

import errno
import json
import os
import pwd
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from perfbook.book import validation
from perfbook.core.errors import DatasetError
from perfbook.data import dataset, hostinfo, writer
from perfbook.data.dataset import load_manifest, table_path
from perfbook.hoststate import lock


def _write(data, run_id="20260101T000000Z", fail=False):
    with writer.DatasetWriter("unit", data, {"x": 1}, run_id=run_id) as w:
        w.add_table("samples", pd.DataFrame({"a": [1, 2]}))
        if fail:
            raise RuntimeError("boom")
    return w.published


def test_publish_and_load(scratch_data):
    out = _write(scratch_data)
    assert (table_path(out, "samples") is not None) and (out / "manifest.json").is_file()
    df = dataset.load_table("unit", "samples", scratch_data)
    assert list(df.columns) == ["host_id", "run_id", "a"] and len(df) == 2
    man = dataset.load_manifests("unit", scratch_data)[0]
    for key in ("host", "tools", "parameters", "started", "finished", "git"):
        assert key in man
    for key in (
        "cpu_model",
        "cpus_online",
        "kernel_release",
        "virtualization",
        "clocksource",
        "tsc_flags",
    ):
        assert key in man["host"]


def test_failure_leaves_nothing(scratch_data):
    with pytest.raises(RuntimeError):
        _write(scratch_data, fail=True)
    assert not any(p for p in (scratch_data / "runs").rglob("*") if p.is_file())
    assert dataset.list_runs("unit", scratch_data) == []


def test_never_overwrites(scratch_data):
    _write(scratch_data)
    with pytest.raises(DatasetError, match="refusing to overwrite"):
        _write(scratch_data)
    assert len(dataset.list_runs("unit", scratch_data)) == 1


def test_unwritable_data_dir_is_a_clear_error(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "runs").write_text("a file where a directory should be")
    with pytest.raises(DatasetError, match="not writable"):
        _write(ro)


FAKE_USER, FAKE_HOST = "pbfakeuser93x", "pbfakehost93x"
FAKE_HOME = f"/home/{FAKE_USER}"


def _real_identifying_facts() -> set[str]:
    """This machine's names and addresses, as the system reports them (also under sudo)."""
    facts = {socket.gethostname(), os.uname().nodename}
    for path in (
        "/etc/hostname",
        "/etc/machine-id",
        "/var/lib/dbus/machine-id",
        "/sys/class/dmi/id/product_uuid",
        "/sys/class/dmi/id/product_serial",
    ):
        try:
            facts.add(open(path).read().strip())
        except OSError:
            pass
    me = pwd.getpwuid(os.getuid())
    facts |= {me.pw_dir, os.path.expanduser("~")}
    if me.pw_name != "root":  # "root" names a role, not a person; /root is still checked
        facts.add(me.pw_name)
    sudo_user = os.environ.get("SUDO_USER")
    if sudo_user and sudo_user != "root":
        facts.add(sudo_user)
        try:
            facts.add(pwd.getpwnam(sudo_user).pw_dir)
        except KeyError:
            pass
    for addr in __import__("glob").glob("/sys/class/net/*/address"):
        mac = open(addr).read().strip()
        if mac and mac.strip("0:"):
            facts |= {mac, mac.upper()}
    try:
        out = subprocess.run(
            ["ip", "-o", "addr"], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    for line in out.splitlines():
        f = line.split()
        if len(f) > 3 and f[2] in ("inet", "inet6"):
            ip = f[3].split("/")[0]
            if not ip.startswith("127.") and ip != "::1":
                facts.add(ip)
    return {x for x in facts if x and x not in ("/", "localhost", "(none)")}


def _leaks(text: str, facts: set[str]) -> list[str]:
    """Facts found in text as a whole token (so host 'vm' is not found in 'kvm')."""
    import re

    return sorted(
        f for f in facts if re.search(r"(?<![\w.:-])" + re.escape(f) + r"(?![\w.:-])", text)
    )


def test_manifest_has_no_identifying_facts(scratch_data, monkeypatch):
    # Distinctive fake identities wherever Python code could pick them up, so the test
    # means something as root too; the real ones are checked as well.
    import platform

    for var in ("USER", "LOGNAME", "SUDO_USER", "USERNAME"):
        monkeypatch.setenv(var, FAKE_USER)
    monkeypatch.setenv("HOME", FAKE_HOME)
    monkeypatch.setenv("HOSTNAME", FAKE_HOST)
    for var in ("PERFBOOK_HOST_LABEL", "PERFBOOK_HOST_NOTE", "PERFBOOK_HOST_ID"):
        monkeypatch.delenv(var, raising=False)
    real_uname, real_getpwuid = os.uname(), pwd.getpwuid
    monkeypatch.setattr(socket, "gethostname", lambda: FAKE_HOST)
    monkeypatch.setattr(
        os,
        "uname",
        lambda: os.uname_result(
            (
                real_uname.sysname,
                FAKE_HOST,
                real_uname.release,
                real_uname.version,
                real_uname.machine,
            )
        ),
    )
    monkeypatch.setattr(platform, "_uname_cache", None, raising=False)
    monkeypatch.setattr(
        pwd,
        "getpwuid",
        lambda uid: pwd.struct_passwd(
            (FAKE_USER, "x", uid, real_getpwuid(uid).pw_gid, FAKE_USER, FAKE_HOME, "/bin/sh")
        ),
    )
    fakes = {FAKE_USER, FAKE_HOME, FAKE_HOST}
    text = (_write(scratch_data) / "manifest.json").read_text()
    monkeypatch.undo()  # the real facts, read without the fakes
    facts = _real_identifying_facts() | fakes
    for f in facts:  # the check itself finds each fact where it is
        assert _leaks(json.dumps({"k": f"at {f}, here"}), {f}) == [f]
    assert _leaks(text, facts) == [], "manifest leaks identifying facts"
    assert not any(ch in text for ch in ("ether ", "inet "))
    man = json.loads(text)
    assert man["host"]["host_id"].startswith("h-")


def test_host_id_is_stable_and_overridable(monkeypatch):
    a, b = hostinfo.host_id(), hostinfo.host_id()
    assert a == b
    monkeypatch.setenv("PERFBOOK_HOST_ID", "lab-box-2")
    assert hostinfo.host_id() == "lab-box-2"
    monkeypatch.setenv("PERFBOOK_HOST_ID", "../evil")
    with pytest.raises(Exception, match="not a valid id"):
        hostinfo.host_id()


HOLD = """
import sys, time
from perfbook.hoststate.lock import measure_lock
with measure_lock('holder', wait=0):
    print('held', flush=True)
    time.sleep(60)
"""
TRY = """
from perfbook.hoststate.lock import measure_lock
from perfbook.core.errors import LockBusy
try:
    with measure_lock('t', wait=0): print('got it')
except LockBusy as e: print('busy:', e)
"""


def test_lock_excludes_a_second_process(tmp_path):
    env = {**os.environ, "PERFBOOK_LOCK": str(tmp_path / "lock")}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        r = subprocess.run([sys.executable, "-c", TRY], capture_output=True, text=True, env=env)
        # the holder is named from /proc/locks (the kernel), not from the file's text
        assert r.stdout.startswith("busy:") and f"pid {holder.pid} " in r.stdout, (
            r.stdout + r.stderr
        )
    finally:
        holder.kill()
        holder.wait()
    r = subprocess.run([sys.executable, "-c", TRY], capture_output=True, text=True, env=env)
    assert r.stdout.strip() == "got it", "a dead holder's lock is released (flock)"


def test_lock_is_reentrant_and_passes_to_children(tmp_path, monkeypatch):
    """`python -m perfbook measure` holds the lock while papermill's kernel, its
    child, runs collect(): the child must not wait for its own parent."""
    monkeypatch.setenv("PERFBOOK_LOCK", str(tmp_path / "lock"))
    with lock.measure_lock("outer", wait=0):
        with lock.measure_lock("inner", wait=0):
            pass
        r = subprocess.run(
            [sys.executable, "-c", TRY], capture_output=True, text=True, env={**os.environ}
        )
        assert r.stdout.strip() == "got it", r.stdout + r.stderr


def test_newest_prefers_real_runs_and_shown_datasets_pick_one_per_host():
    import pandas as pd

    from perfbook.data.dataset import migrate, only_shown, shown_datasets
    from perfbook.data.dataset import quoted as newest

    ms = [
        migrate({"schema": 1, "host": {"host_id": h}, "run_id": r, "tables": {}, "parameters": p})
        for h, r, p in [
            ("h-a", "r1", {"profile": "default"}),
            ("h-a", "r3", {"profile": "quick"}),
            ("h-b", "r2", {}),  # no profile: an older run
            ("h-c", "r4", {"profile": "quick"}),
        ]
    ]
    assert newest(ms)["run_id"] == "r1", "a run of a known real profile comes first"
    assert newest(ms[1:])["run_id"] == "r2", "then one that does not record its profile"
    assert newest(ms[:2])["run_id"] == "r1", "a newer quick run does not replace a real one"
    assert newest([ms[1]])["run_id"] == "r3" and newest([]) is None
    assert shown_datasets(ms) == {"h-a": "r1", "h-b": "r2", "h-c": "r4"}
    assert shown_datasets(ms, ref=ms[1])["h-a"] == "r3"
    df = pd.DataFrame(
        {"host_id": ["h-a", "h-a", "h-b", "h-c"], "run_id": ["r1", "r3", "r2", "r4"], "x": range(4)}
    )
    assert only_shown(df, ms).x.tolist() == [0, 2, 3]


def test_guest_boot_params_are_checked():
    from perfbook.core.errors import ParameterError
    from perfbook.qemu.guest import check_boot_params

    p = check_boot_params({"accel": "tcg", "kvm_boot_timeout": 10, "boot_timeout": 60})
    assert p["boot_timeout"] == 60.0 and isinstance(p["kvm_boot_timeout"], float)
    for bad in (
        {"accel": "xen"},
        {"kvm_boot_timeout": 0},
        {"boot_timeout": True},
        {"boot_timeout": 1000},
    ):
        with pytest.raises(ParameterError):
            check_boot_params({"accel": "auto", "kvm_boot_timeout": 10, "boot_timeout": 60, **bad})
    assert check_boot_params({"accel": "auto", "kvm_boot_timeout": 10, "boot_timeout": 1000}, 1800)


# ---- validation on load: one line that names the file --------------------------------------


def _copy_committed(dst: Path) -> Path:
    """A scratch data dir holding one committed trace_overhead dataset; returns that run dir."""
    import shutil

    from perfbook.data.dataset import list_runs

    src = list_runs("trace_overhead")[0]
    run = dst / "runs" / src.parent.parent.name / "trace_overhead" / src.name
    shutil.copytree(src, run)
    return run


def _validate_cli(data: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "perfbook", "validate", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )


def test_corrupt_manifest_is_one_line_naming_the_file(tmp_path):
    run = _copy_committed(tmp_path)
    assert _validate_cli(tmp_path).returncode == 0
    text = (run / "manifest.json").read_text()
    (run / "manifest.json").write_text(text[: len(text) // 2])
    r = _validate_cli(tmp_path)
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stdout + r.stderr
    assert str(run / "manifest.json") in lines[0] and "not valid JSON" in lines[0]


def test_truncated_table_is_refused_not_quoted(tmp_path):
    """178 of 600 rows and a malformed last row were once accepted as a dataset."""
    import lzma

    from perfbook.data.dataset import load_table

    run = _copy_committed(tmp_path)
    p = table_path(run, "samples")
    rows = lzma.decompress(p.read_bytes()).decode().splitlines()
    p.write_bytes(lzma.compress(("\n".join(rows[:179]) + "\n" + rows[179][:7] + "\n").encode()))
    with pytest.raises(DatasetError) as e:
        load_table("trace_overhead", "samples", tmp_path)
    assert str(p) in str(e.value) and "\n" not in str(e.value)
    r = _validate_cli(tmp_path)
    assert r.returncode == 2 and str(p) in r.stderr


def test_validation_reads_a_dataset_again_only_when_its_files_change(tmp_path, monkeypatch):
    """At 100 hosts, reading every table before the notebooks took 50 s of each refresh: a
    dataset that passed is not read again while its files and the code stay the same."""
    monkeypatch.setenv("PERFBOOK_BUILD", str(tmp_path / "build"))
    run = _copy_committed(tmp_path)
    calls, real = [], validation.read_table
    monkeypatch.setattr(
        validation, "read_table", lambda *a, **k: calls.append(a[1]) or real(*a, **k)
    )
    assert validation.validate_all(tmp_path, names={"trace_overhead"}) == 1
    read = len(calls)
    assert read == len(load_manifest(run)["tables"]) > 0
    assert validation.validate_all(tmp_path, names={"trace_overhead"}) == 1
    assert len(calls) == read  # nothing read again
    monkeypatch.setenv("PERFBOOK_VERDICT_STORE", "off")
    validation.validate_all(tmp_path, names={"trace_overhead"})
    assert len(calls) == 2 * read  # the switch reads everything
    monkeypatch.delenv("PERFBOOK_VERDICT_STORE")
    p = table_path(run, "samples")  # a table cut short after it passed
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    with pytest.raises(DatasetError, match="malformed CSV") as e:
        validation.validate_all(tmp_path, names={"trace_overhead"})
    assert str(p) in str(e.value)
    (run / "manifest.json").write_text("{")  # the manifest is checked every time
    with pytest.raises(DatasetError, match="not valid JSON"):
        validation.validate_all(tmp_path, names={"trace_overhead"})


def test_many_datasets_are_read_side_by_side_and_the_first_problem_in_order_is_told(
    tmp_path, monkeypatch
):
    """A fleet's first validation reads its datasets in worker processes; what it says is what
    reading them one by one says: the count, or the first broken table in the book's order."""
    import shutil

    from perfbook.chapters import CHAPTERS
    from perfbook.data.dataset import list_runs

    monkeypatch.setenv("PERFBOOK_BUILD", str(tmp_path / "build"))
    data = tmp_path / "data"
    runs = []
    for ch in CHAPTERS:
        for src in list_runs(ch.name):
            runs.append(data / "runs" / src.parent.parent.name / ch.name / src.name)
            shutil.copytree(src, runs[-1])
    assert len(runs) >= 8, "too few committed datasets to read side by side"
    monkeypatch.setenv("PERFBOOK_VERDICT_STORE", "off")
    assert validation.validate_all(data) == len(runs)
    broken = []
    for run in (runs[3], runs[-2]):  # two broken tables; the earlier one is told
        p = table_path(run, next(iter(load_manifest(run)["tables"])))
        p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
        broken.append(p)
    with pytest.raises(DatasetError) as e:
        validation.validate_all(data)
    assert str(broken[0]) in str(e.value) and "\n" not in str(e.value)


def test_a_cut_compressed_table_is_one_line_that_names_it(tmp_path):
    """A table whose xz stream was cut short (an interrupted copy) is malformed, not a crash."""
    from perfbook.data.dataset import load_table

    run = _copy_committed(tmp_path)
    p = table_path(run, "samples")
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    with pytest.raises(DatasetError, match="malformed CSV") as e:
        load_table("trace_overhead", "samples", tmp_path)
    assert str(p) in str(e.value) and "\n" not in str(e.value)


def test_compact_is_lossless_and_idempotent(tmp_path):
    """`python -m perfbook compact` (the migration of the committed data to .csv.xz): every table
    decompresses to the very bytes of the plain CSV it replaced, and reads as the same frame."""
    import lzma

    from perfbook.data.dataset import read_table
    from perfbook.data.writer import compact

    run = _copy_committed(tmp_path)
    man = load_manifest(run)
    plain = {}
    for t in man["tables"]:  # make it a dataset written before compaction
        p = table_path(run, t)
        plain[t] = lzma.decompress(p.read_bytes())
        p.unlink()
        (run / f"{t}.csv").write_bytes(plain[t])
    before = {t: read_table(run, t, man) for t in man["tables"]}
    n, raw, packed = compact(tmp_path, say=lambda s: None)
    assert n == len(man["tables"]) and raw == sum(map(len, plain.values())) and packed < raw
    for t in man["tables"]:
        assert not (run / f"{t}.csv").exists()
        assert lzma.decompress(table_path(run, t).read_bytes()) == plain[t]
        pd.testing.assert_frame_equal(read_table(run, t, man), before[t])
    assert compact(tmp_path, say=lambda s: None) == (0, 0, 0)


def test_copied_dataset_with_the_same_run_id_is_not_merged(tmp_path):
    import shutil

    from perfbook.data.dataset import load_table

    run = _copy_committed(tmp_path)
    copy = run.with_name("20991231T000000Z")
    shutil.copytree(run, copy)
    with pytest.raises(DatasetError, match="does not match its directory"):
        load_table("trace_overhead", "samples", tmp_path)
    m = json.loads((copy / "manifest.json").read_text())
    m["run_id"] = copy.name
    (copy / "manifest.json").write_text(json.dumps(m))
    assert len(load_table("trace_overhead", "samples", tmp_path)) == 2 * m["tables"]["samples"]


def test_newer_schema_is_refused_with_what_to_do(tmp_path):
    from perfbook.data.dataset import load_manifest

    run = _copy_committed(tmp_path)
    m = json.loads((run / "manifest.json").read_text())
    m["schema"] = 99
    (run / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DatasetError, match="schema 99 .*update the checkout"):
        load_manifest(run)


def test_views_cut_the_tables_their_data_read_without_listing_the_files_again(
    monkeypatch, book_data
):
    """A finding's view of one dataset (Data.view) takes its rows from the table its Data has
    read: the same rows as filtering by host and run, and no new pass over every dataset's
    files (at a hundred hosts that pass, once per view and table, cost more than the findings)."""
    import pandas as pd

    from perfbook.analysis.findings import Run
    from perfbook.chapters import by_name

    D = by_name("trace_overhead").load().load(book_data.data_dir)
    whole = D["samples"]
    listed = []
    real = dataset._table_rows
    monkeypatch.setattr(dataset, "_table_rows", lambda *a, **k: listed.append(a) or real(*a, **k))
    for m in D.manifests:
        got = Run(D, m).data["samples"]
        want = whole[(whole.host_id == m.host_id) & (whole.run_id == m["run_id"])].reset_index(
            drop=True
        )
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        assert Run(D, m).data is Run(D, m).data, "one view per dataset and Data"
    assert listed == [], "a view listed the files again"


def test_a_view_of_its_own_files_reads_only_them_and_gives_the_same_rows(monkeypatch, book_data):
    """Data.view(own_files=True): the quoted dataset's rows from its own file (a fleet's
    notebook reads one table, not one per host); the same rows and columns as cutting the whole
    table, which it does instead once the whole table is loaded."""
    import pandas as pd

    from perfbook.chapters import by_name

    ch = by_name("trace_overhead").load()
    D = ch.load(book_data.data_dir)
    q = D.quoted
    read, real = [], dataset.read_table
    monkeypatch.setattr(
        dataset, "read_table", lambda run, *a, **k: read.append(run) or real(run, *a, **k)
    )
    own = D.view([q], own_files=True)["samples"]
    assert read == [q.path], "only the quoted dataset's file"
    whole = D.of_quoted(D["samples"]).reset_index(drop=True)
    assert len(read) == 1 + len(D.manifests)
    pd.testing.assert_frame_equal(own, whole, check_exact=True)
    again = D.view([q], own_files=True)["samples"]  # the whole table is loaded now: cut from it
    assert len(read) == 1 + len(D.manifests)
    pd.testing.assert_frame_equal(again, whole, check_exact=True)


def test_a_refresh_checks_the_manifests_first_and_leaves_the_tables_to_its_notebooks(tmp_path):
    """validate_all(tables=False), a refresh's pass before its notebooks, reads no table but
    still refuses a bad manifest; the full pass refuses the cut table."""
    run = _copy_committed(tmp_path)
    p = table_path(run, "samples")
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    assert validation.validate_all(tmp_path, names={"trace_overhead"}, tables=False) == 1
    with pytest.raises(DatasetError, match="malformed CSV"):
        validation.validate_all(tmp_path, names={"trace_overhead"})
    (run / "manifest.json").write_text("{")
    with pytest.raises(DatasetError, match="manifest.json"):
        validation.validate_all(tmp_path, names={"trace_overhead"}, tables=False)


# ---- a write that fails: a full disk, a quota, an I/O error (issue #43) -------------------

CAUSES = {
    errno.ENOSPC: "no space left on device (the disk is full)",
    errno.EDQUOT: "disk quota exceeded",
    errno.EIO: "I/O error",
}


@pytest.mark.parametrize("err", sorted(CAUSES), ids=[errno.errorcode[e] for e in sorted(CAUSES)])
@pytest.mark.parametrize("where", ["table", "manifest", "rename"])
def test_a_failed_write_removes_the_half_written_dataset_and_says_why_in_one_line(
    where, err, scratch_data, tmp_path, monkeypatch
):
    """A full data dir left a .tmp-* dataset (3 tables and a 0-byte manifest) that no sweep
    removed, and an OSError the measure called a defect of ours. Each write of the writer that
    fails (a table, the manifest, the rename into place) is one line naming the file and the
    cause, and leaves neither the temporary directory nor its record."""
    from perfbook.data import writer

    monkeypatch.setenv("PERFBOOK_STATE_DIR", str(tmp_path / "state"))

    def fail():
        raise OSError(err, os.strerror(err))

    if where == "table":

        def write_table(base, df):
            Path(f"{base}.csv.xz").write_bytes(b"\xfd7zXZ")  # cut short, as on a full disk
            fail()

        monkeypatch.setattr(writer, "write_table", write_table)
        named = "samples.csv.xz"
    elif where == "manifest":

        def open_(path, *a, **k):
            assert Path(path).name == "manifest.json", path  # the writer opens only that
            Path(path).write_text("")  # the 0-byte manifest it left
            fail()

        monkeypatch.setattr(writer, "open", open_, raising=False)  # the writer's own open()
        named = "manifest.json"
    else:
        rename = os.rename
        monkeypatch.setattr(
            os,
            "rename",
            lambda src, dst: fail() if Path(src).name.startswith(".tmp-") else rename(src, dst),
        )
        named = "20260101T000000Z"
    with pytest.raises(DatasetError) as e:
        _write(scratch_data)
    msg = str(e.value)
    assert (
        "\n" not in msg and named in msg and CAUSES[err] in msg and "nothing was published" in msg
    ), msg
    assert list((scratch_data / "runs").rglob("*")) == [], "the half-written dataset was left"
    assert list((tmp_path / "state" / "datasets").iterdir()) == [], "its record was left"


def test_a_full_tmpfs_data_dir_fails_the_run_in_one_line_and_leaves_nothing(tmp_path):
    """The real thing: `make measure` with data_dir on a tmpfs with one free page, which the
    table takes, so that the manifest finds the disk full."""
    from conftest import ROOT, need_root

    need_root("mounting a tmpfs")
    mnt = tmp_path / "full"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        st = os.statvfs(mnt)
        (mnt / "filler").write_bytes(b"x" * ((st.f_bavail - 1) * st.f_bsize))
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "perfbook",
                "measure",
                "--chapters",
                "example",
                "--profile",
                "quick",
                "--param",
                f"data_dir={mnt}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "PERFBOOK_BUILD": str(tmp_path / "build")},
        )
        out = r.stdout + r.stderr
        failed = [ln for ln in out.splitlines() if "FAILED" in ln]
        assert r.returncode == 1 and len(failed) == 1, out
        assert f"can't write {mnt}/runs/" in failed[0] and "no space left on device" in failed[0], (
            out
        )
        assert "OSError" not in out and "traceback" not in out.lower(), out
        assert list(mnt.rglob(".tmp-*")) == [], "the half-written dataset was left"
    finally:
        subprocess.run(["umount", str(mnt)])


def test_a_notes_python_literal_reads_as_words():
    """Datasets measured before 2026-11-29 put a Python list or dict into a note; the page
    shows its words, and a note without one is left as it is."""
    from perfbook.data.dataset import plain_note, skipped_table

    assert plain_note("left: ['perf.txt', 'x']") == "left: perf.txt, x"
    first = "(first: {'variant': 'slice_10ms', 'load': 'sat'})"
    assert plain_note(first) == "(first: variant slice_10ms, load sat)"
    assert plain_note("a [b] and {c} stay") == "a [b] and {c} stay"
    m = {"run_id": "r1", "host": {"host_id": "h-a"}, "notes": ["left: ['perf.txt']"]}
    assert skipped_table([m])["why"].tolist() == ["left: perf.txt"]
