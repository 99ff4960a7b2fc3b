"""``manifest audit``: compare a directory with a manifest, file by file.

Statuses: ``ok``; ``corrupted`` (same size, different SHA-256: bit rot); ``changed`` (size
differs: truncated, extended or rewritten); ``missing``; ``new`` (not in the manifest);
``unreadable`` (an I/O error, with the offset of the first bad block). ``quick`` compares size and
mtime from the JSON-lines sidecar only, reads no content, and says so. ``sample`` stats every
file (missing and size-changed files are always reported) but hashes only a seeded sample of the
rest, and states the result as a 95% Clopper-Pearson upper bound (``sampling.py``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.datasets import sha256sum_format
from ckptrescue.datasets.manifest import (
    PARTIAL_SUFFIX,
    ManifestEntry,
    UnreadableFile,
    default_jobs,
    hash_many,
    read_jsonl_entries,
    sidecar_path,
)
from ckptrescue.datasets.progress import ProgressFn, Tracker
from ckptrescue.datasets.sampling import SampleStats, draw, sample_size
from ckptrescue.datasets.walk import (
    FileEntry,
    display,
    safe_relative,
    shown_path,
    to_json_path,
    walk,
)
from ckptrescue.errors import EvidenceError, UsageError
from ckptrescue.model import Finding, Recorded, Severity

STATUSES = ("ok", "corrupted", "changed", "missing", "new", "unreadable")
DAMAGED = ("corrupted", "changed", "missing", "unreadable")
_CODES = {"corrupted": ("MF001", Severity.ERROR), "changed": ("MF002", Severity.WARNING),
          "missing": ("MF003", Severity.ERROR), "new": ("MF004", Severity.INFO),
          "unreadable": ("MF005", Severity.ERROR)}


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

    def to_json(self) -> dict[str, Any]:
        row: dict[str, Any] = {"path": to_json_path(self.rel), "status": self.status,
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

    @property
    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(STATUSES, 0)
        for row in self.files:
            counts[row.status] += 1
        return counts

    @property
    def ok(self) -> bool:
        return all(row.status == "ok" for row in self.files)

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
            return self._sampled_answer(c)
        if c["new"]:
            text += f"; {c['new']} new file(s) not in the manifest"
        return text

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
        return out

    def to_json(self) -> dict[str, Any]:
        out = {"files": [row.to_json() for row in self.files], "counts": self.counts,
               "quick": self.quick, "answer": self.answer()}
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
    expected = {line.name: Expected(_norm(line.name), line.sha256) for line in lines}
    expected = {_norm(k): v for k, v in expected.items()}
    side = sidecar_path(path)
    if not side.is_file():
        return expected, False
    sizes = {e.rel: e for e in read_jsonl_entries(side)}
    for rel, exp in list(expected.items()):
        extra = sizes.get(rel)
        if extra is not None and extra.sha256 == exp.sha256:
            expected[rel] = Expected(rel, exp.sha256, extra.size, extra.mtime_ns)
    return expected, True


def _norm(name: bytes) -> bytes:
    """Names as sha256sum users write them: ``./a/b`` and ``a/b`` are the same file."""
    while name.startswith(b"./"):
        name = name[2:]
    return name


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
) -> AuditResult:
    """Audit ``dir`` against ``manifest`` (read-only).

    ``sample`` (``"1%"``, ``0.01`` or a count): hash only a sample drawn with ``seed`` from the
    manifest's files that are present with their recorded size; every file is still stat'ed.
    ``use_stored=False`` (s3:// only) downloads every object instead of trusting the store's
    full-object SHA-256.
    """
    from ckptrescue.datasets.s3dataset import audit_s3, is_s3

    if sample is not None and quick:
        raise UsageError("--sample and --quick do not go together (quick reads no content)")
    if is_s3(dir):
        if sample is not None:
            raise UsageError("--sample audits local directories only")
        return audit_s3(str(dir), manifest, quick=quick, jobs=jobs, scheduler=scheduler,
                        progress=progress, endpoint_url=endpoint_url, use_stored=use_stored)
    root = Path(dir)
    if not root.is_dir():
        raise EvidenceError(f"{root}: not a directory")
    started = time.monotonic()
    expected, has_sizes = load_expected(manifest)
    if quick and not has_sizes:
        raise UsageError(f"{manifest}: --quick needs the JSON-lines sidecar "
                         f"({sidecar_path(manifest).name}) that holds sizes and mtimes")
    result = AuditResult(root=str(root), manifest=str(manifest), quick=quick)
    if not has_sizes:
        result.notes.append("no sidecar: sizes unknown, every hash mismatch is called corrupted")
    exclude = [manifest, sidecar_path(manifest), str(manifest) + PARTIAL_SUFFIX]
    listing = walk(root, exclude=exclude)
    present = {f.rel: f for f in listing.files}
    for s in listing.skipped:
        result.notes.append(f"{display(s.rel)}: skipped: {s.reason}")
    rows: list[AuditRow] = []
    to_hash: list[FileEntry] = []
    for rel, exp in expected.items():
        found = present.get(rel)
        if found is None:
            why = "" if safe_relative(rel) else "the name leads outside DIR; never opened"
            rows.append(AuditRow(rel, "missing", exp.sha256, None, reason=why))
        elif sample is not None and exp.size is not None and exp.size != found.size:
            rows.append(AuditRow(rel, "changed", exp.sha256, None,
                                 reason=f"size {exp.size} -> {found.size} (stat)"))
        elif quick:
            rows.append(_quick_row(exp, found))
        else:
            to_hash.append(found)
    new = [f for rel, f in present.items() if rel not in expected]
    if sample is not None:
        # new files are stat'ed, not hashed. The draw is from the manifest's names in order, so
        # a seed draws the same entries from the same manifest whatever happened to the tree;
        # drawn entries already missing or changed by the stat are reported as such and are not
        # part of the sample (the bound is about the files still present with their size)
        rows += [AuditRow(f.rel, "new", None, None) for f in new]
        names = sorted(expected)
        drawn_names = set(draw(names, sample_size(len(names), sample), seed))
        population = len(to_hash)
        to_hash = [f for f in to_hash if f.rel in drawn_names]
        result.sample = SampleStats(seed=seed, size=len(to_hash), population=population, bad=0)
        new = []
    if quick:
        rows += [AuditRow(f.rel, "new", None, None) for f in new]
    else:
        to_hash += new
        tracker = Tracker(len(to_hash), sum(f.size for f in to_hash), progress)
        for item in hash_many(os.fsencode(root), to_hash, jobs=jobs or default_jobs(),
                              scheduler=scheduler, tracker=tracker, formats=False):
            rows.append(_full_row(expected.get(item.rel), item))
        tracker.finish()
    if result.sample is not None:
        drawn = {f.rel for f in to_hash}
        bad = [r for r in rows if r.rel in drawn and r.status in ("corrupted", "unreadable")]
        result.sample = SampleStats(seed=seed, size=len(drawn),
                                    population=result.sample.population, bad=len(bad),
                                    unreadable=sum(r.status == "unreadable" for r in bad))
    result.files = sorted(rows, key=lambda r: r.rel)
    result.elapsed_s = time.monotonic() - started
    result.record("manifest.audit", {"root": result.root, "manifest": result.manifest,
                                     "quick": quick, "counts": result.counts,
                                     "answer": result.answer(),
                                     **({"sample": result.sample.to_json()}
                                        if result.sample is not None else {})})
    return result


def _quick_row(exp: Expected, found: FileEntry) -> AuditRow:
    want = f"size={exp.size} mtime_ns={exp.mtime_ns}"
    got = f"size={found.size} mtime_ns={found.mtime_ns}"
    if exp.size != found.size:
        return AuditRow(found.rel, "changed", want, got, reason="size differs")
    if exp.mtime_ns != found.mtime_ns:
        return AuditRow(found.rel, "changed", want, got, reason="same size, mtime differs")
    return AuditRow(found.rel, "ok", want, got)


def _full_row(exp: Expected | None, item: ManifestEntry | UnreadableFile) -> AuditRow:
    if isinstance(item, UnreadableFile):
        return AuditRow(item.rel, "unreadable", exp.sha256 if exp else None, None,
                        offset=item.offset, error=item.error,
                        reason=f"{item.error} at offset {item.offset}")
    if exp is None:
        return AuditRow(item.rel, "new", None, item.sha256)
    if item.sha256 == exp.sha256:
        return AuditRow(item.rel, "ok", exp.sha256, item.sha256)
    if exp.size is not None and exp.size != item.size:
        return AuditRow(item.rel, "changed", exp.sha256, item.sha256,
                        reason=f"size {exp.size} -> {item.size}")
    return AuditRow(item.rel, "corrupted", exp.sha256, item.sha256,
                    reason="same size, different SHA-256" if exp.size is not None
                    else "different SHA-256")
