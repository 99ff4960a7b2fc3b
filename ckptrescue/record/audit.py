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

import fcntl
import getpass
import hashlib
import json
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

GENESIS = "0" * 64
_TAIL_WINDOW = 1 << 20


def canonical(obj: Any) -> bytes:
    """Canonical JSON bytes used for hashing."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def record_hash(record: dict[str, Any]) -> str:
    """SHA-256 of a record's canonical JSON without its ``hash`` field."""
    body = {k: v for k, v in record.items() if k != "hash"}
    return hashlib.sha256(canonical(body)).hexdigest()


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


@dataclass
class ChainReport:
    """Result of verifying an audit log."""

    records: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    torn_tail: bool = False
    first_broken_seq: int | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def head(self) -> str:
        return self.records[-1]["hash"] if self.records else GENESIS


def _parse(raw: bytes) -> dict[str, Any] | None:
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
    for lineno, raw in enumerate(complete, start=1):
        record = _parse(raw)
        if record is None:
            if not garbage:
                garbage_line = lineno
            garbage.append(raw)
            continue
        seq = record.get("seq")
        if garbage:
            blob = b"\n".join(garbage)
            ack = record.get("details", {}) if record.get("action") == "audit.torn_tail" else {}
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
        if record.get("prev") != prev:
            report.problems.append(
                f"record seq {seq} (line {lineno}): prev hash does not match record "
                f"seq {expect_seq - 1} (chain broken)"
            )
            report.first_broken_seq = seq
            return report
        report.records.append(record)
        prev = record["hash"]
        expect_seq += 1
    if garbage or tail:
        torn = b"\n".join([*garbage, tail]) if garbage else tail
        report.torn_tail = True
        report.notes.append(f"torn tail: {len(torn)} bytes after the last complete record")
    return report


class AuditLog:
    """File adapter for one case's ``audit.jsonl``."""

    def __init__(self, path: Path, *, actor: str | None = None) -> None:
        self.path = path
        self.actor = actor or default_actor()

    def append(
        self,
        action: str,
        details: dict[str, Any] | None = None,
        *,
        artifacts: list[str] | None = None,
    ) -> dict[str, Any]:
        """Append one record (flock + O_APPEND + fsync) and return it."""
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            last, torn = _read_tail(fd)
            prev = last["hash"] if last else GENESIS
            seq = last["seq"] + 1 if last else 0
            out = b""
            if torn:
                # Bytes after the last record (a crash mid-append): terminate them and chain an
                # acknowledgement over them, in the same single write as the new record.
                blob = torn[:-1] if torn.endswith(b"\n") else torn
                if not torn.endswith(b"\n"):
                    out += b"\n"
                ack = self._make(seq, prev, "audit.torn_tail",
                                 {"length": len(blob), "sha256": hashlib.sha256(blob).hexdigest()},
                                 None)
                out += canonical(ack) + b"\n"
                prev, seq = ack["hash"], seq + 1
            record = self._make(seq, prev, action, details or {}, artifacts)
            os.write(fd, out + canonical(record) + b"\n")
            os.fsync(fd)
            return record
        finally:
            os.close(fd)

    def _make(
        self,
        seq: int,
        prev: str,
        action: str,
        details: dict[str, Any],
        artifacts: list[str] | None,
    ) -> dict[str, Any]:
        record: dict[str, Any] = {
            "seq": seq,
            "time": utc_now(),
            "actor": self.actor,
            "action": action,
            "details": details,
        }
        if artifacts:
            record["artifacts"] = sorted(set(artifacts))
        record["prev"] = prev
        record["hash"] = record_hash(record)
        return record

    def read_bytes(self) -> bytes:
        return self.path.read_bytes() if self.path.exists() else b""

    def records(self) -> Iterator[dict[str, Any]]:
        """Parsed records, skipping torn lines (use :func:`verify_lines` to judge them)."""
        for raw in self.read_bytes().split(b"\n"):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if isinstance(record, dict) and "seq" in record:
                yield record

    def head(self) -> dict[str, Any] | None:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            return _read_tail(fd)[0]
        finally:
            os.close(fd)


def _read_tail(fd: int) -> tuple[dict[str, Any] | None, bytes]:
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
