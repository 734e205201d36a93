"""cpu_pinning: the loaded datasets (tools.dataset.Data) and the frames of the quoted dataset
that every table, figure and finding starts from, computed once."""
from __future__ import annotations

from functools import cached_property

from ...dataset import Data

EFFECT_METRICS = ("cpu_per_req_us", "all_cpu_per_req_us", "machine_busy_pct", "lat_mean_ms",
                  "lat_p99_ms", "throughput")


class PinningData(Data):
    """D["trials"] carries the per-trial metrics (analysis.derive); D["knobs"] and
    D["repetition"] are in the order the collect step writes them, whatever the row order
    on disk. The quoted dataset's frames: D.TL (its trials), D.S (summary), D.E (paired
    effects), D.XR (exclusions), D.K (its knob inventory), D.warm (its warm-up rounds) and
    D.host_caption."""

    def prepare(self, name: str, df):
        from . import analysis as A
        if name == "trials" and len(df):
            df = A.derive(df)
        elif name == "knobs":
            df = A.in_order(df, A.knob_rank)
        elif name == "repetition":
            df = A.in_order(df, A.repetition_rank)
        return df

    # -- the quoted dataset ------------------------------------------------------------
    @cached_property
    def TL(self):
        return self.of_quoted(self["trials"])

    @cached_property
    def S(self):
        from .analysis import summary
        return summary(self.TL)

    @cached_property
    def E(self):
        from .analysis import paired_effects
        return paired_effects(self.TL, metrics=EFFECT_METRICS)

    @cached_property
    def XR(self):
        from .analysis import exclusions
        return exclusions(self.TL)

    @cached_property
    def K(self):
        return self.of_quoted(self["knobs"])

    @property
    def p(self) -> dict:
        return self.quoted.parameters

    @property
    def warm(self) -> int:
        from .analysis import warmup_rounds
        return warmup_rounds(self["repetition"], self.quoted.host_id, self.quoted["run_id"])

    @property
    def host_caption(self) -> list[tuple]:
        h = self.quoted.host
        return [(h["host_id"], h.get("description"))]
