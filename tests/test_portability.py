"""The chapters' analysis must not depend on the order rows were written in: nbval passes with
every loaded table's rows shuffled (tools.dataset.read_table, PERFBOOK_SHUFFLE_ROWS)."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_nbval_passes_with_shuffled_rows():
    env = dict(os.environ, PERFBOOK_SHUFFLE_ROWS="7", OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "chapters", "summary.ipynb", "hosts.ipynb", "--nbval", "--nbval-current-env",
         "--nbval-sanitize-with", "tests/nbval_sanitize.cfg", "-q", "-p", "no:cacheprovider", "-p", "tools.nbval_glue"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    failed = [ln for ln in r.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    assert r.returncode == 0, ("nbval fails with shuffled rows (PERFBOOK_SHUFFLE_ROWS=7):\n"
                               + "\n".join(failed or [r.stdout[-4000:], r.stderr[-2000:]]))
