"""qcow2_overlap, prose: every value the chapter's prose quotes, from D.quoted and the seed's table.

headline(D) gives the numbers (floats unrounded); values(D) formats each one exactly as the
prose shows it (FORMATS), because perfbook.book.notebook.glue_all glues text and integers only.
"""

from __future__ import annotations

import datetime as dt
import math

import numpy as np

from perfbook.analysis import decide

from .analysis import (
    cluster_text,
    dataset_overhead,
    dataset_rows,
    exponent,
    exponent_sizes,
    fit_power_law,
    formula_table,
    host_cases,
    host_comparison,
    perf_check_pct,
    seed_size,
)
from .parse import GiB, MiB

# How the prose shows each float (format specs); everything else is an int or a str.
FORMATS = {
    "seed_create_gib": ".0f",
    "run_minutes": ".1f",
    "l2_cov_kib": ".0f",
    "pre_big_cached_cpu": ".2f",
    "pre_big_none_cpu": ".2f",
    "pre_big_extra": ".2f",
    "pre_big_extra_lo": ".2f",
    "pre_big_extra_hi": ".2f",
    "pre_big_share": ".0f",
    "pre_k": ".2f",
    "seed_user_saved": ".1f",
    "seed_create_before": ".1f",
    "seed_create_after": ".1f",
    "flush_wall": ".2f",
    "flush_cpu": ".2f",
    "flush_wait": ".2f",
    "ow_cached_us": ".1f",
    "ow_cached_lo_us": ".1f",
    "ow_cached_hi_us": ".1f",
    "ow_cached_share": ".0f",
    "seed_random_factor": ".0f",
    "al_cached_us": ".1f",
    "al_cached_share": ".1f",
    "al_cached_lo_us": ".0f",
    "al_cached_hi_us": ".0f",
    "sn_cached_us": ".1f",
    "sn_cached_lo_us": ".0f",
    "sn_cached_hi_us": ".0f",
    "sn_all_us": ".0f",
    "sn_all_lo_us": ".0f",
    "sn_all_hi_us": ".0f",
    "sn_all_share": ".0f",
    "perf_ow_cached": ".1f",
    "seed_pct_random": ".1f",
    "perf_pre_cached": ".1f",
    "perf_al_cached": ".1f",
    "seed_pct_create": ".1f",
    "seed_pct_dd": ".1f",
    "perf_size_ratio": ".0f",
    "perf_sn_all": ".1f",
    "formula_ratio_min": ".3f",
    "formula_ratio_max": ".3f",
    "seed_disk_mib": ".0f",
    "seed_formula_kib": ".0f",
    "seed_list_kib": ".0f",
    "f2_disk_mib": ".0f",
    "f2_formula_disk_kib": ".0f",
    "f2_list_kib": ".0f",
    "f2_runs_kib": ".0f",
}
# The other values the prose quotes, as they are (ints and strings, formatted in headline()).
AS_IS = (
    "step_clusters",
    "pre_big_mib",
    "pre_n",
    "host_cpus",
    "pre_not_sig",
    "pre_n_cmp",
    "flush_size_mib",
    "ow_size_mib",
    "ow_n",
    "ow_requests",
    "sn_snapshots",
    "perf_event",
    "perf_n",
    "perf_pre_size_mib",
    "f2_size_mib",
    "f2_clusters",
    "qemu_version",
    "scratch_fs",
    "host_sentence",
    "pre_big_note",
    "pre_big_sig",
    "pre_fit_n",
    "pre_fit_dropped",
    "pre_fit_sentence",
    "pre_seed_sentence",
    "pre_seed_verdict",
    "pre_constant_sentence",
    "k64_sentence",
    "ow_cached_sig",
    "al_cached_sig",
    "sn_cached_sig",
    "sn_all_sig",
    "f2_runs_phrase",
    "seed_dd_cluster",
    "seed_dd_basis",
    "al_cluster",
    "dd_sentence",
    "pre_max_mib",
)


def sig2(x: float) -> str:
    """Two significant digits without exponent notation ('0.00031', '8.8', '880')."""
    if not math.isfinite(x):
        return "n/a"
    if x == 0:
        return "0"
    digits = max(0, 1 - int(math.floor(math.log10(abs(x)))))
    return f"{round(x, digits):,.{digits}f}"


def significance(row) -> str:
    """'significant (Mann–Whitney p = 0.008)' or 'not significant (… p = 0.34)' for an
    overhead() row."""
    if row["p_value"] != row["p_value"]:  # not run: too few runs to reach p < 0.05
        return (
            f"not tested ({int(row['n'])} against {int(row['n_none'])} runs cannot reach p < 0.05)"
        )
    word = "significant" if bool(row["significant"]) else "not significant"
    return f"{word} (Mann–Whitney p = {row['p_value']:.2g})"


def values(D) -> dict:
    """Every value the prose glues, formatted as it shows them (strings and ints)."""
    return formatted(headline(D))


def formatted(h: dict) -> dict:
    """Values of headline() as the prose shows them: FORMATS' floats as text, AS_IS as they are,
    and the sentences made of them (sentences())."""
    out = {k: format(h[k], spec) for k, spec in FORMATS.items() if k in h and h[k] == h[k]}
    out.update({k: h[k] for k in AS_IS if k in h})
    out.update(sentences(out))
    for k in PERF_KEYS:  # a dataset without perf (not installed, no symbol, or not recorded)
        out.setdefault(k, "not measured")
    return out


# what the perf section quotes: a dataset that recorded no perf still gives each one (a glue
# name the page quotes and the dataset cannot give fails the book build)
PERF_KEYS = (
    "perf_event",
    "perf_n",
    "perf_pre_size_mib",
    "perf_pre_cached",
    "perf_ow_cached",
    "perf_al_cached",
    "perf_sn_all",
    "perf_size_ratio",
)


# A comparison of a mode with `none` needs two runs of each (overhead()); a dataset whose time
# budget allowed one run per mode (a slow machine: a TCG guest's default run) has none to quote.
ONE_RUN = "one run per mode, too few to compare"


def sentences(f: dict) -> dict:
    """The prose's sentences about comparisons, from formatted values `f`: each one quotes its
    shift, interval and test where the quoted dataset compared it, and says that it did not
    where it could not (ONE_RUN)."""
    out = {}
    if "pre_big_cached_cpu" in f:
        out["pre_big_sentence"] = (
            f"At {f['pre_big_mib']} MiB the default mode `cached` needed {f['pre_big_cached_cpu']} s of CPU "
            f"against {f['pre_big_none_cpu']} s without checks: {f['pre_big_extra']} s more (Hodges–Lehmann "
            f"shift; its 95 % interval is {f['pre_big_extra_lo']} to {f['pre_big_extra_hi']} s, n = "
            f"{f['pre_n']} runs per mode; {f['pre_big_sig']}), {f['pre_big_share']} % of the run."
        )
    else:
        out["pre_big_sentence"] = (
            "No 512-byte-cluster size of this dataset has two runs of `cached` and two of `none`, so it "
            f"has no shift of `cached` over `none` to quote ({ONE_RUN})."
        )
    if f.get("pre_n_cmp"):
        out["pre_sig_sentence"] = (
            f"Over every mode and size of this dataset, {f['pre_not_sig']} of the {f['pre_n_cmp']} "
            "differences from `none` are not significant (column `significant`): on this "
            f"{f['host_cpus']}-CPU machine the run-to-run noise is large against many of the shifts."
        )
    else:
        out["pre_sig_sentence"] = (
            f"No mode of this dataset was compared with `none` at any size ({ONE_RUN})."
        )
    not_compared = f"was not compared with `none` ({ONE_RUN})"
    ow, al = _cost(f, "ow", "cached"), _cost(f, "al", "cached")
    out["ow_cached_sentence"] = (
        f"`cached` adds {ow[0]} µs of CPU per write (interval {ow[1]} µs; {ow[2]}), {f['ow_cached_share']} % "
        "of the run"
        if ow
        else f"`cached` {not_compared}"
    )
    out["al_cached_sentence"] = (
        f"the median difference for `cached` is {al[0]} µs per 64 KiB request ({f['al_cached_share']} % of the "
        f"run; interval {al[1]} µs; {al[2]})"
        if al
        else f"`cached` {not_compared}"
    )
    sn_cached, sn_all = _cost(f, "sn", "cached"), _cost(f, "sn", "all")
    said = []
    if sn_cached:
        said.append(
            f"`cached` costs {sn_cached[0]} µs per write (this experiment leaves `constant` out; interval "
            f"{sn_cached[1]} µs; {sn_cached[2]})"
        )
    if sn_all:
        said.append(
            f"`all` costs {sn_all[0]} µs (interval {sn_all[1]} µs; {sn_all[2]}), {f['sn_all_share']} % "
            "of the run"
        )
    missing = [name for name, c in (("`cached`", sn_cached), ("`all`", sn_all)) if not c]
    if missing:
        said.append(
            " and ".join(missing)
            + (
                f" {not_compared}"
                if len(missing) == 1
                else f" were not compared with `none` ({ONE_RUN})"
            )
        )
    out["sn_sentence"] = ", and ".join(said)
    out["sn_all_share_sentence"] = (
        f"`all` adds {f['sn_all_share']} % to the run's CPU time"
        if sn_all
        else f"`all` {not_compared}"
    )
    return out


def _cost(f: dict, key: str, mode: str):
    """(extra µs per write, its interval, its test) of `mode` in write workload `key` (ow, al, sn)
    as formatted values f give them; None where it was not compared."""
    if f"{key}_{mode}_us" not in f:
        return None
    return (
        f[f"{key}_{mode}_us"],
        f"{f[f'{key}_{mode}_lo_us']} to {f[f'{key}_{mode}_hi_us']}",
        f[f"{key}_{mode}_sig"],
    )


def headline(D) -> dict:
    """The numbers the text quotes, from the quoted dataset and the seed's table (computed once
    per D: the prose and the table beside the seed's both read it; a copy is returned).

    pre_big_mib is the largest 512-byte-cluster size overhead() compared (>= 2 runs of
    'cached' and of 'none'); pre_max_mib the largest measured, pre_big_note a sentence
    when they differ.
    """
    return dict(D.once("headline", lambda: _headline(D)))


def _headline(D) -> dict:
    m = D.quoted
    ref = D.reference("qcow2_overlap")
    rs = dataset_rows(D, "prealloc", m.key)
    ov = dataset_overhead(D, "prealloc", m.key)
    out = _prealloc(ov, rs, ref)
    out.update(_prealloc_modes(ov, rs))
    pre = D.of_quoted(D["prealloc"])
    cf = pre[pre.command == "create_with_flushes"]
    out["flush_size_mib"] = int(cf.image_size.iloc[0]) // MiB if len(cf) else 0
    out["flush_wall"] = float(cf.wall_s.median()) if len(cf) else float("nan")
    out["flush_cpu"] = float(cf.cpu_s.median()) if len(cf) else float("nan")
    out["flush_wait"] = out["flush_wall"] - out["flush_cpu"]
    out.update(_writes(D, ref))
    out.update(_metadata(D, ref))
    out.update(_seed(ref))
    out.update(_perf(D, ref))
    t0, t1 = (dt.datetime.fromisoformat(m[k]) for k in ("started", "finished"))
    out["run_minutes"] = (t1 - t0).total_seconds() / 60
    out["host_cpus"] = m["host"]["cpus_online"]
    out["scratch_fs"] = (m.facts.get("scratch") or {}).get("filesystem") or "unknown"
    out["step_clusters"] = m.parameters["bench_step_clusters"]
    out["l2_cov_kib"] = 512 * (512 // 8) / 1024  # guest bytes one L2 table maps at 512 B clusters
    out["qemu_version"] = (
        (m["tools"].get("qemu-img") or "").split("(")[0].replace("qemu-img version", "").strip()
    )
    out["host_sentence"] = host_sentence(D)
    # plain Python numbers (numpy 2 spells a float64's repr np.float64(...))
    return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in out.items()}


def _prealloc(ov, rs, ref) -> dict:
    """The largest 512-byte-cluster preallocation `cached` was compared at, and how its extra CPU
    grows with the size: from `cached`'s rows of `ov` (overhead() of one dataset's timed
    preallocations, rs) and their rounds. Nothing is carried beyond the sizes measured."""
    out: dict = {}
    # the largest 512-byte-cluster size overhead() kept: a size whose group stopped on its
    # time budget with one run has no comparison (pre_max_mib says what was measured)
    kept = ov[(ov.cluster_size == 512) & (ov["mode"] == "cached")]
    measured = rs[rs.cluster_size == 512].image_size
    out["pre_max_mib"] = int(measured.max()) // MiB if len(measured) else 0
    out.update(_seed_size(kept, out["pre_max_mib"], ref))
    if kept.empty:  # one run per mode at every size: nothing compared, nothing to fit
        out["pre_big_mib"] = out["pre_max_mib"]
        out["pre_big_note"] = f"no 512-byte-cluster size was compared ({ONE_RUN})"
        out["pre_fit_sentence"] = (
            f"no size of this dataset was compared ({ONE_RUN}), so there is nothing to fit"
        )
        return out
    big = int(kept.image_size.max())
    row = kept[kept.image_size == big].iloc[0]
    out["pre_big_mib"] = big // MiB
    out["pre_big_note"] = (
        ""
        if out["pre_max_mib"] == out["pre_big_mib"]
        else f"the {out['pre_max_mib']} MiB case has fewer than 2 runs per mode, "
        f"so the largest compared size is {out['pre_big_mib']} MiB"
    )
    out["pre_big_cached_cpu"] = row["median"]
    out["pre_big_none_cpu"] = row.none_median
    out["pre_big_extra"] = row.extra
    out["pre_big_extra_lo"], out["pre_big_extra_hi"] = row.extra_ci_low, row.extra_ci_high
    out["pre_big_share"] = row.share_pct
    out["pre_n"] = int(row.n)
    out["pre_big_sig"] = significance(row)
    fit = fit_power_law(ov)
    out["pre_fit_n"], out["pre_fit_dropped"] = fit["n"], fit["dropped"]
    e = exponent(rs[rs.cluster_size == 512], ov)
    out["pre_k"] = e.value
    sizes = [z // MiB for z in exponent_sizes(ov)]
    rounds = e.basis.startswith("median of")
    out["pre_fit_sentence"] = (
        "each round gives an exponent, the log-log slope of its extra CPU (its `cached` run "
        f"minus its `none` run) over the sizes whose shift stands clear of zero "
        f"({', '.join(map(str, sizes))} MiB), and the {e.basis}, is "
        f"{decide.interval_text(e)}"
        if rounds
        else f"no round gives an exponent ({e.basis.split(', ', 1)[-1]})"
    ) + (
        f"; the line through the {fit['n']} sizes' Hodges–Lehmann shifts has an exponent "
        f"of {fit['k']:.2f}, a description of those points with no interval of its own"
        if fit["k"] == fit["k"]
        else ""
    )
    return out


def _seed_size(kept, max_mib: int, ref) -> dict:
    """What the quoted dataset says at the seed's image size: the measured shift where it
    measured that size, else that it did not and that nothing is extrapolated there."""
    seed_mib = seed_size(ref) // MiB
    at = kept[kept.image_size // MiB == seed_mib]
    if len(at):
        r = at.iloc[0]
        said = (
            f"`cached` took {r.extra:.2f} s more CPU than `none` there (Hodges–Lehmann shift, "
            f"interval {r.extra_ci_low:.2f} to {r.extra_ci_high:.2f} s)"
        )
        return {"pre_seed_sentence": f"this dataset measured it: {said}", "pre_seed_verdict": said}
    beyond = (
        f"the largest size this dataset measured is {max_mib} MiB, and the chapter carries no "
        f"fit beyond the sizes measured"
    )
    return {
        "pre_seed_sentence": f"{beyond}: a power law through a few smaller sizes would claim "
        "more than its points support, so no value is quoted there",
        "pre_seed_verdict": f"not measured here ({beyond}; the `full` profile measures it)",
    }


def _prealloc_modes(ov, rs) -> dict:
    """`constant` at every 512-byte-cluster size, every mode's significance, and `cached` at
    64 KiB clusters, from overhead() of the quoted dataset's preallocations (ov) and their rows
    (rs: what was measured, where nothing was compared)."""
    out: dict = {}
    # constant against none at every 512-byte-cluster size of the quoted dataset
    con = ov[(ov.cluster_size == 512) & (ov["mode"] == "constant")]
    out["pre_constant_sentence"] = (
        f"`constant` differs significantly from `none` at {int(con.significant.sum())} of the "
        f"{len(con)} sizes (shifts {con.extra.min():.2f} to {con.extra.max():.2f} s)"
        if len(con)
        else f"`constant` was not compared with `none` at any size ({ONE_RUN})"
        if (rs["mode"] == "constant").any()
        else "`constant` was not measured (the default profile leaves it out, as no finding needs it)"
    )
    # the quoted host's modes against none, at every size (the table's `significant` column)
    mine = ov[ov["mode"] != "none"]
    out["pre_not_sig"], out["pre_n_cmp"] = int((~mine["significant"].astype(bool)).sum()), len(mine)
    k64 = ov[(ov.cluster_size == 65536) & (ov["mode"] == "cached")].sort_values(
        "image_size", kind="stable"
    )
    out["k64_sentence"] = (
        f"`cached` was not compared with `none` ({ONE_RUN})"
        if (rs.cluster_size == 65536).any()
        else "no image was measured"
    )
    if len(k64):
        k = k64.iloc[-1]
        equiv = int(k.image_size * (512 / 65536) ** 2) // MiB
        out["k64_sentence"] = (
            f"preallocating a {int(k.image_size) // GiB} GiB image (as many L2 "
            f"tables as {equiv} MiB at 512-byte clusters), `cached` took {1000 * k.extra:.0f} ms more "
            f"CPU than `none` (interval {1000 * k.extra_ci_low:.0f} to {1000 * k.extra_ci_high:.0f} ms, "
            f"{significance(k)}; `none` took {k.none_median:.2f} s)"
        )
    return out


def _seed(ref) -> dict:
    """The seed's figures the prose quotes, from data/reference."""
    out = {}
    r = ref[(ref.experiment == "create_prealloc_metadata_512") & (ref.metric == "wall_s")]
    before = r[r.variant == "before_series"].iloc[0]
    after = r[r.variant == "after_series"].iloc[0]
    out["seed_user_saved"] = before.user_s - after.user_s
    out["seed_create_before"], out["seed_create_after"] = before.value, after.value
    seed = ref[ref.metric == "cycles_share_pct"].set_index(["experiment", "variant"]).value
    out["seed_pct_create"] = float(seed[("create_prealloc_metadata_512", "before_series")])
    out["seed_pct_dd"] = float(seed[("guest_dd_64k", "before_series")])
    out["seed_pct_random"] = float(seed[("guest_random_512_odirect", "before_series")])
    out["seed_create_gib"] = seed_size(ref) / GiB
    return out


SNAPSHOTS = "overwrite_after_snapshots_512"
WRITES = (("overwrite_scattered_512", "ow"), ("allocate_sequential_64k", "al"), (SNAPSHOTS, "sn"))


def _writes(D, ref) -> dict:
    out = {}
    wr = dataset_rows(D, "writes", D.quoted.key)
    ovw = dataset_overhead(D, "writes", D.quoted.key)
    for wl, key in WRITES:
        out.update(_write_costs(wr, ovw, wl, key))
        out[f"{key}_n"] = int(wr[wr.workload == wl].groupby("mode").size().min())
    out["ow_size_mib"] = int(wr[wr.workload == "overwrite_scattered_512"].image_size.iloc[0]) // MiB
    seed_rand = ref[ref.experiment == "guest_random_512_odirect"].image_size_mib.iloc[0]
    out["seed_random_factor"] = float(seed_rand) / out["ow_size_mib"]
    out.update(_snapshots(wr))
    return out


def _write_costs(wr, ovw, wl: str, key: str) -> dict:
    """The extra CPU per request of `cached` and `all` over none in workload wl, with its
    interval and significance, where ovw (overhead() of the writes wr) compared them."""
    out = {}
    g = ovw[ovw.workload == wl].set_index("mode")
    nreq = int(wr[wr.workload == wl].requests.iloc[0])
    for mode in ("cached", "all"):
        if mode in g.index:
            out[f"{key}_{mode}_us"] = 1e6 * g.loc[mode, "extra"] / nreq
            out[f"{key}_{mode}_share"] = g.loc[mode, "share_pct"]
            out[f"{key}_{mode}_lo_us"] = 1e6 * g.loc[mode, "extra_ci_low"] / nreq
            out[f"{key}_{mode}_hi_us"] = 1e6 * g.loc[mode, "extra_ci_high"] / nreq
            out[f"{key}_{mode}_sig"] = significance(g.loc[mode])
    out[f"{key}_requests"] = nreq
    return out


def _snapshots(wr) -> dict:
    return {"sn_snapshots": int(wr[wr.workload == SNAPSHOTS].snapshots.iloc[0])}


def _metadata(D, ref) -> dict:
    """The formula against the images; the seed's 2 GiB image at 512-byte clusters."""
    out = {}
    ft = formula_table(D.of_quoted(D["metadata"]))
    ratio = ft.measured_clusters / ft.formula_virtual
    out["formula_ratio_min"], out["formula_ratio_max"] = float(ratio.min()), float(ratio.max())
    s2 = (
        ft[(ft.cluster_size == 512) & (ft.snapshots == 0)]
        .sort_values("virtual_size_mib", kind="stable")
        .iloc[-1]
    )
    out["f2_size_mib"] = int(s2.virtual_size_mib)
    out["f2_clusters"] = int(s2.measured_clusters)
    out["f2_list_kib"] = s2.measured_list_kib
    out["f2_runs_kib"] = s2.runs_list_kib
    out["f2_disk_mib"] = s2.disk_usage_mib
    out["f2_formula_disk_kib"] = s2.formula_disk_kib
    out["f2_formula_virtual_kib"] = s2.formula_virtual_kib
    merged = s2.runs_list_kib < 0.99 * s2.measured_list_kib
    out["f2_runs_phrase"] = (
        f"{'they merge' if merged else 'they do not merge'} into fewer contiguous runs "
        f"({s2.runs_list_kib:.0f} KiB at one entry per run)"
        + ("" if merged else ": preallocation places each L2 table among the data clusters it maps")
    )
    rl = ref[ref.experiment == "ram_formula"]
    out["seed_list_kib"] = float(rl[rl.variant == "measured_list"].value.iloc[0])
    out["seed_formula_kib"] = float(rl[rl.variant == "formula_disk_size"].value.iloc[0])
    out["seed_disk_mib"] = float(rl[rl.variant == "formula_disk_size"].image_size_mib.iloc[0])
    return out


def _perf(D, ref) -> dict:
    out = {}
    cy = D.of_quoted(D["cycles"])
    g = perf_check_pct(D)
    if g is not None:
        out["perf_event"] = str(cy.event.iloc[0])
        out["perf_pre_cached"] = float(g.get(("prealloc_512", "cached"), np.nan))
        out["perf_ow_cached"] = float(g.get(("overwrite_scattered_512", "cached"), np.nan))
        out["perf_al_cached"] = float(g.get(("allocate_sequential_64k", "cached"), np.nan))
        out["perf_sn_all"] = float(g.get(("overwrite_after_snapshots_512", "all"), np.nan))
        out["perf_n"] = int(cy.groupby(["workload", "mode"]).size().min())
        out["perf_pre_size_mib"] = int(cy[cy.workload == "prealloc_512"].image_size.iloc[0]) // MiB
        out["perf_size_ratio"] = seed_size(ref) / MiB / out["perf_pre_size_mib"]
    out.update(_dd(D, ref))
    return out


def _dd(D, ref) -> dict:
    """The seed's guest dd share against our sequential 64 KiB writes, with both cluster sizes:
    the seed's from data/reference (where it says whether the seed stated it), ours from the
    writes table (the perf recording of the same workload builds the same image, collect.perf_shares)."""
    out = {}
    dd = ref[(ref.experiment == "guest_dd_64k") & (ref.variant == "before_series")].iloc[0]
    seed_cs = int(dd.cluster_size)
    out["seed_dd_cluster"] = cluster_text(seed_cs)
    out["seed_dd_basis"] = str(dd.cluster_size_basis)
    wl = "allocate_sequential_64k"
    wr = D.of_quoted(D["writes"])
    ours = sorted(set(wr[wr.workload == wl].cluster_size.astype(int)))
    every = D["writes"]
    every = sorted(set(every[every.workload == wl].cluster_size.astype(int)))
    out["al_cluster"] = ", ".join(cluster_text(c) for c in ours)
    if ours == [seed_cs]:
        out["dd_sentence"] = (
            f"The seed's guest `dd` share and our sequential 64 KiB writes were both measured with "
            f"{cluster_text(seed_cs)} clusters, so the two shares compare like with like in cluster size."
        )
    else:
        at_seed = seed_cs in every
        out["dd_sentence"] = (
            f"The seed's guest `dd` share ({dd.value:.1f} %) is for an image with {cluster_text(seed_cs)} "
            f"clusters ({out['seed_dd_basis']}); our sequential 64 KiB writes ran on "
            f"{out['al_cluster']} clusters"
            + (
                ""
                if at_seed
                else f", and no committed dataset measured them at {cluster_text(seed_cs)}"
            )
            + ". The table sets the two side by side with their cluster sizes, but they are not a "
            f"like-with-like comparison: per byte of disk, {cluster_text(ours[0])} clusters give the check "
            f"{(seed_cs // ours[0]) ** 2:,} times more L1 entries to walk than {cluster_text(seed_cs)} "
            "clusters."
        )
    return out


def host_sentence(D) -> str:
    """What the side-by-side comparison of hosts found, in one sentence."""
    if len(D.hosts) < 2:
        return "Only one host has measured this chapter so far, so there is nothing to compare yet."
    hc = host_comparison(D)
    if hc.empty:
        cases = host_cases(D)
        mine = cases[cases.host_id == D.quoted.host_id][["case", "mode"]].drop_duplicates()
        theirs = cases[cases.host_id != D.quoted.host_id][["case", "mode"]].drop_duplicates()
        if len(mine.merge(theirs)):  # the same cases, but too few runs of them to compare
            return (
                "The hosts measured the same cases, but with fewer than 2 runs per case and mode on one "
                "side, so no case is compared between hosts."
            )
        return "The hosts measured no case with the same sizes, so there is nothing to compare case by case."
    return f"{int(hc.significant.sum())} of {len(hc)} case-and-mode comparisons differ significantly between hosts."
