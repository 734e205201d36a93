"""A synthetic fleet for tests and benchmarks: N made-up hosts built from the committed data.

    python -m tools.synthfleet N DEST [--seed S]

DEST is a data directory (DEST/runs/ is created) outside the repository's data/: the
generator refuses the book's own data. Each synthetic host takes, per chapter, the committed
dataset its chapter shows for one real host (tools.dataset.shown_datasets) and changes what
a fleet varies:

* the manifest's host block: CPU vendor and model, CPU count, memory, kernel release,
  bare metal / KVM guest / TCG guest, and identity facts from which its host id is derived
  as for a real machine (tools.identity), so validation treats it like any contribution;
* its measured values: every floating-point column is scaled by one factor per host
  (log-normal, sigma 0.15), so that hosts differ while each dataset stays self-consistent
  (ratios, sums and orderings within a dataset are kept; integer counts are not touched).

Everything it makes is marked: ``host.synthetic`` is true and the description begins with
"synthetic". Tables keep their names, row counts and columns, so every chapter reads them.
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
from pathlib import Path

from . import identity
from .dataset import (MANIFEST, list_runs, load_manifest, read_csv, shown_datasets, table_path,
                      write_table)
from .errors import PerfbookError, one_line
from .paths import data_dir as book_data_dir

CPUS = (("AMD", "AMD EPYC 7B13", 2450), ("AMD", "AMD EPYC 9B14", 2600),
        ("AMD", "AMD Ryzen 9 7950X", 4500), ("Intel", "Intel Xeon Platinum 8375C", 2900),
        ("Intel", "Intel Xeon Gold 6338", 2000), ("Intel", "Intel Core i7-1185G7", 3000),
        ("Intel", "Intel Core i9-13900K", 3000), ("ARM", "Neoverse-N1", None))
KERNELS = ("5.10.0-28-amd64", "5.15.0-91-generic", "6.1.0-18-amd64", "6.6.13-200.fc39",
           "6.8.0-31-generic", "6.12.9-arch1-1", "6.18.44")
KINDS = (("none", "none"), ("kvm", "none"), ("kvm", "docker"), ("qemu", "none"))


def _refuse_book_data(dest: Path) -> None:
    book = book_data_dir().resolve()
    d = dest.resolve()
    if d == book or book in d.parents or d in book.parents:
        raise PerfbookError(f"{dest}: the synthetic fleet never goes into the book's data/ "
                            "(or a directory holding it); give a scratch directory")


def _host(rng: random.Random, i: int, seed: int, base: dict) -> dict:
    vendor, model, tsc = rng.choice(CPUS)
    virt, cont = rng.choice(KINDS)
    cpus = rng.choice((2, 4, 8, 16, 64))
    h = dict(base)
    h.update({
        "cpu_model": model, "cpus_online": cpus, "mem_total_gib": round(cpus * rng.choice((1.9, 3.8, 7.7)), 1),
        "arch": "aarch64" if vendor == "ARM" else "x86_64", "kernel_release": rng.choice(KERNELS),
        "virtualization": virt, "container": cont, "synthetic": True, "label_opt_in": False,
        "cpu_vendor": vendor, "note": f"synthetic host {i} of seed {seed}",
        "machine_key": f"synthetic-{seed}-{i}",
    })
    where = "bare metal" if virt == "none" else f"{virt} guest"
    h["machine"] = identity.machine_facts(h, tsc * 1000 if tsc else None, "synthetic",
                                          {"synthetic": True})
    h["host_id"] = identity.derive(h["machine"])
    h["description"] = f"synthetic: {model}, {cpus} CPUs, {where}"
    return h


def _copy_scaled(src: Path, dest: Path, factor: float, tables, schemas: dict) -> None:
    """Copy a dataset's tables, scaling the columns its chapter declares as float."""
    dest.mkdir(parents=True)
    for t in tables:
        df = read_csv(table_path(src, t))
        schema = schemas.get(t)
        floats = [c for c, kind in (schema.columns.items() if schema else ()) if kind == "float"]
        for c in floats:
            if c in df.columns:
                df[c] = df[c] * factor
        for c in floats:   # no more digits than the source shows (a portable output)
            if c in df.columns:
                df[c] = df[c].map(lambda v: float(f"{v:.6g}") if v == v else v)
        write_table(dest / t, df)


def _worker_start(schemas: dict) -> None:
    """A worker of generate's pool: it dies with its parent and knows every chapter's table
    schemas (given once, not with each host)."""
    from .proc import die_with_parent
    die_with_parent()
    global _schemas
    _schemas = schemas


def _make_host(jobs) -> None:
    """Write one synthetic host's datasets: [(source run, new run, factor, tables, chapter,
    manifest text)] (a worker of generate's pool)."""
    for src, run, factor, tables, chapter, man_text in jobs:
        _copy_scaled(src, run, factor, tables, _schemas[chapter])
        (run / MANIFEST).write_text(man_text)


def generate(n: int, dest: Path, seed: int = 1, source: Path | None = None, say=print) -> list[str]:
    """Make n synthetic hosts under dest/runs from the shown dataset per (host, chapter) of
    `source` (default: the book's data/); returns their host ids. The hosts are drawn in
    order from one seeded generator, then written side by side, one process per CPU (xz
    compression is most of the time), so the same seed gives the same fleet."""
    from concurrent.futures import FIRST_EXCEPTION, wait

    from .chapters import CHAPTERS
    from .proc import fork_pool
    dest = Path(dest)
    _refuse_book_data(dest)
    rng = random.Random(seed)
    newest: dict[str, list[Path]] = {}
    schemas = {ch.name: getattr(ch.load(), "tables", {}) for ch in CHAPTERS}
    for ch in CHAPTERS:
        mans = [load_manifest(r) for r in list_runs(ch.name, source)]
        shown = shown_datasets(mans)  # one dataset per host: the one a chapter shows (quoted())
        if shown:
            newest[ch.name] = [m.path for m in mans if shown.get(m.host_id) == m["run_id"]]
    ids, hosts = [], []
    for i in range(n):
        factor = rng.lognormvariate(0.0, 0.15)
        host, jobs = None, []
        for chapter, runs in sorted(newest.items()):
            src = runs[i % len(runs)]
            man = dict(load_manifest(src))
            if host is None:
                host = _host(rng, i, seed, man["host"])
            man["host"] = host
            run = dest / "runs" / host["host_id"] / chapter / src.name
            if run.exists():
                raise PerfbookError(f"{run}: exists already; use an empty directory or another seed")
            jobs.append((src, run, factor, man["tables"], chapter, json.dumps(man, indent=1, sort_keys=True) + "\n"))
        ids.append(host["host_id"])
        hosts.append(jobs)
    with fork_pool(_worker_start, (schemas,)) as pool:
        pending = {pool.submit(_make_host, jobs) for jobs in hosts}
        done_n = 0
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                for f in done:
                    f.result()                     # a worker's error, here
                    done_n += 1
                    if done_n % 10 == 0 or done_n == n:
                        say(f"[synthfleet] {done_n}/{n} hosts")
        except BaseException:
            for f in pending:
                f.cancel()
            raise
    ref = dest / "reference"
    if not ref.exists() and (source or book_data_dir()).joinpath("reference").is_dir():
        shutil.copytree((source or book_data_dir()) / "reference", ref)
    return ids


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.synthfleet")
    ap.add_argument("n", type=int)
    ap.add_argument("dest", type=Path)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    try:
        generate(a.n, a.dest, a.seed)
    except PerfbookError as e:
        print(one_line(e), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
