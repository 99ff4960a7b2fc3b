"""``ckptrescue s3 verify|history|preflight|preserve|restore``: generated from the s3.* actions.

Every command reads through the read-only client (ckptrescue.stores.s3.client): the kit never writes to
a bucket. Connection options: --endpoint-url, --profile, --region, --checksum-when, plus the
standard AWS environment variables (AWS_ENDPOINT_URL, AWS_PROFILE, AWS_REGION, credentials).
"""

from __future__ import annotations

from typing import Any

import typer

from ckptrescue.cli.from_action import CASE, JSON, Command, StepResult, add_command
from ckptrescue.cli.output import emit_json, info, say
from ckptrescue.engine.action import ArgSpec
from ckptrescue.engine.outputs import (
    S3HistoryOutput,
    S3PreflightOutput,
    S3PreserveOutput,
    S3RestoreOutput,
    S3VerifyOutput,
)
from ckptrescue.errors import ExitCode

s3_app = typer.Typer(help="S3 integrity: server-side checksums, version history, known-good "
                          "restore. Read-only: never writes to a bucket.", no_args_is_help=True)

_ENDPOINT = ("endpoint_url", "profile", "region", "checksum_when")


def _print_objects(objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        detail = obj.get("detail") or {}
        say(f"{obj['status']:<15} {obj['key']}  [{obj.get('algorithm') or '-'}] "
            f"{detail.get('message', '')}")


def verify_partial(result: StepResult) -> None:
    """Verification stopped early: what it established, before the error."""
    if result.options[JSON]:
        emit_json(result.outputs)
    else:
        _print_objects(result.outputs.get("objects", []))


def render_verify(result: StepResult) -> int:
    out: S3VerifyOutput = result.out
    if result.options[JSON]:
        emit_json(result.outputs)
    else:
        _print_objects(out.objects)
        say(" ".join(f"{k}={v}" for k, v in out.counts.items()))
        if out.extra.get("summary"):
            say(str(out.extra["summary"]))
    return int(ExitCode.OK if out.ok else ExitCode.FINDINGS)


def render_history(result: StepResult) -> int:
    out: S3HistoryOutput = result.out
    if result.options[JSON]:
        emit_json(result.outputs)
    else:
        for item in out.keys:
            say(f"{item['key']}  known-good: {item['known_good'] or '-'}")
            for v in item["versions"]:
                kind = "DELETE-MARKER" if v["delete_marker"] else f"{v['size']} bytes"
                checksum = v["checksum"] or {}
                say(f"  {'*' if v['is_latest'] else ' '} {v['version_id']}  {v['last_modified']}"
                    f"  {kind}  {checksum.get('algorithm', '')} {checksum.get('value', '')}")
                for event in v.get("events", []):
                    say(f"      {event['event_name']} by {event['principal']} from "
                        f"{event['source_ip']} ({event['user_agent']}) at {event['event_time']}")
            for anomaly in item["anomalies"]:
                say(f"  ANOMALY {anomaly['kind']}: {anomaly['message']}")
    problems = any(k["anomalies"] for k in out.keys) or any(
        k.get("manifest_sha256") and k["known_good"] is None for k in out.keys)
    return int(ExitCode.FINDINGS if problems else ExitCode.OK)


def render_preflight(result: StepResult) -> int:
    out: S3PreflightOutput = result.out
    if result.options[JSON]:
        emit_json(result.outputs)
    else:
        say(f"bucket       {out.bucket} ({out.region or 'region unknown'})")
        say(f"versioning   {out.versioning}" + (f" (MFA delete {out.mfa_delete})"
                                               if out.mfa_delete else ""))
        say(f"object lock  {out.object_lock}")
        say(f"retention    {out.default_retention or '-'}")
        say(f"verdict      {out.verdict}")
    for warning in out.warnings:
        info(f"WARNING: {warning}")
    return int(ExitCode.OK if out.verdict == "immutable" else ExitCode.FINDINGS)


def render_preserve(result: StepResult) -> int:
    out: S3PreserveOutput = result.out
    if result.options[JSON]:
        emit_json(result.outputs)
    else:
        for obj in out.objects:
            say(f"{obj['status']:<13} {obj['key']} {obj['version_id'] or ''} "
                f"sha256={obj['sha256']} {obj['evidence_id'] or ''}")
        say(" ".join(f"{k}={v}" for k, v in out.counts.items()))
        if out.extra.get("summary"):
            say(str(out.extra["summary"]))
    return int(ExitCode.OK if out.ok else ExitCode.FINDINGS)


def check_restore(args: dict[str, Any], options: dict[str, Any]) -> None:
    from ckptrescue.errors import UsageError

    if options["known_good"] and args.get("manifest") is None:
        raise UsageError("--known-good needs --manifest FILE (the known-good SHA-256s)")
    if (args.get("version") is None) == (args.get("manifest") is None):
        raise UsageError("give exactly one of --version ID or --manifest FILE")


def render_restore(result: StepResult) -> int:
    out: S3RestoreOutput = result.out
    if result.options[JSON]:
        emit_json(result.outputs)
    else:
        say(f"{out.status}: {out.url} version {out.version_id} -> {out.path}")
        say(f"  sha256 {out.sha256}, {out.size} bytes; {out.detail.get('message', '')}")
    return int(ExitCode.OK if out.ok else ExitCode.FINDINGS)


COMMANDS = {
    "verify": Command("s3.verify", render_verify, on_failure=verify_partial,
                      order=("url", "local_dir", "download", "workers", CASE, JSON, *_ENDPOINT),
                      deprecated={"--workers": "workers"}),  # -j/--jobs, as every command
    "history": Command("s3.history", render_history,
                       order=("url", "manifest", "cloudtrail", "by_content", CASE, JSON,
                              *_ENDPOINT)),
    "preflight": Command("s3.preflight", render_preflight,
                         order=("url", CASE, JSON, *_ENDPOINT)),
    "preserve": Command("s3.preserve", render_preserve, case="create",
                        title=lambda a: f"s3 preserve {a['url']}",
                        order=("url", CASE, "all_versions", JSON, *_ENDPOINT)),
    "restore": Command(
        "s3.restore", render_restore, check=check_restore,
        extras=(ArgSpec("known_good", "boolean", default=False, hidden=True,
                        help="Implied by --manifest (kept for old scripts)."),),
        order=("url", "to", "version", "known_good", "manifest", CASE, JSON, *_ENDPOINT)),
}


def register(app: typer.Typer) -> None:
    for name, command in COMMANDS.items():
        add_command(s3_app, name, command)
    app.add_typer(s3_app, name="s3")
