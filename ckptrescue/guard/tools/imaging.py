"""Imaging and copying: ``ddrescue``, ``ddrescuelog``, ``dd``-like tools, ``rsync``, ``find``.

Every file these write is named by the grammar (outfile, mapfile, logs, ``of=``, the rsync
destination), checked against evidence and the case's records, and returned in the decision
so that the runner makes exactly those writable in the tool's mount namespace."""

from __future__ import annotations

import os
import shlex
from typing import TYPE_CHECKING

from ckptrescue.guard.decision import Decision
from ckptrescue.guard.grammar import Parsed
from ckptrescue.guard.tools._base import Entry, grammar, other_media, write_target

if TYPE_CHECKING:
    from ckptrescue.guard.context import GuardContext


# ---- ddrescue --------------------------------------------------------------------------------
def _ddrescue(p: Parsed, ctx: GuardContext) -> Decision | None:
    if not p.operands:
        if p.has("version", "help"):
            return None
        return Decision.refuse("ddrescue needs infile outfile mapfile")
    if len(p.operands) != 3:
        return Decision.refuse("ddrescue without a mapfile cannot resume or prove what was read"
                               if len(p.operands) == 2 else
                               "ddrescue takes exactly infile, outfile and mapfile")
    infile, outfile, mapfile = p.operands
    writes: list[str] = [*p.values("log-events"), *p.values("log-rates"), *p.values("log-reads")]
    for label, target in (("outfile", outfile), ("mapfile", mapfile)):
        refusal = write_target(ctx, target, f"ddrescue {label}")
        if refusal:
            return refusal
        if os.path.realpath(target) == os.path.realpath(infile):
            return Decision.refuse(f"ddrescue {label} is the input: infile and outfile swapped?")
        refusal = other_media(ctx, [infile], target, f"ddrescue {label}")
        if refusal:
            return refusal
        writes.append(target)
    return Decision.allow(writes=tuple(writes))


DDRESCUE = grammar(
    "ddrescue", "-h --help", "-V --version", "-a= --min-read-rate=", "-A --try-again",
    "-b= --sector-size=", "-B --binary-prefixes", "-c= --cluster-size=", "-C --complete-only",
    "-d --idirect", "-D --odirect", "-e= --max-bad-areas=", "-E= --max-error-rate=", "-f --force",
    "-F= --fill-mode=", "-G --generate-mode", "-H= --test-mode=", "-i= --input-position=",
    "-I --verify-input-size", "-J --verify-on-error", "-K= --skip-size=", "-L --loose-domain",
    "-m= --domain-mapfile=", "-M --retrim", "-n --no-scrape", "-N --no-trim",
    "-o= --output-position=", "-O --reopen-on-error", "-p --preallocate",
    "-P=? --data-preview=?", "-q --quiet", "-r= --retry-passes=", "-R --reverse", "-s= --size=",
    "-S --sparse", "-t --truncate", "-T= --timeout=", "-u --unidirectional", "-v --verbose",
    "-w --ignore-write-errors", "-W --compare-before-write", "-x= --extend-outfile=",
    "-X= --max-read-errors=", "-y --synchronous", "-Z= --max-read-rate=", "--ask",
    "--command-mode", "--cpass=", "--delay-slow=", "--log-events=", "--log-rates=",
    "--log-reads=", "--mapfile-interval=", "--max-slow-reads=", "--pause-on-error=",
    "--pause-on-pass=", "--reset-slow", "--same-file",
    refuse={"force": "ddrescue --force writes to a device: output must be an image file",
            "fill-mode": "ddrescue --fill-mode overwrites blocks of the output",
            "generate-mode": "ddrescue --generate-mode rewrites a mapfile from a partial copy",
            "command-mode": "ddrescue --command-mode takes commands from standard input",
            "same-file": "ddrescue --same-file lets the input and output be one file",
            "ask": "ddrescue --ask waits for an answer on standard input",
            "truncate": "ddrescue --truncate empties an existing output file"},
    writes=("log-events", "log-rates", "log-reads"), policy=_ddrescue)

_DDRESCUELOG_WRITE = {
    "change-types": "ddrescuelog -a rewrites block types", "create-mapfile": "ddrescuelog -c "
    "creates mapfiles", "complete-mapfile": "ddrescuelog -C rewrites a mapfile",
    "delete-if-done": "ddrescuelog -d deletes the mapfile", "force": "ddrescuelog -f "
    "overwrites output files", "xor-mapfile": "ddrescuelog -x/-y/-z combine mapfiles",
    "and-mapfile": "ddrescuelog -x/-y/-z combine mapfiles", "or-mapfile": "ddrescuelog -x/-y/-z "
    "combine mapfiles", "invert-mapfile": "ddrescuelog -n rewrites a mapfile", "shift":
    "ddrescuelog --shift rewrites a mapfile", "annotate-mapfile": "ddrescuelog -A rewrites a "
    "mapfile"}
DDRESCUELOG = grammar(
    "ddrescuelog", "-h --help", "-V --version", "-a= --change-types=", "-A --annotate-mapfile",
    "-b= --block-size=", "-B --binary-prefixes", "-c=? --create-mapfile=?",
    "-C=? --complete-mapfile=?", "-d --delete-if-done", "-D --done-status", "-f --force",
    "-F= --format=", "-i= --input-position=", "-l= --list-blocks=", "-L --loose-domain",
    "-m= --domain-mapfile=", "-n --invert-mapfile", "-o= --output-position=",
    "-p= --compare-mapfile=", "-P= --compare-as-domain=", "-q --quiet", "-s= --size=",
    "-t --show-status", "-v --verbose", "-x= --xor-mapfile=", "-y= --and-mapfile=",
    "-z= --or-mapfile=", "--shift",
    refuse={k: f"{v} (ddrescuelog creates or deletes mapfiles in these forms)"
            for k, v in _DDRESCUELOG_WRITE.items()})


# ---- dd and its forensic cousins ---------------------------------------------------------------
_DD_READ_KEYS = {"if", "bs", "ibs", "obs", "cbs", "count", "skip", "iseek", "seek", "oseek",
                 "iflag", "oflag", "conv", "status"}
_DD_WRITE_KEYS = {"of"}
_DC3DD_READ_KEYS = {"if", "ifs", "bs", "ssz", "cnt", "iskip", "oskip", "hash", "rec", "verb",
                    "nwspc", "fhod", "hlog_off", "ifsz"}
_DC3DD_WRITE_KEYS = {"of", "hof", "ofs", "hofs", "log", "hlog", "mlog"}
_DCFLDD_READ_KEYS = {"if", "bs", "ibs", "obs", "count", "skip", "seek", "conv", "status",
                     "hash", "hashwindow", "hashformat", "totalhashformat", "hashconv",
                     "statusinterval", "sizeprobe", "split", "splitformat", "vf", "verifylog"}
_DCFLDD_WRITE_KEYS = {"of", "hashlog", "md5log", "sha1log", "sha256log", "sha384log",
                      "sha512log", "errlog"}
_DD_KEYS = {"dd": (_DD_READ_KEYS, _DD_WRITE_KEYS), "dc3dd": (_DC3DD_READ_KEYS, _DC3DD_WRITE_KEYS),
            "dcfldd": (_DCFLDD_READ_KEYS, _DCFLDD_WRITE_KEYS)}


def _dd(name: str, args: list[str], ctx: GuardContext, depth: int) -> Decision:
    """``dd``-style operands: KEY=VALUE words; files written are the output keys."""
    read_keys, write_keys = _DD_KEYS[name]
    writes: list[str] = []
    sources = [a.partition("=")[2] for a in args if a.startswith("if=")]
    for arg in args:
        if arg in {"--help", "--version"}:
            continue
        key, eq, value = arg.partition("=")
        if not eq:
            return Decision.refuse(f"{name} {arg}: not a KEY=VALUE operand")
        if key in write_keys:
            refusal = write_target(ctx, value, f"{name} {key}=") or other_media(
                ctx, sources, value, f"{name} {key}=")
            if refusal:
                return refusal
            writes.append(value)
        elif key not in read_keys:
            return Decision.refuse(f"{name} {key}= is not on the read-only allowlist (it may "
                                   "write, wipe or fill)")
    return Decision.allow(writes=tuple(writes))


# ---- rsync -----------------------------------------------------------------------------------
_RSYNC_REFUSE = {
    "remove-source-files": "rsync --remove-source-files deletes evidence after copying",
    "read-only": "--read-only is not an rsync client option (rsyncd.conf only); copy from a "
                 "read-only mount instead",
    "link-dest": "rsync --link-dest hard-links the copy to the reference files (a later write "
                 "through the copy would change them)",
    "daemon": "rsync --daemon starts a server", "server": "rsync --server is internal",
    "sender": "rsync --sender is internal", "write-devices": "rsync --write-devices writes to "
    "devices", "copy-devices": "rsync --copy-devices is not used", "write-batch": "rsync "
    "--write-batch writes a batch file", "only-write-batch": "rsync --only-write-batch writes "
    "a batch file", "read-batch": "rsync --read-batch applies a batch",
    "remote-option": "rsync --remote-option passes options to a remote rsync",
    "super": "rsync --super tries privileged actions on the receiver",
    "chown": "rsync --chown/--usermap/--groupmap change ownership",
    "usermap": "rsync --chown/--usermap/--groupmap change ownership",
    "groupmap": "rsync --chown/--usermap/--groupmap change ownership",
    "backup-dir": "rsync --backup-dir writes outside the destination",
    "temp-dir": "rsync --temp-dir writes outside the destination",
    "copy-as": "rsync --copy-as changes user", "early-input": "rsync --early-input sends a file "
    "to a daemon", "password-file": "rsync --password-file is for daemons",
    "files-from": "rsync --files-from reads the list from a file the guard has not seen",
    "compare-dest": "rsync --compare-dest/--copy-dest read other trees",
    "copy-dest": "rsync --compare-dest/--copy-dest read other trees",
    "partial-dir": "rsync --partial-dir writes a directory the guard does not check",
}


def _rsync(p: Parsed, ctx: GuardContext) -> Decision | None:
    for key in p.option_keys():
        if key.startswith("del") or key in {"delete", "delete-before", "delete-during",
                                            "delete-delay", "delete-after", "delete-excluded",
                                            "delete-missing-args"}:
            return Decision.refuse("rsync --delete removes files on the receiving side")
    for operand in p.operands:
        if operand.startswith("rsync://") or ":" in operand.split("/", 1)[0]:
            return Decision.refuse(f"rsync {operand}: remote transfers run a remote shell; copy "
                                   "from a local read-only mount")
    if len(p.operands) < 2:
        return None if p.has("version", "help") or p.has("list-only") else Decision.refuse(
            "rsync needs a source and a destination")
    dest = p.operands[-1]
    refusal = write_target(ctx, dest, "rsync destination")
    if refusal:
        return refusal
    for src in p.operands[:-1]:
        if os.path.realpath(src.rstrip("/") or "/") == os.path.realpath(dest.rstrip("/") or "/"):
            return Decision.refuse("rsync source and destination are the same")
    if p.has("dry-run"):  # -n: rsync writes nothing in the destination (a verify pass)
        return Decision.allow(writes=tuple(p.values("log-file")))
    refusal = other_media(ctx, list(p.operands[:-1]), dest, "rsync destination")
    if refusal:
        return refusal
    return Decision.allow(writes=(dest, *p.values("log-file")))


RSYNC = grammar(
    "rsync", "-v --verbose", "--info=", "--debug=", "--stderr=", "-q --quiet", "--no-motd",
    "-c --checksum", "-a --archive", "-r --recursive", "-R --relative",
    "--no-implied-dirs", "-b --backup", "--backup-dir=", "--suffix=", "-u --update",
    "--inplace", "--append", "--append-verify", "-d --dirs", "--old-dirs --old-d", "--mkpath",
    "-l --links", "-L --copy-links", "--copy-unsafe-links", "--safe-links", "--munge-links",
    "-k --copy-dirlinks", "-K --keep-dirlinks", "-H --hard-links", "-p --perms",
    "-E --executability", "--chmod=", "-A --acls", "-X --xattrs", "-o --owner", "-g --group",
    "--devices", "--copy-devices", "--write-devices", "--specials", "-D", "-t --times",
    "-U --atimes", "--open-noatime", "-N --crtimes", "-O --omit-dir-times",
    "-J --omit-link-times", "--super", "--fake-super", "-S --sparse", "--preallocate",
    "-n --dry-run", "-W --whole-file", "--checksum-choice= --cc=", "-x --one-file-system",
    "-B= --block-size=", "-e= --rsh=", "--rsync-path=", "--existing --ignore-non-existing",
    "--ignore-existing", "--remove-source-files", "--del", "--delete", "--delete-before",
    "--delete-during", "--delete-delay", "--delete-after", "--delete-excluded",
    "--ignore-missing-args", "--delete-missing-args", "--ignore-errors", "--force",
    "--max-delete=", "--max-size=", "--min-size=", "--max-alloc=", "--partial",
    "--partial-dir=", "--delay-updates", "-m --prune-empty-dirs", "--numeric-ids",
    "--usermap=", "--groupmap=", "--chown=", "--timeout=", "--contimeout=",
    "-I --ignore-times", "--size-only", "-@= --modify-window=", "-T= --temp-dir=",
    "-y --fuzzy", "--compare-dest=", "--copy-dest=", "--link-dest=", "-z --compress",
    "--compress-choice= --zc=", "--compress-level= --zl=", "--skip-compress=",
    "-C --cvs-exclude", "-f= --filter=", "-F", "--exclude=", "--exclude-from=", "--include=",
    "--include-from=", "--files-from=", "-0 --from0", "--old-args", "-s --secluded-args",
    "--trust-sender", "--copy-as=", "--address=", "--port=", "--sockopts=", "--blocking-io",
    "--outbuf=", "--stats", "-8 --8-bit-output", "-h --human-readable", "--progress", "-P",
    "-i --itemize-changes", "-M= --remote-option=", "--out-format=", "--log-file=",
    "--log-file-format=", "--password-file=", "--early-input=", "--list-only", "--bwlimit=",
    "--stop-after=", "--stop-at=", "--fsync", "--write-batch=", "--only-write-batch=",
    "--read-batch=", "--protocol=", "--iconv=", "--checksum-seed=", "-4 --ipv4", "-6 --ipv6",
    "-V --version", "--help", "--daemon", "--server", "--sender", "--read-only",
    "--no-i-r --no-inc-recursive", "--i-r --inc-recursive",
    refuse=_RSYNC_REFUSE, commands=("rsh", "rsync-path"), writes=("log-file",),
    caps=("CAP_SYS_ADMIN",),  # -X copies trusted.* / security.* extended attributes
    policy=_rsync)


# ---- find ------------------------------------------------------------------------------------
# primaries and how many arguments each takes; -exec & co. end with ";" or "+"
_FIND_ARGS = {
    "-name": 1, "-iname": 1, "-path": 1, "-ipath": 1, "-wholename": 1, "-iwholename": 1,
    "-regex": 1, "-iregex": 1, "-type": 1, "-xtype": 1, "-size": 1, "-mtime": 1, "-mmin": 1,
    "-atime": 1, "-amin": 1, "-ctime": 1, "-cmin": 1, "-newer": 1, "-user": 1, "-group": 1,
    "-uid": 1, "-gid": 1, "-perm": 1, "-inum": 1, "-links": 1, "-samefile": 1, "-maxdepth": 1,
    "-mindepth": 1, "-fstype": 1, "-printf": 1, "-regextype": 1, "-lname": 1, "-ilname": 1,
    "-used": 1, "-context": 1, "-newerXY": 1, "-files0-from": 1,
    "-print": 0, "-print0": 0, "-ls": 0, "-prune": 0, "-quit": 0, "-true": 0, "-false": 0,
    "-empty": 0, "-readable": 0, "-writable": 0, "-executable": 0, "-nouser": 0, "-nogroup": 0,
    "-xdev": 0, "-mount": 0, "-depth": 0, "-d": 0, "-follow": 0, "-noleaf": 0,
    "-ignore_readdir_race": 0, "-noignore_readdir_race": 0, "-daystart": 0, "-not": 0,
    "-a": 0, "-and": 0, "-o": 0, "-or": 0, "!": 0, "(": 0, ")": 0, ",": 0, "-help": 0,
    "-version": 0,
}
_FIND_WRITE = {"-delete": "find -delete removes files", "-fprint": "find -fprint writes files",
               "-fprint0": "find -fprint0 writes files", "-fprintf": "find -fprintf writes files",
               "-fls": "find -fls writes files"}
_FIND_EXEC = {"-exec", "-execdir", "-ok", "-okdir"}


def _find(name: str, args: list[str], ctx: GuardContext, depth: int) -> Decision:
    from ckptrescue.guard.check import check

    i = 0
    while i < len(args):  # -H -L -P -D debugopts -Olevel come before the starting points
        if args[i] in {"-H", "-L", "-P"}:
            i += 1
        elif args[i] == "-D":
            i += 2
        elif args[i].startswith("-O") and args[i][2:].isdigit():
            i += 1
        else:
            break
    while i < len(args) and not args[i].startswith("-") and args[i] not in {"!", "(", ")", ","}:
        i += 1  # the starting points
    while i < len(args):
        word = args[i]
        i += 1
        if word in _FIND_WRITE:
            return Decision.refuse(f"{_FIND_WRITE[word]}")
        if word in _FIND_EXEC:
            # GNU find: ";" ends the command; "+" only right after a "{}" argument
            end = next((j for j in range(i, len(args))
                        if args[j] == ";" or (args[j] == "+" and j > i and args[j - 1] == "{}")),
                       None)
            if end is None:
                return Decision.refuse(f"find {word}: no terminating ';' or '+'")
            inner = [a.replace("{}", "/nonexistent/placeholder") for a in args[i:end]]
            if not inner:
                return Decision.refuse(f"find {word}: no command")
            sub = check(inner, ctx, depth=depth + 1)
            if not sub.allowed:
                return Decision.refuse(f"find {word} runs {shlex.join(args[i:end])}: "
                                       f"{sub.reason}")
            if sub.writes or sub.host_namespace:
                return Decision.refuse(f"find {word}: only commands that write nothing")
            i = end + 1
            continue
        if word.startswith("-newer") and len(word) == 8:
            i += 1
            continue
        if word not in _FIND_ARGS:
            return Decision.refuse(f"find {word} is not on the read-only allowlist")
        i += _FIND_ARGS[word]
        if i > len(args):
            return Decision.refuse(f"find {word} needs an argument")
    return Decision.allow()


TOOLS: dict[str, Entry] = {"ddrescue": DDRESCUE, "ddrescuelog": DDRESCUELOG, "dd": _dd,
                           "dc3dd": _dd, "dcfldd": _dd, "rsync": RSYNC, "find": _find}
