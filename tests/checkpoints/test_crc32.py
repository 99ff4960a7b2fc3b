"""The probe's CRC-32 gives zlib's answer, streamed or whole, from bytes or views."""

from __future__ import annotations

import zlib

from ckptrescue.checkpoints.formats import crc32 as crc_module
from ckptrescue.checkpoints.formats.crc32 import crc32


def _bytes(n: int) -> bytes:
    # SplitMix64-free, CPU-independent filler: a multiplicative byte sequence
    return bytes((i * 2654435761 >> 13) & 0xFF for i in range(n))


def test_same_value_as_zlib_for_every_length_up_to_a_few_blocks() -> None:
    data = _bytes(5000)
    for n in (0, 1, 3, 15, 16, 17, 63, 64, 65, 255, 256, 1023, 4096, 4999, 5000):
        assert crc32(data[:n]) == zlib.crc32(data[:n]), n


def test_streamed_in_chunks_equals_the_whole_and_views_are_accepted() -> None:
    data = _bytes(1 << 20)
    value = 0
    view = memoryview(data)
    for start in range(0, len(data), 65_537):
        value = crc32(view[start:start + 65_537], value)
    assert value == zlib.crc32(data)
    assert crc32(bytearray(data[:1000]), 12345) == zlib.crc32(data[:1000], 12345)


def test_the_fast_implementation_is_installed() -> None:
    # isal is a core dependency: a setup that lost it would verify at a third of the speed
    assert crc_module.IMPLEMENTATION == "isal"
