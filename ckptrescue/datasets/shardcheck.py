"""Shared types for container checks: a bad record, one file's check, and a reader that turns
an I/O error into the exact offset of the first unreadable block.

Each format module (``tfrecord``, ``tarshards``, ``parquet``, ``jsonl``, ``npy``) exposes
``check(fh, size) -> list[BadRecord]`` (plus how many records it checked) over a
:class:`TrackedFile`; ``verify`` picks the module and catches :class:`UnreadableAt`.
"""

from __future__ import annotations

import errno
import io
import os
import stat
from dataclasses import dataclass, field
from typing import Any

from ckptrescue.checkpoints.formats.chunked import Readable, iter_chunks
from ckptrescue.datasets.hashing import locate_read_error
from ckptrescue.datasets.walk import to_json_path
from ckptrescue.effects.files import open_read_only
from ckptrescue.model import JsonObject

STATUSES = ("ok", "damaged", "unreadable", "unchecked")


@dataclass(frozen=True)
class BadRecord:
    """One damaged record: its index (0-based), byte offset, sample key/column, and why."""

    index: int | None
    offset: int | None
    key: str | None
    problem: str

    def to_json(self) -> JsonObject:
        return {"index": self.index, "offset": self.offset, "key": self.key,
                "problem": self.problem}


@dataclass
class CheckOutcome:
    """What a format checker saw: records checked and the bad ones."""

    records: int = 0
    bad: list[BadRecord] = field(default_factory=list)
    unchecked_reason: str | None = None
    limit: bool = False  # a decompression limit stopped the check (DS009)


@dataclass
class FileCheck:
    rel: bytes
    format: str
    status: str
    bad_records: list[BadRecord] = field(default_factory=list)
    records: int = 0
    note: str = ""
    limit: bool = False  # unchecked because a decompression limit was reached

    def to_json(self) -> JsonObject:
        return {"path": to_json_path(self.rel), "format": self.format, "status": self.status,
                "bad_records": [b.to_json() for b in self.bad_records],
                "records": self.records, "note": self.note}


class UnreadableAt(Exception):
    """A read failed with an I/O error; ``offset`` is the first unreadable block."""

    def __init__(self, offset: int, error: str) -> None:
        super().__init__(f"{error} at offset {offset}")
        self.offset = offset
        self.error = error


class _TrackedRaw(io.RawIOBase):
    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pos = 0
        self.failure: UnreadableAt | None = None  # kept even if a library swallows the raise

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        try:
            data = os.pread(self.fd, len(b), self.pos)
        except OSError as exc:
            where = (locate_read_error(self.fd, self.pos, len(b))
                     if exc.errno == errno.EIO else self.pos)
            self.failure = UnreadableAt(where, exc.strerror or str(exc))
            raise self.failure from exc
        n = len(data)
        b[:n] = data
        self.pos += n
        return n

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 0:
            self.pos = offset
        elif whence == 1:
            self.pos += offset
        else:
            self.pos = os.fstat(self.fd).st_size + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def close(self) -> None:
        if not self.closed:
            os.close(self.fd)
        super().close()


def failure_of(fh: io.BufferedReader) -> UnreadableAt | None:
    """The I/O error a tracked file hit, if any (pyarrow and zipfile may re-wrap exceptions)."""
    raw = fh.raw
    return raw.failure if isinstance(raw, _TrackedRaw) else None


def open_tracked(path: str | bytes, *, buffer_size: int = 1 << 20) -> io.BufferedReader:
    """Open read-only (no atime update where allowed) with EIO -> :class:`UnreadableAt`."""
    fd = open_read_only(path, os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for a FIFO/device since it was listed
        os.close(fd)
        raise OSError(errno.EINVAL, "no longer a regular file")
    return io.BufferedReader(_TrackedRaw(fd), buffer_size=buffer_size)


def one_line(exc: BaseException) -> str:
    """A library's error as a reader's one-line reason: its first line (at most 300
    characters), or its type when it says nothing."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def read_exact(fh: Readable, n: int) -> bytes:
    """Read up to ``n`` bytes, looping over short reads (returns fewer only at EOF); at most
    1 MiB a read, so a length field that lies allocates no more than the file holds."""
    return b"".join(iter_chunks(fh, n))
