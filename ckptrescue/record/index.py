"""Where each record of the log is, by action: readers find a case's evidence, steps, outputs and
findings without parsing the whole log.

Each process derives its index from ``audit.jsonl`` itself, in one pass over its bytes that
parses only the records of the actions in :data:`INDEXED` (a record's line starts with its
action: the canonical JSON sorts ``action`` first), and keeps up incrementally after that. The
readers (the answer, the report, the TUI, the next writer's evidence ids) never take a derived
file on trust: an edited ``index.jsonl`` changes nothing they show or write.

``CASE/index.jsonl`` is that index written down for readers outside the kit, derived and
rewritten like the case's other summaries: each line names one record,
``{"a": action, "h": hash, "n": length, "o": offset, "s": seq}`` (its line in the log is ``n``
bytes at byte ``o``, newline included); every record of an indexed action has a line, and so
does the last record of each write (how far it covers the log). The case's writer appends lines
after each write of the log and rewrites the file (temp file, ``fsync``, rename) when it is not
the one it knows. ``case verify`` checks every line against the log (:func:`check_file`).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ckptrescue.model import AuditRecord
from ckptrescue.record.atomic import write_atomic
from ckptrescue.record.audit import well_formed
from ckptrescue.record.regular import open_regular, read_regular

INDEX = "index.jsonl"
INDEXED = frozenset({
    "case.created", "case.sealed", "evidence.added", "finding", "findings.table",
    "run.started", "run.finished", "step.started", "step.finished", "step.skipped",
    "step.interrupted", "safety.attached", "safety.detached", "safety.kernel", "audit.torn_tail",
})
# parsed records of these actions are kept in memory once read (few per case)
_CACHED = INDEXED - {"finding"}
_PREFIX = b'{"action":"'
_INDEXED_BYTES = frozenset(a.encode() for a in INDEXED)


@dataclass(frozen=True)
class Entry:
    """One record's place in the log."""

    seq: int
    hash: str
    action: str
    offset: int
    length: int

    @property
    def end(self) -> int:
        return self.offset + self.length

    def line(self) -> bytes:
        return json.dumps({"a": self.action, "h": self.hash, "n": self.length,
                           "o": self.offset, "s": self.seq}, sort_keys=True,
                          separators=(",", ":")).encode() + b"\n"


def parse_line(raw: bytes) -> Entry | None:
    try:
        data = json.loads(raw)
        entry = Entry(seq=int(data["s"]), hash=str(data["h"]), action=str(data["a"]),
                      offset=int(data["o"]), length=int(data["n"]))
    except (ValueError, KeyError, TypeError):
        return None
    return entry if entry.offset >= 0 and entry.length > 0 else None


def action_of(raw: bytes) -> bytes | None:
    """The action a canonical record line starts with (None for any other line)."""
    if not raw.startswith(_PREFIX):
        return None
    end = raw.find(b'"', len(_PREFIX))
    return raw[len(_PREFIX):end] if end > 0 else None


def _record(raw: bytes) -> AuditRecord | None:
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    return record if well_formed(record) else None  # else: verify names what it is


def wanted(entry: Entry) -> bool:
    return entry.action in INDEXED


class RecordIndex:
    """The in-memory index of one case's log, derived from the log and kept up to date."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.log_path = self.root / "audit.jsonl"
        self.path = self.root / INDEX
        self.entries: list[Entry] = []
        self.last: Entry | None = None  # the last record read (where the index stops)
        self.scanned = 0  # the log is read up to here (the end of its last complete line)
        self.log_size = -1
        self.file_size = -1  # bytes of index.jsonl known to agree with ``entries``
        self._by_action: dict[str, list[Entry]] = {}
        self._parsed: dict[int, AuditRecord] = {}
        self._mutex = threading.RLock()
        self.durable = True  # False: a scratch case's index, rewritten without fsync

    # -- keeping up ----------------------------------------------------------------------------
    def refresh(self) -> None:
        """Catch up with the log (from its start the first time, or when it was cut or
        rewritten under this index)."""
        with self._mutex:
            try:
                size = os.stat(self.log_path).st_size
            except FileNotFoundError:
                self._reset()
                self.log_size = 0
                return
            if size == self.log_size:
                return
            if self.log_size < 0 or size < self.scanned or not self._still_there(self.last):
                self._reset()
            self.log_size = size
            self._catch_up({})

    def _reset(self) -> None:
        self.entries, self.last, self.scanned = [], None, 0
        self.log_size, self.file_size = -1, -1
        self._by_action, self._parsed = {}, {}

    def _still_there(self, entry: Entry | None) -> bool:
        if entry is None:
            return True
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(entry.offset)
                raw = fh.read(entry.length)
            record = json.loads(raw)
        except (OSError, ValueError):
            return False
        return isinstance(record, dict) and record.get("seq") == entry.seq \
            and record.get("hash") == entry.hash and raw.endswith(b"\n")

    def _catch_up(self, known: dict[int, AuditRecord]) -> list[Entry]:
        """Read the log from :attr:`scanned` to its last complete line; ``known``: records this
        process just wrote, by offset (not parsed again). Returns the new lines of the index."""
        lines: list[Entry] = []
        tail: tuple[int, bytes] | None = None
        try:
            fh = open(self.log_path, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return lines
        with fh:
            fh.seek(self.scanned)
            pos = self.scanned
            for raw in fh:
                if not raw.endswith(b"\n"):
                    break  # a write in progress, or a torn tail: not a record yet
                if action_of(raw) in _INDEXED_BYTES:
                    record = known.get(pos) or _record(raw)
                    if record is not None and self._take(record, pos, len(raw)):
                        lines.append(self.entries[-1])
                tail = (pos, raw)
                pos += len(raw)
            self.scanned = pos
        if tail is not None and (self.last is None or self.last.offset != tail[0]):
            record = known.get(tail[0]) or _record(tail[1])
            if record is not None and (self.last is None or record["seq"] > self.last.seq):
                self.last = Entry(record["seq"], record["hash"], str(record.get("action")),
                                  tail[0], len(tail[1]))
                lines.append(self.last)  # how far the index covers the log
        return lines

    def _take(self, record: AuditRecord, offset: int, length: int) -> bool:
        entry = Entry(record["seq"], record["hash"], str(record.get("action")), offset, length)
        if self.last is not None and entry.seq <= self.last.seq:
            return False  # a repeated record (verify names it)
        self.last = entry
        self.entries.append(entry)
        self._by_action.setdefault(entry.action, []).append(entry)
        if entry.action in _CACHED:
            self._parsed[entry.seq] = record
        return True

    def extend(self, placed: list[tuple[AuditRecord, int, int]]) -> list[Entry]:
        """After this process wrote records (record, offset, length): read them into the index
        (without parsing them again); returns the new lines of the index."""
        with self._mutex:
            if self.log_size < 0:
                self.refresh()  # first look at this log: it already holds what was just written
                return []
            lines = self._catch_up({offset: record for record, offset, _length in placed})
            self.log_size = max(self.log_size, self.scanned)
            return lines

    # -- reading -------------------------------------------------------------------------------
    def of(self, action: str) -> list[Entry]:
        with self._mutex:
            return list(self._by_action.get(action, ()))

    def records(self, action: str) -> Iterator[AuditRecord]:
        """The records of one indexed action, oldest first."""
        entries = self.of(action)
        if not entries:
            return
        with open(self.log_path, "rb") as fh:
            for entry in entries:
                record = self._parsed.get(entry.seq)
                if record is None:
                    fh.seek(entry.offset)
                    record = _record(fh.read(entry.length))
                    if record is None or record.get("seq") != entry.seq \
                            or record.get("hash") != entry.hash:
                        continue  # the log changed under the index; verify names it
                    if action in _CACHED:
                        self._parsed[entry.seq] = record
                yield record

    # -- the file ------------------------------------------------------------------------------
    def write_lines(self, lines: list[Entry]) -> None:
        """Append lines after a write of the log (the writer's side); rewrite the whole file
        when it is not the one this index knows."""
        with self._mutex:
            try:
                size = os.lstat(self.path).st_size
            except FileNotFoundError:
                size = -2
            if size != self.file_size:
                self.rewrite()
                return
            if not lines:
                return
            data = b"".join(e.line() for e in lines)
            fd = open_regular(self.path, os.O_WRONLY | os.O_APPEND)
            try:
                done = os.write(fd, data)
            finally:
                os.close(fd)
            self.file_size = self.file_size + done if done == len(data) else -1

    def rewrite(self) -> None:
        with self._mutex:
            lines = list(self.entries)
            if self.last is not None and (not lines or lines[-1] != self.last):
                lines.append(self.last)
            data = b"".join(e.line() for e in lines)
            write_atomic(self.path, data, durable=self.durable)
            self.file_size = len(data)


def check_file(root: Path, records: list[AuditRecord], places: dict[int, tuple[int, int]],
               *, data: bytes | OSError | bool | None = True) -> tuple[list[str], list[str]]:
    """(problems, notes) of ``index.jsonl`` against the verified records of the log and their
    places (seq -> (offset, length)). Missing or behind: a note (it is re-derived); a line that
    names a record the log does not hold there, or an indexed record left out: a problem.
    ``data``: the file's bytes as read before the log (None: missing; an error: unreadable);
    by default it is read here."""
    path = Path(root) / INDEX
    if data is True:
        try:
            data = read_regular(path)
        except FileNotFoundError:
            data = None
        except OSError as exc:
            data = exc
    if data is None:
        return [], [f"{INDEX} is missing; it is derived from the log and rebuilt by the next "
                    "command that writes into the case"]
    if not isinstance(data, bytes):
        return [f"{INDEX}: unreadable or not a regular file ({data.strerror or data})"], []
    by_seq = {int(r["seq"]): r for r in records}
    problems: list[str] = []
    notes: list[str] = []
    raw_lines = data.splitlines(keepends=True)
    if raw_lines and not raw_lines[-1].endswith(b"\n"):
        notes.append(f"{INDEX} ends with a torn line (a crash while it was written); ignored")
        raw_lines = raw_lines[:-1]
    seen: list[int] = []
    last_seq = int(records[-1]["seq"]) if records else -1
    for lineno, raw in enumerate(raw_lines, start=1):
        entry = parse_line(raw)
        if entry is not None and entry.seq > last_seq and (not seen or entry.seq > seen[-1]):
            beyond = len(raw_lines) - lineno + 1
            notes.append(f"{INDEX} names {beyond} record(s) after the last record of the log "
                         f"(seq {last_seq}): the log lost its tail (a crash before it was "
                         "synced) or was cut back; compare with the head kept out of band")
            break
        record = by_seq.get(entry.seq) if entry is not None else None
        if entry is None or record is None or record.get("hash") != entry.hash \
                or record.get("action") != entry.action \
                or places.get(entry.seq) != (entry.offset, entry.length) \
                or (seen and entry.seq <= seen[-1]):
            problems.append(f"{INDEX} line {lineno} does not match the log: it was edited")
            return problems, notes
        seen.append(entry.seq)
    covered = seen[-1] if seen else -1
    listed = set(seen)
    left_out = [int(r["seq"]) for r in records
                if r.get("action") in INDEXED and int(r["seq"]) <= covered
                and int(r["seq"]) not in listed]
    if left_out:
        problems.append(f"{INDEX} leaves out {len(left_out)} record(s) it covers (first seq "
                        f"{left_out[0]}): it was edited")
    elif records and covered < int(records[-1]["seq"]):
        notes.append(f"{INDEX} covers the log up to seq {covered} of "
                     f"{records[-1]['seq']} (written before the last records; re-derived)")
    return problems, notes
