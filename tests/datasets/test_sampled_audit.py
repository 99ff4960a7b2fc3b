"""manifest audit --sample: a seeded draw, every file stat'ed, an exact Clopper-Pearson bound."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_helpers import invoke

from ckptrescue.datasets.audit import audit
from ckptrescue.datasets.manifest import build_manifest
from ckptrescue.datasets.sampling import (
    binom_cdf,
    clopper_pearson_upper,
    parse_sample,
    percent_up,
    sample_size,
)
from ckptrescue.errors import UsageError


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "ds"
    for i in range(200):
        d = root / f"d{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:04d}.bin").write_bytes(os.urandom(64 + i))
    manifest = tmp_path / "ds.sha256"
    build_manifest(root, manifest, jobs=2)
    return root, manifest


def _hashed(result) -> set[str]:
    return {r.rel.decode() for r in result.files if r.actual is not None}


def test_same_seed_draws_same_files(tree) -> None:
    root, manifest = tree
    a = audit(root, manifest, sample="10%", seed=3, jobs=2)
    b = audit(root, manifest, sample="10%", seed=3, jobs=1)
    c = audit(root, manifest, sample="10%", seed=4, jobs=2)
    assert len(_hashed(a)) == 20
    assert _hashed(a) == _hashed(b)
    assert _hashed(a) != _hashed(c)
    assert a.sample is not None
    assert a.to_json()["sample"]["seed"] == 3
    assert a.to_json()["sample"]["population"] == 200
    assert a.ok


def test_corrupted_file_in_sample_is_found_and_stat_finds_the_rest(tree) -> None:
    root, manifest = tree
    drawn = sorted(_hashed(audit(root, manifest, sample=25, seed=11)))
    victim = root / drawn[0]
    data = bytearray(victim.read_bytes())
    data[10] ^= 0xFF
    victim.write_bytes(bytes(data))
    # outside the sample: one file deleted, one truncated, one new
    others = sorted(p for p in root.rglob("*.bin")
                    if str(p.relative_to(root)) not in drawn)
    others[0].unlink()
    others[1].write_bytes(b"short")
    (root / "d0" / "extra.bin").write_bytes(b"new")
    result = audit(root, manifest, sample=25, seed=11)
    statuses = {r.rel.decode(): r.status for r in result.files if r.status != "ok"}
    assert statuses[drawn[0]] == "corrupted"
    assert statuses[str(others[0].relative_to(root))] == "missing"
    assert statuses[str(others[1].relative_to(root))] == "changed"
    assert statuses["d0/extra.bin"] == "new"
    s = result.to_json()["sample"]
    assert (s["size"], s["population"], s["bad"]) == (25, 198, 1)
    from scipy.stats import beta  # the reference (imported by the worker that needs it)

    assert s["upper_bound_95"] == pytest.approx(beta.ppf(0.95, 2, 24), rel=1e-9)
    assert "1 of 25 sampled files corrupted: with 95% confidence fewer than" in result.answer()
    assert "1 missing, 1 changed" in result.answer()
    assert not result.ok


@pytest.mark.parametrize(("bad", "n"), [(0, 1), (0, 2000), (1, 25), (3, 2000), (17, 400),
                                        (250, 1000), (999, 1000), (5, 100_000)])
def test_bound_matches_clopper_pearson(bad: int, n: int) -> None:
    from scipy.stats import beta

    # the one-sided exact upper bound is the 0.95 quantile of Beta(bad + 1, n - bad)
    assert clopper_pearson_upper(bad, n) == pytest.approx(beta.ppf(0.95, bad + 1, n - bad),
                                                          rel=1e-9)
    assert binom_cdf(bad, n, clopper_pearson_upper(bad, n)) == pytest.approx(0.05, rel=1e-7)
    assert clopper_pearson_upper(n, n) == 1.0


def test_hand_computed_statement() -> None:
    # 0 of 2,000: (1 - p)^2000 = 0.05 -> p = 1 - 0.05^(1/2000) = 0.0014967...
    p = clopper_pearson_upper(0, 2000)
    assert p == pytest.approx(1 - 0.05 ** (1 / 2000), rel=1e-12)
    assert percent_up(p) == "0.15"
    from ckptrescue.datasets.sampling import SampleStats

    stats = SampleStats(seed=0, size=2000, population=200_000, bad=0)
    assert stats.statement() == ("0 of 2,000 sampled files corrupted: with 95% confidence fewer "
                                 "than 0.15% of the 200,000 files are corrupted")


def test_sample_parsing() -> None:
    assert parse_sample("1%") == (0.01, True)
    assert parse_sample("0.5") == (0.5, True)
    assert parse_sample("2000") == (2000, False)
    assert sample_size(200_000, "1%") == 2000
    assert sample_size(10, "2000") == 10
    for bad in ("0", "-1%", "abc", "150%", "2.5"):
        with pytest.raises(UsageError):
            parse_sample(bad)


def test_cli_json_and_human(tree) -> None:
    root, manifest = tree
    res = invoke("manifest", "audit", str(root), str(manifest), "--sample", "5%",
                 "--seed", "9", "--json", "--no-progress")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert set(data["sample"]) >= {"seed", "size", "population", "bad", "upper_bound_95"}
    assert (data["sample"]["seed"], data["sample"]["size"]) == (9, 10)
    res = invoke("manifest", "audit", str(root), str(manifest), "--sample", "10",
                 "--no-progress")
    assert res.returncode == 0, res.stderr
    assert "0 of 10 sampled files corrupted: with 95% confidence fewer than 25.9% of the 200 " \
           "files are corrupted" in res.stdout
    assert "seed 0" in res.stdout
