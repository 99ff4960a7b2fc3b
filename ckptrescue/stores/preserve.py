"""Preserve objects into a local folder, and restore one version into a recovery folder —
never into the store.

``preserve(url, dest)`` streams every object (``all_versions``: every readable version) once,
hashing and verifying on the way (Azure/GCS: :func:`ckptrescue.stores.integrity.compare`; S3:
``ckptrescue.stores.s3.objects.download_verified``), and lays out ``dest`` as::

    objects/sha256/ab/abcdef…        content-addressed, read-only: the evidence
    layout/<key>                     hard link to it under the object's own key
    versions/<version>/<key>         (all_versions) earlier versions, same
    inventory.json                   per object: key, version, size, sha256, stored values,
                                     verification status; hashes are the evidence's record

so ``probe dest/layout/run/step-100`` runs on the preserved copies unchanged. Bytes that do not
match the stored value are kept exactly as received (finding OS030).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.effects import beneath
from ckptrescue.errors import CkptRescueError, RefusedError, UsageError
from ckptrescue.model import Finding, Severity
from ckptrescue.stores.base import ObjectInfo, Store, StoreOptions, open_store
from ckptrescue.stores.integrity import Digest, compare
from ckptrescue.stores.s3.manifest import expected_sha256, load_manifest
from ckptrescue.stores.urls import parse_store_url


def safe_relative(key: str) -> Path:
    rel = Path(key)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts or key.endswith("/"):
        raise UsageError(f"refusing key {key!r}: not a safe relative path")
    return rel


class _Tee:
    def __init__(self, fh: Any, digest: Digest) -> None:
        self.fh, self.digest = fh, digest

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return int(self.fh.write(data))


def fetch(store: Store, obj: ObjectInfo, fh: Any) -> tuple[str, dict[str, Any], Digest]:
    """Stream one version into ``fh``; (status, detail, digest) of the bytes as received."""
    digest = Digest()
    tee = _Tee(fh, digest)
    if store.url.scheme == "s3":
        from ckptrescue.stores.s3.objects import download_verified

        got = download_verified(store.client, store.url.bucket, obj.key,  # type: ignore[attr-defined]
                                tee, version_id=obj.version)
        return got.check.status, {**got.check.detail(), "algorithm": got.check.algorithm}, digest
    for block in store.iter_content(obj):
        tee.write(block)
    status, detail = compare(obj, digest)
    return status, detail, digest


def _write_once(root: Path, tmp: Path, final: Path) -> None:
    beneath.makedirs(root, final.parent)
    if beneath.lexists(root, final):
        beneath.unlink(root, tmp)  # same content already preserved
    else:
        beneath.chmod(root, tmp, 0o444)
        beneath.rename(root, tmp, final, replace=False)


@dataclass
class PreservedObject:
    key: str
    version: str | None
    status: str  # match | mismatch | unverifiable | error
    size: int | None
    sha256: str | None
    stored: dict[str, str]
    detail: dict[str, Any]
    path: str | None = None  # the layout path

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "version": self.version, "status": self.status,
                "size": self.size, "sha256": self.sha256, "stored": self.stored,
                "detail": self.detail, "path": self.path}


@dataclass
class StorePreserveResult:
    url: str
    dest: str
    objects: list[PreservedObject] = field(default_factory=list)
    operations: dict[str, int] = field(default_factory=dict)

    @property
    def layout(self) -> Path:
        return Path(self.dest) / "layout"

    @property
    def ok(self) -> bool:
        return all(o.status in ("match", "unverifiable") for o in self.objects)

    def to_json(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for obj in self.objects:
            counts[obj.status] = counts.get(obj.status, 0) + 1
        return {"url": self.url, "dest": self.dest, "counts": counts,
                "objects": [o.to_json() for o in self.objects], "operations": self.operations}

    def findings(self) -> list[Finding]:
        target = parse_store_url(self.url)
        out = []
        for obj in self.objects:
            where = target.child(obj.key)
            if obj.status in ("match", "unverifiable"):
                out.append(Finding(code="OS031", severity=Severity.INFO,
                                   title=f"{obj.key}: preserved ({obj.status})", evidence=where,
                                   evidence_sha256=obj.sha256, source="stores.preserve",
                                   details=obj.to_json()))
            elif obj.status == "mismatch":
                out.append(Finding(code="OS030", severity=Severity.ERROR,
                                   title=f"{obj.key}: {obj.detail.get('message')} (kept as "
                                         "received)", evidence=where, evidence_sha256=obj.sha256,
                                   source="stores.preserve", details=obj.to_json()))
            else:
                out.append(Finding(code="OS005", severity=Severity.ERROR,
                                   title=f"{obj.key}: {obj.detail.get('message')}",
                                   evidence=where, source="stores.preserve"))
        return out


def preserve(url: str, dest: Path | str, *, all_versions: bool = False,
             options: StoreOptions | None = None, store: Store | None = None
             ) -> StorePreserveResult:
    """Copy every object at or under ``url`` (or every version) into ``dest`` (module doc)."""
    target = parse_store_url(url)
    store = store or open_store(target, options)
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise RefusedError(f"{dest}: not empty; preserve writes into a new folder")
    _prefix, current, exact = store.resolve()
    todo: list[tuple[ObjectInfo, bool]] = [(o, True) for o in current]
    if all_versions:
        listing = store.list_versions(current[0].key if exact else _prefix)
        for _key, entries in sorted(listing.items()):
            for info in entries:
                if info.is_latest or info.kind == "delete-marker":
                    continue
                if info.soft_deleted and target.scheme == "az":
                    continue  # unreadable without undelete, which the kit never does
                todo.append((info, False))
    result = StorePreserveResult(url=str(target), dest=str(dest))
    cas = dest / "objects" / "sha256"
    beneath.makedirs(dest, cas)
    for obj, is_current in todo:
        rel = safe_relative(obj.key)
        tmp = cas / f".incoming-{os.getpid()}-{len(result.objects)}"
        try:
            with beneath.open_file(dest, tmp, "xb") as fh:
                status, detail, digest = fetch(store, obj, fh)
                fh.flush()
                os.fsync(fh.fileno())
        except CkptRescueError as exc:
            beneath.unlink(dest, tmp, missing_ok=True)
            result.objects.append(PreservedObject(obj.key, obj.version, "error", None, None,
                                                  dict(obj.hashes), {"message": exc.message}))
            continue
        sha = digest.values()["sha256"]
        blob = cas / sha[:2] / sha
        _write_once(dest, tmp, blob)
        if is_current:
            place = dest / "layout" / rel
        else:
            place = dest / "versions" / str(obj.version or "unknown") / rel
        beneath.link(dest, blob, place)
        result.objects.append(PreservedObject(obj.key, obj.version, status, digest.size, sha,
                                              dict(obj.hashes), detail, str(place)))
    result.operations = dict(store.stats.operations)
    inventory = json.dumps(result.to_json(), indent=2, sort_keys=True).encode()
    with beneath.open_file(dest, dest / "inventory.json", "xb") as fh:
        fh.write(inventory)
    beneath.chmod(dest, dest / "inventory.json", 0o444)
    return result


@dataclass
class StoreRestoreResult:
    url: str
    version: str | None
    path: str
    status: str  # verified | mismatch | unverifiable
    size: int
    sha256: str
    detail: dict[str, Any]
    chosen_by: str
    manifest_sha256: str | None = None
    object: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "verified"

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "version": self.version, "path": self.path,
                "status": self.status, "size": self.size, "sha256": self.sha256,
                "detail": self.detail, "chosen_by": self.chosen_by,
                "manifest_sha256": self.manifest_sha256, "object": self.object}

    def findings(self) -> list[Finding]:
        if self.ok:
            return [Finding(code="OS040", severity=Severity.INFO,
                            title=f"{self.url} version {self.version} restored to {self.path}, "
                                  "verified", evidence=self.url, evidence_sha256=self.sha256,
                            source="stores.restore", details=self.to_json())]
        return [Finding(code="OS041", severity=Severity.ERROR,
                        title=f"{self.url} version {self.version} does not verify "
                              f"({self.detail.get('message')}); kept as {self.path}",
                        evidence=self.url, evidence_sha256=self.sha256,
                        source="stores.restore", details=self.to_json())]


def restore(url: str, to: Path | str, *, version: str | None = None,
            known_good_manifest: Path | str | None = None,
            options: StoreOptions | None = None, store: Store | None = None) -> Any:
    """Restore one version (``version``, the known-good one per the manifest, or the current
    one) of the object at ``url`` into ``to/<key>``: written as ``.partial``, hashed, fsynced,
    renamed only if it verifies (else ``.unverified``), a ``.restore.json`` record beside it.
    Never overwrites, never writes to the store."""
    target = parse_store_url(url, need_key=True)
    store = store or open_store(target, options)
    if target.scheme == "s3":
        from ckptrescue.stores.s3.restore import restore as s3_restore

        if version is None and known_good_manifest is None:
            raise UsageError("s3 restore: give --version or --known-good --manifest")
        return s3_restore(str(target), to, version=version,
                          known_good_manifest=known_good_manifest,
                          client=store.client)  # type: ignore[attr-defined]
    if version is not None and known_good_manifest is not None:
        raise UsageError("give at most one of --version ID or --known-good --manifest FILE")
    to = Path(to)
    manifest_sha = None
    chosen_by = "version" if version else "current"
    if known_good_manifest is not None:
        from ckptrescue.stores.history import history

        manifest_sha = expected_sha256(load_manifest(known_good_manifest), target.key)
        if manifest_sha is None:
            raise UsageError(f"{known_good_manifest}: no entry for {target.key}")
        found = history(str(target), manifest=known_good_manifest, store=store)
        item = next((k for k in found.keys if k.key == target.key), None)
        if item is None or item.known_good is None:
            raise UsageError(f"{target}: no version matches the manifest's SHA-256 "
                             f"{manifest_sha}", hint="see `ckptrescue store history --manifest`")
        version, chosen_by = item.known_good, "known-good"
    if version in (None, "current"):
        obj = store.head(target.key)
    else:
        listed = store.list_versions(target.key).get(target.key, [])
        obj = next((o for o in listed if o.version == version), None) or store.head(
            target.key, version)
    final = to / safe_relative(target.key)
    if beneath.lexists(to, final):
        raise RefusedError(f"{final}: already exists; restore never overwrites a file")
    beneath.makedirs(to, final.parent)
    partial = final.with_name(f"{final.name}.{obj.version or 'current'}.partial")
    with beneath.open_file(to, partial, "xb") as fh:
        status, detail, digest = fetch(store, obj, fh)
        fh.flush()
        os.fsync(fh.fileno())
    sha = digest.values()["sha256"]
    status = {"match": "verified"}.get(status, status)
    if manifest_sha is not None:
        if sha == manifest_sha:
            detail["manifest"] = "SHA-256 matches the known-good manifest"
            if status == "unverifiable":
                status = "verified"
        else:
            detail["manifest"] = f"SHA-256 {sha} differs from the manifest"
            status = "mismatch"
    dest = final if status == "verified" else final.with_name(final.name + ".unverified")
    if beneath.lexists(to, dest):
        raise RefusedError(f"{dest}: already exists; restore never overwrites a file")
    beneath.rename(to, partial, dest, replace=False)
    result = StoreRestoreResult(url=str(target), version=obj.version, path=str(dest),
                                status=status, size=digest.size, sha256=sha, detail=detail,
                                chosen_by=chosen_by, manifest_sha256=manifest_sha,
                                object=obj.to_json())
    with beneath.open_file(to, dest.with_name(dest.name + ".restore.json"), "xb") as fh:
        fh.write(json.dumps(result.to_json(), indent=2, sort_keys=True).encode())
    return result
