"""Streaming SHA-256 of one file, locating the first unreadable byte when a read fails.

hashlib releases the GIL while hashing large buffers, so a thread pool of these scales with
cores. Reads go into one preallocated buffer (no per-chunk allocation).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass

CHUNK = 1 << 20
PROBE_BLOCK = 4096
HEAD_BYTES = 512


@dataclass(frozen=True)
class HashOutcome:
    """``sha256`` of the bytes read, or the I/O error and the offset of the first bad block."""

    sha256: str | None
    size: int
    error: str | None = None
    error_offset: int | None = None
    head: bytes = b""

    @property
    def unreadable(self) -> bool:
        return self.error is not None


def locate_read_error(fd: int, start: int, length: int, *, block: int = PROBE_BLOCK) -> int:
    """The offset of the first block in ``[start, start+length)`` whose read fails."""
    pos = start - (start % block)
    end = start + max(length, 1)
    while pos < end:
        try:
            data = os.pread(fd, block, pos)
        except OSError:
            return max(pos, start)
        if not data:
            break
        pos += len(data)
    return start


def hash_file(path: str | bytes, *, chunk: int = CHUNK,
              on_bytes: Callable[[int], None] | None = None) -> HashOutcome:
    """Hash ``path``; ``head`` keeps its first bytes (for format detection)."""
    digest = hashlib.sha256()
    head = b""
    buf = _buffer(chunk)
    view = memoryview(buf)
    size = 0
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOATIME", 0) | os.O_NONBLOCK)
    except PermissionError:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            return HashOutcome(None, 0, _msg(exc), 0)
    except OSError as exc:
        return HashOutcome(None, 0, _msg(exc), 0)
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for a FIFO/device since it was listed
        os.close(fd)
        return HashOutcome(None, 0, "no longer a regular file", 0)
    try:
        while True:
            try:
                n = os.readv(fd, [buf])
            except OSError as exc:
                where = locate_read_error(fd, size, chunk) if exc.errno == errno.EIO else size
                return HashOutcome(None, size, _msg(exc), where, head)
            if not n:
                break
            if size < HEAD_BYTES:
                head = (head + bytes(view[: min(n, HEAD_BYTES)]))[:HEAD_BYTES]
            digest.update(view[:n])
            size += n
            if on_bytes is not None:
                on_bytes(n)
    finally:
        os.close(fd)
    return HashOutcome(digest.hexdigest(), size, head=head)


_LOCAL = threading.local()


def _buffer(size: int) -> bytearray:
    """One reusable read buffer per thread (allocating 1 MiB per small file costs more than
    hashing it)."""
    buf: bytearray | None = getattr(_LOCAL, "buf", None)
    if buf is None or len(buf) != size:
        buf = bytearray(size)
        _LOCAL.buf = buf
    return buf


def _msg(exc: OSError) -> str:
    return exc.strerror or str(exc)
