"""LevelDB-style SSTable reader for TensorFlow ``.index`` files, damage-tolerant and TF-free.

Layout (``tsl/lib/io/format.cc``, ``table_builder.cc``): data blocks, a metaindex block, an index
block, then a 48-byte footer (two varint64 ``BlockHandle``s, zero padding to 40 bytes, the magic
``0xdb4775248b80fb57`` little-endian). Every block is followed by a 5-byte trailer: the
compression type (0 = none) and the masked CRC32C of ``block || type``. A block holds
prefix-compressed entries ``varint shared, varint non_shared, varint value_len, key delta,
value``, then ``u32`` restart offsets and ``u32 num_restarts``.

:func:`read_table` never stops at the first problem: a block whose CRC fails is still parsed
and its entries are returned marked ``trusted=False``; a damaged index block's handles are still
followed when they tile the data region (each data block's own CRC decides); without a footer or
believable handles, a scan finds data blocks from offset 0 by their own CRC trailers. Blocks are
read one at a time by seeking (the scan reads at most :data:`RECOVERY_SCAN_CAP` bytes).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ckptrescue.checkpoints.formats.crc32c import crc32c, mask
from ckptrescue.checkpoints.formats.crc32c import unmask as unmask  # re-exported: sstable.unmask
from ckptrescue.checkpoints.formats.protowire import WireError, read_varint

FOOTER_SIZE = 48
MAGIC = 0xDB4775248B80FB57
TRAILER = 5
RECOVERY_SCAN_CAP = 256 * 1024 * 1024  # never scan more than this much index without a footer
MAX_CANDIDATES = 1_000_000  # trailer candidates tried by one recovery scan (bounded work)


@dataclass(frozen=True)
class TableProblem:
    """One structural problem in the table: ``kind`` is stable (see :data:`PROBLEM_KINDS`)."""

    kind: str
    offset: int
    length: int
    message: str


PROBLEM_KINDS = {
    "truncated": "file shorter than an SSTable footer",
    "bad-magic": "footer magic missing (truncated or overwritten tail)",
    "bad-handle": "a block handle points outside the file",
    "block-checksum": "a block's CRC32C does not match its trailer",
    "block-truncated": "a block or its trailer runs past the end of the file",
    "block-parse": "a block's entries or restart array are malformed",
    "compressed": "a block uses a compression type this reader does not decode",
    "unrecovered": "bytes where no block could be recovered",
}


@dataclass
class TableEntry:
    key: bytes
    value: bytes
    block_offset: int
    trusted: bool = True


@dataclass
class TableScan:
    """Everything that could be read from one SSTable file."""

    path: str
    size: int
    entries: list[TableEntry] = field(default_factory=list)
    problems: list[TableProblem] = field(default_factory=list)
    footer_ok: bool = False
    recovered_by_scan: bool = False

    @property
    def intact(self) -> bool:
        return not self.problems


def is_sstable(path: Path) -> bool:
    """True when the file ends with the SSTable footer magic (structure, not the name)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            if size < FOOTER_SIZE:
                return False
            fh.seek(size - 8)
            return struct.unpack("<Q", fh.read(8))[0] == MAGIC
    except OSError:
        return False


def parse_block(content: bytes) -> tuple[list[tuple[bytes, bytes]], str | None]:
    """Parse a block's entries; return ``(entries, error)`` keeping what parsed before an error."""
    entries: list[tuple[bytes, bytes]] = []
    n = len(content)
    if n < 4:
        return entries, "block shorter than its restart count"
    num_restarts = struct.unpack_from("<I", content, n - 4)[0]
    limit = n - 4 - 4 * num_restarts
    error = None
    if num_restarts == 0 or limit < 0:
        error = f"implausible restart count {num_restarts}"
        limit = n
    pos = 0
    last = b""
    try:
        while pos < limit:
            shared, pos = read_varint(content, pos)
            non_shared, pos = read_varint(content, pos)
            vlen, pos = read_varint(content, pos)
            if shared > len(last) or pos + non_shared + vlen > limit:
                return entries, error or f"entry at block offset {pos} runs past its bounds"
            key = last[:shared] + content[pos:pos + non_shared]
            pos += non_shared
            entries.append((key, content[pos:pos + vlen]))
            pos += vlen
            last = key
    except WireError as exc:
        return entries, error or str(exc)
    return entries, error


def _read_block(fh: BinaryIO, size: int, offset: int, length: int,
                scan: TableScan) -> tuple[bytes | None, bool]:
    """Read a block and check its trailer; return ``(content, crc_ok)``."""
    if offset < 0 or length < 0 or offset + length > size:
        scan.problems.append(TableProblem("bad-handle", offset, length,
                                          f"block handle ({offset}, {length}) outside the file"))
        return None, False
    fh.seek(offset)
    raw = fh.read(length + TRAILER)
    if len(raw) < length + TRAILER:
        scan.problems.append(TableProblem("block-truncated", offset, length + TRAILER,
                                          f"block at {offset} runs past the end of the file"))
        return raw[:length], False
    content, btype = raw[:length], raw[length]
    stored = struct.unpack_from("<I", raw, length + 1)[0]
    actual = mask(crc32c(raw[:length + 1]))
    if btype != 0:
        scan.problems.append(TableProblem("compressed", offset, length,
                                          f"block at {offset} has compression type {btype}"))
    if stored != actual:
        scan.problems.append(TableProblem(
            "block-checksum", offset, length + TRAILER,
            f"block checksum mismatch at offset {offset} (stored {stored:#010x}, "
            f"calculated {actual:#010x})"))
        return content, False
    return content, True


def _decode_handle(value: bytes, pos: int = 0) -> tuple[int, int, int]:
    off, pos = read_varint(value, pos)
    ln, pos = read_varint(value, pos)
    return off, ln, pos


def _add_block_entries(scan: TableScan, content: bytes, offset: int, trusted: bool) -> None:
    entries, error = parse_block(content)
    if error:
        scan.problems.append(TableProblem("block-parse", offset, len(content),
                                          f"block at {offset}: {error}"))
    for key, value in entries:
        scan.entries.append(TableEntry(key, value, offset, trusted and not error))


def read_table(path: Path) -> TableScan:
    """Read every entry of the SSTable at ``path``, recording problems instead of raising."""
    with path.open("rb") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        scan = TableScan(str(path), size)
        if size < FOOTER_SIZE:
            scan.problems.append(TableProblem("truncated", 0, size,
                                              f"{size} bytes: shorter than the 48-byte footer"))
            _recovery_scan(fh, size, scan)
            return scan
        fh.seek(size - FOOTER_SIZE)
        footer = fh.read(FOOTER_SIZE)
        if struct.unpack_from("<Q", footer, 40)[0] != MAGIC:
            scan.problems.append(TableProblem("bad-magic", size - 8, 8,
                                              "not an sstable (bad magic number)"))
            _recovery_scan(fh, size, scan)
            return scan
        try:
            _meta_off, _meta_len, pos = _decode_handle(footer)
            index_off, index_len, _ = _decode_handle(footer, pos)
        except WireError as exc:
            scan.problems.append(TableProblem("bad-handle", size - FOOTER_SIZE, 40, str(exc)))
            _recovery_scan(fh, size, scan)
            return scan
        scan.footer_ok = True
        index, index_ok = _read_block(fh, size, index_off, index_len, scan)
        handles: list[tuple[int, int]] = []
        if index is not None:
            idx_entries, error = parse_block(index)
            for _key, value in idx_entries:
                try:
                    off, ln, _ = _decode_handle(value)
                except WireError:
                    continue
                handles.append((off, ln))
            if error:
                scan.problems.append(TableProblem("block-parse", index_off, index_len,
                                                  f"index block: {error}"))
        usable = bool(handles) and all(off >= 0 and off + ln + TRAILER <= size
                                       for off, ln in handles)
        if index is None or not usable or (not index_ok and not _tiles(handles, index_off)):
            # No believable block handles: find the data blocks from their own trailers.
            _recovery_scan(fh, size, scan, stop=index_off if index is not None else size)
            return scan
        # Handles from a damaged index block are still usable when they tile the data region:
        # every data block carries its own CRC, which decides whether its entries are trusted.
        for off, ln in handles:
            content, ok = _read_block(fh, size, off, ln, scan)
            if content is not None:
                _add_block_entries(scan, content, off, ok)
    return scan


def _tiles(handles: list[tuple[int, int]], end: int) -> bool:
    """True when the blocks follow each other from offset 0 (each with its trailer)."""
    pos = 0
    for off, ln in handles:
        if off != pos:
            return False
        pos = off + ln + TRAILER
    return pos <= end


def _is_handle(value: bytes) -> bool:
    try:
        _off, _ln, end = _decode_handle(value)
    except WireError:
        return False
    return end == len(value)


def _looks_like_index(entries: list[tuple[bytes, bytes]], found: set[tuple[int, int]]) -> bool:
    if not entries:
        return True  # an empty block (metaindex) holds no bundle entries
    for _key, value in entries:
        try:
            off, ln, end = _decode_handle(value)
        except WireError:
            return False
        if end != len(value) or (off, ln) not in found:
            return False
    return True


def _recovery_scan(fh: BinaryIO, size: int, scan: TableScan, stop: int | None = None) -> None:
    """Find blocks by their CRC trailers from offset 0 (no usable footer or index block)."""
    scan.recovered_by_scan = True
    end = min(size if stop is None else stop, RECOVERY_SCAN_CAP)
    fh.seek(0)
    data = fh.read(end)
    found: set[tuple[int, int]] = set()
    start = 0
    p = start + 4
    # Linear: candidates are the zero bytes only (``data.find``), and the CRC of
    # ``data[start:p + 1]`` is extended from the previous candidate instead of recomputed
    # (recomputing it made garbage without trailers quadratic in the scanned size).
    run_crc, run_end = 0, start
    tried = 0
    while p + TRAILER <= len(data) and tried < MAX_CANDIDATES:
        p = data.find(b"\x00", p, len(data) - TRAILER + 1)
        if p < 0:
            break
        num = struct.unpack_from("<I", data, p - 4)[0]
        if num >= 1 and 4 + 4 * num <= p - start:
            tried += 1
            stored = struct.unpack_from("<I", data, p + 1)[0]
            run_crc = crc32c(data[run_end:p + 1], run_crc)
            run_end = p + 1
            if mask(run_crc) == stored:
                content = data[start:p]
                entries, error = parse_block(content)
                if not error and not _looks_like_index(entries, found):
                    for key, value in entries:
                        scan.entries.append(TableEntry(key, value, start, True))
                found.add((start, p - start))
                start = p + TRAILER
                p = start + 4
                run_crc, run_end = 0, start
                continue
        p += 1
    if start < len(data):
        # A damaged or cut block: keep whatever entries still parse, untrusted.
        tail = data[start:]
        entries, _error = parse_block(tail + b"\x00\x00\x00\x00")
        # Entries whose value is exactly a block handle belong to a cut index block.
        entries = [(k, v) for k, v in entries if not _is_handle(v)]
        for key, value in entries:
            scan.entries.append(TableEntry(key, value, start, False))
        scan.problems.append(TableProblem(
            "unrecovered", start, len(data) - start,
            f"{len(data) - start} bytes at offset {start} hold no verifiable block"
            + (f"; {len(entries)} entries parsed from them untrusted" if entries else "")))
