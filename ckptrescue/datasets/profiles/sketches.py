"""Bounded, mergeable, deterministic streaming sketches (pure: values in, counts out).

* :class:`Moments` — count, min, max, mean and variance by Welford's update (merged by Chan's
  formula), so a shard's numbers never need to be held.
* :class:`LogHistogram` — fixed bins shared by every shard: a value's bin is its sign, binary
  exponent and the top :data:`MANTISSA_BITS` bits of its mantissa (relative bin width 1/16 of an
  octave, about 4.4%; integers below 32 get a bin each). Bins are the same everywhere, so two
  histograms compare bin by bin (KS distance, PSI) and merge by adding counts. At most a few
  thousand bins can exist (the float exponent range), whatever the number of values.
* :class:`TopK` — Misra-Gries frequent items with capacity ``k``: exact counts while at most
  ``k`` distinct values were seen, else every count low by at most ``decrements``.
* :class:`DupSample` — exact-duplicate rate from 64-bit record hashes, exact up to
  :data:`DUP_CAPACITY` distinct records, then a hash-range sample (duplicates of a sampled record
  are sampled too, so the rate stays unbiased).
* :class:`BottomK` — the ``k`` smallest distinct record hashes (a KMV sketch): Jaccard
  similarity of two shards' record sets without the records.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ckptrescue.model import JsonObject

MANTISSA_BITS = 4
_SUB = 1 << MANTISSA_BITS
_EXP_OFFSET = 1100  # float exponents are within [-1073, 1024]


def bin_of(x: float) -> int:
    """The bin key of a finite value: 0 for zero, order-preserving (a < b => key(a) <= key(b))."""
    if x == 0:
        return 0
    m, e = math.frexp(abs(x))
    key = 1 + (e + _EXP_OFFSET) * _SUB + int((m - 0.5) * 2 * _SUB)
    return key if x > 0 else -key


def bin_low(key: int) -> float:
    """The smallest magnitude in bin ``key`` (signed): a representative for display."""
    if key == 0:
        return 0.0
    k = abs(key) - 1
    e, sub = divmod(k, _SUB)
    low = math.ldexp(0.5 + sub / (2 * _SUB), e - _EXP_OFFSET)
    return low if key > 0 else -low


@dataclass
class Moments:
    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    min: float | None = None
    max: float | None = None

    def add(self, x: float) -> None:
        x = float(x)
        self.n += 1
        d = x - self.mean
        self.mean += d / self.n
        self.m2 += d * (x - self.mean)
        if self.min is None or x < self.min:
            self.min = x
        if self.max is None or x > self.max:
            self.max = x

    @classmethod
    def of(cls, values: Any) -> Moments:
        """The moments of a block of finite float64 values (numpy array). Sums are
        :func:`math.fsum` (correctly rounded), so the result does not depend on the order of
        the values or on the machine."""
        import numpy as np

        x = np.asarray(values, dtype=np.float64).ravel()
        n = int(x.size)
        if not n:
            return cls()
        try:
            mean = math.fsum(x.tolist()) / n
            d = x - mean
            m2 = math.fsum((d * d).tolist())
        except OverflowError:  # values near the float limit: Welford's update, in order
            out = cls()
            for v in x.tolist():
                out.add(v)
            return out
        if not math.isfinite(m2):
            out = cls()
            for v in x.tolist():
                out.add(v)
            return out
        return cls(n, mean, m2, float(x.min()), float(x.max()))

    def add_block(self, n: int, mean: float, m2: float, lo: float, hi: float) -> None:
        """Merge the moments of a block of ``n`` values (Chan et al.)."""
        self.merge(Moments(n, mean, m2, lo, hi))

    def merge(self, other: Moments) -> None:
        if other.n == 0:
            return
        if self.n == 0:
            self.n, self.mean, self.m2 = other.n, other.mean, other.m2
            self.min, self.max = other.min, other.max
            return
        n = self.n + other.n
        d = other.mean - self.mean
        self.mean += d * other.n / n
        self.m2 += other.m2 + d * d * self.n * other.n / n
        self.n = n
        assert other.min is not None and other.max is not None
        self.min = other.min if self.min is None else min(self.min, other.min)
        self.max = other.max if self.max is None else max(self.max, other.max)

    @property
    def variance(self) -> float:
        """Sample variance (n - 1 in the denominator); 0 for fewer than two values."""
        return self.m2 / (self.n - 1) if self.n > 1 else 0.0

    def to_json(self) -> JsonObject:
        return {"n": self.n, "mean": self.mean, "m2": self.m2, "min": self.min, "max": self.max}

    @classmethod
    def from_json(cls, d: JsonObject) -> Moments:
        return cls(int(d["n"]), float(d["mean"]), float(d["m2"]), d["min"], d["max"])


@dataclass
class LogHistogram:
    bins: dict[int, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.bins.values())

    def add(self, x: float, count: int = 1) -> None:
        k = bin_of(x)
        self.bins[k] = self.bins.get(k, 0) + count

    def add_keys(self, keys: Iterable[int], counts: Iterable[int]) -> None:
        for k, c in zip(keys, counts, strict=True):
            k = int(k)
            self.bins[k] = self.bins.get(k, 0) + int(c)

    def merge(self, other: LogHistogram) -> None:
        for k, c in other.bins.items():
            self.bins[k] = self.bins.get(k, 0) + c

    def quantile(self, q: float) -> float | None:
        """The lower edge of the bin holding quantile ``q`` (None when empty)."""
        total = self.total
        if not total:
            return None
        want = q * total
        seen = 0
        for k in sorted(self.bins):
            seen += self.bins[k]
            if seen >= want:
                return bin_low(k)
        return bin_low(max(self.bins))

    def to_json(self) -> list[list[int]]:
        return [[k, self.bins[k]] for k in sorted(self.bins)]

    @classmethod
    def from_json(cls, rows: list[list[int]]) -> LogHistogram:
        return cls({int(k): int(c) for k, c in rows})


@dataclass
class TopK:
    k: int = 64
    counts: dict[str, int] = field(default_factory=dict)
    total: int = 0
    decrements: int = 0  # every count is low by at most this much

    @property
    def exact(self) -> bool:
        return self.decrements == 0

    def add(self, key: str, count: int = 1) -> None:
        self.total += count
        if key in self.counts:
            self.counts[key] += count
            return
        self.counts[key] = count
        if len(self.counts) > self.k:
            self._shrink()

    def _shrink(self) -> None:
        # subtract the (k+1)-th largest count from all (the Misra-Gries step, batched)
        ordered = sorted(self.counts.values(), reverse=True)
        cut = ordered[self.k] if len(ordered) > self.k else 0
        if cut <= 0:
            return
        self.decrements += cut
        self.counts = {key: c - cut for key, c in self.counts.items() if c > cut}

    def add_counts(self, counts: dict[str, int], dropped: list[int] | None = None) -> None:
        """Add exact counts of a block of values at once (a Misra-Gries merge of the block's
        exact sketch: every count stays low by at most ``decrements``).

        ``dropped``: the counts of further new keys of the block, left out by the caller
        because the merge's shrink is certain to remove them (each at most the (k+1)-th
        largest count of the block, and not counted yet): the result is the same as with them.
        """
        for key, c in counts.items():
            self.total += c
            self.counts[key] = self.counts.get(key, 0) + c
        if dropped:
            self.total += sum(dropped)
            ordered = sorted([*self.counts.values(), *dropped], reverse=True)
            cut = ordered[self.k] if len(ordered) > self.k else 0
            if cut > 0:
                self.decrements += cut
                self.counts = {key: c - cut for key, c in self.counts.items() if c > cut}
            return
        if len(self.counts) > self.k:
            self._shrink()

    def merge(self, other: TopK) -> None:
        self.total += other.total
        self.decrements += other.decrements
        for key, c in other.counts.items():
            self.counts[key] = self.counts.get(key, 0) + c
        if len(self.counts) > self.k:
            self._shrink()

    def top(self, n: int | None = None) -> list[tuple[str, int]]:
        items = sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))
        return items if n is None else items[:n]

    def entropy_bits(self) -> float:
        """Shannon entropy of the counted values (the uncounted remainder as one value)."""
        if not self.total:
            return 0.0
        parts = sorted(self.counts.values())
        rest = self.total - sum(parts)
        if rest > 0:
            parts.append(rest)
        return -sum(c / self.total * math.log2(c / self.total) for c in parts if c)

    def to_json(self) -> JsonObject:
        return {"k": self.k, "total": self.total, "decrements": self.decrements,
                "top": [[key, c] for key, c in self.top()]}

    @classmethod
    def from_json(cls, d: JsonObject) -> TopK:
        return cls(int(d["k"]), {str(k): int(c) for k, c in d["top"]}, int(d["total"]),
                   int(d["decrements"]))


DUP_CAPACITY = 1 << 17
_FULL = 1 << 64


@dataclass
class DupSample:
    """Counts per record hash, for hashes below ``limit`` (all of them until the table fills)."""

    capacity: int = DUP_CAPACITY
    limit: int = _FULL
    seen: dict[int, int] = field(default_factory=dict)

    def add(self, h: int) -> None:
        if h >= self.limit:
            return
        self.seen[h] = self.seen.get(h, 0) + 1
        while len(self.seen) > self.capacity:
            self.limit >>= 1
            self.seen = {k: c for k, c in self.seen.items() if k < self.limit}

    def add_many(self, hashes: Any) -> None:
        """Add a uint64 array of record hashes (the same state as adding them one by one: the
        final limit depends only on the set of hashes seen)."""
        import numpy as np

        arr = np.asarray(hashes, dtype=np.uint64)
        if self.limit < _FULL:
            arr = arr[arr < np.uint64(self.limit)]
        counted = Counter(arr.tolist())
        seen = self.seen
        if seen.keys().isdisjoint(counted):
            seen.update(counted)
        else:
            for k, c in counted.items():
                seen[k] = seen.get(k, 0) + c
        while len(self.seen) > self.capacity:
            self.limit >>= 1
            self.seen = {k: c for k, c in self.seen.items() if k < self.limit}

    def merge(self, other: DupSample) -> None:
        self.limit = min(self.limit, other.limit)
        for k, c in other.seen.items():
            if k < self.limit:
                self.seen[k] = self.seen.get(k, 0) + c
        self.seen = {k: c for k, c in self.seen.items() if k < self.limit}
        while len(self.seen) > self.capacity:
            self.limit >>= 1
            self.seen = {k: c for k, c in self.seen.items() if k < self.limit}

    @property
    def sampled(self) -> int:
        return sum(self.seen.values())

    @property
    def duplicates(self) -> int:
        """Sampled records that repeat an earlier one (records - distinct)."""
        return self.sampled - len(self.seen)

    def to_json(self) -> JsonObject:
        return {"capacity": self.capacity, "limit": self.limit, "sampled": self.sampled,
                "duplicates": self.duplicates}


@dataclass
class BottomK:
    k: int = 256
    hashes: set[int] = field(default_factory=set)
    _max: int = -1

    def add(self, h: int) -> None:
        if h in self.hashes:
            return
        if len(self.hashes) < self.k:
            self.hashes.add(h)
            self._max = max(self._max, h)
        elif h < self._max:
            self.hashes.discard(self._max)
            self.hashes.add(h)
            self._max = max(self.hashes)

    def add_many(self, hashes: Any) -> None:
        """Add a uint64 array of hashes (the k smallest distinct of old and new are kept)."""
        import numpy as np

        arr = np.asarray(hashes, dtype=np.uint64)
        if self._max >= 0 and len(self.hashes) >= self.k:
            arr = arr[arr < np.uint64(self._max)]
        small = np.unique(arr)[: self.k].tolist()
        if self._max >= 0 and len(self.hashes) >= self.k:
            small = [h for h in small if h < self._max]
        if not small:
            return
        self.hashes = set(sorted(self.hashes.union(small))[: self.k])
        self._max = max(self.hashes)

    def merge(self, other: BottomK) -> None:
        self.hashes = set(sorted(self.hashes | other.hashes)[: self.k])
        self._max = max(self.hashes) if self.hashes else -1

    def jaccard(self, other: BottomK) -> tuple[float, int, int]:
        """(estimated Jaccard, shared hashes among the k smallest of the union, k used)."""
        union = sorted(self.hashes | other.hashes)[: min(self.k, other.k)]
        if not union:
            return 0.0, 0, 0
        shared = sum(1 for h in union if h in self.hashes and h in other.hashes)
        return shared / len(union), shared, len(union)

    def to_json(self) -> JsonObject:
        return {"k": self.k, "hashes": [format(h, "016x") for h in sorted(self.hashes)]}

    @classmethod
    def from_json(cls, d: JsonObject) -> BottomK:
        out = cls(int(d["k"]), {int(h, 16) for h in d["hashes"]})
        out._max = max(out.hashes) if out.hashes else -1
        return out
