"""`manifest build --checksums` records the CRCs S3 stores; `manifest audit s3://…` then checks
objects uploaded with a CRC (the SDKs' default) against the store's own full-object CRC without
downloading them — against a real moto server over HTTP. The manifest is built from the LOCAL
copy, then the files are uploaded: the end-to-end case (what the store holds is what was
hashed before the upload)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
from cli_helpers import EXE

from ckptrescue.datasets.gate import gate_dataset
from ckptrescue.datasets.manifest import build_manifest, sidecar_path
from ckptrescue.datasets.s3dataset import DOWNLOADED, STORED, audit_s3
from fixtures.det import det_bytes

# each object uploaded with another algorithm (None: no checksum at all)
UPLOADS = {"a.bin": "CRC64NVME", "b.bin": "CRC32C", "c.bin": "CRC32", "d.bin": "SHA256",
           "e.bin": None}


@pytest.fixture
def uploaded(tmp_path: Path):  # noqa: ANN201
    from ckptrescue.stores.s3.localserver import start_local_s3

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    local = tmp_path / "ds"
    local.mkdir()
    for i, name in enumerate(UPLOADS):
        (local / name).write_bytes(det_bytes(5000 + 111 * i, "crc", name))
    manifest = tmp_path / "ds.sha256"
    result = build_manifest(local, manifest, jobs=1, checksums=("crc64nvme", "CRC32C", "CRC32"))
    assert all(set(e.checksums or ()) == {"CRC64NVME", "CRC32C", "CRC32"} for e in result.entries)
    srv = start_local_s3()
    try:
        writer = srv.writer_client(default_checksums=False)
        writer.create_bucket(Bucket="crcs")
        for name, alg in UPLOADS.items():
            extra = {"ChecksumAlgorithm": alg} if alg else {}
            writer.put_object(Bucket="crcs", Key=f"ds/{name}", Body=(local / name).read_bytes(),
                              **extra)
        yield srv, writer, local, manifest
    finally:
        srv.stop()


def test_objects_with_a_recorded_crc_are_not_downloaded(uploaded) -> None:  # noqa: ANN001
    srv, _writer, local, manifest = uploaded
    result = audit_s3("s3://crcs/ds/", manifest, endpoint_url=srv.endpoint_url)
    assert result.ok and result.counts["ok"] == len(UPLOADS)
    assert result.verified == {b"a.bin": "stored-crc64nvme", b"b.bin": "stored-crc32c",
                               b"c.bin": "stored-crc32", b"d.bin": STORED, b"e.bin": DOWNLOADED}
    # only the object with no stored checksum at all was read
    assert result.bytes_downloaded == (local / "e.bin").stat().st_size
    assert "3 against a stored CRC, 1 downloaded" in result.answer()


def test_a_crc_that_differs_means_download_and_the_real_sha256(uploaded) -> None:  # noqa: ANN001
    srv, writer, local, manifest = uploaded
    bad = bytearray((local / "a.bin").read_bytes())
    bad[123] ^= 0x04  # same size: the store computes a new CRC64NVME on this upload
    writer.put_object(Bucket="crcs", Key="ds/a.bin", Body=bytes(bad),
                      ChecksumAlgorithm="CRC64NVME")
    result = audit_s3("s3://crcs/ds/", manifest, endpoint_url=srv.endpoint_url)
    row = next(r for r in result.files if r.rel == b"a.bin")
    assert row.status == "corrupted" and row.actual == hashlib.sha256(bad).hexdigest()
    assert result.verified[b"a.bin"] == DOWNLOADED
    assert result.bytes_downloaded == len(bad) + (local / "e.bin").stat().st_size


def test_a_manifest_without_crcs_downloads_them(uploaded, tmp_path: Path) -> None:  # noqa: ANN001
    srv, _writer, local, _manifest = uploaded
    plain = tmp_path / "plain.sha256"
    build_manifest(local, plain, jobs=1)
    assert "checksums" not in sidecar_path(plain).read_text()
    result = audit_s3("s3://crcs/ds/", plain, endpoint_url=srv.endpoint_url)
    assert result.ok and set(result.verified.values()) == {STORED, DOWNLOADED}
    assert sum(v == DOWNLOADED for v in result.verified.values()) == 4


def test_the_gate_uses_the_recorded_crcs_too(uploaded) -> None:  # noqa: ANN001
    srv, _writer, _local, manifest = uploaded
    result = gate_dataset("s3://crcs/ds/", manifest, sample_count=4, seed=5,
                          endpoint_url=srv.endpoint_url)
    assert result.passed, result.reason
    # a, b, c by CRC and d by SHA-256 cost nothing; e (no stored checksum) only if sampled
    sampled_e = "e.bin" in result.hashed
    assert result.hashed_bytes == (5000 + 4 * 111 if sampled_e else 0)


def test_the_cli_flag_and_a_bad_algorithm(uploaded, tmp_path: Path) -> None:  # noqa: ANN001
    _srv, _writer, local, _manifest = uploaded
    out = tmp_path / "cli.sha256"
    res = subprocess.run([EXE, "manifest", "build", str(local), "-o", str(out), "--no-progress",
                          "--checksums", "CRC64NVME,crc32c", "--checksums", "CRC32"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in sidecar_path(out).read_text().splitlines()]
    assert all(set(r["checksums"]) == {"CRC64NVME", "CRC32C", "CRC32"} for r in rows)
    bad = subprocess.run([EXE, "manifest", "build", str(local), "-o", str(tmp_path / "x"),
                          "--checksums", "MD5"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "not one of CRC64NVME, CRC32C, CRC32" in bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp_path / "x").exists()
