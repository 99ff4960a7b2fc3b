"""CRC32C (Castagnoli, TensorFlow's checksum) over any buffer, and joining the CRCs of parts.

``crc32c(data, value=0)`` extends ``value`` with ``data`` (bytes, bytearray or memoryview)
through ``google_crc32c`` (hardware CRC32C, a core dependency; it releases the GIL). Its binding
parses ``y#``, which refuses any buffer whose type has a release hook (bytearray, memoryview,
mmap): a writable buffer is handed over as a ``ctypes`` array laid on it (ctypes arrays have no
such hook), so a reused read buffer is checked in place. Copying it to ``bytes`` instead cost
57 ms of CPU per GiB here, more than the CRC itself (47 ms). A read-only view that is not
``bytes`` (an mmap opened read-only) is still copied.

``crc32c_combine(crc1, crc2, len2)``: the CRC32C of ``A + B`` from the CRCs of ``A`` and ``B``
and ``len(B)`` (polynomial arithmetic, :func:`crc32.combine_with`), so that the parts of one
large tensor can be checked on several threads.

``mask``/``unmask``/``masked_crc32c``: the masked form LevelDB and TensorFlow store (SSTable
blocks of a tensor bundle, TFRecord framing).

``masked_crc32c_short``: the same for a few bytes, computed here from a table, without the
extension: the datasets' format detection checks one 8-byte TFRecord length per file on the
hashing threads, where loading the extension held the GIL (and the import lock) for ~3 ms in
every thread of a ``manifest build``; for a few bytes the table costs about a microsecond.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

POLY = 0x82F63B78  # reflected Castagnoli polynomial
MASK_DELTA = 0xA282EAD8


_extend: Callable[[int, Any], int] | None = None


def crc32c(data: Any, value: int = 0) -> int:
    """``value`` extended with ``data``."""
    extend = _extend or _load()
    return int(extend(value, data if isinstance(data, bytes) else _in_place(data)))


def _load() -> Callable[[int, Any], int]:
    """``google_crc32c.extend``, imported on the first CRC (its extension costs ~3 ms to load,
    and every command imports this module through the datasets' format detection)."""
    global _extend
    import google_crc32c

    _extend = google_crc32c.extend
    return _extend


def _in_place(data: Any) -> Any:
    """``data``'s bytes as an object ``google_crc32c`` reads without a copy, where one exists."""
    import ctypes  # (numpy has it loaded already where chunks are large)

    view = memoryview(data)
    if not view.readonly and view.c_contiguous:
        try:
            return (ctypes.c_char * view.nbytes).from_buffer(view)
        except (TypeError, ValueError):
            pass
    return view.tobytes()


def crc32c_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC32C of the concatenation of two parts (``len2``: the second part's length)."""
    from ckptrescue.checkpoints.formats.crc32 import combine_with  # (imports ISA-L: not at
    # start-up, where the datasets' format detection needs only the masked CRC)

    return combine_with(POLY, crc1, crc2, len2)


def mask(crc: int) -> int:
    """The LevelDB/TensorFlow CRC mask (SSTable blocks, TFRecord framing): rotate right by 15
    bits and add a constant."""
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF


def unmask(masked: int) -> int:
    rot = (masked - MASK_DELTA) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    return mask(crc32c(data))


SHORT = 64  # the most bytes masked_crc32c_short takes (a record header's length is 8)
_table: list[int] | None = None


def masked_crc32c_short(data: bytes) -> int:
    """:func:`masked_crc32c` of at most :data:`SHORT` bytes, without the extension."""
    if len(data) > SHORT:
        raise ValueError(f"masked_crc32c_short takes at most {SHORT} bytes, not {len(data)}")
    table = _table or _make_table()
    crc = 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return mask(crc ^ 0xFFFFFFFF)


def _make_table() -> list[int]:
    global _table
    table = []
    for n in range(256):
        for _ in range(8):
            n = (n >> 1) ^ POLY if n & 1 else n >> 1
        table.append(n)
    _table = table
    return table
