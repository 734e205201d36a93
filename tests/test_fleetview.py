"""Figures that scale (tools/perfbook/analysis/fleetview.py): with 12 synthetic hosts beside the committed ones (15 hosts: more than a legend lists),
every chapter figure keeps a legend of at most 10 entries, draws this host and the reference host
in their styles, and names no more hosts in its caption than those two (tests/test_new_host.py
draws every figure on each state of the book's own data). Plus the primitives on their own
(roles, facets, legend, reference)."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from conftest import (
    CROSS_HOST,
    FIGURES,
    HEATMAP,
    IOSTAT_FIGURES,
    ROOT,
    figure_colours,
    legend_texts,
    makers,
    rgb,
)
from perfbook.analysis import fleetview as fv
from perfbook.chapters import CHAPTERS
from perfbook.core.errors import DatasetError

MAX_LEGEND = 10
NEWEST = "29991231T000000Z"  # a run id newer than any: makes one synthetic host "this host"


ENTRIES = [e for e in CHAPTERS if e.name in FIGURES or e.name == "iostat_internals"]


def test_every_notebook_figure_is_covered():
    """A figure added to a chapter's notebook must be added to conftest.FIGURES too: this file draws
    it to scale, and tests/test_new_host.py on every state of the book's data."""
    for e in CHAPTERS:
        code = "\n".join(
            "".join(c["source"])
            for c in json.loads(e.path.read_text())["cells"]
            if c["cell_type"] == "code"
        )
        keys = set(re.findall(r'nb\.figure\("(\w+)"', code))
        covered = set(FIGURES.get(e.name, {})) | (
            set(IOSTAT_FIGURES) if e.name == "iostat_internals" else set()
        )
        assert keys <= covered, (e.name, keys - covered)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """12 synthetic hosts beside the committed ones (the reference host among them); one synthetic
    host's datasets get the newest run id, so that it is this host and the two roles differ."""
    from perfbook.dev import synthfleet

    def plain(base, df, **_):  # plain CSV, which every loader reads as well: faster still
        p = f"{base}.csv"
        df.to_csv(p, index=False)
        return p

    dest = tmp_path_factory.mktemp("fleetview") / "data"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(synthfleet, "write_table", plain)
        ids = synthfleet.generate(12, dest, seed=11, say=lambda *_: None)
    for real in (ROOT / "data" / "runs").iterdir():  # copies: a link in data/ is refused
        if real.is_dir() and not real.name.startswith("."):
            shutil.copytree(real, dest / "runs" / real.name)
    this = ids[0]
    for chap in (dest / "runs" / this).iterdir():
        for run in list(chap.iterdir()):
            man = json.loads((run / "manifest.json").read_text())
            man["run_id"] = NEWEST
            (run / "manifest.json").write_text(json.dumps(man, indent=1, sort_keys=True) + "\n")
            run.rename(chap / NEWEST)
    return dest, this, fv.reference_host()["host_id"], set(ids)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_a_fleet_keeps_legends_fixed_and_highlights_this_and_the_reference_host(fleet, entry):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dest, this, ref, synthetic = fleet
    D = entry.load().load(dest)
    F = fv.fleet(D)
    assert len(F.hosts) >= 12 and F.this == this and F.reference == ref
    assert fv.roles(D)[this] == fv.THIS and fv.roles(D)[ref] == fv.REFERENCE
    own = (
        None  # a figure of the quoted dataset only: its legend is the one the committed data gives
    )
    for key, make in makers(entry, D).items():
        fig, caption = make()
        try:
            n = fv.legend_entries(fig)
            if (entry.name, key) in CROSS_HOST | HEATMAP:
                assert n <= MAX_LEGEND, (entry.name, key, n)
            else:
                own = own or makers(entry, entry.load().load())
                fig0, _ = own[key]()
                assert n == fv.legend_entries(fig0), (entry.name, key, n)
                plt.close(fig0)
            legend_text = " ".join(legend_texts(fig))
            assert set(re.findall(r"h-[0-9a-f]{12}", legend_text)) <= {this, ref}, (entry.name, key)
            assert caption, (entry.name, key)
            if (entry.name, key) in CROSS_HOST and not figure_colours(fig):
                # nothing at all to draw (virtio_blk_iothread's hosts figure where no dataset has
                # two boots per variant, as the committed data): the caption must say so and
                # name the highlighted hosts as having nothing to draw, and no legend is given
                assert "no effect is drawn" in caption and "nothing to draw here" in caption, (
                    entry.name,
                    key,
                    caption,
                )
                assert f"({this})" in caption and f"({ref})" in caption, (entry.name, key)
                assert not legend_texts(fig), (entry.name, key)
            elif (entry.name, key) in CROSS_HOST:
                colours = figure_colours(fig)
                # a highlighted host is drawn, or the caption says it has nothing to draw here
                # (qcow2_overlap's prealloc: a shift of zero or below has no place on a log axis;
                # tests/test_qcow2_overlap.py checks that the figure says so only then)
                absent = re.search(
                    r"([^;.]*): no mark, (?:it has|they have) nothing to draw here", caption
                )
                for role, host in ((fv.THIS, this), (fv.REFERENCE, ref)):
                    if absent and f"({host})" in absent.group(1):
                        assert not any(t.startswith(role) for t in legend_texts(fig)), (
                            entry.name,
                            key,
                            f"{role} has a legend entry but the caption says it has no mark",
                        )
                        continue
                    assert rgb(fv.STYLE[role]["color"]) in colours, (
                        entry.name,
                        key,
                        f"{role} not drawn",
                    )
                    assert role in legend_text, (entry.name, key, legend_text)
                assert "other hosts (n = " in legend_text, (entry.name, key, legend_text)
            if (entry.name, key) in HEATMAP:
                labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
                assert any(x.startswith("this host") for x in labels), labels
                assert any(x.startswith("reference host") for x in labels), labels
                assert sum(x.startswith("other hosts") for x in labels) == 1, labels
            # a caption names the highlighted hosts only, never the whole fleet
            named = {h for h in synthetic if h in caption}
            assert named <= {this}, (entry.name, key, sorted(named)[:5])
        finally:
            plt.close(fig)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_a_fleets_platform_banner_details_this_and_the_reference_host_and_counts_the_rest(
    fleet, entry
):
    """The "Measured on" banner at the top of a chapter stays a few lines with a fleet; with the
    committed hosts it still details every one."""
    from perfbook.book import notebook

    dest, this, ref, synthetic = fleet
    D = entry.load().load(dest)
    html = notebook.platform(D).data
    lines = html.split("<details")[0]  # the banner's lines; the machine facts are collapsed
    detailed = re.findall(
        r'<li><span class="kf-machine" title="(h-[0-9a-f]{12})">[^<]+</span> \(([a-z ]+)\)', lines
    )
    assert detailed == [(this, fv.THIS), (ref, fv.REFERENCE)], (entry.name, detailed)
    rest = len(D.hosts) - 2
    assert re.search(
        rf'<li>{rest} other hosts: \d+ [^<]*<a href="../hosts.html">hosts page</a>', lines
    ), (entry.name, lines[-400:])
    assert not {h for h in synthetic if h in html} - {this}, entry.name
    own = entry.load().load()
    if own.hosts:
        banner = notebook.platform(own).data.split("<details")[0]
        assert (
            banner.count('<li><span class="kf-machine" title="h-')
            == len(own.hosts)
            <= notebook.BANNER_HOSTS
        )


# -- the primitives -------------------------------------------------------------------------


def _fleet(n, this="h-000000000000", ref="h-000000000001", kinds=("none", "kvm", "qemu")):
    facts = {
        f"h-{i:012x}": {
            "host_id": f"h-{i:012x}",
            "virtualization": kinds[i % len(kinds)],
            "kernel_release": f"6.{i % 4}.0",
            "cpu_model": "AMD EPYC" if i % 2 else "Intel Xeon",
            "description": f"host {i}",
        }
        for i in range(n)
    }
    return fv.Fleet(facts, this, ref)


def test_roles_read_naturally_with_one_and_two_hosts():
    one = _fleet(1, ref="h-000000000000")
    assert one.roles() == {"h-000000000000": fv.THIS} and one.others == []
    # a legend names a host by its machine's label, as the page does, never by its id
    assert one.label(fv.THIS) == "this host = reference host: Intel Xeon bare metal, Linux 6.0.0"
    assert [lbl for _, lbl in fv.handles(one)] == [one.label(fv.THIS)]
    two = _fleet(2)
    assert [r for _, r in two.highlighted] == [fv.THIS, fv.REFERENCE] and two.others == []
    assert [lbl.split(":")[0] for _, lbl in fv.handles(two)] == ["this host", "reference host"]
    gone = _fleet(3, ref="h-0000000000ff")  # the reference host has no data here
    assert gone.reference is None and gone.label(fv.OTHER) == "other hosts (n = 2)"


def test_a_legend_does_not_grow_with_the_fleet():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    counts = {}
    for n in (1, 3, 100):
        F = _fleet(n)
        df = pd.DataFrame(
            [
                {"host_id": h, "pos": k, "v": 1.0 + i + k, "lo": 0.5 + i, "hi": 2.0 + i + k}
                for i, h in enumerate(F.hosts)
                for k in range(3)
            ]
        )
        fig, ax = plt.subplots(layout="constrained")
        drawn = fv.points(ax, F, df, "pos", "v", "lo", "hi")
        fv.legend(fig, F, drawn, seed="seed")
        counts[n] = fv.legend_entries(fig)
        assert drawn["summary"] == (n >= fv.SUMMARY_MIN) and drawn["other_bars"] == (
            0 < n - 2 <= fv.FEW_OTHERS
        )
        text = F.marks_text(drawn, "a median", seed="the seed's figure")
        assert ("quartiles" in text) == (
            n >= fv.SUMMARY_MIN
        ) and "Black star: the seed's figure." in text
        plt.close(fig)
    assert counts == {1: 2, 3: 4, 100: 5}


def test_facets_follow_the_machine_kind_and_stay_bounded():
    F = _fleet(30, kinds=("none", "kvm", "qemu", "microsoft", "vmware", "xen"))
    panels = fv.facets(F, "kind", max_facets=4)
    assert len(panels) == 4 and panels[0][0].startswith("bare metal")  # this host's kind first
    assert panels[1][1].reference == "h-000000000001" and panels[-1][0].startswith("other kinds: ")
    assert sum(len(p.hosts) for _, p in panels) == 30
    assert [t.split(" (")[0] for t, _ in fv.facets(F, "vendor")][:2] == ["Intel", "AMD"]
    assert {t.split(" (")[0] for t, _ in fv.facets(F, "kernel", max_facets=9)} == {
        "Linux 6.0",
        "Linux 6.1",
        "Linux 6.2",
        "Linux 6.3",
    }


def test_captions_name_the_highlighted_hosts_and_count_the_rest():
    from perfbook.analysis.stats import caption, hosts_of

    F = _fleet(40)
    hosts = F.caption_hosts()
    assert [h for h, _ in hosts[:2]] == ["h-000000000000", "h-000000000001"]
    assert hosts[2][0] == "and 38 other hosts" and "KVM guests" in hosts[2][1]
    mans = [{"host": f, "run_id": "r"} for f in F.facts.values()]
    old = caption("x", n=3, unit="runs", warmup=0, hosts=hosts_of(mans))
    new = fv.recaption(old, mans, F)
    assert "h-000000000027" in old and "h-000000000027" not in new and "38 other hosts" in new


def test_the_reference_host_is_declared_once_and_read_or_refused_in_one_line(tmp_path):
    ref = fv.reference_host()
    assert re.match(r"^h-[0-9a-f]{12}$", ref["host_id"]) and ref["why"]
    assert (ROOT / "data" / "runs" / ref["host_id"]).is_dir()
    (tmp_path / "reference").mkdir()
    assert fv.reference_host(tmp_path) == ref  # a scratch data dir: the committed one
    (tmp_path / "reference" / fv.REFERENCE_FILE).write_text('{"host_id": "nope"}')
    with pytest.raises(DatasetError, match=r"reference_host.json: must be a JSON object") as e:
        fv.reference_host(tmp_path)
    assert "\n" not in str(e.value)
    (tmp_path / "reference" / fv.REFERENCE_FILE).write_text("{")
    with pytest.raises(DatasetError, match="not valid JSON"):
        fv.reference_host(tmp_path)
    shutil.rmtree(tmp_path / "reference")


def test_a_strip_plot_jitters_the_same_way_every_time_and_leaves_numpys_generator_alone():
    """Stored notebooks' PNGs change only with their data: the strip plots' jitter is seeded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    df = pd.DataFrame({"x": ["a", "b"] * 50, "y": np.arange(100.0)})

    def offsets():
        fig, ax = plt.subplots()
        fv.strip(data=df, x="x", y="y", ax=ax, jitter=0.3)
        xy = np.concatenate([c.get_offsets() for c in ax.collections])
        plt.close(fig)
        return xy

    np.random.seed(7)
    before = np.random.get_state()[1].copy()
    first, second = offsets(), offsets()
    assert np.array_equal(first, second) and np.ptp(first[:, 0] % 1) > 0  # jittered, identically
    assert np.array_equal(np.random.get_state()[1], before)
