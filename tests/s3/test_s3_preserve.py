"""``preflight`` on plain / versioned / Object Lock buckets and ``preserve`` into a case."""

from __future__ import annotations

import hashlib

from s3_testlib import MiB, put_multipart

from ckptrescue.engine.action import from_library
from ckptrescue.engine.executor import record
from ckptrescue.stores.s3.api import preflight, preserve
from fixtures.det import det_bytes


def test_preflight_verdicts(writer, bucket, options, case):
    plain = preflight(f"s3://{bucket}", client_options=options)
    assert (plain.versioning, plain.object_lock, plain.verdict) == (
        "Never enabled", "not configured", "unprotected")
    assert any("VERSIONING IS NEVER ENABLED" in w for w in plain.warnings)
    writer.create_bucket(Bucket=f"{bucket}-v")
    writer.put_bucket_versioning(Bucket=f"{bucket}-v",
                                 VersioningConfiguration={"Status": "Enabled"})
    versioned = preflight(f"s3://{bucket}-v", client_options=options)
    assert (versioned.versioning, versioned.verdict) == ("Enabled", "versioned")
    locked_name = f"{bucket}-locked"
    writer.create_bucket(Bucket=locked_name, ObjectLockEnabledForBucket=True)
    writer.put_object_lock_configuration(Bucket=locked_name, ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled",
        "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 30}}})
    locked = preflight(f"s3://{locked_name}", client_options=options)
    record(case, from_library(locked))  # the engine's one writer records it
    assert (locked.versioning, locked.object_lock, locked.verdict) == (
        "Enabled", "Enabled", "immutable")
    assert locked.default_retention == {"Mode": "GOVERNANCE", "Days": 30}
    assert locked.warnings == []
    assert [f.code for f in case.findings()] == ["S3022"]


def test_preserve_all_versions_verified_hashed_inventoried(writer, versioned_bucket, options,
                                                            case):
    b = versioned_bucket
    parts = [det_bytes(5 * MiB, 1), det_bytes(999, 2)]
    put_multipart(writer, b, "run/model.pt", parts)
    writer.put_object(Bucket=b, Key="run/model.pt", Body=b"v2", ChecksumAlgorithm="CRC32C")
    writer.put_object(Bucket=b, Key="run/lie.bin", Body=b"payload", ChecksumAlgorithm="SHA256",
                      ChecksumSHA256="AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
    writer.delete_object(Bucket=b, Key="run/lie.bin")  # a marker on top: the version is kept
    result = preserve(f"s3://{b}/run/", case=case, all_versions=True, client_options=options)
    statuses = sorted((o.key, o.status, o.algorithm) for o in result.objects)
    assert statuses == [("run/lie.bin", "mismatch", "SHA256"), ("run/model.pt", "match", "CRC32C"),
                        ("run/model.pt", "match", "SHA256")]
    evidence = {e.source: e for e in case.evidence()}
    assert len(evidence) == 3 and all(e.kind == "s3-object" for e in evidence.values())
    whole = b"".join(parts)
    mpu = next(e for e in evidence.values() if e.size == len(whole))
    assert mpu.sha256 == hashlib.sha256(whole).hexdigest()
    assert case.artifact_path(mpu.sha256).read_bytes() == whole
    lie = next(e for e in evidence.values() if "lie.bin" in e.source)
    assert case.read_artifact(lie.sha256) == b"payload"  # kept as received
    assert "S3030" in [f.code for f in case.findings()]
    assert result.inventory_sha256 and case.artifact_path(result.inventory_sha256).is_file()
    assert case.verify().ok
