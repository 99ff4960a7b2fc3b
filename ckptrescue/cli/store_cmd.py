"""``ckptrescue store verify|history|preflight|preserve|restore URL``: generated from the store
wing's actions (``stores/actions.py``: S3, Azure Blob and GCS, one implementation each); their
text and exit codes are ``stores/render.py``'s, this module only registers them. The ``s3``
commands are the same actions for s3:// URLs (``cli/s3_cmd.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from ckptrescue.cli.from_action import CASE, JSON, Command, StepResult, add_command, add_group
from ckptrescue.cli.output import show
from ckptrescue.stores import render

if TYPE_CHECKING:
    from ckptrescue.engine.action import ActionArgs

STORE_HELP = ("Object stores (S3, Azure Blob, GCS), read-only: checksums, "
              "versions, retention, preserve and restore into local folders.")


def render_store(result: StepResult) -> int:
    return show(render.store(result.out, result.findings), json=result.options[JSON],
                data=result.outputs)


def verify_partial(result: StepResult) -> None:
    """Verification stopped early: what it established, before the error."""
    show(render.verify_partial(result.outputs.get("objects", [])), json=result.options[JSON],
         data=result.outputs)


def check_preserve(args: ActionArgs, options: dict[str, Any]) -> None:
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
    store_app = add_group(app, "store", STORE_HELP)
    for verb in ("verify", "history", "preflight", "preserve", "restore"):
        add_command(store_app, verb, Command(f"store.{verb}", render_store,
                                             **SETTINGS.get(verb, {})))
