"""Chapter 'virtio_blk_latency': where the latency of one virtio-blk read goes, layer by layer.

The seed (``001_44860ac07de981e7.txt``, the KVM wiki page "Virtio/Block/Latency" of July 2010;
its latest revision as plain text in ``001_44860ac07de981e7.virtio-blk-latency.txt``) timed a
single-threaded 4 KiB O_DIRECT sequential read benchmark in a guest and on the host, put time
stamps on every layer in between (guest virtio-pci notify and interrupt, host kvm.ko pio exit and
irq injection, QEMU's virtqueue notify and guest notification, QEMU's posix-aio pread), and turned
the mean latency of each layer into a cumulative table and a table of deltas. This chapter does
the same on today's stack, per request instead of per mean:

  benchmark  -- tools/c/seqread.c: pread() of 4 KiB blocks with O_DIRECT, sequential and random,
                one request at a time; the time stamp counter is read right before and after every
                request. The same static binary runs on the host (against the image file) and in
                the tiny guest of perfbook.qemu.guest (against the virtio disk backed by that image).
  guest      -- ftrace inside the guest (trace_clock x86-tsc): kprobes on vp_notify and
                vring_interrupt, block:block_rq_issue/complete of the benchmark's disk.
  QEMU       -- QEMU's own trace events with the 'log' backend (-trace, -D, -msg timestamp=on):
                virtio_queue_notify ... virtio_notify(_irqfd), the thread pool and io_uring events,
                apic_deliver_irq. Stamps are gettimeofday() microseconds, mapped onto the TSC with
                our own calibration (CLOCK_REALTIME against RDTSC before and after every boot).
  host       -- two private ftrace instances (x86-tsc): QEMU's own threads (set_event_pid with
                event-fork) for the submission syscalls (preadv, io_submit, io_uring_enter) and the
                8-byte eventfd writes (the vCPU's ioeventfd kick, the main loop's guest notifier);
                and block:block_rq_issue/complete of the disk that holds the image, mapped back to
                image offsets with FIEMAP. With a KVM guest also kvm:kvm_mmio/kvm_fast_mmio/kvm_pio
                and kvm:kvm_msi_set_irq/kvm_set_irq.

Every request is matched across the layers by the offset it reads (the guest's block_rq_issue
sector, QEMU's virtio_blk_handle_read sector, the host's block_rq_issue sector through the image's
extent map), and the guest's TSC is put on the host's axis with a causality bracket (the TSC
alignment chapter's method): the guest's vp_notify happens before the vCPU thread's ioeventfd
write (or kvm.ko's notify exit), and the host's guest-notifier write (or MSI injection) happens
before the guest's vring_interrupt. Under TCG QEMU's RDTSC returns the host's TSC plus a constant
(softmmu/cpu-timers.c: cpu_get_ticks() = cpu_ticks_offset + cpu_get_host_ticks();
target/i386/tcg/misc_helper.c: helper_rdtsc() adds env->tsc_offset), so one offset fits a run.

Scratch files (the benchmark image, the guest's output disk, QEMU's trace log) live in the run's
scratch directory (ctx.scratch()); QEMU is owned by perfbook.qemu.guest.Runner and the ftrace instances
by perfbook.hoststate.tracefs.TraceSession; all are on the framework's undo stack.

  parse.py         what is measured (aio modes, variants, trace events); text -> frames
  collect.py       measure(ctx): the benchmark image and its extents, rounds of boots, the
                   host's ftrace instances; timeline/ matches one request across the layers
                   and puts it on one time axis
  analysis.py      layer latencies, the seed's tables, the lifecycle of a request; VirtioData,
                   the loaded datasets and the quoted dataset's derived frames
  tables.py        the chapter's tables; prose.py every value the prose quotes
  figures.py       the delta bars, the per-layer CDFs, the request timeline
  key_findings.py  the chapter's conclusions, decided per host
"""

from __future__ import annotations

from perfbook.core.errors import ParameterError
from perfbook.framework.contract import (
    REPETITION,
    Chapter,
    Param,
    Table,
    choose_list,
    repetition_params,
)
from perfbook.qemu import guest

from .parse import AIO, PATTERNS, STAMPS_G, STAMPS_H, STAMPS_Q, VARIANTS, round_cells

_COMMON = {
    "patterns": None,
    "image_mib": 64,
    "accel": "auto",
    "boot_timeout": 300.0,
    "guest_memory_mib": 256,
    "guest_buffer_kb": 16384,
    "host_buffer_kb": 8192,
    "calib_samples": 30,
    "seed": 1,
    "rounds": None,
}

# whole-number stamps (cycles, µs), missing where a boot did not trace the layer: float, so
# that the analysis keeps numpy's NaN arithmetic (float64 is exact below 2**53)
_STAMPS = {c: "float" for c in ("h_anchor", "q_anchor") + STAMPS_G + STAMPS_H + STAMPS_Q}
# what only some boots have (a run without such boots has no such column)
# off_consistent and qc_consistent are true/false, missing where a boot has no bracket; they are
# declared "float" (1.0/0.0/NaN) because Table.check refuses a bool column with missing values
_TRACED_ONLY = (
    "guest_tsc_hz",
    "guest_entries",
    "guest_overrun",
    "matched_guest",
    "qemu_lines",
    "matched_qemu",
    "host_lost",
    "host_events",
    "matched_host",
    "off_lo",
    "off_hi",
    "off_n_lo",
    "off_n_hi",
    "off_consistent",
    "off_lo_from",
    "qc_lo",
    "qc_hi",
    "qc_consistent",
    "qc",
    "h_base",
    "q_base",
)


class VirtioBlkLatency(Chapter):
    name = "virtio_blk_latency"
    title = "Where virtio-blk latency goes, layer by layer"
    # A round boots every cell of `boots` once, in shuffled order, and runs the host benchmark
    # once (parse.EXPERIMENT). The boot is the unit of repetition: each finding compares two
    # cells' boots with a Hodges-Lehmann ratio, which reaches 95 % (97.1 %) at 4 boots against 4
    # (key_findings.NEEDS). The default round is therefore only the four cells the findings
    # compare (threads plain/all/qemu, native all) and the default runs a fixed 4 rounds; its
    # budget is only a cap for boots twice as slow. Every other aio mode and single-layer boot
    # (the seed's one-layer-per-boot table, the untraced aio comparison) is full-only.
    # Measured here (2 CPUs, guests under TCG, load from other work): 16 boots of ~4.4 s and
    # ~7 s of setup and trace parsing, 77-82 s a run; with the committed data's quieter boots
    # (~3.3 s each) ~57 s. A whole default measure here, alone, took 82 s (16 boots: 74 s of
    # boot; the manifest's phases), so plan_s is 80: 4 cells x 4 rounds is the least that gives
    # every finding its coverage.
    plan_s = {
        "quick": 8,
        "default": 80,
    }  # seconds a collect should take here (perfbook.book.summary)
    profiles = {
        "quick": {
            "requests": 100,
            "warmup": 10,
            "aio": ["threads"],
            "variants": ["plain", "all"],
            "layer_runs": [],
            "boots": None,
            "host_requests": 100,
            "kvm_boot_timeout": 3.0,
            "rep_target": 0.1,
            "rep_min_runs": 1,
            "rep_max_runs": 1,
            "rep_budget_s": 60.0,
            "rep_warmup": 0,
            **_COMMON,
        },
        "default": {
            # a boot's median over 200 requests varies far less than boots do; the boot and its
            # trace dump, not the requests, are most of a boot's ~3.3 s
            "requests": 200,
            "warmup": 20,
            "aio": None,
            "variants": ["plain", "all"],
            "layer_runs": [],
            # the cells the findings compare (key_findings.NEEDS), nothing else
            "boots": ["threads/plain", "threads/all", "threads/qemu", "native/all"],
            "host_requests": 200,
            "kvm_boot_timeout": 4.0,
            "rep_target": 0.1,
            "rep_min_runs": 4,
            "rep_max_runs": 4,
            "rep_budget_s": 180.0,
            "rep_warmup": 0,
            **_COMMON,
            "boot_timeout": 60.0,  # a boot takes 3-5 s here: a hung one fails in a minute
        },
        "full": {
            "requests": 1000,
            "warmup": 50,
            "aio": None,
            "variants": ["plain", "all"],
            "layer_runs": ["threads", "native", "io_uring"],
            "boots": None,
            "host_requests": 1000,
            "kvm_boot_timeout": 20.0,
            "rep_target": 0.05,
            "rep_min_runs": 8,
            "rep_max_runs": 30,
            "rep_budget_s": 1200.0,
            "rep_warmup": 0,
            **_COMMON,
        },
    }
    params = {
        "requests": Param(
            int, min=20, max=100000, help="timed requests per access pattern and boot"
        ),
        "warmup": Param(int, min=0, max=10000, help="untimed requests before them, in every boot"),
        "host_requests": Param(
            int, min=20, max=100000, help="timed requests of the host benchmark"
        ),
        "aio": Param(list, choices=AIO, nullable=True, help="QEMU aio modes (None: all)"),
        "patterns": Param(
            list, choices=PATTERNS, nullable=True, help="access patterns (None: all)"
        ),
        "variants": Param(
            list, choices=tuple(VARIANTS), help="which layers each aio mode's boots trace"
        ),
        "layer_runs": Param(
            object, help="aio modes that also boot once per single layer ([] or 'none': no mode)"
        ),
        "boots": Param(
            list,
            nullable=True,
            help="a round's guest boots as aio/variant, e.g. threads/plain (None: every aio mode "
            "x variants, and the single-layer boots of layer_runs); aio, if given, selects among "
            "them",
        ),
        "image_mib": Param(int, min=8, max=4096, help="size of the benchmark image"),
        "accel": Param(
            str,
            choices=("auto", "kvm", "tcg"),
            help="KVM if the guest boots in time (auto), KVM or TCG",
        ),
        "kvm_boot_timeout": Param(
            float, min=1, max=1800, help="seconds a KVM guest gets to reach init (auto)"
        ),
        "boot_timeout": Param(float, min=1, max=1800, help="seconds a boot may take in all"),
        "guest_memory_mib": Param(int, min=128, max=2048, help="the guest's memory"),
        "guest_buffer_kb": Param(
            int, min=1024, max=262144, help="the guest's ftrace buffer per CPU"
        ),
        "host_buffer_kb": Param(
            int, min=1024, max=262144, help="the host's ftrace buffers per CPU"
        ),
        "calib_samples": Param(
            int, min=10, max=10000, help="TSC/clock samples before and after every boot"
        ),
        "seed": Param(int, min=0, help="seed of the image, the offsets and the shuffled order"),
        **repetition_params("rep_"),
        "rounds": Param(
            int,
            min=1,
            max=50,
            nullable=True,
            help="a fixed number of rounds (sets both run bounds)",
        ),
    }
    tables = {
        "requests": Table(
            job="int",
            pattern="str",
            idx="int",
            warm="int",
            offset="int",
            bench_cyc="int",
            t0="int",
            h_sub_call="str",
            h_sub_thread="str",
            **_STAMPS,
        ),
        "jobs": Table(
            job="int",
            round="int",
            position="int",
            kind="str",
            aio="str",
            variant="str",
            layers="str",
            patterns="str",
            qemu_events="int",
            accel="str",
            accel_note="str",
            boot_seconds="float",
            total_seconds="float",
            requests="int",
            warmup="int",
            tsc_hz="float",
            q_tsc_ref="float",
            q_real_ref_us="float",
            q_slope="float",
            calib_resid_cyc="float",
            notes="str",
            guest_tsc_hz="float",
            guest_entries="int",
            guest_overrun="int",
            matched_guest="int",
            qemu_lines="int",
            matched_qemu="int",
            host_lost="int",
            host_events="int",
            matched_host="int",
            off_lo="float",
            off_hi="float",
            off_n_lo="int",
            off_n_hi="int",
            off_consistent="float",
            off_lo_from="str",
            qc_lo="float",
            qc_hi="float",
            qc_consistent="float",
            qc="float",
            t0_base="int",
            h_base="float",
            q_base="float",
            optional=_TRACED_ONLY,
        ),
        "calib": Table(tsc0="int", tsc1="int", real_ns="int", raw_ns="int", phase="str", job="int"),
        "repetition": REPETITION,
    }
    reference = ("virtio_blk_latency",)
    quote_needs = ("requests", "jobs")

    needs_tools = {"cc": "gcc"}  # the benchmark
    needs_text = (
        "root for the host layer's tracepoints; with a working /dev/kvm the kvm.ko row is filled "
        "and the figures say KVM instead of TCG"
    )

    def check(self, p: dict) -> None:
        # lazy: scipy.stats, 0.67 s on top of the declaration's 0.35 s (-X importtime)
        from perfbook.analysis.repetition import repetition_settings

        if p["rounds"] is not None:
            p["rep_min_runs"] = p["rep_max_runs"] = p["rounds"]
        repetition_settings(p, "rep_")
        p["aio"] = [a for a in AIO if a in (p["aio"] or AIO)]  # the book's order
        p["patterns"] = [x for x in PATTERNS if x in (p["patterns"] or PATTERNS)]
        lr = p["layer_runs"]
        if lr is not None and not isinstance(lr, (str, list, tuple)):
            raise ParameterError(f"layer_runs must be a list of aio modes or 'none', got {lr!r}")
        p["layer_runs"] = (
            []
            if lr in ([], (), "", "none")
            else [a for a in AIO if a in choose_list(lr, AIO, "layer_runs aio backend")]
        )
        cells = round_cells(p)
        if not cells:
            raise ParameterError(f"no guest boot left: boots {p['boots']!r} has no aio {p['aio']}")
        p["boots"] = cells
        # the aio modes a round boots, in the book's order (what the tables and figures show)
        p["aio"] = [a for a in AIO if any(c.split("/")[0] == a for c in p["boots"])]

    def preflight(self) -> list[str]:
        """Why collect can't run here at all ([] = it can; a missing layer is only a skip)."""
        return list(guest.preflight()) + super().preflight()

    def load(self, data_dir=None):
        """Every dataset (analysis.VirtioData: the quoted dataset's frames, computed once)."""
        return self.part("analysis").VirtioData(self, data_dir)


chapter = VirtioBlkLatency()
