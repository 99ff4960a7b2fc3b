"""The case as CASE/UCO 1.x JSON-LD (CASE 1.5.0, the newest ontology ``case-utils`` bundles).

Everything comes from the case's hash-chained audit log (only the records that verify) and its
artifacts; nothing is re-run and nothing in the case is written. The mapping:

* the case -> ``case-investigation:Investigation`` (name = title, ``startTime`` = created,
  ``investigationStatus`` open/sealed, an ``ExternalReference`` carrying the audit log's head
  hash); the examiner -> ``uco-identity:Identity`` with a ``Has_Role`` relationship to a
  ``case-investigation:Examiner`` role; each audit actor (``user@host``) -> an Identity, the
  ``uco-action:performer`` of what it did;
* each evidence item -> a ``uco-observable`` object chosen by kind (``File``, ``File`` +
  ``Image`` for a ddrescue image, ``Directory``, ``StorageMedium`` for a block device, an
  ``ObservableObject`` with a ``URLFacet`` for an S3 object) with ``FileFacet`` /
  ``ContentDataFacet`` (``uco-types:Hash`` SHA256 as ``xsd:hexBinary``, size) /
  ``DeviceFacet`` / ``StorageMediumFacet`` / ``URLFacet`` as they apply, and a
  ``case-investigation:ProvenanceRecord`` (exhibit number = the evidence id);
* each artifact (write-once, content-addressed) -> a ``File`` with its SHA256 and a
  ProvenanceRecord, in the ``uco-action:result`` of the record that produced it;
* each audit record that is an action -> ``case-investigation:InvestigativeAction``
  (``step.started``/``step.finished`` become one action; records between them are its
  ``subaction``\\ s), ``uco-action:instrument`` -> ``uco-tool:Tool`` (the kit itself, or the
  external program with the version line the runner recorded), start/end as ``xsd:dateTime``,
  ``object`` = the evidence items (and probed checkpoints) it read, ``result`` = artifacts,
  provenance records and findings; an ``ExternalReference`` names the record's seq and hash;
* each probed checkpoint -> a ``File`` related ``Contained_Within`` its evidence item when
  its path lies inside one (directly or under a mount point the case recorded);
* each finding -> ``uco-core:Annotation`` (``name`` = code, ``statement`` = title, ``tag`` =
  code, ``severity:…``, ``source:…``; the whole finding as JSON in ``description``) whose
  ``uco-core:object`` is the evidence object, checkpoint or file it is about.

IRIs are ``urn:ckptrescue:case:<case id>:<Class>-<uuid5>``: UUIDv5 under the case id of the
record hash / evidence id / artifact hash they come from; facets and hashes follow
``case_utils.inherent_uuid`` (a facet's UUID derives from its object's UUID and its class, a
hash's from ``urn:hash::sha256:<hex>``). No clock, no random UUID: two exports of the same case
are byte-identical (:func:`dumps`).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ckptrescue.exports.records import canonical_text, describe_record, iso_utc, parse_time
from ckptrescue.model import JsonObject
from ckptrescue.record.audit import GENESIS, verify_lines

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

CASE_VERSION = "case-1.5.0"  # the ontology version case_validate checks this export against

_UCO = "https://ontology.unifiedcyberontology.org/uco/"
CONTEXT: dict[str, str] = {
    "case-investigation": "https://ontology.caseontology.org/case/investigation/",
    "uco-action": _UCO + "action/",
    "uco-core": _UCO + "core/",
    "uco-identity": _UCO + "identity/",
    "uco-observable": _UCO + "observable/",
    "uco-role": _UCO + "role/",
    "uco-tool": _UCO + "tool/",
    "uco-types": _UCO + "types/",
    "xsd": "http://www.w3.org/2001/XMLSchema#",
}

# records that are not actions of their own
_NOT_ACTIONS = {"case.created", "finding", "tool.version", "step.started"}
# a tool run's exit -> uco-action:actionStatus (ActionStatusTypeVocab)
_STEP_STATUS = {"ok": "Success", "failed": "Fail", "refused": "Fail", "error": "Error",
                "cancelled": "Fail", "stopped": "Pending", "skipped": "Complete/Finish"}


def export_case_uco(case: Case) -> JsonObject:
    """The case as a CASE/UCO JSON-LD document (a dict; :func:`dumps` for the exact bytes)."""
    return _Builder(case).build()


def dumps(doc: JsonObject) -> str:
    """The canonical text of an export: sorted keys, two-space indent, ASCII only (every
    control and non-ASCII character as ``\\uXXXX``: ``cat`` of it is inert, names exact)."""
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=True) + "\n"


def write_case_uco(case: Case, path: Path | str) -> None:
    """Write the export of ``case`` to ``path`` (never inside the case's own records)."""
    target = Path(path)
    protected = {os.path.realpath(p) for p in case.protected_paths()}
    real = os.path.realpath(target)
    if real in protected or any(real.startswith(p + os.sep) for p in protected):
        raise ValueError(f"{target}: refusing to write an export over the case's own records")
    target.write_text(dumps(export_case_uco(case)), encoding="utf-8")


# ---- helpers ---------------------------------------------------------------------------------

def _ref(iri: str) -> dict[str, str]:
    return {"@id": iri}


def _dt(value: Any) -> dict[str, str] | None:
    """An ``xsd:dateTime`` literal in UTC, or None when ``value`` is no time."""
    parsed = parse_time(value)
    if parsed is None:
        return None
    return {"@type": "xsd:dateTime", "@value": iso_utc(parsed)}


def _hex(value: Any) -> str | None:
    if isinstance(value, str) and len(value) == 64:
        try:
            bytes.fromhex(value)
        except ValueError:
            return None
        return value.lower()
    return None


def _strings(obj: Any, depth: int = 0) -> Iterator[str]:
    """Every string inside a JSON value (bounded depth)."""
    if depth > 6:
        return
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _strings(value, depth + 1)
    elif isinstance(obj, list | tuple):
        for value in obj:
            yield from _strings(value, depth + 1)


def _under(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root if root == "/" else root + "/")


@dataclass
class _Action:
    iri: str
    node: JsonObject
    objects: list[str] = field(default_factory=list)
    results: list[str] = field(default_factory=list)
    subactions: list[str] = field(default_factory=list)
    instruments: list[str] = field(default_factory=list)


class _Builder:
    def __init__(self, case: Case) -> None:
        self.case = case
        self.manifest = case.manifest
        case_id = str(self.manifest.get("id") or "")
        try:
            self.ns = uuid.UUID(case_id)
        except ValueError:
            self.ns = uuid.uuid5(uuid.NAMESPACE_URL, f"urn:ckptrescue:case:{case_id}")
        self.prefix = f"urn:ckptrescue:case:{self.ns}:"
        self.nodes: dict[str, JsonObject] = {}
        raw = case.audit.read_bytes()
        self.audit_bytes = raw
        self.chain = verify_lines(raw)
        self.records = self.chain.records
        self.actions: dict[str, _Action] = {}
        self.action_order: list[str] = []
        self.provenance: list[str] = []
        self.annotations: list[str] = []
        self.relationships: list[str] = []
        self.evidence: list[tuple[JsonObject, str]] = []  # (item, iri)
        self.artifacts: dict[str, str] = {}  # sha256 -> iri
        self.artifact_info: dict[str, JsonObject] = {}
        self.checkpoints: dict[str, str] = {}  # probed path -> iri
        self.subjects: dict[str, str] = {}  # finding evidence string -> iri
        self.mounts: list[tuple[str, str]] = []  # (mount point, evidence iri)
        self.tools: dict[str, str] = {}
        self.identities: dict[str, str] = {}

    # -- IRIs ---------------------------------------------------------------------------------
    def iri(self, cls: str, *key: str) -> str:
        return f"{self.prefix}{cls}-{uuid.uuid5(self.ns, chr(0).join(key))}"

    def add(self, node: JsonObject) -> str:
        iri = str(node["@id"])
        if iri not in self.nodes:
            self.nodes[iri] = node
        else:  # the same thing seen again (a file named by a finding, then probed): merge
            for key, value in node.items():
                self.nodes[iri].setdefault(key, value)
        return iri

    def facet(self, owner: str, cls: str, props: JsonObject) -> dict[str, str]:
        """A facet of ``owner`` with the ``case_utils.inherent_uuid`` IRI scheme."""
        owner_uuid = uuid.UUID(owner[-36:])
        facet_uuid = uuid.uuid5(owner_uuid, CONTEXT["uco-observable"] + cls)
        iri = f"{self.prefix}{cls}-{facet_uuid}"
        self.add({"@id": iri, "@type": f"uco-observable:{cls}",
                  **{k: v for k, v in props.items() if v is not None}})
        return _ref(iri)

    def hash_node(self, sha256: str) -> dict[str, str]:
        hash_uuid = uuid.uuid5(uuid.NAMESPACE_URL, f"urn:hash::sha256:{sha256}")
        iri = f"{self.prefix}Hash-{hash_uuid}"
        self.add({"@id": iri, "@type": "uco-types:Hash", "uco-types:hashMethod": "SHA256",
                  "uco-types:hashValue": {"@type": "xsd:hexBinary", "@value": sha256}})
        return _ref(iri)

    def content_facet(self, owner: str, sha256: str | None, size: int | None
                      ) -> dict[str, str] | None:
        if sha256 is None and size is None:
            return None
        return self.facet(owner, "ContentDataFacet", {
            "uco-observable:hash": [self.hash_node(sha256)] if sha256 else None,
            "uco-observable:sizeInBytes": size})

    def external_reference(self, owner: str, context: str, identifier: str) -> dict[str, str]:
        ref_uuid = uuid.uuid5(uuid.UUID(owner[-36:]), f"{context}\0{identifier}")
        iri = f"{self.prefix}ExternalReference-{ref_uuid}"
        self.add({"@id": iri, "@type": "uco-core:ExternalReference",
                  "uco-core:definingContext": context, "uco-core:externalIdentifier": identifier})
        return _ref(iri)

    def relate(self, source: str, target: str, kind: str, observable: bool = True) -> None:
        iri = self.iri("ObservableRelationship" if observable else "Relationship",
                       "rel", source, target, kind)
        self.relationships.append(self.add({
            "@id": iri,
            "@type": "uco-observable:ObservableRelationship" if observable
            else "uco-core:Relationship",
            "uco-core:source": [_ref(source)], "uco-core:target": _ref(target),
            "uco-core:kindOfRelationship": kind, "uco-core:isDirectional": True}))

    # -- the kit, tools, people ---------------------------------------------------------------
    def kit_tool(self) -> str:
        version = str(self.manifest.get("tool_version") or "")
        return self.tool("ckptrescue", version, "forensic incident-response kit (this export's "
                         "source)", None)

    def tool(self, name: str, version: str, tool_type: str, executable: str | None) -> str:
        key = f"{name}\0{version}"
        if key not in self.tools:
            iri = self.iri("Tool", "tool", name, version)
            self.tools[key] = self.add({
                "@id": iri, "@type": "uco-tool:Tool", "uco-core:name": name,
                **({"uco-tool:version": version} if version else {}),
                "uco-tool:toolType": tool_type,
                **({"uco-core:description": f"executable {executable}"} if executable else {})})
        return self.tools[key]

    def identity(self, name: str) -> str:
        if name not in self.identities:
            iri = self.iri("Identity", "identity", name)
            self.identities[name] = self.add({"@id": iri, "@type": "uco-identity:Identity",
                                              "uco-core:name": name})
        return self.identities[name]

    # -- evidence -----------------------------------------------------------------------------
    def add_evidence(self, record: JsonObject, item: JsonObject) -> str:
        kind = str(item.get("kind") or "")
        source = str(item.get("source") or "")
        details = item.get("details") if isinstance(item.get("details"), dict) else {}
        sha = _hex(item.get("sha256"))
        size = item.get("size") if isinstance(item.get("size"), int) else None
        iri = self.iri(_evidence_class(kind, details), "evidence", str(item.get("id")),
                       record["hash"])
        types: list[str]
        facets: list[dict[str, str] | None] = []
        props: JsonObject = {}
        if kind == "block-device":
            types = ["uco-observable:StorageMedium"]
            facets.append(self.facet(iri, "DeviceFacet", {
                "uco-observable:deviceType": "block device",
                "uco-observable:model": _str(details.get("model")),
                "uco-observable:serialNumber": _str(details.get("serial"))}))
            capacity = size if size is not None else details.get("size")
            if isinstance(capacity, int):
                facets.append(self.facet(iri, "StorageMediumFacet", {
                    "uco-observable:totalStorageCapacityInBytes": capacity}))
            facets.append(self.content_facet(iri, sha or _hex(details.get("source_sha256")),
                                             None))
        elif kind in {"s3-object", "s3-prefix"}:
            types = ["uco-observable:ObservableObject"]
            obj = details.get("object") if isinstance(details.get("object"), dict) else {}
            version = obj.get("version_id")
            url = source if not version or "versionId=" in source else (
                f"{source}?versionId={version}")  # the exact version acquired
            facets.append(self.url_facet(iri, url))
            facets.append(self.content_facet(iri, sha, size))
        elif kind in {"directory", "mount"}:
            types = ["uco-observable:Directory"]
            facets.append(self.facet(iri, "FileFacet", {
                "uco-observable:filePath": source, "uco-observable:fileName":
                    os.path.basename(source.rstrip("/")) or "/",
                "uco-observable:isDirectory": True}))
        elif kind in {"file", "image"}:
            types = ["uco-observable:File"]
            if "mapfile" in details:  # an image ddrescue made of a device
                types.append("uco-observable:Image")
                facets.append(self.facet(iri, "ImageFacet", {"uco-observable:imageType": "raw"}))
            facets.append(self.facet(iri, "FileFacet", {
                "uco-observable:filePath": source,
                "uco-observable:fileName": os.path.basename(source),
                "uco-observable:sizeInBytes": size}))
            facets.append(self.content_facet(iri, sha, size))
        else:
            types = ["uco-observable:ObservableObject"]
        props["uco-core:hasFacet"] = [f for f in facets if f is not None]
        desc = [f"evidence {item.get('id')} ({kind}): {source}",
                f"acquired by: {item.get('acquired_how')}"]
        if kind == "directory" and sha:
            desc.append(f"sha256 of its file manifest: {sha}")
        if kind == "block-device" and _hex(details.get("source_sha256")):
            desc.append("hash: SHA-256 of the device's bytes as read when imaged")
        node = {"@id": iri, "@type": types if len(types) > 1 else types[0],
                "uco-core:name": str(item.get("id")),
                "uco-core:description": desc,
                "uco-core:objectCreatedTime": _dt(item.get("acquired_at")), **props}
        self.add({k: v for k, v in node.items() if v not in (None, [])})
        self.evidence.append((item, iri))
        if kind == "s3-object":
            self.add_bucket(iri, source)
        if kind == "mount":
            self.mounts.append((source, iri))
        return iri

    def url_facet(self, owner: str, url: str) -> dict[str, str]:
        parts = urlsplit(url)
        return self.facet(owner, "URLFacet", {
            "uco-observable:fullValue": url, "uco-observable:scheme": parts.scheme or None,
            "uco-observable:path": parts.path or None, "uco-observable:query": parts.query or None})

    def add_bucket(self, obj: str, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc:
            return
        iri = self.iri("ObservableObject", "bucket", parts.netloc)
        self.add({"@id": iri, "@type": "uco-observable:ObservableObject",
                  "uco-core:name": parts.netloc, "uco-core:description": "S3 bucket",
                  "uco-core:hasFacet": [self.url_facet(iri, f"s3://{parts.netloc}")]})
        self.relate(obj, iri, "Contained_Within")

    def evidence_for(self, path: str) -> list[str]:
        """Evidence objects a path or URL names or lies inside."""
        out = []
        for item, iri in self.evidence:
            source = str(item.get("source") or "")
            details = item.get("details") if isinstance(item.get("details"), dict) else {}
            real = details.get("realpath") if isinstance(details.get("realpath"), str) else None
            kind = item.get("kind")
            named = path in (source, real) or (kind == "s3-object"
                                               and path == source.split("?")[0])
            inside = kind in {"directory", "mount", "s3-prefix"} and bool(source) and _under(
                path, source)
            if named or inside:
                out.append(iri)
        return out

    # -- artifacts ----------------------------------------------------------------------------
    def add_artifact(self, sha: str, producer: JsonObject) -> str:
        if sha in self.artifacts:
            return self.artifacts[sha]
        info = self.artifact_info.get(sha, {})
        path = self.case.artifact_path(sha)
        try:
            size: int | None = path.stat().st_size
        except OSError:
            size = info.get("size") if isinstance(info.get("size"), int) else None
        iri = self.iri("File", "artifact", sha)
        name = str(info.get("name") or "")
        self.add({k: v for k, v in {
            "@id": iri, "@type": "uco-observable:File",
            "uco-core:name": name or f"artifact {sha[:12]}",
            "uco-core:description": f"write-once case artifact ({info.get('kind') or 'output'}) "
                                    f"first recorded by audit record seq {producer['seq']} "
                                    f"({producer['action']})",
            "uco-core:objectCreatedTime": _dt(producer.get("time")),
            "uco-core:hasFacet": [
                self.facet(iri, "FileFacet", {"uco-observable:filePath": f"artifacts/{sha}",
                                              "uco-observable:fileName": sha,
                                              "uco-observable:sizeInBytes": size}),
                self.content_facet(iri, sha, size)],
        }.items() if v is not None})
        self.artifacts[sha] = iri
        return iri

    # -- provenance ---------------------------------------------------------------------------
    def provenance_record(self, obj: str, key: str, *, exhibit: str | None,
                          roots: list[str], description: str, when: Any) -> str:
        iri = self.iri("ProvenanceRecord", "provenance", key)
        node = {"@id": iri, "@type": "case-investigation:ProvenanceRecord",
                "uco-core:object": [_ref(obj)], "uco-core:description": description,
                "uco-core:objectCreatedTime": _dt(when)}
        if exhibit:
            node["case-investigation:exhibitNumber"] = exhibit
        if roots:
            node["case-investigation:rootExhibitNumber"] = sorted(set(roots))
        self.add({k: v for k, v in node.items() if v is not None})
        self.provenance.append(iri)
        return iri

    # -- checkpoints and finding subjects -----------------------------------------------------
    def contained_in(self, obj: str, path: str) -> None:
        owners = self.evidence_for(path)
        for mountpoint, ev in self.mounts:
            if _under(path, mountpoint) and ev not in owners:
                owners.append(ev)
        for owner in owners:
            if owner != obj:
                self.relate(obj, owner, "Contained_Within")

    def checkpoint(self, details: JsonObject, record: JsonObject) -> str:
        path = str(details.get("path") or "")
        if path in self.checkpoints:
            return self.checkpoints[path]
        iri = self.iri("File", "path", path)
        size = details.get("size") if isinstance(details.get("size"), int) else None
        mtime = details.get("mtime")
        modified = _dt(mtime) if isinstance(mtime, str) else (
            {"@type": "xsd:dateTime", "@value": iso_utc(datetime.fromtimestamp(mtime, UTC))}
            if isinstance(mtime, int | float) and not isinstance(mtime, bool) else None)
        self.add({"@id": iri, "@type": "uco-observable:File", "uco-core:name": path,
                  "uco-core:description": f"checkpoint probed (format {details.get('format')}, "
                                          f"verdict {details.get('verdict')})",
                  "uco-core:hasFacet": [self.facet(iri, "FileFacet", {k: v for k, v in {
                      "uco-observable:filePath": path,
                      "uco-observable:fileName": os.path.basename(path.rstrip("/")),
                      "uco-observable:sizeInBytes": size,
                      "uco-observable:modifiedTime": modified}.items() if v is not None})]})
        self.checkpoints[path] = iri
        self.contained_in(iri, path)
        return iri

    def subject(self, evidence: str) -> list[str]:
        """The objects a finding's ``evidence`` string is about (created if need be)."""
        direct = [iri for item, iri in self.evidence if evidence == item.get("source")
                  or evidence == (item.get("details") or {}).get("realpath")
                  or (item.get("kind") == "s3-object"
                      and evidence == str(item.get("source")).split("?")[0])]
        if direct:
            return direct
        if evidence in self.checkpoints:
            return [self.checkpoints[evidence]]
        if evidence in self.subjects:
            return [self.subjects[evidence]]
        scheme = urlsplit(evidence).scheme
        if scheme and "://" in evidence:
            iri = self.iri("ObservableObject", "subject", evidence)
            self.add({"@id": iri, "@type": "uco-observable:ObservableObject",
                      "uco-core:name": evidence,
                      "uco-core:hasFacet": [self.url_facet(iri, evidence)]})
            self.add_bucket(iri, evidence)
        elif evidence.startswith("/"):
            iri = self.iri("File", "path", evidence)
            self.add({"@id": iri, "@type": "uco-observable:File", "uco-core:name": evidence,
                      "uco-core:hasFacet": [self.facet(iri, "FileFacet", {
                          "uco-observable:filePath": evidence,
                          "uco-observable:fileName": os.path.basename(evidence.rstrip("/"))})]})
        else:
            return []
        self.subjects[evidence] = iri
        self.contained_in(iri, evidence)
        return [iri]

    # -- actions ------------------------------------------------------------------------------
    def new_action(self, record: JsonObject, *, started: bool = False) -> _Action:
        iri = self.iri("InvestigativeAction", "record", record["hash"])
        details = record.get("details") or {}
        node: JsonObject = {
            "@id": iri, "@type": "case-investigation:InvestigativeAction",
            "uco-core:name": str(record["action"]),
            "uco-core:description": describe_record(record),
            "uco-action:performer": _ref(self.identity(str(record.get("actor") or "unknown"))),
            "uco-core:externalReference": [self.external_reference(
                iri, "ckptrescue audit record", f"seq {record['seq']} sha256 {record['hash']}")],
        }
        when = parse_time(record.get("time"))
        if started:
            node["uco-core:name"] = "playbook step"
            node["uco-action:actionStatus"] = "Ongoing"  # until its step.finished
            if when is not None:
                node["uco-action:startTime"] = {"@type": "xsd:dateTime", "@value": iso_utc(when)}
        else:
            duration = details.get("duration_s")
            if when is not None and isinstance(duration, int | float):
                begin = datetime.fromtimestamp(when.timestamp() - float(duration), UTC)
                node["uco-action:startTime"] = {"@type": "xsd:dateTime",
                                                "@value": iso_utc(begin)}
            if when is not None:
                node["uco-action:endTime"] = {"@type": "xsd:dateTime", "@value": iso_utc(when)}
            status = _status(record)
            if status:
                node["uco-action:actionStatus"] = status
        action = _Action(iri, node)
        self.actions[iri] = action
        self.action_order.append(iri)
        return action

    def finish_step(self, step: _Action, record: JsonObject) -> None:
        node = step.node
        node["uco-core:name"] = "step.finished"
        node["uco-core:description"] = describe_record(record)
        node["uco-core:externalReference"].append(self.external_reference(
            step.iri, "ckptrescue audit record (step finished)",
            f"seq {record['seq']} sha256 {record['hash']}"))
        when = parse_time(record.get("time"))
        if when is not None:
            node["uco-action:endTime"] = {"@type": "xsd:dateTime", "@value": iso_utc(when)}
        node["uco-action:actionStatus"] = _status(record) or "Unknown"

    def tool_of(self, record: JsonObject, versions: dict[str, tuple[str, str]]) -> str:
        details = record.get("details") or {}
        argv = details.get("argv") or []
        if record["action"] in {"tool.run", "tool.refused", "tool.missing", "tool.interrupted",
                                "tool.failed_to_start"} and argv:
            name = os.path.basename(str(argv[0]))
            version, exe = versions.get(name, ("", str(details.get("executable") or "")))
            return self.tool(name, version, "external program run by the kit's guarded runner",
                             exe or None)
        return self.kit_tool()

    # -- the document -------------------------------------------------------------------------
    def build(self) -> JsonObject:
        manifest = self.manifest
        inv = f"{self.prefix}Investigation-{self.ns}"
        versions: dict[str, tuple[str, str]] = {}
        for record in self.records:
            if record["action"] == "artifact.stored":
                d = record.get("details") or {}
                if isinstance(d.get("sha256"), str):
                    self.artifact_info.setdefault(d["sha256"], d)
            elif record["action"] == "tool.version":
                d = record.get("details") or {}
                versions.setdefault(os.path.basename(str(d.get("tool"))),
                                    (str(d.get("version") or ""), str(d.get("executable") or "")))
        self.kit_tool()
        steps: list[tuple[tuple[str, str], _Action]] = []  # open playbook steps, innermost last
        for record in self.records:
            action_name = record["action"]
            details = record.get("details") or {}
            if action_name in {"case.created", "tool.version"}:
                continue
            parent = steps[-1][1] if steps else None
            if action_name == "step.started":
                step = self.new_action(record, started=True)
                step.instruments.append(self.kit_tool())
                if parent is not None:
                    parent.subactions.append(step.iri)
                steps.append(((str(details.get("run_key")), str(details.get("step"))), step))
                continue
            if action_name == "step.finished":
                key = (str(details.get("run_key")), str(details.get("step")))
                index = next((i for i in range(len(steps) - 1, -1, -1) if steps[i][0] == key),
                             None)
                if index is not None:
                    step = steps[index][1]
                    del steps[index:]
                    self.finish_step(step, record)
                    self.link_results(step, record)
                    continue
            if action_name == "evidence.added" and isinstance(details.get("item"), dict):
                self.add_evidence(record, details["item"])
            if action_name == "checkpoint.probed" and details.get("path"):
                self.checkpoint(details, record)
            if action_name == "storage.mounted" and details.get("mountpoint"):
                for ev in self.evidence_for(str(details.get("target") or "")):
                    self.mounts.append((str(details["mountpoint"]), ev))
            if action_name == "finding":
                self.add_finding(record, parent)
                continue
            action = self.new_action(record)
            action.instruments.append(self.tool_of(record, versions))
            if action_name in {"tool.run", "sandbox.run"}:
                action.instruments.append(self.kit_tool())
            self.link_objects(action, record)
            self.link_results(action, record)
            if parent is not None:
                parent.subactions.append(action.iri)
                parent.objects += action.objects
        for action in self.actions.values():
            node = action.node
            if action.instruments:
                node["uco-action:instrument"] = [_ref(i) for i in dict.fromkeys(action.instruments)]
            if action.objects:
                node["uco-action:object"] = [_ref(i) for i in dict.fromkeys(action.objects)]
            if action.results:
                node["uco-action:result"] = [_ref(i) for i in dict.fromkeys(action.results)]
            if action.subactions:
                node["uco-action:subaction"] = [_ref(i) for i in dict.fromkeys(action.subactions)]
            self.add(node)
        audit_obj = self.add_audit_log()
        head = self.chain.head
        last = self.records[-1] if self.records else None
        status = "sealed" if any(r["action"] == "case.sealed" for r in self.records) else "open"
        description = [
            f"ckptrescue case {manifest.get('id')} on host {manifest.get('host')}",
            f"audit log: {len(self.records)} records verify; head sha256 {head}"
            + (f" (seq {last['seq']})" if last else ""),
        ]
        if not self.chain.ok:
            description.append("audit chain BROKEN: " + "; ".join(self.chain.problems)
                               + " -- records after the break are not exported")
        sealed_at = next((r.get("time") for r in self.records if r["action"] == "case.sealed"),
                         None)
        examiner = str(manifest.get("examiner") or "")
        compilation: list[str] = [*self.action_order, *self.provenance, *self.annotations]
        if examiner:
            person = self.identity(examiner)
            role = self.add({"@id": self.iri("Examiner", "role", examiner),
                             "@type": "case-investigation:Examiner",
                             "uco-core:name": "examiner"})
            self.relate(person, role, "Has_Role", observable=False)
            compilation += [person, role]
        compilation += [*self.relationships, audit_obj]
        investigation = {
            "@id": inv, "@type": "case-investigation:Investigation",
            "uco-core:name": str(manifest.get("title") or manifest.get("id")),
            "uco-core:description": description,
            "case-investigation:investigationForm": "incident",
            "case-investigation:investigationStatus": status,
            "case-investigation:focus": "corrupted ML checkpoints and datasets",
            "uco-core:startTime": _dt(manifest.get("created")),
            "uco-core:endTime": _dt(sealed_at) if sealed_at else None,
            "uco-core:objectCreatedTime": _dt(manifest.get("created")),
            "uco-core:externalReference": [
                self.external_reference(inv, "ckptrescue audit log head (sha256 of the last "
                                        "record)", head),
                self.external_reference(inv, "ckptrescue case id", str(manifest.get("id")))],
            "uco-core:object": [_ref(i) for i in dict.fromkeys(compilation)],
        }
        graph_nodes = [{k: v for k, v in investigation.items() if v is not None},
                       *self.nodes.values()]
        graph = sorted(graph_nodes, key=lambda n: str(n["@id"]))
        return {"@context": {**CONTEXT, "kb": self.prefix}, "@graph": graph}

    def add_audit_log(self) -> str:
        import hashlib

        iri = self.iri("File", "audit-log")
        sha = hashlib.sha256(self.audit_bytes).hexdigest()
        head = self.chain.head
        self.add({"@id": iri, "@type": "uco-observable:File", "uco-core:name": "audit.jsonl",
                  "uco-core:description": f"the case's hash-chained audit log (the source of "
                                          f"truth of this export): {len(self.records)} records "
                                          f"verify, head record sha256 {head}"
                                          + ("" if head != GENESIS else " (empty)"),
                  "uco-core:hasFacet": [
                      self.facet(iri, "FileFacet", {"uco-observable:filePath": "audit.jsonl",
                                                    "uco-observable:fileName": "audit.jsonl",
                                                    "uco-observable:sizeInBytes":
                                                        len(self.audit_bytes)}),
                      self.content_facet(iri, sha, len(self.audit_bytes))]})
        return iri

    def link_objects(self, action: _Action, record: JsonObject) -> None:
        details = record.get("details") or {}
        name = record["action"]
        if name == "evidence.added":
            item = details.get("item") or {}
            frm = (item.get("details") or {}).get("from")
            if isinstance(frm, str):
                action.objects += [i for i in self.evidence_for(frm)
                                   if i != self.evidence[-1][1]]
            return
        if name == "checkpoint.probed" and details.get("path") in self.checkpoints:
            action.objects.append(self.checkpoints[str(details["path"])])
        seen: set[str] = set()
        for text in _strings(details):
            if not text.startswith(("/", "s3://")) or text in seen:
                continue
            seen.add(text)
            for candidate in (text, text.split("=", 1)[-1]):
                action.objects += self.evidence_for(candidate)
        argv = details.get("argv")
        if isinstance(argv, list):
            for arg in argv:
                if isinstance(arg, str) and "=" in arg:
                    action.objects += self.evidence_for(arg.split("=", 1)[1])

    def link_results(self, action: _Action, record: JsonObject) -> None:
        details = record.get("details") or {}
        if record["action"] == "evidence.added":
            item = details.get("item") or {}
            ev = self.evidence[-1][1]
            roots = [str(i.get("id")) for i, iri in self.evidence
                     if iri in action.objects]
            prov = self.provenance_record(
                ev, f"evidence\0{item.get('id')}", exhibit=str(item.get("id")),
                roots=roots, description=f"{item.get('kind')} {item.get('source')} acquired by "
                f"{item.get('acquired_how')} (record seq {record['seq']})",
                when=item.get("acquired_at"))
            action.results += [ev, prov]
            for source_iri in dict.fromkeys(action.objects):
                self.add_derived(ev, source_iri)
        shas = [s for s in record.get("artifacts") or [] if _hex(s)]
        for sha in shas:
            fresh = sha not in self.artifacts
            art = self.add_artifact(sha, record)
            action.results.append(art)
            if fresh:
                roots = [str(i.get("id")) for i, iri in self.evidence if iri in action.objects]
                info = self.artifact_info.get(sha, {})
                action.results.append(self.provenance_record(
                    art, f"artifact\0{sha}", exhibit=None, roots=roots,
                    description=f"artifact {info.get('name') or sha} stored write-once "
                                f"(content-addressed) by record seq {record['seq']} "
                                f"({record['action']})", when=record.get("time")))

    def add_derived(self, derived: str, source: str) -> None:
        node = self.nodes[derived]
        node.setdefault("case-investigation:wasDerivedFrom", []).append(_ref(source))

    def add_finding(self, record: JsonObject, parent: _Action | None) -> None:
        finding = (record.get("details") or {}).get("finding") or {}
        iri = self.iri("Annotation", "finding", record["hash"])
        evidence = finding.get("evidence")
        objects = self.subject(str(evidence)) if isinstance(evidence, str) and evidence else []
        sha = _hex(finding.get("evidence_sha256"))
        if sha:
            objects += [iri2 for item, iri2 in self.evidence if item.get("sha256") == sha]
            if sha in self.artifacts:
                objects.append(self.artifacts[sha])
        if not objects:
            objects = [parent.iri] if parent is not None else [
                f"{self.prefix}Investigation-{self.ns}"]
        code = str(finding.get("code") or "")
        severity = str(finding.get("severity") or "")
        tags = [code, f"severity:{severity}"]
        if finding.get("source"):
            tags.append(f"source:{finding['source']}")
        self.add({"@id": iri, "@type": "uco-core:Annotation", "uco-core:name": code,
                  "uco-core:statement": str(finding.get("title") or ""),
                  "uco-core:tag": tags,
                  "uco-core:description": canonical_text(finding),
                  "uco-core:objectCreatedTime": _dt(record.get("time")),
                  "uco-core:object": [_ref(o) for o in dict.fromkeys(objects)],
                  "uco-core:externalReference": [self.external_reference(
                      iri, "ckptrescue audit record", f"seq {record['seq']} sha256 "
                      f"{record['hash']}")]})
        self.annotations.append(iri)
        if parent is not None:
            parent.results.append(iri)


def _evidence_class(kind: str, details: JsonObject) -> str:
    return {"block-device": "StorageMedium", "directory": "Directory", "mount": "Directory",
            "file": "File", "image": "File"}.get(kind, "ObservableObject")


def _str(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _status(record: JsonObject) -> str | None:
    details = record.get("details") or {}
    name = record["action"]
    if name == "tool.run":
        if details.get("timed_out"):
            return "Error"
        if details.get("cancelled"):
            return "Fail"
        return "Success" if details.get("returncode") == 0 else "Fail"
    if name in {"tool.refused", "tool.missing", "tool.failed_to_start", "tool.interrupted"}:
        return "Fail"
    if name == "sandbox.run":
        return "Success" if details.get("returncode") == 0 else "Fail"
    if name in {"step.finished", "run.finished"}:
        return _STEP_STATUS.get(str(details.get("status")), "Unknown")
    return "Complete/Finish"


def all_codes(doc: JsonObject) -> list[str]:
    """The finding codes an export carries (for checks and tests)."""
    return sorted(str(n.get("uco-core:name")) for n in doc.get("@graph", [])
                  if n.get("@type") == "uco-core:Annotation")


def sha256_values(doc: JsonObject) -> set[str]:
    """Every SHA256 hash value in an export."""
    return {str(n["uco-types:hashValue"]["@value"]) for n in doc.get("@graph", [])
            if n.get("@type") == "uco-types:Hash"}
