"""``s3://bucket/key`` parsing (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from ckptrescue.errors import UsageError


@dataclass(frozen=True)
class S3Url:
    bucket: str
    key: str = ""

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def child(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"


def parse_s3_url(url: str, *, need_key: bool = False) -> S3Url:
    """Split ``s3://BUCKET[/KEY_OR_PREFIX]``; a one-line UsageError otherwise."""
    if not url.startswith("s3://"):
        raise UsageError(f"{url}: not an s3:// URL (expected s3://BUCKET/KEY)")
    rest = url[len("s3://") :]
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise UsageError(f"{url}: no bucket name")
    if need_key and not key:
        raise UsageError(f"{url}: no object key (expected s3://BUCKET/KEY)")
    return S3Url(bucket=bucket, key=key)
