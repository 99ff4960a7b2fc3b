"""``.npy`` and ``.npz``: the array header against the bytes that follow it.

The header is a Python dict literal, read with ``ast.literal_eval`` (no code runs) by numpy's own
rules (``numpy.lib.format``): exactly the keys descr/shape/fortran_order, a tuple of ints, a bool,
at most 10000 header bytes, and Python 2 longs (``(2L,)``) in version 1/2 headers; the dtype is
built with numpy. Object arrays hold pickles and are never loaded: they are reported unchecked.
In ``.npz`` archives every member is read through (zip CRC-32 verified) and every ``.npy`` member's
header is checked against its uncompressed size; ``key`` names the member.
"""

from __future__ import annotations

import ast
import io
import math
import struct
import tokenize
import zipfile
from typing import IO, Any

from ckptrescue.datasets.shardcheck import BadRecord, CheckOutcome, UnreadableAt, read_exact

MAGIC = b"\x93NUMPY"
MAX_HEADER = 10000  # numpy.lib.format._MAX_HEADER_SIZE: numpy.load's default max_header_size


class HeaderError(ValueError):
    pass


def parse_header(head: bytes) -> tuple[int, dict[str, Any]]:
    """(offset where the data starts, header dict) from the first bytes of a .npy stream."""
    if head[:6] != MAGIC:
        raise HeaderError("no \\x93NUMPY magic")
    major = head[6] if len(head) > 6 else 0
    if len(head) < (10 if major == 1 else 12):
        raise HeaderError("header truncated")
    if head[7] != 0 and major in (1, 2, 3):
        # numpy.lib.format accepts exactly (1,0), (2,0) and (3,0)
        raise HeaderError(f"unknown .npy version {major}.{head[7]}")
    if major == 1:
        prefix, (hlen,) = 10, struct.unpack_from("<H", head, 8)
    elif major in (2, 3):
        prefix, (hlen,) = 12, struct.unpack_from("<I", head, 8)
    else:
        raise HeaderError(f"unknown .npy version {major}")
    text = head[prefix : prefix + hlen]
    if len(text) < hlen:
        raise HeaderError("header truncated")
    if hlen > MAX_HEADER:
        raise HeaderError(f"header of {hlen} bytes: numpy.load refuses headers over "
                          f"{MAX_HEADER} bytes unless allow_pickle=True")
    try:
        source = text.decode("utf-8" if major == 3 else "latin-1")
    except UnicodeDecodeError as exc:
        raise HeaderError(f"version 3 header is not UTF-8: {exc}") from exc
    header = _literal(source, allow_py2=major in (1, 2))
    if not isinstance(header, dict) or header.keys() != {"descr", "shape", "fortran_order"}:
        raise HeaderError("header keys are not exactly descr/shape/fortran_order")
    if not isinstance(header["shape"], tuple) or not all(
            isinstance(d, int) for d in header["shape"]):
        raise HeaderError(f"shape is not a tuple of integers: {header['shape']!r}")
    if not isinstance(header["fortran_order"], bool):
        raise HeaderError(f"fortran_order is not a bool: {header['fortran_order']!r}")
    return prefix + hlen, header


def _literal(source: str, *, allow_py2: bool) -> Any:
    """The header dict as ``numpy.lib.format`` reads it: a literal, and for version 1/2 files
    written by Python 2 (``'shape': (2L,)``), the same after dropping the ``L`` of longs."""
    errors = (ValueError, SyntaxError, TypeError, MemoryError, RecursionError)
    try:
        return ast.literal_eval(source)
    except SyntaxError as exc:
        if not allow_py2:
            raise HeaderError(f"header is not a dict literal: {exc}") from exc
        try:
            return ast.literal_eval(_drop_py2_longs(source))
        except (*errors, tokenize.TokenError) as exc2:
            raise HeaderError(f"header is not a dict literal: {exc2}") from exc2
    except errors as exc:
        raise HeaderError(f"header is not a dict literal: {exc}") from exc


def _drop_py2_longs(source: str) -> str:
    """numpy's ``_filter_header``: drop the NAME ``L`` that follows a NUMBER token."""
    tokens = []
    last_was_number = False
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if last_was_number and tok.type == tokenize.NAME and tok.string == "L":
            continue
        tokens.append(tok)
        last_was_number = tok.type == tokenize.NUMBER
    return tokenize.untokenize(tokens)


def expected_data_bytes(header: dict[str, Any]) -> int | None:
    """Bytes of array data the header promises; None for object arrays (pickled)."""
    import numpy as np

    try:
        dtype = np.lib.format.descr_to_dtype(header["descr"])
        shape = tuple(int(d) for d in header["shape"])
    except Exception as exc:  # noqa: BLE001 - whatever numpy raises on a hostile descr
        raise HeaderError(f"bad descr/shape: {type(exc).__name__}: {exc}") from exc
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


def check_npy(fh: IO[bytes], size: int | None, out: CheckOutcome | None = None) -> CheckOutcome:
    out = CheckOutcome() if out is None else out
    head = read_exact(fh, 65536 + 12)
    if size is None:  # a decompressed stream: its length is what reads to the end
        size = len(head)
        while chunk := fh.read(1 << 20):
            size += len(chunk)
    problem = _check_npy_stream(head, size)
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
    except Exception as exc:  # noqa: BLE001 - zipfile also raises NotImplementedError, ...
        out.bad.append(BadRecord(None, None, None, "zip structure: numpy.load (zipfile) refuses "
                                 f"the archive: {type(exc).__name__}: {exc}"))
        return out
    with archive:
        for i, info in enumerate(archive.infolist()):
            problem = _zip_limits(info) or _check_member(archive, info)
            if problem and problem.startswith("unchecked"):
                out.unchecked_reason = f"{info.filename}: {problem}"
            elif problem:
                out.bad.append(BadRecord(i, info.header_offset, info.filename, problem))
            else:
                out.records += 1
    return out


MAX_RATIO = 1032  # deflate cannot expand more than ~1032:1; more is a crafted member


def _zip_limits(info: zipfile.ZipInfo) -> str | None:
    """Bounded decompression: a member whose recorded size deflate cannot produce is refused
    before it is read (zipfile itself reads up to the recorded size)."""
    if info.compress_type != zipfile.ZIP_STORED and \
            info.file_size > max(1 << 20, MAX_RATIO * info.compress_size):
        return (f"member records {info.file_size} bytes from {info.compress_size} compressed: "
                f"above the {MAX_RATIO}:1 decompression limit (not inflated)")
    return None


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
