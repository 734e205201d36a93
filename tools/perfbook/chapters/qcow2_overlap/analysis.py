"""qcow2_overlap, analysis: frames in, frames out (no I/O beyond D, no plotting).

D is the chapter's perfbook.data.dataset.Data. The tables the notebook shows are one dataset per
host (D.of_shown, tables.py); the prose quotes D.quoted (prose.py).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from perfbook.analysis import decide
from perfbook.analysis.findings import counted_runs
from perfbook.analysis.stats import (
    caption,
    compare,
    compare_frame,
    hl_ci_label,
    hosts_of,
    summarize_frame,
)
from perfbook.probes.qcow2 import formula_bytes, formula_clusters

from .parse import MODES, MiB

PRE_BY = ["host_id", "cluster_size", "image_size", "mode"]
WRITES_BY = ["host_id", "workload", "mode"]
PRE_KEYS, WRITES_KEYS = PRE_BY[1:], WRITES_BY[1:]  # within one dataset


# -- what several tables, figures and the prose share, computed once per D ---------------------


def _rows_of(D, table: str):
    """(rows, (host_id, run_id) -> their positions): the timed preallocations (no flushes) or the
    writes of every dataset, grouped once rather than filtered from the whole table per dataset."""

    def make():
        df = D[table]
        if table == "prealloc":
            df = df[df.command == "resize_no_flush"]
        return df, df.groupby(["host_id", "run_id"], sort=False).indices

    return D.once(("rows", table), make)


def measured_datasets(D, table: str):
    """(host_id, run_id) of every dataset with rows in _rows_of()."""
    return _rows_of(D, table)[1].keys()


def dataset_rows(D, table: str, key):
    """One dataset's rows of _rows_of(), in table order: what a filter on its host and run keeps."""
    df, at = _rows_of(D, table)
    return df.iloc[at[key]] if key in at else df.iloc[0:0]


def datasets_rows(D, table: str, keys):
    """The rows of _rows_of() from the datasets `keys`, in table order."""
    df, at = _rows_of(D, table)
    pos = [at[k] for k in keys if k in at]
    return df.iloc[np.sort(np.concatenate(pos))] if pos else df.iloc[0:0]


def dataset_overhead(D, table: str, key):
    """overhead() of one dataset's timed preallocations ("prealloc", by cluster and image size)
    or writes ("writes", by workload), once per D: the tables, the figure, the fits and the prose
    that show the same dataset share it."""
    by = PRE_KEYS if table == "prealloc" else WRITES_KEYS
    return D.once(("overhead", table, key), lambda: overhead(dataset_rows(D, table, key), by))


def shown_overhead(D, table: str):
    """dataset_overhead() of each host's shown dataset as one frame, host_id first: what
    overhead() of their rows by host (PRE_BY, WRITES_BY) gives."""
    frames = [
        ov.assign(host_id=h)
        for h, r in sorted(D.shown.items())
        for ov in [dataset_overhead(D, table, (h, r))]
        if len(ov)
    ]
    if not frames:
        return pd.DataFrame()
    out = pd.concat(frames, ignore_index=True)
    return out[["host_id", *[c for c in out.columns if c != "host_id"]]]


# -- statistics over raw runs -------------------------------------------------------------


def summary(df, by: list[str], metrics=("wall_s", "cpu_s", "user_s")):
    """Median + CI etc. of wall and CPU time per group (tidy, one row per metric)."""
    out = []
    for metric in metrics:
        s = summarize_frame(df, by, metric)
        s.insert(len(by), "metric", metric)
        out.append(s)
    return pd.concat(out, ignore_index=True)


def overhead(df, by: list[str], metric: str = "cpu_s", modes=MODES):
    """Extra seconds of each mode over 'none' in the same group, from the raw runs.

    perfbook.analysis.stats.compare of the mode's runs against the 'none' runs: `extra` is the
    Hodges-Lehmann shift with its distribution-free interval (extra_ci_low/high; nominal
    95 %, real coverage from n and n_none: shift_ci_label),
    `p_value` the Mann-Whitney test's, `verdict` says "not significant" where it is not, "not tested" where the runs are too few to reach p < 0.05.
    Only the `modes` given are compared (each comparison is most of the cost).
    """
    rows = []
    keys = [k for k in by if k != "mode"]
    # each group's runs of each mode, in row order, from one grouping of the frame
    at = df.groupby([*keys, "mode"]).indices
    values = df[metric].to_numpy(float)

    def runs(key, mode):
        return values[at[(*key, mode)]] if (*key, mode) in at else values[:0]

    for key in sorted({k[:-1] for k in at}):
        base = runs(key, "none")
        if len(base) < 2:
            continue
        for mode in [m for m in MODES if m in modes]:
            x = runs(key, mode)
            if len(x) < 2:
                continue
            c = compare(x, base, names=(mode, "none"))
            med = float(np.median(x))
            rows.append(
                {
                    **dict(zip(keys, key)),
                    "mode": mode,
                    "median": med,
                    "none_median": c.median_b,
                    "extra": c.shift,
                    "extra_ci_low": c.shift_low,
                    "extra_ci_high": c.shift_high,
                    "n": len(x),
                    "n_none": len(base),
                    "p_value": c.p_value,
                    "cliffs_delta": c.cliffs_delta,
                    "significant": c.significant,
                    "verdict": c.verdict,
                    "share_pct": 100 * c.shift / med if med else np.nan,
                }
            )
    # the columns even when no group has two runs of a mode and of none (one run per mode)
    return pd.DataFrame(rows, columns=[*keys, *OVERHEAD_COLUMNS])


OVERHEAD_COLUMNS = (
    "mode",
    "median",
    "none_median",
    "extra",
    "extra_ci_low",
    "extra_ci_high",
    "n",
    "n_none",
    "p_value",
    "cliffs_delta",
    "significant",
    "verdict",
    "share_pct",
)


def shift_ci_label(ov) -> str:
    """The real coverage of overhead()'s Hodges-Lehmann intervals in `ov`, e.g.
    '90–95.88 % CI' (perfbook.analysis.stats.hl_ci_label over the rows' (n, n_none))."""
    if "n_none" not in ov.columns or ov.empty:
        return "CI of unknown coverage"
    return hl_ci_label(list(zip(ov["n"].astype(int), ov["n_none"].astype(int))))


def prealloc_bars_text(ov_cpu) -> str:
    """Caption sentence for the preallocation figure's bars, with the coverage of the plotted rows."""
    g = ov_cpu[(ov_cpu.cluster_size == 512) & ov_cpu["mode"].isin(["cached", "all"])]
    return (
        "Bars: Hodges-Lehmann interval of the shift against none (distribution-free), "
        f"{shift_ci_label(g)}"
    )


def fit_power_law(ov, mode: str = "cached", at: float | None = None) -> dict:
    """The power law extra CPU = c * size^k through one dataset's 512-byte-cluster sizes, by least
    squares in log-log space over the sizes whose shift over none is positive (a log needs it):
    a description of the points, without an interval. Through 2 or 3 sizes a line's residual
    scatter says nothing a reader can trust (R² is 1 through two points and near it through
    three), so this reports neither an interval nor R²; the exponent's interval comes from the
    rounds (round_exponents(), exponent()).

    Returns n (points fitted), dropped (sizes with a shift <= 0), k and c, lo and hi (the sizes
    fitted, bytes) and, for a size `at` in bytes inside [lo, hi], pred (the fitted extra there).
    A size outside the fitted range raises ValueError (predict()): the fit is not carried beyond
    the sizes it rests on. NaN where it can't be said."""
    g = ov[(ov["mode"] == mode) & (ov.cluster_size == 512)]
    x, y = g.image_size.to_numpy(float), g.extra.to_numpy(float)
    ok = y > 0
    nan = float("nan")
    out = {
        "n": int(ok.sum()),
        "dropped": int((~ok).sum()),
        "k": nan,
        "c": nan,
        "lo": float(x[ok].min()) if ok.any() else nan,
        "hi": float(x[ok].max()) if ok.any() else nan,
        "pred": nan,
    }
    if ok.sum() < 2 or len(set(x[ok])) < 2:
        return out
    k, b = np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)
    out.update(k=float(k), c=float(np.exp(b)))
    if at is not None:
        out["pred"] = predict(out, at)
    return out


def predict(fit: dict, at: float) -> float:
    """fit_power_law()'s fitted extra CPU at `at` bytes, only inside the sizes it was fitted
    over: outside them (an extrapolation, which the fit's points cannot support) a ValueError."""
    if not (fit["lo"] <= at <= fit["hi"]):
        raise ValueError(
            f"no extrapolation: {at / MiB:g} MiB lies outside the fitted sizes "
            f"{fit['lo'] / MiB:g}-{fit['hi'] / MiB:g} MiB"
        )
    return float(fit["c"] * at ** fit["k"])


def exponent_sizes(ov, mode: str = "cached") -> list[int]:
    """The 512-byte-cluster sizes whose shift of `mode` over none (overhead(), from the rounds)
    has its whole interval above zero: where the extra CPU stands clear of the noise, so that
    each round's extra there is positive and has a log."""
    if ov.empty:
        return []
    g = ov[(ov["mode"] == mode) & (ov.cluster_size == 512) & (ov.extra_ci_low > 0)]
    return sorted(int(z) for z in g.image_size.unique())


def round_exponents(rows, sizes, mode: str = "cached") -> pd.DataFrame:
    """One exponent per round: the least-squares slope of log(extra) on log(size) over `sizes`,
    a round's extra at a size being its run of `mode` minus its run of none (the two ran in the
    same shuffled round). Each size is its own experiment, so round r of one size is paired
    with round r of the others by index: every run enters one exponent, and the rounds'
    exponents are independent of each other. A round with an extra of zero or below at some
    size has no exponent (NaN, kept and counted); rounds missing at some size are left out.
    Columns: repeat, exponent, n_sizes."""
    cols = ["repeat", "exponent", "n_sizes"]
    rs = rows[(rows.cluster_size == 512) & rows.image_size.isin(sizes)]
    rs = rs[rs["mode"].isin([mode, "none"])]
    if len(sizes) < 2 or rs.empty:
        return pd.DataFrame(columns=cols)
    t = rs.pivot_table(index=["repeat", "image_size"], columns="mode", values="cpu_s")
    if mode not in t.columns or "none" not in t.columns:
        return pd.DataFrame(columns=cols)
    d = (t[mode] - t["none"]).unstack("image_size").reindex(columns=sizes).dropna()
    lx = np.log(np.asarray(sizes, float))
    out = []
    for r, v in d.iterrows():
        y = v.to_numpy(float)
        k = float(np.polyfit(lx, np.log(y), 1)[0]) if (y > 0).all() else float("nan")
        out.append({"repeat": int(r), "exponent": k, "n_sizes": len(sizes)})
    return pd.DataFrame(out, columns=cols)


def exponent(rows, ov, mode: str = "cached") -> decide.Estimate:
    """The power law's exponent of `mode`'s extra CPU with its interval from the rounds: the
    median of round_exponents() over exponent_sizes(), with its distribution-free order-statistic
    interval (6 rounds: 96.9 %; 5 or fewer cannot reach 95 %). Rounds without an exponent (an
    extra of zero or below at some size) are left out and named in the basis. Where fewer than
    two sizes stand clear of zero, the line through the sizes' positive shifts (or, with one run
    per mode, their differences of medians) gives the value without an interval; NaN where
    fewer than two sizes have a positive extra (no power law)."""
    sizes = exponent_sizes(ov, mode)
    re = round_exponents(rows, sizes, mode)
    k = re.exponent.to_numpy(float) if len(re) else np.array([])
    ok = k[np.isfinite(k)]
    if len(ok):
        left = len(k) - len(ok)
        e = decide.location(ok, what="rounds' exponents")
        mib = [z // MiB for z in sizes]
        return replace(
            e,
            basis=f"median of {len(ok)} rounds' exponents (each round's log-log slope of {mode} − "
            f"none over {len(sizes)} sizes, {mib[0]}–{mib[-1]} MiB)"
            + (f"; {left} round(s) with an extra ≤ 0 left out" if left else ""),
        )
    f = fit_power_law(ov if len(ov) else median_differences(rows, mode), mode)
    why = (
        f"fewer than two sizes with {mode}'s shift clear of zero" if len(ov) else "one run per mode"
    )
    return decide.Estimate(
        f["k"], np.nan, np.nan, 0.0, f"a line through {f['n']} sizes' extras, {why}"
    )


def median_differences(rows, mode: str = "cached"):
    """Each size's median CPU time of `mode` minus none's, in overhead()'s columns (mode,
    extra) without an interval: what a dataset with one run per mode (nothing overhead() can
    compare) says about how the extra CPU grows."""
    med = rows.groupby(["cluster_size", "image_size", "mode"]).cpu_s.median().unstack("mode")
    if mode not in med.columns or "none" not in med.columns:
        return pd.DataFrame(columns=["cluster_size", "image_size", "mode", "extra"])
    d = (med[mode] - med["none"]).dropna().rename("extra").reset_index()
    return d.assign(mode=mode)


def largest_compared(rows, mode: str):
    """The largest image size in `rows` (one dataset's timed preallocations of one cluster
    size) where `mode` and none each have two runs or more (what overhead() compares), else
    the largest where each has one; None where `mode` and none never ran at one size."""
    n = rows[rows["mode"].isin([mode, "none"])].groupby(["image_size", "mode"]).size().unstack()
    if mode not in n.columns or "none" not in n.columns:
        return None
    both = n[[mode, "none"]].fillna(0).min(axis=1)
    for least in (2, 1):
        ok = both[both >= least]
        if len(ok):
            return int(ok.index.max())
    return None


def prealloc_fits(D):
    """The power law of `cached` for every dataset (not only those shown), one row per run:
    fit_power_law()'s exponent through the sizes' shifts (a description, no interval) and
    exponent()'s median over the rounds with its interval and real coverage."""
    rows = []
    for h in D.hosts:
        for m in counted_runs([m for m in D.manifests if m.host_id == h]):
            ov = dataset_overhead(D, "prealloc", m.key)
            if ov.empty:
                continue
            f = fit_power_law(ov)
            mine = dataset_rows(D, "prealloc", m.key)
            mine = mine[mine.cluster_size == 512]
            e = exponent(mine, ov)
            if not e.basis.startswith("median of"):  # no round's exponent: nothing to quote
                e = decide.Estimate(np.nan, np.nan, np.nan, 0.0, e.basis)
            rows.append(
                {
                    "host_id": h,
                    "run_id": m["run_id"],
                    "profile": m.profile or "not recorded",
                    "sizes_mib": f"{mine.image_size.min() // MiB}-{mine.image_size.max() // MiB}",
                    **f,
                    "k_rounds": e.value,
                    "k_lo": e.low,
                    "k_hi": e.high,
                    "coverage": e.coverage,
                    "basis": e.basis,
                }
            )
    return pd.DataFrame(rows)


def formula_table(meta):
    """Measured metadata against the seed's 10 * IS / CS^2 (and 40 * IS / CS^2 bytes)."""
    f = meta[meta.experiment.isin(["formula", "snapshots"])].copy()
    f = f.drop_duplicates(
        ["host_id", "experiment", "cluster_size", "virtual_size", "nb_snapshots"], keep="last"
    )
    rows = []
    for r in f.itertuples():
        rows.append(
            {
                "host_id": r.host_id,
                "cluster_size": r.cluster_size,
                "virtual_size_mib": r.virtual_size / MiB,
                "snapshots": r.nb_snapshots,
                "l2_tables": r.n_active_l2 + r.n_inactive_l2,
                "refcount_blocks": r.n_refcount_block,
                "measured_clusters": r.n_formula_scope,
                "formula_virtual": formula_clusters(r.virtual_size, r.cluster_size),
                "formula_file": formula_clusters(r.file_size, r.cluster_size),
                "formula_disk": formula_clusters(r.disk_usage, r.cluster_size),
                "measured_list_kib": 4 * r.n_formula_scope / 1024,
                "runs_list_kib": 4 * r.formula_scope_runs / 1024,
                "formula_virtual_kib": formula_bytes(r.virtual_size, r.cluster_size) / 1024,
                "formula_disk_kib": formula_bytes(r.disk_usage, r.cluster_size) / 1024,
                "disk_usage_mib": r.disk_usage / MiB,
                "file_size_mib": r.file_size / MiB,
            }
        )
    return pd.DataFrame(rows).sort_values(
        ["cluster_size", "virtual_size_mib", "snapshots"], kind="stable"
    )


def caption_for(df, manifests, what: str, by: list[str], ci: bool = True, extra: str = "") -> str:
    """Caption from the runs shown: runs per group, warm-up rounds excluded, hosts."""
    runs = set(zip(df["host_id"], df["run_id"]))
    ms = [m for m in manifests if (m["host"]["host_id"], m["run_id"]) in runs]
    # warm-up rounds: rep_warmup now, warmup in the datasets of fixed repetition
    wu = [m["parameters"].get("rep_warmup", m["parameters"].get("warmup", 0)) for m in ms] or [0]
    return caption(
        what,
        n=df.groupby(by).size().to_numpy(),
        unit="runs",
        warmup=wu,
        hosts=hosts_of(ms),
        ci=ci,
        extra=extra,
    )


# -- the frames the chapter shows (one dataset per host) -----------------------------------


def resizes(D):
    """The timed metadata preallocations (no flushes) of the datasets shown."""
    pre = D.of_shown(D["prealloc"])
    return pre[pre.command == "resize_no_flush"]


def prealloc_overhead(D):
    """overhead() of every mode against none, per host, cluster size and image size."""
    return shown_overhead(D, "prealloc")


def writes(D):
    return D.of_shown(D["writes"])


def writes_summary(D):
    """summary() of the shown datasets' writes (wall and CPU time, what is read of it), once
    per D: the writes table, their spread and the modes figure show it."""
    return D.once(
        "writes_summary", lambda: summary(writes(D), WRITES_BY, metrics=("wall_s", "cpu_s"))
    )


def formula_shown(D):
    """formula_table() of the datasets shown (one per host)."""
    return formula_table(D.of_shown(D["metadata"]))


def host_comparison(D):
    """Each other host's CPU time per run against the prose's dataset, case by case where
    both measured the same case (perfbook.analysis.stats.compare_frame; identical sizes and modes). Once
    per D: the prose's sentence and the table read it."""
    return D.once("host_comparison", lambda: _host_comparison(D))


def _host_comparison(D):
    if len(D.hosts) < 2:
        return pd.DataFrame()
    return compare_frame(
        host_cases(D),
        by="host_id",
        value="cpu_s",
        baseline=D.quoted.host_id,
        within=["case", "mode"],
    )


def host_cases(D):
    """Every host's runs (host_id, case, mode, cpu_s) of the shown datasets, a case being a
    preallocation (cluster and image size) or a write workload (image size and requests)."""
    pre = resizes(D).assign(
        case=lambda t: (
            "prealloc cs="
            + t.cluster_size.astype(str)
            + " "
            + (t.image_size // MiB).astype(str)
            + " MiB"
        )
    )
    wr = writes(D).assign(
        case=lambda t: (
            t.workload + " " + (t.image_size // MiB).astype(str) + " MiB x" + t.requests.astype(str)
        )
    )
    cols = ["host_id", "case", "mode", "cpu_s"]
    return pd.concat([pre[cols], wr[cols]])


# -- the seed's figures and how a cluster size is written ------------------------------------


def seed_size(ref) -> int:
    """Bytes of the image the seed created with preallocation (its 2014 measurement)."""
    return int(ref[ref.experiment == "create_prealloc_metadata_512"].image_size_mib.iloc[0]) * MiB


def cluster_text(b: int) -> str:
    """A cluster size as the prose shows it: '512 B', '64 KiB'."""
    b = int(b)
    return f"{b // 1024} KiB" if b >= 1024 and b % 1024 == 0 else f"{b} B"


def perf_check_pct(D):
    """The median share of perf samples in the check per (workload, mode) of the quoted dataset
    (a Series; None without a perf recording)."""
    cy = D.of_quoted(D["cycles"])
    if cy is None or not len(cy):
        return None
    return cy.groupby(["workload", "mode"]).check_pct.median()
