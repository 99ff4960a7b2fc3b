"""Preflight of a container/bucket: can what it holds still change or vanish?

* Azure: container immutability policy and legal hold, version-level immutability
  (``immutable_storage_with_versioning``), blob soft delete (service properties), and
  versioning as the data plane shows it (blobs carry ``x-ms-version-id`` only when the account
  keeps versions; versioning itself is a management-plane setting the kit does not call).
* GCS: object versioning, retention policy and bucket lock (``isLocked``), soft-delete policy,
  object retention mode.
* S3: ``ckptrescue.stores.s3.preflight`` as it is.

Verdicts as for S3: ``immutable``, ``versioned``, ``unprotected``, ``unknown``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ckptrescue.errors import CkptRescueError
from ckptrescue.model import Finding, Severity
from ckptrescue.stores.base import Store, StoreOptions, open_store
from ckptrescue.stores.urls import parse_store_url


@dataclass
class StorePreflight:
    url: str
    store: str
    settings: dict[str, Any]
    verdict: str
    warnings: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "store": self.store, "settings": self.settings,
                "verdict": self.verdict, "warnings": self.warnings, "unknown": self.unknown}

    def findings(self) -> list[Finding]:
        out = []
        for text in self.warnings:
            code = ("OS023" if "soft delete" in text else "OS020" if "version" in text
                    else "OS021")
            out.append(Finding(code=code, severity=Severity.WARNING, title=text,
                               evidence=self.url, source="stores.preflight"))
        for text in self.unknown:
            out.append(Finding(code="OS024", severity=Severity.INFO, title=text,
                               evidence=self.url, source="stores.preflight"))
        if self.verdict == "immutable":
            out.append(Finding(code="OS022", severity=Severity.INFO,
                               title=f"{self.url}: keeps immutable versions",
                               evidence=self.url, source="stores.preflight"))
        return out


def judge_azure(s: dict[str, Any]) -> tuple[str, list[str], list[str]]:
    """(verdict, warnings, unknown) from AzureStore.settings() (pure)."""
    warnings, unknown = [], []
    if "container_error" in s:
        unknown.append(f"container properties: {s['container_error']}")
    immutable = bool(s.get("has_immutability_policy") or s.get("has_legal_hold")
                     or s.get("immutable_storage_with_versioning"))
    soft = s.get("soft_delete") or {}
    if "service_error" in s:
        unknown.append(f"soft delete (service properties): {s['service_error']}")
    elif not soft.get("enabled"):
        warnings.append("blob soft delete is off: a deleted blob is gone at once")
    versioning = s.get("versioning")
    if versioning is None:
        unknown.append("versioning: not visible from the data plane (no blob, or no "
                       "x-ms-version-id)")
    elif not versioning:
        warnings.append("blob versioning looks off: blobs carry no version id")
    if not immutable and "container_error" not in s:
        warnings.append("no immutability policy or legal hold on the container")
    if immutable:
        return "immutable", warnings, unknown
    if versioning or soft.get("enabled"):
        return "versioned", warnings, unknown
    if "container_error" in s:
        return "unknown", warnings, unknown
    return "unprotected", warnings, unknown


def judge_gcs(s: dict[str, Any]) -> tuple[str, list[str], list[str]]:
    """(verdict, warnings, unknown) from gcs.parse_bucket() (pure)."""
    warnings, unknown = [], []
    locked = bool(s.get("retention_locked"))
    if not s.get("versioning"):
        warnings.append("object versioning is off: overwrites and deletes are final")
    if s.get("soft_delete_s") is None:
        if "softDeletePolicy" not in s.get("fields_present", []):
            unknown.append("soft delete policy: not in the bucket resource")
        warnings.append("soft delete is off: a deleted object is gone at once")
    if not locked and not s.get("object_retention"):
        warnings.append("no locked retention policy (bucket lock) or object retention")
    if locked or (s.get("retention_period_s") and s.get("versioning")):
        return "immutable" if locked else "versioned", warnings, unknown
    if s.get("versioning") or s.get("soft_delete_s"):
        return "versioned", warnings, unknown
    return "unprotected", warnings, unknown


def preflight(url: str, *, options: StoreOptions | None = None,
              store: Store | None = None) -> Any:
    target = parse_store_url(url)
    store = store or open_store(target, options)
    if target.scheme == "s3":
        from ckptrescue.stores.s3.preflight import preflight as s3_preflight

        return s3_preflight(f"s3://{target.bucket}",
                            client=store.client)  # type: ignore[attr-defined]
    where = f"{target.scheme}://" + (f"{target.account}/" if target.account else "") + (
        target.bucket)
    try:
        settings = store.settings()
    except CkptRescueError as exc:
        return StorePreflight(where, target.scheme, {"error": exc.message}, "unknown",
                              unknown=[exc.message])
    judge = judge_azure if target.scheme == "az" else judge_gcs
    verdict, warnings, unknown = judge(settings)
    return StorePreflight(where, target.scheme, settings, verdict, warnings, unknown)
