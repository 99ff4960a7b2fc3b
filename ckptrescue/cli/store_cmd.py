"""``ckptrescue store verify|history|preflight|preserve|restore URL``: generated from the
store.* actions (S3, Azure Blob, GCS side by side)."""

from __future__ import annotations

from typing import Any

import typer

from ckptrescue.cli.from_action import Command, StepResult, add_command
from ckptrescue.cli.output import emit_json, say
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


# store verify URL [LOCAL_DIR], as s3 verify URL LOCAL_DIR (--local DIR: the old spelling)
SETTINGS: dict[str, dict[str, Any]] = {
    "verify": {"optional": ("local",), "deprecated": {"--local": "local"}},
    # restore --manifest M, as s3 restore (--known-good-manifest M: the old spelling)
    "restore": {"deprecated": {"--known-good-manifest": "known_good_manifest"}},
}


def register(app: typer.Typer) -> None:
    for verb in ("verify", "history", "preflight", "preserve", "restore"):
        add_command(store_app, verb, Command(f"store.{verb}", render, **SETTINGS.get(verb, {})))
    app.add_typer(store_app, name="store")
