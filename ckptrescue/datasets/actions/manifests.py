"""Dataset actions: manifest.build, manifest.audit, manifest.update, manifest.diff,
dataset.verify."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

from ckptrescue.datasets.outputs import (
    DatasetVerifyOutput,
    ManifestAuditOutput,
    ManifestBuildOutput,
    ManifestDiffOutput,
    ManifestUpdateOutput,
)
from ckptrescue.engine.action import Action, ActionArgs, ActionResult, ArgSpec, StepContext, from_library
from ckptrescue.engine.events import Event

_SOURCE_HELP = "Dataset directory or s3://bucket/prefix (read only, never written)."
_DIR_HELP = "Dataset directory (read only, never written)."
_JOBS = ArgSpec("jobs", "integer", short="-j", minimum=1,
                help="Files hashed in parallel (default: CPUs).")
_SCHEDULER = ArgSpec("scheduler", "string",
                     help="Dask scheduler address (tcp://host:8786): spread the work over a "
                          "cluster whose workers see DIR at the same path. Needs the [cluster] "
                          "extra.")
_ENDPOINT = ArgSpec("endpoint_url", "string",
                    help="S3-compatible endpoint (for an s3:// dataset).")


def files_progress(progress: Any) -> Any:
    """A dataset ``Progress`` callback that reports files and bytes to the step."""
    def callback(p: Any) -> None:
        progress(p.bytes_done, p.bytes_total, rate=p.rate, eta_s=p.eta_s,
                 items_done=p.files_done, items_total=p.files_total)
    return callback


def _split(values: Any) -> tuple[str, ...]:
    """``--checksums a,b --checksums c`` -> ("a", "b", "c")."""
    return tuple(p.strip() for v in values or () for p in str(v).split(",") if p.strip())


class ManifestBuild(Action):
    name = "manifest.build"
    summary = "SHA-256 manifest of every file (sha256sum -c compatible + JSON lines)"
    description = """
SHA-256 of every file under DIR, in `sha256sum -c` format plus a JSON-lines sidecar.

Streaming and parallel; an interrupted build resumes from OUT.partial.jsonl. Symlinks are
followed only to regular files inside DIR; FIFOs, sockets and devices are skipped and listed.
Fail closed: a skipped entry is not in the manifest, so nothing will verify it: the build exits
1 and the answer counts them, unless --allow-unverified.

DIR may also be s3://bucket/prefix: every object is hashed where it lives (streamed, never
stored), with keys relative to the prefix as names."""
    examples = ("ckptrescue manifest build /data/imagenet -o /cases/INC-7/imagenet.sha256 "
                "--jobs 4",)
    output_type = ManifestBuildOutput
    args = (ArgSpec("dir", "string", required=True, positional=True, cli_name="directory",
                    help=_SOURCE_HELP),
            ArgSpec("output", "path", required=True, short="-o",
                    help="Manifest to write (outside DIR); OUT.jsonl is written beside it."),
            ArgSpec("checksums", "list", metavar="ALG",
                    help="Also record these CRCs of each file in the sidecar, in S3's form "
                         "(CRC64NVME, CRC32C, CRC32; repeat or comma-separate): an audit of "
                         "the uploaded objects then checks them against the store's own "
                         "full-object CRC without downloading."),
            ArgSpec("allow_unverified", "boolean", default=False,
                    help="Exit 0 although entries were skipped (they are not in the manifest: "
                         "nothing will ever verify them)."),
            _JOBS, _SCHEDULER, _ENDPOINT)

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"sha256 of every file under {args['dir']} -> {args['output']}"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.datasets.manifest import build_manifest

        result = yield from ctx.blocking(lambda p: build_manifest(
            args["dir"], args["output"], jobs=args.get("jobs"), scheduler=args.get("scheduler"),
            progress=files_progress(p), cancel=ctx.cancel,
            endpoint_url=args.get("endpoint_url") or None,
            checksums=_split(args.get("checksums"))), label="hashing")
        result.allow_unverified = bool(args.get("allow_unverified"))
        return from_library(result, f"manifest {args['output']}")


class ManifestAudit(Action):
    name = "manifest.audit"
    summary = "Audit a directory against a manifest: ok/corrupted/changed/missing/new/unreadable"
    description = """
Check every file against a manifest: ok, corrupted, changed, missing, new, unreadable.

Exit 0 when every file matches, 1 otherwise — also when the walk skipped entries (a directory
it could not list, a special or unstattable file): they were not checked (unverified; the answer
counts them; --allow-unverified accepts them).

--sample 1% (or a file count) stats every file (missing and size-changed files are always
reported) and hashes only a seeded sample of the rest; the answer is a 95% confidence bound
(exact Clopper-Pearson) on the share of corrupted files. Local directories only.

A local audit keeps its state in an SQLite database, MANIFEST.audit.sqlite beside the manifest
(or --state PATH; never inside DIR), committed as files finish: memory stays flat on trees of
millions of files, and rerunning the same audit (same DIR, same manifest bytes, same mode) after
Ctrl-C, a kill or a lost Dask worker re-hashes only files not finished before or whose size,
mtime or inode changed since. A completed state is kept (it holds every row); the next run starts
over and reads the data again. Above 100,000 files, --json lists only the rows that are not ok.

--quick keeps no state (unless --state is given): it walks DIR in name order and merges the walk
with the manifest and its sidecar line by line (both sorted by name, as manifest build writes
them), in memory bounded by the depth and the widest directory. A manifest not sorted by name is
compared through a temporary state database instead (said in the notes)."""
    examples = ("ckptrescue manifest audit /data/imagenet /cases/INC-7/imagenet.sha256 --json",
                "ckptrescue manifest audit /data/imagenet imagenet.sha256 --sample 1% --seed 7")
    output_type = ManifestAuditOutput
    args = (ArgSpec("dir", "string", required=True, positional=True, cli_name="directory",
                    help=_SOURCE_HELP),
            ArgSpec("manifest", "path", required=True, positional=True,
                    help="Manifest (sha256sum format; its .jsonl sidecar is used for sizes "
                         "when present)."),
            ArgSpec("quick", "boolean", default=False,
                    help="Compare size and mtime only (reads no content)."),
            ArgSpec("sample", "string", metavar="SHARE",
                    help="Hash only a sample: a percentage (1%), a fraction (0.01) or a file "
                         "count (2000); every file is still stat'ed."),
            ArgSpec("seed", "integer", default=0,
                    help="Seed of the --sample draw (recorded; the same seed draws the same "
                         "files)."),
            ArgSpec("use_stored", "boolean", default=True, flag="--no-stored-checksums",
                    help="s3:// only: download and hash every object, even those whose store "
                         "holds a full-object SHA-256 (by default those are checked without "
                         "being read)."),
            ArgSpec("state", "path", metavar="PATH",
                    help="Audit state database (SQLite; default: MANIFEST.audit.sqlite beside "
                         "the manifest; never inside DIR). An unfinished run of the same audit "
                         "there is resumed. A --quick audit keeps no state unless this is "
                         "given."),
            ArgSpec("restart", "boolean", default=False,
                    help="Start over, discarding an unfinished audit in the state (a --quick "
                         "audit without --state has none: a note says so)."),
            ArgSpec("follow_into", "list", item="path", metavar="PATH",
                    flag="--follow-links-into",
                    help="Also follow symlinks to regular files inside PATH (repeat the "
                         "option), not only inside DIR: audit a clean view made by recover "
                         "--clean-view with --follow-links-into DIR --follow-links-into "
                         "RECOVERY_DIR. Local directories only."),
            ArgSpec("allow_unverified", "boolean", default=False,
                    help="Exit 0 although the walk skipped entries (not checked; still "
                         "counted)."),
            _JOBS, _SCHEDULER, _ENDPOINT)

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"audit {args['dir']} against {args['manifest']}"
                + (" (size+mtime only)" if args.get("quick") else "")
                + (f" (sample {args['sample']}, seed {args.get('seed') or 0})"
                   if args.get("sample") else "")]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.datasets.audit import audit
        from ckptrescue.datasets.walk import to_json_path
        from ckptrescue.stores.urls import is_s3

        state = args.get("state") or None
        if not is_s3(args["dir"]):
            if state or not args.get("quick"):  # a --quick audit without --state writes none
                from ckptrescue.actions.shared import refuse_unsafe_output
                from ckptrescue.datasets.audit_state import check_location, default_path

                target = Path(state) if state else default_path(args["manifest"])
                check_location(target, args["dir"], default=not state)  # never inside DIR
                refuse_unsafe_output(ctx.case, str(target))
        elif state or args.get("restart"):
            from ckptrescue.errors import UsageError

            raise UsageError("--state and --restart are for local directories (an s3:// "
                             "audit keeps no state)")
        result = yield from ctx.blocking(lambda p: audit(
            args["dir"], args["manifest"], quick=bool(args["quick"]),
            jobs=args.get("jobs"), scheduler=args.get("scheduler"),
            progress=files_progress(p), endpoint_url=args.get("endpoint_url") or None,
            sample=args.get("sample") or None, seed=int(args.get("seed") or 0),
            use_stored=args.get("use_stored", True) is not False, state=state,
            restart=bool(args.get("restart")), cancel=ctx.cancel,
            follow_into=list(args.get("follow_into") or ())),
            label="auditing")
        result.allow_unverified = bool(args.get("allow_unverified"))
        out = result.to_json()
        audited = from_library(result, ", ".join(f"{k} {v}" for k, v in
                                                 sorted(out.get("counts", {}).items())))
        # by name, from the rows the result holds (the listed ones: every row, or above
        # LIST_ALL_MAX files the rows that are not ok, which are the ones with reasons)
        audited.outputs["reasons"] = {to_json_path(f.rel): f.reason for f in result.files
                                      if f.reason}
        audited.outputs["notes"] = list(result.notes)
        return audited


class ManifestUpdate(Action):
    name = "manifest.update"
    summary = "Update a manifest: hash only new and changed files (size/mtime/inode, or ETag)"
    description = """
Bring a manifest up to date, hashing only new files and files whose size, mtime or inode
differs from what its JSON-lines sidecar recorded; every other entry is reused.

Entries of deleted files are dropped and listed. The new manifest and sidecar are written to
temporary files beside them, fsynced and renamed into place; the old ones are kept as
MANIFEST.prev and MANIFEST.prev.jsonl. An interrupted update leaves the old manifest as it
was. CRCs the manifest records (build --checksums) are computed for the files hashed again.

DIR may also be s3://bucket/prefix: an object is read again when it is new or its size or
ETag changed (LastModified for a sidecar without ETags)."""
    examples = ("ckptrescue manifest update /data/imagenet /cases/INC-7/imagenet.sha256",
                "ckptrescue manifest update s3://training/imagenet/ imagenet.sha256")
    output_type = ManifestUpdateOutput
    args = (ArgSpec("dir", "location", required=True, positional=True, cli_name="directory",
                    help=_SOURCE_HELP),
            ArgSpec("manifest", "path", required=True, positional=True,
                    help="Manifest to update (outside DIR; needs its .jsonl sidecar)."),
            _JOBS, _SCHEDULER, _ENDPOINT)

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"update {args['manifest']} for {args['dir']} (hash only new and changed "
                "files; old manifest kept as .prev)"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.datasets.manifest_update import update_manifest

        result = yield from ctx.blocking(lambda p: update_manifest(
            args["dir"], args["manifest"], jobs=args.get("jobs"),
            scheduler=args.get("scheduler"), progress=files_progress(p), cancel=ctx.cancel,
            endpoint_url=args.get("endpoint_url") or None),
            label="hashing")
        return from_library(result, f"manifest {args['manifest']} updated")


class ManifestDiff(Action):
    name = "manifest.diff"
    summary = "Compare two manifests without reading data: added, removed, changed, renamed"
    description = """
Compare manifest OLD with manifest NEW (sha256sum format) without reading any data file.

Each name is compared by its SHA-256: added (in NEW only), removed (in OLD only), changed (in
both, another hash) and renamed (a name gone from OLD and a name new in NEW with the same hash).
Exit 0 when the manifests agree, 1 when they differ.

Memory stays flat in the number of entries: both manifests stream into a scratch SQLite
database (removed at the end). Lines not in sha256sum format (a torn last line) are reported and
left out, never guessed at.

With -o OUT: OUT is a sha256sum manifest of NEW's added, changed and renamed entries (run
`sha256sum -c OUT` in the new tree to verify just what changed) and OUT.changes.jsonl lists
every change, removed entries included."""
    examples = ("ckptrescue manifest diff imagenet-2024-05.sha256 imagenet-2024-06.sha256 "
                "-o /cases/INC-7/changes.sha256",)
    output_type = ManifestDiffOutput
    args = (ArgSpec("old", "path", required=True, positional=True,
                    help="The earlier manifest (sha256sum format)."),
            ArgSpec("new", "path", required=True, positional=True,
                    help="The later manifest (sha256sum format)."),
            ArgSpec("output", "path", short="-o",
                    help="Write the changes here as a sha256sum manifest (NEW's added, changed "
                         "and renamed entries) and OUT.changes.jsonl beside it."))

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"compare manifest {args['old']} with {args['new']} (no data read)"
                + (f" -> {args['output']}" if args.get("output") else "")]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.datasets.manifest_diff import diff_manifests

        if args.get("output"):
            from ckptrescue.actions.shared import refuse_unsafe_output

            refuse_unsafe_output(ctx.case, str(args["output"]))
        result = yield from ctx.blocking(lambda p: diff_manifests(
            args["old"], args["new"], output=args.get("output") or None, progress=p,
            cancel=ctx.cancel), label="comparing")
        return from_library(result, result.answer(),
                            status="findings" if result.differs or result.bad_line_counts.get(
                                "old") or result.bad_line_counts.get("new") else "ok")


class DatasetVerify(Action):
    name = "dataset.verify"
    summary = "Container checks that need no manifest (TFRecord, tar, Parquet, JSONL, npy)"
    description = """
Check every TFRecord, tar/WebDataset shard, Parquet, JSON-lines and .npy/.npz file.

Needs no manifest: TFRecord length and data CRCs per record, tar header checksums and
truncated members (naming the sample key), Parquet footer and every column chunk,
every JSON line, .npy/.npz headers against sizes. Exit 1 when anything is damaged."""
    examples = ("ckptrescue dataset verify /data/shards --json",)
    output_type = DatasetVerifyOutput
    args = (ArgSpec("dir", "path", required=True, positional=True, cli_name="directory",
                    help=_DIR_HELP),
            _JOBS, _SCHEDULER)

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"verify every dataset shard under {args['dir']}"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.datasets.verify import verify_dataset

        result = yield from ctx.blocking(lambda p: verify_dataset(
            args["dir"], jobs=args.get("jobs"), scheduler=args.get("scheduler")))
        return from_library(result, "verified")


ACTIONS = [ManifestBuild, ManifestAudit, ManifestUpdate, ManifestDiff, DatasetVerify]
