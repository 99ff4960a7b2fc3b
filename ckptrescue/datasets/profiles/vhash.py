"""Stable 64-bit value hashes computed over whole columns with numpy integer arithmetic.

Every hash is wrap-around uint64 arithmetic (multiplications, xor-shifts, additions modulo 2**64)
on little-endian words, so the result is the same on every machine and in any summation order.

* :func:`mix64` — the SplitMix64 finaliser (a bijection of uint64).
* :func:`segment_hashes` — a hash of each byte segment of one buffer (strings, bytes): the
  segment is cut into 8-byte little-endian words (zero-padded), word ``i`` is mixed with its
  position, the mixed words are added (mod 2**64) and the sum is mixed with the length. A sum of
  per-word bijective mixes is not a polynomial hash, so the Thue-Morse collisions of
  power-of-two-modulus polynomial hashes do not apply.
* :func:`value_hashes` — a hash of each Python value of a column (the record hash's unit): text,
  bytes, integers (an integral float below 2**53 is the integer: ``1.0`` and ``1`` are the same
  JSON number), floats (their IEEE bits), booleans, null; anything else (lists, mappings, arrays,
  :class:`~ckptrescue.datasets.profiles.values.Opaque`) by BLAKE2b of its canonical form.

:func:`record_hashes` combines the value hashes of a record's fields (with the field names) by
addition, so field order does not matter.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_GOLDEN = 0x9E3779B97F4A7C15
TAG_STR = 0x7374720000000001
TAG_BYTES = 0x6279740000000002
TAG_INT = 0x696E740000000003
TAG_FLOAT = 0x666C740000000004
TAG_TRUE = 0x7472750000000005
TAG_FALSE = 0x66616C0000000006
TAG_NULL = 0x6E756C0000000007
TAG_OTHER = 0x6F74680000000008
_MASK = (1 << 64) - 1
_EXACT = 2.0**53


def mix64(x: Any) -> Any:
    """SplitMix64's finaliser of a uint64 array (a new array)."""
    import numpy as np

    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = x + np.uint64(_GOLDEN)
        z ^= z >> np.uint64(30)
        z *= np.uint64(_M1)
        z ^= z >> np.uint64(27)
        z *= np.uint64(_M2)
        z ^= z >> np.uint64(31)
    return z


def mix_int(x: int) -> int:
    """:func:`mix64` of one Python integer (for constants)."""
    z = (x + _GOLDEN) & _MASK
    z = ((z ^ (z >> 30)) * _M1) & _MASK
    z = ((z ^ (z >> 27)) * _M2) & _MASK
    return z ^ (z >> 31)


def name_hash(name: str) -> int:
    """The hash of a field name (mixed into its values' hashes in a record hash)."""
    d = hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=8,
                        person=b"ckptr-field").digest()
    return int.from_bytes(d, "little")


def segment_hashes(data: Any, offsets: Any, tag: int) -> Any:
    """uint64 hash of every segment ``data[offsets[i]:offsets[i + 1]]`` of a uint8 array."""
    import numpy as np

    offsets = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    n = len(lengths)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    words = (lengths + 7) // 8
    wstart = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(words, out=wstart[1:])
    total_words = int(wstart[-1])
    sums = np.zeros(n, dtype=np.uint64)
    if total_words:
        lo, hi = int(offsets[0]), int(offsets[-1])
        buf = np.zeros(hi - lo + 8, dtype=np.uint8)
        buf[: hi - lo] = np.asarray(data, dtype=np.uint8)[lo:hi]
        # every byte position as the start of an (unaligned) little-endian 64-bit word
        at = np.ndarray((hi - lo + 1,), dtype="<u8", buffer=buf, offset=0, strides=(1,))
        owner = np.repeat(np.arange(n, dtype=np.int64), words)
        pos = np.arange(total_words, dtype=np.int64) - wstart[owner]  # word index in segment
        start = offsets[owner] - lo + 8 * pos
        valid = np.minimum(lengths[owner] - 8 * pos, 8)  # bytes of the segment in the word
        mask = np.right_shift(np.uint64(_MASK), (64 - 8 * valid).astype(np.uint64))
        w = at[start].astype(np.uint64) & mask  # bytes past the segment's end are zero
        keyed = mix64(np.arange(int(words.max()), dtype=np.uint64) + np.uint64(tag))
        mixed = mix64(w ^ keyed[pos])
        nz = words > 0
        sums[nz] = np.add.reduceat(mixed, wstart[:-1][nz])
    with np.errstate(over="ignore"):
        return mix64(sums ^ mix64(lengths.astype(np.uint64) ^ np.uint64(tag)))


def str_hashes(values: Sequence[str]) -> tuple[Any, Any]:
    """(hashes, UTF-8 byte lengths) of a list of str."""
    import numpy as np

    joined = "".join(values)
    data = joined.encode("utf-8", "surrogatepass")
    if len(data) == len(joined):  # ASCII: characters are bytes
        lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    else:
        lengths = np.fromiter((len(v.encode("utf-8", "surrogatepass")) for v in values),
                              dtype=np.int64, count=len(values))
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return segment_hashes(np.frombuffer(data, dtype=np.uint8), offsets, TAG_STR), lengths


def bytes_hashes(values: Sequence[bytes]) -> tuple[Any, Any]:
    """(hashes, lengths) of a list of bytes-like values."""
    import numpy as np

    data = b"".join(bytes(v) for v in values)
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return segment_hashes(np.frombuffer(data, dtype=np.uint8), offsets, TAG_BYTES), lengths


def int64_hashes(x: Any) -> Any:
    """Hashes of int64 values."""
    import numpy as np

    return mix64(np.asarray(x, dtype=np.int64).view(np.uint64) ^ np.uint64(TAG_INT))


def float_hashes(x: Any) -> Any:
    """Hashes of float64 values; integral ones below 2**53 hash as the integer."""
    import numpy as np

    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        integral = np.isfinite(x) & (np.trunc(x) == x) & (np.abs(x) < _EXACT)
    bits = mix64(x.view(np.uint64) ^ np.uint64(TAG_FLOAT))
    ints = int64_hashes(np.where(integral, x, 0.0).astype(np.int64))
    return np.where(integral, ints, bits)


def bool_hashes(x: Any) -> Any:
    import numpy as np

    return np.where(np.asarray(x, dtype=bool), np.uint64(mix_int(TAG_TRUE)),
                    np.uint64(mix_int(TAG_FALSE))).astype(np.uint64)


NULL_HASH = mix_int(TAG_NULL)


def other_hash(value: Any) -> int:
    """A value of no vectorised kind: BLAKE2b of its canonical form (as the old record hash)."""
    from ckptrescue.datasets.profiles.values import feed

    h = hashlib.blake2b(digest_size=8, person=b"ckptr-value")
    feed(h, value, 0)
    return mix_int(int.from_bytes(h.digest(), "little") ^ TAG_OTHER)


def _big_int_hash(v: int) -> int:
    """An integer outside int64: hashed as its decimal text (tagged as an integer)."""
    h = hashlib.blake2b(str(v).encode(), digest_size=8, person=b"ckptr-bigint")
    return mix_int(int.from_bytes(h.digest(), "little") ^ TAG_INT)


def int_list_hashes(values: Sequence[int]) -> Any:
    import numpy as np

    try:
        return int64_hashes(np.fromiter(values, dtype=np.int64, count=len(values)))
    except OverflowError:
        out = np.zeros(len(values), dtype=np.uint64)
        for i, v in enumerate(values):
            out[i] = int64_hashes(np.array([v]))[0] if -(1 << 63) <= v < (1 << 63) \
                else np.uint64(_big_int_hash(v))
        return out


def value_hashes(values: Sequence[Any]) -> Any:
    """uint64 hash of every Python value of a column."""
    import numpy as np

    n = len(values)
    kinds = set(map(type, values))
    if kinds == {str}:
        return str_hashes(values)[0]
    if kinds == {int}:
        return int_list_hashes(values)
    if kinds == {float}:
        return float_hashes(np.fromiter(values, dtype=np.float64, count=n))
    out = np.zeros(n, dtype=np.uint64)
    groups: dict[type, list[int]] = {}
    for i, v in enumerate(values):
        groups.setdefault(type(v), []).append(i)
    for kind, idx in groups.items():
        vals = [values[i] for i in idx]
        if kind is str:
            h = str_hashes(vals)[0]
        elif kind is int:
            h = int_list_hashes(vals)
        elif kind is float:
            h = float_hashes(np.array(vals, dtype=np.float64))
        elif kind is bool:
            h = bool_hashes(vals)
        elif kind is type(None):
            h = np.full(len(idx), NULL_HASH, dtype=np.uint64)
        elif kind is bytes:
            h = bytes_hashes(vals)[0]
        else:
            h = np.array([other_hash(v) for v in vals], dtype=np.uint64)
        out[np.array(idx, dtype=np.int64)] = h
    return out


def field_contribution(name: str, hashes: Any) -> Any:
    """What a field's value hashes add to their records' hashes."""
    import numpy as np

    return mix64(np.asarray(hashes, dtype=np.uint64) ^ np.uint64(name_hash(name)))


def finish_record_hashes(sums: Any, nfields: Any) -> Any:
    """The record hashes from the sums of their fields' contributions and their field counts."""
    import numpy as np

    with np.errstate(over="ignore"):
        return mix64(np.asarray(sums, dtype=np.uint64)
                     ^ mix64(np.asarray(nfields, dtype=np.uint64) + np.uint64(TAG_OTHER)))
