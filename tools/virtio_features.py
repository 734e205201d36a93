"""Decode virtio feature bits as Linux shows them in sysfs.

``/sys/bus/virtio/devices/virtioN/features`` is one character per feature bit,
**bit 0 first** (drivers/virtio/virtio.c, features_show). It holds the
*negotiated* set: what the device offered AND what the driver accepted, plus
the transport bits the ring code kept. Its length is the width of the
kernel's feature word: 64 characters up to 6.16 (one u64), 128 since the
extended-features work of 2025 (VIRTIO_FEATURES_BITS = 128; this host's 6.18
prints 128). Older kernels printed 32 or 64. The decoder takes any length.

The bit tables below are the only place this book names virtio feature bits.
Each entry says where the name comes from:

* ``uapi-6.1``: Debian's linux-libc-dev 6.1.187 headers,
  /usr/include/linux/virtio_{config,ring,blk,net,balloon,console,scsi,vsock,
  gpu,iommu,mem,9p}.h (Linux 6.1 uapi), read on this machine; a test checks the
  table against those headers when they are installed.
* ``upstream``: bits added after 6.1, read in the upstream uapi patches
  (virtio_config.h VIRTIO_F_NOTIFICATION_DATA/NOTIF_CONFIG_DATA/ADMIN_VQ,
  virtio_blk.h VIRTIO_BLK_F_ZONED, virtio_net.h DEVICE_STATS, VQ_NOTF_COAL,
  USO, GUEST_HDRLEN and the 65-68 UDP-tunnel GSO bits of the 128-bit series).
* ``spec-1.2``: the OASIS virtio 1.2 specification, section 6 (reserved
  feature bits) for the transport range.

Device ids are from include/uapi/linux/virtio_ids.h (uapi-6.1).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import ParameterError, PerfbookError

SOURCES = {
    "uapi-6.1": "Linux 6.1 uapi headers, Debian linux-libc-dev 6.1.187-1 (/usr/include/linux/virtio_*.h)",
    "upstream": "upstream include/uapi/linux/virtio_{config,blk,net}.h additions after 6.1 (patch mails, 2022-2025)",
    "spec-1.2": "OASIS Virtual I/O Device (VIRTIO) Version 1.2, 6 Reserved Feature Bits",
}

# VIRTIO_ID_* (include/uapi/linux/virtio_ids.h, uapi-6.1)
DEVICE_IDS: dict[int, str] = {
    1: "net", 2: "block", 3: "console", 4: "rng", 5: "balloon", 6: "iomem", 7: "rpmsg",
    8: "scsi", 9: "9p", 10: "mac80211-wlan", 11: "rproc-serial", 12: "caif",
    13: "memory-balloon", 16: "gpu", 17: "clock", 18: "input", 19: "vsock", 20: "crypto",
    21: "signal-dist", 22: "pstore", 23: "iommu", 24: "mem", 25: "sound", 26: "fs",
    27: "pmem", 28: "rpmb", 29: "mac80211-hwsim", 30: "video-encoder", 31: "video-decoder",
    32: "scmi", 33: "nitro-sec-mod", 34: "i2c-adapter", 35: "watchdog", 36: "can",
    37: "dmabuf", 38: "param-serv", 39: "audio-policy", 40: "bt", 41: "gpio",
}

# Transport / reserved bits, valid for every device type.
# (bit, short name, C macro, note, source)
TRANSPORT_BITS: list[tuple[int, str, str, str, str]] = [
    (24, "NOTIFY_ON_EMPTY", "VIRTIO_F_NOTIFY_ON_EMPTY", "legacy only", "uapi-6.1"),
    (27, "ANY_LAYOUT", "VIRTIO_F_ANY_LAYOUT", "legacy only; implied by VERSION_1", "uapi-6.1"),
    (28, "INDIRECT_DESC", "VIRTIO_RING_F_INDIRECT_DESC", "virtio_ring.h", "uapi-6.1"),
    (29, "EVENT_IDX", "VIRTIO_RING_F_EVENT_IDX", "virtio_ring.h", "uapi-6.1"),
    (32, "VERSION_1", "VIRTIO_F_VERSION_1", "virtio 1.0 (modern) device", "uapi-6.1"),
    (33, "ACCESS_PLATFORM", "VIRTIO_F_ACCESS_PLATFORM", "was IOMMU_PLATFORM", "uapi-6.1"),
    (34, "RING_PACKED", "VIRTIO_F_RING_PACKED", "packed virtqueue layout", "uapi-6.1"),
    (35, "IN_ORDER", "VIRTIO_F_IN_ORDER", "", "uapi-6.1"),
    (36, "ORDER_PLATFORM", "VIRTIO_F_ORDER_PLATFORM", "", "uapi-6.1"),
    (37, "SR_IOV", "VIRTIO_F_SR_IOV", "", "uapi-6.1"),
    (38, "NOTIFICATION_DATA", "VIRTIO_F_NOTIFICATION_DATA", "", "upstream"),
    (39, "NOTIF_CONFIG_DATA", "VIRTIO_F_NOTIF_CONFIG_DATA", "", "upstream"),
    (40, "RING_RESET", "VIRTIO_F_RING_RESET", "", "uapi-6.1"),
    (41, "ADMIN_VQ", "VIRTIO_F_ADMIN_VQ", "", "upstream"),
]
TRANSPORT_RANGE = range(24, 42)  # spec 1.2: 24..41 are for queue and feature negotiation

# Device-specific bits per device type: (bit, short name, C macro, note, source)
DEVICE_BITS: dict[str, list[tuple[int, str, str, str, str]]] = {
    "block": [
        (0, "BARRIER", "VIRTIO_BLK_F_BARRIER", "legacy", "uapi-6.1"),
        (1, "SIZE_MAX", "VIRTIO_BLK_F_SIZE_MAX", "", "uapi-6.1"),
        (2, "SEG_MAX", "VIRTIO_BLK_F_SEG_MAX", "", "uapi-6.1"),
        (4, "GEOMETRY", "VIRTIO_BLK_F_GEOMETRY", "", "uapi-6.1"),
        (5, "RO", "VIRTIO_BLK_F_RO", "", "uapi-6.1"),
        (6, "BLK_SIZE", "VIRTIO_BLK_F_BLK_SIZE", "", "uapi-6.1"),
        (7, "SCSI", "VIRTIO_BLK_F_SCSI", "legacy; SCSI passthrough", "uapi-6.1"),
        (9, "FLUSH", "VIRTIO_BLK_F_FLUSH", "legacy; called WCE in 3.x headers", "uapi-6.1"),
        (10, "TOPOLOGY", "VIRTIO_BLK_F_TOPOLOGY", "", "uapi-6.1"),
        (11, "CONFIG_WCE", "VIRTIO_BLK_F_CONFIG_WCE", "legacy; writeback mode in config", "uapi-6.1"),
        (12, "MQ", "VIRTIO_BLK_F_MQ", "more than one virtqueue", "uapi-6.1"),
        (13, "DISCARD", "VIRTIO_BLK_F_DISCARD", "", "uapi-6.1"),
        (14, "WRITE_ZEROES", "VIRTIO_BLK_F_WRITE_ZEROES", "", "uapi-6.1"),
        (15, "LIFETIME", "VIRTIO_BLK_F_LIFETIME", "spec only, no Linux macro", "spec-1.2"),
        (16, "SECURE_ERASE", "VIRTIO_BLK_F_SECURE_ERASE", "", "uapi-6.1"),
        (17, "ZONED", "VIRTIO_BLK_F_ZONED", "", "upstream"),
    ],
    "net": [
        (0, "CSUM", "VIRTIO_NET_F_CSUM", "", "uapi-6.1"),
        (1, "GUEST_CSUM", "VIRTIO_NET_F_GUEST_CSUM", "", "uapi-6.1"),
        (2, "CTRL_GUEST_OFFLOADS", "VIRTIO_NET_F_CTRL_GUEST_OFFLOADS", "", "uapi-6.1"),
        (3, "MTU", "VIRTIO_NET_F_MTU", "", "uapi-6.1"),
        (5, "MAC", "VIRTIO_NET_F_MAC", "", "uapi-6.1"),
        (6, "GSO", "VIRTIO_NET_F_GSO", "legacy", "uapi-6.1"),
        (7, "GUEST_TSO4", "VIRTIO_NET_F_GUEST_TSO4", "", "uapi-6.1"),
        (8, "GUEST_TSO6", "VIRTIO_NET_F_GUEST_TSO6", "", "uapi-6.1"),
        (9, "GUEST_ECN", "VIRTIO_NET_F_GUEST_ECN", "", "uapi-6.1"),
        (10, "GUEST_UFO", "VIRTIO_NET_F_GUEST_UFO", "", "uapi-6.1"),
        (11, "HOST_TSO4", "VIRTIO_NET_F_HOST_TSO4", "", "uapi-6.1"),
        (12, "HOST_TSO6", "VIRTIO_NET_F_HOST_TSO6", "", "uapi-6.1"),
        (13, "HOST_ECN", "VIRTIO_NET_F_HOST_ECN", "", "uapi-6.1"),
        (14, "HOST_UFO", "VIRTIO_NET_F_HOST_UFO", "", "uapi-6.1"),
        (15, "MRG_RXBUF", "VIRTIO_NET_F_MRG_RXBUF", "", "uapi-6.1"),
        (16, "STATUS", "VIRTIO_NET_F_STATUS", "", "uapi-6.1"),
        (17, "CTRL_VQ", "VIRTIO_NET_F_CTRL_VQ", "", "uapi-6.1"),
        (18, "CTRL_RX", "VIRTIO_NET_F_CTRL_RX", "", "uapi-6.1"),
        (19, "CTRL_VLAN", "VIRTIO_NET_F_CTRL_VLAN", "", "uapi-6.1"),
        (20, "CTRL_RX_EXTRA", "VIRTIO_NET_F_CTRL_RX_EXTRA", "", "uapi-6.1"),
        (21, "GUEST_ANNOUNCE", "VIRTIO_NET_F_GUEST_ANNOUNCE", "", "uapi-6.1"),
        (22, "MQ", "VIRTIO_NET_F_MQ", "", "uapi-6.1"),
        (23, "CTRL_MAC_ADDR", "VIRTIO_NET_F_CTRL_MAC_ADDR", "", "uapi-6.1"),
        (50, "DEVICE_STATS", "VIRTIO_NET_F_DEVICE_STATS", "", "upstream"),
        (52, "VQ_NOTF_COAL", "VIRTIO_NET_F_VQ_NOTF_COAL", "", "upstream"),
        (53, "NOTF_COAL", "VIRTIO_NET_F_NOTF_COAL", "", "uapi-6.1"),
        (54, "GUEST_USO4", "VIRTIO_NET_F_GUEST_USO4", "", "upstream"),
        (55, "GUEST_USO6", "VIRTIO_NET_F_GUEST_USO6", "", "upstream"),
        (56, "HOST_USO", "VIRTIO_NET_F_HOST_USO", "", "upstream"),
        (57, "HASH_REPORT", "VIRTIO_NET_F_HASH_REPORT", "", "uapi-6.1"),
        (59, "GUEST_HDRLEN", "VIRTIO_NET_F_GUEST_HDRLEN", "", "upstream"),
        (60, "RSS", "VIRTIO_NET_F_RSS", "", "uapi-6.1"),
        (61, "RSC_EXT", "VIRTIO_NET_F_RSC_EXT", "", "uapi-6.1"),
        (62, "STANDBY", "VIRTIO_NET_F_STANDBY", "", "uapi-6.1"),
        (63, "SPEED_DUPLEX", "VIRTIO_NET_F_SPEED_DUPLEX", "", "uapi-6.1"),
        (65, "GUEST_UDP_TUNNEL_GSO", "VIRTIO_NET_F_GUEST_UDP_TUNNEL_GSO", "128-bit features", "upstream"),
        (66, "GUEST_UDP_TUNNEL_GSO_CSUM", "VIRTIO_NET_F_GUEST_UDP_TUNNEL_GSO_CSUM", "128-bit features", "upstream"),
        (67, "HOST_UDP_TUNNEL_GSO", "VIRTIO_NET_F_HOST_UDP_TUNNEL_GSO", "128-bit features", "upstream"),
        (68, "HOST_UDP_TUNNEL_GSO_CSUM", "VIRTIO_NET_F_HOST_UDP_TUNNEL_GSO_CSUM", "128-bit features", "upstream"),
    ],
    "console": [
        (0, "SIZE", "VIRTIO_CONSOLE_F_SIZE", "", "uapi-6.1"),
        (1, "MULTIPORT", "VIRTIO_CONSOLE_F_MULTIPORT", "", "uapi-6.1"),
        (2, "EMERG_WRITE", "VIRTIO_CONSOLE_F_EMERG_WRITE", "", "uapi-6.1"),
    ],
    "rng": [],
    "balloon": [
        (0, "MUST_TELL_HOST", "VIRTIO_BALLOON_F_MUST_TELL_HOST", "", "uapi-6.1"),
        (1, "STATS_VQ", "VIRTIO_BALLOON_F_STATS_VQ", "", "uapi-6.1"),
        (2, "DEFLATE_ON_OOM", "VIRTIO_BALLOON_F_DEFLATE_ON_OOM", "", "uapi-6.1"),
        (3, "FREE_PAGE_HINT", "VIRTIO_BALLOON_F_FREE_PAGE_HINT", "", "uapi-6.1"),
        (4, "PAGE_POISON", "VIRTIO_BALLOON_F_PAGE_POISON", "", "uapi-6.1"),
        (5, "REPORTING", "VIRTIO_BALLOON_F_REPORTING", "", "uapi-6.1"),
    ],
    "scsi": [
        (0, "INOUT", "VIRTIO_SCSI_F_INOUT", "", "uapi-6.1"),
        (1, "HOTPLUG", "VIRTIO_SCSI_F_HOTPLUG", "", "uapi-6.1"),
        (2, "CHANGE", "VIRTIO_SCSI_F_CHANGE", "", "uapi-6.1"),
        (3, "T10_PI", "VIRTIO_SCSI_F_T10_PI", "", "uapi-6.1"),
    ],
    "9p": [(0, "MOUNT_TAG", "VIRTIO_9P_MOUNT_TAG", "", "uapi-6.1")],
    "gpu": [
        (0, "VIRGL", "VIRTIO_GPU_F_VIRGL", "", "uapi-6.1"),
        (1, "EDID", "VIRTIO_GPU_F_EDID", "", "uapi-6.1"),
        (2, "RESOURCE_UUID", "VIRTIO_GPU_F_RESOURCE_UUID", "", "uapi-6.1"),
        (3, "RESOURCE_BLOB", "VIRTIO_GPU_F_RESOURCE_BLOB", "", "uapi-6.1"),
        (4, "CONTEXT_INIT", "VIRTIO_GPU_F_CONTEXT_INIT", "", "uapi-6.1"),
    ],
    "vsock": [(1, "SEQPACKET", "VIRTIO_VSOCK_F_SEQPACKET", "", "uapi-6.1")],
    "fs": [],
    "iommu": [
        (0, "INPUT_RANGE", "VIRTIO_IOMMU_F_INPUT_RANGE", "", "uapi-6.1"),
        (1, "DOMAIN_RANGE", "VIRTIO_IOMMU_F_DOMAIN_RANGE", "", "uapi-6.1"),
        (2, "MAP_UNMAP", "VIRTIO_IOMMU_F_MAP_UNMAP", "", "uapi-6.1"),
        (3, "BYPASS", "VIRTIO_IOMMU_F_BYPASS", "", "uapi-6.1"),
        (4, "PROBE", "VIRTIO_IOMMU_F_PROBE", "", "uapi-6.1"),
        (5, "MMIO", "VIRTIO_IOMMU_F_MMIO", "", "uapi-6.1"),
        (6, "BYPASS_CONFIG", "VIRTIO_IOMMU_F_BYPASS_CONFIG", "", "uapi-6.1"),
    ],
    "mem": [
        (0, "ACPI_PXM", "VIRTIO_MEM_F_ACPI_PXM", "", "uapi-6.1"),
        (1, "UNPLUGGED_INACCESSIBLE", "VIRTIO_MEM_F_UNPLUGGED_INACCESSIBLE", "", "uapi-6.1"),
    ],
    "input": [], "pmem": [], "crypto": [], "sound": [],
}

# Names a bit had in older headers (the seed quotes the 3.x virtio_blk.h)
OLD_NAMES: dict[tuple[str, int], str] = {
    ("block", 9): "WCE",
    ("block", 8): "IDENTIFY",
    ("transport", 33): "IOMMU_PLATFORM",
}

# virtio status byte (virtio_config.h)
STATUS_BITS = [(1, "ACKNOWLEDGE"), (2, "DRIVER"), (4, "DRIVER_OK"), (8, "FEATURES_OK"),
               (0x40, "NEEDS_RESET"), (0x80, "FAILED")]

# block attributes we record (relative to /sys/block/<disk>/)
BLOCK_ATTRS = ("cache_type", "serial", "size", "ro")
QUEUE_ATTRS = ("write_cache", "fua", "nr_requests", "max_segments", "max_segment_size",
               "max_hw_sectors_kb", "max_sectors_kb", "logical_block_size",
               "physical_block_size", "minimum_io_size", "optimal_io_size",
               "discard_max_hw_bytes", "write_zeroes_max_bytes", "rotational", "scheduler")
DEVICE_ATTRS = ("device", "vendor", "status", "features")


# ---------------------------------------------------------------------------
# decoding
# ---------------------------------------------------------------------------
def device_type(device_id) -> str:
    """'block' for 2, '0x0002' or 'block'; 'unknown-<id>' for ids we don't know."""
    if isinstance(device_id, str):
        s = device_id.strip().lower()
        if s in DEVICE_BITS or s in DEVICE_IDS.values():
            return s
        try:
            device_id = int(s, 0)
        except ValueError:
            raise ParameterError(f"device {device_id!r} is neither a virtio device id nor a type name") from None
    return DEVICE_IDS.get(int(device_id), f"unknown-{int(device_id)}")


def parse_bits(features: str) -> list[int]:
    """Set bit numbers of a sysfs feature string (bit 0 first), any length."""
    s = (features or "").strip()
    bad = set(s) - {"0", "1"}
    if bad:
        raise ParameterError(f"a virtio feature string has only 0 and 1, got {''.join(sorted(bad))!r}")
    return [i for i, c in enumerate(s) if c == "1"]


def to_int(features: str) -> int:
    """The feature word as an integer (bit i of the string is 1 << i)."""
    return sum(1 << b for b in parse_bits(features))


def to_string(bits, length: int = 64) -> str:
    """The inverse of parse_bits: a sysfs-style string of `length` characters."""
    bits = set(bits)
    if bits and max(bits) >= length:
        raise ParameterError(f"bit {max(bits)} does not fit in {length} characters")
    return "".join("1" if i in bits else "0" for i in range(length))


@dataclass(frozen=True)
class Bit:
    bit: int
    name: str
    macro: str
    kind: str       # 'device', 'transport', 'reserved'
    known: bool
    note: str
    table_source: str   # which SOURCES entry named it
    old_name: str

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _kind(bit: int) -> str:
    if bit in TRANSPORT_RANGE:
        return "transport"
    if bit < 24 or 50 <= bit < 128:
        return "device"
    return "reserved"


def lookup(dtype: str, bit: int) -> Bit:
    """The name of one bit for a device type; an unknown bit gets UNKNOWN_<n>."""
    for b, name, macro, note, src in TRANSPORT_BITS:
        if b == bit:
            return Bit(bit, name, macro, "transport", True, note, src,
                       OLD_NAMES.get(("transport", bit), ""))
    for b, name, macro, note, src in DEVICE_BITS.get(dtype, []):
        if b == bit:
            return Bit(bit, name, macro, "device", True, note, src, OLD_NAMES.get((dtype, bit), ""))
    return Bit(bit, f"UNKNOWN_{bit}", "", _kind(bit), False,
               "not in this book's table for " + dtype, "", OLD_NAMES.get((dtype, bit), ""))


def decode(features: str, device) -> list[Bit]:
    """Every set bit of `features` for `device` (id or type), unknown ones included."""
    dtype = device_type(device)
    return [lookup(dtype, b) for b in parse_bits(features)]


def names(features: str, device) -> list[str]:
    return [b.name for b in decode(features, device)]


def decode_status(status) -> list[str]:
    v = int(status, 0) if isinstance(status, str) else int(status)
    out = [n for mask, n in STATUS_BITS if v & mask]
    rest = v & ~sum(m for m, _ in STATUS_BITS)
    if rest:
        out.append(f"0x{rest:x}")
    return out


def cache_type_from_features(features: str) -> str | None:
    """What virtio_blk's cache_type shows when it can be told from the bits alone.

    drivers/block/virtio_blk.c virtblk_get_cache_mode(): with CONFIG_WCE (11)
    negotiated the driver reads the 'wce' byte of the device config, which
    sysfs does not show, so None; otherwise write back iff FLUSH (9).
    """
    bits = set(parse_bits(features))
    if 11 in bits:
        return None
    return "write back" if 9 in bits else "write through"


def diff(a: str, b: str, device) -> dict[str, list[str]]:
    """Names of bits set in b but not a ('added') and in a but not b ('removed')."""
    sa, sb = set(parse_bits(a)), set(parse_bits(b))
    dtype = device_type(device)
    return {"added": [lookup(dtype, x).name for x in sorted(sb - sa)],
            "removed": [lookup(dtype, x).name for x in sorted(sa - sb)]}


def table_rows() -> list[dict]:
    """The whole bit table, one row per (device type, bit), for the book."""
    rows = [{"device_type": "(all)", "bit": b, "name": n, "macro": m, "kind": "transport",
             "note": note, "source": src, "old_name": OLD_NAMES.get(("transport", b), "")}
            for b, n, m, note, src in TRANSPORT_BITS]
    for dt, bits in DEVICE_BITS.items():
        rows += [{"device_type": dt, "bit": b, "name": n, "macro": m, "kind": "device",
                  "note": note, "source": src, "old_name": OLD_NAMES.get((dt, b), "")}
                 for b, n, m, note, src in bits]
    return rows


# ---------------------------------------------------------------------------
# sysfs snapshots: a flat {relative path: value} dump, from the host or a guest
# ---------------------------------------------------------------------------
SYSFS_VIRTIO = Path("/sys/bus/virtio/devices")


def _read(p: Path) -> str | None:
    try:
        return p.read_text().strip()
    except OSError:
        return None


def dump_sysfs(root: Path | str = SYSFS_VIRTIO) -> dict[str, str]:
    """Flat dump of what we decode, relative to /sys/bus/virtio/devices."""
    root = Path(root)
    out: dict[str, str] = {}
    if not root.is_dir():
        return out
    for dev in sorted(root.iterdir(), key=lambda p: _natural(p.name)):
        for a in DEVICE_ATTRS:
            v = _read(dev / a)
            if v is not None:
                out[f"{dev.name}/{a}"] = v
        drv = dev / "driver"
        if drv.exists():
            out[f"{dev.name}/driver"] = os.path.basename(os.readlink(drv))
        bdir = dev / "block"
        if bdir.is_dir():
            for disk in sorted(bdir.iterdir()):
                pre = f"{dev.name}/block/{disk.name}"
                for a in BLOCK_ATTRS:
                    v = _read(disk / a)
                    if v is not None:
                        out[f"{pre}/{a}"] = v
                for a in QUEUE_ATTRS:
                    v = _read(disk / "queue" / a)
                    if v is not None:
                        out[f"{pre}/queue/{a}"] = v
                mq = disk / "mq"
                if mq.is_dir():
                    out[f"{pre}/mq"] = str(len([x for x in mq.iterdir() if x.is_dir()]))
    return out


def dump_script() -> str:
    """The same dump as a busybox sh script (for a guest); prints 'path<TAB>value'."""
    q = " ".join(QUEUE_ATTRS)
    b = " ".join(BLOCK_ATTRS)
    d = " ".join(DEVICE_ATTRS)
    return f"""cd /sys/bus/virtio/devices || exit 3
for dev in *; do
  [ -d "$dev" ] || continue
  for a in {d}; do [ -r "$dev/$a" ] && printf '%s/%s\\t%s\\n' "$dev" "$a" "$(cat $dev/$a)"; done
  [ -e "$dev/driver" ] && printf '%s/driver\\t%s\\n' "$dev" "$(basename $(readlink $dev/driver))"
  for disk in $dev/block/*; do
    [ -d "$disk" ] || continue
    for a in {b}; do [ -r "$disk/$a" ] && printf '%s/%s\\t%s\\n' "$disk" "$a" "$(cat $disk/$a)"; done
    for a in {q}; do [ -r "$disk/queue/$a" ] && printf '%s/queue/%s\\t%s\\n' "$disk" "$a" "$(cat $disk/queue/$a)"; done
    [ -d "$disk/mq" ] && printf '%s/mq\\t%s\\n' "$disk" "$(ls -d $disk/mq/*/ | wc -l)"
  done
done
"""


def toggle_script() -> str:
    """busybox sh: try to flip each virtio disk's cache_type and put it back.

    Prints 'virtioN/block/vdX/cache_type_write<TAB>ok|denied<TAB>value after'.
    """
    return r"""cd /sys/bus/virtio/devices || exit 3
for disk in */block/*; do
  [ -w "$disk/cache_type" ] || { printf '%s/cache_type_write\tdenied\t%s\n' "$disk" "$(cat $disk/cache_type)"; continue; }
  old=$(cat $disk/cache_type)
  if [ "$old" = "write back" ]; then new="write through"; else new="write back"; fi
  if echo "$new" > $disk/cache_type 2>/dev/null; then r=ok; else r=denied; fi
  after=$(cat $disk/cache_type)
  echo "$old" > $disk/cache_type 2>/dev/null
  printf '%s/cache_type_write\t%s\t%s\n' "$disk" "$r" "$after"
done
"""


def parse_dump(text: str) -> dict[str, str]:
    """'path<TAB>value' lines back into a dict (the guest side of dump_sysfs)."""
    out = {}
    for line in text.splitlines():
        if "\t" not in line:
            continue
        k, v = line.split("\t", 1)
        out[k.strip()] = v.strip()
    return out


def _natural(s: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def devices_from_dump(dump: dict[str, str]) -> list[dict]:
    """One record per virtio device of a dump, decoded."""
    names_ = sorted({k.split("/", 1)[0] for k in dump}, key=_natural)
    rows = []
    for n in names_:
        feats = dump.get(f"{n}/features", "")
        dev_id = dump.get(f"{n}/device")
        dtype = device_type(dev_id) if dev_id else "unknown"
        try:
            bits = decode(feats, dtype) if feats else []
            err = ""
        except ParameterError as e:
            bits, err = [], str(e)
        rows.append({
            "device": n, "device_id": int(dev_id, 0) if dev_id else None, "type": dtype,
            "vendor": dump.get(f"{n}/vendor"), "driver": dump.get(f"{n}/driver", ""),
            "status": dump.get(f"{n}/status"),
            "status_flags": "|".join(decode_status(dump[f"{n}/status"])) if dump.get(f"{n}/status") else "",
            "features": feats, "n_chars": len(feats), "n_set": len(bits),
            "names": " ".join(b.name for b in bits),
            "unknown_bits": " ".join(str(b.bit) for b in bits if not b.known),
            "decode_error": err,
        })
    return rows


def bits_from_dump(dump: dict[str, str]) -> list[dict]:
    """Tidy rows: one per (device, set bit)."""
    rows = []
    for d in devices_from_dump(dump):
        if d["decode_error"] or not d["features"]:
            continue
        for b in decode(d["features"], d["type"]):
            rows.append({"device": d["device"], "type": d["type"], **b.as_dict()})
    return rows


def blocks_from_dump(dump: dict[str, str]) -> list[dict]:
    """One record per virtio block disk: cache_type, write_cache, queues, limits."""
    rows = []
    disks = sorted({tuple(k.split("/")[:3]) for k in dump if "/block/" in k}, key=lambda t: _natural(t[0]))
    for dev, _, disk in disks:
        pre = f"{dev}/block/{disk}"
        feats = dump.get(f"{dev}/features", "")
        bits = set(parse_bits(feats)) if feats else set()
        row = {"device": dev, "disk": disk, "serial": dump.get(f"{pre}/serial", ""),
               "cache_type": dump.get(f"{pre}/cache_type"),
               "flush": 9 in bits, "config_wce": 11 in bits, "mq_feature": 12 in bits,
               "nr_queues": int(dump[f"{pre}/mq"]) if dump.get(f"{pre}/mq") else None,
               "size_sectors": _int(dump.get(f"{pre}/size")),
               "ro": _int(dump.get(f"{pre}/ro"))}
        for a in QUEUE_ATTRS:
            v = dump.get(f"{pre}/queue/{a}")
            row[a] = _int(v) if a not in ("write_cache", "scheduler") else v
        exp = cache_type_from_features(feats) if feats else None
        row["cache_type_rule"] = ("config wce byte (CONFIG_WCE)" if 11 in bits
                                  else "FLUSH bit (no CONFIG_WCE)")
        row["cache_type_expected"] = exp
        row["cache_type_consistent"] = (None if exp is None or row["cache_type"] is None
                                        else exp == row["cache_type"])
        tw = dump.get(f"{pre}/cache_type_write")
        if tw:
            r, _, after = tw.partition("\t")
            row["cache_type_write"], row["cache_type_after_write"] = r, after
        rows.append(row)
    return rows


def _int(v):
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        return v


# ===========================================================================
# The chapter: snapshot this host, boot tiny guests with chosen virtio-blk
# options, store the raw sysfs dumps; the notebook decodes them with the
# functions above.
# ===========================================================================
CHAPTER = "virtio_features"
TITLE = "virtio feature bits decoded from sysfs, on this host and inside guests"

# Guest disk configurations: name -> DiskSpec keyword arguments. Every disk is
# a virtio-blk-pci device of QEMU; what changes is what QEMU offers.
GUEST_CONFIGS: dict[str, dict] = {
    "default": {},
    "cache=none": {"cache": "none"},
    "cache=writethrough": {"cache": "writethrough"},
    "cache=directsync": {"cache": "directsync"},
    "cache=unsafe": {"cache": "unsafe"},
    "write-cache=off": {"write_cache": False},
    "config-wce=off": {"config_wce": False},
    "writethrough+config-wce=off": {"cache": "writethrough", "config_wce": False},
    "write-cache=off+config-wce=off": {"write_cache": False, "config_wce": False},
    "legacy": {"disable_modern": True},
    "legacy+scsi=on": {"disable_modern": True, "scsi": True},
    "packed=on": {"packed": True},
    "event_idx=off": {"event_idx": False},
    "indirect_desc=off": {"indirect_desc": False},
    "discard+write-zeroes=off": {"discard": False, "write_zeroes": False},
    # these go into a 2-vCPU guest: num-queues defaults to the vCPU count
    "smp2:default": {},
    "smp2:num-queues=1": {"num_queues": 1},
    "smp2:num-queues=2": {"num_queues": 2},
}

PROFILES = {
    "quick": {"guest": True, "configs": "default,writethrough+config-wce=off,legacy+scsi=on,packed=on",
              "accel": "auto", "kvm_boot_timeout": 8.0, "boot_timeout": 90.0, "separate_boots": False},
    "default": {"guest": True, "configs": "all", "accel": "auto", "kvm_boot_timeout": 10.0,
                "boot_timeout": 150.0, "separate_boots": False},
    "full": {"guest": True, "configs": "all", "accel": "auto", "kvm_boot_timeout": 20.0,
             "boot_timeout": 180.0, "separate_boots": True},
}


def params(profile: str = "default", **overrides) -> dict:
    if profile not in PROFILES:
        raise ParameterError(f"profile must be one of {tuple(PROFILES)}, got {profile!r}")
    p = dict(PROFILES[profile])
    for k, v in overrides.items():
        if v is None:
            continue
        if k not in p:
            raise ParameterError(f"unknown parameter {k!r}; known: {', '.join(sorted(p))}")
        p[k] = v
    if not isinstance(p["guest"], bool):
        raise ParameterError("guest must be True or False")
    from .guest import check_boot_params
    check_boot_params(p, 900)
    names_ = list(GUEST_CONFIGS) if p["configs"] == "all" else \
        [c.strip() for c in str(p["configs"]).split(",") if c.strip()]
    unknown = [c for c in names_ if c not in GUEST_CONFIGS]
    if unknown or not names_:
        raise ParameterError(f"unknown guest config(s) {unknown or p['configs']!r}; "
                             f"known: all, {', '.join(GUEST_CONFIGS)}")
    p["config_list"] = names_
    p["separate_boots"] = bool(p["separate_boots"])
    return p


def preflight() -> list[str]:
    """The host snapshot needs only sysfs; without virtio devices and QEMU there is nothing."""
    if SYSFS_VIRTIO.is_dir() and any(SYSFS_VIRTIO.iterdir()):
        return []
    from . import guest
    g = guest.preflight()
    if not g:
        return []
    return [f"this host has no virtio devices in {SYSFS_VIRTIO} and no guest can run: {g[0]}"]


def _disk(name: str):
    from . import guest
    kw = GUEST_CONFIGS[name]
    label = re.sub(r"[^A-Za-z0-9_.-]", "-", name.replace("smp2:", ""))[:20].strip("-") or "d"
    return guest.DiskSpec(label=label, **kw)


def boot_plan(p: dict) -> list[tuple[int, list[str]]]:
    """[(cpus, [config names])] in boot order."""
    one = [c for c in p["config_list"] if not c.startswith("smp2:")]
    two = [c for c in p["config_list"] if c.startswith("smp2:")]
    if p["separate_boots"]:
        return [(1, [c]) for c in one] + [(2, [c]) for c in two]
    return ([(1, one)] if one else []) + ([(2, two)] if two else [])


def _host_rows() -> list[dict]:
    dump = dump_sysfs()
    rows = []
    for k, v in dump.items():
        if k.endswith("/serial"):
            v = "(redacted)"  # a host disk serial can identify the machine
        rows.append({"source": "host", "boot": -1, "path": k, "value": v})
    return rows


def collect(data_dir=None, profile: str = "default", **overrides):
    import pandas as pd
    from . import guest
    from .dataset import DatasetWriter
    from .lock import measure_lock
    from .paths import data_dir as default_data_dir
    from .progress import Progress

    from .errors import MissingPrerequisite
    p = params(profile, **overrides)
    reasons = preflight()
    if reasons:
        raise MissingPrerequisite(reasons[0])
    data = Path(data_dir) if data_dir else default_data_dir()
    plan = boot_plan(p) if p["guest"] else []
    public = {**{k: v for k, v in p.items() if k != "config_list"}, "profile": profile}
    with DatasetWriter(CHAPTER, data, public) as w, measure_lock(f"{CHAPTER} collect"):
        w.extra["_tool_cmds"] = {"qemu": [guest.QEMU, "--version"]}
        w.extra["decoder_sources"] = SOURCES
        prog = Progress(CHAPTER, 1 + len(plan))
        sysfs_rows = _host_rows()
        prog.step(f"host snapshot: {len({r['path'].split('/')[0] for r in sysfs_rows})} virtio devices")
        if not sysfs_rows:
            w.skip("host", f"this host has no virtio devices in {SYSFS_VIRTIO}")
        cfg_rows, boot_rows = [], []
        if not p["guest"]:
            w.skip("guests", "guest=False was asked for")
        elif (g := guest.preflight()):
            w.skip("guests", g[0])
        else:
            script = dump_script() + toggle_script()
            runner = guest.Runner(accel=p["accel"], kvm_boot_timeout=p["kvm_boot_timeout"],
                                  timeout=p["boot_timeout"], progress=prog.note)
            import contextlib
            try:
                runner.__enter__()  # fetches/builds the guest kernel once
            except MissingPrerequisite as e:  # e.g. Debian's kernel package can't be fetched
                w.skip("guests", str(e))
                plan = []
            with (runner if runner.scratch is not None else contextlib.nullcontext()):
                w.extra["guest_artefacts"] = {k: v for k, v in (runner.artefacts or {}).items()
                                              if k != "dir"}
                for bi, (cpus, cfgs) in enumerate(plan):
                    disks = [_disk(c) for c in cfgs]
                    gc = guest.GuestConfig(disks=disks, cpus=cpus, rng=True, balloon=True)
                    res = runner.run(script, gc)
                    if res.rc != 0:
                        raise PerfbookError(f"the guest script failed with status {res.rc} (boot {bi})")
                    for k, v in parse_dump(res.output).items():
                        sysfs_rows.append({"source": "guest", "boot": bi, "path": k, "value": v})
                    for c, d in zip(cfgs, disks):
                        cfg_rows.append({"boot": bi, "config": c, "serial": d.label, "cpus": cpus,
                                         "qemu_options": d.describe(), **{f"opt_{k}": v for k, v in
                                                                          GUEST_CONFIGS[c].items()}})
                    boot_rows.append({"boot": bi, "cpus": cpus, "n_disks": len(disks),
                                      "accel": res.accel, "accel_note": res.accel_note,
                                      "boot_seconds": res.boot_seconds,
                                      "total_seconds": res.total_seconds, "rc": res.rc,
                                      "guest_kernel": res.kernel, "qemu_version": res.qemu_version,
                                      "qemu_cmdline": " ".join(
                                          re.sub(r"/(?:[^/\s,=]+/)*guest-\d+-[^/]+/run-[^/]+/", "SCRATCH/",
                                                 a.replace(str(guest.guest_root()), "build/guest"))
                                          for a in res.cmdline[1:])})
                    prog.step(f"boot {bi + 1}/{len(plan)}: {res.accel}, {len(disks)} disk(s), "
                              f"{res.total_seconds:.1f} s")
        w.add_table("sysfs", pd.DataFrame(sysfs_rows, columns=["source", "boot", "path", "value"]))
        if cfg_rows:
            w.add_table("configs", pd.DataFrame(cfg_rows))
            w.add_table("boots", pd.DataFrame(boot_rows))
    return w.dest


# ---------------------------------------------------------------------------
# analysis helpers for the notebook (from committed data)
# ---------------------------------------------------------------------------
def dumps_by_column(sysfs, configs=None, boots=None) -> list[dict]:
    """Split the tidy sysfs table into per-(host, run, source, boot) dumps and label them."""
    out = []
    if sysfs is None or sysfs.empty:
        return out
    for (host, run, source, boot), g in sysfs.groupby(["host_id", "run_id", "source", "boot"], sort=True):
        dump = dict(zip(g["path"], g["value"].fillna("").astype(str)))
        out.append({"host_id": host, "run_id": run, "source": source, "boot": int(boot), "dump": dump})
    return out


def decoded_tables(sysfs, configs=None, boots=None):
    """(devices, bits, blocks) DataFrames, labelled with source/config/accel."""
    import pandas as pd
    dev_rows, bit_rows, blk_rows = [], [], []
    cfg_by_serial = {}
    if configs is not None and not configs.empty:
        for r in configs.to_dict("records"):
            cfg_by_serial[(r["host_id"], r["run_id"], int(r["boot"]), str(r["serial"]))] = r["config"]
    accel = {}
    if boots is not None and not boots.empty:
        for r in boots.to_dict("records"):
            accel[(r["host_id"], r["run_id"], int(r["boot"]))] = r["accel"]
    for d in dumps_by_column(sysfs):
        key = (d["host_id"], d["run_id"], d["boot"])
        base = {"host_id": d["host_id"], "run_id": d["run_id"], "source": d["source"],
                "boot": d["boot"], "accel": accel.get(key, "" if d["source"] == "guest" else "host")}
        blocks = blocks_from_dump(d["dump"])
        serial_of = {b["device"]: str(b["serial"]) for b in blocks}
        for r in devices_from_dump(d["dump"]):
            cfg = cfg_by_serial.get(key + (serial_of.get(r["device"], ""),), "")
            dev_rows.append({**base, "config": cfg, **r})
        for r in bits_from_dump(d["dump"]):
            cfg = cfg_by_serial.get(key + (serial_of.get(r["device"], ""),), "")
            bit_rows.append({**base, "config": cfg, **r})
        for r in blocks:
            cfg = cfg_by_serial.get(key + (str(r["serial"]),), "")
            blk_rows.append({**base, "config": cfg, **r})
    return pd.DataFrame(dev_rows), pd.DataFrame(bit_rows), pd.DataFrame(blk_rows)


def load_seed_strings(data_dir=None):
    """data/reference/virtio_features.csv with every column as text.

    tools.dataset.load_reference lets pandas guess types, which would turn a
    feature string into a number and drop its leading zeros (bits 0 and 1).
    """
    import pandas as pd
    from .errors import DatasetError
    from .paths import reference_dir
    p = reference_dir(data_dir) / f"{CHAPTER}.csv"
    if not p.is_file():  # a scratch data_dir (tests) has runs only: use the committed one
        p = reference_dir() / f"{CHAPTER}.csv"
    if not p.is_file():
        raise DatasetError(f"reference table {p} is missing")
    return pd.read_csv(p, dtype=str, keep_default_na=False)


def newest_host_rows(df, manifests):
    """Rows of `df` (host_id/run_id columns) from the dataset shown for each host
    (tools.dataset.only_shown, with the chapter's newest dataset for its own host)."""
    from .dataset import newest, only_shown
    return only_shown(df, manifests, newest(manifests))


def host_bit_diff(bits, manifests, source: str = "host"):
    """Per device type, the negotiated bits each host has that the first (sorted) host lacks,
    and the reverse, from each host's newest dataset. Feature strings are exact readouts, so
    this is a set difference, not a statistical test. Empty with fewer than two hosts."""
    import pandas as pd
    b = newest_host_rows(bits, manifests)
    b = b[b["source"] == source] if b is not None and not b.empty else b
    if b is None or b.empty or b["host_id"].nunique() < 2:
        return pd.DataFrame(columns=["host_id", "baseline", "type", "only on this host",
                                     "only on the baseline"])
    hosts_ = sorted(b["host_id"].unique())
    base = hosts_[0]
    per = {h: {t: set(g["name"]) for t, g in b[b["host_id"] == h].groupby("type")} for h in hosts_}
    rows = []
    for h in hosts_[1:]:
        for t in sorted(set(per[h]) | set(per[base])):
            mine, theirs = per[h].get(t), per[base].get(t)
            rows.append({"host_id": h, "baseline": base, "type": t,
                         "only on this host": "(no such device)" if mine is None else
                         " ".join(sorted(mine - (theirs or set()))) or "-",
                         "only on the baseline": "(no such device)" if theirs is None else
                         " ".join(sorted(theirs - (mine or set()))) or "-"})
    return pd.DataFrame(rows)
