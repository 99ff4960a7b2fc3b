"""manifest audit: every kind of damage named precisely; quick mode; the JSON shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckptrescue.datasets.audit import audit
from ckptrescue.datasets.manifest import build_manifest, sidecar_path
from ckptrescue.errors import UsageError
from fixtures.datasets import flip_byte, tfrecord_offsets, tree_digest, truncate


@pytest.fixture
def damaged(dataset, tmp_path: Path):
    """The dataset, its manifest, then: a flipped byte, a truncated shard, a deleted file and a
    new file."""
    root, files = dataset
    manifest = tmp_path / "m.sha256"
    build_manifest(root, manifest, jobs=2)
    flip_byte(files["tfrecord"], tfrecord_offsets(files["tfrecord"])[5] + 20)
    truncate(files["tar2"], 3000)
    files["jsonl"].unlink()
    (root / "text" / "extra.jsonl").write_text('{"id": 1}\n')
    return root, files, manifest


def test_audit_names_each_damaged_file(damaged) -> None:
    root, _, manifest = damaged
    before = tree_digest(root)
    result = audit(root, manifest, jobs=2)
    assert tree_digest(root) == before
    statuses = {r.rel.decode(): r.status for r in result.files if r.status != "ok"}
    assert statuses == {
        "tfrecords/train-00000-of-00002.tfrecord": "corrupted",
        "shards/shard-000001.tar": "changed",
        "text/captions.jsonl": "missing",
        "text/extra.jsonl": "new",
    }
    assert result.counts == {"ok": 6, "corrupted": 1, "changed": 1, "missing": 1, "new": 1,
                             "unreadable": 0}
    assert not result.ok
    assert result.answer() == ("3 of 9 files in the manifest do not match (1 corrupted, "
                               "1 changed, 1 missing); 1 new file(s) not in the manifest")
    codes = sorted(f.code for f in result.findings())
    assert codes == ["MF001", "MF002", "MF003", "MF004"]


def test_audit_json_has_the_documented_shape(damaged) -> None:
    root, _, manifest = damaged
    data = json.loads(json.dumps(audit(root, manifest).to_json()))
    assert set(data) >= {"files", "counts"}
    for row in data["files"]:
        assert set(row) == {"path", "status", "expected", "actual"}
    by_path = {r["path"]: r for r in data["files"]}
    corrupted = by_path["tfrecords/train-00000-of-00002.tfrecord"]
    assert corrupted["expected"] != corrupted["actual"]
    assert len(corrupted["actual"]) == 64
    assert by_path["text/captions.jsonl"]["actual"] is None
    assert by_path["text/extra.jsonl"]["expected"] is None
    ok_row = by_path["README.txt"]
    assert ok_row["expected"] == ok_row["actual"]
    assert set(data["counts"]) == {"ok", "corrupted", "changed", "missing", "new", "unreadable"}


def test_quick_audit_compares_size_and_mtime_only_and_says_so(damaged) -> None:
    root, _, manifest = damaged
    result = audit(root, manifest, quick=True)
    statuses = {r.rel.decode(): r.status for r in result.files if r.status != "ok"}
    # the flipped byte keeps size and mtime: a quick audit cannot see it, and says why
    assert statuses == {"shards/shard-000001.tar": "changed", "text/captions.jsonl": "missing",
                        "text/extra.jsonl": "new"}
    assert result.answer().startswith("QUICK (size and mtime only, contents not read)")
    assert result.to_json()["quick"] is True
    assert "MF007" in {f.code for f in result.findings()}


def test_quick_audit_needs_the_sidecar(damaged) -> None:
    root, _, manifest = damaged
    sidecar_path(manifest).unlink()
    with pytest.raises(UsageError, match="sidecar"):
        audit(root, manifest, quick=True)


def test_a_clean_directory_audits_ok(dataset, tmp_path: Path) -> None:
    root, _ = dataset
    build_manifest(root, tmp_path / "m")
    result = audit(root, tmp_path / "m")
    assert result.ok and result.counts["ok"] == 9
    assert result.answer() == "all 9 files in the manifest match"


def test_audit_of_a_broken_manifest_is_a_one_line_usage_error(dataset, tmp_path: Path) -> None:
    root, _ = dataset
    bad = tmp_path / "bad.sha256"
    bad.write_text("this is not a manifest\n")
    with pytest.raises(UsageError, match="line 1"):
        audit(root, bad)
