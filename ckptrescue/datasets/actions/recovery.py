"""The recovery action: ``recover`` (bring back verified versions; the swap-back plan)."""

from __future__ import annotations

from collections.abc import Generator

from ckptrescue.datasets.outputs import RecoverOutput
from ckptrescue.engine.action import Action, ActionArgs, ActionResult, ArgSpec, StepContext, from_library
from ckptrescue.engine.events import Event

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
writes into DIR. Exit 1 when something could not be recovered.

--plan PLAN.json writes the swap-back plan: every replacement with its target in DIR, its
source version and its SHA-256 and size, hashed again from the replacement's bytes, and a bash
script beside it (PLAN.sh) that the operator reviews and runs (on a copy first: it takes the
dataset root as its argument). The script checks each hash, installs through a temporary name
and a rename, and lists the unrecoverable files as comments; the kit never runs it.

--clean-view VIEW makes VIEW a tree of symlinks to verified files only (files the audit found
ok point into DIR, recovered files into RECOVERY_DIR) with its manifest VIEW.sha256 beside it,
for the rerun to train on; files neither ok nor recovered are left out and listed."""
    examples = ("ckptrescue recover /data/ds --manifest ds.sha256 --from /backups/snapshots "
                "--to /recovery",
                "ckptrescue recover /data/ds --manifest ds.sha256 --from s3://backups/ds "
                "--to /recovery --plan /recovery-plans/swap-back.json "
                "--clean-view /rerun/ds-clean")
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
                    help="Files recovered at once (default 8 from S3, CPUs from snapshots)."),
            ArgSpec("plan", "path", metavar="PLAN.json",
                    help="Write the swap-back plan (JSON) here and its bash script beside it "
                         "(PLAN.sh), for the operator to review and apply; the kit never "
                         "writes in place."),
            ArgSpec("clean_view", "path", metavar="VIEW",
                    help="Make VIEW (new or empty, outside DIR) a tree of symlinks to the "
                         "verified files, with its manifest VIEW.sha256 beside it."))

    def plan(self, args: ActionArgs) -> list[str]:
        from ckptrescue.datasets.recover_plan import script_path, view_manifest_path

        lines = [f"audit {args['dir']} against {args['manifest']}; for each bad file the newest "
                 f"matching version in {args['source']} -> {args['to']} (verified)"]
        if args.get("plan"):
            lines.append(f"write the swap-back plan -> {args['plan']} and its script -> "
                         f"{script_path(args['plan'])} (for the operator; not applied)")
        if args.get("clean_view"):
            lines.append(f"symlink tree of the verified files -> {args['clean_view']}, its "
                         f"manifest -> {view_manifest_path(args['clean_view'])}")
        return lines

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.actions.shared import refuse_unsafe_output
        from ckptrescue.datasets.manifest_files import sidecar_path
        from ckptrescue.datasets.recover import recover
        from ckptrescue.datasets.recover_plan import script_path, view_manifest_path

        plan, view = args.get("plan") or None, args.get("clean_view") or None
        outputs = [plan, script_path(plan)] if plan else []
        if view:
            outputs += [view, view_manifest_path(view), sidecar_path(view_manifest_path(view))]
        for target in outputs:
            refuse_unsafe_output(ctx.case, str(target))
        result = yield from ctx.blocking(lambda p: recover(
            args["dir"], manifest=args["manifest"], source=args["source"], to=args["to"],
            evidence=ctx.case.evidence_paths(), endpoint_url=args.get("endpoint_url") or None,
            audit_report=args.get("audit_report") or None, jobs=args.get("jobs"),
            plan=plan, clean_view=view))
        return from_library(result, "recovered")


ACTIONS = [Recover]
