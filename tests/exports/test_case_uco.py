"""The CASE/UCO export: validated by the CASE project's own validator (``case_validate`` from
case-utils, CASE 1.5.0), carrying every evidence hash and finding code, deterministic, and
read-only for the case and its evidence."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path
from typing import Any

import case_validator
import pytest
from exports_testlib import tree_sha256

from ckptrescue.exports.case_uco import (
    CASE_VERSION,
    all_codes,
    dumps,
    export_case_uco,
    sha256_values,
    write_case_uco,
)


def _nodes(doc: dict[str, Any], type_: str) -> list[dict[str, Any]]:
    return [n for n in doc["@graph"] if type_ in (n["@type"] if isinstance(n["@type"], list)
                                                   else [n["@type"]])]


def test_export_conforms_to_case_with_case_validate(incident: dict[str, Any],
                                                    tmp_path: Path) -> None:
    pytest.importorskip("case_utils")
    assert case_validator.PLAIN.is_file(), "case_validate missing: pip install case-utils"
    out = tmp_path / "case.jsonld"
    write_case_uco(incident["case"], out)
    res = case_validator.validate(out, version=CASE_VERSION)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Conforms: True" in res.stdout
    # not even Info or Warning results (e.g. IRIs not ending in a UUID, vocabulary misses)
    assert "Results (" not in res.stdout and "Severity" not in res.stdout, res.stdout


def test_export_carries_evidence_hashes_provenance_actions_and_findings(
        incident: dict[str, Any]) -> None:
    case = incident["case"]
    doc = export_case_uco(case)
    hashes = sha256_values(doc)
    for item in case.evidence():
        if item.sha256:
            assert item.sha256 in hashes, item
    assert incident["torn_sha256"] in hashes  # the preserved S3 object's bytes
    for record in case.records():
        for sha in record.get("artifacts", []):
            assert sha in hashes  # every artifact (tool outputs, step results, copies)
    assert all_codes(doc) == sorted(f.code for f in case.findings())
    assert "ST007" in all_codes(doc)  # the truncated checkpoint

    (investigation,) = _nodes(doc, "case-investigation:Investigation")
    assert investigation["uco-core:name"] == "run 7 checkpoints"
    head = case.verify().chain.head
    refs = {n["@id"]: n for n in _nodes(doc, "uco-core:ExternalReference")}
    assert head in {refs[r["@id"]]["uco-core:externalIdentifier"]
                    for r in investigation["uco-core:externalReference"]}

    provenance = _nodes(doc, "case-investigation:ProvenanceRecord")
    exhibits = {p.get("case-investigation:exhibitNumber") for p in provenance}
    assert {e.id for e in case.evidence()} <= exhibits

    actions = _nodes(doc, "case-investigation:InvestigativeAction")
    tools = {n["@id"]: n for n in _nodes(doc, "uco-tool:Tool")}
    runs = [a for a in actions if a["uco-core:name"] == "tool.run"]
    assert runs, "the dmesg/journalctl runs are actions"
    used = {tools[i["@id"]]["uco-core:name"] for a in runs for i in a["uco-action:instrument"]}
    assert {"dmesg", "journalctl", "ckptrescue"} <= used
    assert all(tools[t]["uco-tool:version"] for t in tools
               if tools[t]["uco-core:name"] in {"dmesg", "journalctl"})
    for run in runs:
        assert run["uco-action:startTime"]["@type"] == "xsd:dateTime"
        assert run["uco-action:startTime"]["@value"] <= run["uco-action:endTime"]["@value"]
        assert run["uco-action:result"], "stdout/stderr artifacts are results"

    # the finding about the torn checkpoint is about that file, and the file lies inside the
    # evidence directory
    (st007,) = [a for a in _nodes(doc, "uco-core:Annotation") if a["uco-core:name"] == "ST007"]
    assert "severity:error" in st007["uco-core:tag"]
    (subject,) = st007["uco-core:object"]
    files = {n["@id"]: n for n in _nodes(doc, "uco-observable:File")}
    assert files[subject["@id"]]["uco-core:name"].endswith("step-200.safetensors")
    (evidence_dir,) = [n for n in _nodes(doc, "uco-observable:Directory")
                       if n["uco-core:name"] == "E001"]
    contained = [r for r in _nodes(doc, "uco-observable:ObservableRelationship")
                 if r["uco-core:source"] == [subject]]
    assert [r["uco-core:target"]["@id"] for r in contained] == [evidence_dir["@id"]]

    # the S3 object: URL facet with key and version, its bucket, and its hash
    s3_items = [e for e in case.evidence() if e.kind == "s3-object"]
    assert s3_items
    urls = {n["uco-observable:fullValue"] for n in _nodes(doc, "uco-observable:URLFacet")}
    assert {f"{e.source}?versionId={incident['v2']}" for e in s3_items} <= urls
    assert f"s3://{incident['bucket']}" in urls


def test_two_exports_are_byte_identical_and_iris_follow_case_utils(
        incident: dict[str, Any]) -> None:
    inherent = pytest.importorskip("case_utils.inherent_uuid")
    from rdflib import Literal, Namespace, URIRef

    case = incident["case"]
    first, second = dumps(export_case_uco(case)), dumps(export_case_uco(case))
    assert first == second
    doc = export_case_uco(case)
    ids = [n["@id"] for n in doc["@graph"]]
    assert len(ids) == len(set(ids))
    case_id = case.manifest["id"]
    for iri in ids:  # derived (UUIDv5), never random; the investigation is the case's own id
        assert uuid.UUID(iri[-36:]).version == 5 or iri.endswith(f"Investigation-{case_id}")
    namespace = Namespace(doc["@context"]["kb"])
    for node in doc["@graph"]:
        if node["@type"] == "uco-types:Hash":
            value = Literal(node["uco-types:hashValue"]["@value"],
                            datatype=URIRef("http://www.w3.org/2001/XMLSchema#hexBinary"))
            expected = inherent.hash_method_value_uuid(Literal("SHA256"), value)
            assert node["@id"].endswith(str(expected))
        for facet in node.get("uco-core:hasFacet", []):
            cls = facet["@id"][len(str(namespace)):].rsplit("-", 5)[0]
            expected_iri = inherent.get_facet_uriref(
                URIRef(node["@id"]), URIRef(doc["@context"]["uco-observable"] + cls),
                namespace=namespace)
            assert facet["@id"] == str(expected_iri)


def test_export_changes_neither_the_case_nor_its_evidence(incident: dict[str, Any],
                                                          tmp_path: Path) -> None:
    case = incident["case"]
    evidence_before = tree_sha256(incident["evidence"])
    case_before = tree_sha256(case.root)
    write_case_uco(case, tmp_path / "out.jsonld")
    assert tree_sha256(incident["evidence"]) == evidence_before
    assert tree_sha256(case.root) == case_before
    assert case.verify().ok
    with pytest.raises(ValueError, match="case's own records"):
        write_case_uco(case, case.root / "audit.jsonl")
    assert hashlib.sha256((case.root / "audit.jsonl").read_bytes()).hexdigest() == \
        case_before["audit.jsonl"]


def test_a_broken_chain_is_said_and_nothing_after_it_exported(incident: dict[str, Any],
                                                              tmp_path: Path) -> None:
    import shutil

    from ckptrescue.record.case import Case

    copy = tmp_path / "copy"
    shutil.copytree(incident["case"].root, copy)
    audit = copy / "audit.jsonl"
    lines = audit.read_bytes().split(b"\n")
    cut = len(lines) // 2
    lines[cut] = lines[cut].replace(b'"actor":"', b'"actor":"mallory-', 1)  # hash no longer fits
    audit.chmod(0o644)
    audit.write_bytes(b"\n".join(lines))
    doc = export_case_uco(Case.open(copy))
    (investigation,) = _nodes(doc, "case-investigation:Investigation")
    assert any("BROKEN" in d for d in investigation["uco-core:description"])
    seqs = {int(r["uco-core:externalIdentifier"].split()[1])
            for r in _nodes(doc, "uco-core:ExternalReference")
            if r["uco-core:definingContext"].startswith("ckptrescue audit record")}
    assert seqs and max(seqs) < cut
