"""``ckptrescue manifest build|audit|update`` and ``dataset ...``: training-data integrity,
generated from the manifest.* and dataset.* actions; their text is ``datasets/render.py``'s.
Results go to stdout, progress to stderr."""

from __future__ import annotations

from pathlib import Path

import typer

from ckptrescue.cli.from_action import (
    CASE,
    JSON,
    Command,
    StepResult,
    add_command,
    add_group,
    renders,
)
from ckptrescue.cli.output import show
from ckptrescue.datasets import render
from ckptrescue.datasets.outputs import ManifestAuditOutput, ManifestBuildOutput
from ckptrescue.engine.action import ActionArgs, ArgSpec

MANIFEST_HELP = "Checksum manifests of dataset directories (sha256sum format)."
DATASET_HELP = ("Dataset checks that need no manifest: containers, content profiles, "
                "quarantine lists.")

NO_PROGRESS = ArgSpec("no_progress", "boolean", default=False,
                      help="No progress bar on stderr.")


def build_interrupted(args: ActionArgs) -> str:
    from ckptrescue.datasets.manifest import partial_path

    partial = partial_path(args["output"])
    if not Path(partial).exists():  # stopped before a file was finished: say only that
        return "ckptrescue: interrupted before any file was hashed; nothing was kept"
    return (f"ckptrescue: interrupted; finished files are kept in {partial}: run the same "
            "command again to resume")


def update_interrupted(args: ActionArgs) -> str:
    return (f"ckptrescue: interrupted; {args['manifest']} was not changed: run the same command "
            "again")


ALLOW_EMPTY = ArgSpec("allow_empty", "boolean", default=False,
                      help="An empty directory makes an empty manifest with exit 0 (else a "
                           "warning and exit 1).")
def render_build(result: StepResult) -> int:
    out: ManifestBuildOutput = result.out
    shown = render.build(out, allow_empty=bool(result.options["allow_empty"]),
                         root=str(result.args.get("dir")))
    return show(shown, json=result.options[JSON], data=result.outputs)


BUILD = Command("manifest.build", render_build, extras=(NO_PROGRESS, ALLOW_EMPTY),
                order=("dir", "output", "checksums", "jobs", "scheduler", "no_progress",
                       "allow_empty", "allow_unverified", "endpoint_url", CASE, JSON),
                quiet=lambda a, o: bool(o["no_progress"]), interrupted=build_interrupted)
def audit_interrupted(args: ActionArgs) -> str:
    from ckptrescue.datasets.audit_state import default_path
    from ckptrescue.stores.urls import is_s3

    if is_s3(args["dir"]):
        return "ckptrescue: interrupted (an s3:// audit keeps no state: it starts over)"
    state = args.get("state") or default_path(args["manifest"])
    if args.get("quick") and not args.get("state"):
        return "ckptrescue: interrupted (a --quick audit without --state keeps no state)"
    if not Path(state).exists():
        return "ckptrescue: interrupted before the audit kept any state; nothing was kept"
    return (f"ckptrescue: interrupted; finished files are kept in {state}: run the same "
            "command again to resume")


AUDIT = Command("manifest.audit",
                renders(render.audit, json=lambda r: ManifestAuditOutput.public_json(r.outputs)),
                extras=(NO_PROGRESS,),
                order=("dir", "manifest", "quick", "sample", "seed", "state", "restart",
                       "follow_into", "jobs", "scheduler", "no_progress", "endpoint_url",
                       "use_stored", "allow_unverified", CASE, JSON),
                quiet=lambda a, o: bool(o["no_progress"] or a.get("quick")),
                interrupted=audit_interrupted)
UPDATE = Command("manifest.update", renders(render.update), extras=(NO_PROGRESS,),
                 order=("dir", "manifest", "jobs", "scheduler", "no_progress", "endpoint_url",
                        CASE, JSON),
                 quiet=lambda a, o: bool(o["no_progress"]), interrupted=update_interrupted)
VERIFY = Command("dataset.verify", renders(render.verify))


def register(app: typer.Typer) -> None:
    manifest_app = add_group(app, "manifest", MANIFEST_HELP)
    dataset_app = add_group(app, "dataset", DATASET_HELP)
    add_command(manifest_app, "build", BUILD)
    add_command(manifest_app, "audit", AUDIT)
    add_command(manifest_app, "update", UPDATE)
    add_command(manifest_app, "diff", Command("manifest.diff", renders(render.diff)))
    add_command(dataset_app, "verify", VERIFY)
    add_command(dataset_app, "profile", Command(
        "dataset.profile", renders(render.profile, json=lambda r: r.out.profile)))
    add_command(dataset_app, "compare", Command(  # --current CURRENT: the old spelling
        "dataset.compare", renders(render.compare), optional=("current",),
        deprecated={"--current": "current"}))
    add_command(dataset_app, "quarantine", Command(
        "dataset.quarantine", renders(render.quarantine, json=lambda r: r.out.quarantine)))
