"""History, known-good selection, CloudTrail correlation and restore on a versioned moto bucket.

Scenario (built with a plain boto3 client): ``ckpt/model.pt`` has a good v1, a v2 whose bytes
differ by one flipped bit (uploaded with its own, correct SHA256, as a faulty writer would), and a
delete marker on top. The manifest is ``sha256sum`` output for v1's bytes.
"""

from __future__ import annotations

import gzip
import hashlib
import json

import pytest

from ckptrescue.engine.action import from_library
from ckptrescue.engine.executor import record as record_step
from ckptrescue.errors import RefusedError
from ckptrescue.stores.s3.api import history, restore
from ckptrescue.stores.s3.client import stats
from fixtures.det import det_bytes

KEY = "ckpt/model.pt"


@pytest.fixture
def incident(writer, versioned_bucket, tmp_path):
    good = det_bytes(64 * 1024, 1)
    bad = bytearray(good)
    bad[40_000] ^= 0x10
    v1 = writer.put_object(Bucket=versioned_bucket, Key=KEY, Body=good,
                           ChecksumAlgorithm="SHA256")["VersionId"]
    v2 = writer.put_object(Bucket=versioned_bucket, Key=KEY, Body=bytes(bad),
                           ChecksumAlgorithm="SHA256")["VersionId"]
    marker = writer.delete_object(Bucket=versioned_bucket, Key=KEY)["VersionId"]
    manifest = tmp_path / "SHA256SUMS"
    manifest.write_text(f"{hashlib.sha256(good).hexdigest()}  model.pt\n")
    return {"bucket": versioned_bucket, "good": good, "bad": bytes(bad), "v1": v1, "v2": v2,
            "marker": marker, "manifest": manifest}


def test_history_lists_versions_marker_anomaly_and_known_good(incident, options, reader):
    result = history(f"s3://{incident['bucket']}/{KEY}", client_options=options,
                     manifest=incident["manifest"], client=reader)
    data = result.to_json()
    assert [k["key"] for k in data["keys"]] == [KEY]
    item = data["keys"][0]
    ids = [(v["version_id"], v["delete_marker"], v["is_latest"]) for v in item["versions"]]
    assert ids == [(incident["marker"], True, True), (incident["v2"], False, False),
                   (incident["v1"], False, False)]
    assert set(item["versions"][0]) == {"version_id", "is_latest", "delete_marker",
                                        "last_modified", "size", "checksum", "manifest_check"} - {
        "manifest_check"}
    assert item["versions"][1]["checksum"]["algorithm"] == "SHA256"
    assert item["versions"][2]["size"] == len(incident["good"])
    assert item["known_good"] == incident["v1"]
    assert item["known_good_by"] == "stored-sha256"
    assert "delete-marker-on-top" in [a["kind"] for a in item["anomalies"]]
    assert stats(reader).bytes_downloaded == 0  # decided from stored SHA256 values


def test_known_good_by_content_downloads_newest_first(incident, options, reader):
    result = history(f"s3://{incident['bucket']}/{KEY}", client_options=options,
                     manifest=incident["manifest"], client=reader, by_content=True)
    item = result.key(KEY)
    assert item.known_good == incident["v1"] and item.known_good_by == "content"
    assert "differs" in item.checked[incident["v2"]]
    assert stats(reader).bytes_downloaded == 2 * len(incident["good"])


def test_restore_known_good_writes_v1_bytes_verified(incident, options, tmp_path, case):
    out = tmp_path / "recovery"
    result = restore(f"s3://{incident['bucket']}/{KEY}", out,
                     known_good_manifest=incident["manifest"], client_options=options)
    record_step(case, from_library(result))  # the engine's one writer records it
    assert result.status == "verified" and result.version_id == incident["v1"]
    restored = out / KEY
    assert restored.read_bytes() == incident["good"]
    assert result.sha256 == hashlib.sha256(incident["good"]).hexdigest()
    assert result.detail["form"] == "full-object"
    record = json.loads((out / (KEY + ".restore.json")).read_text())
    assert record["version_id"] == incident["v1"]
    assert [f.code for f in case.findings()] == ["S3040"]
    # Never overwrites: a second restore into the same folder is refused.
    with pytest.raises(RefusedError):
        restore(f"s3://{incident['bucket']}/{KEY}", out, version=incident["v1"],
                client_options=options)
    assert restored.read_bytes() == incident["good"]


def test_restore_of_the_corrupted_version_by_id_is_kept_unverified_against_manifest(
        incident, options, tmp_path, writer):
    # v2's stored checksum matches its own bytes: it "verifies", but it is not the known-good.
    out = tmp_path / "r2"
    result = restore(f"s3://{incident['bucket']}/{KEY}", out, version=incident["v2"],
                     client_options=options)
    assert result.status == "verified"
    assert (out / KEY).read_bytes() == incident["bad"]
    # An object whose stored checksum is wrong is restored as .unverified, never as the file.
    writer.put_object(Bucket=incident["bucket"], Key="ckpt/lie.pt", Body=b"payload",
                      ChecksumAlgorithm="SHA256",
                      ChecksumSHA256="AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
    versions = writer.list_object_versions(Bucket=incident["bucket"], Prefix="ckpt/lie.pt")
    lie_version = versions["Versions"][0]["VersionId"]
    bad = restore(f"s3://{incident['bucket']}/ckpt/lie.pt", out, version=lie_version,
                  client_options=options)
    assert bad.status == "mismatch"
    assert not (out / "ckpt/lie.pt").exists()
    assert (out / "ckpt/lie.pt.unverified").read_bytes() == b"payload"


def _event(name, bucket, key, version, *, user, ip, agent, when, marker=False, by_id=None):
    request = {"bucketName": bucket, "Host": f"{bucket}.s3.us-east-1.amazonaws.com", "key": key}
    response = {"x-amz-version-id": version} if version and not by_id else None
    if marker:
        response = {"x-amz-version-id": version, "x-amz-delete-marker": "true"}
    if by_id:
        request["versionId"] = by_id
    return {
        "eventVersion": "1.09",
        "userIdentity": {"type": "IAMUser", "principalId": "AIDAEXAMPLE",
                         "arn": f"arn:aws:iam::111122223333:user/{user}",
                         "accountId": "111122223333", "accessKeyId": "AKIAIOSFODNN7EXAMPLE",
                         "userName": user},
        "eventTime": when, "eventSource": "s3.amazonaws.com", "eventName": name,
        "awsRegion": "us-east-1", "sourceIPAddress": ip, "userAgent": agent,
        "requestParameters": request, "responseElements": response,
        "additionalEventData": {"SignatureVersion": "SigV4", "bytesTransferredIn": 65536.0},
        "requestID": f"REQ{abs(hash((name, version))) % 10**8}",
        "eventID": f"evt-{name}-{version}", "readOnly": False,
        "resources": [{"type": "AWS::S3::Object", "ARN": f"arn:aws:s3:::{bucket}/{key}"},
                      {"accountId": "111122223333", "type": "AWS::S3::Bucket",
                       "ARN": f"arn:aws:s3:::{bucket}"}],
        "eventType": "AwsApiCall", "managementEvent": False, "recipientAccountId": "111122223333",
        "eventCategory": "Data",
    }


def test_cloudtrail_names_the_writer_of_the_corrupted_version(incident, options, tmp_path):
    b = incident["bucket"]
    trail = tmp_path / "AWSLogs" / "111122223333" / "CloudTrail" / "us-east-1" / "2026" / "11"
    trail.mkdir(parents=True)
    first = {"Records": [
        _event("PutObject", b, KEY, incident["v1"], user="trainer", ip="10.0.0.7",
               agent="Boto3/1.36.0 md/Botocore#1.36.0 ua/2.0 os/linux", when="2026-11-29T10:00:00Z"),
        _event("GetObject", b, KEY, None, user="reader", ip="10.0.0.9", agent="aws-cli/2.22",
               when="2026-11-29T10:30:00Z"),
    ]}
    second = {"Records": [
        _event("PutObject", b, KEY, incident["v2"], user="rogue-sync", ip="203.0.113.50",
               agent="rclone/v1.60.0", when="2026-11-29T11:00:00Z"),
        _event("DeleteObject", b, KEY, incident["marker"], user="cleanup-bot", ip="10.0.0.8",
               agent="aws-sdk-go/1.44", when="2026-11-29T11:05:00Z", marker=True),
        _event("PutObject", "other-bucket", KEY, incident["v2"], user="someone", ip="1.2.3.4",
               agent="x", when="2026-11-29T11:00:00Z"),
    ]}
    (trail / "111122223333_CloudTrail_us-east-1_20261129T1000Z_a.json").write_text(
        json.dumps(first))
    with gzip.open(trail / "111122223333_CloudTrail_us-east-1_20261129T1100Z_b.json.gz",
                   "wt") as fh:
        json.dump(second, fh)
    result = history(f"s3://{b}/{KEY}", client_options=options, cloudtrail=tmp_path / "AWSLogs")
    versions = {v["version_id"]: v for v in result.to_json()["keys"][0]["versions"]}
    (v2_event,) = versions[incident["v2"]]["events"]
    assert v2_event["principal"] == "arn:aws:iam::111122223333:user/rogue-sync"
    assert (v2_event["source_ip"], v2_event["user_agent"]) == ("203.0.113.50", "rclone/v1.60.0")
    assert v2_event["event_name"] == "PutObject" and v2_event["matched_by"] == "version-id"
    (v1_event,) = versions[incident["v1"]]["events"]
    assert v1_event["principal"].endswith("user/trainer")
    (marker_event,) = versions[incident["marker"]]["events"]
    assert marker_event["event_name"] == "DeleteObject"
    assert marker_event["principal"].endswith("user/cleanup-bot")
