"""TFRecord framing and ``tf.train.Example`` decoding, statically (no TensorFlow).

Framing (``record_writer.cc``): ``uint64 length, uint32 masked_crc(length), data, uint32
masked_crc(data)``. CRCs are not checked here (``dataset verify`` does that); a record longer than
:data:`MAX_RECORD` or a truncated one stops the read with the reason.

``Example`` (``example.proto``/``feature.proto``): ``Example.features = 1``; ``Features.feature
= 1`` is a ``map<string, Feature>`` (entries with ``key = 1``, ``value = 2``); ``Feature`` is one
of ``bytes_list = 1``, ``float_list = 2``, ``int64_list = 3``, each holding ``repeated value = 1``
(floats and ints packed or not). A feature with one value is that value; with several, a list.
Bytes that are UTF-8 become text. A record that is not an Example is the single field ``$``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import IO, Any

from ckptrescue.checkpoints.formats.protowire import WireError, iter_fields, packed_varints, signed64
from ckptrescue.datasets.shardcheck import read_exact
from ckptrescue.datasets.tfrecord import ShortHeader, read_header
from ckptrescue.model import JsonObject

MAX_RECORD = 256 << 20


class Truncated(Exception):
    """The stream stopped inside a record (or a length is implausible)."""


def iter_payloads(fh: IO[bytes]) -> Iterator[bytes]:
    """Every record's data; raises :class:`Truncated` when the framing breaks."""
    index = 0
    while True:
        try:
            header = read_header(fh)
        except ShortHeader as exc:
            raise Truncated(f"record {index}: header truncated ({exc})") from None
        if header is None:
            return
        length = header[0]
        if length > MAX_RECORD:
            raise Truncated(f"record {index}: length {length} over {MAX_RECORD} bytes "
                            "(damaged length field?)")
        data = read_exact(fh, length + 4)
        if len(data) < length + 4:
            raise Truncated(f"record {index}: truncated ({len(data)} of {length + 4} bytes)")
        yield data[:length]
        index += 1


def _text_or_bytes(value: bytes) -> str | bytes:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value


def _feature(buf: bytes) -> Any:
    for number, _wire, kind in iter_fields(buf):
        if not isinstance(kind, bytes):
            raise WireError("Feature field is not a message")
        values: list[Any] = []
        for f, wire, v in iter_fields(kind):
            if f != 1:
                continue
            if number == 1 and isinstance(v, bytes):
                values.append(_text_or_bytes(v))
            elif number == 2:
                if wire == 2 and isinstance(v, bytes):
                    values.extend(x for (x,) in struct.iter_unpack("<f", v[: len(v) // 4 * 4]))
                elif wire == 5 and isinstance(v, int):
                    values.append(struct.unpack("<f", struct.pack("<I", v))[0])
            elif number == 3:
                if wire == 2 and isinstance(v, bytes):
                    values.extend(signed64(x) for x in packed_varints(v))
                elif wire == 0 and isinstance(v, int):
                    values.append(signed64(v))
        return values[0] if len(values) == 1 else values
    return None


def parse_example(payload: bytes) -> JsonObject | None:
    """The features of a serialized ``tf.train.Example`` (None when it is not one)."""
    out: dict[str, Any] = {}
    try:
        for number, _wire, features in iter_fields(payload):
            if number != 1 or not isinstance(features, bytes):
                return None
            for fnum, _w, entry in iter_fields(features):
                if fnum != 1 or not isinstance(entry, bytes):
                    return None
                key: str | None = None
                value: Any = None
                for enum, _w2, item in iter_fields(entry):
                    if enum == 1 and isinstance(item, bytes):
                        key = item.decode("utf-8", "surrogateescape")
                    elif enum == 2 and isinstance(item, bytes):
                        value = _feature(item)
                if key is None:
                    return None
                out[key] = value
    except (WireError, struct.error, UnicodeDecodeError):
        return None
    return out


def encode_example(features: dict[str, Any]) -> bytes:
    """Serialize a ``tf.train.Example`` (used by the fixtures): str/bytes -> bytes_list, int ->
    int64_list, float -> float_list; a list takes the kind of its first item."""
    from ckptrescue.checkpoints.formats.protowire import encode_varint

    def ld(number: int, payload: bytes) -> bytes:
        return encode_varint(number << 3 | 2) + encode_varint(len(payload)) + payload

    entries = b""
    for key, value in features.items():
        items = value if isinstance(value, list) else [value]
        first = items[0] if items else b""
        if isinstance(first, str | bytes):
            body = b"".join(ld(1, v.encode() if isinstance(v, str) else v) for v in items)
            feat = ld(1, body)
        elif isinstance(first, float):
            feat = ld(2, ld(1, b"".join(struct.pack("<f", v) for v in items)))
        else:
            packed = b"".join(encode_varint(v & ((1 << 64) - 1)) for v in items)
            feat = ld(3, ld(1, packed))
        entries += ld(1, ld(1, key.encode()) + ld(2, feat))
    return ld(1, entries)


def frame(payload: bytes) -> bytes:
    """One TFRecord record around ``payload`` (with its masked CRC32Cs)."""
    from ckptrescue.checkpoints.formats.crc32c import masked_crc32c

    head = struct.pack("<Q", len(payload))
    return (head + struct.pack("<I", masked_crc32c(head)) + payload
            + struct.pack("<I", masked_crc32c(payload)))
