"""Compressed dataset containers (gzip, bzip2, xz, zstd), read with bounded output.

A compressed shard is checked through its decompressed stream. The stream is bounded twice,
so a small file cannot make ``dataset verify`` inflate gigabytes (a 783 KB ``.jsonl.gz`` that
expands to 805 MB): past :data:`RATIO_FLOOR` bytes of output, more than :data:`MAX_RATIO` output
bytes per compressed byte read so far stops it, and so does :data:`MAX_OUTPUT` in total. Then
:class:`LimitReached` is raised; the checker keeps what it checked so far and the file is
reported ``unchecked`` with the reason (finding DS009). Damaged compressed data ends the stream
(a short read) with the error kept in ``error``, so the format checker names the record where
the readable data stops.

Detected by content (the magic numbers), not by name. zstd needs the optional ``zstandard``
module; without it :func:`open_stream` raises :class:`~ckptrescue.errors.ToolMissingError`.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import zlib
from typing import IO, Any

from ckptrescue.errors import ToolMissingError

MAX_RATIO = 100
RATIO_FLOOR = 8 << 20
MAX_OUTPUT = 64 << 30

_MAGICS = ((b"\x1f\x8b", "gzip"), (b"\x28\xb5\x2f\xfd", "zstd"), (b"BZh", "bz2"),
           (b"\xfd7zXZ\x00", "xz"))
_SUFFIXES = ((b".tgz", b".tar"), (b".gz", b""), (b".bz2", b""), (b".xz", b""), (b".zst", b""),
             (b".zstd", b""))
_DAMAGE = (OSError, EOFError, zlib.error, lzma.LZMAError, ValueError)


class LimitReached(Exception):
    """The decompressed output passed the ratio or size limit (a decompression bomb?)."""


def compression_of(head: bytes) -> str | None:
    """``gzip``, ``zstd``, ``bz2`` or ``xz`` from the first bytes, else None."""
    for magic, kind in _MAGICS:
        if head.startswith(magic):
            return kind
    return None


def strip_suffix(base: bytes) -> bytes:
    """The name without its compression suffix (``x.tgz`` -> ``x.tar``)."""
    for suffix, replacement in _SUFFIXES:
        if base.endswith(suffix):
            return base[: -len(suffix)] + replacement
    return base


def _open(fh: IO[bytes], kind: str) -> Any:
    if kind == "gzip":
        return gzip.GzipFile(fileobj=fh, mode="rb")
    if kind == "bz2":
        return bz2.BZ2File(fh)
    if kind == "xz":
        return lzma.LZMAFile(fh)
    try:
        import zstandard  # type: ignore[import-not-found]
    except ImportError as exc:
        raise ToolMissingError("zstd-compressed file: the zstandard module is not installed",
                               hint="pip install zstandard") from exc
    # closefd=False: closing the decompressed view must not close the caller's file;
    # buffered, because zstandard's reader has no readline (JSONL is read line by line)
    return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(  # type: ignore[arg-type]
        fh, read_across_frames=True, closefd=False))


class Decompressed:
    """The decompressed bytes of ``fh`` with the limits above; ``error`` keeps damage."""

    def __init__(self, fh: IO[bytes], kind: str, *, max_ratio: int | None = None,
                 floor: int | None = None, max_output: int | None = None) -> None:
        self.kind = kind
        self._fh = fh
        self._inner = _open(fh, kind)
        self._max_ratio = MAX_RATIO if max_ratio is None else max_ratio
        self._floor = RATIO_FLOOR if floor is None else floor
        self._max_output = MAX_OUTPUT if max_output is None else max_output
        self.out = 0
        self.error: str | None = None

    def _count(self, data: bytes) -> bytes:
        self.out += len(data)
        if self.out > self._max_output:
            raise LimitReached(f"{self.kind}: decompressed output passed {self._max_output} "
                               "bytes; the rest is not checked")
        if self.out > self._floor:
            consumed = max(1, self._fh.tell())
            if self.out > self._max_ratio * consumed:
                raise LimitReached(
                    f"{self.kind}: {self.out} bytes decompressed from {consumed} (more than "
                    f"{self._max_ratio}:1, a decompression bomb?); the rest is not checked")
        return data

    def read(self, n: int = -1) -> bytes:
        if self.error:
            return b""
        if n is None or n < 0:
            n = 1 << 20  # never an unbounded read: callers loop until b""
        try:
            return self._count(self._inner.read(n))
        except _DAMAGE as exc:
            self.error = str(exc) or type(exc).__name__
            return b""

    def readline(self, limit: int = -1) -> bytes:
        if self.error:
            return b""
        try:
            return self._count(self._inner.readline(limit))
        except _DAMAGE as exc:
            self.error = str(exc) or type(exc).__name__
            return b""

    def close(self) -> None:
        try:
            self._inner.close()
        except _DAMAGE:
            pass


def peek(fh: IO[bytes], kind: str, n: int) -> bytes:
    """The first ``n`` decompressed bytes (``fh`` is rewound afterwards)."""
    stream = Decompressed(fh, kind)
    try:
        chunks: list[bytes] = []
        left = n
        while left > 0:
            chunk = stream.read(left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        stream.close()
        fh.seek(0)
