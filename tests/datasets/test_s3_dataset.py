"""Datasets that live in S3: `manifest build` / `manifest audit` of an s3:// prefix against a
real moto server over HTTP, locally and on a Dask LocalCluster (workers read the objects where
they live). The manifest is what `sha256sum` gives for the same bytes on disk."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from cli_helpers import EXE

from fixtures.det import det_bytes

FILES = {"train/shard-000.tar": 70_000, "train/shard-001.tar": 5_000, "val/part.jsonl": 1_234,
         "README": 10}


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    from ckptrescue.stores.s3.localserver import start_local_s3

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    server = start_local_s3()
    local = tmp_path_factory.mktemp("local")
    try:
        client = server.writer_client()
        client.create_bucket(Bucket="data")
        for name, size in FILES.items():
            body = det_bytes(size, 1, name)
            (local / name).parent.mkdir(parents=True, exist_ok=True)
            (local / name).write_bytes(body)
            client.put_object(Bucket="data", Key=f"ds/{name}", Body=body)
        yield server, client, local
    finally:
        server.stop()


def _env(server) -> dict[str, str]:  # noqa: ANN001
    return {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def test_manifest_of_a_prefix_equals_sha256sum_of_the_same_bytes(bucket, tmp_path: Path) -> None:
    server, _client, local = bucket
    out = tmp_path / "ds.sha256"
    res = subprocess.run([EXE, "manifest", "build", "s3://data/ds/", "-o", str(out),
                          "--endpoint-url", server.endpoint_url, "--no-progress"],
                         capture_output=True, text=True, env=_env(server), timeout=300)
    assert res.returncode == 0, res.stderr
    expected = subprocess.run(["sha256sum", *sorted(FILES)], cwd=local, capture_output=True,
                              check=True).stdout
    assert out.read_bytes() == expected
    # the same manifest checks the local copy with the real sha256sum
    subprocess.run(["sha256sum", "--strict", "-c", str(out)], cwd=local, check=True,
                   capture_output=True)


def test_audit_of_a_prefix_names_each_damaged_object(bucket, tmp_path: Path) -> None:
    server, client, local = bucket
    out = tmp_path / "ds.sha256"
    subprocess.run([EXE, "manifest", "build", "s3://data/ds", "-o", str(out),
                    "--endpoint-url", server.endpoint_url, "--no-progress"], check=True,
                   capture_output=True, env=_env(server), timeout=300)
    good = (local / "train/shard-001.tar").read_bytes()
    try:
        client.put_object(Bucket="data", Key="ds/train/shard-001.tar",
                          Body=bytes([good[0] ^ 1]) + good[1:])           # same size: corrupted
        client.put_object(Bucket="data", Key="ds/val/part.jsonl", Body=b"short")  # changed
        client.delete_object(Bucket="data", Key="ds/README")              # missing
        client.put_object(Bucket="data", Key="ds/extra.bin", Body=b"new")  # new
        res = subprocess.run([EXE, "manifest", "audit", "s3://data/ds/", str(out), "--json",
                              "--endpoint-url", server.endpoint_url, "--no-progress"],
                             capture_output=True, text=True, env=_env(server), timeout=300)
    finally:
        client.put_object(Bucket="data", Key="ds/train/shard-001.tar", Body=good)
        client.put_object(Bucket="data", Key="ds/val/part.jsonl",
                          Body=(local / "val/part.jsonl").read_bytes())
        client.put_object(Bucket="data", Key="ds/README", Body=(local / "README").read_bytes())
        client.delete_object(Bucket="data", Key="ds/extra.bin")
    assert res.returncode == 1, res.stderr
    status = {f["path"]: f["status"] for f in json.loads(res.stdout)["files"]}
    assert status == {"README": "missing", "extra.bin": "new", "train/shard-000.tar": "ok",
                      "train/shard-001.tar": "corrupted", "val/part.jsonl": "changed"}


def test_workers_read_the_objects_where_they_live(bucket, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    server, _client, _local = bucket
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=40)
    try:
        local_out, remote_out = tmp_path / "a.sha256", tmp_path / "b.sha256"
        for out, extra in ((local_out, []), (remote_out, ["--scheduler",
                                                          cluster.scheduler_address])):
            subprocess.run([EXE, "manifest", "build", "s3://data/ds/", "-o", str(out),
                            "--endpoint-url", server.endpoint_url, "--no-progress", *extra],
                           check=True, capture_output=True, env=_env(server), timeout=300)
        assert remote_out.read_bytes() == local_out.read_bytes()
    finally:
        cluster.close()
