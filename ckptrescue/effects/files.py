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
    """A writable buffer of ``size`` bytes (``size`` >= 1) that starts on a page boundary, to
    read into (``os.readv``, ``os.preadv``, ``readinto``) and reuse. The caller keeps the view
    as long as it reads into it (never ``release()`` it while slices are handed out).

    The kernel copies a read two to three times slower into a destination that starts 16 bytes
    past a cache line, and that is often where a ``bytearray`` of a megabyte starts (while
    malloc serves one from a mapping of its own, after a 16-byte header): two threads hashing
    1 GiB from the page cache spent 0.14-0.18 s in the kernel copying into such buffers,
    0.04-0.10 s into page-aligned ones (``make bench``'s manifest rows show it in their time and
    CPU). A private anonymous mapping starts on a page, and a forked child gets its own copy
    once it writes, as with a ``bytearray``.
    """
    if size < 1:
        raise ValueError(f"a read buffer of {size} bytes")
    try:
        return memoryview(mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS))
    except OSError as exc:  # ENOMEM: this process's memory, never the file's read error
        raise MemoryError(f"a read buffer of {size} bytes: {exc.strerror}") from exc
