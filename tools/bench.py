"""Benchmarks that print figures (speed and stability are reported, never asserted).

  python -m tools.bench trace-cv [--runs 5] [--profile default]
      Repeats the trace_overhead collection N times (marker and baseline only,
      into a scratch data directory), prints each run's marker median and the
      coefficient of variation across runs, plus the harness's own cost.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time

from .errors import PerfbookError, one_line


def trace_cv(runs: int, profile: str, mechanisms: str) -> int:
    from . import stats
    from .chapters.trace_overhead import chapter as T
    from .framework import collect
    scratch = tempfile.mkdtemp(prefix="perfbook-bench-")
    try:
        meds, nones = [], []
        t0 = time.monotonic()
        for i in range(runs):
            t = time.monotonic()
            collect(T, profile, scratch, say=lambda s: None, mechanisms=mechanisms)
            s = T.load(scratch)["samples"]
            s = s[s.run_id == s.run_id.max()]
            m = s[s.mechanism == "marker"].ns_per_call
            meds.append(float(m.median()))
            nones.append(float(s[s.mechanism == "none"].ns_per_call.median()))
            lo, hi, cov = stats.median_ci(m)
            print(f"run {i + 1}/{runs}: marker median {meds[-1]:.1f} ns "
                  f"({stats.coverage_text(cov)} CI {lo:.1f}-{hi:.1f}), "
                  f"harness {nones[-1]:.2f} ns/call, {time.monotonic() - t:.0f} s", flush=True)
        print(f"marker median across {runs} runs: {stats.summarize(meds).median:.1f} ns, "
              f"CV {stats.cv(meds):.4f}; harness cost {stats.summarize(nones).median:.2f} ns/call; "
              f"wall {time.monotonic() - t0:.0f} s")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench")
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("trace-cv")
    t.add_argument("--runs", type=int, default=5)
    t.add_argument("--profile", default="default")
    t.add_argument("--mechanisms", default="marker")
    args = ap.parse_args(argv)
    try:
        return trace_cv(args.runs, args.profile, args.mechanisms)
    except PerfbookError as e:
        print(one_line(e), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
