"""Core value types shared by every layer: findings and severities.

Pure: no I/O. Formats, parsers and probes produce :class:`Finding` values; the engine stores them in
the case; adapters (CLI, TUI, reports) render them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Severity(StrEnum):
    """How bad a finding is, in increasing order."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2, Severity.CRITICAL: 3}


@dataclass(frozen=True)
class Finding:
    """One observation about one piece of evidence.

    ``code`` is stable (two letters for the emitter, three digits; see ``ckptrescue.codes``).
    ``evidence`` names the file, device or URL; ``offset``/``length`` locate the bytes when known;
    ``tensors`` names the tensors touched; ``details`` holds JSON-safe extra data.
    """

    code: str
    severity: Severity
    title: str
    evidence: str | None = None
    evidence_sha256: str | None = None
    offset: int | None = None
    length: int | None = None
    source: str = ""
    tensors: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Return the stable JSON shape (documented in the README)."""
        return {
            "code": self.code,
            "severity": str(self.severity),
            "title": self.title,
            "evidence": self.evidence,
            "evidence_sha256": self.evidence_sha256,
            "offset": self.offset,
            "length": self.length,
            "source": self.source,
            "tensors": list(self.tensors),
            "details": self.details,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Finding:
        return cls(
            code=str(data["code"]),
            severity=Severity(data["severity"]),
            title=str(data["title"]),
            evidence=data.get("evidence"),
            evidence_sha256=data.get("evidence_sha256"),
            offset=data.get("offset"),
            length=data.get("length"),
            source=str(data.get("source", "")),
            tensors=tuple(data.get("tensors", ())),
            details=dict(data.get("details", {})),
        )


def worst(findings: list[Finding] | tuple[Finding, ...]) -> Severity | None:
    """The highest severity among ``findings`` (None when empty)."""
    if not findings:
        return None
    return max((f.severity for f in findings), key=lambda s: s.rank)
