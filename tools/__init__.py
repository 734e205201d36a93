"""perfbook tools: the measurement code that the book's chapter notebooks call.

Notebooks import from here; no measurement logic lives in a notebook cell.
Modules:
  paths      -- where the repository, data and build outputs are
  errors     -- the user-facing error types (one clear line, no traceback wall)
  hostinfo   -- host facts for manifests and the anonymous host id
  dataset    -- atomic, never-overwriting dataset writer and the reader
  lock       -- the machine-wide measure lock
  tracefs    -- ftrace/uprobe state that is always restored
  stats      -- medians, rank-based confidence intervals, percentiles
  cbuild     -- builds the C harnesses under tools/c on demand
  elfsym     -- symbol -> file offset with pyelftools (for uprobes)
  chapters   -- the chapter registry used by the measure CLI
"""
__version__ = "0.1.0"
