"""Parsers for ``xfs_db -r`` output (xfsprogs 6.1): ``print`` of a superblock, ``version``,
``convert``, ``blockuse -n``, ``bmap``. Pure: text in, values out.

Samples (real, xfsprogs 6.1.0, in fixtures/transcripts/xfs_db/)::

    magicnum = 0x58465342
    0x19 (25)
    block 25 (0/25) type data inode 132 d/model.ckpt
    data offset 0 startblock 24 (0/24) count 2048 flag 0
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_FIELD = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_\[\]]*)\s*=\s*(.*?)\s*$")
_CONVERT = re.compile(r"^\s*(0x[0-9a-fA-F]+)\s+\((\d+)\)\s*$")
_BLOCKUSE = re.compile(
    r"^block\s+(\d+)\s+\((\d+)/(\d+)\)\s+type\s+(\S+)(?:\s+inode\s+(\d+)(?:\s+(.*))?)?\s*$")
_BMAP = re.compile(r"^(data|attr|cow)\s+offset\s+(\d+)\s+startblock\s+(\d+)\s+\((\d+)/(\d+)\)"
                   r"\s+count\s+(\d+)\s+flag\s+(\d+)")


def parse_print(text: str) -> dict[str, str]:
    """``field = value`` lines into a dict (values as text)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _FIELD.match(line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def as_int(value: str | None) -> int | None:
    if value is None:
        return None
    token = value.split()[0] if value.split() else ""
    try:
        return int(token, 0)
    except ValueError:
        return None


def parse_convert(text: str) -> list[int]:
    """Every ``0x19 (25)`` result line, in order."""
    return [int(m.group(2)) for line in text.splitlines() if (m := _CONVERT.match(line))]


@dataclass(frozen=True)
class BlockUse:
    fsblock: int
    ag: int
    agbno: int
    type: str
    inode: int | None
    path: str | None


def parse_blockuse(text: str) -> list[BlockUse]:
    out = []
    for line in text.splitlines():
        m = _BLOCKUSE.match(line.strip())
        if m:
            out.append(BlockUse(int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4),
                                int(m.group(5)) if m.group(5) else None,
                                m.group(6).strip() if m.group(6) else None))
    return out


@dataclass(frozen=True)
class BmapExtent:
    fork: str
    offset: int  # file block
    startblock: int  # AG-encoded fsblock
    count: int
    flag: int


def parse_bmap(text: str) -> list[BmapExtent]:
    out = []
    for line in text.splitlines():
        m = _BMAP.match(line.strip())
        if m:
            out.append(BmapExtent(m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(6)),
                                  int(m.group(7))))
    return out


def split_echo_sections(text: str, marker: str = "@@") -> dict[str, str]:
    """Split output of runs that interleave ``-c "echo @@KEY"`` markers."""
    sections: dict[str, str] = {}
    key: str | None = None
    buf: list[str] = []
    for line in text.splitlines():
        if line.startswith(marker):
            if key is not None:
                sections[key] = "\n".join(buf)
            key, buf = line[len(marker):].strip(), []
        else:
            buf.append(line)
    if key is not None:
        sections[key] = "\n".join(buf)
    return sections
