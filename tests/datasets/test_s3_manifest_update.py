"""`manifest update s3://…` against a real moto server over HTTP: only objects whose size or
ETag changed (or that are new) are read again; the result equals a fresh build of the prefix."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from ckptrescue.datasets.manifest import build_manifest, sidecar_path
from ckptrescue.datasets.manifest_update import prev_path, update_manifest
from fixtures.det import det_bytes

NAMES = [f"shard-{i:03d}.bin" for i in range(12)]


@pytest.fixture
def server():  # noqa: ANN201
    from ckptrescue.stores.s3.localserver import start_local_s3

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    srv = start_local_s3()
    try:
        yield srv
    finally:
        srv.stop()


def _fill(writer, bucket: str) -> dict[str, bytes]:  # noqa: ANN001
    writer.create_bucket(Bucket=bucket)
    objects = {name: det_bytes(3000 + 17 * i, "upd", i) for i, name in enumerate(NAMES)}
    for name, body in objects.items():
        writer.put_object(Bucket=bucket, Key=f"ds/{name}", Body=body)
    return objects


def test_only_changed_and_new_objects_are_read_again(server, tmp_path: Path) -> None:
    writer = server.writer_client()
    objects = _fill(writer, "upd")
    url, ep = "s3://upd/ds/", server.endpoint_url
    manifest = tmp_path / "ds.sha256"
    build_manifest(url, manifest, endpoint_url=ep)
    side = [json.loads(line) for line in sidecar_path(manifest).read_text().splitlines()]
    assert all(row["etag"] for row in side)  # recorded at build time
    before = manifest.read_bytes()

    flipped = bytearray(objects["shard-003.bin"])
    flipped[100] ^= 0x01  # same size, other content: a new ETag
    writer.put_object(Bucket="upd", Key="ds/shard-003.bin", Body=bytes(flipped))
    writer.put_object(Bucket="upd", Key="ds/shard-004.bin", Body=objects["shard-004.bin"])
    writer.put_object(Bucket="upd", Key="ds/new.bin", Body=det_bytes(999, "new"))
    writer.delete_object(Bucket="upd", Key="ds/shard-007.bin")

    result = update_manifest(url, manifest, endpoint_url=ep)
    assert result.new == [b"new.bin"] and result.changed == [b"shard-003.bin"]
    assert result.deleted == [b"shard-007.bin"]
    # shard-004 was written again with the same bytes: same ETag, not read again
    assert result.hashed == 2 and result.reused == len(NAMES) - 2
    assert result.bytes_hashed == len(flipped) + 999
    assert prev_path(manifest).read_bytes() == before

    fresh = tmp_path / "fresh.sha256"
    build_manifest(url, fresh, endpoint_url=ep)
    assert manifest.read_bytes() == fresh.read_bytes()


def test_a_sidecar_without_etags_compares_last_modified(server, tmp_path: Path) -> None:
    writer = server.writer_client()
    objects = _fill(writer, "old")
    url, ep = "s3://old/ds/", server.endpoint_url
    manifest = tmp_path / "ds.sha256"
    build_manifest(url, manifest, endpoint_url=ep)
    side = sidecar_path(manifest)
    rows = [json.loads(line) for line in side.read_text().splitlines()]
    side.write_text("".join(json.dumps({k: v for k, v in r.items()
                                        if k not in ("etag", "version_id")}) + "\n"
                            for r in rows))
    # LastModified has one-second resolution in S3: the rewrite must land in a later second
    time.sleep(1.1)
    other = bytearray(objects["shard-005.bin"])
    other[0] ^= 0xFF
    writer.put_object(Bucket="old", Key="ds/shard-005.bin", Body=bytes(other))
    result = update_manifest(url, manifest, endpoint_url=ep)
    assert result.changed == [b"shard-005.bin"] and result.hashed == 1
    assert result.reused == len(NAMES) - 1
    # every entry now carries an ETag for the next update
    assert all(json.loads(line).get("etag") for line in side.read_text().splitlines())


def test_versioned_bucket_records_the_version_read(server, tmp_path: Path) -> None:
    writer = server.writer_client()
    writer.create_bucket(Bucket="ver")
    writer.put_bucket_versioning(Bucket="ver", VersioningConfiguration={"Status": "Enabled"})
    put = writer.put_object(Bucket="ver", Key="ds/a.bin", Body=det_bytes(500, "v1"))
    manifest = tmp_path / "v.sha256"
    build_manifest("s3://ver/ds/", manifest, endpoint_url=server.endpoint_url)
    row = json.loads(sidecar_path(manifest).read_text())
    assert row["version_id"] == put["VersionId"]
    put2 = writer.put_object(Bucket="ver", Key="ds/a.bin", Body=det_bytes(500, "v2"))
    result = update_manifest("s3://ver/ds/", manifest, endpoint_url=server.endpoint_url)
    assert result.changed == [b"a.bin"]
    assert json.loads(sidecar_path(manifest).read_text())["version_id"] == put2["VersionId"]


def test_the_command_line_updates_a_prefix(server, tmp_path: Path) -> None:  # noqa: ANN001
    import subprocess
    import sys

    writer = server.writer_client()
    _fill(writer, "cli")
    manifest = tmp_path / "ds.sha256"
    build_manifest("s3://cli/ds/", manifest, endpoint_url=server.endpoint_url)
    writer.put_object(Bucket="cli", Key="ds/extra.bin", Body=det_bytes(77, "extra"))
    exe = str(Path(sys.executable).with_name("ckptrescue"))
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    res = subprocess.run([exe, "manifest", "update", "s3://cli/ds/", str(manifest), "--json",
                          "--no-progress", "--endpoint-url", server.endpoint_url],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["new"] == ["extra.bin"] and out["hashed"] == 1 and out["reused"] == len(NAMES)


def test_an_update_checks_the_prev_pair_before_listing_the_bucket(server, tmp_path: Path,
                                                                  monkeypatch) -> None:  # noqa: ANN001
    """A FIFO at MANIFEST.prev was found only at the renames, after every changed object was
    read; the four names are checked before the bucket is listed (as a local update does)."""
    from ckptrescue.datasets import s3_manifest_update
    from ckptrescue.errors import RefusedError

    writer = server.writer_client()
    _fill(writer, "upd2")
    url, ep = "s3://upd2/ds/", server.endpoint_url
    manifest = tmp_path / "ds.sha256"
    build_manifest(url, manifest, endpoint_url=ep)
    os.mkfifo(prev_path(manifest))
    listed: list[str] = []
    real = s3_manifest_update.list_objects
    monkeypatch.setattr(s3_manifest_update, "list_objects",
                        lambda *a, **k: listed.append("listed") or real(*a, **k))
    with pytest.raises(RefusedError, match="a FIFO"):
        update_manifest(url, manifest, endpoint_url=ep)
    assert listed == [] and prev_path(manifest).is_fifo()


def test_one_writer_of_a_manifest_of_a_prefix_at_a_time(tmp_path: Path, server) -> None:  # noqa: ANN001
    from ckptrescue.datasets.build_store import writing
    from ckptrescue.errors import UsageError

    writer = server.writer_client()
    _fill(writer, "one")
    url = "s3://one/ds"
    out = tmp_path / "ds.sha256"
    build_manifest(url, out, endpoint_url=server.endpoint_url)
    before = out.read_bytes()
    with writing(out):  # another build or update of this manifest is running
        for run in (lambda: build_manifest(url, out, endpoint_url=server.endpoint_url),
                    lambda: update_manifest(url, out, endpoint_url=server.endpoint_url)):
            with pytest.raises(UsageError, match="another manifest build or update"):
                run()
    assert out.read_bytes() == before and not prev_path(out).exists()
    assert update_manifest(url, out, endpoint_url=server.endpoint_url).files == len(NAMES)
