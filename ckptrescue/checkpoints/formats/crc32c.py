"""CRC32C (Castagnoli, TensorFlow's checksum) over any buffer, and joining the CRCs of parts.

``crc32c(data, value=0)`` extends ``value`` with ``data`` (bytes, bytearray or memoryview).
It is ``awscrt``'s hardware CRC32C when installed (it reads any buffer, so a reused read
buffer needs no copy), else ``google_crc32c``'s (a core dependency; it takes ``bytes`` only,
so other buffers are copied once). Both release the GIL on large buffers.

``crc32c_combine(crc1, crc2, len2)``: the CRC32C of ``A + B`` from the CRCs of ``A`` and ``B``
and ``len(B)`` (polynomial arithmetic, :func:`crc32.combine_with`), so that the parts of one
large tensor can be checked on several threads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ckptrescue.checkpoints.formats.crc32 import combine_with

POLY = 0x82F63B78  # reflected Castagnoli polynomial

crc32c: Callable[[Any, int], int]
IMPLEMENTATION: str


def crc32c_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC32C of the concatenation of two parts (``len2``: the second part's length)."""
    return combine_with(POLY, crc1, crc2, len2)


try:
    from awscrt.checksums import crc32c as _aws_crc32c
except ImportError:
    import google_crc32c

    def crc32c(data: Any, value: int = 0) -> int:
        return int(google_crc32c.extend(value, data if isinstance(data, bytes) else bytes(data)))

    IMPLEMENTATION = "google_crc32c"
else:
    def crc32c(data: Any, value: int = 0) -> int:
        return int(_aws_crc32c(data, value))

    IMPLEMENTATION = "awscrt"
