"""Spot checks a human can trust: a seeded sample of records from a flagged shard and from a
reference shard, with the values that drove the flag marked.

The sample is redrawable by anyone: record ``i`` (0-based, in file order) is in the sample when
``BLAKE2b-64(i as 8 little-endian bytes, key = seed as 8 little-endian bytes)`` is among the ``k``
smallest of the shard (ties by index). One pass, ``k`` records held. The indices and the seed are
in the result; :func:`redraw` takes them back to the same records.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ckptrescue.datasets.profiles import arrays
from ckptrescue.datasets.profiles.readers import ReadState, open_records
from ckptrescue.datasets.profiles.tokens import Tokenizer, resolve
from ckptrescue.datasets.profiles.values import (
    Opaque,
    byte_length,
    category_key,
    is_empty,
    item_count,
    number,
    record_hash,
    type_name,
)
from ckptrescue.model import Finding, JsonObject

MAX_CHARS = 200
RECORD = "$record"  # the mark of a whole record (duplicates)


def sample_key(seed: int, index: int) -> int:
    """The value that decides whether record ``index`` is drawn for ``seed``."""
    h = hashlib.blake2b(index.to_bytes(8, "little"), digest_size=8,
                        key=(seed & ((1 << 64) - 1)).to_bytes(8, "little"))
    return int.from_bytes(h.digest(), "big")


@dataclass(frozen=True)
class SpotRecord:
    index: int
    values: dict[str, str]              # field -> the value as shown (truncated)
    marked: dict[str, str] = field(default_factory=dict)  # field -> why it is marked

    def to_json(self) -> JsonObject:
        return {"index": self.index, "values": self.values, "marked": self.marked}


@dataclass(frozen=True)
class SpotSample:
    shard: str
    records: tuple[SpotRecord, ...]
    records_read: int
    note: str = ""

    @property
    def indices(self) -> list[int]:
        return [r.index for r in self.records]

    def to_json(self) -> JsonObject:
        return {"shard": self.shard, "indices": self.indices, "records_read": self.records_read,
                "note": self.note, "records": [r.to_json() for r in self.records]}


@dataclass(frozen=True)
class SpotCheck:
    seed: int
    k: int
    flagged: SpotSample
    reference: SpotSample | None
    code: str | None = None
    fields: tuple[str, ...] = ()
    method: str = ("record i drawn when BLAKE2b-64(i, 8 bytes LE; key=seed, 8 bytes LE) is "
                   "among the k smallest")

    def to_json(self) -> JsonObject:
        return {"seed": self.seed, "k": self.k, "method": self.method, "code": self.code,
                "fields": list(self.fields), "flagged": self.flagged.to_json(),
                "reference": self.reference.to_json() if self.reference else None}


def _iter_indexed(path: str | bytes, state: ReadState) -> Iterator[tuple[int, dict[str, Any]]]:
    index = 0
    for item in open_records(path, state):
        if isinstance(item, arrays.ArrayChunk):
            for j in range(item.rows.shape[0]):
                row = item.rows[j]
                yield item.start + j, {"$": row}
            index = item.start + item.rows.shape[0]
        else:
            yield index, item
            index += 1


def _draw(path: str | bytes, seed: int, k: int,
          indices: list[int] | None) -> tuple[list[tuple[int, dict[str, Any]]], int, str]:
    state = ReadState()
    wanted = set(indices) if indices is not None else None
    heap: list[tuple[int, int, dict[str, Any]]] = []  # (-key, -index, record): the k smallest
    read = 0
    for i, rec in _iter_indexed(path, state):
        read += 1
        if wanted is not None:
            if i in wanted:
                heap.append((0, -i, rec))
            continue
        key = sample_key(seed, i)
        if len(heap) < k:
            heapq.heappush(heap, (-key, -i, rec))
        elif (-key, -i) > (heap[0][0], heap[0][1]):
            heapq.heapreplace(heap, (-key, -i, rec))
    chosen = sorted(((-ni, rec) for _nk, ni, rec in heap), key=lambda t: t[0])
    return chosen, read, state.stopped or ""


def _show(value: Any, max_chars: int) -> str:
    if isinstance(value, Opaque):
        return f"<{value.size} bytes, blake2b {value.digest.hex()[:16]}>"
    if isinstance(value, bytes | bytearray):
        return f"<{len(value)} bytes>"
    if hasattr(value, "tolist"):
        value = value.tolist()
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                           default=str)
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def _why(code: str | None, fname: str, rec: dict[str, Any], details: JsonObject,
         tokens: Any) -> str | None:
    if fname not in rec:
        return "missing" if code == "DP003" else None
    v = rec[fname]
    ref_mean = details.get("reference_mean")
    if code == "DP001":
        return "empty" if v is not None and is_empty(v) else None
    if code == "DP002":
        return "null" if v is None else None
    if code in ("DP007", "DP008", "DP009"):
        n = (tokens(v) if code == "DP008" and tokens and isinstance(v, str) else
             item_count(v) if code == "DP009" else byte_length(v))
        unit = {"DP007": "bytes", "DP008": "tokens", "DP009": "items"}[code]
        if n is None:
            return None
        return f"{n} {unit}" + (f" (reference mean {ref_mean:.1f})" if ref_mean else "")
    if code == "DP010":
        x = number(v)
        return None if x is None else f"value {x:g}" + (
            f" (reference mean {ref_mean:.4g})" if ref_mean is not None else "")
    if code == "DP011":
        shifts = details.get("largest_shifts", {})
        key = category_key(v)
        if key in shifts:
            here, ref = shifts[key]
            return f"{key}: {here:.1%} of this shard vs {ref:.1%} of the reference"
        return None
    if code == "DP012":
        return f"type {type_name(v)}"
    return None


def _records(chosen: list[tuple[int, dict[str, Any]]], fields: tuple[str, ...] | None,
             max_chars: int) -> list[tuple[int, dict[str, Any], dict[str, str]]]:
    out = []
    for i, rec in chosen:
        keep = rec if fields is None else {k: v for k, v in rec.items() if k in fields}
        out.append((i, rec, {k: _show(v, max_chars) for k, v in sorted(keep.items())}))
    return out


def sample_records(shard: str | os.PathLike[str] | bytes, *, seed: int, k: int = 10,
                   reference: str | os.PathLike[str] | bytes | None = None,
                   finding: Finding | None = None, fields: tuple[str, ...] | None = None,
                   tokenizer: Tokenizer | None = None, indices: list[int] | None = None,
                   max_chars: int = MAX_CHARS) -> SpotCheck:
    """A seeded sample of ``k`` records of ``shard`` (and of ``reference``, with the same seed).

    With ``finding`` (a DP flag), the values of its field that drove it are marked (empty, null,
    their length, their value and how common it is here vs in the reference; for duplicate
    shards, the records found in both samples). ``indices`` redraws given records instead.
    """
    path = os.fsencode(shard)
    details = dict(finding.details) if finding else {}
    code = finding.code if finding else None
    fname = details.get("field")
    tokens = resolve(tokenizer)
    chosen, read, note = _draw(path, seed, k, indices)
    ref_sample = None
    ref_hashes: dict[int, int] = {}
    if reference is not None:
        rchosen, rread, rnote = _draw(os.fsencode(reference), seed, k, indices)
        ref_hashes = {record_hash(rec): i for i, rec in rchosen}
        ref_sample = SpotSample(os.fsdecode(reference), tuple(
            SpotRecord(i, shown) for i, _rec, shown in _records(rchosen, fields, max_chars)),
            rread, rnote)
    recs = []
    for i, rec, shown in _records(chosen, fields, max_chars):
        marked: dict[str, str] = {}
        if fname:
            why = _why(code, fname, rec, details, tokens)
            if why:
                marked[fname] = why
        if code in ("DP004", "DP006") and ref_hashes:
            j = ref_hashes.get(record_hash(rec))
            if j is not None:
                marked[RECORD] = f"identical to reference record {j}"
        recs.append(SpotRecord(i, shown, marked))
    return SpotCheck(seed, k, SpotSample(os.fsdecode(path), tuple(recs), read, note), ref_sample,
                     code, (fname,) if fname else ())


def redraw(shard: str | os.PathLike[str] | bytes, check: SpotCheck) -> SpotSample:
    """The records of a spot check drawn again from ``shard`` by their recorded indices."""
    again = sample_records(shard, seed=check.seed, k=check.k, indices=check.flagged.indices)
    return again.flagged
