"""Text -> frames: the kvmtsc helper's CSV-like lines and the x86-tsc ftrace text."""
from __future__ import annotations

# kvmtsc line kind -> (result name, columns); every column but variant/kind is an integer
HELPER_LINES = {
    "s": ("samples", ["variant", "round", "cpu", "idx", "warmup", "before", "guest", "after"]),
    "op": ("ops", ["seq", "kind", "variant", "round", "tsc_before", "tsc_after", "requested", "readback"]),
    "pp": ("pingpong", ["direction", "round", "i", "t2_minus_t1", "t3_minus_t2"]),
    "freq": ("freq", ["rep", "ns", "cycles"]),
}


def parse_helper(text: str) -> dict:
    """Split kvmtsc output into frames (samples, ops, pingpong, freq) and dicts (meta, facts)
    by line kind. u64 values stay exact (Python ints in object columns)."""
    import pandas as pd
    rows: dict[str, list] = {k: [] for k in HELPER_LINES}
    meta: dict[str, str] = {}
    facts: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(",")
        kind = parts[0]
        if kind == "meta":
            meta[parts[1]] = parts[2]
        elif kind == "fact":
            facts[parts[1]] = parts[2]
        elif kind in rows:
            rows[kind].append(parts[1:])
    out: dict = {"meta": meta, "facts": facts}
    for k, (name, cols) in HELPER_LINES.items():
        df = pd.DataFrame(rows[k], columns=cols)
        for col in cols:
            if col not in ("variant", "kind"):
                df[col] = df[col].map(int) if len(df) else df[col]
        out[name] = df
    return out


def parse_trace(text: str, pid: int | None = None):
    """ftrace text (x86-tsc clock: timestamps are raw TSC, kept exact) -> tidy frame
    pid, cpu, ts, event, detail. Any trace options parse (perfbook.probes.ftrace); attrs['lost']
    and attrs['lost_lines'] say whether the ring buffer dropped events."""
    from perfbook.probes import ftrace
    df = ftrace.parse_lines(text)
    df = df[df["event"].notna() & ((df["pid"] == pid) if pid is not None else True)]
    out = df[["pid", "cpu", "ts"]].assign(event=df["event"], detail=df["body"].str.strip())
    out = out.reset_index(drop=True)
    out.attrs = dict(df.attrs)
    return out


def tsc_offset_events(trace_df):
    """The kvm_write_tsc_offset events of a parse_trace frame: ts, cpu, vcpu, prev, next
    (prev and next as the kernel prints them, unsigned 64-bit)."""
    import pandas as pd
    from perfbook.probes.ftrace import parse_kv
    rows = []
    for r in trace_df[trace_df["event"] == "kvm_write_tsc_offset"].itertuples():
        f = parse_kv(r.detail)
        if {"vcpu", "prev", "next"} <= f.keys():
            rows.append({"ts": r.ts, "cpu": r.cpu, "vcpu": int(f["vcpu"]),
                         "prev": int(f["prev"]), "next": int(f["next"])})
    return pd.DataFrame(rows, columns=["ts", "cpu", "vcpu", "prev", "next"])
