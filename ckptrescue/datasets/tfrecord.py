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

import struct
from typing import IO

from ckptrescue.datasets.crc32c import crc32c, mask, masked_crc32c
from ckptrescue.datasets.shardcheck import BadRecord, CheckOutcome, read_exact

_CHUNK = 1 << 20
_HDR = struct.Struct("<QI")


def check(fh: IO[bytes], size: int | None) -> CheckOutcome:
    """Check every record; ``size`` is the stream length when known (None for compressed)."""
    out = CheckOutcome()
    pos = 0
    index = 0
    while True:
        hdr = read_exact(fh, 12)
        if not hdr:
            break
        if len(hdr) < 12:
            out.bad.append(BadRecord(index, pos, None,
                                     f"truncated record header: {len(hdr)} of 12 bytes"))
            break
        length, length_crc = _HDR.unpack(hdr)
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
        while left:
            chunk = fh.read(min(left, _CHUNK))
            if not chunk:
                break
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


def _resync(fh: IO[bytes], start: int, size: int) -> int | None:
    """The next offset >= start holding a valid record header that fits in the file."""
    window = 1 << 20
    pos = start
    while pos + 12 <= size:
        fh.seek(pos)
        block = read_exact(fh, window + 11)
        limit = len(block) - 11
        for i in range(max(limit, 0)):
            length, crc = _HDR.unpack_from(block, i)
            if (pos + i + 16 + length <= size
                    and masked_crc32c(block[i : i + 8]) == crc):
                return pos + i
        if limit <= 0:
            return None
        pos += limit
    return None
