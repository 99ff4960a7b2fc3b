"""Shapes shared by the tool grammars."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Union

from ckptrescue.guard.decision import Decision
from ckptrescue.guard.grammar import Grammar

if TYPE_CHECKING:
    from ckptrescue.guard.context import GuardContext


@dataclass(frozen=True)
class Subcommands:
    """``tool [GLOBAL OPTIONS] SUBCOMMAND [ARGS]``: global options up to the first operand, which
    names the subcommand; each subcommand has its own grammar (or a refusal reason)."""

    tool: str
    globals: Grammar
    subs: Mapping[str, Grammar] = field(default_factory=dict)
    refused: Mapping[str, str] = field(default_factory=dict)
    bare_ok: bool = False  # the tool with global options only (e.g. --version) lists or prints
    host_namespace: bool = False


# A checker for tools whose command line is not getopt (dd's operands, find's expression)
Custom = Callable[[str, list[str], "GuardContext", int], Decision]
Entry = Union[Grammar, Subcommands, Custom]  # noqa: UP007


def refuse_if(cond: bool, reason: str) -> Decision | None:
    return Decision.refuse(reason) if cond else None


def write_target(ctx: GuardContext, path: str, what: str) -> Decision | None:
    reason = ctx.writes_forbidden(path)
    return Decision.refuse(f"{what}: {reason}") if reason else None


def grammar(tool: str, *options: str, **kw: object) -> Grammar:
    return Grammar(tool, tuple(options), **kw)  # type: ignore[arg-type]


def other_media(ctx: GuardContext, sources: list[str], dest: str, what: str) -> Decision | None:
    for src in sources:
        reason = ctx.same_media_refusal(src, dest)
        if reason:
            return Decision.refuse(f"{what}: {reason}")
    return None
