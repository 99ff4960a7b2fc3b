"""Bounded streaming inflate of one zip member: CRC-32 and size as the reader would compute them.

A deflated member is read in 1 MiB chunks and inflated with ``zlib`` (raw deflate, as zip stores
it) with an output cap per call, so a zip bomb never expands in memory: the output is counted
and checksummed chunk by chunk and handed to ``on_chunk``. Limits (a finding when exceeded, never
an exception): the member's recorded size, an absolute cap (``max_out``) and a ratio cap
(``max_ratio`` output bytes per compressed byte, after the first MiB).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from ckptrescue.checkpoints.formats.crc32 import crc32
from ckptrescue.checkpoints.formats.zipwalk import CHUNK, pread

MAX_OUT = 64 * 1024 ** 3  # 64 GiB: no checkpoint member legitimately inflates past this
MAX_RATIO = 1032  # deflate's own maximum is ~1032:1; more means a crafted stream


@dataclass
class Inflated:
    """What streaming the member produced."""

    crc: int = 0
    size: int = 0  # bytes produced
    consumed: int = 0  # compressed bytes consumed
    error: str | None = None  # why inflating stopped early (None: a complete stream)
    limit: str | None = None  # which limit stopped it


def inflate_member(fh: BinaryIO, offset: int, csize: int, expect: int | None, *,
                   max_out: int = MAX_OUT, max_ratio: int = MAX_RATIO,
                   on_chunk: Callable[[int, bytes], None] | None = None) -> Inflated:
    """Inflate ``csize`` bytes at ``offset``; stop at ``expect`` (+1 byte to see overrun)."""
    out = Inflated()
    d = zlib.decompressobj(-15)
    cap = max_out if expect is None else min(max_out, expect + 1)
    pos, left = offset, max(0, csize)
    pending = b""
    try:
        while True:
            if not pending:
                if left <= 0:
                    break
                pending = pread(fh, pos, min(CHUNK, left))
                if not pending:
                    out.error = "compressed data cut short (end of file)"
                    break
                pos += len(pending)
                left -= len(pending)
                out.consumed += len(pending)
            room = cap - out.size
            if room <= 0:
                break
            chunk = d.decompress(pending, min(room, CHUNK))
            pending = d.unconsumed_tail
            if chunk:
                out.crc = crc32(chunk, out.crc)
                if on_chunk is not None:
                    on_chunk(out.size, chunk)
                out.size += len(chunk)
            if out.size > (1 << 20) and out.size > max_ratio * max(out.consumed, 1):
                out.limit = f"expansion ratio above {max_ratio}:1"
                break
            if d.eof:
                break
    except zlib.error as exc:
        out.error = f"not a valid deflate stream: {exc}"
    out.crc &= 0xFFFFFFFF
    if out.limit is None and out.size >= cap and cap == max_out and \
            (expect is None or expect >= max_out):
        out.limit = f"output above the {max_out} byte cap"
    if out.error is None and out.limit is None and not d.eof and out.size <= (expect or 0):
        out.error = "deflate stream does not end"
    return out


def judge(res: Inflated, expect: int | None, crc: int | None) -> str | None:
    """Why the member does not read back as recorded (None: size and CRC-32 agree)."""
    if res.limit:
        return f"decompression stopped: {res.limit}"
    if res.error:
        return res.error
    if expect is not None and res.size != expect:
        return f"inflates to {'more than ' if res.size > expect else ''}{res.size} bytes, " \
            f"recorded {expect}"
    if crc is not None and res.crc != crc:
        return f"CRC-32 mismatch after inflate: stored {crc:08x}, computed {res.crc:08x}"
    return None
