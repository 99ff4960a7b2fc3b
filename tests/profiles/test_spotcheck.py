"""Spot checks: seeded, redrawable, with the values that drove the flag marked."""

from __future__ import annotations

from pathlib import Path

from ckptrescue.datasets.profiles.build import profile_dataset
from ckptrescue.datasets.profiles.compare import compare
from ckptrescue.datasets.profiles.spotcheck import RECORD, redraw, sample_key, sample_records
from fixtures import profiles as fx

VICTIM = f"part-{fx.VICTIM:05d}.jsonl"


def _finding(root: Path, code: str):  # noqa: ANN202
    result = compare(profile_dataset(root, tokenizer=fx.whitespace_tokenizer), mode="shards")
    return next(f for f in result.findings if f.code == code)


def test_emptied_field_marked_side_by_side(incident_root: Path) -> None:
    root = incident_root / "emptied"
    finding = _finding(root, "DP001")
    check = sample_records(root / VICTIM, seed=42, k=5, reference=root / "part-00000.jsonl",
                           finding=finding)
    assert check.seed == 42 and check.k == 5 and check.code == "DP001"
    assert check.fields == ("text",)
    assert len(check.flagged.records) == 5 and check.reference is not None
    assert all(r.marked == {"text": "empty"} for r in check.flagged.records)
    assert all(r.values["text"] for r in check.reference.records)
    assert check.reference.indices == check.flagged.indices  # the same seed draws the same rows
    assert check.to_json()["flagged"]["indices"] == check.flagged.indices


def test_sample_is_seeded_and_redrawable(incident_root: Path) -> None:
    shard = incident_root / "clean" / "part-00001.jsonl"
    a = sample_records(shard, seed=7, k=6)
    b = sample_records(shard, seed=7, k=6)
    c = sample_records(shard, seed=8, k=6)
    assert a == b and a.flagged.indices != c.flagged.indices
    assert redraw(shard, a) == a.flagged
    # the documented rule, recomputed by hand
    keys = sorted((sample_key(7, i), i) for i in range(fx.RECORDS))
    assert a.flagged.indices == sorted(i for _k, i in keys[:6])


def test_label_shift_and_lengths_are_explained(incident_root: Path) -> None:
    root = incident_root / "labels"
    check = sample_records(root / VICTIM, seed=1, k=20, finding=_finding(root, "DP011"))
    marks = [r.marked["label"] for r in check.flagged.records if "label" in r.marked]
    assert marks and all("of this shard vs" in m for m in marks)
    root = incident_root / "doubled"
    check = sample_records(root / VICTIM, seed=1, k=3, finding=_finding(root, "DP008"),
                           tokenizer=fx.whitespace_tokenizer)
    assert all(r.marked["text"].endswith(")") and "tokens" in r.marked["text"]
               for r in check.flagged.records)


def test_duplicate_shard_records_marked(incident_root: Path) -> None:
    root = incident_root / "duplicate"
    finding = _finding(root, "DP006")
    other = finding.details["other_shard"]
    check = sample_records(root / VICTIM, seed=3, k=4, reference=root / other, finding=finding)
    assert all(r.marked.get(RECORD, "").startswith("identical to reference record")
               for r in check.flagged.records)


def test_npy_rows(tmp_path: Path) -> None:
    path = fx.write_npy_tokens(tmp_path / "t.npy", fx.shard_records(1, 0, 50))
    check = sample_records(path, seed=5, k=3)
    assert len(check.flagged.records) == 3 and check.flagged.records_read == 50
    assert check.flagged.records[0].values["$"].startswith("[")
