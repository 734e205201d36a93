"""netperf_latency's datasets (perfbook.data.dataset.Data), with its tables in a fixed row order and
the frames of the quoted dataset that the prose starts from."""
from __future__ import annotations

from functools import cached_property

from perfbook.data.dataset import Data, in_order
from .parse import bin_edges_us
from .spec import SCHED_PINS, SCHED_ROLES


class NetperfData(Data):
    """D["runs"] in the order it was measured; D["hist"] with each bin's edges (lo_us, hi_us);
    D["sched"] per pinning mode and role in the collect order. The quoted dataset's frames:
    D.R (its runs), D.H (its histogram), D.ladder (its pooled percentiles), D.p (its
    parameters); D.ref, the seed's numbers."""

    def prepare(self, name: str, df):
        if name == "runs":
            df = in_order(df, ["t_s", "rep", "order"])
        elif name == "hist" and not df.empty:
            df = df.copy()
            df["lo_us"], df["hi_us"] = bin_edges_us(df["bin"])
        elif name == "sched":
            df = in_order(df, ["path", "proto", "_pin", "_role"],
                          _pin=("pin", SCHED_PINS), _role=("role", SCHED_ROLES))
        return df

    @cached_property
    def R(self):
        return self.of_quoted(self["runs"])

    @cached_property
    def H(self):
        return self.of_quoted(self["hist"])

    @cached_property
    def ladder(self):
        """analysis.ladder of the quoted dataset (several sections read it; not to be changed)."""
        from .analysis import ladder
        return ladder(self.R, self.H)

    @cached_property
    def versus_seed(self):
        """analysis_seed.versus_seed of the quoted dataset, by metric (the seed section and the
        key findings' seed_ratio read it)."""
        from .analysis_seed import versus_seed
        return versus_seed(self.R, self.ref, self.quoted.host_id).set_index("metric")

    @property
    def p(self) -> dict:
        return self.quoted.parameters

    @cached_property
    def ref(self):
        return self.reference(self.chapter.name)
