"""What a record's values are, for profiling: flattening, type names, canonical hashing.

Pure. A record is a mapping of field name to value; nested mappings are flattened to dotted names
(``meta.lang``) down to :data:`FLATTEN_DEPTH` levels, and a record that is not a mapping is the
single field ``$``. A value too large to hold (a big WebDataset member) is an :class:`Opaque`:
its size and a digest of its bytes, computed while it streamed past.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ckptrescue.model import JsonObject

FLATTEN_DEPTH = 3
ROOT_FIELD = "$"


@dataclass(frozen=True)
class Opaque:
    """A value seen only as its size and BLAKE2b digest (never held in memory)."""

    size: int
    digest: bytes


def flatten(record: Any) -> JsonObject:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; a non-mapping record -> ``{"$": record}``."""
    if type(record) is not dict and not isinstance(record, Mapping):
        return {ROOT_FIELD: record}
    if type(record) is dict and all(type(k) is str for k in record) and not any(
            type(v) not in _LEAVES for v in record.values()):
        return record  # nothing to flatten (a record of JSON scalars and lists)
    out: dict[str, Any] = {}
    _flatten_into(out, "", record, 0)
    return out


# values that are never mappings (no isinstance(Mapping) check needed)
_LEAVES = frozenset({str, int, float, bool, type(None), list, bytes})


def _flatten_into(out: dict[str, Any], prefix: str, value: Mapping[str, Any], depth: int) -> None:
    for key, v in value.items():
        name = f"{prefix}{key}"
        if type(v) not in _LEAVES and isinstance(v, Mapping) and v and depth + 1 < FLATTEN_DEPTH:
            _flatten_into(out, name + ".", v, depth + 1)
        else:
            out[name] = v


def type_name(value: Any) -> str:
    """A short type name: null, bool, int, float, str, bytes, list, dict, array<dtype>, opaque."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, bytes | bytearray | memoryview):
        return "bytes"
    if isinstance(value, Opaque):
        return "bytes"
    if isinstance(value, list | tuple):
        return "list"
    if isinstance(value, Mapping):
        return "dict"
    dtype = getattr(value, "dtype", None)
    if dtype is not None:
        return f"array<{dtype}>"
    return type(value).__name__


def is_empty(value: Any) -> bool:
    """Empty string (or only whitespace), empty bytes, list, mapping or array."""
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, bytes | bytearray | list | tuple | Mapping):
        return len(value) == 0
    if isinstance(value, Opaque):
        return value.size == 0
    size = getattr(value, "size", None)
    return isinstance(size, int) and size == 0 and hasattr(value, "dtype")


CATEGORY_MAX_CHARS = 64


def category_key(value: Any) -> str | None:
    """The key a value is counted under in the top-k sketch, or None when it is not categorical
    (floats, long text, bytes, containers)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and len(value) <= CATEGORY_MAX_CHARS:
        return quote(value)
    return None


def quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def record_hash(fields: Mapping[str, Any]) -> int:
    """A 64-bit hash of the canonical form of a flattened record (field order does not matter)."""
    h = hashlib.blake2b(digest_size=8, person=b"ckptr-record")
    for name in sorted(fields):
        h.update(b"\x00k")
        h.update(name.encode("utf-8", "surrogatepass"))
        feed(h, fields[name], 0)
    return int.from_bytes(h.digest(), "big")


def feed(h: Any, value: Any, depth: int) -> None:
    if value is None:
        h.update(b"\x00n")
    elif isinstance(value, bool):
        h.update(b"\x00t" if value else b"\x00f")
    elif isinstance(value, int):
        h.update(b"\x00i" + str(value).encode())
    elif isinstance(value, float):
        if value.is_integer() and abs(value) < 2**53:
            h.update(b"\x00i" + str(int(value)).encode())  # 1.0 and 1 are the same JSON number
        else:
            h.update(b"\x00d" + struct.pack("<d", value))
    elif isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
        h.update(b"\x00s" + len(data).to_bytes(8, "little"))
        h.update(data)
    elif isinstance(value, bytes | bytearray | memoryview):
        h.update(b"\x00b" + len(value).to_bytes(8, "little"))
        h.update(value)
    elif isinstance(value, Opaque):
        h.update(b"\x00o" + value.size.to_bytes(8, "little") + value.digest)
    elif isinstance(value, Mapping) and depth < 64:
        h.update(b"\x00{")
        for k in sorted(value, key=str):
            h.update(b"\x00k" + str(k).encode("utf-8", "surrogatepass"))
            feed(h, value[k], depth + 1)
        h.update(b"\x00}")
    elif isinstance(value, list | tuple) and depth < 64:
        h.update(b"\x00[")
        for v in value:
            feed(h, v, depth + 1)
        h.update(b"\x00]")
    elif hasattr(value, "dtype") and hasattr(value, "tobytes"):
        h.update(b"\x00a" + str(value.dtype).encode() + str(value.shape).encode())
        h.update(value.tobytes())
    else:
        h.update(b"\x00r" + repr(value).encode("utf-8", "backslashreplace"))


def byte_length(value: Any) -> int | None:
    """Length in bytes of a text/bytes value (UTF-8 for text), else None."""
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    if isinstance(value, Opaque):
        return value.size
    return None


def item_count(value: Any) -> int | None:
    """Number of items of a sequence value (list, tuple, array), else None."""
    if isinstance(value, list | tuple):
        return len(value)
    if hasattr(value, "dtype") and hasattr(value, "size") and getattr(value, "ndim", 0) >= 1:
        return int(value.size)
    return None


def number(value: Any) -> float | None:
    """A finite-or-not float for int/float scalars (bools are not numbers here)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if isinstance(value, float):
        return value
    return None


def text_of(fields: Mapping[str, Any]) -> str:
    """The record's text (its string values in field-name order), for near-duplicate shingles."""
    return "\n".join(v for _k, v in sorted(_texts(fields)))


def _texts(fields: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    for k, v in fields.items():
        if isinstance(v, str):
            yield k, v
