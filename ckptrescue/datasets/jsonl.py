"""JSON lines: every line parses as JSON (UTF-8), naming the line (index = 0-based line number).

An empty last line (the final newline) is fine; any other empty line, a line with NUL bytes (a
zero-filled torn write), invalid UTF-8, or a line that does not parse is a bad record. A line
nested deeper than :data:`MAX_DEPTH` levels is not parsed (bounded recursion): the file is then
``unchecked`` with the line numbers as the reason.
"""

from __future__ import annotations

import json
from typing import IO

from ckptrescue.checkpoints.formats.jsondepth import too_deep
from ckptrescue.datasets.shardcheck import BadRecord, CheckOutcome

MAX_LINE = 64 << 20
# json.loads recurses once per level (RecursionError near 1000); deeper lines are not parsed
MAX_DEPTH = 500
_TOO_DEEP = "too deep"


def check(fh: IO[bytes], size: int | None, out: CheckOutcome | None = None) -> CheckOutcome:
    out = CheckOutcome() if out is None else out
    pos = 0
    index = 0
    deep: list[int] = []  # 1-based numbers of lines too deeply nested to parse
    last: tuple[bytes, bool] | None = None  # a run of identical lines (a bomb repeats one)
    last_problem: str | None = None
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
        key = (body, line.endswith(b"\n"))
        if key == last:
            problem = last_problem  # the same bytes give the same verdict
        else:
            problem = _problem(*key)
            last, last_problem = key, problem
        if problem is _TOO_DEEP:
            deep.append(index + 1)
        elif problem:
            out.bad.append(BadRecord(index, start, None, f"line {index + 1}: {problem}"))
        else:
            out.records += 1
        index += 1
    if deep:
        out.unchecked_reason = (
            f"{len(deep)} line(s) nested deeper than {MAX_DEPTH} levels were not parsed "
            f"(Python's json cannot load them either): line(s) "
            + ", ".join(str(n) for n in deep[:10]) + (" ..." if len(deep) > 10 else ""))
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
    if body.count(b"[") + body.count(b"{") > MAX_DEPTH and too_deep(body, MAX_DEPTH) is not None:
        return _TOO_DEEP  # (the bracket count is a fast filter: most lines never need the scan)
    try:
        json.loads(text)
    except RecursionError:
        return _TOO_DEEP
    except ValueError as exc:
        why = "does not parse" + ("" if terminated else " (last line, no newline: truncated?)")
        return f"{why}: {exc}"
    return None


def _skip_line(fh: IO[bytes]) -> None:
    while True:
        chunk = fh.readline(1 << 20)  # type: ignore[call-arg]
        if not chunk or chunk.endswith(b"\n"):
            return
