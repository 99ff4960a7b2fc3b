"""Tar / WebDataset shards: every header checksum and every member's length, naming the sample.

A WebDataset sample key is the member path up to the first dot of its base name
(``shard/000123.jpg`` -> ``shard/000123``). A header with a bad checksum cannot be trusted for its
size: the checker scans forward block by block to the next valid header (uncompressed shards).
GNU long names (``L``) and pax ``path`` records are honoured for the key.
"""

from __future__ import annotations

from typing import IO

from ckptrescue.datasets.shardcheck import BadRecord, CheckOutcome, read_exact

BLOCK = 512
_ZERO = bytes(BLOCK)
_DATA_TYPES = {b"0", b"\0", b"7", b"x", b"g", b"L", b"K"}


def sample_key(name: str) -> str:
    head, _, base = name.rpartition("/")
    stem = base.split(".", 1)[0] if not base.startswith(".") else base
    return f"{head}/{stem}" if head else stem


def header_ok(block: bytes) -> bool:
    stored = _octal(block[148:156])
    if stored is None:
        return False
    unsigned = sum(block[:148]) + 8 * 32 + sum(block[156:])
    signed = sum(b - 256 if b > 127 else b for b in block[:148] + block[156:]) + 8 * 32
    return stored in (unsigned, signed)


def _octal(field: bytes) -> int | None:
    text = field.split(b"\0", 1)[0].strip(b" \0")
    if not text:
        return 0
    try:
        return int(text, 8)
    except ValueError:
        return None


def _size(block: bytes) -> int | None:
    field = block[124:136]
    if field[0] & 0x80:  # GNU base-256
        return int.from_bytes(field[1:], "big")
    return _octal(field)


def _name(block: bytes) -> str:
    name = block[0:100].split(b"\0", 1)[0]
    if block[257:262] == b"ustar":
        prefix = block[345:500].split(b"\0", 1)[0]
        if prefix:
            name = prefix + b"/" + name
    return name.decode("utf-8", "surrogateescape")


def _pax_path(data: bytes) -> str | None:
    for record in data.split(b"\n"):
        _, _, kv = record.partition(b" ")
        key, _, value = kv.partition(b"=")
        if key == b"path":
            return value.decode("utf-8", "surrogateescape")
    return None


def check(fh: IO[bytes], size: int | None) -> CheckOutcome:
    out = CheckOutcome()
    pos = 0
    index = 0
    long_name: str | None = None
    while True:
        block = read_exact(fh, BLOCK)
        if not block:
            out.bad.append(BadRecord(index, pos, None, "archive ends without the end-of-archive "
                                     "blocks (truncated at a member boundary?)"))
            break
        if len(block) < BLOCK:
            out.bad.append(BadRecord(index, pos, None,
                                     f"truncated header: {len(block)} of {BLOCK} bytes"))
            break
        if block == _ZERO:
            break
        if not header_ok(block):
            key = sample_key(_name(block)) or None
            out.bad.append(BadRecord(index, pos, key, "header checksum mismatch"))
            nxt = _resync(fh, pos + BLOCK, size) if size is not None else None
            if nxt is None:
                break
            fh.seek(nxt)
            pos = nxt
            index += 1
            continue
        typeflag = block[156:157]
        length = _size(block) or 0
        padded = (length + BLOCK - 1) // BLOCK * BLOCK if typeflag in _DATA_TYPES else 0
        name = long_name or _name(block)
        if typeflag in (b"L", b"x"):
            data = read_exact(fh, padded)
            if len(data) < padded:
                out.bad.append(BadRecord(index, pos, None, "extended header truncated"))
                break
            long_name = (data[:length].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
                         if typeflag == b"L" else _pax_path(data[:length]))
            pos += BLOCK + padded
            continue
        long_name = None
        key = sample_key(name)
        got = _skip(fh, padded)
        if got < padded:
            have = max(got, 0)
            out.bad.append(BadRecord(index, pos, key, f"member {name!r} truncated: "
                                     f"{min(have, length)} of {length} bytes present"))
            break
        out.records += 1
        pos += BLOCK + padded
        index += 1
    return out


def _skip(fh: IO[bytes], n: int) -> int:
    left = n
    while left:
        chunk = fh.read(min(left, 1 << 20))
        if not chunk:
            break
        left -= len(chunk)
    return n - left


def _resync(fh: IO[bytes], start: int, size: int) -> int | None:
    pos = start
    while pos + BLOCK <= size:
        fh.seek(pos)
        block = read_exact(fh, BLOCK)
        if len(block) < BLOCK:
            return None
        if block != _ZERO and header_ok(block):
            return pos
        pos += BLOCK
    return None
