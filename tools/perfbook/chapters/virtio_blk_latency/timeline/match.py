"""virtio_blk_latency: one request across the layers. Each layer's events (parsed frames) are
cut into one row per request and matched to the benchmark's requests by the offset they read.
Pure: frames in, frames out."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..parse import KVM_IRQ, KVM_NOTIFY, SUBMIT_CALLS, block_fields, qemu_fields, syscall_args


def sector_to_offset(sectors, extents: list[tuple[int, int, int]], part_start: int):
    """Disk sectors (512 B, whole disk) -> image offsets (NaN outside the image)."""
    s = np.asarray(sectors, dtype="float64")
    if not extents:
        return np.full(len(s), np.nan)
    ext = sorted(extents, key=lambda e: e[1])
    ph = np.array([e[1] for e in ext], dtype="float64")
    lo = np.array([e[0] for e in ext], dtype="float64")
    ln = np.array([e[2] for e in ext], dtype="float64")
    byte = (s - part_start) * 512
    i = np.searchsorted(ph, byte, side="right") - 1
    ok = i >= 0
    i = np.clip(i, 0, len(ph) - 1)
    ok &= byte < ph[i] + ln[i]
    return np.where(ok, lo[i] + (byte - ph[i]), np.nan)


def match_in_order(want, have, lookahead: int = 64):
    """Match a sequence of wanted offsets to a sequence of observed offsets, both in time order,
    one to one and without reordering: each wanted offset takes the next observed one that
    equals it within `lookahead` places (observations in between are skipped: other I/O);
    a wanted offset with no such observation stays unmatched (-1) and consumes nothing."""
    have = list(have)
    out = np.full(len(want), -1, dtype=int)
    j = 0
    for i, w in enumerate(want):
        for k in range(j, min(len(have), j + lookahead)):
            if have[k] == w:
                out[i] = k
                j = k + 1
                break
    return out


def _first_at_or_after(arr, t):
    i = np.searchsorted(arr, t, side="left")
    return arr[i] if i < len(arr) else None


def _last_at_or_before(arr, t):
    i = np.searchsorted(arr, t, side="right") - 1
    return arr[i] if i >= 0 else None


def guest_stamps(bench, events):
    """Per benchmark request (guest TSC): block_rq_issue of its offset, the first vp_notify after
    it, the first vring_interrupt after that, and the block_rq_complete of its sector, all
    inside the request's [t0, t1]. Columns g_issue, g_notify, g_irq, g_complete (absolute)."""
    ev = events[events.kind == "event"]
    iss = ev[ev.name == "block_rq_issue"]
    cmp_ = ev[ev.name == "block_rq_complete"]

    def sectors(df):
        f = [block_fields(d) for d in df.detail]
        return np.array([x["sector"] if x else -1 for x in f], dtype="int64")

    iss_ts, iss_sec = iss.ts.to_numpy(), sectors(iss)
    cmp_by = {}
    for t, s in zip(cmp_.ts.to_numpy(), sectors(cmp_)):
        cmp_by.setdefault(int(s), []).append(int(t))
    notify = np.sort(ev[ev.name == "vp_notify"].ts.to_numpy())
    irq = np.sort(ev[ev.name == "vring_interrupt"].ts.to_numpy())
    rows = []
    for t0, t1, off in zip(bench.t0.to_numpy(), bench.t1.to_numpy(), bench.offset.to_numpy()):
        r = {"g_issue": None, "g_notify": None, "g_irq": None, "g_complete": None}
        lo = np.searchsorted(iss_ts, t0, side="left")
        hi = np.searchsorted(iss_ts, t1, side="right")
        hit = [k for k in range(lo, hi) if iss_sec[k] * 512 == off]
        if hit:
            gi = int(iss_ts[hit[0]])
            r["g_issue"] = gi
            n = _first_at_or_after(notify, gi)
            if n is not None and n <= t1:
                r["g_notify"] = int(n)
                q = _first_at_or_after(irq, n)
                if q is not None and q <= t1:
                    r["g_irq"] = int(q)
            c = _first_at_or_after(np.array(cmp_by.get(int(off // 512), []), dtype="int64"), gi)
            if c is not None and c <= t1:
                r["g_complete"] = int(c)
        rows.append(r)
    return pd.DataFrame(rows, index=bench.index, dtype="float64")


def qemu_segments(ev):
    """QEMU log events -> one row per virtqueue notify of the benchmark's disk: the first of each
    later event up to the next notify (one request in flight at a time), and the offset its
    virtio_blk_handle_read names. The benchmark's disk is the vdev with the most reads."""
    ev = ev.sort_values(["us", "line"], kind="stable")
    reads = ev[ev.name == "virtio_blk_handle_read"]
    if reads.empty:
        return pd.DataFrame(columns=["q_notify", "notify_tid", "offset"])
    vdevs = [qemu_fields(d).get("vdev") for d in reads.detail]
    vdev = max(set(vdevs), key=vdevs.count)
    vq = None
    segs, cur = [], None
    first = {
        "virtqueue_pop": "q_pop",
        "thread_pool_submit": "q_submit",
        "luring_co_submit": "q_submit",
        "thread_pool_complete": "q_cb",
        "luring_process_completion": "q_cb",
        "virtio_blk_req_complete": "q_req",
    }
    for name, us, tid, det in zip(
        ev.name.to_numpy(), ev.us.to_numpy(), ev.tid.to_numpy(), ev.detail.to_numpy()
    ):
        f = qemu_fields(det) if name.startswith(("virtio", "virtqueue")) else {}
        if name == "virtio_queue_notify":
            if f.get("vdev") != vdev:
                continue
            vq = f.get("vq", vq)
            cur = {"q_notify": int(us), "notify_tid": int(tid), "offset": None}
            segs.append(cur)
            continue
        if cur is None:
            continue
        if name == "virtio_blk_handle_read":
            if f.get("vdev") == vdev and cur["offset"] is None:
                cur["offset"] = int(f.get("sector", "-1")) * 512
                cur["q_read"] = int(us)
        elif name == "virtio_blk_rw_complete":
            if f.get("vdev") == vdev:
                cur.setdefault("q_rw", int(us))
        elif name == "virtqueue_flush":
            if f.get("vq") == vq:
                cur.setdefault("q_flush", int(us))
        elif name in ("virtio_notify", "virtio_notify_irqfd"):
            if f.get("vdev") == vdev and "q_irq" not in cur:
                cur["q_irq"] = int(us)
                cur["irq_tid"] = int(tid)
        elif name == "apic_deliver_irq":
            if "q_irq" in cur:
                cur.setdefault("q_apic", int(us))
        elif name in first:
            cur.setdefault(first[name], int(us))
    cols = [
        "q_notify",
        "notify_tid",
        "offset",
        "q_pop",
        "q_read",
        "q_submit",
        "q_cb",
        "q_rw",
        "q_req",
        "q_flush",
        "q_irq",
        "irq_tid",
        "q_apic",
    ]
    d = pd.DataFrame(segs)
    for c in cols:
        if c not in d.columns:
            d[c] = None
    d = d[cols]
    return d[d.offset.notna()].reset_index(drop=True)


def thread_kind(comm: str, tid: int, pid: int | None) -> str:
    if pid is not None and tid == pid:
        return "main"
    if comm.startswith("CPU "):
        return "vcpu"
    if comm.startswith("worker"):
        return "worker"
    if comm.startswith("iou-"):
        return "io_uring"
    return "other"


def busiest_own_fd(writes, who: str):
    """The fd that only `who` threads write (8-byte eventfd writes) and most often: the vCPU's
    ioeventfd of the benchmark's queue ('vcpu'), the main loop's guest notifier ('main'). Other
    eventfds (the AioContext notifier, ...) are written by several kinds of thread."""
    if writes.empty:
        return None
    kinds = writes.groupby("fd")["who"].agg(lambda s: set(s))
    own = [fd for fd, k in kinds.items() if k == {who}]
    if not own:
        return None
    counts = writes[writes.fd.isin(own)].groupby("fd").size()
    return int(counts.idxmax())


def host_issues(qev, bev, pid: int | None, extents, part_start: int):
    """Host events -> one row per block request of the image: h_issue, its offset, h_complete,
    the submission syscall around it (h_sub, h_sub_exit, which call and thread), the vCPU's last
    ioeventfd kick before it (h_kick), the main thread's first guest-notifier write after the
    completion (h_notifier) and, with KVM, the notify exit and the MSI injection."""
    blk = bev[(bev.kind == "event") & bev.name.isin(["block_rq_issue", "block_rq_complete"])].copy()
    f = [block_fields(d) for d in blk.detail]
    blk["sector"] = [x["sector"] if x else -1 for x in f]
    blk["rwbs"] = [x["rwbs"] if x else "" for x in f]
    iss = blk[(blk.name == "block_rq_issue") & blk.rwbs.str.contains("R")].copy()
    iss["offset"] = sector_to_offset(iss.sector, extents, part_start)
    iss = iss[iss.offset.notna()].sort_values("ts", kind="stable")
    cmp_by: dict[int, np.ndarray] = {}
    for s, g in blk[blk.name == "block_rq_complete"].groupby("sector"):
        cmp_by[int(s)] = np.sort(g.ts.to_numpy())
    q = qev.sort_values("ts", kind="stable")
    sub = q[(q.kind == "enter") & q.name.isin(SUBMIT_CALLS)]
    sub_ts = sub.ts.to_numpy()
    exits = {}
    for (tid, name), g in q[(q.kind == "exit") & q.name.isin(SUBMIT_CALLS)].groupby(
        ["tid", "name"]
    ):
        exits[(int(tid), name)] = np.sort(g.ts.to_numpy())
    w = q[(q.kind == "enter") & (q.name == "write")].copy()
    if len(w):
        args = [syscall_args(d) for d in w.detail]
        w["fd"] = [a.get("fd") for a in args]
        w = w[[a.get("count") == 8 for a in args]]
    else:
        w["fd"] = []
    w["who"] = [thread_kind(c, int(t), pid) for c, t in zip(w.comm, w.tid)]
    kick = np.sort(w[w.fd == busiest_own_fd(w, "vcpu")].ts.to_numpy())
    main_w = np.sort(w[w.fd == busiest_own_fd(w, "main")].ts.to_numpy())
    kev = q[(q.kind == "event")]
    kn = kev[kev.name.isin(KVM_NOTIFY)]
    if len(kn):
        kn = kn[[("write" in d) or (n == "kvm_fast_mmio") for n, d in zip(kn.name, kn.detail)]]
    kvm_notify = np.sort(kn.ts.to_numpy())
    kvm_irq = np.sort(kev[kev.name.isin(KVM_IRQ)].ts.to_numpy())
    rows = []
    for ts, off, sec in zip(iss.ts.to_numpy(), iss.offset.to_numpy(), iss.sector.to_numpy()):
        r = {"h_issue": int(ts), "offset": int(off)}
        c = _first_at_or_after(cmp_by.get(int(sec), np.array([], dtype="int64")), ts)
        r["h_complete"] = None if c is None else int(c)
        k = np.searchsorted(sub_ts, ts, side="right") - 1
        r["h_sub"] = r["h_sub_exit"] = None
        r["h_sub_call"] = r["h_sub_thread"] = None
        if k >= 0:
            srow = sub.iloc[k]
            r["h_sub"] = int(srow.ts)
            r["h_sub_call"] = srow["name"]
            r["h_sub_thread"] = thread_kind(srow.comm, int(srow.tid), pid)
            e = _first_at_or_after(
                exits.get((int(srow.tid), srow["name"]), np.array([], dtype="int64")), srow.ts
            )
            r["h_sub_exit"] = None if e is None else int(e)
        before = r["h_sub"] if r["h_sub"] is not None else int(ts)
        kk = _last_at_or_before(kick, before)
        r["h_kick"] = None if kk is None else int(kk)
        kn_ = _last_at_or_before(kvm_notify, before)
        r["h_kvm_notify"] = None if kn_ is None else int(kn_)
        done = r["h_complete"]
        if (
            done is not None
            and r["h_sub_call"] in ("preadv", "pread64", "preadv2")
            and r["h_sub_exit"]
        ):
            done = max(done, r["h_sub_exit"])
        nt = _first_at_or_after(main_w, done) if done is not None else None
        r["h_notifier"] = None if nt is None else int(nt)
        ki = _first_at_or_after(kvm_irq, r["h_complete"]) if r["h_complete"] is not None else None
        r["h_kvm_irq"] = None if ki is None else int(ki)
        rows.append(r)
    cols = [
        "h_issue",
        "offset",
        "h_complete",
        "h_sub",
        "h_sub_exit",
        "h_sub_call",
        "h_sub_thread",
        "h_kick",
        "h_kvm_notify",
        "h_notifier",
        "h_kvm_irq",
    ]
    return pd.DataFrame(rows, columns=cols)
