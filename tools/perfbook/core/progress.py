"""Progress lines for long steps: '[chapter] 3/12 (25%) uprobe round 2, eta 40 s'."""

from __future__ import annotations

import sys
import time

from perfbook.core import guard


class Progress:
    def __init__(self, label: str, total: int, stream=None, min_interval: float = 0.0):
        self.label, self.total = label, max(int(total), 1)
        self.done = 0
        self.t0 = time.monotonic()
        self.stream = stream or sys.stdout
        self.min_interval = min_interval
        self._last = 0.0

    def step(self, what: str = "", n: int = 1) -> None:
        guard.check_interrupted()  # a signal whose KeyboardInterrupt got lost stops the run here
        self.done += n
        now = time.monotonic()
        if now - self._last < self.min_interval and self.done < self.total:
            return
        self._last = now
        el = now - self.t0
        eta = el / self.done * (self.total - self.done) if self.done else 0.0
        pct = 100 * self.done // self.total
        print(
            f"[{self.label}] {self.done}/{self.total} ({pct}%) {what} "
            f"elapsed {el:.0f} s, eta {eta:.0f} s",
            file=self.stream,
            flush=True,
        )

    def note(self, text: str) -> None:
        print(f"[{self.label}] {text}", file=self.stream, flush=True)

    def expect(self, more: int) -> None:
        """An open-ended loop (adaptive repetition) goes on: at least `more` steps remain."""
        self.total = max(self.total, self.done + int(more))
