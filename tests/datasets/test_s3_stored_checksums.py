"""`manifest audit s3://…` uses the store's own full-object SHA-256 (HeadObject with
ChecksumMode=ENABLED) instead of downloading, against a real moto server over HTTP. Objects are
written with a plain boto3 client (the kit's client is read-only); the manifest is hashlib's
SHA-256 of the bytes written (hex, sha256sum format) while the store speaks Base64."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
from cli_helpers import EXE

from ckptrescue.datasets.s3dataset import DOWNLOADED, STORED, audit_s3, full_object_sha256
from fixtures.det import det_bytes

MiB = 1 << 20


@pytest.fixture(scope="module")
def server():  # noqa: ANN201
    from ckptrescue.stores.s3.localserver import start_local_s3

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    srv = start_local_s3()
    try:
        srv.writer_client().create_bucket(Bucket="sums")
        yield srv
    finally:
        srv.stop()


def _manifest(path: Path, objects: dict[str, bytes]) -> Path:
    """sha256sum text and its JSON-lines sidecar (sizes), as `manifest build` writes them."""
    lines, side = [], []
    for name in sorted(objects):
        sha = hashlib.sha256(objects[name]).hexdigest()
        lines.append(f"{sha}  {name}\n")
        side.append(json.dumps({"path": name, "size": len(objects[name]), "mtime_ns": 0,
                                "sha256": sha}) + "\n")
    path.write_text("".join(lines))
    Path(f"{path}.jsonl").write_text("".join(side))
    return path


def _put(writer, prefix: str, objects: dict[str, bytes], **kw) -> None:  # noqa: ANN001, ANN003
    for name, body in objects.items():
        writer.put_object(Bucket="sums", Key=f"{prefix}/{name}", Body=body, **kw)


def _multipart(writer, key: str, parts: list[bytes], **create) -> None:  # noqa: ANN001, ANN003
    up = writer.create_multipart_upload(Bucket="sums", Key=key, ChecksumAlgorithm="SHA256",
                                        **create)
    done = []
    for number, body in enumerate(parts, 1):
        r = writer.upload_part(Bucket="sums", Key=key, UploadId=up["UploadId"],
                               PartNumber=number, Body=body, ChecksumAlgorithm="SHA256")
        done.append({"PartNumber": number, "ETag": r["ETag"],
                     "ChecksumSHA256": r["ChecksumSHA256"]})
    writer.complete_multipart_upload(Bucket="sums", Key=key, UploadId=up["UploadId"],
                                     MultipartUpload={"Parts": done})


def test_fifty_objects_with_stored_sha256_are_audited_without_a_byte_read(server,
                                                                         tmp_path: Path) -> None:
    writer = server.writer_client()
    objects = {f"shard-{i:03d}.bin": det_bytes(1000 + i, 1, i) for i in range(50)}
    _put(writer, "sha", objects, ChecksumAlgorithm="SHA256")
    manifest = _manifest(tmp_path / "sha.sha256", objects)

    result = audit_s3("s3://sums/sha/", manifest, endpoint_url=server.endpoint_url)
    assert result.counts["ok"] == 50 and result.ok
    assert result.bytes_downloaded == 0
    assert set(result.verified.values()) == {STORED} and len(result.verified) == 50
    assert "50 checked against the store's SHA-256, 0 downloaded (0 bytes read)" in \
        result.answer()

    # the CLI says the same, per object
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    res = subprocess.run([EXE, "manifest", "audit", "s3://sums/sha", str(manifest), "--json",
                          "--endpoint-url", server.endpoint_url, "--no-progress"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert {f["verified"] for f in out["files"]} == {STORED}
    assert "(0 bytes read)" in out["answer"] and out["bytes_downloaded"] == 0

    # --no-stored-checksums: the responder does not trust the store; every byte is read
    res = subprocess.run([EXE, "manifest", "audit", "s3://sums/sha", str(manifest), "--json",
                          "--endpoint-url", server.endpoint_url, "--no-progress",
                          "--no-stored-checksums"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert {f["verified"] for f in out["files"]} == {DOWNLOADED}
    assert out["bytes_downloaded"] == sum(len(b) for b in objects.values())
    assert out["counts"]["ok"] == 50

    # overwritten: same size (corrupted) and another size (changed); still nothing read
    same = bytearray(objects["shard-007.bin"])
    same[10] ^= 0xFF
    writer.put_object(Bucket="sums", Key="sha/shard-007.bin", Body=bytes(same),
                      ChecksumAlgorithm="SHA256")
    writer.put_object(Bucket="sums", Key="sha/shard-008.bin", Body=b"other",
                      ChecksumAlgorithm="SHA256")
    try:
        result = audit_s3("s3://sums/sha/", manifest, endpoint_url=server.endpoint_url)
    finally:
        _put(writer, "sha", {k: objects[k] for k in ("shard-007.bin", "shard-008.bin")},
             ChecksumAlgorithm="SHA256")
    status = {r.rel.decode(): r.status for r in result.files}
    assert status.pop("shard-007.bin") == "corrupted"
    assert status.pop("shard-008.bin") == "changed"
    assert set(status.values()) == {"ok"}
    assert result.bytes_downloaded == 0
    bad = next(r for r in result.files if r.rel == b"shard-007.bin")
    assert bad.actual == hashlib.sha256(bytes(same)).hexdigest()  # Base64 from the store -> hex
    assert bad.reason == "the store's SHA-256 differs"


def test_objects_without_a_stored_sha256_are_downloaded_and_verified(server,
                                                                     tmp_path: Path) -> None:
    bare = {f"bare-{i}.bin": det_bytes(2000 + i, 2, i) for i in range(5)}     # no checksum at all
    crc = {f"crc-{i}.bin": det_bytes(3000 + i, 3, i) for i in range(5)}       # boto3's default CRC32
    _put(server.writer_client(default_checksums=False), "plain", bare)
    _put(server.writer_client(), "plain", crc)
    manifest = _manifest(tmp_path / "plain.sha256", {**bare, **crc})

    result = audit_s3("s3://sums/plain", manifest, endpoint_url=server.endpoint_url)
    assert result.ok and result.counts["ok"] == 10
    assert set(result.verified.values()) == {DOWNLOADED}
    assert result.bytes_downloaded == sum(len(b) for b in (*bare.values(), *crc.values()))

    # and a damaged one is found by its download
    writer = server.writer_client(default_checksums=False)
    writer.put_object(Bucket="sums", Key="plain/bare-0.bin", Body=bytes(len(bare["bare-0.bin"])))
    try:
        result = audit_s3("s3://sums/plain", manifest, endpoint_url=server.endpoint_url)
    finally:
        _put(writer, "plain", {"bare-0.bin": bare["bare-0.bin"]})
    assert {r.rel: r.status for r in result.files if r.status != "ok"} == \
        {b"bare-0.bin": "corrupted"}


def test_a_composite_multipart_sha256_is_not_trusted(server, tmp_path: Path) -> None:
    writer = server.writer_client()
    parts = [det_bytes(5 * MiB, 4), det_bytes(1234, 5)]
    _multipart(writer, "mpu/implicit.bin", parts)                            # type left default
    _multipart(writer, "mpu/composite.bin", parts, ChecksumType="COMPOSITE")  # type explicit
    small = {"single.bin": det_bytes(100, 6)}
    _put(writer, "mpu", small, ChecksumAlgorithm="SHA256")
    whole = b"".join(parts)
    manifest = _manifest(tmp_path / "mpu.sha256",
                         {"implicit.bin": whole, "composite.bin": whole, **small})

    result = audit_s3("s3://sums/mpu/", manifest, endpoint_url=server.endpoint_url)
    assert result.ok, [(r.rel, r.status) for r in result.files]
    assert result.verified == {b"composite.bin": DOWNLOADED, b"implicit.bin": DOWNLOADED,
                               b"single.bin": STORED}
    assert result.bytes_downloaded == 2 * len(whole)


def test_workers_audit_against_stored_checksums_too(server, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    writer = server.writer_client()
    stored = {f"s{i}.bin": det_bytes(500, 7, i) for i in range(3)}
    bare = {f"b{i}.bin": det_bytes(700, 8, i) for i in range(2)}
    _put(writer, "dask", stored, ChecksumAlgorithm="SHA256")
    _put(server.writer_client(default_checksums=False), "dask", bare)
    manifest = _manifest(tmp_path / "dask.sha256", {**stored, **bare})
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=40)
    try:
        result = audit_s3("s3://sums/dask/", manifest, endpoint_url=server.endpoint_url,
                          scheduler=cluster.scheduler_address)
    finally:
        cluster.close()
    assert result.ok
    assert sorted(result.verified.values()) == [DOWNLOADED] * 2 + [STORED] * 3
    assert result.bytes_downloaded == 1400


def _b64(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


@pytest.mark.parametrize(("head", "trusted"), [
    ({"ChecksumSHA256": _b64(b"x"), "ChecksumType": "FULL_OBJECT", "ETag": '"a-2"'}, True),
    ({"ChecksumSHA256": _b64(b"x"), "ETag": '"0cc175b9c0f1b6a831c399e269772661"'}, True),
    ({"ChecksumSHA256": _b64(b"x"), "ChecksumType": "COMPOSITE", "ETag": '"abc"'}, False),
    ({"ChecksumSHA256": _b64(b"x") + "-3", "ETag": '"abc"'}, False),          # AWS GET form
    ({"ChecksumSHA256": _b64(b"x"), "ETag": '"abc-3"'}, False),               # moto HEAD form
    ({"ChecksumSHA256": _b64(b"x"), "PartsCount": 2}, False),
    ({"ChecksumSHA256": "AAAA", "ChecksumType": "FULL_OBJECT"}, False),       # wrong width
    ({"ChecksumCRC64NVME": "J6/OGi3N3RM=", "ChecksumType": "FULL_OBJECT"}, False),
])
def test_which_stored_values_count_as_a_full_object_sha256(head: dict, trusted: bool) -> None:
    got = full_object_sha256(head)
    assert got == (hashlib.sha256(b"x").hexdigest() if trusted else None)
