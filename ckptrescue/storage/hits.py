"""The answer of ``locate``: unreadable device ranges and the files (and tensors) they hit.

Shared by ``locate`` (FIEMAP of a mount), ``locate_offline`` and the filesystems' offline mappers
(``filesystems/xfs.py``, ``ext.py``) and ``locate_zfs``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ckptrescue.model import Finding, JsonObject, Recorded


@dataclass
class FileHit:
    path: str  # relative to the filesystem root
    file_offset: int
    length: int
    tensors: list[str] = field(default_factory=list)
    shared: bool = False
    unwritten: bool = False
    inode: int | None = None  # known on the offline (xfs_db/debugfs) path

    def to_json(self) -> JsonObject:
        return {"path": self.path, "file_offset": self.file_offset, "length": self.length,
                "tensors": self.tensors}


@dataclass
class RangeHits:
    start: int
    end: int
    files: list[FileHit] = field(default_factory=list)

    def to_json(self) -> JsonObject:
        return {"start": self.start, "end": self.end, "files": [f.to_json() for f in self.files]}


@dataclass
class LocateResult(Recorded):
    ranges: list[RangeHits]
    method: str = "fiemap"
    partition_start: int = 0
    fstype: str | None = None
    tensor_map: str = "unavailable"  # "probe_paths" when tensors were mapped
    notes: list[str] = field(default_factory=list)
    # device byte ranges of filesystems/volumes that could not be mapped: (start, end, why)
    unmapped: list[tuple[int, int, str]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def to_json(self) -> JsonObject:
        """The documented JSON shape (issue 5)."""
        return {"ranges": [r.to_json() for r in self.ranges]}

    def details(self) -> JsonObject:
        return {**self.to_json(), "method": self.method, "partition_start": self.partition_start,
                "fstype": self.fstype, "tensor_map": self.tensor_map, "notes": self.notes}


def merge(hits: list[FileHit]) -> list[FileHit]:
    hits = sorted(hits, key=lambda h: (h.path, h.file_offset))
    merged: list[FileHit] = []
    for h in hits:
        last = merged[-1] if merged else None
        if (last and last.path == h.path and h.file_offset >= 0
                and last.file_offset + last.length == h.file_offset):
            last.length += h.length
            last.shared |= h.shared
        else:
            merged.append(h)
    return merged


def merge_all(ranges: list[RangeHits]) -> list[RangeHits]:
    """:func:`merge` the hits of every range (in place); returns ``ranges``."""
    for r in ranges:
        r.files = merge(r.files)
    return ranges
