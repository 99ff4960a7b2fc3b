"""The launch gate on an s3:// prefix, against a real moto server over HTTP: one listing, the
sampled objects checked against their stored full-object SHA-256 (no bytes read) or downloaded
when the store holds none; objects written again since the manifest are always checked."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from cli_helpers import EXE

from ckptrescue.datasets.gate import gate_dataset
from ckptrescue.datasets.manifest import build_manifest
from fixtures.det import det_bytes

NAMES = [f"train/part-{i:02d}.bin" for i in range(16)]


@pytest.fixture
def store(tmp_path: Path):  # noqa: ANN201
    from ckptrescue.stores.s3.localserver import start_local_s3

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    srv = start_local_s3()
    try:
        writer = srv.writer_client()
        writer.create_bucket(Bucket="gate")
        objects = {n: det_bytes(2000 + i, "gate", i) for i, n in enumerate(NAMES)}
        for name, body in objects.items():
            writer.put_object(Bucket="gate", Key=f"ds/{name}", Body=body,
                              ChecksumAlgorithm="SHA256")
        manifest = tmp_path / "ds.sha256"
        build_manifest("s3://gate/ds/", manifest, endpoint_url=srv.endpoint_url)
        yield srv, writer, objects, manifest
    finally:
        srv.stop()


def test_an_unchanged_prefix_passes_without_a_byte_downloaded(store) -> None:  # noqa: ANN001
    srv, _writer, _objects, manifest = store
    result = gate_dataset("s3://gate/ds/", manifest, sample=1.0, seed=3,
                          endpoint_url=srv.endpoint_url)
    assert result.passed, result.reason
    assert result.checked == len(NAMES) and sorted(result.hashed) == NAMES
    assert result.hashed_bytes == 0 and "0 bytes downloaded" in result.reason


def test_an_object_written_again_is_always_checked(store) -> None:  # noqa: ANN001
    srv, writer, objects, manifest = store
    bad = bytearray(objects[NAMES[5]])
    bad[7] ^= 0x10  # same size: only the content tells
    writer.put_object(Bucket="gate", Key=f"ds/{NAMES[5]}", Body=bytes(bad),
                      ChecksumAlgorithm="SHA256")
    # a sample of 1 (seed 0) that does not draw it still checks it: its ETag changed
    result = gate_dataset("s3://gate/ds/", manifest, sample_count=1, seed=0,
                          endpoint_url=srv.endpoint_url)
    assert not result.passed and NAMES[5] in result.hashed
    assert result.problems == [{"path": NAMES[5], "problem": "SHA-256 differs from the manifest"}]
    assert result.hashed_bytes == 0  # the stored SHA-256 told, nothing was read
    strict = gate_dataset("s3://gate/ds/", manifest, sample=0, strict_mtime=True,
                          endpoint_url=srv.endpoint_url)
    assert strict.problems[0]["problem"].startswith("written again since the manifest")


def test_objects_without_a_stored_sha256_are_downloaded(store) -> None:  # noqa: ANN001
    srv, _writer, _objects, _manifest = store
    plain = srv.writer_client(default_checksums=False)
    body = det_bytes(4096, "plain")
    plain.put_object(Bucket="gate", Key="plain/a.bin", Body=body)
    manifest = Path(str(_manifest) + ".plain")
    build_manifest("s3://gate/plain/", manifest, endpoint_url=srv.endpoint_url)
    result = gate_dataset("s3://gate/plain/", manifest, sample_count=1, seed=1,
                          endpoint_url=srv.endpoint_url)
    assert result.passed and result.hashed_bytes == len(body)


def test_the_cli_exit_status_is_the_go_no_go(store) -> None:  # noqa: ANN001
    srv, writer, _objects, manifest = store
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    argv = [EXE, "gate", "s3://gate/ds/", "--manifest", str(manifest), "--sample-count", "4",
            "--seed", "9", "--endpoint-url", srv.endpoint_url, "--json"]
    ok = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["passed"] is True
    writer.delete_object(Bucket="gate", Key=f"ds/{NAMES[0]}")
    gone = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert gone.returncode == 1
    assert {"path": NAMES[0], "problem": "missing"} in json.loads(gone.stdout)["problems"]
    # a checkpoint in a store is probe's job: one line, exit 2
    other = subprocess.run([EXE, "gate", "s3://gate/ds/model.pt"], capture_output=True,
                           text=True, env=env, timeout=60)
    assert other.returncode == 2 and "Traceback" not in other.stderr
    assert "ckptrescue probe URL" in other.stderr


def test_objects_the_manifest_does_not_list_fail_closed(store) -> None:  # noqa: ANN001
    srv, writer, _objects, manifest = store
    writer.put_object(Bucket="gate", Key="ds/late.bin", Body=b"added after the manifest",
                      ChecksumAlgorithm="SHA256")
    result = gate_dataset("s3://gate/ds/", manifest, sample=0, endpoint_url=srv.endpoint_url)
    assert not result.passed and result.unverified == ["late.bin"]
    assert gate_dataset("s3://gate/ds/", manifest, sample=0, endpoint_url=srv.endpoint_url,
                        allow_unverified=True).passed
