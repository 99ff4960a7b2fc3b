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


def test_crc32c_of_every_buffer_kind_equals_the_bytes_and_a_read_buffer_is_not_copied() -> None:
    import tracemalloc

    import google_crc32c

    from ckptrescue.checkpoints.formats.crc32c import crc32c

    data = _bytes(70_000)
    want = google_crc32c.value(data)
    buf = bytearray(data)
    view = memoryview(buf)
    assert crc32c(data) == crc32c(buf) == crc32c(view) == want
    assert crc32c(view[7:69_001]) == google_crc32c.value(data[7:69_001])
    assert crc32c(memoryview(data)) == crc32c(view.toreadonly()) == want  # read-only views
    assert crc32c(view[::3]) == google_crc32c.value(data[::3])  # not contiguous
    assert crc32c(view[:69_996].cast("I")) == google_crc32c.value(data[:69_996])
    assert crc32c(b"") == crc32c(bytearray()) == 0
    assert crc32c(view[100:], crc32c(view[:100])) == want  # extended in two steps
    # the streaming reader's reused buffer is checked where it lies: no copy of its bytes
    big = bytearray(8 << 20)
    tracemalloc.start()
    try:
        crc32c(memoryview(big)[:7 << 20])
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak


def test_the_short_masked_crc32c_equals_the_extensions_for_every_length_it_takes() -> None:
    import google_crc32c
    import pytest

    from ckptrescue.checkpoints.formats.crc32c import SHORT, mask, masked_crc32c_short

    data = _bytes(SHORT)
    for n in range(SHORT + 1):
        for start in (0, 1):
            piece = (data[start:] + data[:start])[:n]
            assert masked_crc32c_short(piece) == mask(google_crc32c.value(piece)), n
    assert masked_crc32c_short(b"\xff" * 8) == mask(google_crc32c.value(b"\xff" * 8))
    with pytest.raises(ValueError):
        masked_crc32c_short(bytes(SHORT + 1))


def test_format_detection_does_not_load_the_crc32c_extension() -> None:
    # a manifest build detects each file's format on its hashing threads: loading the
    # extension there held the GIL in every thread (in a fresh process, as a build is)
    import subprocess
    import sys

    code = ("import sys, struct\n"
            "from ckptrescue.datasets.detect import detect\n"
            "from ckptrescue.checkpoints.formats.crc32c import masked_crc32c_short\n"
            "n = struct.pack('<Q', 5)\n"
            "head = n + struct.pack('<I', masked_crc32c_short(n)) + b'hello' + bytes(4)\n"
            "assert detect('shard-0', head) == 'tfrecord', detect('shard-0', head)\n"
            "assert detect('shard-1', bytes(range(256)) * 2) == 'other'\n"
            "print('google_crc32c' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"
