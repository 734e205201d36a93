"""The `perfbook` command (also `python -m perfbook`).

  measure   measure this host: every chapter it can (or --chapters), in this process
  refresh   re-execute the stored notebooks in explain mode, so their outputs follow data/
  summary   one screen: what was measured, what was skipped and why, and what it cost
  compare   where this host sits among all hosts, per key finding
  validate  load every dataset and check it against its manifest and its chapter's schemas
  sweep     remove every kind of state a killed run of ours left (perfbook.hoststate.sweep)
  doctor    which chapters this host can measure, and why not
  bench     benchmarks that print figures (perfbook.dev.bench)
  book      build the site with jupyter-book (Sphinx warnings are errors)
  stale     which stored notebooks were executed on other data than data/ holds
  compact   compress the plain .csv tables of every dataset in place (lossless, checked)
  collect   one chapter in this process (what a notebook's collect mode runs)
and, each parsing its own arguments (PASSTHROUGH below): contrib, fleet, identity, secondhost,
synthfleet, bytecode, prefetch-guest, and the book's own processes kernel, zygote and monitor.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

from perfbook.core.errors import PerfbookError, one_line
from perfbook.core.paths import build_dir, repo_root


def _status_file() -> Path:
    return build_dir() / "measure-status.jsonl"


def _measure_params(items) -> dict:
    """--param NAME=VALUE items -> notebook parameters (VALUE as JSON if it parses, else a string)."""
    from perfbook.core.errors import ParameterError

    out = {}
    for item in items or ():
        name, eq, raw = item.partition("=")
        if not eq or not name.isidentifier() or name in ("mode", "profile"):
            raise ParameterError(
                f"--param wants NAME=VALUE with a notebook parameter name "
                f"(not mode or profile), got {item!r}"
            )
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
            return {
                t.id
                for node in ast.parse(cell.source).body
                if isinstance(node, ast.Assign)
                for t in node.targets
                if isinstance(t, ast.Name)
            }
    return set()


def _seconds_text(s: float | None) -> str:
    return "-" if s is None else f"{s:.0f} s"


def plan_report(rows, profile: str) -> list[str]:
    """The lines `measure` ends with: per chapter its planned seconds (each chapter's plan_s) beside
    the seconds it took and how it ended, then the totals. rows: (name, plan, took, outcome)."""
    out = [f"[measure] time per chapter against the plan (profile {profile}):"]
    for name, plan, took, outcome in rows:
        over = "" if plan is None or outcome != "measured" else f" ({took - plan:+.0f} s)"
        out.append(
            f"[measure]   {name:<22} plan {_seconds_text(plan):>6}   took {_seconds_text(took):>6}"
            f"{over}{'' if outcome == 'measured' else '   ' + outcome}"
        )
    planned = [r[1] for r in rows if r[1] is not None]
    total_plan = sum(planned) if len(planned) == len(rows) else None
    out.append(
        f"[measure]   {'total':<22} plan {_seconds_text(total_plan):>6}   "
        f"took {_seconds_text(sum(r[2] for r in rows)):>6}"
    )
    return out


def cmd_measure(args) -> int:
    """Collect every chapter in this process (perfbook.framework.sequence.collect): Ctrl-C, SIGTERM and
    SIGHUP reach the code that holds the kernel state, which restores it and publishes
    nothing. Exit 0 only if no chapter failed; 130/143/129 when a signal stopped the run.
    Each chapter's planned time (each chapter's plan_s) is printed before it, and all of them
    beside the time taken at the end."""
    from perfbook.chapters import CHAPTERS, PAGES, by_name, plan_seconds
    from perfbook.core import guard
    from perfbook.core.errors import ParameterError
    from perfbook.framework.sequence import collect
    from perfbook.framework.sequence import status as record

    chapters = [by_name(n) for n in args.chapters.split(",")] if args.chapters else CHAPTERS
    pages = [c.name for c in chapters if c in PAGES]
    if pages:
        raise ParameterError(f"{', '.join(pages)}: a page that only reads data; nothing to measure")
    extra = _measure_params(getattr(args, "param", None))
    for ch in chapters:
        known = _notebook_parameters(ch.path) if ch.notebook else {"data_dir", *ch.load().params}
        unknown = sorted(set(extra) - known)
        if unknown:
            raise ParameterError(
                f"{ch.name} has no parameter {unknown[0]!r} (see its first code cell)"
            )
    for ch in chapters:  # every parameter checked before anything is measured
        ch.load().parameters(args.profile, **{k: v for k, v in extra.items() if k != "data_dir"})
    status = _status_file()
    status.parent.mkdir(parents=True, exist_ok=True)
    status.write_text("")
    os.environ["PERFBOOK_STATUS_FILE"] = str(status)
    failed = []
    plans = {ch.name: plan_seconds(ch.load(), args.profile) for ch in chapters}
    if all(v is not None for v in plans.values()):
        total = sum(plans.values())
        print(
            f"[measure] plan: {len(chapters)} chapter(s), about {total} s ({total / 60:.1f} min) "
            f"with profile {args.profile}"
            + (" and these --param values (the plan is for the profile's own)" if extra else ""),
            flush=True,
        )
    rows = []  # (chapter, planned s, seconds taken, outcome) for the closing plan_report
    with guard.interruptible():
        for i, ch in enumerate(chapters, 1):
            mod = ch.load()
            tag = f"[measure {i}/{len(chapters)}] {ch.name}"
            plan = plans[ch.name]
            print(
                f"{tag}: collecting (profile {args.profile}, "
                + (f"plan {plan} s" if plan is not None else "no time plan")
                + ") ...",
                flush=True,
            )
            t0 = time.monotonic()
            try:
                out = collect(
                    mod,
                    args.profile,
                    say=lambda s, tag=tag: print(f"{tag}: {s}", flush=True),
                    **extra,
                )
            except KeyboardInterrupt:
                record(
                    ch.name,
                    "interrupted",
                    f"stopped by {guard.interrupted_by() or 'SIGINT'}; nothing published",
                )
                raise
            except PerfbookError as e:
                failed.append(ch.name)
                rows.append((ch.name, plan, time.monotonic() - t0, "failed"))
                msg = one_line(e)[len("error: ") :]
                print(
                    f"{tag}: FAILED: {msg}"
                    + ("" if "published" in msg else " (nothing published)"),
                    flush=True,
                )
                record(ch.name, "failed", one_line(e)[len("error: ") :])
                continue
            except Exception as e:  # a defect of ours: one line here, the traceback in a file
                import traceback

                failed.append(ch.name)
                rows.append((ch.name, plan, time.monotonic() - t0, "failed"))
                log = build_dir() / "measure" / f"{ch.name}.traceback"
                log.parent.mkdir(parents=True, exist_ok=True)
                log.write_text(traceback.format_exc())
                detail = f"{type(e).__name__}: {one_line(e)[len('error: ') :]}"
                print(
                    f"{tag}: FAILED: {detail} (nothing published; traceback in {log})", flush=True
                )
                record(ch.name, "failed", detail)
                continue
            took = time.monotonic() - t0
            rows.append((ch.name, plan, took, "measured" if out is not None else "skipped"))
            if out is not None:
                print(
                    f"{tag}: done in {took:.0f} s"
                    + (f" (plan {plan} s)" if plan is not None else ""),
                    flush=True,
                )
    for line in plan_report(rows, args.profile):
        print(line, flush=True)
    if failed:
        print(f"[measure] {len(failed)} chapter(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def cmd_refresh(args) -> int:
    from perfbook.book.refresh import refresh

    return refresh(args.chapters, changed=args.changed, jobs=args.jobs, validated=args.validated)


def cmd_collect(args) -> int:
    """One chapter, in this process: what a notebook's collect mode runs (perfbook.book.notebook).
    Exit 0 with `new dataset: PATH` as the last line, 3 when the host can't run it."""
    from perfbook.chapters import by_name
    from perfbook.framework.sequence import collect

    try:
        overrides = json.loads(args.params)
        assert isinstance(overrides, dict)
    except (ValueError, AssertionError):
        from perfbook.core.errors import ParameterError

        raise ParameterError(f"--params must be a JSON object, got {args.params!r}") from None
    out = collect(by_name(args.chapter).load(), args.profile, args.data_dir or None, **overrides)
    return 0 if out is not None else 3


def cmd_compare(args) -> int:
    from perfbook.book.compare import report

    return report(args.host or None)


def cmd_compact(args) -> int:
    from perfbook.data.writer import compact

    compact(Path(args.data_dir) if args.data_dir else None)
    return 0


def cmd_validate(args) -> int:
    from perfbook.book.validation import validate_all

    n = validate_all(Path(args.data_dir) if args.data_dir else None)
    print(f"{n} datasets under {args.data_dir or 'data'}/runs load and match their manifests")
    return 0


def cmd_stale(args) -> int:
    from perfbook.book.freshness import stale
    from perfbook.chapters import by_name

    found = stale([by_name(n).name for n in args.chapters.split(",")] if args.chapters else None)
    for name, why in found:
        print(f"[stale] {name}: {why}")
    if found:
        print("run `make notebooks` (python -m perfbook refresh) to re-execute them on data/")
        return 1
    print("every stored notebook follows the data in data/")
    return 0


def cmd_summary(args) -> int:
    from perfbook.book import summary
    from perfbook.chapters import CHAPTERS
    from perfbook.data import hostinfo
    from perfbook.data.dataset import list_runs, load_manifest

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
            detail = (
                str(Path(detail).relative_to(repo_root()))
                if detail.startswith(str(repo_root()))
                else detail
            )
            if "seconds" in st:
                detail += f" (in {st['seconds']} s)"
        print(f"{ch.name:<22} {st['status']:<11} {detail}")
        print(
            f"{'':<22} datasets in data/: {len(runs)} ({len(mine)} from this host, "
            f"{len({r.parts[-3] for r in runs})} host(s))"
        )
        skipped = []
        for r in mine[-1:]:
            m = load_manifest(r)
            skipped = [f"{k}: {v}" for k, v in m.get("skipped", {}).items()]
            for line in summary.cost_lines(ch.load(), r):  # its profile, time and stop rules
                print(f"{'':<22} {line}")
        for s in skipped:
            print(f"{'':<22} not measured: {s}")
    site = repo_root() / "_build" / "html" / "index.html"
    print("-" * 72)
    print(f"site: {site}" if site.is_file() else "site: not built (run make book)")
    print("=" * 72)
    return 0


def cmd_sweep(args) -> int:
    """Every kind of state of dead runs (perfbook.hoststate.sweep.sweep_all). Exit 0 when no private
    directory was refused; 1 when one was (the state dir or the scratch parent planted as a
    symlink or another user's): the sweep did all it could, every other kind of state included,
    and its last line names the refused path. 1, as `measure` gives when a chapter failed: the
    command ran but its job is not done; 2 stays for an error that stopped it before it began."""
    from perfbook.hoststate.sweep import sweep_all

    refused: list[str] = []
    if not sweep_all(refused=refused) and not refused:
        print("nothing to sweep")
    if refused:
        print(
            "error: the sweep left alone what it refuses to touch: " + "; ".join(refused),
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_book(args) -> int:
    """jupyter-book build, quiet: Jupyter Book prints a banner and a how-to-open screen even
    with -q. The full output goes to build/book.log; the terminal gets our two lines, or the
    warnings and errors (the lines Sphinx marks WARNING/ERROR, plus the tail) when it fails."""
    import subprocess

    log = build_dir() / "book.log"
    jb = Path(sys.executable).with_name("jupyter-book")
    print("[book] building the site (Sphinx warnings are errors) ...", flush=True)
    with open(log, "w") as out:
        rc = subprocess.run(
            [str(jb), "build", str(repo_root()), "--all", "-W", "-n", "--keep-going", "-q"],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=repo_root(),
        ).returncode
    text = log.read_text(errors="replace")
    problems = [
        ln
        for ln in text.splitlines()
        if re.search(r"\b(WARNING|ERROR|CRITICAL)\b|Traceback|Error:", ln)
    ]
    site = repo_root() / "_build" / "html" / "index.html"
    if rc == 0 and not problems:
        print(f"site: {site}")
        return 0
    for ln in (problems or text.splitlines()[-15:])[:40]:
        print(f"[book] {ln}")
    print(
        f"[book] jupyter-book build {'failed' if rc else 'warned'} (exit {rc}); its full output: {log}"
    )
    return rc or 1


def cmd_doctor(args) -> int:
    from perfbook.chapters import CHAPTERS
    from perfbook.hoststate import statedir

    for private in (statedir.state_dir, statedir.scratch_parent):
        try:
            private()
        except statedir.UnsafePath as e:  # not a chapter's prerequisite: every collect fails
            print(f"{'every chapter':<22} will fail: {e}")
    for ch in CHAPTERS:
        reasons = ch.load().preflight()
        print(
            f"{ch.name:<22} {'ready' if not reasons else 'cannot collect: ' + '; '.join(reasons)}"
        )
    return 0


def cmd_identity(argv) -> int:
    """`perfbook identity show|migrate`: this machine's identity facts, or datasets written
    before identity v2 brought to it (perfbook.data.identity.migrate)."""
    from perfbook.data.identity import migrate

    ap = argparse.ArgumentParser(prog="perfbook identity")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("show", help="this machine's identity facts and host id")
    mg = sub.add_parser("migrate", help="bring datasets written before identity v2 to it")
    mg.add_argument("--data-dir", type=Path, default=None)
    mg.add_argument(
        "--evidence",
        action="append",
        default=[],
        metavar="OLDID,KERNEL,KHZ,SOURCE",
        help="a TSC frequency for the datasets of one old id and kernel build",
    )
    a = ap.parse_args(argv)
    if a.cmd == "show":
        from perfbook.data import hostinfo

        facts = hostinfo.host_facts()
        print(json.dumps({"host_id": facts["host_id"], **facts["machine"]}, indent=2))
        return 0
    from perfbook.core.paths import resolve_data_dir

    extra = {}
    for e in a.evidence:
        old, kernel, khz, source = e.split(",", 3)
        extra[(old, kernel)] = (int(khz), source)
    migrate(resolve_data_dir(a.data_dir), extra)
    return 0


# Commands whose module parses its own arguments: dispatched before argparse is set up, so that
# the processes the book starts for itself (a notebook kernel, the kernel zygote, the run
# monitor) import nothing but their own module.
PASSTHROUGH = {
    "bench": ("perfbook.dev.bench", "main"),
    "synthfleet": ("perfbook.dev.synthfleet", "main"),
    "bytecode": ("perfbook.dev.bytecode", "main"),
    "contrib": ("perfbook.book.contrib", "main"),
    "fleet": ("perfbook.book.fleet", "main"),
    "identity": ("perfbook.cli", "cmd_identity"),
    "secondhost": ("perfbook.dev.secondhost", "main"),
    "prefetch-guest": ("perfbook.qemu.guest_image", "main"),
    "kernel": ("perfbook.book.jupyter.kernel", "main"),
    "zygote": ("perfbook.book.jupyter.zygote", "main"),
    "monitor": ("perfbook.hoststate.monitor", "main"),
}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in PASSTHROUGH:
        import importlib

        module, fn = PASSTHROUGH[argv[0]]
        return getattr(importlib.import_module(module), fn)(argv[1:]) or 0
    ap = argparse.ArgumentParser(prog="perfbook", epilog="also: " + ", ".join(sorted(PASSTHROUGH)))
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--profile", default="default", choices=("quick", "default", "full"))
    m.add_argument("--chapters", default="")
    m.add_argument("--strict", action="store_true", help=argparse.SUPPRESS)  # now always
    m.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a notebook parameter for every chapter of this run (JSON value, else a string)",
    )
    r = sub.add_parser("refresh")
    r.add_argument("--chapters", default="")
    r.add_argument(
        "--changed",
        action="store_true",
        help="only the notebooks whose data or code changed since they were stored",
    )
    r.add_argument(
        "--jobs",
        type=int,
        default=0,
        help="notebooks executed at once (default: one per CPU, at most 4)",
    )
    r.add_argument(
        "--validated",
        action="store_true",
        help="skip the dataset validation: the caller did it (a parallel refresh's children)",
    )
    st = sub.add_parser("stale")
    st.add_argument("--chapters", default="")
    sub.add_parser("summary")
    ck = sub.add_parser(
        "compact", help="compress plain .csv tables of every dataset in place (lossless)"
    )
    ck.add_argument("--data-dir", default="")
    cp = sub.add_parser("compare", help="where this host sits among all hosts, per key finding")
    cp.add_argument("--host", default="")
    c = sub.add_parser("collect", help="one chapter in this process (a notebook's collect mode)")
    c.add_argument("chapter")
    c.add_argument("--profile", default="default")
    c.add_argument("--data-dir", default="")
    c.add_argument("--params", default="{}", help="the chapter's parameters as a JSON object")
    v = sub.add_parser("validate")
    v.add_argument(
        "--data-dir", default="", help="a data directory other than the checkout's data/"
    )
    sub.add_parser("sweep")
    sub.add_parser("doctor")
    sub.add_parser("book")
    args = ap.parse_args(argv)
    fn = {
        "measure": cmd_measure,
        "refresh": cmd_refresh,
        "summary": cmd_summary,
        "compare": cmd_compare,
        "compact": cmd_compact,
        "stale": cmd_stale,
        "validate": cmd_validate,
        "collect": cmd_collect,
        "sweep": cmd_sweep,
        "doctor": cmd_doctor,
        "book": cmd_book,
    }[args.cmd]
    try:
        return fn(args)
    except PerfbookError as e:
        print(one_line(e), file=sys.stderr)
        return 2
    except BrokenPipeError:  # `python -m perfbook summary | head`: the reader left; say nothing
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        from perfbook.core import guard

        sig = guard.interrupted_by() or "SIGINT"
        print(
            f"interrupted by {sig}: what the run changed was restored, nothing was published",
            file=sys.stderr,
        )
        return 128 + int(getattr(__import__("signal"), sig))
