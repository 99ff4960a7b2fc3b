"""Object-store actions: ``store.verify``, ``store.history``, ``store.preflight``,
``store.preserve``, ``store.restore`` for S3, Azure Blob and GCS alike (one implementation each,
``ckptrescue/stores/``), and ``s3.verify|history|preflight|preserve|restore``: the same actions
for ``s3://`` URLs under the names, arguments and output records the ``s3`` commands and
playbooks have always used. Every request is read-only (one choke point per store); preserve
and restore write only into a local folder or the case, never into the store."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

from ckptrescue.engine.action import (
    Action,
    ActionArgs,
    ActionResult,
    ArgSpec,
    StepContext,
    from_library,
    records_of,
    with_findings,
)
from ckptrescue.engine.events import Event
from ckptrescue.errors import UsageError
from ckptrescue.model import AuditEvent
from ckptrescue.stores.outputs import (
    S3HistoryOutput,
    S3PreflightOutput,
    S3PreserveOutput,
    S3RestoreOutput,
    S3VerifyOutput,
    StoreResultOutput,
)

_URL = ArgSpec("url", "string", required=True, positional=True, metavar="URL",
               help="s3://BUCKET/KEY, az://ACCOUNT/CONTAINER/BLOB (or https://ACCOUNT.blob."
                    "core.windows.net/...), gs://BUCKET/OBJECT; a prefix for many.")
_CONNECTION = (
    ArgSpec("endpoint_url", "string",
            help="Service endpoint (emulators, S3-compatible stores); else the SDK's usual "
                 "environment (AWS_ENDPOINT_URL, ...)."),
    ArgSpec("profile", "string", help="AWS shared-config profile (S3)."),
    ArgSpec("region", "string", help="AWS region (S3)."),
    ArgSpec("checksum_when", "string", default="supported",
            help="S3: supported (boto3 default) or required: for stores that reject boto3's "
                 "default CRC checksums/trailers."),
)
_WORKERS = ArgSpec("workers", "integer", default=16, flag="--jobs", short="-j", minimum=1,
                   help="Concurrent requests (the same word as every command's --jobs).")


def _options(args: ActionArgs) -> Any:
    from ckptrescue.stores.base import StoreOptions

    workers = args.get("workers")
    return StoreOptions(endpoint_url=args.get("endpoint_url") or None,
                        profile=args.get("profile") or None, region=args.get("region") or None,
                        checksum_when=str(args.get("checksum_when") or "supported"),
                        concurrency=max(1, int(workers) // 2) if workers else None)


def _endpoint(args: ActionArgs) -> str:
    return f" (endpoint {args['endpoint_url']})" if args.get("endpoint_url") else ""


def _refuse_unsafe_output(ctx: StepContext, target: str) -> None:
    """Where a restore or preserve writes: never evidence, the case's records, a device or a
    system tree (the guard's identity rules)."""
    from ckptrescue.effects.output_dirs import refuse_aliasing

    refuse_aliasing(target, evidence=ctx.case.evidence_paths(),
                    protected=ctx.case.protected_paths())


def _done(result: Any, ok: bool, answer: str, *, recorded: bool = False) -> ActionResult:
    """The step's result: the library result's records and findings, its JSON plus whether
    nothing is wrong (``ok``) and the one-line answer."""
    done = from_library(result, answer, recorded=recorded)
    done.outputs = {**done.outputs, "url": result.url, "ok": ok, "answer": answer}
    if not ok:
        done.status = "findings"
    return done


class StoreAction(Action):
    """An object-store action; ``s3_only``: its s3 name, which takes s3:// URLs only."""

    s3_only = False

    def url(self, args: dict[str, Any]) -> str:
        """The URL argument, refused (one line, exit 2) when it names no store this action
        takes."""
        from ckptrescue.stores.s3.urls import parse_s3_url
        from ckptrescue.stores.urls import parse_store_url

        (parse_s3_url if self.s3_only else parse_store_url)(str(args["url"]))
        return str(args["url"])


class StoreVerify(StoreAction):
    name = "store.verify"
    summary = "Verify objects against their stored checksums (no download with LOCAL_DIR)"
    capability = "network_read"
    description = """
Verify every object at or under URL against the checksums the store keeps: S3 ChecksumSHA256
and the other Checksum* values (composite multipart ones with the real part boundaries) or the
ETag; Azure Content-MD5; GCS md5Hash (absent on composite objects) and crc32c. Given LOCAL_DIR,
local files paired by relative key are compared and nothing is downloaded (--download: objects
without a usable checksum are streamed and compared by content); without it, every object is
streamed (nothing stored) and checked.

Fail closed: an object without a usable stored checksum is `unverified` and does not count as
verified (--download compares it by content; --allow-unverified accepts it); the answer says how
many.

Exit 0 when everything verifies, 1 on a mismatch, a missing file/object or an unverified
object, 4 when objects could not be read (what was established is kept)."""
    examples = ("ckptrescue store verify az://acct/ckpts/run7/ --json",
                "ckptrescue store verify gs://ml-ckpt/run7/ /mnt/copy/run7")
    output_type = StoreResultOutput
    args = (_URL,
            ArgSpec("local_dir", "path", positional=True,
                    help="Compare these local files (paired by relative key) instead of "
                         "streaming the objects."),
            ArgSpec("download", "boolean", default=False,
                    help="Download objects without a usable checksum and compare content."),
            ArgSpec("allow_unverified", "boolean", default=False,
                    help="Accept objects without a usable checksum (unverified) instead of "
                         "exiting 1; the answer still counts them."),
            ArgSpec("manifest", "path",
                    help="Known-good SHA-256s (sha256sum format or the kit's JSON): for a "
                         "mismatch, say which side matches them (the store's object or the "
                         "local file)."),
            _WORKERS, *_CONNECTION)

    def plan(self, args: ActionArgs) -> list[str]:
        what = f"hash {args['local_dir']} locally" if args.get("local_dir") else \
            "stream every object (nothing stored)"
        return [f"list + HEAD every object at or under {args['url']}{_endpoint(args)}; {what}"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.stores.verify import VerifyFailed, verify

        url = self.url(args)
        try:
            result = yield from ctx.blocking(lambda p: verify(
                url, args.get("local_dir") or None, options=_options(args),
                download=bool(args.get("download")), workers=int(args.get("workers") or 16),
                progress=lambda done, total, _key: p(done, total),
                allow_unverified=bool(args.get("allow_unverified")),
                manifest=args.get("manifest") or None),
                unit="objects", label="verifying")
        except VerifyFailed as exc:  # what was established before it stopped is kept
            audit, artifacts = records_of(exc.partial)
            return ActionResult(status="refused" if exc.exit_code == 3 else "failed",
                                outputs=exc.partial.to_json(), error=exc.message,
                                exit_code=int(exc.exit_code), hint=exc.hint,
                                audit=with_findings(audit, exc.partial.findings()),
                                artifacts=artifacts)
        return _done(result, result.ok, result.summary)


class StoreHistory(StoreAction):
    name = "store.history"
    summary = "Every version of the objects; anomalies; the last known-good by a manifest"
    capability = "network_read"
    description = """
List every version of the object(s) at URL — S3 versions and delete markers (each with its
stored checksums), Azure blob versions and snapshots (soft-deleted blobs listed, never
undeleted), GCS generations and noncurrent versions — with the listing's anomalies and, with
--manifest, the last known-good version (by a stored SHA-256 where the store keeps one, else by
content). S3: --cloudtrail names who wrote or deleted each version.

Exit 0 when the history is clean, 1 on an anomaly or when no version matches the manifest."""
    examples = ("ckptrescue store history gs://ml-ckpt/run7/step-300.pt --manifest SHA256SUMS",)
    output_type = StoreResultOutput
    args = (_URL,
            ArgSpec("manifest", "path",
                    help="Known-good manifest (sha256sum format or the kit's JSON)."),
            ArgSpec("cloudtrail", "path",
                    help="S3: exported CloudTrail logs (.json/.json.gz file or folder)."),
            ArgSpec("by_content", "boolean", default=False,
                    help="Judge versions by downloaded content, not a stored SHA-256."),
            *_CONNECTION)

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"list every version (+ HEAD each on S3) of {args['url']}{_endpoint(args)}"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.stores.history import history

        url = self.url(args)
        result = yield from ctx.blocking(lambda p: history(
            url, manifest=args.get("manifest") or None,
            cloudtrail=args.get("cloudtrail") or None, by_content=bool(args.get("by_content")),
            options=_options(args)))
        for item in result.keys:
            yield ctx.output(f"{item.key}: {len(item.versions)} version(s), "
                             f"known-good {item.known_good}")
        return _done(result, not result.problems, result.summary)


class StorePreflight(StoreAction):
    name = "store.preflight"
    summary = "Can the store still lose the evidence? Versioning, retention, locks, soft delete"
    capability = "network_read"
    description = """
Read the settings that decide whether the store can still lose the evidence: S3 versioning,
MFA delete, Object Lock and default retention; Azure versioning, soft delete and immutability
policies; GCS versioning, object retention, bucket lock and soft delete. Says what to ask the
store's owner to change (never changes it).

Exit 0 when the store keeps immutable versions, 1 otherwise (copy first)."""
    examples = ("ckptrescue store preflight az://acct/ckpts/",)
    output_type = StoreResultOutput
    args = (_URL, *_CONNECTION)

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"read the protection settings of {args['url']}{_endpoint(args)}"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.stores.preflight import preflight

        url = self.url(args)
        result = yield from ctx.blocking(lambda p: preflight(url,
                                                             options=_options(args)))
        yield ctx.output(f"{result.url}: {result.verdict}")
        return _done(result, result.immutable, result.verdict)


class StorePreserve(StoreAction):
    name = "store.preserve"
    summary = "Copy objects into a local folder or the case's evidence, verifying each"
    capability = "write_recovery"
    description = """
Copy every object at or under URL (with --all-versions, every version), checking each against
the store's own checksums on the way. With --dest: into a local folder, as a content-addressed
store whose hashes are the evidence and a layout folder under the original keys, so the kit's
own commands (probe, rank, salvage) run on the preserved copies unchanged. Without --dest: into
the case's evidence. Bytes that do not match are kept as received (a finding). A rerun resumes.
Never writes to the store."""
    examples = ("ckptrescue store preserve gs://ml-ckpt/run7/ --dest /evidence/run7 "
                "--case /cases/INC-7",)
    output_type = StoreResultOutput
    args = (_URL,
            ArgSpec("dest", "path",
                    help="Local destination folder (without it: the case's evidence)."),
            ArgSpec("all_versions", "boolean", default=False,
                    help="Every version, not only the current objects."),
            *_CONNECTION)

    def plan(self, args: ActionArgs) -> list[str]:
        into = args.get("dest") or "CASE/evidence"
        return [f"GET every object under {args['url']}{_endpoint(args)} into {into}, "
                "checked, hashed and inventoried"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.stores.preserve import preserve

        url = self.url(args)
        dest = args.get("dest")
        if dest:
            _refuse_unsafe_output(ctx, str(dest))
        result = yield from ctx.blocking(lambda p: preserve(
            url, Path(dest) if dest else None, case=None if dest else ctx.case,
            all_versions=bool(args.get("all_versions")), options=_options(args),
            progress=lambda done, total, _key: p(done, total)), label="preserving")
        if not dest:  # an acquisition into the case: artifacts, evidence, findings recorded
            return _done(result, result.ok, result.summary, recorded=True)
        done = _done(result, result.ok, f"{result.summary} into {dest} (layout: "
                                        f"{result.layout})")
        done.audit.append(AuditEvent("store.preserved", {
            "url": url, "dest": str(dest), "summary": result.summary,
            "counts": result.counts,
            "objects": [{"key": o.key, "version": o.version, "sha256": o.sha256,
                         "size": o.size, "status": o.status}
                        for o in result.objects][:10000]}))
        return done


class StoreRestore(StoreAction):
    name = "store.restore"
    summary = "Restore one version (or the known-good one) into a local folder, verified"
    capability = "write_recovery"
    description = """
Restore one version of the object at URL — --version, the last known-good one per
--manifest, or the current one — into TO/<key>, verified against the store's
checksums (written as .partial, renamed only when it verifies, else kept as .unverified).
Never into the store, never over a file."""
    examples = ("ckptrescue store restore az://acct/ckpts/run7/step-300.pt --to /recovery "
                "--manifest SHA256SUMS",)
    output_type = StoreResultOutput
    args = (_URL,
            ArgSpec("to", "path", cli_required=True,
                    help="Recovery folder (never the evidence)."),
            ArgSpec("version", "string", help="The version / generation / snapshot to restore."),
            ArgSpec("manifest", "path",
                    help="Restore the newest version whose SHA-256 this manifest lists "
                         "(the last known-good)."),
            *_CONNECTION)
    needs_choice = False  # s3.restore: exactly one of --version and --manifest

    def plan(self, args: ActionArgs) -> list[str]:
        which = args.get("version") or ("the newest version matching the manifest"
                                        if args.get("manifest") else "the current version")
        return [f"GET {which} of {args['url']}{_endpoint(args)} into "
                f"{args.get('to') or 'CASE/work/recovery'} (never the store), verified"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.stores.restore import restore

        url = self.url(args)
        if self.needs_choice and (args.get("version") is None) == (args.get("manifest") is None):
            raise UsageError("give exactly one of --version ID or --manifest FILE")
        to = str(args.get("to") or ctx.work_dir("recovery"))
        _refuse_unsafe_output(ctx, to)
        result = yield from ctx.blocking(lambda p: restore(
            url, Path(to), version=args.get("version") or None,
            known_good_manifest=args.get("manifest") or None,
            evidence=ctx.case.evidence_paths(), options=_options(args)))
        return _done(result, result.ok, result.summary)


# ---- the s3 names: the same actions for s3:// URLs ------------------------------------------

def _s3_url(help_text: str) -> ArgSpec:
    return ArgSpec("url", "s3_url", required=True, positional=True, help=help_text)


class S3Verify(StoreVerify):
    name = "s3.verify"
    s3_only = True
    summary = "Compare local files with the objects' server-side checksums (no download)"
    description = """
Compare local files with the objects' server-side checksums (nothing downloaded): `store
verify` for s3:// URLs.

An object without a usable server-side checksum is `unverified`: not counted as verified
(--download compares it by content, --allow-unverified accepts it).

Exit 0 when everything verifies, 1 on a mismatch, a missing file/object or an unverified
object."""
    examples = ("ckptrescue s3 verify s3://ml-ckpt/run7/ /mnt/ckpt/run7 --json",)
    output_type = S3VerifyOutput
    args = (_s3_url("s3://BUCKET/PREFIX"),
            ArgSpec("local_dir", "path", required=True, positional=True,
                    help="Local folder holding the same relative keys."),
            *StoreVerify.args[2:])


class S3History(StoreHistory):
    name = "s3.history"
    s3_only = True
    summary = "Every version and delete marker; anomalies; the last known-good version"
    description = "Every version and delete marker, anomalies, checksums, last known-good, " \
                  "CloudTrail: `store history` for s3:// URLs."
    examples = ("ckptrescue s3 history s3://ml-ckpt/run7/model.pt --manifest SHA256SUMS "
                "--cloudtrail logs/",)
    output_type = S3HistoryOutput
    args = (_s3_url("s3://BUCKET/KEY_OR_PREFIX"), *StoreHistory.args[1:])


class S3Preflight(StorePreflight):
    name = "s3.preflight"
    s3_only = True
    summary = "Versioning and object-lock status of a bucket (are immutable copies kept?)"
    description = """
Versioning, Object Lock and default retention: are immutable copies being kept? (`store
preflight` for s3:// URLs)

Exit 0 when versioning and Object Lock keep immutable versions, 1 otherwise (copy first)."""
    examples = ("ckptrescue s3 preflight s3://ml-ckpt",)
    output_type = S3PreflightOutput
    args = (_s3_url("s3://BUCKET"), *_CONNECTION)


class S3Preserve(StorePreserve):
    name = "s3.preserve"
    s3_only = True
    summary = "Download a prefix into the case's evidence, verifying every checksum"
    capability = "network_read"
    description = """
Download into the case's evidence, verifying every checksum on the way (`store preserve` for
s3:// URLs, without --dest).

A mismatch is a finding; bytes are kept as received, hashed and inventoried."""
    examples = ("ckptrescue s3 preserve s3://ml-ckpt/run7/ --case /cases/INC-042 --all-versions",)
    output_type = S3PreserveOutput
    args = (_s3_url("s3://BUCKET/PREFIX"),
            ArgSpec("all_versions", "boolean", default=False,
                    help="Every version, not only the current objects."), *_CONNECTION)


class S3Restore(StoreRestore):
    name = "s3.restore"
    s3_only = True
    summary = "Download one version (or the last known-good) into a recovery folder, verified"
    capability = "network_read"
    description = "Download one version into a recovery folder and verify it. Never into the " \
                  "bucket (`store restore` for s3:// URLs)."
    examples = ("ckptrescue s3 restore s3://ml-ckpt/run7/model.pt --to /recovery "
                "--manifest SHA256SUMS",)
    output_type = S3RestoreOutput
    args = (_s3_url("s3://BUCKET/KEY"), *StoreRestore.args[1:])
    needs_choice = True


ACTIONS = [StoreVerify, StoreHistory, StorePreflight, StorePreserve, StoreRestore,
           S3Verify, S3History, S3Preflight, S3Preserve, S3Restore]
