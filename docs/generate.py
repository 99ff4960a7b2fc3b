"""Regenerate the generated docs: CLI reference, finding-code table, playbook JSON Schema.

    python docs/generate.py          # write
    python docs/generate.py --check  # exit 1 when a generated file is stale (used by the tests)
    python docs/generate.py --screenshots  # also the README images (docs/screenshots.py, chromium)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ["TYPER_USE_RICH"] = "0"  # plain click help text, stable across terminals

DOCS = Path(__file__).resolve().parent


def cli_reference() -> str:
    import typer.main

    from ckptrescue.cli.main import app

    root = typer.main.get_command(app)
    out = ["# CLI reference", "",
           "Generated from `--help` by `docs/generate.py`; do not edit by hand. The conventions",
           "every command follows (positionals for the things acted on, options for how, one word",
           "for one thing, stdout/stderr, exit codes) are in [conventions.md](conventions.md).", ""]

    def walk(cmd: Any, path: list[str]) -> None:
        ctx = type(cmd).context_class(cmd, info_name=" ".join(path), terminal_width=100)
        if path != ["ckptrescue"]:
            out.append(f"## `{' '.join(path)}`")
            out.append("")
        text = cmd.get_help(ctx)
        out.append("```")
        out.extend(line.rstrip() for line in _plain(text).splitlines())
        out.append("```")
        out.append("")
        if hasattr(cmd, "list_commands"):
            for name in cmd.list_commands(ctx):
                child = cmd.get_command(ctx, name)
                if child is not None:
                    walk(child, [*path, name])

    walk(root, ["ckptrescue"])
    return "\n".join(out).rstrip() + "\n"


def _plain(text: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def finding_codes() -> str:
    from ckptrescue.codes import all_codes

    lines = ["# Finding codes", "",
             "Generated from `ckptrescue/codes/` by `docs/generate.py`; do not edit by hand.",
             "Codes are stable: two letters for the emitter, three digits.", "",
             "| code | default severity | meaning |", "|---|---|---|"]
    for code, (sev, meaning) in all_codes().items():
        lines.append(f"| `{code}` | {sev} | {meaning.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def schema() -> str:
    from ckptrescue.playbook.schema import json_schema

    return json.dumps(json_schema(), indent=2) + "\n"


def step_outputs() -> str:
    """One table per action: the typed record its steps' outputs hold (the wings' outputs.py,
    ckptrescue/engine/outputs.py), then one per record those hold."""
    from ckptrescue.actions import registry

    lines = ["# Step outputs", "",
             "Generated from the actions' output types (`ckptrescue/<wing>/outputs.py`, or its",
             "modules in `outputs/`; `ckptrescue/engine/outputs.py`) by `docs/generate.py`; do",
             "not edit by hand.",
             "Each action's steps store their outputs as a JSON artifact of this record type;",
             "playbooks refer to them as `${step_id.field}`, and the CLI, `answer.py`, the",
             "report and the TUI read them by type. Keys not listed are kept as they are.",
             "`JsonObject` is a JSON object (string keys, JSON values) whose keys the meaning",
             "lists.", ""]
    nested: list[Any] = []

    def table(rows: list[tuple[str, str, str]]) -> list[str]:
        out = ["| field | type | meaning |", "|---|---|---|"]
        out += [f"| `{field}` | `{type_name}` | {meaning.replace('|', '/')} |"
                for field, type_name, meaning in rows]
        return [*out, ""]

    for name, action in registry().items():
        kind = action.output_type
        lines += [f"## `{name}` -> `{kind.__name__}`", ""]
        if kind.json_keys is not None:
            lines += [f"`--json` prints: {', '.join(f'`{k}`' for k in kind.json_keys)}.", ""]
        todo = kind.nested()
        while todo:
            record = todo.pop(0)
            if record not in nested:
                nested.append(record)
                todo += record.nested()
        rows = kind.field_docs()
        lines += table(rows) if rows else ["No declared outputs.", ""]
    if nested:
        lines += ["## Records the outputs hold", ""]
    for record in nested:
        lines += [f"### `{record.__name__}`", ""]
        if record.__doc__ and not record.__doc__.startswith(record.__name__ + "("):
            lines += [" ".join(record.__doc__.split()), ""]
        lines += table(record.field_docs())
    return "\n".join(lines).rstrip() + "\n"


FILES = {"cli.md": cli_reference, "finding-codes.md": finding_codes,
         "playbook.schema.json": schema, "step-outputs.md": step_outputs}


def main() -> int:
    import os

    plain_env = dict(os.environ)  # the screenshots want the terminal as it is (colours)
    os.environ["COLUMNS"] = "100"
    os.environ["TERM"] = "dumb"
    os.environ["NO_COLOR"] = "1"
    check = "--check" in sys.argv
    stale = []
    for name, fn in FILES.items():
        text = fn()
        path = DOCS / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"stale generated docs: {', '.join(stale)} (run: make docs)", file=sys.stderr)
        return 1
    if "--screenshots" in sys.argv and not check:  # only when asked: slow, needs chromium
        os.environ.clear()
        os.environ.update(plain_env)
        sys.path.insert(0, str(DOCS))
        import screenshots

        return int(screenshots.main())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
