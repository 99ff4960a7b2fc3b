"""The tests' CASE validator (``tests/case_validator.py``: case_validate with each SPARQL query
text parsed once) reports what the plain ``case_validate`` reports, result for result."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import case_validator
import pytest

from ckptrescue.exports.case_uco import CASE_VERSION, export_case_uco

UUID_ADVICE = "UcoThings are suggested to end with a UUID."


def broken(doc: dict[str, Any]) -> dict[str, Any]:
    """The export with faults for SPARQL-based and core shapes: three nodes whose IRIs do not end
    in a UUID (the references to their old IRIs are left dangling), a hash method outside its
    vocabulary, and a size that is not an integer."""
    graph = doc["@graph"]
    renamed = graph[:3]
    for i, node in enumerate(renamed):
        node["@id"] = node["@id"].rpartition(":")[0] + f":not-a-uuid-{i}"
    hashes = [n for n in graph if n["@type"] == "uco-types:Hash"]
    hashes[0]["uco-types:hashMethod"] = {"@type": "uco-vocabulary:HashNameVocab",
                                         "@value": "NOT-A-HASH"}
    facets = [n for n in graph if "uco-observable:sizeInBytes" in n]
    facets[0]["uco-observable:sizeInBytes"] = {"@type": "xsd:integer", "@value": "many"}
    assert len(renamed) == 3 and hashes and facets
    return doc


def report_graph(turtle: str) -> Any:
    import rdflib

    return rdflib.Graph().parse(data=turtle, format="turtle")


def test_the_same_results_as_plain_case_validate(incident: dict[str, Any],
                                                  tmp_path: Path) -> None:
    pytest.importorskip("case_utils")
    path = tmp_path / "broken.jsonld"
    path.write_text(json.dumps(broken(export_case_uco(incident["case"]))), encoding="utf-8")
    plain = subprocess.run([str(case_validator.PLAIN), "--built-version", CASE_VERSION,
                            "-f", "turtle", str(path)], capture_output=True, text=True,
                           timeout=600)
    ours = case_validator.validate(path, "-f", "turtle", version=CASE_VERSION,
                                   env={**os.environ, "CKPTRESCUE_TEST_SPARQL_COUNTS": "1"})
    assert plain.returncode == ours.returncode == 1, (plain.stderr[-2000:], ours.stderr[-2000:])
    from rdflib import Literal, Namespace
    from rdflib.compare import isomorphic

    sh = Namespace("http://www.w3.org/ns/shacl#")
    expected, got = report_graph(plain.stdout), report_graph(ours.stdout)
    assert (None, sh.conforms, Literal(False)) in got
    assert isomorphic(expected, got)
    # the SPARQL-based shape ran once per focus node: one result for each renamed node
    advice = [m for m in got.objects(None, sh.resultMessage) if str(m) == UUID_ADVICE]
    assert len(advice) == 3, ours.stdout[-3000:]
    # ... and each query text was parsed once: the wrapper is what ran
    counts = re.findall(r"^sparql queries (\d+) parsed (\d+)$", ours.stderr, re.M)
    assert counts, ours.stderr[-2000:]
    queries, parsed = map(int, counts[-1])
    assert 0 < parsed <= 10 and queries >= 5 * parsed, (queries, parsed)
