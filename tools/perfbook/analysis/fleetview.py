"""Cross-host figures that read the same with one host and with a hundred.

A chapter's cross-host figure never draws one coloured series, or one legend entry, per host or
per dataset. It shows the distribution over hosts (one point per host, or an ECDF over hosts)
and marks the hosts a reader looks for, each in one fixed style across the book:

* **this host**: the host of ``D.quoted``, the newest real-profile dataset. After a reader's
  ``make all`` it is their own machine; it follows the data, so stored outputs stay portable;
* **reference host**: the host the book's prose was written from, declared once in
  ``data/reference/reference_host.json`` (its id and why);
* **seed**: the seed article's figure, where a chapter has one;
* **other hosts (n = K)**: every other host, small grey points without their intervals (thin
  grey bars while there are only a few of them).

From five hosts on, a box and a line give the quartiles and the median over all hosts.
The legend holds these entries plus a chapter's own fixed ones (a pinning mode, a protocol),
so it does not grow with the fleet. ``facets`` splits the hosts by a fact a chapter's question
depends on: the machine kind (bare metal, KVM guest, TCG guest), the kernel series or the CPU
vendor (perfbook.data.machine).

    F = fleetview.fleet(D)                       # roles from D.quoted and the reference host
    drawn = fleetview.points(ax, F, frame, "pos", "median", "ci_low", "ci_high")
    fleetview.legend(fig, F, drawn, seed="seed, 2013")
    caption = stats.caption(..., hosts=F.caption_hosts(), extra=F.marks_text(drawn, ...))
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import seaborn as sns
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from perfbook.analysis.findings import counted_runs
from perfbook.analysis.stats import host_text, hosts_of
from perfbook.data import machine
from perfbook.data.dataset import HOST_ID, REFERENCE_FILE, reference_host  # noqa: F401  (the roles' source)

THIS, REFERENCE, OTHER, SEED = "this host", "reference host", "other hosts", "seed"

# One look per role across the book (matplotlib keyword arguments of Axes.plot/errorbar).
STYLE = {
    THIS: {"color": "#d62728", "marker": "o", "ms": 7.5, "mec": "white", "mew": 0.6, "zorder": 6},
    REFERENCE: {
        "color": "#1f77b4",
        "marker": "D",
        "ms": 6.0,
        "mec": "white",
        "mew": 0.6,
        "zorder": 5,
    },
    OTHER: {"color": "0.55", "marker": "o", "ms": 3.5, "alpha": 0.6, "mew": 0, "zorder": 3},
    SEED: {"color": "black", "marker": "*", "ms": 13, "mec": "black", "mew": 0.5, "zorder": 7},
}
MARK_WORDS = {
    THIS: "red circle",
    REFERENCE: "blue diamond",
    OTHER: "small grey dots",
    SEED: "black star",
}
FEW_OTHERS = 3  # up to this many other hosts keep their intervals (thin grey bars)
SUMMARY_MIN = 5  # from this many hosts on, a box and a line give the quartiles and the median


# -- roles ------------------------------------------------------------------------------------


class Fleet:
    """The hosts of one cross-host figure and the role of each (this host, reference host,
    other hosts), with their facts (the manifest host block of each host's shown dataset)."""

    def __init__(self, facts: dict[str, dict], this: str | None, reference: str | None):
        self.facts = dict(facts)
        self.hosts = sorted(self.facts)
        self.this = this if this in self.facts else None
        self.reference = reference if reference in self.facts else None
        self.labels = machine.labels(self.facts)

    def role(self, host_id: str) -> str:
        if host_id == self.this:
            return THIS
        if host_id == self.reference:
            return REFERENCE
        return OTHER

    def roles(self) -> dict[str, str]:
        return {h: self.role(h) for h in self.hosts}

    @property
    def others(self) -> list[str]:
        return [h for h in self.hosts if self.role(h) == OTHER]

    @property
    def highlighted(self) -> list[tuple[str, str]]:
        """(host_id, role) of this host and the reference host (one entry when they are one)."""
        out = [(self.this, THIS)] if self.this else []
        if self.reference and self.reference != self.this:
            out.append((self.reference, REFERENCE))
        return out

    def within(self, hosts) -> Fleet:
        """The same roles over a subset of the hosts (a facet, the hosts that have a table)."""
        keep = set(hosts)
        sub = Fleet({h: f for h, f in self.facts.items() if h in keep}, self.this, self.reference)
        sub.labels = {h: v for h, v in self.labels.items() if h in keep}  # the names stay
        return sub

    def name(self, host_id: str) -> str:
        """The machine's label ('AMD EPYC 2-vCPU KVM guest, Linux 6.18.44-fc-v769',
        perfbook.data.machine.labels): a legend names a host as the page does."""
        return self.labels.get(host_id) or machine.label({"host_id": host_id})

    def title(self, role: str) -> str:
        """A role in a panel's title ('this host', 'this host = reference host'): the legend
        names its machine (label()), a title has no room for a machine's label."""
        return self.label(role).split(":")[0]

    def label(self, role: str) -> str:
        """A role's legend entry: one per role, whatever the number of hosts."""
        if role == THIS:
            both = self.reference is not None and self.reference == self.this
            return f"this host{' = reference host' if both else ''}: {self.name(self.this)}"
        if role == REFERENCE:
            return f"reference host: {self.name(self.reference)}"
        return f"other hosts (n = {len(self.others)})"

    def kinds_text(self, hosts=None) -> str:
        """'52 KVM guests, 30 bare metal, 16 TCG guests': the machine kinds of some hosts."""
        return count_text(
            machine.short_kind(self.facts[h]) for h in (self.others if hosts is None else hosts)
        )

    def caption_hosts(self) -> list[tuple[str, str]]:
        """`hosts` for perfbook.analysis.stats.caption: the highlighted hosts with their descriptions, then the
        other hosts as one item with their kinds (a caption does not grow with the fleet either)."""
        out = []
        for h, role in self.highlighted:
            what = (
                "this host and the reference host"
                if (role == THIS and h == self.reference)
                else role
            )
            out.append(
                (
                    h,
                    f"{what}: {self.facts[h].get('description') or machine.short_kind(self.facts[h])}",
                )
            )
        if self.others:
            k = len(self.others)
            out.append(
                (f"{'and ' if out else ''}{k} other host{'s' if k != 1 else ''}", self.kinds_text())
            )
        return out

    def runs_text(
        self,
        what: str,
        drawn: str = "one point per counted run, side by side, so that "
        "their spread is the run-to-run spread",
        *,
        roles=None,
    ) -> str:
        """What a point is where the highlighted hosts show every counted run (runs()): `what`,
        then who has a point per run and who one point (only the roles there are; with `roles`,
        a figure's drawn["roles"], only those it drew)."""
        hl = [(h, r) for h, r in self.highlighted if roles is None or r in roles]
        who = (
            "this host and the reference host have"
            if len(hl) == 2
            else "this host has"
            if hl and hl[0][1] == THIS
            else "the reference host has"
            if hl
            else ""
        )
        text = what + (f"; {who} {drawn}" if who else "")
        if self.others:
            text += "; every other host has one point, its shown dataset's"
        return text

    def marks_text(
        self,
        drawn: dict | None = None,
        points: str = "its median",
        intervals: str | None = None,
        seed: str | None = None,
        panels: bool = False,
    ) -> str:
        """What the marks of a points() or ecdf() figure mean, for its caption: which mark is which
        host, what a point and a bar are, and the box of the quartiles where it is drawn."""
        drawn = drawn or {}
        roles = drawn.get("roles")  # what the figure drew; without it, every role
        parts, absent = [], []
        for h, role in self.highlighted:
            who = (
                "this host and the reference host"
                if (role == THIS and h == self.reference)
                else "this host (the one whose data the text quotes)"
                if role == THIS
                else "the reference host (the one the book was first written from)"
            )
            if roles is not None and role not in roles:
                absent.append(f"{who} ({h})")
                continue
            mark = f"{MARK_WORDS[role].split()[0]} line" if drawn.get("lines") else MARK_WORDS[role]
            parts.append(f"{mark}: {who} ({h})")
        k = len(self.others) if roles is None or OTHER in roles else 0
        if k:
            if drawn.get("lines"):
                parts.append(
                    f"thin grey lines: the {k} other host{'s' if k != 1 else ''} ({self.kinds_text()}), "
                    "one line per host"
                )
            elif drawn.get("ecdf"):
                parts.append(
                    f"grey curve: the share of all {len(self.hosts)} hosts at or below x (ECDF over "
                    f"hosts, one step per host; the other {k}: {self.kinds_text()})"
                )
            else:
                bars = (
                    " with its interval (thin grey bar)"
                    if drawn.get("other_bars") and not drawn.get("ranked")
                    else " with its bar"
                    if drawn.get("other_bars")
                    else ", without its interval"
                    if drawn.get("bars")
                    else ""
                )
                parts.append(
                    f"{MARK_WORDS[OTHER]}: the {k} other hosts ({self.kinds_text()}), one dot per "
                    f"host{bars}"
                    if k > 1
                    else f"small grey dot: the other host, {self.others[0]} "
                    f"({machine.short_kind(self.facts[self.others[0]])}){bars}"
                )
        if absent:  # a highlighted host with nothing to draw here is said so, not given a mark
            parts.append(
                f"{' and '.join(absent)}: no mark, {'it has' if len(absent) == 1 else 'they have'} "
                "nothing to draw here"
            )
        text = "; ".join(parts)
        text = text[:1].upper() + text[1:] + "." if text else ""
        if points and not drawn.get("ecdf"):
            text += f" A point is {points}."
        if intervals and drawn.get("bars"):
            text += f" Bars: {intervals}."
        if drawn.get("summary"):
            text += (
                " Grey box and black line: the quartiles and the median over the hosts "
                + ("of the panel" if panels else f"(all {len(self.hosts)})")
                + ", one value per host."
            )
        if seed:
            text += f" {MARK_WORDS[SEED][:1].upper() + MARK_WORDS[SEED][1:]}: {seed}."
        return text.strip()


def fleet(D, hosts=None) -> Fleet:
    """The fleet of a chapter's Data: every host (or `hosts`), the facts of its shown dataset,
    this host = the host of D.quoted, the reference host as declared (absent if it has no data)."""
    shown = D.shown
    facts = {m.host_id: m["host"] for m in D.manifests if shown.get(m.host_id) == m["run_id"]}
    if hosts is not None:
        keep = set(hosts)
        facts = {h: f for h, f in facts.items() if h in keep}
    q = D.quoted
    return Fleet(facts, q.host_id if q is not None else None, reference_host(D.data_dir)["host_id"])


def runs(D, F: Fleet, every_run: bool = True) -> set[tuple[str, str]]:
    """(host_id, run_id) of the datasets a fleet figure draws: each other host's shown dataset
    (one point per host), and every counted run of this host and of the reference host
    (perfbook.analysis.findings.counted_runs), so that their run-to-run spread stays visible (every_run)."""
    out = {(h, r) for h, r in D.shown.items() if h in F.facts}
    if every_run:
        for h, _ in F.highlighted:
            out |= {
                (h, m["run_id"]) for m in counted_runs([m for m in D.manifests if m.host_id == h])
            }
    return out


def of_runs(df, keep: set[tuple[str, str]]):
    """The rows of a frame (host_id, run_id columns) from the datasets in `keep` (runs())."""
    if df is None or len(df) == 0:
        return df
    return df[[k in keep for k in zip(df["host_id"], df["run_id"])]]


def roles(D) -> dict[str, str]:
    """host_id -> "this host", "reference host" or "other hosts" for a chapter's Data."""
    return fleet(D).roles()


def count_text(items) -> str:
    """'52 KVM guests, 30 bare metal, 1 TCG guest': counts of labels, most common first."""
    c = Counter(items)
    return ", ".join(
        f"{n} {_plural(k, n)}" for k, n in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))
    )


def plural(n: int, word: str) -> str:
    """'1 disk', '3 disks'."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _plural(word: str, n: int) -> str:
    if n == 1 or word.startswith(("bare metal", "Linux", "emulated")) or word.endswith("s"):
        return word
    return word + "s"


# -- facets -----------------------------------------------------------------------------------

FACET_KEYS = {
    "kind": machine.short_kind,
    "kernel": machine.kernel_series,
    "vendor": machine.cpu_vendor,
}


def facets(F: Fleet, by: str = "kind", max_facets: int = 4) -> list[tuple[str, Fleet]]:
    """Panels keyed on a fact the question depends on: [(title, sub-fleet)], the panel of this
    host first, then the reference host's, then the others by size; beyond `max_facets` the
    smallest groups share one panel ("other kinds"), so the panels do not grow either."""
    key = FACET_KEYS[by]
    groups: dict[str, list[str]] = {}
    for h in F.hosts:
        groups.setdefault(key(F.facts[h]), []).append(h)

    def rank(item):
        name, hs = item
        return (F.this not in hs, F.reference not in hs, -len(hs), name)

    ordered = sorted(groups.items(), key=rank)
    if len(ordered) > max_facets:
        head, tail = ordered[: max_facets - 1], ordered[max_facets - 1 :]
        rest = [h for _, hs in tail for h in hs]
        ordered = head + [
            (
                f"other {'kinds' if by == 'kind' else 'kernels' if by == 'kernel' else 'vendors'}: "
                + ", ".join(n for n, _ in tail),
                rest,
            )
        ]
    return [(f"{name} (n = {len(hs)})", F.within(hs)) for name, hs in ordered]


# -- drawing ----------------------------------------------------------------------------------


def _offsets(k: int, width: float) -> list[float]:
    """k positions evenly spread over a band of `width` around 0 (the other hosts of a strip)."""
    if k <= 1:
        return [0.0] * k
    return [width * (i / (k - 1) - 0.5) for i in range(k)]


def points(
    ax,
    F: Fleet,
    df,
    pos: str,
    value: str,
    lo: str | None = None,
    hi: str | None = None,
    *,
    orient: str = "v",
    width: float = 0.7,
    summary: bool | None = None,
    spread: float = 0.05,
    tick: str | None = None,
) -> dict:
    """A strip per category: one grey dot per other host, this host and the reference host
    in their styles with their intervals, and from SUMMARY_MIN hosts on the quartiles and median.

    `df` has host_id, a numeric category position `pos`, `value` and optionally `lo`/`hi`.
    One row per host and category for the other hosts (their dot); a highlighted host may have
    several rows (its runs), drawn side by side. orient "v": categories along x, values on y;
    "h": categories along y. `tick`: a column drawn as a grey tick beside each highlighted
    point (a p95). Returns what was drawn, for legend() and marks_text()."""
    drawn = {
        "others": False,
        "other_bars": False,
        "bars": False,
        "summary": False,
        "tick": False,
        "roles": set(),
    }
    if df is None or len(df) == 0:
        return drawn
    d = df[df["host_id"].isin(F.hosts)]
    d = d[np.isfinite(d[value].astype(float))]
    others = F.others
    few = len(others) <= FEW_OTHERS
    # a few other hosts stand beside the highlighted ones (with their bars); many are a cloud
    # over the whole band, under them
    off = dict(
        zip(
            others,
            [width * 0.32 + o for o in _offsets(len(others), width * 0.22)]
            if few
            else _offsets(len(others), width * 0.9),
        )
    )

    def put(x, y, xerr=None, **kw):
        if orient == "v":
            ax.errorbar(x, y, yerr=xerr, **kw)
        else:
            ax.errorbar(y, x, xerr=xerr, **kw)

    def err(g):
        if lo is None or hi is None:
            return None
        v, a, b = g[value].to_numpy(float), g[lo].to_numpy(float), g[hi].to_numpy(float)
        return [np.clip(v - a, 0, None), np.clip(b - v, 0, None)]

    od = d[d["host_id"].isin(others)]
    if len(od):
        x = od[pos].to_numpy(float) + od["host_id"].map(off).to_numpy(float)
        e = err(od) if few else None
        put(
            x,
            od[value].to_numpy(float),
            e,
            ls="none",
            elinewidth=0.8,
            ecolor="0.7",
            capsize=0,
            **STYLE[OTHER],
        )
        drawn["others"], drawn["other_bars"] = True, e is not None
        drawn["roles"].add(OTHER)
    use_summary = (len(F.hosts) >= SUMMARY_MIN) if summary is None else summary
    if use_summary:
        per_host = d.groupby([pos, "host_id"])[value].median().reset_index()
        for p, g in per_host.groupby(pos):
            if len(g) < SUMMARY_MIN:
                continue
            q1, med, q3 = np.quantile(g[value].to_numpy(float), [0.25, 0.5, 0.75])
            a, b = p - width * 0.5, p + width * 0.5
            if orient == "v":
                ax.fill_between([a, b], q1, q3, color="0.85", alpha=0.6, lw=0, zorder=1)
                ax.plot([a, b], [med, med], color="black", lw=1.4, zorder=4)
            else:
                ax.fill_betweenx([a, b], q1, q3, color="0.85", alpha=0.6, lw=0, zorder=1)
                ax.plot([med, med], [a, b], color="black", lw=1.4, zorder=4)
            drawn["summary"] = True
    hl = F.highlighted
    centre = highlight_offsets(F, width)
    for h, role in hl:
        g = d[d["host_id"] == h]
        if not len(g):
            continue
        k = g.groupby(pos).cumcount().to_numpy()
        n = g.groupby(pos)[value].transform("size").to_numpy()
        x = g[pos].to_numpy(float) + centre[h] + (k - (n - 1) / 2) * spread
        e = err(g)
        put(x, g[value].to_numpy(float), e, ls="none", capsize=2.5, elinewidth=1.1, **STYLE[role])
        if tick is not None:
            put(
                x,
                g[tick].to_numpy(float),
                None,
                ls="none",
                marker="|" if orient == "h" else "_",
                ms=8,
                color="0.45",
                zorder=4,
            )
            drawn["tick"] = True
        drawn["bars"] = drawn["bars"] or e is not None
        drawn["roles"].add(role)
    return drawn


def highlight_offsets(F: Fleet, width: float = 0.7) -> dict[str, float]:
    """Where points() puts this host and the reference host within a category's band (host_id ->
    offset from the category's position), for a chapter that draws more at the same place."""
    hl = F.highlighted
    shift = -width * 0.08 if 0 < len(F.others) <= FEW_OTHERS else 0.0
    return {
        h: shift + (0.0 if len(hl) == 1 else (-0.12 if role == THIS else 0.12) * width / 0.7)
        for h, role in hl
    }


def ecdf(ax, F: Fleet, values, *, orient: str = "v", color: str = "0.35") -> dict:
    """The share of hosts at or below x (ECDF over hosts, one value per host: `values` indexed
    by host_id), with this host and the reference host marked on the curve."""
    v = values[values.index.isin(F.hosts)].astype(float)
    v = v[np.isfinite(v)]
    drawn = {"ecdf": False, "roles": set(), "others": False, "summary": False, "bars": False}
    if not len(v):
        return drawn
    xs = np.sort(v.to_numpy())
    ys = np.arange(1, len(xs) + 1) / len(xs)
    if len(xs) > 1:
        ax.step(np.r_[xs[0], xs], np.r_[0, ys], where="post", color=color, lw=1.4, zorder=2)
        drawn["ecdf"] = True
        drawn["roles"].add(OTHER)
    for h, role in F.highlighted:
        if h in v.index:
            x = float(v[h])
            y = float((xs <= x).mean())
            ax.plot([x], [y], ls="none", **STYLE[role])
            drawn["roles"].add(role)
    return drawn


def ranked(ax, F: Fleet, df, value: str, lo: str | None = None, hi: str | None = None) -> dict:
    """One mark per host (one row per host in `df`), the hosts ranked by `value` along x: its
    value as a point and lo..hi as a bar, the other hosts grey, this host and the reference host
    in their styles. For an interval per host (a bound, a range) where a strip would overlap."""
    d = (
        df[df["host_id"].isin(F.hosts)]
        .sort_values([value, "host_id"], kind="stable")
        .reset_index(drop=True)
    )
    drawn = {
        "ranked": True,
        "roles": set(),
        "others": False,
        "bars": lo is not None,
        "summary": False,
        "other_bars": lo is not None,
    }
    x = np.arange(1, len(d) + 1)
    for role in (OTHER, REFERENCE, THIS):
        sel = (d["host_id"].map(F.role) == role).to_numpy()
        if not sel.any():
            continue
        g = d[sel]
        e = None
        if lo is not None and hi is not None:
            v = g[value].to_numpy(float)
            e = [
                np.clip(v - g[lo].to_numpy(float), 0, None),
                np.clip(g[hi].to_numpy(float) - v, 0, None),
            ]
        kw = dict(STYLE[role])
        ax.errorbar(
            x[sel],
            g[value].to_numpy(float),
            yerr=e,
            ls="none",
            capsize=0,
            elinewidth=1.6 if role != OTHER else 1.0,
            ecolor=kw["color"] if role != OTHER else "0.6",
            **kw,
        )
        drawn["roles"].add(role)
        drawn["others"] = drawn["others"] or role == OTHER
    ax.set_xlim(0.3, len(d) + 0.7)
    if len(d) <= 10:
        ax.set_xticks(x)
    return drawn


def curves(ax, F: Fleet, df, x: str, y: str, *, step: str | None = "post") -> dict:
    """One curve per host (a CCDF, a time series): the other hosts thin grey lines, fainter the
    more there are, this host and the reference host on top in their colours."""
    drawn = {"lines": True, "roles": set(), "others": False, "summary": False, "bars": False}
    d = df[df["host_id"].isin(F.hosts)]
    k = max(len(F.others), 1)
    alpha = max(0.12, min(0.7, 4.0 / k))
    for role in (OTHER, REFERENCE, THIS):
        for h, g in d[d["host_id"].map(F.role) == role].groupby("host_id"):
            g = g.sort_values(x, kind="stable")
            kw = (
                {"color": "0.45", "lw": 0.7, "alpha": alpha, "zorder": 2}
                if role == OTHER
                else {"color": STYLE[role]["color"], "lw": 1.8, "zorder": STYLE[role]["zorder"]}
            )
            if step:
                ax.step(g[x], g[y], where=step, **kw)
            else:
                ax.plot(g[x], g[y], **kw)
            drawn["roles"].add(role)
            drawn["others"] = drawn["others"] or role == OTHER
    return drawn


def strip(seed: int = 0, **kw):
    """seaborn.stripplot(**kw) with its jitter drawn from a fixed seed: the same data draws the
    same figure, so a stored notebook's PNG changes only when its data does. seaborn draws the
    jitter from numpy's global generator, whose state is restored afterwards."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        return sns.stripplot(**kw)
    finally:
        np.random.set_state(state)


def seed_mark(ax, x, y, **kw):
    """The seed article's figure(s) in the book's one seed style (a black star)."""
    ax.plot(x, y, ls="none", **{**STYLE[SEED], **kw})


def merge(*drawn: dict) -> dict:
    """What several points()/ecdf() calls drew together (a figure with several panels)."""
    out = {"roles": set()}
    for d in drawn:
        for k, v in d.items():
            out[k] = (out.get(k, set()) | v) if k == "roles" else (out.get(k, False) or v)
    return out


def handles(F: Fleet, drawn: dict | None = None, seed: str | None = None, extra=()) -> list:
    """The legend's (handle, label) pairs: this host, the reference host, other hosts (n = K),
    all hosts' quartiles and median, the seed, then a chapter's own fixed entries."""
    drawn = drawn or {}
    roles = drawn.get("roles", {THIS, REFERENCE, OTHER})
    out = []
    lines = drawn.get("lines")
    for h, role in F.highlighted:
        if role in roles:
            out.append(
                (
                    Line2D([], [], color=STYLE[role]["color"], lw=1.8)
                    if lines
                    else Line2D([], [], ls="none", **STYLE[role]),
                    F.label(role),
                )
            )
    if F.others and OTHER in roles:
        if lines:
            out.append((Line2D([], [], color="0.45", lw=0.9), F.label(OTHER)))
        elif drawn.get("ecdf"):
            out.append(
                (Line2D([], [], color="0.35", lw=1.4), f"all hosts, ECDF (n = {len(F.hosts)})")
            )
        else:
            out.append((Line2D([], [], ls="none", **STYLE[OTHER]), F.label(OTHER)))
    if drawn.get("summary"):
        out.append((Patch(facecolor="0.85", edgecolor="black", lw=0.8), "hosts' quartiles, median"))
    if seed:
        out.append((Line2D([], [], ls="none", **STYLE[SEED]), seed))
    return out + list(extra)


def legend(
    target,
    F: Fleet,
    drawn: dict | None = None,
    seed: str | None = None,
    extra=(),
    ncol: int | None = None,
    **kw,
):
    """One legend with fixed entries (handles()), below the panels of a figure (a Figure with a
    constrained layout), or inside an Axes. It never has an entry per host."""
    pairs = handles(F, drawn, seed, extra)
    if not pairs:
        return None
    hs, ls = zip(*pairs)
    opts = {"fontsize": "small", "frameon": False, "ncol": ncol or min(3, len(pairs))}
    if hasattr(target, "add_subplot"):
        opts["loc"] = "outside lower center"
    opts.update(kw)
    return target.legend(list(hs), list(ls), **opts)


def legend_entries(fig) -> int:
    """How many entries a figure's legends hold (figure legends and every axes' legend)."""
    n = sum(len(lg.get_texts()) for lg in fig.legends)
    for ax in fig.axes:
        lg = ax.get_legend()
        if lg is not None:
            n += len(lg.get_texts())
    return n


def recaption(caption: str, manifests, F: Fleet) -> str:
    """A caption made by perfbook.analysis.stats.caption from hosts_of(manifests), with its sentence that
    lists every host replaced by the fleet's (the highlighted hosts and "K other hosts")."""
    ours = host_text(F.caption_hosts())
    for ms in (manifests, [m for m in manifests if m["host"]["host_id"] in F.facts]):
        old = host_text(hosts_of(ms))
        old = old[:1].upper() + old[1:] + "."
        if old in caption:
            return caption.replace(old, ours[:1].upper() + ours[1:] + ".")
    return caption


__all__ = [
    "THIS",
    "REFERENCE",
    "OTHER",
    "SEED",
    "STYLE",
    "Fleet",
    "fleet",
    "roles",
    "reference_host",
    "facets",
    "points",
    "ecdf",
    "seed_mark",
    "merge",
    "handles",
    "legend",
    "legend_entries",
    "recaption",
    "count_text",
    "plural",
    "runs",
    "of_runs",
    "ranked",
    "curves",
    "highlight_offsets",
]
