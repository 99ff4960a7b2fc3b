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


def verify_lines(data: bytes) -> ChainReport:
    """Check every record hash and the chain over the raw bytes of an audit log."""
    report = ChainReport()
    lines = data.split(b"\n")
    complete = lines[:-1]
    tail = lines[-1]
    prev = GENESIS
    expect_seq = 0
    pending_torn: tuple[int, str] | None = None  # (length, sha256) of a torn line awaiting an ack
    for lineno, raw in enumerate(complete, start=1):
        if not raw.strip():
            report.problems.append(f"line {lineno}: empty line in the audit log")
            report.first_broken_seq = report.first_broken_seq or expect_seq
            return report
        try:
            record = json.loads(raw)
            if not isinstance(record, dict):
                raise ValueError("not an object")
        except ValueError:
            if pending_torn is None:
                pending_torn = (len(raw), hashlib.sha256(raw).hexdigest())
                continue
            report.problems.append(f"line {lineno}: not a valid JSON record")
            report.first_broken_seq = expect_seq
            return report
        seq = record.get("seq")
        if pending_torn is not None:
            ack = record.get("details", {}) if record.get("action") == "audit.torn_tail" else {}
            if (ack.get("length"), ack.get("sha256")) != pending_torn:
                report.problems.append(
                    f"line {lineno - 1}: record before seq {seq} is not valid JSON "
                    "and no audit.torn_tail record acknowledges it"
                )
                report.first_broken_seq = expect_seq
                return report
            report.notes.append(
                f"torn record of {pending_torn[0]} bytes before seq {seq} was chained over"
            )
            pending_torn = None
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
    if pending_torn is not None:
        report.problems.append("a record in the middle of the log is not valid JSON")
        report.first_broken_seq = expect_seq
    if tail:
        report.torn_tail = True
        report.notes.append(f"torn tail: {len(tail)} bytes after the last complete record")
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
            if torn is not None:
                os.write(fd, b"\n")
                ack = self._make(
                    seq,
                    prev,
                    "audit.torn_tail",
                    {"length": len(torn), "sha256": hashlib.sha256(torn).hexdigest()},
                    None,
                )
                os.write(fd, canonical(ack) + b"\n")
                prev, seq = ack["hash"], seq + 1
            record = self._make(seq, prev, action, details or {}, artifacts)
            os.write(fd, canonical(record) + b"\n")
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


def _read_tail(fd: int) -> tuple[dict[str, Any] | None, bytes | None]:
    """The last complete record and the torn bytes after it (if any)."""
    size = os.fstat(fd).st_size
    if size == 0:
        return None, None
    window = min(size, _TAIL_WINDOW)
    data = os.pread(fd, window, size - window)
    while True:
        torn: bytes | None = None
        if not data.endswith(b"\n"):
            cut = data.rfind(b"\n")
            if cut < 0 and window < size:
                window = min(size, window * 4)
                data = os.pread(fd, window, size - window)
                continue
            torn = data[cut + 1 :]
            body = data[: cut + 1]
        else:
            body = data
        for raw in reversed(body.split(b"\n")):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except ValueError:
                continue  # an earlier torn line already acknowledged
            if isinstance(record, dict) and "hash" in record:
                return record, torn
        if window >= size:
            return None, torn
        window = min(size, window * 4)
        data = os.pread(fd, window, size - window)
