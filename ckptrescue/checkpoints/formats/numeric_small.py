"""The numeric scan for tiny tensors (fewer than 16 elements), in pure Python.

For such a range :func:`ckptrescue.checkpoints.formats.numeric.judge` can only report non-finite values and
sign invariants (outliers need at least ``MIN_ELEMENTS`` finite values; zero pages need 4 KiB),
so the summary is computed with ``struct`` instead of a dozen numpy calls. A TensorFlow index of
100,000 scalars spends most of its time here otherwise. Same contract as ``StorageScan``:
``feed(offset, chunk)``, ``finish()``, ``summary``, ``start``, ``end``.
"""

from __future__ import annotations

import struct

from ckptrescue.checkpoints.formats import dtypes
from ckptrescue.checkpoints.formats.numeric import EXAMPLES, MIN_ELEMENTS, NumericSummary, from_bits

# dtype -> (struct code of the unsigned view, sign bit, exponent shift, exponent mask)
_FLOATS = {"float32": ("I", 31, 23, 0xFF), "float64": ("Q", 63, 52, 0x7FF),
           "float16": ("H", 15, 10, 0x1F), "bfloat16": ("H", 15, 7, 0xFF)}
_INTS = {"int8": "b", "uint8": "B", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I",
         "int64": "q", "uint64": "Q", "bool": "?", "qint8": "b", "quint8": "B", "qint32": "i"}


def small_enough(dtype: str, size: int) -> bool:
    """True when ``size`` bytes of ``dtype`` hold fewer elements than the judge needs."""
    info = dtypes.lookup(dtype)
    return (info is not None and (dtype in _FLOATS or dtype in _INTS)
            and 0 <= size < MIN_ELEMENTS * info.itemsize)


class SmallScan:
    """Accumulates the (at most a few dozen) bytes of one tiny tensor; judges on finish."""

    def __init__(self, dtype: str, *, start: int, length: int, big_endian: bool = False) -> None:
        self.dtype = dtype
        self.start, self.end = start, start + length
        self.order = ">" if big_endian else "<"
        self.summary = NumericSummary(dtype=dtype)
        info = dtypes.lookup(dtype)
        self.itemsize = info.itemsize if info else 1
        self._buf = bytearray()

    def feed(self, offset: int, data: bytes | memoryview) -> None:
        del offset  # chunks arrive in order; the range starts at ``start``
        self._buf += data

    def finish(self) -> NumericSummary:
        s = self.summary
        n = len(self._buf) // self.itemsize
        s.count = n
        if self.dtype in _INTS:
            values = struct.unpack_from(f"{self.order}{n}{_INTS[self.dtype]}", self._buf)
            if self.dtype != "bool":
                s.negatives = sum(1 for v in values if v < 0)
                s.nonpositive = sum(1 for v in values if v <= 0)
            return s
        code, sign, shift, emask = _FLOATS[self.dtype]
        raw = struct.unpack_from(f"{self.order}{n}{code}", self._buf)
        magmask = (1 << sign) - 1
        inf_bits = emask << shift
        for i, u in enumerate(raw):
            mag = u & magmask
            negative = bool(u >> sign)
            if mag >= inf_bits:
                if mag > inf_bits:
                    s.nan += 1
                else:
                    s.inf += 1
                if len(s.nonfinite_examples) < EXAMPLES:
                    s.nonfinite_examples.append({
                        "index": i, "value": str(from_bits(u, self.dtype)),
                        "byte_offset": self.start + i * self.itemsize})
            if negative and mag:
                s.negatives += 1
            if negative or not mag:
                s.nonpositive += 1
            if not mag:
                s.zeros += 1
            elif mag < 1 << shift:
                s.subnormals += 1
        return s
