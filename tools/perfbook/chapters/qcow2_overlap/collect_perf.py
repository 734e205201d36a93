"""qcow2_overlap: where perf's samples land (perf record of one qemu-img process).

The Debian qemu-img is stripped of .symtab but exports qcow2_check_metadata_overlap in
.dynsym, so perf can name it; perf_symbol_check() says whether it can on this host.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from perfbook.core.errors import PerfbookError
from .parse import parse_perf_report
from .spec import (OVERLAP_SYMBOLS, PERF_WORKLOADS, bench_cmd, create_cmd, prealloc_cmd, rotation,
                   snapshot_cmd)


def perf_shares(s, p: dict, rng, prog, modes) -> list[dict]:
    """Share of sampled cycles in the overlap-check functions (perf record, no call graph);
    `s` is collect.Runner."""
    rows = []
    img, tmpl = s.path("perf.qcow2"), s.path("perf-template.qcow2")
    step = 512 * p["bench_step_clusters"]
    for rep in range(p["perf_repeats"]):
        for wl in PERF_WORKLOADS:
            for mode in rotation(modes, rng):
                for f in (img, tmpl):
                    if f.exists():
                        f.unlink()
                if wl == "prealloc_512":
                    s.run(create_cmd(img, 512), "qemu-img create")
                    cmd = prealloc_cmd(img, p["perf_prealloc_size"], mode)
                    size = p["perf_prealloc_size"]
                elif wl == "allocate_sequential_64k":
                    s.run(create_cmd(img, 512, p["alloc_size"]), "qemu-img create")
                    n = p["alloc_size"] // 65536
                    cmd = bench_cmd(img, mode, n, 65536, 65536)
                    size = p["alloc_size"]
                else:
                    size = p["snap_size"] if "snapshots" in wl else p["bench_size"]
                    s.run(create_cmd(img, 512), "qemu-img create")
                    s.run(prealloc_cmd(img, size, "none"), "qemu-img resize")
                    if "snapshots" in wl:
                        for i in range(p["snapshots"]):
                            s.run(snapshot_cmd(img, f"s{i}"), "qemu-img snapshot -c")
                    count = p["snap_count"] if "snapshots" in wl else p["bench_count"]
                    cmd = bench_cmd(img, mode, count, 512, step)
                data = s.path("perf.data")
                # --no-bpf-event: no side-band thread, whose 1 s poll timeout perf record
                # waits out at exit (tools/perf/util/sideband_evlist.c); no sample here is BPF
                s.run(["perf", "record", "-q", "--no-bpf-event", "-F", "1999", "-o", str(data), "--", *cmd],
                      "perf record")
                shares, event, total = perf_report_shares(s, data)
                rows.append({"workload": wl, "mode": mode, "image_size": size, "repeat": rep,
                             "event": event, "samples": total,
                             "check_pct": shares.get(OVERLAP_SYMBOLS[0], 0.0),
                             "pre_write_pct": shares.get(OVERLAP_SYMBOLS[1], 0.0),
                             "top_symbol": shares.get("_top", "")})
                data.unlink()
                prog.step(f"perf {wl} {mode}")
    for f in (img, tmpl):
        if f.exists():
            f.unlink()
    return rows


def perf_report_shares(s, data: Path) -> tuple[dict, str, int]:
    """{symbol: percent of samples} for qemu-img, the event name and the sample count."""
    out = s.path("perf.txt")
    with open(out, "wb") as f:
        proc = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--no-children", "-n",
                               "--sort", "symbol", "--percent-limit", "0"],
                              stdout=f, stderr=subprocess.DEVNULL, start_new_session=True)
    if proc.returncode != 0:
        raise PerfbookError(f"perf report failed (exit {proc.returncode}); run perf report -i on a "
                            "perf.data by hand to see why")
    text = out.read_text(errors="replace")
    out.unlink()
    return parse_perf_report(text)


def perf_symbol_check(binary: str | None = None) -> dict:
    """Can perf name qcow2_check_metadata_overlap in this qemu-img? (symbols)"""
    exe = binary or shutil.which("qemu-img")
    out = {"binary": exe, "symbol": "qcow2_check_metadata_overlap", "resolvable": False}
    if not exe:
        out["reason"] = "qemu-img is not installed"
        return out
    try:
        from elftools.elf.elffile import ELFFile
        with open(exe, "rb") as f:
            elf = ELFFile(f)
            names = set()
            for sec in (".symtab", ".dynsym"):
                tab = elf.get_section_by_name(sec)
                if tab is not None:
                    names.update(sym.name for sym in tab.iter_symbols())
            out["has_symtab"] = elf.get_section_by_name(".symtab") is not None
            out["has_debuglink"] = elf.get_section_by_name(".gnu_debuglink") is not None
    except Exception as e:  # unreadable binary: say so, measure with time only
        out["reason"] = f"cannot read {exe}: {e}"
        return out
    if "qcow2_check_metadata_overlap" in names:
        out["resolvable"] = True
        out["reason"] = ""
        return out
    debug = Path("/usr/lib/debug/.build-id")
    out["reason"] = ("the Debian qemu-img is stripped (no .symtab) and no debug symbols "
                     "(qemu-utils-dbgsym from the debian-debug archive) are installed"
                     if not out["has_symtab"] else "the symbol is not in the binary")
    out["debug_dir_present"] = debug.is_dir()
    return out
