"""``.npy`` shards: one record per row (the first axis), in chunks, with vectorized statistics.

The header is parsed by :func:`ckptrescue.datasets.npy.parse_header` (``ast.literal_eval``, no
code runs); object arrays are never loaded (pickles). Rows are read from the stream
:data:`CHUNK_BYTES` at a time, so a compressed ``.npy.gz`` works and memory stays bounded. A
structured dtype's named fields become record fields; a Fortran-order array of two or more
dimensions has no contiguous rows and is not profiled (the reason is given).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from ckptrescue.datasets.npy import HeaderError, parse_header
from ckptrescue.datasets.profiles.sketches import MANTISSA_BITS

CHUNK_BYTES = 4 << 20
_OFFSET = 1100


class Unsupported(Exception):
    """The array cannot be profiled (the message says why)."""


@dataclass(frozen=True)
class ArrayChunk:
    """Rows ``start .. start + len(rows)`` of the array (a numpy array, first axis = rows)."""

    start: int
    rows: Any


def iter_chunks(fh: IO[bytes]) -> Iterator[ArrayChunk]:
    import numpy as np

    head = fh.read(65536 + 12)
    try:
        data_start, header = parse_header(head)
        dtype = np.lib.format.descr_to_dtype(header["descr"])
    except HeaderError as exc:
        raise Unsupported(f".npy header: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - numpy on a hostile descr
        raise Unsupported(f".npy descr: {type(exc).__name__}: {exc}") from exc
    if dtype.hasobject:
        raise Unsupported("object array (pickled data, never loaded)")
    shape = tuple(int(d) for d in header["shape"])
    if header["fortran_order"] and len(shape) >= 2:
        raise Unsupported("Fortran-order array: rows are not contiguous")
    rows_total = shape[0] if shape else 1
    row_shape = shape[1:] if shape else ()
    row_bytes = max(1, math.prod(row_shape) * dtype.itemsize)
    per_chunk = max(1, CHUNK_BYTES // row_bytes)
    buf = bytearray(head[data_start:])
    done = 0
    while done < rows_total:
        want = min(per_chunk, rows_total - done) * row_bytes
        while len(buf) < want:
            more = fh.read(max(want - len(buf), 1 << 20))
            if not more:
                break
            buf += more
        n = min(len(buf) // row_bytes, rows_total - done)
        if n == 0:
            raise Unsupported(f"truncated: {rows_total - done} of {rows_total} rows missing")
        arr = np.frombuffer(bytes(buf[: n * row_bytes]), dtype=dtype).reshape((n, *row_shape))
        del buf[: n * row_bytes]
        yield ArrayChunk(done, arr)
        done += n


def bin_keys(values: Any) -> tuple[Any, Any]:
    """Histogram keys and counts of finite ``values`` (same bins as ``sketches.bin_of``)."""
    import numpy as np

    x = np.asarray(values, dtype=np.float64).ravel()
    m, e = np.frexp(np.abs(x))
    sub = 1 << MANTISSA_BITS
    keys = 1 + (e.astype(np.int64) + _OFFSET) * sub + np.floor((m - 0.5) * 2 * sub).astype(np.int64)
    keys = np.where(x == 0, 0, np.where(x < 0, -keys, keys))
    return np.unique(keys, return_counts=True)


def row_hashes(rows: Any) -> list[int]:
    """A 64-bit hash of every row's bytes (BLAKE2b; the dtype and row shape are hashed too)."""
    import hashlib

    tag = (str(rows.dtype) + str(rows.shape[1:])).encode()
    out = []
    for i in range(rows.shape[0]):
        h = hashlib.blake2b(rows[i].tobytes(), digest_size=8, person=b"ckptr-row")
        h.update(tag)
        out.append(int.from_bytes(h.digest(), "big"))
    return out
