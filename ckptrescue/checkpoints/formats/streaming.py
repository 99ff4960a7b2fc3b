"""Read byte ranges once, on a few threads: CRC-32 and the numeric scan in the same pass.

A checkpoint's storage records are independent byte ranges. :func:`read_ranges` cuts every
range into segments of about :data:`SEGMENT` bytes at absolute multiples of
:data:`zipwalk.CHUNK` (so the chunks a scan sees, and the 4 KiB pages inside them, are the ones
a single sequential pass would see), and runs the segments on :func:`workers` threads. Each
thread reads its segment with ``preadv`` into one buffer it reuses, extends the CRC-32 and
feeds the numeric scan from that same buffer (no second pass, no copy); the segments of a
range are joined in order afterwards (``crc32_combine``, :meth:`StorageScan.merge`). Reading
(``preadv``), the CRC (ISA-L or zlib) and numpy's loops release the GIL, so while one thread
waits on the kernel's copy the others compute: the read and the checks overlap without a
separate reader thread and its hand-offs, and one huge storage is as parallel as many small
ones. Ranges under 1 MiB are read on the calling thread: their work is mostly Python, and
threads would only take turns with the GIL.

When most of the work holds the GIL chunk by chunk (the numeric scan is a dozen numpy calls
per chunk, each retaking it), threads hand the GIL to each other instead of working:
:mod:`forked_reads` then runs the segments on forked processes, and this module reads itself
whatever they did not report.

A segment that comes back short (the file ends inside it) ends its range there, as a
sequential read would: the segments after it are not used.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from ckptrescue.checkpoints.formats import forked_reads, zipwalk
from ckptrescue.checkpoints.formats.crc32 import crc32_combine

SEGMENT = 32 * zipwalk.CHUNK  # bytes one thread reads before the next segment is handed out
PARALLEL_MIN = 8 * zipwalk.CHUNK  # below this many bytes in all, one thread does everything


@dataclass
class ByteRange:
    """One range to read: ``[offset, offset + length)`` of the file.

    ``make_scan(start, length)`` (optional) returns a fresh streaming scan of a part of the
    range (a :class:`numeric.StorageScan`); ``itemsize`` keeps the cuts on element boundaries.
    Chunks (and segments) are cut at absolute multiples of their size, or counted from
    ``align`` (TensorFlow's reader chunks each tensor from its own start).
    After :func:`read_ranges`: ``crc`` (0 when ``want_crc`` is false), ``got`` (bytes read from
    ``offset`` on, short at the end of the file) and ``scan`` (the joined scan, or None).
    """

    offset: int
    length: int
    want_crc: bool = True
    make_scan: Callable[[int, int], Any] | None = None
    itemsize: int = 1
    checksum: str = "crc32"  # or "crc32c" (TensorFlow)
    align: int = 0  # chunks and segments are cut at ``align`` + multiples of their size
    crc: int = 0
    got: int = 0
    scan: Any = None
    _parts: list[tuple[int, int, int, int, Any]] = field(default_factory=list, repr=False)

    def cuts(self, size: int | None = None) -> list[tuple[int, int]]:
        """(start, length) of each segment (``size``, default :data:`SEGMENT`): cut at
        absolute multiples of ``size`` (CHUNK multiples, element-aligned); a range of at most
        ``size`` bytes is one segment."""
        size = size or SEGMENT
        if self.length <= size:
            return [(self.offset, self.length)]
        if self.make_scan is not None and (self.offset - self.align) % self.itemsize:
            return [(self.offset, self.length)]  # unaligned elements: one sequential pass
        out = []
        pos, end = self.offset, self.offset + self.length
        while pos < end:
            # a multiple of SEGMENT from ``align``, hence of CHUNK and of the item size
            nxt = min(pos - (pos - self.align) % size + size, end)
            out.append((pos, nxt - pos))
            pos = nxt
        return out


def workers() -> int:
    """Workers for reading (``CKPTRESCUE_THREADS``, default the CPU count, at most 4): threads,
    or processes where :mod:`forked_reads` pays."""
    try:
        wanted = int(os.environ.get("CKPTRESCUE_THREADS", "0"))
    except ValueError:
        wanted = 0
    return max(1, wanted) if wanted else max(1, min(4, os.cpu_count() or 1))


_BUFFERS = threading.local()


def _buffer(size: int) -> bytearray:
    buf = getattr(_BUFFERS, "buf", None)
    if buf is None or len(buf) < size:
        buf = _BUFFERS.buf = bytearray(size)
    return buf


def _read_part(fh: BinaryIO, rng: ByteRange, start: int, length: int, chunk: int) -> None:
    rng._parts.append((start, length, *_scan_part(fh, rng, start, length, chunk)))


def _scan_part(fh: BinaryIO, rng: ByteRange, start: int, length: int,
               chunk: int) -> tuple[int, int, Any]:
    """Read one segment: its CRC, the bytes read and its scan (or None)."""
    scan = rng.make_scan(start, length) if rng.make_scan is not None else None
    crc_fn = None
    if rng.checksum == "crc32c":
        from ckptrescue.checkpoints.formats.crc32c import crc32c as crc_fn
    crc, got = zipwalk.crc_range(fh, start, length, chunk=chunk, crc=rng.want_crc,
                                 buffer=_buffer(chunk), crc_fn=crc_fn, align=rng.align,
                                 on_chunk=scan.feed if scan is not None else None)
    return crc, got, scan


def _join(rng: ByteRange) -> None:
    crc = got = 0
    scan = None
    combine = crc32_combine
    if rng.checksum == "crc32c":
        from ckptrescue.checkpoints.formats.crc32c import crc32c_combine as combine
    for _start, length, part_crc, part_got, part_scan in sorted(rng._parts, key=lambda p: p[0]):
        if rng.want_crc:
            crc = part_crc if not got else combine(crc, part_crc, part_got)
        got += part_got
        if part_scan is not None:
            if scan is None:
                scan = part_scan
            else:
                scan.merge(part_scan)
        if part_got < length:
            break  # the file ends inside this segment: what follows was not read
    rng.crc, rng.got, rng.scan = crc, got, scan
    rng._parts.clear()


def read_ranges(fh: BinaryIO, ranges: list[ByteRange], *, threads: int | None = None,
                chunk: int = zipwalk.CHUNK) -> None:
    """Read every range once (CRC + scan), in segments on ``threads`` threads, ``chunk`` bytes
    at a time; fills each range's results."""
    n = threads or workers()
    parts = [(rng, start, length) for rng in ranges for start, length in rng.cuts()]
    total = sum(max(0, length) for _, _, length in parts)
    try:  # advisory: a larger readahead for a cold file; the file is not changed
        os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
    except (AttributeError, OSError, ValueError):
        pass
    if n == 1 or len(parts) < 2 or total < PARALLEL_MIN:
        for rng, start, length in parts:
            _read_part(fh, rng, start, length, chunk)
    elif forked_reads.wanted(fh, parts, n):
        done = forked_reads.read_parts(
            fh, parts, lambda f, r, s, n_: _scan_part(f, r, s, n_, chunk), n)
        for i, (rng, start, length) in enumerate(parts):
            if i in done:
                rng._parts.append((start, length, *done[i]))
                continue
            _read_part(fh, rng, start, length, chunk)
    else:
        from concurrent.futures import ThreadPoolExecutor

        # small ranges on this thread, one after another: their work is mostly Python (a
        # scan's set-up, a dozen numpy calls on a few KiB), and on several threads it only
        # takes turns with the GIL (20,000 tensors of 16 KiB: 5.2 s on two threads, 3.2 s on
        # one); the large ones then share the threads
        small = forked_reads.SHARE_MIN
        for rng, start, length in parts:
            if rng.length < small:
                _read_part(fh, rng, start, length, chunk)
        with ThreadPoolExecutor(max_workers=n) as pool:
            for fut in [pool.submit(_read_part, fh, rng, start, length, chunk)
                        for rng, start, length in parts if rng.length >= small]:
                fut.result()
    for rng in ranges:
        _join(rng)
