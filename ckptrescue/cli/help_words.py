"""How ``--help`` names values: the words of docs/conventions.md, never a Python type.

Typer shows a value it was given no metavar for by its Python type (``--case <path>``,
``--jobs <int range>``, ``PATH|URL <list[str]>``) and a positional by its parameter name
(``case_dir``). Once the command tree is built (``HelpWordsGroup``, the root group's class),
every value is named as docs/conventions.md spells it: ``--case DIR``, ``-j, --jobs N``,
``--scheduler ADDRESS``, ``--endpoint-url URL``, ``--manifest FILE``; otherwise by what it holds
(``PATH``, ``N``, ``NUMBER``, or the option's own word: ``--region REGION``); positionals in
capitals (``CASE_DIR``), without a type after them.

Example commands are shown as written, one per line: click rewraps every paragraph to the
terminal's width, which broke ``--fill-from`` into ``--fill-`` / ``from`` and put the end of a
command on a line of its own, so that a copied line ran a different command. An indented
paragraph of ``ckptrescue ...`` lines is marked not to be rewrapped (click's ``\\b``).
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperGroup

# docs/conventions.md, "The same word for the same thing"
BY_OPTION = {
    "--case": "DIR", "--output": "FILE", "--to": "DIR", "--dest": "DIR", "--jobs": "N",
    "--scheduler": "ADDRESS", "--endpoint-url": "URL", "--manifest": "FILE", "--state": "PATH",
    "--param": "KEY=VALUE", "--params-file": "FILE", "--webhook": "URL", "--expect-head": "HASH",
    "--version": "VERSION",
}


def _by_type(param: Any) -> str | None:
    """PATH, N or NUMBER from what typer knows of the value's type; None for text."""
    described = getattr(param, "type_descriptor", None)
    annotation = str(getattr(described, "annotation", ""))
    if "Path" in annotation:
        return "PATH"
    if "float" in annotation:
        return "NUMBER"
    if "int" in annotation:
        return "N"
    return None


def _option_word(param: Any) -> str:
    long = next((o for o in param.opts if o.startswith("--")), param.opts[0])
    if long in BY_OPTION:
        return BY_OPTION[long]
    return _by_type(param) or long.lstrip("-").replace("-", "_").upper()


NO_REWRAP = "\b"  # click: the paragraph after this line is printed as written


def examples_as_written(text: str) -> str:
    """``text`` with each paragraph of indented ``ckptrescue`` command lines marked so that
    click prints it as written."""
    paragraphs = text.split("\n\n")
    for i, para in enumerate(paragraphs):
        lines = para.split("\n")
        if (lines and all(ln.startswith(" ") and ln.strip() for ln in lines)
                and lines[0].strip().startswith("ckptrescue ")):
            paragraphs[i] = NO_REWRAP + "\n" + para
    return "\n\n".join(paragraphs)


def name_values(command: Any) -> None:
    """Give every value of ``command`` and its subcommands a metavar in words, and keep its
    example commands as written."""
    for sub in (getattr(command, "commands", None) or {}).values():
        name_values(sub)
    if getattr(command, "help", None):
        command.help = examples_as_written(command.help)
    for param in getattr(command, "params", []):
        if param.param_type_name == "argument":
            param.metavar = (param.metavar or param.name or "").upper()
            # the argument's own help says what it is: no <type> after its name
            param.display_type_rich = lambda ctx: None
        elif param.metavar is None and not (getattr(param, "is_flag", False)
                                            or getattr(param, "count", False)):
            param.metavar = _option_word(param)


class HelpWordsGroup(TyperGroup):
    """The root group: once the whole tree is built, its values are named in words."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        name_values(self)
