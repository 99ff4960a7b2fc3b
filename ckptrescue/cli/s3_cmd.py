"""``ckptrescue s3 verify|history|preflight|preserve|restore``: thin adapters over ckptrescue.s3.

Every command reads through the read-only client (ckptrescue.s3.client): the kit never writes to
a bucket. Connection options: --endpoint-url, --profile, --region, --checksum-when, plus the
standard AWS environment variables (AWS_ENDPOINT_URL, AWS_PROFILE, AWS_REGION, credentials).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from ckptrescue.cli.options import JsonOpt, OptionalCaseOpt
from ckptrescue.cli.output import emit_json, info, say
from ckptrescue.errors import ExitCode

s3_app = typer.Typer(help="S3 integrity: server-side checksums, version history, known-good "
                          "restore. Read-only: never writes to a bucket.", no_args_is_help=True)

EndpointOpt = Annotated[str | None, typer.Option(
    "--endpoint-url", help="S3-compatible endpoint (default: AWS, or AWS_ENDPOINT_URL).")]
ProfileOpt = Annotated[str | None, typer.Option("--profile", help="AWS shared-config profile.")]
RegionOpt = Annotated[str | None, typer.Option("--region", help="AWS region.")]
ChecksumWhenOpt = Annotated[str, typer.Option(
    "--checksum-when", help="supported (boto3 default) or required: for stores that reject "
                            "boto3's default CRC checksums/trailers.")]


def _options(endpoint_url: str | None, profile: str | None, region: str | None,
             checksum_when: str, workers: int = 16) -> Any:
    from ckptrescue.s3.client import ClientOptions

    return ClientOptions(endpoint_url=endpoint_url, profile=profile, region=region,
                         checksum_when=checksum_when, max_pool_connections=workers)


def _common(endpoint_url: str | None, profile: str | None, region: str | None,
            checksum_when: str) -> dict[str, Any]:
    """The endpoint options as engine-action arguments."""
    return {"endpoint_url": endpoint_url, "profile": profile, "region": region,
            "checksum_when": checksum_when}


def _open_case(case_dir: Path | None) -> Any:
    if case_dir is None:
        return None
    from ckptrescue.case import Case

    return Case.open(case_dir)


class _Progress:
    """A progress line on stderr: redrawn in place on a terminal, every few seconds otherwise."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.tty = sys.stderr.isatty()
        self.last = 0.0 if self.tty else time.monotonic()

    def __call__(self, done: int, total: int, key: str) -> None:
        now = time.monotonic()
        if done < total and now - self.last < (0.1 if self.tty else 5.0):
            return
        self.last = now
        width = 30
        filled = int(width * done / total) if total else width
        bar = "#" * filled + "." * (width - filled)
        line = f"{self.what} [{bar}] {done}/{total} {key[-40:]}"
        if self.tty:
            sys.stderr.write("\r" + line[:120].ljust(120))
            if done == total:
                sys.stderr.write("\n")
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def _print_objects(objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        detail = obj.get("detail") or {}
        say(f"{obj['status']:<15} {obj['key']}  [{obj.get('algorithm') or '-'}] "
            f"{detail.get('message', '')}")


@s3_app.command("verify")
def verify_cmd(
    url: Annotated[str, typer.Argument(help="s3://BUCKET/PREFIX")],
    local_dir: Annotated[Path, typer.Argument(help="Local folder holding the same relative keys.")],
    download: Annotated[bool, typer.Option(
        "--download", help="Download objects without a usable checksum and compare content.")
    ] = False,
    workers: Annotated[int, typer.Option("--workers", help="Concurrent requests.")] = 16,
    case_dir: OptionalCaseOpt = None,
    as_json: JsonOpt = False,
    endpoint_url: EndpointOpt = None,
    profile: ProfileOpt = None,
    region: RegionOpt = None,
    checksum_when: ChecksumWhenOpt = "supported",
) -> int:
    """Compare local files with the objects' server-side checksums (nothing downloaded).

    Exit 0 when everything matches, 1 on a mismatch or a missing file/object.

    Example:

        ckptrescue s3 verify s3://ml-ckpt/run7/ /mnt/ckpt/run7 --json
    """
    from ckptrescue.s3.verify import VerifyFailed, verify_prefix

    try:
        case = _open_case(case_dir)
        if case is not None:  # recorded in the case: a one-step plan on the engine
            from ckptrescue.cli.bridge import run_action

            result = run_action("s3.verify", {
                "url": url, "local_dir": str(local_dir), "download": download,
                "workers": workers, **_common(endpoint_url, profile, region, checksum_when)},
                case=case)
        else:
            result = verify_prefix(url, local_dir,
                                   client_options=_options(endpoint_url, profile, region,
                                                           checksum_when, workers),
                                   case=None, download=download, workers=workers,
                                   progress=_Progress("verify"))
    except VerifyFailed as exc:
        if as_json:
            emit_json(exc.partial.to_json())
        else:
            _print_objects(exc.partial.to_json()["objects"])
        raise
    data = result.to_json()
    if as_json:
        emit_json(data)
    else:
        _print_objects(data["objects"])
        say(" ".join(f"{k}={v}" for k, v in data["counts"].items()))
    return int(ExitCode.OK if result.ok else ExitCode.FINDINGS)


@s3_app.command("history")
def history_cmd(
    url: Annotated[str, typer.Argument(help="s3://BUCKET/KEY_OR_PREFIX")],
    manifest: Annotated[Path | None, typer.Option(
        "--manifest", help="Known-good manifest (sha256sum format or the kit's JSON).")] = None,
    cloudtrail: Annotated[Path | None, typer.Option(
        "--cloudtrail", help="Exported CloudTrail logs (.json/.json.gz file or folder).")] = None,
    by_content: Annotated[bool, typer.Option(
        "--by-content", help="Judge versions by downloaded content, not stored SHA256.")
    ] = False,
    case_dir: OptionalCaseOpt = None,
    as_json: JsonOpt = False,
    endpoint_url: EndpointOpt = None,
    profile: ProfileOpt = None,
    region: RegionOpt = None,
    checksum_when: ChecksumWhenOpt = "supported",
) -> int:
    """Every version and delete marker, anomalies, checksums, last known-good, CloudTrail.

    Example:

        ckptrescue s3 history s3://ml-ckpt/run7/model.pt --manifest SHA256SUMS --cloudtrail logs/
    """
    from ckptrescue.s3.history import history

    case = _open_case(case_dir)
    if case is not None:
        from ckptrescue.cli.bridge import run_action

        result = run_action("s3.history", {
            "url": url, "manifest": str(manifest) if manifest else None,
            "cloudtrail": str(cloudtrail) if cloudtrail else None, "by_content": by_content,
            **_common(endpoint_url, profile, region, checksum_when)}, case=case)
    else:
        result = history(url, client_options=_options(endpoint_url, profile, region, checksum_when),
                         manifest=manifest, cloudtrail=cloudtrail, case=None,
                         by_content=by_content)
    data = result.to_json()
    if as_json:
        emit_json(data)
    else:
        for item in data["keys"]:
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
    problems = any(k["anomalies"] for k in data["keys"]) or any(
        k.get("manifest_sha256") and k["known_good"] is None for k in data["keys"])
    return int(ExitCode.FINDINGS if problems else ExitCode.OK)


@s3_app.command("preflight")
def preflight_cmd(
    url: Annotated[str, typer.Argument(help="s3://BUCKET")],
    case_dir: OptionalCaseOpt = None,
    as_json: JsonOpt = False,
    endpoint_url: EndpointOpt = None,
    profile: ProfileOpt = None,
    region: RegionOpt = None,
    checksum_when: ChecksumWhenOpt = "supported",
) -> int:
    """Versioning, Object Lock and default retention: are immutable copies being kept?

    Exit 0 when versioning and Object Lock keep immutable versions, 1 otherwise (copy first).

    Example:

        ckptrescue s3 preflight s3://ml-ckpt
    """
    from ckptrescue.s3.preflight import preflight

    case = _open_case(case_dir)
    if case is not None:
        from ckptrescue.cli.bridge import run_action

        result = run_action("s3.preflight", {"url": url, **_common(endpoint_url, profile, region,
                                                                    checksum_when)}, case=case)
    else:
        result = preflight(url, client_options=_options(endpoint_url, profile, region,
                                                         checksum_when), case=None)
    if as_json:
        emit_json(result.to_json())
    else:
        say(f"bucket       {result.bucket} ({result.region or 'region unknown'})")
        say(f"versioning   {result.versioning}" + (f" (MFA delete {result.mfa_delete})"
                                                  if result.mfa_delete else ""))
        say(f"object lock  {result.object_lock}")
        say(f"retention    {result.default_retention or '-'}")
        say(f"verdict      {result.verdict}")
    for warning in result.warnings:
        info(f"WARNING: {warning}")
    return int(ExitCode.OK if result.verdict == "immutable" else ExitCode.FINDINGS)


@s3_app.command("preserve")
def preserve_cmd(
    url: Annotated[str, typer.Argument(help="s3://BUCKET/PREFIX")],
    case_dir: Annotated[Path, typer.Option("--case", help="Case directory (created if new).")],
    all_versions: Annotated[bool, typer.Option(
        "--all-versions", help="Every version, not only the current objects.")] = False,
    as_json: JsonOpt = False,
    endpoint_url: EndpointOpt = None,
    profile: ProfileOpt = None,
    region: RegionOpt = None,
    checksum_when: ChecksumWhenOpt = "supported",
) -> int:
    """Download into the case's evidence, verifying every checksum on the way.

    A mismatch is a finding; bytes are kept as received, hashed and inventoried.

    Example:

        ckptrescue s3 preserve s3://ml-ckpt/run7/ --case /cases/INC-042 --all-versions
    """
    from ckptrescue.case import Case

    case = Case.open_or_create(case_dir, title=f"s3 preserve {url}")
    from ckptrescue.cli.bridge import run_action

    result = run_action("s3.preserve", {"url": url, "all_versions": all_versions,
                                        **_common(endpoint_url, profile, region, checksum_when)},
                        case=case)
    data = result.to_json()
    if as_json:
        emit_json(data)
    else:
        for obj in data["objects"]:
            say(f"{obj['status']:<13} {obj['key']} {obj['version_id'] or ''} "
                f"sha256={obj['sha256']} {obj['evidence_id'] or ''}")
        say(" ".join(f"{k}={v}" for k, v in data["counts"].items()))
    return int(ExitCode.OK if result.ok else ExitCode.FINDINGS)


@s3_app.command("restore")
def restore_cmd(
    url: Annotated[str, typer.Argument(help="s3://BUCKET/KEY")],
    to: Annotated[Path, typer.Option("--to", help="Recovery folder (never the evidence).")],
    version: Annotated[str | None, typer.Option("--version", help="Version id to restore.")
                       ] = None,
    known_good: Annotated[bool, typer.Option(
        "--known-good", help="Restore the newest version matching --manifest.")] = False,
    manifest: Annotated[Path | None, typer.Option("--manifest", help="Known-good manifest.")
                        ] = None,
    case_dir: OptionalCaseOpt = None,
    as_json: JsonOpt = False,
    endpoint_url: EndpointOpt = None,
    profile: ProfileOpt = None,
    region: RegionOpt = None,
    checksum_when: ChecksumWhenOpt = "supported",
) -> int:
    """Download one version into a recovery folder and verify it. Never into the bucket.

    Example:

        ckptrescue s3 restore s3://ml-ckpt/run7/model.pt --to /recovery --known-good \\
            --manifest SHA256SUMS
    """
    from ckptrescue.errors import UsageError
    from ckptrescue.s3.restore import restore

    if known_good != (manifest is not None):
        raise UsageError("--known-good and --manifest go together")
    if (version is None) == (not known_good):
        raise UsageError("give exactly one of --version ID or --known-good --manifest FILE")
    case = _open_case(case_dir)
    if case is not None:
        from ckptrescue.cli.bridge import run_action

        result = run_action("s3.restore", {
            "url": url, "to": str(to), "version": version,
            "manifest": str(manifest) if manifest else None,
            **_common(endpoint_url, profile, region, checksum_when)}, case=case)
    else:
        result = restore(url, to, version=version, known_good_manifest=manifest,
                         client_options=_options(endpoint_url, profile, region, checksum_when),
                         case=None)
    if as_json:
        emit_json(result.to_json())
    else:
        say(f"{result.status}: {result.url} version {result.version_id} -> {result.path}")
        say(f"  sha256 {result.sha256}, {result.size} bytes; {result.detail.get('message', '')}")
    return int(ExitCode.OK if result.ok else ExitCode.FINDINGS)


def register(app: typer.Typer) -> None:
    app.add_typer(s3_app, name="s3")
