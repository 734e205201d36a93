"""Command line: python -m tools {measure,refresh,summary,sweep,doctor}.

  measure  -- run each chapter notebook with papermill in collect mode
  refresh  -- re-execute the chapter notebooks in place in explain mode, so
              their stored outputs (what nbval checks and the book shows)
              follow the committed data
  stale    -- which stored notebooks were executed on other data than data/ holds
  summary  -- one screen: what was measured, what was skipped and why
  validate -- load every dataset and check it against its manifest
  catalog  -- build the catalog of the datasets' manifests (tools/catalog.py) and print it
  compact  -- compress the plain .csv tables of every dataset in place (lossless, checked)
  compare  -- where this host sits among all hosts, per key finding (tools/compare.py)
  collect  -- one chapter in this process (what a notebook's collect mode runs)
  sweep    -- remove every kind of state a killed run of ours left (tools/sweep.py)
  doctor   -- which prerequisites this host has, per chapter
  book     -- build the site with jupyter-book (Sphinx warnings are errors); its banner
              and progress go to build/book.log, and only problems reach the terminal
"""
from __future__ import annotations

import argparse
import json
import os
import re
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


def _seconds_text(s: float | None) -> str:
    return "-" if s is None else f"{s:.0f} s"


def plan_report(rows, profile: str) -> list[str]:
    """The lines `measure` ends with: per chapter its planned seconds (each chapter's plan_s) beside
    the seconds it took and how it ended, then the totals. rows: (name, plan, took, outcome)."""
    out = [f"[measure] time per chapter against the plan (profile {profile}):"]
    for name, plan, took, outcome in rows:
        over = "" if plan is None or outcome != "measured" else f" ({took - plan:+.0f} s)"
        out.append(f"[measure]   {name:<22} plan {_seconds_text(plan):>6}   took {_seconds_text(took):>6}"
                   f"{over}{'' if outcome == 'measured' else '   ' + outcome}")
    planned = [r[1] for r in rows if r[1] is not None]
    total_plan = sum(planned) if len(planned) == len(rows) else None
    out.append(f"[measure]   {'total':<22} plan {_seconds_text(total_plan):>6}   "
               f"took {_seconds_text(sum(r[2] for r in rows)):>6}")
    return out


def cmd_measure(args) -> int:
    """Collect every chapter in this process (tools.framework.collect): Ctrl-C, SIGTERM and
    SIGHUP reach the code that holds the kernel state, which restores it and publishes
    nothing. Exit 0 only if no chapter failed; 130/143/129 when a signal stopped the run.
    Each chapter's planned time (each chapter's plan_s) is printed before it, and all of them
    beside the time taken at the end."""
    from . import guard
    from .chapters import CHAPTERS, PAGES, by_name
    from .errors import ParameterError
    from .framework import collect, status as record
    from .summary import plan_seconds
    chapters = [by_name(n) for n in args.chapters.split(",")] if args.chapters else CHAPTERS
    pages = [c.name for c in chapters if c in PAGES]
    if pages:
        raise ParameterError(f"{', '.join(pages)}: a page that only reads data; nothing to measure")
    extra = _measure_params(getattr(args, "param", None))
    for ch in chapters:
        known = _notebook_parameters(ch.path) if ch.notebook else \
            {"data_dir", *ch.load().params}
        unknown = sorted(set(extra) - known)
        if unknown:
            raise ParameterError(f"{ch.name} has no parameter {unknown[0]!r} (see its first code cell)")
    for ch in chapters:  # every parameter checked before anything is measured
        ch.load().parameters(args.profile, **{k: v for k, v in extra.items() if k != "data_dir"})
    status = _status_file()
    status.parent.mkdir(parents=True, exist_ok=True)
    status.write_text("")
    import os
    os.environ["PERFBOOK_STATUS_FILE"] = str(status)
    failed = []
    plans = {ch.name: plan_seconds(ch.load(), args.profile) for ch in chapters}
    if all(v is not None for v in plans.values()):
        total = sum(plans.values())
        print(f"[measure] plan: {len(chapters)} chapter(s), about {total} s ({total / 60:.1f} min) "
              f"with profile {args.profile}" + (" and these --param values (the plan is for the "
                                                  "profile's own)" if extra else ""), flush=True)
    rows = []   # (chapter, planned s, seconds taken, outcome) for the closing plan_report
    with guard.interruptible():
        for i, ch in enumerate(chapters, 1):
            mod = ch.load()
            tag = f"[measure {i}/{len(chapters)}] {ch.name}"
            plan = plans[ch.name]
            print(f"{tag}: collecting (profile {args.profile}, "
                  + (f"plan {plan} s" if plan is not None else "no time plan") + ") ...", flush=True)
            t0 = time.monotonic()
            try:
                out = collect(mod, args.profile, say=lambda s, tag=tag: print(f"{tag}: {s}", flush=True),
                              **extra)
            except KeyboardInterrupt:
                record(ch.name, "interrupted", f"stopped by {guard.interrupted_by() or 'SIGINT'}; "
                       "nothing published")
                raise
            except PerfbookError as e:
                failed.append(ch.name)
                rows.append((ch.name, plan, time.monotonic() - t0, "failed"))
                msg = one_line(e)[len("error: "):]
                print(f"{tag}: FAILED: {msg}" + ("" if "published" in msg else " (nothing published)"),
                      flush=True)
                record(ch.name, "failed", one_line(e)[len("error: "):])
                continue
            except Exception as e:  # a defect of ours: one line here, the traceback in a file
                import traceback
                failed.append(ch.name)
                rows.append((ch.name, plan, time.monotonic() - t0, "failed"))
                log = build_dir() / "measure" / f"{ch.name}.traceback"
                log.parent.mkdir(parents=True, exist_ok=True)
                log.write_text(traceback.format_exc())
                detail = f"{type(e).__name__}: {one_line(e)[len('error: '):]}"
                print(f"{tag}: FAILED: {detail} (nothing published; traceback in {log})", flush=True)
                record(ch.name, "failed", detail)
                continue
            took = time.monotonic() - t0
            rows.append((ch.name, plan, took, "measured" if out is not None else "skipped"))
            if out is not None:
                print(f"{tag}: done in {took:.0f} s" + (f" (plan {plan} s)" if plan is not None else ""),
                      flush=True)
    for line in plan_report(rows, args.profile):
        print(line, flush=True)
    if failed:
        print(f"[measure] {len(failed)} chapter(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def cmd_refresh(args) -> int:
    import nbformat
    from . import freshness
    from .chapters import CHAPTERS, PAGES, by_name
    chapters = [by_name(n) for n in args.chapters.split(",")] if args.chapters else CHAPTERS + PAGES
    from .validation import validate_all
    if not args.validated:
        # a bad manifest: one line that names the file, before any notebook runs (a page reads
        # all); in this one process: in each child it would import every chapter's code again.
        # The tables are checked by the notebooks as they read them (read_table: row count,
        # columns, types): one that meets a bad table fails with a line naming it and keeps its
        # stored version. Reading every table here first read a fleet's data twice (15 of a
        # 100-host refresh's 120 s); `python -m tools validate` and the contribution check
        # read every table.
        validate_all(names=None if any(c in PAGES for c in chapters) else {c.name for c in chapters},
                     tables=False)
    if args.changed:
        todo = []
        for ch in chapters:
            why = freshness.changed(nbformat.read(ch.path, as_version=4), ch.name)
            if why is None:
                print(f"[refresh] {ch.name}: unchanged (same data and code), not re-executed", flush=True)
            else:
                print(f"[refresh] {ch.name}: {why}; re-executing", flush=True)
                todo.append(ch)
        chapters = todo
    from .provisioner import check_kernelspec
    check_kernelspec("python3")
    jobs = refresh_jobs(args.jobs)
    if jobs > 1 and len(chapters) > 1:
        return _refresh_in_parallel(chapters, jobs)
    from . import nbrun, warmkernel
    zygote = warmkernel.Zygote.from_env()      # our parent's (_refresh_in_parallel), else ours
    if zygote is None and warmkernel.enabled() and chapters:
        zygote = warmkernel.Zygote.start()
    try:
        with nbrun.interruptible(), warmkernel.serving(zygote):
            return _refresh_each(chapters)
    finally:
        if zygote is not None:
            zygote.close()


def _refresh_each(chapters) -> int:
    """cmd_refresh, one notebook after the other, in this process."""
    import nbformat
    from nbclient.exceptions import CellExecutionError
    from . import freshness, nbrun
    failed = []
    for ch in chapters:
        t0 = time.monotonic()
        os.environ[REFRESHING] = ch.name      # its kernel inherits it (the fleet benchmark reads it)
        nb = nbformat.read(ch.path, as_version=4)
        digest = freshness.data_digest(ch.name)  # before the run: what it is about to read
        code = freshness.code_digest(ch.name, nb)
        try:
            nbrun.execute(nb, str(ch.path.parent))
        except CellExecutionError as e:
            failed.append(ch.name)
            print(f"[refresh] {ch.name}: FAILED, the stored notebook is unchanged: "
                  f"{e.ename}: {str(e.evalue).strip().splitlines()[0] if e.evalue else ''}", flush=True)
            continue
        for cell in nb.cells:
            cell.metadata.pop("execution", None)
        nb.metadata.pop("papermill", None)
        freshness.record(nb, ch.name, digest, code)
        tmp = ch.path.with_suffix(".ipynb.tmp")
        nbformat.write(nb, tmp)
        tmp.replace(ch.path)
        print(f"[refresh] {ch.name}: re-executed in explain mode in {time.monotonic() - t0:.0f} s", flush=True)
    return 1 if failed else 0


REFRESHING = "PERFBOOK_REFRESHING"    # the notebook a refresh process is executing


def refresh_jobs(value: int | None) -> int:
    """How many notebooks `refresh` executes at once: --jobs, else one per CPU we may run on,
    at most 4 (each is one kernel, mostly on one CPU)."""
    from .proc import usable_cpus
    return max(1, value) if value else usable_cpus()


def _refresh_child(ch) -> list[str]:
    """The command that refreshes one notebook for _refresh_in_parallel."""
    return [sys.executable, "-m", "tools", "refresh", "--chapters", ch.name, "--jobs", "1", "--validated"]


def _stored_size(ch) -> int:
    try:
        return os.stat(ch.path).st_size
    except (OSError, TypeError):
        return 0


def _refresh_in_parallel(chapters, jobs: int) -> int:
    """cmd_refresh, `jobs` notebooks at a time, each in a `python -m tools refresh` process of
    its own (its own kernel, its own atomic write), the chapters first, then the pages: a page
    reads every chapter's key findings, which the chapters have just stored (tools.findings).
    Within each phase the biggest stored notebooks start first: their size follows the work of
    re-executing them closely enough that fewer CPUs idle at the end of the phase. Their lines
    are passed on whole, as they come. An interrupt, or our death, stops them all (process
    groups, PR_SET_PDEATHSIG), and the connection files and sockets of their kernels go with
    them (tools.sweep): a stored notebook is only ever replaced whole."""
    import selectors
    import subprocess
    from . import guard
    from .chapters import PAGES
    from .proc import die_with_parent, kill_group
    from .sweep import kernel_files
    from .warmkernel import ZYGOTE_FD, Zygote, enabled
    phases = [[c for c in chapters if c not in PAGES], [c for c in chapters if c in PAGES]]
    print(f"[refresh] {len(chapters)} notebooks, {jobs} at a time", flush=True)
    failed = 0
    running: dict = {}
    sel = selectors.DefaultSelector()
    zygote = None
    with guard.interruptible():
        try:
            zygote = Zygote.start() if enabled() else None   # one for every child's kernels
            for phase in phases:
                todo = sorted(phase, key=_stored_size, reverse=True)   # stable: ties keep their order
                while todo or running:
                    while todo and len(running) < jobs:
                        ch = todo.pop(0)
                        conn = zygote.client() if zygote is not None else None
                        env = {**os.environ, ZYGOTE_FD: str(conn.fileno())} if conn is not None else None
                        try:
                            p = subprocess.Popen(_refresh_child(ch), stdout=subprocess.PIPE,
                                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                 text=True, bufsize=1, env=env,
                                                 pass_fds=(conn.fileno(),) if conn is not None else (),
                                                 start_new_session=True, preexec_fn=die_with_parent)
                        finally:
                            if conn is not None:
                                conn.close()
                        running[p.stdout] = p
                        sel.register(p.stdout, selectors.EVENT_READ)
                    for key, _ in sel.select(timeout=1.0):
                        line = key.fileobj.readline()
                        if line:
                            print(line, end="", flush=True)
                            continue
                        p = running.pop(key.fileobj)
                        sel.unregister(key.fileobj)
                        key.fileobj.close()
                        failed += p.wait() != 0
                    guard.check_interrupted()
        finally:
            with guard.restoring():
                for p in running.values():
                    kill_group(p)
                sel.close()
                if zygote is not None:
                    zygote.close()      # and with it any kernel a killed child left
                kernel_files()          # and the files of the kernels the killed children started
    return 1 if failed else 0


def cmd_collect(args) -> int:
    """One chapter, in this process: what a notebook's collect mode runs (tools.notebook).
    Exit 0 with `new dataset: PATH` as the last line, 3 when the host can't run it."""
    from .chapters import by_name
    from .framework import collect
    try:
        overrides = json.loads(args.params)
        assert isinstance(overrides, dict)
    except (ValueError, AssertionError):
        from .errors import ParameterError
        raise ParameterError(f"--params must be a JSON object, got {args.params!r}") from None
    out = collect(by_name(args.chapter).load(), args.profile, args.data_dir or None, **overrides)
    return 0 if out is not None else 3


def cmd_compare(args) -> int:
    from .compare import report
    return report(args.host or None)


def cmd_catalog(args) -> int:
    from .catalog import build
    build(Path(args.data_dir) if args.data_dir else None)
    return 0


def cmd_compact(args) -> int:
    from .writer import compact
    compact(Path(args.data_dir) if args.data_dir else None)
    return 0


def cmd_validate(args) -> int:
    from .validation import validate_all
    n = validate_all(Path(args.data_dir) if args.data_dir else None)
    print(f"{n} datasets under {args.data_dir or 'data'}/runs load and match their manifests")
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
    from . import hostinfo, summary
    from .chapters import CHAPTERS
    from .dataset import list_runs, load_manifest
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
            if "seconds" in st:
                detail += f" (in {st['seconds']} s)"
        print(f"{ch.name:<22} {st['status']:<11} {detail}")
        print(f"{'':<22} datasets in data/: {len(runs)} ({len(mine)} from this host, "
              f"{len({r.parts[-3] for r in runs})} host(s))")
        skipped = []
        for r in mine[-1:]:
            m = load_manifest(r)
            skipped = [f"{k}: {v}" for k, v in m.get("skipped", {}).items()]
            for line in summary.cost_lines(ch.load(), r):   # its profile, time and stop rules
                print(f"{'':<22} {line}")
        for s in skipped:
            print(f"{'':<22} not measured: {s}")
    site = repo_root() / "_build" / "html" / "index.html"
    print("-" * 72)
    print(f"site: {site}" if site.is_file() else "site: not built (run make book)")
    print("=" * 72)
    return 0


def cmd_sweep(args) -> int:
    """Every kind of state of dead runs (tools.sweep.sweep_all). Exit 0 when no private
    directory was refused; 1 when one was (the state dir or the scratch parent planted as a
    symlink or another user's): the sweep did all it could, every other kind of state included,
    and its last line names the refused path. 1, as `measure` gives when a chapter failed: the
    command ran but its job is not done; 2 stays for an error that stopped it before it began."""
    from .sweep import sweep_all
    refused: list[str] = []
    if not sweep_all(refused=refused) and not refused:
        print("nothing to sweep")
    if refused:
        print("error: the sweep left alone what it refuses to touch: " + "; ".join(refused),
              file=sys.stderr)
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
        rc = subprocess.run([str(jb), "build", str(repo_root()), "--all", "-W", "-n", "--keep-going", "-q"],
                            stdout=out, stderr=subprocess.STDOUT, cwd=repo_root()).returncode
    text = log.read_text(errors="replace")
    problems = [ln for ln in text.splitlines() if re.search(r"\b(WARNING|ERROR|CRITICAL)\b|Traceback|Error:", ln)]
    site = repo_root() / "_build" / "html" / "index.html"
    if rc == 0 and not problems:
        print(f"site: {site}")
        return 0
    for ln in (problems or text.splitlines()[-15:])[:40]:
        print(f"[book] {ln}")
    print(f"[book] jupyter-book build {'failed' if rc else 'warned'} (exit {rc}); its full output: {log}")
    return rc or 1


def cmd_doctor(args) -> int:
    from . import statedir
    from .chapters import CHAPTERS
    for private in (statedir.state_dir, statedir.scratch_parent):
        try:
            private()
        except statedir.UnsafePath as e:    # not a chapter's prerequisite: every collect fails
            print(f"{'every chapter':<22} will fail: {e}")
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
    m.add_argument("--strict", action="store_true", help=argparse.SUPPRESS)  # now always
    m.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="a notebook parameter for every chapter of this run (JSON value, else a string)")
    r = sub.add_parser("refresh")
    r.add_argument("--chapters", default="")
    r.add_argument("--changed", action="store_true",
                   help="only the notebooks whose data or code changed since they were stored")
    r.add_argument("--jobs", type=int, default=0,
                   help="notebooks executed at once (default: one per CPU, at most 4)")
    r.add_argument("--validated", action="store_true",
                   help="skip the dataset validation: the caller did it (a parallel refresh's children)")
    st = sub.add_parser("stale")
    st.add_argument("--chapters", default="")
    sub.add_parser("summary")
    cg = sub.add_parser("catalog", help="build the catalog of every dataset's manifest and print what it holds")
    cg.add_argument("--data-dir", default="", help="a data directory other than the checkout's data/")
    ck = sub.add_parser("compact", help="compress plain .csv tables of every dataset in place (lossless)")
    ck.add_argument("--data-dir", default="")
    cp = sub.add_parser("compare", help="where this host sits among all hosts, per key finding")
    cp.add_argument("--host", default="")
    c = sub.add_parser("collect", help="one chapter in this process (a notebook's collect mode)")
    c.add_argument("chapter")
    c.add_argument("--profile", default="default")
    c.add_argument("--data-dir", default="")
    c.add_argument("--params", default="{}", help="the chapter's parameters as a JSON object")
    v = sub.add_parser("validate")
    v.add_argument("--data-dir", default="", help="a data directory other than the checkout's data/")
    sub.add_parser("sweep")
    sub.add_parser("doctor")
    sub.add_parser("book")
    args = ap.parse_args(argv)
    fn = {"measure": cmd_measure, "refresh": cmd_refresh, "summary": cmd_summary, "compare": cmd_compare, "compact": cmd_compact, "catalog": cmd_catalog, "stale": cmd_stale, "validate": cmd_validate, "collect": cmd_collect,
          "sweep": cmd_sweep, "doctor": cmd_doctor, "book": cmd_book}[args.cmd]
    try:
        return fn(args)
    except PerfbookError as e:
        print(one_line(e), file=sys.stderr)
        return 2
    except BrokenPipeError:  # `python -m tools summary | head`: the reader left; say nothing
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        from . import guard
        sig = guard.interrupted_by() or "SIGINT"
        print(f"interrupted by {sig}: what the run changed was restored, nothing was published",
              file=sys.stderr)
        return 128 + int(getattr(__import__("signal"), sig))


if __name__ == "__main__":
    sys.exit(main())
