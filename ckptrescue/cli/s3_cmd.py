"""``ckptrescue s3 verify|history|preflight|preserve|restore``: the ``store`` commands for s3://
URLs (the store wing's s3.* actions run the store.* ones), with the flags, lines and exit codes
they always had; the text is ``stores/render.py``'s, this module only registers them.

Every command reads through the read-only client (ckptrescue.stores.s3.client): the kit never
writes to a bucket. Connection options: --endpoint-url, --profile, --region, --checksum-when,
plus the standard AWS environment variables (AWS_ENDPOINT_URL, AWS_PROFILE, AWS_REGION,
credentials).
"""

from __future__ import annotations

from typing import Any

import typer

from ckptrescue.cli.from_action import CASE, JSON, Command, StepResult, add_command, add_group
from ckptrescue.cli.output import show
from ckptrescue.cli.store_cmd import verify_partial
from ckptrescue.engine.action import ActionArgs, ArgSpec
from ckptrescue.stores import render

S3_HELP = ("S3 integrity: server-side checksums, version history, known-good "
           "restore. Read-only: never writes to a bucket.")

_ENDPOINT = ("endpoint_url", "profile", "region", "checksum_when")


def _rendered(how: Any) -> Any:
    def render_step(result: StepResult) -> int:
        return show(how(result.out), json=result.options[JSON], data=result.outputs)
    return render_step


def check_restore(args: ActionArgs, options: dict[str, Any]) -> None:
    from ckptrescue.errors import UsageError

    if options["known_good"] and args.get("manifest") is None:
        raise UsageError("--known-good needs --manifest FILE (the known-good SHA-256s)")
    if (args.get("version") is None) == (args.get("manifest") is None):
        raise UsageError("give exactly one of --version ID or --manifest FILE")


COMMANDS = {
    "verify": Command("s3.verify", _rendered(render.verify), on_failure=verify_partial,
                      order=("url", "local_dir", "download", "allow_unverified", "manifest",
                             "workers", CASE, JSON, *_ENDPOINT),
                      deprecated={"--workers": "workers"}),  # -j/--jobs, as every command
    "history": Command("s3.history", _rendered(render.history),
                       order=("url", "manifest", "cloudtrail", "by_content", CASE, JSON,
                              *_ENDPOINT)),
    "preflight": Command("s3.preflight", _rendered(render.preflight),
                         order=("url", CASE, JSON, *_ENDPOINT)),
    "preserve": Command("s3.preserve", _rendered(render.preserve), case="create",
                        title=lambda a: f"s3 preserve {a['url']}",
                        order=("url", CASE, "all_versions", JSON, *_ENDPOINT)),
    "restore": Command(
        "s3.restore", _rendered(render.restore), check=check_restore,
        extras=(ArgSpec("known_good", "boolean", default=False, hidden=True,
                        help="Implied by --manifest (kept for old scripts)."),),
        order=("url", "to", "version", "known_good", "manifest", CASE, JSON, *_ENDPOINT)),
}


def register(app: typer.Typer) -> None:
    s3_app = add_group(app, "s3", S3_HELP)
    for name, command in COMMANDS.items():
        add_command(s3_app, name, command)
