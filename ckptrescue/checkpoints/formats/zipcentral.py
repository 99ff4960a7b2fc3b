"""The zip central directory read from the end: EOCD, zip64 locator and record, entries.

Pure and total: every integer read from the file (counts, sizes, offsets, zip64 values up to
2^64-1) is bounded against the window before it is used to read, so a hostile archive gives a
:class:`~ckptrescue.checkpoints.formats.zipwalk.ZipLayout` with problems, never an exception. The raw fields a
strict reader judges (flags, the 32-bit method word, disk numbers, external attributes, the
zip64 values) are kept on each record for :mod:`miniz_rules`.

Tolerance (for salvage, not for verdicts): bytes prepended to the archive shift every offset;
the shift is detected from where the central directory really is and recorded as a problem.
Layouts: PKWARE APPNOTE 4.3.12 (central header), 4.3.14-16 (zip64 EOCD, locator, EOCD).
"""

from __future__ import annotations

import os
import struct
from typing import BinaryIO

from ckptrescue.checkpoints.formats.zipwalk import (
    CENTRAL_SIG,
    EOCD_SIG,
    LOCAL_SIG,
    Z64_EOCD_SIG,
    Z64_LOC_SIG,
    ZipLayout,
    ZipRecord,
    pread,
)

MAX_COMMENT = 0xFFFF
MAX_CD_BYTES = 256 * 1024 * 1024
U32 = 0xFFFFFFFF


def find_eocd(fh: BinaryIO, start: int, end: int) -> int | None:
    """The last EOCD signature with a complete 22-byte record before ``end`` (as miniz finds it:
    the comment length is not required to fit)."""
    if end - start < 22:
        return None
    tail_len = min(end - start, 22 + MAX_COMMENT)
    tail = pread(fh, end - tail_len, tail_len)
    idx = tail.rfind(EOCD_SIG, 0, max(0, len(tail) - 22 + 4))
    while idx >= 0 and idx + 22 > len(tail):
        idx = tail.rfind(EOCD_SIG, 0, idx)
    return None if idx < 0 else end - tail_len + idx


def _read_end_records(fh: BinaryIO, layout: ZipLayout, start: int, end: int,
                      eocd: int) -> tuple[int, int, int, int | None]:
    """(entries, cd_size, cd_offset relative to start, zip64 EOCD offset or None)."""
    raw = pread(fh, eocd, 22)
    (_, disk, cd_disk, n_disk, n_total, cd_size, cd_offset,
     comment_len) = struct.unpack("<4sHHHHIIH", raw)
    er = layout.end_record
    er.update(disk=disk, cd_disk=cd_disk, entries_disk=n_disk, entries=n_total,
              cd_size=cd_size, cd_offset=cd_offset, comment_len=comment_len)
    z64_at: int | None = None
    if eocd - start >= 20 + 56:
        loc = pread(fh, eocd - 20, 20)
        if len(loc) == 20 and loc[:4] == Z64_LOC_SIG:
            loc_disk, z64_off, total_disks = struct.unpack_from("<IQI", loc, 4)
            er.update(locator=1, locator_disk=loc_disk, z64_offset=z64_off,
                      total_disks=total_disks)
            if z64_off > layout.archive_size - 56:
                layout.problems.append(("zip64", f"zip64 locator points at {z64_off}, past the "
                                        "end of the archive", eocd - 20))
                er["z64_out_of_range"] = 1
                return n_total, cd_size, cd_offset, None
            z64 = pread(fh, start + z64_off, 56)
            if len(z64) == 56 and z64[:4] == Z64_EOCD_SIG:
                (rec_size, _, _, z_disk, z_cd_disk, z_n_disk, z_n_total, z_cd_size,
                 z_cd_off) = struct.unpack_from("<QHHIIQQQQ", z64, 4)
                er.update(zip64=1, z64_record_size=rec_size, z64_disk=z_disk,
                          z64_cd_disk=z_cd_disk, z64_entries_disk=z_n_disk,
                          z64_entries=z_n_total, z64_cd_size=z_cd_size, z64_cd_offset=z_cd_off)
                z64_at = start + z64_off
                return z_n_total, z_cd_size, z_cd_off, z64_at
            layout.problems.append(("zip64", "zip64 end record missing or damaged",
                                    start + z64_off))
    return n_total, cd_size, cd_offset, z64_at


def read_central(fh: BinaryIO, start: int = 0, end: int | None = None, *,
                 local_headers: bool = True) -> ZipLayout | None:
    """Parse EOCD/zip64/central directory in ``[start, end)``; None when no EOCD is found.

    ``local_headers=False``: the entries as the central directory lists them, without reading
    each one's local header (:func:`attach_local`: two reads an entry), for a caller that needs
    only the names (format detection); their data offsets are then unknown (None)."""
    if end is None:
        end = os.fstat(fh.fileno()).st_size
    eocd = find_eocd(fh, start, end)
    if eocd is None:
        return None
    layout = ZipLayout(records=[], central_directory=True, eocd_offset=eocd,
                       archive_size=end - start, start=start)
    n_entries, cd_size, cd_offset, z64_at = _read_end_records(fh, layout, start, end, eocd)
    cd_end_expected = z64_at if z64_at is not None else eocd
    cd_abs = start + cd_offset if cd_offset <= layout.archive_size else end
    # Bytes prepended to the archive shift every offset: detect from where the CD really is.
    shift = 0
    if cd_size <= layout.archive_size and pread(fh, cd_abs, 4) != CENTRAL_SIG and cd_size and \
            cd_end_expected - cd_size >= start and \
            pread(fh, cd_end_expected - cd_size, 4) == CENTRAL_SIG:
        shift = cd_end_expected - cd_size - cd_abs
        cd_abs += shift
        layout.problems.append(("structure", f"archive offsets shifted by {shift} bytes",
                                cd_abs))
    if cd_size > MAX_CD_BYTES or cd_abs + cd_size > end:
        return None  # as if no end record: callers walk the local headers
    cd = pread(fh, cd_abs, cd_size)
    i = 0
    limit = min(n_entries, len(cd) // 46) + 1
    while i + 46 <= len(cd) and len(layout.records) < limit:
        if cd[i:i + 4] != CENTRAL_SIG:
            layout.problems.append(("central", "central directory entry signature damaged",
                                    cd_abs + i))
            break
        rec = _entry(cd, i, start + shift, cd_abs)
        rec.index = len(layout.records)
        if local_headers:
            attach_local(fh, rec, end)
        layout.records.append(rec)
        nlen, xlen, clen = struct.unpack_from("<HHH", cd, i + 28)
        if i + 46 + nlen + xlen + clen > len(cd):
            layout.problems.append(("central", f"entry {rec.index} runs past the end of the "
                                    "central directory", cd_abs + i))
        i += 46 + nlen + xlen + clen
    if len(layout.records) != n_entries:
        layout.problems.append(("central", f"central directory lists {len(layout.records)} of "
                                f"{n_entries} entries", cd_abs))
    return layout


def _entry(cd: bytes, i: int, base: int, cd_abs: int) -> ZipRecord:
    (_, _, _, flags, method, _, _, crc, csize, usize, nlen, xlen, _clen, disk, _, ext_attr,
     lho) = struct.unpack_from("<4sHHHHHHIIIHHHHHII", cd, i)
    (method32,) = struct.unpack_from("<I", cd, i + 10)
    name_raw = cd[i + 46:i + 46 + nlen]
    extra = cd[i + 46 + nlen:i + 46 + nlen + xlen]
    zip64_problem = None
    raw_sizes = (csize, usize, lho)
    want = [k for k, v in (("usize", usize), ("csize", csize), ("lho", lho)) if v == U32]
    if want:
        from ckptrescue.checkpoints.formats.zipwalk import zip64_extra

        z = zip64_extra(extra, want)
        if len(z) < len(want):
            zip64_problem = "zip64 extra field missing or cut short"
        usize, csize, lho = z.get("usize", usize), z.get("csize", csize), z.get("lho", lho)
    return ZipRecord(name=name_raw.decode("utf-8", "replace"), header_offset=base + lho,
                     compressed_size=csize, size=usize, crc=crc, method=method, flags=flags,
                     source="central", name_raw=name_raw, cd_offset=cd_abs + i,
                     method32=method32, disk_start=disk, external_attr=ext_attr, extra=extra,
                     zip64_problem=zip64_problem, raw_sizes=raw_sizes)


def attach_local(fh: BinaryIO, rec: ZipRecord, end: int) -> None:
    """The record's local header: data offset = header + 30 + its own name/extra lengths.

    The local name is recorded, not required to match: miniz (torch) never compares it.
    """
    hdr = pread(fh, rec.header_offset, 30) if rec.header_offset < end else b""
    if len(hdr) < 30 or hdr[:4] != LOCAL_SIG:
        rec.header_ok = False
        rec.problems.append("local header missing or damaged")
        return
    nlen, xlen = struct.unpack_from("<HH", hdr, 26)
    rec.local_name_raw = pread(fh, rec.header_offset + 30, nlen)
    if rec.local_name_raw != rec.name_raw:
        rec.problems.append(f"local header names {rec.local_name_raw!r:.80}")
    rec.data_offset = rec.header_offset + 30 + nlen + xlen
    if rec.data_end is not None and rec.data_end > end:
        rec.truncated = True
