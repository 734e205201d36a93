"""A small read-only qcow2 metadata reader (header, L1/L2, refcounts, snapshots).

Written from the format description in QEMU's docs/interop/qcow2.txt; it reads
only what the overlap-check chapter needs: where the metadata clusters are and
how many there are of each kind. All numbers in qcow2 are big-endian.

    img = Qcow2Image("/var/tmp/x.qcow2")
    img.header.cluster_size, img.l1_table(), img.refcount(cluster_index)
    img.metadata_clusters()   # {kind: sorted host cluster indices}
    img.metadata_summary()    # counts per kind, runs, sizes

It never writes; it opens the file read-only and refuses anything that is not
a qcow2 v2/v3 image with a clear ValueError.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"QFI\xfb"
L1E_OFFSET_MASK = 0x00FFFFFFFFFFFE00
L2E_OFFSET_MASK = 0x00FFFFFFFFFFFE00
REFT_OFFSET_MASK = 0xFFFFFFFFFFFFFE00
OFLAG_COPIED = 1 << 63
OFLAG_COMPRESSED = 1 << 62
OFLAG_ZERO = 1
INCOMPAT_EXTL2 = 1 << 4
SUBCLUSTERS = 32  # per standard cluster with extended L2 entries

# metadata kinds, in the order qcow2_check_metadata_overlap tests them
KINDS = (
    "header",
    "active_l1",
    "refcount_table",
    "snapshot_table",
    "inactive_l1",
    "active_l2",
    "refcount_block",
    "inactive_l2",
)


@dataclass(frozen=True)
class Header:
    version: int
    backing_file_offset: int
    backing_file_size: int
    cluster_bits: int
    size: int
    crypt_method: int
    l1_size: int
    l1_table_offset: int
    refcount_table_offset: int
    refcount_table_clusters: int
    nb_snapshots: int
    snapshots_offset: int
    incompatible_features: int = 0
    compatible_features: int = 0
    autoclear_features: int = 0
    refcount_order: int = 4
    header_length: int = 72

    @property
    def cluster_size(self) -> int:
        return 1 << self.cluster_bits

    @property
    def extended_l2(self) -> bool:
        """Incompatible feature bit 4: 128-bit L2 entries with a subcluster bitmap."""
        return bool(self.incompatible_features & INCOMPAT_EXTL2)

    @property
    def l2_entries(self) -> int:
        """Entries per L2 table (8 bytes each; 16 with extended L2, bit 4)."""
        entry = 16 if self.extended_l2 else 8
        return self.cluster_size // entry

    @property
    def refcount_bits(self) -> int:
        return 1 << self.refcount_order

    @property
    def refblock_entries(self) -> int:
        return self.cluster_size * 8 // self.refcount_bits


@dataclass(frozen=True)
class Snapshot:
    l1_table_offset: int
    l1_size: int
    id: str
    name: str
    vm_state_size: int
    entry_offset: int
    entry_size: int


class Qcow2Image:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        with open(self.path, "rb") as f:
            raw = f.read(112)
        self.header = parse_header(raw, str(self.path))
        self._rt: list[int] | None = None

    # -- low level ------------------------------------------------------------
    def _pread(self, offset: int, length: int) -> bytes:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            chunks, done = [], 0
            while done < length:
                b = os.pread(fd, length - done, offset + done)
                if not b:
                    raise ValueError(
                        f"{self.path}: truncated at byte {offset + done} "
                        f"(wanted {length} bytes at {offset})"
                    )
                chunks.append(b)
                done += len(b)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def _u64_table(self, offset: int, count: int) -> list[int]:
        if count == 0:
            return []
        return list(struct.unpack(f">{count}Q", self._pread(offset, 8 * count)))

    # -- tables ----------------------------------------------------------------
    def l1_table(self) -> list[int]:
        return self._u64_table(self.header.l1_table_offset, self.header.l1_size)

    def refcount_table(self) -> list[int]:
        h = self.header
        return self._u64_table(
            h.refcount_table_offset, h.refcount_table_clusters * h.cluster_size // 8
        )

    def l2_table(self, l2_offset: int) -> list[int]:
        """The L2 entries' first 64 bits (the subcluster bitmaps of extended
        L2 entries are skipped; guest_status() reads them)."""
        h = self.header
        raw = self._u64_table(l2_offset, h.cluster_size // 8)
        return raw[::2] if h.extended_l2 else raw

    def snapshots(self) -> list[Snapshot]:
        h = self.header
        out, off = [], h.snapshots_offset
        for _ in range(h.nb_snapshots):
            fixed = self._pread(off, 40)
            (l1_off, l1_size, id_len, name_len, _ds, _dns, _vmclock, vm_state, extra_len) = (
                struct.unpack(">QIHHIIQII", fixed)
            )
            var = self._pread(off + 40, extra_len + id_len + name_len)
            sid = var[extra_len : extra_len + id_len].decode("utf-8", "replace")
            name = var[extra_len + id_len :].decode("utf-8", "replace")
            size = 40 + extra_len + id_len + name_len
            size += (-size) % 8  # entries are padded to a multiple of 8 bytes
            out.append(Snapshot(l1_off, l1_size, sid, name, vm_state, off, size))
            off += size
        return out

    def refcount(self, cluster_index: int) -> int:
        """Refcount of host cluster `cluster_index` (0 if its refblock is absent)."""
        h = self.header
        per = h.refblock_entries
        rt_index, blk_index = divmod(cluster_index, per)
        rt = self._reftable_cached()
        if rt_index >= len(rt):
            return 0
        blk_off = rt[rt_index] & REFT_OFFSET_MASK
        if not blk_off:
            return 0
        bits = h.refcount_bits
        if bits >= 8:
            width = bits // 8
            raw = self._pread(blk_off + blk_index * width, width)
            return int.from_bytes(raw, "big")
        bit = blk_index * bits
        byte = self._pread(blk_off + bit // 8, 1)[0]
        return (byte >> (bit % 8)) & ((1 << bits) - 1)

    def _reftable_cached(self) -> list[int]:
        if self._rt is None:
            self._rt = self.refcount_table()
        return self._rt

    def guest_to_host(self, guest_offset: int) -> int | None:
        """Host offset of a guest byte, None unless it reads data from this file.

        None for unallocated bytes and for bytes that read as zeros (the zero flag
        of a standard L2 entry, or the "reads as zero" bit of an extended L2
        entry's subcluster, even where the host cluster stays allocated), and
        for compressed clusters (no plain host offset).
        """
        kind, host = self.guest_status(guest_offset)
        return host if kind == "data" else None

    def guest_status(self, guest_offset: int) -> tuple[str, int | None]:
        """How a guest byte reads: ("data", host offset), ("zero", None),
        ("unallocated", None) or ("compressed", None).

        With extended L2 entries (incompatible feature bit 4) each standard
        cluster is 32 subclusters; the entry's second 64 bits hold their
        allocation bits (0-31) and "reads as zero" bits (32-63), bit x for
        subcluster x (docs/interop/qcow2.txt, "Extended L2 Entries").
        """
        h = self.header
        if not 0 <= guest_offset < h.size:
            raise ValueError(f"guest offset {guest_offset} outside the {h.size}-byte disk")
        l2_bits = h.l2_entries.bit_length() - 1
        l1_index = guest_offset >> (h.cluster_bits + l2_bits)
        l2_index = (guest_offset >> h.cluster_bits) & (h.l2_entries - 1)
        if l1_index >= h.l1_size:
            return "unallocated", None
        l1e = self._u64_table(h.l1_table_offset + 8 * l1_index, 1)[0]
        l2_off = l1e & L1E_OFFSET_MASK
        if not l2_off:
            return "unallocated", None
        in_cluster = guest_offset & (h.cluster_size - 1)
        if h.extended_l2:
            l2e, bitmap = struct.unpack(">QQ", self._pread(l2_off + 16 * l2_index, 16))
            if l2e & OFLAG_COMPRESSED:
                return "compressed", None
            sc = in_cluster // (h.cluster_size // SUBCLUSTERS)
            host = l2e & L2E_OFFSET_MASK
            if bitmap & (1 << sc) and host:
                return "data", host + in_cluster
            if bitmap & (1 << (32 + sc)):
                return "zero", None
            return "unallocated", None
        l2e = struct.unpack(">Q", self._pread(l2_off + 8 * l2_index, 8))[0]
        if l2e & OFLAG_COMPRESSED:
            return "compressed", None
        if l2e & OFLAG_ZERO:
            return "zero", None  # reads as zeros even if a host cluster is kept
        host = l2e & L2E_OFFSET_MASK
        if not host:
            return "unallocated", None
        return "data", host + in_cluster

    # -- the metadata map ----------------------------------------------------------
    def metadata_clusters(self) -> dict[str, list[int]]:
        """Host cluster indices of every metadata structure, per kind.

        inactive_l2 holds the L2 tables referenced only by snapshots (tables
        shared with the active L1 are counted once, as active_l2).
        """
        h = self.header
        cs, bits = h.cluster_size, h.cluster_bits

        def span(offset: int, nbytes: int) -> list[int]:
            if nbytes <= 0:
                return []
            return list(range(offset >> bits, (offset + nbytes - 1) // cs + 1))

        out: dict[str, list[int]] = {k: [] for k in KINDS}
        out["header"] = [0]
        out["active_l1"] = span(h.l1_table_offset, 8 * h.l1_size)
        out["refcount_table"] = span(h.refcount_table_offset, h.refcount_table_clusters * cs)
        active = {(e & L1E_OFFSET_MASK) >> bits for e in self.l1_table() if e & L1E_OFFSET_MASK}
        out["active_l2"] = sorted(active)
        out["refcount_block"] = sorted(
            {
                (e & REFT_OFFSET_MASK) >> bits
                for e in self._reftable_cached()
                if e & REFT_OFFSET_MASK
            }
        )
        snaps = self.snapshots()
        if snaps:
            total = sum(s.entry_size for s in snaps)
            out["snapshot_table"] = span(h.snapshots_offset, total)
        inactive_l1, inactive_l2 = set(), set()
        for s in snaps:
            inactive_l1.update(span(s.l1_table_offset, 8 * s.l1_size))
            for e in self._u64_table(s.l1_table_offset, s.l1_size):
                c = (e & L1E_OFFSET_MASK) >> bits
                if c and c not in active:
                    inactive_l2.add(c)
        out["inactive_l1"] = sorted(inactive_l1)
        out["inactive_l2"] = sorted(inactive_l2)
        return out

    def metadata_summary(self) -> dict:
        """Counts per kind, the number of contiguous runs, and the file's sizes."""
        h = self.header
        m = self.metadata_clusters()
        st = os.stat(self.path)
        allc = sorted(set().union(*map(set, m.values())))
        out = {f"n_{k}": len(v) for k, v in m.items()}
        out.update(
            {
                "cluster_size": h.cluster_size,
                "virtual_size": h.size,
                "file_size": st.st_size,
                "disk_usage": st.st_blocks * 512,
                "l1_size": h.l1_size,
                "refcount_bits": h.refcount_bits,
                "nb_snapshots": h.nb_snapshots,
                "n_metadata": len(allc),
                # L2 tables + refcount blocks: what the seed's formula counts
                "n_formula_scope": len(m["active_l2"])
                + len(m["inactive_l2"])
                + len(m["refcount_block"]),
                "metadata_runs": _runs(allc),
                "formula_scope_runs": _runs(sorted(set(m["active_l2"]) | set(m["inactive_l2"])))
                + _runs(m["refcount_block"]),
            }
        )
        return out


def _runs(sorted_indices: list[int]) -> int:
    """How many maximal runs of consecutive integers a sorted list holds."""
    runs, prev = 0, None
    for c in sorted_indices:
        if prev is None or c != prev + 1:
            runs += 1
        prev = c
    return runs


def parse_header(raw: bytes, what: str = "image") -> Header:
    if len(raw) < 72 or raw[:4] != MAGIC:
        raise ValueError(f"{what} is not a qcow2 image (no QFI\\xfb magic)")
    (
        version,
        backing_off,
        backing_size,
        cluster_bits,
        size,
        crypt,
        l1_size,
        l1_off,
        rt_off,
        rt_clusters,
        nb_snap,
        snap_off,
    ) = struct.unpack(">IQIIQIIQQIIQ", raw[4:72])
    if version not in (2, 3):
        raise ValueError(f"{what}: qcow2 version {version} is not supported (2 or 3)")
    if not 9 <= cluster_bits <= 21:
        raise ValueError(f"{what}: cluster_bits {cluster_bits} is outside 9..21")
    extra = {}
    if version == 3:
        if len(raw) < 104:
            raise ValueError(f"{what}: v3 header is truncated")
        inc, comp, auto, rorder, hlen = struct.unpack(">QQQII", raw[72:104])
        extra = dict(
            incompatible_features=inc,
            compatible_features=comp,
            autoclear_features=auto,
            refcount_order=rorder,
            header_length=hlen,
        )
    return Header(
        version,
        backing_off,
        backing_size,
        cluster_bits,
        size,
        crypt,
        l1_size,
        l1_off,
        rt_off,
        rt_clusters,
        nb_snap,
        snap_off,
        **extra,
    )


def formula_clusters(image_size: float, cluster_size: int) -> float:
    """The seed's worst case: (2 + 8) * IS / CS^2 metadata clusters (16-bit refcounts)."""
    return 10.0 * image_size / (cluster_size * cluster_size)


def formula_bytes(image_size: float, cluster_size: int) -> float:
    """The seed's RAM estimate for the metadata list: 4 bytes per metadata cluster."""
    return 4.0 * formula_clusters(image_size, cluster_size)
