"""virtio_blk_latency: text -> frames. The traces of every layer (ftrace of the guest and the
host, QEMU's log backend), the benchmark's and the calibration's output, and the guest's
output disk. Pure: tested on the fixtures in tests/fixtures/virtio_blk_latency."""
from __future__ import annotations

import re

from perfbook.core.errors import PerfbookError

_SYS_ENTER = re.compile(r"^sys_(\w+)\((.*)\)\s*$")
_SYS_EXIT = re.compile(r"^sys_(\w+) -> (0x[0-9a-fA-F]+|-?\d+)\s*$")
_BLOCK = re.compile(r"^(\d+),(\d+)\s+(\S+)\s+(?:(\d+)\s+)?\(([^)]*)\)\s+(\d+)\s+\+\s+(\d+)")
_ARG = re.compile(r"(\w+): (0x[0-9a-fA-F]+|-?\d+)")


def parse_ftrace(text: str):
    """ftrace 'trace' text -> frame: ts, tid, comm, kind (enter/exit/event), name, detail,
    ret. Syscall events print as 'sys_x(args)' and 'sys_x -> ret'. Lines are split by
    perfbook.probes.ftrace (host or guest kernel, any trace options); ts is the raw count for the
    x86-tsc clock we set (int), float seconds if a kernel fell back to a ns clock.
    attrs['lost'] / attrs['lost_lines'] say whether the ring buffer dropped events."""
    import pandas as pd
    from perfbook.probes import ftrace
    rows = []
    st = ftrace.new_stats()
    for r in ftrace.records(text, st):
        ts, tid, comm = r.ts, r.pid, r.task
        if r.event is not None:
            rows.append((ts, tid, comm, "event", r.event, r.body, None))
            continue
        body = r.body
        s = _SYS_EXIT.match(body)
        if s:
            rows.append((ts, tid, comm, "exit", s[1], "", int(s[2], 0)))
            continue
        s = _SYS_ENTER.match(body)
        if s:
            rows.append((ts, tid, comm, "enter", s[1], s[2], None))
    df = pd.DataFrame(rows, columns=["ts", "tid", "comm", "kind", "name", "detail", "ret"])
    df.attrs.update(st)
    return df


def syscall_args(detail: str) -> dict[str, int]:
    return {k: int(v, 0) for k, v in _ARG.findall(detail)}


def block_fields(detail: str) -> dict | None:
    """'254,0 R 4096 () 2048 + 8 ...' -> dev, rwbs, sector, nr_sector."""
    m = _BLOCK.match(detail)
    if not m:
        return None
    return {"major": int(m[1]), "minor": int(m[2]), "rwbs": m[3], "sector": int(m[6]),
            "nr_sector": int(m[7])}


_QLOG = re.compile(r"^(\d+)@(\d+)\.(\d{6}):(\w+)\s?(.*)$")


def parse_qemu_log(text: str):
    """QEMU 'log' trace backend with -msg timestamp=on -> frame: line, tid, us (gettimeofday
    microseconds since the epoch), name, detail."""
    import pandas as pd
    rows = []
    for i, line in enumerate(text.splitlines()):
        m = _QLOG.match(line)
        if m:
            rows.append((i, int(m[1]), int(m[2]) * 1_000_000 + int(m[3]), m[4], m[5]))
    return pd.DataFrame(rows, columns=["line", "tid", "us", "name", "detail"])


def qemu_fields(detail: str) -> dict[str, str]:
    toks = detail.split()
    return {toks[i]: toks[i + 1] for i in range(0, len(toks) - 1, 2)}


def parse_bench(text: str):
    """seqread output -> (requests frame, loop frame)."""
    import pandas as pd
    req, loops = [], []
    for line in text.splitlines():
        parts = line.strip().split(",")
        if parts[0] == "r" and len(parts) == 7:
            req.append((parts[1], int(parts[2]), int(parts[3]), int(parts[4]), int(parts[5]), int(parts[6])))
        elif parts[0] == "loop" and len(parts) == 7:
            loops.append((parts[1], *map(int, parts[2:])))
    r = pd.DataFrame(req, columns=["pattern", "idx", "warm", "offset", "t0", "t1"])
    lp = pd.DataFrame(loops, columns=["pattern", "tsc_start", "tsc_end", "mono_start", "mono_end", "n"])
    return r, lp


def parse_calib(text: str):
    import pandas as pd
    rows = [tuple(int(x) for x in line.split(",")[1:5]) for line in text.splitlines()
            if line.startswith("c,") and len(line.split(",")) == 5]
    return pd.DataFrame(rows, columns=["tsc0", "tsc1", "real_ns", "raw_ns"])


def split_output(blob: bytes) -> dict[str, str]:
    """The guest's output disk: '@@NAME' sections up to '@@END'."""
    end = blob.find(b"\n@@END")
    if end < 0:
        raise PerfbookError("the guest's output disk holds no complete result (no @@END marker)")
    text = blob[:end].decode(errors="replace")
    out: dict[str, list[str]] = {}
    cur = None
    for line in text.splitlines():
        if line.startswith("@@") and re.fullmatch(r"@@[A-Z]+", line.strip()):
            cur = line.strip()[2:]
            out.setdefault(cur, [])
        elif cur is not None:
            out[cur].append(line)
    return {k: "\n".join(v) + "\n" for k, v in out.items()}


def ring_stats(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        v = v.strip().split()[0] if v.strip() else ""
        if v.isdigit():
            out[k.strip()] = int(v)
    return out

