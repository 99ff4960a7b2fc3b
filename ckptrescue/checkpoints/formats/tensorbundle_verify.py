"""Verify one TensorBundle entry's bytes against its masked CRC32C, streaming.

Pure apart from reading the shard through an open file handle: the bytes
``[offset, offset + size)`` of the shard are read in bounded chunks, CRC32C-extended and fed to an
an optional ``feed`` callback. ``DT_STRING`` follows
``WriteStringTensor``'s rule (lengths as u32/u64 LE, the 4-byte length CRC, then the bytes);
``DT_VARIANT`` follows the per-element rule. Both are read whole, up to :data:`VARLEN_CAP`.
``feed(offset, chunk)`` (e.g. :meth:`ckptrescue.checkpoints.formats.numeric.StorageScan.feed`) receives every
chunk of a fixed-size tensor with its absolute shard offset, so each tensor is read once.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import BinaryIO

from ckptrescue.checkpoints.formats.crc32c import crc32c, unmask
from ckptrescue.checkpoints.formats.protowire import WireError, read_varint
from ckptrescue.checkpoints.formats.regular_file import open_regular
from ckptrescue.checkpoints.formats.tensorbundle_entries import DT_STRING, DT_VARIANT, DTYPES, BundleEntry
from ckptrescue.checkpoints.formats.tensorbundle_index import shard_path

CHUNK = 256 * 1024  # small reads reuse heap memory: ~4 GiB/s CRC32C from the page cache
NUMERIC_CHUNK = 1024 * 1024  # fewer, larger chunks when the numeric scan rides along
VARLEN_CAP = 64 * 1024 * 1024


@dataclass
class PieceResult:
    """``status``: ok, damaged, truncated, missing or unverified."""

    status: str
    reason: str = ""
    calculated: int | None = None  # unmasked CRC32C of the bytes read
    code: str = "TB002"  # finding code when damaged: TB002 bytes vs CRC, TB011 entry sizes


def _string_crc(raw: bytes, count: int) -> int:
    crc = 0
    pos = 0
    for _ in range(count):
        ln, pos = read_varint(raw, pos)
        crc = crc32c(struct.pack("<I" if ln <= 0xFFFFFFFF else "<Q", ln), crc)
    if pos + 4 > len(raw):
        raise WireError("string tensor ends inside its length checksum")
    length_crc = raw[pos:pos + 4]
    if unmask(struct.unpack("<I", length_crc)[0]) != crc:
        raise WireError("string tensor's length checksum does not match its lengths")
    crc = crc32c(length_crc, crc)
    return int(crc32c(raw[pos + 4:], crc))


def _variant_crc(raw: bytes, count: int) -> int:
    crc = 0
    pos = 0
    for _ in range(count):
        ln, pos = read_varint(raw, pos)
        crc = crc32c(struct.pack("<Q", ln), crc)
        crc = crc32c(raw[pos:pos + ln], crc)
        pos += ln
        crc = crc32c(raw[pos:pos + 4], crc)
        pos += 4
    return int(crc)


def read_piece(fh: BinaryIO, offset: int, size: int) -> bytes:
    """Read ``size`` bytes at ``offset`` (used by salvage for one verified tensor)."""
    fh.seek(offset)
    return fh.read(size)


def precheck(fh: BinaryIO | None, shard_size: int | None, entry: BundleEntry,
             ) -> PieceResult | None:
    """The result of a piece that cannot be read (missing shard, entry out of bounds or
    inconsistent), else None: its bytes are to be read."""
    if fh is None or shard_size is None:
        return PieceResult("missing", "its data shard is missing")
    end = entry.offset + entry.size
    if entry.offset < 0 or entry.size < 0:
        return PieceResult("damaged", f"negative offset/size ({entry.offset}, {entry.size})",
                           code="TB011")
    if end > shard_size:
        have = max(0, shard_size - entry.offset)
        return PieceResult("truncated", f"shard ends {end - shard_size} bytes before the tensor "
                           f"does ({have} of {entry.size} bytes present)")
    if entry.dtype not in DTYPES:  # TensorFlow's reader refuses an unknown DataType
        return PieceResult("damaged", f"unknown dtype {entry.dtype}", code="TB011")
    if entry.shape is not None and any(d < 0 for d in entry.shape):
        return PieceResult("damaged", f"negative dimension in shape {list(entry.shape)}",
                           code="TB011")
    expected = entry.expected_size
    if expected is not None and expected != entry.size:
        return PieceResult("damaged", f"entry size {entry.size} but dtype x shape = {expected}",
                           code="TB011")
    return None


def variable_length(entry: BundleEntry) -> bool:
    """``DT_STRING`` / ``DT_VARIANT``: checked element by element (:func:`verify_piece`);
    every other piece is one byte range (read by :mod:`streaming`, judged by
    :func:`judge_crc`)."""
    return entry.dtype in (DT_STRING, DT_VARIANT)


def judge_crc(entry: BundleEntry, crc: int, got: int) -> PieceResult:
    """A fixed-size piece from its bytes' unmasked CRC32C and how many bytes were read."""
    if got < entry.size:
        return PieceResult("truncated", "short read")
    # an entry without a crc32c field reads as 0, and TensorFlow compares against that
    stored = unmask(entry.crc32c if entry.crc32c is not None else 0)
    if crc != stored:
        what = "stored" if entry.crc32c is not None else "no CRC32C recorded (read as 0):"
        return PieceResult("damaged", f"CRC32C mismatch: {what} {stored:#010x}, calculated "
                           f"{crc:#010x}", crc)
    return PieceResult("ok", "", crc)


def verify_piece(fh: BinaryIO | None, shard_size: int | None, entry: BundleEntry,
                 feed: Callable[[int, bytes], None] | None = None) -> PieceResult:
    """Check one stored piece (a whole variable or one slice) of a shard, sequentially."""
    early = precheck(fh, shard_size, entry)
    if early is not None:
        return early
    assert fh is not None
    count = prod(entry.shape) if entry.shape is not None else 1
    if variable_length(entry):
        if entry.size > VARLEN_CAP:
            return PieceResult("unverified", f"{entry.dtype_name} tensor larger than "
                               f"{VARLEN_CAP >> 20} MiB is not verified")
        raw = read_piece(fh, entry.offset, entry.size)
        try:
            crc = (_string_crc if entry.dtype == DT_STRING else _variant_crc)(raw, count)
        except WireError as exc:
            return PieceResult("damaged", str(exc))
        return judge_crc(entry, crc, entry.size)
    fh.seek(entry.offset)
    remaining = entry.size
    step = CHUNK if feed is None else NUMERIC_CHUNK
    crc = 0
    while remaining:
        chunk = fh.read(min(step, remaining))
        if not chunk:
            return PieceResult("truncated", "short read")
        crc = crc32c(chunk, crc)
        if feed is not None:
            feed(entry.offset + entry.size - remaining, chunk)
        remaining -= len(chunk)
    return judge_crc(entry, crc, entry.size)


@dataclass
class Shard:
    """One data shard: ``size``/``fh`` are None when the file is missing."""

    path: Path
    size: int | None
    fh: BinaryIO | None


def open_shards(prefix: Path, n: int) -> dict[int, Shard]:
    shards = {}
    for i in range(n):
        p = shard_path(prefix, i, n)
        try:
            fh: BinaryIO | None = open_regular(p)  # noqa: SIM115 - closed by close_shards
            size: int | None = p.stat().st_size
        except OSError:
            fh, size = None, None
        shards[i] = Shard(p, size, fh)
    return shards


def close_shards(shards: dict[int, Shard]) -> None:
    for s in shards.values():
        if s.fh is not None:
            s.fh.close()
