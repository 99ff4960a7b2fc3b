"""Opening evidence files read-only without updating their access time, and the buffers they
are read into."""

from __future__ import annotations

import mmap
import os

NOATIME = getattr(os, "O_NOATIME", 0)


def open_read_only(path: str | bytes | os.PathLike[str], flags: int = 0) -> int:
    """``os.open`` read-only with ``O_NOATIME``, and without it where the kernel refuses it
    (EPERM: a file the caller does not own); ``flags`` are added to both attempts."""
    try:
        return os.open(path, os.O_RDONLY | NOATIME | flags)
    except PermissionError:
        return os.open(path, os.O_RDONLY | flags)


def read_buffer(size: int) -> memoryview:
    """A writable buffer of ``size`` bytes (at least 1) that starts on a page boundary, to read
    into (``os.readv``, ``os.preadv``, ``readinto``) and reuse.

    The kernel copies a read into its destination about half as fast when the destination
    starts 16 bytes past a cache line, and that is where a ``bytearray`` of a megabyte starts
    (malloc serves it from its own mapping, after a 16-byte header): hashing 1 GiB from the
    page cache on two threads spent 0.16 s in the kernel into such buffers, 0.04-0.09 s into
    aligned ones (``make bench``'s manifest rows measure it). A private anonymous mapping starts
    on a page (a forked child gets its own copy once it writes, as with a ``bytearray``).
    """
    return memoryview(mmap.mmap(-1, max(1, size), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS))
