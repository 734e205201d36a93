"""virtio_blk_latency: the loaded datasets (perfbook.data.dataset.Data) and the frames every table,
figure and finding of the quoted dataset starts from, computed once."""
from __future__ import annotations

from functools import cached_property

from perfbook.data.dataset import Data

# natural keys: the analysis must not depend on the order rows were written in
ORDER = {"requests": ["job", "t0"], "jobs": ["job"], "calib": ["job", "tsc0"]}
PER_JOB = ["kind", "round", "aio", "variant", "accel"]   # what a request takes from its boot


class VirtioData(Data):
    """D["requests"], D["jobs"], D["calib"] sorted by boot and stamp; every request carries its
    boot's kind, round, aio mode, variant and accelerator. The quoted dataset's frames:
    D.req, D.jobs, D.p (its parameters), D.iv (per-request layer latencies), D.an (every stamp
    on the host's axis), D.cum / D.cum1 (the seed's cumulative table, one layer per boot / all
    at once), D.acc (the accelerator label) and D.hosts_caption."""

    def prepare(self, name: str, df):
        # a view of one dataset (a finding's) has one host_id and run_id on every row: sorting
        # and joining by them too (strings, hashed row by row) would change nothing
        ds = [] if self._only is not None and len(self._only) == 1 else ["host_id", "run_id"]
        if len(df) and name in ORDER:
            df = df.sort_values([*ds, *ORDER[name]], kind="stable", ignore_index=True)
        if name == "requests" and len(df):
            j = self["jobs"].reindex(columns=[*ds, "job"] + PER_JOB)
            j["aio"] = j["aio"].fillna("")
            j["accel"] = j["accel"].fillna("")
            df = df.merge(j, on=[*ds, "job"], how="left")
        return df

    # -- the quoted dataset (Data.quoted_rows: a fleet's notebook reads one requests table) --
    @cached_property
    def req(self):
        return self.quoted_rows("requests")

    @cached_property
    def jobs(self):
        return self.quoted_rows("jobs")

    @cached_property
    def guest_jobs(self):
        return self.jobs[self.jobs.kind == "guest"]

    @property
    def p(self) -> dict:
        return self.quoted.parameters

    @cached_property
    def iv(self):
        from .analysis import layer_intervals
        return layer_intervals(self.req, self.jobs)

    @cached_property
    def an(self):
        from .analysis import aligned
        return aligned(self.req, self.jobs)

    @cached_property
    def cum(self):
        """The cumulative table, one layer per boot (the seed's method), aio=threads, sequential."""
        from .analysis import cumulative_table
        return cumulative_table(self.iv, "seed", aio="threads", pattern="seq")

    @cached_property
    def cum1(self):
        """The cumulative table, all layers at once, aio=threads, sequential."""
        from .analysis import cumulative_table
        return cumulative_table(self.iv, "one_run", aio="threads", pattern="seq")

    @property
    def have_seed_method(self) -> bool:
        """Whether the quoted dataset has the single-layer boots."""
        return bool(self.cum.set_index("key").loc["guest_virtio_pci", "n"])

    @property
    def acc(self) -> str:
        from .analysis import accel_label
        return accel_label(self.jobs)

    @property
    def hosts_caption(self) -> list[tuple]:
        h = self.quoted.host
        return [(h["host_id"], h.get("description"))]

    @cached_property
    def ref(self):
        return self.reference(self.chapter.name)
