"""Each silent incident is flagged on the right shard and field with the right test; clean
datasets of the same shape (other draws of the same distribution) are not flagged."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckptrescue.datasets.profiles.build import profile_dataset
from ckptrescue.datasets.profiles.compare import CompareResult, compare
from fixtures import profiles as fx

VICTIM = f"part-{fx.VICTIM:05d}.jsonl"
# incident -> (code, field, test) that must be flagged on the victim shard
EXPECTED = {
    "emptied": {("DP001", "text", "two-proportion z-test")},
    "labels": {("DP011", "label", "chi-square test of homogeneity")},
    "duplicate": {("DP006", None, "bottom-k (KMV) Jaccard estimate of record-hash sets")},
    "doubled": {("DP008", "text", "two-sample Kolmogorov-Smirnov"),
                ("DP007", "text", "two-sample Kolmogorov-Smirnov")},
    "drift": {("DP010", "score", "two-sample Kolmogorov-Smirnov")},
}


def _flags(result: CompareResult) -> set[tuple[str, str, str | None, str]]:
    return {(f.details["shard"], f.code, f.details["field"], f.details["test"])
            for f in result.findings}


def _profile(root: Path):  # noqa: ANN202
    return profile_dataset(root, tokenizer=fx.whitespace_tokenizer)


@pytest.mark.parametrize("incident", fx.INCIDENTS)
def test_incident_flagged_on_its_shard_shards_mode(incident_root: Path, incident: str) -> None:
    result = compare(_profile(incident_root / incident), mode="shards")
    flags = _flags(result)
    want = {(VICTIM, *e) for e in EXPECTED[incident]}
    assert want <= flags, result.answer()
    assert {f[0] for f in flags} == {VICTIM}, f"other shards flagged: {sorted(flags)}"
    for f in result.findings:
        d = f.details
        assert d["effect_size"] and d["threshold"] and d["next"] and d["reference"]
        assert f.source == "dataset.compare" and f.evidence.endswith(VICTIM)


@pytest.mark.parametrize("incident", fx.INCIDENTS)
def test_incident_flagged_against_a_clean_baseline_versions_mode(
        incident_root: Path, tmp_path: Path, incident: str) -> None:
    fx.make_dataset(tmp_path / "baseline", 2)  # another draw of the same distribution
    base = _profile(tmp_path / "baseline")
    result = compare(base, _profile(incident_root / incident), mode="versions")
    flags = _flags(result)
    if incident == "duplicate":  # the copy is found within the current version
        assert (VICTIM, *next(iter(EXPECTED["duplicate"]))) in flags
    else:
        assert {(VICTIM, *e) for e in EXPECTED[incident]} <= flags, result.answer()
    assert {f[0] for f in flags} == {VICTIM}, sorted(flags)


def test_versions_mode_names_the_test_effect_and_threshold(incident_root: Path) -> None:
    result = compare(_profile(incident_root / "clean"), _profile(incident_root / "doubled"))
    (tokens,) = [f for f in result.findings if f.code == "DP008"]
    d = tokens.details
    assert d["test"] == "two-sample Kolmogorov-Smirnov" and d["p_value"] < d["significance_level"]
    assert 1.8 < d["effect_size"]["mean_ratio"] < 2.2
    assert d["threshold"] == {"ks_d": 0.2, "psi": 0.25, "mean_ratio": 1.25}
    assert "tokenizer" in d["next"]
    assert "x1.9" in tokens.title or "x2.0" in tokens.title or "x2.1" in tokens.title


def test_thresholds_are_configurable(incident_root: Path) -> None:
    from ckptrescue.datasets.profiles.checks import Thresholds

    prof = _profile(incident_root / "drift")
    assert compare(prof, mode="shards").findings
    lax = Thresholds(ks_d=0.9, psi=50.0, cohens_d=5.0)
    assert not compare(prof, mode="shards", thresholds=lax).findings


FP_SEEDS = range(100, 150)


def test_clean_datasets_are_not_flagged_over_50_seeds(tmp_path: Path) -> None:
    """The false-positive rate (docs/profiles.md): 50 clean datasets, 8 shards each, every shard
    tested against the rest — and each seed also against the next seed as a 'new version'."""
    flagged: list[str] = []
    tests = 0
    previous = None
    for seed in FP_SEEDS:
        root = tmp_path / str(seed)
        fx.make_dataset(root, seed, shards=6, n=200)
        prof = _profile(root)
        for result in [compare(prof, mode="shards")] + (
                [compare(previous, prof)] if previous is not None else []):
            tests += len(result.checks)
            flagged += [f"seed {seed}: {f.title}" for f in result.findings]
        previous = prof
    assert tests > 5000
    assert not flagged, flagged
