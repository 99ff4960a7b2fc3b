"""Verify objects against the values their store keeps — one implementation for every store.

``verify(url, local_dir)`` pairs every object at or under ``url`` with the local file of the same
relative key and compares the file with the object's stored values, downloading nothing
(:meth:`~ckptrescue.stores.base.Store.check_local`: S3 recomputes its stored checksum, composite
ones with the real part boundaries, or its ETag; Azure/GCS their MD5/CRC32C). An object that
carries no usable value is ``unverified`` unless ``download``: then it is streamed (never
stored) and compared with the local file by content. Fail closed: an unverified object does not
count toward "everything verifies" (``ok`` is false, the command exits 1) unless
``allow_unverified``; the answer states how many there are. ``verify(url)`` streams every object and
checks it against its stored values (:meth:`~ckptrescue.stores.base.Store.fetch`).

Requests run on a thread pool (``workers``) and start while later listing pages are still being
fetched. Objects that could not be read are ``unreadable`` with ``detail.error`` and stop the
verdict: :class:`VerifyFailed` carries the partial result, as does a listing that fails.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.errors import CkptRescueError, RemoteError, UsageError
from ckptrescue.model import ArtifactData, Finding, JsonObject, Recorded, Severity
from ckptrescue.stores.base import ObjectGone, ObjectInfo, Store, StoreOptions, open_store
from ckptrescue.stores.integrity import Sha256Sink, count_statuses, sha256_file
from ckptrescue.stores.kinds import OS_CODES
from ckptrescue.stores.outputs import verified
from ckptrescue.stores.urls import parse_store_url

STATUSES = ("match", "mismatch", "missing-local", "missing-remote", "unverified", "unreadable")
Progress = Callable[[int, int, str], None]


@dataclass
class ObjectCheck:
    """One object (or local file) and what its comparison found. ``rel`` is its key relative
    to the prefix verified (= its path under the local folder); ``key`` the whole key."""

    key: str
    rel: str
    status: str  # match | mismatch | missing-local | missing-remote | unverified | unreadable
    algorithm: str | None
    detail: dict[str, Any]
    version: str | None = None

    def to_json(self) -> JsonObject:
        return {"key": self.rel, "status": self.status, "algorithm": self.algorithm,
                "detail": self.detail}


@dataclass
class VerifyResult(Recorded):
    url: str
    local_dir: str | None = None  # None: the objects were streamed (content mode)
    objects: list[ObjectCheck] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    operations: dict[str, int] = field(default_factory=dict)
    codes: dict[str, str] = field(default_factory=lambda: OS_CODES, repr=False)
    # fail closed: an object without a usable checksum is not verified (True: accept them)
    allow_unverified: bool = False

    @property
    def mode(self) -> str:
        return "local" if self.local_dir is not None else "content"

    @property
    def counts(self) -> dict[str, int]:
        return count_statuses(self.objects, STATUSES)

    @property
    def ok(self) -> bool:
        return verified(self.errors, [o.status for o in self.objects], self.allow_unverified)

    @property
    def summary(self) -> str:
        """The answer: how many verified, and how many did not (never "everything verifies"
        while an object had no usable checksum)."""
        c = self.counts
        total = c.get("total", len(self.objects))
        text = f"{c.get('match', 0)} of {total} verified"
        bad = [f"{c[k]} {k}" for k in STATUSES if k not in ("match", "unverified") and c.get(k)]
        if bad:
            text += "; " + ", ".join(bad)
        if c.get("unverified"):
            text += (f"; {c['unverified']} unverified (no usable stored checksum"
                     + ("; accepted with --allow-unverified)" if self.allow_unverified else
                        ": not counted as verified; --download compares them by content, "
                        "--allow-unverified accepts them)"))
        return text

    def to_json(self) -> JsonObject:
        return {"url": self.url, "mode": self.mode,
                "objects": [o.to_json() for o in sorted(self.objects, key=lambda o: o.rel)],
                "counts": self.counts, "errors": list(self.errors),
                "operations": dict(self.operations), "allow_unverified": self.allow_unverified}

    def findings(self) -> list[Finding]:
        out = []
        target = parse_store_url(self.url)
        local = self.mode == "local"
        for obj in self.objects:
            evidence = target.child(obj.key)
            name = obj.rel if local else obj.key
            message = str(obj.detail.get("message", obj.status))
            if obj.status == "mismatch":
                parts = obj.detail.get("parts") or []
                side = obj.detail.get("wrong_side")
                if side == "store":
                    title = (f"{name}: the store's object is the bad copy: it does not match the "
                             "local file, which matches the known-good manifest ("
                             f"{message.split('; ')[0]})")
                elif local:
                    title = f"{name}: local file does not match the object ({message})"
                else:
                    title = f"{name}: {message}"
                out.append(self._finding("local-mismatch" if local else "content-mismatch",
                                         Severity.ERROR, title, evidence, obj,
                                         offset=parts[0]["offset"] if parts else None,
                                         length=parts[0]["length"] if parts else None))
            elif obj.status == "missing-local":
                out.append(self._finding("missing-local", Severity.WARNING,
                                         f"{name}: no local file for this object", evidence, obj))
            elif obj.status == "unreadable":
                out.append(self._finding("unreadable", Severity.ERROR,
                                         f"{name}: unreadable ({message})", evidence, obj))
            elif obj.status == "unverified":
                severity = Severity.INFO if self.allow_unverified else Severity.WARNING
                out.append(self._finding("unverifiable-local" if local else "unverifiable",
                                         severity, f"{name}: unverified ({message})",
                                         evidence, obj))
            if obj.detail.get("composite") and obj.status == "match":
                out.append(self._finding("composite", Severity.INFO,
                                         f"{name}: composite object, CRC32C only", evidence, obj))
        # local files never uploaded: one finding for the cause, the list in its details
        unuploaded = [o.rel for o in self.objects if o.status == "missing-remote"]
        if unuploaded:
            base = self.url.rstrip("/")
            shown = ", ".join(unuploaded[:5]) + (" …" if len(unuploaded) > 5 else "")
            out.append(Finding(
                code=self.codes["missing-remote"], severity=Severity.INFO,
                title=f"{len(unuploaded)} local file(s) have no object under {base} ({shown}): "
                      "never uploaded, or uploaded elsewhere", evidence=str(self.local_dir),
                source="stores.verify", details={"count": len(unuploaded),
                                                 "keys": unuploaded[:1000]}))
        return out

    def _finding(self, kind: str, severity: Severity, title: str, evidence: str,
                 obj: ObjectCheck, **where: Any) -> Finding:
        return Finding(code=self.codes[kind], severity=severity, title=title, evidence=evidence,
                       source="stores.verify", details=obj.to_json(), **where)


class VerifyFailed(CkptRescueError):
    """Verification stopped early; ``partial`` holds what was established."""

    def __init__(self, cause: CkptRescueError, partial: VerifyResult) -> None:
        super().__init__(cause.message, hint=cause.hint)
        self.exit_code = cause.exit_code
        self.partial = partial


def list_local(root: Path) -> dict[str, Path]:
    """Regular files under ``root`` by POSIX relative path (symlinks are not followed)."""
    out: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in filenames:
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue
            out[path.relative_to(root).as_posix()] = path
    return out


def check_file(store: Store, obj: ObjectInfo, rel: str, path: Path, *,
               download: bool) -> ObjectCheck:
    """One object against its local file (``download``: by content when no stored value
    can be recomputed)."""
    verdict = store.check_local(obj, path)
    if verdict.status != "unverifiable" or not download:
        return ObjectCheck(obj.key, rel, _status(verdict.status), verdict.algorithm,
                           verdict.detail, obj.version)
    sink = Sha256Sink()  # --download: compare by content, streaming the object, storing nothing
    fetched = store.fetch(obj, sink)
    local_sha = sha256_file(path)
    remote_sha = sink.hexdigest()
    status = "match" if remote_sha == local_sha else "mismatch"
    return ObjectCheck(obj.key, rel, status, "SHA256", {
        "message": f"compared by content (downloaded {fetched.size} bytes): "
                   + ("identical" if status == "match" else "content differs"),
        "form": "download", "expected": remote_sha, "actual": local_sha,
        "why_download": verdict.detail.get("message")}, obj.version)


def check_content(store: Store, obj: ObjectInfo, rel: str) -> ObjectCheck:
    """One object streamed (nothing stored) and checked against its stored values."""
    fetched = store.fetch(obj, Sha256Sink())
    detail = {**fetched.detail, "sha256": fetched.sha256, "size": fetched.size}
    if fetched.status != "match":
        detail.update(store.mismatch_detail(obj))
    return ObjectCheck(obj.key, rel, _status(fetched.status), fetched.algorithm, detail,
                       obj.version or fetched.object.get("version_id"))


def judge_sides(check: ObjectCheck, path: Path, manifest: dict[str, str], prefix: str) -> None:
    """Which side of a mismatch is wrong, by the known-good manifest: the local file's SHA-256
    (hashed here) and the object's (its stored full-object SHA256, or the content downloaded by
    ``--download``) against the manifest's. A local file that matches the manifest means the
    store's object is the bad copy (they differ): ``detail.wrong_side`` = ``store``; an object
    that matches it means the local file is wrong (``local``); neither: ``both``."""
    from ckptrescue.stores.manifest import expected_sha256

    known = expected_sha256(manifest, check.key, prefix) or expected_sha256(manifest, check.rel)
    if known is None:
        return
    local_sha = sha256_file(path)
    remote_sha = _remote_sha256(check)
    if local_sha == known:
        side = "store"
    elif remote_sha == known:
        side = "local"
    elif remote_sha is not None:
        side = "both"
    else:
        side = "local"  # the object was not compared with the manifest (no stored SHA256)
    check.detail.update({"wrong_side": side, "known_good_sha256": known,
                         "local_sha256": local_sha, "object_sha256": remote_sha})
    said = {"store": "the local file matches the known-good manifest: the store's object is "
                     "the bad copy",
            "local": "the object matches the known-good manifest: the local file is the bad "
                     "copy" if remote_sha == known else
                     "the local file does not match the known-good manifest (the object was "
                     "not compared with it: no stored SHA-256)",
            "both": "neither the local file nor the object matches the known-good manifest"}
    check.detail["message"] = f"{check.detail.get('message', 'differs')}; {said[side]}"


def _remote_sha256(check: ObjectCheck) -> str | None:
    """The object's full SHA-256 when the comparison knows it: a stored full-object SHA256
    (Base64) or the content downloaded by ``--download`` (hex)."""
    import base64
    import binascii

    detail = check.detail
    value = detail.get("expected")
    if not isinstance(value, str):
        return None
    if detail.get("form") == "download":
        return value
    if check.algorithm == "SHA256" and detail.get("form") == "full-object":
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return None
        return raw.hex() if len(raw) == 32 else None
    return None


def _status(status: str) -> str:
    """A store check's ``unverifiable`` (no usable stored value) is, for verify, an object
    that was not verified."""
    return "unverified" if status == "unverifiable" else status


def verify(url: str, local_dir: Path | str | None = None, *, options: StoreOptions | None = None,
           store: Store | None = None, download: bool = False, workers: int = 16,
           progress: Progress | None = None, allow_unverified: bool = False,
           manifest: Path | str | dict[str, str] | None = None) -> VerifyResult:
    """Verify every object at or under ``url`` (module doc). Raises :class:`VerifyFailed`
    (carrying the partial result and its records) when the listing fails or objects could not
    be read; per-object outcomes are in the result, which carries its ``<store>.verify``
    record and JSON artifact for the engine to record."""
    target = parse_store_url(url)
    root = Path(local_dir) if local_dir is not None else None
    if root is not None and not root.is_dir():
        raise UsageError(f"{root}: not a directory")
    store = store or open_store(target, options)
    result = VerifyResult(url=str(target), local_dir=str(root) if root is not None else None,
                          codes=store.CODES, allow_unverified=allow_unverified)
    try:
        prefix, exact = store.select()
    except CkptRescueError as exc:
        _record(result, store, download)
        raise VerifyFailed(exc, result) from exc
    result.url = target.child(exact.key if exact else prefix)
    local = list_local(root) if root is not None and exact is None else {}
    lock = threading.Lock()
    futures: dict[str, Future[ObjectCheck]] = {}
    done = [0]

    def one(obj: ObjectInfo, rel: str) -> ObjectCheck:
        try:
            if root is None:
                return check_content(store, obj, rel)
            if exact is not None:
                path = root / rel
                if not path.is_file():
                    return ObjectCheck(obj.key, rel, "missing-local", None,
                                       {"message": "no local file"})
            elif rel not in local:
                return ObjectCheck(obj.key, rel, "missing-local", None,
                                   {"message": "no local file"})
            else:
                path = local[rel]
            return check_file(store, obj, rel, path, download=download)
        except ObjectGone as exc:
            return ObjectCheck(obj.key, rel, "missing-remote", None, {"message": exc.message})
        except CkptRescueError as exc:
            return ObjectCheck(obj.key, rel, "unreadable", None,
                               {"message": exc.message, "error": True})

    def tick(future: Future[ObjectCheck]) -> None:
        with lock:
            done[0] += 1
            if progress:
                progress(done[0], len(futures), future.result().rel)

    def submit(pool: ThreadPoolExecutor, obj: ObjectInfo, rel: str) -> None:
        with lock:
            futures[rel] = pool.submit(one, obj, rel)
        futures[rel].add_done_callback(tick)

    listing_error: CkptRescueError | None = None
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        try:
            if exact is not None:
                submit(pool, exact, exact.key.rsplit("/", 1)[-1])
            else:
                for page in store.iter_listing(prefix):
                    for obj in page:
                        if not obj.key.endswith("/"):  # folder placeholders
                            submit(pool, obj, obj.key[len(prefix):])
        except CkptRescueError as exc:
            listing_error = exc
        for rel in sorted(futures):
            check = futures[rel].result()
            result.objects.append(check)
            if check.detail.get("error"):
                result.errors.append(f"{result.url}{'' if exact else rel}: "
                                     f"{check.detail['message']}")
    if listing_error is None and exact is None:
        for rel in sorted(set(local) - set(futures)):
            result.objects.append(ObjectCheck(prefix + rel, rel, "missing-remote", None,
                                              {"message": "no object with this key"}))
    if manifest is not None and root is not None:
        from ckptrescue.stores.manifest import load_manifest

        wanted = load_manifest(manifest) if isinstance(manifest, str | Path) else manifest
        for check in result.objects:
            if check.status == "mismatch":
                path = root / check.rel if exact is not None else local.get(check.rel)
                if path is not None:
                    judge_sides(check, path, wanted, prefix)
    result.operations = dict(store.stats.operations)
    _record(result, store, download)
    if listing_error is not None:
        raise VerifyFailed(listing_error, result)
    if result.errors:
        first = result.errors[0]
        more = f" (and {len(result.errors) - 1} more)" if len(result.errors) > 1 else ""
        denied = any("access denied" in e for e in result.errors)
        cause: CkptRescueError = RemoteError(
            f"{first}{more}", hint="partial results were kept" if denied else None)
        raise VerifyFailed(cause, result)
    return result


def _record(result: VerifyResult, store: Store, download: bool) -> None:
    data = json.dumps(result.to_json(), indent=2, sort_keys=True).encode()
    name = store.RECORDS
    sha = result.store(ArtifactData.of_bytes(data, name=f"{name}-verify.json",
                                             kind=f"{name}.verify"))
    result.record(f"{name}.verify", {"url": result.url, "local_dir": result.local_dir,
                                     "download": download, "client": store.connection(),
                                     "counts": dict(result.counts),
                                     "allow_unverified": result.allow_unverified,
                                     "errors": list(result.errors)},
                  artifacts=[sha])
