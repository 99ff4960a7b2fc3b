"""Typed step outputs: one record type per action, read by type, never by action-name strings.

A step's outputs are stored as a JSON artifact (``engine.run``); each action names its record
type (``Action.output_type``), and readers — the CLI's renderers, ``answer.py``, the report,
the TUI — turn the stored JSON back into that type with ``from_json``. Keys a record does not
declare are kept in ``extra`` so that ``to_json`` gives the stored JSON back unchanged, and a
record from an older case (a key missing) loads with the field's default.

``json_keys``, when set, is the documented ``--json`` shape of the command: the keys the CLI
prints. A step may record more than that (e.g. ``locate`` keeps its notes and the ranges it
could not map, which the human output shows and ``--json`` never did).

``docs/step-outputs.md`` is generated from these classes by ``docs/generate.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ckptrescue.model import StepOutputs, doc

# ---- the foundation --------------------------------------------------------------------------

@dataclass
class ConfirmOutput(StepOutputs):
    confirmed: bool = field(default=False, metadata=doc("The responder confirmed the gate."))


@dataclass
class ExecOutput(StepOutputs):
    returncode: int | None = field(default=None, metadata=doc("The tool's exit status."))
    stdout_sha256: str | None = field(default=None, metadata=doc("SHA-256 of the stdout artifact."))
    stderr_sha256: str | None = field(default=None, metadata=doc("SHA-256 of the stderr artifact."))
    stdout: str = field(default="", metadata=doc("The first 64 KiB of stdout (text)."))


@dataclass
class CollectLogsOutput(StepOutputs):
    logs: dict[str, Any] = field(default_factory=dict, metadata=doc(
        "Per tool run (dmesg, journalctl, sacct, scontrol, kubectl): argv, returncode, sha256 "
        "of the captured artifact, bytes."))
    files: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Per log file kept: path, kind (log:NAME or cloudtrail), size, offset, read, "
        "truncated, sha256, error."))


@dataclass
class CaseVerifyOutput(StepOutputs):
    ok: bool = field(default=False, metadata=doc("The audit chain and every artifact verify."))


@dataclass
class ReportOutput(StepOutputs):
    path: str = field(default="", metadata=doc("Where the report was written."))
    sha256: str = field(default="", metadata=doc(
        "SHA-256 of the report (also stored as an artifact)."))
    format: str = field(default="", metadata=doc("html, md or json."))


@dataclass
class DrillLoadOutput(StepOutputs):
    image: str = field(default="", metadata=doc("The drill's disk image."))
    badsectors_map: str = field(default="", metadata=doc(
        "ddrescue test-mode map of its bad sectors."))
    known_good_manifest: str = field(default="", metadata=doc(
        "Manifest of the drill dataset's good state."))
    endpoint_url: str = field(default="", metadata=doc("Local S3 endpoint ('' without S3)."))
    bucket: str = field(default="", metadata=doc("Its bucket."))
    s3_prefix_url: str = field(default="", metadata=doc(
        "s3://bucket/prefix of the drill's objects."))
    has_s3: bool = field(default=False, metadata=doc("The drill has an S3 part."))
    faults: list[Any] = field(default_factory=list, metadata=doc("The faults the drill planted."))


# ---- checkpoints: the resume checks (actions/resume.py) ----------------------------------------

@dataclass
class SafeGlobalsOutput(StepOutputs):
    paths: list[str] = field(default_factory=list, metadata=doc("The files or directories given."))
    files: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Per torch file: path, format, verdict, globals_total, needed (global, status: safe, "
        "unlisted, dangerous or blocked; lists, source, reason), blockers (what no "
        "registration fixes), loads_with_safe_list, error (not a torch file)."))
    safe: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "The globals safe to register, over every file: global, lists, source."))
    not_safe: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "The globals not to register: global, status, reason."))
    snippet: str = field(default="", metadata=doc(
        "Python registering the safe globals with torch.serialization.add_safe_globals."))
    snippet_lines: list[str] = field(default_factory=list, metadata=doc(
        "The same, one line per item (what the terminal shows)."))
    answer: str = field(default="", metadata=doc("The one-line answer."))

    @property
    def ok(self) -> bool:
        """Every torch file loads with weights_only=True once the safe list is registered."""
        return all(f.get("loads_with_safe_list") for f in self.files if f.get("error") is None)



@dataclass
class KeyMismatchOutput(StepOutputs):
    checkpoint: str = field(default="", metadata=doc("The checkpoint examined."))
    expected_from: str = field(default="", metadata=doc(
        "Where the model's names came from: a reference checkpoint, a key list or a model "
        "class (instantiated in the loader sandbox)."))
    format: str = field(default="", metadata=doc("The checkpoint's format."))
    verdict: str = field(default="", metadata=doc("Its probe verdict."))
    checkpoint_keys: int = field(default=0, metadata=doc("Tensor names in the checkpoint."))
    expected_keys: int = field(default=0, metadata=doc("Names the model expects."))
    matched_before: int = field(default=0, metadata=doc("Expected names found as saved."))
    matched_after: int = field(default=0, metadata=doc(
        "Expected names accounted for after the mapping (ties included)."))
    resolved: bool = field(default=False, metadata=doc(
        "The mapping accounts for every expected name with its shape."))
    causes: list[str] = field(default_factory=list, metadata=doc(
        "The causes found, in order (container, module. from DDP, _orig_mod. from "
        "torch.compile, FSDP names and flat parameters, a renamed layer, tied weights)."))
    rules: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "The rules: kind (container, strip, add, rename, tie, flat), cause, detail, fixes."))
    mapping: list[dict[str, str]] = field(default_factory=list, metadata=doc(
        "Per renamed name (up to 5,000): from (the checkpoint's), to (the model's)."))
    mapping_total: int = field(default=0, metadata=doc("Names the mapping renames."))
    tied: list[dict[str, str]] = field(default_factory=list, metadata=doc(
        "Names saved once: name (the model's), copy_of (the name present)."))
    missing: list[str] = field(default_factory=list, metadata=doc(
        "Expected names still unaccounted for (up to 5,000)."))
    missing_total: int = field(default=0, metadata=doc("Their count."))
    unexpected: list[str] = field(default_factory=list, metadata=doc(
        "Names of the state dict the model does not use (up to 5,000)."))
    unexpected_total: int = field(default=0, metadata=doc("Their count."))
    outside: dict[str, int] = field(default_factory=dict, metadata=doc(
        "Top-level entries of the checkpoint beside the state dict (optimizer, ...), with "
        "their tensor counts."))
    shape_mismatches: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Names that map but whose shape differs: checkpoint, model, saved_shape, "
        "expected_shape."))
    flat_params: list[str] = field(default_factory=list, metadata=doc(
        "FSDP flat parameters (no renaming maps them)."))
    snippet: str = field(default="", metadata=doc(
        "Python (fix_keys) applying the mapping to a loaded state dict."))
    snippet_lines: list[str] = field(default_factory=list, metadata=doc(
        "The same, one line per item (what the terminal shows)."))
    answer: str = field(default="", metadata=doc("The one-line answer."))

    @property
    def ok(self) -> bool:
        return self.matched_before == self.expected_keys and not self.unexpected_total



@dataclass
class ReassemblyOutput(StepOutputs):
    step_dir: str = field(default="", metadata=doc("The step directory examined."))
    family: str = field(default="", metadata=doc("Its multi-rank family."))
    step: int | None = field(default=None, metadata=doc("Its step or iteration."))
    world: dict[str, int] = field(default_factory=dict, metadata=doc(
        "The world sizes the step's metadata (or a verified copy's) records."))
    candidates: list[str] = field(default_factory=list, metadata=doc(
        "The directories looked in (temporary/partial siblings, copies of the run)."))
    ranks: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Per expected rank file: rank, role, relpath, status (present, replaced, missing, "
        "damaged), source, sha256, size, tried (path, outcome)."))
    needed: int = field(default=0, metadata=doc("Rank files missing or damaged in the step."))
    reassemblable: bool = field(default=False, metadata=doc(
        "Every rank file is present or has a verified copy, and the set passes the family's "
        "cross-rank checks."))
    check_problems: list[str] = field(default_factory=list, metadata=doc(
        "What the family's cross-rank checks say of the assembled set."))
    plan_file: str | None = field(default=None, metadata=doc(
        "With --plan: the plan (JSON, schema ckptrescue.reassembly-plan/1)."))
    plan_script: str | None = field(default=None, metadata=doc(
        "With --plan: the script beside it (copies into a new directory, then sha256sum -c)."))
    dest: str | None = field(default=None, metadata=doc(
        "With --plan: the new directory the script builds."))
    answer: str = field(default="", metadata=doc("The one-line answer."))

    @property
    def ok(self) -> bool:
        return not self.needed



@dataclass
class WorldSizeOutput(StepOutputs):
    step_dir: str = field(default="", metadata=doc("The step examined."))
    ranks: int = field(default=0, metadata=doc("The world size asked about."))
    family: str = field(default="", metadata=doc("Its format or multi-rank family."))
    verdict: str = field(default="", metadata=doc("Its probe verdict (only a verified step is "
                                                  "planned for)."))
    step: int | None = field(default=None, metadata=doc("Its step or iteration."))
    saved_world: dict[str, Any] = field(default_factory=dict, metadata=doc(
        "The world sizes the step records (dp, mp, zero_stage; tp, pp; processes)."))
    loads: str = field(default="", metadata=doc(
        "as-saved, reshards, after-conversion, no, not-verified."))
    how: str = field(default="", metadata=doc("Why, in one sentence."))
    commands: list[str] = field(default_factory=list, metadata=doc(
        "The conversion to run (ds_to_universal, Megatron's converter); the kit runs none."))
    files_needed: list[str] = field(default_factory=list, metadata=doc(
        "The step's files the conversion reads."))
    config: dict[str, Any] = field(default_factory=dict, metadata=doc(
        "Configuration the load then needs (DeepSpeed: checkpoint.load_universal)."))
    notes: list[str] = field(default_factory=list, metadata=doc("Notes."))
    answer: str = field(default="", metadata=doc("The one-line answer."))

    @property
    def ok(self) -> bool:
        return self.loads in ("as-saved", "reshards")



@dataclass
class ReplicaOutput(StepOutputs):
    persistent: str = field(default="", metadata=doc("The persistent copy of the step."))
    replicas: list[str] = field(default_factory=list, metadata=doc(
        "The replica directories compared (node-local copies, copies fetched from peers)."))
    files: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Per rank file a replica holds: relpath, persistent (path, verdict, tensors, status), "
        "replicas (where, path, verdict, tensors, status: same, differs, damaged, unreadable; "
        "differing tensors, only_here, only_persistent), resume_from, decision."))
    counts: dict[str, int] = field(default_factory=dict, metadata=doc(
        "Replica files per status."))
    replica_only: list[str] = field(default_factory=list, metadata=doc(
        "Files a replica holds that the persistent copy does not."))
    answer: str = field(default="", metadata=doc("The one-line answer."))

    @property
    def ok(self) -> bool:
        return not any(k != "same" and v for k, v in self.counts.items()) and all(
            (f.get("persistent") or {}).get("status") == "intact" for f in self.files)


# ---- block storage ---------------------------------------------------------------------------

@dataclass
class TriageOutput(StepOutputs):
    volume: str | None = field(default=None, metadata=doc(
        "The volume examined (None: every volume)."))
    seconds: float = field(default=0.0, metadata=doc("The write-rate window."))
    processes: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Processes of interest: pid, kind, cmdline, open_for_write, write_rate_bps, ..."))
    writers: list[int] = field(default_factory=list, metadata=doc(
        "Pids with files open for writing."))
    kernel_messages: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Kernel-log lines of interest: kind, line."))
    checklist: list[str] = field(default_factory=list, metadata=doc("The freeze checklist."))
    findings: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "The findings (JSON)."))
    notes: list[str] = field(default_factory=list, metadata=doc(
        "Notes on what could not be examined."))


@dataclass
class ImageOutput(StepOutputs):
    image: str = field(default="", metadata=doc("The image file."))
    mapfile: str = field(default="", metadata=doc("The ddrescue mapfile."))
    image_sha256: str = field(default="", metadata=doc("SHA-256 of the image."))
    size: int = field(default=0, metadata=doc("Size of the source in bytes."))
    rescued_bytes: int = field(default=0, metadata=doc("Bytes read (the mapfile's '+' areas)."))
    bad_ranges: list[list[int]] = field(default_factory=list, metadata=doc(
        "Unreadable [start, end) byte ranges."))

    @property
    def finished(self) -> bool:
        """Every byte of the source was read."""
        return bool(self.size) and self.rescued_bytes == self.size and not self.bad_ranges


@dataclass
class CopyOutput(StepOutputs):
    source: str = field(default="", metadata=doc("The mounted filesystem copied."))
    dest: str = field(default="", metadata=doc("The destination directory."))
    files: int = field(default=0, metadata=doc("Files copied."))
    bytes: int = field(default=0, metadata=doc("Bytes copied."))
    manifest_sha256: str = field(default="", metadata=doc("SHA-256 of the manifest artifact."))
    verified: bool = field(default=False, metadata=doc(
        "The rsync -c -n verify pass found no difference."))
    differences: list[Any] = field(default_factory=list, metadata=doc(
        "What the verify pass found different."))
    unreadable: list[Any] = field(default_factory=list, metadata=doc(
        "Files that could not be read."))
    source_readonly: bool | None = field(default=None, metadata=doc(
        "The source was mounted read-only."))
    findings: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "The findings (JSON)."))


@dataclass
class FsInspectOutput(StepOutputs):
    target: str = field(default="", metadata=doc("The device or image inspected."))
    device: str | None = field(default=None, metadata=doc(
        "The node inspected (a partition, an LV, ...)."))
    fstype: str | None = field(default=None, metadata=doc("blkid TYPE of the filesystem."))
    facts: dict[str, Any] = field(default_factory=dict, metadata=doc(
        "Filesystem facts (superblock, log state, ...)."))
    health: dict[str, Any] = field(default_factory=dict, metadata=doc("SMART/NVMe health."))
    findings: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "The findings (JSON)."))
    notes: list[str] = field(default_factory=list, metadata=doc("Notes."))


@dataclass
class MountOutput(StepOutputs):
    mountpoint: str = field(default="", metadata=doc("Where it is mounted."))
    device: str = field(default="", metadata=doc(
        "The node mounted (a partition when the image is partitioned)."))
    fstype: str = field(default="", metadata=doc("The filesystem type."))
    options: str = field(default="", metadata=doc("The mount options."))
    target: str = field(default="", metadata=doc("The image or device given."))
    loop_device: str | None = field(default=None, metadata=doc(
        "The read-only loop device attached."))
    datasets: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "ZFS datasets: dataset, mounted, mountpoint, reason."))
    findings: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "The findings (JSON)."))


@dataclass
class UmountOutput(StepOutputs):
    loop_device: str | None = field(default=None, metadata=doc("The loop device detached."))


@dataclass
class LocateOutput(StepOutputs):
    json_keys = ("ranges",)
    ranges: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Unreadable ranges: start, end, files (path, file_offset, length, tensors)."))
    unmapped: list[list[Any]] = field(default_factory=list, metadata=doc(
        "[start, end, why] of device ranges that could not be mapped (not in --json)."))
    notes: list[str] = field(default_factory=list, metadata=doc("Notes (not in --json)."))


@dataclass
class ExtractOutput(StepOutputs):
    mountpoint: str = field(default="", metadata=doc("The read-only mount."))
    to: str = field(default="", metadata=doc("The recovery directory."))
    extracted: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Copied checkpoints: checkpoint, format, files."))
    left_behind: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Checkpoints not copied: checkpoint, verdict."))
    findings: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "The findings (JSON)."))


# ---- datasets --------------------------------------------------------------------------------

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
    unreadable: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Unreadable files: path, error, offset."))
    skipped: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Entries skipped: path, reason."))
    changed_while_hashed: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Files that changed while they were hashed and were hashed again: path, times."))
    answer: str = field(default="", metadata=doc("The one-line answer."))
    allow_unverified: bool = field(default=False, metadata=doc(
        "Skipped entries (not in the manifest) were accepted."))

    @property
    def ok(self) -> bool:
        return not self.unreadable and (not self.skipped or self.allow_unverified)


@dataclass
class ManifestAuditOutput(StepOutputs):
    json_keys = ("files", "counts", "quick", "sample", "answer", "bytes_downloaded", "state",
                 "resumed", "files_omitted", "skipped", "allow_unverified")
    files: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Per file: path, status, expected, actual (offset when unreadable)."))
    counts: dict[str, int] = field(default_factory=dict, metadata=doc("Files per status."))
    quick: bool = field(default=False, metadata=doc("Size and mtime only."))
    answer: str = field(default="", metadata=doc("The one-line answer."))
    sample: dict[str, Any] | None = field(default=None, metadata=doc(
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
    changes: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "The first 1,000 changes in name order: status, path, sha256, old_path (renamed), "
        "old_sha256."))
    changes_omitted: int = field(default=0, metadata=doc(
        "Changes not listed in `changes` (all are in the changes file)."))
    bad_lines: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Lines not in sha256sum format (up to 20 per manifest): manifest, line, reason."))
    duplicates: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Names listed twice with different hashes: manifest, path, hashes."))
    answer: str = field(default="", metadata=doc("The one-line answer."))

    @property
    def differs(self) -> bool:
        return any(self.counts.get(s) for s in ("added", "removed", "changed", "renamed"))



@dataclass
class HubCacheOutput(StepOutputs):
    root: str = field(default="", metadata=doc("The hub cache directory verified."))
    counts: dict[str, int] = field(default_factory=dict, metadata=doc(
        "repos, revisions, blobs, blobs_ok, blobs_bad, incomplete, links_ok, links_bad, "
        "broken_revisions."))
    repos: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Per repository: folder, repo_type, repo_id, refs, revisions, blobs (those not ok: "
        "name, size, kind, status, actual, error, linked_from), blobs_total, blobs_ok, bytes, "
        "links (those not ok: revision, path, status, blob, detail), links_ok, "
        "broken_revisions (revision -> what breaks it), problems."))
    problems: list[str] = field(default_factory=list, metadata=doc(
        "Entries of the cache root that are not repositories."))
    bytes_hashed: int = field(default=0, metadata=doc("Bytes read and hashed."))
    answer: str = field(default="", metadata=doc("The one-line answer."))

    @property
    def ok(self) -> bool:
        c = self.counts
        return not (c.get("blobs_bad") or c.get("links_bad") or c.get("incomplete")
                    or self.problems or any(r.get("problems") for r in self.repos))


@dataclass
class DatasetVerifyOutput(StepOutputs):
    files: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Per file: path, format, status, bad_records (index, offset, key, problem), records, "
        "note."))
    counts: dict[str, int] = field(default_factory=dict, metadata=doc("Files per status."))
    answer: str = field(default="", metadata=doc("The one-line answer."))

    @property
    def ok(self) -> bool:
        return not any(f.get("status") in ("damaged", "unreadable") or (
            f.get("status") == "unchecked" and f.get("format") != "other") for f in self.files)


@dataclass
class RecoverOutput(StepOutputs):
    source: str = field(default="", metadata=doc("Snapshots directory or s3:// prefix."))
    to: str = field(default="", metadata=doc("The recovery directory."))
    files: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Per damaged file: path, damage, status, source, sha256, reason, tried."))
    counts: dict[str, int] = field(default_factory=dict, metadata=doc("recovered, unrecoverable."))
    answer: str = field(default="", metadata=doc("The one-line answer."))
    plan: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
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
    plan_unrecoverable: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "With --plan: files with no verified replacement: path, damage, reason."))
    clean_view_manifest: str | None = field(default=None, metadata=doc(
        "With --clean-view: the view's manifest VIEW.sha256 (sidecar VIEW.sha256.jsonl)."))
    clean_view_files: int = field(default=0, metadata=doc(
        "With --clean-view: files linked in the view."))
    clean_view_left_out: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "With --clean-view: files neither ok nor recovered, left out: path, reason."))

    @property
    def ok(self) -> bool:
        return not any(f.get("status") != "recovered" for f in self.files)


@dataclass
class TrainStateOutput(StepOutputs):
    checkpoints: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "The run's checkpoints in training order: path, step, format, verdict."))
    tensors: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Per tensor: name, intervals (from, to, rel_l2, max_abs_change, identical, elements, "
        "nonfinite), sign_agreement, norms, frozen."))
    scalars: dict[str, list[Any]] = field(default_factory=dict, metadata=doc(
        "Per checkpoint: optimizer step counters, learning rates, scheduler last_epoch, "
        "global step."))
    skipped: dict[str, str] = field(default_factory=dict, metadata=doc(
        "Tensors not compared, with the reason."))
    findings: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "TS001-TS008 findings (also recorded in the case)."))
    answer: str = field(default="", metadata=doc("The one-line answer."))


@dataclass
class DatasetProfileOutput(StepOutputs):
    profile: dict[str, Any] = field(default_factory=dict, metadata=doc(
        "The dataset profile (schema ckptrescue.profile/1, docs/profiles.md)."))
    output: str | None = field(default=None, metadata=doc("Where the profile was written."))
    answer: str = field(default="", metadata=doc("The one-line answer."))


@dataclass
class DatasetCompareOutput(StepOutputs):
    compare: dict[str, Any] = field(default_factory=dict, metadata=doc(
        "mode, thresholds, per_test_level, tests_run, answer, flagged checks (test, "
        "statistic, p-value, effect sizes, threshold), findings, skipped."))
    spot_checks: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Per flagged shard (up to 5): seed, k, method, the sampled records of the flagged and "
        "the reference shard with the values that drove the flag marked."))
    answer: str = field(default="", metadata=doc("The one-line answer."))

    @property
    def ok(self) -> bool:
        return not self.compare.get("flagged")


@dataclass
class QuarantineOutput(StepOutputs):
    quarantine: dict[str, Any] = field(default_factory=dict, metadata=doc(
        "The quarantine list (schema ckptrescue.datasets.quarantine/1): files, records, sources."))
    output: str | None = field(default=None, metadata=doc("The JSON list written."))
    path_list: str | None = field(default=None, metadata=doc(
        "The plain list of whole bad files written."))
    answer: str = field(default="", metadata=doc("The one-line answer."))


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
    problems: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
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
    bad: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Per bad file: path, code (WA001-WA005), problem."))
    bad_total: int = field(default=0, metadata=doc("Files bad or gone in the whole state."))
    notes: list[str] = field(default_factory=list, metadata=doc(
        "Alerts that could not be delivered."))
    answer: str = field(default="", metadata=doc("The one-line answer."))


@dataclass
class DeviceHealthOutput(StepOutputs):
    target: str = field(default="", metadata=doc("The device asked about."))
    device: bool = field(default=False, metadata=doc("A block device (else skipped)."))
    health: dict[str, Any] = field(default_factory=dict, metadata=doc(
        "disk, smartctl (parsed -x -j), nvme_smart_log, nvme_error_log."))


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
    unreadable: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Unreadable files (left out): path, error, offset."))
    skipped: list[dict[str, Any]] = field(default_factory=list, metadata=doc(
        "Entries skipped: path, reason."))
    inode_checked: bool = field(default=True, metadata=doc(
        "False when the old sidecar recorded no inodes (size and mtime compared only)."))
    elapsed_s: float = field(default=0.0, metadata=doc("Seconds."))
    answer: str = field(default="", metadata=doc("The one-line answer."))

    @property
    def ok(self) -> bool:
        return not self.unreadable
