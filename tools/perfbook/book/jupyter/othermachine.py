"""Another machine, as far as this one can look like one: the environment nbval's kernels run in.

Stored outputs must read the same whichever machine re-executes them. nbval re-executes every
notebook and compares its outputs with the stored ones; its kernels (started through
perfbook.book.jupyter.provisioner) get this environment on top of the test's own
(perfbook.book.jupyter.nbval_plugin sets provisioner.EXTRA_ENV), so the one pass checks both that
a notebook reproduces its outputs and that it does so on a machine unlike the one that stored them:
* every loaded table's rows shuffled (perfbook.data.dataset.read_table, PERFBOOK_SHUFFLE_ROWS): the
  analysis must not depend on the order rows were written in;
* numpy's baseline code path (NPY_DISABLE_CPU_FEATURES turns off each SIMD target numpy would
  dispatch to here) and another OpenBLAS kernel set (OPENBLAS_CORETYPE): the analysis must not
  depend on the CPU's vector units. numpy's default sort is an introsort whose AVX-512 and
  AVX2 builds order equal keys differently: a "first" of tied rows changed a stored lifecycle
  table from one machine to the next (issue #43);
* another host id (PERFBOOK_HOST_ID): the machine that builds the book is not a host of it;
* another clock and time zone (libfaketime, TZ): nothing stored may depend on when it was built.
tests/test_portability.py checks that each knob takes in a kernel, and holds the static half
(every sort stable).
"""

from __future__ import annotations

import ctypes
import glob
import warnings
from pathlib import Path

import numpy
from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")  # Debian's libfaketime


def numpy_baseline_env() -> dict[str, str]:
    """NPY_DISABLE_CPU_FEATURES naming every SIMD target numpy dispatches to on this CPU (its
    build's baseline stays: it cannot be turned off), or {} when it dispatches to none."""
    on = [t for t in __cpu_dispatch__ if __cpu_features__.get(t)]
    return {"NPY_DISABLE_CPU_FEATURES": " ".join(on)} if on else {}


def openblas_core() -> str | None:
    """The kernel set numpy's OpenBLAS chose here (a DYNAMIC_ARCH build), None if unknown."""
    for lib in glob.glob(str(Path(numpy.__file__).parent.parent / "numpy.libs" / "*openblas*")):
        for name in (
            "scipy_openblas_get_corename64_",
            "scipy_openblas_get_corename",
            "openblas_get_corename",
        ):
            fn = getattr(ctypes.CDLL(lib), name, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                return fn().decode()
    return None


def other_machine_env() -> tuple[dict[str, str], list[str]]:
    """The environment of the pass, and what it changed (for the failure message)."""
    env = {
        "PERFBOOK_SHUFFLE_ROWS": "7",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PERFBOOK_HOST_ID": "h-0123456789ab",
        "TZ": "Pacific/Kiritimati",
    }
    said = ["rows shuffled (seed 7)", "host id h-0123456789ab", "time zone UTC+14"]
    npy = numpy_baseline_env()
    if npy:
        env.update(npy)
        said.append(f"numpy without {npy['NPY_DISABLE_CPU_FEATURES']}")
    core = openblas_core()
    if core:
        # SSE4.2 kernels where numpy's are AVX2 or AVX-512, else AVX2 ones
        other = "Nehalem" if core != "Nehalem" else "Haswell"
        env["OPENBLAS_CORETYPE"] = other
        said.append(f"OpenBLAS {other} kernels instead of {core}")
    if FAKETIME.is_file():
        # three years and a day on, every clock (an offset, not a speed: timeouts keep their
        # length). Faking the wall clock alone hangs the kernels: libfaketime then converts the
        # monotonic deadlines of pthread_cond_timedwait as if they were faked too.
        env.update(LD_PRELOAD=str(FAKETIME), FAKETIME="+1096d")
        said.append("the wall clock 1096 days ahead")
    else:
        warnings.warn(
            f"{FAKETIME} is missing (apt-get install faketime; tools/setup.sh installs "
            "it as root): the portability pass keeps this machine's clock",
            stacklevel=2,
        )
    return env, said
