"""Helpers shared by the S3 tests (writing fixtures with a plain boto3 client)."""

from __future__ import annotations

import base64
import hashlib
import os
import sys
from pathlib import Path

from cli_helpers import run_cli

MiB = 1 << 20


def sha256_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def put_multipart(client, bucket: str, key: str, parts: list[bytes], *,
                  algorithm: str | None = "SHA256", checksum_type: str | None = None) -> dict:
    """A real multipart upload with per-part checksums (or none when ``algorithm`` is None)."""
    create = {"Bucket": bucket, "Key": key}
    if algorithm:
        create["ChecksumAlgorithm"] = algorithm
    if checksum_type:
        create["ChecksumType"] = checksum_type
    upload_id = client.create_multipart_upload(**create)["UploadId"]
    done = []
    for number, body in enumerate(parts, 1):
        kwargs = {"Bucket": bucket, "Key": key, "PartNumber": number, "UploadId": upload_id,
                  "Body": body}
        if algorithm:
            kwargs["ChecksumAlgorithm"] = algorithm
        response = client.upload_part(**kwargs)
        part = {"PartNumber": number, "ETag": response["ETag"]}
        for name, value in response.items():
            if name.startswith("Checksum") and name != "ChecksumType" and isinstance(value, str):
                part[name] = value
        done.append(part)
    complete = {"Bucket": bucket, "Key": key, "UploadId": upload_id,
                "MultipartUpload": {"Parts": done}}
    if checksum_type:
        complete["ChecksumType"] = checksum_type
    return client.complete_multipart_upload(**complete)


def write_local(root: Path, rel: str, data: bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def tree_sha256(root: Path) -> dict[str, str]:
    """Hash every file under ``root`` (evidence before/after checks)."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


CLI = str(Path(sys.executable).parent / "ckptrescue")


def run(args, *, env_extra=None, creds=True, timeout=120):
    """Run the installed console script with a clean AWS environment (no host credentials)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({"AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
                "AWS_EC2_METADATA_DISABLED": "true", "AWS_DEFAULT_REGION": "us-east-1"})
    if creds:
        env.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"})
    env.update(env_extra or {})
    return run_cli(*args, env=env, timeout=timeout)
