"""Compare profiles: two versions of a dataset, or each shard against the rest of its dataset.

``compare(baseline, current, mode="versions")`` matches shards by name and tests each current
shard against its baseline shard (when no name matches, the two datasets as wholes).
``compare(profile, mode="shards")`` tests every shard against the rest of the same dataset. Both
also look for shards that hold the same records (bottom-k Jaccard of record hashes) and report
shards whose profile is incomplete. Every flag is a :class:`~ckptrescue.model.Finding` whose
``details`` name the shard, field, test, statistic, p-value, effect size, threshold and what to
check next (see :mod:`.advice`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from ckptrescue.datasets.profiles import advice
from ckptrescue.datasets.profiles.checks import Check, Thresholds, field_checks, shard_checks
from ckptrescue.datasets.profiles.profile import DatasetProfile, ShardProfile, merge_shards
from ckptrescue.datasets.profiles.rest import minus
from ckptrescue.errors import UsageError
from ckptrescue.model import Finding, JsonObject

Mode = Literal["versions", "shards"]


@dataclass
class CompareResult:
    mode: str
    thresholds: Thresholds
    checks: list[Check] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def flagged(self) -> list[Check]:
        return [c for c in self.checks if c.flagged]

    @property
    def level(self) -> float:
        """The per-test significance level used (alpha / tests with a p-value)."""
        return self.thresholds.alpha / max(1, sum(c.p_value is not None for c in self.checks))

    def flagged_shards(self) -> list[str]:
        return sorted({c.shard for c in self.flagged})

    def answer(self) -> str:
        n = len(self.flagged)
        if not n:
            return (f"no shard deviates: {len(self.checks)} tests run, none past its threshold "
                    f"(alpha {self.thresholds.alpha}, Bonferroni)")
        shards = self.flagged_shards()
        return (f"{n} deviation(s) in {len(shards)} shard(s): " + ", ".join(shards[:5])
                + (" ..." if len(shards) > 5 else ""))

    def to_json(self) -> JsonObject:
        return {"mode": self.mode, "thresholds": self.thresholds.to_json(),
                "per_test_level": self.level, "tests_run": len(self.checks),
                "answer": self.answer(), "flagged": [c.to_json() for c in self.flagged],
                "findings": [f.to_json() for f in self.findings], "skipped": self.skipped}


def _pair(cur: ShardProfile, ref: ShardProfile, th: Thresholds, label: str) -> list[Check]:
    out = shard_checks(cur, ref, th, label)
    for name in sorted(cur.fields.keys() | ref.fields.keys()):
        out.extend(field_checks(cur, ref, name, th, label))
    return out


def _duplicate_shards(shards: list[ShardProfile], th: Thresholds) -> list[Check]:
    """Pairs of shards whose bottom-k record-hash sketches overlap (candidates by shared hash)."""
    owners: dict[int, list[int]] = {}
    for i, s in enumerate(shards):
        if s.dup_sampled - s.dup_count < th.min_records:
            continue  # too few distinct records (a label array, a constant shard): no evidence
        for h in s.record_hashes.hashes:
            owners.setdefault(h, []).append(i)
    pairs = sorted({(a, b) for idx in owners.values() for a in idx for b in idx if a < b})
    out = []
    for a, b in pairs:
        sa, sb = shards[a], shards[b]
        j, shared, k = sa.record_hashes.jaccard(sb.record_hashes)
        later, earlier = (sb, sa) if sa.path < sb.path else (sa, sb)
        out.append(Check(
            "DP006", later.path, earlier.path, None, "records",
            "bottom-k (KMV) Jaccard estimate of record-hash sets", j, None,
            {"jaccard": j}, {"jaccard": th.jaccard}, (j >= th.jaccard and k >= th.min_records)
            or (j >= th.jaccard and shared == k),
            f"{shared} of the {k} smallest record hashes of the two shards are shared: "
            f"estimated Jaccard {j:.2f} ({later.records} vs {earlier.records} records)",
            extra={"shared": shared, "k": k, "other_shard": earlier.path}))
    return out


def compare(baseline: DatasetProfile, current: DatasetProfile | None = None, *,
            mode: Mode = "versions", thresholds: Thresholds | None = None) -> CompareResult:
    """Flag shards and fields of ``current`` that deviate from ``baseline`` (``versions``), or
    shards of ``baseline`` that deviate from the rest of it (``shards``; ``current`` unused
    unless given, then its shards are the ones compared)."""
    th = thresholds or Thresholds()
    if current is not None and current.sketches != baseline.sketches:
        raise UsageError(f"profiles of different sketch versions (baseline {baseline.sketches}, "
                         f"current {current.sketches}) do not compare: profile both with this "
                         "ckptrescue version")
    result = CompareResult(mode=mode, thresholds=th)
    if mode == "versions":
        if current is None:
            raise UsageError("compare in 'versions' mode needs a current profile")
        _versions(baseline, current, th, result)
        subject = current
    elif mode == "shards":
        subject = current if current is not None else baseline
        _shards(subject, th, result)
    else:
        raise UsageError(f"unknown compare mode {mode!r} (versions or shards)")
    result.checks.extend(_duplicate_shards(subject.shards, th))
    level = result.level
    result.checks = [c.with_flag(level) for c in result.checks]
    result.findings = [advice.finding(c, subject.root, level) for c in result.flagged]
    result.findings.extend(advice.incomplete(subject))
    return result


def _versions(base: DatasetProfile, cur: DatasetProfile, th: Thresholds,
              result: CompareResult) -> None:
    if base.options != cur.options:
        result.skipped.append(f"profiles made with different options: baseline "
                              f"{base.options.to_json()}, current {cur.options.to_json()}")
    names_b = {s.path for s in base.shards}
    names_c = {s.path for s in cur.shards}
    common = sorted(names_b & names_c)
    if not common:
        result.checks.extend(_pair(cur.merged(), base.merged(), th, "baseline (all shards)"))
        return
    for name in common:
        c, b = cur.shard(name), base.shard(name)
        assert c is not None and b is not None
        result.checks.extend(_pair(c, b, th, f"baseline {name}"))
        result.checks.extend(advice.count_change(c, b, th))
    result.findings.extend(advice.only_in(sorted(names_b - names_c), sorted(names_c - names_b),
                                          base.root, cur.root))


Key = tuple[str, str | None, str]


def _key(c: Check) -> Key:
    return c.code, c.field, c.measure


def _strength(c: Check) -> tuple[float, float, str]:
    """Most deviant first: smallest p-value, then largest effect relative to its threshold."""
    rel = max((abs(v) / t for k, v in c.effect.items()
               if (t := c.threshold.get(k)) and math.isfinite(v)), default=math.inf)
    return (c.p_value if c.p_value is not None else 0.0, -rel, c.shard)


def _one(shard: ShardProfile, rest: ShardProfile, key: Key, th: Thresholds,
         label: str) -> Check | None:
    fname = key[1]
    checks = shard_checks(shard, rest, th, label) if fname is None else \
        field_checks(shard, rest, fname, th, label)
    return next((c for c in checks if _key(c) == key), None)


def _shards(prof: DatasetProfile, th: Thresholds, result: CompareResult) -> None:
    """Each shard against the rest of the dataset, then outlier peeling per test: while a test
    flags shards, the most deviant one leaves the reference of the others and they are tested
    again, so one bad shard does not make its healthy neighbours look deviant (leave-one-out
    contamination). At most half of the shards are ever set aside."""
    if len(prof.shards) < 2:
        result.skipped.append("one shard: nothing to compare it with")
        return
    total = merge_shards(prof.shards)
    by_path = {s.path: s for s in prof.shards}
    first: dict[str, list[Check]] = {
        s.path: _pair(s, minus(total, s), th, "rest of the dataset") for s in prof.shards}
    level = th.alpha / max(1, sum(c.p_value is not None for cs in first.values() for c in cs))
    latest: dict[Key, dict[str, Check]] = {}
    for path, checks in first.items():
        for c in checks:
            latest.setdefault(_key(c), {})[path] = c
    for key, checks in sorted(latest.items(), key=lambda kv: str(kv[0])):
        excluded: list[str] = []
        while len(excluded) < len(prof.shards) // 2:
            flagged = [c for c in checks.values()
                       if c.with_flag(level).flagged and c.shard not in excluded]
            if not flagged:
                break
            excluded.append(min(flagged, key=_strength).shard)
            checks = _retest(prof, total, by_path, excluded, key, th)
        for path, c in checks.items():
            first[path] = [c if _key(old) == key else old for old in first[path]]
    for shard in prof.shards:
        result.checks.extend(first[shard.path])


def _retest(prof: DatasetProfile, total: ShardProfile, by_path: dict[str, ShardProfile],
            excluded: list[str], key: Key, th: Thresholds) -> dict[str, Check]:
    out: dict[str, Check] = {}
    for shard in prof.shards:
        rest = minus(total, shard)
        others = sorted(p for p in excluded if p != shard.path)
        for other in others:
            rest = minus(rest, by_path[other])
        label = "rest of the dataset" + (" without " + ", ".join(others) if others else "")
        c = _one(shard, rest, key, th, label)
        if c is not None:
            out[shard.path] = c
    return out
