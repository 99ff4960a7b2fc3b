"""The store wing's step outputs: what ``store verify|history|preflight|preserve|restore`` record
(``StoreResultOutput``) and what their ``s3`` names record (``S3*Output``, read by the answer and
the report). Both hold the same JSON — the one implementation's result (``stores/verify.py``,
``history.py``, ...) plus ``url``, ``ok`` and ``answer`` — so either type reads a step of the
other; ``docs/step-outputs.md`` is generated from these classes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ckptrescue.model import JsonRecord, StepOutputs, answer_field, doc


@dataclass
class VerifiedObject(JsonRecord):
    """One object (or local file) a verify compared."""

    key: str = field(default="", metadata=doc("Its key relative to the prefix (the local path)."))
    status: str = field(default="", metadata=doc(
        "match, mismatch, missing-local, missing-remote, unverified, unreadable."))
    algorithm: str | None = field(default=None, metadata=doc("The stored value compared."))
    detail: dict[str, Any] = field(default_factory=dict, metadata=doc(
        "message, form, expected, actual, parts, layout, resets, error..."))


@dataclass
class VersionAnomaly(JsonRecord):
    kind: str = field(default="", metadata=doc("latest-count, delete-marker-on-top, ..."))
    message: str = field(default="", metadata=doc("What it means."))
    version_ids: list[str] = field(default_factory=list, metadata=doc("The versions named."))


@dataclass
class ListedVersion(JsonRecord):
    """One version of a key as its store lists it (Azure/GCS add deleted, soft_deleted, kind,
    etag: kept as they are)."""

    version_id: str = field(default="", metadata=doc("The version (current: none named)."))
    is_latest: bool = field(default=False, metadata=doc("The current version."))
    delete_marker: bool = field(default=False, metadata=doc("An S3 delete marker."))
    last_modified: str | None = field(default=None, metadata=doc("When it was written."))
    size: int | None = field(default=None, metadata=doc("Bytes."))
    checksum: Any = field(default=None, metadata=doc("The stored checksum(s)."))
    events: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "S3 with --cloudtrail: who wrote or deleted it."))
    manifest_check: str | None = field(default=None, metadata=doc(
        "With --manifest: why it is (not) the known-good version."))


@dataclass
class KeyVersions(JsonRecord):
    """Every version of one key, its anomalies and its last known-good version."""

    key: str = field(default="", metadata=doc("The key."))
    versions: list[ListedVersion] = field(default_factory=list, metadata=doc("Newest first."))
    known_good: str | None = field(default=None, metadata=doc(
        "The last known-good version (with --manifest)."))
    anomalies: list[VersionAnomaly] = field(default_factory=list, metadata=doc(
        "What is odd about the listing."))
    manifest_sha256: str | None = field(default=None, metadata=doc("The manifest's SHA-256."))
    known_good_by: str | None = field(default=None, metadata=doc(
        "stored-sha256 or content."))


@dataclass
class PreservedRecord(JsonRecord):
    """One object (version) a preserve copied."""

    key: str = field(default="", metadata=doc("The key."))
    version_id: str | None = field(default=None, metadata=doc("The version copied."))
    status: str = field(default="", metadata=doc("match, mismatch, unverifiable, error."))
    size: int | None = field(default=None, metadata=doc("Bytes."))
    sha256: str | None = field(default=None, metadata=doc("SHA-256 of the bytes received."))
    algorithm: str | None = field(default=None, metadata=doc("The stored value compared."))
    detail: dict[str, Any] = field(default_factory=dict, metadata=doc(
        "message, resumed, resets, reason..."))
    evidence_id: str | None = field(default=None, metadata=doc("Into the case: its evidence."))
    path: str | None = field(default=None, metadata=doc("Into a folder: its copy."))


@dataclass
class S3VerifyOutput(StepOutputs):
    objects: list[VerifiedObject] = field(default_factory=list, metadata=doc(
        "Per object: key, status, algorithm, detail."))
    counts: dict[str, int] = field(default_factory=dict, metadata=doc("Objects per status."))
    errors: list[str] = field(default_factory=list, metadata=doc(
        "Errors that stopped part of the comparison."))
    allow_unverified: bool = field(default=False, metadata=doc(
        "Objects without a usable checksum (unverified) were accepted."))

    @property
    def ok(self) -> bool:
        accepted = {"match", "unverified"} if self.allow_unverified else {"match"}
        return not self.errors and all(o.status in accepted for o in self.objects)


@dataclass
class S3HistoryOutput(StepOutputs):
    keys: list[KeyVersions] = field(default_factory=list, metadata=doc(
        "Per key: key, versions, known_good, anomalies (kind, message, version_ids), and with "
        "a manifest manifest_sha256, known_good_by."))


@dataclass
class S3PreflightOutput(StepOutputs):
    bucket: str = field(default="", metadata=doc("The bucket."))
    region: str | None = field(default=None, metadata=doc("Its region."))
    versioning: str | None = field(default=None, metadata=doc("Versioning status."))
    mfa_delete: str | None = field(default=None, metadata=doc("MFA delete status."))
    object_lock: str | None = field(default=None, metadata=doc("Object Lock status."))
    default_retention: Any = field(default=None, metadata=doc("Default retention."))
    verdict: str = field(default="", metadata=doc("immutable, or what is missing."))
    warnings: list[str] = field(default_factory=list, metadata=doc("Warnings."))


@dataclass
class S3PreserveOutput(StepOutputs):
    url: str = field(default="", metadata=doc("What was preserved."))
    objects: list[PreservedRecord] = field(default_factory=list, metadata=doc(
        "Per object version: key, version_id, status, size, sha256, algorithm, detail, "
        "evidence_id (into the case) or path (into a folder)."))
    counts: dict[str, int] = field(default_factory=dict, metadata=doc("Objects per status."))
    inventory_sha256: str | None = field(default=None, metadata=doc(
        "SHA-256 of the inventory artifact."))

    @property
    def ok(self) -> bool:
        return all(o.status in {"match", "unverifiable"} for o in self.objects)


@dataclass
class S3RestoreOutput(StepOutputs):
    url: str = field(default="", metadata=doc("The object."))
    version_id: str | None = field(default=None, metadata=doc("The version restored."))
    chosen_by: str | None = field(default=None, metadata=doc("How the version was chosen."))
    path: str | None = field(default=None, metadata=doc("Where it was written."))
    status: str = field(default="", metadata=doc("verified, or why not."))
    size: int | None = field(default=None, metadata=doc("Bytes."))
    sha256: str | None = field(default=None, metadata=doc("SHA-256 of what was written."))
    algorithm: str | None = field(default=None, metadata=doc("The S3 checksum algorithm compared."))
    detail: dict[str, Any] = field(default_factory=dict, metadata=doc("Details (message, ...)."))
    manifest_sha256: str | None = field(default=None, metadata=doc(
        "The manifest's hash for the key."))
    object: Any = field(default=None, metadata=doc("The object's listing record."))

    @property
    def ok(self) -> bool:
        return self.status == "verified"


@dataclass
class StoreResultOutput(StepOutputs):
    """The outputs of ``store verify|history|preflight|preserve|restore``: the library result's
    JSON as it stands (``docs/stores.md`` describes each), plus the one-line answer."""

    url: str = field(default="", metadata=doc("The object-store URL."))
    ok: bool = field(default=True, metadata=doc("Nothing wrong was found."))
    answer: str = answer_field()
