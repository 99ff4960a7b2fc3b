"""Tar / WebDataset shards: every header checksum and every member's length, naming the sample.

A WebDataset sample key is the member path up to the first dot of its base name
(``shard/000123.jpg`` -> ``shard/000123``). A header with a bad checksum cannot be trusted for its
size: the checker scans forward block by block to the next valid header (uncompressed shards).
GNU long names (``L``) and pax ``path`` records are honoured for the key.

The reader whose behaviour defines ``ok`` is WebDataset's: ``tarfile`` in stream mode (``r|``),
which ends the archive at the first zero block. A valid member header anywhere after that block
(a zeroed header mid-archive, a member size that swallowed the next header and landed on zeros)
means members the training job silently never sees: damaged.
"""

from __future__ import annotations

from typing import IO

from ckptrescue.checkpoints.families.tarwalk import checksum_ok, octal
from ckptrescue.checkpoints.formats.chunked import iter_chunks
from ckptrescue.datasets.shardcheck import BadRecord, CheckOutcome, read_exact

BLOCK = 512
_ZERO = bytes(BLOCK)
_DATA_TYPES = {b"0", b"\0", b"7", b"x", b"g", b"L", b"K"}
# GNU long names and pax headers: ``L``/``K`` long name/link, ``x`` next member, ``g`` global


def sample_key(name: str) -> str:
    head, _, base = name.rpartition("/")
    stem = base.split(".", 1)[0] if not base.startswith(".") else base
    return f"{head}/{stem}" if head else stem


def _size(block: bytes) -> int | None:
    field = block[124:136]
    if field[0] == 0xFF:  # GNU base-256, negative: tarfile reads a negative size
        return -(256 ** 11 - int.from_bytes(field[1:], "big"))
    return octal(field)


def _pax_records(data: bytes) -> dict[str, bytes] | None:
    """``LEN key=value\n`` records as tarfile reads them (LEN counts the whole record); None
    when they do not parse (tarfile raises ``InvalidHeaderError``)."""
    out: dict[str, bytes] = {}
    pos = 0
    while pos < len(data) and data[pos:pos + 1] != b"\0":
        space = data.find(b" ", pos, pos + 24)
        if space < 0 or not data[pos:space].isdigit():
            return None
        length = int(data[pos:space])
        end = pos + length
        if length < 5 or end > len(data) or data[end - 1:end] != b"\n":
            return None
        key, eq, value = data[space + 1:end - 1].partition(b"=")
        if not eq:
            return None
        out[key.decode("utf-8", "surrogateescape")] = value
        pos = end
    return out


def _name(block: bytes) -> str:
    name = block[0:100].split(b"\0", 1)[0]
    if block[257:262] == b"ustar":
        prefix = block[345:500].split(b"\0", 1)[0]
        if prefix:
            name = prefix + b"/" + name
    return name.decode("utf-8", "surrogateescape")


MAX_EXTENDED = 1 << 20  # GNU long names and pax headers are small; more is not read


def _pax_number(value: bytes | None) -> int | None:
    """A pax ``size`` as tarfile takes it (an unparsable number becomes 0)."""
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return 0


def _pax_path(data: bytes) -> str | None:
    for record in data.split(b"\n"):
        _, _, kv = record.partition(b" ")
        key, _, value = kv.partition(b"=")
        if key == b"path":
            return value.decode("utf-8", "surrogateescape")
    return None


def check(fh: IO[bytes], size: int | None, out: CheckOutcome | None = None) -> CheckOutcome:
    out = CheckOutcome() if out is None else out
    pos = 0
    index = 0
    long_name: str | None = None
    pax_size: int | None = None  # a pax ``size`` record overrides the next member's size
    global_size: int | None = None
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
            _after_end(fh, pos, index, out)
            break
        if not checksum_ok(block):
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
        if typeflag not in (b"L", b"x", b"g", b"K"):
            override = pax_size if pax_size is not None else global_size
            length = override if override is not None else length
        name = long_name or _name(block)
        if length < 0:
            out.bad.append(BadRecord(index, pos, sample_key(name) or None,
                                     f"member {name!r} has a negative size ({length})"))
            break
        padded = (length + BLOCK - 1) // BLOCK * BLOCK if typeflag in _DATA_TYPES else 0
        if size is not None and pos + BLOCK + padded > size:  # checked before any read
            have = max(0, min(size - pos - BLOCK, length))
            out.bad.append(BadRecord(index, pos, sample_key(name) or None,
                                     f"member {name!r} truncated: {have} of {length} bytes "
                                     "present (its size runs past the end of the file)"))
            break
        if typeflag in (b"L", b"x", b"g"):
            if length > MAX_EXTENDED:
                out.bad.append(BadRecord(index, pos, None, f"extended header of {length} "
                                         f"bytes (over {MAX_EXTENDED})"))
                break
            data = read_exact(fh, padded)
            if len(data) < padded:
                out.bad.append(BadRecord(index, pos, None, "extended header truncated"))
                break
            if typeflag == b"L":
                long_name = data[:length].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            else:
                records = _pax_records(data[:length])
                if records is None:
                    out.bad.append(BadRecord(index, pos, None, "pax extended header malformed"))
                    break
                number = _pax_number(records.get("size"))
                if typeflag == b"x":
                    long_name = _pax_path(data[:length])
                    pax_size = number
                else:
                    global_size = number
            pos += BLOCK + padded
            continue
        long_name = None
        pax_size = None
        key = sample_key(name)
        inner = name.lower().endswith((".tar", ".tgz", ".tar.gz"))  # a tar in a tar holds headers
        got, swallowed = _skip(fh, padded, look=not inner)
        if swallowed is not None:
            out.bad.append(BadRecord(index, pos, key, f"member {name!r}: its size ({length}) "
                                     "runs over a valid member header at offset "
                                     f"{pos + BLOCK + swallowed}: it swallowed the members "
                                     "there (a streaming reader returns them as its data)"))
        if got < padded:
            have = max(got, 0)
            out.bad.append(BadRecord(index, pos, key, f"member {name!r} truncated: "
                                     f"{min(have, length)} of {length} bytes present"))
            break
        out.records += 1
        pos += BLOCK + padded
        index += 1
    return out


def _after_end(fh: IO[bytes], pos: int, index: int, out: CheckOutcome) -> None:
    """What follows the first zero block. A streaming reader (``tarfile`` mode ``r|``, as
    WebDataset reads shards) ends the archive at the first zero block: a valid header after it
    is a member those readers silently lose (a zeroed header, a member whose size swallowed
    the next header). Reads to the end (a compressed stream's trailer is checked there)."""
    at = pos + BLOCK
    lost: int | None = None
    while True:
        block = read_exact(fh, BLOCK)
        if len(block) < BLOCK:
            break
        if lost is None and block != _ZERO and checksum_ok(block):
            lost = at
        at += BLOCK
    if lost is not None:
        out.bad.append(BadRecord(index, pos, None, f"a zero block at offset {pos} ends the "
                                 "archive for streaming readers (tarfile 'r|', WebDataset), but "
                                 f"a member header follows at offset {lost}: the members from "
                                 "there on are lost to them (a zeroed header, or a member size "
                                 "that swallowed the next header?)"))


def _skip(fh: IO[bytes], n: int, *, look: bool = False) -> tuple[int, int | None]:
    """Read past ``n`` bytes of member data; with ``look``, also the offset (in the data) of
    the first block that is a valid ustar header: a size that swallowed the next member."""
    done = 0
    found: int | None = None
    for chunk in iter_chunks(fh, n):
        if look and found is None:
            at = chunk.find(b"ustar", 257)
            while at >= 0 and found is None:
                start = at - 257
                if (done + start) % BLOCK == 0 and start + BLOCK <= len(chunk) \
                        and checksum_ok(chunk[start:start + BLOCK]):
                    found = done + start
                at = chunk.find(b"ustar", at + 1)
        done += len(chunk)
    return done, found


def _resync(fh: IO[bytes], start: int, size: int) -> int | None:
    pos = start
    while pos + BLOCK <= size:
        fh.seek(pos)
        block = read_exact(fh, BLOCK)
        if len(block) < BLOCK:
            return None
        if block != _ZERO and checksum_ok(block):
            return pos
        pos += BLOCK
    return None
