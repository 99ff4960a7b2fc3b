"""Reading checkpoint files that have unreadable sectors (formats layer: it reads, never writes).

On a failing disk (or a ZFS pool whose checksums fail) ``read(2)`` returns EIO for the whole
request even when only one sector of it is bad, and a probe would stop there. While
:func:`collect_unreadable` is active, :func:`open_evidence` returns a reader that, on EIO, reads
the request again in units of ``UNIT`` bytes, returns zeros for the units that still fail, and
records them as ``[start, end)`` byte ranges of that file. The probe then names the tensors
whose bytes lie there. Outside :func:`collect_unreadable` it is a plain ``open(path, "rb")``.
Nothing here writes.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import BinaryIO

from ckptrescue.checkpoints.formats.regular_file import open_regular, open_regular_fd

UNIT = 4096
Unreadable = dict[str, list[tuple[int, int]]]
_COLLECTOR: ContextVar[Unreadable | None] = ContextVar("ckptrescue_unreadable", default=None)


class TolerantRaw(io.RawIOBase):
    """A read-only raw file whose EIO units read as zeros and are recorded."""

    def __init__(self, path: str | Path, sink: list[tuple[int, int]], unit: int = UNIT) -> None:
        super().__init__()
        self._fd = open_regular_fd(path)
        self._pos = 0
        self._unit = unit
        self._sink = sink
        self._lock = threading.Lock()  # probes verify records on several threads
        self.name = str(path)

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def pread(self, n: int, offset: int) -> bytes:
        """``os.pread`` that returns zeros for (and records) the units that fail with EIO."""
        try:
            return os.pread(self._fd, n, offset)
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            return self._salvage(offset, n)

    def salvage(self, n: int, offset: int) -> bytes:
        """The request that just failed with EIO, unit by unit (not re-read whole: on a failing
        disk every failed read costs the drive's retry time)."""
        return self._salvage(offset, n)

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            self._pos = offset
        elif whence == io.SEEK_CUR:
            self._pos += offset
        else:
            self._pos = os.fstat(self._fd).st_size + offset
        return self._pos

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        n = len(b)
        try:
            data = os.pread(self._fd, n, self._pos)
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            data = self._salvage(self._pos, n)
        b[:len(data)] = data
        self._pos += len(data)
        return len(data)

    def _salvage(self, pos: int, n: int) -> bytes:
        end = min(pos + n, os.fstat(self._fd).st_size)
        out = bytearray()
        p = pos
        while p < end:
            step = min(self._unit - p % self._unit, end - p)
            try:
                chunk = os.pread(self._fd, step, p)
            except OSError as exc:
                if exc.errno != errno.EIO:
                    raise
                chunk = bytes(step)
                self._record(p, p + step)
            if not chunk:
                break
            out += chunk
            p += len(chunk)
        return bytes(out)

    def _record(self, start: int, end: int) -> None:
        with self._lock:
            self._sink.append((start, end))

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


def tolerant_of(fh: object, exc: OSError) -> TolerantRaw:
    """The tolerant reader behind ``fh`` when ``exc`` is an EIO it can work around; else
    re-raise ``exc`` (for code that reads with ``os.pread(fh.fileno(), ...)`` directly)."""
    raw = getattr(fh, "raw", fh)
    if exc.errno == errno.EIO and isinstance(raw, TolerantRaw):
        return raw
    raise exc


def open_evidence(path: str | Path) -> BinaryIO:
    """``open(path, "rb")`` of a regular file (never a FIFO or device: ``open_regular``), or
    the EIO-tolerant reader while unreadable bytes are collected."""
    collector = _COLLECTOR.get()
    if collector is None:
        return open_regular(path)
    sink = collector.setdefault(os.path.realpath(path), [])
    return io.BufferedReader(TolerantRaw(path, sink), buffer_size=1 << 20)  # type: ignore[return-value]


@contextlib.contextmanager
def collect_unreadable() -> Iterator[Unreadable]:
    """Collect the unreadable byte ranges of every file opened with :func:`open_evidence`."""
    found: Unreadable = {}
    token = _COLLECTOR.set(found)
    try:
        yield found
    finally:
        _COLLECTOR.reset(token)
        for key in list(found):
            merged = merge_ranges(found[key])
            if merged:
                found[key] = merged
            else:
                del found[key]


def add_unreadable(found: Unreadable) -> None:
    """Add ranges found elsewhere (a worker process) to the active collector, if any."""
    sink = _COLLECTOR.get()
    if sink is None:
        return
    for path, ranges in found.items():
        sink.setdefault(path, []).extend(ranges)


def merge_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, non-overlapping ``[start, end)`` ranges covering the same bytes."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out
