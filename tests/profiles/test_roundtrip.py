"""Profiles serialise to versioned JSON and load back to the same profile and comparison."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckptrescue.datasets.profiles.build import profile_dataset
from ckptrescue.datasets.profiles.compare import compare
from ckptrescue.datasets.profiles.profile import SCHEMA, DatasetProfile, load, save
from ckptrescue.errors import UsageError
from fixtures import profiles as fx


def test_json_round_trip(incident_root: Path, tmp_path: Path) -> None:
    prof = profile_dataset(incident_root / "doubled", tokenizer=fx.whitespace_tokenizer)
    save(prof, tmp_path / "p.json")
    again = load(tmp_path / "p.json")
    assert again.to_json() == prof.to_json()
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["schema"] == SCHEMA
    assert data["options"]["tokenizer"].startswith("callable:")
    a = compare(prof, mode="shards").to_json()
    b = compare(again, mode="shards").to_json()
    assert a == b and a["flagged"]


def test_profiles_are_deterministic(incident_root: Path) -> None:
    one = profile_dataset(incident_root / "clean").dumps()
    two = profile_dataset(incident_root / "clean", jobs=2).dumps()
    assert one == two


def test_other_schema_versions_are_refused(tmp_path: Path) -> None:
    prof = DatasetProfile(root="/x")
    data = prof.to_json()
    data["schema"] = "ckptrescue.profile/2"
    (tmp_path / "p.json").write_text(json.dumps(data))
    with pytest.raises(UsageError, match="not supported"):
        load(tmp_path / "p.json")
    (tmp_path / "q.json").write_text("{}")
    with pytest.raises(UsageError, match="not a ckptrescue dataset profile"):
        load(tmp_path / "q.json")


def test_compare_result_is_json(incident_root: Path) -> None:
    result = compare(profile_dataset(incident_root / "drift"), mode="shards")
    text = json.dumps(result.to_json(), allow_nan=False)
    assert "DP010" in text and json.loads(text)["tests_run"] == len(result.checks)
