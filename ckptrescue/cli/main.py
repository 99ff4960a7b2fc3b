"""CLI wiring and the only place where exceptions become exit codes and one-line messages.

Command groups live in their own modules, each exposing ``register(app)``. Modules import only
light things at import time; torch, tensorflow, boto3 and textual are imported inside commands.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from typing import Annotated

import typer

from ckptrescue import __version__
from ckptrescue.errors import CkptRescueError, ExitCode

# Command modules, in help order. A module that is not present yet is skipped.
_COMMAND_MODULES = (
    "case_cmd", "exec_cmd", "probe_cmd", "storage_cmd", "writeblock_cmd", "s3_cmd", "store_cmd",
    "dataset_cmd", "recover_cmd", "watch_cmd", "analysis_cmd", "playbook_cmd", "report_cmd",
    "drill_cmd", "tui_cmd",
)

app = typer.Typer(
    name="ckptrescue",
    help=(
        "Forensic incident response for corrupted ML training checkpoints and datasets.\n\n"
        "Preserve evidence, inspect it read-only, find which files, objects and tensors are "
        "damaged, pick the checkpoint to resume from, salvage what is intact, and write an "
        "auditable incident report."
    ),
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: option text such as "[cluster]" is shown as written
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_STATE = {"debug": False}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ckptrescue {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
) -> None:
    _STATE["debug"] = debug or bool(os.environ.get("CKPTRESCUE_DEBUG"))


def _register_all() -> None:
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(f"ckptrescue.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"ckptrescue.cli.{name}":
                continue
            raise
        module.register(app)


_register_all()


def main() -> None:
    """Console-script entry point."""
    sys.exit(run())


def run(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``) and return its exit code.

    Every exception becomes its exit code and a one-line message on stderr here, and only here.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv or bool(os.environ.get("CKPTRESCUE_DEBUG"))
    try:
        result = app(args=argv, prog_name="ckptrescue", standalone_mode=False)
        code = int(result) if isinstance(result, int) else 0
        if code == ExitCode.INTERRUPT:  # typer turns Ctrl-C into exit code 130
            sys.stderr.write("ckptrescue: interrupted; partial results are kept in the case\n")
    except CkptRescueError as exc:
        if debug:
            traceback.print_exc()
        sys.stderr.write(f"ckptrescue: error: {exc.message}\n")
        if exc.hint:
            sys.stderr.write(f"  hint: {exc.hint}\n")
        elif not debug:
            sys.stderr.write("  (set CKPTRESCUE_DEBUG=1, or put --debug before the command, for "
                             "a traceback)\n")
        code = int(exc.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("ckptrescue: interrupted; partial results are kept in the case\n")
        code = int(ExitCode.INTERRUPT)
    except typer.Exit as exc:
        code = int(exc.exit_code or 0)
    except typer.Abort:
        sys.stderr.write("ckptrescue: aborted\n")
        code = int(ExitCode.INTERRUPT)
    except _click_exceptions() as exc:  # usage errors from click
        exc.show()
        code = int(ExitCode.USAGE)
    except Exception as exc:  # an internal failure: one line unless --debug
        if debug:
            traceback.print_exc()
        sys.stderr.write(f"ckptrescue: internal error: {type(exc).__name__}: {exc}\n")
        sys.stderr.write("  (set CKPTRESCUE_DEBUG=1, or put --debug before the command, for "
                         "a traceback)\n")
        code = int(ExitCode.FAILURE)
    return code


def _click_exceptions() -> tuple[type[Exception], ...]:
    """Usage errors from click, and from the copy of click that newer typer versions vendor."""
    found: list[type[Exception]] = []
    try:
        import click

        found.append(click.ClickException)
    except ImportError:  # pragma: no cover
        pass
    try:
        from typer import _click  # type: ignore[attr-defined]

        found.append(_click.ClickException)
    except ImportError:
        pass
    return tuple(found)
