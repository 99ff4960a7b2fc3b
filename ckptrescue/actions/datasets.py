"""Dataset actions: manifest.build, manifest.audit, dataset.verify, recover."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from ckptrescue.action import Action, ActionResult, ArgSpec, StepContext
from ckptrescue.actions._util import from_library, progress_adapter
from ckptrescue.events import Event


class ManifestBuild(Action):
    name = "manifest.build"
    summary = "SHA-256 manifest of every file (sha256sum -c compatible + JSON lines)"
    args = (ArgSpec("dir", "path", required=True,
                    help="Dataset directory or s3://bucket/prefix."),
            ArgSpec("output", "path", required=True),
            ArgSpec("jobs", "integer", help="Parallel hashing jobs."),
            ArgSpec("scheduler", "string", help="Dask scheduler address."),
            ArgSpec("endpoint_url", "string", help="S3 endpoint for an s3:// dataset."))

    def plan(self, args: dict[str, Any]) -> list[str]:
        return [f"sha256 of every file under {args['dir']} -> {args['output']}"]

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.datasets.manifest import build_manifest

        result = yield from ctx.blocking(lambda p: build_manifest(
            args["dir"], args["output"], jobs=args.get("jobs"), scheduler=args.get("scheduler"),
            progress=progress_adapter(p), case=ctx.case,
            endpoint_url=args.get("endpoint_url") or None), label="hashing")
        return from_library(result, f"manifest {args['output']}")


class ManifestAudit(Action):
    name = "manifest.audit"
    summary = "Audit a directory against a manifest: ok/corrupted/changed/missing/new/unreadable"
    args = (ArgSpec("dir", "path", required=True), ArgSpec("manifest", "path", required=True),
            ArgSpec("quick", "boolean", default=False, help="Size and mtime only."),
            ArgSpec("jobs", "integer", help="Parallel hashing jobs."),
            ArgSpec("scheduler", "string", help="Dask scheduler address."),
            ArgSpec("endpoint_url", "string", help="S3 endpoint for an s3:// dataset."))

    def plan(self, args: dict[str, Any]) -> list[str]:
        return [f"audit {args['dir']} against {args['manifest']}"
                + (" (size+mtime only)" if args.get("quick") else "")]

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.datasets.audit import audit

        result = yield from ctx.blocking(lambda p: audit(
            args["dir"], args["manifest"], quick=bool(args["quick"]), case=ctx.case,
            jobs=args.get("jobs"), scheduler=args.get("scheduler"),
            progress=progress_adapter(p), endpoint_url=args.get("endpoint_url") or None),
            label="auditing")
        out = result.to_json()
        return from_library(result, ", ".join(f"{k} {v}" for k, v in
                                              sorted(out.get("counts", {}).items())))


class DatasetVerify(Action):
    name = "dataset.verify"
    summary = "Container checks that need no manifest (TFRecord, tar, Parquet, JSONL, npy)"
    args = (ArgSpec("dir", "path", required=True),
            ArgSpec("jobs", "integer", help="Parallel jobs."),
            ArgSpec("scheduler", "string", help="Dask scheduler address."))

    def plan(self, args: dict[str, Any]) -> list[str]:
        return [f"verify every dataset shard under {args['dir']}"]

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.datasets.verify import verify_dataset

        result = yield from ctx.blocking(lambda p: verify_dataset(
            args["dir"], case=ctx.case, jobs=args.get("jobs"), scheduler=args.get("scheduler")))
        return from_library(result, "verified")


class Recover(Action):
    name = "recover"
    summary = "Bring back corrupted/missing files from versioned backups into a recovery dir"
    capability = "write_recovery"
    args = (ArgSpec("dir", "path", required=True), ArgSpec("manifest", "path", required=True),
            ArgSpec("source", "string", required=True,
                    help="Snapshots directory or s3://bucket/prefix with versioning."),
            ArgSpec("to", "path", required=True),
            ArgSpec("endpoint_url", "string", help="S3 endpoint for an s3:// source."),
            ArgSpec("audit_report", "path", help="An earlier audit JSON to take bad files from."),
            ArgSpec("jobs", "integer", help="Parallel jobs."))

    def plan(self, args: dict[str, Any]) -> list[str]:
        return [f"audit {args['dir']} against {args['manifest']}; for each bad file the newest "
                f"matching version in {args['source']} -> {args['to']} (verified)"]

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.datasets.recover import recover

        result = yield from ctx.blocking(lambda p: recover(
            args["dir"], manifest=args["manifest"], source=args["source"], to=args["to"],
            case=ctx.case, endpoint_url=args.get("endpoint_url") or None,
            audit_report=args.get("audit_report") or None, jobs=args.get("jobs")))
        return from_library(result, "recovered")


ACTIONS = [ManifestBuild, ManifestAudit, DatasetVerify, Recover]
