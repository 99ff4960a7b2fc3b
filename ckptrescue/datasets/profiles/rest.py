""""The rest of the dataset" for one shard: the dataset's profile minus the shard's.

Histogram counts, rates and type counts subtract exactly; means and variances by the inverse of
Chan's merge formula (clamped at zero against rounding); the rest's min/max are the dataset's
(min/max do not subtract). Top-k counts subtract exactly while both sketches are exact; otherwise
the rest keeps the dataset's error bound. Subtracting makes leave-one-out comparisons linear in
the number of shards instead of quadratic.
"""

from __future__ import annotations

from ckptrescue.datasets.profiles.fieldstats import Distribution, FieldStats
from ckptrescue.datasets.profiles.profile import ShardProfile
from ckptrescue.datasets.profiles.sketches import BottomK, LogHistogram, Moments, TopK


def _moments(total: Moments, part: Moments) -> Moments:
    n = total.n - part.n
    if n <= 0:
        return Moments()
    mean = (total.n * total.mean - part.n * part.mean) / n
    d = part.mean - mean
    m2 = total.m2 - part.m2 - d * d * n * part.n / total.n
    return Moments(n, mean, max(m2, 0.0), total.min, total.max)


def _hist(total: LogHistogram, part: LogHistogram) -> LogHistogram:
    out = {k: c - part.bins.get(k, 0) for k, c in total.bins.items()}
    return LogHistogram({k: c for k, c in out.items() if c > 0})


def _top(total: TopK, part: TopK) -> TopK:
    counts = {k: c - part.counts.get(k, 0) for k, c in total.counts.items()}
    return TopK(total.k, {k: c for k, c in counts.items() if c > 0}, total.total - part.total,
                total.decrements + part.decrements)


def _field(total: FieldStats, part: FieldStats) -> FieldStats:
    types = {k: c - part.types.get(k, 0) for k, c in total.types.items()}
    dists = {}
    for m, d in total.dists.items():
        p = part.dists.get(m)
        dists[m] = Distribution(_hist(d.hist, p.hist), _moments(d.moments, p.moments)) \
            if p is not None else Distribution(LogHistogram(dict(d.hist.bins)), d.moments)
    return FieldStats(total.present - part.present, total.nulls - part.nulls,
                      total.empties - part.empties, total.nonfinite - part.nonfinite,
                      {k: c for k, c in types.items() if c > 0}, dists, _top(total.top, part.top))


def minus(total: ShardProfile, part: ShardProfile) -> ShardProfile:
    """``total`` (a merge that includes ``part``) without ``part``."""
    fields = {}
    for name, stats in total.fields.items():
        p = part.fields.get(name)
        fields[name] = _field(stats, p) if p is not None else stats
    return ShardProfile(
        path=f"rest of dataset (without {part.path})", format=total.format,
        size=total.size - part.size, records=total.records - part.records,
        complete=total.complete, unparsed=total.unparsed - part.unparsed, fields=fields,
        dup_sampled=total.dup_sampled - part.dup_sampled,
        dup_count=total.dup_count - part.dup_count,
        near_checked=total.near_checked - part.near_checked,
        near_count=total.near_count - part.near_count, record_hashes=BottomK(),
        options=total.options)
