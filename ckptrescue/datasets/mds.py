"""MosaicML streaming MDS datasets: ``index.json`` against its shards, and each shard's layout.

Format (mosaicml/streaming: ``streaming/base/format/mds/writer.py`` ``MDSWriter.encode_sample``
and ``encode_joint_shard``, ``.../mds/reader.py`` ``MDSReader.get_sample_data``/``decode_sample``,
``streaming/base/format/base/writer.py`` ``JointWriter.flush_shard``/``_hash``/``_save_index``,
``streaming/base/hashing.py``, ``streaming/base/compression.py``):

* ``index.json``: ``{"version": 2, "shards": [...]}``; each shard ``{"samples", "raw_data":
  {"basename", "bytes", "hashes": {algo: hexdigest}}, "zip_data": same or null, "format": "mds",
  "compression", "hashes", "size_limit", "column_names", "column_encodings", "column_sizes",
  "version": 2}``. The file on disk is ``zip_data.basename`` when compressed (``shard.00000.mds.
  zstd``), else ``raw_data.basename`` (``shard.00000.mds``); ``hashes`` of each are over that
  file's bytes (hashlib names, or xxhash's ``xxh32``/``xxh64``/``xxh128``/``xxh3_64``/...).
* a shard: ``uint32 num_samples``, ``uint32 offsets[num_samples + 1]`` (absolute file offsets,
  little endian: sample ``i`` is ``[offsets[i], offsets[i+1])``, the last one is the file
  size), the shard's config JSON (the index entry without ``samples``/``raw_data``/``zip_data``),
  then the samples. A sample is ``uint32`` sizes of its variable-size columns, then every
  column's bytes in ``column_names`` order (fixed-size columns have their ``column_sizes``).

Checked here: every listed shard present with its byte size and every listed hash (those
hashlib/xxhash compute); the offset table monotonic, inside the file and ending at its size; the
sample count against the index; every sample's column sizes adding up to its length; compressed
shards through the bounded decompression of :mod:`~ckptrescue.datasets.decompress` (the raw
length and raw hashes checked on the decompressed stream). Each shard is read once, front to
back, in bounded blocks. A bad record's ``index`` is the sample number within its shard,
``offset`` its offset in the (decompressed) shard, ``key`` the shard's file name.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from array import array
from typing import IO, Any

from ckptrescue.checkpoints.formats.chunked import skip
from ckptrescue.datasets.decompress import Decompressed, LimitReached
from ckptrescue.datasets.format_heads import MDS_MAX_CONFIG as MAX_CONFIG
from ckptrescue.datasets.shardcheck import BadRecord, CheckOutcome, open_tracked, read_exact
from ckptrescue.errors import ToolMissingError
from ckptrescue.model import JsonObject

MAX_INDEX = 64 << 20  # index.json bytes read
MAX_TABLE = 1 << 24  # offsets kept in memory (64 MiB); more samples: table order only
MAX_BAD = 1000
_BLOCK = 1 << 20
_COMPRESSION = {"zstd": "zstd", "gz": "gzip", "bz2": "bz2"}  # streaming name -> Decompressed


# --------------------------------------------------------------------------- hashing


def hasher(algo: str) -> Any | None:
    """A fresh hash object as ``streaming.base.hashing`` names it, or None if not available."""
    if algo.startswith("xxh"):
        try:
            import xxhash
        except ImportError:
            return None
        factory = getattr(xxhash, algo, None)
        return factory() if callable(factory) else None
    if algo in hashlib.algorithms_available and not algo.startswith("shake_"):
        return hashlib.new(algo)
    return None


class _Tee:
    """A read-only stream that feeds every byte read to hashers and counts them."""

    def __init__(self, fh: Any, hashers: dict[str, Any]) -> None:
        self.fh = fh
        self.hashers = hashers
        self.pos = 0

    def read(self, n: int = -1) -> bytes:
        data = self.fh.read(n if n is not None and n >= 0 else _BLOCK)
        for h in self.hashers.values():
            h.update(data)
        self.pos += len(data)
        return bytes(data)

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def drain(self) -> None:
        while self.read(_BLOCK):
            pass


# --------------------------------------------------------------------------- one shard


def check(fh: IO[bytes], size: int | None, out: CheckOutcome | None = None) -> CheckOutcome:
    """Check one shard read front to back (``size`` None: a decompressed stream)."""
    out = CheckOutcome() if out is None else out
    check_shard(fh, size, out)
    return out


def check_shard(fh: Any, size: int | None, out: CheckOutcome, *, key: str | None = None,
                expect_samples: int | None = None,
                expect_columns: JsonObject | None = None) -> int:
    """The shard layout; returns how many bytes it read (the shard's length when it ended
    cleanly). ``expect_*`` come from the index entry."""
    bad = _Bad(out, key)
    head = read_exact(fh, 4)
    if len(head) < 4:
        bad.add(None, 0, f"shard truncated: {len(head)} of 4 header bytes")
        return len(head)
    (n,) = struct.unpack("<I", head)
    pos = 4
    if n != expect_samples and expect_samples is not None and expect_samples < MAX_TABLE and \
            (size is None or 8 + 4 * expect_samples <= size):
        # which count is right: the config JSON starts right after the true offset table
        raw = read_exact(fh, 4 * (expect_samples + 1) + 2)
        if raw[-2:] == b'{"':
            bad.add(None, 0, f"shard header says {n} samples; its offset table holds "
                    f"{expect_samples}, as index.json says (sample count damaged)")
            n = expect_samples
        else:
            bad.add(None, 0, f"shard header says {n} samples, index.json {expect_samples}")
        fh = _Prefixed(fh, raw)
    elif expect_samples is not None and n != expect_samples:
        bad.add(None, 0, f"shard header says {n} samples, index.json {expect_samples}")
    if size is not None and 8 + 4 * n > size:
        bad.add(None, 0, f"sample count {n} does not fit in {size} bytes (header damaged or "
                "shard truncated in its offset table)")
        return pos
    if n >= MAX_TABLE:
        out.unchecked_reason = f"{n} samples: more than {MAX_TABLE}, the offset table is not kept"
        return pos
    table = array("I")
    raw = read_exact(fh, 4 * (n + 1))
    pos += len(raw)
    table.frombytes(raw[: len(raw) // 4 * 4])
    if array("I", [1]).tobytes() != b"\x01\x00\x00\x00":
        table.byteswap()
    if len(table) < n + 1:
        bad.add(len(table) - 1 if table else None, pos,
                f"shard truncated in its offset table: {len(table)} of {n + 1} offsets")
        return pos
    table_end = 8 + 4 * n
    first = table[0]
    columns = None
    if not table_end <= first <= table_end + MAX_CONFIG:
        bad.add(0 if n else None, 4, f"first sample offset {first} is not just past the "
                f"offset table and config (table ends at {table_end})")
    else:
        config = read_exact(fh, first - table_end)
        pos += len(config)
        if len(config) < first - table_end:
            bad.add(None, table_end, "shard truncated in its config JSON")
            return pos
        columns = _columns(config, bad, table_end, expect_columns)
    # the offset table: an entry out of order is damaged; the sample that starts there is lost,
    # the one that ends there is judged as the reader reads it (in _walk)
    starts_bad: set[int] = set()
    ends_damaged: set[int] = set()
    for i in range(n):
        if table[i + 1] >= table[i] or i in starts_bad:
            continue
        j = i + 1  # the entry out of order: table[i] too large, or table[i + 1] too small
        if i >= 1 and table[i - 1] <= table[i + 1]:
            j = i
        bad.add(None, 4 + 4 * j, f"offset table entry {j} is damaged: {table[j]} is out of "
                f"order between {table[j - 1] if j else 0} and {table[j + 1] if j < n else '-'}")
        ends_damaged.add(j - 1)
        if j < n:
            starts_bad.add(j)
            bad.add(j, 4 + 4 * j, f"sample {j}: its start offset (table entry {j}) is "
                    "damaged: the reader reads the wrong bytes")
    if size is not None and table[n] < size:
        bad.add(None, table[n], f"{size - table[n]} bytes after the last sample")
    return _walk(fh, table, n, pos, columns, bad, out, size, starts_bad, ends_damaged)


def _columns(config: bytes, bad: _Bad, at: int,
             expect: JsonObject | None) -> list[int | None] | None:
    try:
        obj = json.loads(config)
        names, sizes = obj["column_names"], obj["column_sizes"]
        if not (isinstance(names, list) and isinstance(sizes, list) and len(names) == len(sizes)
                and all(s is None or (isinstance(s, int) and s >= 0) for s in sizes)):
            raise ValueError("column_names/column_sizes malformed")
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        bad.add(None, at, f"shard config JSON does not parse: {str(exc)[:200]}")
        return None
    if expect is not None:
        for field in ("column_names", "column_encodings", "column_sizes"):
            if field in expect and obj.get(field) != expect[field]:
                bad.add(None, at, f"shard config {field} differs from index.json")
    return sizes


def _walk(fh: Any, table: array[int], n: int, pos: int, sizes: list[int | None] | None,
          bad: _Bad, out: CheckOutcome, size: int | None, starts_bad: set[int],
          ends_damaged: set[int]) -> int:
    """Read the samples in order. A sample is good when its column sizes add up to exactly its
    length; where its end offset is damaged (or past the end of the shard) it is judged as
    ``MDSReader.get_sample_data`` reads it: ``end - begin`` bytes (to the end of the file when
    that is negative or the file is shorter), of which ``decode_sample`` uses what its column
    sizes say and ignores the rest."""
    variable = sum(1 for s in sizes if s is None) if sizes is not None else 0
    fixed = sum(s for s in sizes if s) if sizes is not None else 0
    for i in range(n):
        begin, end = table[i], table[i + 1]
        if i in starts_bad or begin < pos:
            continue  # reported with the table
        need = begin - pos
        got = skip(fh, need)
        pos += got
        if got < need:
            bad.add(i, begin, f"sample {i} starts at {begin}, past the end of the shard "
                    f"({pos} bytes): samples {i}..{n - 1} ({n - i}) are missing (truncated)")
            return pos
        lenient = i in ends_damaged or (size is not None and end > size) or end < begin
        if not lenient:
            length = end - begin
            head = read_exact(fh, min(length, 4 * variable))
            got = len(head) + skip(fh, length - len(head))
            pos += got
            if got < length:
                bad.add(i, begin, f"sample {i} truncated: {got} of {length} bytes present"
                        + _after(i, n))
                return pos
            if sizes is not None:
                if length < 4 * variable:
                    bad.add(i, begin, f"sample {i}: {length} bytes, shorter than its "
                            f"{variable} column sizes (offset damaged?)")
                    continue
                want = 4 * variable + fixed + sum(struct.unpack(f"<{variable}I", head))
                if want != length:
                    bad.add(i, begin, f"sample {i}: its columns add up to {want} bytes, the "
                            f"offset table gives {length} (sample header or offset damaged)")
                    continue
            out.records += 1
            continue
        # the end offset cannot be trusted: judge the sample as the reader reads it
        reader_len: int | None = end - begin if end >= begin else None  # None: to EOF
        if size is not None:
            reader_len = size - begin if reader_len is None else min(reader_len, size - begin)
        head = read_exact(fh, 4 * variable)
        pos += len(head)
        if len(head) < 4 * variable:
            bad.add(i, begin, f"sample {i} truncated: {len(head)} bytes present"
                    + _after(i, n))
            return pos
        if sizes is None:
            bad.add(i, begin, f"sample {i}: its end offset is damaged and the columns are "
                    "unknown (config damaged)")
            continue
        want = 4 * variable + fixed + sum(struct.unpack(f"<{variable}I", head))
        got = skip(fh, want - len(head))
        pos += got
        if len(head) + got < want:
            bad.add(i, begin, f"sample {i} truncated: {len(head) + got} of {want} bytes "
                    "present" + _after(i, n))
            return pos
        if reader_len is not None and reader_len < want:
            bad.add(i, begin, f"sample {i}: its end offset {end} gives the reader "
                    f"{reader_len} of its {want} bytes")
            continue
        if i == n - 1 and size is not None and end > size:
            bad.add(None, 4 + 4 * n, f"offset table entry {n} (the shard's end) is {end}, "
                    f"past the end of the shard ({size} bytes): damaged (sample {i} is whole)")
        out.records += 1
    if size is None:  # a stream: its end is where the last sample ends
        extra = skip(fh, 1 << 62)
        if pos == table[n] and extra:
            bad.add(None, pos, f"{extra} bytes after the last sample")
        pos += extra
    return pos


def _after(i: int, n: int) -> str:
    return f"; samples {i + 1}..{n - 1} are missing" if i + 1 < n else ""


class _Prefixed:
    """``fh`` with some bytes already read put back in front."""

    def __init__(self, fh: Any, prefix: bytes) -> None:
        self.fh, self.prefix = fh, prefix

    def read(self, n: int = -1) -> bytes:
        if self.prefix:
            n = len(self.prefix) if n is None or n < 0 else n
            data, self.prefix = self.prefix[:n], self.prefix[n:]
            return data
        return bytes(self.fh.read(n))


class _Bad:
    def __init__(self, out: CheckOutcome, key: str | None) -> None:
        self.out, self.key, self.count = out, key, 0

    def add(self, index: int | None, offset: int | None, problem: str) -> None:
        if self.count < MAX_BAD:
            self.out.bad.append(BadRecord(index, offset, self.key, problem))
        elif self.count == MAX_BAD:
            self.out.bad.append(BadRecord(None, None, self.key,
                                          f"more than {MAX_BAD} bad records; not all listed"))
        self.count += 1


# --------------------------------------------------------------------------- the directory


def check_dir(root: str | os.PathLike[str], *, shards: bool = True) -> CheckOutcome:
    """Check ``root/index.json`` and every shard it lists (``shards=False``: presence, size
    and hashes only, the layout being checked per file elsewhere)."""
    out = CheckOutcome()
    root = os.fspath(root)
    index_path = os.path.join(root, "index.json")
    if not os.path.isfile(index_path):
        out.bad.append(BadRecord(None, None, "index.json", "index.json is missing: the shards "
                                 "cannot be read by StreamingDataset without it"))
        return out
    with open_tracked(index_path) as fh:
        text = read_exact(fh, MAX_INDEX + 1)
    if len(text) > MAX_INDEX:
        out.unchecked_reason = f"index.json larger than {MAX_INDEX} bytes"
        return out
    try:
        obj = json.loads(text)
        entries = obj["shards"]
        if obj.get("version") != 2 or not isinstance(entries, list):
            raise ValueError(f"version {obj.get('version')!r} (streaming reads version 2)")
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        out.bad.append(BadRecord(None, 0, "index.json",
                                 f"index.json does not parse: {str(exc)[:200]}"))
        return out
    first_sample = 0
    skipped: list[str] = []
    for k, entry in enumerate(entries):
        try:
            samples = int(entry["samples"])
            raw = entry["raw_data"]
            zipped = entry.get("zip_data")
            info = zipped or raw
            name = os.path.basename(str(info["basename"]))
            fmt = entry.get("format")
        except (KeyError, TypeError, ValueError) as exc:
            out.bad.append(BadRecord(k, None, "index.json",
                                     f"shard entry {k} malformed: {exc!r}"[:300]))
            continue
        span = f"samples {first_sample}..{first_sample + samples - 1} ({samples})"
        first_sample += samples
        path = os.path.join(root, name)
        if name != info["basename"] or name in ("", ".", ".."):
            out.bad.append(BadRecord(None, None, name, f"shard entry {k}: basename "
                                     f"{info['basename']!r} leads outside the directory"))
            continue
        if not os.path.isfile(path):
            out.bad.append(BadRecord(None, None, name, f"shard {name} listed in index.json is "
                                     f"missing: {span} lost"))
            continue
        if fmt != "mds":
            skipped.append(f"{name} ({fmt} format)")
            continue
        _check_listed(path, name, entry, raw, zipped, span, out, skipped, shards)
    if skipped:
        out.unchecked_reason = "not checked: " + ", ".join(skipped[:10]) + \
            (" ..." if len(skipped) > 10 else "")
    return out


def _hashers(info: JsonObject, skipped: list[str], name: str) -> dict[str, Any]:
    found = {}
    for algo in sorted(info.get("hashes") or {}):
        h = hasher(algo)
        if h is None:
            skipped.append(f"{name} hash {algo!r} (not available here)")
        else:
            found[algo] = h
    return found


def _compare(hashers: dict[str, Any], info: JsonObject, name: str, span: str,
             out: CheckOutcome, what: str) -> None:
    for algo, h in hashers.items():
        want = str(info["hashes"][algo]).lower()
        if h.hexdigest() != want:
            out.bad.append(BadRecord(None, None, name, f"{what}{algo} {h.hexdigest()} does not "
                                     f"match index.json ({want}): {span} suspect"))


def _check_listed(path: str, name: str, entry: JsonObject, raw: JsonObject,
                  zipped: JsonObject | None, span: str, out: CheckOutcome,
                  skipped: list[str], shards: bool) -> None:
    info = zipped or raw
    size = os.stat(path).st_size
    want_bytes = int(info.get("bytes", -1))
    if size != want_bytes:
        out.bad.append(BadRecord(None, min(size, want_bytes), name,
                                 f"shard is {size} bytes, index.json says {want_bytes} "
                                 f"({'truncated' if size < want_bytes else 'extended'}): "
                                 f"{span} suspect"))
    file_hashers = _hashers(info, skipped, name)
    columns = {k: entry[k] for k in ("column_names", "column_encodings", "column_sizes")
               if k in entry}
    with open_tracked(path) as fh:
        tee = _Tee(fh, file_hashers)
        if zipped is None:
            if shards:
                check_shard(tee, size, out, key=name, expect_samples=int(entry["samples"]),
                            expect_columns=columns)
            tee.drain()
        else:
            compression = str(entry.get("compression") or "").split(":")[0]
            kind = _COMPRESSION.get(compression)
            if kind is None:
                skipped.append(f"{name} ({compression or 'unknown'}-compressed)")
                tee.drain()
            else:
                _check_compressed(tee, kind, name, entry, raw, span, out, skipped, shards,
                                  columns)
                tee.drain()
    _compare(file_hashers, info, name, span, out, "")


def _check_compressed(tee: _Tee, kind: str, name: str, entry: JsonObject,
                      raw: JsonObject, span: str, out: CheckOutcome, skipped: list[str],
                      shards: bool, columns: JsonObject) -> None:
    raw_hashers = _hashers(raw, skipped, name)
    try:
        stream = Decompressed(tee, kind)
    except ToolMissingError as exc:
        skipped.append(f"{name}: {exc.message}")
        return
    inner = _Tee(stream, raw_hashers)
    try:
        if shards:
            check_shard(inner, None, out, key=name, expect_samples=int(entry["samples"]),
                        expect_columns=columns)
        inner.drain()
    except LimitReached as exc:
        out.unchecked_reason = f"{name}: {exc}"
        out.limit = True
        return
    finally:
        stream.close()
    if stream.error:
        out.bad.append(BadRecord(None, inner.pos, name, f"{kind} stream damaged after "
                                 f"{inner.pos} decompressed bytes: {stream.error}: {span} "
                                 "suspect"))
    else:  # a frame whose check failed after its content was read (the stream went on)
        out.bad += [BadRecord(None, d.start, name, f"{d.describe()}: {span} suspect")
                    for d in stream.damaged]
    want = int(raw.get("bytes", -1))
    if inner.pos != want:
        out.bad.append(BadRecord(None, min(inner.pos, want), name,
                                 f"decompressed shard is {inner.pos} bytes, index.json says "
                                 f"{want}: {span} suspect"))
    elif not stream.error:
        _compare(raw_hashers, raw, name, span, out, "decompressed ")


def check_index_path(path: str | os.PathLike[str]) -> CheckOutcome:
    """The check ``dataset verify`` runs for a file detected as an MDS ``index.json``: every
    shard present with its size and hashes (the shards' layout is their own per-file check)."""
    return check_dir(os.path.dirname(os.fspath(path)) or ".", shards=False)
