"""Kernels forked from the refresh's zygote (tools.warmkernel) behave as kernels jupyter_client
starts itself: the same outputs (figures included), directory, environment and import path;
interrupts reach them; and none outlives the zygote or the process that asked for it."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import nbformat
import pytest
from nbclient import NotebookClient

from tools import warmkernel
from tools.__main__ import _private_kernel_manager
from tools.proc import pid_alive

PROBE = [
    "import os, sys\nprint(os.getcwd(), sys.path[0], os.environ.get('PERFBOOK_PROBE'), sys.argv[1:2])",
    "import matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(2, 1))\nax.plot([1, 2])\nfig",
]


def _notebook(cells):
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])


def _run(nb, zygote, cwd):
    km = _private_kernel_manager(zygote)
    try:
        NotebookClient(nb, km=km, timeout=120, kernel_name="python3",
                       resources={"metadata": {"path": str(cwd)}}).execute()
    finally:
        if km.has_kernel:
            km.shutdown_kernel(now=False)
        km.cleanup_resources()
    return nb


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
        assert [o.get("output_type") for o in w.outputs] == [o.get("output_type") for o in c.outputs]
        assert [sorted(o.get("data", {})) for o in w.outputs] == [sorted(o.get("data", {})) for o in c.outputs]
    text = warm.cells[0].outputs[0]["text"]
    assert text == cold.cells[0].outputs[0]["text"]
    assert text.split()[:3] == [str(tmp_path), str(tmp_path), "probe-1"]
    assert "image/png" in warm.cells[1].outputs[0]["data"]     # matplotlib's inline display works


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
    km = _private_kernel_manager(zygote)
    km.start_kernel(cwd=str(tmp_path))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        assert isinstance(km.provisioner.process, warmkernel._Forked)
        msg_id = kc.execute("import time\nprint('sleeping', flush=True)\ntime.sleep(60)")
        while True:              # interrupt once the cell runs, however busy the machine is
            m = kc.get_iopub_msg(timeout=60)
            if m["msg_type"] == "stream" and "sleeping" in m["content"]["text"]:
                break
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=20)
        assert reply["parent_header"]["msg_id"] == msg_id
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
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
        from tools import warmkernel
        from tools.__main__ import _private_kernel_manager
        km = _private_kernel_manager(warmkernel.Zygote.from_env())
        km.start_kernel(cwd={str(tmp_path)!r})
        print(km.provisioner.pid, flush=True)
        time.sleep(600)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             pass_fds=(conn.fileno(),),
                             env={**os.environ, warmkernel.ZYGOTE_FD: str(conn.fileno())})
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
    from tools.statedir import subdir      # what the killed child's KernelManager left
    for f in subdir("kernels").glob(f"*{child.pid}*"):
        if f.name in (f"kernel-{child.pid}.json", *(f"k{child.pid}-{i}" for i in range(1, 6))):
            f.unlink()


def test_kernels_end_with_the_zygote(tmp_path):
    z = warmkernel.Zygote.start()
    km = _private_kernel_manager(z)
    km.start_kernel(cwd=str(tmp_path))
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
        assert z.fork([sys.executable, "-m", "tools.kernel"], dict(os.environ), str(tmp_path)) is None
    finally:
        km.cleanup_resources()
        z.close()


def test_a_command_that_is_not_ours_is_started_the_usual_way(zygote):
    assert not warmkernel._is_ours(["python", "-m", "ipykernel_launcher", "-f", "x.json"])
    assert warmkernel._is_ours([sys.executable, "-m", "tools.kernel", "-f", "x.json"])


def test_warm_kernels_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("PERFBOOK_WARM_KERNELS", "off")
    assert not warmkernel.enabled()
    monkeypatch.delenv("PERFBOOK_WARM_KERNELS")
    assert warmkernel.enabled()
