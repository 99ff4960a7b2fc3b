"""Object-store actions side by side for S3, Azure Blob and GCS: ``store.verify``,
``store.history``, ``store.preflight``, ``store.preserve``, ``store.restore`` (``s3://`` URLs
go to the S3 implementation; the ``s3`` commands stay as they are). Every request is read-only
(one choke point per store, ``ckptrescue/stores/``); preserve and restore write only into a
local folder, never into the store."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

from ckptrescue.engine.action import Action, ActionResult, ArgSpec, StepContext, findings_of
from ckptrescue.engine.events import Event
from ckptrescue.engine.outputs import StoreResultOutput
from ckptrescue.model import AuditEvent, Severity

_URL = ArgSpec("url", "string", required=True, positional=True, metavar="URL",
               help="s3://BUCKET/KEY, az://ACCOUNT/CONTAINER/BLOB (or https://ACCOUNT.blob."
                    "core.windows.net/...), gs://BUCKET/OBJECT; a prefix for many.")
_ENDPOINT = ArgSpec("endpoint_url", "string",
                    help="Service endpoint (emulators); else the SDK's usual environment.")


def _options(args: dict[str, Any]) -> Any:
    from ckptrescue.stores.base import StoreOptions

    return StoreOptions(endpoint_url=args.get("endpoint_url") or None)


def _writable(ctx: StepContext, target: str) -> None:
    from ckptrescue.actions._util import refuse_unsafe_output

    refuse_unsafe_output(ctx.case, target)


def _result(kind: str, url: str, result: Any, ok: bool, answer: str) -> ActionResult:
    findings = findings_of(result)
    data = result.to_json() if hasattr(result, "to_json") else {}
    serious = any(f.severity.rank >= Severity.WARNING.rank for f in findings)
    return ActionResult(status="findings" if serious or not ok else "ok",
                        outputs={**data, "url": url, "ok": ok, "answer": answer},
                        findings=findings, summary=answer,
                        audit=[AuditEvent(f"store.{kind}", {"url": url, "ok": ok})])


class StoreVerify(Action):
    name = "store.verify"
    summary = "Verify objects against their stored checksums (MD5/CRC64/CRC32C/SHA)"
    capability = "network_read"
    description = """
Verify every object at or under URL against the checksums the store keeps: Azure Content-MD5
(blob and block level) and CRC64 where returned, GCS md5Hash (absent on composite objects) and
crc32c, S3 as `s3 verify`. Streams the objects (nothing stored), or, given LOCAL_DIR,
compares local files paired by relative key (as `s3 verify URL LOCAL_DIR`). Exit 0 when
everything verifies."""
    examples = ("ckptrescue store verify az://acct/ckpts/run7/ --json",
                "ckptrescue store verify gs://ml-ckpt/run7/ /mnt/copy/run7")
    output_type = StoreResultOutput
    args = (_URL, ArgSpec("local", "path", positional=True, cli_name="local_dir",
                          help="Compare these local files (paired by relative key) instead "
                               "of streaming the objects."),
            _ENDPOINT)

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.stores.integrity import verify

        result = yield from ctx.blocking(lambda p: verify(
            args["url"], args.get("local"), options=_options(args)))
        ok = bool(getattr(result, "ok", True))
        counts = getattr(result, "counts", {})
        answer = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "nothing to verify"
        return _result("verify", args["url"], result, ok, answer)


class StoreHistory(Action):
    name = "store.history"
    summary = "Every version of the objects; anomalies; the last known-good by a manifest"
    capability = "network_read"
    description = """
List every version of the object(s) at URL — Azure blob versions and snapshots (soft-deleted
blobs listed, never undeleted), GCS generations and noncurrent versions, S3 versions — with
anomalies (shrinking sizes, rewrites) and, with --manifest, the last known-good version."""
    examples = ("ckptrescue store history gs://ml-ckpt/run7/step-300.pt --manifest SHA256SUMS",)
    output_type = StoreResultOutput
    args = (_URL, ArgSpec("manifest", "path", help="sha256sum manifest naming good content."),
            _ENDPOINT)

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.stores.history import history

        result = yield from ctx.blocking(lambda p: history(
            args["url"], manifest=args.get("manifest"), options=_options(args)))
        data = result.to_json()
        keys = data.get("keys", [])
        good = [k for k in keys if k.get("known_good")]
        answer = f"{len(keys)} key(s)" + (f", {len(good)} with a known-good version"
                                          if args.get("manifest") else "")
        return _result("history", args["url"], result, True, answer)


class StorePreflight(Action):
    name = "store.preflight"
    summary = "Can the store still lose the evidence? Versioning, retention, locks, soft delete"
    capability = "network_read"
    description = """
Read the settings that decide whether the store can still lose the evidence: Azure versioning,
soft delete and immutability policies; GCS versioning, object retention, bucket lock and soft
delete; S3 as `s3 preflight`. Says what to ask the store's owner to change (never changes it)."""
    examples = ("ckptrescue store preflight az://acct/ckpts/",)
    output_type = StoreResultOutput
    args = (_URL, _ENDPOINT)

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.stores.preflight import preflight

        result = yield from ctx.blocking(lambda p: preflight(args["url"],
                                                             options=_options(args)))
        data = result.to_json()
        verdict = str(data.get("verdict", ""))
        return _result("preflight", args["url"], result, verdict in ("", "ok", "safe"),
                       verdict or "read")


class StorePreserve(Action):
    name = "store.preserve"
    summary = "Copy objects into a local folder: content-addressed, and under their own keys"
    capability = "write_recovery"
    description = """
Copy every object at or under URL (with --all-versions, every version) into DEST: a
content-addressed store whose hashes are the evidence, and a layout folder under the original
keys so the kit's own commands (probe, rank, salvage) run on the preserved copies unchanged.
Never writes to the store."""
    examples = ("ckptrescue store preserve gs://ml-ckpt/run7/ --dest /evidence/run7 "
                "--case /cases/INC-7",)
    output_type = StoreResultOutput
    args = (_URL, ArgSpec("dest", "path", cli_required=True, help="Local destination folder."),
            ArgSpec("all_versions", "boolean", default=False, help="Every version."),
            _ENDPOINT)

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.errors import UsageError
        from ckptrescue.stores.preserve import preserve

        if not args.get("dest"):
            raise UsageError("store preserve: give --dest DIR (a local folder)")
        _writable(ctx, str(args["dest"]))
        result = yield from ctx.blocking(lambda p: preserve(
            args["url"], Path(args["dest"]), all_versions=bool(args["all_versions"]),
            options=_options(args)))
        data = result.to_json()
        done = _result("preserve", args["url"], result, bool(getattr(result, "ok", True)),
                       f"{result.summary} into {args['dest']} (layout: {data.get('layout')})")
        done.audit.append(AuditEvent("store.preserved", {
            "url": args["url"], "dest": str(args["dest"]), "summary": result.summary,
            "counts": data.get("counts"),
            "objects": [{k: o.get(k) for k in ("key", "version", "sha256", "size", "status")}
                        for o in data.get("objects", [])][:10000]}))
        return done


class StoreRestore(Action):
    name = "store.restore"
    summary = "Restore one version (or the known-good one) into a local folder, verified"
    capability = "write_recovery"
    description = """
Restore one version of the object at URL — --version, the last known-good one per
--manifest, or the current one — into TO/<key>, verified against the store's
checksums (written as .partial, renamed only when it verifies). Never into the store."""
    examples = ("ckptrescue store restore az://acct/ckpts/run7/step-300.pt --to /recovery "
                "--manifest SHA256SUMS",)
    output_type = StoreResultOutput
    args = (_URL, ArgSpec("to", "path", cli_required=True, help="Local recovery folder."),
            ArgSpec("version", "string", help="The version / generation / snapshot to restore."),
            ArgSpec("known_good_manifest", "path", flag="--manifest",
                    help="Restore the newest version whose SHA-256 this manifest lists "
                         "(the last known-good)."),
            _ENDPOINT)

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.errors import UsageError
        from ckptrescue.stores.preserve import restore

        if not args.get("to"):
            raise UsageError("store restore: give --to DIR (a local folder)")
        _writable(ctx, str(args["to"]))
        result = yield from ctx.blocking(lambda p: restore(
            args["url"], Path(args["to"]), version=args.get("version"),
            known_good_manifest=args.get("known_good_manifest"), options=_options(args)))
        data = result.to_json()
        ok = bool(getattr(result, "ok", True))
        return _result("restore", args["url"], result, ok,
                       f"{data.get('status', 'restored')}: {data.get('path', '')}")


ACTIONS = [StoreVerify, StoreHistory, StorePreflight, StorePreserve, StoreRestore]
