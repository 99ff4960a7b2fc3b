"""The records of the manifest and dataset-verify actions (``datasets/actions/manifests.py``):
manifest build, audit, update and diff, dataset verify."""

from __future__ import annotations

from dataclasses import dataclass

from ckptrescue.model import JsonObject, StepOutputs, answer_field, doc_field


@dataclass
class ManifestBuildOutput(StepOutputs):
    """What the ``manifest.build`` step records (each field: docs/step-outputs.md)."""

    root: str = doc_field("", "The dataset directory or s3:// prefix.")
    manifest: str = doc_field("", "The manifest written.")
    sidecar: str = doc_field("", "Its JSON-lines sidecar.")
    files: int = doc_field(0, "Files hashed.")
    bytes: int = doc_field(0, "Bytes of those files.")
    bytes_hashed: int = doc_field(0, "Bytes hashed by this run (not resumed).")
    resumed: int = doc_field(0, "Files taken over from an interrupted build.")
    elapsed_s: float = doc_field(0.0, "Seconds.")
    jobs: int | None = doc_field(None, "Parallel jobs.")
    scheduler: str | None = doc_field(None, "Dask scheduler address.")
    formats: dict[str, int] = doc_field({}, "Files per detected format.")
    unreadable: list[JsonObject] = doc_field([], "Unreadable files: path, error, offset.")
    skipped: list[JsonObject] = doc_field([], "Entries skipped: path, reason.")
    changed_while_hashed: list[JsonObject] = doc_field([],
        "Files that changed while they were hashed and were hashed again: path, times.")
    answer: str = answer_field()
    allow_unverified: bool = doc_field(False, "Skipped entries (not in the manifest) were accepted.")

    @property
    def ok(self) -> bool:
        return not self.unreadable and (not self.skipped or self.allow_unverified)


@dataclass
class ManifestAuditOutput(StepOutputs):
    """What the ``manifest.audit`` step records (each field: docs/step-outputs.md)."""

    json_keys = ("files", "counts", "quick", "sample", "answer", "bytes_downloaded", "state",
                 "resumed", "files_omitted", "skipped", "allow_unverified")
    files: list[JsonObject] = doc_field([],
        "Per file: path, status, expected, actual (offset when unreadable).")
    counts: dict[str, int] = doc_field({}, "Files per status.")
    quick: bool = doc_field(False, "Size and mtime only.")
    answer: str = answer_field()
    sample: JsonObject | None = doc_field(None,
        "A sampled audit (--sample) only: seed, size, population, bad, upper_bound_95 (exact "
        "one-sided Clopper-Pearson), statement.")
    bytes_downloaded: int | None = doc_field(None,
        "s3:// audits only: bytes read from the store (0 when every object was checked against "
        "its stored full-object SHA-256).")
    state: str | None = doc_field(None,
        "The audit state database (SQLite) holding every row; rerunning the same audit resumes "
        "from it.")
    resumed: int = doc_field(0,
        "Files whose result was taken from an interrupted earlier run of the same audit.")
    files_omitted: int = doc_field(0,
        "ok rows left out of `files` (large audits list damaged and new files only; every row "
        "is in `state`).")
    reasons: dict[str, str] = doc_field({}, "Why, per path, where the audit says (not in --json).")
    notes: list[str] = doc_field([], "Notes (not in --json).")
    skipped: int = doc_field(0,
        "Entries skipped while walking (unlistable directories, special files, unstattable "
        "files): not checked, unverified.")
    allow_unverified: bool = doc_field(False, "Skipped entries were accepted (else they fail the audit).")

    @property
    def ok(self) -> bool:
        bad = ("corrupted", "changed", "missing", "unreadable", "new")
        if self.skipped and not self.allow_unverified:
            return False
        if self.counts:
            return not any(self.counts.get(s) for s in bad)
        return all(row.get("status") == "ok" for row in self.files)


@dataclass
class ManifestUpdateOutput(StepOutputs):
    """What the ``manifest.update`` step records (each field: docs/step-outputs.md)."""

    root: str = doc_field("", "The dataset directory.")
    manifest: str = doc_field("", "The manifest rewritten.")
    sidecar: str = doc_field("", "Its JSON-lines sidecar.")
    previous: str = doc_field("",
        "Where the old manifest was kept (MANIFEST.prev, its sidecar MANIFEST.prev.jsonl).")
    files: int = doc_field(0, "Files in the updated manifest.")
    hashed: int = doc_field(0, "Files hashed (new or changed).")
    reused: int = doc_field(0, "Entries reused (size, mtime, inode unchanged).")
    bytes_hashed: int = doc_field(0, "Bytes hashed.")
    new: list[str] = doc_field([], "Files not in the old manifest.")
    changed: list[str] = doc_field([], "Files whose size, mtime or inode changed (re-hashed).")
    deleted: list[str] = doc_field([], "Entries dropped: their files are gone.")
    unreadable: list[JsonObject] = doc_field([], "Unreadable files (left out): path, error, offset.")
    skipped: list[JsonObject] = doc_field([], "Entries skipped: path, reason.")
    inode_checked: bool = doc_field(True,
        "False when the old sidecar recorded no inodes (size and mtime compared only).")
    elapsed_s: float = doc_field(0.0, "Seconds.")
    answer: str = answer_field()

    @property
    def ok(self) -> bool:
        return not self.unreadable


@dataclass
class ManifestDiffOutput(StepOutputs):
    """What the ``manifest.diff`` step records (each field: docs/step-outputs.md)."""

    old: str = doc_field("", "The OLD manifest.")
    new: str = doc_field("", "The NEW manifest.")
    output: str | None = doc_field(None,
        "With -o: the sha256sum manifest of NEW's added, changed and renamed entries.")
    changes_file: str | None = doc_field(None,
        "With -o: OUT.changes.jsonl, every change (status, path, sha256, old_path, "
        "old_sha256), removed entries included.")
    counts: dict[str, int] = doc_field({}, "added, removed, changed, renamed, unchanged.")
    entries: dict[str, int] = doc_field({}, "Distinct names per manifest (old, new).")
    changes: list[JsonObject] = doc_field([],
        "The first 1,000 changes in name order: status, path, sha256, old_path (renamed), "
        "old_sha256.")
    changes_omitted: int = doc_field(0, "Changes not listed in `changes` (all are in the changes file).")
    bad_lines: list[JsonObject] = doc_field([],
        "Lines not in sha256sum format (up to 20 per manifest): manifest, line, reason.")
    duplicates: list[JsonObject] = doc_field([],
        "Names listed twice with different hashes: manifest, path, hashes.")
    answer: str = answer_field()

    @property
    def differs(self) -> bool:
        return any(self.counts.get(s) for s in ("added", "removed", "changed", "renamed"))


@dataclass
class DatasetVerifyOutput(StepOutputs):
    """What the ``dataset.verify`` step records (each field: docs/step-outputs.md)."""

    files: list[JsonObject] = doc_field([],
        "Per file: path, format, status, bad_records (index, offset, key, problem), records, "
        "note.")
    counts: dict[str, int] = doc_field({}, "Files per status.")
    answer: str = answer_field()

    @property
    def ok(self) -> bool:
        return not any(f.get("status") in ("damaged", "unreadable") or (
            f.get("status") == "unchecked" and f.get("format") != "other") for f in self.files)
