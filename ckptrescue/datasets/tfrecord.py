"""TFRecord: every record's length CRC and data CRC, read without TensorFlow.

Record layout (tensorflow/core/lib/io/record_writer.cc)::

    uint64 length (little endian)
    uint32 masked_crc32c(length bytes)
    byte   data[length]
    uint32 masked_crc32c(data)

A bad length CRC means the length cannot be trusted: the checker scans forward for the next
offset whose 12-byte header validates and goes on from there (uncompressed files). A bad data
CRC names the record and continues with the next one. GZIP-compressed files are checked through
the decompressed stream (offsets are then offsets in that stream).
"""

from __future__ import annotations

import re
import struct
from typing import IO

from ckptrescue.checkpoints.formats.chunked import iter_chunks
from ckptrescue.checkpoints.formats.crc32c import crc32c, mask, masked_crc32c
from ckptrescue.datasets.shardcheck import BadRecord, CheckOutcome, read_exact

HEADER = struct.Struct("<QI")  # uint64 length, uint32 masked CRC-32C of the length


class ShortHeader(Exception):
    """The stream ended inside a record header (``got`` of its 12 bytes)."""

    def __init__(self, got: int) -> None:
        super().__init__(f"{got} of {HEADER.size} bytes")
        self.got = got


def read_header(fh: IO[bytes]) -> tuple[int, int, bytes] | None:
    """The next record's header: (length, the length's masked CRC, the header's bytes); None
    at the end of the stream; :class:`ShortHeader` when the stream ends inside it."""
    raw = read_exact(fh, HEADER.size)
    if not raw:
        return None
    if len(raw) < HEADER.size:
        raise ShortHeader(len(raw))
    length, length_crc = HEADER.unpack(raw)
    return length, length_crc, raw


def check(fh: IO[bytes], size: int | None, out: CheckOutcome | None = None) -> CheckOutcome:
    """Check every record; ``size`` is the stream length when known (None for compressed)."""
    out = CheckOutcome() if out is None else out
    pos = 0
    index = 0
    while True:
        try:
            header = read_header(fh)
        except ShortHeader as exc:
            out.bad.append(BadRecord(index, pos, None, f"truncated record header: {exc}"))
            break
        if header is None:
            break
        length, length_crc, hdr = header
        if masked_crc32c(hdr[:8]) != length_crc:
            out.bad.append(BadRecord(index, pos, None, "length CRC mismatch (length field "
                                     "damaged; the record boundary is lost)"))
            nxt = _resync(fh, pos + 1, size) if size is not None else None
            if nxt is None:
                break
            out.bad.append(BadRecord(None, nxt, None,
                                     f"resynchronised at the next valid record header; "
                                     f"{nxt - pos} bytes skipped"))
            fh.seek(nxt)
            pos = nxt
            index += 1
            continue
        if size is not None and pos + 16 + length > size:
            out.bad.append(BadRecord(index, pos, None, f"record of {length} bytes truncated: "
                                     f"the file ends {pos + 16 + length - size} bytes early"))
            break
        crc = 0
        left = length
        for chunk in iter_chunks(fh, length):
            crc = crc32c(chunk, crc)
            left -= len(chunk)
        footer = read_exact(fh, 4)
        if left or len(footer) < 4:
            out.bad.append(BadRecord(index, pos, None,
                                     f"record of {length} bytes truncated (stream ended early)"))
            break
        (data_crc,) = struct.unpack("<I", footer)
        if mask(crc) != data_crc:
            out.bad.append(BadRecord(index, pos, None, "data CRC mismatch"))
        out.records += 1
        pos += 16 + length
        index += 1
    return out


_ZERO8 = bytes(8)
_NONZERO = re.compile(rb"[^\x00]")


def _resync(fh: IO[bytes], start: int, size: int) -> int | None:
    """The next offset >= start holding a valid record header that fits in the file.

    Fast paths: a real length is far below 2**40, so its top three bytes are zero (found with
    ``bytes.find``); a run of zeros (a zero-filled torn write) is skipped at once, since twelve
    zero bytes are never a valid header (the masked CRC of a zero length is not zero).
    """
    window = 1 << 20
    zero_crc = struct.pack("<I", masked_crc32c(_ZERO8))
    pos = start
    while pos + 12 <= size:
        fh.seek(pos)
        block = read_exact(fh, window + 11)
        limit = len(block) - 11
        if limit <= 0:
            return None
        i = 0
        while i < limit:
            j = block.find(b"\0\0\0", i + 5) - 5
            if j < 0 or j >= limit:
                break
            if block[j : j + 8] == _ZERO8:
                if block[j + 8 : j + 12] == zero_crc and pos + j + 16 <= size:
                    return pos + j
                m = _NONZERO.search(block, j)
                if m is None:
                    break
                i = max(j + 1, m.start() - 11)
                continue
            length, crc = HEADER.unpack_from(block, j)
            if pos + j + 16 + length <= size and masked_crc32c(block[j : j + 8]) == crc:
                return pos + j
            i = j + 1
        pos += limit
    return None
