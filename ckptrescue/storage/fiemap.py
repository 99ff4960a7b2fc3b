"""FS_IOC_FIEMAP: a file's extents (logical file bytes -> physical filesystem bytes). Read-only.

``include/uapi/linux/fiemap.h``: header ``=QQIIII`` (start, length, flags, mapped_extents,
extent_count, reserved) followed by ``extent_count`` extents ``=QQQQQIIII`` (logical, physical,
length, 2 reserved, flags, 3 reserved; 56 bytes). Values are bytes. We loop from the end of the
last extent until an extent carries FIEMAP_EXTENT_LAST.
"""

from __future__ import annotations

import fcntl
import os
import struct
from dataclasses import dataclass

FS_IOC_FIEMAP = 0xC020660B
FIEMAP_FLAG_SYNC = 0x1
HEADER = struct.Struct("=QQIIII")
EXTENT = struct.Struct("=QQQQQIIII")
BATCH = 256

LAST = 0x1
UNKNOWN = 0x2
DELALLOC = 0x4
ENCODED = 0x8
DATA_ENCRYPTED = 0x80
NOT_ALIGNED = 0x100
DATA_INLINE = 0x200
DATA_TAIL = 0x400
UNWRITTEN = 0x800
MERGED = 0x1000
SHARED = 0x2000
NO_PHYSICAL = UNKNOWN | DELALLOC | ENCODED | DATA_INLINE
FLAG_NAMES = {LAST: "last", UNKNOWN: "unknown", DELALLOC: "delalloc", ENCODED: "encoded",
              DATA_ENCRYPTED: "encrypted", NOT_ALIGNED: "not_aligned", DATA_INLINE: "inline",
              DATA_TAIL: "tail", UNWRITTEN: "unwritten", MERGED: "merged", SHARED: "shared"}


@dataclass(frozen=True)
class Extent:
    logical: int
    physical: int
    length: int
    flags: int

    @property
    def has_physical(self) -> bool:
        """False for extents whose physical address is meaningless (inline, delalloc, ...)."""
        return not self.flags & NO_PHYSICAL

    def flag_names(self) -> list[str]:
        return [n for bit, n in FLAG_NAMES.items() if self.flags & bit]


def extents(path: str | os.PathLike[str]) -> list[Extent]:
    """Every extent of a regular file (empty for a file without data)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NOATIME", 0))
    try:
        return list(_extents_fd(fd))
    finally:
        os.close(fd)


def _extents_fd(fd: int) -> list[Extent]:
    out: list[Extent] = []
    start = 0
    while True:
        buf = bytearray(HEADER.size + BATCH * EXTENT.size)
        HEADER.pack_into(buf, 0, start, 0xFFFFFFFFFFFFFFFF - start, 0, 0, BATCH, 0)
        fcntl.ioctl(fd, FS_IOC_FIEMAP, buf, True)
        mapped = HEADER.unpack_from(buf, 0)[3]
        if mapped == 0:
            return out
        done = False
        for i in range(mapped):
            logical, physical, length, _r1, _r2, flags, *_ = EXTENT.unpack_from(
                buf, HEADER.size + i * EXTENT.size)
            out.append(Extent(logical, physical, length, flags))
            if flags & LAST:
                done = True
        if done:
            return out
        start = out[-1].logical + out[-1].length


def overlaps(ext: list[Extent], start: int, end: int) -> list[tuple[int, int, Extent]]:
    """Parts of ``[start, end)`` (physical fs bytes) inside the file: (file_offset, length, ext)."""
    hits = []
    for e in ext:
        if not e.has_physical or e.length == 0:
            continue
        lo, hi = max(start, e.physical), min(end, e.physical + e.length)
        if lo < hi:
            hits.append((e.logical + (lo - e.physical), hi - lo, e))
    return hits
