"""``.npy`` and ``.npz``: the array header against the bytes that follow it.

The header is a Python dict literal, read with ``ast.literal_eval`` (no code runs); the dtype is
built with numpy. Object arrays hold pickles and are never loaded: they are reported unchecked.
In ``.npz`` archives every member is read through (zip CRC-32 verified) and every ``.npy`` member's
header is checked against its uncompressed size; ``key`` names the member.
"""

from __future__ import annotations

import ast
import math
import struct
import zipfile
from typing import IO, Any

from ckptrescue.datasets.shardcheck import BadRecord, CheckOutcome, UnreadableAt, read_exact

MAGIC = b"\x93NUMPY"


class HeaderError(ValueError):
    pass


def parse_header(head: bytes) -> tuple[int, dict[str, Any]]:
    """(offset where the data starts, header dict) from the first bytes of a .npy stream."""
    if head[:6] != MAGIC:
        raise HeaderError("no \\x93NUMPY magic")
    major = head[6] if len(head) > 6 else 0
    if len(head) < (10 if major == 1 else 12):
        raise HeaderError("header truncated")
    if major == 1:
        prefix, (hlen,) = 10, struct.unpack_from("<H", head, 8)
    elif major in (2, 3):
        prefix, (hlen,) = 12, struct.unpack_from("<I", head, 8)
    else:
        raise HeaderError(f"unknown .npy version {major}")
    text = head[prefix : prefix + hlen]
    if len(text) < hlen:
        raise HeaderError("header truncated")
    try:
        header = ast.literal_eval(text.decode("latin-1"))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        raise HeaderError(f"header is not a dict literal: {exc}") from exc
    if not isinstance(header, dict) or not {"descr", "shape", "fortran_order"} <= header.keys():
        raise HeaderError("header lacks descr/shape/fortran_order")
    return prefix + hlen, header


def expected_data_bytes(header: dict[str, Any]) -> int | None:
    """Bytes of array data the header promises; None for object arrays (pickled)."""
    import numpy as np

    try:
        dtype = np.dtype(header["descr"])
        shape = tuple(int(d) for d in header["shape"])
    except (TypeError, ValueError) as exc:
        raise HeaderError(f"bad descr/shape: {exc}") from exc
    if dtype.hasobject:
        return None
    if any(d < 0 for d in shape):
        raise HeaderError("negative dimension in shape")
    return math.prod(shape) * dtype.itemsize


def _check_npy_stream(head: bytes, total: int) -> str | None:
    try:
        data_start, header = parse_header(head)
        want = expected_data_bytes(header)
    except HeaderError as exc:
        return f"header: {exc}"
    if want is None:
        return "unchecked: object array (pickled data, never loaded)"
    have = total - data_start
    if have < want:
        return f"truncated: header promises {want} data bytes, {have} present"
    if have > want:
        return f"{have - want} unexpected bytes after the array data"
    return None


def check_npy(fh: IO[bytes], size: int | None) -> CheckOutcome:
    out = CheckOutcome()
    head = read_exact(fh, 65536 + 12)
    problem = _check_npy_stream(head, size or 0)
    if problem and problem.startswith("unchecked"):
        out.unchecked_reason = problem
    elif problem:
        out.bad.append(BadRecord(0, 0, None, problem))
    else:
        out.records = 1
    return out


def check_npz(fh: IO[bytes], size: int | None) -> CheckOutcome:
    out = CheckOutcome()
    try:
        archive = zipfile.ZipFile(fh)
    except UnreadableAt:
        raise
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        out.bad.append(BadRecord(None, None, None, f"zip structure: {exc}"))
        return out
    with archive:
        for i, info in enumerate(archive.infolist()):
            problem = _check_member(archive, info)
            if problem and problem.startswith("unchecked"):
                out.unchecked_reason = f"{info.filename}: {problem}"
            elif problem:
                out.bad.append(BadRecord(i, info.header_offset, info.filename, problem))
            else:
                out.records += 1
    return out


def _check_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> str | None:
    head = b""
    try:
        with archive.open(info) as member:
            head = read_exact(member, 65536 + 12)  # type: ignore[arg-type]
            while member.read(1 << 20):
                pass
    except UnreadableAt:
        raise
    except Exception as exc:  # BadZipFile (CRC), zlib.error, EOFError, ...
        return f"member does not read back: {exc}"
    if info.filename.endswith(".npy"):
        return _check_npy_stream(head, info.file_size)
    return None
