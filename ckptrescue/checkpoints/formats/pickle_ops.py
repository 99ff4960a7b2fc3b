"""The pickle opcode reader: the bytes CPython's C unpickler (``Modules/_pickle.c``) reads.

``read_ops(data, mode=...)`` yields ``(name, arg, position)`` for each opcode, decoding every
argument the way ``_pickle.c`` does (and never allocating a length it has not checked against
the data). Two input models, because the C unpickler reads differently from memory and from a
file object (``_Unpickler_Read``/``_Unpickler_ReadImpl``, ``_Unpickler_ReadInto``,
``_Unpickler_Readline``, ``load_frame``):

``"memory"`` (``pickle.loads``; a file object with ``peek``, e.g. ``open(path, "rb")``, reads
the same bytes while frames fit its buffer): one contiguous buffer; a FRAME must fit in the
data (else ``pickle data was truncated``), an opcode may run across a frame's end.

``"stream"`` (``Unpickler(io.BytesIO(...))`` - what ``torch.load`` does with ``data.pkl``): the
C unpickler keeps only the bytes of the last ``read()`` as its buffer. ``load_frame`` reads the
whole frame into the buffer and rewinds. An opcode whose fixed-size read (``_Unpickler_Read``)
or line (``_Unpickler_Readline``) does not fit in what is left of the buffer reads *fresh*
bytes from the file after the frame: the rest of the frame is skipped. ``BINBYTES``,
``BINBYTES8`` and ``BYTEARRAY8`` use ``_Unpickler_ReadInto``: the rest of the buffer, then the
file, contiguously.

An opcode that runs past the end of its FRAME is never written by a pickler; the two models (and
the pure-Python unpickler, which refuses it) read different opcodes afterwards. The reader
records each such event in ``violations``; callers scan both models and keep every global.
"""

from __future__ import annotations

import codecs
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

HIGHEST_PROTOCOL = 5
_SSIZE_MAX = (1 << 63) - 1

# opcode byte -> name (protocols 0-5), as in ``_pickle.c``'s ``enum opcode``
OPCODES: dict[int, str] = {
    ord("("): "MARK", ord("."): "STOP", ord("0"): "POP", ord("1"): "POP_MARK",
    ord("2"): "DUP", ord("F"): "FLOAT", ord("I"): "INT", ord("J"): "BININT",
    ord("K"): "BININT1", ord("L"): "LONG", ord("M"): "BININT2", ord("N"): "NONE",
    ord("P"): "PERSID", ord("Q"): "BINPERSID", ord("R"): "REDUCE", ord("S"): "STRING",
    ord("T"): "BINSTRING", ord("U"): "SHORT_BINSTRING", ord("V"): "UNICODE",
    ord("X"): "BINUNICODE", ord("a"): "APPEND", ord("b"): "BUILD", ord("c"): "GLOBAL",
    ord("d"): "DICT", ord("}"): "EMPTY_DICT", ord("e"): "APPENDS", ord("g"): "GET",
    ord("h"): "BINGET", ord("i"): "INST", ord("j"): "LONG_BINGET", ord("l"): "LIST",
    ord("]"): "EMPTY_LIST", ord("o"): "OBJ", ord("p"): "PUT", ord("q"): "BINPUT",
    ord("r"): "LONG_BINPUT", ord("s"): "SETITEM", ord("t"): "TUPLE", ord(")"): "EMPTY_TUPLE",
    ord("u"): "SETITEMS", ord("G"): "BINFLOAT",
    0x80: "PROTO", 0x81: "NEWOBJ", 0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4", 0x85: "TUPLE1",
    0x86: "TUPLE2", 0x87: "TUPLE3", 0x88: "NEWTRUE", 0x89: "NEWFALSE", 0x8A: "LONG1",
    0x8B: "LONG4", ord("B"): "BINBYTES", ord("C"): "SHORT_BINBYTES",
    0x8C: "SHORT_BINUNICODE", 0x8D: "BINUNICODE8", 0x8E: "BINBYTES8", 0x8F: "EMPTY_SET",
    0x90: "ADDITEMS", 0x91: "FROZENSET", 0x92: "NEWOBJ_EX", 0x93: "STACK_GLOBAL",
    0x94: "MEMOIZE", 0x95: "FRAME", 0x96: "BYTEARRAY8", 0x97: "NEXT_BUFFER",
    0x98: "READONLY_BUFFER",
}


class OpError(Exception):
    """The C unpickler stops here (``position``: the opcode's offset)."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(message)
        self.position = position


@dataclass
class Source:
    """The unpickler's view of ``data``: a buffer window and, for ``stream``, a file position."""

    data: bytes
    mode: str = "stream"
    pos: int = 0  # cursor: next byte the unpickler consumes
    buf_end: int = 0  # end of the current buffer (stream mode)
    fpos: int = 0  # the file object's position (stream mode)
    frame_end: int | None = None
    violations: list[tuple[int, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.mode == "memory":
            self.buf_end = self.fpos = len(self.data)

    def _crossing(self, n: int, what: str) -> None:
        if self.frame_end is not None and self.pos < self.frame_end < self.pos + n:
            self.violations.append((self.pos, f"{what} runs past the end of its FRAME"))

    def read(self, n: int) -> bytes:
        """``_Unpickler_Read``: from the buffer, else ``n`` fresh bytes from the file."""
        self._crossing(n, "read")
        if self.pos + n <= self.buf_end:
            out = self.data[self.pos:self.pos + n]
            self.pos += n
            return out
        if self.mode == "memory" or self.fpos + n > len(self.data):
            raise EOFError("pickle data was truncated")
        if self.pos < self.buf_end:
            self.violations.append((self.pos, f"{self.buf_end - self.pos} bytes of the frame "
                                    "skipped by a read past its end"))
        out = self.data[self.fpos:self.fpos + n]
        self.fpos += n
        self.pos = self.buf_end = self.fpos
        return out

    def read_into(self, n: int) -> bytes:
        """``_Unpickler_ReadInto``: the rest of the buffer, then the file, contiguously."""
        self._crossing(n, "read")
        if self.pos + n <= self.buf_end:
            return self.read(n)
        if self.mode == "memory":
            raise EOFError("pickle data was truncated")
        head = self.data[self.pos:self.buf_end]
        rest = n - len(head)
        if self.fpos + rest > len(self.data):
            raise EOFError("pickle data was truncated")
        out = head + self.data[self.fpos:self.fpos + rest]
        self.fpos += rest
        self.pos = self.buf_end = self.fpos
        return out

    def readline(self) -> bytes:
        """``_Unpickler_Readline``: a line in the buffer, else a fresh ``readline()``."""
        nl = self.data.find(b"\n", self.pos, self.buf_end)
        if nl >= 0:
            self._crossing(nl + 1 - self.pos, "line")
            out = self.data[self.pos:nl + 1]
            self.pos = nl + 1
            return out
        if self.mode == "memory":
            raise EOFError("pickle data was truncated")
        if self.pos < self.buf_end:
            self.violations.append((self.pos, f"{self.buf_end - self.pos} bytes of the frame "
                                    "skipped by a line past its end"))
        nl = self.data.find(b"\n", self.fpos)
        if nl < 0:
            raise EOFError("pickle data was truncated")
        out = self.data[self.fpos:nl + 1]
        self.fpos = nl + 1
        self.pos = self.buf_end = self.fpos
        return out

    def frame(self, n: int) -> None:
        """``load_frame``: the frame must be readable; the cursor rewinds to its start."""
        self.read(n)
        self.pos -= n
        self.frame_end = self.pos + n


def _line(src: Source, what: str) -> bytes:
    line = src.readline()
    if len(line) < 2 and what in ("GLOBAL", "INST"):
        raise EOFError("pickle data was truncated")
    if len(line) < 1:
        raise EOFError("pickle data was truncated")
    return line[:-1]


def _unsigned(raw: bytes) -> int:
    value = int.from_bytes(raw, "little")
    if value > _SSIZE_MAX:
        raise OverflowError("size exceeds system's maximum")
    return value


def _signed4(raw: bytes) -> int:
    return struct.unpack("<i", raw)[0]


def _decode_string_line(line: bytes, encoding: str) -> Any:
    """STRING: a quoted repr; C checks the quotes, then escape-decodes, then decodes."""
    if len(line) < 2 or line[0] != line[-1] or line[:1] not in (b"'", b'"'):
        raise ValueError("the STRING opcode argument must be quoted")
    raw = codecs.escape_decode(line[1:-1])[0]
    return raw if encoding == "bytes" else raw.decode(encoding)


_STRTOL = re.compile(rb"\s*[+-]?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")


def _text_int(line: bytes) -> Any:
    """INT: ``strtol(s, &end, 0)``, else ``PyLong_FromString(s, NULL, 0)``; 00/01 are bools."""
    if line in (b"00", b"01"):
        return line == b"01"
    m = _STRTOL.fullmatch(line)
    if m is None:
        return int(line, 0)
    digits = m.group(1)
    sign = -1 if b"-" in line[:m.start(1)] else 1
    if digits[:2].lower() == b"0x":
        return sign * int(digits[2:], 16)
    return sign * int(digits, 8 if digits.startswith(b"0") else 10)


def _global(name: str, src: Source, encoding: str) -> tuple[str, str]:
    module = _line(src, name)
    qual = _line(src, name)
    codec = "utf-8" if name == "GLOBAL" else "ascii"
    return (module.decode(codec), qual.decode(codec))


def _proto(name: str, src: Source, encoding: str) -> int:
    proto = src.read(1)[0]
    if proto > HIGHEST_PROTOCOL:
        raise ValueError(f"unsupported pickle protocol: {proto}")
    return proto


def _long_line(name: str, src: Source, encoding: str) -> int:
    line = _line(src, name)
    return int(line[:-1] if line.endswith(b"L") else line, 0)


def _long_bytes(name: str, src: Source, encoding: str) -> int:
    n = src.read(1)[0] if name == "LONG1" else _signed4(src.read(4))
    if n < 0:
        raise ValueError("LONG pickle has negative byte count")
    _check_len(src, n)
    return int.from_bytes(src.read(n), "little", signed=True)


def _binstring(name: str, src: Source, encoding: str) -> Any:
    n = src.read(1)[0] if name == "SHORT_BINSTRING" else _signed4(src.read(4))
    if n < 0:
        raise ValueError("BINSTRING pickle has negative byte count")
    _check_len(src, n)
    raw = src.read(n)
    return raw if encoding == "bytes" else raw.decode(encoding)


def _binbytes(name: str, src: Source, encoding: str) -> bytes:
    width = {"SHORT_BINBYTES": 1, "BINBYTES": 4}.get(name, 8)
    n = _unsigned(src.read(width))
    _check_len(src, n)
    return src.read(n) if name == "SHORT_BINBYTES" else src.read_into(n)


def _binunicode(name: str, src: Source, encoding: str) -> str:
    width = {"SHORT_BINUNICODE": 1, "BINUNICODE": 4}.get(name, 8)
    n = _unsigned(src.read(width))
    _check_len(src, n)
    return src.read(n).decode("utf-8", "surrogatepass")


def _memo_line(name: str, src: Source, encoding: str) -> int:
    value = int(_line(src, name), 10)
    if name == "PUT" and value < 0:
        raise ValueError("negative PUT argument")
    return value


def _byte(name: str, src: Source, encoding: str) -> int:
    return src.read(1)[0]


def _uint2(name: str, src: Source, encoding: str) -> int:
    return int.from_bytes(src.read(2), "little")


def _uint4(name: str, src: Source, encoding: str) -> int:
    return int.from_bytes(src.read(4), "little")


def _int4(name: str, src: Source, encoding: str) -> int:
    return _signed4(src.read(4))


# opcode name -> how ``_pickle.c`` reads its argument (an opcode not listed has none)
_ARG_READERS: dict[str, Callable[[str, Source, str], Any]] = {
    "GLOBAL": _global, "INST": _global,
    "PROTO": _proto,
    "FRAME": lambda name, src, encoding: _unsigned(src.read(8)),
    "INT": lambda name, src, encoding: _text_int(_line(src, name)),
    "LONG": _long_line,
    "FLOAT": lambda name, src, encoding: float(_line(src, name)),
    "BININT": _int4, "BININT1": _byte, "BININT2": _uint2,
    "BINFLOAT": lambda name, src, encoding: struct.unpack(">d", src.read(8))[0],
    "LONG1": _long_bytes, "LONG4": _long_bytes,
    "STRING": lambda name, src, encoding: _decode_string_line(_line(src, name), encoding),
    "BINSTRING": _binstring, "SHORT_BINSTRING": _binstring,
    "BINBYTES": _binbytes, "SHORT_BINBYTES": _binbytes, "BINBYTES8": _binbytes,
    "BYTEARRAY8": _binbytes,
    "UNICODE": lambda name, src, encoding: _line(src, name).decode("raw-unicode-escape"),
    "BINUNICODE": _binunicode, "SHORT_BINUNICODE": _binunicode, "BINUNICODE8": _binunicode,
    "GET": _memo_line, "PUT": _memo_line,
    "BINGET": _byte, "BINPUT": _byte, "LONG_BINGET": _uint4, "LONG_BINPUT": _uint4,
    "EXT1": _byte, "EXT2": _uint2, "EXT4": _int4,
    "PERSID": lambda name, src, encoding: _line(src, name).decode("ascii"),
}


def _check_len(src: Source, n: int) -> None:
    """A length beyond the data is refused before anything is allocated (bounded memory)."""
    if n > len(src.data) - src.pos:
        raise EOFError(f"length {n} runs past the end of the data")


def read_ops(data: bytes, *, mode: str = "stream", encoding: str = "ASCII",
             source: Source | None = None) -> Iterator[tuple[str, Any, int]]:
    """Yield ``(opcode name, argument, position)`` up to and including STOP.

    Raises :class:`OpError` where the C unpickler would stop reading (unknown opcode,
    truncated argument, undecodable text, bad protocol); the opcodes before it were yielded.
    """
    src = source or Source(data, mode)
    data_ = src.data
    while True:
        pos = src.pos
        try:
            if pos < src.buf_end:  # src.read(1), without its checks: one byte never crosses
                byte = data_[pos]  # a FRAME's end and is in the buffer
                src.pos = pos + 1
            else:
                byte = src.read(1)[0]
            name = OPCODES.get(byte)
            if name is None:
                raise ValueError(f"invalid load key, {bytes([byte])!r}")
            reader = _ARG_READERS.get(name)
            arg = None if reader is None else reader(name, src, encoding)
            if name == "FRAME":
                src.frame(arg)
        except (EOFError, ValueError, OverflowError, UnicodeDecodeError, struct.error,
                IndexError) as exc:
            raise OpError(f"{type(exc).__name__}: {exc}", pos) from None
        yield name, arg, pos
        if name == "STOP":
            return
