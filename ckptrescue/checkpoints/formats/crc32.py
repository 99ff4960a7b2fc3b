"""CRC-32 (the zip / gzip polynomial) at the speed of the machine.

``crc32(data, value=0)`` has ``zlib.crc32``'s signature and result. It is ISA-L's
implementation (the ``isal`` package, a core dependency: folded PCLMULQDQ, ~10x zlib's table
CRC on x86-64) when it imports, else ``zlib.crc32``; the probe's CRC pass streams every record
of a checkpoint through it, so this is where verification time goes. Both release the GIL on
large buffers, so several threads can check several parts of a file at once.

``crc32_combine(crc1, crc2, len2)`` is the CRC-32 of ``A + B`` from ``crc32(A)``, ``crc32(B)``
and ``len(B)`` (ISA-L's, or the same polynomial arithmetic in Python: multiplication by
``x^(8 len2)`` modulo the CRC polynomial), which lets the parts be checked in parallel.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

crc32: Callable[..., int]
crc32_combine: Callable[[int, int, int], int]
IMPLEMENTATION: str

POLY = 0xEDB88320  # reflected CRC-32 polynomial


def _multmodp(poly: int, a: int, b: int) -> int:
    """a * b modulo the polynomial (reflected bit order, as zlib's ``multmodp``)."""
    m = 1 << 31
    p = 0
    while True:
        if a & m:
            p ^= b
            if (a & (m - 1)) == 0:
                break
        m >>= 1
        b = (b >> 1) ^ poly if b & 1 else b >> 1
    return p


def _x8nmodp(poly: int, n: int) -> int:
    """x^(8n) modulo the polynomial."""
    p = 1 << 31  # x^0
    square = 1 << 30  # x^1
    for _ in range(3):  # x^8: one byte
        square = _multmodp(poly, square, square)
    while n:
        if n & 1:
            p = _multmodp(poly, square, p)
        n >>= 1
        square = _multmodp(poly, square, square)
    return p


def combine_with(poly: int, crc1: int, crc2: int, len2: int) -> int:
    """The CRC (reflected ``poly``, zlib-style pre/post conditioning) of ``A + B`` from
    ``crc(A)``, ``crc(B)`` and ``len(B)``: ``crc(A) * x^(8 len(B)) + crc(B)`` mod ``poly``."""
    if len2 <= 0:
        return crc1 & 0xFFFFFFFF
    return (_multmodp(poly, _x8nmodp(poly, len2), crc1 & 0xFFFFFFFF)
            ^ (crc2 & 0xFFFFFFFF)) & 0xFFFFFFFF


def crc32_combine_py(crc1: int, crc2: int, len2: int) -> int:
    """``zlib``'s ``crc32_combine`` in Python (the fallback when ISA-L is missing)."""
    return combine_with(POLY, crc1, crc2, len2)


try:
    from isal.isal_zlib import crc32 as _isal_crc32
    from isal.isal_zlib import crc32_combine as _isal_combine
except ImportError:  # pragma: no cover - isal is a core dependency; zlib is the fallback
    crc32, crc32_combine, IMPLEMENTATION = zlib.crc32, crc32_combine_py, "zlib"
else:
    crc32, crc32_combine, IMPLEMENTATION = _isal_crc32, _isal_combine, "isal"
