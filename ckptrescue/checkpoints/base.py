"""Checkpoint probe results and the checkpoint-format registry (pure core).

Every checkpoint format (``ckptrescue.checkpoints.formats.*``) produces a :class:`CheckpointReport`: the
format, a :class:`Verdict`, every tensor with where its bytes live (``TensorRecord``: file,
absolute byte offset and length), and findings. ``locate`` uses the tensor map to go from an
unreadable byte range to tensor names; ``salvage`` and ``rank`` use the verdicts.

Formats register themselves: each module in ``ckptrescue.checkpoints.formats`` may define ``FORMATS``, a list
of classes implementing :class:`CheckpointFormat`. Discovery is lazy and needs no central list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

from ckptrescue.model import Finding, JsonObject
from ckptrescue.plugins import plugin_modules


class Verdict(StrEnum):
    """Per-checkpoint verdicts (stable; documented in the README)."""

    INTACT = "intact"
    SUSPECT = "suspect"  # verifies but numerically implausible
    DAMAGED = "damaged"  # bytes wrong, localised
    INCOMPLETE = "incomplete"  # missing shards, records or metadata
    TRUNCATED = "truncated"
    UNREADABLE = "unreadable"  # cannot be identified
    UNSAFE = "unsafe"  # pickle references globals outside the weights-only allowlist

    @property
    def rank(self) -> int:
        return _VERDICT_RANK[self]

    @property
    def resumable(self) -> bool:
        return self is Verdict.INTACT


_VERDICT_RANK = {
    Verdict.INTACT: 0, Verdict.SUSPECT: 1, Verdict.DAMAGED: 2, Verdict.INCOMPLETE: 3,
    Verdict.TRUNCATED: 4, Verdict.UNREADABLE: 5, Verdict.UNSAFE: 6,
}


def worst_verdict(verdicts: list[Verdict]) -> Verdict:
    return max(verdicts, key=lambda v: v.rank) if verdicts else Verdict.INTACT


@dataclass
class TensorRecord:
    """One tensor (or variable) and where its bytes are.

    ``file`` is the file holding the bytes (for sharded formats, the shard); ``offset`` is the
    absolute byte offset in that file and ``length`` the byte extent (views: the extent they
    touch). ``status`` is ok, damaged, truncated, missing, unverified or suspect.
    """

    name: str
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    file: str | None = None
    offset: int | None = None
    length: int | None = None
    storage: str | None = None  # storage record / chunk key the bytes come from
    status: str = "ok"
    checksum: str | None = None  # e.g. "crc32:1a2b3c4d" when the format records one
    reasons: list[str] = field(default_factory=list)

    def to_json(self) -> JsonObject:
        return {
            "name": self.name, "dtype": self.dtype,
            "shape": list(self.shape) if self.shape is not None else None,
            "file": self.file, "offset": self.offset, "length": self.length,
            "storage": self.storage, "status": self.status, "checksum": self.checksum,
            "reasons": self.reasons,
        }


@dataclass
class CheckpointReport:
    """The probe result for one checkpoint (a file or a checkpoint directory)."""

    path: str
    format: str
    verdict: Verdict
    tensors: list[TensorRecord] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    damaged_tensors: list[str] = field(default_factory=list)
    suspect_tensors: list[str] = field(default_factory=list)
    missing_tensors: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # every file that belongs to it
    load: dict[str, Any] | None = None  # outcome of the sandboxed real load (--load)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tensors_total(self) -> int:
        return len(self.tensors)

    def to_json(self, *, with_tensors: bool = False) -> JsonObject:
        data: JsonObject = {
            "path": self.path,
            "format": self.format,
            "verdict": str(self.verdict),
            "tensors_total": self.tensors_total,
            "damaged_tensors": self.damaged_tensors,
            "suspect_tensors": self.suspect_tensors,
            "missing_tensors": self.missing_tensors,
            "findings": [
                {"code": f.code, "severity": str(f.severity), "title": f.title,
                 "offset": f.offset, "length": f.length, "tensors": list(f.tensors),
                 "evidence": f.evidence, "details": f.details}
                for f in self.findings
            ],
        }
        if self.load is not None:
            data["load"] = self.load
        if with_tensors:
            data["tensors"] = [t.to_json() for t in self.tensors]
        return data


@dataclass
class ProbeOptions:
    """Options shared by every format's probe."""

    numeric: bool = True
    reference: CheckpointReport | None = None
    reference_path: str | None = None
    # exact qualified names a multi-rank family's files may pickle beyond each format's own
    # list (``families.base.Family.allowed_globals``); never a prefix
    extra_allowed: frozenset[str] = frozenset()
    # families: probe a step's rank files in this many processes
    jobs: int = 1
    # families: called as (step root, rank label, verdict) after each rank file is probed;
    # local runs only (not sent to Dask workers)
    progress: Callable[[str, str, str], None] | None = None
    # set on Ctrl-C (the step's cancel event): worker pools stop at once; local runs only
    cancel: Any = None


class CheckpointFormat(Protocol):
    """What a format module provides (see ``formats/_example.py``)."""

    name: ClassVar[str]

    @classmethod
    def detect(cls, path: Path) -> bool:
        """True when ``path`` (a file or directory) is this format, judged from structure.

        Must not raise on arbitrary input; a damaged file of this format still returns True.
        """
        ...

    @classmethod
    def probe(cls, path: Path, options: ProbeOptions) -> CheckpointReport:
        """Verify ``path`` streaming, with bounded memory, and never execute it."""
        ...


def formats() -> list[type[CheckpointFormat]]:
    """Every registered checkpoint format, in registration order (lazy discovery)."""
    from ckptrescue.checkpoints import formats as pkg

    found: list[type[CheckpointFormat]] = [
        fmt for module in plugin_modules(pkg) for fmt in getattr(module, "FORMATS", [])]
    found.sort(key=lambda f: getattr(f, "priority", 100))
    return found


Detector = TypeVar("Detector", bound=type)


def first_detecting(candidates: Iterable[Detector], path: Path, *,
                    passing: tuple[type[Exception], ...] = (OSError, ValueError),
                    ) -> Detector | None:
    """The first of ``candidates`` (formats or families, in the order given) whose ``detect``
    takes ``path``; one that raises one of ``passing`` on it is passed over. None: none does."""
    for candidate in candidates:
        try:
            if candidate.detect(path):
                return candidate
        except passing:
            continue
    return None
