"""The recovery action: ``recover`` (bring back verified versions; the swap-back plan)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from ckptrescue.action import Action, ActionResult, ArgSpec, StepContext, from_library
from ckptrescue.events import Event
from ckptrescue.outputs import RecoverOutput

_DIR_HELP = "Dataset directory (read only, never written)."


class Recover(Action):
    name = "recover"
    summary = "Bring back corrupted/missing files from versioned backups into a recovery dir"
    capability = "write_recovery"
    description = """
Bring back the last good version of every damaged or missing file, verified.

Audits DIR against the manifest (or takes the damaged files from --from-audit), then, for
each corrupted, changed, missing or unreadable file, takes the newest backup version whose
SHA-256 matches the manifest and copies it into RECOVERY_DIR/<same path>, verified. Never
writes into DIR. Exit 1 when something could not be recovered."""
    examples = ("ckptrescue recover /data/ds --manifest ds.sha256 --from /backups/snapshots "
                "--to /recovery",)
    output_type = RecoverOutput
    args = (ArgSpec("dir", "path", required=True, positional=True, cli_name="directory",
                    help=_DIR_HELP),
            ArgSpec("manifest", "path", required=True, help="Manifest of the good state."),
            ArgSpec("source", "string", required=True, flag="--from",
                    help="Snapshots directory (SNAPSHOTS/<name>/<paths>) or s3://bucket/prefix "
                         "with versioning."),
            ArgSpec("to", "path", required=True, help="Recovery directory (outside DIR)."),
            ArgSpec("endpoint_url", "string", help="S3 endpoint (for S3 sources)."),
            ArgSpec("audit_report", "path", flag="--from-audit",
                    help="JSON of an earlier `manifest audit --json` run with this manifest: "
                         "recover the files it found damaged instead of auditing DIR again."),
            ArgSpec("jobs", "integer", short="-j", minimum=1,
                    help="Files recovered at once (default 8 from S3, CPUs from snapshots)."))

    def plan(self, args: dict[str, Any]) -> list[str]:
        return [f"audit {args['dir']} against {args['manifest']}; for each bad file the newest "
                f"matching version in {args['source']} -> {args['to']} (verified)"]

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.datasets.recover import recover

        result = yield from ctx.blocking(lambda p: recover(
            args["dir"], manifest=args["manifest"], source=args["source"], to=args["to"],
            evidence=ctx.case.evidence_paths(), endpoint_url=args.get("endpoint_url") or None,
            audit_report=args.get("audit_report") or None, jobs=args.get("jobs")))
        return from_library(result, "recovered")


ACTIONS = [Recover]
