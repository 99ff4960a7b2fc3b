"""The dataset wing's step outputs: manifests (build, audit, update, diff), dataset verify,
recover, the hub cache, training state, profiles and comparisons, quarantine, the gate and
watch passes (``docs/step-outputs.md`` is generated from them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
class HubCacheOutput(StepOutputs):
    """What the ``hub.verify`` step records (each field: docs/step-outputs.md)."""

    root: str = doc_field("", "The hub cache directory verified.")
    counts: dict[str, int] = doc_field({},
        "repos, revisions, blobs, blobs_ok, blobs_bad, incomplete, links_ok, links_bad, "
        "broken_revisions.")
    repos: list[JsonObject] = doc_field([],
        "Per repository: folder, repo_type, repo_id, refs, revisions, blobs (those not ok: "
        "name, size, kind, status, actual, error, linked_from), blobs_total, blobs_ok, bytes, "
        "links (those not ok: revision, path, status, blob, detail), links_ok, "
        "broken_revisions (revision -> what breaks it), problems.")
    problems: list[str] = doc_field([], "Entries of the cache root that are not repositories.")
    bytes_hashed: int = doc_field(0, "Bytes read and hashed.")
    answer: str = answer_field()

    @property
    def ok(self) -> bool:
        c = self.counts
        return not (c.get("blobs_bad") or c.get("links_bad") or c.get("incomplete")
                    or self.problems or any(r.get("problems") for r in self.repos))


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


@dataclass
class RecoverOutput(StepOutputs):
    """What the ``recover`` step records (each field: docs/step-outputs.md)."""

    source: str = doc_field("", "Snapshots directory or s3:// prefix.")
    to: str = doc_field("", "The recovery directory.")
    files: list[JsonObject] = doc_field([],
        "Per damaged file: path, damage, status, source, sha256, reason, tried.")
    counts: dict[str, int] = doc_field({}, "recovered, unrecoverable.")
    answer: str = answer_field()
    plan: list[JsonObject] = doc_field([],
        "With --plan: the swap-back plan, one entry per recovered file: path, damage, target "
        "(the damaged file in DIR, or where the missing file belongs), replacement (the verified "
        "copy), source (snapshot or object version), sha256, size, expected_sha256, and command "
        "(the script's line for it); the kit never applies it.")
    plan_file: str | None = doc_field(None,
        "With --plan: the plan written as JSON (and a shell script beside it, for review).")
    clean_view: str | None = doc_field(None,
        "With --clean-view: a tree of symlinks to verified files only (intact originals and "
        "recovered copies), with its own manifest, for the rerun to train on.")
    plan_script: str | None = doc_field(None,
        "With --plan: the bash script written beside the plan (PLAN.sh), for review; run it as "
        "`bash PLAN.sh [DATASET-ROOT]`.")
    plan_unrecoverable: list[JsonObject] = doc_field([],
        "With --plan: files with no verified replacement: path, damage, reason.")
    clean_view_manifest: str | None = doc_field(None,
        "With --clean-view: the view's manifest VIEW.sha256 (sidecar VIEW.sha256.jsonl).")
    clean_view_files: int = doc_field(0, "With --clean-view: files linked in the view.")
    clean_view_left_out: list[JsonObject] = doc_field([],
        "With --clean-view: files neither ok nor recovered, left out: path, reason.")

    @property
    def ok(self) -> bool:
        return not any(f.get("status") != "recovered" for f in self.files)


@dataclass
class TrainStateOutput(StepOutputs):
    """What the ``trainstate`` step records (each field: docs/step-outputs.md)."""

    checkpoints: list[JsonObject] = doc_field([],
        "The run's checkpoints in training order: path, step, format, verdict.")
    tensors: list[JsonObject] = doc_field([],
        "Per tensor: name, intervals (from, to, rel_l2, max_abs_change, identical, elements, "
        "nonfinite), sign_agreement, norms, frozen.")
    scalars: dict[str, list[Any]] = doc_field({},
        "Per checkpoint: optimizer step counters, learning rates, scheduler last_epoch, "
        "global step.")
    skipped: dict[str, str] = doc_field({}, "Tensors not compared, with the reason.")
    findings: list[JsonObject] = doc_field([], "TS001-TS008 findings (also recorded in the case).")
    answer: str = answer_field()


@dataclass
class DatasetProfileOutput(StepOutputs):
    """What the ``dataset.profile`` step records (each field: docs/step-outputs.md)."""

    profile: JsonObject = doc_field({},
        "The dataset profile (schema ckptrescue.profile/1, docs/profiles.md).")
    output: str | None = doc_field(None, "Where the profile was written.")
    answer: str = answer_field()


@dataclass
class DatasetCompareOutput(StepOutputs):
    """What the ``dataset.compare`` step records (each field: docs/step-outputs.md)."""

    compare: JsonObject = doc_field({},
        "mode, thresholds, per_test_level, tests_run, answer, flagged checks (test, "
        "statistic, p-value, effect sizes, threshold), findings, skipped.")
    spot_checks: list[JsonObject] = doc_field([],
        "Per flagged shard (up to 5): seed, k, method, the sampled records of the flagged and "
        "the reference shard with the values that drove the flag marked.")
    answer: str = answer_field()

    @property
    def ok(self) -> bool:
        return not self.compare.get("flagged")


@dataclass
class QuarantineOutput(StepOutputs):
    """What the ``dataset.quarantine`` step records (each field: docs/step-outputs.md)."""

    quarantine: JsonObject = doc_field({},
        "The quarantine list (schema ckptrescue.datasets.quarantine/1): files, records, sources.")
    output: str | None = doc_field(None, "The JSON list written.")
    path_list: str | None = doc_field(None, "The plain list of whole bad files written.")
    answer: str = answer_field()


@dataclass
class GateOutput(StepOutputs):
    """What the ``gate`` step records (each field: docs/step-outputs.md)."""

    target: str = doc_field("", "The dataset directory or checkpoint gated.")
    passed: bool = doc_field(False, "True when the job may start.")
    reason: str = doc_field("", "The one-line reason.")
    checked: int = doc_field(0, "Files (or checkpoints) checked.")
    hashed: list[str] = doc_field([], "The sampled files hashed in full.")
    hashed_bytes: int = doc_field(0, "Bytes hashed.")
    seed: int | None = doc_field(None, "The sample's seed (redraw with it).")
    problems: list[JsonObject] = doc_field([],
        "Per problem: path, problem (and the worst finding for a checkpoint).")
    unverified: list[str] = doc_field([],
        "Files under the target the manifest does not list (the first 100).")
    unverified_count: int = doc_field(0, "How many such files: they fail the gate unless allow_unverified.")
    allow_unverified: bool = doc_field(False, "Files not in the manifest were accepted.")


@dataclass
class WatchPassOutput(StepOutputs):
    """What the ``watch.pass`` step records (each field: docs/step-outputs.md)."""

    source: str = doc_field("", "The watched directory or s3:// prefix.")
    full: bool = doc_field(False, "A full pass (else only inotify's paths).")
    files_total: int = doc_field(0, "Files in the source.")
    checked: int = doc_field(0, "Files checked (new or changed).")
    new: int = doc_field(0, "New files.")
    changed: int = doc_field(0, "Changed files.")
    missing: int = doc_field(0, "Files gone since the last pass.")
    bytes_read: int = doc_field(0, "Bytes read.")
    elapsed_s: float = doc_field(0.0, "Wall time of the pass.")
    bad: list[JsonObject] = doc_field([], "Per bad file: path, code (WA001-WA005), problem.")
    bad_total: int = doc_field(0, "Files bad or gone in the whole state.")
    notes: list[str] = doc_field([], "Alerts that could not be delivered.")
    answer: str = answer_field()


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
