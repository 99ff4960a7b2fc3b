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
from typing import Any

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
    # the extra checksums asked for, in S3's form (Base64 of the big-endian digest)
    checksums: dict[str, str] | None = None

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


CHECKSUMS = ("CRC64NVME", "CRC32C", "CRC32")


def checksum_hashers(names: tuple[str, ...]) -> dict[str, Any]:
    """Streaming hashers for ``names`` (S3's algorithm names; see :data:`CHECKSUMS`)."""
    from ckptrescue.errors import UsageError
    from ckptrescue.stores.s3.checksums import new_hasher

    out: dict[str, Any] = {}
    for name in names:
        alg = name.upper()
        if alg not in CHECKSUMS:
            raise UsageError(f"--checksums {name}: not one of {', '.join(CHECKSUMS)}")
        if alg == "CRC64NVME":
            try:
                import awscrt.checksums  # noqa: F401 - the pure-Python fallback is far too slow
            except ImportError as exc:
                from ckptrescue.errors import ToolMissingError

                raise ToolMissingError("--checksums CRC64NVME needs awscrt, which is not "
                                       "installed", hint="pip install 'ckptrescue[s3]'") from exc
        out[alg] = new_hasher(alg)
    return out


def hash_file(path: str | bytes, *, chunk: int = CHUNK,
              on_bytes: Callable[[int], None] | None = None,
              checksums: tuple[str, ...] = ()) -> HashOutcome:
    """Hash ``path``; ``head`` keeps its first bytes (for format detection); ``checksums``
    (CRC64NVME, CRC32C, CRC32) are computed in the same pass, in S3's Base64 form."""
    digest = hashlib.sha256()
    extra = checksum_hashers(checksums) if checksums else {}
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
            if extra:
                block = bytes(view[:n])
                for hasher in extra.values():
                    hasher.update(block)
            size += n
            if on_bytes is not None:
                on_bytes(n)
    finally:
        os.close(fd)
    if extra:
        import base64

        sums = {alg: base64.b64encode(h.digest()).decode("ascii") for alg, h in extra.items()}
        return HashOutcome(digest.hexdigest(), size, head=head, checksums=sums)
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
