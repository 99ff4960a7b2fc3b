"""What an allowed, successful command attached or released (read from its argv as the tool
reads it): the runner records these so that the guard later lets the kit detach, unmount or
remove exactly what this case attached, and nothing else."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import PurePath

from ckptrescue.guard.grammar import Grammar, ParseError, parse
from ckptrescue.guard.tools import GRAMMARS

Change = tuple[str, str, str]  # ("attached" | "detached", "loop" | "mount" | "dm", name)


def _parsed(name: str, args: list[str]):  # noqa: ANN202 - Parsed | None
    grammar = GRAMMARS.get(name)
    if not isinstance(grammar, Grammar):
        return None
    try:
        return parse(grammar, args)
    except ParseError:
        return None


def changes(argv: Sequence[str], stdout: str) -> list[Change]:
    """The attachments a command that exited 0 made or released."""
    if not argv:
        return []
    name, args = PurePath(argv[0]).name, [str(a) for a in argv[1:]]
    p = _parsed(name, args)
    if p is None:
        return []
    if name == "losetup":
        if p.has("detach"):
            return [("detached", "loop", d) for d in (*p.values("detach"), *p.operands)]
        if p.has("show") and p.has("find") and p.operands:
            dev = stdout.strip().splitlines()[0].strip() if stdout.strip() else ""
            return [("attached", "loop", dev)] if dev.startswith("/dev/") else []
        if len(p.operands) == 2:
            return [("attached", "loop", p.operands[0])]
        return []
    if name == "mount" and len(p.operands) == 2:
        return [("attached", "mount", os.path.realpath(p.operands[1]))]
    if name == "umount":
        return [("detached", "mount", os.path.realpath(t)) for t in p.operands]
    if name == "dmsetup" and p.operands:
        if p.operands[0] == "create" and len(p.operands) >= 2:
            return [("attached", "dm", p.operands[1])]
        if p.operands[0] == "remove":
            return [("detached", "dm", n) for n in p.operands[1:]]
    return []
