"""Every chapter's prose values, key findings and figures, whichever host is "this host".

The developers' clones only ever hold the committed data, where this host (the host of the
dataset the prose quotes, D.quoted) is the reference host. A reader's clone after `sudo make
all` holds their own machine's datasets too, the newest: this host is then a new host with one
run, and the reference host is drawn apart from it and from the other hosts. Each test here runs
on every state of the book's data (conftest.book_data): the committed data, a new host's data
added (one round of each adaptive repetition, what a slow machine's default run gives, so that
the n = 1 paths run) and the reference host measured again on another kernel build.
"""

from __future__ import annotations

import re

import pytest

from conftest import (
    CROSS_HOST,
    HEATMAP,
    debris,
    figure_colours,
    legend_texts,
    makers,
    prose_values,
    rgb,
)
from perfbook.analysis import findings as F
from perfbook.analysis import fleetview as fv
from perfbook.chapters import CHAPTERS

MAX_LEGEND = 10
HOST_ID = re.compile(r"h-[0-9a-f]{12}")


@pytest.fixture(params=CHAPTERS, ids=lambda e: e.name)
def chapter_data(request, book_data):
    """(chapter entry, its Data on book_data, the scenario)."""
    entry = request.param
    return entry, entry.load().load(book_data.data_dir), book_data


def test_this_host_is_the_host_of_the_newest_dataset(book_data):
    """The states themselves: after a reader's make all the new host is this host in every
    chapter; after a kernel update the reference host stays this host, with its newest run on
    the other build."""
    for entry in CHAPTERS:
        D = entry.load().load(book_data.data_dir)
        F_ = fv.fleet(D)
        if D.quoted is None:
            continue
        assert F_.this == D.quoted.host_id and F_.reference == fv.reference_host()["host_id"]
        added = book_data.added.get(entry.name)
        if book_data.scenario == "committed" or added is None:
            continue
        assert D.quoted.path == added, (entry.name, D.quoted.path)
        mine = F.counted_runs([m for m in D.manifests if m.host_id == book_data.host])
        if book_data.scenario == "new_host":
            assert F_.this == book_data.host != F_.reference and len(mine) == 1, entry.name
            assert D.quoted["host"]["kernel_release"] not in {
                m["host"]["kernel_release"] for m in D.manifests if m.host_id != book_data.host
            }
        else:
            assert F_.this == F_.reference == book_data.host and len(mine) >= 2, entry.name
            builds = [m["host"]["kernel_release"] for m in mine]
            assert builds[-1] not in builds[:-1], (entry.name, builds)


def test_prose_values_and_key_findings_hold_whichever_host_is_this_host(chapter_data):
    """Every value the prose quotes is text or an integer without debris (a 'nan', a lost sign, a
    repr), and every key finding is decided on every host, its sentence without debris."""
    entry, D, bd = chapter_data
    if D.quoted is None:
        pytest.skip(f"no dataset of {entry.name} in the {bd} data")
    values = prose_values(entry, D)
    wrong = {
        k: v for k, v in values.items() if not isinstance(v, (str, int)) or isinstance(v, bool)
    }
    assert not wrong, f"{entry.name} [{bd}]: not text or an integer: {wrong}"
    bad = {k: debris(v) for k, v in values.items() if debris(v)}
    assert not bad, f"{entry.name} [{bd}]: prose values with debris: {bad}"
    from perfbook.book.notebook import host_labels

    for per_host in F.verdicts(D):
        for v in per_host:
            assert v.verdict in F.VERDICTS
            assert not debris(F.sentence(v)), (
                f"{entry.name} [{bd}] {v.finding.key} on {v.host_id}: {F.sentence(v)}"
            )
    block = F.html_block(D, host_labels(D))
    assert not debris(block), f"{entry.name} [{bd}]: Key findings block: {debris(block)}"


def test_figures_mark_this_host_and_the_reference_host_apart(chapter_data):
    """Every figure the chapter's notebook shows renders with a caption without debris. Its
    legend names no host but this host and the reference host; a cross-host figure that draws
    this host or the reference host (in its colour) labels it as such, the two apart when they
    are two hosts, counts in "other hosts (n = K)" no more than the other hosts, and has no
    caption that describes the mark of a host it did not draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entry, D, bd = chapter_data
    if D.quoted is None:
        pytest.skip(f"no dataset of {entry.name} in the {bd} data")
    Fl = fv.fleet(D)
    highlighted = {h for h, _ in Fl.highlighted}
    for key, make in makers(entry, D).items():
        fig, caption = make()
        what = f"{entry.name}/{key} [{bd}]"
        try:
            assert fig.axes and caption, what
            assert not debris(caption), f"{what}: caption {debris(caption)}"
            legend = legend_texts(fig)
            named = set(HOST_ID.findall(" ".join(legend)))
            assert named <= highlighted, (
                f"{what}: the legend names {sorted(named - highlighted)}: {legend}"
            )
            if (entry.name, key) in CROSS_HOST | HEATMAP:
                assert fv.legend_entries(fig) <= MAX_LEGEND, what
            if (entry.name, key) not in CROSS_HOST:
                continue
            colours = figure_colours(fig)
            this_label = next((t for t in legend if t.startswith("this host")), None)
            ref_label = next((t for t in legend if t.startswith("reference host")), None)
            if rgb(fv.STYLE[fv.THIS]["color"]) in colours:
                assert this_label == Fl.label(fv.THIS), f"{what}: this host drawn, legend {legend}"
            if Fl.reference != Fl.this and rgb(fv.STYLE[fv.REFERENCE]["color"]) in colours:
                assert ref_label == Fl.label(fv.REFERENCE), (
                    f"{what}: the reference host drawn, legend {legend}"
                )
            if Fl.reference != Fl.this:
                assert not any(t.startswith("this host = reference host") for t in legend), (
                    what,
                    legend,
                )
            for t in legend:
                m = re.match(r"other hosts \(n = (\d+)\)", t)
                if m:
                    assert 1 <= int(m.group(1)) <= len(Fl.others), (
                        f"{what}: {t}, other hosts {Fl.others}"
                    )
            for role in (fv.THIS, fv.REFERENCE):  # a caption describes only the marks there are
                mark = fv.MARK_WORDS[role]
                if re.search(rf"\b({mark}|{mark.split()[0]} line)\b", caption, re.I):
                    assert rgb(fv.STYLE[role]["color"]) in colours, (
                        f"{what}: the caption says '{mark}': {caption}"
                    )
        finally:
            plt.close(fig)
