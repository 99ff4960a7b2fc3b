"""A case directory: manifest, evidence inventory, write-once artifacts, and the audit log.

Layout::

    CASE/
      case.json          manifest: id, title, examiner, created, host, tool version
      audit.jsonl        append-only, hash-chained log (ckptrescue.record.audit): the only truth
      evidence.json      inventory, derived from the ``evidence.added`` records
      seal.json          derived from the ``case.sealed`` record: the head hash at sealing time
      index.jsonl        where each record is, by action (ckptrescue.record.index), derived
      artifacts/<sha256> write-once, content-addressed tool outputs, mapfiles, copies
      .writer.lock       one writer per case (ckptrescue.record.lock)
      work/              scratch space for runs (images, mounts' bookkeeping, state)

Everything the kit learns is recorded through :meth:`Case.log`; findings are ``finding`` records,
so they are covered by the chain too. Every write happens under the case's writer lock
(:meth:`Case.writer`; a command holds it for its whole run) and the log is appended in batches
(group commit: one ``fsync`` per step, per second, or at once for records that must be durable
before anything else happens). The derived files are rewritten atomically after the log (temp
file, ``fsync``, rename, ``fsync`` of the directory); a crash between the two leaves a derived
file behind the log, which ``verify`` notes and the next writer re-derives, never a tamper alarm.
This is the effects side of the case; ``verify`` is read-only.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import hashlib
import json
import os
import stat
import tempfile
import threading
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ckptrescue import __version__
from ckptrescue.errors import CaseError
from ckptrescue.model import AuditRecord, Finding, JsonObject
from ckptrescue.record import lock
from ckptrescue.record.atomic import leftovers, write_json_atomic
from ckptrescue.record.audit import (
    Appended,
    AuditLog,
    CaseWriteError,
    ChainReport,
    host_name,
    utc_now,
    verify_lines,
    well_formed,
)
from ckptrescue.record.index import INDEX, INDEXED, RecordIndex, check_file
from ckptrescue.record.regular import (
    is_sha256,
    kind_of,
    open_regular,
    read_regular,
    sha256_regular,
)

MANIFEST = "case.json"
AUDIT = "audit.jsonl"
EVIDENCE = "evidence.json"
ARTIFACTS = "artifacts"
SEAL = "seal.json"
# present while a case is being created, from before its case.json is written until its first
# record is in the log: what a creation that failed (a full disk) left is told apart by it from a
# case whose log was emptied later (damage), which looks the same otherwise
CREATING = ".creating"
_CHUNK = 1 << 20
_LOCAL_KINDS = {"file", "directory", "block-device", "image", "mount"}
# records that must be on disk before the kit goes on (what it attached, what it began imaging,
# the seal): written and fsync'd at once instead of with the batch
DURABLE = frozenset({"case.created", "case.sealed", "safety.attached", "safety.detached",
                     "safety.kernel", "image.started", "image.interrupted", "step.interrupted"})


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
    details: JsonObject = field(default_factory=dict)

    def to_json(self) -> JsonObject:
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

    def to_json(self) -> JsonObject:
        return {
            "ok": self.ok,
            "records": len(self.chain.records),
            "head": self.chain.head,
            "torn_tail": self.chain.torn_tail,
            "artifacts_checked": self.artifacts_checked,
            "problems": self.all_problems,
            "notes": self.chain.notes + self.notes,
        }


class CaseExistsError(CaseError):
    """A case already lives where a new one was to be created."""


class ArtifactChangedError(CaseError):
    """An artifact is no longer what the case stored (edited, replaced by a symlink)."""


class _State:
    """What every ``Case`` object of one directory shares within a process: the log with its
    batch, the record index, the writer depth and the derived files still to rewrite."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.mutex = threading.RLock()
        self.audit = AuditLog(root / AUDIT)
        self.index = RecordIndex(root)
        self.durable = True
        self.depth = 0
        self.sealed = False
        self.evidence_dirty = False
        self.derived_checked = False
        self.creating = False  # this process is creating the case (Case.create)
        self.audit.listeners.append(self.written)

    def set_durable(self, durable: bool) -> None:
        self.durable = self.audit.durable = self.index.durable = durable

    def written(self, placed: list[Appended]) -> None:
        """After each write of the log: index the records (the index is derived: a failure to
        write it is repaired by the next writer)."""
        lines = self.index.extend([(p.record, p.offset, p.length) for p in placed])
        try:
            self.index.write_lines(lines)
        except OSError:
            self.index.file_size = -1

    def view(self) -> RecordIndex:
        """The index, current with everything this process chained (written, not synced)."""
        with self.mutex:
            self.audit.flush(sync=False)
            self.index.refresh()
            return self.index


_STATES: weakref.WeakValueDictionary[str, _State] = weakref.WeakValueDictionary()
_STATES_MUTEX = threading.Lock()


def _state_for(root: Path) -> _State:
    key = os.path.realpath(root)
    with _STATES_MUTEX:
        state = _STATES.get(key)
        if state is None:
            state = _State(root)
            _STATES[key] = state
        return state


@atexit.register
def _flush_all() -> None:  # pragma: no cover - exercised by processes that exit mid-batch
    for state in list(_STATES.values()):
        with contextlib.suppress(Exception):
            state.audit.flush()


class Case:
    """An open case directory."""

    def __init__(self, root: Path) -> None:
        # absolute: every path the case records (mount points, work folders) stays true when
        # read from another directory, and leads back to its evidence in the report
        self.root = Path(root).absolute()
        self._state = _state_for(self.root)
        self.audit = self._state.audit

    # -- creation and opening -------------------------------------------------------------
    @classmethod
    def create(cls, root: Path, *, title: str = "", examiner: str = "",
               durable: bool = True) -> Case:
        """A new case at ``root``. ``durable=False``: a scratch case that its command removes
        when it ends (a command run without ``--case``): the same records, hash chain and
        derived files, never ``fsync``ed (nothing of it outlives the process)."""
        root = Path(root)
        if _holds_records(root):
            raise CaseExistsError(f"{root}: a case already exists here")
        if root.exists() and not _left_by_a_failed_creation(root):
            if _holds_records(root):  # another creator's first record, since the check above
                raise CaseExistsError(f"{root}: a case already exists here")
            raise CaseError(f"{root}: directory is not empty; choose a new case directory")
        try:
            (root / ARTIFACTS).mkdir(parents=True, exist_ok=True)
            (root / "work").mkdir(exist_ok=True)
        except OSError as exc:
            raise CaseWriteError(f"{root}: {exc.strerror or exc} while creating the case "
                                 "directory") from exc
        import uuid  # here: only a new case needs it (it imports platform: 1.7 ms a command)

        manifest = {
            "id": str(uuid.uuid4()),
            "title": title,
            "examiner": examiner,
            "created": utc_now(),
            "host": host_name(),
            "tool": "ckptrescue",
            "tool_version": __version__,
        }
        case = cls(root)
        case._state.set_durable(durable)
        case._state.creating = True
        try:
            case._create_records(manifest)
        except CaseWriteError as exc:
            if _holds_records(root):  # created: a derived file failed after the first record
                raise
            # no case yet: what to do is run the same command again, not read a torn log
            raise CaseWriteError(f"{root}: the case could not be created: {exc.message}",
                                 hint="free space on its filesystem and run the same command "
                                      "again (it takes over what this one made)") from exc
        finally:
            case._state.creating = False
        return case

    def _create_records(self, manifest: JsonObject) -> None:
        root = self.root
        with self.writer():
            if _holds_records(root):  # another creator got here first
                raise CaseExistsError(f"{root}: a case already exists here")
            # the mark, under the lock and before case.json: until the first record is in the
            # log, what is here is a creation's (taken over by the same command if it fails)
            try:
                os.close(open_regular(root / CREATING, os.O_WRONLY | os.O_CREAT))
            except OSError as exc:
                raise CaseWriteError(f"{root}: {exc.strerror or exc} while creating the case "
                                     "directory") from exc
            # what a creation that failed before its first record left (a full disk) is taken
            # over, under the lock, and said: the same command works once there is space
            details: JsonObject = {"manifest": manifest}
            earlier = _failed_manifest(root)
            if earlier is not None:
                details["took_over_a_failed_creation"] = {"case_json": earlier}
            for tmp in leftovers(root):
                if tmp.name.startswith(f".{MANIFEST}."):
                    with contextlib.suppress(FileNotFoundError):
                        tmp.unlink()
            # a failed creation's torn first line (its rollback did not happen: a crash)
            _empty_beside(root, AUDIT, durable=self._state.durable)
            self._write_derived(root / MANIFEST, manifest)
            try:
                self.log("case.created", details)
                self._state.audit.flush(sync=True)  # the first record, written and synced now
            except CaseWriteError as exc:
                cause = exc.__cause__
                if not isinstance(cause, OSError):  # (the log changed under this writer: not
                    raise                           # this creation's bytes to take back)
                # not (wholly, durably) in the log: back to the empty log this creation began
                # from (its index entry too), and the mark stays, so that the same command
                # takes the folder over
                try:
                    _empty_beside(root, AUDIT, durable=self._state.durable)
                    _empty_beside(root, INDEX, durable=False)
                except OSError:
                    raise exc from cause
                self._state.audit.forget()  # (nothing of it is to be synced again)
                raise CaseWriteError(f"{root / AUDIT}: {cause.strerror or cause} while writing "
                                     "the case's first record; the log was taken back to "
                                     "empty") from cause
            with contextlib.suppress(OSError):  # the case exists (a later writer removes it)
                os.unlink(root / CREATING)
            self._state.evidence_dirty = True

    @classmethod
    def open(cls, root: Path | str) -> Case:
        root = Path(root)
        if not (root / MANIFEST).is_file() or not (root / AUDIT).is_file():
            raise CaseError(
                f"{root}: not a case directory (no {MANIFEST}/{AUDIT})",
                hint="create one with: ckptrescue case new DIR",
            )
        if not _holds_records(root) and _left_by_a_failed_creation(root):
            raise _failed_creation(root)
        return cls(root)

    @classmethod
    def open_or_create(cls, root: Path | str, *, title: str = "") -> Case:
        """The case at ``root``, made when there is none: a folder that holds a case (or a
        damaged one: its writer then says so) is opened, an empty one (or a failed creation's)
        is created, and a creator that loses the race to another opens the winner's case."""
        root = Path(root)
        if _holds_records(root) or ((root / MANIFEST).is_file() and (root / AUDIT).is_file()
                                    and not _left_by_a_failed_creation(root)):
            return cls.open(root)
        try:
            return cls.create(root, title=title)
        except CaseExistsError:
            return cls.open(root)

    # -- properties -----------------------------------------------------------------------------
    @property
    def manifest(self) -> JsonObject:
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
        """Sealed when the log holds a ``case.sealed`` record (or ``seal.json`` says so)."""
        state = self._state
        if state.depth and state.derived_checked:
            return state.sealed  # nobody else writes while this process holds the lock
        return (self.root / SEAL).exists() or bool(state.view().of("case.sealed"))

    # -- the writer -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def writer(self) -> Iterator[Case]:
        """Hold the case's writer lock (re-entrant): records are appended in batches while it is
        held and written, synced and summarised when the outermost holder leaves. A second
        process waits briefly, then fails naming this one (:mod:`ckptrescue.record.lock`)."""
        state = self._state
        with state.mutex:
            if state.depth == 0:
                lock.acquire(self.root)
                try:
                    state.audit.begin()
                    state.depth = 1
                    self._caught_up()
                except BaseException:
                    state.depth = 0
                    with contextlib.suppress(Exception):
                        state.audit.end()
                    lock.release(self.root)
                    raise
            else:
                state.depth += 1
        try:
            yield self
        finally:
            with state.mutex:
                try:
                    if state.depth == 1:
                        self._commit()
                finally:
                    state.depth -= 1
                    if state.depth == 0:
                        try:
                            state.audit.end()
                        finally:
                            lock.release(self.root)

    def commit(self) -> None:
        """Write and ``fsync`` the records of this batch, then rewrite the derived files (the
        engine calls it once per step; leaving the outermost :meth:`writer` does it too)."""
        with self.writer():
            self._commit()

    def _commit(self) -> None:
        state = self._state
        state.audit.flush(sync=True)
        if state.evidence_dirty:
            self._write_derived(self.root / EVIDENCE, [e.to_json() for e in self.evidence()])
            state.evidence_dirty = False

    def _caught_up(self) -> None:
        """On taking the lock: the index current with the log; the derived files re-derived
        once per process when missing or behind (a crash between a write and its summary)."""
        state = self._state
        known = state.index.log_size
        index = state.view()
        if index.log_size != known:
            state.derived_checked = False  # another process wrote since: look again
        state.sealed = (self.root / SEAL).exists() or bool(index.of("case.sealed"))
        if not _holds_records(self.root):
            if state.creating:
                return  # this process is creating the case (or taking over a failed creation)
            if _left_by_a_failed_creation(self.root):  # (it failed while this one waited)
                raise _failed_creation(self.root)
            # its case.json says it was created, and its log holds nothing: never written into
            # (a first record here would begin a new chain that hides the loss)
            raise CaseError(f"{self.root}: the case's log ({AUDIT}) holds no records, though "
                            f"its {MANIFEST} says it was created: the log was emptied or cut "
                            "short (or a `case new` of a version before 2026-12 failed here); "
                            "nothing is written into it",
                            hint=f"ckptrescue case verify {self.root}; keep this folder as it "
                                 "is and record into a new case")
        with contextlib.suppress(OSError):
            index.write_lines([])  # rewrites the index file when missing or not this index's
        if not (self.root / EVIDENCE).exists():
            state.evidence_dirty = True
        sealed = next(iter(index.records("case.sealed")), None)
        if sealed is not None and not (self.root / SEAL).exists():
            self._write_derived(self.root / SEAL, _seal_json(sealed))
        if state.derived_checked:
            return
        state.derived_checked = True
        if index.of("case.created"):  # a creation killed after its first record: its mark
            with contextlib.suppress(OSError):
                os.unlink(self.root / CREATING)
        logged = [e.to_json() for e in self.evidence()]
        try:
            current = json.loads(read_regular(self.root / EVIDENCE))
        except (OSError, ValueError):
            current = None
        if current != logged:
            state.evidence_dirty = True

    def _write_derived(self, path: Path, data: Any) -> None:
        try:
            write_json_atomic(path, data, durable=self._state.durable)
        except OSError as exc:
            raise CaseWriteError(f"{path}: {exc.strerror or exc} while writing it atomically",
                                 hint="free space on the case's filesystem; the log keeps "
                                 "everything and the file is re-derived by the next write"
                                 ) from exc

    # -- logging ----------------------------------------------------------------------------------
    def log(
        self, action: str, details: JsonObject | None = None, *,
        artifacts: list[str] | None = None, durable: bool = False,
    ) -> AuditRecord:
        """Append an audit record (with the batch; at once when ``durable`` or its action is
        in :data:`DURABLE`); refuses once the case is sealed."""
        with self.writer():
            if self._state.sealed:
                raise CaseError(f"{self.root}: case is sealed; open a new case to continue")
            return self.audit.append(action, details, artifacts=artifacts,
                                     durable=durable or action in DURABLE)

    def add_finding(self, finding: Finding) -> None:
        self.log("finding", {"finding": finding.to_json()})

    def add_findings(self, findings: Iterable[Finding]) -> None:
        with self.writer():
            for finding in findings:
                self.add_finding(finding)

    def findings(self) -> list[Finding]:
        """The findings of the log (a record of another shape, which only an edit of the log
        makes and ``verify`` names, is left out rather than stopping every reader)."""
        found = []
        for record in self.records("finding"):
            try:
                found.append(Finding.from_json(record["details"]["finding"]))
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
        return found

    def records(self, action: str | None = None) -> Iterator[AuditRecord]:
        """Records of the log, oldest first; one action's are read through the index (no
        replay of the log) when it indexes that action."""
        index = self._state.view()
        if action is not None and action in INDEXED:
            yield from index.records(action)
            return
        for record in self.audit.records():
            if action is None or record.get("action") == action:
                yield record

    def count(self, action: str) -> int:
        """How many records of an indexed action the log holds."""
        return len(self._state.view().of(action))

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
        """Where the artifact of this SHA-256 is (a name that is not one is refused: a record
        never leads a reader out of ``artifacts/``)."""
        if not is_sha256(sha256):
            raise CaseError(f"{self.root}: {str(sha256)[:80]!r} is not the SHA-256 of an "
                            "artifact")
        return self.artifacts_dir / sha256

    def read_artifact(self, sha256: str) -> bytes:
        """An artifact's bytes, as stored: a regular file of the case whose content still has
        its SHA-256 (else :class:`ArtifactChangedError`; ``case verify`` names it too)."""
        path = self.artifact_path(sha256)
        try:
            data = read_regular(path)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EINVAL):
                raise ArtifactChangedError(f"{path}: is a {kind_of(path)}, not the artifact "
                                           "the case stored") from exc
            raise
        if hashlib.sha256(data).hexdigest() != sha256:
            raise ArtifactChangedError(f"{path}: its content no longer has its SHA-256 "
                                       "(changed after it was stored)")
        return data

    # -- evidence --------------------------------------------------------------------------------
    def evidence(self) -> list[EvidenceItem]:
        items = []
        for record in self.records("evidence.added"):
            try:
                items.append(EvidenceItem(**record["details"]["item"]))
            except (KeyError, TypeError):
                continue  # not a record the kit writes (``verify`` names it)
        return items

    def add_evidence(
        self,
        *,
        kind: str,
        source: str,
        acquired_how: str,
        size: int | None = None,
        sha256: str | None = None,
        details: JsonObject | None = None,
    ) -> EvidenceItem:
        """Inventory one item; its id (``E001``...) comes from the log, under the writer lock.
        ``evidence.json`` is rewritten when the batch commits."""
        if kind in _LOCAL_KINDS and "://" not in source:
            source = os.path.abspath(source)  # a relative path means nothing later
        with self.writer():
            item = EvidenceItem(
                id=f"E{self.count('evidence.added') + 1:03d}",
                kind=kind,
                source=source,
                size=size,
                sha256=sha256,
                acquired_how=acquired_how,
                acquired_at=utc_now(),
                details=details or {},
            )
            self.log("evidence.added", {"item": item.to_json()})
            self._state.evidence_dirty = True
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
        changes = sorted([*self.records("safety.attached"), *self.records("safety.detached")],
                         key=lambda r: int(r["seq"]))  # read through the index
        for record in changes:
            action = record.get("action")
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
        with self.writer():
            for item in self.evidence():
                if item.source == source \
                        or item.details.get("realpath") == os.path.realpath(source):
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
        with self.writer():
            if self.sealed:
                raise CaseError(f"{self.root}: case is already sealed")
            self.commit()
            report = self.verify()
            if not report.ok:
                raise CaseError(f"{self.root}: refusing to seal a case that does not verify: "
                                + report.all_problems[0])
            record = self.log("case.sealed", {"records": len(report.chain.records),
                                              "previous_head": report.chain.head})
            self._state.sealed = True
            self._write_derived(self.root / SEAL, _seal_json(record))
            return str(record["hash"])

    def verify(self, *, expect_head: str | None = None) -> VerifyReport:
        """Check the chain, every artifact, the seal, and every file derived from the log;
        never writes.

        The derived files (``evidence.json``, ``seal.json``, ``index.jsonl``) are recomputed
        from the log: a missing one, or one behind the log (a crash between a write of the log
        and its rewrite) is a note; one that says what the log does not is a problem. They are
        read before the log, so a writer working meanwhile can only have put the log ahead of
        them, never them ahead of the log: verify beside a writer raises no false alarm. The
        log itself: every edit, deletion, reorder or forged append of its records is found by
        the chain; a record after the ``case.sealed`` record, or a ``seal.json`` the log has no
        ``case.sealed`` record for, is a problem. What the chain cannot show alone is a whole log
        rewritten (or cut back before its seal, with ``seal.json`` removed too): compare with
        the head kept out of band (``expect_head``)."""
        derived = {name: _read_derived(self.root / name)
                   for name in (MANIFEST, EVIDENCE, SEAL, INDEX)}
        log_problem = None
        try:
            data = read_regular(self.audit.path)
        except FileNotFoundError:
            data = b""
        except OSError as exc:
            data = b""
            log_problem = (f"{AUDIT} is a {kind_of(self.audit.path)}, not the case's log file"
                           if exc.errno in (errno.ELOOP, errno.EINVAL)
                           else f"{AUDIT}: unreadable ({exc.strerror or exc})")
        chain = verify_lines(data)
        report = VerifyReport(chain=chain)
        if log_problem:
            report.problems.append(log_problem)
        odd = next((r for r in chain.records if not well_formed(r)), None)
        if odd is not None:
            report.problems.append(f"record seq {odd['seq']} ({str(odd.get('action'))[:40]}) "
                                   "is not of the shape the kit writes; readers leave it out")
        self._verify_artifacts(chain, report)
        created = next((r for r in chain.records if r.get("action") == "case.created"), None)
        manifest = _json_of(derived[MANIFEST])
        if created is not None and manifest != _details(created).get("manifest"):
            report.problems.append(f"{MANIFEST} differs from the manifest recorded in record seq "
                                   f"{created['seq']} (case.created): it was edited")
        if created is None and not log_problem:
            # a case's log begins with its case.created record; the kit never leaves one without
            # it (a creation that failed before it is no case: Case.open refuses it)
            what = "holds no records" if not chain.records else "has no case.created record"
            report.problems.append(f"{AUDIT} {what}, though {MANIFEST} says a case was created "
                                   "here: the log was emptied or cut short (or, with no "
                                   "records at all, a `case new` of a version before 2026-12 "
                                   "failed here)")
        if chain.ok:
            self._verify_evidence(chain, report, derived[EVIDENCE])
            self._verify_seal(chain, report, derived[SEAL])
            problems, notes = check_file(self.root, chain.records, chain.places,
                                         data=derived[INDEX])
            report.problems += problems
            report.notes += notes
        for leftover in leftovers(self.root):
            report.notes.append(f"{leftover.name}: left by an interrupted rewrite of a derived "
                                "file; ignored")
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

    def _verify_artifacts(self, chain: ChainReport, report: VerifyReport) -> None:
        seen: set[str] = set()
        for record in chain.records:
            named = record.get("artifacts", [])
            if not isinstance(named, list) or not all(is_sha256(a) for a in named):
                report.problems.append(
                    f"record seq {record['seq']} ({record.get('action')}) names artifacts that "
                    f"are not SHA-256 names ({str(named)[:80]}): the kit never writes that")
                continue
            for sha in named:
                seen.add(sha)
                if kind_of(self.artifacts_dir / sha) == "missing":
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
                try:
                    actual = sha256_regular(path)
                except OSError as exc:
                    what = (f"a {kind_of(path)}, not a regular file of the case"
                            if exc.errno in (errno.ELOOP, errno.EINVAL)
                            else f"unreadable ({exc.strerror or exc})")
                    report.problems.append(f"artifact {path.name} is {what}: it was replaced")
                    continue
                if actual != path.name:
                    report.problems.append(
                        f"artifact {path.name} was changed (its content hashes to {actual})"
                    )
                elif path.name not in seen:
                    report.notes.append(f"artifact {path.name} is not referenced by the log")

    def _verify_evidence(self, chain: ChainReport, report: VerifyReport,
                         data: bytes | OSError | None) -> None:
        logged: list[Any] = []
        for record in chain.records:
            if record.get("action") != "evidence.added":
                continue
            item = _details(record).get("item")
            if not isinstance(item, dict):
                report.problems.append(f"record seq {record['seq']} (evidence.added) holds no "
                                       "evidence item: the kit never writes that")
                return
            logged.append(item)
        if data is None:
            report.notes.append(f"{EVIDENCE} is missing; it is derived from the log "
                                f"({len(logged)} evidence.added record(s)) and rewritten by the "
                                "next command that writes into the case")
            return
        inventory = _json_of(data)
        if inventory == logged:
            return
        if isinstance(inventory, list) and inventory == logged[:len(inventory)]:
            report.notes.append(f"{EVIDENCE} lists {len(inventory)} of the {len(logged)} "
                                "evidence items of the log (written before the last ones: "
                                "re-derived by the next write)")
            return
        report.problems.append(f"{EVIDENCE} differs from the evidence.added records of the "
                               "log: it was edited")

    def _verify_seal(self, chain: ChainReport, report: VerifyReport,
                     data: bytes | OSError | None) -> None:
        seals = [i for i, r in enumerate(chain.records) if r.get("action") == "case.sealed"]
        if seals:
            first = chain.records[seals[0]]
            after = len(chain.records) - 1 - seals[0]
            if after:
                report.problems.append(
                    f"{after} record(s) were appended after the seal (case.sealed is record "
                    f"seq {first['seq']}): the kit never writes into a sealed case")
        if data is None:
            if seals:
                report.notes.append(f"{SEAL} is missing; it is derived from the case.sealed "
                                    f"record (seq {chain.records[seals[0]]['seq']})")
            return
        seal = _json_of(data)
        if not isinstance(seal, dict):
            report.problems.append(f"{self.root / SEAL}: unreadable seal file")
            return
        hashes = {r["hash"]: r for r in chain.records}
        head = seal.get("head")
        if not seals:
            if isinstance(head, str) and head in hashes:
                report.problems.append(
                    f"{SEAL} names head {head} (seq {seal.get('seq')}), but the log holds no "
                    "case.sealed record: the seal was removed from the log")
            else:
                report.problems.append(
                    f"the sealed head {head} (seq {seal.get('seq')}) is not in the log: the log "
                    "was truncated or rewritten after sealing")
            return
        if seal != _seal_json(chain.records[seals[0]]):
            report.problems.append(f"{SEAL} differs from the case.sealed record (seq "
                                   f"{chain.records[seals[0]]['seq']}): it was edited")

    def summary(self) -> JsonObject:
        counts: dict[str, int] = {}
        records = 0
        head = None
        for record in self.audit.records():
            counts[record["action"]] = counts.get(record["action"], 0) + 1
            records += 1
            head = record["hash"]
        findings = self.findings()
        sev: dict[str, int] = {}
        for finding in findings:
            sev[str(finding.severity)] = sev.get(str(finding.severity), 0) + 1
        return {
            "root": str(self.root),
            "manifest": self.manifest,
            "sealed": self.sealed,
            "records": records,
            "head": head,
            "actions": counts,
            "evidence": [e.to_json() for e in self.evidence()],
            "findings": {"total": len(findings), "by_severity": sev},
            "artifacts": len(list(self.artifacts_dir.iterdir())) if self.artifacts_dir.is_dir() else 0,
        }


def _seal_json(record: AuditRecord) -> JsonObject:
    return {"seq": record["seq"], "head": record["hash"], "time": record.get("time")}


def _details(record: AuditRecord) -> JsonObject:
    details = record.get("details")
    return details if isinstance(details, dict) else {}


def _read_derived(path: Path) -> bytes | OSError | None:
    """A derived file's bytes (None: missing; the error: not a regular file, unreadable)."""
    try:
        return read_regular(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return exc


def _json_of(data: bytes | OSError | None) -> Any:
    if not isinstance(data, bytes):
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


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
        try:
            self.case.artifacts_dir.mkdir(parents=True, exist_ok=True)
            fd, self._tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.case.artifacts_dir)
        except OSError as exc:
            raise self._error(exc, "creating a temporary file for") from exc
        self._fh = os.fdopen(fd, "wb")
        return self

    def _error(self, exc: OSError, doing: str) -> CaseWriteError:
        return CaseWriteError(
            f"{self.case.artifacts_dir}: {exc.strerror or exc} while {doing} artifact "
            f"{self.name!r} ({self.size} bytes written)",
            hint="free space on the case's filesystem and run the command again")

    def write(self, data: bytes) -> None:
        assert self._fh is not None
        try:
            self._fh.write(data)
        except OSError as exc:
            raise self._error(exc, "writing") from exc
        self._digest.update(data)
        self.size += len(data)

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        assert self._fh is not None and self._tmp is not None
        try:
            try:
                self._fh.flush()
                if self.case._state.durable:
                    os.fsync(self._fh.fileno())
            finally:
                with contextlib.suppress(OSError):
                    self._fh.close()
        except OSError as error:
            with contextlib.suppress(OSError):
                os.unlink(self._tmp)
            if exc_type is not None:
                return  # the first error is the one to report
            raise self._error(error, "writing") from error
        if exc_type is not None:
            with contextlib.suppress(OSError):
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



def _holds_records(root: Path) -> bool:
    """Whether a case lives at ``root``: its log holds a record. (A log that cannot be asked
    for another reason than its absence is that error, naming it: never created over.) Beside
    a creation's :data:`CREATING` mark only a whole line counts: a first record torn by a full
    disk or a crash is no case."""
    try:
        size = os.lstat(root / AUDIT).st_size
    except (FileNotFoundError, NotADirectoryError):
        return False
    if not size or not os.path.lexists(root / CREATING):
        return bool(size)
    return _whole_line(root)


def _whole_line(root: Path) -> bool:
    """Whether the log begins with a whole line (an unreadable log counts as one)."""
    try:
        fd = open_regular(root / AUDIT)
    except OSError:
        return True
    try:
        return b"\n" in os.pread(fd, 1 << 16, 0)
    finally:
        os.close(fd)


def _empty_beside(root: Path, name: str, *, durable: bool) -> None:
    """Cut the case file ``name`` back to empty through its own descriptor (never through a
    link planted at the name); synced when ``durable``. Absent: nothing to do."""
    try:
        fd = open_regular(root / name, os.O_WRONLY)
    except FileNotFoundError:
        return
    try:
        if os.lseek(fd, 0, os.SEEK_END):
            os.ftruncate(fd, 0)
            if durable:
                os.fsync(fd)
    finally:
        os.close(fd)


def _failed_creation(root: Path) -> CaseError:
    return CaseError(f"{root}: a case whose creation failed before its first record (a full "
                     "disk?); nothing of it was kept",
                     hint=f"run again: ckptrescue case new {root} (or the command that made "
                          "it)")


def _left_by_a_failed_creation(root: Path) -> bool:
    """``root`` is empty, or holds only what a creation that failed before its first record
    leaves (a full disk) and nothing else: the lock file, the two folders empty and, beside
    the :data:`CREATING` mark that such a creation leaves, this kit's ``case.json``, an empty
    log (and an empty index), ``case.json``'s temporary file. The same files without the mark
    are a case whose log was emptied (damage), and a derived file with content beside an empty
    log is one too: never this."""
    def empty(path: str) -> bool:
        with os.scandir(path) as inside:
            return not any(inside)

    try:
        marked = stat.S_ISREG(os.lstat(root / CREATING).st_mode)
    except (FileNotFoundError, NotADirectoryError):  # (a file at root: the scan names it)
        marked = False
    with os.scandir(root) as entries:  # (a file there: its error, naming it)
        for entry in entries:
            name = entry.name
            if not (entry.is_dir(follow_symlinks=False) if name in (ARTIFACTS, "work")
                    else entry.is_file(follow_symlinks=False)):
                return False
            if name in (lock.LOCK_NAME, CREATING):
                continue
            if name in (ARTIFACTS, "work") and empty(entry.path):
                continue
            if not marked:
                return False
            if name.startswith(f".{MANIFEST}.") and name.endswith(".tmp"):
                continue
            if name in (AUDIT, INDEX) and entry.stat(follow_symlinks=False).st_size == 0:
                continue
            if name == AUDIT and not _whole_line(root):  # a torn first line, no record
                continue
            if name == MANIFEST and _failed_manifest(root) is not None:
                continue
            return False
    return True


def _failed_manifest(root: Path) -> JsonObject | None:
    """This kit's ``case.json`` at ``root`` (what a failed creation wrote), else None."""
    try:
        with open(root / MANIFEST, "rb") as fh:
            data = json.loads(fh.read(1 << 16))
    except (OSError, ValueError):
        return None
    if isinstance(data, dict) and data.get("tool") == "ckptrescue" \
            and isinstance(data.get("id"), str):
        return data
    return None
