"""A minimal TensorBundle writer (``PREFIX.index`` SSTable + one data shard), TensorFlow-free.

For the hostile-input tests: it writes what ``tf.raw_ops.SaveV2`` writes for plain variables
(checked against TensorFlow's reader by ``test_tf_hostile``), fast enough for 100,000 entries,
and it can write entries with any field value and still-valid block checksums (extreme integers
that only the entry decoder, not the CRC, can catch).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import google_crc32c

from ckptrescue.checkpoints.formats.protowire import encode_varint
from ckptrescue.checkpoints.formats.sstable import MAGIC, mask

DT = {"float32": 1, "int32": 3, "int64": 9}


@dataclass
class Entry:
    key: bytes
    dtype: int
    shape: tuple[int, ...]
    shard_id: int
    offset: int
    size: int
    crc: int | None  # masked; None = not recorded


def _field_varint(num: int, value: int) -> bytes:
    return encode_varint(num << 3) + encode_varint(value & 0xFFFFFFFFFFFFFFFF)


def _field_bytes(num: int, value: bytes) -> bytes:
    return encode_varint(num << 3 | 2) + encode_varint(len(value)) + value


def encode_entry(e: Entry) -> bytes:
    dims = b"".join(_field_bytes(2, _field_varint(1, d)) for d in e.shape)
    out = _field_varint(1, e.dtype) + _field_bytes(2, dims)
    if e.shard_id:
        out += _field_varint(3, e.shard_id)
    if e.offset:
        out += _field_varint(4, e.offset)
    out += _field_varint(5, e.size)
    if e.crc is not None:
        out += encode_varint(6 << 3 | 5) + struct.pack("<I", e.crc)
    return out


def header_value(num_shards: int = 1) -> bytes:
    return _field_varint(1, num_shards) + _field_bytes(3, _field_varint(1, 1))


def _block(items: list[tuple[bytes, bytes]]) -> bytes:
    body = bytearray()
    restarts = []
    for key, value in items:  # every entry a restart point (shared = 0): valid LevelDB
        restarts.append(len(body))
        body += encode_varint(0) + encode_varint(len(key)) + encode_varint(len(value))
        body += key + value
    for r in restarts or [0]:
        body += struct.pack("<I", r)
    body += struct.pack("<I", len(restarts or [0]))
    return bytes(body)


def _with_trailer(block: bytes) -> bytes:
    crc = google_crc32c.extend(0, block + b"\x00")
    return block + b"\x00" + struct.pack("<I", mask(int(crc)))


def write_sstable(path: Path, items: Iterable[tuple[bytes, bytes]],
                  block_size: int = 256 * 1024) -> None:
    out = bytearray()
    index: list[tuple[bytes, bytes]] = []
    pending: list[tuple[bytes, bytes]] = []
    size = 0

    def flush() -> None:
        nonlocal size
        if not pending:
            return
        block = _block(pending)
        index.append((pending[-1][0], encode_varint(len(out)) + encode_varint(len(block))))
        out.extend(_with_trailer(block))
        pending.clear()
        size = 0

    for key, value in items:
        pending.append((key, value))
        size += len(key) + len(value) + 8
        if size >= block_size:
            flush()
    flush()
    meta = _block([])
    meta_handle = encode_varint(len(out)) + encode_varint(len(meta))
    out += _with_trailer(meta)
    idx = _block(index)
    idx_handle = encode_varint(len(out)) + encode_varint(len(idx))
    out += _with_trailer(idx)
    footer = meta_handle + idx_handle
    out += footer + bytes(40 - len(footer)) + struct.pack("<Q", MAGIC)
    path.write_bytes(bytes(out))


def tensor_bytes(i: int) -> tuple[str, bytes]:
    """Variable ``i``: a small float32 vector from integers (1..7 elements)."""
    n = i % 7 + 1
    return "float32", struct.pack(f"<{n}f", *((i * 3 + k) % 17 / 4 for k in range(n)))


def write_bundle(prefix: Path, n: int, *, entries: list[Entry] | None = None,
                 data: bytes | None = None) -> tuple[list[Entry], bytes]:
    """A bundle of ``n`` variables (or the given entries over the given data shard)."""
    if entries is None:
        entries, chunks, pos = [], [], 0
        for i in range(n):
            dtype, raw = tensor_bytes(i)
            crc = mask(int(google_crc32c.extend(0, raw)))
            entries.append(Entry(f"var_{i:06d}/.ATTRIBUTES/VARIABLE_VALUE".encode(), DT[dtype],
                                 (len(raw) // 4,), 0, pos, len(raw), crc))
            chunks.append(raw)
            pos += len(raw)
        data = b"".join(chunks)
    assert data is not None
    items = [(b"", header_value()), *sorted((e.key, encode_entry(e)) for e in entries)]
    write_sstable(prefix.with_name(prefix.name + ".index"), items)
    prefix.with_name(prefix.name + ".data-00000-of-00001").write_bytes(data)
    return entries, data
