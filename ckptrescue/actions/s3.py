"""Object-store actions: s3.verify, s3.history, s3.preflight, s3.preserve, s3.restore.

Every action takes the common endpoint options; the client underneath is read-only.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from ckptrescue.actions._util import progress_adapter
from ckptrescue.engine.action import (
    Action,
    ActionResult,
    ArgSpec,
    StepContext,
    from_library,
    records_of,
    with_findings,
)
from ckptrescue.engine.events import Event
from ckptrescue.engine.outputs import (
    S3HistoryOutput,
    S3PreflightOutput,
    S3PreserveOutput,
    S3RestoreOutput,
    S3VerifyOutput,
)

_COMMON = (
    ArgSpec("endpoint_url", "string",
            help="S3-compatible endpoint (default: AWS, or AWS_ENDPOINT_URL)."),
    ArgSpec("profile", "string", help="AWS shared-config profile."),
    ArgSpec("region", "string", help="AWS region."),
    ArgSpec("checksum_when", "string", default="supported",
            help="supported (boto3 default) or required: for stores that reject boto3's "
                 "default CRC checksums/trailers."),
)


def _options(args: dict[str, Any]) -> Any:
    from ckptrescue.stores.s3.client import ClientOptions

    return ClientOptions(endpoint_url=args.get("endpoint_url") or None,
                         profile=args.get("profile") or None, region=args.get("region") or None,
                         checksum_when=str(args.get("checksum_when") or "supported"),
                         max_pool_connections=int(args.get("workers") or 16))


def _endpoint(args: dict[str, Any]) -> str:
    return f" (endpoint {args['endpoint_url']})" if args.get("endpoint_url") else ""


class S3Verify(Action):
    name = "s3.verify"
    summary = "Compare local files with the objects' server-side checksums (no download)"
    capability = "network_read"
    description = """
Compare local files with the objects' server-side checksums (nothing downloaded).

Exit 0 when everything matches, 1 on a mismatch or a missing file/object."""
    examples = ("ckptrescue s3 verify s3://ml-ckpt/run7/ /mnt/ckpt/run7 --json",)
    output_type = S3VerifyOutput
    args = (ArgSpec("url", "s3_url", required=True, positional=True, help="s3://BUCKET/PREFIX"),
            ArgSpec("local_dir", "path", required=True, positional=True,
                    help="Local folder holding the same relative keys."),
            ArgSpec("download", "boolean", default=False,
                    help="Download objects without a usable checksum and compare content."),
            ArgSpec("workers", "integer", default=16, flag="--jobs", short="-j", minimum=1,
                    help="Concurrent requests (the same word as every command's --jobs)."),
            *_COMMON)

    def plan(self, args: dict[str, Any]) -> list[str]:
        return [f"ListObjectsV2 + HeadObject(ChecksumMode=ENABLED[, PartNumber]) for {args['url']}"
                f"{_endpoint(args)}; hash {args['local_dir']} locally"]

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.stores.s3.verify import VerifyFailed, verify_prefix

        try:
            result = yield from ctx.blocking(lambda p: verify_prefix(
                args["url"], args["local_dir"], client_options=_options(args),
                download=bool(args["download"]), workers=int(args["workers"]),
                progress=progress_adapter(p)), unit="objects",
                label="verifying")
        except VerifyFailed as exc:  # what was established before it stopped is kept
            audit, artifacts = records_of(exc.partial)
            return ActionResult(status="refused" if exc.exit_code == 3 else "failed",
                                outputs=exc.partial.to_json(), error=exc.message,
                                exit_code=int(exc.exit_code), hint=exc.hint,
                                audit=with_findings(audit, exc.partial.findings()),
                                artifacts=artifacts)
        out = result.to_json()
        return from_library(result, ", ".join(f"{k} {v}" for k, v in
                                              sorted(out.get("counts", {}).items())))


class S3History(Action):
    name = "s3.history"
    summary = "Every version and delete marker; anomalies; the last known-good version"
    capability = "network_read"
    description = "Every version and delete marker, anomalies, checksums, last known-good, " \
                  "CloudTrail."
    examples = ("ckptrescue s3 history s3://ml-ckpt/run7/model.pt --manifest SHA256SUMS "
                "--cloudtrail logs/",)
    output_type = S3HistoryOutput
    args = (ArgSpec("url", "s3_url", required=True, positional=True,
                    help="s3://BUCKET/KEY_OR_PREFIX"),
            ArgSpec("manifest", "path",
                    help="Known-good manifest (sha256sum format or the kit's JSON)."),
            ArgSpec("cloudtrail", "path",
                    help="Exported CloudTrail logs (.json/.json.gz file or folder)."),
            ArgSpec("by_content", "boolean", default=False,
                    help="Judge versions by downloaded content, not stored SHA256."),
            *_COMMON)

    def plan(self, args: dict[str, Any]) -> list[str]:
        return [f"ListObjectVersions + HeadObject(VersionId, ChecksumMode=ENABLED) for "
                f"{args['url']}{_endpoint(args)}"]

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.stores.s3.history import history

        result = yield from ctx.blocking(lambda p: history(
            args["url"], client_options=_options(args), manifest=args.get("manifest") or None,
            cloudtrail=args.get("cloudtrail") or None,
            by_content=bool(args["by_content"])))
        out = result.to_json()
        for key in out.get("keys", []):
            yield ctx.output(f"{key['key']}: {len(key.get('versions', []))} version(s), "
                             f"known-good {key.get('known_good')}")
        return from_library(result, f"{len(out.get('keys', []))} key(s)")


class S3Preflight(Action):
    name = "s3.preflight"
    summary = "Versioning and object-lock status of a bucket (are immutable copies kept?)"
    capability = "network_read"
    description = """
Versioning, Object Lock and default retention: are immutable copies being kept?

Exit 0 when versioning and Object Lock keep immutable versions, 1 otherwise (copy first)."""
    examples = ("ckptrescue s3 preflight s3://ml-ckpt",)
    output_type = S3PreflightOutput
    args = (ArgSpec("url", "s3_url", required=True, positional=True, help="s3://BUCKET"),
            *_COMMON)

    def plan(self, args: dict[str, Any]) -> list[str]:
        return [f"GetBucketVersioning + GetObjectLockConfiguration for {args['url']}"]

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.stores.s3.preflight import preflight

        result = preflight(args["url"], client_options=_options(args))
        yield ctx.output(str(result.to_json()))
        return from_library(result, "checked")


class S3Preserve(Action):
    name = "s3.preserve"
    summary = "Download a prefix into the case's evidence, verifying every checksum"
    capability = "network_read"
    description = """
Download into the case's evidence, verifying every checksum on the way.

A mismatch is a finding; bytes are kept as received, hashed and inventoried."""
    examples = ("ckptrescue s3 preserve s3://ml-ckpt/run7/ --case /cases/INC-042 --all-versions",)
    output_type = S3PreserveOutput
    args = (ArgSpec("url", "s3_url", required=True, positional=True, help="s3://BUCKET/PREFIX"),
            ArgSpec("all_versions", "boolean", default=False,
                    help="Every version, not only the current objects."), *_COMMON)

    def plan(self, args: dict[str, Any]) -> list[str]:
        return [f"GetObject(ChecksumMode=ENABLED) of every object under {args['url']} into "
                "CASE/evidence, hashed and inventoried"]

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.stores.s3.preserve import preserve

        result = yield from ctx.blocking(lambda p: preserve(
            args["url"], case=ctx.case, all_versions=bool(args["all_versions"]),
            client_options=_options(args), progress=progress_adapter(p)), label="preserving")
        # preserve streams objects into the case's artifacts and evidence itself (it is an
        # acquisition into the case), findings included
        return from_library(result, result.summary, recorded=True)


class S3Restore(Action):
    name = "s3.restore"
    summary = "Download one version (or the last known-good) into a recovery folder, verified"
    capability = "network_read"
    description = "Download one version into a recovery folder and verify it. Never into the " \
                  "bucket."
    examples = ("ckptrescue s3 restore s3://ml-ckpt/run7/model.pt --to /recovery "
                "--manifest SHA256SUMS",)
    output_type = S3RestoreOutput
    args = (ArgSpec("url", "s3_url", required=True, positional=True, help="s3://BUCKET/KEY"),
            ArgSpec("to", "path", cli_required=True,
                    help="Recovery folder (never the evidence)."),
            ArgSpec("version", "string", help="Version id to restore."),
            ArgSpec("manifest", "path",
                    help="Restore the newest version whose SHA-256 this manifest lists "
                         "(the last known-good)."),
            *_COMMON)

    def plan(self, args: dict[str, Any]) -> list[str]:
        which = args.get("version") or "the newest version matching the manifest"
        return [f"GetObject(VersionId={which}) of {args['url']} into "
                f"{args.get('to') or 'CASE/work/recovery'} (never the "
                "bucket), verified"]

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.stores.s3.restore import restore

        to = args.get("to") or str(ctx.work_dir("recovery"))
        result = yield from ctx.blocking(lambda p: restore(
            args["url"], to, version=args.get("version") or None,
            known_good_manifest=args.get("manifest") or None, client_options=_options(args),
            evidence=ctx.case.evidence_paths()))
        return from_library(result, "restored")


ACTIONS = [S3Verify, S3History, S3Preflight, S3Preserve, S3Restore]
