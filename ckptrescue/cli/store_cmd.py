"""``ckptrescue store verify|history|preflight|preserve|restore URL``: generated from the
store.* actions (S3, Azure Blob, GCS: one implementation each, ``ckptrescue/stores/``; the
``s3`` commands are these for s3:// URLs)."""

from __future__ import annotations

from typing import Any

import typer

from ckptrescue.cli.from_action import CASE, Command, StepResult, add_command
from ckptrescue.cli.output import emit_json, say
from ckptrescue.cli.s3_cmd import verify_partial
from ckptrescue.engine.outputs import StoreResultOutput
from ckptrescue.errors import ExitCode

store_app = typer.Typer(help="Object stores (S3, Azure Blob, GCS), read-only: checksums, "
                             "versions, retention, preserve and restore into local folders.",
                        no_args_is_help=True)


def render(result: StepResult) -> int:
    out: StoreResultOutput = result.out
    if result.options["json"]:
        emit_json(result.outputs)
    else:
        for f in result.findings:
            if str(f.severity) != "info":
                say(f"[{f.code}] {f.title}")
        say(out.answer)
    return int(ExitCode.OK if out.ok and not any(
        str(f.severity) in ("error", "critical") for f in result.findings) else ExitCode.FINDINGS)


def check_preserve(args: dict[str, Any], options: dict[str, Any]) -> None:
    from ckptrescue.errors import UsageError

    if not args.get("dest") and options[CASE] is None:
        raise UsageError("store preserve: give --dest DIR (a local folder) or --case CASE "
                         "(into its evidence)")


# store verify URL [LOCAL_DIR], as s3 verify URL LOCAL_DIR (--local DIR: the old spelling)
SETTINGS: dict[str, dict[str, Any]] = {
    "verify": {"optional": ("local_dir",), "deprecated": {"--local": "local_dir"},
               "on_failure": verify_partial},
    # its stderr is its errors (a script reads the first line): no progress lines
    "preserve": {"check": check_preserve, "quiet": lambda args, options: True},
    # restore --manifest M, as s3 restore (--known-good-manifest M: the old spelling)
    "restore": {"deprecated": {"--known-good-manifest": "manifest"}},
}


def register(app: typer.Typer) -> None:
    for verb in ("verify", "history", "preflight", "preserve", "restore"):
        add_command(store_app, verb, Command(f"store.{verb}", render, **SETTINGS.get(verb, {})))
    app.add_typer(store_app, name="store")
