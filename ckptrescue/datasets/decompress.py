"""Compressed dataset containers (gzip, bzip2, xz, zstd), decoded frame by frame, bounded.

A compressed shard is checked through its decompressed stream, decoded here member by member
(gzip, bzip2 and xz streams; concatenations of them) or frame by frame (zstd), so damage is named
where it is: :class:`FrameDamage` gives the member/frame number, its compressed byte range, the
decompressed range and the lines it held. Whatever a decompressor raises on bad input (a CRC or
content-checksum mismatch, corrupt blocks, a cut stream) is damage, never an internal error:

* a content checksum that fails (zstd ``XXH64``, the gzip CRC-32/ISIZE trailer, xz's check) is
  found at the end of its frame, after its content was decoded: the content is handed on (the
  lines after it keep their numbers) and the frame is named damaged;
* data that cannot be decoded ends the stream there (``error``); the checker names the record
  where the readable data stops, and the frame is named too;
* bytes after the last gzip member: Python's ``gzip`` skips zero padding, TensorFlow's
  ``tf.data`` reader does not (``DataLossError``): :attr:`Decompressed.trailing` says what is
  there and the format checker decides (TFRecord: damaged). Other trailing bytes are damage.

The output is bounded twice, so a small file cannot make ``dataset verify`` inflate gigabytes
(a 783 KB ``.jsonl.gz`` that expands to 805 MB): past :data:`RATIO_FLOOR` bytes of output, more
than :data:`MAX_RATIO` output bytes per compressed byte read so far stops it, and so does
:data:`MAX_OUTPUT` in total: :class:`LimitReached`; the checker keeps what it checked so far and
the file is ``unchecked`` with the reason (finding DS009).

Detected by content (the magic numbers), not by name. zstd needs the optional ``zstandard``
module; without it :class:`Decompressed` raises :class:`~ckptrescue.errors.ToolMissingError`.
The compressed input is only ever ``read`` (no seek), so any byte source works (``mds`` reads
through a hashing tee).
"""

from __future__ import annotations

import bz2
import lzma
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from ckptrescue.datasets.shardcheck import read_exact
from ckptrescue.errors import optional_module

MAX_RATIO = 100
RATIO_FLOOR = 8 << 20
MAX_OUTPUT = 64 << 30
CHUNK = 1 << 16  # compressed bytes read at a time
OUT_STEP = 1 << 20  # decompressed bytes produced at a time (bounded memory)

_MAGICS = ((b"\x1f\x8b", "gzip"), (b"\x28\xb5\x2f\xfd", "zstd"), (b"BZh", "bz2"),
           (b"\xfd7zXZ\x00", "xz"))
_SUFFIXES = ((b".tgz", b".tar"), (b".gz", b""), (b".bz2", b""), (b".xz", b""), (b".zst", b""),
             (b".zstd", b""))
_ZSTD_MAGIC = 0xFD2FB528
_FRAME_WORD = {"gzip": "member", "bz2": "stream", "xz": "stream", "zstd": "frame"}


class LimitReached(Exception):
    """The decompressed output passed the ratio or size limit (a decompression bomb?)."""


@dataclass(frozen=True)
class FrameDamage:
    """One damaged member/frame: where it is compressed, what it held, and why."""

    kind: str
    index: int  # 0-based member/frame number
    start: int  # compressed byte range [start, end); end None when it cannot be known
    end: int | None
    out_start: int  # decompressed byte range it produced
    out_end: int
    line_start: int  # 0-based line holding out_start
    line_end: int | None  # 0-based line holding the last byte it produced (None: none)
    why: str

    def describe(self, lines: bool = False) -> str:
        word = _FRAME_WORD.get(self.kind, "frame")
        where = (f"compressed bytes {self.start}-{self.end - 1}" if self.end is not None
                 else f"compressed bytes from {self.start}")
        held = ""
        if lines:
            if self.line_end is None:
                held = f"; lines from {self.line_start + 1} on are lost"
            elif self.line_end == self.line_start:
                held = f"; it held line {self.line_start + 1}"
            else:
                held = f"; it held lines {self.line_start + 1}-{self.line_end + 1}"
        else:
            held = f"; decompressed bytes {self.out_start}-{max(self.out_end - 1, self.out_start)}"
        return f"{self.kind} {word} {self.index} ({where}): {self.why}{held}"


def compression_of(head: bytes) -> str | None:
    """``gzip``, ``zstd``, ``bz2`` or ``xz`` from the first bytes, else None."""
    for magic, kind in _MAGICS:
        if head.startswith(magic):
            return kind
    return None


def strip_suffix(base: bytes) -> bytes:
    """The name without its compression suffix (``x.tgz`` -> ``x.tar``)."""
    for suffix, replacement in _SUFFIXES:
        if base.endswith(suffix):
            return base[: -len(suffix)] + replacement
    return base


def _zstd() -> Any:
    with optional_module("zstd-compressed file: the zstandard module is not installed",
                         hint="pip install zstandard"):
        import zstandard  # type: ignore[import-not-found]
    return zstandard


def _new_decoder(kind: str) -> Any:
    if kind == "bz2":
        return bz2.BZ2Decompressor()
    return lzma.LZMADecompressor()


class _Damage(Exception):
    """A frame could not be decoded (internal: ends the stream)."""


class Decompressed:
    """The decompressed bytes of ``fh`` with the limits above; ``error`` keeps the damage that
    ended the stream, ``damaged`` every damaged frame, ``trailing`` what follows the last one."""

    def __init__(self, fh: IO[bytes], kind: str, *, max_ratio: int | None = None,
                 floor: int | None = None, max_output: int | None = None) -> None:
        self.kind = kind
        self._fh = fh
        self._max_ratio = MAX_RATIO if max_ratio is None else max_ratio
        self._floor = RATIO_FLOOR if floor is None else floor
        self._max_output = MAX_OUTPUT if max_output is None else max_output
        self._zs = _zstd() if kind == "zstd" else None
        self.out = 0
        self.consumed = 0  # compressed bytes read
        self.lines = 0  # newlines produced so far
        self.error: str | None = None
        self.damaged: list[FrameDamage] = []
        self.frames = 0
        # (offset, length, all zero) of bytes after the last gzip member
        self.trailing: tuple[int, int, bool] | None = None
        self._buf = bytearray()
        self._pending = b""  # compressed bytes read but not yet consumed
        self._done = False
        self._gen = self._produce()

    # -- compressed input ----------------------------------------------------------------------
    def _take(self, n: int) -> bytes:
        """Exactly ``n`` compressed bytes (fewer at the end of the input)."""
        out = bytearray()
        if self._pending:
            out += self._pending[:n]
            self._pending = self._pending[n:]
        while len(out) < n:
            chunk = self._fh.read(n - len(out))
            if not chunk:
                break
            out += chunk
        self.consumed += len(out)
        return bytes(out)

    def _chunk(self) -> bytes:
        if self._pending:
            data, self._pending = self._pending, b""
        else:
            data = self._fh.read(CHUNK)
        self.consumed += len(data)
        return data

    def _unread(self, data: bytes) -> None:
        self._pending = data + self._pending
        self.consumed -= len(data)

    # -- output ----------------------------------------------------------------------------------
    def _emit(self, data: bytes) -> bytes:
        self.out += len(data)
        self.lines += data.count(b"\n")
        if self.out > self._max_output:
            raise LimitReached(f"{self.kind}: decompressed output passed {self._max_output} "
                               "bytes; the rest is not checked")
        if self.out > self._floor:
            consumed = max(1, self.consumed)
            if self.out > self._max_ratio * consumed:
                raise LimitReached(
                    f"{self.kind}: {self.out} bytes decompressed from {consumed} (more than "
                    f"{self._max_ratio}:1, a decompression bomb?); the rest is not checked")
        return data

    def _damage(self, index: int, start: int, end: int | None, out_start: int,
                lines_start: int, why: str) -> None:
        line_end: int | None = None
        if self.out > out_start:
            last_nl = self.lines - (1 if self._last_byte_newline else 0)
            line_end = max(lines_start, last_nl)
        self.damaged.append(FrameDamage(self.kind, index, start, end, out_start, self.out,
                                        lines_start, line_end, why))

    _last_byte_newline = False

    def _produce(self):  # noqa: ANN202 - a generator of output chunks
        if self.kind == "zstd":
            yield from self._zstd_frames()
        else:
            yield from self._members()

    def _members(self):  # noqa: ANN202, C901
        """gzip / bzip2 / xz: one decoder per member (stream); concatenations followed."""
        index = 0
        while True:
            start = self.consumed
            data = self._chunk()
            if not data:
                return
            if len(data) < 6:  # a magic split across reads
                data += self._take(6 - len(data))
            if index > 0 and not data.startswith(_MAGICS_OF[self.kind]):
                rest = data
                tail = self._fh.read(CHUNK)
                zeros = not rest.strip(b"\0")
                length = len(rest)
                while tail:  # count what follows without keeping it
                    zeros = zeros and not tail.strip(b"\0")
                    length += len(tail)
                    tail = self._fh.read(CHUNK)
                self.consumed += length - len(rest)
                self.trailing = (start, length, zeros)
                if not zeros:  # zero padding: gzip and xz readers skip it (tf.data does not)
                    why = (f"{length} byte(s) after the last {_FRAME_WORD[self.kind]} that are "
                           "not a valid one")
                    self.error = why
                    self.damaged.append(FrameDamage(self.kind, index, start, start + length,
                                                    self.out, self.out, self.lines, None, why))
                return
            if self.kind == "gzip":
                self._unread(data)
                frame = self._gzip_member(index, start)
            else:
                frame = self._frame(data)
            if not (yield from self._guarded(index, start, frame)):
                return
            index += 1
            self.frames = index

    def _guarded(self, index: int, start: int, frame: Iterator[bytes]):  # noqa: ANN202
        """``frame``'s output; the damage it raises is recorded against frame ``index`` (begun
        at ``start``) and ends the walk. Returns whether the frame ended whole."""
        out_start, lines_start = self.out, self.lines
        try:
            yield from frame
        except _Damage as exc:
            self.error = str(exc)
            self._damage(index, start, None, out_start, lines_start, str(exc))
            return False
        return True

    def _frame(self, data: bytes):  # noqa: ANN202
        """One bzip2/xz stream (its first bytes ``data``), decoded a step at a time."""
        decoder = _new_decoder(self.kind)
        while True:
            try:
                produced = decoder.decompress(data, OUT_STEP)
            except MemoryError:
                raise
            except Exception as exc:  # noqa: BLE001 - any decoder error is damage
                raise _Damage(str(exc) or type(exc).__name__) from exc
            if produced:
                self._last_byte_newline = produced.endswith(b"\n")
                yield self._emit(produced)
            if decoder.eof:
                self._unread(bytes(decoder.unused_data))
                return
            if not decoder.needs_input:
                data = b""
                continue
            data = self._chunk()
            if not data:
                raise _Damage(f"the {_FRAME_WORD[self.kind]} is cut short (no end "
                              "marker / trailer)")

    def _gzip_member(self, index: int, start: int):  # noqa: ANN202, C901
        """One gzip member (RFC 1952) inflated raw, its CRC-32 and ISIZE checked after its
        content was handed on (so a bad CRC names the member and the lines it held)."""
        head = self._take(10)
        if len(head) < 10 or head[:3] != b"\x1f\x8b\x08":
            raise _Damage("gzip member header damaged")
        flags = head[3]
        if flags & 0xE0:
            raise _Damage("gzip member header has reserved flags set")
        if flags & 4:  # FEXTRA
            xlen = self._take(2)
            if len(xlen) < 2 or len(self._take(int.from_bytes(xlen, "little"))) < \
                    int.from_bytes(xlen, "little"):
                raise _Damage("gzip member header cut short")
        for flag in (8, 16):  # FNAME, FCOMMENT: zero-terminated
            if flags & flag:
                for _ in range(1 << 16):
                    c = self._take(1)
                    if not c:
                        raise _Damage("gzip member header cut short")
                    if c == b"\0":
                        break
                else:
                    raise _Damage("gzip member header name/comment unterminated")
        if flags & 2 and len(self._take(2)) < 2:  # FHCRC
            raise _Damage("gzip member header cut short")
        decoder = zlib.decompressobj(-15)
        crc = size = 0
        out_start, lines_start = self.out, self.lines
        data = self._chunk()
        while True:
            if not data:
                raise _Damage("the gzip member is cut short (no end of its deflate stream)")
            try:
                produced = decoder.decompress(data, OUT_STEP)
            except zlib.error as exc:
                raise _Damage(str(exc)) from exc
            if produced:
                crc = zlib.crc32(produced, crc)
                size += len(produced)
                self._last_byte_newline = produced.endswith(b"\n")
                yield self._emit(produced)
            if decoder.eof:
                self._unread(bytes(decoder.unused_data))
                break
            data = decoder.unconsumed_tail or self._chunk()
        trailer = self._take(8)
        if len(trailer) < 8:
            raise _Damage("the gzip member's CRC-32/size trailer is cut short")
        stored_crc, stored_size = struct.unpack("<II", trailer)
        if stored_crc != crc or stored_size != size & 0xFFFFFFFF:
            what = (f"fails its CRC-32 (stored {stored_crc:08x}, content {crc:08x})"
                    if stored_crc != crc else
                    f"fails its size check (stored {stored_size}, content {size})")
            self._damage(index, start, self.consumed, out_start, lines_start, what)

    def _zstd_frames(self):  # noqa: ANN202, C901
        """zstd: frames walked by their headers (RFC 8878 §3.1), each decoded on its own, block
        by block, so a content-checksum failure names the frame after its content was read."""
        index = 0
        while True:
            start = self.consumed
            head = self._take(4)
            if not head:
                return
            if len(head) < 4:
                self._frame_fail(index, start, None, f"{len(head)} stray byte(s) at the end")
                return
            (magic,) = struct.unpack("<I", head)
            if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
                size_b = self._take(4)
                if len(size_b) < 4:
                    self._frame_fail(index, start, None, "skippable frame cut short")
                    return
                (size,) = struct.unpack("<I", size_b)
                skipped = self._take(size)
                if len(skipped) < size:
                    self._frame_fail(index, start, None, "skippable frame cut short")
                    return
                index += 1
                continue
            if magic != _ZSTD_MAGIC:
                self._frame_fail(index, start, None, f"no zstd frame magic (0x{magic:08x})")
                return
            fhd_b = self._take(1)
            if not fhd_b:
                self._frame_fail(index, start, None, "frame header cut short")
                return
            fhd = fhd_b[0]
            single = (fhd >> 5) & 1
            checksum = (fhd >> 2) & 1
            rest = (0 if single else 1) + (0, 1, 2, 4)[fhd & 3] + \
                ((1 if single else 0), 2, 4, 8)[fhd >> 6]
            header = head + fhd_b + self._take(rest)
            if len(header) < 5 + rest or fhd & 0x08:  # reserved bit set: invalid
                self._frame_fail(index, start, None, "frame header damaged")
                return
            frame = self._zstd_frame(index, start, header, checksum=bool(checksum))
            if not (yield from self._guarded(index, start, frame)):
                return
            index += 1
            self.frames = index

    def _zstd_frame(self, index: int, start: int, header: bytes, *,  # noqa: ANN202
                    checksum: bool):
        """One zstd frame after its ``header``, block by block; a content checksum that fails
        is recorded once the content was handed on (the walk goes on)."""
        decoder = self._zs.ZstdDecompressor().decompressobj()
        out_start, lines_start = self.out, self.lines
        for out in self._feed(decoder, header):
            yield out
        while True:
            bh = self._take(3)
            if len(bh) < 3:
                raise _Damage("block header cut short (truncated frame)")
            word = int.from_bytes(bh, "little")
            last, btype, bsize = word & 1, (word >> 1) & 3, word >> 3
            if btype == 3:
                raise _Damage("reserved block type (corrupt block header)")
            body = self._take(1 if btype == 1 else bsize)
            if len(body) < (1 if btype == 1 else bsize):
                raise _Damage("block cut short (truncated frame)")
            for out in self._feed(decoder, bh + body):
                yield out
            if last:
                break
        if checksum:
            tail = self._take(4)
            if len(tail) < 4:
                raise _Damage("content checksum cut short (truncated frame)")
            try:
                for out in self._feed(decoder, tail):
                    yield out
            except _Damage as exc:  # the content was read: name the frame, go on
                self._damage(index, start, self.consumed, out_start, lines_start,
                             f"fails its content checksum ({exc})")

    def _feed(self, decoder: Any, data: bytes):  # noqa: ANN202
        try:
            produced = decoder.decompress(data)
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - any decoder error is damage
            raise _Damage(str(exc) or type(exc).__name__) from exc
        for i in range(0, len(produced), OUT_STEP):
            piece = produced[i:i + OUT_STEP]
            self._last_byte_newline = piece.endswith(b"\n")
            yield self._emit(piece)

    def _frame_fail(self, index: int, start: int, end: int | None, why: str) -> None:
        self.error = why
        self.damaged.append(FrameDamage(self.kind, index, start, end, self.out, self.out,
                                        self.lines, None, why))

    # -- the file-like view --------------------------------------------------------------------
    def _fill(self) -> bool:
        if self._done:
            return False
        try:
            chunk = next(self._gen)
        except StopIteration:
            self._done = True
            return False
        self._buf += chunk
        return True

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = 1 << 20  # never an unbounded read: callers loop until b""
        while len(self._buf) < n and self._fill():
            pass
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def readline(self, limit: int = -1) -> bytes:
        scanned = 0
        while True:
            i = self._buf.find(b"\n", scanned)
            if i >= 0 and (limit < 0 or i < limit):
                return self.read(i + 1)
            if 0 <= limit <= len(self._buf):
                return self.read(limit)
            scanned = len(self._buf)
            if not self._fill():
                return self.read(len(self._buf))

    def close(self) -> None:
        self._gen.close()
        self._buf.clear()


_MAGICS_OF = {kind: magic for magic, kind in _MAGICS}


def peek(fh: IO[bytes], kind: str, n: int) -> bytes:
    """The first ``n`` decompressed bytes (``fh`` is rewound afterwards)."""
    stream = Decompressed(fh, kind)
    try:
        return read_exact(stream, n)
    finally:
        stream.close()
        fh.seek(0)
