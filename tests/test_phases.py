"""perfbook.core.phases: where a collect's seconds go (#40)."""

from __future__ import annotations

import pytest

from perfbook.core.phases import PhaseClock, breakdown_text
from perfbook.framework.contract import Context


class Tick:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_the_innermost_phase_is_charged_and_the_rest_is_other():
    t = Tick()
    c = PhaseClock(clock=t)
    t.t = 1.0
    with c.phase("boot"):
        t.t = 5.0
        with c.phase("measured"):
            t.t = 8.0
        t.t = 9.0
    c.add("framework", 0.5)
    got = c.seconds(total=12.0)
    assert got == {"framework": 0.5, "boot": 5.0, "measured": 3.0, "other": 3.5}
    assert list(got) == ["framework", "boot", "measured", "other"]
    assert breakdown_text(got).startswith("framework 0 s (4 %), boot 5 s (42 %), measured 3 s")


def test_a_phase_that_raises_is_still_charged():
    t = Tick()
    c = PhaseClock(clock=t)
    with pytest.raises(RuntimeError), c.phase("setup"):
        t.t = 2.0
        raise RuntimeError
    assert c.seconds(total=2.0) == {"setup": 2.0, "other": 0.0}


def test_a_chapter_names_only_the_known_kinds_with_or_without_a_clock():
    ctx = Context(chapter=None, p={}, profile="quick", writer=None, undo=None)
    with ctx.phase("boot"):
        pass
    with pytest.raises(ValueError, match="unknown phase 'booting'"):
        ctx.phase("booting")
    assert breakdown_text(None) == ""
