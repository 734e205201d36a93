"""`python -m perfbook`: the same as the `perfbook` command (perfbook.cli)."""

import sys

from perfbook.cli import main

sys.exit(main())
