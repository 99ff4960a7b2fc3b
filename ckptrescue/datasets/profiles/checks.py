"""The pairwise checks of a shard against its reference: one :class:`Check` per test run.

A check holds the test's name, statistic, p-value and effect size; :mod:`.compare` decides which
are flagged (p below the Bonferroni-corrected level AND an effect size past its threshold) and
turns those into findings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from ckptrescue.datasets.profiles import stats
from ckptrescue.datasets.profiles.fieldstats import FieldStats
from ckptrescue.datasets.profiles.profile import ShardProfile
from ckptrescue.model import JsonObject


@dataclass(frozen=True)
class Thresholds:
    """When a deviation is flagged (docs/profiles.md says why each value).

    A test flags only when its p-value is below ``alpha`` divided by the number of tests run
    (Bonferroni) AND its effect size passes the threshold of its kind.
    """

    alpha: float = 0.001
    rate_diff: float = 0.05          # empty/null/missing/duplicate rates: absolute difference
    ks_d: float = 0.2                # KS distance of a length/value distribution
    psi: float = 0.25                # population stability index
    length_ratio: float = 1.25       # mean length ratio (or its inverse)
    cohens_d: float = 0.5            # standardised mean difference of numeric values
    cramers_v: float = 0.15          # chi-square effect size (labels, types)
    jaccard: float = 0.5             # two shards sharing this share of their records
    min_records: int = 30            # fewer values on either side: the test is not run
    categorical_max: int = 32        # at most this many distinct values: a categorical field
    count_change: float = 0.1        # versions: a shard's record count changed by this share

    def to_json(self) -> JsonObject:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Check:
    """One test of one shard (and field, measure) against its reference."""

    code: str
    shard: str
    reference: str
    field: str | None
    measure: str
    test: str
    statistic: float
    p_value: float | None
    effect: dict[str, float]
    threshold: dict[str, float]
    effect_passed: bool
    summary: str
    dof: float | None = None
    flagged: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def with_flag(self, level: float) -> Check:
        significant = self.p_value is None or self.p_value < level
        return replace(self, flagged=self.effect_passed and significant)

    def to_json(self) -> JsonObject:
        return {"code": self.code, "shard": self.shard, "reference": self.reference,
                "field": self.field, "measure": self.measure, "test": self.test,
                "statistic": _num(self.statistic), "dof": self.dof,
                "p_value": _num(self.p_value), "effect": {k: _num(v) for k, v in
                                                          self.effect.items()},
                "threshold": self.threshold, "flagged": self.flagged, "summary": self.summary,
                **({"extra": self.extra} if self.extra else {})}


def _num(x: float | None) -> float | str | None:
    if x is None or math.isfinite(x):
        return x
    return "inf" if x > 0 else "-inf" if x < 0 else "nan"


RATE_CODES = {"empty": "DP001", "null": "DP002", "missing": "DP003"}
DIST_CODES = {"bytes": "DP007", "tokens": "DP008", "items": "DP009", "values": "DP010"}
MEASURE_WORDS = {"bytes": "length in bytes", "tokens": "length in tokens",
                 "items": "sequence length (items)", "values": "numeric values"}


def _rate(code: str, shard: str, ref: str, fname: str | None, measure: str, x1: int, n1: int,
          x2: int, n2: int, th: Thresholds) -> Check | None:
    if n1 < th.min_records or n2 < th.min_records:
        return None
    out = stats.two_proportion(x1, n1, x2, n2)
    what = f"{measure} rate" + (f" of field {fname!r}" if fname else "")
    summary = (f"{what} {x1 / n1:.1%} ({x1}/{n1}) vs {x2 / n2:.1%} ({x2}/{n2}) in the "
               f"reference")
    return Check(code, shard, ref, fname, measure, "two-proportion z-test", out.statistic,
                 out.p_value, {"rate_difference": out.effect, "rate": x1 / n1,
                               "reference_rate": x2 / n2},
                 {"rate_difference": th.rate_diff}, abs(out.effect) >= th.rate_diff, summary)


def field_checks(cur: ShardProfile, ref: ShardProfile, fname: str, th: Thresholds,
                 ref_label: str) -> list[Check]:
    a = cur.fields.get(fname) or FieldStats()
    b = ref.fields.get(fname) or FieldStats()
    out: list[Check | None] = [
        _rate("DP003", cur.path, ref_label, fname, "missing", cur.records - a.present,
              cur.records, ref.records - b.present, ref.records, th),
        _rate("DP002", cur.path, ref_label, fname, "null", a.nulls, a.present, b.nulls,
              b.present, th),
        _rate("DP001", cur.path, ref_label, fname, "empty", a.empties, a.present - a.nulls,
              b.empties, b.present - b.nulls, th),
        _types(cur.path, ref_label, fname, a, b, th),
    ]
    categorical = _categorical(a, b, th)
    if categorical:
        out.append(_chi_square(cur.path, ref_label, fname, a, b, th))
    for measure in ("bytes", "tokens", "items", "values"):
        if measure == "values" and categorical:
            continue
        out.append(_distribution(cur.path, ref_label, fname, measure, a, b, th))
    return [c for c in out if c is not None]


def _categorical(a: FieldStats, b: FieldStats, th: Thresholds) -> bool:
    keys = a.top.counts.keys() | b.top.counts.keys()
    return (a.top.exact and b.top.exact and 2 <= len(keys) <= th.categorical_max
            and a.top.total >= th.min_records and b.top.total >= th.min_records)


def _chi_square(shard: str, ref: str, fname: str, a: FieldStats, b: FieldStats,
                th: Thresholds) -> Check:
    stat, dof, p, v, used = stats.chi_square_homogeneity(a.top.counts, b.top.counts)
    na, nb = a.top.total, b.top.total
    moved = sorted(a.top.counts.keys() | b.top.counts.keys(),
                   key=lambda k: -abs(a.top.counts.get(k, 0) / na - b.top.counts.get(k, 0) / nb))
    shifts = {k: (a.top.counts.get(k, 0) / na, b.top.counts.get(k, 0) / nb) for k in moved[:5]}
    summary = (f"value distribution of {fname!r} differs: " + ", ".join(
        f"{k}: {x:.1%} vs {y:.1%}" for k, (x, y) in shifts.items()))
    return Check("DP011", shard, ref, fname, "categories", "chi-square test of homogeneity",
                 stat, p, {"cramers_v": v}, {"cramers_v": th.cramers_v}, v >= th.cramers_v,
                 summary, dof=dof,
                 extra={"categories": used, "largest_shifts": {k: [x, y] for k, (x, y) in
                                                               shifts.items()},
                        "counts": dict(a.top.top(10)), "reference_counts": dict(b.top.top(10))})


def _types(shard: str, ref: str, fname: str, a: FieldStats, b: FieldStats,
           th: Thresholds) -> Check | None:
    ta = {k: c for k, c in a.types.items() if k != "null"}
    tb = {k: c for k, c in b.types.items() if k != "null"}
    if sum(ta.values()) < th.min_records or sum(tb.values()) < th.min_records:
        return None
    if len(ta.keys() | tb.keys()) < 2:
        return None
    stat, dof, p, v, _used = stats.chi_square_homogeneity(ta, tb, min_expected=0.0)
    summary = (f"types of {fname!r}: " + ", ".join(f"{k} {c}" for k, c in sorted(ta.items()))
               + " vs " + ", ".join(f"{k} {c}" for k, c in sorted(tb.items())))
    return Check("DP012", shard, ref, fname, "types", "chi-square test of homogeneity (types)",
                 stat, p, {"cramers_v": v}, {"cramers_v": th.cramers_v}, v >= th.cramers_v,
                 summary, dof=dof, extra={"types": ta, "reference_types": tb})


def _distribution(shard: str, ref: str, fname: str, measure: str, a: FieldStats, b: FieldStats,
                  th: Thresholds) -> Check | None:
    da, db = a.dists.get(measure), b.dists.get(measure)
    if da is None or db is None:
        return None
    na, nb = da.hist.total, db.hist.total
    if na < th.min_records or nb < th.min_records:
        return None
    d = stats.ks_distance(da.hist, db.hist)
    p = stats.ks_p(d, na, nb)
    psi = stats.psi(db.hist, da.hist)
    ma, mb = da.moments, db.moments
    effect = {"ks_d": d, "psi": psi}
    threshold: dict[str, float] = {"ks_d": th.ks_d, "psi": th.psi}
    passed = d >= th.ks_d or psi >= th.psi
    words = MEASURE_WORDS[measure]
    if measure == "values":
        pooled = math.sqrt(((ma.n - 1) * ma.variance + (mb.n - 1) * mb.variance)
                           / max(ma.n + mb.n - 2, 1))
        cohen = (ma.mean - mb.mean) / pooled if pooled else (0.0 if ma.mean == mb.mean
                                                               else math.inf)
        effect["cohens_d"] = cohen
        threshold["cohens_d"] = th.cohens_d
        passed = passed or abs(cohen) >= th.cohens_d
        summary = (f"{words} of {fname!r}: mean {ma.mean:.4g} (sd {math.sqrt(ma.variance):.3g})"
                   f" vs {mb.mean:.4g} (sd {math.sqrt(mb.variance):.3g}); Cohen's d "
                   f"{cohen:.2f}, KS D {d:.3f}, PSI {psi:.2f}")
    else:
        ratio = ma.mean / mb.mean if mb.mean else math.inf
        effect["mean_ratio"] = ratio
        threshold["mean_ratio"] = th.length_ratio
        passed = passed or ratio >= th.length_ratio or ratio <= 1 / th.length_ratio
        summary = (f"{words} of {fname!r}: mean {ma.mean:.1f} vs {mb.mean:.1f} (x{ratio:.2f}), "
                   f"median {da.hist.quantile(0.5)} vs {db.hist.quantile(0.5)}; KS D {d:.3f}, "
                   f"PSI {psi:.2f}")
    t, dof, tp = stats.welch(ma.n, ma.mean, ma.variance, mb.n, mb.mean, mb.variance)
    return Check(DIST_CODES[measure], shard, ref, fname, measure,
                 "two-sample Kolmogorov-Smirnov", d, p, effect, threshold, passed, summary,
                 extra={"welch_t": t, "welch_dof": dof, "welch_p": tp, "n": na,
                        "reference_n": nb, "mean": ma.mean, "reference_mean": mb.mean})


def shard_checks(cur: ShardProfile, ref: ShardProfile, th: Thresholds,
                 ref_label: str) -> list[Check]:
    out = [
        _rate("DP004", cur.path, ref_label, None, "exact-duplicate", cur.dup_count,
              cur.dup_sampled, ref.dup_count, ref.dup_sampled, th),
        _rate("DP005", cur.path, ref_label, None, "near-duplicate", cur.near_count,
              cur.near_checked, ref.near_count, ref.near_checked, th),
    ]
    return [c for c in out if c is not None]
