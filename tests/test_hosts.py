import copy
import json

from conftest import fake_manifest
from tools import hosts


def _runs(tmp_path, src_host="h-aaa", other="h-bbb"):
    """Two hosts' manifests for one chapter in a scratch data dir."""
    base = {**fake_manifest(src_host, "20260101T000000Z"),
            "host": {"host_id": src_host, "description": "box A", "kernel_release": "6.18",
                     "cpu_model": "AMD EPYC", "cpus_online": 2, "virtualization": "kvm",
                     "clocksource": {"current": "tsc"}, "mitigations": {"l1tf": "Not affected"},
                     "virtio_devices": [{"device": "blk", "features": [9, 32]}]},
             "tools": {"gcc": "gcc 12", "python_packages": {"numpy": "2.4"}}}
    b = copy.deepcopy(base)
    b["run_id"] = "20260102T000000Z"
    b["host"].update(host_id=other, description="box B", kernel_release="6.1",
                     clocksource={"current": "kvm-clock"})
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
