import copy
import html
import json

from conftest import fake_manifest
from perfbook.analysis import hosts


def _runs(tmp_path, src_host="h-aaa", other="h-bbb"):
    """Two hosts' manifests for one chapter in a scratch data dir."""
    base = {
        **fake_manifest(src_host, "20260101T000000Z"),
        "host": {
            "host_id": src_host,
            "description": "box A",
            "kernel_release": "6.18",
            "cpu_model": "AMD EPYC",
            "cpus_online": 2,
            "virtualization": "kvm",
            "clocksource": {"current": "tsc"},
            "mitigations": {"l1tf": "Not affected"},
            "virtio_devices": [{"device": "blk", "features": [9, 32]}],
        },
        "tools": {"gcc": "gcc 12", "python_packages": {"numpy": "2.4"}},
    }
    b = copy.deepcopy(base)
    b["run_id"] = "20260102T000000Z"
    b["host"].update(
        host_id=other,
        description="box B",
        kernel_release="6.1",
        clocksource={"current": "kvm-clock"},
    )
    b["host"]["virtio_devices"] = [{"device": "blk", "features": [32]}]
    b["tools"]["qemu-system"] = "QEMU 7.2"
    for m in (base, b):
        d = tmp_path / "runs" / m["host"]["host_id"] / "demo" / m["run_id"]
        d.mkdir(parents=True)
        (d / "manifest.json").write_text(json.dumps(m))
    return base, b


def test_env_diff_keeps_only_what_differs(tmp_path):
    a, b = _runs(tmp_path)
    df = hosts.env_diff([a, b]).set_index("fact")
    assert list(df.columns) == ["h-aaa", "h-bbb"]
    assert df.loc["kernel_release"].tolist() == ["6.18", "6.1"]
    assert df.loc["clocksource"].tolist() == ["tsc", "kvm-clock"]
    assert df.loc["virtio blk features"].tolist() == ["9, 32", "32"]
    assert df.loc["tool: qemu-system"].tolist() == ["(not recorded)", "QEMU 7.2"]
    assert "cpu_model" not in df.index and "tool: gcc" not in df.index
    assert len(hosts.env_diff([a])) == 0


def test_host_table_and_counts(tmp_path):
    _runs(tmp_path)
    t = hosts.host_table(tmp_path).set_index("host_id")
    assert t.loc["h-bbb", "kernel"] == "6.1" and t.loc["h-aaa", "datasets"] == 1
    counts = hosts.datasets_per_chapter(tmp_path)
    assert counts.loc["demo"].to_dict() == {"h-aaa": 1, "h-bbb": 1}
    assert len(hosts.chapter_env_diff("demo", tmp_path)) > 0


def test_latest_manifest_per_host_wins(tmp_path):
    a, _ = _runs(tmp_path)
    newer = copy.deepcopy(a)
    newer["run_id"] = "20260105T000000Z"
    newer["host"]["kernel_release"] = "6.19"
    assert hosts.latest_per_host([a, newer])["h-aaa"]["host"]["kernel_release"] == "6.19"


# ---- the hosts page (tools/perfbook/book/hostspage.py) -------------------------------------------------

HOSTILE = '<script>alert("label")</script> & <img src=x onerror=alert(1)> "box"'


def _fleet(tmp_path, n, hostile=False):
    """n hosts with one or two datasets each in two chapters; host 0 opted in to a label."""
    for i in range(n):
        hid = f"h-{i:012x}"
        kind = ("none", "kvm", "qemu")[i % 3]
        for chapter, run in (
            ("demo", f"202601{1 + i % 28:02d}T000000Z"),
            ("other", "20260201T000000Z"),
        ):
            host = {
                "description": HOSTILE if hostile and i == 0 else f"box {i}",
                "label_opt_in": hostile and i == 0,
                "note": HOSTILE if hostile else None,
                "cpu_model": ("AMD EPYC 7B13", "Intel Xeon Gold 6338", "QEMU TCG CPU")[i % 3],
                "cpus_online": 2 + i,
                "mem_total_gib": 3.8,
                "kernel_release": f"6.{i % 20}.1-x",
                "virtualization": kind,
                "container": "none",
                "kvm_modules": ["kvm", "kvm_amd"],
            }
            d = tmp_path / "runs" / hid / chapter / run
            d.mkdir(parents=True)
            (d / "manifest.json").write_text(
                json.dumps(fake_manifest(hid, run, chapter, host=host))
            )
    return tmp_path


def _tables(block: str):
    """Each table in an HTML block as (headers, rows of cell texts, rows of <td> tags)."""
    from bs4 import BeautifulSoup

    out = []
    for t in BeautifulSoup(block, "html.parser").find_all("table"):
        head = [th.get_text(" ", strip=True) for th in t.thead.find_all("th")]
        trs = t.tbody.find_all("tr")
        out.append(
            (
                head,
                [[td.get_text(" ", strip=True) for td in tr.find_all("td")] for tr in trs],
                [tr.find_all("td") for tr in trs],
            )
        )
    return out


def test_host_records_have_the_key_facts(tmp_path):
    _fleet(tmp_path, 3)
    r = {x["host_id"]: x for x in hosts.host_records(tmp_path)}
    a, b, c = r["h-000000000000"], r["h-000000000001"], r["h-000000000002"]
    assert (a["kind"], b["kind"], c["kind"]) == ("bare metal", "KVM guest", "TCG guest")
    assert (a["cpu_vendor"], b["cpu_vendor"], c["cpu_vendor"]) == (
        "AMD",
        "Intel",
        "QEMU (emulated CPU)",
    )
    assert (
        b["kernel"] == "6.1.1-x" and b["kernel_series"] == "6.1" and a["accelerator"] == "KVM (SVM)"
    )
    assert a["datasets"] == 2 and a["runs"] == [
        ("demo", "20260101T000000Z", None),
        ("other", "20260201T000000Z", None),
    ]
    assert (
        hosts.kernel_series("5.10.0-28-amd64") == "5.10" and hosts.kernel_series(None) == "unknown"
    )
    assert hosts.accelerator({"kvm_modules": []}) == "none (TCG only)"
    assert hosts.accelerator({}) == "not recorded"


def test_hosts_page_escapes_what_hosts_provide(tmp_path):
    """Descriptions, opt-in labels (PERFBOOK_HOST_LABEL) and notes are user data: the page
    shows them as text, never as markup, and emits only what a stored output may hold."""
    from bs4 import BeautifulSoup

    from perfbook.book import hostspage
    from test_published_outputs import _html_problems

    _fleet(tmp_path, 3, hostile=True)
    recs = hosts.host_records(tmp_path)
    blocks = [
        hostspage.hosts_table(records=recs).data,
        hostspage.coverage_table(records=recs).data,
        hostspage.env_diff_table(tmp_path)[0].data,
    ]
    for block in blocks:
        assert _html_problems(block) == [], _html_problems(block)
        soup = BeautifulSoup(block, "html.parser")
        assert not soup.find_all(["script", "img"]) and "<script>" not in block
    soup = BeautifulSoup(blocks[0], "html.parser")
    assert HOSTILE in soup.get_text()  # shown as the contributor wrote it
    assert any(HOSTILE == s.get("title") for s in soup.find_all("span"))  # the note, as a tooltip
    assert "label set by its contributor" in soup.get_text()
    assert html.escape(HOSTILE) in blocks[0]
    assert "h-000000000000" in blocks[2]  # the description differs between hosts


def test_hosts_table_rows_links_and_facets(tmp_path):
    from perfbook.book import hostspage
    from perfbook.book.sphinx_site import dataset_url

    _fleet(tmp_path, 4)
    block = hostspage.hosts_table(tmp_path).data
    ((head, rows, tds),) = _tables(block)
    assert len(rows) == 4 and all(len(r) == len(head) for r in rows)
    for col in (
        "machine kind",
        "CPU vendor",
        "CPU model",
        "CPUs",
        "memory GiB",
        "kernel",
        "kernel series",
        "accelerator",
        "container",
        "TSC MHz",
        "datasets",
        "first run",
        "last run",
        "identity",
    ):
        assert col in head, col
    row = dict(zip(head, rows[1]))
    assert (
        row["machine kind"] == "KVM guest" and row["kernel series"] == "6.1" and row["CPUs"] == "3"
    )
    assert row["identity"] == hosts.SAME_MACHINE and row["datasets"].startswith("2 in 2 chapters")
    links = [a["href"] for a in tds[1][head.index("datasets")].find_all("a")]
    assert links == [
        dataset_url("h-000000000001", "demo", "20260102T000000Z"),
        dataset_url("h-000000000001", "other", "20260201T000000Z"),
    ]
    from bs4 import BeautifulSoup

    ths = {
        th.get_text(): th.get("class") or []
        for th in BeautifulSoup(block, "html.parser").find_all("th")
    }
    assert "pb-facet" in ths["machine kind"] and "pb-facet" in ths["kernel series"]
    assert "pb-num" in ths["CPUs"] and "pb-num" in ths["TSC MHz"]
    cov = _tables(hostspage.coverage_table(tmp_path).data)[0]
    assert cov[0] == ["host", "machine kind", "demo", "other"]
    assert [r[2].split(":")[0].strip() for r in cov[1]] == ["1", "1", "1", "1"]


def _matrix(
    n_hosts, findings=(("demo", "fast", "A `ret` is <fast>"), ("demo", "slow", "B is slow"))
):
    import pandas as pd

    rows = []
    for k, (chapter, key, claim) in enumerate(findings):
        verdicts = {
            f"h-{i:012x}": (
                "holds",
                "does not hold",
                "undecided",
                "not measured",
                "no data",
            )[(i + k) % 5]
            for i in range(n_hosts)
        }
        rows.append({"chapter": chapter, "finding": key, "claim": claim, **verdicts})
    return pd.DataFrame(rows)


def test_findings_tables_count_and_show_every_verdict(tmp_path, monkeypatch):
    from perfbook.book import hostspage

    _fleet(tmp_path, 5)
    monkeypatch.setattr(hostspage, "findings_matrix", lambda data_dir=None: _matrix(5))
    block = hostspage.findings_tables(tmp_path).data
    (h1, per_finding, _), (h2, per_host, cells) = _tables(block)
    first = dict(zip(h1, per_finding[0]))
    assert (
        first["#"] == "F1" and first["chapter"] == "demo" and "A ret is <fast>" in first["finding"]
    )
    assert [
        first[v] for v in ("holds", "does not hold", "undecided", "not measured", "no data")
    ] == ["1"] * 5
    name = {r["host_id"]: r["label"] for r in hosts.host_records(tmp_path)}["h-000000000001"]
    assert first["does not hold on"] == name and "KVM guest" in name  # the machine, not its id
    assert 'title="h-000000000001"' in block  # the id as the label's tooltip
    assert "<code>ret</code>" in block and "&lt;fast&gt;" in block  # markdown code, escaped text
    assert h2[-2:] == ["F1", "F2"] and len(per_host) == 5
    row = dict(zip(h2, per_host[1]))
    assert (row["holds"], row["does not hold"], row["F1"], row["F2"]) == ("0", "1", "✗", "?")
    f1 = cells[1][h2.index("F1")]
    assert "pb-rank-0" in f1["class"] and f1["title"] == f"F1 on {name}: does not hold"


def test_the_page_scales_to_a_hundred_hosts(tmp_path, monkeypatch):
    """100 hosts: one row each, and no table grows a column per host."""
    from perfbook.book import hostspage

    _fleet(tmp_path, 100)
    monkeypatch.setattr(hostspage, "findings_matrix", lambda data_dir=None: _matrix(100))
    recs = hosts.host_records(tmp_path)
    assert len(recs) == 100
    blocks = {
        "hosts": hostspage.hosts_table(records=recs).data,
        "coverage": hostspage.coverage_table(records=recs).data,
        "findings": hostspage.findings_tables(tmp_path, records=recs).data,
        "env": hostspage.env_diff_table(tmp_path)[0].data,
    }
    widths = {name: [len(h) for h, _, _ in _tables(b)] for name, b in blocks.items()}
    assert widths == {"hosts": [15], "coverage": [4], "findings": [9, 8], "env": [4]}, widths
    assert [len(rows) for _, rows, _ in _tables(blocks["findings"])] == [2, 100]
    assert len(_tables(blocks["hosts"])[0][1]) == 100


def test_a_host_label_is_read_from_its_facts_and_unique_among_hosts():
    from perfbook.data import machine

    epyc = {
        "cpu_model": "AMD EPYC 7B13 64-Core Processor",
        "cpus_online": 2,
        "virtualization": "kvm",
        "kvm_modules": ["kvm", "kvm_pvm"],
        "kernel_release": "6.18.44",
    }
    tcg = {"cpu_model": "QEMU TCG CPU version 2.5+", "cpus_online": 2, "virtualization": "qemu"}
    metal = {
        "cpu_model": "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz",
        "cpus_online": 40,
        "virtualization": "none",
        "kernel_release": "6.8.0",
    }
    assert machine.label(epyc) == "AMD EPYC 7B13 2-vCPU KVM guest with PVM, Linux 6.18.44"
    assert machine.label(tcg) == "emulated 2-vCPU TCG guest"
    assert machine.label(metal) == "Intel Xeon Gold 6248 40-CPU bare metal, Linux 6.8.0"
    names = machine.labels({"h-2": epyc, "h-1": dict(epyc), "h-3": tcg})
    assert names == {
        "h-1": "AMD EPYC 7B13 2-vCPU KVM guest with PVM, Linux 6.18.44 #1",
        "h-2": "AMD EPYC 7B13 2-vCPU KVM guest with PVM, Linux 6.18.44 #2",
        "h-3": "emulated 2-vCPU TCG guest",
    }


def test_every_output_names_a_host_by_its_label_and_keeps_the_id_as_a_tooltip(monkeypatch):
    """perfbook.book.notebook's output filter (#41): in text, a known host id and its run id
    become the machine's label; an id the book has no data of (the machine a TCG guest ran on)
    becomes 'another host'; in HTML the id is the name's tooltip, tags and attributes are left
    alone, and so is a host-id column."""
    from perfbook.book import notebook as nb

    monkeypatch.setattr(nb, "_NAMES", {"h-0123456789ab": "AMD EPYC 2-vCPU KVM guest"})
    assert nb.named("On h-0123456789ab, run h-0123456789ab/20261129T062613Z.") == (
        "On AMD EPYC 2-vCPU KVM guest, run AMD EPYC 2-vCPU KVM guest, run 20261129T062613Z."
    )
    assert nb.named("a TCG guest on host h-1db0cee60199; Host h-1db0cee60199") == (
        "a TCG guest on another host; Another host"
    )
    assert nb.named("no id in h-0123456789abc or xh-0123456789ab") == (
        "no id in h-0123456789abc or xh-0123456789ab"
    )
    out = nb.named_html(
        '<td title="h-0123456789ab">h-0123456789ab</td>'
        '<td><code class="pb-hostid">h-0123456789ab</code> h-0123456789ab</td>'
    )
    assert out == (
        '<td title="h-0123456789ab"><span class="pb-host" title="h-0123456789ab">'
        "AMD EPYC 2-vCPU KVM guest</span></td>"
        '<td><code class="pb-hostid">h-0123456789ab</code> <span class="pb-host" '
        'title="h-0123456789ab">AMD EPYC 2-vCPU KVM guest</span></td>'
    )
