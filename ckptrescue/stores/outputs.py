"""The store wing's step outputs: what ``store verify|history|preflight|preserve|restore`` record
(``StoreResultOutput``) and what their ``s3`` names record (``S3*Output``, read by the answer and
the report). Both hold the same JSON — the one implementation's result (``stores/verify.py``,
``history.py``, ...) plus ``url``, ``ok`` and ``answer`` — so either type reads a step of the
other; ``docs/step-outputs.md`` is generated from these classes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ckptrescue.model import JsonRecord, StepOutputs, answer_field, doc_field


@dataclass
class VerifiedObject(JsonRecord):
    """One object (or local file) a verify compared."""

    key: str = doc_field("", "Its key relative to the prefix (the local path).")
    status: str = doc_field("", "match, mismatch, missing-local, missing-remote, unverified, unreadable.")
    algorithm: str | None = doc_field(None, "The stored value compared.")
    detail: dict[str, Any] = doc_field({}, "message, form, expected, actual, parts, layout, resets, error...")


@dataclass
class VersionAnomaly(JsonRecord):
    """Something odd in an object's version history (a delete marker on top, ...)."""

    kind: str = doc_field("", "latest-count, delete-marker-on-top, ...")
    message: str = doc_field("", "What it means.")
    version_ids: list[str] = doc_field([], "The versions named.")


@dataclass
class ListedVersion(JsonRecord):
    """One version of a key as its store lists it (Azure/GCS add deleted, soft_deleted, kind,
    etag: kept as they are)."""

    version_id: str = doc_field("", "The version (current: none named).")
    is_latest: bool = doc_field(False, "The current version.")
    delete_marker: bool = doc_field(False, "An S3 delete marker.")
    last_modified: str | None = doc_field(None, "When it was written.")
    size: int | None = doc_field(None, "Bytes.")
    checksum: Any = doc_field(None, "The stored checksum(s).")
    events: list[dict[str, Any]] = doc_field([], "S3 with --cloudtrail: who wrote or deleted it.")
    manifest_check: str | None = doc_field(None, "With --manifest: why it is (not) the known-good version.")


@dataclass
class KeyVersions(JsonRecord):
    """Every version of one key, its anomalies and its last known-good version."""

    key: str = doc_field("", "The key.")
    versions: list[ListedVersion] = doc_field([], "Newest first.")
    known_good: str | None = doc_field(None, "The last known-good version (with --manifest).")
    anomalies: list[VersionAnomaly] = doc_field([], "What is odd about the listing.")
    manifest_sha256: str | None = doc_field(None, "The manifest's SHA-256.")
    known_good_by: str | None = doc_field(None, "stored-sha256 or content.")


@dataclass
class PreservedRecord(JsonRecord):
    """One object (version) a preserve copied."""

    key: str = doc_field("", "The key.")
    version_id: str | None = doc_field(None, "The version copied.")
    status: str = doc_field("", "match, mismatch, unverifiable, error.")
    size: int | None = doc_field(None, "Bytes.")
    sha256: str | None = doc_field(None, "SHA-256 of the bytes received.")
    algorithm: str | None = doc_field(None, "The stored value compared.")
    detail: dict[str, Any] = doc_field({}, "message, resumed, resets, reason...")
    evidence_id: str | None = doc_field(None, "Into the case: its evidence.")
    path: str | None = doc_field(None, "Into a folder: its copy.")


def verified(errors: list[str], statuses: list[str], allow_unverified: bool) -> bool:
    """The verify rule: no error stopped the comparison and every object matched (or, with
    ``allow_unverified``, had no usable checksum)."""
    accepted = {"match", "unverified"} if allow_unverified else {"match"}
    return not errors and all(s in accepted for s in statuses)


@dataclass
class S3VerifyOutput(StepOutputs):
    """What the ``s3.verify`` step records (each field: docs/step-outputs.md)."""

    objects: list[VerifiedObject] = doc_field([], "Per object: key, status, algorithm, detail.")
    counts: dict[str, int] = doc_field({}, "Objects per status.")
    errors: list[str] = doc_field([], "Errors that stopped part of the comparison.")
    allow_unverified: bool = doc_field(False, "Objects without a usable checksum (unverified) were accepted.")

    @property
    def ok(self) -> bool:
        return verified(self.errors, [o.status for o in self.objects], self.allow_unverified)


@dataclass
class S3HistoryOutput(StepOutputs):
    """What the ``s3.history`` step records (each field: docs/step-outputs.md)."""

    keys: list[KeyVersions] = doc_field([],
        "Per key: key, versions, known_good, anomalies (kind, message, version_ids), and with "
        "a manifest manifest_sha256, known_good_by.")


@dataclass
class S3PreflightOutput(StepOutputs):
    """What the ``s3.preflight`` step records (each field: docs/step-outputs.md)."""

    bucket: str = doc_field("", "The bucket.")
    region: str | None = doc_field(None, "Its region.")
    versioning: str | None = doc_field(None, "Versioning status.")
    mfa_delete: str | None = doc_field(None, "MFA delete status.")
    object_lock: str | None = doc_field(None, "Object Lock status.")
    default_retention: Any = doc_field(None, "Default retention.")
    verdict: str = doc_field("", "immutable, or what is missing.")
    warnings: list[str] = doc_field([], "Warnings.")


@dataclass
class S3PreserveOutput(StepOutputs):
    """What the ``s3.preserve`` step records (each field: docs/step-outputs.md)."""

    url: str = doc_field("", "What was preserved.")
    objects: list[PreservedRecord] = doc_field([],
        "Per object version: key, version_id, status, size, sha256, algorithm, detail, "
        "evidence_id (into the case) or path (into a folder).")
    counts: dict[str, int] = doc_field({}, "Objects per status.")
    inventory_sha256: str | None = doc_field(None, "SHA-256 of the inventory artifact.")

    @property
    def ok(self) -> bool:
        return all(o.status in {"match", "unverifiable"} for o in self.objects)


@dataclass
class S3RestoreOutput(StepOutputs):
    """What the ``s3.restore`` step records (each field: docs/step-outputs.md)."""

    url: str = doc_field("", "The object.")
    version_id: str | None = doc_field(None, "The version restored.")
    chosen_by: str | None = doc_field(None, "How the version was chosen.")
    path: str | None = doc_field(None, "Where it was written.")
    status: str = doc_field("", "verified, or why not.")
    size: int | None = doc_field(None, "Bytes.")
    sha256: str | None = doc_field(None, "SHA-256 of what was written.")
    algorithm: str | None = doc_field(None, "The S3 checksum algorithm compared.")
    detail: dict[str, Any] = doc_field({}, "Details (message, ...).")
    manifest_sha256: str | None = doc_field(None, "The manifest's hash for the key.")
    object: Any = doc_field(None, "The object's listing record.")

    @property
    def ok(self) -> bool:
        return self.status == "verified"


@dataclass
class StoreResultOutput(StepOutputs):
    """The outputs of ``store verify|history|preflight|preserve|restore``: the library result's
    JSON as it stands (``docs/stores.md`` describes each), plus the one-line answer."""

    url: str = doc_field("", "The object-store URL.")
    ok: bool = doc_field(True, "Nothing wrong was found.")
    answer: str = answer_field()
