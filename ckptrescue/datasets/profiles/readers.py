"""Open a shard read-only, tell its format, and stream its records.

The format comes from :func:`ckptrescue.datasets.detect.detect` on the name and the first bytes,
looking through compression (gzip, zstd, bzip2, xz: :mod:`ckptrescue.datasets.decompress`, with
its ratio and size limits) as ``dataset verify`` does; Arrow IPC (``.arrow``/``.feather``/
``.ipc`` or the ``ARROW1`` magic) is added here. Files are opened with
:func:`~ckptrescue.datasets.shardcheck.open_tracked` (no atime update; an I/O error names its
offset). :func:`open_records` yields flattened records (``dict``), or, for ``.npy``,
:class:`~ckptrescue.datasets.profiles.arrays.ArrayChunk` blocks of rows.
"""

from __future__ import annotations

import json
import os
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

from ckptrescue.datasets.decompress import Decompressed, LimitReached, compression_of, peek, strip_suffix
from ckptrescue.datasets.detect import HEAD_BYTES, detect
from ckptrescue.datasets.profiles import arrays, columnar, tfexample, wds
from ckptrescue.datasets.profiles.values import flatten
from ckptrescue.datasets.shardcheck import UnreadableAt, open_tracked, read_exact
from ckptrescue.errors import ToolMissingError

FORMATS = ("jsonl", "parquet", "arrow", "tfrecord", "tar", "npy")
MAX_LINE = 64 << 20
_ARROW_SUFFIXES = (b".arrow", b".feather", b".ipc")


@dataclass
class ReadState:
    """What reading a shard found besides its records."""

    format: str = "other"
    unparsed: int = 0          # records that did not parse (counted, not profiled)
    stopped: str | None = None  # why reading stopped before the end, if it did


def shard_format(name: bytes | str, head: bytes, fh: IO[bytes]) -> tuple[str, str | None]:
    """(format, compression): ``jsonl``, ``parquet``, ``arrow``, ``tfrecord``, ``tar``, ``npy``
    or another :func:`detect` name, and ``gzip``/``zstd``/``bz2``/``xz`` or None."""
    base = os.fsencode(name).rsplit(b"/", 1)[-1].lower()
    kind = compression_of(head)
    inner_head = head
    if kind is not None:
        base = strip_suffix(base)
        try:
            inner_head = peek(fh, kind, HEAD_BYTES)
        except ToolMissingError:
            inner_head = b""
    if base.endswith(_ARROW_SUFFIXES) or inner_head[:6] == columnar.ARROW_MAGIC:
        return "arrow", kind
    fmt = detect(base, inner_head).split("+")[0]
    return fmt, kind


def open_records(path: str | bytes, state: ReadState, *,
                 fields: Sequence[str] | None = None, batches: bool = False) -> Iterator[Any]:
    """Yield the records of the shard at ``path``; ``state`` says what else was seen.

    ``batches``: Parquet and Arrow shards yield :class:`~ckptrescue.datasets.profiles.batch.ArrowBatch`
    blocks of records instead of one dict per record.

    Raises :class:`ToolMissingError` when a needed optional library is missing and
    :class:`~ckptrescue.datasets.shardcheck.UnreadableAt` on an I/O error.
    """
    with open_tracked(path) as fh:
        head = read_exact(fh, HEAD_BYTES)
        fh.seek(0)
        fmt, kind = shard_format(path, head, fh)
        state.format = fmt + (f"+{kind}" if kind else "")
        if fmt not in FORMATS:
            state.stopped = f"format {fmt!r} is not profiled"
            return
        if kind is not None and fmt in ("parquet", "arrow"):
            state.stopped = f"{kind}-compressed {fmt} files are not profiled"
            return
        stream: Any = Decompressed(fh, kind) if kind is not None else fh
        try:
            yield from _records(fmt, stream, state, fields, batches)
        except LimitReached as exc:
            state.stopped = str(exc)
        except UnreadableAt:
            raise
        except (tfexample.Truncated, arrays.Unsupported) as exc:
            state.stopped = str(exc)
        except (tarfile.TarError, EOFError, OSError) as exc:
            state.stopped = f"{fmt} stream damaged: {type(exc).__name__}: {exc}"
        except ToolMissingError:
            raise
        except Exception as exc:  # pyarrow raises its own types on damaged files
            state.stopped = f"{fmt} reader stopped: {type(exc).__name__}: {exc}"
        finally:
            if kind is not None:
                error = stream.error or (stream.damaged[0].describe() if stream.damaged
                                         else None)
                stream.close()
                if error and state.stopped is None:
                    state.stopped = f"{kind} stream damaged: {error}"


def _records(fmt: str, fh: Any, state: ReadState, fields: Sequence[str] | None,
             batches: bool) -> Iterator[Any]:
    if fmt == "jsonl" and batches:
        from ckptrescue.datasets.profiles.batch import JsonBlock

        for values in _jsonl(fh, state, raw=True):
            yield JsonBlock(values)
    elif fmt == "jsonl":
        for values in _jsonl(fh, state, raw=False):
            yield from values
    elif fmt in ("parquet", "arrow") and batches:
        from ckptrescue.datasets.profiles.batch import ArrowBatch

        read = columnar.parquet_batches if fmt == "parquet" else columnar.arrow_batches
        for b in read(fh, fields):
            yield ArrowBatch(b)
    elif fmt == "parquet":
        yield from columnar.iter_parquet(fh, fields)
    elif fmt == "arrow":
        yield from columnar.iter_arrow(fh, fields)
    elif fmt == "tfrecord":
        for payload in tfexample.iter_payloads(fh):
            example = tfexample.parse_example(payload)
            yield flatten(example) if example is not None else {"$": payload}
    elif fmt == "tar":
        yield from wds.iter_samples(fh)
    elif fmt == "npy":
        yield from arrays.iter_chunks(fh)


READ_BYTES = 1 << 20
_STRIP = " \t\n\r\x0b\x0c"  # what bytes.strip() strips


def _jsonl(fh: Any, state: ReadState, raw: bool) -> Iterator[list[Any]]:
    """One record per non-blank line: ``json.loads(line.strip())``, read by blocks of lines;
    yields each block's records (flattened, or as parsed when ``raw``)."""
    carry = b""
    while True:
        chunk = fh.read(READ_BYTES)
        if not chunk:
            if len(carry) > MAX_LINE:
                state.stopped = f"a line longer than {MAX_LINE} bytes"
                return
            if carry:
                yield _lines(carry, state, raw)
            return
        data = carry + chunk if carry else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            carry = data
            if len(carry) > MAX_LINE:
                state.stopped = f"a line longer than {MAX_LINE} bytes"
                return
            continue
        first = data.find(b"\n")
        if first > MAX_LINE:  # only the first line of a block can have grown that long
            state.stopped = f"a line longer than {MAX_LINE} bytes"
            return
        carry = data[cut + 1:]
        yield _lines(data[: cut + 1], state, raw)


def _lines(block: bytes, state: ReadState, raw: bool) -> list[Any]:
    """The records of a block of whole lines. A block of UTF-8 without NUL or BOM characters
    (what json.loads of each line's bytes would decode as UTF-8) is decoded once and each line
    scanned by json's own scanner (what json.loads does, without its per-call overhead);
    otherwise line by line with json.loads."""
    out: list[Any] = []
    add = out.append
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\x00" in text or "\ufeff" in text:
        for line_b in block.split(b"\n"):
            body = line_b.strip()
            if not body:
                continue
            try:
                value = json.loads(body)
            except (ValueError, RecursionError):
                state.unparsed += 1
                continue
            add(value)
        return out if raw else list(map(flatten, out))
    scan = _scanner()
    for line in text.split("\n"):
        body = line.strip(_STRIP)
        if not body:
            continue
        try:
            value, end = scan(body, 0)
        except (StopIteration, ValueError, RecursionError):
            state.unparsed += 1
            continue
        if end != len(body):  # "Extra data" (the body has no trailing whitespace)
            state.unparsed += 1
            continue
        add(value)
    return out if raw else list(map(flatten, out))


_SCAN: Any = None


def _scanner() -> Any:
    global _SCAN
    if _SCAN is None:
        _SCAN = json.JSONDecoder().scan_once
    return _SCAN
