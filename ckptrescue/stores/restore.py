"""Restore one version of an object into a recovery folder, verified — one implementation for
every store; never into the store (its client cannot write) and never over an existing file.

The version is ``version``, the last known-good one per a manifest (``known_good_manifest``:
the newest version whose content has the manifest's SHA-256, ``stores/history.py``), or the
current one. Its bytes are streamed to ``<to>/<key>.<version>.partial`` (written only beneath
``to``: ``effects/beneath.py``) while the store's stored values are checked
(:meth:`~ckptrescue.stores.base.Store.fetch`: S3 checksums and ETags, Azure/GCS MD5/CRC32C),
fsynced, then renamed to ``<to>/<key>`` only when they verify (and match the manifest, when one
chose the version); otherwise they are kept as ``.unverified``. A ``.restore.json`` record sits
next to the file.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.effects import beneath
from ckptrescue.effects.files import fsync
from ckptrescue.errors import RefusedError, UsageError
from ckptrescue.model import ArtifactData, Finding, JsonObject, Recorded, Severity
from ckptrescue.stores.base import ObjectInfo, Store, StoreOptions, open_store
from ckptrescue.stores.kinds import OS_CODES
from ckptrescue.stores.manifest import expected_sha256, load_manifest
from ckptrescue.stores.urls import parse_store_url


@dataclass
class RestoreResult(Recorded):
    url: str
    version: str | None
    path: str
    status: str  # verified | mismatch | unverifiable
    size: int
    sha256: str
    algorithm: str | None
    detail: dict[str, Any]
    chosen_by: str = "version"  # version | known-good | current
    manifest_sha256: str | None = None
    object: dict[str, Any] = field(default_factory=dict)
    codes: dict[str, str] = field(default_factory=lambda: OS_CODES, repr=False)

    @property
    def version_id(self) -> str | None:
        return self.version

    @property
    def ok(self) -> bool:
        return self.status == "verified"

    @property
    def summary(self) -> str:
        return f"{self.status}: {self.path}"

    def to_json(self) -> JsonObject:
        return {"url": self.url, "version": self.version, "version_id": self.version,
                "chosen_by": self.chosen_by, "path": self.path, "status": self.status,
                "size": self.size, "sha256": self.sha256, "algorithm": self.algorithm,
                "detail": self.detail, "manifest_sha256": self.manifest_sha256,
                "object": self.object}

    def findings(self) -> list[Finding]:
        if self.ok:
            return [Finding(code=self.codes["restored"], severity=Severity.INFO,
                            title=f"{self.url} version {self.version} restored to {self.path}, "
                                  "verified", evidence=self.url, evidence_sha256=self.sha256,
                            source="stores.restore", details=self.to_json())]
        return [Finding(code=self.codes["restore-mismatch"], severity=Severity.ERROR,
                        title=f"{self.url} version {self.version} does not verify "
                              f"({self.detail.get('message')}); kept as {self.path}",
                        evidence=self.url, evidence_sha256=self.sha256,
                        source="stores.restore", details=self.to_json())]


def safe_relative(key: str) -> Path:
    """An object key as a path beneath a folder; a key that climbs out is refused."""
    rel = Path(key)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts or key.endswith("/"):
        raise UsageError(f"refusing key {key!r}: not a safe relative path")
    return rel


def _refuse_overlap(to: Path, evidence: Sequence[str]) -> None:
    from ckptrescue.effects.output_dirs import refuse_aliasing

    resolved = to.resolve()
    for item in evidence:
        ev = Path(item).resolve()
        if resolved == ev or ev in resolved.parents or resolved in ev.parents:
            raise RefusedError(f"{to}: overlaps evidence {item}; restore elsewhere")
    refuse_aliasing(to, evidence=evidence)  # through bind mounts and overlay layers too


def _choose(store: Store, key: str, version: str | None, manifest: Path | str | None
            ) -> tuple[ObjectInfo, str, str | None]:
    """(the version to restore, how it was chosen, the manifest's SHA-256)."""
    if version is not None and manifest is not None:
        raise UsageError("give at most one of --version ID or --manifest FILE")
    if manifest is not None:
        from ckptrescue.stores.history import history

        wanted = load_manifest(manifest)
        manifest_sha = expected_sha256(wanted, key)
        if manifest_sha is None:
            raise UsageError(f"{manifest}: no entry for {key}")
        found = history(store.url.child(key), manifest=wanted, store=store)
        item = next((k for k in found.keys if k.key == key), None)
        if item is None or item.known_good is None:
            raise UsageError(f"{store.url.child(key)}: no version matches the manifest's "
                             f"SHA-256 {manifest_sha}",
                             hint="see `ckptrescue store history --manifest`")
        chosen = next(v for v in item.versions if v.version_id == item.known_good)
        return chosen, "known-good", manifest_sha
    if version in (None, "current"):
        return store.head(key), "current", None
    listed = store.list_versions(key).get(key, [])
    chosen = next((o for o in listed if o.version == version), None)
    return chosen or store.head(key, version), "version", None


def _status(fetched: Any, manifest_sha: str | None) -> tuple[str, dict[str, Any]]:
    """The restored copy's status (verified, unverifiable, mismatch…) and its details."""
    detail = dict(fetched.detail)
    status = {"match": "verified"}.get(fetched.status, fetched.status)
    if manifest_sha is not None:
        if fetched.sha256 == manifest_sha:
            detail["manifest"] = "SHA-256 matches the known-good manifest"
            if status == "unverifiable":
                status = "verified"
        else:
            detail["manifest"] = f"SHA-256 {fetched.sha256} differs from the manifest"
            status = "mismatch"
    return status, detail


def _place(to: Path, partial: Path, final: Path, unverified: Path, status: str) -> Path:
    """The downloaded ``partial`` renamed to ``final`` when it verifies, else ``.unverified``
    (never over an existing file)."""
    dest = final if status == "verified" else unverified
    for name in (dest, dest.with_name(dest.name + ".restore.json")):
        if beneath.lexists(to, name):
            raise RefusedError(f"{name}: already exists; restore never overwrites a file")
    beneath.rename(to, partial, dest, replace=False)
    return dest


def restore(url: str, to: Path | str, *, version: str | None = None,
            known_good_manifest: Path | str | None = None, evidence: Sequence[str] = (),
            options: StoreOptions | None = None, store: Store | None = None) -> RestoreResult:
    """Restore one version of the object at ``url`` into ``to/<key>`` (module doc).
    ``evidence``: paths the restore must not overlap (the case's evidence). The result carries
    its ``<store>.restore`` record and JSON artifact for the engine to record."""
    target = parse_store_url(url, need_key=True)
    to = Path(to)
    _refuse_overlap(to, evidence)
    store = store or open_store(target, options)
    obj, chosen_by, manifest_sha = _choose(store, target.key, version, known_good_manifest)
    final = to / safe_relative(target.key)
    unverified = final.with_name(final.name + ".unverified")
    # the names a verified restore writes, refused before anything is fetched (an earlier
    # .unverified copy does not stop a rerun of another version; _place checks the name taken)
    for name in (final, final.with_name(final.name + ".restore.json")):
        if beneath.lexists(to, name):
            raise RefusedError(f"{name}: already exists; restore never overwrites a file")
    beneath.makedirs(to, final.parent)
    partial = final.with_name(f"{final.name}.{obj.version or 'current'}.partial")
    try:
        fh = beneath.open_file(to, partial, "xb")
    except FileExistsError:  # never truncated: another restore may be writing it
        raise RefusedError(f"{partial}: already exists: another restore of this version is "
                           "writing it, or one was killed", hint="remove it once no restore "
                           "runs, and restore again") from None
    try:
        with fh:
            fetched = store.fetch(obj, fh)
            fsync(fh)  # its errors (a full disk) name the file, as its writes' do
        status, detail = _status(fetched, manifest_sha)
        dest = _place(to, partial, final, unverified, status)
    except BaseException:  # a download not placed is never left to block the rerun
        with contextlib.suppress(OSError):
            beneath.unlink(to, partial, missing_ok=True)
        raise
    result = RestoreResult(
        url=str(target), version=obj.version or fetched.object.get("version_id"),
        path=str(dest), status=status, size=fetched.size, sha256=fetched.sha256,
        algorithm=fetched.algorithm, detail=detail, chosen_by=chosen_by,
        manifest_sha256=manifest_sha, object=fetched.object, codes=store.CODES)
    record = json.dumps(result.to_json(), indent=2, sort_keys=True).encode()
    with beneath.creating(to, dest.with_name(dest.name + ".restore.json")) as fh:
        fh.write(record)  # whole or absent
    name = store.RECORDS
    sha = result.store(ArtifactData.of_bytes(record, name=f"{name}-restore.json",
                                             kind=f"{name}.restore"))
    result.record(f"{name}.restore", {"url": result.url, "version_id": result.version,
                                      "path": str(dest), "status": status,
                                      "sha256": fetched.sha256}, artifacts=[sha])
    return result
