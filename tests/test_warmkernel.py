"""Kernels forked from the refresh's zygote (perfbook.book.jupyter.zygote) behave as kernels jupyter_client
starts itself: the same outputs (figures included), directory, environment and import path;
interrupts reach them; and none outlives the zygote or the process that asked for it."""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nbformat
import pytest
from jupyter_client import KernelManager

from conftest import processes_with_env, short_state_dir, stop_with
from perfbook.book.jupyter import execute as nbrun
from perfbook.book.jupyter import zygote as warmkernel
from perfbook.core.proc import pid_alive

ROOT = Path(__file__).resolve().parents[1]

PROBE = [
    "import os, sys\nprint(os.getcwd(), sys.path[0], os.environ.get('PERFBOOK_PROBE'), sys.argv[1:2])",
    "import matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(2, 1))\nax.plot([1, 2])\nfig",
]


def _notebook(cells):
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])


def _run(nb, zygote, cwd):
    """Execute `nb` as `python -m perfbook refresh` does (its kernel from `zygote`, if not None)."""
    with warmkernel.serving(zygote):
        nbrun.execute(nb, str(cwd), timeout=120)
    return nb


def _start_kernel(zygote, cwd) -> KernelManager:
    """A kernel started from our python3 kernelspec while `zygote` serves this process."""
    km = KernelManager(kernel_name="python3")
    with warmkernel.serving(zygote):
        km.start_kernel(cwd=str(cwd))
    return km


@pytest.fixture(autouse=True)
def _this_machine(monkeypatch):
    """The zygote serves refresh, which runs as this machine; an nbval session (make test) gives
    its own kernels another machine's environment, and those are never forked."""
    from perfbook.book.jupyter import provisioner

    monkeypatch.setattr(provisioner, "EXTRA_ENV", {})


@pytest.fixture
def zygote():
    z = warmkernel.Zygote.start()
    yield z
    z.close()


def test_a_forked_kernel_gives_the_outputs_a_started_one_gives(zygote, tmp_path, monkeypatch):
    monkeypatch.setenv("PERFBOOK_PROBE", "probe-1")
    warm = _run(_notebook(PROBE), zygote, tmp_path)
    cold = _run(_notebook(PROBE), None, tmp_path)
    for w, c in zip(warm.cells, cold.cells):
        assert [o.get("output_type") for o in w.outputs] == [
            o.get("output_type") for o in c.outputs
        ]
        assert [sorted(o.get("data", {})) for o in w.outputs] == [
            sorted(o.get("data", {})) for o in c.outputs
        ]
    text = warm.cells[0].outputs[0]["text"]
    assert text == cold.cells[0].outputs[0]["text"]
    assert text.split()[:3] == [str(tmp_path), str(tmp_path), "probe-1"]
    assert "image/png" in warm.cells[1].outputs[0]["data"]  # matplotlib's inline display works


def test_the_zygote_forks_the_kernel_not_popen(zygote, tmp_path):
    seen = []
    real = warmkernel.Zygote.fork

    def fork(self, *a):
        proc = real(self, *a)
        seen.append(proc)
        return proc

    warmkernel.Zygote.fork = fork
    try:
        _run(_notebook(["1 + 1"]), zygote, tmp_path)
    finally:
        warmkernel.Zygote.fork = real
    assert len(seen) == 1 and isinstance(seen[0], warmkernel._Forked)
    assert seen[0].wait(timeout=10) == 0


def test_an_interrupt_reaches_a_forked_kernel(zygote, tmp_path):
    km = _start_kernel(zygote, tmp_path)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        assert isinstance(km.provisioner.process, warmkernel._Forked)
        msg_id = kc.execute("import time\nprint('sleeping', flush=True)\ntime.sleep(60)")
        while True:  # interrupt once the cell runs, however busy the machine is
            m = kc.get_iopub_msg(timeout=60)
            if m["msg_type"] == "stream" and "sleeping" in m["content"]["text"]:
                break
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=20)
        assert reply["parent_header"]["msg_id"] == msg_id
        assert (
            reply["content"]["status"] == "error"
            and reply["content"]["ename"] == "KeyboardInterrupt"
        )
        assert km.is_alive()
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        km.cleanup_resources()
    assert not km.has_kernel


def test_a_kernel_ends_with_the_process_that_asked_for_it(zygote, tmp_path):
    """A refresh child killed mid-notebook leaves no kernel: the kernel watches it (pidfd)."""
    conn = zygote.client()
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(os.getcwd())!r})
        from jupyter_client import KernelManager
        from perfbook.book.jupyter import zygote as warmkernel
        km = KernelManager(kernel_name="python3")
        with warmkernel.serving(warmkernel.Zygote.from_env()):
            km.start_kernel(cwd={str(tmp_path)!r})
        print(km.provisioner.pid, flush=True)
        time.sleep(600)
    """)
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        pass_fds=(conn.fileno(),),
        env={**os.environ, warmkernel.ZYGOTE_FD: str(conn.fileno())},
    )
    conn.close()
    try:
        kernel = int(child.stdout.readline())
        assert pid_alive(kernel)
    finally:
        child.kill()
        child.wait()
    deadline = time.monotonic() + 10
    while pid_alive(kernel) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(kernel)
    from perfbook.hoststate.sweep import kernel_files  # what the killed child's KernelManager left

    kernel_files()


def test_kernels_end_with_the_zygote(tmp_path):
    z = warmkernel.Zygote.start()
    km = _start_kernel(z, tmp_path)
    kernel = km.provisioner.pid
    zpid = z.proc.pid
    try:
        assert pid_alive(kernel)
        os.kill(zpid, signal.SIGKILL)
        z.proc.wait()
        deadline = time.monotonic() + 10
        while pid_alive(kernel) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not pid_alive(kernel)
        # a dead zygote: the next kernel starts the usual way
        assert (
            z.fork([sys.executable, "-m", "perfbook", "kernel"], dict(os.environ), str(tmp_path))
            is None
        )
    finally:
        km.cleanup_resources()
        z.close()


def test_a_command_that_is_not_ours_is_started_the_usual_way(zygote):
    assert not warmkernel._is_ours(["python", "-m", "ipykernel_launcher", "-f", "x.json"])
    assert warmkernel._is_ours([sys.executable, "-m", "perfbook", "kernel", "-f", "x.json"])


def test_warm_kernels_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("PERFBOOK_WARM_KERNELS", "off")
    assert not warmkernel.enabled()
    monkeypatch.delenv("PERFBOOK_WARM_KERNELS")
    assert warmkernel.enabled()


# ---- an interrupted refresh, and what a killed one leaves --------------------------------


@pytest.mark.parametrize(
    "jobs,how", [(2, "sigint-group"), (1, "sigterm-parent"), (2, "sighup-parent")]
)
def test_an_interrupted_refresh_is_one_line_and_leaves_no_kernel_file(jobs, how, tmp_path):
    """Ctrl-C during make all's refresh printed the zygote's ProcessLookupError traceback and
    left two kernel connection files, with their keys, in the state directory."""
    sig = {"sigint": signal.SIGINT, "sigterm": signal.SIGTERM, "sighup": signal.SIGHUP}[
        how.split("-")[0]
    ]
    target = how.split("-")[1]
    state = short_state_dir()
    chapters = ["tsc_alignment", "trace_overhead"]
    stored = {c: (ROOT / "chapters" / f"{c}.ipynb").read_bytes() for c in chapters}
    marker = f"PERFBOOK_TEST_TAG=refresh-{os.getpid()}-{time.time_ns()}"
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "perfbook",
            "refresh",
            "--chapters",
            ",".join(chapters),
            "--jobs",
            str(jobs),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        env={
            **os.environ,
            "PERFBOOK_STATE_DIR": str(state),
            marker.split("=")[0]: marker.split("=", 1)[1],
        },
    )
    try:
        deadline = time.monotonic() + 120
        while (
            len(list((state / "kernels").glob("*.json")) if (state / "kernels").is_dir() else [])
            < jobs
        ):
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            time.sleep(0.05)
        out, _ = stop_with(p, sig, target)
        assert "Traceback" not in out, out
        assert list((state / "kernels").iterdir()) == [], (
            "a kernel's connection file or socket was left"
        )
        deadline = time.monotonic() + 10
        while (left := processes_with_env(marker)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert left == [], f"outlived the refresh: {left}"
        for c in chapters:
            assert (ROOT / "chapters" / f"{c}.ipynb").read_bytes() == stored[c], f"{c} was replaced"
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
        shutil.rmtree(state, ignore_errors=True)


def test_a_kernel_whose_connection_file_is_gone_ends(tmp_path):
    """A client stopped while its kernel started removes the connection file; ipykernel then
    wrote one of its own and listened on TCP, for nobody. Our kernel ends instead."""
    gone = tmp_path / "k1-1.json"
    r = subprocess.run(
        [sys.executable, "-m", "perfbook", "kernel", "-f", str(gone)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and not gone.exists(), r.stdout + r.stderr


def test_a_kernelspec_without_our_provisioner_is_refused_in_one_line(tmp_path, monkeypatch):
    """Reinstalling ipykernel puts back its own python3 kernelspec, whose kernels listen on TCP."""
    import json

    from perfbook.book.jupyter.provisioner import check_kernelspec
    from perfbook.core.errors import PerfbookError

    spec = tmp_path / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": ["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "P",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    with pytest.raises(PerfbookError, match="would listen on TCP") as e:
        check_kernelspec("python3")
    assert "\n" not in str(e.value)
    monkeypatch.delenv("JUPYTER_PATH")
    check_kernelspec("python3")


def test_a_wake_up_sent_as_the_iopub_thread_stops_runs_the_function_instead():
    """The race of a kernel's shutdown (perfbook.book.jupyter.kernel._quiet_schedule): the
    IO thread looked alive, then stop() closed the caller's event pipe; ipykernel's own
    schedule raises ENOTSOCK there, ours runs the function in the caller's thread."""
    import zmq
    from ipykernel.iostream import IOPubThread

    from perfbook.book.jupyter import kernel

    ctx = zmq.Context()
    thread = IOPubThread(ctx.socket(zmq.PUB))  # not started: no IO loop to stop
    try:
        thread._event_pipe.close()  # what stop() does to every event pipe once it has joined
        thread.thread.is_alive = lambda: True  # what schedule() saw just before
        ran = []
        original = IOPubThread.schedule
        with pytest.raises(zmq.ZMQError):
            original(thread, lambda: ran.append("upstream"))
        kernel._quiet_schedule()
        try:
            IOPubThread.schedule(thread, lambda: ran.append("ours"))
        finally:
            IOPubThread.schedule = original
        assert ran == ["ours"]
    finally:
        ctx.destroy(linger=0)
