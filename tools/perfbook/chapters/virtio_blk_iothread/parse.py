"""virtio_blk_iothread: the guest's output, fio's JSON and bonnie++'s CSV line -> rows."""

from __future__ import annotations

import json
import math
import re

from perfbook.core.errors import PerfbookError

END_RE = re.compile(r"@@JOB-END (\S+) rc=(-?\d+)@@")


def split_output(text: str) -> tuple[dict, dict]:
    """The guest script's output -> ({INFO key: value}, {job id: {"rc", "out", "err"}})."""
    info, jobs, cur, buf = {}, {}, None, []
    for line in text.splitlines():
        if m := re.fullmatch(r"INFO (\S+) ?(.*)", line):
            info[m.group(1)] = m.group(2).strip()
        elif m := END_RE.fullmatch(line):
            jobs.setdefault(m.group(1), {"out": "", "err": ""})["rc"] = int(m.group(2))
        elif m := re.fullmatch(r"@@OUT-BEGIN (\S+)@@", line):
            cur, buf = m.group(1), []
        elif cur and line == f"@@OUT-END {cur}@@":
            jobs.setdefault(cur, {"rc": None, "err": ""})["out"] = "\n".join(buf)
            cur = None
        elif m := re.fullmatch(r"@@ERR (\S+) (.*)@@", line):
            jobs.setdefault(m.group(1), {"rc": None, "out": ""})["err"] = m.group(2)
        elif cur:
            buf.append(line)
    return info, jobs


def fio_rows(text: str) -> dict[str, dict]:
    """fio's JSON (--output-format=json) -> {job name: IOPS, bandwidth, latencies (µs) and fio's
    own CPU use}, each from the direction the job's rw option names."""
    start = text.find("{")
    try:
        doc = json.loads(text[start:]) if start >= 0 else None
    except ValueError as e:
        raise PerfbookError(f"fio's JSON output does not parse ({e})") from None
    if not doc or not doc.get("jobs"):
        raise PerfbookError("fio printed no job in its JSON output")
    out = {}
    for j in doc["jobs"]:
        if j.get("error"):
            raise PerfbookError(f"fio job {j.get('jobname')} failed with error {j['error']}")
        rw = j.get("job options", {}).get("rw") or doc.get("global options", {}).get("rw", "read")
        d = j["write" if "write" in rw else "read"]
        pct = d.get("clat_ns", {}).get("percentile", {})

        def p(q: str, pct=pct) -> float:
            v = next((v for k, v in pct.items() if math.isclose(float(k), float(q))), None)
            return v / 1000 if v is not None else math.nan

        out[j["jobname"]] = {
            "iops": float(d["iops"]),
            "bw_kib_s": float(d["bw"]),
            "lat_mean_us": d["lat_ns"]["mean"] / 1000,
            "clat_p50_us": p("50"),
            "clat_p90_us": p("90"),
            "clat_p99_us": p("99"),
            "clat_p999_us": p("99.9"),
            "guest_usr_pct": float(j["usr_cpu"]),
            "guest_sys_pct": float(j["sys_cpu"]),
            "ios": int(d["total_ios"]),
        }
    return out


# bonnie++'s CSV line, format 1.98 (bon_csv2txt): 9..20 are the six I/O tests, each a rate and
# a %CPU; 38..43 their latencies
BONNIE_IO = ("per_chr_output", "block_output", "rewrite", "per_chr_input", "block_input", "seeks")


def _latency_us(s: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s)", s.strip())
    return float(m.group(1)) * {"us": 1, "ms": 1e3, "s": 1e6}[m.group(2)] if m else math.nan


def bonnie_rows(line: str) -> list[dict]:
    """bonnie++ -q's CSV line -> one row per I/O test it ran; a test that finished too fast to
    time ("+++++") has no value."""
    f = line.strip().split(",")
    if len(f) < 44 or f[0] != "1.98":
        raise PerfbookError(f"not a bonnie++ CSV line of format 1.98: {line.strip()[:80]!r}")
    rows = []
    for i, item in enumerate(BONNIE_IO):
        val, cpu, lat = f[9 + 2 * i], f[10 + 2 * i], f[38 + i]
        if val == "" and lat == "":
            continue  # not run (-f skips the per-character tests)
        num = lambda x: float(x) if re.fullmatch(r"[\d.]+", x) else math.nan
        rows.append(
            {
                "item": item,
                "value": num(val),
                "unit": "/s" if item == "seeks" else "KiB/s",
                "cpu_pct": num(cpu),
                "latency_us": _latency_us(lat),
            }
        )
    return rows
