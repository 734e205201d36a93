"""qemu_cache_modes, parse: text -> rows (tested on fixtures): strace -f output of qemu-io,
the guest script's output, and the run time qemu-img bench and dd print. Also the chapter's
vocabulary, which the collect, the parsers and the analysis share: the modes and parts, QEMU's
documented mapping, the traced write and the phase markers."""

from __future__ import annotations

import re

SEED = "003_a6856da90838b12c.txt"
MODES = ("none", "directsync", "writethrough", "writeback", "unsafe")
PARTS = ("semantics", "bench", "host_dd", "guest")
FORMATS = ("raw", "qcow2")
OPS = ("write", "read")
AIO = ("threads", "native", "io_uring")
KiB, MiB = 1024, 1024 * 1024

# The documented mapping: qemu-system-x86_64(1), QEMU 7.2, -drive cache= (from qemu-options.hx).
# mode -> (cache.writeback, cache.direct, cache.no-flush)
DOC_SOURCE = (
    "qemu-system-x86_64(1) manual page of QEMU 7.2 (Debian qemu-system-x86 "
    "1:7.2+dfsg-7), -drive cache=, generated from qemu-options.hx"
)
DOC_MAPPING: dict[str, tuple[bool, bool, bool]] = {
    "writeback": (True, False, False),
    "none": (True, True, False),
    "writethrough": (False, False, False),
    "directsync": (False, True, False),
    "unsafe": (True, False, True),
}

# -- semantics: the traced writes of qemu-io
SEM_WRITE = 64 * KiB
# Phase markers: reads of lengths that nothing else uses, before and after the flush command.
MARK_FLUSH_BEGIN = (6 * MiB, 12 * KiB)
MARK_FLUSH_END = (7 * MiB, 20 * KiB)

# -- the guest's dd
DD_BS = 64 * KiB

_LINE = re.compile(r"^(\d+)\s+(.*)$")
_RESUMED = re.compile(r"^<\.\.\. (\w+) resumed>(.*)$")
_CALL = re.compile(r"^(\w+)\((.*)$")
_RET = re.compile(r"\)\s+=\s+(-?\d+|0x[0-9a-fA-F]+|\?)(?:\s+(E\w+))?(?:\s+\(.*\))?\s*$")


def parse_strace(text: str) -> list[dict]:
    """strace -f output -> [{seq, pid, syscall, args, ret, errno}] in entry order.

    '<unfinished ...>' / '<... resumed>' pairs are joined; signal and exit lines are dropped.
    """
    events: list[dict] = []
    pending: dict[str, int] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if not m:
            continue
        pid, rest = m.group(1), m.group(2)
        if rest.startswith(("+++", "---")):
            continue
        r = _RESUMED.match(rest)
        if r:
            idx = pending.pop(pid, None)
            if idx is None:
                continue
            ev = events[idx]
            ev["args"] += r.group(2)
            _finish(ev)
            continue
        c = _CALL.match(rest)
        if not c:
            continue
        ev = {
            "seq": len(events),
            "pid": int(pid),
            "syscall": c.group(1),
            "args": c.group(2),
            "ret": None,
            "errno": None,
        }
        if rest.endswith("<unfinished ...>"):
            ev["args"] = ev["args"][: -len("<unfinished ...>")].rstrip()
            pending[pid] = len(events)
        else:
            _finish(ev)
        events.append(ev)
    return events


def _finish(ev: dict) -> None:
    m = _RET.search(ev["args"])
    if m:
        v = m.group(1)
        ev["ret"] = None if v == "?" else int(v, 0)
        ev["errno"] = m.group(2) if v.startswith("-") else None
        ev["args"] = ev["args"][: m.start()]


_IOCB_START = re.compile(r"\{aio_data=")
_IOCB_OP = re.compile(r"aio_lio_opcode=IOCB_CMD_(\w+), aio_fildes=(\d+)")
_IOCB_OFFSET = re.compile(r"\baio_offset=(\d+)")
_IOCB_NBYTES = re.compile(r"\baio_nbytes=(\d+)")
_IOVLEN = re.compile(r"iov_len=(\d+)")
_INTS = re.compile(r"(?<![\w.])(-?\d+)(?![\w.])")


def classify(events: list[dict], image_name: str) -> list[dict]:
    """Keep what concerns the image: its opens, I/O and syncs on its fd, io_uring_enter.

    Each kept row gets kind (open/write/read/sync/uring), fd, open flags, bytes, offset.
    """
    fd_flags: dict[int, str] = {}
    rows = []
    for ev in events:
        name, args = ev["syscall"], ev["args"]
        if name == "openat":
            m = re.match(r'\s*[^,]+,\s*"([^"]*)",\s*([A-Z_|0-9]+)', args)
            if not m or not _is_image(m.group(1), image_name) or ev["ret"] is None or ev["ret"] < 0:
                continue
            fd_flags[ev["ret"]] = m.group(2)
            rows.append(
                {
                    **ev,
                    "kind": "open",
                    "fd": ev["ret"],
                    "flags": m.group(2),
                    "bytes": None,
                    "offset": None,
                    "dsync": False,
                }
            )
            continue
        if name == "io_uring_enter":
            rows.append(
                {
                    **ev,
                    "kind": "uring",
                    "fd": None,
                    "flags": None,
                    "bytes": None,
                    "offset": None,
                    "dsync": False,
                }
            )
            continue
        if name == "io_submit":
            # one segment per iocb: strace prints FSYNC/FDSYNC iocbs without aio_offset
            # (and without aio_flags), PWRITE/PREAD with aio_buf + aio_nbytes and
            # PWRITEV/PREADV with an iovec array in aio_buf
            starts = [m.start() for m in _IOCB_START.finditer(args)] + [len(args)]
            for seg in (args[a:b] for a, b in zip(starts, starts[1:])):
                m = _IOCB_OP.search(seg)
                if not m:
                    continue
                op, fd = m.group(1), int(m.group(2))
                if fd not in fd_flags:
                    continue
                kind = (
                    "write"
                    if op.startswith("PWRITE")
                    else "read"
                    if op.startswith("PREAD")
                    else "sync"
                    if op in ("FSYNC", "FDSYNC")
                    else "other"
                )
                nb = off = None
                if kind in ("write", "read"):
                    if op.endswith("V"):
                        nb = sum(int(x) for x in _IOVLEN.findall(seg)) or None
                    else:
                        mb = _IOCB_NBYTES.search(seg)
                        nb = int(mb.group(1)) if mb else None
                    mo = _IOCB_OFFSET.search(seg)
                    off = int(mo.group(1)) if mo else None
                rows.append(
                    {
                        **ev,
                        "syscall": f"io_submit:{op}",
                        "kind": kind,
                        "fd": fd,
                        "flags": fd_flags[fd],
                        "bytes": nb,
                        "offset": off,
                        "dsync": bool(re.search(r"RWF_D?SYNC", seg)),
                    }
                )
            continue
        m = re.match(r"\s*(\d+)", args)
        if not m:
            continue
        fd = int(m.group(1))
        if fd not in fd_flags:
            continue
        kind = {
            "pwrite64": "write",
            "pwritev": "write",
            "pwritev2": "write",
            "pread64": "read",
            "preadv": "read",
            "preadv2": "read",
            "fdatasync": "sync",
            "fsync": "sync",
            "sync_file_range": "sync",
        }.get(name)
        if kind is None:
            continue
        nb = off = None
        if kind in ("write", "read"):
            if name in ("pwrite64", "pread64"):  # (fd, buf, count, offset)
                m = re.search(r",\s*(\d+),\s*(\d+)\s*$", args)
                if m:
                    nb, off = int(m.group(1)), int(m.group(2))
            else:  # (fd, [iov...], iovcnt, offset[, flags])
                parts = [x.strip() for x in re.sub(r"\[.*\]", "[]", args).split(",")]
                nb = sum(int(x) for x in _IOVLEN.findall(args))
                off = int(parts[3]) if len(parts) > 3 and parts[3].isdigit() else None
        rows.append(
            {
                **ev,
                "kind": kind,
                "fd": fd,
                "flags": fd_flags[fd],
                "bytes": nb,
                "offset": off,
                "dsync": bool(re.search(r"RWF_D?SYNC", args)),
            }
        )
    return rows


def _is_image(path: str, image_name: str) -> bool:
    """The exact image: the same path, or (for a bare name) the same last component;
    "xsem.raw" is not "sem.raw"."""
    if path == image_name:
        return True
    return not image_name.startswith("/") and path.endswith("/" + image_name)


def assign_phases(rows: list[dict]) -> list[dict]:
    """open -> write -> flush -> close, split at the first write and the two marker reads.

    Failed syscalls (e.g. QEMU's O_DIRECT alignment probes, which return EINVAL) count in
    the phase they happen in but are not I/O of the experiment.
    """
    phase = "open"
    out = []
    for r in rows:
        ok = r["ret"] is not None and r["ret"] >= 0
        if r["kind"] == "read" and ok and r["bytes"] == MARK_FLUSH_BEGIN[1]:
            phase = "flush"
            out.append({**r, "phase": phase, "marker": "flush_begin"})
            continue
        if r["kind"] == "read" and ok and r["bytes"] == MARK_FLUSH_END[1]:
            out.append({**r, "phase": phase, "marker": "flush_end"})
            phase = "close"
            continue
        if phase == "open" and r["kind"] == "write" and ok:
            phase = "write"
        out.append({**r, "phase": phase, "marker": ""})
    return out


def trace_rows(text: str, image_name: str) -> list[dict]:
    """strace text -> the rows of the image, each with its phase (the trace table's rows)."""
    return assign_phases(classify(parse_strace(text), image_name))


def parse_guest(output: str) -> tuple[dict, list[dict]]:
    """The guest script's output -> ({cache_type, write_cache, size, guest_buffers}, dd rows)."""
    info, rows = {}, []
    for line in output.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] in ("CACHE_TYPE", "WRITE_CACHE", "SIZE", "GUEST_BUFFERS"):
            info[parts[0].lower()] = " ".join(parts[1:])
        elif parts[0] == "DD" and len(parts) >= 8:
            rnd, pos, variant, a, b, rc = parts[1:7]
            rows.append(
                {
                    "round": int(rnd),
                    "position": int(pos),
                    "variant": variant,
                    "t0_us": int(a),
                    "t1_us": int(b),
                    "rc": int(rc),
                    "records_out": parts[7].replace("_", " "),
                }
            )
    return info, rows


_COMPLETED = re.compile(r"Run completed in ([0-9.]+) seconds")
_DD = re.compile(r"^(\d+) bytes .* copied, ([0-9.e+-]+) s", re.M)


def bench_seconds(stdout: str) -> float | None:
    """The run time qemu-img bench reports ('Run completed in 0.051 seconds'), or None."""
    m = _COMPLETED.search(stdout)
    return float(m.group(1)) if m else None


def dd_summary(stderr: str) -> tuple[int, float] | None:
    """(bytes, seconds) from dd's summary line (LC_ALL=C), or None."""
    m = _DD.search(stderr)
    return (int(m.group(1)), float(m.group(2))) if m else None
