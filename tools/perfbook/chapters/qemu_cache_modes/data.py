"""qemu_cache_modes, data: the loaded datasets (perfbook.data.dataset.Data) in their natural order, and
the quoted dataset's frames every table, figure and finding starts from, computed once."""
from __future__ import annotations

from functools import cached_property

from perfbook.data.dataset import Data
from . import analysis as A
from .spec import AIO, FORMATS, MODES

# Each table's natural key: the analysis must not depend on the order rows were written in
# (_f/_a/_m: format, aio and mode in FORMATS/AIO/MODES order, the order the trace runs them).
NATURAL_KEYS = {"bench": ["round", "position"], "host_dd": ["round", "position"],
                "guest_boots": ["boot"], "guest_dd": ["boot", "round", "position"],
                "pagecache": ["boot"], "pagecache_samples": ["boot", "t"],
                "trace": ["_f", "_a", "_m", "seq"]}


def natural_order(df, name):
    if df.empty or name not in NATURAL_KEYS:
        return df
    rank = {"_f": ("format", FORMATS), "_a": ("aio", AIO), "_m": ("mode", MODES)}
    keys = NATURAL_KEYS[name]
    d = df.assign(**{k: df[c].map({v: i for i, v in enumerate(o)}).fillna(len(o))
                     for k, (c, o) in rank.items() if k in keys})
    return (d.sort_values(["host_id", "run_id", *keys], kind="stable")
            .drop(columns=[k for k in rank if k in keys]).reset_index(drop=True))


class CacheData(Data):
    """Every table in its natural order. The quoted dataset (D.quoted): D.p (its parameters),
    D.trace, D.sem (semantics_table), D.raw (its raw, aio=threads rows by mode), D.bench and
    D.bs (bench_summary), D.boots, D.gdd, D.hdd, D.gs, D.hs (the dd summaries), D.acc (the
    accelerator label), D.pc (pagecache_table) and D.samples; D.ref, the seed's figures."""

    def prepare(self, name: str, df):
        return natural_order(df, name)

    @property
    def p(self) -> dict:
        return self.quoted.parameters

    @cached_property
    def ref(self):
        return self.reference(self.chapter.name)

    def host_of(self, df) -> list[tuple]:
        """[(host_id, description)] of the dataset df's first row comes from, for a caption."""
        host, run = df.host_id.iloc[0], df.run_id.iloc[0]
        return [(host, next(m.host.get("description") for m in self.manifests
                            if m.host_id == host and m.run_id == run))]

    # -- the quoted dataset ------------------------------------------------------------
    @cached_property
    def trace(self):
        return self.of_quoted(self["trace"])

    @cached_property
    def sem(self):
        return A.semantics_table(self.trace)

    @cached_property
    def raw(self):
        s = self.sem
        return s[(s.format == "raw") & (s.aio == "threads")].set_index("mode")

    @cached_property
    def bench(self):
        return self.of_quoted(self["bench"])

    @cached_property
    def bs(self):
        return A.bench_summary(self.bench)

    @cached_property
    def boots(self):
        return self.of_quoted(self["guest_boots"])

    @cached_property
    def gdd(self):
        return self.of_quoted(self["guest_dd"])

    @cached_property
    def hdd(self):
        return self.of_quoted(self["host_dd"])

    @cached_property
    def gs(self):
        return A.guest_dd_summary(self.gdd)

    @cached_property
    def hs(self):
        return A.host_dd_summary(self.hdd)

    @property
    def acc(self) -> str:
        return "/".join(a.upper() for a in sorted(set(self.gs.accel)))

    @cached_property
    def pagecache(self):
        return self.of_quoted(self["pagecache"])

    @cached_property
    def pc(self):
        return A.pagecache_table(self.pagecache)

    @cached_property
    def mem(self):
        """pagecache_table per mode (the last boot of each), in MODES order."""
        return self.pc.drop_duplicates("mode", keep="last").set_index("mode").reindex(list(MODES))

    @cached_property
    def samples(self):
        return self.of_quoted(self["pagecache_samples"])
