"""Core value types shared by every layer: findings and severities, and what a capability asks
the engine to record.

Pure: no I/O. Formats, parsers and probes produce :class:`Finding` values; the engine stores them in
the case; adapters (CLI, TUI, reports) render them. A capability's result carries its audit
records (:class:`AuditEvent`, in order) and the artifacts they name (:class:`ArtifactData`) in
:class:`Recorded`; the engine writes them into the case, the capability never does. A step's
outputs are typed records (:class:`StepOutputs`, of :class:`JsonRecord`s) stored as JSON.
"""

from __future__ import annotations

import hashlib
import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from enum import StrEnum
from functools import cache
from typing import Any, ClassVar, TypedDict, TypeVar


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
    def from_json(cls, data: JsonObject) -> Finding:
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


# ---- typed records stored as JSON (step outputs) ---------------------------------------------

R = TypeVar("R", bound="JsonRecord")

# The JSON form of a record: what ``to_json`` gives and ``from_json`` takes (JSON-safe values
# under string keys); stored as an artifact or an audit record's details.
JsonObject = dict[str, Any]


class AuditRecord(TypedDict, total=False):
    """One record of a case's hash-chained log as stored (``record/audit.py``): ``artifacts``
    only when it names some."""

    seq: int
    time: str
    actor: str
    action: str
    details: JsonObject
    artifacts: list[str]
    prev: str
    hash: str


def doc(text: str) -> dict[str, str]:
    """A field's documentation (its metadata; shown in docs/step-outputs.md)."""
    return {"doc": text}


def doc_field(default: Any, text: str) -> Any:
    """A typed record's documented field: ``default`` is its value when the JSON lacks it
    (``[]`` or ``{}``: a new empty list or dict for every record); ``text`` documents it
    (docs/step-outputs.md)."""
    if isinstance(default, list | dict):
        if default:
            raise ValueError("a list or dict default must be empty (one per record)")
        return field(default_factory=type(default), metadata=doc(text))
    return field(default=default, metadata=doc(text))


def answer_field() -> Any:
    """The ``answer`` field of a step's outputs: the one-line answer ('' until there is one)."""
    return field(default="", metadata=doc("The one-line answer."))


@dataclass
class JsonRecord:
    """A typed record stored as JSON. ``from_json`` turns nested dicts into the record types
    the fields declare (``X``, ``list[X]``, ``dict[str, X]``, ``X | None``), keeps keys it does
    not declare in ``extra`` and remembers which declared keys the JSON lacked, so that
    ``to_json`` gives the stored JSON back (same keys, same values). A record built in code
    gives every declared field; ``emit_defaults`` (step outputs) also gives the defaults of the
    keys an older case lacks."""

    emit_defaults: ClassVar[bool] = False
    extra: dict[str, Any] = field(default_factory=dict, repr=False, compare=False, kw_only=True,
                                  metadata={"doc": ""})

    @classmethod
    def declared(cls) -> list[str]:
        return list(_plan(cls)[1])

    @classmethod
    def from_json(cls: type[R], data: JsonObject | None) -> R:
        data = dict(data or {})
        plan, names, name_set = _plan(cls)
        known: JsonObject = {}
        for name, convert in plan:  # the field types are read once per class (_plan)
            if name in data:
                value = data[name]
                known[name] = value if convert is None or value is None else convert(value)
        extra = {k: v for k, v in data.items() if k not in name_set} \
            if len(known) < len(data) else {}
        record = cls(**known, extra=extra)
        record.__dict__["_absent"] = _NONE_ABSENT if len(known) == len(names) \
            else frozenset(n for n in names if n not in data)
        record.__dict__["_order"] = tuple(data)
        return record

    def to_json(self) -> JsonObject:
        absent = () if self.emit_defaults else self.__dict__.get("_absent", ())
        out = {n: _dump(getattr(self, n)) for n in self.declared() if n not in absent}
        out.update(self.extra)
        order = self.__dict__.get("_order", ())  # as stored: the same keys in the same order
        return {**{k: out[k] for k in order if k in out}, **out} if order else out

    @classmethod
    def field_docs(cls) -> list[tuple[str, str, str]]:
        """(name, type, meaning) of every declared field, for the generated docs."""
        rows = []
        for f in fields(cls):
            if f.name == "extra":
                continue
            has_default = f.default is not MISSING or f.default_factory is not MISSING
            rows.append((f.name, str(f.type) + ("" if has_default else " (required)"),
                         str(f.metadata.get("doc", ""))))
        return rows


    @classmethod
    def nested(cls) -> list[type[JsonRecord]]:
        """The record types its fields hold (``X``, ``list[X]``, ``dict[str, X]``), in order."""
        found: list[type[JsonRecord]] = []
        for name in cls.declared():
            for arg in [_field_types(cls).get(name), *typing.get_args(_field_types(cls).get(name))]:
                for inner in [arg, *typing.get_args(arg)]:
                    record = _record_type(inner)
                    if record is not None and record not in found:
                        found.append(record)
        return found


@cache
def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


_NONE_ABSENT: frozenset[str] = frozenset()


@cache
def _plan(cls: type) -> tuple[tuple[tuple[str, Any], ...], tuple[str, ...], frozenset[str]]:
    """How ``from_json`` reads ``cls``: (field name, converter or None) per declared field,
    the names in order, and as a set; what :func:`_load` would do to a value, decided once."""
    hints = _field_types(cls)
    names = tuple(f.name for f in fields(cls) if f.name != "extra")
    return tuple((n, _converter(hints.get(n))) for n in names), names, frozenset(names)


def _converter(hint: Any) -> Any:
    """A function doing what ``_load(hint, value)`` does to a non-None value, or None when it
    keeps the value as it is."""
    if hint is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _converter(inner[0]) if len(inner) == 1 else None
    if (record := _record_type(hint)) is not None:
        return lambda value: record.from_json(value) if isinstance(value, dict) else value
    if origin is list and args and (item := _record_type(args[0])) is not None:
        return lambda value: [item.from_json(v) if isinstance(v, dict) else v for v in value] \
            if isinstance(value, list) else value
    if origin is dict and len(args) == 2 and (item := _record_type(args[1])) is not None:
        return lambda value: {k: item.from_json(v) if isinstance(v, dict) else v
                              for k, v in value.items()} if isinstance(value, dict) else value
    return None


def _record_type(hint: Any) -> type[JsonRecord] | None:
    return hint if isinstance(hint, type) and issubclass(hint, JsonRecord) else None


def _load(hint: Any, value: Any) -> Any:
    """``value`` (JSON) as the record types ``hint`` names; anything else as it is."""
    if hint is None or value is None:
        return value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _load(inner[0], value) if len(inner) == 1 else value
    if (record := _record_type(hint)) is not None:
        return record.from_json(value) if isinstance(value, dict) else value
    if origin is list and args and _record_type(args[0]) and isinstance(value, list):
        return [_load(args[0], v) for v in value]
    if origin is dict and len(args) == 2 and _record_type(args[1]) and isinstance(value, dict):
        return {k: _load(args[1], v) for k, v in value.items()}
    return value


def _dump(value: Any) -> Any:
    if isinstance(value, JsonRecord):
        return value.to_json()
    if isinstance(value, list) and any(isinstance(v, JsonRecord) for v in value):
        return [_dump(v) for v in value]
    if isinstance(value, dict) and any(isinstance(v, JsonRecord) for v in value.values()):
        return {k: _dump(v) for k, v in value.items()}
    return value


@dataclass
class StepOutputs(JsonRecord):
    """Base class: the outputs of a step of one action (one record type per action; readers
    load stored outputs by that type, ``engine/case_outputs.py``).

    ``json_keys``, when set, is the documented ``--json`` shape of the command: the keys the
    CLI prints. A step may record more than that."""

    emit_defaults: ClassVar[bool] = True
    json_keys: ClassVar[tuple[str, ...] | None] = None

    @classmethod
    def public_json(cls, data: JsonObject) -> JsonObject:
        """The command's documented ``--json`` shape of stored outputs ``data``."""
        if cls.json_keys is None:
            return data
        return {k: data[k] for k in cls.json_keys if k in data}
