"""Where a path came from: the evidence item and the path inside it (read from the case alone).

The kit examines evidence through mount points and scratch copies under ``CASE/work``, which
no longer exist when a report is read. :func:`index` builds, from the case, the ways a path can
lead back to evidence — a read-only mount of an evidence image or device (``mount`` step
outputs: mount point -> target, filesystem, partition offset, UUID), a copy (``copy`` outputs:
destination -> the mounted source), and evidence items that are themselves files, directories
or ``s3://`` objects — and :meth:`ProvenanceIndex.locate` maps a path to a
:class:`Provenance`: evidence id, kind, source, sha256, and the path inside it (filesystem
root-relative; bucket/key for objects). Unknown paths map to None (shown as they are).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ckptrescue.model import JsonObject

if TYPE_CHECKING:
    from ckptrescue.record.case import Case


@dataclass(frozen=True)
class Provenance:
    evidence_id: str
    kind: str
    source: str
    sha256: str | None
    inner_path: str  # inside the evidence (root-relative, "/"-separated); "" for the item
    filesystem: str | None = None  # fstype of the mounted filesystem
    partition_start: int | None = None
    fs_uuid: str | None = None

    @property
    def label(self) -> str:
        """``E002:run/step-300.pt`` — short, stable, unambiguous across evidence items."""
        return f"{self.evidence_id}:{self.inner_path}" if self.inner_path else self.evidence_id

    def to_json(self) -> JsonObject:
        return {"evidence_id": self.evidence_id, "kind": self.kind, "source": self.source,
                "sha256": self.sha256, "inner_path": self.inner_path,
                "filesystem": self.filesystem, "partition_start": self.partition_start,
                "fs_uuid": self.fs_uuid, "label": self.label}


@dataclass
class ProvenanceIndex:
    # (root path, evidence item json, extra) longest root first
    roots: list[tuple[str, dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    evidence_count: int = 0
    case_root: str = ""  # the case's own outputs (salvage, recovery) are shown as CASE/...

    def locate(self, path: str | None) -> Provenance | None:
        if not path:
            return None
        text = str(path)
        for root, item, extra in self.roots:
            if text == root or text.startswith(root.rstrip("/") + "/"):
                inner = text[len(root):].lstrip("/")
                if extra.get("prefix"):
                    inner = f"{extra['prefix'].rstrip('/')}/{inner}".strip("/")
                return Provenance(str(item["id"]), str(item["kind"]), str(item["source"]),
                                  item.get("sha256"), inner, extra.get("fstype"),
                                  extra.get("partition_start"), extra.get("uuid"))
        return None

    def relabel(self, value: Any) -> Any:
        """``value`` (text, or lists/dicts of it) with every scratch root (mount point, copy
        destination) replaced by its evidence label, so no temporary path reaches a reader."""
        if isinstance(value, str):
            for root, item, extra in self.roots:
                if extra.get("scratch") and root in value:
                    prefix = f"{item['id']}:" + (f"{extra['prefix'].strip('/')}/"
                                                 if extra.get("prefix") else "")
                    value = value.replace(root.rstrip("/") + "/", prefix).replace(
                        root, prefix.rstrip(":/") or str(item["id"]))
            if self.case_root and self.case_root in value:
                value = value.replace(self.case_root.rstrip("/") + "/", "CASE/")
            return value
        if isinstance(value, list):
            return [self.relabel(v) for v in value]
        if isinstance(value, dict):  # keys too: a result may be keyed by paths
            return {(self.relabel(k) if isinstance(k, str) else k): self.relabel(v)
                    for k, v in value.items()}
        return value

    def label(self, path: str | None) -> str:
        """The path as a reader should see it: ``E002:run/step-300.pt``, else the path."""
        found = self.locate(path)
        return found.label if found else str(path or "")


def _item_for(target: str, items: list[JsonObject]) -> JsonObject | None:
    real = os.path.realpath(target) if target.startswith("/") else target
    for item in items:
        details = item.get("details") or {}
        names = {str(item.get("source")), str(details.get("realpath") or ""),
                 str(details.get("from") or "")}
        if target in names or real in names:
            return item
    return None


def _mounted_roots(case: Case, items: list[JsonObject],
                   ) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Mounts of evidence items, and copies out of those mounts, as roots."""
    from ckptrescue.engine.case_outputs import outputs_of
    from ckptrescue.storage.outputs import CopyOutput, MountOutput

    roots: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    for mount in outputs_of(case, MountOutput):
        data = mount.to_json()
        target = str(data.get("backing_file") or data.get("target") or "")
        item = _item_for(target, items) or _item_for(str(data.get("target") or ""), items)
        mountpoint = data.get("mountpoint")
        if item and mountpoint:
            roots.append((str(mountpoint), item, {
                "scratch": True, "fstype": data.get("fstype"), "partition_start": data.get("partition_start"),
                "uuid": data.get("uuid")}))
    mounted = {r[0]: r for r in roots}
    for copy in outputs_of(case, CopyOutput):
        data = copy.to_json()
        src, dest = str(data.get("source") or ""), str(data.get("dest") or "")
        for mountpoint, (_root, item, extra) in mounted.items():
            if dest and (src == mountpoint or src.startswith(mountpoint.rstrip("/") + "/")):
                prefix = src[len(mountpoint):].strip("/")
                roots.append((dest, item, {**extra, "prefix": prefix, "scratch": True}))
    return roots


def index(case: Case) -> ProvenanceIndex:
    """Every way a path in this case's records leads back to an evidence item."""
    from ckptrescue.engine.case_outputs import STORAGE, domains_held

    items = [e.to_json() for e in case.evidence()]
    # an image acquired from another evidence item is the one examined: prefer the acquired
    # copy (it has the hash) when a mount names it. A case that cannot hold a mount or copy
    # record (a probe's, a manifest build's) does not even import their types
    roots: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    if domains_held(case)(STORAGE):
        roots = _mounted_roots(case, items)
    for item in items:
        source = str(item.get("source") or "")
        if item.get("kind") in ("file", "directory", "s3-object", "s3-prefix", "mount") \
                and source:
            roots.append((source, item, {}))
    roots.sort(key=lambda r: len(r[0]), reverse=True)
    return ProvenanceIndex(roots, len(items), str(case.root.absolute()))
