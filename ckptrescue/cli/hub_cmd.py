"""``ckptrescue hub verify``: the Hugging Face hub cache checked offline (issue #31), generated
from the hub.verify action; this module only says how it shows its step's outputs."""

from __future__ import annotations

import typer

from ckptrescue.cli.from_action import JSON, Command, StepResult, add_command
from ckptrescue.cli.output import emit_json, say
from ckptrescue.datasets.outputs import HubCacheOutput
from ckptrescue.errors import ExitCode

hub_app = typer.Typer(help="The Hugging Face hub cache, verified offline.", no_args_is_help=True)


def render_verify(result: StepResult) -> int:
    out: HubCacheOutput = result.out
    if result.options[JSON]:
        emit_json(result.outputs)
        return int(ExitCode.OK if out.ok else ExitCode.FINDINGS)
    for repo in out.repos:
        label = f"{repo['repo_type']} {repo['repo_id']}"
        refs = {}
        for name, commit in repo.get("refs", {}).items():
            refs.setdefault(commit, []).append(name)
        for b in repo.get("blobs", []):
            if b["status"] == "incomplete":
                say(f"INCOMPLETE {label}: blobs/{b['name']} ({b['size']} bytes)")
            elif b["status"] == "mismatch":
                say(f"DAMAGED    {label}: blobs/{b['name']} hashes to {b['actual']}"
                    + (f"; used by {', '.join(b['linked_from'])}" if b["linked_from"] else ""))
            else:
                say(f"{b['status'].upper():<10} {label}: blobs/{b['name']}: {b.get('error')}")
        for rev, why in repo.get("broken_revisions", {}).items():
            names = f" ({', '.join(refs[rev])})" if rev in refs else ""
            say(f"BROKEN     {label}@{rev}{names}")
            for line in why:
                say(f"    {line}")
        for p in repo.get("problems", []):
            say(f"NOTE       {label}: {p}")
    for p in out.problems:
        say(f"NOTE       {p}")
    say(out.answer)
    return int(ExitCode.OK if out.ok else ExitCode.FINDINGS)


def register(app: typer.Typer) -> None:
    add_command(hub_app, "verify", Command(  # --cache DIR: the old spelling
        "hub.verify", render_verify, optional=("cache",), deprecated={"--cache": "cache"}))
    app.add_typer(hub_app, name="hub")
