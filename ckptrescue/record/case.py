"""A case directory: manifest, evidence inventory, write-once artifacts, and the audit log.

Layout::

    CASE/
      case.json          manifest: id, title, examiner, created, host, tool version
      audit.jsonl        append-only, hash-chained log (ckptrescue.record.audit)
      evidence.json      inventory (a view; every item is also an ``evidence.added`` record)
      artifacts/<sha256> write-once, content-addressed tool outputs, mapfiles, copies
      seal.json          written by ``case seal``: the head hash at sealing time
      work/              scratch space for runs (images, mounts' bookkeeping, state)

Everything the kit learns is recorded through :meth:`Case.log`; findings are ``finding`` records,
so they are covered by the chain too. This is the effects side of the case; ``verify`` is
read-only.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ckptrescue import __version__
from ckptrescue.errors import CaseError
from ckptrescue.model import Finding
from ckptrescue.record.audit import AuditLog, ChainReport, utc_now, verify_lines

MANIFEST = "case.json"
AUDIT = "audit.jsonl"
EVIDENCE = "evidence.json"
ARTIFACTS = "artifacts"
SEAL = "seal.json"
_CHUNK = 1 << 20
_LOCAL_KINDS = {"file", "directory", "block-device", "image", "mount"}


def sha256_file(path: Path | str, *, chunk: int = _CHUNK) -> str:
    """Streaming SHA-256 of a file or block device."""
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class EvidenceItem:
    """One entry of the evidence inventory."""

    id: str
    kind: str  # file, directory, block-device, image, s3-object, s3-prefix, mount
    source: str
    size: int | None
    sha256: str | None
    acquired_how: str
    acquired_at: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "source": self.source,
            "size": self.size,
            "sha256": self.sha256,
            "acquired_how": self.acquired_how,
            "acquired_at": self.acquired_at,
            "details": self.details,
        }


@dataclass
class VerifyReport:
    """What ``case verify`` found."""

    chain: ChainReport
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    artifacts_checked: int = 0

    @property
    def ok(self) -> bool:
        return self.chain.ok and not self.problems

    @property
    def all_problems(self) -> list[str]:
        return self.chain.problems + self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "records": len(self.chain.records),
            "head": self.chain.head,
            "torn_tail": self.chain.torn_tail,
            "artifacts_checked": self.artifacts_checked,
            "problems": self.all_problems,
            "notes": self.chain.notes + self.notes,
        }


class Case:
    """An open case directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.audit = AuditLog(root / AUDIT)

    # -- creation and opening -------------------------------------------------------------
    @classmethod
    def create(cls, root: Path, *, title: str = "", examiner: str = "") -> Case:
        root = Path(root)
        if (root / MANIFEST).exists():
            raise CaseError(f"{root}: a case already exists here")
        if root.exists() and any(root.iterdir()):
            raise CaseError(f"{root}: directory is not empty; choose a new case directory")
        (root / ARTIFACTS).mkdir(parents=True, exist_ok=True)
        (root / "work").mkdir(exist_ok=True)
        manifest = {
            "id": str(uuid.uuid4()),
            "title": title,
            "examiner": examiner,
            "created": utc_now(),
            "host": socket.gethostname(),
            "tool": "ckptrescue",
            "tool_version": __version__,
        }
        _write_json_atomic(root / MANIFEST, manifest)
        case = cls(root)
        case.audit.append("case.created", {"manifest": manifest})
        _write_json_atomic(root / EVIDENCE, [])
        return case

    @classmethod
    def open(cls, root: Path | str) -> Case:
        root = Path(root)
        if not (root / MANIFEST).is_file() or not (root / AUDIT).is_file():
            raise CaseError(
                f"{root}: not a case directory (no {MANIFEST}/{AUDIT})",
                hint="create one with: ckptrescue case new DIR",
            )
        return cls(root)

    @classmethod
    def open_or_create(cls, root: Path | str, *, title: str = "") -> Case:
        root = Path(root)
        if (root / MANIFEST).exists():
            return cls.open(root)
        return cls.create(root, title=title)

    # -- properties -----------------------------------------------------------------------------
    @property
    def manifest(self) -> dict[str, Any]:
        try:
            data = json.loads((self.root / MANIFEST).read_text())
        except (OSError, ValueError) as exc:
            raise CaseError(f"{self.root / MANIFEST}: unreadable case manifest ({exc})") from exc
        return dict(data)

    @property
    def artifacts_dir(self) -> Path:
        return self.root / ARTIFACTS

    @property
    def work_dir(self) -> Path:
        path = self.root / "work"
        path.mkdir(exist_ok=True)
        return path

    @property
    def sealed(self) -> bool:
        return (self.root / SEAL).exists()

    # -- logging ----------------------------------------------------------------------------------
    def log(
        self, action: str, details: dict[str, Any] | None = None, *, artifacts: list[str] | None = None
    ) -> dict[str, Any]:
        """Append an audit record; refuses once the case is sealed."""
        if self.sealed:
            raise CaseError(f"{self.root}: case is sealed; open a new case to continue")
        return self.audit.append(action, details, artifacts=artifacts)

    def add_finding(self, finding: Finding) -> None:
        self.log("finding", {"finding": finding.to_json()})

    def add_findings(self, findings: Iterable[Finding]) -> None:
        for finding in findings:
            self.add_finding(finding)

    def findings(self) -> list[Finding]:
        return [
            Finding.from_json(r["details"]["finding"])
            for r in self.audit.records()
            if r.get("action") == "finding"
        ]

    def records(self, action: str | None = None) -> Iterator[dict[str, Any]]:
        for record in self.audit.records():
            if action is None or record.get("action") == action:
                yield record

    # -- artifacts -------------------------------------------------------------------------------
    def store_artifact(
        self, data: bytes, *, name: str, kind: str = "file", log: bool = True
    ) -> str:
        """Store bytes as a write-once artifact and return its SHA-256."""
        with self.artifact_writer(name=name, kind=kind, log=log) as writer:
            writer.write(data)
        assert writer.sha256 is not None
        return writer.sha256

    def store_artifact_file(self, path: Path, *, name: str | None = None, kind: str = "copy") -> str:
        """Copy a file (streaming) into the artifacts and return its SHA-256."""
        with self.artifact_writer(name=name or path.name, kind=kind) as writer, open(
            path, "rb"
        ) as src:
            while block := src.read(_CHUNK):
                writer.write(block)
        assert writer.sha256 is not None
        return writer.sha256

    def artifact_writer(self, *, name: str, kind: str = "file", log: bool = True) -> ArtifactWriter:
        return ArtifactWriter(self, name=name, kind=kind, log=log)

    def artifact_path(self, sha256: str) -> Path:
        return self.artifacts_dir / sha256

    def read_artifact(self, sha256: str) -> bytes:
        return self.artifact_path(sha256).read_bytes()

    # -- evidence --------------------------------------------------------------------------------
    def evidence(self) -> list[EvidenceItem]:
        items: list[EvidenceItem] = []
        for record in self.audit.records():
            if record.get("action") == "evidence.added":
                items.append(EvidenceItem(**record["details"]["item"]))
        return items

    def add_evidence(
        self,
        *,
        kind: str,
        source: str,
        acquired_how: str,
        size: int | None = None,
        sha256: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> EvidenceItem:
        if kind in _LOCAL_KINDS and "://" not in source:
            source = os.path.abspath(source)  # a relative path means nothing later
        items = self.evidence()
        item = EvidenceItem(
            id=f"E{len(items) + 1:03d}",
            kind=kind,
            source=source,
            size=size,
            sha256=sha256,
            acquired_how=acquired_how,
            acquired_at=utc_now(),
            details=details or {},
        )
        self.log("evidence.added", {"item": item.to_json()})
        _write_json_atomic(self.root / EVIDENCE, [e.to_json() for e in [*items, item]])
        return item

    def protected_paths(self) -> list[str]:
        """The case's own records, which no tool and no report may ever write."""
        return [str(self.root / name) for name in (AUDIT, MANIFEST, EVIDENCE, SEAL, ARTIFACTS)]

    def readonly_pools(self) -> list[str]:
        """ZFS pools this case imported itself read-only, as the kernel showed them (the
        runner's ``safety.attached`` records; never a file under ``work/``)."""
        return [a["name"] for a in self.attachments()
                if a.get("kind") == "pool" and a.get("readonly") is True]

    def attachments(self) -> list[dict[str, Any]]:
        """What this case attached and has not yet released, as the kernel showed it: the
        details of each ``safety.attached`` record (kind, name and identity: device number,
        backing inode, mount id, uuid, pool GUID) not followed by a ``safety.detached`` of the
        same identity. The only things the guard lets the kit detach, unmount or export."""
        live: dict[str, dict[str, Any]] = {}
        for record in self.audit.records():
            action = record.get("action")
            if action not in {"safety.attached", "safety.detached"}:
                continue
            details = {k: v for k, v in (record.get("details") or {}).items() if k != "argv"}
            key = json.dumps(details, sort_keys=True)
            if action == "safety.attached":
                live[key] = details
            else:
                live.pop(key, None)
        return list(live.values())

    def evidence_paths(self) -> list[str]:
        """Local paths of evidence that must never be written to (absolute and resolved)."""
        paths: list[str] = []
        for item in self.evidence():
            if item.kind in _LOCAL_KINDS and "://" not in item.source:
                paths.append(item.source)
                real = item.details.get("realpath")
                if isinstance(real, str):
                    paths.append(real)
        return paths

    def ensure_evidence(self, path: str | Path, *, how: str) -> EvidenceItem:
        """Inventory a local device or file the kit examines in place (once), so that no tool
        may ever write to it afterwards."""
        import stat as _stat

        source = os.path.abspath(str(path))
        for item in self.evidence():
            if item.source == source or item.details.get("realpath") == os.path.realpath(source):
                return item
        try:
            st = os.stat(source)
            kind = "block-device" if _stat.S_ISBLK(st.st_mode) else (
                "directory" if _stat.S_ISDIR(st.st_mode) else "image")
            size = st.st_size if not _stat.S_ISBLK(st.st_mode) else None
        except OSError:
            kind, size = "file", None
        return self.add_evidence(kind=kind, source=source, acquired_how=how, size=size,
                                 details={"realpath": os.path.realpath(source)})

    # -- sealing and verification -------------------------------------------------------------
    def seal(self) -> str:
        """Record a seal and return the head hash to keep out of band."""
        if self.sealed:
            raise CaseError(f"{self.root}: case is already sealed")
        report = self.verify()
        if not report.ok:
            raise CaseError(f"{self.root}: refusing to seal a case that does not verify: "
                            + report.all_problems[0])
        record = self.audit.append(
            "case.sealed", {"records": len(report.chain.records), "previous_head": report.chain.head}
        )
        _write_json_atomic(self.root / SEAL, {"seq": record["seq"], "head": record["hash"],
                                              "time": record["time"]})
        return str(record["hash"])

    def verify(self, *, expect_head: str | None = None) -> VerifyReport:
        """Check the chain, every artifact, and references; never writes."""
        chain = verify_lines(self.audit.read_bytes())
        report = VerifyReport(chain=chain)
        seen: set[str] = set()
        for record in chain.records:
            for sha in record.get("artifacts", []):
                seen.add(sha)
                if not self.artifact_path(sha).is_file():
                    report.problems.append(
                        f"artifact {sha} referenced by record seq {record['seq']} "
                        f"({record['action']}) is missing"
                    )
        if self.artifacts_dir.is_dir():
            for path in sorted(self.artifacts_dir.iterdir()):
                if path.name.startswith(".tmp"):
                    report.notes.append(f"unfinished artifact upload {path.name} ignored")
                    continue
                report.artifacts_checked += 1
                actual = sha256_file(path)
                if actual != path.name:
                    report.problems.append(
                        f"artifact {path.name} was changed (its content hashes to {actual})"
                    )
                elif path.name not in seen:
                    report.notes.append(f"artifact {path.name} is not referenced by the log")
        created = next((r for r in chain.records if r.get("action") == "case.created"), None)
        try:
            manifest = json.loads((self.root / MANIFEST).read_text())
        except (OSError, ValueError):
            manifest = None
        if created is not None and manifest != created["details"].get("manifest"):
            report.problems.append(f"{MANIFEST} differs from the manifest recorded in record seq "
                                   f"{created['seq']} (case.created): it was edited")
        logged = [r["details"]["item"] for r in chain.records
                  if r.get("action") == "evidence.added"]
        try:
            inventory = json.loads((self.root / EVIDENCE).read_text())
        except (OSError, ValueError):
            inventory = None
        if inventory is not None and inventory != logged:
            report.problems.append(f"{EVIDENCE} differs from the evidence.added records of the "
                                   "log: it was edited")
        seal_file = self.root / SEAL
        if seal_file.exists():
            try:
                seal = json.loads(seal_file.read_text())
                hashes = [r["hash"] for r in chain.records]
                if seal.get("head") not in hashes:
                    report.problems.append(
                        f"the sealed head {seal.get('head')} (seq {seal.get('seq')}) is not in the "
                        "log: the log was truncated or rewritten after sealing"
                    )
                elif hashes[-1] != seal.get("head"):
                    extra = len(hashes) - 1 - hashes.index(seal["head"])
                    report.problems.append(f"{extra} record(s) were appended after the seal")
            except (OSError, ValueError, KeyError):
                report.problems.append(f"{seal_file}: unreadable seal file")
        if expect_head is not None:
            hashes = [r["hash"] for r in chain.records]
            if not hashes or hashes[-1] != expect_head:
                if expect_head in hashes:
                    extra = len(hashes) - 1 - hashes.index(expect_head)
                    report.problems.append(
                        f"log extended: {extra} record(s) after the expected head {expect_head}"
                    )
                else:
                    last = hashes[-1] if hashes else "(empty log)"
                    report.problems.append(
                        f"expected head {expect_head} not found (log head is {last}): "
                        "the log was truncated or rewritten"
                    )
        return report

    def summary(self) -> dict[str, Any]:
        records = list(self.audit.records())
        counts: dict[str, int] = {}
        for record in records:
            counts[record["action"]] = counts.get(record["action"], 0) + 1
        findings = self.findings()
        sev: dict[str, int] = {}
        for finding in findings:
            sev[str(finding.severity)] = sev.get(str(finding.severity), 0) + 1
        return {
            "root": str(self.root),
            "manifest": self.manifest,
            "sealed": self.sealed,
            "records": len(records),
            "head": records[-1]["hash"] if records else None,
            "actions": counts,
            "evidence": [e.to_json() for e in self.evidence()],
            "findings": {"total": len(findings), "by_severity": sev},
            "artifacts": len(list(self.artifacts_dir.iterdir())) if self.artifacts_dir.is_dir() else 0,
        }


class ArtifactWriter:
    """Streams bytes into a temp file, hashing as it goes; renames to ``artifacts/<sha256>``."""

    def __init__(self, case: Case, *, name: str, kind: str, log: bool = True) -> None:
        self.case = case
        self.name = name
        self.kind = kind
        self.log_it = log
        self.sha256: str | None = None
        self.size = 0
        self._digest = hashlib.sha256()
        self._fh: IO[bytes] | None = None
        self._tmp: str | None = None

    def __enter__(self) -> ArtifactWriter:
        self.case.artifacts_dir.mkdir(parents=True, exist_ok=True)
        fd, self._tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.case.artifacts_dir)
        self._fh = os.fdopen(fd, "wb")
        return self

    def write(self, data: bytes) -> None:
        assert self._fh is not None
        self._fh.write(data)
        self._digest.update(data)
        self.size += len(data)

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        assert self._fh is not None and self._tmp is not None
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        if exc_type is not None:
            os.unlink(self._tmp)
            return
        self.sha256 = self._digest.hexdigest()
        final = self.case.artifact_path(self.sha256)
        if final.exists():
            os.unlink(self._tmp)  # write-once: identical content already stored
        else:
            os.chmod(self._tmp, 0o444)
            os.rename(self._tmp, final)
        if self.log_it:
            self.case.log(
                "artifact.stored",
                {"sha256": self.sha256, "name": self.name, "kind": self.kind, "size": self.size},
                artifacts=[self.sha256],
            )


def _write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
