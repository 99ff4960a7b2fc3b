"""An S3 bucket's protection settings, read through the read-only client, and what they mean
(the S3 backend's :meth:`~ckptrescue.stores.base.Store.settings` and
:meth:`~ckptrescue.stores.base.Store.judge`; ``stores/preflight.py`` runs them).

Versioning status, MFA delete, Object Lock configuration and default retention. A bucket keeps
immutable history only with versioning Enabled *and* Object Lock; without versioning an overwrite
or delete is final — the responder should copy (``store|s3 preserve``) before anything else runs.
"""

from __future__ import annotations

from typing import Any

from ckptrescue.errors import UsageError
from ckptrescue.stores.base import Protection
from ckptrescue.stores.s3.client import error_code, is_access_denied, translate_error


def read_settings(client: Any, bucket: str) -> dict[str, Any]:
    """The bucket's protection settings; a missing bucket or no access to it is an error, a
    setting the principal may not read is ``unknown (access denied: ...)``."""
    import botocore.exceptions as bx

    where = f"s3://{bucket}"
    try:
        client.head_bucket(Bucket=bucket)
    except Exception as exc:
        if isinstance(exc, bx.ClientError) and error_code(exc) in {"404", "NotFound"}:
            raise UsageError(f"{where}: bucket does not exist") from exc
        raise translate_error(exc, where) from exc
    region = None
    try:
        region = client.get_bucket_location(Bucket=bucket).get("LocationConstraint") or (
            "us-east-1")
    except bx.ClientError:
        region = None
    try:
        response = client.get_bucket_versioning(Bucket=bucket)
        versioning = response.get("Status") or "Never enabled"
        mfa = response.get("MFADelete")
    except bx.ClientError as exc:
        if not is_access_denied(exc):
            raise translate_error(exc, where) from exc
        versioning, mfa = "unknown (access denied: s3:GetBucketVersioning)", None
    retention = None
    try:
        lock = client.get_object_lock_configuration(Bucket=bucket)
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
    return {"bucket": bucket, "region": region, "versioning": versioning, "mfa_delete": mfa,
            "object_lock": object_lock, "default_retention": retention}


def judge_s3(s: dict[str, Any]) -> Protection:
    """What a bucket's settings (:func:`read_settings`) mean for the evidence (pure)."""
    bucket, versioning, object_lock = s["bucket"], str(s["versioning"]), str(s["object_lock"])
    warnings: list[str] = []
    issues: list[tuple[str, str]] = []
    if versioning != "Enabled":
        issues.append(("versioning", f"{bucket}: versioning is {versioning}"))
    if object_lock != "Enabled":
        issues.append(("no-lock", f"{bucket}: Object Lock is {object_lock}"))
    if versioning == "Enabled" and object_lock == "Enabled":
        verdict = "immutable"
        issues.append(("immutable", f"{bucket}: versioning and Object Lock keep immutable "
                                    "versions"))
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
    unknown = [f"{name}: {value}" for name, value in (("versioning", versioning),
                                                      ("object lock", object_lock))
               if value.startswith("unknown")]
    return Protection(verdict, warnings, unknown, issues)
