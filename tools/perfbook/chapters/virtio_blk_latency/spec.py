"""virtio_blk_latency: what the chapter measures (shared by collect and analysis)."""
from __future__ import annotations

SEED = "001_44860ac07de981e7.txt"
SEED_TEXT = "001_44860ac07de981e7.virtio-blk-latency.txt"
AIO = ("threads", "native", "io_uring")
PATTERNS = ("seq", "rand")
LAYERS = ("guest", "qemu", "host")
VARIANTS = {"plain": (), "guest": ("guest",), "qemu": ("qemu",), "host": ("host",),
            "boundary": ("qemu", "host"), "all": ("guest", "qemu", "host")}
# the seed's method: one layer per boot; 'boundary' is the host/QEMU edge, which the kvm.ko row's
# TCG stand-in needs (the vCPU's kick is a host event, the APIC delivery a QEMU one)
SINGLE = ("guest", "qemu", "host", "boundary")
BENCH = "seqread"
BLOCK = 4096
MiB = 1024 * 1024
REGION_START = MiB        # the benchmark stays clear of the partition-table reads at both ends
OUT_DISK_MIB = 96

QEMU_EVENTS = ("virtio_queue_notify", "virtqueue_pop", "virtio_blk_handle_read",
               "thread_pool_submit", "thread_pool_complete", "luring_co_submit",
               "luring_process_completion", "virtio_blk_rw_complete", "virtio_blk_req_complete",
               "virtqueue_flush", "virtio_notify", "virtio_notify_irqfd", "apic_deliver_irq")
# The single-layer boots ('qemu', 'boundary') log only what their rows and the matching need, as
# the seed enabled only virtio_queue_notify and virtio_notify for its QEMU row: the log backend
# writes every event with its own write(), so each event costs the main loop time.
QEMU_CORE_EVENTS = ("virtio_queue_notify", "virtio_blk_handle_read", "virtio_blk_rw_complete",
                    "virtio_notify", "virtio_notify_irqfd", "apic_deliver_irq")
SUBMIT_CALLS = ("preadv", "pread64", "preadv2", "io_submit", "io_uring_enter")
HOST_SYSCALLS = SUBMIT_CALLS + ("io_getevents", "write")
KVM_NOTIFY = ("kvm_fast_mmio", "kvm_mmio", "kvm_pio")
KVM_IRQ = ("kvm_msi_set_irq", "kvm_set_irq")

# Rounds repeat adaptively (perfbook.analysis.repetition.Repetition). A round boots every aio mode and variant
# once, in shuffled order; the value each round adds per aio mode is the median latency of its
# untraced ("plain") boot. Rounds go on until each aio mode's median over rounds has a 95 % CI
# narrower than rep_target (relative), or rep_budget_s runs out, or rep_max_runs rounds are in.
# The boot is the unit of repetition: requests inside one boot share its conditions.
EXPERIMENT = "guest benchmark, untraced boot"

# the stamps of a request, per layer (relative to the layer's anchor in the requests table)
STAMPS_G = ("g_issue", "g_notify", "g_irq", "g_complete")
STAMPS_H = ("h_kick", "h_kvm_notify", "h_sub", "h_sub_exit", "h_complete", "h_notifier", "h_kvm_irq")
STAMPS_Q = ("q_pop", "q_read", "q_submit", "q_cb", "q_rw", "q_req", "q_flush", "q_irq", "q_apic")
# absolute anchors (guest TSC, host TSC, QEMU µs) are stored relative to the boot's smallest
BASES = {"t0": "t0_base", "h_anchor": "h_base", "q_anchor": "q_base"}
