"""Vectorized field statistics for array rows (``.npy``): the same sketches, filled by numpy."""

from __future__ import annotations

from typing import Any

from ckptrescue.datasets.profiles.arrays import bin_keys
from ckptrescue.datasets.profiles.fieldstats import FieldStats
from ckptrescue.datasets.profiles.sketches import Moments

TOPK_UNIQUE_MAX = 4096


def _moments(values: Any) -> Moments:
    import numpy as np

    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        return Moments()
    mean = float(x.mean())
    return Moments(int(x.size), mean, float(((x - mean) ** 2).sum()), float(x.min()),
                   float(x.max()))


def add_rows(stats: FieldStats, rows: Any) -> None:
    """Add ``rows`` (first axis = records) of a plain numeric/bool array to ``stats``."""
    import numpy as np

    n = int(rows.shape[0])
    stats.present += n
    kind = rows.dtype.kind
    stats.add_type(f"array<{rows.dtype}>" if rows.ndim > 1 else str(rows.dtype), n)
    if rows.ndim > 1:
        per_row = int(np.prod(rows.shape[1:]))
        if per_row == 0:
            stats.empties += n
            return
        items = stats.dist("items")
        items.hist.add(per_row, n)
        items.moments.merge(Moments(n, float(per_row), 0.0, float(per_row), float(per_row)))
    if kind not in "biuf":
        return
    flat = rows.ravel()
    if kind == "f":
        finite = np.isfinite(flat)
        stats.nonfinite += int(flat.size - finite.sum())
        flat = flat[finite]
    if kind in "biu" and rows.ndim == 1:
        _top(stats, rows)
    if kind == "b":
        return
    if flat.size:
        keys, counts = bin_keys(flat)
        values = stats.dist("values")
        values.hist.add_keys(keys.tolist(), counts.tolist())
        values.moments.merge(_moments(flat))


def _top(stats: FieldStats, rows: Any) -> None:
    import numpy as np

    uniq, counts = np.unique(rows, return_counts=True)
    order = np.argsort(-counts, kind="stable")
    kept = order[:TOPK_UNIQUE_MAX]
    dropped_max = int(counts[order[TOPK_UNIQUE_MAX]]) if len(order) > TOPK_UNIQUE_MAX else 0
    for i in kept.tolist():
        v = uniq[i].item()
        stats.top.add(("true" if v else "false") if isinstance(v, bool) else str(v),
                      int(counts[i]))
    if dropped_max:
        stats.top.total += int(counts[order[TOPK_UNIQUE_MAX:]].sum())
        stats.top.decrements += dropped_max
