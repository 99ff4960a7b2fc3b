"""Per-field streaming statistics: presence, nulls, empties, types, lengths, numbers, top-k.

Lengths (bytes, tokens, items) are counted over values that are present, not null and not empty,
so an emptied field shows as an empty rate and does not also shift the length distribution.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ckptrescue.datasets.profiles.sketches import LogHistogram, Moments, TopK
from ckptrescue.datasets.profiles.values import (
    byte_length,
    category_key,
    is_empty,
    item_count,
    number,
    type_name,
)
from ckptrescue.model import JsonObject

TOPK = 64
MAX_TYPES = 32
MEASURES = ("bytes", "tokens", "items", "values")


@dataclass
class Distribution:
    """A histogram and the moments of one measure (a length kind, or the numeric values)."""

    hist: LogHistogram = field(default_factory=LogHistogram)
    moments: Moments = field(default_factory=Moments)

    def add(self, x: float) -> None:
        self.hist.add(x)
        self.moments.add(x)

    def merge(self, other: Distribution) -> None:
        self.hist.merge(other.hist)
        self.moments.merge(other.moments)

    def to_json(self) -> JsonObject:
        return {"moments": self.moments.to_json(), "hist": self.hist.to_json(),
                "p50": self.hist.quantile(0.5), "p99": self.hist.quantile(0.99)}

    @classmethod
    def from_json(cls, d: JsonObject) -> Distribution:
        return cls(LogHistogram.from_json(d["hist"]), Moments.from_json(d["moments"]))


@dataclass
class FieldStats:
    present: int = 0
    nulls: int = 0
    empties: int = 0
    nonfinite: int = 0
    types: dict[str, int] = field(default_factory=dict)
    dists: dict[str, Distribution] = field(default_factory=dict)
    top: TopK = field(default_factory=lambda: TopK(TOPK))

    def dist(self, measure: str) -> Distribution:
        d = self.dists.get(measure)
        if d is None:
            d = self.dists[measure] = Distribution()
        return d

    def add_type(self, name: str, count: int = 1) -> None:
        if name in self.types or len(self.types) < MAX_TYPES:
            self.types[name] = self.types.get(name, 0) + count
        else:
            self.types["other"] = self.types.get("other", 0) + count

    def add(self, value: Any, tokens: Callable[[str], int] | None = None) -> None:
        self.present += 1
        self.add_type(type_name(value))
        if value is None:
            self.nulls += 1
            return
        if is_empty(value):
            self.empties += 1
            return
        key = category_key(value)
        if key is not None:
            self.top.add(key)
        blen = byte_length(value)
        if blen is not None:
            self.dist("bytes").add(blen)
            if tokens is not None and isinstance(value, str):
                self.dist("tokens").add(tokens(value))
            return
        n = item_count(value)
        if n is not None:
            self.dist("items").add(n)
            return
        x = number(value)
        if x is not None:
            if math.isfinite(x):
                self.dist("values").add(x)
            else:
                self.nonfinite += 1

    def merge(self, other: FieldStats) -> None:
        self.present += other.present
        self.nulls += other.nulls
        self.empties += other.empties
        self.nonfinite += other.nonfinite
        for name, c in other.types.items():
            self.add_type(name, c)
        for m, d in other.dists.items():
            self.dist(m).merge(d)
        self.top.merge(other.top)

    @property
    def dominant_type(self) -> str | None:
        typed = {k: v for k, v in self.types.items() if k != "null"}
        if not typed:
            return None
        return sorted(typed.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]

    def to_json(self) -> JsonObject:
        return {
            "present": self.present, "nulls": self.nulls, "empties": self.empties,
            "nonfinite": self.nonfinite, "types": dict(sorted(self.types.items())),
            "dists": {m: self.dists[m].to_json() for m in MEASURES if m in self.dists},
            "top": self.top.to_json(), "entropy_bits": self.top.entropy_bits(),
        }

    @classmethod
    def from_json(cls, d: JsonObject) -> FieldStats:
        return cls(int(d["present"]), int(d["nulls"]), int(d["empties"]), int(d["nonfinite"]),
                   {str(k): int(v) for k, v in d["types"].items()},
                   {str(m): Distribution.from_json(v) for m, v in d["dists"].items()},
                   TopK.from_json(d["top"]))
