"""Argv grammars: how one tool reads its command line, as data, and a parser that reads an argv
exactly as that tool would.

A :class:`Grammar` lists a tool's options the way its own source declares them (a getopt
``optstring`` and a long-option table), written here as short specs::

    "-r --read-only"        a flag: short ``-r`` and long ``--read-only`` are the same option
    "-o= --options="        takes a value (separate, ``=``-joined, or attached: ``-oVAL``)
    "--color=?"             takes an optional value (only ``--color=VAL``)

The first long name (else the short letter) is the option's *key*. :func:`parse` follows GNU
``getopt_long``: options may follow operands (permutation) unless the grammar is ``posix``;
``--`` ends the options; a long option may be abbreviated to a unique prefix (an ambiguous or
unknown one is an error); a short group ``-abc`` may hold a value-taking letter anywhere, which
takes the rest of the group or the next argument as its value. Whatever the tool would reject,
or read differently from us, is a :class:`ParseError` — and the guard refuses it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ckptrescue.guard.context import GuardContext
    from ckptrescue.guard.decision import Decision


class ParseError(ValueError):
    """The argv is not one the tool would read as we do: refused."""


@dataclass(frozen=True)
class Opt:
    key: str
    shorts: tuple[str, ...] = ()
    longs: tuple[str, ...] = ()
    arg: str = "none"  # none | required | optional


def _opt(spec: str) -> Opt:
    shorts: list[str] = []
    longs: list[str] = []
    arg = "none"
    for word in spec.split():
        kind = "none"
        if word.endswith("=?"):
            word, kind = word[:-2], "optional"
        elif word.endswith("="):
            word, kind = word[:-1], "required"
        if kind != "none":
            if arg not in ("none", kind):
                raise ValueError(f"option spec {spec!r} mixes value kinds")
            arg = kind
        if word.startswith("--"):
            longs.append(word[2:])
        elif word.startswith("-") and len(word) == 2:
            shorts.append(word[1])
        else:
            raise ValueError(f"bad option spec {spec!r}")
    key = longs[0] if longs else shorts[0]
    return Opt(key=key, shorts=tuple(shorts), longs=tuple(longs), arg=arg)


Policy = Callable[["Parsed", "GuardContext"], "Decision | None"]


@dataclass(frozen=True)
class Grammar:
    """One tool's command line. ``refuse`` maps option keys to the reason they are refused;
    ``writes``/``reads``/``commands`` name option keys whose values are files the tool writes,
    files it reads, or command lines it runs; ``policy`` checks what the data cannot say."""

    tool: str
    options: tuple[str, ...] = ()
    posix: bool = False  # options stop at the first operand (optstring "+...")
    abbreviate: bool = True  # GNU long-option abbreviation
    refuse: Mapping[str, str] = field(default_factory=dict)
    requires: Mapping[str, str] = field(default_factory=dict)  # key -> reason when absent
    writes: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    operands: tuple[int, int | None] = (0, None)  # min, max operand count
    policy: Policy | None = None
    summary: str = ""
    host_namespace: bool = False  # changes the host's mount table: runs outside the namespace
    unknown: str = ""  # said after "unknown option" (e.g. that every other option writes)
    no_double_dash: bool = False  # the tool hands what follows "--" to another program
    long_only: bool = False  # getopt_long_only: "-name" is a long option when it matches one
    devices: bool = False  # scans /dev itself (needs every device node, not only those named)
    caps: tuple[str, ...] = ()  # capabilities the tool needs beyond file access (CAP_SYS_ADMIN…)
    network: bool = False  # asks a cluster service over the network (Slurm, Kubernetes)
    # option keys whose values name a device or path the tool opens (with the operands, they
    # are pinned for a tool in the host's namespace: ``check.pins``)
    paths: tuple[str, ...] = ()
    operand_paths: bool = True  # its operands name paths (False: pool or dataset names)

    def table(self) -> tuple[dict[str, Opt], dict[str, Opt]]:
        return _tables(self.options)


_TABLES: dict[tuple[str, ...], tuple[dict[str, Opt], dict[str, Opt]]] = {}


def _tables(specs: tuple[str, ...]) -> tuple[dict[str, Opt], dict[str, Opt]]:
    cached = _TABLES.get(specs)
    if cached is not None:
        return cached
    shorts: dict[str, Opt] = {}
    longs: dict[str, Opt] = {}
    for spec in specs:
        opt = _opt(spec)
        for s in opt.shorts:
            if s in shorts:
                raise ValueError(f"duplicate short option -{s}")
            shorts[s] = opt
        for name in opt.longs:
            if name in longs:
                raise ValueError(f"duplicate long option --{name}")
            longs[name] = opt
    _TABLES[specs] = (shorts, longs)
    return shorts, longs


@dataclass
class Parsed:
    """An argv as the tool reads it: options in order (key, value) and operands."""

    tool: str
    opts: list[tuple[str, str | None]] = field(default_factory=list)
    operands: list[str] = field(default_factory=list)
    operand_at: list[int] = field(default_factory=list)  # each operand's index in the argv
    # for each option with a value: the index of the word holding it and what precedes the
    # value in that word ("" for a separate word, "--opt=" or "-o" when attached)
    value_at: list[tuple[int, str] | None] = field(default_factory=list)

    def has(self, *keys: str) -> bool:
        return any(k in keys for k, _ in self.opts)

    def values(self, key: str) -> list[str]:
        return [v for k, v in self.opts if k == key and v is not None]

    def last(self, key: str) -> str | None:
        vals = self.values(key)
        return vals[-1] if vals else None

    def option_keys(self) -> list[str]:
        return [k for k, _ in self.opts]


def resolve_long(name: str, longs: Mapping[str, Opt], *, abbreviate: bool) -> Opt:
    """The option ``--name`` means: exact match, else a unique prefix (GNU getopt_long)."""
    if name in longs:
        return longs[name]
    if not abbreviate:
        raise ParseError(f"unknown option --{name}")
    candidates = {longs[n].key: longs[n] for n in longs if n.startswith(name)}
    if not candidates:
        raise ParseError(f"unknown option --{name}")
    if len(candidates) > 1:
        raise ParseError(f"ambiguous option --{name} (could be "
                         + ", ".join("--" + c for c in sorted(candidates)) + ")")
    return next(iter(candidates.values()))


def parse(grammar: Grammar, args: list[str]) -> Parsed:
    """Read ``args`` (argv without the program name) as ``grammar``'s tool would."""
    shorts, longs = grammar.table()
    out = Parsed(tool=grammar.tool)
    i = 0
    only_operands = False
    while i < len(args):
        arg = args[i]
        i += 1
        if only_operands:
            out.operands.append(arg)
            out.operand_at.append(i - 1)
            continue
        if arg == "--":
            if grammar.no_double_dash:
                raise ParseError("'--' hands the rest to another program unchecked")
            only_operands = True
            continue
        if grammar.long_only and arg.startswith("-") and not arg.startswith("--") \
                and len(arg) > 1 and (len(arg) > 2 or arg[1] not in shorts):
            name = arg[1:].partition("=")[0]
            if name in longs or any(n.startswith(name) for n in longs):
                arg = "-" + arg  # getopt_long_only reads it as --name
            elif arg[1] not in shorts:
                raise ParseError(f"unknown option {arg}")
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            opt = resolve_long(name, longs, abbreviate=grammar.abbreviate)
            if opt.arg == "none":
                if eq:
                    raise ParseError(f"option --{name} takes no value")
                out.opts.append((opt.key, None))
                out.value_at.append(None)
            elif opt.arg == "optional":
                out.opts.append((opt.key, value if eq else None))
                out.value_at.append((i - 1, arg[: len(arg) - len(value)]) if eq else None)
            else:
                if eq:
                    out.value_at.append((i - 1, arg[: len(arg) - len(value)]))
                else:
                    if i >= len(args):
                        raise ParseError(f"option --{name} needs a value")
                    value = args[i]
                    out.value_at.append((i, ""))
                    i += 1
                out.opts.append((opt.key, value))
            continue
        if arg.startswith("-") and len(arg) > 1:
            j = 1
            while j < len(arg):
                letter = arg[j]
                j += 1
                opt = shorts.get(letter)
                if opt is None:
                    raise ParseError(f"unknown option -{letter}")
                if opt.arg == "none":
                    out.opts.append((opt.key, None))
                    out.value_at.append(None)
                    continue
                rest = arg[j:]
                if opt.arg == "optional":
                    out.opts.append((opt.key, rest or None))
                    out.value_at.append((i - 1, arg[:j]) if rest else None)
                elif rest:
                    out.opts.append((opt.key, rest))
                    out.value_at.append((i - 1, arg[:j]))
                else:
                    if i >= len(args):
                        raise ParseError(f"option -{letter} needs a value")
                    out.opts.append((opt.key, args[i]))
                    out.value_at.append((i, ""))
                    i += 1
                break
            continue
        out.operands.append(arg)
        out.operand_at.append(i - 1)
        if grammar.posix:
            only_operands = True
    _check_operands(grammar, out)
    return out


def _check_operands(grammar: Grammar, out: Parsed) -> None:
    lo, hi = grammar.operands
    if len(out.operands) < lo:
        raise ParseError(f"needs at least {lo} operand(s)")
    if hi is not None and len(out.operands) > hi:
        raise ParseError(f"takes at most {hi} operand(s), got {len(out.operands)}")


def long_names(grammar: Grammar) -> list[str]:
    return sorted(grammar.table()[1])


def short_letters(grammar: Grammar) -> list[str]:
    return sorted(grammar.table()[0])
