"""CRC32C (Castagnoli) and TFRecord's masked form, streaming.

Uses ``google-crc32c`` (hardware-accelerated C extension, a core dependency).
"""

from __future__ import annotations

import google_crc32c

_MASK_DELTA = 0xA282EAD8


def crc32c(data: bytes | memoryview, crc: int = 0) -> int:
    """CRC32C of ``data``, continuing from ``crc`` (0 to start)."""
    return int(google_crc32c.extend(crc, bytes(data) if isinstance(data, memoryview) else data))


def mask(crc: int) -> int:
    """TFRecord's masking: rotate right by 15 bits and add a constant."""
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    return mask(crc32c(data))
