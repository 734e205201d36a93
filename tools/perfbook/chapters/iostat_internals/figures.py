"""iostat_internals: the figures, and the seed's table beside ours."""
from __future__ import annotations

from perfbook.probes import diskstats as ds
from .findings import prose_values
from .spec import PHASES

# what the two non-phase labels mean (legends and captions)
NON_PHASE = {"transition": "transition (interval spans two phases)",
             "idle": "idle (no phase running: before the first, after the last)"}
NON_PHASE_COLOR = (0.6, 0.6, 0.6)


def _phase_palette(phases):
    """A colour per workload phase, none of them grey (tab10 without its grey, then black, in
    spec order), and light grey for the intervals that belong to no phase (NON_PHASE)."""
    import seaborn as sns
    names = [p for p in PHASES if p in set(phases)]
    colours = [c for i, c in enumerate(sns.color_palette("tab10", 10)) if i != 7] + [(0.0, 0.0, 0.0)]
    pal = dict(zip(names, colours[:len(names)] + colours[:max(0, len(names) - len(colours))]))
    for extra in sorted(set(phases) - set(PHASES)):
        pal[extra] = NON_PHASE_COLOR
    return pal


def _scatter_phase(ax, x, y, ph, pal, size, label=True):
    """Points of one phase: filled in the phase's colour, or open grey circles for NON_PHASE."""
    lab = NON_PHASE.get(ph, ph) if label else None
    if ph in PHASES:
        ax.scatter(x, y, s=size, color=pal.get(ph, "0.3"), label=lab, zorder=2)
    else:
        ax.scatter(x, y, s=size, facecolors="none", edgecolors=NON_PHASE_COLOR, label=lab, zorder=2)


def plot_timeseries(A):
    """Key columns per interval over the run, coloured by phase."""
    import matplotlib.pyplot as plt
    ours = A["ours"].copy()
    ours["t_s"] = ours["interval_s"].cumsum()
    ours["IOPS"] = ours["r/s"] + ours["w/s"] + ours["d/s"]
    cols = [("IOPS", "IOPS (r/s + w/s + d/s)"), ("await", "await (ms)"),
            ("aqu-sz", "aqu-sz"), ("%util", "%util"), ("f/s", "f/s")]
    pal = _phase_palette(ours["phase"])
    fig, axes = plt.subplots(len(cols), 1, figsize=(9, 9), sharex=True)
    have = set(ours["phase"].unique())
    order = [p for p in PHASES if p in have] + sorted(have - set(PHASES))
    for ax, (c, label) in zip(axes, cols):
        ax.plot(ours["t_s"], ours[c], color="0.8", lw=0.8, zorder=1)
        for ph in order:
            g = ours[ours["phase"] == ph]
            _scatter_phase(ax, g["t_s"], g[c], ph, pal, 14)
        ax.set_ylabel(label, fontsize=9)
    axes[-1].set_xlabel("seconds since the first report")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.legend(handles, labels, ncol=3, fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 0.0),
               frameon=False)
    return fig


def plot_disagreement(A):
    """|ours - sysstat| relative to the tolerance, per column and interval."""
    import matplotlib.pyplot as plt
    from perfbook.analysis.fleetview import strip
    c = A["cmp"].copy()
    c["gap / tolerance"] = c["abs_diff"] / c["tolerance"]
    fig, ax = plt.subplots(figsize=(9, 4))
    strip(data=c, x="column", y="gap / tolerance", ax=ax, size=3, jitter=0.25,
          order=list(ds.COLUMNS), color="tab:blue")
    ax.axhline(1, color="tab:red", lw=1, ls="--", label="stated tolerance")
    ax.set_ylim(0, max(1.1, c["gap / tolerance"].max() * 1.1))
    ax.tick_params(axis="x", rotation=60, labelsize=8)
    ax.set_xlabel("")
    ax.legend(loc="upper right")
    fig.tight_layout()
    return fig


def plot_latency(A):
    """Per-request latency (io_start -> io_done) from tracepoints, with await as a line."""
    import matplotlib.pyplot as plt
    import seaborn as sns
    ta = A["trace_await"]
    big = ta[ta["op"].isin(["read", "write"]) & (ta["n_trace"] >= 200)]
    keep = set(zip(big["window"], big["op"]))
    s = A["sample"]
    s = s[[(w, o) in keep for w, o in zip(s["window"], s["op"])]].copy()
    ta = big
    have = set(s["phase"].unique())
    phases = [p for p in PHASES if p in have]
    fig, axes = plt.subplots(len(phases), 1, figsize=(9, 1.35 * len(phases) + 0.6), sharex=True)
    axes = axes if len(phases) > 1 else [axes]
    for ax, ph in zip(axes, phases):
        g = s[s["phase"] == ph]
        sns.histplot(data=g, x="q2c_us", hue="op", ax=ax, log_scale=True, bins=60,
                     element="step", stat="percent", common_norm=False, legend=(ax is axes[0]),
                     hue_order=["read", "write"], palette={"read": "tab:blue", "write": "tab:orange"})
        for op, color in (("read", "tab:blue"), ("write", "tab:orange")):
            a = ta[(ta["phase"] == ph) & (ta["op"] == op)]["await_ms"]
            if len(a):
                ax.axvline(1000 * a.mean(), color=color, ls="--", lw=1.2)
        ax.set_ylabel("")
        ax.text(0.005, 0.95, ph, transform=ax.transAxes, ha="left", va="top", fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
    axes[-1].set_xlabel("io_start -> io_done per request (µs, log scale); dashed: await over the same window")
    fig.supylabel("requests per bin (% of the direction's sample)", fontsize=9)
    fig.tight_layout()
    return fig


def plot_little(A):
    """aqu-sz against Little's law (intervals) and against the trace's time-average occupancy."""
    import matplotlib.pyplot as plt
    ours, tu = A["ours"], A.get("trace_util")
    pal = _phase_palette(ours["phase"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    pred = ours.apply(ds.little_prediction, axis=1)
    have = set(ours["phase"].unique())
    order = [p for p in PHASES if p in have] + sorted(have - set(PHASES))
    for ph in order:
        sel = ours["phase"] == ph
        _scatter_phase(axes[0], pred[sel], ours.loc[sel, "aqu-sz"], ph, pal, 16)
    hi = max(pred.max(), ours["aqu-sz"].max()) * 1.05 + 0.01
    axes[0].plot([0, hi], [0, hi], color="0.4", lw=0.8, ls="--")
    axes[0].set_xlabel("sum of rate x await (Little's law), per interval")
    axes[0].set_ylabel("aqu-sz (from time_in_queue)")
    if tu is not None and len(tu):
        for ph in tu["phase"].unique():
            g = tu[tu["phase"] == ph]
            _scatter_phase(axes[1], g["occupancy"], g["aqu-sz"], ph, pal, 22, label=False)
        hi = max(tu["occupancy"].max(), tu["aqu-sz"].max()) * 1.05 + 0.01
        axes[1].plot([0, hi], [0, hi], color="0.4", lw=0.8, ls="--")
    axes[1].set_xlabel("time-average requests in flight, from tracepoints")
    axes[1].set_ylabel("aqu-sz over the same window")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    fig.legend(handles, labels, ncol=3, fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 0.0),
               frameon=False)
    return fig


def plot_saturation(A):
    """%util against IOPS and aqu-sz per phase: 100 % busy is not 100 % of capacity."""
    import matplotlib.pyplot as plt
    ps = A["phase_summary"]
    pal = _phase_palette(ps["phase"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for _, r in ps.iterrows():
        for ax, x in ((axes[0], "IOPS"), (axes[1], "aqu-sz")):
            ax.errorbar(r[x], r["%util"], xerr=[[r[x] - r[f"{x} lo"]], [r[f"{x} hi"] - r[x]]],
                        yerr=[[r["%util"] - r["%util lo"]], [r["%util hi"] - r["%util"]]],
                        fmt="o", color=pal.get(r["phase"]), label=r["phase"] if ax is axes[0] else None)
    axes[0].set_xscale("log")
    from perfbook.analysis.stats import ci_label
    lab = ci_label(ps["n"])  # the real coverage of the median intervals, per phase's n
    for ax, x in ((axes[0], f"IOPS (median per phase, {lab})"), (axes[1], f"aqu-sz (median per phase, {lab})")):
        ax.set_xlabel(x)
        ax.set_ylabel("%util")
        ax.axhline(100, color="0.5", lw=0.8, ls=":")
    handles, labels = axes[0].get_legend_handles_labels()   # below the panels: inside, it hid points
    rows = -(-len(labels) // 4)
    fig.tight_layout(rect=(0, 0.03 + 0.045 * rows, 1, 1))
    fig.legend(handles, labels, ncol=4, fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 0.0),
               frameon=False, title="phase", title_fontsize=8)
    return fig


def seed_table(ref, A) -> "pd.DataFrame":
    """The seed's reading of each counter beside today's, with the evidence from our data."""
    import pandas as pd
    f = prose_values(A) if A else {}
    verdict = {
        "merges": ("held", "counted when a bio joins an existing request, now in the plug or the scheduler",
                   f"%wrqm {f.get('seqwrite_4k_qd16_wrqm', 'n/a')} % for sequential 4 KiB writes sent 16 at a time"),
        "ios": ("held", "counted at completion (blk_account_io_done)",
                f"our counts agree with sysstat's: {f.get('agree_pct', 'n/a')} % of all values"),
        "sectors": ("held", "counted per completed chunk (blk_update_request)",
                    f"rareq-sz {f.get('seqread_1m_qd1_rareq', 'n/a')} kB for 1 MiB O_DIRECT reads "
                    "(what reached the device, after the queue limits split them)"),
        "avgrq-sz": ("split", "per direction, in kB: rareq-sz, wareq-sz, dareq-sz",
                     f"rareq-sz {f.get('buffered_seqread_rareq', 'n/a')} kB for 128 KiB buffered reads (readahead)"),
        "ticks": ("changed unit and start point", "ns sums from request allocation to completion, printed in ms",
                  f"trace mean vs await: median gap {f.get('trace_med_rel_pct', 'n/a')} %"),
        "time_in_queue": ("changed", "sum of completed requests' latencies; in-flight requests add nothing until they end",
                          f"time_in_queue - sum of ticks: at most {f.get('tiq_max_resid', 'n/a')} ms per interval"),
        "io_ticks": ("changed", "jiffies between accounting events while requests are in flight (update_io_ticks)",
                     f"{f.get('jiffy_share_pct', 'n/a')} % of deltas are whole {f.get('jiffy_ms', '?')} ms jiffies"),
        "svctm": ("gone", "not printed by sysstat 12.x", "-"),
        "in_flight": ("changed mechanism", "per-CPU counts raised at request start and lowered at completion, summed when the file is read (bdev_count_inflight)", "-"),
        "interval": ("changed", "sysstat 12.x divides by /proc/uptime deltas in 1/100 s", 
                     f"rate gaps {f.get('max_rate_rel_pct', 'n/a')} % (ns clock) vs {f.get('max_rate_rel_pct_uptime', 'n/a')} % (uptime clock)"),
    }
    rows = []
    for _, r in ref.iterrows():
        v = verdict.get(r["item"], ("?", "?", "?"))
        rows.append({"counter": r["counter"], "3.x column": r["iostat_column_3x"],
                     "seed's reading (3.x)": r["seed_reading"], "today (6.x, sysstat 12.x)": v[1],
                     "verdict": v[0], "evidence in our data": v[2]})
    return pd.DataFrame(rows)
