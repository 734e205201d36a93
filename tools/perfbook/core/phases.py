"""Where a collect's seconds go (#40: precision per second): a clock that charges wall time to
the phase a chapter says it is in.

    clock = PhaseClock()
    with clock.phase("boot"):
        ...                      # a guest boots
        with clock.phase("measured"):
            ...                  # the innermost phase is charged: boot resumes after
    clock.seconds(total=42.0)    # {"boot": .., "measured": .., "other": ..}

Time outside every phase is "other". The framework adds its own kinds around the chapter's
measure(): "framework" (waiting for the lock, the sweep, the cgroup, the monitor, the
fingerprints) and "restore" (ending the run's children and unwinding its undo stack).
"""

from __future__ import annotations

import time
from contextlib import contextmanager

# what a chapter may call a part of its collect
KINDS = ("boot", "setup", "warmup", "measured")
FRAMEWORK_KINDS = ("framework", "restore")
ORDER = (*FRAMEWORK_KINDS[:1], *KINDS, "other", *FRAMEWORK_KINDS[1:])


class PhaseClock:
    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._stack: list[str] = []
        self._since = 0.0
        self.spent: dict[str, float] = {}

    def _charge(self, now: float) -> None:
        if self._stack:
            kind = self._stack[-1]
            self.spent[kind] = self.spent.get(kind, 0.0) + (now - self._since)
        self._since = now

    @contextmanager
    def phase(self, kind: str):
        if kind not in KINDS + FRAMEWORK_KINDS:
            raise ValueError(f"unknown phase {kind!r}: one of {', '.join(KINDS)}")
        self._charge(self._clock())
        self._stack.append(kind)
        try:
            yield
        finally:
            self._charge(self._clock())
            self._stack.pop()

    def add(self, kind: str, seconds: float) -> None:
        """Charge seconds the clock did not see (the framework's own, timed around it)."""
        self.spent[kind] = self.spent.get(kind, 0.0) + max(seconds, 0.0)

    def seconds(self, total: float) -> dict[str, float]:
        """Seconds per kind, rounded to 0.1 s, in ORDER; "other" is `total` minus the rest."""
        out = {k: self.spent[k] for k in ORDER if k in self.spent}
        out["other"] = max(total - sum(out.values()), 0.0)
        return {k: round(out[k], 1) for k in ORDER if k in out}


def breakdown_text(phases: dict | None) -> str:
    """'boot 40 s (52 %), measured 20 s (26 %), other 17 s' from a manifest's `phases`, or ''."""
    if not phases:
        return ""
    total = sum(phases.values()) or 1.0
    return ", ".join(
        f"{k} {v:.0f} s ({100 * v / total:.0f} %)"
        for k, v in sorted(
            phases.items(), key=lambda kv: ORDER.index(kv[0]) if kv[0] in ORDER else 99
        )
        if v >= 0.5
    )
