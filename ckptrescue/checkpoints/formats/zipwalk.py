"""Zip structure for torch archives, read from the end and, when that fails, walked forward.

Pure byte parsing over a file object (``os.pread``-style reads with bounds; nothing is read whole).
Used by ``formats/torch_zip.py`` and ``formats/dcp.py`` (each DCP item is a nested zip inside a
``.distcp`` file, hence the ``start``/``end`` window).

* :func:`read_central` finds the EOCD (and zip64 locator/EOCD) from the end and parses the
  central directory, which is authoritative; each entry's local header is checked and gives the
  data offset (torch pads with an ``FB`` extra field, so local and central extras differ).
* :func:`walk_local` walks local headers forward from the window start when the central
  directory is gone (truncation): a record's size comes from its header, from a caller's hint
  (torch: ``numel x itemsize`` from the pickle), or from a data descriptor whose sizes equal the
  distance; the descriptor gives the CRC.
* :func:`crc_range` streams CRC-32 over a byte range in bounded chunks.

Layouts: PKWARE APPNOTE 4.3.7 (local header), 4.3.9 (descriptor), 4.3.12 (central header),
4.3.14-16 (zip64 EOCD, locator, EOCD); torch specifics in reference/checkpoint-formats.md §1.3.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from ckptrescue.checkpoints.formats.crc32 import crc32
from ckptrescue.checkpoints.formats.tolerant_read import tolerant_of

LOCAL_SIG = b"PK\x03\x04"
CENTRAL_SIG = b"PK\x01\x02"
EOCD_SIG = b"PK\x05\x06"
Z64_EOCD_SIG = b"PK\x06\x06"
Z64_LOC_SIG = b"PK\x06\x07"
DESC_SIG = b"PK\x07\x08"
CHUNK = 1 << 20
_MAX_COMMENT = 0xFFFF
_MAX_CD_BYTES = 256 * 1024 * 1024


@dataclass
class ZipRecord:
    """One archive member; offsets are absolute file offsets."""

    name: str
    header_offset: int
    data_offset: int | None = None
    compressed_size: int | None = None
    size: int | None = None
    crc: int | None = None
    method: int = 0
    flags: int = 0
    source: str = "central"  # "central" or "local" (found by the forward walk)
    header_ok: bool = True
    truncated: bool = False  # data runs past the end of the window
    problems: list[str] = field(default_factory=list)
    # raw central-directory fields (what a strict reader such as miniz judges)
    name_raw: bytes = b""
    index: int = -1  # position in the central directory
    cd_offset: int | None = None
    method32: int = 0  # miniz reads the method as a 32-bit word (method + DOS time)
    disk_start: int = 0
    external_attr: int = 0
    extra: bytes = b""
    raw_sizes: tuple[int, int, int] = (0, 0, 0)  # 32-bit csize, usize, header offset
    zip64_problem: str | None = None  # the zip64 extra field a reader needs is cut or absent
    local_name_raw: bytes | None = None

    @property
    def data_end(self) -> int | None:
        if self.data_offset is None or self.compressed_size is None:
            return None
        return self.data_offset + self.compressed_size


@dataclass
class ZipLayout:
    """What the zip structure says, plus every structural problem found."""

    records: list[ZipRecord]
    central_directory: bool
    eocd_offset: int | None = None
    problems: list[tuple[str, str, int | None]] = field(default_factory=list)  # (kind, msg, off)
    walk_end: int | None = None  # where the forward walk stopped
    archive_size: int = 0  # the window's size (end - start)
    start: int = 0  # the window's start (absolute offset of archive byte 0)
    end_record: dict[str, int] = field(default_factory=dict)  # raw EOCD / zip64 fields

    def by_name(self) -> dict[str, ZipRecord]:
        return {r.name: r for r in self.records}


def pread(fh: BinaryIO, offset: int, length: int) -> bytes:
    """Read up to ``length`` bytes at ``offset`` (short at EOF); never moves other readers.

    Total: any offset or length (negative, past the end, 2^64) gives the bytes that exist.
    """
    if length <= 0 or offset < 0:
        return b""
    fd = fh.fileno()
    size = os.fstat(fd).st_size
    if offset >= size:
        return b""
    length = min(length, size - offset)
    out = b""
    while len(out) < length:
        try:
            got = os.pread(fd, length - len(out), offset + len(out))
        except OSError as exc:  # EIO on an evidence reader: zeros for the bad units, recorded
            got = tolerant_of(fh, exc).salvage(length - len(out), offset + len(out))
        if not got:
            break
        out += got
        # a short read before the end of the file stops at an unreadable sector: go on
        if len(out) < length and offset + len(out) >= os.fstat(fd).st_size:
            break
    return out


def crc_range(
    fh: BinaryIO, offset: int, length: int, *, chunk: int = CHUNK,
    on_chunk: Callable[[int, memoryview], None] | None = None, crc: bool = True,
    buffer: bytearray | None = None, crc_fn: Callable[[memoryview, int], int] | None = None,
    align: int = 0,
) -> tuple[int, int]:
    """CRC-32 of ``[offset, offset+length)`` streamed in chunks; returns (crc, bytes_read).

    One reused buffer (no allocation per chunk; ``buffer``, at least ``chunk`` bytes, is used
    when given, so a thread can keep one for every range it reads). Chunks after the first are
    aligned to ``chunk`` in absolute file offsets (so 4 KiB pages line up for the numeric scan),
    or counted from ``align`` when given. ``on_chunk(absolute_offset, view)`` sees every chunk;
    the view is only valid during the call. ``crc=False`` only streams (the returned CRC is then
    0); ``crc_fn(view, value)`` replaces CRC-32 (e.g. CRC32C).
    """
    extend = crc_fn or crc32
    want_crc = crc
    crc = 0
    done = 0
    pos = offset
    fd = fh.fileno()
    if offset < 0 or length <= 0:
        if want_crc:  # nothing to read, but the CRC is made ready: loaded on first use
            extend(memoryview(b""), 0)  # (crc32c), and forked_reads warms up this way
        return 0, 0
    length = max(0, min(length, os.fstat(fd).st_size - offset))
    end = offset + length
    buf = buffer if buffer is not None and len(buffer) >= chunk else \
        bytearray(min(chunk, max(length, 1)))
    mv = memoryview(buf)
    while pos < end:
        step = min(chunk - ((pos - align) % chunk), end - pos, len(buf))
        try:
            got = os.preadv(fd, [mv[:step]], pos)
        except OSError as exc:  # EIO on an evidence reader: zeros for the bad units, recorded
            data = tolerant_of(fh, exc).salvage(step, pos)
            mv[:len(data)] = data
            got = len(data)
        if got <= 0:
            break
        if got < step and pos + got < os.fstat(fd).st_size:
            step = got  # short read before the end (an unreadable sector follows): go on
        view = mv[:got]
        if want_crc:
            crc = extend(view, crc)
        if on_chunk is not None:
            on_chunk(pos, view)
        done += got
        pos += got
        if got < step:
            break
    return crc & 0xFFFFFFFF, done


def read_central(fh: BinaryIO, start: int = 0, end: int | None = None, *,
                 local_headers: bool = True) -> ZipLayout | None:
    """Parse EOCD/zip64/central directory in ``[start, end)``; None when no EOCD is found.
    ``local_headers=False``: names and central fields only (detection), no local header read.

    Implemented in :mod:`zipcentral` (re-exported here for the formats that walk zips).
    """
    from ckptrescue.checkpoints.formats.zipcentral import read_central as _read_central

    return _read_central(fh, start, end, local_headers=local_headers)


def zip64_extra(extra: bytes, want: list[str]) -> dict[str, int]:
    """The zip64 extended-information values named in ``want`` (in APPNOTE order)."""
    out: dict[str, int] = {}
    i = 0
    while i + 4 <= len(extra):
        tag, size = struct.unpack_from("<HH", extra, i)
        body = extra[i + 4:i + 4 + size]
        if tag == 0x0001:
            j = 0
            for name in want:
                if j + 8 <= len(body):
                    (out[name],) = struct.unpack_from("<Q", body, j)
                    j += 8
            return out
        i += 4 + size
    return out


def guess_data_offset(rec: ZipRecord, alignment: int, start: int = 0) -> int:
    """torch's padded data offset for a record whose local header is unreadable.

    ``detail::getPadding``: header + 30 + name + 4 (FB extra header) rounded up to the
    alignment, relative to the archive start.
    """
    raw = rec.header_offset - start + 30 + len(rec.name.encode()) + 4
    return start + (raw + alignment - 1) // alignment * alignment


def _find_descriptor(fh: BinaryIO, data_offset: int, end: int) -> tuple[int, int, int] | None:
    """Search forward for a descriptor whose compressed size equals the distance."""
    for at in _sig_offsets(fh, data_offset, end, DESC_SIG):
        desc = pread(fh, at, 24)
        if len(desc) >= 16:
            crc, csize32, _ = struct.unpack_from("<III", desc, 4)
            if csize32 == at - data_offset:
                return at, crc, 16
        if len(desc) == 24:
            crc = struct.unpack_from("<I", desc, 4)[0]
            (csize64,) = struct.unpack_from("<Q", desc, 8)
            if csize64 == at - data_offset:
                return at, crc, 24
    return None


def walk_local(
    fh: BinaryIO, start: int = 0, end: int | None = None, *,
    size_hint: Callable[[str, int], int | None] | None = None,
) -> ZipLayout:
    """Walk local headers forward from ``start`` (no central directory needed).

    ``size_hint(name, data_offset)`` may return the record's size when the header does not
    record it (torch writes sizes only in descriptors). Damaged headers are skipped by searching
    for the next local signature.
    """
    if end is None:
        end = os.fstat(fh.fileno()).st_size
    layout = ZipLayout(records=[], central_directory=False)
    pos = start
    while pos + 4 <= end:
        sig = pread(fh, pos, 4)
        if sig in (CENTRAL_SIG, EOCD_SIG, Z64_EOCD_SIG):
            break
        if sig != LOCAL_SIG:
            nxt = _find_sig(fh, pos + 1, end, LOCAL_SIG)
            layout.problems.append(("local", "bytes that are not a zip record", pos))
            if nxt is None:
                break
            pos = nxt
            continue
        hdr = pread(fh, pos, 30)
        if len(hdr) < 30:
            layout.problems.append(("truncated", "local header cut short", pos))
            pos = end
            break
        (_, _, flags, method, _, _, crc, csize, usize, nlen,
         xlen) = struct.unpack_from("<4sHHHHHIIIHH", hdr)
        name_b = pread(fh, pos + 30, nlen)
        extra = pread(fh, pos + 30 + nlen, xlen)
        rec = ZipRecord(name=name_b.decode("utf-8", "replace"), header_offset=pos,
                        method=method, flags=flags, source="local")
        rec.data_offset = pos + 30 + nlen + xlen
        if len(name_b) < nlen or len(extra) < xlen:
            rec.truncated = True
            layout.records.append(rec)
            pos = end
            break
        if not flags & 0x08:
            z = zip64_extra(extra, [k for k, v in (("usize", usize), ("csize", csize))
                                     if v == 0xFFFFFFFF])
            rec.crc, rec.compressed_size = crc, z.get("csize", csize)
            rec.size = z.get("usize", usize)
        else:
            hint = size_hint(rec.name, rec.data_offset) if size_hint else None
            desc_len = 0
            if hint is not None:
                rec.compressed_size = rec.size = hint
                desc = pread(fh, rec.data_offset + hint, 24)
                if desc[:4] == DESC_SIG:
                    if len(desc) >= 8:
                        rec.crc = struct.unpack_from("<I", desc, 4)[0]
                    # torch (_load._get_offset): u64 sizes when the header offset or the size
                    # needs 64 bits
                    big = rec.header_offset - start >= 0xFFFFFFFF or hint >= 0xFFFFFFFF
                    desc_len = 24 if big else 16
                    if desc_len == 16 and len(desc) >= 16 and \
                            struct.unpack_from("<I", desc, 8)[0] != hint:
                        rec.problems.append("data descriptor size disagrees with the pickle")
            else:
                found = _find_descriptor(fh, rec.data_offset, end)
                if found is not None:
                    at, rec.crc, desc_len = found
                    rec.compressed_size = rec.size = at - rec.data_offset
            if rec.compressed_size is None:
                rec.truncated = True
                layout.records.append(rec)
                pos = end
                break
            if rec.data_offset + rec.compressed_size + desc_len > end:
                rec.truncated = True
                if rec.data_offset + rec.compressed_size <= end:
                    rec.problems.append("data descriptor cut off")
                    rec.crc = None
            rec.compressed_size = rec.compressed_size
            pos = rec.data_offset + rec.compressed_size + desc_len
            layout.records.append(rec)
            if rec.truncated:
                break
            continue
        if rec.data_end is not None and rec.data_end > end:
            rec.truncated = True
        layout.records.append(rec)
        if rec.truncated:
            break
        pos = rec.data_offset + (rec.compressed_size or 0)
    layout.walk_end = min(pos, end)
    return layout


def _sig_offsets(fh: BinaryIO, pos: int, end: int, sig: bytes) -> Iterator[int]:
    """Every offset of ``sig`` in ``[pos, end)``, in order, read a chunk at a time (a match
    across two chunks included); stops where the file ends."""
    carry = b""
    while pos < end:
        block = pread(fh, pos, min(CHUNK, end - pos))
        if not block:
            return
        buf = carry + block
        base = pos - len(carry)
        j = buf.find(sig)
        while j >= 0:
            yield base + j
            j = buf.find(sig, j + 1)
        carry = buf[-(len(sig) - 1):]
        pos += len(block)


def _find_sig(fh: BinaryIO, pos: int, end: int, sig: bytes) -> int | None:
    return next(_sig_offsets(fh, pos, end, sig), None)


def find_local_names(fh: BinaryIO, limit: int = CHUNK) -> list[str]:
    """Names of local headers found in the first ``limit`` bytes (for format detection)."""
    head = pread(fh, 0, limit)
    names: list[str] = []
    j = head.find(LOCAL_SIG)
    while j >= 0 and len(names) < 16:
        if j + 30 <= len(head):
            nlen = struct.unpack_from("<H", head, j + 26)[0]
            names.append(head[j + 30:j + 30 + nlen].decode("utf-8", "replace"))
        j = head.find(LOCAL_SIG, j + 4)
    return names
