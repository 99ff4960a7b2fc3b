"""Filesystem inspection tools (xfsprogs, e2fsprogs): read-only modes required, and the
commands they take inside ``-c``/``-R`` checked against each tool's read-only command list."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING

from ckptrescue.guard.decision import Decision
from ckptrescue.guard.grammar import Parsed
from ckptrescue.guard.tools._base import Entry, grammar, write_target

if TYPE_CHECKING:
    from ckptrescue.guard.context import GuardContext

# ---- xfs_db: -c commands ---------------------------------------------------------------------
# read-only xfs_db commands, and how many arguments each may take (None: any)
XFS_DB_READ: dict[str, int | None] = {
    "sb": 1, "print": None, "p": None, "version": 0, "convert": None, "blockget": None,
    "blockuse": None, "ncheck": None, "fsmap": None, "agf": 1, "agi": 1, "agfl": 1, "inode": 1,
    "bmap": None, "freesp": None, "frag": None, "info": 0, "daddr": 1, "fsblock": 1, "type": 1,
    "addr": 1, "dblock": 1, "check": None, "label": 0, "uuid": 0, "ablock": 1, "attr": None,
    "dquot": None, "stack": 0, "hash": None, "help": None, "echo": None, "status": 0,
    "timelimit": 0, "rtblock": 1, "logres": 0, "path": None, "ls": None, "pwd": 0, "cd": 1,
}
XFS_DB_WRITE = {"write", "blocktrash", "crc", "logformat", "fuzz", "uuid_set", "sb_write",
                "agresv", "blockfree", "attr_set", "attr_remove", "rdump", "metadump",
                "dquot_set", "btdump", "link", "unlink", "iunlink"}


def _xfs_db_command(cmd: str, verb: str, args: list[str]) -> str | None:
    if verb in XFS_DB_WRITE:
        return f"xfs_db command {verb!r} modifies the filesystem"
    if verb not in XFS_DB_READ:
        return f"xfs_db command {verb!r} is not on the read-only allowlist"
    limit = XFS_DB_READ[verb]
    if limit is not None and len(args) > limit:
        return f"xfs_db command {cmd!r} sets a value (only the reading form is allowed)"
    return None


def _each_command(check: Callable[[str, str, list[str]], str | None], *keys: str) -> Callable[
        [Parsed, GuardContext], Decision | None]:
    """A policy: every value of the option ``keys`` is a command line, split as the tool splits
    it and judged by ``check(command, verb, args)``."""
    def policy(p: Parsed, ctx: GuardContext) -> Decision | None:
        for key in keys:
            for cmd in p.values(key):
                try:
                    words = shlex.split(cmd)
                except ValueError as exc:
                    return Decision.refuse(f"{p.tool} -{key} {cmd!r} is unparseable ({exc})")
                reason = check(cmd, words[0], words[1:]) if words else None
                if reason:
                    return Decision.refuse(reason)
        return None
    return policy


# ---- xfs_io: -c commands ---------------------------------------------------------------------
XFS_IO_READ: dict[str, tuple[str, ...]] = {
    # command: the options it may take (arguments that are not options are offsets/lengths)
    "fiemap": ("-a", "-v", "-n"), "fsmap": ("-d", "-l", "-r", "-m", "-v", "-n"),
    "stat": ("-v", "-r"), "statfs": ("-c", "-g", "-s"), "bmap": ("-a", "-c", "-d", "-e", "-l",
                                                               "-n", "-p", "-v"),
    "help": (), "lsattr": ("-a", "-v"), "extsize": (), "statx": ("-v", "-r", "-m"),
}


def _xfs_io_command(cmd: str, verb: str, args: list[str]) -> str | None:
    if verb not in XFS_IO_READ:
        return f"xfs_io command {verb!r} is not on the read-only allowlist"
    if verb == "extsize" and args:
        return "xfs_io extsize with a value sets an inode hint"
    for arg in args:
        if arg.startswith("-") and not all(f"-{c}" in XFS_IO_READ[verb] for c in arg[1:]
                                           if not c.isdigit()):
            return f"xfs_io {verb} {arg}: option not on the read-only allowlist"
    return None


def _xfs_metadump(p: Parsed, ctx: GuardContext) -> Decision | None:
    if any(any(c.isspace() for c in v) for k in ("m", "l", "v") for v in p.values(k)):
        return Decision.refuse("xfs_metadump: a value with spaces is split by the tool's shell "
                               "script")
    target = p.operands[-1]
    if target == "-":
        return Decision.allow()
    return write_target(ctx, target, "xfs_metadump target") or Decision.allow(writes=(target,))


# ---- debugfs: -R requests --------------------------------------------------------------------
DEBUGFS_READ = {
    "icheck", "ncheck", "stat", "show_inode_info", "stats", "show_super_stats", "logdump",
    "blocks", "bmap", "ls", "list_directory", "testb", "testi", "ffb", "find_free_block", "ffi",
    "find_free_inode", "imap", "dump_extents", "ex", "extents", "filefrag", "htree",
    "htree_dump", "dx_hash", "hash", "lsdel", "list_deleted_inodes", "dirsearch", "id",
    "inode_dump", "idump", "bd", "block_dump", "supported_features", "get_quota", "lq",
    "list_quota", "cd", "change_working_directory", "pwd", "print_working_directory", "help",
    "cat", "check_journal", "show_debugfs_params", "params", "ea_get", "ea_list",
}


def _debugfs_request(req: str, verb: str, args: list[str]) -> str | None:
    if verb not in DEBUGFS_READ:
        return f"debugfs request {verb!r} is not on the read-only allowlist"
    if verb == "bmap" and ("-a" in args or len([a for a in args if not a.startswith("-")]) > 2):
        return "debugfs bmap -a / with a physical block changes the block map"
    if verb == "logdump" and any(a.startswith("-") and "O" in a for a in args):
        return f"debugfs request {req!r} may write"
    if verb in {"ea_get", "ea_list"} and any(
            a.startswith("-") and "f" in a for a in args):
        return f"debugfs {verb} -f writes a file"
    return None


# ---- e2fsck / fsck ---------------------------------------------------------------------------
_E2FSCK_REFUSE = {
    "p": "e2fsck with -y/-p/-a repairs the filesystem; only -n is allowed",
    "a": "e2fsck with -y/-p/-a repairs the filesystem; only -n is allowed",
    "y": "e2fsck with -y/-p/-a repairs the filesystem; only -n is allowed",
    "c": "e2fsck -c runs badblocks (-cc writes test patterns)",
    "D": "e2fsck -D rewrites directories",
    "E": "e2fsck -E extended options rewrite the journal or directories",
    "l": "e2fsck -l/-L record bad blocks in the filesystem",
    "L": "e2fsck -l/-L record bad blocks in the filesystem",
    "z": "e2fsck -z writes an undo file",
    "k": "e2fsck -k with -c keeps and adds bad blocks",
    "F": "e2fsck -F flushes device buffers; never force-flush caches during an incident",
}


def _fsck_requires_n(p: Parsed, ctx: GuardContext) -> Decision | None:
    if not p.has("n"):
        return Decision.refuse(f"{p.tool} without -n may repair the filesystem; use -n (no-modify)")
    if p.tool == "fsck":
        if len(p.operands) != 1 or not p.operands[0].startswith("/"):
            return Decision.refuse("fsck checks exactly one filesystem, given by its absolute "
                                   "path (without one it checks everything in fstab)")
        if any(not t.isalnum() for t in p.values("t")):
            return Decision.refuse("fsck -t names one filesystem type")
    return None


def _no_spaces(*keys: str) -> object:
    """xfs_info and xfs_metadump are shell scripts that word-split their option values."""
    def policy(p: Parsed, ctx: GuardContext) -> Decision | None:
        for key in keys:
            if any(not v or any(c.isspace() for c in v) for v in p.values(key)):
                return Decision.refuse(f"{p.tool} -{key}: a value with spaces is split by the "
                                       "tool's shell script")
        return None
    return policy


_TUNE2FS = "tune2fs changes filesystem parameters; only tune2fs -l is allowed"
E2FSCK = grammar(
    "e2fsck", "-p", "-a", "-n", "-y", "-r", "-c", "-C=", "-B=", "-d", "-E=", "-f", "-v", "-t", "-F",
    "-V", "-M", "-b=", "-I=", "-j=", "-P=", "-l=", "-L=", "-k", "-z=", "-D", abbreviate=False,
    refuse=_E2FSCK_REFUSE, operands=(0, 1), policy=_fsck_requires_n)
FSCK = grammar(
    "fsck", "-l", "-s", "-A", "-V", "-R", "-T", "-M", "-N", "-P", "-r=?", "-C=?", "-t=",
    "-n", "-f", "-v", "-p", "-a", "-y", abbreviate=False, operands=(0, None), no_double_dash=True,
    refuse={"A": "fsck -A checks (and may repair) every filesystem in fstab",
            "p": "fsck with -y/-p/-a repairs the filesystem; only -n is allowed",
            "a": "fsck with -y/-p/-a repairs the filesystem; only -n is allowed",
            "y": "fsck with -y/-p/-a repairs the filesystem; only -n is allowed"},
    policy=_fsck_requires_n)

TOOLS: dict[str, Entry] = {
    "xfs_db": grammar("xfs_db", "-c=", "-f", "-F", "-i", "-p=", "-r", "-x", "-V", "-l=",
                      abbreviate=False, operands=(0, 1), requires={"r": "xfs_db must be run with "
                                                                   "-r (read-only)"},
                      refuse={"x": "xfs_db -x enables expert (write) mode; only -r is allowed"},
                      policy=_each_command(_xfs_db_command, "c")),
    "xfs_io": grammar("xfs_io", "-a", "-c=", "-d", "-F", "-f", "-i", "-L", "-m=", "-p=", "-n",
                      "-r", "-R", "-s", "-t", "-T", "-V", "-x", "-P", "-M", "-C=", abbreviate=False,
                      requires={"r": "xfs_io must be run with -r (read-only open)"},
                      refuse={"x": "xfs_io -x enables expert commands (shutdown, etc.)",
                              "f": "xfs_io -f creates the file", "t": "xfs_io -t truncates",
                              "T": "xfs_io -T creates a temporary file",
                              "a": "xfs_io -a opens for appending"},
                      policy=_each_command(_xfs_io_command, "c", "C")),
    "xfs_info": grammar("xfs_info", "-V", "-t=", abbreviate=False, operands=(0, 1),
                        policy=_no_spaces("t")),
    "xfs_bmap": grammar("xfs_bmap", "-a", "-d", "-e", "-l", "-n=", "-p", "-v", "-V",
                        abbreviate=False),
    "xfs_repair": grammar(
        "xfs_repair", "-n", "-L", "-o=", "-l=", "-r=", "-P", "-v", "-V", "-m=", "-c=", "-e",
        "-f", "-t=", "-d", "-D", "-M", abbreviate=False, operands=(1, 1),
        requires={"n": "xfs_repair without -n repairs in place; use -n (no-modify)"},
        refuse={"L": "xfs_repair -L zeroes the log: metadata changes in it are lost",
                "c": "xfs_repair -c changes filesystem features",
                "d": "xfs_repair -d repairs a mounted filesystem"}),
    "xfs_logprint": grammar(
        "xfs_logprint", "-b", "-c", "-C=", "-d", "-f", "-l=", "-i", "-q", "-n", "-o", "-r", "-s=",
        "-t", "-D", "-V", "-v", abbreviate=False, operands=(0, 1), writes=("C",)),
    "xfs_metadump": grammar(
        "xfs_metadump", "-a", "-e", "-g", "-m=", "-o", "-l=", "-w", "-F", "-v=", "-V",
        abbreviate=False, operands=(2, 2), policy=_xfs_metadump),
    "dumpe2fs": grammar("dumpe2fs", "-b", "-f", "-g", "-h", "-i", "-m", "-x", "-V", "-o=",
                        abbreviate=False, operands=(0, 1)),
    "debugfs": grammar(
        "debugfs", "-i", "-w", "-c", "-R=", "-f=", "-b=", "-s=", "-V", "-d=", "-D",
        "-n", "-z=", abbreviate=False, operands=(0, 1),
        refuse={"w": "debugfs -w opens the filesystem read-write",
                "f": "debugfs -f runs a command file; give each request with -R",
                "z": "debugfs -z writes an undo file"},
        policy=_each_command(_debugfs_request, "R")),
    "tune2fs": grammar(
        "tune2fs", "-c=", "-C=", "-e=", "-E=", "-f", "-g=", "-i=", "-I=", "-j", "-J=", "-l",
        "-L=", "-m=", "-M=", "-o=", "-O=", "-Q=", "-r=", "-s=", "-T=", "-u=", "-U=", "-z=",
        abbreviate=False, operands=(1, 1),
        refuse=dict.fromkeys("cCeEfgiIjJLmMoOQrsTuUz", _TUNE2FS),
        requires={"l": _TUNE2FS}),
    "e2fsck": E2FSCK,
    "fsck": FSCK,
}
