"""Streaming SHA-256 of one file, locating the first unreadable byte when a read fails.

hashlib releases the GIL while hashing large buffers, so a thread pool of these scales with
cores. Reads go into preallocated buffers (no per-chunk allocation). Copying a page-cache page
into the buffer costs a fraction of hashing it (SHA-NI hashes ~2 GB/s per core). When a core is
spare (fewer jobs than cores), a reader thread can fill the next buffers of a large file while
this thread hashes the previous one, taking the copy off the hashing thread; but the hashing
core then pulls every byte from the other core's cache, and on some machines that costs more
than the copy it saves (seen here: 1 GiB read ahead in 0.85 s, read directly in 0.74 s; on
another machine read-ahead was the faster). So no fixed choice: a :class:`ReadPlan` times the
first stretches of large files both ways, alternating, and keeps the faster (``prefetch=True``
forces read-ahead). The kernel is told the file is read sequentially (a larger readahead on a
cold disk; advisory, nothing is written).
"""

from __future__ import annotations

import errno
import hashlib
import os
import queue
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ckptrescue.effects.files import open_read_only, read_buffer

CHUNK = 1 << 20
PREFETCH_MIN = 4 << 20  # files at least this large are read ahead by a reader thread
PREFETCH_BUFFERS = 4
TRIAL_BYTES = 32 << 20  # one timed stretch of a large file, read one way
TRIALS = 2  # timed stretches each way before the plan settles
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
    # the file as it was while it was read (fstat before and after agreed), and how many times
    # it changed under the reader and was hashed again (``hash_file``)
    mtime_ns: int | None = None
    inode: int | None = None
    changed: int = 0

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
    if not names:  # a build without --checksums: nothing of the stores' to import
        return {}
    from ckptrescue.errors import UsageError
    from ckptrescue.stores.s3.checksums import new_hasher

    out: dict[str, Any] = {}
    for name in names:
        alg = name.upper()
        if alg not in CHECKSUMS:
            raise UsageError(f"--checksums {name}: not one of {', '.join(CHECKSUMS)}")
        if alg == "CRC64NVME":
            from ckptrescue.errors import optional_module

            with optional_module("--checksums CRC64NVME needs awscrt, which is not installed",
                                 hint="pip install 'ckptrescue[s3]'"):
                import awscrt.checksums  # noqa: F401 - the pure-Python fallback is far too slow
        out[alg] = new_hasher(alg)
    return out


class ReadPlan:
    """How the large files of one build are read when a core is spare: directly on the
    hashing thread, or ahead by a reader thread. The first :data:`TRIALS` stretches of
    :data:`TRIAL_BYTES` each way are timed (alternating, so a passing load falls on both);
    the way with the lower best time per byte is kept for the rest. Thread-safe: the hashing
    threads of one build share it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._todo: list[bool] = [False, True] * TRIALS
        self._seconds_per_byte: dict[bool, list[float]] = {False: [], True: []}
        self.ahead: bool | None = None  # the way kept, once both were timed

    def next_stretch(self) -> tuple[bool, int | None]:
        """(read ahead?, bytes to read that way before asking again; None: to the end)."""
        with self._lock:
            if self.ahead is not None:
                return self.ahead, None
            if self._todo:
                return self._todo.pop(0), TRIAL_BYTES
            return False, TRIAL_BYTES  # the last trials are still running on other threads

    def timed(self, ahead: bool, nbytes: int, seconds: float) -> None:
        """A stretch read ``ahead`` (or not) took ``seconds`` for ``nbytes``; a stretch cut
        short by the end of its file (under half a trial) is timed again later."""
        with self._lock:
            if self.ahead is not None:
                return
            if nbytes < TRIAL_BYTES // 2 or seconds <= 0:
                self._todo.insert(0, ahead)
                return
            times = self._seconds_per_byte
            times[ahead].append(seconds / nbytes)
            if all(len(t) >= TRIALS for t in times.values()):
                self.ahead = min(times[True]) < min(times[False])


REHASH_TRIES = 3  # hashes of a file that keeps changing under the reader, before giving up


def _identity(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def hash_file(path: str | bytes, *, chunk: int = CHUNK,
              on_bytes: Callable[[int], None] | None = None,
              checksums: tuple[str, ...] = (), prefetch: bool | ReadPlan = False,
              ) -> HashOutcome:
    """Hash ``path``; ``head`` keeps its first bytes (for format detection); ``checksums``
    (CRC64NVME, CRC32C, CRC32) are computed in the same pass, in S3's Base64 form.
    ``prefetch``: how a large file is read when a core is idle: ``True`` ahead on a second
    thread, a :class:`ReadPlan` the way it found faster, ``False`` on this thread.

    A file written while it is read would get the hash of a mix of old and new bytes (which a
    later audit calls corrupted): the size, mtime, ctime and inode are compared before and
    after the read (the open file's, and the path's: a rename over it counts too), and a file
    that changed is hashed again, up to :data:`REHASH_TRIES` times; ``changed`` says how many
    times it was. One that never holds still is reported as not hashed."""
    changed = 0
    while True:
        outcome = _hash_once(path, chunk=chunk, on_bytes=on_bytes, checksums=checksums,
                             prefetch=prefetch)
        if outcome.sha256 is not None or outcome.error != _CHANGED:
            return HashOutcome(**{**outcome.__dict__, "changed": changed})
        changed += 1
        if changed >= REHASH_TRIES:
            return HashOutcome(None, outcome.size, f"changed while it was hashed, "
                               f"{changed} times in a row: not hashed", None, changed=changed)


_CHANGED = "changed while it was read"


def _hash_once(path: str | bytes, *, chunk: int, on_bytes: Callable[[int], None] | None,
               checksums: tuple[str, ...], prefetch: bool | ReadPlan) -> HashOutcome:
    digest = hashlib.sha256()
    extra = checksum_hashers(checksums) if checksums else {}
    head = b""
    size = 0
    try:
        fd = open_read_only(path, os.O_NONBLOCK)
    except OSError as exc:
        return HashOutcome(None, 0, _msg(exc), 0)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # swapped for a FIFO/device since it was listed
        os.close(fd)
        return HashOutcome(None, 0, "no longer a regular file", 0)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    except (AttributeError, OSError):
        pass
    if st.st_size < PREFETCH_MIN or prefetch is False:
        blocks = _read_direct(fd, chunk)
    elif prefetch is True:
        blocks = _read_ahead(fd, chunk)
    else:
        blocks = _read_planned(fd, chunk, prefetch)
    try:
        try:
            for view in blocks:
                n = len(view)
                if size < HEAD_BYTES:
                    head = (head + bytes(view[: min(n, HEAD_BYTES)]))[:HEAD_BYTES]
                digest.update(view)
                if extra:
                    block = bytes(view)
                    for hasher in extra.values():
                        hasher.update(block)
                size += n
                if on_bytes is not None:
                    on_bytes(n)
        except OSError as exc:
            blocks.close()  # the reader thread (if any) is stopped before the probe reads
            where = locate_read_error(fd, size, chunk) if exc.errno == errno.EIO else size
            return HashOutcome(None, size, _msg(exc), where, head)
        after = os.fstat(fd)
    finally:
        blocks.close()
        os.close(fd)
    try:
        now = os.stat(path)  # the path as opened (a symlink in DIR is followed)
    except OSError:
        now = None
    if _identity(st) != _identity(after) or size != after.st_size or now is None \
            or _identity(now) != _identity(after):
        return HashOutcome(None, size, _CHANGED, None)
    if extra:
        import base64

        sums = {alg: base64.b64encode(h.digest()).decode("ascii") for alg, h in extra.items()}
        return HashOutcome(digest.hexdigest(), size, head=head, checksums=sums,
                           mtime_ns=after.st_mtime_ns, inode=after.st_ino)
    return HashOutcome(digest.hexdigest(), size, head=head, mtime_ns=after.st_mtime_ns,
                       inode=after.st_ino)


def _read_direct(fd: int, chunk: int, limit: int | None = None) -> Iterator[memoryview]:
    """The file's blocks (at most ``limit`` bytes of them) read on this thread into one
    reused buffer (valid until next)."""
    view = _buffer(chunk)
    left = -1 if limit is None else limit
    while left and (n := os.readv(fd, [view if left < 0 or left >= chunk else view[:left]])):
        left -= n if left > 0 else 0
        yield view[:n]


def _read_ahead(fd: int, chunk: int, limit: int | None = None) -> Iterator[memoryview]:
    """The file's blocks (at most ``limit`` bytes of them), read by a helper thread into
    :data:`PREFETCH_BUFFERS` reused buffers while the caller hashes the previous ones; a read
    error is raised here, in order, after the blocks before it. Closing the generator stops
    and joins the thread."""
    bufs = _buffers(chunk)
    free: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    full: queue.SimpleQueue[tuple[int, int] | OSError] = queue.SimpleQueue()
    for i in range(len(bufs)):
        free.put(i)

    def reader() -> None:
        left = -1 if limit is None else limit
        while (i := free.get()) is not None:
            try:
                n = os.readv(fd, [bufs[i] if left < 0 or left >= chunk
                                  else bufs[i][:left]]) if left else 0
            except OSError as exc:
                full.put(exc)
                return
            left -= n if left > 0 else 0
            full.put((i, n))
            if not n:
                return

    thread = threading.Thread(target=reader, name="sha256-read", daemon=True)
    thread.start()
    try:
        while True:
            item = full.get()
            if isinstance(item, OSError):
                raise item
            i, n = item
            if not n:
                return
            yield bufs[i][:n]
            free.put(i)
    finally:
        free.put(None)
        thread.join()


def _read_planned(fd: int, chunk: int, plan: ReadPlan) -> Iterator[memoryview]:
    """The file's blocks, read in stretches the way ``plan`` says; each trial stretch is
    timed, the caller's hashing of its blocks included, and the time given back to it."""
    while True:
        ahead, limit = plan.next_stretch()
        stretch = (_read_ahead if ahead else _read_direct)(fd, chunk, limit)
        got = 0
        start = time.perf_counter()
        try:
            for view in stretch:
                got += len(view)
                yield view
        finally:
            stretch.close()
        if limit is None:
            return
        plan.timed(ahead, got, time.perf_counter() - start)
        if got < limit:
            return


_LOCAL = threading.local()


def _buffers(size: int) -> list[memoryview]:
    """The read-ahead buffers of this thread (reused from file to file; page-aligned)."""
    bufs: list[memoryview] | None = getattr(_LOCAL, "ahead", None)
    if bufs is None or len(bufs[0]) != size:
        bufs = [read_buffer(size) for _ in range(PREFETCH_BUFFERS)]
        _LOCAL.ahead = bufs
    return bufs


def _buffer(size: int) -> memoryview:
    """One reusable read buffer per thread (allocating 1 MiB per small file costs more than
    hashing it; page-aligned: :func:`read_buffer`)."""
    buf: memoryview | None = getattr(_LOCAL, "buf", None)
    if buf is None or len(buf) != size:
        buf = read_buffer(size)
        _LOCAL.buf = buf
    return buf


def _msg(exc: OSError) -> str:
    return exc.strerror or str(exc)
