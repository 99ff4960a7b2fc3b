"""Streaming accumulators over aligned chunks of one tensor in several checkpoints (pure).

``PairStats`` compares a tensor in two consecutive checkpoints (``a`` earlier, ``b`` later):
relative L2 of the update ``||b - a|| / ||a||``, the largest absolute change and whether every
element is bit-identical. ``SignStats`` compares two successive updates ``d1 = b - a`` and
``d2 = c - b``: the fraction of elements that moved, in both updates, in the same direction
(about 0.5 for noisy SGD, near 1 for a steady drift, near 0 for an oscillation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ckptrescue.model import JsonObject


@dataclass
class PairStats:
    n: int = 0
    sum_a2: float = 0.0
    sum_b2: float = 0.0
    sum_d2: float = 0.0
    max_abs_d: float = 0.0
    identical: bool = True
    nonfinite: int = 0

    def add(self, a: Any, b: Any, *, same_bytes: bool) -> None:
        import numpy as np

        d = b - a
        finite = np.isfinite(d)
        bad = int(d.size - int(finite.sum()))
        if bad:
            self.nonfinite += bad
            a, b, d = a[finite], b[finite], d[finite]
        self.n += int(d.size)
        self.sum_a2 += float(np.dot(a, a))
        self.sum_b2 += float(np.dot(b, b))
        self.sum_d2 += float(np.dot(d, d))
        if d.size:
            self.max_abs_d = max(self.max_abs_d, float(np.max(np.abs(d))))
        self.identical = self.identical and same_bytes

    @property
    def rel_l2(self) -> float:
        """``||b - a|| / ||a||`` (``inf`` when ``a`` is all zero and ``b`` is not)."""
        if self.sum_a2 == 0.0:
            return 0.0 if self.sum_d2 == 0.0 else math.inf
        return math.sqrt(self.sum_d2 / self.sum_a2)

    def to_json(self) -> JsonObject:
        return {"rel_l2": _finite(self.rel_l2), "max_abs_change": self.max_abs_d,
                "identical": self.identical, "elements": self.n,
                "nonfinite": self.nonfinite}


@dataclass
class SignStats:
    moved_both: int = 0
    agree: int = 0

    def add(self, a: Any, b: Any, c: Any) -> None:
        import numpy as np

        s1 = np.sign(b - a)
        s2 = np.sign(c - b)
        both = (s1 != 0) & (s2 != 0)
        self.moved_both += int(both.sum())
        self.agree += int((both & (s1 == s2)).sum())

    @property
    def agreement(self) -> float | None:
        return self.agree / self.moved_both if self.moved_both else None


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    if not n:
        return 0.0
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
