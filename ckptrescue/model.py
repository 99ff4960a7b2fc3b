"""Core value types shared by every layer: findings and severities, and what a capability asks
the engine to record.

Pure: no I/O. Formats, parsers and probes produce :class:`Finding` values; the engine stores them in
the case; adapters (CLI, TUI, reports) render them. A capability's result carries its audit
records (:class:`AuditEvent`, in order) and the artifacts they name (:class:`ArtifactData`) in
:class:`Recorded`; the engine writes them into the case, the capability never does.
"""

from __future__ import annotations

import hashlib
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


# ---- what a capability asks the engine to record ---------------------------------------------

FINDINGS_HERE = "finding"  # the action of the marker event: the step's findings go here


@dataclass(frozen=True)
class AuditEvent:
    """One audit record for the engine to write: ``action`` (the event name), its ``details``
    and the SHA-256 of the artifacts it names (stored first, from :attr:`Recorded.artifacts`).

    :meth:`findings_here` is a marker, not a record: the step's findings are recorded at its
    place (by default they follow the last event)."""

    action: str
    details: dict[str, Any] = field(default_factory=dict)
    artifacts: tuple[str, ...] = ()

    @classmethod
    def findings_here(cls) -> AuditEvent:
        return cls(FINDINGS_HERE)

    @property
    def is_findings_marker(self) -> bool:
        return self.action == FINDINGS_HERE and not self.details


@dataclass(frozen=True)
class ArtifactData:
    """Content for the engine to store as a write-once case artifact: ``data`` (bytes) or the
    file at ``path``, under ``name`` and ``kind``; ``sha256`` is what the audit records name."""

    name: str
    kind: str
    sha256: str
    data: bytes | None = None
    path: str | None = None

    @classmethod
    def of_bytes(cls, data: bytes, *, name: str, kind: str) -> ArtifactData:
        return cls(name=name, kind=kind, sha256=hashlib.sha256(data).hexdigest(), data=data)

    @classmethod
    def of_file(cls, path: str, *, name: str, kind: str) -> ArtifactData:
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            while block := fh.read(1 << 20):
                digest.update(block)
        return cls(name=name, kind=kind, sha256=digest.hexdigest(), path=str(path))


class Recorded:
    """Mixin of capability results: the audit records and artifacts the engine records.

    Not dataclass fields, so that a result's ``to_json`` and equality are unchanged; a library
    called without the engine simply leaves them unread."""

    @property
    def audit(self) -> list[AuditEvent]:
        return self.__dict__.setdefault("_audit", [])  # type: ignore[no-any-return]

    @property
    def artifacts(self) -> list[ArtifactData]:
        return self.__dict__.setdefault("_artifacts", [])  # type: ignore[no-any-return]

    def record(self, action: str, details: dict[str, Any] | None = None, *,
               artifacts: list[str] | tuple[str, ...] = ()) -> None:
        """Ask the engine to write the audit record ``action`` (after the ones before it)."""
        self.audit.append(AuditEvent(action, dict(details or {}), tuple(artifacts)))

    def findings_here(self) -> None:
        """The step's findings are recorded at this point of :attr:`audit`."""
        self.audit.append(AuditEvent.findings_here())

    def store(self, artifact: ArtifactData) -> str:
        """Ask the engine to store ``artifact``; returns its SHA-256."""
        self.artifacts.append(artifact)
        return artifact.sha256
