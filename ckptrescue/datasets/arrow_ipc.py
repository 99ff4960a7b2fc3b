"""Apache Arrow IPC files (``ARROW1`` + footer) and streams (Hugging Face ``datasets`` caches).

Framing, as the Arrow columnar format specification ("Serialization and Interprocess
Communication (IPC)": encapsulated messages, streaming format, file format) and its flatbuffers
schemas ``format/Message.fbs``, ``format/Schema.fbs`` and ``format/File.fbs`` define it::

    stream  := message* end-of-stream
    message := 0xFFFFFFFF  int32 metadata_size  Message flatbuffer (padded to 8)  body
               (before Arrow 0.15 the 0xFFFFFFFF continuation marker was absent)
    end-of-stream := 0xFFFFFFFF 0x00000000   (old: 0x00000000)
    file    := "ARROW1\\0\\0"  stream  Footer flatbuffer  int32 footer_size  "ARROW1"

``Message``: version, header_type (1 Schema, 2 DictionaryBatch, 3 RecordBatch), header,
``bodyLength``. ``RecordBatch``: length (rows), nodes ``[FieldNode{length, null_count}]``,
buffers ``[Buffer{offset, length}]`` relative to the body, compression. ``Footer``: schema,
dictionaries and recordBatches as ``[Block{offset, metaDataLength, bodyLength}]``.

Checked: the framing of every message (continuation marker, metadata size, a parseable
``Message``, the body present), every buffer of every record batch inside its body, the
end-of-stream marker (a stream cut at a message boundary loses whole batches silently
otherwise), for files both magics, the footer, and its block list against the messages found in
the data; then each record batch is decoded and fully validated by pyarrow (when installed),
one batch at a time. The file is read front to back in bounded pieces: a record batch body is
held in memory only up to :data:`MAX_DECODE` bytes for pyarrow, larger ones are checked for
framing only. A bad record's ``index`` is the record batch number (0-based, in file order),
``offset`` the byte offset of its message (its continuation marker); problems of the schema,
a dictionary batch or the footer have no index and name that part in ``key``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import IO, Any

from ckptrescue.checkpoints.formats.chunked import skip
from ckptrescue.datasets.format_heads import ARROW_CONTINUATION as CONTINUATION
from ckptrescue.datasets.format_heads import ARROW_FILE_MAGIC as FILE_MAGIC
from ckptrescue.datasets.format_heads import ARROW_MAX_METADATA as MAX_METADATA
from ckptrescue.datasets.format_heads import arrow_stream_message
from ckptrescue.datasets.shardcheck import BadRecord, CheckOutcome, UnreadableAt, one_line, read_exact

MAX_DECODE = 256 << 20  # record batch bodies up to this size are decoded by pyarrow
MAX_KEPT = 64 << 20  # schema + dictionary messages kept to decode batches with
MAX_BAD = 1000
_BLOCK = 1 << 20
HEADER_TYPES = {1: "schema", 2: "dictionary batch", 3: "record batch", 4: "tensor",
                5: "sparse tensor"}


def looks_like_stream(head: bytes) -> bool:
    """A stream starts with a Schema message (header_type 1)."""
    meta = arrow_stream_message(head)
    if meta is None:
        return False
    try:
        msg = parse_message(meta)
    except FbError:
        return False
    return msg.header_type == 1


# --------------------------------------------------------------------------- flatbuffers


class FbError(ValueError):
    """A flatbuffer that does not parse (offsets outside the buffer, bad vtable)."""


class _Table:
    """One flatbuffers table inside ``buf`` at ``pos``, every access bounds-checked."""

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf, self.pos = buf, pos
        self._need(pos, 4)
        (soff,) = struct.unpack_from("<i", buf, pos)
        self.vt = pos - soff
        self._need(self.vt, 4)
        self.vt_size, _ = struct.unpack_from("<HH", buf, self.vt)
        if self.vt_size < 4 or self.vt_size % 2:
            raise FbError(f"vtable size {self.vt_size}")
        self._need(self.vt, self.vt_size)

    def _need(self, at: int, n: int) -> None:
        if at < 0 or at + n > len(self.buf):
            raise FbError(f"offset {at}+{n} outside the {len(self.buf)}-byte flatbuffer")

    def _field(self, i: int) -> int:
        slot = 4 + 2 * i
        if slot + 2 > self.vt_size:
            return 0
        (off,) = struct.unpack_from("<H", self.buf, self.vt + slot)
        return off

    def scalar(self, i: int, fmt: str, default: int = 0) -> int:
        off = self._field(i)
        if not off:
            return default
        self._need(self.pos + off, struct.calcsize(fmt))
        return int(struct.unpack_from(fmt, self.buf, self.pos + off)[0])

    def _target(self, i: int) -> int | None:
        off = self._field(i)
        if not off:
            return None
        at = self.pos + off
        self._need(at, 4)
        (rel,) = struct.unpack_from("<I", self.buf, at)
        return at + rel

    def table(self, i: int) -> _Table | None:
        at = self._target(i)
        return None if at is None else _Table(self.buf, at)

    def structs(self, i: int, fmt: str) -> list[tuple[int, ...]]:
        at = self._target(i)
        if at is None:
            return []
        self._need(at, 4)
        (count,) = struct.unpack_from("<I", self.buf, at)
        width = struct.calcsize(fmt)
        self._need(at + 4, count * width)
        return list(struct.iter_unpack(fmt, self.buf[at + 4: at + 4 + count * width]))


def _root(buf: bytes) -> _Table:
    if len(buf) < 8:
        raise FbError(f"flatbuffer of {len(buf)} bytes")
    (at,) = struct.unpack_from("<I", buf, 0)
    return _Table(buf, at)


@dataclass
class Message:
    header_type: int
    body_length: int
    rows: int | None = None  # record batch length
    buffers: list[tuple[int, int]] | None = None  # record batch buffers (offset, length)
    nodes: int = 0
    dictionary_id: int | None = None


def parse_message(meta: bytes) -> Message:
    """The parts of a ``Message`` flatbuffer the checks need (Message.fbs)."""
    msg = _root(meta)
    header_type = msg.scalar(1, "<B")
    body_length = msg.scalar(3, "<q")
    out = Message(header_type, body_length)
    header = msg.table(2)
    if header_type in (2, 3) and header is None:
        raise FbError(f"{HEADER_TYPES[header_type]} without its header table")
    if header_type == 2 and header is not None:
        out.dictionary_id = header.scalar(0, "<q")
        header = header.table(1)  # DictionaryBatch.data: RecordBatch
        if header is None:
            raise FbError("dictionary batch without its record batch")
    if header_type in (2, 3) and header is not None:
        out.rows = header.scalar(0, "<q")
        out.nodes = len(header.structs(1, "<qq"))
        out.buffers = [(o, n) for o, n in header.structs(2, "<qq")]
    return out


def parse_footer(buf: bytes) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    """(dictionary blocks, record batch blocks) as (offset, metaDataLength, bodyLength)."""
    footer = _root(buf)
    dicts = [(o, m, b) for o, m, b in footer.structs(2, "<qi4xq")]
    batches = [(o, m, b) for o, m, b in footer.structs(3, "<qi4xq")]
    return dicts, batches


# --------------------------------------------------------------------------- the walk


@dataclass
class _Found:
    offset: int
    meta_total: int  # continuation + size prefix + metadata (Block.metaDataLength)
    body_length: int
    header_type: int


class _Checker:
    def __init__(self, fh: IO[bytes], size: int | None, out: CheckOutcome) -> None:
        self.fh, self.size, self.out = fh, size, out
        self.pos = 0
        self.batch = 0
        self.found: list[_Found] = []
        self.kept: list[bytes] = []  # schema + dictionary messages (for pyarrow decoding)
        self.kept_bytes = 0
        self.schema: Any = None
        self.listed = 0
        self.decode_note: str | None = None
        self.rows = 0  # rows of the record batches that check clean

    def bad(self, index: int | None, offset: int | None, key: str | None,
            problem: str) -> None:
        if self.listed < MAX_BAD:
            self.out.bad.append(BadRecord(index, offset, key, problem))
        elif self.listed == MAX_BAD:
            self.out.bad.append(BadRecord(None, None, None,
                                          f"more than {MAX_BAD} bad records; not all listed"))
        self.listed += 1

    def read(self, n: int) -> bytes:
        data = read_exact(self.fh, n)
        self.pos += len(data)
        return data

    def walk(self, end: int | None) -> bool:
        """Messages until end-of-stream or ``end``; False when the data stops being readable
        (the reason is reported)."""
        while True:
            start = self.pos
            if end is not None and start >= end:
                return True  # the file format's footer follows (writers before 0.15: no EOS)
            head = self.read(4)
            if not head:
                self.bad(self.batch, start, None, "stream ends without the end-of-stream "
                         "marker (truncated at a message boundary: later record batches lost)")
                return False
            if len(head) < 4:
                self.bad(self.batch, start, None, "message header truncated")
                return False
            prefix = 4
            if head == CONTINUATION:
                size_raw = self.read(4)
                if len(size_raw) < 4:
                    self.bad(self.batch, start, None, "message header truncated")
                    return False
                (meta_size,) = struct.unpack("<i", size_raw)
                prefix = 8
            else:
                (meta_size,) = struct.unpack("<i", head)  # pre-0.15 framing
            if meta_size == 0:
                return True
            room = (end if end is not None else self.size)
            if meta_size < 0 or meta_size > MAX_METADATA or \
                    (room is not None and start + prefix + meta_size > room):
                if room is not None and 0 < meta_size <= MAX_METADATA:
                    what = "metadata truncated" if end is None else "metadata runs into the footer"
                    self.bad(self.batch, start, None, f"message {what}: {meta_size} bytes "
                             f"announced, {room - start - prefix} present")
                else:
                    self.bad(self.batch, start, None, f"message metadata size {meta_size} is "
                             "impossible (continuation marker or size field damaged)")
                return False
            meta = self.read(meta_size)
            if len(meta) < meta_size:
                self.bad(self.batch, start, None, f"message metadata truncated: {len(meta)} "
                         f"of {meta_size} bytes")
                return False
            try:
                msg = parse_message(meta)
            except FbError as exc:
                self.bad(self.batch, start, None, f"message metadata does not parse: {exc}")
                return False
            if not self._message(start, prefix, meta, msg, end):
                return False

    def _message(self, start: int, prefix: int, meta: bytes, msg: Message,
                 end: int | None) -> bool:
        kind = HEADER_TYPES.get(msg.header_type)
        is_batch = msg.header_type == 3
        index = self.batch if is_batch else None
        key = None if is_batch else (f"dictionary {msg.dictionary_id}"
                                     if msg.header_type == 2 else kind or "message")
        if kind is None or msg.body_length < 0:
            self.bad(index, start, key, f"message header type {msg.header_type} / body length "
                     f"{msg.body_length}: metadata damaged")
            return False
        room = end if end is not None else self.size
        if room is not None and self.pos + msg.body_length > room:
            have = max(0, room - self.pos)
            self.bad(index, start, key, f"{kind} body truncated: {have} of {msg.body_length} "
                     "bytes present" + (" before the footer" if end is not None else ""))
            return False
        ok = True
        for b, (off, length) in enumerate(msg.buffers or []):
            if off < 0 or length < 0 or off + length > msg.body_length:
                self.bad(index, start, key, f"{kind}: buffer {b} ({off}+{length}) lies outside "
                         f"its {msg.body_length}-byte body")
                ok = False
                break
        keep = msg.body_length <= MAX_DECODE
        body = self.read(msg.body_length) if keep else b""
        got = len(body) if keep else self._skip(msg.body_length)
        if got < msg.body_length:
            self.bad(index, start, key, f"{kind} body truncated: {got} of {msg.body_length} "
                     "bytes present")
            return False
        self.found.append(_Found(start, prefix + len(meta), msg.body_length, msg.header_type))
        whole = (struct.pack("<Ii", 0xFFFFFFFF, len(meta)) + meta + body) if keep else b""
        if msg.header_type in (1, 2):
            if keep and self.kept_bytes + len(whole) <= MAX_KEPT:
                self.kept.append(whole)
                self.kept_bytes += len(whole)
            else:
                self.decode_note = "schema/dictionaries too large to keep: batches not decoded"
        if is_batch:
            if ok and keep:
                ok = self._decode(whole, index, start)
            elif ok and not keep:
                self.decode_note = (f"record batches over {MAX_DECODE} bytes were checked for "
                                    "framing only")
            if ok:
                self.out.records += 1
                self.rows += msg.rows or 0
            self.batch += 1
        return True

    def _skip(self, n: int) -> int:
        done = skip(self.fh, n)
        self.pos += done
        return done

    def _decode(self, message: bytes, index: int | None, start: int) -> bool:
        """pyarrow reads the batch (with the schema and dictionaries before it) and validates
        it fully; absent pyarrow, the framing checks stand alone."""
        try:
            import pyarrow as pa
        except ImportError:
            self.decode_note = "pyarrow not installed: framing and buffers checked, not decoded"
            return True
        if self.decode_note and "too large" in self.decode_note:
            return True
        eos = CONTINUATION + b"\x00\x00\x00\x00"
        try:
            reader = pa.ipc.open_stream(pa.BufferReader(b"".join(self.kept) + message + eos))
            for batch in reader:
                batch.validate(full=True)
        except UnreadableAt:
            raise
        except Exception as exc:  # ArrowInvalid, ArrowIOError, ... whatever the damage causes
            self.bad(index, start, None, f"record batch does not decode: {one_line(exc)}")
            return False
        return True


# --------------------------------------------------------------------------- entry points


def check(fh: IO[bytes], size: int | None, out: CheckOutcome | None = None) -> CheckOutcome:
    """Check an Arrow IPC file or stream (decided by the ``ARROW1`` magic)."""
    out = CheckOutcome() if out is None else out
    check_rows(fh, size, out)
    return out


def check_rows(fh: IO[bytes], size: int | None, out: CheckOutcome) -> int:
    """:func:`check`, returning the rows of the record batches that checked clean."""
    head = read_exact(fh, 8)
    fh.seek(0)
    ck = _Checker(fh, size, out)
    if head[:6] == FILE_MAGIC:
        if size is None:
            raise ValueError("the Arrow file format needs a seekable file of known size")
        check_file(fh, size, out, ck)
    else:
        check_stream(fh, size, out, ck)
    return ck.rows


def check_stream(fh: IO[bytes], size: int | None, out: CheckOutcome,
                 ck: _Checker | None = None) -> CheckOutcome:
    ck = _Checker(fh, size, out) if ck is None else ck
    if ck.walk(None):
        trailing = _trailing(fh)
        if trailing:
            ck.bad(None, ck.pos, None, f"{trailing} bytes after the end-of-stream marker")
    _finish(ck)
    return out


def _trailing(fh: IO[bytes]) -> int:
    n = 0
    while chunk := fh.read(_BLOCK):
        n += len(chunk)
    return n


def _finish(ck: _Checker) -> None:
    if ck.found and ck.found[0].header_type != 1:
        ck.bad(None, ck.found[0].offset, "schema", "the first message is not the schema")


def check_file(fh: IO[bytes], size: int, out: CheckOutcome,
               ck: _Checker | None = None) -> CheckOutcome:
    ck = _Checker(fh, size, out) if ck is None else ck
    head = ck.read(8)
    if head[:6] != FILE_MAGIC:
        ck.bad(None, 0, "magic", "no ARROW1 magic at the start")
        return out
    tail_ok = False
    footer_start = None
    blocks: tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]] | None = None
    if size >= 8 + 10:
        fh.seek(size - 10)
        tail = read_exact(fh, 10)
        (footer_size,) = struct.unpack_from("<i", tail, 0)
        if tail[4:] == FILE_MAGIC:
            tail_ok = True
            footer_start = size - 10 - footer_size
            if footer_size <= 0 or footer_start < 8:
                ck.bad(None, size - 10, "footer", f"footer size {footer_size} is impossible "
                       "(damaged)")
                footer_start = None
            else:
                fh.seek(footer_start)
                raw = read_exact(fh, min(footer_size, MAX_METADATA))
                try:
                    blocks = parse_footer(raw)
                except FbError as exc:
                    ck.bad(None, footer_start, "footer", f"footer does not parse: {exc}")
        fh.seek(8)
    if not tail_ok:
        ck.bad(None, size, "footer", "no ARROW1 magic at the end: the footer is missing "
               "(file truncated); pyarrow's file reader cannot open it")
    ck.walk(footer_start)
    _finish(ck)
    if blocks is not None:
        _compare_blocks(ck, blocks, footer_start or size)
    return out


def _compare_blocks(ck: _Checker, blocks: tuple[list[tuple[int, int, int]],
                                               list[tuple[int, int, int]]],
                    footer_start: int) -> None:
    """The footer's block lists against the messages found in the data."""
    found = {f.offset: f for f in ck.found}
    dicts, batches = blocks
    listed: set[int] = set()
    for kind, entries, want_type in (("dictionary", dicts, 2), ("record batch", batches, 3)):
        for i, (offset, meta_len, body_len) in enumerate(entries):
            listed.add(offset)
            index = i if want_type == 3 else None
            key = "footer" if want_type == 3 else "footer dictionary block"
            where = f"footer {kind} block {i} (offset {offset}, metadata {meta_len}, body " \
                    f"{body_len})"
            if offset < 8 or offset + meta_len + body_len > footer_start or meta_len < 8 or \
                    body_len < 0:
                ck.bad(index, offset, key, f"{where} points outside the data (which ends at "
                       f"{footer_start})")
                continue
            f = found.get(offset)
            if f is None:
                ck.bad(index, offset, key, f"{where}: no message starts there")
            elif f.header_type != want_type or f.meta_total != meta_len or \
                    f.body_length != body_len:
                ck.bad(index, offset, key, f"{where} does not match the message there "
                       f"({HEADER_TYPES.get(f.header_type)}, metadata {f.meta_total}, body "
                       f"{f.body_length})")
    n = 0
    for f in ck.found:
        if f.header_type == 3:
            if f.offset not in listed:
                ck.bad(n, f.offset, "footer", f"record batch {n} at {f.offset} is not in the "
                       "footer (the file reader will not see it)")
            n += 1
