"""Opening evidence files read-only without updating their access time, and the buffers they
are read into."""

from __future__ import annotations

import io
import mmap
import os
import stat
from typing import Any, BinaryIO

from ckptrescue.errors import RefusedError, naming, not_a_regular_file

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


def open_own_file(path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
    """A file the kit keeps beside an output (a build's partial file or scratch database, an
    audit's or a watch's state, an imaging sidecar), opened with ``flags`` (``O_CREAT`` and so
    on) without following a link and without blocking on a FIFO: refused (the kit's refusal,
    exit 3) when the name is a link (as root, a link planted there made the kit empty and
    overwrite the file it points to), a device node, a FIFO or a socket. Gives the
    descriptor, blocking again."""
    import errno

    shown = os.fspath(path)
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RefusedError(f"{shown}: a symbolic link where the kit keeps its own file; it "
                               "is never followed: remove it, or write the output elsewhere") \
                from None
        if exc.errno == errno.ENXIO:  # a FIFO without a reader opened to write, a socket
            try:
                found = os.lstat(path).st_mode
            except OSError:
                found = stat.S_IFREG
            if not stat.S_ISREG(found):
                raise not_a_regular_file(shown, found) from None
        raise
    return proven_regular(fd, shown)


def proven_regular(fd: int, shown: str | os.PathLike[str], flags: int = 0) -> int:
    """``fd`` (opened ``O_NONBLOCK``, so that a FIFO never blocks the open) once it is proven a
    regular file, blocking again unless ``flags`` asked for ``O_NONBLOCK``; closed and refused
    (:func:`errors.not_a_regular_file`) otherwise."""
    import fcntl
    import stat

    st_mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(st_mode):
        os.close(fd)
        raise not_a_regular_file(os.fspath(shown), st_mode)
    if not flags & os.O_NONBLOCK:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def read_own_file(path: str | os.PathLike[str]) -> bytes:
    """The whole of a file the kit reads back (a sidecar, a ddrescue mapfile, which a disk with
    a million bad areas makes tens of megabytes), opened as :func:`open_own_file` opens one:
    never through a link, never blocking on a FIFO."""
    fd = open_own_file(path, os.O_RDONLY)
    with named_file(fd, "rb", path) as fh:  # a read error (EIO) names the file
        return fh.read()


def same_file(fd: int, path: str | os.PathLike[str]) -> bool:
    """``path`` (followed) is the file open as ``fd``: what a library that opens by name (SQLite)
    opened is the file that was checked."""
    try:
        st, held = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)


class _NamedRaw(io.FileIO):
    """A descriptor's raw file whose operating-system errors name the file (a write to a full
    disk says which one). The buffered file over it calls these for every system call."""

    shown: str = ""

    def write(self, b: Any) -> int | None:
        with naming(self.shown):
            return super().write(b)

    def readinto(self, b: Any) -> int | None:
        with naming(self.shown):
            return super().readinto(b)

    def readall(self) -> bytes:
        with naming(self.shown):
            return super().readall()

    def truncate(self, size: int | None = None) -> int:
        with naming(self.shown):
            return super().truncate(size)

    def seek(self, pos: int, whence: int = 0) -> int:
        with naming(self.shown):
            return super().seek(pos, whence)

    def close(self) -> None:
        with naming(self.shown):
            super().close()


def named_file(fd: int, mode: str, shown: str | os.PathLike[str]) -> BinaryIO:
    """``os.fdopen(fd, mode)`` (binary modes: ``rb``, ``wb``, ``ab``, ``r+b``, ``a+b``) whose
    read, write, flush, truncate and close errors name ``shown``; :func:`fsync` does the same
    for the sync. The file is a buffered file as ``open`` gives, its ``name`` the path."""
    raw = _NamedRaw(fd, mode.replace("+", "").replace("b", "") + ("+" if "+" in mode else ""),
                    closefd=True)
    raw.shown = raw.name = os.fsdecode(shown)
    # the buffer ``open`` would choose: the filesystem's block size (large on ZFS, Lustre, NFS)
    size = max(getattr(raw, "_blksize", 0) or 0, io.DEFAULT_BUFFER_SIZE)
    buffered: BinaryIO
    if "+" in mode:
        buffered = io.BufferedRandom(raw, size)  # type: ignore[assignment]
    elif "r" in mode:
        buffered = io.BufferedReader(raw, size)  # type: ignore[assignment]
    else:
        buffered = io.BufferedWriter(raw, size)  # type: ignore[assignment]
    return buffered


def fsync(fh: BinaryIO) -> None:
    """Flush ``fh`` and ``os.fsync`` it; an error (a full disk, EIO) names its file."""
    fh.flush()
    raw = getattr(fh, "raw", None)
    with naming(getattr(raw, "shown", "") or getattr(fh, "name", "") or "?"):
        os.fsync(fh.fileno())
