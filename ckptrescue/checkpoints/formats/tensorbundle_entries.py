"""Decode TensorBundle metadata: ``BundleHeaderProto``, ``BundleEntryProto`` and slice keys.

Pure: protobuf bytes in, dataclasses out (``tensorflow/core/protobuf/tensor_bundle.proto``,
``tensor_shape.proto``, ``tensor_slice.proto``, ``types.proto``). Slice entries have keys built by
``EncodeTensorNameSlice`` (``\\x00`` + OrderedCode string + rank + signed start/length pairs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from ckptrescue.checkpoints.formats.protowire import (
    WireError,
    iter_fields,
    packed_varints,
    read_varint,
    signed64,
)

# DataType enum value -> (name, numpy dtype string or None, bytes per element or None,
#                         safetensors dtype or None)
DTYPES: dict[int, tuple[str, str | None, int | None, str | None]] = {
    1: ("float32", "<f4", 4, "F32"), 2: ("float64", "<f8", 8, "F64"),
    3: ("int32", "<i4", 4, "I32"), 4: ("uint8", "|u1", 1, "U8"), 5: ("int16", "<i2", 2, "I16"),
    6: ("int8", "|i1", 1, "I8"), 7: ("string", None, None, None),
    8: ("complex64", "<c8", 8, None), 9: ("int64", "<i8", 8, "I64"), 10: ("bool", "|b1", 1, "BOOL"),
    11: ("qint8", "|i1", 1, "I8"), 12: ("quint8", "|u1", 1, "U8"), 13: ("qint32", "<i4", 4, "I32"),
    14: ("bfloat16", None, 2, "BF16"), 15: ("qint16", "<i2", 2, "I16"),
    16: ("quint16", "<u2", 2, "U16"), 17: ("uint16", "<u2", 2, "U16"),
    18: ("complex128", "<c16", 16, None), 19: ("float16", "<f2", 2, "F16"),
    20: ("resource", None, None, None), 21: ("variant", None, None, None),
    22: ("uint32", "<u4", 4, "U32"), 23: ("uint64", "<u8", 8, "U64"),
    24: ("float8_e5m2", None, 1, "F8_E5M2"), 25: ("float8_e4m3fn", None, 1, "F8_E4M3"),
}
DT_STRING = 7
DT_VARIANT = 21


def dtype_name(code: int) -> str:
    return DTYPES.get(code, (f"dtype_{code}",))[0]


@dataclass
class BundleHeader:
    num_shards: int = 1
    endianness: int = 0  # 0 = LITTLE, 1 = BIG
    version_producer: int | None = None


@dataclass
class SliceSpec:
    """One slice: ``(start, length)`` per dimension, length ``None`` = the whole dimension."""

    extents: list[tuple[int, int | None]] = field(default_factory=list)

    def text(self) -> str:
        return ",".join("-" if ln is None else f"{s}:{s + ln}" for s, ln in self.extents)


@dataclass
class BundleEntry:
    """One ``BundleEntryProto`` plus where it came from."""

    key: str
    dtype: int = 0
    shape: tuple[int, ...] | None = None
    shard_id: int = 0
    offset: int = 0
    size: int = 0
    crc32c: int | None = None  # masked, as stored
    slices: list[SliceSpec] = field(default_factory=list)
    parent: str | None = None  # for a slice entry: the variable it belongs to
    slice: SliceSpec | None = None
    trusted: bool = True  # False when the entry came from a damaged index block
    problem: str | None = None  # set when the entry contradicts its variable (slices)

    @property
    def is_slice(self) -> bool:
        return self.parent is not None

    @property
    def is_sliced_parent(self) -> bool:
        return bool(self.slices) and self.parent is None

    @property
    def dtype_name(self) -> str:
        return dtype_name(self.dtype)

    @property
    def expected_size(self) -> int | None:
        """Bytes the dtype and shape imply (None for variable-size dtypes)."""
        itemsize = DTYPES.get(self.dtype, (None, None, None))[2]
        if itemsize is None or self.shape is None:
            return None
        return itemsize * prod(self.shape)


def decode_header(value: bytes) -> BundleHeader:
    header = BundleHeader()
    for num, _wire, val in iter_fields(value):
        if num == 1 and isinstance(val, int):
            header.num_shards = val
        elif num == 2 and isinstance(val, int):
            header.endianness = val
        elif num == 3 and isinstance(val, bytes):
            for vnum, _w, vval in iter_fields(val):
                if vnum == 1 and isinstance(vval, int):
                    header.version_producer = vval
    return header


def _decode_shape(buf: bytes) -> tuple[int, ...] | None:
    dims: list[int] = []
    for num, _wire, val in iter_fields(buf):
        if num == 2 and isinstance(val, bytes):
            size = 0
            for dnum, _w, dval in iter_fields(val):
                if dnum == 1 and isinstance(dval, int):
                    size = signed64(dval)
            dims.append(size)
        elif num == 3 and val:
            return None  # unknown rank
    return tuple(dims)


def _decode_slice(buf: bytes) -> SliceSpec:
    spec = SliceSpec()
    for num, _wire, val in iter_fields(buf):
        if num == 1 and isinstance(val, bytes):
            start, length = 0, None
            for enum_, _w, ev in iter_fields(val):
                if enum_ == 1 and isinstance(ev, int):
                    start = signed64(ev)
                elif enum_ == 2 and isinstance(ev, int):
                    length = signed64(ev)
            spec.extents.append((start, length))
    return spec


def decode_entry(key: str, value: bytes) -> BundleEntry:
    """Decode a ``BundleEntryProto``; raises :class:`WireError` on malformed bytes."""
    entry = BundleEntry(key=key)
    for num, wire, val in iter_fields(value):
        if num == 1 and isinstance(val, int):
            entry.dtype = val
        elif num == 2 and isinstance(val, bytes):
            entry.shape = _decode_shape(val)
        elif num == 3 and isinstance(val, int):
            entry.shard_id = val
        elif num == 4 and isinstance(val, int):
            entry.offset = signed64(val)
        elif num == 5 and isinstance(val, int):
            entry.size = signed64(val)
        elif num == 6 and wire == 5 and isinstance(val, int):
            entry.crc32c = val
        elif num == 7 and isinstance(val, bytes):
            entry.slices.append(_decode_slice(val))
    if entry.shape is None and entry.dtype == 0:
        raise WireError("entry has neither dtype nor shape")
    return entry


# ---- OrderedCode (tensorflow/core/lib/strings/ordered_code.cc) -----------------------------

def _read_ordered_string(buf: bytes, pos: int) -> tuple[bytes, int]:
    out = bytearray()
    while pos + 1 < len(buf) + 1:
        if pos >= len(buf):
            raise WireError("unterminated OrderedCode string")
        b = buf[pos]
        if b == 0x00:
            nxt = buf[pos + 1] if pos + 1 < len(buf) else None
            if nxt == 0x01:
                return bytes(out), pos + 2
            if nxt == 0xFF:
                out.append(0x00)
                pos += 2
                continue
            raise WireError("bad OrderedCode escape")
        if b == 0xFF:
            if pos + 1 < len(buf) and buf[pos + 1] == 0x00:
                out.append(0xFF)
                pos += 2
                continue
            raise WireError("bad OrderedCode escape")
        out.append(b)
        pos += 1
    raise WireError("unterminated OrderedCode string")


def _read_num_increasing(buf: bytes, pos: int) -> tuple[int, int]:
    if pos >= len(buf):
        raise WireError("OrderedCode number past the end")
    n = buf[pos]
    if pos + 1 + n > len(buf):
        raise WireError("OrderedCode number past the end")
    return int.from_bytes(buf[pos + 1:pos + 1 + n], "big"), pos + 1 + n


def _read_signed_increasing(buf: bytes, pos: int) -> tuple[int, int]:
    if pos >= len(buf):
        raise WireError("OrderedCode signed number past the end")
    negative = not buf[pos] & 0x80
    flip = 0xFF if negative else 0x00
    first = buf[pos] ^ flip
    length = 0
    bits = first
    while bits & 0x80 and length < 8:
        length += 1
        bits = (bits << 1) & 0xFF
    if length == 8:
        second = buf[pos + 1] ^ flip if pos + 1 < len(buf) else 0
        bits = second
        while bits & 0x80 and length < 10:
            length += 1
            bits = (bits << 1) & 0xFF
    if length == 0 or pos + length > len(buf):
        raise WireError("bad OrderedCode signed number")
    raw = int.from_bytes(bytes(b ^ flip for b in buf[pos:pos + length]), "big")
    value = raw & ((1 << (8 * length - length)) - 1)
    return (~value if negative else value), pos + length


def decode_slice_key(raw: bytes) -> tuple[str, SliceSpec]:
    """Decode an ``EncodeTensorNameSlice`` key into ``(variable name, slice)``."""
    if not raw.startswith(b"\x00"):
        raise WireError("not a slice key")
    pos = 1
    name, pos = _read_ordered_string(raw, pos)
    rank, pos = _read_num_increasing(raw, pos)
    spec = SliceSpec()
    for _ in range(rank):
        start, pos = _read_signed_increasing(raw, pos)
        length, pos = _read_signed_increasing(raw, pos)
        spec.extents.append((start, None if length == -1 else length))
    return name.decode("utf-8", "replace"), spec


def string_lengths(raw: bytes, count: int) -> tuple[list[int], int]:
    """The varint64 lengths that open a DT_STRING tensor; return ``(lengths, next_pos)``."""
    lengths = []
    pos = 0
    for _ in range(count):
        ln, pos = read_varint(raw, pos)
        lengths.append(ln)
    return lengths, pos


__all__ = [
    "DTYPES", "DT_STRING", "DT_VARIANT", "BundleEntry", "BundleHeader", "SliceSpec",
    "decode_entry", "decode_header", "decode_slice_key", "dtype_name", "packed_varints",
    "string_lengths",
]
