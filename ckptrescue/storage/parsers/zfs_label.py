"""ZFS vdev labels and uberblocks read without ZFS: which pool a member belongs to, whether it
was exported, on which host it was last imported, and when the pool last committed. Pure.

On-disk layout (OpenZFS ``include/sys/vdev_impl.h``, ``uberblock_impl.h``): four 256 KiB labels,
two at the front (offsets 0 and 256 KiB) and two at the end of the device (size rounded down to
256 KiB, minus 512 KiB and 256 KiB). In each label: 8 KiB pad, 8 KiB boot environment, then
112 KiB ``vdev_phys`` holding the configuration as a packed nvlist (XDR encoding), then a 128 KiB
ring of uberblocks, each in a slot of ``max(1 KiB, 2^ashift)`` bytes (at most 8 KiB).

The nvlist (``module/nvpair/nvpair.c``, XDR: big-endian, 4-byte units): a 4-byte header
(encoding 1 = XDR, endianness, 2 reserved), then ``version`` i32, ``flags`` u32 and pairs — each
``encoded size`` i32, ``decoded size`` i32, name (XDR string), ``type`` i32, ``nelem`` i32, value
— up to a pair whose sizes are both 0. Embedded nvlists (``vdev_tree``, ``children``) follow
the same form without the 4-byte header.

An uberblock: ``ub_magic`` 0x00bab10c (in the writer's byte order), ``ub_version``, ``ub_txg``,
``ub_guid_sum``, ``ub_timestamp`` (seconds), then the root block pointer. The active one is the
valid uberblock with the highest txg. Labels and uberblocks carry an embedded SHA-256 checksum
(``zio_eck_t`` in their last 40 bytes, verifier = their byte offset on the device): a label or
uberblock whose checksum does not verify is not trusted.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ckptrescue.model import JsonObject

LABEL_SIZE = 256 << 10
NVLIST_OFFSET = 16 << 10
NVLIST_SIZE = 112 << 10
UBERBLOCK_RING_OFFSET = 128 << 10
UBERBLOCK_RING_SIZE = 128 << 10
UB_MAGIC = 0x00BAB10C
ZEC_MAGIC = 0x0210DA7AB10C7A11  # zio_eck_t.zec_magic: an embedded checksum follows
POOL_STATES = {0: "ACTIVE", 1: "EXPORTED", 2: "DESTROYED", 3: "SPARE", 4: "L2CACHE",
               5: "UNINITIALIZED", 6: "UNAVAIL", 7: "POTENTIALLY_ACTIVE"}

ReadAt = Callable[[int, int], bytes]


class NvlistError(ValueError):
    """Not a packed XDR nvlist, or a truncated one."""


class _Xdr:
    def __init__(self, buf: bytes, pos: int = 0) -> None:
        self.buf, self.pos = buf, pos

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            raise NvlistError("truncated nvlist")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def i32(self) -> int:
        return int(struct.unpack(">i", self.take(4))[0])

    def u32(self) -> int:
        return int(struct.unpack(">I", self.take(4))[0])

    def u64(self) -> int:
        return int(struct.unpack(">Q", self.take(8))[0])

    def i64(self) -> int:
        return int(struct.unpack(">q", self.take(8))[0])

    def string(self) -> str:
        n = self.u32()
        if n > len(self.buf):
            raise NvlistError("string longer than the nvlist")
        raw = self.take((n + 3) & ~3)[:n]
        return raw.decode("utf-8", "replace")


# data types (include/sys/nvpair.h)
_BOOLEAN, _BYTE, _INT16, _UINT16, _INT32, _UINT32, _INT64, _UINT64, _STRING = range(1, 10)
_BYTE_ARRAY, _INT16_ARRAY, _UINT16_ARRAY, _INT32_ARRAY, _UINT32_ARRAY = range(10, 15)
_INT64_ARRAY, _UINT64_ARRAY, _STRING_ARRAY, _HRTIME, _NVLIST, _NVLIST_ARRAY = range(15, 21)
_BOOLEAN_VALUE, _INT8, _UINT8, _BOOLEAN_ARRAY, _INT8_ARRAY, _UINT8_ARRAY, _DOUBLE = range(21, 28)
_SMALL = {_BYTE, _INT16, _UINT16, _INT32, _UINT32, _BOOLEAN_VALUE, _INT8, _UINT8}
_SMALL_ARRAYS = {_INT16_ARRAY, _UINT16_ARRAY, _INT32_ARRAY, _UINT32_ARRAY, _BOOLEAN_ARRAY,
                 _INT8_ARRAY, _UINT8_ARRAY}


def _nvlist(x: _Xdr, depth: int = 0) -> dict[str, Any]:
    if depth > 32:
        raise NvlistError("nvlist nested too deep")
    x.i32()  # version
    x.u32()  # flags
    out: dict[str, Any] = {}
    while True:
        start = x.pos
        enc, dec = x.i32(), x.i32()
        if enc == 0 and dec == 0:
            return out
        if enc < 0 or start + enc > len(x.buf):
            raise NvlistError("bad nvpair size")
        name = x.string()
        kind, nelem = x.i32(), x.i32()
        if kind == _NVLIST:
            out[name] = _nvlist(x, depth + 1)
            continue
        if kind == _NVLIST_ARRAY:
            out[name] = [_nvlist(x, depth + 1) for _ in range(max(0, nelem))]
            continue
        out[name] = _value(x, kind, nelem)
        x.pos = start + enc  # the encoded size covers every non-embedded pair


def _value(x: _Xdr, kind: int, nelem: int) -> Any:
    if kind == _BOOLEAN:
        return True
    if kind in _SMALL:
        v = x.u32() if kind in {_UINT16, _UINT32, _UINT8, _BYTE} else x.i32()
        return bool(v) if kind == _BOOLEAN_VALUE else v
    if kind in {_UINT64, _HRTIME}:
        return x.u64()
    if kind == _INT64:
        return x.i64()
    if kind == _DOUBLE:
        return struct.unpack(">d", x.take(8))[0]
    if kind == _STRING:
        return x.string()
    if kind == _BYTE_ARRAY:
        return x.take((nelem + 3) & ~3)[:nelem]
    if kind in _SMALL_ARRAYS:
        n = x.u32()
        return [x.i32() for _ in range(n)]
    if kind in {_UINT64_ARRAY, _INT64_ARRAY}:
        n = x.u32()
        return [x.u64() if kind == _UINT64_ARRAY else x.i64() for _ in range(n)]
    if kind == _STRING_ARRAY:
        return [x.string() for _ in range(max(0, nelem))]
    return None  # unknown type: skipped by the pair's encoded size


def embedded_checksum_ok(block: bytes, offset: int) -> bool | None:
    """Verify a label-type embedded checksum (``ZIO_CHECKSUM_LABEL``): the block's last 40 bytes
    are ``zec_magic`` and four checksum words; SHA-256 is taken over the block with the words
    replaced by the verifier ``(offset, 0, 0, 0)`` — the block's byte offset on the device —
    in the writer's byte order, and compared as four big-endian words. None: no checksum."""
    import hashlib

    tail = block[-40:]
    for order in ("<", ">"):
        if struct.unpack(order + "Q", tail[:8])[0] == ZEC_MAGIC:
            break
    else:
        return None
    expected = struct.unpack(order + "4Q", tail[8:])
    work = bytearray(block)
    work[-32:] = struct.pack(order + "4Q", offset, 0, 0, 0)
    actual = struct.unpack(">4Q", hashlib.sha256(bytes(work)).digest())
    return actual == expected


def unpack_nvlist(buf: bytes) -> dict[str, Any]:
    """A packed nvlist (with its 4-byte header) -> dict. Only the XDR encoding (what labels use)."""
    if len(buf) < 12:
        raise NvlistError("too short for an nvlist")
    if buf[0] != 1:
        raise NvlistError(f"nvlist encoding {buf[0]} is not XDR")
    return _nvlist(_Xdr(buf, 4))


@dataclass
class Uberblock:
    slot: int
    txg: int
    timestamp: int
    version: int
    guid_sum: int
    byteorder: str
    checksum_ok: bool | None = None


@dataclass
class Label:
    index: int
    offset: int
    config: dict[str, Any] | None
    error: str = ""
    uberblocks: list[Uberblock] = field(default_factory=list)
    checksum_ok: bool | None = None

    @property
    def active_uberblock(self) -> Uberblock | None:
        return max((u for u in self.uberblocks if u.checksum_ok is not False),
                   key=lambda u: u.txg, default=None)


@dataclass
class MemberReport:
    size: int
    labels: list[Label]

    @property
    def config(self) -> JsonObject | None:
        """The configuration of the valid label with the highest txg."""
        good = [lb for lb in self.labels if lb.config]
        if not good:
            return None
        best = max(good, key=lambda lb: int((lb.config or {}).get("txg", 0)))
        return best.config

    @property
    def active_uberblock(self) -> Uberblock | None:
        """The valid uberblock (checksum verified) with the highest txg."""
        ubs = [u for lb in self.labels for u in lb.uberblocks if u.checksum_ok is not False]
        return max(ubs, key=lambda u: u.txg, default=None)

    def summary(self) -> JsonObject:
        cfg = self.config or {}
        ub = self.active_uberblock
        tree = cfg.get("vdev_tree") or {}
        state = cfg.get("state")
        return {
            "pool": cfg.get("name"), "pool_guid": cfg.get("pool_guid"),
            "state": POOL_STATES.get(state, state) if isinstance(state, int) else state,
            "txg": cfg.get("txg"), "hostname": cfg.get("hostname"), "hostid": cfg.get("hostid"),
            "version": cfg.get("version"), "errata": cfg.get("errata"),
            "vdev_guid": cfg.get("guid"), "top_guid": cfg.get("top_guid"),
            "vdev_children": cfg.get("vdev_children"),
            "top_vdev": {"type": tree.get("type"), "ashift": tree.get("ashift"),
                         "asize": tree.get("asize"),
                         "children": [{"type": c.get("type"), "path": c.get("path"),
                                       "guid": c.get("guid")}
                                      for c in tree.get("children") or []],
                         "path": tree.get("path")},
            "features_for_read": sorted((cfg.get("features_for_read") or {}).keys()),
            "labels_valid": [lb.index for lb in self.labels if lb.config],
            "labels_checksum_ok": {lb.index: lb.checksum_ok for lb in self.labels},
            "uberblocks_bad_checksum": sum(1 for lb in self.labels for u in lb.uberblocks
                                           if u.checksum_ok is False),
            "labels_invalid": {lb.index: lb.error for lb in self.labels if not lb.config},
            "label_txgs": {lb.index: (lb.config or {}).get("txg") for lb in self.labels
                           if lb.config},
            "uberblock": None if ub is None else {"txg": ub.txg, "timestamp": ub.timestamp,
                                                  "version": ub.version,
                                                  "byteorder": ub.byteorder},
        }


def label_offsets(size: int) -> list[int]:
    psize = size - size % LABEL_SIZE
    return [0, LABEL_SIZE, psize - 2 * LABEL_SIZE, psize - LABEL_SIZE]


def parse_uberblocks(ring: bytes, ashift: int, ring_offset: int | None = None) -> list[Uberblock]:
    """Uberblocks of a ring; with ``ring_offset`` (the ring's byte offset on the device) each
    one's embedded checksum is verified."""
    slot = 1 << max(10, min(13, ashift))
    out = []
    for i in range(len(ring) // slot):
        raw = ring[i * slot:i * slot + 40]
        if len(raw) < 40:
            break
        for order, fmt in (("little", "<5Q"), ("big", ">5Q")):
            magic, version, txg, guid_sum, ts = struct.unpack(fmt, raw)
            if magic == UB_MAGIC:
                if txg > 0:
                    ok = (None if ring_offset is None else embedded_checksum_ok(
                        ring[i * slot:(i + 1) * slot], ring_offset + i * slot))
                    out.append(Uberblock(i, txg, ts, version, guid_sum, order, ok))
                break
    return out


def read_member(read_at: ReadAt, size: int) -> MemberReport:
    """All four labels (configuration + uberblocks) of a ZFS member of ``size`` bytes."""
    if size < 4 * LABEL_SIZE:
        raise NvlistError(f"{size} bytes: too small for a ZFS vdev")
    labels = []
    for i, off in enumerate(label_offsets(size)):
        lab = Label(index=i, offset=off, config=None)
        try:
            buf = read_at(off + NVLIST_OFFSET, NVLIST_SIZE)
            if not buf.strip(b"\0"):
                raise NvlistError("label is blank")
            lab.checksum_ok = embedded_checksum_ok(buf, off + NVLIST_OFFSET)
            if lab.checksum_ok is False:
                raise NvlistError("label checksum mismatch")
            lab.config = unpack_nvlist(buf)
        except (NvlistError, OSError, struct.error) as exc:
            lab.error = str(exc)
        ashift = int(((lab.config or {}).get("vdev_tree") or {}).get("ashift", 9) or 9)
        try:
            lab.uberblocks = parse_uberblocks(
                read_at(off + UBERBLOCK_RING_OFFSET, UBERBLOCK_RING_SIZE), ashift,
                off + UBERBLOCK_RING_OFFSET)
        except OSError as exc:
            lab.error = lab.error or f"uberblocks unreadable: {exc}"
        labels.append(lab)
    return MemberReport(size=size, labels=labels)
