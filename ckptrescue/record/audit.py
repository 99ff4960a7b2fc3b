"""The append-only, hash-chained audit log (``audit.jsonl`` in every case).

Each line is one JSON record::

    {"seq": N, "time": "...Z", "actor": "user@host", "action": "...", "details": {...},
     "artifacts": [SHA256, ...], "prev": HASH_OF_RECORD_N-1, "hash": SHA256}

``hash`` is the SHA-256 of the canonical JSON of the record without ``hash``. The first record's
``prev`` is 64 zeros. Appends hold an exclusive ``flock``, use ``O_APPEND`` and are fsync'd. A line
left half-written by a crash (no trailing newline) is detected by the next append, terminated, and
acknowledged by an ``audit.torn_tail`` record that carries its length and SHA-256, so earlier
records stay verifiable and nothing is silently dropped.

``verify_lines`` is pure (lines in, problems out); :class:`AuditLog` is the file adapter.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import getpass
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from ckptrescue.errors import CkptRescueError
from ckptrescue.model import AuditRecord, JsonObject
from ckptrescue.record.regular import kind_of, open_regular

GENESIS = "0" * 64
_TAIL_WINDOW = 1 << 16


def canonical(obj: Any) -> bytes:
    """Canonical JSON bytes used for hashing, and the exact bytes of a record's line.

    UTF-8; a lone surrogate (a file name that is not UTF-8, as ``os.fsdecode`` gives it) is
    written as its JSON escape (``\\udcff``), which reads back as the same string."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8", "backslashreplace")


def as_read_back(obj: AuditRecord) -> tuple[AuditRecord, bytes]:
    """``obj`` as a reader of its canonical line gets it, and that line: JSON turns integer keys
    into strings (and re-sorts them) and tuples into lists, so a record is hashed as it will be
    read, never as the caller's objects were."""
    data = canonical(obj)
    back = json.loads(data)
    again = canonical(back)
    return (obj, data) if again == data else (back, again)


def record_hash(record: AuditRecord) -> str:
    """SHA-256 of a record's canonical JSON without its ``hash`` field."""
    body = {k: v for k, v in record.items() if k != "hash"}
    return hashlib.sha256(canonical(body)).hexdigest()


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def host_name() -> str:
    """This machine's host name: what ``socket.gethostname()`` returns (the kernel's node name),
    without importing the socket module into every command that writes a case (2.5 ms)."""
    return os.uname().nodename


def default_actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{host_name()}"


# what a record of these actions holds in its details, always a JSON object
_OBJECT_FIELDS = {"evidence.added": "item", "finding": "finding", "case.created": "manifest"}


def well_formed(record: Any) -> bool:
    """A record of the shape the kit writes: an object with an integer ``seq``, a ``hash``,
    details that are an object (holding the object its action names: an evidence item, a
    finding). Readers skip any other (only an edit of the log makes one; ``verify`` names it)."""
    if not isinstance(record, dict) or not isinstance(record.get("seq"), int) \
            or not isinstance(record.get("hash"), str) or not isinstance(record.get("action"), str):
        return False
    details = record.get("details")
    if not isinstance(details, dict):
        return False
    field_name = _OBJECT_FIELDS.get(record.get("action"))  # type: ignore[arg-type]
    return field_name is None or isinstance(details.get(field_name), dict)


@dataclass
class ChainReport:
    """Result of verifying an audit log."""

    records: list[AuditRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    torn_tail: bool = False
    first_broken_seq: int | None = None
    places: dict[int, tuple[int, int]] = field(default_factory=dict)  # seq -> (offset, length)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def head(self) -> str:
        return self.records[-1]["hash"] if self.records else GENESIS


def _parse(raw: bytes) -> AuditRecord | None:
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    return record if isinstance(record, dict) and "hash" in record and "seq" in record else None


def verify_lines(data: bytes) -> ChainReport:
    """Check every record hash and the chain over the raw bytes of an audit log.

    Bytes left by a crash between two records (a torn line, or several) are acceptable only
    when the next record is an ``audit.torn_tail`` acknowledging exactly those bytes (their
    length and SHA-256); a torn tail at the very end is reported, not an error.
    """
    report = ChainReport()
    lines = data.split(b"\n")
    complete = lines[:-1]
    tail = lines[-1]
    prev = GENESIS
    expect_seq = 0
    garbage: list[bytes] = []  # non-record lines since the last record
    garbage_line = 0
    offset = 0
    for lineno, raw in enumerate(complete, start=1):
        start, offset = offset, offset + len(raw) + 1
        record = _parse(raw)
        if record is None:
            if not garbage:
                garbage_line = lineno
            garbage.append(raw)
            continue
        seq = record.get("seq")
        if garbage:
            blob = b"\n".join(garbage)
            ack = record.get("details") if record.get("action") == "audit.torn_tail" else None
            ack = ack if isinstance(ack, dict) else {}
            if (ack.get("length"), ack.get("sha256")) != (len(blob),
                                                           hashlib.sha256(blob).hexdigest()):
                report.problems.append(
                    f"line {garbage_line}: {len(garbage)} line(s) before seq {seq} are not valid "
                    "records and no audit.torn_tail record acknowledges them (edited?)"
                )
                report.first_broken_seq = expect_seq
                return report
            report.notes.append(f"torn record of {len(blob)} bytes before seq {seq} was "
                                "chained over")
            garbage = []
        if seq != expect_seq:
            report.problems.append(
                f"record seq {seq} (line {lineno}): expected seq {expect_seq} "
                "(a record was deleted, inserted or reordered)"
            )
            report.first_broken_seq = expect_seq
            return report
        if record.get("hash") != record_hash(record):
            report.problems.append(
                f"record seq {seq} (line {lineno}): content does not match its hash (edited)"
            )
            report.first_broken_seq = seq
            return report
        if raw != canonical(record):
            report.problems.append(
                f"record seq {seq} (line {lineno}): its bytes are not the ones the kit wrote "
                "(same content, rewritten: spacing, key order, escapes or a repeated key; "
                "edited)"
            )
            report.first_broken_seq = seq
            return report
        if record.get("prev") != prev:
            report.problems.append(
                f"record seq {seq} (line {lineno}): prev hash does not match record "
                f"seq {expect_seq - 1} (chain broken)"
            )
            report.first_broken_seq = seq
            return report
        report.records.append(record)
        report.places[seq] = (start, len(raw) + 1)
        prev = record["hash"]
        expect_seq += 1
    if garbage or tail:
        torn = b"\n".join([*garbage, tail]) if garbage else tail
        report.torn_tail = True
        report.notes.append(f"torn tail: {len(torn)} bytes after the last complete record")
    return report


class CaseWriteError(CkptRescueError):
    """The case could not be written (no space, an I/O error): names the file and the write."""


@dataclass(frozen=True)
class Appended:
    """A record as written: where its line starts in ``audit.jsonl`` and how long it is
    (newline included)."""

    record: AuditRecord
    offset: int
    length: int


class AuditLog:
    """File adapter for one case's ``audit.jsonl``, with group commit.

    Outside a batch, :meth:`append` writes and ``fsync``s one record at once (``flock`` +
    ``O_APPEND``). Inside a batch (:meth:`begin` ... :meth:`end`, which the case opens while it
    holds its writer lock) records are chained in memory and written together: when a record
    must be durable at once (``durable=True``), when the oldest unwritten record is
    ``sync_interval`` seconds old, when ``max_pending`` bytes wait, on :meth:`flush` (the engine
    calls it once per step) and at :meth:`end`. One ``write`` loop takes short writes; one
    ``fsync`` per flush. A crash loses at most the records not yet written; a write cut short
    (no space) leaves a torn tail that the next append acknowledges (``audit.torn_tail``).
    ``listeners`` are told what each write put where (the case's record index). ``durable``
    False (a scratch case removed when its command ends) writes the same records and never
    ``fsync``s them.
    """

    sync_interval = 1.0
    max_pending = 1 << 20

    def __init__(self, path: Path, *, actor: str | None = None) -> None:
        self.path = path
        self.actor = actor or default_actor()
        self.listeners: list[Callable[[list[Appended]], None]] = []
        self._mutex = threading.RLock()
        self._depth = 0
        self._fd: int | None = None
        self._tail: tuple[int, str, int] | None = None  # next seq, prev hash, end offset
        self._torn = b""
        self._pending: list[AuditRecord] = []
        self._pending_data: list[bytes] = []
        self._pending_bytes = 0
        self._prefix = b""  # a newline that terminates torn bytes before the next record
        self._oldest = 0.0
        self._unsynced = False
        self.durable = True

    # -- batches -------------------------------------------------------------------------------
    def begin(self) -> None:
        """Start (or join) a batch: the caller guarantees no other process appends meanwhile
        (the case's writer lock)."""
        with self._mutex:
            self._depth += 1

    def end(self) -> None:
        """Leave the batch; the last level writes and ``fsync``s what is pending."""
        with self._mutex:
            if self._depth == 0:
                return
            self._depth -= 1
            if self._depth:
                return
            try:
                self.flush()
            finally:
                self._close()

    def forget(self) -> None:
        """Forget what this writer wrote and has not synced: its caller took the log back to
        what it was before (a case's first record that did not reach the disk whole)."""
        with self._mutex:
            self._close()
            self._unsynced = False

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd = None
        self._tail = None
        self._torn = b""
        self._drop_pending()

    def _drop_pending(self) -> None:
        self._pending, self._pending_data, self._pending_bytes = [], [], 0
        self._prefix = b""

    @property
    def pending(self) -> int:
        """Records chained but not yet written."""
        return len(self._pending)

    # -- appending -----------------------------------------------------------------------------
    def append(
        self,
        action: str,
        details: JsonObject | None = None,
        *,
        artifacts: list[str] | None = None,
        durable: bool = False,
    ) -> AuditRecord:
        """Chain one record and return it; written at once outside a batch or when
        ``durable``, else with the batch."""
        with self._mutex:
            alone = self._depth == 0
            if alone:
                self.begin()
            try:
                if self._tail is None:
                    self._load_tail()
                assert self._tail is not None
                seq, prev, _end = self._tail
                if self._torn:
                    # Bytes after the last record (a crash mid-append): terminate them and chain
                    # an acknowledgement over them, written before the new record.
                    torn, self._torn = self._torn, b""
                    blob = torn[:-1] if torn.endswith(b"\n") else torn
                    self._prefix = b"" if torn.endswith(b"\n") else b"\n"
                    ack = self._make(seq, prev, "audit.torn_tail",
                                     {"length": len(blob),
                                      "sha256": hashlib.sha256(blob).hexdigest()}, None)
                    self._queue(ack)
                    seq, prev = seq + 1, ack["hash"]
                record = self._make(seq, prev, action, details or {}, artifacts)
                self._queue(record)
                self._tail = (seq + 1, record["hash"], self._tail[2])
                if durable or alone or self._pending_bytes >= self.max_pending \
                        or time.monotonic() - self._oldest >= self.sync_interval:
                    self.flush(sync=durable or alone
                               or time.monotonic() - self._oldest >= self.sync_interval)
                return record
            finally:
                if alone:
                    self.end()

    def _queue(self, record: AuditRecord) -> None:
        data = canonical(record) + b"\n"
        if not self._pending:
            self._oldest = time.monotonic()
        self._pending.append(record)
        self._pending_data.append(data)
        self._pending_bytes += len(data)

    def flush(self, *, sync: bool = True) -> None:
        """Write every pending record in one write loop; ``fsync`` when ``sync``."""
        with self._mutex:
            if not self._pending and not (sync and self._unsynced):
                return
            fd = self._open()
            if self._pending:
                records, sizes = self._pending, [len(d) for d in self._pending_data]
                data = self._prefix + b"".join(self._pending_data)
                prefix = len(self._prefix)
                self._drop_pending()
                start = self._write(fd, records, sizes, data)
                self._unsynced = True
                placed: list[Appended] = []
                pos = start + prefix
                for record, size in zip(records, sizes, strict=True):
                    placed.append(Appended(record, pos, size))
                    pos += size
                assert self._tail is not None
                self._tail = (self._tail[0], self._tail[1], start + len(data))
                for listener in self.listeners:
                    listener(placed)
            if sync and self._unsynced:
                try:
                    if self.durable:
                        os.fsync(fd)
                except OSError as exc:
                    self._fail(exc, "syncing")
                self._unsynced = False

    def _write(self, fd: int, records: list[AuditRecord], sizes: list[int],
               data: bytes) -> int:
        """One write loop (short writes continue where they stopped); returns the offset the
        data starts at. The log must end where this writer left it."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            self._fail(exc, "locking")
        try:
            start = os.fstat(fd).st_size
            assert self._tail is not None
            if start != self._tail[2]:
                self._tail = None
                raise CaseWriteError(
                    f"{self.path}: the log changed while this process was writing it (another "
                    f"writer without the case lock?); {len(records)} record(s) from seq "
                    f"{records[0]['seq']} were not written")
            view, done = memoryview(data), 0
            try:
                while done < len(data):
                    n = os.write(fd, view[done:])
                    if n <= 0:
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                    done += n
            except OSError as exc:
                self._tail = None  # re-read from the file: the torn part is acknowledged
                whole, end = 0, len(data) - sum(sizes)
                for size in sizes:
                    end += size
                    whole += end <= done
                self._fail(exc, f"appending {len(records)} audit record(s) (seq "
                           f"{records[0]['seq']}-{records[-1]['seq']}): {done} of {len(data)} "
                           f"bytes were written; the log ends with seq "
                           f"{records[0]['seq'] + whole - 1} and a torn tail")
            return start
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _fail(self, exc: OSError, doing: str) -> NoReturn:
        raise CaseWriteError(f"{self.path}: {exc.strerror or exc} while {doing}",
                             hint="free space on the case's filesystem (or move the case) "
                             "and run the command again; `case verify` shows what was kept"
                             ) from exc

    def _open(self) -> int:
        if self._fd is None:
            try:
                self._fd = open_regular(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.EINVAL):
                    raise CaseWriteError(
                        f"{self.path}: the case's log is a {kind_of(self.path)}, not a regular "
                        "file of the case; the kit never writes through it",
                        hint="`case verify` shows the case as it is; restore the log from a "
                        "copy you trust") from exc
                self._fail(exc, "opening the audit log")
        return self._fd

    def _load_tail(self) -> None:
        fd = self._open()
        last, torn = _read_tail(fd)
        size = os.fstat(fd).st_size
        self._tail = (last["seq"] + 1 if last else 0, last["hash"] if last else GENESIS, size)
        self._torn = torn

    def _make(
        self,
        seq: int,
        prev: str,
        action: str,
        details: JsonObject,
        artifacts: list[str] | None,
    ) -> AuditRecord:
        record: AuditRecord = {
            "seq": seq,
            "time": utc_now(),
            "actor": self.actor,
            "action": action,
            "details": details,
        }
        if artifacts:
            record["artifacts"] = sorted(set(artifacts))
        record["prev"] = prev
        record, _ = as_read_back(record)
        record["hash"] = record_hash(record)
        return record

    def read_bytes(self) -> bytes:
        return self.path.read_bytes() if self.path.exists() else b""

    def records(self) -> Iterator[AuditRecord]:
        """Parsed records, streamed, skipping torn lines (:func:`verify_lines` judges them).
        Records of this process's batch not yet written are written first (not synced)."""
        self.flush(sync=False)
        try:
            fh = open(self.path, "rb")  # noqa: SIM115 - closed below, also when abandoned
        except FileNotFoundError:
            return
        with fh:
            for raw in fh:
                if not raw.endswith(b"\n") or not raw.strip():
                    continue
                try:
                    record = json.loads(raw)
                except ValueError:
                    continue
                if well_formed(record):
                    yield record

    def head(self) -> AuditRecord | None:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            return _read_tail(fd)[0]
        finally:
            os.close(fd)


def _read_tail(fd: int) -> tuple[AuditRecord | None, bytes]:
    """The last complete record and every byte after its line (torn leftovers, if any)."""
    size = os.fstat(fd).st_size
    if size == 0:
        return None, b""
    window = min(size, _TAIL_WINDOW)
    while True:
        data = os.pread(fd, window, size - window)
        end = len(data)
        # walk complete lines backwards; the part after the last newline is a torn fragment
        cut = data.rfind(b"\n")
        pos = cut
        while pos >= 0:
            start = data.rfind(b"\n", 0, pos) + 1
            if start == 0 and window < size:
                break  # this line may be cut by the window: read more
            record = _parse(data[start:pos])
            if record is not None:
                return record, data[pos + 1 : end]
            pos = start - 1
        if window >= size:
            return None, data
        window = min(size, window * 4)
