"""perfbook: the measurement, analysis and book-building code behind the chapter notebooks.

Layers, from the top down; a module imports only from its own layer or the ones below it
(tests/test_layers.py holds the code to it with import-linter's layers contract):

  cli         the `perfbook` command (python -m perfbook)
  dev         tools for developers of the book: benchmarks, the synthetic fleet, bytecode
  book        the notebooks' helpers, refresh, the summary and hosts pages, the site,
              and the Jupyter machinery (book.jupyter: kernel, zygote, provisioner, ...)
  chapters    one package per chapter, all of the same shape (chapters/README in
              tools/README.md), and their registry
  analysis    statistics, repetition, key findings and their verdicts, cross-host views
  qemu        QEMU guests: images, boots, threads, the TCG second host
  framework   the chapter contract and the one collect sequence every chapter runs through
  data        datasets: manifests, reading, writing, validation; host facts and identity
  probes      parsers and helpers of kernel interfaces: ftrace, diskstats, ELF symbols, qcow2
  hoststate   the shared state a run changes and restores: state dir, lock, scratch, sweep,
              cgroups, knobs, network namespaces, tracefs, bpftrace, the run monitor
  core        errors, paths, signals (guard), child processes, progress lines
"""

if __name__ != "perfbook":  # e.g. `import tools.perfbook` from a checkout's top directory
    raise ImportError(f"import perfbook, not {__name__}: one module, one name")

__version__ = "0.2.0"
