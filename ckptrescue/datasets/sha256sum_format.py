"""The ``sha256sum`` line format, byte for byte as GNU coreutils writes and reads it.

Pure: bytes in, bytes out. A line is ``HEX  NAME\\n`` (two spaces: text mode). When the name
holds a backslash, a newline or a carriage return, coreutils writes ``\\`` before the hash and
escapes them in the name as ``\\\\``, ``\\n`` and ``\\r``. Names are raw bytes: a name that is not
UTF-8 is written as its bytes, which ``sha256sum -c`` reads back the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

_HEX = re.compile(rb"^[0-9a-fA-F]{64}$")
_ESCAPES = {b"\\": b"\\\\", b"\n": b"\\n", b"\r": b"\\r"}
_UNESCAPES = {b"\\": b"\\", b"n": b"\n", b"r": b"\r"}


class ManifestSyntaxError(ValueError):
    """A manifest line that is not in ``sha256sum`` format."""

    def __init__(self, lineno: int, reason: str) -> None:
        super().__init__(f"line {lineno}: {reason}")
        self.lineno = lineno
        self.reason = reason


@dataclass(frozen=True)
class ManifestLine:
    """One parsed line: the expected digest of the file at ``name`` (bytes, relative)."""

    sha256: str
    name: bytes
    lineno: int


def needs_escape(name: bytes) -> bool:
    return any(ch in name for ch in (b"\\", b"\n", b"\r"))


def escape_name(name: bytes) -> bytes:
    out = bytearray()
    for byte in name:
        ch = bytes([byte])
        out += _ESCAPES.get(ch, ch)
    return bytes(out)


def unescape_name(text: bytes) -> bytes:
    """Undo :func:`escape_name`; raises ValueError on an unknown or dangling escape."""
    out = bytearray()
    i = 0
    while i < len(text):
        ch = text[i : i + 1]
        if ch == b"\\":
            nxt = text[i + 1 : i + 2]
            if nxt not in _UNESCAPES:
                raise ValueError(f"unknown escape \\{nxt.decode('latin-1')}")
            out += _UNESCAPES[nxt]
            i += 2
        else:
            out += ch
            i += 1
    return bytes(out)


def plain_name(name: bytes) -> bytes:
    """Names as sha256sum users write them: ``./a/b`` and ``a/b`` are the same file."""
    while name.startswith(b"./"):
        name = name[2:]
    return name


def format_line(sha256: str, name: bytes) -> bytes:
    """One ``sha256sum`` output line for ``name`` (ends in a newline)."""
    if needs_escape(name):
        return b"\\" + sha256.encode("ascii") + b"  " + escape_name(name) + b"\n"
    return sha256.encode("ascii") + b"  " + name + b"\n"


def parse_line(raw: bytes, lineno: int) -> ManifestLine | None:
    """Parse one line (without its newline); None for a blank line."""
    line = raw[:-1] if raw.endswith(b"\r") and not raw.startswith(b"\\") else raw
    if not line.strip():
        return None
    escaped = line.startswith(b"\\")
    if escaped:
        line = line[1:]
    digest, sep, rest = line[:64], line[64:66], line[66:]
    if not _HEX.match(digest):
        raise ManifestSyntaxError(lineno, "expected 64 hex digits of SHA-256")
    if sep not in (b"  ", b" *"):
        raise ManifestSyntaxError(lineno, "expected two spaces (or ' *') after the hash")
    if not rest:
        raise ManifestSyntaxError(lineno, "no file name")
    name = rest
    if escaped:
        try:
            name = unescape_name(rest)
        except ValueError as exc:
            raise ManifestSyntaxError(lineno, str(exc)) from exc
    return ManifestLine(sha256=digest.decode("ascii").lower(), name=name, lineno=lineno)


def parse_manifest(data: bytes) -> Iterator[ManifestLine]:
    """Every entry of a ``sha256sum`` manifest (raises ManifestSyntaxError naming the line)."""
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        parsed = parse_line(raw, lineno)
        if parsed is not None:
            yield parsed
