"""Read the large ranges of one file on forked processes: the numeric scan without the GIL.

The numeric scan is a dozen numpy calls per 1 MiB chunk. Each call releases and retakes the
GIL, so two threads scanning at once hand it to each other about forty times per MiB, and on a
2-core machine two threads did barely more than one. Processes share no GIL: :func:`read_parts`
forks ``processes - 1`` children of this process (their memory is this process's, copied on
write: the ranges, their scan makers and the open file are already there), and every process,
this one included, takes segments from one queue until it is empty.

By construction, nothing a child does can be lost or believed without being checked:

* The queue is a pipe filled before the fork with 4-byte task numbers (at most
  :data:`MAX_TASKS`, well inside a pipe's buffer); a read of 4 bytes takes one task, so every
  task goes to exactly one process.
* A child reads with ``preadv`` through the bare inherited descriptor (:class:`_Descriptor`;
  the evidence is opened read-only, nothing else is opened), then writes one JSON document to
  its own pipe: for each part it did, the CRC, the bytes read and its scan's state
  (:meth:`StorageScan.wire`). Never pickle. The parent rebuilds each scan with the range's
  own ``make_scan`` and ``unwire``.
* A child never reads through the parent's EIO-tolerant reader, whose record of unreadable bytes
  lives in the parent: an EIO ends the child's work, and the parent reads the part again and
  records what it cannot read.
* A part that is not reported in a well-formed document (the child failed, was killed, or
  its scan cannot be carried) is read again by the parent: the result is the one a single
  process would give, only slower.
* A child leaves with ``os._exit`` (no exit handlers, no buffered output of the parent's);
  it stops taking tasks when its parent is gone. The parent kills and reaps every child when
  it fails itself.

Used where it pays: at least :data:`PROCESS_MIN` bytes, in ranges of :data:`SHARE_MIN` or
more, of work that holds the GIL chunk by chunk (the numeric scan), and ``os.fork`` available.
``CKPTRESCUE_SCAN_PROCESSES=0`` turns processes off (threads then share the work, as for
smaller reads and for a CRC alone: CRC-32 and CRC32C both release the GIL and read the buffer
in place, and a 1 GiB TensorBundle probed with ``--no-numeric`` took the same 0.30-0.31 s
either way).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import os
import signal
import warnings
from collections.abc import Callable
from typing import Any, BinaryIO

PROCESS_MIN = 64 << 20  # bytes to scan in ranges of at least SHARE_MIN, else threads
SHARE_MIN = 1 << 20  # smaller ranges are read by the parent itself
MAX_TASKS = 4096  # queue entries (4 bytes each: 16 KiB, inside any pipe's buffer)

Part = tuple[Any, int, int]  # (range, start, length)
Result = tuple[int, int, Any]  # (crc, bytes read, scan or None)
ReadPart = Callable[[BinaryIO, Any, int, int], Result]


def wanted(fh: BinaryIO, parts: list[Part], workers: int) -> bool:
    """True when ``parts`` should be read on processes (see the module's conditions)."""
    if workers < 2 or not hasattr(os, "fork") or \
            os.environ.get("CKPTRESCUE_SCAN_PROCESSES", "1") == "0":
        return False
    # the work that holds the GIL chunk by chunk: the numeric scan's dozen calls (a CRC
    # alone runs in parallel on threads already)
    held = sum(length for rng, _start, length in parts
               if rng.make_scan is not None and rng.length >= SHARE_MIN)
    return held >= PROCESS_MIN


def tasks_of(parts: list[Part]) -> list[list[int]]:
    """The queue's tasks: runs of consecutive shared parts (ranges of at least
    :data:`SHARE_MIN` bytes) of about ``total / MAX_TASKS`` bytes or more, in file order."""
    shared = [i for i, (rng, _s, _n) in enumerate(parts) if rng.length >= SHARE_MIN]
    total = sum(parts[i][2] for i in shared)
    target = max(1, -(-total // MAX_TASKS))
    tasks: list[list[int]] = []
    size = target
    for i in shared:
        if size >= target:
            tasks.append([])
            size = 0
        tasks[-1].append(i)
        size += max(0, parts[i][2])
    return tasks


def read_parts(fh: BinaryIO, parts: list[Part], read_part: ReadPart,
               processes: int) -> dict[int, Result]:
    """Read ``parts`` on ``processes`` processes (this one included); the result maps part
    indexes to their results. This process reads the small ranges first, then takes tasks
    from the queue with the children. Parts missing from the result were not read (the
    caller reads them): whatever a child took and did not report."""
    tasks = tasks_of(parts)
    results: dict[int, Result] = {}
    if not tasks:
        return results
    qr, qw = os.pipe()
    try:
        os.set_blocking(qw, False)
        os.write(qw, b"".join(t.to_bytes(4, "little") for t in range(len(tasks))))
    except OSError:  # (cannot happen within MAX_TASKS; then this process reads everything)
        os.close(qr)
        return results
    finally:
        os.close(qw)
    # an empty read of the first queued part: every module a part needs (numpy, the CRC) is
    # imported here, once, not in each child (about 0.1 s for numpy, and an import in a
    # forked child can wait forever on a lock another thread of the parent held at the fork)
    rng, start, _length = parts[tasks[0][0]]
    read_part(fh, rng, start, 0)
    parent = os.getpid()
    children: list[tuple[int, int]] = []
    # what the caller froze stays frozen: an unfreeze gives back every frozen object at once
    # (the CLI's start-up, a test worker's collection), not just those _fork froze
    frozen_before = gc.get_freeze_count() > 0
    try:
        for _ in range(max(0, processes - 1)):
            child = _spawn(fh, parts, tasks, qr, parent, read_part)
            if child is None:  # no room for another process: fewer of them do the work
                break
            children.append(child)
        queued = {i for task in tasks for i in task}
        mine = (i for i in range(len(parts)) if i not in queued)
        for index in itertools.chain(mine, _take(qr, tasks, parent)):
            rng, start, length = parts[index]
            results[index] = read_part(fh, rng, start, length)
    except BaseException:
        for pid, _rd in children:
            _kill(pid)
        raise
    finally:
        if not frozen_before:
            gc.unfreeze()
        os.close(qr)
        for pid, rd in children:
            data = _read_all(rd)
            os.close(rd)
            ok = _reap(pid)
            if ok:
                _collect(data, parts, results)
    return results


def _take(qr: int, tasks: list[list[int]], parent: int) -> Any:
    """The part indexes of the tasks this process takes from the queue, in order."""
    while os.getpid() == parent or os.getppid() == parent:
        record = os.read(qr, 4)
        if len(record) < 4:
            return
        number = int.from_bytes(record, "little")
        yield from tasks[number]


def _child(fh: BinaryIO, parts: list[Part], tasks: list[list[int]], qr: int, wr: int,
           parent: int, read_part: ReadPart) -> None:
    code = 1
    try:  # a child never unwinds into its parent's code: whatever happens, it exits here
        fh = _Descriptor(fh.fileno())  # type: ignore[assignment]  # an EIO stops this child
        done: list[list[Any]] = []
        # a failed part ends the child's work; the parent reads what is not reported
        with contextlib.suppress(Exception):
            for index in _take(qr, tasks, parent):
                rng, start, length = parts[index]
                crc, got, scan = read_part(fh, rng, start, length)
                done.append([index, crc, got, None if scan is None else scan.wire()])
        _write_all(wr, json.dumps(done).encode())
        code = 0
    finally:
        os._exit(code)


def _collect(data: bytes, parts: list[Part], results: dict[int, Result]) -> None:
    """Take the parts a child reported, each checked; anything malformed is left unread."""
    try:
        done = json.loads(data)
    except ValueError:
        return
    if not isinstance(done, list):
        return
    for item in done:
        try:
            index, crc, got, state = item
            rng, start, length = parts[index]
            if not (isinstance(crc, int) and isinstance(got, int) and 0 <= got <= length
                    and index not in results):
                continue
            scan = None
            if state is not None:
                if rng.make_scan is None:
                    continue
                scan = rng.make_scan(start, length)
                scan.unwire(state)
            elif rng.make_scan is not None:
                continue
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            continue
        results[index] = (crc, got, scan)


class _Descriptor:
    """What a child reads through: the inherited descriptor alone. The parent's reader may
    be EIO-tolerant (zeros for unreadable units, recorded in the parent's memory); through
    this one an EIO is an error, the child stops, and the parent reads that part again with
    its own reader, which records what it cannot read."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd


def _spawn(fh: BinaryIO, parts: list[Part], tasks: list[list[int]], qr: int, parent: int,
           read_part: ReadPart) -> tuple[int, int] | None:
    """Fork one child; (its pid, the read end of its report pipe), or None when the system
    refuses another process. The child never returns from here: every signal is blocked
    across the fork and unblocked only inside the ``try`` whose ``finally`` ends the process,
    so not even a Ctrl-C at that instant can send a copy of this process back into its
    caller's code (under a test runner, a second worker on the same pipes)."""
    rd, wr = os.pipe()
    held = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        pid = _fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        os.close(rd)
        os.close(wr)
        return None
    if pid == 0:
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            gc.disable()
            os.close(rd)
            _child(fh, parts, tasks, qr, wr, parent, read_part)
        finally:
            os._exit(1)
    signal.pthread_sigmask(signal.SIG_SETMASK, held)
    os.close(wr)
    return pid, rd


def _fork() -> int:
    gc.freeze()  # a collection walks every object, writing to each: after the fork, in the
    # parent, that would copy every page of the heap the child shares; frozen objects are not
    # walked (the parent unfreezes them when the children are done, unless it found some
    # frozen already)
    with warnings.catch_warnings():  # Python 3.12+ warns of fork in a threaded process; the
        warnings.simplefilter("ignore", DeprecationWarning)  # child runs only this module
        return os.fork()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 1 << 20)
        except OSError:
            return b""
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _reap(pid: int) -> bool:
    """Wait for a child; True when it exited normally with status 0."""
    while True:
        try:
            _pid, status = os.waitpid(pid, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            return False
        return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
