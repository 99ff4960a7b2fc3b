"""The guard's entry point: ``check(argv, ctx)`` reads the argv with the tool's grammar and
decides. Unknown tool, unknown option, unparseable argv: refused."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import PurePath

from ckptrescue.guard.context import GuardContext
from ckptrescue.guard.decision import Decision
from ckptrescue.guard.grammar import Grammar, Parsed, ParseError, parse
from ckptrescue.guard.tools import GRAMMARS, REFUSED, Subcommands
from ckptrescue.guard.tools.filesystems import E2FSCK

# /proc/self/fd/N, /proc/PID/root, /dev/fd/N: the guard and the tool would resolve them in
# different processes (and the tool's /proc is its own namespace's)
_PROCESS_RELATIVE = re.compile(
    r"^/+(proc/+(self|thread-self|\d+)/+(task/+\d+/+)?(fd|root|cwd|exe|map_files)(/|$)|dev/+fd(/|$))")
MAX_DEPTH = 3  # commands inside commands (rsync -e, find -exec)
STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def check(argv: Sequence[str], ctx: GuardContext | None = None, *, depth: int = 0) -> Decision:
    """Decide whether ``argv`` may run. ``argv[0]`` is a tool name or a path to it."""
    ctx = ctx or GuardContext()
    if not argv:
        return Decision.refuse("empty command")
    if any(not isinstance(a, str) for a in argv):
        return Decision.refuse("arguments must be strings")
    if any("\x00" in a for a in argv):
        return Decision.refuse("an argument holds a NUL byte")
    if depth > MAX_DEPTH:
        return Decision.refuse("commands nested too deeply")
    name = PurePath(argv[0]).name
    args = list(argv[1:])
    for arg in args:
        for cand in (arg, arg.partition("=")[2]):
            if cand and process_relative(cand):
                return Decision.refuse(f"{cand}: a path relative to a process (its descriptors, "
                                       "its root) names one thing to the guard and another to "
                                       "the tool; give the file itself")
    if "/" in argv[0]:
        # judged by name, so a path must be that very tool, not a same-named other program
        on_path = shutil.which(name, path=STANDARD_PATH)
        if on_path is None or os.path.realpath(argv[0]) != os.path.realpath(on_path):
            return Decision.refuse(f"{argv[0]} is not the {name} installed on the system PATH; "
                                   "give the tool by name")
    script = _script_resplits(name, args)
    if script:
        return Decision.refuse(script)
    if name.startswith(("mkfs", "mke2fs", "mkswap")):
        return Decision.refuse(f"{name} creates a filesystem: it destroys what is on the target")
    if name in REFUSED:
        return Decision.refuse(REFUSED[name])
    entry = GRAMMARS.get(name)
    if entry is None and name.startswith("fsck."):
        entry = GRAMMARS["fsck"] if name == "fsck.xfs" else E2FSCK if name.startswith("fsck.ext") else None
    if entry is None:
        return Decision.refuse(
            f"{name} is not on the read-only allowlist (unknown commands are refused by default)")
    try:
        if isinstance(entry, Grammar):
            decision = _by_grammar(name, entry, args, ctx, depth)
        elif isinstance(entry, Subcommands):
            decision = _by_subcommand(name, entry, args, ctx, depth)
        else:
            decision = entry(name, args, ctx, depth)
        if decision.allowed:
            for dev in devices_named(args):
                reason = ctx.device_refusal(dev)
                if reason:
                    return Decision.refuse(f"{name}: {reason}")
        return decision
    except ParseError as exc:
        return Decision.refuse(f"{name}: {exc} (the guard refuses what it cannot read exactly "
                               "as the tool does)")
    except (ValueError, TypeError, KeyError, IndexError) as exc:  # a bug is a refusal, never a pass
        return Decision.refuse(f"{name}: the guard could not judge this argv ({exc})")


# what a shell script would split or expand in an unquoted $@ / $1: whitespace, globs, ~
_SHELL_SPLIT = frozenset(" \t\n\r\v\f*?[]{}~")


def _script_resplits(name: str, args: Sequence[str]) -> str | None:
    """Tools that are shell scripts (``xfs_metadump``, ``fsck`` wrappers, ...) may pass their
    operands on unquoted: a word the guard reads as one argument would become several, or a
    glob, inside the script (``xfs_metadump DEV " DEV"``). Such words are refused for a script;
    a binary gets its argv as is."""
    exe = shutil.which(name, path=STANDARD_PATH)
    if exe is None:
        return None
    try:
        with open(exe, "rb") as fh:
            if fh.read(2) != b"#!":
                return None
    except OSError:
        return None
    for arg in args:
        bad = sorted(set(arg) & _SHELL_SPLIT)
        if bad:
            return (f"{name} is a shell script ({exe}): its argument {arg!r} holds spaces or "
                    f"glob characters ({' '.join(repr(c) for c in bad)}), which the script "
                    "could split or expand into other arguments; rename or link the file to a "
                    "plain name")
    return None


def process_relative(word: str, *, hops: int = 40) -> bool:
    """Whether ``word``, read as a path the way the kernel walks it, passes through a process's
    descriptors, root or working directory (``/proc/self/fd/N``, ``/proc/PID/root``,
    ``/dev/fd/N``): spelt so (``/proc/./self/fd/3``, ``../../proc/1/root`` from the working
    directory) or reached through a symlink along the way. Each symlink on the path is
    followed by hand (never a magic link: a path reaching one is the answer)."""
    path = os.path.normpath(os.path.join(os.getcwd(), word))
    for _ in range(hops):
        if _PROCESS_RELATIVE.match(path):
            return True
        parts = path.split("/")
        cur = ""
        for i in range(1, len(parts)):
            cur = f"{cur}/{parts[i]}"
            try:
                if not os.path.islink(cur):
                    continue
                target = os.readlink(cur)
            except (OSError, ValueError):
                return False
            path = os.path.normpath(os.path.join(os.path.dirname(cur), target, *parts[i + 1:]))
            break
        else:
            return False
    return True  # more links than a kernel would follow: not a path anyone should give


def devices_named(args: Sequence[str]) -> list[str]:
    """Every word of an argv that could name a device: the word, what follows its first
    ``=``, and each ``KEY=VALUE`` of a comma list (``-o logdev=/dev/X``). The guard asks the
    kernel about each that is a block device."""
    out: list[str] = []
    for arg in args:
        out.append(arg)
        out.append(arg.partition("=")[2])
        if "," in arg:
            out += [t.partition("=")[2] or t for t in arg.split(",")]
    return [a for a in dict.fromkeys(out) if a]


def _by_subcommand(name: str, entry: Subcommands, args: list[str], ctx: GuardContext,
                   depth: int) -> Decision:
    parsed = parse(entry.globals, args)
    for key in parsed.option_keys():  # a global option may be refused whatever follows
        if key in entry.globals.refuse:
            return Decision.refuse(entry.globals.refuse[key])
    if not parsed.operands:
        if entry.bare_ok or parsed.opts:
            return Decision.allow()
        return Decision.refuse(f"{name} needs a command")
    sub, rest = parsed.operands[0], parsed.operands[1:]
    if sub in entry.refused:
        return Decision.refuse(entry.refused[sub])
    grammar = entry.subs.get(sub)
    if grammar is None:
        return Decision.refuse(f"{name} {sub} is not on the read-only allowlist")
    try:
        decision = _by_grammar(f"{name} {sub}", grammar, rest, ctx, depth)
    except ParseError as exc:
        raise ParseError(f"{sub}: {exc}") from exc
    if decision.pins:  # indices into the words after the subcommand
        shift = parsed.operand_at[0] + 1
        decision = replace(decision, pins=tuple((i + shift, w) for i, w in decision.pins))
    return decision


def _by_grammar(name: str, grammar: Grammar, args: list[str], ctx: GuardContext,
                depth: int) -> Decision:
    try:
        parsed = parse(grammar, args)
    except ParseError as exc:
        if grammar.unknown and str(exc).startswith("unknown option"):
            raise ParseError(f"{exc}: {grammar.unknown}") from exc
        raise
    for key in parsed.option_keys():
        if key in grammar.refuse:
            return Decision.refuse(grammar.refuse[key])
    for key, reason in grammar.requires.items():
        if not parsed.has(key):
            return Decision.refuse(reason)
    writes: list[str] = []
    for key in grammar.writes:
        for value in parsed.values(key):
            reason = ctx.writes_forbidden(value)
            if reason:
                return Decision.refuse(f"{name} --{key}: {reason}")
            writes.append(value)
    for key in grammar.commands:
        for value in parsed.values(key):
            try:
                inner = shlex.split(value)
            except ValueError as exc:
                return Decision.refuse(f"{name} --{key}: unparseable command ({exc})")
            sub = check(inner, ctx, depth=depth + 1)
            if not sub.allowed:
                return Decision.refuse(f"{name} --{key} runs {value!r}: {sub.reason}")
            if sub.writes or sub.host_namespace:
                return Decision.refuse(f"{name} --{key}: only commands that write nothing")
    host = grammar.host_namespace
    if grammar.policy is not None:
        decision = grammar.policy(parsed, ctx)
        if decision is not None:
            if not decision.allowed:
                return decision
            writes.extend(decision.writes)
            host = host or decision.host_namespace
    pins: tuple[tuple[int, str], ...] = ()
    if host:
        pinned = pins_of(grammar, parsed, args, ctx)
        if isinstance(pinned, Decision):
            return pinned
        pins = pinned
    return Decision.allow(writes=tuple(dict.fromkeys(writes)), host_namespace=host,
                          caps=grammar.caps, all_devices=grammar.devices,
                          network=grammar.network, pins=pins)


def pins_of(grammar: Grammar, parsed: Parsed, args: list[str],
            ctx: GuardContext) -> tuple[tuple[int, str], ...] | Decision:
    """What a tool in the host's namespace (``mount``, ``umount``, ``losetup``, ``zpool``…) is
    given in place of each device or path word it opens (its operands and the values of its
    ``paths`` options): the block device's own ``/dev`` node for the very device number the
    guard asked the kernel about, the resolved path of a file or directory. The tool then opens
    what was judged — not a name resolved again later (a symlink swapped after the check, a
    node named ``UUID=…`` that libmount reads as a tag, a relative name) — and no tool there
    runs in a namespace that would catch the difference."""
    words: list[tuple[int, str, str]] = [(i, "", w) for i, w in zip(
        parsed.operand_at, parsed.operands, strict=True)] if grammar.operand_paths else []
    for (key, value), at in zip(parsed.opts, parsed.value_at, strict=True):
        if key in grammar.paths and value is not None and at is not None:
            words.append((at[0], at[1], value))
    pins: list[tuple[int, str]] = []
    for index, prefix, word in words:
        rdev = ctx.block_rdev(word)
        if rdev is not None:
            node = ctx.device_node(rdev)
            if node is None:
                return Decision.refuse(f"{grammar.tool} {word}: the device "
                                       f"{os.major(rdev)}:{os.minor(rdev)} has no node of its "
                                       "own in /dev to give the tool")
            target = node
        elif os.path.lexists(word):
            target = os.path.realpath(word)
        else:
            continue
        if prefix + target != args[index]:
            pins.append((index, prefix + target))
    return tuple(pins)


def allowed_tools() -> list[str]:
    return sorted(GRAMMARS)
