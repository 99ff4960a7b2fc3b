"""A command line builds only the commands of the module it names (cli/main.ROUTES), so every
top-level command a module registers must be routed to that module, and only those."""

from __future__ import annotations

import importlib
from pathlib import Path

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


def _subcommands(app: typer.Typer) -> dict[str, list[str]]:
    return {g.name: [c.name for c in g.typer_instance.registered_commands]
            for g in app.registered_groups if g.typer_instance is not None}


def test_a_tree_built_again_has_the_same_commands() -> None:
    """A group's subcommands belong to one tree: building the tree again (the tests' in-process
    runs build hundreds in a process) neither adds them twice nor makes the next tree
    slower."""
    first = _subcommands(main.new_app())
    for _ in range(3):
        again = _subcommands(main.new_app())
    assert again == first
    assert all(len(names) == len(set(names)) for names in first.values()), first
    assert first["manifest"] == ["build", "audit", "update", "diff"]


def test_a_named_subcommand_is_the_only_one_made_and_the_group_alone_keeps_all() -> None:
    whole = _subcommands(main.app_for(["manifest", "--help"]))["manifest"]
    assert len(whole) == 4
    assert _subcommands(main.app_for(["manifest", "build", "d", "-o", "m"]))["manifest"] == \
        ["build"]
    assert _subcommands(main.app_for(["--debug", "store", "verify"]))["store"] == ["verify"]
    assert _subcommands(main.app_for(["manifest", "buidl"]))["manifest"] == whole
    # what a responder sees is the same: the command's help, the group's list, a typo's hint
    built = invoke("manifest", "build", "--help")
    assert built.returncode == 0 and "--jobs" in built.stdout
    group = invoke("manifest", "--help")
    assert group.returncode == 0 and all(n in group.stdout for n in whole)
    typo = invoke("manifest", "buidl")
    assert typo.returncode == 2 and "buidl" in typo.stderr


def test_a_group_declared_once_keeps_its_commands_for_the_next_tree() -> None:
    """``playbook``'s commands are declared on a module-level group: leaving the others out of
    one tree leaves them in the next."""
    assert _subcommands(main.app_for(["playbook", "list"]))["playbook"] == ["list"]
    assert "run" in _subcommands(main.app_for(["playbook", "run", "x"]))["playbook"]
    assert len(_subcommands(main.app_for(["playbook", "--help"]))["playbook"]) > 2


def test_a_named_top_level_command_is_the_only_one_made() -> None:
    """``image`` is made without ``triage``, ``mount`` or the ``fs`` group its module also
    registers; its help and its usage errors are its own."""
    app = main.app_for(["image", "--help"])
    assert [c.name for c in app.registered_commands] == ["image"] and not app.registered_groups
    app = main.app_for(["fs", "inspect", "x"])
    assert not app.registered_commands and _subcommands(app) == {"fs": ["inspect"]}
    shown = invoke("image", "--help")
    assert shown.returncode == 0 and "Usage: ckptrescue image [OPTIONS]" in shown.stdout
    missing = invoke("salvage")
    assert missing.returncode == 2 and "Usage: ckptrescue salvage" in missing.stderr


def test_a_command_builds_and_imports_only_what_it_runs(tmp_path: Path) -> None:
    """``manifest build`` (the kit's start-up is a fixed cost of every build) makes its own
    command alone: not the other seven of its module nor their action modules and records, and
    it hashes without the modules only other commands use (logging, concurrent.futures, the
    CRC32C extension)."""
    import subprocess
    import sys

    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(bytes(range(256)) * 64)
    code = ("import sys\n"
            "from ckptrescue.cli.main import run\n"
            "assert run(['manifest', 'build', sys.argv[1], '-o', sys.argv[2], '--jobs', '2',"
            " '--no-progress']) == 0\n"
            "mods = [m for m in sys.modules if m.startswith(('ckptrescue.datasets.actions.',"
            " 'ckptrescue.datasets.outputs.')) or m in ('logging', 'concurrent.futures',"
            " 'google_crc32c')]\n"
            "print(sorted(mods))\n")
    out = subprocess.run([sys.executable, "-c", code, str(data), str(tmp_path / "m.sha256")],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    assert out.splitlines()[-1] == ("['ckptrescue.datasets.actions.manifests', "
                                    "'ckptrescue.datasets.outputs.manifests']")
