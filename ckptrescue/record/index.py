"""Where each record of the log is, by action: readers find a case's evidence, steps, outputs and
findings without replaying the whole log.

``CASE/index.jsonl`` is derived from ``audit.jsonl`` and can be rebuilt from it at any time. Each
line names one record: ``{"a": action, "h": hash, "n": length, "o": offset, "s": seq}`` (its line
in the log is ``n`` bytes at byte ``o``, newline included). Every record of an action in
:data:`INDEXED` has a line; so does the last record of each write (the index says how far it
covers the log).

A reader (:class:`RecordIndex`) takes the index file as far as its last line agrees with the log
(that record is read back and its seq and hash compared) and reads the log only after it; a
missing, torn or disagreeing index is rebuilt from the log in memory. The case's writer appends
lines after each write of the log, and rewrites the file (temp file, ``fsync``, rename) when it
finds it missing or wrong. ``case verify`` checks every line against the log
(:func:`check_file`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckptrescue.record.atomic import write_atomic

INDEX = "index.jsonl"
INDEXED = frozenset({
    "case.created", "case.sealed", "evidence.added", "finding", "findings.table",
    "run.started", "run.finished", "step.started", "step.finished", "step.skipped",
    "step.interrupted", "safety.attached", "safety.detached", "safety.kernel", "audit.torn_tail",
})
# parsed records of these actions are kept in memory once read (few per case)
_CACHED = INDEXED - {"finding"}


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


def scan_log(fh: Any, start: int) -> Iterator[tuple[Entry, dict[str, Any]]]:
    """Every complete record of the log from byte ``start`` (a line start), with its place.
    Lines that are not records (an acknowledged torn write) are skipped; a last line without
    its newline (a write in progress, a torn tail) is not a record yet."""
    fh.seek(start)
    pos = start
    for raw in fh:
        size = len(raw)
        if raw.endswith(b"\n"):
            try:
                record = json.loads(raw)
            except ValueError:
                record = None
            if isinstance(record, dict) and "seq" in record and "hash" in record:
                yield Entry(int(record["seq"]), str(record["hash"]), str(record.get("action")),
                            pos, size), record
        pos += size


def wanted(entry: Entry) -> bool:
    return entry.action in INDEXED


class RecordIndex:
    """The in-memory index of one case's log, kept up to date incrementally."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.log_path = self.root / "audit.jsonl"
        self.path = self.root / INDEX
        self.entries: list[Entry] = []
        self.last: Entry | None = None  # the last record covered
        self.log_size = -1
        self.file_size = -1  # bytes of index.jsonl known to agree with ``entries``
        self._by_action: dict[str, list[Entry]] = {}
        self._parsed: dict[int, dict[str, Any]] = {}

    # -- keeping up ----------------------------------------------------------------------------
    def refresh(self) -> None:
        """Catch up with the log: from the index file the first time, then from the log."""
        try:
            size = os.stat(self.log_path).st_size
        except FileNotFoundError:
            self._reset()
            self.log_size = 0
            return
        if size == self.log_size:
            return
        if self.log_size < 0 or not self._still_there(self.last):
            self._reset()
            self._load_file()
        self._catch_up()

    def _reset(self) -> None:
        self.entries, self.last, self.log_size, self.file_size = [], None, -1, -1
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

    def _load_file(self) -> None:
        try:
            data = self.path.read_bytes()
        except OSError:
            return
        entries: list[Entry] = []
        used = 0
        for raw in data.splitlines(keepends=True):
            entry = parse_line(raw) if raw.endswith(b"\n") else None
            if entry is None or (entries and entry.seq <= entries[-1].seq):
                break
            entries.append(entry)
            used += len(raw)
        # trust the file up to its last line that the log agrees with
        while entries and not self._still_there(entries[-1]):
            entries.pop()
            used = -1
        if not entries:
            return
        self.file_size = used if used == len(data) else -1
        self.last = entries[-1]
        for entry in entries:
            if wanted(entry):
                self._add(entry)

    def _catch_up(self) -> None:
        start = self.last.end if self.last is not None else 0
        try:
            with open(self.log_path, "rb") as fh:
                for entry, record in scan_log(fh, start):
                    self._take(entry, record)
                self.log_size = os.fstat(fh.fileno()).st_size
        except FileNotFoundError:
            self.log_size = 0

    def _take(self, entry: Entry, record: dict[str, Any] | None) -> None:
        if self.last is not None and entry.seq <= self.last.seq:
            return
        self.last = entry
        if wanted(entry):
            self._add(entry)
            if record is not None and entry.action in _CACHED:
                self._parsed[entry.seq] = record

    def _add(self, entry: Entry) -> None:
        self.entries.append(entry)
        self._by_action.setdefault(entry.action, []).append(entry)

    def extend(self, placed: Iterable[tuple[dict[str, Any], int, int]]) -> list[Entry]:
        """Records this process just wrote (record, offset, length); returns their lines."""
        lines: list[Entry] = []
        if self.log_size < 0:
            self.refresh()  # first look at this log: it already holds what was just written
            return lines
        last: Entry | None = None
        for record, offset, length in placed:
            entry = Entry(int(record["seq"]), str(record["hash"]), str(record["action"]),
                          offset, length)
            if self.last is not None and entry.seq <= self.last.seq:
                continue
            self._take(entry, record)
            if wanted(entry):
                lines.append(entry)
            last = entry
            self.log_size = max(self.log_size, entry.end)
        if last is not None and (not lines or lines[-1] != last):
            lines.append(last)  # how far the index covers the log
        return lines

    # -- reading -------------------------------------------------------------------------------
    def of(self, action: str) -> list[Entry]:
        return list(self._by_action.get(action, ()))

    def records(self, action: str) -> Iterator[dict[str, Any]]:
        """The records of one indexed action, oldest first."""
        entries = self._by_action.get(action, ())
        if not entries:
            return
        with open(self.log_path, "rb") as fh:
            for entry in list(entries):
                record = self._parsed.get(entry.seq)
                if record is None:
                    fh.seek(entry.offset)
                    try:
                        record = json.loads(fh.read(entry.length))
                    except ValueError:
                        continue  # the log changed under the index; verify names it
                    if action in _CACHED:
                        self._parsed[entry.seq] = record
                yield record

    # -- the file ------------------------------------------------------------------------------
    def write_lines(self, lines: list[Entry]) -> None:
        """Append lines after a write of the log (the writer's side); rewrite the whole file
        when it is not the one this index knows."""
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            size = -2
        if size != self.file_size:
            self.rewrite()
            return
        if not lines:
            return
        data = b"".join(e.line() for e in lines)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        self.file_size += len(data)

    def rewrite(self) -> None:
        lines = list(self.entries)
        if self.last is not None and (not lines or lines[-1] != self.last):
            lines.append(self.last)
        data = b"".join(e.line() for e in lines)
        write_atomic(self.path, data)
        self.file_size = len(data)


def check_file(root: Path, records: list[dict[str, Any]], places: dict[int, tuple[int, int]]
               ) -> tuple[list[str], list[str]]:
    """(problems, notes) of ``index.jsonl`` against the verified records of the log and their
    places (seq -> (offset, length)). Missing or behind: a note (it is re-derived); a line that
    names a record the log does not hold there, or an indexed record left out: a problem."""
    path = Path(root) / INDEX
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], [f"{INDEX} is missing; it is derived from the log and rebuilt by the next "
                    "command that writes into the case"]
    except OSError as exc:
        return [f"{INDEX}: unreadable ({exc.strerror})"], []
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
