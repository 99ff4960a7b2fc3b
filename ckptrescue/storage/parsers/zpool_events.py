"""Parser for ``zpool events -v`` (OpenZFS). Pure.

Each event is a header line ``<time> <class>`` followed by indented ``name = value`` lines; an
embedded nvlist is ``name = (embedded nvlist)`` ... ``(end name)``. Values: ``"text"`` (string),
``0x..`` (one integer), several integers (array), otherwise the raw text. Tested against real
outputs recorded on OpenZFS 2.3 (fixtures/transcripts/zfs/).

For ``ereport.fs.zfs.checksum``/``io`` on a leaf vdev, ``zio_offset`` is the byte offset of the
failed I/O on the member device itself: the child I/O already includes the 4 MiB of front
labels and boot area (recorded: a block at DVA offset 0x15c000 fails with zio_offset 0x55c000).
``zio_objset``/``zio_object``/``zio_blkid`` name the dataset, the object (a file's inode number)
and its block (file offset = blkid x the file's block size for level-0 blocks).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

ERROR_CLASSES = ("ereport.fs.zfs.checksum", "ereport.fs.zfs.io", "ereport.fs.zfs.data",
                 "ereport.fs.zfs.authentication", "ereport.fs.zfs.deadman",
                 "ereport.fs.zfs.delay", "ereport.fs.zfs.probe_failure",
                 "ereport.fs.zfs.vdev.", "ereport.fs.zfs.pool")
_HEADER = re.compile(r"^(?P<time>\S.*?)\s+(?P<cls>(?:ereport|sysevent|resource)\.\S+)\s*$")
_PAIR = re.compile(r"^(?P<key>[A-Za-z0-9_.-]+) = (?P<value>.*)$")
_INT = re.compile(r"^(0x[0-9a-fA-F]+|-?\d+)$")


@dataclass
class ZEvent:
    time: str
    cls: str
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def is_error(self) -> bool:
        return self.cls.startswith(ERROR_CLASSES)

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)

    def device_range(self) -> tuple[int, int] | None:
        """[start, end) byte range of the failed I/O on the member device, when known."""
        off, size = self.get("zio_offset"), self.get("zio_size")
        if isinstance(off, int) and isinstance(size, int) and size > 0 and self.get("vdev_path"):
            return off, off + size
        return None


def value(text: str) -> Any:
    t = re.sub(r"\s+\[[^\]]*\]$", "", text.strip())  # "0x4 [SCRUB]": the flags' names
    if len(t) >= 2 and t[0] == t[-1] == '"':
        return t[1:-1]
    parts = t.split()
    if parts and all(_INT.match(p) for p in parts):
        nums = [int(p, 0) for p in parts]
        return nums[0] if len(nums) == 1 else nums
    return t


def parse(text: str) -> list[ZEvent]:
    events: list[ZEvent] = []
    cur: ZEvent | None = None
    stack: list[dict[str, Any]] = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        if not raw[0].isspace():
            if raw.startswith("TIME") and raw.rstrip().endswith("CLASS"):
                continue
            m = _HEADER.match(raw)
            if m:
                cur = ZEvent(time=m.group("time"), cls=m.group("cls"))
                events.append(cur)
                stack = [cur.fields]
            continue
        if cur is None:
            continue
        line = raw.strip()
        if line.startswith("(end ") and len(stack) > 1:
            stack.pop()
            continue
        m = _PAIR.match(line)
        if not m:
            continue
        key, val = m.group("key"), m.group("value")
        if val.strip() == "(embedded nvlist)":
            nested: dict[str, Any] = {}
            stack[-1][key] = nested
            stack.append(nested)
        else:
            stack[-1][key] = value(val)
    return events
