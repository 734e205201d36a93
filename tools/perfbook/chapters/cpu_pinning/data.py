"""cpu_pinning: the loaded datasets (perfbook.data.dataset.Data) and the frames of the quoted dataset
that every table, figure and finding starts from, computed once."""
from __future__ import annotations

from functools import cached_property

from perfbook.data.dataset import Data

EFFECT_METRICS = ("cpu_per_req_us", "all_cpu_per_req_us", "machine_busy_pct", "lat_mean_ms",
                  "lat_p99_ms", "throughput")


class PinningData(Data):
    """D["trials"] carries the per-trial metrics (analysis.derive); D["knobs"] and
    D["repetition"] are in the order the collect step writes them, whatever the row order
    on disk. The quoted dataset's frames: D.TL (its trials), D.S (summary), D.M (its medians
    alone), D.E (paired effects; D.EW, the same in words by key), D.XR (exclusions), D.K (its
    knob inventory), D.cores_quoted and D.tasks_quoted (its per-CPU and per-task rows), D.warm
    (its warm-up rounds) and D.host_caption. Each host's shown dataset:
    D.SH (findings.host_summary) and D.CH (analysis.compare_hosts), computed once for the
    tables, the figure and the prose that read them."""

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
    def M(self):
        """analysis.medians() of every metric (and vol_per_req) per load and variant: what the
        prose reads of D.S, and of the switches, without computing their intervals."""
        from .analysis import medians
        from .spec import METRICS
        return medians(self.TL, (*METRICS, "vol_per_req"))

    @cached_property
    def E(self):
        from .analysis import paired_effects
        return paired_effects(self.TL, metrics=EFFECT_METRICS)

    @cached_property
    def EW(self) -> dict:
        """(load, variant, metric) -> analysis.effect_of() of every paired effect in D.E: the
        prose, its key findings and the seed's table read them by key, many times each."""
        from .analysis import effects_by_key
        return effects_by_key(self.E)

    @cached_property
    def XR(self):
        from .analysis import exclusions
        return exclusions(self.TL)

    @cached_property
    def K(self):
        # not quoted_rows: the knobs table shows the fleet table's index, which of_quoted keeps
        return self.of_quoted(self["knobs"])

    # the quoted dataset's per-CPU and per-task rows, from its own files (Data.quoted_rows):
    # reading every host's for them was most of the prose's time at a hundred hosts
    @cached_property
    def cores_quoted(self):
        return self.quoted_rows("cores")

    @cached_property
    def tasks_quoted(self):
        return self.quoted_rows("tasks")

    # -- each host's shown dataset: the hosts table, its figure and the prose read them ----
    @cached_property
    def SH(self):
        from .findings import host_summary
        return host_summary(self)

    @cached_property
    def CH(self):
        from .analysis import compare_hosts
        return compare_hosts(self.of_shown(self["trials"]), manifests=self.manifests)

    @property
    def p(self) -> dict:
        return self.quoted.parameters

    @property
    def warm(self) -> int:
        from .analysis import warmup_rounds, warmups
        return warmup_rounds(warmups(self["repetition"]), self.quoted.host_id, self.quoted["run_id"])

    @property
    def host_caption(self) -> list[tuple]:
        h = self.quoted.host
        return [(h["host_id"], h.get("description"))]
