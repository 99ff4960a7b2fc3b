"""CLI wiring and the only place where exceptions become exit codes and one-line messages.

Command groups live in their own modules, each exposing ``register(app)``. Modules import only
light things at import time; torch, tensorflow, boto3 and textual are imported inside commands.
"""

from __future__ import annotations

import copy
import gc
import importlib
import os
import sys
from typing import Annotated

import typer

from ckptrescue import __version__
from ckptrescue.cli import coercion, lost_interrupt
from ckptrescue.cli.help_words import HelpWordsGroup
from ckptrescue.cli.output import interrupt_said
from ckptrescue.display import shown, shown_text
from ckptrescue.errors import CkptRescueError, ExitCode, os_error_line

# Command modules, in help order. A module that is not present yet is skipped.
_COMMAND_MODULES = (
    "case_cmd", "exec_cmd", "probe_cmd", "resume_cmd", "storage_cmd", "writeblock_cmd", "s3_cmd",
    "store_cmd", "dataset_cmd", "hub_cmd", "recover_cmd", "watch_cmd", "analysis_cmd",
    "playbook_cmd", "report_cmd", "drill_cmd", "tui_cmd",
)
# The top-level command names each module registers: a command line that names one builds that
# module's commands only, not all of them (tests/cli/test_cli_routes.py keeps this true).
ROUTES: dict[str, str] = {
    "case": "case_cmd", "exec": "exec_cmd", "probe": "probe_cmd", "salvage": "probe_cmd",
    "rank": "probe_cmd", "resume": "resume_cmd", "devices": "storage_cmd",
    "triage": "storage_cmd", "image": "storage_cmd", "copy": "storage_cmd",
    "mount": "storage_cmd", "umount": "storage_cmd", "locate": "storage_cmd",
    "extract": "storage_cmd", "fs": "storage_cmd", "writeblock": "writeblock_cmd",
    "s3": "s3_cmd", "store": "store_cmd", "manifest": "dataset_cmd", "dataset": "dataset_cmd",
    "hub": "hub_cmd", "recover": "recover_cmd", "watch": "watch_cmd",
    "trainstate": "analysis_cmd", "gate": "analysis_cmd", "playbook": "playbook_cmd",
    "report": "report_cmd", "drill": "drill_cmd", "tui": "tui_cmd",
}
HELP = (
    "Forensic incident response for corrupted ML training checkpoints and datasets.\n\n"
    "Preserve evidence, inspect it read-only, find which files, objects and tensors are "
    "damaged, pick the checkpoint to resume from, salvage what is intact, and write an "
    "auditable incident report.\n\n"
    "Results go to stdout, progress and diagnostics to stderr. An expected failure is "
    "one line (ckptrescue: error: ...), with a hint line when there is one; put --debug "
    "before the command (or set CKPTRESCUE_DEBUG=1) to see the traceback behind it. "
    "Conventions shared by every command: docs/conventions.md."
)


def new_app(modules: tuple[str, ...] = _COMMAND_MODULES) -> typer.Typer:
    """The command tree of ``modules`` (default: every command)."""
    coercion.install()  # values converted as typer does, without a pydantic model each
    app = typer.Typer(
        name="ckptrescue",
        cls=HelpWordsGroup,  # --help names values in words (docs/conventions.md)
        help=HELP,
        no_args_is_help=True,
        pretty_exceptions_show_locals=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,  # plain help: option text such as "[cluster]" is shown as written
        add_completion=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_root)
    for name in modules:
        try:
            module = importlib.import_module(f"ckptrescue.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"ckptrescue.cli.{name}":
                continue
            raise
        module.register(app)
    return app


def app_for(argv: list[str]) -> typer.Typer:
    """The smallest command tree that runs ``argv``: the module of the command it names, else
    (help, a version, a mistyped command) every command."""
    words = [a for a in argv if a not in ("--debug",)]
    if words and words[0] in ROUTES:
        return _only_named(new_app((ROUTES[words[0]],)), words)
    if words[:1] == ["--version"]:
        return new_app(())  # the root's own option: no command is needed to answer it
    return new_app()


def _only_named(app: typer.Typer, words: list[str]) -> typer.Typer:
    """``app`` (a tree of one module's commands) with only what ``words`` name: the top-level
    command (``probe``, not ``salvage`` and ``rank`` beside it), or the group's subcommand
    (``manifest build``): typer makes a click command of each command it keeps. A group named
    alone, with ``--help`` or with a mistyped subcommand keeps them all (its help lists them,
    its error suggests one)."""
    command = [c for c in app.registered_commands if c.name == words[0]]
    if command:  # this tree's own lists (new_app makes the root anew)
        app.registered_commands = command
        app.registered_groups = []
        return app
    app.registered_commands = []
    app.registered_groups = [g for g in app.registered_groups if words[0] in (
        g.name, g.typer_instance.info.name if g.typer_instance is not None else None)]
    for group in app.registered_groups:
        if group.typer_instance is None or len(words) < 2:
            continue
        named = [c for c in group.typer_instance.registered_commands if c.name == words[1]]
        if named and not group.typer_instance.registered_groups:
            # this tree's own copy: a group declared at module level serves every tree
            group.typer_instance = copy.copy(group.typer_instance)
            group.typer_instance.registered_commands = named
    return app


def __getattr__(name: str) -> typer.Typer:
    """``cli.main.app``: the whole command tree (documentation, tests), built when asked for."""
    if name == "app":
        app = new_app()
        globals()["app"] = app
        return app
    raise AttributeError(name)


_STATE = {"debug": False, "collection_paused": False}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ckptrescue {__version__}")
        raise typer.Exit(0)


def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
    debug: Annotated[bool, typer.Option(
        "--debug", help="Show the traceback behind an error (or set CKPTRESCUE_DEBUG=1); "
        "without it every expected failure is one line.")] = False,
) -> None:
    _STATE["debug"] = debug or bool(os.environ.get("CKPTRESCUE_DEBUG"))
    _resume_collection()  # the command line is parsed: start-up is over


def _resume_collection() -> None:
    """End the pause of collection that ``cli.process.main`` began: what start-up made is
    frozen (kept to the end, so never walked again, at exit neither) and the command's own
    objects are collected as usual."""
    if _STATE["collection_paused"]:
        _STATE["collection_paused"] = False
        gc.freeze()
        gc.enable()


def run(argv: list[str] | None = None, *, collection_paused: bool = False) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``) and return its exit code.

    Every exception becomes its exit code and a one-line message on stderr here, and only here.
    ``collection_paused``: the caller paused garbage collection for start-up
    (``cli.process.main``); it resumes once the command line is parsed, and at the latest
    when this returns.
    """
    _STATE["collection_paused"] = collection_paused
    try:
        return _run(argv)
    finally:
        _resume_collection()  # a command line that never reached a command (usage, --help)


def _run(argv: list[str] | None) -> int:
    import signal

    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler \
            and getattr(signal.getsignal(signal.SIGINT), "__module__", "") == "ckptrescue.cli":
        signal.signal(signal.SIGINT, signal.default_int_handler)  # started: Ctrl-C as usual
    lost_interrupt.install()  # a Ctrl-C raised inside a callback is raised again, not lost
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv or bool(os.environ.get("CKPTRESCUE_DEBUG"))
    interrupt_said(reset=True)
    interrupts = lost_interrupt.arrived()
    try:
        result = app_for(argv)(args=argv, prog_name="ckptrescue", standalone_mode=False)
        code = int(result) if isinstance(result, int) else 0
        if code != ExitCode.INTERRUPT and lost_interrupt.arrived() > interrupts:
            # a Ctrl-C came, and something the command ran swallowed it: it ran on to its end
            _error_line("ckptrescue: interrupted, too late to stop the command: a library it "
                        "was running swallowed the Ctrl-C, and it ran on to its end")
            code = int(ExitCode.INTERRUPT)
        elif code == ExitCode.INTERRUPT and not interrupt_said():
            # typer turns an unhandled Ctrl-C into 130; only a command that knows what it
            # kept says more (cli/output.interrupted)
            _error_line("ckptrescue: interrupted")
    except CkptRescueError as exc:
        if debug:
            _print_traceback()
        _error_line(f"ckptrescue: error: {exc.message}")
        if exc.hint:
            _error_line(f"  hint: {exc.hint}")
        code = int(exc.exit_code)
    except (KeyboardInterrupt, typer.Abort):  # click turns Ctrl-C into Abort
        # only a command that knows what it kept says so; nothing is claimed here
        _error_line("ckptrescue: interrupted")
        code = int(ExitCode.INTERRUPT)
    except typer.Exit as exc:
        code = int(exc.exit_code or 0)
    except _click_exceptions() as exc:  # usage errors from click (they quote what was typed)
        import io

        shown_usage = io.StringIO()
        exc.show(file=shown_usage)
        sys.stderr.write(shown_text(shown_usage.getvalue()))
        code = int(ExitCode.USAGE)
    except OSError as exc:  # a path the system refused: an expected failure, one line
        if debug:
            _print_traceback()
        _error_line(f"ckptrescue: error: {os_error_line(exc)}")
        code = int(ExitCode.FAILURE)
    except Exception as exc:  # an internal failure: one line unless --debug
        if debug:
            _print_traceback()
        _error_line(f"ckptrescue: internal error: {type(exc).__name__}: {exc}")
        code = int(ExitCode.FAILURE)
    return code


def _print_traceback() -> None:
    """The traceback behind an error (``--debug``); its module is imported only then."""
    import traceback

    traceback.print_exc()


def _error_line(text: str) -> None:
    """One line on stderr; names in it are shown, never obeyed."""
    sys.stderr.write(shown(text) + "\n")
    sys.stderr.flush()


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
