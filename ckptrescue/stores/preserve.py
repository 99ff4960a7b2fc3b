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
from ckptrescue.stores.counts import counts_line, short_reason
from ckptrescue.stores.integrity import Digest, compare
from ckptrescue.stores.s3.manifest import expected_sha256, load_manifest
from ckptrescue.stores.s3.objects import LocalWriteError
from ckptrescue.stores.urls import parse_store_url


def safe_relative(key: str) -> Path:
    rel = Path(key)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts or key.endswith("/"):
        raise UsageError(f"refusing key {key!r}: not a safe relative path")
    return rel


class _Tee:
    def __init__(self, fh: Any, digest: Digest, path: Path | None = None) -> None:
        self.fh, self.digest, self.path = fh, digest, path

    @property
    def name(self) -> Any:
        return str(self.path) if self.path is not None else getattr(self.fh, "name", None)

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        try:
            return int(self.fh.write(data))
        except OSError as exc:
            raise LocalWriteError(f"{self.name}: {exc.strerror or exc} while writing the "
                                  "bytes of an object",
                                  hint="free space on the destination (or check the disk) "
                                  "and run the same command again: it resumes") from exc


def fetch(store: Store, obj: ObjectInfo, fh: Any, path: Path | None = None
          ) -> tuple[str, dict[str, Any], Digest]:
    """Stream one version into ``fh`` (the file at ``path``, named when a write fails);
    (status, detail, digest) of the bytes as received."""
    digest = Digest()
    tee = _Tee(fh, digest, path)
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
        return {"url": self.url, "dest": self.dest, "counts": counts, "summary": self.summary,
                "objects": [o.to_json() for o in self.objects], "operations": self.operations}

    @property
    def summary(self) -> str:
        """"2 of 3 preserved, 1 failed: HTTP 500" (:func:`counts_line`)."""
        return counts_line(self.objects)

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


JOURNAL = "preserve.jsonl"


def _journal(dest: Path, url: str, all_versions: bool) -> dict[tuple[str, str | None], dict[str, Any]]:
    """What an earlier run into ``dest`` preserved (key, version -> its inventory entry); raises
    when ``dest`` holds something else."""
    path = dest / JOURNAL
    if not beneath.lexists(dest, path):
        raise RefusedError(f"{dest}: not empty and not an earlier preserve (no {JOURNAL}); "
                           "preserve writes into a new folder or resumes its own")
    done: dict[tuple[str, str | None], dict[str, Any]] = {}
    with beneath.open_file(dest, path, "rb") as fh:
        lines = fh.read().splitlines()
    try:
        header = json.loads(lines[0]) if lines else {}
    except ValueError:
        header = {}
    if header.get("url") != url or bool(header.get("all_versions")) != all_versions:
        raise RefusedError(f"{dest}: an earlier preserve of {header.get('url')!r}"
                           f"{' (all versions)' if header.get('all_versions') else ''} is "
                           "there; resume it with the same URL and options, or use a new folder")
    for raw in lines[1:]:
        try:
            entry = json.loads(raw)
        except ValueError:
            continue  # a line torn by a crash: that object is fetched again
        if isinstance(entry, dict) and entry.get("status") in ("match", "unverifiable",
                                                                "mismatch"):
            done[(str(entry.get("key")), entry.get("version"))] = entry
    return done


def _still_preserved(dest: Path, entry: dict[str, Any], obj: ObjectInfo) -> bool:
    """The earlier copy is of this very object (same stored checksums and size) and its bytes
    still hash to what was recorded."""
    import hashlib

    if entry.get("stored") != dict(obj.hashes) or entry.get("size") != obj.size \
            or not entry.get("sha256") or not entry.get("path"):
        return False
    sha = str(entry["sha256"])
    blob = dest / "objects" / "sha256" / sha[:2] / sha
    digest = hashlib.sha256()
    try:
        with beneath.open_file(dest, blob, "rb") as fh:
            while block := fh.read(1 << 20):
                digest.update(block)
    except OSError:
        return False
    return digest.hexdigest() == sha and beneath.lexists(dest, Path(str(entry["path"])))


def _local(what: str, path: Path, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """A local filesystem step of preserve; its failure names the path and the operation."""
    try:
        return fn(*args, **kwargs)
    except OSError as exc:
        raise LocalWriteError(f"{path}: {exc.strerror or exc} while {what}",
                              hint="free space on the destination (or check the disk) and run "
                              "the same command again: it resumes") from exc


def preserve(url: str, dest: Path | str, *, all_versions: bool = False,
             options: StoreOptions | None = None, store: Store | None = None
             ) -> StorePreserveResult:
    """Copy every object at or under ``url`` (or every version) into ``dest`` (module doc).

    Resumable: a journal (``dest/preserve.jsonl``) lists each object once it is in place; run
    again into the same ``dest``, objects already preserved whose stored checksums and size are
    unchanged and whose copy still hashes right are skipped (``detail.resumed``), the others
    are fetched. A failure to write locally (no space, an I/O error) stops the run with one line
    naming the path and the operation; what was preserved stays and a rerun resumes."""
    target = parse_store_url(url)
    store = store or open_store(target, options)
    dest = Path(dest)
    done: dict[tuple[str, str | None], dict[str, Any]] = {}
    if dest.exists() and any(dest.iterdir()):
        done = _journal(dest, str(target), all_versions)
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
    _local("creating the destination folders", cas, beneath.makedirs, dest, cas)
    journal = dest / JOURNAL
    if not done and not beneath.lexists(dest, journal):
        header = json.dumps({"url": str(target), "all_versions": all_versions})
        _local("starting the journal", journal, beneath.write_bytes, dest, journal,
               (header + "\n").encode())
    with _local("opening the journal", journal, beneath.open_file, dest, journal, "ab") as log:
        for obj, is_current in todo:
            rel = safe_relative(obj.key)
            earlier = done.get((obj.key, obj.version))
            if earlier is not None and _still_preserved(dest, earlier, obj):
                result.objects.append(PreservedObject(
                    obj.key, obj.version, str(earlier["status"]), earlier.get("size"),
                    earlier.get("sha256"), dict(obj.hashes),
                    {**(earlier.get("detail") or {}), "resumed": True}, earlier.get("path")))
                continue
            preserved = _preserve_one(store, dest, cas, obj, is_current, rel,
                                      len(result.objects))
            result.objects.append(preserved)
            if preserved.status != "error":
                line = json.dumps(preserved.to_json(), sort_keys=True) + "\n"
                _local("writing the journal", journal, _append_synced, log, line.encode())
    result.operations = dict(store.stats.operations)
    inventory = json.dumps(result.to_json(), indent=2, sort_keys=True).encode()
    final = dest / "inventory.json"  # replaced as a whole (a resumed run lists every object)
    _local("writing the inventory", final, beneath.write_bytes, dest, final, inventory,
           perms=0o444)
    return result


def _append_synced(fh: Any, data: bytes) -> None:
    fh.write(data)
    fh.flush()
    os.fsync(fh.fileno())


def _preserve_one(store: Store, dest: Path, cas: Path, obj: ObjectInfo, is_current: bool,
                  rel: Path, n: int) -> PreservedObject:
    tmp = cas / f".incoming-{os.getpid()}-{n}"
    try:
        with _local("creating a file for the incoming bytes", tmp, beneath.open_file, dest,
                    tmp, "xb") as fh:
            status, detail, digest = fetch(store, obj, fh, tmp)
            _local("syncing the incoming bytes", tmp, _sync, fh)
    except LocalWriteError:
        beneath.unlink(dest, tmp, missing_ok=True)
        raise
    except CkptRescueError as exc:
        beneath.unlink(dest, tmp, missing_ok=True)
        return PreservedObject(obj.key, obj.version, "error", None, None, dict(obj.hashes),
                               {"message": exc.message, "reason": short_reason(exc)})
    sha = digest.values()["sha256"]
    blob = cas / sha[:2] / sha
    _local("storing the object by its SHA-256", blob, _write_once, dest, tmp, blob)
    place = dest / "layout" / rel if is_current else \
        dest / "versions" / str(obj.version or "unknown") / rel
    if beneath.lexists(dest, place):  # an earlier run's copy of an object changed since
        _local("replacing the link under its key", place, beneath.unlink, dest, place)
    _local("linking the object under its key", place, beneath.link, dest, blob, place)
    return PreservedObject(obj.key, obj.version, status, digest.size, sha, dict(obj.hashes),
                           detail, str(place))


def _sync(fh: Any) -> None:
    fh.flush()
    os.fsync(fh.fileno())


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
        status, detail, digest = fetch(store, obj, fh, partial)
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
