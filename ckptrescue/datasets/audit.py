"""``manifest audit``: compare a directory with a manifest, file by file.

Statuses: ``ok``; ``corrupted`` (same size, different SHA-256: bit rot); ``changed`` (size
differs: truncated, extended or rewritten); ``missing``; ``new`` (not in the manifest);
``unreadable`` (an I/O error, with the offset of the first bad block). ``quick`` compares size and
mtime from the JSON-lines sidecar only, reads no content, and says so. ``sample`` stats every
file (missing and size-changed files are always reported) but hashes only a seeded sample of the
rest, and states the result as a 95% Clopper-Pearson upper bound (``sampling.py``).

A local audit keeps its state on disk (``audit_state.py``, SQLite): memory stays bounded however
many files there are, and an interrupted audit resumes without re-hashing finished files. Above
:data:`LIST_ALL_MAX` files, ``to_json()`` lists only the rows that are not ``ok`` (every row is in
the state) and says how many ok rows it left out.
"""

from __future__ import annotations

import os
import random
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ckptrescue.datasets import sha256sum_format
from ckptrescue.datasets.audit_state import (
    CLUSTER_CHUNK_FILES,
    HASH_CHUNK_FILES,
    AuditState,
    Identity,
    check_location,
    default_path,
    manifest_id,
)
from ckptrescue.datasets.manifest import (
    PARTIAL_SUFFIX,
    default_jobs,
    hash_many,
    read_jsonl_entries,
    sidecar_path,
)
from ckptrescue.datasets.progress import ProgressFn, Tracker
from ckptrescue.datasets.quick_merge import NotSorted, quick_merge
from ckptrescue.datasets.sampling import SampleStats, parse_sample, sample_size
from ckptrescue.datasets.walk import (
    display,
    shown_path,
    to_json_path,
)
from ckptrescue.errors import EvidenceError, UsageError, database
from ckptrescue.model import Finding, JsonObject, Recorded, Severity
from ckptrescue.stores.urls import is_s3

STATUSES = ("ok", "corrupted", "changed", "missing", "new", "unreadable")
DAMAGED = ("corrupted", "changed", "missing", "unreadable")
_CODES = {"corrupted": ("MF001", Severity.ERROR), "changed": ("MF002", Severity.WARNING),
          "missing": ("MF003", Severity.ERROR), "new": ("MF004", Severity.INFO),
          "unreadable": ("MF005", Severity.ERROR)}
# audits of more files than this list only the rows that are not ok (to_json, findings)
LIST_ALL_MAX = 10_000  # above it, ok rows stay in the state only: memory flat in files


@dataclass(frozen=True)
class Expected:
    """What the manifest says about one file (size and mtime only when a sidecar exists)."""

    rel: bytes
    sha256: str
    size: int | None = None
    mtime_ns: int | None = None


@dataclass(frozen=True)
class AuditRow:
    rel: bytes
    status: str
    expected: str | None
    actual: str | None
    offset: int | None = None
    error: str | None = None
    reason: str = ""

    def to_json(self) -> JsonObject:
        row: JsonObject = {"path": to_json_path(self.rel), "status": self.status,
                               "expected": self.expected, "actual": self.actual}
        if self.status == "unreadable":
            row["offset"] = self.offset
        return row


@dataclass
class AuditResult(Recorded):
    root: str
    manifest: str
    quick: bool
    files: list[AuditRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    sample: SampleStats | None = None
    # the state database holding every row (local audits), how many files' hashes were taken
    # from an interrupted earlier run, and how many ok rows ``files`` leaves out
    state: str | None = None
    resumed: int = 0
    files_omitted: int = 0
    # counts per status when ``files`` does not hold every row (from the state)
    stored_counts: dict[str, int] | None = field(default=None, repr=False)
    # entries the walk skipped (unlistable directory, special or unstattable file): not checked
    skipped: list[tuple[bytes, str]] = field(default_factory=list)
    allow_unverified: bool = False

    @property
    def counts(self) -> dict[str, int]:
        if self.stored_counts is not None:
            return {s: int(self.stored_counts.get(s, 0)) for s in STATUSES}
        counts = dict.fromkeys(STATUSES, 0)
        for row in self.files:
            counts[row.status] += 1
        return counts

    @property
    def ok(self) -> bool:
        c = self.counts
        if self.skipped and not self.allow_unverified:
            return False  # fail closed: what was not checked is not "everything matches"
        return not any(c[s] for s in STATUSES if s != "ok")

    def damaged(self) -> list[AuditRow]:
        return [row for row in self.files if row.status in DAMAGED]

    def answer(self) -> str:
        c = self.counts
        listed = sum(c[s] for s in ("ok", *DAMAGED))
        bad = sum(c[s] for s in DAMAGED)
        mode = "QUICK (size and mtime only, contents not read): " if self.quick else ""
        if bad == 0:
            text = f"{mode}all {listed} files in the manifest match"
        else:
            parts = ", ".join(f"{c[s]} {s}" for s in DAMAGED if c[s])
            text = f"{mode}{bad} of {listed} files in the manifest do not match ({parts})"
        if self.sample is not None:
            return self._sampled_answer(c) + self._skipped_answer()
        if c["new"]:
            text += f"; {c['new']} new file(s) not in the manifest"
        return text + self._skipped_answer()

    def _skipped_answer(self) -> str:
        if not self.skipped:
            return ""
        return (f"; {len(self.skipped)} entr(ies) skipped while walking, not checked "
                f"(unverified: {display(self.skipped[0][0])}: {self.skipped[0][1]}"
                + (" ...; accepted with --allow-unverified)" if self.allow_unverified else
                   " ...; --allow-unverified accepts them)"))

    def _sampled_answer(self, c: dict[str, int]) -> str:
        assert self.sample is not None
        text = f"SAMPLED (seed {self.sample.seed}): {self.sample.statement()}"
        stat_bad = [f"{c[s]} {s}" for s in ("missing", "changed") if c[s]]
        if stat_bad:
            text += "; every file stat'ed: " + ", ".join(stat_bad)
        if c["new"]:
            text += f"; {c['new']} new file(s) not in the manifest"
        return text

    def findings(self) -> list[Finding]:
        out: list[Finding] = []
        if self.quick:
            out.append(Finding("MF007", Severity.INFO, "quick audit: size and mtime only, "
                               "file contents were not read", evidence=self.root,
                               source="manifest.audit"))
        for row in self.files:
            if row.status not in _CODES:
                continue
            code, sev = _CODES[row.status]
            title = f"{display(row.rel)}: {row.status}"
            if row.reason:
                title += f" ({row.reason})"
            out.append(Finding(code, sev, title, evidence=shown_path(self.root, row.rel),
                               evidence_sha256=row.actual if not self.quick else None,
                               offset=row.offset, source="manifest.audit",
                               details={"expected": row.expected, "actual": row.actual}))
        severity = Severity.INFO if self.allow_unverified else Severity.WARNING
        for rel, reason in self.skipped[:1000]:
            out.append(Finding("MF006", severity, f"{display(rel)}: skipped: {reason} (not "
                               "checked: unverified)", evidence=shown_path(self.root, rel),
                               source="manifest.audit"))
        return out

    def to_json(self) -> JsonObject:
        """Every row, or above :data:`LIST_ALL_MAX` files the rows that are not ok
        (``files_omitted``: the ok rows left out; ``counts`` is always complete)."""
        out: JsonObject = {"files": [row.to_json() for row in self.files],
                               "counts": self.counts, "quick": self.quick,
                               "answer": self.answer(), "state": self.state,
                               "resumed": self.resumed, "files_omitted": self.files_omitted,
                               "skipped": len(self.skipped),
                               "allow_unverified": self.allow_unverified}
        if self.sample is not None:
            out["sample"] = self.sample.to_json()
        return out


def load_expected(manifest: str | os.PathLike[str]) -> tuple[dict[bytes, Expected], bool]:
    """The manifest's entries, with sizes/mtimes when its sidecar exists (second value)."""
    path = Path(manifest)
    if not path.is_file():
        raise UsageError(f"{path}: manifest not found")
    if path.name.endswith(".jsonl"):
        entries = {e.rel: Expected(e.rel, e.sha256, e.size, e.mtime_ns)
                   for e in read_jsonl_entries(path)}
        return entries, True
    try:
        lines = list(sha256sum_format.parse_manifest(path.read_bytes()))
    except sha256sum_format.ManifestSyntaxError as exc:
        raise UsageError(f"{path}: not a sha256sum manifest: {exc}") from exc
    expected = {line.name: Expected(sha256sum_format.plain_name(line.name), line.sha256) for line in lines}
    expected = {sha256sum_format.plain_name(k): v for k, v in expected.items()}
    side = sidecar_path(path)
    if not side.is_file():
        return expected, False
    sizes = {e.rel: e for e in read_jsonl_entries(side)}
    for rel, exp in list(expected.items()):
        extra = sizes.get(rel)
        if extra is not None and extra.sha256 == exp.sha256:
            expected[rel] = Expected(rel, exp.sha256, extra.size, extra.mtime_ns)
    return expected, True



def audit(
    dir: str | os.PathLike[str],
    manifest: str | os.PathLike[str],
    *,
    quick: bool = False,
    jobs: int | None = None,
    scheduler: str | None = None,
    progress: ProgressFn | None = None,
    endpoint_url: str | None = None,
    sample: str | float | None = None,
    seed: int = 0,
    use_stored: bool = True,
    state: str | os.PathLike[str] | None = None,
    restart: bool = False,
    cancel: threading.Event | None = None,
    follow_into: Iterable[str | os.PathLike[str]] = (),
) -> AuditResult:
    """Audit ``dir`` against ``manifest`` (read-only).

    ``sample`` (``"1%"``, ``0.01`` or a count): hash only a sample drawn with ``seed`` from the
    manifest's files that are present with their recorded size; every file is still stat'ed.
    ``use_stored=False`` (s3:// only) downloads every object instead of trusting the store's
    full-object SHA-256. ``state``: the state database (default ``MANIFEST.audit.sqlite``,
    never inside ``dir``); an unfinished run of the same audit there is resumed unless
    ``restart``. ``cancel`` set stops the audit as Ctrl-C does (finished rows stay committed).
    ``quick`` without ``state`` keeps no state: the walk and the manifest are merged in name
    order (``quick_merge.py``; ``state`` is None in the result, ``restart`` has nothing to do);
    with ``state`` it goes through that state database as a full audit does.
    ``follow_into``: directories a symlink in ``dir`` may lead into besides ``dir`` itself (a
    clean view's links into DIR and the recovery directory); local directories only.
    """
    if sample is not None and quick:
        raise UsageError("--sample and --quick do not go together (quick reads no content)")
    follow = [str(p) for p in follow_into]
    if is_s3(dir):
        if follow:
            raise UsageError("--follow-links-into is for local directories")
        if sample is not None:
            raise UsageError("--sample audits local directories only")
        from ckptrescue.datasets.s3dataset import audit_s3  # it imports this module

        return audit_s3(str(dir), manifest, quick=quick, jobs=jobs, scheduler=scheduler,
                        progress=progress, endpoint_url=endpoint_url, use_stored=use_stored)
    root = Path(dir)
    if not root.is_dir():
        raise EvidenceError(f"{root}: not a directory")
    if not Path(manifest).is_file():
        raise UsageError(f"{manifest}: manifest not found")
    for p in follow:
        if not Path(p).is_dir():
            raise UsageError(f"{p}: --follow-links-into needs a directory")
    return _audit_local(root, Path(manifest), quick=quick, jobs=jobs, scheduler=scheduler,
                        progress=progress, sample=sample, seed=seed, state=state,
                        restart=restart, cancel=cancel, follow_into=follow)


def state_identity(root: str | os.PathLike[str], manifest: str | os.PathLike[str], *,
                   quick: bool = False, sample: str | float | None = None,
                   seed: int = 0) -> Identity:
    """What makes two runs the same audit: DIR's real path, the manifest's bytes, the mode."""
    if quick:
        mode = "quick"
    elif sample is not None:
        value, fraction = parse_sample(sample)
        mode = f"sample:{value!r}:{'fraction' if fraction else 'count'}:{int(seed)}"
    else:
        mode = "full"
    return Identity(os.path.realpath(root), manifest_id(manifest), mode)


def _audit_local(root: Path, manifest: Path, *, quick: bool, jobs: int | None,
                 scheduler: str | None, progress: ProgressFn | None,
                 sample: str | float | None, seed: int, state: str | os.PathLike[str] | None,
                 restart: bool, cancel: threading.Event | None,
                 follow_into: list[str]) -> AuditResult:
    started = time.monotonic()
    if quick and state is None:
        return _quick_audit(root, manifest, restart=restart, cancel=cancel, started=started,
                            follow_into=follow_into)
    return _state_audit(root, manifest, quick=quick, jobs=jobs, scheduler=scheduler,
                        progress=progress, sample=sample, seed=seed, state=state,
                        restart=restart, cancel=cancel, started=started,
                        follow_into=follow_into)


def _state_audit(root: Path, manifest: Path, *, quick: bool, jobs: int | None,
                 scheduler: str | None, progress: ProgressFn | None,
                 sample: str | float | None, seed: int, state: str | os.PathLike[str] | None,
                 restart: bool, cancel: threading.Event | None, started: float,
                 follow_into: list[str], report_state: bool = True) -> AuditResult:
    """The audit through the state database (every full and sampled audit; a quick audit
    given ``state``, or whose manifest is not sorted by name)."""
    state_path = Path(state) if state is not None else default_path(manifest)
    check_location(state_path, root, default=state is None)
    identity = state_identity(root, manifest, quick=quick, sample=sample, seed=seed)
    existed = state_path.exists()
    with database(state_path):  # its errors say which file (a full disk: ENOSPC)
        store = AuditState.open(state_path, identity, restart=restart, default=state is None)
        discard = False
        try:
            return _run(store, identity, root, manifest, quick=quick, jobs=jobs,
                        scheduler=scheduler, progress=progress, sample=sample, seed=seed,
                        cancel=cancel, started=started, follow_into=follow_into,
                        report_state=report_state)
        except BaseException:
            # a state this run made and that holds no hash (a manifest refused on import, a
            # Ctrl-C before the first file) has nothing to resume: it is not left beside the
            # manifest; one with hashes is kept for the rerun
            try:
                discard = not existed and store.hashed_nothing()
            except Exception:  # noqa: BLE001 - a state that cannot be read is kept as it is
                discard = False
            raise
        finally:
            store.close()
            if discard:
                store.remove_files()


def _quick_audit(root: Path, manifest: Path, *, restart: bool,
                 cancel: threading.Event | None, started: float,
                 follow_into: list[str]) -> AuditResult:
    """A quick audit without ``state``: the sorted merge of the walk and the manifest
    (``quick_merge.py``); no state database is written (``state`` is null). A manifest not
    sorted by name is audited through a temporary state database instead, said in the notes."""
    if not manifest.name.endswith(".jsonl") and not sidecar_path(manifest).is_file():
        raise UsageError(f"{manifest}: --quick needs the JSON-lines sidecar "
                         f"({sidecar_path(manifest).name}) that holds sizes and mtimes")
    _cancelled(cancel)
    notes: list[str] = []
    if restart:
        notes.append("--restart: a quick audit without --state keeps no state, there was "
                     "nothing to restart")
    exclude = [manifest, sidecar_path(manifest), Path(str(manifest) + PARTIAL_SUFFIX)]
    try:
        outcome = quick_merge(root, manifest, exclude, list_max=LIST_ALL_MAX, cancel=cancel,
                              follow_into=follow_into)
    except NotSorted as exc:
        with tempfile.TemporaryDirectory(prefix="ckptrescue-quick-") as tmp:
            result = _state_audit(root, manifest, quick=True, jobs=None, scheduler=None,
                                  progress=None, sample=None, seed=0,
                                  state=Path(tmp) / "quick.audit.sqlite", restart=False,
                                  cancel=cancel, started=started, follow_into=follow_into,
                                  report_state=False)
        result.notes[:0] = [*notes, f"{exc}: the manifest is not sorted by name, so the quick "
                            "audit went through a temporary state database (deleted after) "
                            "instead of the sorted merge"]
        return result
    result = AuditResult(root=str(root), manifest=str(manifest), quick=True, state=None)
    result.notes += notes
    for s in sorted(outcome.skipped, key=lambda s: s.rel):
        result.notes.append(f"{display(s.rel)}: skipped: {s.reason}")
        result.skipped.append((s.rel, s.reason))
    result.files = [AuditRow(rel, status, want, got, None, None, reason)
                    for rel, status, want, got, reason in outcome.rows]
    result.stored_counts = {s: n for s, n in outcome.counts.items() if n}
    result.files_omitted = 0 if outcome.listed_all else outcome.counts["ok"]
    return _finish(result, started)


def _finish(result: AuditResult, started: float) -> AuditResult:
    """Elapsed time and the ``manifest.audit`` record, the same for every local audit."""
    result.elapsed_s = time.monotonic() - started
    result.record("manifest.audit", {"root": result.root, "manifest": result.manifest,
                                     "quick": result.quick, "counts": result.counts,
                                     "answer": result.answer(), "state": result.state,
                                     "resumed": result.resumed,
                                     **({"sample": result.sample.to_json()}
                                        if result.sample is not None else {})})
    return result


def _cancelled(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise KeyboardInterrupt("cancelled")


def _run(store: AuditState, identity: Identity, root: Path, manifest: Path, *, quick: bool,
         jobs: int | None, scheduler: str | None, progress: ProgressFn | None,
         sample: str | float | None, seed: int, cancel: threading.Event | None,
         started: float, follow_into: list[str], report_state: bool = True) -> AuditResult:
    mode = identity.mode.split(":", 1)[0]
    has_sizes = store.import_manifest(manifest, identity)
    if quick and not has_sizes:
        raise UsageError(f"{manifest}: --quick needs the JSON-lines sidecar "
                         f"({sidecar_path(manifest).name}) that holds sizes and mtimes")
    _cancelled(cancel)
    result = AuditResult(root=str(root), manifest=str(manifest), quick=quick,
                         state=str(store.path))
    result.notes += store.notes
    if not has_sizes:
        result.notes.append("no sidecar: sizes unknown, every hash mismatch is called corrupted")
    exclude = [manifest, sidecar_path(manifest), Path(str(manifest) + PARTIAL_SUFFIX),
               *store.excluded()]
    store.record_walk(root, exclude, follow_into)
    _cancelled(cancel)
    for s in store.skipped():
        result.notes.append(f"{display(s.rel)}: skipped: {s.reason}")
        result.skipped.append((s.rel, s.reason))
    if sample is not None:
        # the draw is from the manifest's names in order (random.sample over positions draws
        # the same entries as over the names themselves), so a seed draws the same entries from
        # the same manifest whatever happened to the tree; drawn entries already missing or
        # changed by the stat are reported as such and are not part of the sample
        n = store.expected_count()
        store.mark_drawn(random_positions(n, sample_size(n, sample), seed))
    files, nbytes, resumed = store.hash_plan(mode)
    result.resumed = resumed
    if files:
        tracker = Tracker(files, nbytes, progress, cancel=cancel)
        writer = store.writer()
        root_b = os.fsencode(root)
        try:
            chunk_files = CLUSTER_CHUNK_FILES if scheduler else HASH_CHUNK_FILES
            for chunk in store.todo_chunks(mode, files=chunk_files):
                by_rel = {f.rel: f for f in chunk}
                for item in hash_many(root_b, chunk, jobs=jobs or default_jobs(),
                                      scheduler=scheduler, tracker=tracker, formats=False):
                    writer.add(by_rel[item.rel], item)
                _cancelled(cancel)
        finally:
            writer.close()
        tracker.finish()
    store.compute_result(mode)
    counts = store.counts()
    total = sum(counts.values())
    list_all = total <= LIST_ALL_MAX
    result.files = [AuditRow(bytes(rel), status, want, got, offset, error, reason)
                    for rel, status, want, got, offset, error, reason
                    in store.result_rows(ok_too=list_all)]
    result.stored_counts = counts
    result.files_omitted = 0 if list_all else counts.get("ok", 0)
    if sample is not None:
        size, population, bad, unreadable = store.sample_stats()
        result.sample = SampleStats(seed=seed, size=size, population=population, bad=bad,
                                    unreadable=unreadable)
    if not report_state:
        result.state = None  # a temporary database, gone when the audit returns
    return _finish(result, started)


def random_positions(n: int, k: int, seed: int) -> list[int]:
    """The positions ``sampling.draw`` picks from ``n`` name-sorted entries: ``random.sample``
    chooses by position only, so this is ``draw(names, k, seed)`` without holding the names.
    It is given a ``range``: for a sample small against ``n`` only the drawn positions are held;
    for a large share (about 1/12 of the files and up) ``random.sample`` itself keeps a pool of
    all ``n`` positions while it draws."""
    return random.Random(seed).sample(range(n), k)  # noqa: S311 - reproducible, by design
