"""netperf_latency's datasets (tools.dataset.Data), with its tables in a fixed row order and
the frames of the quoted dataset that the prose starts from."""
from __future__ import annotations

from functools import cached_property

from ...dataset import Data
from .parse import bin_edges_us
from .spec import SCHED_PINS, SCHED_ROLES


def in_order(df, keys, **ranks):
    """Rows by host, run and `keys`; ranks name=(column, order) sort a column in a code order.
    The analysis must not depend on the order rows were written in."""
    if df.empty:
        return df
    d = df.assign(**{k: df[c].map({v: i for i, v in enumerate(o)}).fillna(len(o))
                     for k, (c, o) in ranks.items()})
    return (d.sort_values(["host_id", "run_id", *keys], kind="stable")
            .drop(columns=list(ranks)).reset_index(drop=True))


class NetperfData(Data):
    """D["runs"] in the order it was measured; D["hist"] with each bin's edges (lo_us, hi_us);
    D["sched"] per pinning mode and role in the collect order. The quoted dataset's frames:
    D.R (its runs), D.H (its histogram), D.p (its parameters); D.ref, the seed's numbers."""

    def __init__(self, chapter, data_dir=None, manifests=None):
        super().__init__(chapter, data_dir, manifests)
        self._ready: dict = {}

    def __getitem__(self, name: str):
        if name in self._ready:
            return self._ready[name]
        df = super().__getitem__(name)
        if name == "runs":
            df = in_order(df, ["t_s", "rep", "order"])
        elif name == "hist" and not df.empty:
            df = df.copy()
            df["lo_us"], df["hi_us"] = bin_edges_us(df["bin"])
        elif name == "sched":
            df = in_order(df, ["path", "proto", "_pin", "_role"],
                          _pin=("pin", SCHED_PINS), _role=("role", SCHED_ROLES))
        self._ready[name] = df
        return df

    @cached_property
    def R(self):
        return self.of_quoted(self["runs"])

    @cached_property
    def H(self):
        return self.of_quoted(self["hist"])

    @property
    def p(self) -> dict:
        return self.quoted.parameters

    @cached_property
    def ref(self):
        return self.reference(self.chapter.name)
