"""JSON lines: every line parses as JSON (UTF-8), naming the line (index = 0-based line number).

An empty last line (the final newline) is fine; any other empty line, a line with NUL bytes (a
zero-filled torn write), invalid UTF-8, or a line that does not parse is a bad record.
"""

from __future__ import annotations

import json
from typing import IO

from ckptrescue.datasets.shardcheck import BadRecord, CheckOutcome

MAX_LINE = 64 << 20


def check(fh: IO[bytes], size: int | None) -> CheckOutcome:
    out = CheckOutcome()
    pos = 0
    index = 0
    while True:
        line = fh.readline(MAX_LINE + 1)  # type: ignore[call-arg]
        if not line:
            break
        start = pos
        pos += len(line)
        if len(line) > MAX_LINE and not line.endswith(b"\n"):
            out.bad.append(BadRecord(index, start, None, f"line longer than {MAX_LINE} bytes"))
            _skip_line(fh)
            break
        body = line.rstrip(b"\r\n")
        problem = _problem(body, line.endswith(b"\n"))
        if problem:
            out.bad.append(BadRecord(index, start, None, f"line {index + 1}: {problem}"))
        else:
            out.records += 1
        index += 1
    return out


def _problem(body: bytes, terminated: bool) -> str | None:
    if not body.strip():
        return "empty line"
    if b"\0" in body:
        return "NUL bytes (zero-filled region?)"
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"invalid UTF-8 at byte {exc.start}"
    try:
        json.loads(text)
    except ValueError as exc:
        why = "does not parse" + ("" if terminated else " (last line, no newline: truncated?)")
        return f"{why}: {exc}"
    return None


def _skip_line(fh: IO[bytes]) -> None:
    while True:
        chunk = fh.readline(1 << 20)  # type: ignore[call-arg]
        if not chunk or chunk.endswith(b"\n"):
            return
