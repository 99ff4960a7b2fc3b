"""``s3 preflight``: can this bucket still give us immutable copies? (read-only checks)

Versioning status, MFA delete, Object Lock configuration and default retention. A bucket keeps
immutable history only with versioning Enabled *and* Object Lock; without versioning an overwrite
or delete is final — the responder should copy (``s3 preserve``) before anything else runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ckptrescue.model import ArtifactData, Finding, Recorded, Severity
from ckptrescue.stores.s3.client import (
    ClientOptions,
    error_code,
    is_access_denied,
    make_client,
    translate_error,
)
from ckptrescue.stores.s3.urls import parse_s3_url


@dataclass
class PreflightResult(Recorded):
    bucket: str
    versioning: str  # Enabled | Suspended | Never enabled | unknown (...)
    mfa_delete: str | None
    object_lock: str  # Enabled | not configured | unknown (...)
    default_retention: dict[str, Any] | None
    region: str | None
    verdict: str  # immutable | versioned | unprotected | unknown
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "bucket": self.bucket,
            "region": self.region,
            "versioning": self.versioning,
            "mfa_delete": self.mfa_delete,
            "object_lock": self.object_lock,
            "default_retention": self.default_retention,
            "verdict": self.verdict,
            "warnings": self.warnings,
        }

    def findings(self) -> list[Finding]:
        url = f"s3://{self.bucket}"
        out = []
        if self.versioning != "Enabled":
            out.append(Finding(code="S3020", severity=Severity.WARNING,
                               title=f"{self.bucket}: versioning is {self.versioning}",
                               evidence=url, source="s3.preflight", details=self.to_json()))
        if self.object_lock != "Enabled":
            out.append(Finding(code="S3021", severity=Severity.WARNING,
                               title=f"{self.bucket}: Object Lock is {self.object_lock}",
                               evidence=url, source="s3.preflight", details=self.to_json()))
        if self.verdict == "immutable":
            out.append(Finding(code="S3022", severity=Severity.INFO,
                               title=f"{self.bucket}: versioning and Object Lock keep immutable "
                                     "versions", evidence=url, source="s3.preflight",
                               details=self.to_json()))
        return out


def preflight(
    bucket_url: str,
    *,
    client_options: ClientOptions | None = None,
    client: Any = None,
) -> PreflightResult:
    """Read the bucket's protection settings; a missing bucket or no access is an error."""
    import botocore.exceptions as bx

    target = parse_s3_url(bucket_url)
    if client is None:
        client = make_client(options=client_options or ClientOptions())
    where = f"s3://{target.bucket}"
    try:
        client.head_bucket(Bucket=target.bucket)
    except Exception as exc:
        if isinstance(exc, bx.ClientError) and error_code(exc) in {"404", "NotFound"}:
            from ckptrescue.errors import UsageError

            raise UsageError(f"{where}: bucket does not exist") from exc
        raise translate_error(exc, where) from exc
    region = None
    try:
        region = client.get_bucket_location(Bucket=target.bucket).get("LocationConstraint") or (
            "us-east-1")
    except bx.ClientError:
        region = None
    try:
        response = client.get_bucket_versioning(Bucket=target.bucket)
        versioning = response.get("Status") or "Never enabled"
        mfa = response.get("MFADelete")
    except bx.ClientError as exc:
        if not is_access_denied(exc):
            raise translate_error(exc, where) from exc
        versioning, mfa = "unknown (access denied: s3:GetBucketVersioning)", None
    retention = None
    try:
        lock = client.get_object_lock_configuration(Bucket=target.bucket)
        config = lock.get("ObjectLockConfiguration") or {}
        object_lock = config.get("ObjectLockEnabled") or "not configured"
        rule = (config.get("Rule") or {}).get("DefaultRetention")
        # A period of 0 is "not set" (moto reports Days and Years together).
        retention = {k: v for k, v in rule.items()
                     if not (k in {"Days", "Years"} and not v)} if rule else None
    except bx.ClientError as exc:
        code = error_code(exc) or ""
        if "ObjectLockConfigurationNotFound" in code:
            object_lock = "not configured"
        elif is_access_denied(exc):
            object_lock = "unknown (access denied: s3:GetBucketObjectLockConfiguration)"
        else:
            raise translate_error(exc, where) from exc
    warnings = []
    if versioning == "Enabled" and object_lock == "Enabled":
        verdict = "immutable"
    elif versioning == "Enabled":
        verdict = "versioned"
        warnings.append("VERSIONING WITHOUT OBJECT LOCK: versions can be deleted by id; "
                        "preserve a copy now (ckptrescue s3 preserve)")
    elif versioning.startswith("unknown"):
        verdict = "unknown"
        warnings.append("cannot read the versioning status: assume nothing is kept; "
                        "preserve a copy now")
    else:
        verdict = "unprotected"
        warnings.append(f"VERSIONING IS {versioning.upper()}: every overwrite or delete is "
                        "final; preserve a copy now, before any other step")
    if versioning == "Suspended" and object_lock == "Enabled":
        warnings.append("versioning Suspended on an Object Lock bucket (forbidden on AWS): "
                        "this store does not behave like S3")
    result = PreflightResult(bucket=target.bucket, versioning=versioning, mfa_delete=mfa,
                             object_lock=object_lock, default_retention=retention, region=region,
                             verdict=verdict, warnings=warnings)
    data = json.dumps(result.to_json(), indent=2, sort_keys=True, default=str).encode()
    sha = result.store(ArtifactData.of_bytes(data, name="s3-preflight.json", kind="s3.preflight"))
    result.record("s3.preflight", result.to_json(), artifacts=[sha])
    return result
