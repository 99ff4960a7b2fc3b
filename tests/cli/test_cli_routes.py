"""A command line builds only the commands of the module it names (cli/main.ROUTES), so every
top-level command a module registers must be routed to that module, and only those."""

from __future__ import annotations

import importlib

import typer
from cli_helpers import invoke

from ckptrescue.cli import main


def _registered(module: str) -> set[str]:
    app = typer.Typer()
    importlib.import_module(f"ckptrescue.cli.{module}").register(app)
    return ({c.name for c in app.registered_commands}
            | {g.name or g.typer_instance.info.name for g in app.registered_groups})


def test_every_command_is_routed_to_the_module_that_registers_it() -> None:
    routed: dict[str, str] = {}
    for module in main._COMMAND_MODULES:
        for name in _registered(module):
            routed[name] = module
    assert routed == main.ROUTES


def test_a_routed_command_runs_and_the_rest_still_gets_the_whole_tree() -> None:
    assert invoke("probe", "--help").returncode == 0
    assert invoke("--debug", "case", "--help").returncode == 0
    whole = invoke("--help")
    assert whole.returncode == 0 and all(name in whole.stdout for name in main.ROUTES)
    wrong = invoke("prbe", "x")
    assert wrong.returncode == 2 and "prbe" in wrong.stderr
