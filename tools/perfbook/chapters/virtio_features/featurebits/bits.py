"""virtio_features: the bit tables, to decode virtio feature bits as Linux shows them in sysfs.

``/sys/bus/virtio/devices/virtioN/features`` is one character per feature bit,
**bit 0 first** (drivers/virtio/virtio.c, features_show). It holds the
*negotiated* set: what the device offered AND what the driver accepted, plus
the transport bits the ring code kept. Its length is the width of the
kernel's feature word: 64 characters up to 6.16 (one u64), 128 since 6.17
(commit e7d4c1c5a546, "virtio: introduce extended features"; the bound is
VIRTIO_FEATURES_BITS = 2 * 64 in 6.18, VIRTIO_FEATURES_MAX when introduced;
this host's 6.18 prints 128). Older kernels printed 32 or 64. The decoder
takes any length.

The bit tables below are the only place this book names virtio feature bits.
Each entry says where the name comes from:

* ``uapi-6.1``: Debian's linux-libc-dev 6.1.187 headers,
  /usr/include/linux/virtio_{config,ring,blk,net,balloon,console,scsi,vsock,
  gpu,iommu,mem,9p}.h (Linux 6.1 uapi), read on this machine; a test checks the
  table against those headers when they are installed.
* ``upstream``: bits added after 6.1, read in the upstream uapi patches
  (virtio_config.h VIRTIO_F_NOTIFICATION_DATA/NOTIF_CONFIG_DATA/ADMIN_VQ,
  virtio_blk.h VIRTIO_BLK_F_ZONED, virtio_net.h DEVICE_STATS, VQ_NOTF_COAL,
  USO, GUEST_HDRLEN and the 65-68 UDP-tunnel GSO bits of the 128-bit series,
  virtio_mem.h VIRTIO_MEM_F_PERSISTENT_SUSPEND) and checked against the
  6.18.35 uapi headers: every named bit has the number the 6.18 header gives.
* ``spec-1.2``: the OASIS virtio 1.2 specification, section 6 (reserved
  feature bits) for the transport range.

Device ids are from include/uapi/linux/virtio_ids.h (uapi-6.1).
"""

from __future__ import annotations

SOURCES = {
    "uapi-6.1": "Linux 6.1 uapi headers, Debian linux-libc-dev 6.1.187-1 (/usr/include/linux/virtio_*.h)",
    "upstream": "upstream include/uapi/linux/virtio_{config,blk,net,mem,ids}.h additions after 6.1 (patch mails, 2022-2025; checked against the 6.18.35 headers)",
    "spec-1.2": "OASIS Virtual I/O Device (VIRTIO) Version 1.2, 6 Reserved Feature Bits",
}

# VIRTIO_ID_* (include/uapi/linux/virtio_ids.h, uapi-6.1; 45 from the 6.18 header)
DEVICE_IDS: dict[int, str] = {
    1: "net",
    2: "block",
    3: "console",
    4: "rng",
    5: "balloon",
    6: "iomem",
    7: "rpmsg",
    8: "scsi",
    9: "9p",
    10: "mac80211-wlan",
    11: "rproc-serial",
    12: "caif",
    13: "memory-balloon",
    16: "gpu",
    17: "clock",
    18: "input",
    19: "vsock",
    20: "crypto",
    21: "signal-dist",
    22: "pstore",
    23: "iommu",
    24: "mem",
    25: "sound",
    26: "fs",
    27: "pmem",
    28: "rpmb",
    29: "mac80211-hwsim",
    30: "video-encoder",
    31: "video-decoder",
    32: "scmi",
    33: "nitro-sec-mod",
    34: "i2c-adapter",
    35: "watchdog",
    36: "can",
    37: "dmabuf",
    38: "param-serv",
    39: "audio-policy",
    40: "bt",
    41: "gpio",
    45: "spi",
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
TRANSPORT_RANGE = range(24, 42)  # virtio 1.3: 24..41 (1.2: 24..40; bit 41, ADMIN_VQ, came with 1.3)

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
        (
            9,
            "FLUSH",
            "VIRTIO_BLK_F_FLUSH",
            "WCE in 3.x headers; not legacy in the spec (Linux's header files it under legacy)",
            "uapi-6.1",
        ),
        (10, "TOPOLOGY", "VIRTIO_BLK_F_TOPOLOGY", "", "uapi-6.1"),
        (
            11,
            "CONFIG_WCE",
            "VIRTIO_BLK_F_CONFIG_WCE",
            "writeback mode in config; not legacy in the spec (Linux's header files it under legacy)",
            "uapi-6.1",
        ),
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
        (
            65,
            "GUEST_UDP_TUNNEL_GSO",
            "VIRTIO_NET_F_GUEST_UDP_TUNNEL_GSO",
            "128-bit features",
            "upstream",
        ),
        (
            66,
            "GUEST_UDP_TUNNEL_GSO_CSUM",
            "VIRTIO_NET_F_GUEST_UDP_TUNNEL_GSO_CSUM",
            "128-bit features",
            "upstream",
        ),
        (
            67,
            "HOST_UDP_TUNNEL_GSO",
            "VIRTIO_NET_F_HOST_UDP_TUNNEL_GSO",
            "128-bit features",
            "upstream",
        ),
        (
            68,
            "HOST_UDP_TUNNEL_GSO_CSUM",
            "VIRTIO_NET_F_HOST_UDP_TUNNEL_GSO_CSUM",
            "128-bit features",
            "upstream",
        ),
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
        (2, "PERSISTENT_SUSPEND", "VIRTIO_MEM_F_PERSISTENT_SUSPEND", "", "upstream"),
    ],
    "input": [],
    "pmem": [],
    "crypto": [],
    "sound": [],
}

# Names a bit had in older headers (the seed quotes the 3.x virtio_blk.h)
OLD_NAMES: dict[tuple[str, int], str] = {
    ("block", 9): "WCE",
    ("block", 8): "IDENTIFY",
    ("transport", 33): "IOMMU_PLATFORM",
}

# virtio status byte (virtio_config.h)
STATUS_BITS = [
    (1, "ACKNOWLEDGE"),
    (2, "DRIVER"),
    (4, "DRIVER_OK"),
    (8, "FEATURES_OK"),
    (0x40, "NEEDS_RESET"),
    (0x80, "FAILED"),
]
