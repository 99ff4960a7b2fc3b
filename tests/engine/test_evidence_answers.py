"""The answer names the serious findings (never "N serious finding(s); see the report")."""

from __future__ import annotations

from ckptrescue.engine.evidence_answers import serious_named
from ckptrescue.model import Finding, Severity


def test_serious_findings_are_named_clipped_and_counted() -> None:
    findings = [Finding("MF001", Severity.ERROR, f"part-{i}.jsonl: corrupted") for i in range(5)]
    findings.append(Finding("MF001", Severity.ERROR, "part-0.jsonl: corrupted"))  # a repeat
    text = serious_named(findings)
    assert text.startswith("5 serious finding(s): MF001 part-0.jsonl: corrupted; MF001 "
                           "part-1.jsonl: corrupted; MF001 part-2.jsonl: corrupted")
    assert text.endswith("; and 2 more")
    long = serious_named([Finding("DS001", Severity.ERROR, "x" * 40 + " " + "y" * 60)])
    assert long.endswith("…") and len(long) < 120
