"""Tools that only read and print: hashing, listing, viewing. Their grammars still list every
option they accept, so that an option they do not have (or one that writes) is refused."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ckptrescue.guard.decision import Decision
from ckptrescue.guard.grammar import Parsed
from ckptrescue.guard.tools._base import Entry, grammar

if TYPE_CHECKING:
    from ckptrescue.guard.context import GuardContext

_HELP = ("--help", "--version")
_SUMS = ("-b --binary", "-c --check", "--tag", "-t --text", "-z --zero", "--ignore-missing",
         "--quiet", "--status", "--strict", "-w --warn", *_HELP)

TOOLS: dict[str, Entry] = {
    name: grammar(name, *_SUMS) for name in ("sha256sum", "sha1sum", "md5sum", "sha512sum")
}
TOOLS["b2sum"] = grammar("b2sum", *_SUMS, "-l= --length=")
TOOLS["cksum"] = grammar("cksum", "-a= --algorithm=", "--base64", "-l= --length=", "--raw",
                         "--tag", "--untagged", "-c --check", "--debug", *_HELP)
TOOLS["cat"] = grammar("cat", "-A --show-all", "-b --number-nonblank", "-e", "-E --show-ends",
                       "-n --number", "-s --squeeze-blank", "-t", "-T --show-tabs", "-u",
                       "-v --show-nonprinting", *_HELP)
TOOLS["head"] = grammar("head", "-c= --bytes=", "-n= --lines=", "-q --quiet --silent",
                        "-v --verbose", "-z --zero-terminated", *_HELP)
TOOLS["tail"] = grammar("tail", "-c= --bytes=", "-n= --lines=", "-q --quiet --silent",
                        "-v --verbose", "-z --zero-terminated", *_HELP)
TOOLS["wc"] = grammar("wc", "-c --bytes", "-m --chars", "-l --lines", "-L --max-line-length",
                      "-w --words", "--files0-from=", "--total=", *_HELP)
TOOLS["ls"] = grammar("ls", "-a --all", "-A --almost-all", "-d --directory", "-h --human-readable",
                      "-i --inode", "-l", "-L --dereference", "-n --numeric-uid-gid", "-R --recursive",
                      "-s --size", "-S", "-t", "-r --reverse", "-1", "--full-time", "--color=?",
                      "--time-style=", *_HELP)
TOOLS["stat"] = grammar("stat", "-L --dereference", "-f --file-system", "-c= --format=",
                        "--printf=", "-t --terse", "--cached=", *_HELP)
TOOLS["cmp"] = grammar("cmp", "-b --print-bytes", "-i= --ignore-initial=", "-l --verbose",
                       "-n= --bytes=", "-s --quiet --silent", *_HELP)
TOOLS["du"] = grammar("du", "-a --all", "--apparent-size", "-b --bytes", "-c --total",
                      "-d= --max-depth=", "-h --human-readable", "-k", "-m", "-s --summarize",
                      "-x --one-file-system", "-l --count-links", "-L --dereference",
                      "--inodes", "-0 --null", *_HELP)
TOOLS["df"] = grammar("df", "-a --all", "-B= --block-size=", "-h --human-readable", "-H --si",
                      "-i --inodes", "-k", "-l --local", "--output=?", "-P --portability",
                      "--total", "-t= --type=", "-T --print-type", "-x= --exclude-type=", *_HELP)
TOOLS["uname"] = grammar("uname", "-a --all", "-s --kernel-name", "-n --nodename",
                         "-r --kernel-release", "-v --kernel-version", "-m --machine",
                         "-p --processor", "-i --hardware-platform", "-o --operating-system",
                         *_HELP, operands=(0, 0))
TOOLS["id"] = grammar("id", "-a", "-Z --context", "-g --group", "-G --groups", "-n --name",
                      "-r --real", "-u --user", "-z --zero", *_HELP)
TOOLS["true"] = grammar("true", operands=(0, None))
TOOLS["echo"] = grammar("echo", "-n", "-e", "-E", abbreviate=False)
TOOLS["sleep"] = grammar("sleep", *_HELP, operands=(1, None))
TOOLS["mountpoint"] = grammar("mountpoint", "-q --quiet", "--nofollow", "-d --fs-devno",
                              "-x --devno", *_HELP, operands=(1, 1))
TOOLS["lsattr"] = grammar("lsattr", "-R", "-V", "-a", "-d", "-l", "-p", "-v")
TOOLS["getfattr"] = grammar("getfattr", "-n= --name=", "-d --dump", "-e= --encoding=",
                            "-h --no-dereference", "-m= --match=", "--only-values",
                            "-R --recursive", "--absolute-names", "-L --logical",
                            "-P --physical", *_HELP)
TOOLS["grep"] = grammar("grep", "-E --extended-regexp", "-F --fixed-strings", "-G --basic-regexp",
                        "-P --perl-regexp", "-e= --regexp=", "-f= --file=", "-i --ignore-case",
                        "-v --invert-match", "-w --word-regexp", "-x --line-regexp",
                        "-c --count", "-l --files-with-matches", "-L --files-without-match",
                        "-m= --max-count=", "-o --only-matching", "-q --quiet --silent",
                        "-s --no-messages", "-b --byte-offset", "-H --with-filename",
                        "-h --no-filename", "-n --line-number", "-a --text", "-r --recursive",
                        "-R --dereference-recursive", "-A= --after-context=",
                        "-B= --before-context=", "-C= --context=", "-z --null-data",
                        "--color=? --colour=?", *_HELP)
TOOLS["diff"] = grammar("diff", "-q --brief", "-s --report-identical-files", "-u", "-U= --unified=",
                        "-r --recursive", "-N --new-file", "-a --text", "--no-dereference",
                        *_HELP)
TOOLS["od"] = grammar("od", "-A= --address-radix=", "-j= --skip-bytes=", "-N= --read-bytes=",
                      "-t= --format=", "-v --output-duplicates", "-w=? --width=?", "-x", "-c", "-b",
                      "-d", *_HELP)
TOOLS["hexdump"] = grammar("hexdump", "-b --one-byte-octal", "-c --one-byte-char", "-C --canonical",
                           "-d --two-bytes-decimal", "-o --two-bytes-octal",
                           "-x --two-bytes-hex", "-n= --length=", "-s= --skip=",
                           "-v --no-squeezing", "-e= --format=", "-L --color=?", "-h --help",
                           "-V --version")
TOOLS["strings"] = grammar("strings", "-a --all", "-d --data", "-f --print-file-name",
                           "-n= --bytes=", "-t= --radix=", "-e= --encoding=", "-w --include-all-whitespace",
                           "-v -V --version", "--help")
TOOLS["filefrag"] = grammar("filefrag", "-B", "-b=?", "-e", "-E", "-k", "-P", "-s", "-v", "-x",
                            "-X", "-V", abbreviate=False)
TOOLS["lsblk"] = grammar(
    "lsblk", "-a --all", "-A --noempty", "-b --bytes", "-d --nodeps", "-D --discard",
    "-E= --dedup=", "-e= --exclude=", "-f --fs", "-i --ascii", "-I= --include=", "-J --json",
    "-l --list", "-M --merge", "-m --perms", "-n --noheadings", "-o= --output=", "-O --output-all",
    "-P --pairs", "-p --paths", "-Q= --filter=", "-r --raw", "-S --scsi", "-s --inverse",
    "-T --tree=?", "-t --topology", "-w= --width=", "-x= --sort=", "-y --shell", "-z --zoned",
    "--sysroot=", "--ct=", "--ct-filter=", "--highlight=", "--list-columns", "-h --help",
    "-V --version", devices=True)
TOOLS["findmnt"] = grammar(
    "findmnt", "-s --fstab", "-m --mtab", "-k --kernel", "-A --all", "-a --ascii", "-b --bytes",
    "-C --nocanonicalize", "-c --canonicalize", "-D --df", "-d= --direction=", "-e --evaluate",
    "-F= --tab-file=", "-f --first-only", "-i --invert", "-J --json", "-l --list",
    "-N= --task=", "-n --noheadings", "-O= --options=", "-o= --output=", "--output-all",
    "-P --pairs", "--pseudo", "--real", "--shadowed", "-R --submounts", "-r --raw",
    "-S= --source=", "-T= --target=", "-M= --mountpoint=", "-t= --types=", "-U --uniq",
    "-u --notruncate", "-v --nofsroot", "-y --shell", "-x --verify", "--verbose", "--vfs-all",
    "-h --help", "-V --version")


def _blkid(p: Parsed, ctx: object) -> Decision | None:
    for key in ("cache-file", "wipe-cache"):
        if any(v != "/dev/null" for v in p.values(key)):
            return Decision.refuse(f"blkid --{key} writes a cache file; use -p or -c /dev/null")
    return None


TOOLS["blkid"] = grammar(
    "blkid", "-c= --cache-file=", "-d --no-encoding", "-D --no-part-details",
    "-g --garbage-collect", "-H= --hint=", "-i --info", "-k --list-filesystems", "-l --list-one",
    "-L= --label=", "-n= --match-types=", "-o= --output=", "-O= --offset=", "-p --probe",
    "-s= --match-tag=", "-S= --size=", "-t= --match-token=", "-u= --usages=", "-U= --uuid=",
    "-w= --wipe-cache=", "-h --help", "-V --version", summary="prints block device attributes",
    refuse={"garbage-collect": "blkid -g rewrites the blkid cache file"},
    policy=_blkid, devices=True)


# xxd reads its options by hand (``-c12``, ``-cols 12``, ``--r`` is ``-r``): only these exact
# spellings are allowed, each value-taking one with its value as the next argument
_XXD_FLAGS = {"-p", "-ps", "-plain", "-postscript", "-u", "-a", "-autoskip", "-b", "-bits", "-e",
              "-E", "-EBCDIC", "-C", "-capitalize", "-d", "-i", "-include"}
_XXD_VALUES = {"-c", "-cols", "-g", "-groupsize", "-l", "-len", "-s", "-seek", "-o", "-offset",
               "-n", "-name", "-R"}
_XXD_NUMBER = re.compile(r"^[+-]?(0[xX][0-9a-fA-F]+|[0-9]+)$")
_XXD_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _xxd(name: str, args: list[str], ctx: GuardContext, depth: int) -> Decision:
    """xxd with reading options only and at most one input file (a second operand, or ``-r``
    in any spelling, would write)."""
    operands: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg in _XXD_FLAGS:
            continue
        if arg in _XXD_VALUES:
            if i >= len(args):
                return Decision.refuse(f"xxd {arg} needs a value")
            value = args[i]
            i += 1
            ok = _XXD_WORD.match(value) if arg in {"-n", "-name", "-R"} else _XXD_NUMBER.match(value)
            if not ok:
                return Decision.refuse(f"xxd {arg} {value!r}: not a plain value")
            continue
        if arg.startswith("-") and arg != "-":
            return Decision.refuse(f"xxd {arg}: only the reading options (-c N, -g N, -l N, -s N, "
                                   "-o N, -p, -u, ...) spelt out; -r in any spelling writes")
        operands.append(arg)
    if len(operands) > 1:
        return Decision.refuse("xxd with an output file writes a file; read to stdout only")
    return Decision.allow()


TOOLS["xxd"] = _xxd
