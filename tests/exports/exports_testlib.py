"""Helpers of the export tests (writing checkpoints, hashing trees, CloudTrail events)."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

HOSTILE_KEY = '=HYPERLINK("http://evil.example/x","ok")/step-300.safetensors'
HOSTILE_LOG = "=cmd|' /C calc'!A0 injected by a log line"


def write_safetensors(path: Path, tensors: dict[str, list[float]]) -> bytes:
    """A real safetensors file (JSON header, little-endian F32 payloads)."""
    header: dict[str, Any] = {}
    data = b""
    for name, values in tensors.items():
        raw = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": [len(values)],
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    blob = struct.pack("<Q", len(head)) + head + data
    path.write_bytes(blob)
    return blob


def tree_sha256(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def cloudtrail_event(name: str, bucket: str, key: str, version: str | None, *, user: str,
                      ip: str, when: str) -> dict[str, Any]:
    return {
        "eventVersion": "1.09",
        "userIdentity": {"type": "IAMUser", "principalId": "AIDAEXAMPLE",
                         "arn": f"arn:aws:iam::111122223333:user/{user}",
                         "accountId": "111122223333", "userName": user},
        "eventTime": when, "eventSource": "s3.amazonaws.com", "eventName": name,
        "awsRegion": "us-east-1", "sourceIPAddress": ip, "userAgent": "rclone/v1.60.0",
        "requestParameters": {"bucketName": bucket, "key": key},
        "responseElements": {"x-amz-version-id": version} if version else None,
        "requestID": f"REQ-{name}-{version}", "eventID": f"evt-{name}-{version}",
        "readOnly": False, "eventType": "AwsApiCall", "managementEvent": False,
        "eventCategory": "Data",
        "resources": [{"type": "AWS::S3::Object", "ARN": f"arn:aws:s3:::{bucket}/{key}"}],
    }
