"""manifest build: sidecar, skipped entries, never writing into DIR, resume, progress."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from ckptrescue.datasets.manifest import build_manifest, partial_path, sidecar_path
from ckptrescue.datasets.progress import Progress
from ckptrescue.engine.action import from_library
from ckptrescue.engine.executor import record
from ckptrescue.errors import UsageError
from fixtures.datasets import tree_digest


def test_build_hashes_every_file_and_writes_the_sidecar(dataset, tmp_path: Path) -> None:
    root, files = dataset
    before = tree_digest(root)
    out = tmp_path / "m.sha256"
    result = build_manifest(root, out, jobs=2)
    assert tree_digest(root) == before
    assert result.ok and not result.skipped
    lines = out.read_bytes().splitlines()
    assert len(lines) == 9 == len(result.entries)
    rows = [json.loads(x) for x in sidecar_path(out).read_text().splitlines()]
    by_path = {r["path"]: r for r in rows}
    tf = by_path["tfrecords/train-00000-of-00002.tfrecord"]
    assert tf["sha256"] == hashlib.sha256(files["tfrecord"].read_bytes()).hexdigest()
    assert tf["size"] == files["tfrecord"].stat().st_size
    assert tf["mtime_ns"] == files["tfrecord"].stat().st_mtime_ns
    formats = {r["path"]: r["format"] for r in rows}
    assert formats == {
        "README.txt": "other", "arrays/embeddings.npy": "npy", "arrays/stats.npz": "npz",
        "shards/shard-000000.tar": "tar", "shards/shard-000001.tar": "tar",
        "tables/part-0.parquet": "parquet", "text/captions.jsonl": "jsonl",
        "tfrecords/train-00000-of-00002.tfrecord": "tfrecord",
        "tfrecords/train-00001-of-00002.tfrecord": "tfrecord",
    }
    assert not partial_path(out).exists()
    assert result.to_json()["formats"] == {"jsonl": 1, "npy": 1, "npz": 1, "other": 1,
                                           "parquet": 1, "tar": 2, "tfrecord": 2}


def test_one_job_and_two_jobs_write_the_same_manifest(dataset, tmp_path: Path) -> None:
    root, _ = dataset
    build_manifest(root, tmp_path / "a", jobs=1)
    build_manifest(root, tmp_path / "b", jobs=2)
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


def test_never_leaves_dir_and_says_what_it_skipped(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"not part of the dataset")
    root = tmp_path / "ds"
    (root / "d").mkdir(parents=True)
    (root / "d" / "real.bin").write_bytes(b"data")
    (root / "link-in").symlink_to("d/real.bin")
    (root / "link-out").symlink_to(outside / "secret")
    (root / "link-dir").symlink_to(outside)
    (root / "dangling").symlink_to(root / "nope")
    os.mkfifo(root / "pipe")
    result = build_manifest(root, tmp_path / "m", jobs=2)
    names = sorted(e.rel for e in result.entries)
    assert names == [b"d/real.bin", b"link-in"]
    skipped = {s.rel: s.reason for s in result.skipped}
    assert set(skipped) == {b"link-out", b"link-dir", b"dangling", b"pipe"}
    assert "out of the directory" in skipped[b"link-out"]
    assert "FIFO" in skipped[b"pipe"]
    assert "dangling" in skipped[b"dangling"]
    assert {f.code for f in result.findings()} == {"MF006"}


def test_refuses_to_write_the_manifest_inside_dir(dataset) -> None:
    root, _ = dataset
    with pytest.raises(UsageError, match="inside"):
        build_manifest(root, root / "m.sha256")
    assert not (root / "m.sha256").exists()


def _interrupt_after(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """Make the build raise KeyboardInterrupt (as Ctrl-C does) when hashing file number n+1."""
    from ckptrescue.datasets import manifest

    real = manifest.hash_entry
    count = {"n": 0}

    def hash_entry(*args, **kwargs):
        count["n"] += 1
        if count["n"] > n:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(manifest, "hash_entry", hash_entry)


def test_an_interrupted_build_resumes(dataset, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = dataset
    out = tmp_path / "m.sha256"
    with monkeypatch.context() as m:
        _interrupt_after(m, 4)
        with pytest.raises(KeyboardInterrupt):
            build_manifest(root, out, jobs=1)
    assert not out.exists()
    assert len(partial_path(out).read_text().splitlines()) == 4
    fresh = build_manifest(root, tmp_path / "fresh", jobs=1)
    resumed = build_manifest(root, out, jobs=1)
    assert resumed.resumed == 4
    assert resumed.bytes_hashed < fresh.bytes_hashed
    assert out.read_bytes() == (tmp_path / "fresh").read_bytes()
    assert not partial_path(out).exists()


def test_resume_after_a_torn_last_line_keeps_every_finished_file(
        dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = dataset
    out = tmp_path / "m.sha256"
    build_manifest(root, tmp_path / "full", jobs=1)
    lines = sidecar_path(tmp_path / "full").read_text().splitlines()
    partial_path(out).write_text("\n".join(lines[:3]) + "\n" + lines[3][:25])  # torn 4th line
    with monkeypatch.context() as m:
        _interrupt_after(m, 2)  # 3 kept, 2 more finished, then Ctrl-C
        with pytest.raises(KeyboardInterrupt):
            build_manifest(root, out, jobs=1)
    again = build_manifest(root, out, jobs=1)
    assert again.resumed == 5
    assert out.read_bytes() == (tmp_path / "full").read_bytes()


def test_resume_rehashes_a_file_that_changed_meanwhile(dataset, tmp_path: Path) -> None:
    root, files = dataset
    out = tmp_path / "m.sha256"
    partial = partial_path(out)
    stale = {"path": "text/captions.jsonl", "size": files["jsonl"].stat().st_size,
             "mtime_ns": files["jsonl"].stat().st_mtime_ns - 1, "sha256": "0" * 64}
    partial.write_text(json.dumps(stale) + "\n" + '{"path": "torn')
    result = build_manifest(root, out, jobs=1)
    assert result.resumed == 0
    entry = next(e for e in result.entries if e.rel == b"text/captions.jsonl")
    assert entry.sha256 == hashlib.sha256(files["jsonl"].read_bytes()).hexdigest()


def test_progress_reports_rate_and_eta(dataset, tmp_path: Path) -> None:
    root, _ = dataset
    seen: list[Progress] = []
    build_manifest(root, tmp_path / "m", jobs=2, progress=seen.append)
    last = seen[-1]
    assert last.files_done == last.files_total == 9
    assert last.bytes_done == last.bytes_total > 0
    assert last.rate > 0 and last.eta_s == 0


def test_case_records_the_build(dataset, tmp_path: Path, case) -> None:
    root, _ = dataset
    result = build_manifest(root, tmp_path / "m")
    record(case, from_library(result))  # the engine's one writer records it
    records = list(case.records("manifest.build"))
    assert len(records) == 1 and records[0]["details"]["files"] == len(result.entries)
    assert len(records[0]["artifacts"]) == 2
    assert case.verify().ok
