"""Preflight of a bucket/container — one implementation for every store: can what it holds still
change or vanish? Each backend reads its protection settings (:meth:`Store.settings`) and judges
them (:meth:`Store.judge`, pure):

* S3: versioning status, MFA delete, Object Lock configuration and default retention. Immutable
  history needs versioning Enabled *and* Object Lock; without versioning an overwrite or delete
  is final — preserve a copy before anything else runs.
* Azure: container immutability policy and legal hold, version-level immutability, blob soft
  delete (service properties), and versioning as the data plane shows it (blobs carry
  ``x-ms-version-id`` only when the account keeps versions).
* GCS: object versioning, retention policy and bucket lock (``isLocked``), soft-delete policy,
  object retention mode.

Verdicts: ``immutable``, ``versioned``, ``unprotected``, ``unknown``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ckptrescue.model import ArtifactData, Finding, JsonObject, Recorded, Severity
from ckptrescue.stores.base import Store, StoreOptions, open_store
from ckptrescue.stores.kinds import OS_CODES
from ckptrescue.stores.urls import parse_store_url

SEVERITY = {"immutable": Severity.INFO, "setting-unknown": Severity.INFO}


@dataclass
class PreflightResult(Recorded):
    url: str
    scheme: str  # s3 | az | gs
    settings: dict[str, Any]
    verdict: str
    warnings: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    issues: list[tuple[str, str]] = field(default_factory=list)  # (finding kind, title)
    codes: dict[str, str] = field(default_factory=lambda: OS_CODES, repr=False)

    # the S3 settings by name (``s3 preflight``'s fields)
    @property
    def bucket(self) -> str | None:
        return self.settings.get("bucket")

    @property
    def versioning(self) -> Any:
        return self.settings.get("versioning")

    @property
    def object_lock(self) -> Any:
        return self.settings.get("object_lock")

    @property
    def default_retention(self) -> Any:
        return self.settings.get("default_retention")

    @property
    def immutable(self) -> bool:
        return self.verdict == "immutable"

    def to_json(self) -> JsonObject:
        return {**self.settings, "url": self.url, "store": self.scheme,
                "settings": self.settings, "verdict": self.verdict,
                "warnings": self.warnings, "unknown": self.unknown}

    def findings(self) -> list[Finding]:
        return [Finding(code=self.codes[kind], severity=SEVERITY.get(kind, Severity.WARNING),
                        title=title, evidence=self.url, source="stores.preflight",
                        details={"verdict": self.verdict, "settings": self.settings})
                for kind, title in self.issues]


def preflight(url: str, *, options: StoreOptions | None = None,
              store: Store | None = None) -> PreflightResult:
    """Read and judge the protection settings of the bucket/container of ``url``. A missing
    bucket is a usage error; a setting that cannot be read is named (``unknown``)."""
    target = parse_store_url(url)
    store = store or open_store(target, options)
    where = f"{target.scheme}://" + (f"{target.account}/" if target.account else "") + (
        target.bucket)
    settings = store.settings()
    judged = store.judge(settings)
    result = PreflightResult(where, target.scheme, settings, judged.verdict, judged.warnings,
                             judged.unknown, judged.issues, codes=store.CODES)
    data = json.dumps(result.to_json(), indent=2, sort_keys=True, default=str).encode()
    name = store.RECORDS
    sha = result.store(ArtifactData.of_bytes(data, name=f"{name}-preflight.json",
                                             kind=f"{name}.preflight"))
    result.record(f"{name}.preflight", result.to_json(), artifacts=[sha])
    return result
