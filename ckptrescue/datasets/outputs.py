"""The dataset wing's step outputs: manifests (build, audit, update, diff), dataset verify,
recover, the hub cache, training state, profiles and comparisons, quarantine, the gate and
watch passes (``docs/step-outputs.md`` is generated from them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ckptrescue.model import JsonObject, StepOutputs, answer_field, doc


@dataclass
class ManifestBuildOutput(StepOutputs):
    root: str = field(default="", metadata=doc("The dataset directory or s3:// prefix."))
    manifest: str = field(default="", metadata=doc("The manifest written."))
    sidecar: str = field(default="", metadata=doc("Its JSON-lines sidecar."))
    files: int = field(default=0, metadata=doc("Files hashed."))
    bytes: int = field(default=0, metadata=doc("Bytes of those files."))
    bytes_hashed: int = field(default=0, metadata=doc("Bytes hashed by this run (not resumed)."))
    resumed: int = field(default=0, metadata=doc("Files taken over from an interrupted build."))
    elapsed_s: float = field(default=0.0, metadata=doc("Seconds."))
    jobs: int | None = field(default=None, metadata=doc("Parallel jobs."))
    scheduler: str | None = field(default=None, metadata=doc("Dask scheduler address."))
    formats: dict[str, int] = field(default_factory=dict, metadata=doc(
        "Files per detected format."))
    unreadable: list[JsonObject] = field(default_factory=list, metadata=doc(
        "Unreadable files: path, error, offset."))
    skipped: list[JsonObject] = field(default_factory=list, metadata=doc(
        "Entries skipped: path, reason."))
    changed_while_hashed: list[JsonObject] = field(default_factory=list, metadata=doc(
        "Files that changed while they were hashed and were hashed again: path, times."))
    answer: str = answer_field()
    allow_unverified: bool = field(default=False, metadata=doc(
        "Skipped entries (not in the manifest) were accepted."))

    @property
    def ok(self) -> bool:
        return not self.unreadable and (not self.skipped or self.allow_unverified)


@dataclass
class ManifestAuditOutput(StepOutputs):
    json_keys = ("files", "counts", "quick", "sample", "answer", "bytes_downloaded", "state",
                 "resumed", "files_omitted", "skipped", "allow_unverified")
    files: list[JsonObject] = field(default_factory=list, metadata=doc(
        "Per file: path, status, expected, actual (offset when unreadable)."))
    counts: dict[str, int] = field(default_factory=dict, metadata=doc("Files per status."))
    quick: bool = field(default=False, metadata=doc("Size and mtime only."))
    answer: str = answer_field()
    sample: JsonObject | None = field(default=None, metadata=doc(
        "A sampled audit (--sample) only: seed, size, population, bad, upper_bound_95 (exact "
        "one-sided Clopper-Pearson), statement."))
    bytes_downloaded: int | None = field(default=None, metadata=doc(
        "s3:// audits only: bytes read from the store (0 when every object was checked against "
        "its stored full-object SHA-256)."))
    state: str | None = field(default=None, metadata=doc(
        "The audit state database (SQLite) holding every row; rerunning the same audit resumes "
        "from it."))
    resumed: int = field(default=0, metadata=doc(
        "Files whose result was taken from an interrupted earlier run of the same audit."))
    files_omitted: int = field(default=0, metadata=doc(
        "ok rows left out of `files` (large audits list damaged and new files only; every row "
        "is in `state`)."))
    reasons: dict[str, str] = field(default_factory=dict, metadata=doc(
        "Why, per path, where the audit says (not in --json)."))
    notes: list[str] = field(default_factory=list, metadata=doc("Notes (not in --json)."))
    skipped: int = field(default=0, metadata=doc(
        "Entries skipped while walking (unlistable directories, special files, unstattable "
        "files): not checked, unverified."))
    allow_unverified: bool = field(default=False, metadata=doc(
        "Skipped entries were accepted (else they fail the audit)."))

    @property
    def ok(self) -> bool:
        bad = ("corrupted", "changed", "missing", "unreadable", "new")
        if self.skipped and not self.allow_unverified:
            return False
        if self.counts:
            return not any(self.counts.get(s) for s in bad)
        return all(row.get("status") == "ok" for row in self.files)


@dataclass
class ManifestDiffOutput(StepOutputs):
    old: str = field(default="", metadata=doc("The OLD manifest."))
    new: str = field(default="", metadata=doc("The NEW manifest."))
    output: str | None = field(default=None, metadata=doc(
        "With -o: the sha256sum manifest of NEW's added, changed and renamed entries."))
    changes_file: str | None = field(default=None, metadata=doc(
        "With -o: OUT.changes.jsonl, every change (status, path, sha256, old_path, "
        "old_sha256), removed entries included."))
    counts: dict[str, int] = field(default_factory=dict, metadata=doc(
        "added, removed, changed, renamed, unchanged."))
    entries: dict[str, int] = field(default_factory=dict, metadata=doc(
        "Distinct names per manifest (old, new)."))
    changes: list[JsonObject] = field(default_factory=list, metadata=doc(
        "The first 1,000 changes in name order: status, path, sha256, old_path (renamed), "
        "old_sha256."))
    changes_omitted: int = field(default=0, metadata=doc(
        "Changes not listed in `changes` (all are in the changes file)."))
    bad_lines: list[JsonObject] = field(default_factory=list, metadata=doc(
        "Lines not in sha256sum format (up to 20 per manifest): manifest, line, reason."))
    duplicates: list[JsonObject] = field(default_factory=list, metadata=doc(
        "Names listed twice with different hashes: manifest, path, hashes."))
    answer: str = answer_field()

    @property
    def differs(self) -> bool:
        return any(self.counts.get(s) for s in ("added", "removed", "changed", "renamed"))


@dataclass
class HubCacheOutput(StepOutputs):
    root: str = field(default="", metadata=doc("The hub cache directory verified."))
    counts: dict[str, int] = field(default_factory=dict, metadata=doc(
        "repos, revisions, blobs, blobs_ok, blobs_bad, incomplete, links_ok, links_bad, "
        "broken_revisions."))
    repos: list[JsonObject] = field(default_factory=list, metadata=doc(
        "Per repository: folder, repo_type, repo_id, refs, revisions, blobs (those not ok: "
        "name, size, kind, status, actual, error, linked_from), blobs_total, blobs_ok, bytes, "
        "links (those not ok: revision, path, status, blob, detail), links_ok, "
        "broken_revisions (revision -> what breaks it), problems."))
    problems: list[str] = field(default_factory=list, metadata=doc(
        "Entries of the cache root that are not repositories."))
    bytes_hashed: int = field(default=0, metadata=doc("Bytes read and hashed."))
    answer: str = answer_field()

    @property
    def ok(self) -> bool:
        c = self.counts
        return not (c.get("blobs_bad") or c.get("links_bad") or c.get("incomplete")
                    or self.problems or any(r.get("problems") for r in self.repos))


@dataclass
class DatasetVerifyOutput(StepOutputs):
    files: list[JsonObject] = field(default_factory=list, metadata=doc(
        "Per file: path, format, status, bad_records (index, offset, key, problem), records, "
        "note."))
    counts: dict[str, int] = field(default_factory=dict, metadata=doc("Files per status."))
    answer: str = answer_field()

    @property
    def ok(self) -> bool:
        return not any(f.get("status") in ("damaged", "unreadable") or (
            f.get("status") == "unchecked" and f.get("format") != "other") for f in self.files)


@dataclass
class RecoverOutput(StepOutputs):
    source: str = field(default="", metadata=doc("Snapshots directory or s3:// prefix."))
    to: str = field(default="", metadata=doc("The recovery directory."))
    files: list[JsonObject] = field(default_factory=list, metadata=doc(
        "Per damaged file: path, damage, status, source, sha256, reason, tried."))
    counts: dict[str, int] = field(default_factory=dict, metadata=doc("recovered, unrecoverable."))
    answer: str = answer_field()
    plan: list[JsonObject] = field(default_factory=list, metadata=doc(
        "With --plan: the swap-back plan, one entry per recovered file: path, damage, target "
        "(the damaged file in DIR, or where the missing file belongs), replacement (the verified "
        "copy), source (snapshot or object version), sha256, size, expected_sha256, and command "
        "(the script's line for it); the kit never applies it."))
    plan_file: str | None = field(default=None, metadata=doc(
        "With --plan: the plan written as JSON (and a shell script beside it, for review)."))
    clean_view: str | None = field(default=None, metadata=doc(
        "With --clean-view: a tree of symlinks to verified files only (intact originals and "
        "recovered copies), with its own manifest, for the rerun to train on."))
    plan_script: str | None = field(default=None, metadata=doc(
        "With --plan: the bash script written beside the plan (PLAN.sh), for review; run it as "
        "`bash PLAN.sh [DATASET-ROOT]`."))
    plan_unrecoverable: list[JsonObject] = field(default_factory=list, metadata=doc(
        "With --plan: files with no verified replacement: path, damage, reason."))
    clean_view_manifest: str | None = field(default=None, metadata=doc(
        "With --clean-view: the view's manifest VIEW.sha256 (sidecar VIEW.sha256.jsonl)."))
    clean_view_files: int = field(default=0, metadata=doc(
        "With --clean-view: files linked in the view."))
    clean_view_left_out: list[JsonObject] = field(default_factory=list, metadata=doc(
        "With --clean-view: files neither ok nor recovered, left out: path, reason."))

    @property
    def ok(self) -> bool:
        return not any(f.get("status") != "recovered" for f in self.files)


@dataclass
class TrainStateOutput(StepOutputs):
    checkpoints: list[JsonObject] = field(default_factory=list, metadata=doc(
        "The run's checkpoints in training order: path, step, format, verdict."))
    tensors: list[JsonObject] = field(default_factory=list, metadata=doc(
        "Per tensor: name, intervals (from, to, rel_l2, max_abs_change, identical, elements, "
        "nonfinite), sign_agreement, norms, frozen."))
    scalars: dict[str, list[Any]] = field(default_factory=dict, metadata=doc(
        "Per checkpoint: optimizer step counters, learning rates, scheduler last_epoch, "
        "global step."))
    skipped: dict[str, str] = field(default_factory=dict, metadata=doc(
        "Tensors not compared, with the reason."))
    findings: list[JsonObject] = field(default_factory=list, metadata=doc(
        "TS001-TS008 findings (also recorded in the case)."))
    answer: str = answer_field()


@dataclass
class DatasetProfileOutput(StepOutputs):
    profile: JsonObject = field(default_factory=dict, metadata=doc(
        "The dataset profile (schema ckptrescue.profile/1, docs/profiles.md)."))
    output: str | None = field(default=None, metadata=doc("Where the profile was written."))
    answer: str = answer_field()


@dataclass
class DatasetCompareOutput(StepOutputs):
    compare: JsonObject = field(default_factory=dict, metadata=doc(
        "mode, thresholds, per_test_level, tests_run, answer, flagged checks (test, "
        "statistic, p-value, effect sizes, threshold), findings, skipped."))
    spot_checks: list[JsonObject] = field(default_factory=list, metadata=doc(
        "Per flagged shard (up to 5): seed, k, method, the sampled records of the flagged and "
        "the reference shard with the values that drove the flag marked."))
    answer: str = answer_field()

    @property
    def ok(self) -> bool:
        return not self.compare.get("flagged")


@dataclass
class QuarantineOutput(StepOutputs):
    quarantine: JsonObject = field(default_factory=dict, metadata=doc(
        "The quarantine list (schema ckptrescue.datasets.quarantine/1): files, records, sources."))
    output: str | None = field(default=None, metadata=doc("The JSON list written."))
    path_list: str | None = field(default=None, metadata=doc(
        "The plain list of whole bad files written."))
    answer: str = answer_field()


@dataclass
class GateOutput(StepOutputs):
    target: str = field(default="", metadata=doc("The dataset directory or checkpoint gated."))
    passed: bool = field(default=False, metadata=doc("True when the job may start."))
    reason: str = field(default="", metadata=doc("The one-line reason."))
    checked: int = field(default=0, metadata=doc("Files (or checkpoints) checked."))
    hashed: list[str] = field(default_factory=list, metadata=doc(
        "The sampled files hashed in full."))
    hashed_bytes: int = field(default=0, metadata=doc("Bytes hashed."))
    seed: int | None = field(default=None, metadata=doc("The sample's seed (redraw with it)."))
    problems: list[JsonObject] = field(default_factory=list, metadata=doc(
        "Per problem: path, problem (and the worst finding for a checkpoint)."))
    unverified: list[str] = field(default_factory=list, metadata=doc(
        "Files under the target the manifest does not list (the first 100)."))
    unverified_count: int = field(default=0, metadata=doc(
        "How many such files: they fail the gate unless allow_unverified."))
    allow_unverified: bool = field(default=False, metadata=doc(
        "Files not in the manifest were accepted."))


@dataclass
class WatchPassOutput(StepOutputs):
    source: str = field(default="", metadata=doc("The watched directory or s3:// prefix."))
    full: bool = field(default=False, metadata=doc("A full pass (else only inotify's paths)."))
    files_total: int = field(default=0, metadata=doc("Files in the source."))
    checked: int = field(default=0, metadata=doc("Files checked (new or changed)."))
    new: int = field(default=0, metadata=doc("New files."))
    changed: int = field(default=0, metadata=doc("Changed files."))
    missing: int = field(default=0, metadata=doc("Files gone since the last pass."))
    bytes_read: int = field(default=0, metadata=doc("Bytes read."))
    elapsed_s: float = field(default=0.0, metadata=doc("Wall time of the pass."))
    bad: list[JsonObject] = field(default_factory=list, metadata=doc(
        "Per bad file: path, code (WA001-WA005), problem."))
    bad_total: int = field(default=0, metadata=doc("Files bad or gone in the whole state."))
    notes: list[str] = field(default_factory=list, metadata=doc(
        "Alerts that could not be delivered."))
    answer: str = answer_field()


@dataclass
class ManifestUpdateOutput(StepOutputs):
    root: str = field(default="", metadata=doc("The dataset directory."))
    manifest: str = field(default="", metadata=doc("The manifest rewritten."))
    sidecar: str = field(default="", metadata=doc("Its JSON-lines sidecar."))
    previous: str = field(default="", metadata=doc(
        "Where the old manifest was kept (MANIFEST.prev, its sidecar MANIFEST.prev.jsonl)."))
    files: int = field(default=0, metadata=doc("Files in the updated manifest."))
    hashed: int = field(default=0, metadata=doc("Files hashed (new or changed)."))
    reused: int = field(default=0, metadata=doc("Entries reused (size, mtime, inode unchanged)."))
    bytes_hashed: int = field(default=0, metadata=doc("Bytes hashed."))
    new: list[str] = field(default_factory=list, metadata=doc("Files not in the old manifest."))
    changed: list[str] = field(default_factory=list, metadata=doc(
        "Files whose size, mtime or inode changed (re-hashed)."))
    deleted: list[str] = field(default_factory=list, metadata=doc(
        "Entries dropped: their files are gone."))
    unreadable: list[JsonObject] = field(default_factory=list, metadata=doc(
        "Unreadable files (left out): path, error, offset."))
    skipped: list[JsonObject] = field(default_factory=list, metadata=doc(
        "Entries skipped: path, reason."))
    inode_checked: bool = field(default=True, metadata=doc(
        "False when the old sidecar recorded no inodes (size and mtime compared only)."))
    elapsed_s: float = field(default=0.0, metadata=doc("Seconds."))
    answer: str = answer_field()

    @property
    def ok(self) -> bool:
        return not self.unreadable
