"""recover: from a snapshots directory and from a versioned S3 bucket (moto over real HTTP),
bringing back exactly the damaged files, verified, never writing into DIR."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ckptrescue.datasets.manifest import build_manifest
from ckptrescue.datasets.recover import recover
from ckptrescue.engine.action import from_library
from ckptrescue.engine.executor import record
from ckptrescue.errors import UsageError
from fixtures.datasets import flip_byte, tfrecord_offsets, tree_digest, truncate

DAMAGED = {"tfrecords/train-00000-of-00002.tfrecord", "shards/shard-000001.tar",
           "text/captions.jsonl", "arrays/embeddings.npy"}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def incident(dataset, tmp_path: Path):
    """Good state -> manifest; snapshots: an old one, a good one, and a newest one taken after
    the tar shard was already truncated; then the live dataset is damaged."""
    root, files = dataset
    manifest = tmp_path / "m.sha256"
    build_manifest(root, manifest)
    good = {rel: _sha(root / rel) for rel in DAMAGED}
    snaps = tmp_path / "snapshots"
    for name in ("2024-01-01", "2024-02-01", "2024-03-01"):
        shutil.copytree(root, snaps / name)
    # the oldest snapshot predates the npy file; the newest already has the truncated shard
    (snaps / "2024-01-01" / "arrays" / "embeddings.npy").unlink()
    truncate(snaps / "2024-03-01" / "shards" / "shard-000001.tar", 2000)
    for name, age in (("2024-01-01", 300), ("2024-02-01", 200), ("2024-03-01", 100)):
        t = 1_700_000_000 - age
        os.utime(snaps / name, (t, t))
    flip_byte(files["tfrecord"], tfrecord_offsets(files["tfrecord"])[3] + 30)
    truncate(files["tar2"], 2000)
    files["jsonl"].unlink()
    flip_byte(files["npy"], 4000)
    return root, manifest, snaps, good


def test_recover_from_snapshots_brings_back_exactly_the_damaged_files(incident,
                                                                      tmp_path: Path) -> None:
    root, manifest, snaps, good = incident
    before = tree_digest(root)
    snaps_before = tree_digest(snaps)
    to = tmp_path / "recovered"
    result = recover(root, manifest=manifest, source=snaps, to=to)
    assert tree_digest(root) == before
    assert tree_digest(snaps) == snaps_before
    assert result.ok and {r.rel.decode() for r in result.recovered} == DAMAGED
    got = {str(p.relative_to(to)) for p in to.rglob("*") if p.is_file()}
    assert got == DAMAGED
    for rel in DAMAGED:
        assert _sha(to / rel) == good[rel]
    by = {r.rel.decode(): r for r in result.files}
    # newest snapshot first; its truncated shard is rejected, the next one is taken
    tar = by["shards/shard-000001.tar"]
    assert tar.source == "snapshot 2024-02-01"
    assert tar.tried[0].source == "snapshot 2024-03-01" and "size" in tar.tried[0].outcome
    assert by["text/captions.jsonl"].source == "snapshot 2024-03-01"
    assert {f.code for f in result.findings()} == {"RC001"}
    assert not {"plan", "plan_file", "clean_view"} & set(result.to_json())  # only when asked


def test_what_cannot_be_recovered_is_reported(incident, tmp_path: Path, case) -> None:
    root, manifest, snaps, _ = incident
    for name in ("2024-02-01", "2024-03-01"):
        (snaps / name / "arrays" / "embeddings.npy").unlink()
    result = recover(root, manifest=manifest, source=snaps, to=tmp_path / "r")
    record(case, from_library(result))  # the engine's one writer records it
    [logged] = list(case.records("dataset.recover"))
    assert logged["details"]["unrecoverable"] == 1 and logged["details"]["recovered"] == 3
    assert sorted(f.code for f in case.findings()) == ["RC001"] * 3 + ["RC002"]
    assert not result.ok
    [lost] = result.unrecovered
    assert lost.rel == b"arrays/embeddings.npy"
    assert lost.reason == "no version matches the manifest"
    assert [a.outcome for a in lost.tried] == ["not in this snapshot"] * 3
    assert not (tmp_path / "r" / "arrays" / "embeddings.npy").exists()
    assert "1 could not be recovered" in result.answer()
    assert "RC002" in {f.code for f in result.findings()}


def test_recover_from_an_earlier_audit_report(incident, tmp_path: Path) -> None:
    import json

    from ckptrescue.datasets.audit import audit

    root, manifest, snaps, good = incident
    report = tmp_path / "audit.json"
    report.write_text(json.dumps(audit(root, manifest).to_json()))
    files_before = {p: p.stat().st_mtime_ns for p in root.rglob("*")}
    result = recover(root, manifest=manifest, source=snaps, to=tmp_path / "r",
                     audit_report=report, jobs=3)
    assert result.ok and {r.rel.decode() for r in result.recovered} == DAMAGED
    assert [r.rel for r in result.files] == sorted(r.rel for r in result.files)
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*")} == files_before
    report.write_text('{"files": [{"path": "not/in/manifest", "status": "missing"}]}')
    with pytest.raises(UsageError, match="not in the manifest"):
        recover(root, manifest=manifest, source=snaps, to=tmp_path / "r2", audit_report=report)
    report.write_text("garbage")
    with pytest.raises(UsageError, match="manifest audit --json"):
        recover(root, manifest=manifest, source=snaps, to=tmp_path / "r3", audit_report=report)


def test_recovery_dir_may_not_overlap_the_dataset(incident) -> None:
    root, manifest, snaps, _ = incident
    before = tree_digest(root)
    with pytest.raises(UsageError, match="overlaps"):
        recover(root, manifest=manifest, source=snaps, to=root / "recovered")
    assert tree_digest(root) == before


@pytest.mark.parametrize("per_key_limit", [1000, 0], ids=["list-per-key", "list-whole-prefix"])
def test_recover_from_a_versioned_s3_bucket(incident, tmp_path: Path, per_key_limit: int,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from ckptrescue.datasets.recover import S3Source
    from ckptrescue.stores.s3.localserver import start_local_s3

    monkeypatch.setattr(S3Source, "PER_KEY_LIMIT", per_key_limit)
    root, manifest, snaps, good = incident
    with start_local_s3() as server:
        w = server.writer_client()
        w.create_bucket(Bucket="backups")
        w.put_bucket_versioning(Bucket="backups",
                                VersioningConfiguration={"Status": "Enabled"})
        # version 1: the good state of every file; version 2: damaged copies of some
        good_tree = snaps / "2024-02-01"
        for p in sorted(good_tree.rglob("*")):
            if p.is_file():
                w.put_object(Bucket="backups", Key=f"ds/{p.relative_to(good_tree)}",
                             Body=p.read_bytes())
        for rel in ("tfrecords/train-00000-of-00002.tfrecord", "arrays/embeddings.npy"):
            w.put_object(Bucket="backups", Key=f"ds/{rel}", Body=(root / rel).read_bytes())
        w.delete_object(Bucket="backups", Key="ds/text/captions.jsonl")  # a delete marker
        to = tmp_path / "from-s3"
        before = tree_digest(root)
        result = recover(root, manifest=manifest, source="s3://backups/ds", to=to,
                         endpoint_url=server.endpoint_url, plan=tmp_path / "plan.json")
        assert tree_digest(root) == before
    assert result.ok, result.lines()
    assert {r.rel.decode() for r in result.recovered} == DAMAGED
    for rel in DAMAGED:
        assert _sha(to / rel) == good[rel]
    by = {r.rel.decode(): r for r in result.files}
    tf = by["tfrecords/train-00000-of-00002.tfrecord"]
    assert "differs from the manifest" in tf.tried[0].outcome  # the newest (damaged) version
    assert "versionId=" in tf.source
    assert by["text/captions.jsonl"].tried[0].outcome == "delete marker"
    # the swap-back plan names the object version each replacement came from
    plan = {e["path"]: e for e in json.loads((tmp_path / "plan.json").read_text())["entries"]}
    assert set(plan) == DAMAGED
    for rel, e in plan.items():
        assert e["source"] == by[rel].source and e["source"].startswith(f"s3://backups/ds/{rel}?")
        assert e["sha256"] == good[rel] and e["size"] == (snaps / "2024-02-01" / rel).stat().st_size


def test_a_manifest_name_leading_outside_is_never_followed(incident, tmp_path: Path) -> None:
    root, manifest, snaps, _ = incident
    outside = tmp_path / "escaped.bin"
    (snaps / "escaped.bin").write_bytes(b"x")  # would be snaps/<name>/../escaped.bin
    with manifest.open("ab") as fh:
        fh.write(hashlib.sha256(b"x").hexdigest().encode() + b"  ../escaped.bin\n")
    result = recover(root, manifest=manifest, source=snaps, to=tmp_path / "r")
    row = next(r for r in result.files if r.rel == b"../escaped.bin")
    assert not row.recovered and "outside" in row.reason
    assert not outside.exists() and not (tmp_path / "escaped.bin").exists()


def test_the_swap_back_script_repairs_a_copy_of_the_incident(incident, tmp_path: Path) -> None:
    root, manifest, snaps, good = incident
    before, snaps_before = tree_digest(root), tree_digest(snaps)
    to, plan = tmp_path / "recovered", tmp_path / "swap-back.json"
    result = recover(root, manifest=manifest, source=snaps, to=to, plan=plan,
                     clean_view=tmp_path / "clean")
    assert result.ok and result.plan_file == str(plan)
    copy = tmp_path / "copy"
    shutil.copytree(root, copy, symlinks=True)
    damaged_check = subprocess.run(["sha256sum", "-c", "--quiet", str(manifest)], cwd=copy,
                                   capture_output=True, check=False)
    assert damaged_check.returncode == 1  # the copy starts out damaged
    applied = subprocess.run(["bash", str(tmp_path / "swap-back.sh"), str(copy)],
                             capture_output=True, text=True, check=False, timeout=120)
    assert applied.returncode == 0, applied.stderr
    assert "4 installed, 0 already in place" in applied.stdout
    fixed = subprocess.run(["sha256sum", "-c", "--strict", str(manifest)], cwd=copy,
                           capture_output=True, text=True, check=False)
    assert fixed.returncode == 0, fixed.stdout
    assert fixed.stdout.count(": OK\n") == 9
    # the clean view: 5 intact files from DIR, 4 recovered ones, all passing sha256sum -c
    view_check = subprocess.run(["sha256sum", "-c", "--strict", str(tmp_path / "clean.sha256")],
                                cwd=tmp_path / "clean", capture_output=True, text=True,
                                check=False)
    assert view_check.returncode == 0 and view_check.stdout.count(": OK\n") == 9
    for rel in DAMAGED:
        assert os.readlink(tmp_path / "clean" / rel) == str(to / rel)
        assert _sha(copy / rel) == good[rel]
    assert os.readlink(tmp_path / "clean" / "README.txt") == str(root / "README.txt")
    assert tree_digest(root) == before and tree_digest(snaps) == snaps_before


def test_a_manifest_on_read_only_media_still_recovers(incident, tmp_path: Path) -> None:
    """The audit inside recover keeps its state in a private temporary directory, never beside
    a manifest that may sit on read-only media (here a read-only bind mount)."""
    root, manifest, snaps, good = incident
    media = tmp_path / "media"
    media.mkdir()
    shutil.copy(manifest, media / "m.sha256")
    shutil.copy(f"{manifest}.jsonl", media / "m.sha256.jsonl")
    if subprocess.run(["mount", "--bind", str(media), str(media)], capture_output=True,
                      check=False, timeout=60).returncode != 0:
        pytest.skip("cannot bind-mount here")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(media)], check=True, timeout=60,
                       capture_output=True)
        before = tree_digest(root)
        result = recover(root, manifest=media / "m.sha256", source=snaps,
                         to=tmp_path / "out")
        assert result.ok and {r.rel.decode() for r in result.recovered} == DAMAGED
        assert sorted(p.name for p in media.iterdir()) == ["m.sha256", "m.sha256.jsonl"]
        assert tree_digest(root) == before
    finally:
        subprocess.run(["umount", str(media)], check=False, timeout=60)


@pytest.mark.privileged
def test_a_full_destination_is_said_as_such_never_as_an_unreadable_source(
        incident, tmp_path: Path) -> None:
    from fixtures.storage import fill, small_tmpfs

    root, manifest, snaps, good = incident
    with small_tmpfs("256k") as mnt:
        filler = mnt / "filler"
        fill(filler)  # no room left at all
        to = mnt / "recovered"
        result = recover(root, manifest=manifest, source=snaps, to=to)
        assert not result.recovered
        outcomes = [a.outcome for r in result.files for a in r.tried
                    if not a.outcome.startswith(("size ", "not in this snapshot"))]
        assert outcomes and all(o.startswith(f"could not write the copy: {to}/") and
                                o.endswith(": No space left on device") for o in outcomes), \
            outcomes
        # nothing half written is left, under its name or a temporary one
        assert [p for p in to.rglob("*") if p.is_file()] == []
        filler.unlink()
        result = recover(root, manifest=manifest, source=snaps, to=to)
        assert result.ok and {r.rel.decode() for r in result.recovered} == DAMAGED
        for rel in DAMAGED:
            assert _sha(to / rel) == good[rel]


@pytest.mark.privileged
def test_a_small_file_on_a_full_destination_is_a_row_not_a_failed_run(tmp_path: Path) -> None:
    # a copy smaller than the write buffer fails only when its file closes (the flush)
    from fixtures.storage import fill, small_tmpfs

    root = tmp_path / "data"
    root.mkdir()
    for i in range(3):
        (root / f"f{i}.txt").write_bytes(bytes((i * 13 + j) % 251 for j in range(100 + i)))
    manifest = tmp_path / "m.sha256"
    build_manifest(root, manifest)
    snaps = tmp_path / "snapshots"
    shutil.copytree(root, snaps / "2024-01-01")
    good = _sha(root / "f1.txt")
    (root / "f1.txt").write_bytes(b"damaged")
    with small_tmpfs("256k") as mnt:
        fill(mnt / "filler")
        to = mnt / "r"
        result = recover(root, manifest=manifest, source=snaps, to=to)
        [row] = result.unrecovered
        [tried] = row.tried
        assert tried.outcome == f"could not write the copy: {to}/f1.txt: No space left on device"
        assert [p for p in to.rglob("*") if p.is_file()] == []
        (mnt / "filler").unlink()
        result = recover(root, manifest=manifest, source=snaps, to=to)
        assert result.ok and _sha(to / "f1.txt") == good


@pytest.mark.privileged
def test_a_full_destination_under_an_s3_download_is_the_destinations_failure(
        tmp_path: Path) -> None:
    # the store's download names the write it could not make; the other versions are not
    # fetched in vain
    from ckptrescue.datasets.recover import WRITE_FAILED
    from ckptrescue.stores.s3.localserver import start_local_s3
    from fixtures.storage import small_tmpfs

    root = tmp_path / "data"
    root.mkdir()
    good = bytes((j * 7) % 251 for j in range(300_000))
    (root / "big.bin").write_bytes(good)
    manifest = tmp_path / "m.sha256"
    build_manifest(root, manifest)
    (root / "big.bin").write_bytes(b"damaged")
    with start_local_s3() as server, small_tmpfs("256k") as mnt:
        w = server.writer_client()
        w.create_bucket(Bucket="backups")
        w.put_bucket_versioning(Bucket="backups",
                                VersioningConfiguration={"Status": "Enabled"})
        for body in (good, good):  # two versions, both good
            w.put_object(Bucket="backups", Key="ds/big.bin", Body=body)
        result = recover(root, manifest=manifest, source="s3://backups/ds", to=mnt / "r",
                         endpoint_url=server.endpoint_url)
        [row] = result.unrecovered
        [tried] = row.tried  # the second version was not fetched to meet the same full disk
        assert tried.outcome.startswith(f"{WRITE_FAILED}: {mnt / 'r'}/big.bin: "), tried.outcome
        assert "No space left on device" in tried.outcome
        assert row.reason == f"the recovery directory could not be written ({tried.outcome})"
        assert [p for p in (mnt / "r").rglob("*") if p.is_file()] == []
