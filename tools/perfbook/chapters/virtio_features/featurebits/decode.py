"""virtio_features: the decoder (feature strings -> named bits; pure functions).

The names come from the tables in bits.py; a bit that no table names is reported as
UNKNOWN_<n>, never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfbook.core.errors import ParameterError

from .bits import DEVICE_BITS, DEVICE_IDS, OLD_NAMES, STATUS_BITS, TRANSPORT_BITS, TRANSPORT_RANGE


def device_type(device_id) -> str:
    """'block' for 2, '0x0002' or 'block'; 'unknown-<id>' for ids we don't know."""
    if isinstance(device_id, str):
        s = device_id.strip().lower()
        if s in DEVICE_BITS or s in DEVICE_IDS.values():
            return s
        try:
            device_id = int(s, 0)
        except ValueError:
            raise ParameterError(
                f"device {device_id!r} is neither a virtio device id nor a type name"
            ) from None
    return DEVICE_IDS.get(int(device_id), f"unknown-{int(device_id)}")


def parse_bits(features: str) -> list[int]:
    """Set bit numbers of a sysfs feature string (bit 0 first), any length."""
    s = (features or "").strip()
    bad = set(s) - {"0", "1"}
    if bad:
        raise ParameterError(
            f"a virtio feature string has only 0 and 1, got {''.join(sorted(bad))!r}"
        )
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
    kind: str  # 'device', 'transport', 'reserved'
    known: bool
    note: str
    table_source: str  # which SOURCES entry named it
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
            return Bit(
                bit,
                name,
                macro,
                "transport",
                True,
                note,
                src,
                OLD_NAMES.get(("transport", bit), ""),
            )
    for b, name, macro, note, src in DEVICE_BITS.get(dtype, []):
        if b == bit:
            return Bit(bit, name, macro, "device", True, note, src, OLD_NAMES.get((dtype, bit), ""))
    return Bit(
        bit,
        f"UNKNOWN_{bit}",
        "",
        _kind(bit),
        False,
        "not in this book's table for " + dtype,
        "",
        OLD_NAMES.get((dtype, bit), ""),
    )


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
    return {
        "added": [lookup(dtype, x).name for x in sorted(sb - sa)],
        "removed": [lookup(dtype, x).name for x in sorted(sa - sb)],
    }


def table_rows() -> list[dict]:
    """The whole bit table, one row per (device type, bit), for the book."""
    rows = [
        {
            "device_type": "(all)",
            "bit": b,
            "name": n,
            "macro": m,
            "kind": "transport",
            "note": note,
            "source": src,
            "old_name": OLD_NAMES.get(("transport", b), ""),
        }
        for b, n, m, note, src in TRANSPORT_BITS
    ]
    for dt, bits in DEVICE_BITS.items():
        rows += [
            {
                "device_type": dt,
                "bit": b,
                "name": n,
                "macro": m,
                "kind": "device",
                "note": note,
                "source": src,
                "old_name": OLD_NAMES.get((dt, b), ""),
            }
            for b, n, m, note, src in bits
        ]
    return rows
