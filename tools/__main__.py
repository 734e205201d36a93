"""Command line: python -m tools {measure,refresh,summary,sweep,doctor}.

  measure  -- run each chapter notebook with papermill in collect mode
  refresh  -- re-execute the chapter notebooks in place in explain mode, so
              their stored outputs (what nbval checks and the book shows)
              follow the committed data
  stale    -- which stored notebooks were executed on other data than data/ holds
  summary  -- one screen: what was measured, what was skipped and why
  sweep    -- remove tracing state left by a killed run of ours
  doctor   -- which prerequisites this host has, per chapter
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .errors import PerfbookError, one_line
from .paths import build_dir, repo_root


def _status_file() -> Path:
    return build_dir() / "measure-status.jsonl"


def _measure_params(items) -> dict:
    """--param NAME=VALUE items -> notebook parameters (VALUE as JSON if it parses, else a string)."""
    from .errors import ParameterError
    out = {}
    for item in items or ():
        name, eq, raw = item.partition("=")
        if not eq or not name.isidentifier() or name in ("mode", "profile"):
            raise ParameterError(f"--param wants NAME=VALUE with a notebook parameter name "
                                 f"(not mode or profile), got {item!r}")
        try:
            out[name] = json.loads(raw)
        except ValueError:
            out[name] = raw
    return out


def _notebook_parameters(path) -> set[str]:
    """Names assigned in a notebook's cell tagged 'parameters' (read with ast, not papermill's
    line parser, which gives up on comments with an apostrophe)."""
    import ast
    import nbformat
    nb = nbformat.read(str(path), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "parameters" in cell.metadata.get("tags", []):
            return {t.id for node in ast.parse(cell.source).body if isinstance(node, ast.Assign)
                    for t in node.targets if isinstance(t, ast.Name)}
    return set()


def cmd_measure(args) -> int:
    import papermill as pm
    from .chapters import CHAPTERS, PAGES, by_name
    from .errors import ParameterError
    from .lock import measure_lock
    chapters = [by_name(n) for n in args.chapters.split(",")] if args.chapters else CHAPTERS
    pages = [c.name for c in chapters if c in PAGES]
    if pages:
        raise ParameterError(f"{', '.join(pages)}: a page that only reads data; nothing to measure")
    extra = _measure_params(getattr(args, "param", None))
    for ch in chapters:
        unknown = sorted(set(extra) - _notebook_parameters(ch.path))
        if unknown:
            raise ParameterError(f"{ch.name} has no parameter {unknown[0]!r} (see its first code cell)")
    status = _status_file()
    status.parent.mkdir(parents=True, exist_ok=True)
    status.write_text("")
    import os
    os.environ["PERFBOOK_STATUS_FILE"] = str(status)
    outdir = build_dir() / "measure"
    outdir.mkdir(parents=True, exist_ok=True)
    failed = 0
    with measure_lock("python -m tools measure"):
        for i, ch in enumerate(chapters, 1):
            mod = ch.load()
            reasons = mod.preflight()
            if reasons:
                print(f"[measure {i}/{len(chapters)}] {ch.name}: skipped: {reasons[0]}", flush=True)
                with open(status, "a") as f:
                    f.write(json.dumps({"chapter": ch.name, "status": "skipped",
                                        "detail": "; ".join(reasons)}) + "\n")
                continue
            print(f"[measure {i}/{len(chapters)}] {ch.name}: collecting (profile {args.profile}) ...", flush=True)
            t0 = time.monotonic()
            try:
                pm.execute_notebook(str(ch.path), str(outdir / f"{ch.name}.ipynb"),
                                    parameters={"mode": "collect", "profile": args.profile, **extra},
                                    log_output=True, progress_bar=False, cwd=str(ch.path.parent))
            except Exception as e:  # papermill wraps the cell's error
                failed += 1
                detail = getattr(e, "evalue", None) or str(e).strip().splitlines()[-1]
                print(f"[measure] {ch.name}: FAILED: {detail}", flush=True)
                with open(status, "a") as f:
                    f.write(json.dumps({"chapter": ch.name, "status": "failed", "detail": detail}) + "\n")
                continue
            print(f"[measure] {ch.name}: done in {time.monotonic() - t0:.0f} s", flush=True)
    return 1 if failed and args.strict else 0


def cmd_refresh(args) -> int:
    import nbformat
    from nbclient import NotebookClient
    from . import freshness
    from .chapters import CHAPTERS, PAGES, by_name
    chapters = [by_name(n) for n in args.chapters.split(",")] if args.chapters else CHAPTERS + PAGES
    for ch in chapters:
        t0 = time.monotonic()
        nb = nbformat.read(ch.path, as_version=4)
        digest = freshness.data_digest(ch.name)  # before the run: what it is about to read
        client = NotebookClient(nb, timeout=1800, kernel_name="python3",
                                resources={"metadata": {"path": str(ch.path.parent)}})
        client.execute()
        for cell in nb.cells:
            cell.metadata.pop("execution", None)
        nb.metadata.pop("papermill", None)
        freshness.record(nb, ch.name, digest)
        tmp = ch.path.with_suffix(".ipynb.tmp")
        nbformat.write(nb, tmp)
        tmp.replace(ch.path)
        print(f"[refresh] {ch.name}: re-executed in explain mode in {time.monotonic() - t0:.0f} s", flush=True)
    return 0


def cmd_stale(args) -> int:
    from .chapters import by_name
    from .freshness import stale
    found = stale([by_name(n).name for n in args.chapters.split(",")] if args.chapters else None)
    for name, why in found:
        print(f"[stale] {name}: {why}")
    if found:
        print("run `make notebooks` (python -m tools refresh) to re-execute them on data/")
        return 1
    print("every stored notebook follows the data in data/")
    return 0


def cmd_summary(args) -> int:
    from . import hostinfo
    from .chapters import CHAPTERS
    from .dataset import list_runs
    status = {}
    if _status_file().is_file():
        for line in _status_file().read_text().splitlines():
            if line.strip():
                d = json.loads(line)
                status[d["chapter"]] = d
    hid = hostinfo.host_id()
    print("=" * 72)
    print(f"perfbook summary for this host: {hid} ({hostinfo.describe()})")
    print("-" * 72)
    for ch in CHAPTERS:
        runs = list_runs(ch.name)
        mine = [r for r in runs if r.parts[-3] == hid]
        st = status.get(ch.name, {"status": "not run", "detail": "no measure run in this checkout"})
        detail = st["detail"]
        if st["status"] == "measured":
            detail = str(Path(detail).relative_to(repo_root())) if detail.startswith(str(repo_root())) else detail
        print(f"{ch.name:<22} {st['status']:<9} {detail}")
        print(f"{'':<22} datasets in data/: {len(runs)} ({len(mine)} from this host, "
              f"{len({r.parts[-3] for r in runs})} host(s))")
        skipped = []
        for r in mine[-1:]:
            m = json.loads((r / 'manifest.json').read_text())
            skipped = [f"{k}: {v}" for k, v in m.get("skipped", {}).items()]
        for s in skipped:
            print(f"{'':<22} not measured: {s}")
    site = repo_root() / "_build" / "html" / "index.html"
    print("-" * 72)
    print(f"site: {site}" if site.is_file() else "site: not built (run make book)")
    print("=" * 72)
    return 0


def cmd_sweep(args) -> int:
    from .tracefs import find_tracefs, sweep_stale
    root = find_tracefs()
    if root is None:
        print("tracefs is not mounted: nothing to sweep")
        return 0
    removed = sweep_stale(root)
    if not removed:
        print("nothing to sweep")
    return 0


def cmd_doctor(args) -> int:
    from .chapters import CHAPTERS
    for ch in CHAPTERS:
        reasons = ch.load().preflight()
        print(f"{ch.name:<22} {'ready' if not reasons else 'cannot collect: ' + '; '.join(reasons)}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools")
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--profile", default="default", choices=("quick", "default", "full"))
    m.add_argument("--chapters", default="")
    m.add_argument("--strict", action="store_true", help="exit 1 if a chapter failed")
    m.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="a notebook parameter for every chapter of this run (JSON value, else a string)")
    r = sub.add_parser("refresh")
    r.add_argument("--chapters", default="")
    st = sub.add_parser("stale")
    st.add_argument("--chapters", default="")
    sub.add_parser("summary")
    sub.add_parser("sweep")
    sub.add_parser("doctor")
    args = ap.parse_args(argv)
    fn = {"measure": cmd_measure, "refresh": cmd_refresh, "summary": cmd_summary, "stale": cmd_stale,
          "sweep": cmd_sweep, "doctor": cmd_doctor}[args.cmd]
    try:
        return fn(args)
    except PerfbookError as e:
        print(one_line(e), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; tracing state was restored", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
