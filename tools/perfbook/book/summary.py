"""The book's overview page (summary.ipynb) and the hosts x findings matrix (hosts.ipynb).

Both read every chapter's datasets and evaluate its key findings (perfbook.analysis.findings) per host;
nothing here is typed prose. Also what a profile costs: plan_seconds, the seconds each chapter's collect
is planned to take (its `plan_s`) (`python -m perfbook measure` prints it beside the time taken), and the lines
`python -m perfbook summary` prints per dataset: which rule stopped its repetition and how wide its
intervals are (repetition_cost, cost_text, cost_lines).
"""

from __future__ import annotations

import html
import math

import pandas as pd
from IPython.display import HTML

from perfbook.analysis import stats
from perfbook.analysis.decide import NOT_MEASURED, interval_text
from perfbook.analysis.findings import (
    UNDECIDED,
    anchor,
    chip,
    decisive,
    evaluate,
    machine,
    matrix,
    outcomes,
    strip_entry,
)
from perfbook.analysis.findings import _code as esc
from perfbook.analysis.repetition import (
    NOT_RECORDED,
    STOP_BUDGET,
    STOP_FIXED,
    STOP_MAX,
    STOP_TEXT,
    stop_rule,
)
from perfbook.analysis.stats import coverage_text
from perfbook.book.notebook import host_labels
from perfbook.chapters import CHAPTERS, plan_seconds
from perfbook.core.phases import breakdown_text
from perfbook.data.dataset import load_manifest, read_csv, table_path


def _chapters(data_dir=None):
    for entry in CHAPTERS:
        ch = entry.load()
        yield entry, ch, ch.load(data_dir or None)


def findings_matrix(data_dir=None):
    """One row per (chapter, finding), one column per host: its verdict."""
    frames = [matrix(D) for _, ch, D in _chapters(data_dir) if ch.key_findings and len(D)]
    if not frames:
        return pd.DataFrame(columns=["chapter", "finding", "claim"])
    out = pd.concat(frames, ignore_index=True)
    hosts = sorted(c for c in out.columns if c not in ("chapter", "finding", "claim"))
    return out[["chapter", "finding", "claim", *hosts]].fillna("no data")


attr = html.escape  # an attribute's value: no markup


def _link(entry) -> str:
    return f"{entry.notebook[:-6]}.html"


def takeaways(data_dir=None):
    """The landing page's takeaways: one sentence per chapter that declares a Takeaway
    (perfbook.analysis.findings): its mechanism, then its finding's verdict, number and interval
    on the dataset the chapter's prose quotes, on which machine, the seed article's figure, and
    what carries over to bare-metal KVM; each links to its chapter. Nothing here is typed: the
    verdict is the chapter's own (findings.evaluate), as its Key findings block shows it."""
    items = []
    for entry, ch, D in _chapters(data_dir):
        t = ch.takeaway
        if t is None or not len(D) or D.quoted is None:
            continue
        f = next(f for f in ch.key_findings if f.key == t.finding)
        host = D.quoted.host_id
        v = evaluate(D, f, host)
        e = decisive(v)
        number = (
            f"{esc(f.quantity)} {esc(interval_text(e, f.unit))}"
            if e is not None and v.verdict != NOT_MEASURED
            else "not measured"
        )
        items.append(
            f'<li class="takeaway"><p>{chip(v.verdict, v.why)} <strong>{esc(f.claim)}</strong>: '
            f"{number} on {machine(host, host_labels(D))}; {esc(t.seed(D))}.<br>"
            f"{esc(t.mechanism)} {esc(t.transfer(D, D.quoted['host']))}. "
            f'<a class="takeaway-link" href="{attr(_link(entry))}#{anchor(f)}">{esc(ch.title)} →</a>'
            "</p></li>"
        )
    return HTML(f'<ol class="takeaways">{"".join(items)}</ol>')


def headlines(data_dir=None):
    """Each chapter's takeaway finding (else its first), with every host's entry as the
    chapter's findings strip shows it (perfbook.analysis.findings.strip_entry)."""
    rows = []
    for entry, ch, D in _chapters(data_dir):
        if not ch.key_findings or not len(D):
            continue
        t = ch.takeaway
        f = next((f for f in ch.key_findings if t and f.key == t.finding), ch.key_findings[0])
        names = host_labels(D)
        cells = "".join(strip_entry(evaluate(D, f, h), names) for h in D.hosts)
        rows.append(
            f'<tr><td><a href="{esc(_link(entry))}">{esc(ch.title)}</a></td>'
            f'<td>{esc(f.claim)}</td><td><ul class="kf-strip">{cells}</ul></td></tr>'
        )
    return HTML(
        '<details class="headline-numbers"><summary>Every host\'s verdict and number for each '
        'takeaway</summary><table class="headline-table"><thead><tr><th>chapter</th>'
        "<th>finding</th><th>verdict, number and interval per machine</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></details>"
    )


# -- what a profile costs: the measure plan, and how each dataset's repetition stopped ------------


def _pct(x: float) -> str:
    return f"{100 * x:.3g} %"


def repetition_cost(run, chapter) -> dict:
    """How one dataset repeated its measurements, from its `repetition` table: per stop rule
    (perfbook.analysis.repetition.stop_rule, so that fixed rounds are told apart) the experiments it stopped
    and their round limit or time budget, the range of n, and the widest relative CI of a median
    with its real coverage and where it is. `rule` is "none" for a chapter that declares no
    repetition table, NOT_RECORDED for a dataset older than adaptive repetition."""

    if "repetition" not in getattr(chapter, "tables", {}):
        return {"rule": "none"}
    path = table_path(run, "repetition")
    t = read_csv(path) if path is not None else None
    if t is None or t.empty:
        adaptive = any(k.endswith("budget_s") for k in load_manifest(run).get("parameters", {}))
        return {"rule": NOT_RECORDED, "why": "not measured" if adaptive else "older"}
    t["rule"] = [stop_rule(r) for r in t.to_dict("records")]
    if "ci_coverage" not in t or t["ci_coverage"].isna().any():  # an older table: from n
        t["ci_coverage"] = [stats.median_ci_coverage(n) for n in t["n"]]
    exp = t.drop_duplicates("experiment")
    rules = {}
    for r, g in exp.groupby("rule"):
        rules[r] = {
            "experiments": len(g),
            "max_runs": sorted(set(g["max_runs"].astype(int))),
            "budget_s": sorted(set(g["budget_s"].astype(float))),
        }
    out = {
        "rule": max(rules, key=lambda r: (rules[r]["experiments"], r)),
        "rules": rules,
        "experiments": len(exp),
        "n_min": int(t["n"].min()),
        "n_max": int(t["n"].max()),
        "target": float(t["target"].max()),
    }
    w = t.dropna(subset=["rel_ci_width"])
    w = w[w["rel_ci_width"].map(math.isfinite)]
    if len(w):
        top = w.loc[w["rel_ci_width"].idxmax()]
        out["widest"] = {
            "rel": float(top["rel_ci_width"]),
            "coverage": float(top["ci_coverage"]),
            "experiment": str(top["experiment"]),
            "key": str(top["key"]),
            "n": int(top["n"]),
        }
    return out


def _values(xs, unit="") -> str:
    return "/".join(f"{x:g}{unit}" for x in xs)


def cost_text(cost: dict) -> str:
    """repetition_cost() in one line for the summary: the stop rules, n, the widest interval."""
    rule = cost["rule"]
    if rule == "none":
        return "repetition: none (this chapter repeats nothing in rounds)"
    if rule == NOT_RECORDED and cost.get("why") == "not measured":
        return "repetition: none recorded (the repeated part was not measured on this host; see its skips)"
    if rule == NOT_RECORDED:
        return (
            "repetition: stop rule not recorded (a dataset older than adaptive repetition, "
            "which ran a fixed number of rounds)"
        )
    parts = []
    for r, d in sorted(cost["rules"].items(), key=lambda x: (-x[1]["experiments"], x[0])):
        label = STOP_TEXT.get(r, r.replace("_", " "))
        if r in (STOP_FIXED, STOP_MAX):
            label += f" ({_values(d['max_runs'])})"
        elif r == STOP_BUDGET:
            label += (
                f" ({_values(d['budget_s'], ' s')}{' each' if cost['experiments'] > 1 else ''})"
            )
        if cost["experiments"] > 1:
            label += f" in {d['experiments']} of {cost['experiments']} experiments"
        parts.append(label)
    n = (
        f"n = {cost['n_min']}"
        if cost["n_min"] == cost["n_max"]
        else f"n = {cost['n_min']}–{cost['n_max']}"
    )
    text = f"repetition stopped by: {'; '.join(parts)}; {n}"
    w = cost.get("widest")
    if w is None:
        return text + "; no interval (a single value per median)"
    where = w["key"] if cost["experiments"] == 1 else f"{w['experiment']}, {w['key']}"
    return (
        text + f"; widest median CI {_pct(w['rel'])} of the median ({where}; n = {w['n']}, "
        f"coverage {coverage_text([w['coverage']])}); target {_pct(cost['target'])}"
    )


def cost_lines(chapter, run) -> list[str]:
    """The summary's lines on one dataset (`run`, a dataset directory) of `chapter` (a
    perfbook.framework.contract.Chapter): its profile and time beside today's plan, where those
    seconds went (the manifest's `phases`, perfbook.core.phases), repetition_cost(), and what it
    decided (decided_text)."""

    m = load_manifest(run)
    prof = m.get("profile") or "not recorded"
    took = m.seconds
    took_text = "time not recorded" if took is None else f"{took:.0f} s"
    plan = plan_seconds(chapter, prof)
    head = f"newest from this host: {m['run_id']}, profile {prof}, {took_text}" + (
        f" (today's plan for {prof}: {plan} s)" if plan is not None else ""
    )
    phases = breakdown_text(m.get("phases"))
    lines = [head, cost_text(repetition_cost(run, chapter)), decided_text(chapter, run, took)]
    return lines[:1] + ([f"seconds by phase: {phases}"] if phases else []) + lines[1:]


def decided_text(chapter, run, seconds=None) -> str:
    """What the dataset decided (#40: precision per second): how many of the chapter's key
    findings its own number decides at their confidence, in how many seconds, and for each
    that stays undecided, why (perfbook.analysis.findings.outcomes)."""
    findings = getattr(chapter, "key_findings", ())
    if not findings:
        return "key findings: none declared"
    D = chapter.load(run.parents[2].parent)
    m = next(
        (x for x in D.manifests if x["run_id"] == run.name and x.host_id == run.parts[-3]), None
    )
    if m is None:
        return "key findings: the dataset did not load"
    got = outcomes(D, m)
    told = {k: o for k, o in got.items() if o is not None}
    decided = [k for k, o in told.items() if o.verdict != UNDECIDED]
    when = f" in {seconds:.0f} s" if seconds else ""
    text = f"key findings decided by this dataset alone: {len(decided)} of {len(findings)}{when}"
    if len(told) < len(findings):
        text += f" ({len(findings) - len(told)} not measured)"
    open_ = [f"{k} ({o.why})" for k, o in told.items() if o.verdict == UNDECIDED]
    return text + ("; undecided: " + "; ".join(open_) if open_ else "")
