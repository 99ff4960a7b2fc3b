"""``recover``: bring back the last good version of every damaged or missing file.

Audits DIR against the manifest, then for each ``corrupted``, ``changed``, ``missing`` or
``unreadable`` file tries the backup versions newest first and keeps the first whose SHA-256
equals the manifest's. Sources:

* a snapshots directory, ``SNAPSHOTS/<name>/<same relative paths>``; snapshots are tried newest
  first by the snapshot directory's mtime (then by name, descending);
* ``s3://bucket/prefix`` on a bucket with versioning: every version of ``prefix/<path>``, newest
  first, downloaded through the kit's read-only client with the object's stored checksums checked.

Each recovered file is streamed into ``RECOVERY_DIR/<path>`` through a temporary name, hashed on
the way, renamed only when the hash matches, then read back and hashed again. DIR is never
written to; RECOVERY_DIR may not overlap DIR or the snapshots.

``plan`` (``--plan PATH``) also writes the swap-back plan and its script for the operator, and
``clean_view`` (``--clean-view VIEW``) a symlink tree of verified files with its manifest, for the
rerun (``recover_plan.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ckptrescue.datasets.audit import DAMAGED, AuditResult, Expected, audit, load_expected
from ckptrescue.datasets.hashing import hash_file
from ckptrescue.datasets.manifest import default_jobs
from ckptrescue.datasets.recover_plan import (
    Outcome,
    check_outputs,
    write_clean_view,
    write_plan,
)
from ckptrescue.datasets.walk import (
    display,
    from_json_path,
    join,
    safe_relative,
    shown_path,
    to_json_path,
)
from ckptrescue.effects import beneath
from ckptrescue.errors import CkptRescueError, RefusedError, UsageError, os_error_line
from ckptrescue.model import ArtifactData, Finding, JsonObject, Recorded, Severity

_CHUNK = 1 << 20
OK_OUTCOME = "matches the manifest; copied and verified"
WRITE_FAILED = "could not write the copy"


@dataclass(frozen=True)
class Attempt:
    """One candidate version that was looked at, and what came of it."""

    source: str
    outcome: str

    def to_json(self) -> JsonObject:
        return {"source": self.source, "outcome": self.outcome}


@dataclass
class RecoverRow:
    rel: bytes
    damage: str  # the audit status that made it a target
    recovered: bool = False
    source: str | None = None
    sha256: str | None = None
    reason: str = ""
    tried: list[Attempt] = field(default_factory=list)

    def to_json(self) -> JsonObject:
        return {"path": to_json_path(self.rel), "damage": self.damage,
                "status": "recovered" if self.recovered else "unrecoverable",
                "source": self.source, "sha256": self.sha256, "reason": self.reason,
                "tried": [a.to_json() for a in self.tried]}


@dataclass
class RecoverResult(Recorded):
    root: str
    source: str
    to: str
    files: list[RecoverRow] = field(default_factory=list)
    # --plan: the swap-back plan (entries), where it and its script were written, what they say
    plan: list[dict[str, Any]] | None = None
    plan_file: str | None = None
    plan_script: str | None = None
    plan_sha256: str | None = None
    plan_unrecoverable: list[dict[str, Any]] = field(default_factory=list)
    # --clean-view: the symlink tree, its manifest, and what was left out of it
    clean_view: str | None = None
    clean_view_manifest: str | None = None
    clean_view_files: int = 0
    clean_view_left_out: list[dict[str, Any]] = field(default_factory=list)

    @property
    def recovered(self) -> list[RecoverRow]:
        return [r for r in self.files if r.recovered]

    @property
    def unrecovered(self) -> list[RecoverRow]:
        return [r for r in self.files if not r.recovered]

    @property
    def ok(self) -> bool:
        return not self.unrecovered

    def answer(self) -> str:
        if not self.files:
            return "nothing to recover: every file matches the manifest" + self._extras()
        text = (f"recovered {len(self.recovered)} of {len(self.files)} damaged or missing files "
                f"into {self.to}")
        if self.unrecovered:
            text += f"; {len(self.unrecovered)} could not be recovered"
        return text + self._extras()

    def _extras(self) -> str:
        text = ""
        if self.plan_file is not None:
            text += (f"; swap-back plan for {len(self.plan or [])} file(s): {self.plan_file} "
                     f"(script {self.plan_script}, not applied)")
        if self.clean_view is not None:
            text += (f"; clean view of {self.clean_view_files} verified file(s): "
                     f"{self.clean_view} ({len(self.clean_view_left_out)} left out)")
        return text

    def lines(self) -> list[str]:
        out = []
        for r in self.files:
            if r.recovered:
                out.append(f"RECOVERED     {display(r.rel)}  ({r.damage}) from {r.source}")
            else:
                out.append(f"UNRECOVERABLE {display(r.rel)}  ({r.damage}): {r.reason}")
        for left in self.clean_view_left_out:
            out.append(f"LEFT OUT      {display(from_json_path(left['path']))}: {left['reason']}")
        if self.plan_file is not None:
            out.append(f"plan:   {self.plan_file}")
            out.append(f"script: {self.plan_script} (review, then: bash SCRIPT [DATASET-ROOT])")
        if self.clean_view is not None:
            out.append(f"clean view: {self.clean_view} (manifest {self.clean_view_manifest})")
        return out

    def findings(self) -> list[Finding]:
        out = []
        for r in self.files:
            if r.recovered:
                out.append(Finding("RC001", Severity.INFO,
                                   f"{display(r.rel)}: recovered from {r.source}",
                                   evidence=shown_path(self.root, r.rel),
                                   evidence_sha256=r.sha256, source="recover",
                                   details={"to": shown_path(self.to, r.rel)}))
            else:
                out.append(Finding("RC002", Severity.ERROR,
                                   f"{display(r.rel)}: not recoverable: {r.reason}",
                                   evidence=shown_path(self.root, r.rel), source="recover",
                                   details={"tried": [a.to_json() for a in r.tried]}))
        if self.plan_file is not None:
            out.append(Finding("RC003", Severity.INFO,
                               f"swap-back plan for {len(self.plan or [])} verified "
                               f"replacement(s) written to {self.plan_file}; apply it with "
                               f"{self.plan_script} (the kit never writes in place)",
                               evidence=self.plan_file, evidence_sha256=self.plan_sha256,
                               source="recover",
                               details={"script": self.plan_script, "root": self.root,
                                        "entries": len(self.plan or []),
                                        "unrecoverable": len(self.plan_unrecoverable)}))
        return out

    def to_json(self) -> JsonObject:
        return {"source": self.source, "to": self.to,
                "files": [r.to_json() for r in self.files],
                "counts": {"recovered": len(self.recovered),
                           "unrecoverable": len(self.unrecovered)},
                "answer": self.answer(), **self._outputs_json()}

    def _outputs_json(self) -> JsonObject:
        out: dict[str, Any] = {}
        if self.plan_file is not None:
            out.update(plan=self.plan or [], plan_file=self.plan_file,
                       plan_script=self.plan_script, plan_unrecoverable=self.plan_unrecoverable)
        if self.clean_view is not None:
            out.update(clean_view=self.clean_view, clean_view_manifest=self.clean_view_manifest,
                       clean_view_files=self.clean_view_files,
                       clean_view_left_out=self.clean_view_left_out)
        return out


# -- candidate versions --------------------------------------------------------------------------
# writes the candidate's bytes into the given file; returns a note (e.g. the S3 checksum verdict)
Opener = Callable[[IO[bytes]], "str | None"]


@dataclass(frozen=True)
class Candidate:
    label: str
    size: int | None
    write_to: Opener


class SnapshotSource:
    """``SNAPSHOTS/<name>/<path>``: snapshots newest first (directory mtime, then name)."""

    def __init__(self, root: Path) -> None:
        if not root.is_dir():
            raise UsageError(f"{root}: snapshots directory not found")
        self.root = root
        snaps = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()]
        snaps.sort(key=lambda p: (p.stat().st_mtime_ns, p.name), reverse=True)
        self.snapshots = snaps

    def describe(self) -> str:
        return f"{len(self.snapshots)} snapshot(s) in {self.root}"

    def candidates(self, rel: bytes) -> Iterator[Candidate | Attempt]:
        for snap in self.snapshots:
            path = join(os.fsencode(snap), rel)
            label = f"snapshot {snap.name}"
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                yield Attempt(label, "not in this snapshot")
                continue
            except OSError as exc:
                yield Attempt(label, f"cannot stat: {exc.strerror}")
                continue
            if stat.S_ISLNK(st.st_mode):
                real = os.path.realpath(path)
                snap_real = os.path.realpath(os.fsencode(snap))
                if not real.startswith(snap_real + b"/"):
                    yield Attempt(label, "symlink leading out of the snapshot, not followed")
                    continue
                st = os.stat(real)  # noqa: PTH116 - bytes path
                path = real
            if not stat.S_ISREG(st.st_mode):
                yield Attempt(label, "not a regular file")
                continue
            yield Candidate(label, st.st_size, _file_copier(path))


def _file_copier(path: bytes) -> Opener:
    def write_to(dest: IO[bytes]) -> str | None:
        with open(path, "rb", buffering=0) as src:
            while block := src.read(_CHUNK):
                dest.write(block)
        return None

    return write_to


class S3Source:
    """Every version of ``s3://bucket/prefix/<path>``, newest first (needs the ``[s3]`` extra)."""

    # Up to this many damaged files, versions are listed key by key (one LIST each); above it
    # the whole prefix is listed once (cheaper than thousands of LISTs, unless the prefix is huge).
    PER_KEY_LIMIT = 1000

    def __init__(self, url: str, *, endpoint_url: str | None = None, targets: int = 0) -> None:
        from ckptrescue.stores.s3.client import make_client
        from ckptrescue.stores.s3.urls import parse_s3_url

        parsed = parse_s3_url(url)
        self.bucket = parsed.bucket
        self.prefix = parsed.key.rstrip("/")
        self.client = make_client(endpoint_url=endpoint_url)
        self.url = url
        self.versions: dict[str, list[Any]] = {}
        self.listed_all = targets > self.PER_KEY_LIMIT
        if self.listed_all:
            from ckptrescue.stores.s3.objects import list_versions

            listing_prefix = self.prefix + "/" if self.prefix else ""
            self.versions = list_versions(self.client, self.bucket, listing_prefix)

    def describe(self) -> str:
        return f"{sum(len(v) for v in self.versions.values())} version(s) under {self.url}"

    def _versions_of(self, key: str) -> list[Any]:
        if not self.listed_all and key not in self.versions:
            from ckptrescue.stores.s3.objects import list_versions

            self.versions[key] = list_versions(self.client, self.bucket, key,
                                               exact=True).get(key, [])
        return self.versions.get(key, [])

    def key_for(self, rel: bytes) -> str | None:
        try:
            name = rel.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return f"{self.prefix}/{name}" if self.prefix else name

    def candidates(self, rel: bytes) -> Iterator[Candidate | Attempt]:
        key = self.key_for(rel)
        if key is None:
            yield Attempt(self.url, "the name is not UTF-8, so no S3 key can hold it")
            return
        entries = self._versions_of(key)
        if not entries:
            yield Attempt(f"s3://{self.bucket}/{key}", "no versions of this key")
        for entry in entries:
            label = f"s3://{self.bucket}/{key}?versionId={entry.version_id}"
            if entry.delete_marker:
                yield Attempt(label, "delete marker")
                continue
            yield Candidate(label, entry.size, self._downloader(key, entry.version_id))

    def _downloader(self, key: str, version_id: str) -> Opener:
        from ckptrescue.stores.s3.objects import download_verified

        def write_to(dest: IO[bytes]) -> str | None:
            got = download_verified(self.client, self.bucket, key, dest, version_id=version_id)
            return f"stored checksum: {got.check.status}"

        return write_to


def open_source(source: str, *, endpoint_url: str | None = None,
                targets: int = 0) -> SnapshotSource | S3Source:
    if source.startswith("s3://"):
        return S3Source(source, endpoint_url=endpoint_url, targets=targets)
    return SnapshotSource(Path(source))


# -- the recovery loop -----------------------------------------------------------------------------
def _overlap(a: str, b: str) -> bool:
    ra, rb = os.path.realpath(a), os.path.realpath(b)
    return ra == rb or ra.startswith(rb.rstrip("/") + "/") or rb.startswith(ra.rstrip("/") + "/")


def recover(
    dir: str | os.PathLike[str],
    *,
    manifest: str | os.PathLike[str],
    source: str | os.PathLike[str],
    to: str | os.PathLike[str],
    evidence: Sequence[str] = (),
    endpoint_url: str | None = None,
    audit_report: str | os.PathLike[str] | AuditResult | None = None,
    jobs: int | None = None,
    plan: str | os.PathLike[str] | None = None,
    clean_view: str | os.PathLike[str] | None = None,
) -> RecoverResult:
    """Recover every damaged or missing file of ``dir`` from ``source`` into ``to``.

    ``audit_report`` (an :class:`AuditResult`, or the JSON of ``manifest audit --json``) names
    the damaged files from an audit already run, so a large dataset is not hashed twice; without
    it, ``dir`` is audited first. ``jobs`` files are recovered at once (default: 8 from S3, where
    latency dominates; the CPU count from snapshots). ``evidence``: paths ``to`` must not
    overlap (the case's evidence). The result carries its ``dataset.recover`` record.

    ``plan``: write the swap-back plan (JSON) there and its bash script beside it
    (``recover_plan.write_plan``); ``clean_view``: make that directory a symlink tree of the
    verified files, with its manifest ``VIEW.sha256`` beside it. Both are refused (before any
    work) inside DIR, the snapshots or the evidence, or on a replacement path; the clean view
    also needs a full audit (not --quick, not --sample) to know which files are good. Each
    adds its own record and artifacts (the plan and script; the view's manifest and sidecar).
    """
    root, dest = Path(dir), Path(to)
    src = str(source)
    if _overlap(str(dest), str(root)):
        raise UsageError(f"{dest}: the recovery directory overlaps {root}",
                         hint="recovery never writes into the dataset: choose a separate --to")
    if not src.startswith("s3://") and _overlap(str(dest), src):
        raise UsageError(f"{dest}: the recovery directory overlaps the snapshots {src}")
    for ev in evidence:
        if _overlap(str(dest), ev):
            raise UsageError(f"{dest}: overlaps the evidence {ev}")
    expected, _ = load_expected(manifest)
    verdicts = _verdicts(root, manifest, expected, audit_report)
    targets = verdicts.targets
    check_outputs(root=str(root), source=src, to=str(dest), targets=[rel for rel, _ in targets],
                  plan=str(plan) if plan is not None else None,
                  clean_view=str(clean_view) if clean_view is not None else None,
                  evidence=evidence)
    if clean_view is not None and verdicts.partial:
        raise UsageError(f"--clean-view needs a full audit: {verdicts.partial}",
                         hint="run `manifest audit` without --quick/--sample, or leave out "
                              "--from-audit")
    origin = open_source(src, endpoint_url=endpoint_url, targets=len(targets))
    result = RecoverResult(root=str(root), source=src, to=str(dest))
    if targets:
        dest.mkdir(parents=True, exist_ok=True)
    workers = jobs or (8 if src.startswith("s3://") else default_jobs())
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="recover") as pool:
        result.files = list(pool.map(
            lambda t: _recover_one(t[0], t[1], expected[t[0]], origin, dest), targets))
    result.record("dataset.recover", {"root": result.root, "source": src, "to": result.to,
                                      "source_detail": origin.describe(),
                                      "recovered": len(result.recovered),
                                      "unrecoverable": len(result.unrecovered),
                                      "answer": result.answer()})
    outcomes = [Outcome(r.rel, r.damage, r.recovered, r.source, expected[r.rel].sha256, r.reason)
                for r in result.files]
    if plan is not None:
        _plan(result, plan, manifest, outcomes)
    if clean_view is not None:
        _view(result, clean_view, expected, verdicts.ok)
    return result


def _plan(result: RecoverResult, plan: str | os.PathLike[str],
          manifest: str | os.PathLike[str], outcomes: list[Outcome]) -> None:
    try:
        written = write_plan(plan, root=result.root, to=result.to, source=result.source,
                             manifest=str(manifest), outcomes=outcomes)
    except OSError as exc:  # the replacements stay; a rerun finds them already recovered
        raise CkptRescueError(f"{plan}: cannot write the swap-back plan: "
                              f"{exc.strerror or exc}") from exc
    result.plan, result.plan_file, result.plan_script = (written.entries, written.plan_file,
                                                         written.script)
    result.plan_unrecoverable = written.unrecoverable
    shas = [result.store(ArtifactData.of_bytes(written.plan_bytes, name=Path(written.plan_file).name,
                                               kind="recover.swap-back-plan")),
            result.store(ArtifactData.of_bytes(written.script_bytes, name=Path(written.script).name,
                                               kind="recover.swap-back-script"))]
    result.plan_sha256 = shas[0]
    result.record("dataset.recover.plan", {"plan": written.plan_file, "script": written.script,
                                           "plan_sha256": shas[0], "script_sha256": shas[1],
                                           "entries": len(written.entries),
                                           "unrecoverable": len(written.unrecoverable)},
                  artifacts=shas)


def _view(result: RecoverResult, view: str | os.PathLike[str], expected: dict[bytes, Expected],
          ok: set[bytes]) -> None:
    damage = {r.rel: (f"{r.damage}, not recovered: {r.reason}" if not r.recovered else r.damage)
              for r in result.files}
    try:
        written = write_clean_view(view, root=result.root, to=result.to,
                                   expected={rel: e.sha256 for rel, e in expected.items()},
                                   ok=ok, recovered={r.rel for r in result.recovered},
                                   damage=damage)
    except OSError as exc:
        raise CkptRescueError(f"{view}: cannot write the clean view: "
                              f"{exc.strerror or exc}") from exc
    result.clean_view, result.clean_view_manifest = written.view, written.manifest
    result.clean_view_files, result.clean_view_left_out = written.files, written.left_out
    shas = [result.store(ArtifactData.of_file(written.manifest, name=Path(written.manifest).name,
                                              kind="recover.clean-view-manifest")),
            result.store(ArtifactData.of_file(written.sidecar, name=Path(written.sidecar).name,
                                              kind="recover.clean-view-sidecar"))]
    result.record("dataset.recover.clean_view",
                  {"view": written.view, "manifest": written.manifest, "files": written.files,
                   "from_dataset": written.from_dataset, "from_recovery": written.from_recovery,
                   "left_out": written.left_out}, artifacts=shas)


@dataclass
class _Verdicts:
    """What the audit said: the files to recover (name, damage, in name order), the files it
    found ok, and why it does not vouch for every other file ('' for a full audit)."""

    targets: list[tuple[bytes, str]]
    ok: set[bytes]
    partial: str = ""


def _verdicts(root: Path, manifest: str | os.PathLike[str], expected: dict[bytes, Expected],
              report: str | os.PathLike[str] | AuditResult | None) -> _Verdicts:
    if report is None:
        # the audit's state goes to a private temporary directory: beside the manifest may be
        # read-only media (an audit to resume is `manifest audit`, then --from-audit)
        with tempfile.TemporaryDirectory(prefix="ckptrescue-recover-audit-") as tmp:
            report = audit(root, manifest, state=os.path.join(tmp, "audit.sqlite"))
    if isinstance(report, AuditResult):
        rows = [(row.rel, row.status) for row in report.files]
        quick, sampled = report.quick, report.sample is not None
        omitted = int(getattr(report, "files_omitted", 0) or 0)
    else:
        try:
            data = json.loads(Path(report).read_text())
            rows = [(from_json_path(str(r["path"])), str(r["status"])) for r in data["files"]]
            quick, sampled = bool(data.get("quick")), data.get("sample") is not None
            omitted = int(data.get("files_omitted") or 0)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UsageError(f"{report}: not the JSON of `manifest audit --json` ({exc})") \
                from exc
    targets = sorted((rel, status) for rel, status in rows if status in DAMAGED)
    unknown = [rel for rel, _ in targets if rel not in expected]
    if unknown:
        raise UsageError(f"{report}: {display(unknown[0])} is not in the manifest {manifest}",
                         hint="use the audit report made with this manifest")
    ok = {rel for rel, status in rows if status == "ok"}
    if omitted:  # a large audit lists damaged and new files only: the others were ok
        listed = {rel for rel, _ in rows}
        ok |= {rel for rel in expected if rel not in listed}
    partial = ("a quick audit compares sizes and mtimes only" if quick
               else "a sampled audit hashed only part of the files" if sampled else "")
    return _Verdicts(targets, ok, partial)


def _recover_one(rel: bytes, damage: str, want: Expected, origin: SnapshotSource | S3Source,
                 dest: Path) -> RecoverRow:
    row = RecoverRow(rel, damage)
    if not safe_relative(rel):
        row.reason = "the manifest name leads outside the directory; refused"
        return row
    final = join(os.fsencode(dest), rel)
    try:
        present = beneath.lexists(dest, final)
        if not present:
            beneath.makedirs(dest, os.path.dirname(final))  # noqa: PTH120 - bytes
    except RefusedError as exc:
        row.reason = exc.message
        return row
    if present:
        have = hash_file(final)
        if have.sha256 == want.sha256:
            row.recovered, row.source, row.sha256 = True, "already in the recovery directory", \
                want.sha256
            return row
        row.reason = "the recovery directory already holds a different file at this path"
        return row
    for item in origin.candidates(rel):
        if isinstance(item, Attempt):
            row.tried.append(item)
            continue
        if want.size is not None and item.size is not None and item.size != want.size:
            row.tried.append(Attempt(item.label, f"size {item.size}, manifest says {want.size}"))
            continue
        outcome = _copy_verified(item, want.sha256, final, dest)
        row.tried.append(Attempt(item.label, outcome))
        if outcome.startswith(OK_OUTCOME):
            row.recovered, row.source, row.sha256 = True, item.label, want.sha256
            return row
        # the destination's failure: a version of the manifest's size would meet it too (of
        # an unknown size, a smaller one may still fit: tried)
        if outcome.startswith(WRITE_FAILED) and want.size is not None:
            row.reason = f"the recovery directory could not be written ({outcome})"
            return row
    wrote = [a.outcome for a in row.tried if a.outcome.startswith(WRITE_FAILED)]
    row.reason = (f"the recovery directory could not be written ({wrote[-1]})" if wrote
                  else "no version matches the manifest" if row.tried
                  else "the source has no versions of this file")
    return row


class _HashingWriter:
    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.name = getattr(fh, "name", None)  # what a store's write error names
        self.digest = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return self.fh.write(data)


def _copy_verified(item: Candidate, want: str, final: bytes, dest: Path) -> str:
    tmp = join(os.path.dirname(final), b".recovering-" + os.urandom(8).hex().encode())  # noqa: PTH120
    try:
        fd = beneath.open_fd(dest, tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except RefusedError as exc:
        return exc.message
    from ckptrescue.effects.files import fsync, named_file
    from ckptrescue.stores.base import LocalWriteError

    shown = shown_path(str(dest), final)
    try:
        # the copy's own errors name it, also those of the flush when the file closes: a full
        # disk is the destination's failure, never said as the source's
        read_error = write_error = ""
        try:
            with named_file(fd, "wb", shown) as fh:
                writer = _HashingWriter(fh)
                try:
                    note = item.write_to(writer)  # type: ignore[arg-type]
                except OSError as exc:
                    if exc.filename == shown:
                        raise
                    read_error = os_error_line(exc)
                except LocalWriteError as exc:  # a store's download, written into the copy
                    write_error = exc.message
                except CkptRescueError as exc:
                    read_error = exc.message
                if not (read_error or write_error):
                    fsync(fh)
        except OSError as exc:
            if exc.filename != shown:
                raise
            return f"{WRITE_FAILED}: {os_error_line(exc)}"
        if write_error:
            return f"{WRITE_FAILED}: {write_error}"
        if read_error:
            return f"could not read: {read_error}"
        got = writer.digest.hexdigest()
        if got != want:
            return f"SHA-256 {got[:16]}... differs from the manifest" + (f" ({note})" if note else "")
        readback = hash_file(tmp)
        if readback.sha256 != want:
            return "the copy did not read back with the manifest's SHA-256"
        beneath.rename(dest, tmp, final, replace=False)
        tmp = b""
        return OK_OUTCOME + (f" ({note})" if note else "")
    finally:
        if tmp:
            beneath.unlink(dest, tmp, missing_ok=True)
