"""Running the kvmtsc helper (tools/c/kvmtsc.c): once, or round by round under adaptive
repetition. The helper runs in a process group of its own that dies with us; on any
exception (a signal's KeyboardInterrupt included) the group is killed before it propagates."""
from __future__ import annotations

import subprocess
import tempfile

from perfbook.core.errors import PerfbookError
from perfbook.core.proc import die_with_parent, kill_group, run_group
from .analysis import bracket_frame
from .parse import parse_helper
from .spec import HELPER


def _exe() -> str:
    from perfbook.probes.cbuild import binary
    return str(binary(HELPER))


def _failed(args: list[str], rc: int, err: str) -> PerfbookError:
    msg = (err.strip().splitlines() or [f"exit status {rc}"])[-1]
    return PerfbookError(f"{HELPER} {args[0]} failed: {msg}")


def run_helper(args: list[str], timeout: float = 600) -> str:
    """`kvmtsc <args>`'s standard output; PerfbookError with its last error line."""
    r = run_group([_exe(), *args], timeout=timeout, preexec_fn=die_with_parent)
    if r.returncode != 0:
        raise _failed(args, r.returncode, r.stderr)
    return r.stdout


def run_adaptive(args: list[str], rep, prog) -> dict:
    """`kvmtsc run --interactive 1`: after every round, hand each variant's median bracket
    width to `rep` (a perfbook.analysis.repetition.Repetition) and tell the helper to go on or to stop.

    Readings of warm-up rounds are kept but flagged (warmup = 1, warmup_round = True),
    so every analysis that drops warm-up readings drops them too.
    """
    with tempfile.TemporaryFile(mode="w+") as errf:
        proc = subprocess.Popen([_exe(), *args, "--interactive", "1"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=errf, text=True,
                                start_new_session=True, preexec_fn=die_with_parent)
        lines: list[str] = []
        warm: set[int] = set()
        try:
            rounds = rep.rounds()
            rd = next(rounds)
            start = 0
            for line in proc.stdout:
                lines.append(line)
                if not line.startswith("round_done,"):
                    continue
                r = int(line.split(",")[1])
                block = bracket_frame(parse_helper("".join(lines[start:]))["samples"])
                start = len(lines)
                block = block[(block["round"] == r) & (block["warmup"] == 0)]
                if rd.warmup:
                    warm.add(r)
                for v, g in block.groupby("variant"):
                    rep.add(v, float(g["width"].median()))
                prog.note(f"{'warm-up ' if rd.warmup else ''}round {r + 1}: {rep.status()}")
                try:
                    rd = next(rounds)
                    proc.stdin.write("next\n")
                except StopIteration:
                    proc.stdin.write("stop\n")
                proc.stdin.flush()
            proc.stdin.close()
            proc.wait(timeout=60)
        except BaseException:
            kill_group(proc)
            raise
        if proc.returncode != 0:
            errf.seek(0)
            raise _failed(args, proc.returncode, errf.read())
    res = parse_helper("".join(lines))
    smp = res["samples"]
    smp["warmup_round"] = smp["round"].isin(warm)
    smp.loc[smp["warmup_round"], "warmup"] = 1
    prog.note(f"KVM brackets stopped by {rep.stopped_by}: {rep.status()}")
    return res
