"""virtio_blk_latency, collect side: the two host ftrace instances of one boot (QEMU's threads
and the disk that holds the image). Each is a perfbook.hoststate.tracefs.TraceSession, which restores its
state on every exit path."""
from __future__ import annotations

from pathlib import Path

from .spec import HOST_SYSCALLS, KVM_IRQ, KVM_NOTIFY


class HostTrace:
    """The two host ftrace instances of one boot: QEMU's threads (syscalls) and the disk."""

    def __init__(self, p: dict, blockdev: dict | None, say):
        self.p, self.blockdev, self.say = p, blockdev, say
        self.q = self.b = None
        self.pid = None
        self.notes: list[str] = []

    def __enter__(self):
        from perfbook.hoststate.tracefs import TraceSession
        self.q = TraceSession("vbl_qemu", log=self.say).__enter__()
        try:
            self.b = TraceSession("vbl_disk", log=self.say).__enter__()
            for t in (self.q, self.b):
                t.set_option("tracing_on", "0")
                t.set_option("trace_clock", "x86-tsc")
                t.set_option("buffer_size_kb", str(self.p["host_buffer_kb"]))
            self.q.set_trace_options(event_fork=True)   # children of the traced pid are traced too
            ev = self.q.buffer / "events" / "syscalls"
            for call in HOST_SYSCALLS:
                for side in ("enter", "exit"):
                    name = f"sys_{side}_{call}"
                    if not (ev / name).is_dir():
                        self.notes.append(f"host syscall event {name} is missing")
                        continue
                    if call == "write":
                        self.q.set_option(f"events/syscalls/{name}/filter",
                                          "count == 8" if side == "enter" else "ret == 8")
                    self.q.enable(f"syscalls/{name}")
            if self.blockdev is not None:
                for name in ("block_rq_issue", "block_rq_complete"):
                    self.b.set_option(f"events/block/{name}/filter", f"dev == {self.blockdev['dev_t']}")
                    self.b.enable(f"block/{name}")
            # kvm.ko's events of *our* QEMU only: the notify exit runs in its vCPU thread and the
            # irqfd injection in the thread that signals the eventfd; other VMs on this host
            # (or a KVM attempt of another run) must not leak in, so they go to the pid-filtered
            # instance
            kvm = self.q.buffer / "events" / "kvm"
            for name in KVM_NOTIFY + KVM_IRQ:
                if (kvm / name).is_dir():
                    self.q.enable(f"kvm/{name}")
            self.b.set_option("tracing_on", "1")
        except BaseException:
            self.close()
            raise
        return self

    def on_start(self, pid: int) -> None:
        """QEMU has just started: trace it and every thread it creates (event-fork adds the
        children of listed tasks). A thread created before the pid was listed is appended from
        /proc. A second start in the same boot (accel=auto: the KVM attempt timed out and QEMU
        restarts under TCG) begins with empty buffers, so no event of the abandoned QEMU is kept.
        Rewriting set_event_pid with O_TRUNC stops event-fork from following new threads until
        the option is set again (seen on this kernel), so the option is toggled around it."""
        if self.pid is not None:
            self.q.set_option("tracing_on", "0")
            self.b.set_option("tracing_on", "0")
            self.q.clear()
            self.b.clear()
            self.b.set_option("tracing_on", "1")
            self.notes.append("QEMU restarted within one boot (accelerator fallback); the first attempt's "
                              "host trace was discarded")
        self.pid = pid
        self.q.set_trace_options(event_fork=False)
        self.q.set_option("set_event_pid", str(pid))
        self.q.set_trace_options(event_fork=True)
        try:
            tids = sorted({d.name for d in Path(f"/proc/{pid}/task").iterdir()} - {str(pid)})
        except OSError:
            tids = []
        if tids:
            from perfbook.hoststate.tracefs import write_knob
            write_knob(self.q.file("set_event_pid"), " ".join(tids) + "\n", append=True)
        self.q.set_option("tracing_on", "1")

    def read(self) -> tuple[str, str, dict]:
        for t in (self.q, self.b):
            t.set_option("tracing_on", "0")
        stats = {"qemu": self.q.buffer_stats(), "disk": self.b.buffer_stats()}
        return (self.q.file("trace").read_text(errors="replace"),
                self.b.file("trace").read_text(errors="replace"), stats)

    def close(self):
        for t in (self.b, self.q):
            if t is not None:
                t.close()

    def __exit__(self, *exc):
        self.close()
        return False
