"""Preserve objects — one implementation for every store: copy every object at or under a URL
(``all_versions``: and every readable earlier version) once, streamed and checked against the
store's own values on the way (:meth:`~ckptrescue.stores.base.Store.fetch`: S3 checksums,
composite ones with the real part boundaries, and ETags; Azure/GCS MD5/CRC32C), into one of two
destinations:

* a local folder (``dest``, ``stores/preserve_folder.py``): content-addressed read-only copies,
  a layout under the original keys (``probe DEST/layout/run/step-100`` runs on them unchanged),
  a journal and ``inventory.json``;
* the case (``case``, ``stores/preserve_case.py``): write-once, content-addressed artifacts
  inventoried as evidence, with their findings and an inventory artifact.

Bytes that do not match the stored value are kept exactly as received (a finding says so).
Both resume: an object an earlier run already holds, unchanged in the store and whose copy still
hashes right, is neither fetched nor inventoried again (``detail.resumed``). A failure to write
locally (no space, an I/O error) stops the run with one line naming the path, what was being
written and how far it got; what was preserved stays and the same command resumes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ckptrescue.errors import CkptRescueError
from ckptrescue.model import Finding, JsonObject, Severity
from ckptrescue.record.audit import CaseWriteError
from ckptrescue.stores.base import LocalWriteError, ObjectInfo, Store, StoreOptions, open_store
from ckptrescue.stores.counts import counts_line, short_reason
from ckptrescue.stores.integrity import count_statuses
from ckptrescue.stores.kinds import OS_CODES
from ckptrescue.stores.urls import parse_store_url

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

OK_STATUSES = ("match", "unverifiable")


@dataclass
class PreservedObject:
    key: str
    version: str | None
    status: str  # match | mismatch | unverifiable | error
    size: int | None
    sha256: str | None
    algorithm: str | None
    detail: dict[str, Any]
    stored: dict[str, str] = field(default_factory=dict)  # the store's values as listed
    path: str | None = None  # folder: the copy under its key
    evidence_id: str | None = None  # case: the evidence item
    source: str = ""  # the object's URL (with its version when one was pinned)

    @property
    def version_id(self) -> str | None:
        return self.version

    def to_json(self) -> JsonObject:
        return {"key": self.key, "version": self.version, "version_id": self.version,
                "status": self.status, "size": self.size, "sha256": self.sha256,
                "algorithm": self.algorithm, "stored": self.stored, "detail": self.detail,
                "path": self.path, "evidence_id": self.evidence_id}


@dataclass
class PreserveResult:
    url: str
    dest: str | None = None  # the folder; None: into the case
    objects: list[PreservedObject] = field(default_factory=list)
    inventory_sha256: str | None = None  # into the case: the inventory artifact
    operations: dict[str, int] = field(default_factory=dict)
    codes: dict[str, str] = field(default_factory=lambda: OS_CODES, repr=False)

    @property
    def layout(self) -> Path:
        return Path(self.dest or ".") / "layout"

    @property
    def counts(self) -> dict[str, int]:
        return count_statuses(self.objects)

    @property
    def ok(self) -> bool:
        return all(o.status in OK_STATUSES for o in self.objects)

    @property
    def summary(self) -> str:
        """"2 of 3 preserved (1 already by an earlier run), 1 failed: HTTP 500"."""
        return counts_line(self.objects)

    def to_json(self) -> JsonObject:
        return {"url": self.url, "dest": self.dest, "objects": [o.to_json() for o in self.objects],
                "counts": self.counts, "summary": self.summary,
                "inventory_sha256": self.inventory_sha256, "operations": self.operations}

    def findings(self) -> list[Finding]:
        return [finding_of(obj, self.codes, into_case=self.dest is None)
                for obj in self.objects if not obj.detail.get("resumed")]


def finding_of(obj: PreservedObject, codes: dict[str, str], *, into_case: bool) -> Finding:
    """What preserving one object found (the same words into a folder or the case)."""
    message = obj.detail.get("message")
    if obj.status in OK_STATUSES:
        return Finding(code=codes["preserved-case" if into_case else "preserved-folder"],
                       severity=Severity.INFO, title=f"{obj.source}: preserved ({message})",
                       evidence=obj.source, evidence_sha256=obj.sha256,
                       source="stores.preserve", details=obj.detail)
    if obj.status == "mismatch":
        return Finding(code=codes["preserve-mismatch"], severity=Severity.ERROR,
                       title=f"{obj.source}: bytes received do not match the stored value "
                             f"({message}); kept as received", evidence=obj.source,
                       evidence_sha256=obj.sha256, source="stores.preserve", details=obj.detail)
    return Finding(code=codes["unreadable"], severity=Severity.ERROR,
                   title=f"{obj.source}: could not be preserved ({message})",
                   evidence=obj.source, source="stores.preserve")


class Destination(Protocol):
    """Where preserved objects go (a folder, the case): how it resumes and keeps each one."""

    def start(self, result: PreserveResult, count: int) -> None: ...

    def earlier(self, obj: ObjectInfo, source: str) -> PreservedObject | None: ...

    def keep(self, obj: ObjectInfo, source: str, is_current: bool, n: int) -> PreservedObject: ...

    def kept(self, obj: PreservedObject) -> None: ...

    def stopped(self, result: PreserveResult, message: str) -> None: ...

    def finish(self, result: PreserveResult) -> None: ...


def objects_to_preserve(store: Store, all_versions: bool) -> list[tuple[ObjectInfo, bool]]:
    """(version, is it the current one) for every object at or under the store's URL; with
    ``all_versions`` every earlier version that can be read without changing the store."""
    prefix, current, exact = store.resolve()
    todo = [(o, True) for o in current]
    if all_versions:
        listing = store.list_versions(current[0].key if exact else prefix)
        for _key, entries in sorted(listing.items()):
            for info in entries:
                if info.is_latest or info.delete_marker or store.unreadable(info):
                    continue  # (Azure soft-deleted: unreadable without undelete, never done)
                todo.append((info, False))
    return todo


def preserve(url: str, dest: Path | str | None = None, *, case: Case | None = None,
             all_versions: bool = False, options: StoreOptions | None = None,
             store: Store | None = None, progress: Callable[[int, int, str], None] | None = None
             ) -> PreserveResult:
    """Copy every object at or under ``url`` (or every version) into the folder ``dest``, or,
    without one, into ``case`` as evidence (module doc)."""
    from ckptrescue.stores.preserve_case import CaseDestination
    from ckptrescue.stores.preserve_folder import FolderDestination

    target = parse_store_url(url)
    store = store or open_store(target, options)
    if dest is not None:
        into: Destination = FolderDestination(store, Path(dest), str(target), all_versions)
    elif case is not None:
        into = CaseDestination(store, case, str(target), all_versions)
    else:
        raise ValueError("preserve needs a folder (dest) or a case")
    todo = objects_to_preserve(store, all_versions)
    result = PreserveResult(url=str(target), dest=str(dest) if dest is not None else None,
                            codes=store.CODES)
    into.start(result, len(todo))
    try:
        for n, (obj, is_current) in enumerate(todo):
            source = store.url_of(obj.key, None if is_current else obj.version)
            preserved = into.earlier(obj, source)
            if preserved is not None and preserved.status == "mismatch":
                preserved = None  # what did not match is fetched again (the store may mend)
            if preserved is None:
                try:
                    preserved = into.keep(obj, source, is_current, n)
                except (LocalWriteError, CaseWriteError):
                    raise  # the local disk, not this object: stop (below, with how far it got)
                except CkptRescueError as exc:
                    preserved = PreservedObject(
                        obj.key, obj.version, "error", None, None, None,
                        {"message": exc.message, "reason": short_reason(exc)},
                        stored=dict(obj.hashes), source=source)
                into.kept(preserved)
            result.objects.append(preserved)
            if progress:
                progress(n + 1, len(todo), obj.key)
    except (LocalWriteError, CaseWriteError) as exc:
        done = counts_line(result.objects)
        into.stopped(result, exc.message)
        raise type(exc)(f"{exc.message} ({done} before it, of {len(todo)})",
                        hint=exc.hint) from exc
    result.operations = dict(store.stats.operations)
    into.finish(result)
    return result
