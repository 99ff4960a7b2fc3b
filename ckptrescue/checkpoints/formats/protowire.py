"""A tiny protobuf wire-format decoder (varints, fields), so TF metadata parses without TF.

Pure: bytes in, values out. Used by the TensorBundle (``BundleEntryProto``), SavedModel
(``FingerprintDef``) and SSTable (varint block handles) parsers. Malformed input raises
:class:`WireError` (a ``ValueError``) with the offset where decoding failed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import BinaryIO

MAX_VARINT_BYTES = 10


class WireError(ValueError):
    """The bytes are not valid protobuf wire format."""


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Decode a base-128 varint at ``pos``; return ``(value, next_pos)``."""
    end = len(buf)
    if 0 <= pos < end:
        b = buf[pos]
        if b < 0x80:  # the common one-byte case, without the loop
            return b, pos + 1
    result = 0
    shift = 0
    for i in range(MAX_VARINT_BYTES):
        if pos + i >= end:
            raise WireError(f"varint runs past the end at offset {pos}")
        b = buf[pos + i]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result & 0xFFFFFFFFFFFFFFFF, pos + i + 1
        shift += 7
    raise WireError(f"varint longer than {MAX_VARINT_BYTES} bytes at offset {pos}")


def encode_varint(value: int) -> bytes:
    """Encode a non-negative int as a varint (used by tests and the DT_STRING CRC rule)."""
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


# A field value: int for varint/fixed, bytes for length-delimited.
FieldValue = int | bytes


def iter_fields(buf: bytes | memoryview) -> Iterator[tuple[int, int, FieldValue]]:
    """Yield ``(field_number, wire_type, value)`` for every field of a message."""
    pos = 0
    end = len(buf)
    while pos < end:
        key, pos = read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise WireError(f"field number 0 at offset {pos}")
        if wire == 0:
            value, pos = read_varint(buf, pos)
            yield field, wire, value
        elif wire == 1:
            if pos + 8 > end:
                raise WireError(f"fixed64 runs past the end at offset {pos}")
            yield field, wire, struct.unpack_from("<Q", buf, pos)[0]
            pos += 8
        elif wire == 2:
            length, pos = read_varint(buf, pos)
            if pos + length > end:
                raise WireError(f"length-delimited field {field} runs past the end at {pos}")
            yield field, wire, bytes(buf[pos:pos + length])
            pos += length
        elif wire == 5:
            if pos + 4 > end:
                raise WireError(f"fixed32 runs past the end at offset {pos}")
            yield field, wire, struct.unpack_from("<I", buf, pos)[0]
            pos += 4
        else:
            raise WireError(f"unsupported wire type {wire} at offset {pos}")


def packed_varints(buf: bytes) -> list[int]:
    """Decode a packed repeated varint field."""
    out: list[int] = []
    pos = 0
    while pos < len(buf):
        v, pos = read_varint(buf, pos)
        out.append(v)
    return out


def signed64(value: int) -> int:
    """Reinterpret a decoded varint as a two's-complement int64."""
    return value - (1 << 64) if value >= 1 << 63 else value


def scan_fields(fh: BinaryIO, size: int) -> Iterator[tuple[int, int, int, int]]:
    """Walk a message's top-level fields in a file without reading their payloads.

    Yields ``(field_number, wire_type, payload_offset, payload_length)``; for varints the
    length is the varint's byte count. Memory stays constant whatever the message size.
    """
    pos = 0
    while pos < size:
        fh.seek(pos)
        head = fh.read(20)
        key, p = read_varint(head, 0)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise WireError(f"field number 0 at offset {pos}")
        if wire == 0:
            _, q = read_varint(head, p)
            yield field, wire, pos + p, q - p
            pos += q
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
            yield field, wire, pos + p, n
            pos += p + n
        elif wire == 2:
            length, q = read_varint(head, p)
            yield field, wire, pos + q, length
            pos += q + length
        else:
            raise WireError(f"unsupported wire type {wire} at offset {pos}")
        if pos > size:
            raise WireError(f"field {field} runs past the end ({pos} > {size})")
