"""Parsers for read-only ``debugfs -R`` requests (e2fsprogs 1.47): ``icheck``, ``ncheck``,
``ex`` (dump_extents). Pure.

Samples (real, in fixtures/transcripts/debugfs/)::

    Block\tInode number
    1550\t12
    0\t<block not found>

    Inode\tPathname
    12\t//model.ckpt

    Level Entries       Logical      Physical Length Flags
     0/ 0   1/  1     0 -   767  1550 -  2317    768
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_EXT = re.compile(r"^\s*\d+/\s*\d+\s+\d+/\s*\d+\s+(\d+)\s*-\s*(\d+)\s+(\d+)\s*-\s*(\d+)\s+(\d+)"
                  r"\s*(\S*)\s*$")


def parse_icheck(text: str) -> dict[int, int | None]:
    """block -> inode (None for ``<block not found>``)."""
    out: dict[int, int | None] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0].strip().isdigit():
            continue
        value = parts[1].strip()
        out[int(parts[0])] = int(value) if value.isdigit() else None
    return out


def parse_ncheck(text: str) -> dict[int, list[str]]:
    """inode -> pathnames (leading slashes collapsed, relative to the filesystem root)."""
    out: dict[int, list[str]] = {}
    for line in text.splitlines():
        parts = line.split("\t", 1)
        if len(parts) != 2 or not parts[0].strip().isdigit():
            continue
        out.setdefault(int(parts[0]), []).append(parts[1].strip().lstrip("/"))
    return out


@dataclass(frozen=True)
class Ext4Extent:
    logical: int
    physical: int
    length: int
    flags: str


def parse_extents(text: str) -> list[Ext4Extent]:
    """Leaf extents of ``ex <ino>`` (index levels have no physical range of data)."""
    out = []
    for line in text.splitlines():
        m = _EXT.match(line)
        if m:
            lo, _hi, plo, _phi, length = (int(m.group(i)) for i in range(1, 6))
            out.append(Ext4Extent(lo, plo, length, m.group(6)))
    return out


_SIZE = re.compile(r"\bSize:\s*(\d+)")


def parse_stat_size(text: str) -> int | None:
    """The file size from ``stat <ino>`` (``User: 0   Group: 0   ...   Size: 3145728``)."""
    m = _SIZE.search(text)
    return int(m.group(1)) if m else None
