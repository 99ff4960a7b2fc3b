"""The safety policy: decides, before anything runs, whether an argv may run.

Pure: argv and a :class:`GuardContext` in, a :class:`Decision` out. Known read-only tools and
argument forms are allowed; everything unknown is refused by default; known-dangerous forms are
refused with a specific reason (the brief's list). The runner consults this for every command,
and ``playbook lint`` consults it for every ``exec`` step.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""

    @classmethod
    def allow(cls) -> Decision:
        return cls(True, "")

    @classmethod
    def refuse(cls, reason: str) -> Decision:
        return cls(False, reason)


def _is_block_device(path: str) -> bool:
    import stat

    try:
        return stat.S_ISBLK(os.stat(path).st_mode)
    except OSError:
        # a path that does not exist yet: only a name directly under /dev looks like a device
        return os.path.dirname(os.path.abspath(path)) == "/dev"


def _read_small_text(path: str, limit: int = 1 << 20) -> str | None:
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError:
        return None
    return None if len(data) > limit else data.decode("utf-8", "replace")


@dataclass(frozen=True)
class GuardContext:
    """What the guard may know beyond the argv: protected paths and how to spot devices."""

    evidence_paths: tuple[str, ...] = ()
    is_block_device: Callable[[str], bool] = field(default=_is_block_device)
    protected_paths: tuple[str, ...] = ()  # the case's own records: audit log, artifacts, ...
    # ZFS pools this case imported itself with ``-o readonly=on`` (their export writes nothing)
    readonly_pools: tuple[str, ...] = ()
    # reads a small text file the command will consume (a dmsetup table), None if unreadable
    read_text: Callable[[str], str | None] = field(default=_read_small_text)

    def is_evidence(self, path: str) -> bool:
        return bool(path) and _inside(path, self.evidence_paths)

    def writes_forbidden(self, path: str) -> str | None:
        """A reason why writing ``path`` is forbidden, or None."""
        if self.is_block_device(path):
            return f"writing to block device {path} would change evidence"
        if self.is_evidence(path):
            return f"{path} is an evidence path; output must go elsewhere"
        if _inside(path, self.protected_paths):
            return f"{path} is one of the case's own records (audit log, artifacts); never written by tools"
        return None


def _inside(path: str, roots: tuple[str, ...]) -> bool:
    target = os.path.realpath(path)
    for root in roots:
        real = os.path.realpath(root)
        if target == real or target.startswith(real.rstrip("/") + "/"):
            return True
    return False


Checker = Callable[[str, list[str], GuardContext], Decision]
_CHECKERS: dict[str, Checker] = {}
_ALWAYS_REFUSED: dict[str, str] = {}


def _tool(*names: str) -> Callable[[Checker], Checker]:
    def register(fn: Checker) -> Checker:
        for name in names:
            _CHECKERS[name] = fn
        return fn

    return register


def _refuse_tool(reason: str, *names: str) -> None:
    for name in names:
        _ALWAYS_REFUSED[name] = reason


def check(argv: Sequence[str], ctx: GuardContext | None = None) -> Decision:
    """Decide whether ``argv`` may run. ``argv[0]`` is a tool name or a path to it."""
    ctx = ctx or GuardContext()
    if not argv:
        return Decision.refuse("empty command")
    if any(not isinstance(a, str) for a in argv):
        return Decision.refuse("arguments must be strings")
    name = PurePath(argv[0]).name
    args = list(argv[1:])
    if name.startswith("mkfs") or name.startswith("mke2fs") or name.startswith("mkswap"):
        return Decision.refuse(f"{name} creates a filesystem: it destroys what is on the target")
    if name.startswith("fsck.") or name.startswith("e2fsck"):
        return _check_fsck(name, args, ctx)
    if name in _ALWAYS_REFUSED:
        return Decision.refuse(_ALWAYS_REFUSED[name])
    checker = _CHECKERS.get(name)
    if checker is None:
        return Decision.refuse(
            f"{name} is not on the read-only allowlist (unknown commands are refused by default)"
        )
    return checker(name, args, ctx)


def allowed_tools() -> list[str]:
    return sorted(_CHECKERS)


# ---- helpers ---------------------------------------------------------------------------------

def _short_flags(args: list[str]) -> set[str]:
    """Single-letter flags present in ``-abc`` clusters (not after ``--``)."""
    flags: set[str] = set()
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("-") and not arg.startswith("--") and len(arg) > 1:
            flags.update(arg[1:])
    return flags


def _flags_outside_values(args: list[str], takes_value: set[str]) -> set[str]:
    """Short flags, ignoring the values of options in ``takes_value``."""
    flags: set[str] = set()
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in takes_value:
            skip = True
            continue
        if arg.startswith("-") and not arg.startswith("--") and len(arg) > 1:
            if any(arg.startswith(t) for t in takes_value):
                continue
            flags.update(arg[1:])
    return flags


def _long(args: list[str], *names: str) -> bool:
    for arg in args:
        if arg == "--":
            break
        base = arg.split("=", 1)[0]
        if base in names:
            return True
    return False


def _positionals(args: list[str], takes_value: set[str] = frozenset()) -> list[str]:  # type: ignore[assignment]
    out: list[str] = []
    skip = False
    after_dd = False
    for arg in args:
        if skip:
            skip = False
            continue
        if after_dd:
            out.append(arg)
            continue
        if arg == "--":
            after_dd = True
            continue
        if arg.startswith("-") and len(arg) > 1:
            if arg in takes_value:
                skip = True
            continue
        out.append(arg)
    return out


def _values(args: list[str], *opts: str) -> list[str]:
    """Values given to options like ``-o X``, ``-oX``, ``--opt=X``, ``--opt X``."""
    vals: list[str] = []
    for i, arg in enumerate(args):
        for opt in opts:
            if arg == opt and i + 1 < len(args):
                vals.append(args[i + 1])
            elif opt.startswith("--") and arg.startswith(opt + "="):
                vals.append(arg[len(opt) + 1 :])
            elif not opt.startswith("--") and arg.startswith(opt) and len(arg) > len(opt):
                vals.append(arg[len(opt) :])
    return vals


def _allow_any(name: str, args: list[str], ctx: GuardContext) -> Decision:
    return Decision.allow()


# ---- plain read-only tools -------------------------------------------------------------------

for _name in (
    "xfs_info", "xfs_bmap", "dumpe2fs", "lsblk", "blkid", "findmnt", "sha256sum", "sha1sum",
    "md5sum", "b2sum", "cmp", "stat", "file", "hexdump", "od", "strings", "ls", "du", "df",
    "uname", "id", "cat", "head", "tail", "wc", "ps", "lsof", "filefrag",
    "lspci", "lsusb", "zdb", "pvs", "vgs", "lvs", "pvdisplay", "vgdisplay",
    "lvdisplay", "true", "echo", "sleep", "uptime", "free", "mountpoint", "getfattr", "lsattr",
    "sum", "cksum", "diff", "grep",
):
    _CHECKERS[_name] = _allow_any


@_tool("xxd")
def _check_xxd(name: str, args: list[str], ctx: GuardContext) -> Decision:
    if "r" in _short_flags(args) or _long(args, "-revert"):
        return Decision.refuse("xxd -r writes binary output (it can write to a device)")
    if len(_positionals(args, {"-c", "-g", "-l", "-s", "-o", "-n"})) > 1:
        return Decision.refuse("xxd with an output file writes a file; read to stdout only")
    return Decision.allow()


@_tool("date")
def _check_date(name: str, args: list[str], ctx: GuardContext) -> Decision:
    if "s" in _short_flags(args) or _long(args, "--set"):
        return Decision.refuse("date -s sets the system clock")
    if any(not a.startswith(("-", "+")) for a in args):
        return Decision.refuse("date with a time argument sets the system clock")
    return Decision.allow()


@_tool("hostname")
def _check_hostname(name: str, args: list[str], ctx: GuardContext) -> Decision:
    if _positionals(args) or "F" in _short_flags(args) or _long(args, "--file"):
        return Decision.refuse("hostname with an argument sets the host name")
    return Decision.allow()


@_tool("blkid")
def _check_blkid(name: str, args: list[str], ctx: GuardContext) -> Decision:
    caches = _values(args, "-c", "--cache-file")
    if any(c != "/dev/null" for c in caches):
        return Decision.refuse("blkid -c writes a cache file; use -p or -c /dev/null")
    return Decision.allow()


@_tool("ddrescuelog")
def _check_ddrescuelog(name: str, args: list[str], ctx: GuardContext) -> Decision:
    writers = {"-C", "--create-mapfile", "-d", "--delete-if-done", "-m", "--domain-mapfile"}
    for arg in args:
        if arg.split("=", 1)[0] in writers or (arg.startswith("-C") and len(arg) > 2):
            return Decision.refuse(f"ddrescuelog {arg} creates or deletes mapfiles")
    return Decision.allow()


_refuse_tool("sync flushes dirty pages to the devices; never force-flush caches during an incident",
             "sync")
_refuse_tool("chkdsk repairs the filesystem in place", "chkdsk", "chkdsk.exe")
_refuse_tool("wipefs erases filesystem signatures", "wipefs")
_refuse_tool("blkdiscard discards (erases) device blocks", "blkdiscard")
_refuse_tool("xfs_admin changes filesystem parameters", "xfs_admin")
_refuse_tool("xfs_growfs changes the filesystem", "xfs_growfs")
_refuse_tool("resize2fs changes the filesystem size", "resize2fs")
_refuse_tool("e2label writes a new label into the filesystem", "e2label")
_refuse_tool("badblocks can write test patterns to the device", "badblocks")
_refuse_tool("shred overwrites data", "shred")
_refuse_tool("rm deletes data", "rm", "rmdir", "unlink")
_refuse_tool("mv/cp/tee/truncate/touch write files; use the kit's copy and image commands",
             "mv", "cp", "tee", "truncate", "touch", "chmod", "chown", "chattr", "ln")
_refuse_tool("shells are never run: give the tool's argv directly", "sh", "bash", "dash", "zsh",
             "env", "sudo", "su", "xargs", "nohup", "python", "python3", "perl")
_refuse_tool("vgchange/lvchange and LVM create/remove commands activate or change volumes",
             "vgchange", "lvchange", "pvchange", "pvcreate", "vgcreate", "lvcreate", "pvremove",
             "vgremove", "lvremove", "vgextend", "vgreduce", "lvextend", "lvreduce", "lvresize",
             "vgimport", "vgexport", "vgcfgrestore", "pvmove", "lvconvert", "vgmerge", "vgsplit")
_refuse_tool("kill/pkill/systemctl change running services: ckptrescue says whom to stop, "
             "it never stops anything itself", "kill", "pkill", "killall", "systemctl", "service",
             "reboot", "shutdown", "halt", "poweroff")
_refuse_tool("partprobe/kpartx re-read or create partition mappings", "partprobe", "kpartx")


# ---- filesystem checkers ---------------------------------------------------------------------

def _check_fsck(name: str, args: list[str], ctx: GuardContext) -> Decision:
    flags = _short_flags(args)
    if flags & {"y", "p", "a"} or _long(args, "--yes"):
        return Decision.refuse(f"{name} with -y/-p/-a repairs the filesystem; only -n is allowed")
    if "n" not in flags:
        return Decision.refuse(f"{name} without -n may repair the filesystem; use -n (no-modify)")
    if "D" in flags or _values(args, "-E"):
        return Decision.refuse(f"{name} -D/-E rewrite directories or the journal")
    return Decision.allow()


_tool("fsck", "e2fsck")(_check_fsck)


@_tool("xfs_repair")
def _check_xfs_repair(name: str, args: list[str], ctx: GuardContext) -> Decision:
    flags = _short_flags(args)
    if "L" in flags:
        return Decision.refuse("xfs_repair -L zeroes the log: metadata changes in it are lost")
    if "n" not in flags:
        return Decision.refuse("xfs_repair without -n repairs in place; use -n (no-modify)")
    return Decision.allow()


_XFS_DB_COMMANDS = {
    "sb", "print", "p", "version", "convert", "blockget", "blockuse", "ncheck", "fsmap", "agf",
    "agi", "agfl", "inode", "bmap", "freesp", "frag", "info", "daddr", "fsblock", "type", "addr",
    "dblock", "check", "label", "uuid", "logformat_is_refused", "ablock", "attr", "dquot",
    "stack", "hash", "help", "echo", "status", "timelimit", "rtblock", "logres",
}
_XFS_DB_WRITE = {"write", "blocktrash", "crc", "logformat", "fuzz", "uuid_set", "sb_write",
                 "agresv", "blockfree"}


@_tool("xfs_db")
def _check_xfs_db(name: str, args: list[str], ctx: GuardContext) -> Decision:
    flags = _flags_outside_values(args, {"-c", "-l", "-p"})
    if "x" in flags:
        return Decision.refuse("xfs_db -x enables expert (write) mode; only -r is allowed")
    if "r" not in flags:
        return Decision.refuse("xfs_db must be run with -r (read-only)")
    for cmd in _values(args, "-c"):
        verb = cmd.strip().split()[0] if cmd.strip() else ""
        if verb in _XFS_DB_WRITE:
            return Decision.refuse(f"xfs_db command {verb!r} modifies the filesystem")
        if (verb == "uuid" and len(cmd.split()) > 1) or (verb == "label" and len(cmd.split()) > 1):
            return Decision.refuse(f"xfs_db command {cmd!r} sets a value")
        if verb not in _XFS_DB_COMMANDS:
            return Decision.refuse(f"xfs_db command {verb!r} is not on the read-only allowlist")
    return Decision.allow()


@_tool("xfs_logprint")
def _check_xfs_logprint(name: str, args: list[str], ctx: GuardContext) -> Decision:
    for out in _values(args, "-C"):
        reason = ctx.writes_forbidden(out)
        if reason:
            return Decision.refuse(f"xfs_logprint -C: {reason}")
    return Decision.allow()


@_tool("xfs_metadump")
def _check_xfs_metadump(name: str, args: list[str], ctx: GuardContext) -> Decision:
    pos = _positionals(args, {"-l", "-m", "-v"})
    if len(pos) >= 2:
        reason = ctx.writes_forbidden(pos[-1])
        if reason:
            return Decision.refuse(f"xfs_metadump: {reason}")
    return Decision.allow()


_XFS_IO_READ = {"fiemap", "fsmap", "stat", "statfs", "bmap", "help", "lsattr", "extsize"}


@_tool("xfs_io")
def _check_xfs_io(name: str, args: list[str], ctx: GuardContext) -> Decision:
    flags = _flags_outside_values(args, {"-c", "-p"})
    if "x" in flags:
        return Decision.refuse("xfs_io -x enables expert commands (shutdown, etc.)")
    if "r" not in flags:
        return Decision.refuse("xfs_io must be run with -r (read-only open)")
    for cmd in _values(args, "-c"):
        verb = cmd.strip().split()[0] if cmd.strip() else ""
        if verb not in _XFS_IO_READ:
            return Decision.refuse(f"xfs_io command {verb!r} is not on the read-only allowlist")
        if verb == "lsattr" and "-s" in cmd:
            return Decision.refuse("xfs_io chattr/lsattr -s sets attributes")
        if verb == "extsize" and len(cmd.split()) > 1:
            return Decision.refuse("xfs_io extsize with a value sets an inode hint")
    return Decision.allow()


_DEBUGFS_READ = {"icheck", "ncheck", "stat", "stats", "logdump", "blocks", "bmap", "ls", "testb",
                 "testi", "ffb", "ffi", "imap", "show_super_stats", "dump_extents", "ex",
                 "extents", "filefrag", "htree", "dx_hash", "lsdel", "dirsearch", "id",
                 "block_dump", "bd", "inode_dump", "idump", "supported_features", "get_quota",
                 "list_quota", "lq", "cd", "pwd", "help", "check_journal", "journal_open"}


@_tool("debugfs")
def _check_debugfs(name: str, args: list[str], ctx: GuardContext) -> Decision:
    if "w" in _short_flags(args):
        return Decision.refuse("debugfs -w opens the filesystem read-write")
    if "f" in _short_flags(args):
        return Decision.refuse("debugfs -f runs a command file; give each request with -R")
    for req in _values(args, "-R"):
        verb = req.strip().split()[0] if req.strip() else ""
        if verb not in _DEBUGFS_READ:
            return Decision.refuse(f"debugfs request {verb!r} is not on the read-only allowlist")
        if verb in {"journal_open"} or (verb == "logdump" and "-O" in req):
            return Decision.refuse(f"debugfs request {req!r} may write")
    return Decision.allow()


@_tool("tune2fs")
def _check_tune2fs(name: str, args: list[str], ctx: GuardContext) -> Decision:
    if [a for a in args if a.startswith("-")] == ["-l"]:
        return Decision.allow()
    return Decision.refuse("tune2fs changes filesystem parameters; only tune2fs -l is allowed")


# ---- mounting --------------------------------------------------------------------------------

# filesystem types with a known read-only, no-replay mount form (checked below)
_RO_MOUNT_TYPES = {"xfs", "ext2", "ext3", "ext4", "btrfs", "vfat", "exfat", "iso9660", "squashfs",
                   "udf", "zfs"}


@_tool("mount")
def _check_mount(name: str, args: list[str], ctx: GuardContext) -> Decision:
    opts_raw = _values(args, "-o", "--options")
    opts = {o.strip() for raw in opts_raw for o in raw.split(",")}
    flags = _short_flags(args)
    if "remount" in opts:
        return Decision.refuse("remount changes a mounted filesystem; never remount evidence")
    if _long(args, "--bind", "--rbind", "--move", "--make-shared", "--make-private") or "B" in flags:
        return Decision.refuse("bind/move/propagation mounts are not part of read-only inspection")
    if "a" in flags:
        return Decision.refuse("mount -a mounts everything in fstab")
    if "rw" in opts or "w" in flags or _long(args, "--rw", "--read-write"):
        return Decision.refuse("mount read-write: evidence is only ever mounted read-only (ro)")
    if "ro" not in opts and "r" not in flags and not _long(args, "--read-only"):
        if not _positionals(args, {"-o", "-t", "--options", "--types", "-O"}):
            return Decision.allow()  # bare `mount` lists mounts
        return Decision.refuse("mount without ro: evidence is only ever mounted read-only")
    fstypes = _values(args, "-t", "--types")
    fstype = fstypes[0] if fstypes else ""
    if not fstype:
        return Decision.refuse(
            "mount without -t: give the filesystem type so the guard can require "
            "norecovery (XFS) or noload (ext3/ext4)"
        )
    if len(fstypes) > 1 or "," in fstype or fstype == "auto" or fstype.startswith("no"):
        return Decision.refuse("mount -t must name exactly one filesystem type (not auto or a "
                               "list): the read-only options depend on it")
    if fstype not in _RO_MOUNT_TYPES:
        return Decision.refuse(f"mount -t {fstype}: no known read-only, no-replay form for this "
                               "filesystem type")
    if fstype == "btrfs" and not opts & {"nologreplay", "rescue=nologreplay"}:
        return Decision.refuse("btrfs mount without nologreplay: a plain ro mount replays the "
                               "log tree and changes the disk")
    if fstype == "xfs" and "norecovery" not in opts:
        return Decision.refuse(
            "XFS mount without norecovery: a plain ro mount replays a dirty log and changes the disk"
        )
    if fstype in {"ext3", "ext4"} and not opts & {"noload", "norecovery"}:
        return Decision.refuse(
            f"{fstype} mount without noload: a plain ro mount replays the journal and changes the disk"
        )
    if fstype == "xfs" and "noload" in opts:
        return Decision.refuse("XFS rejects noload; use ro,norecovery")
    if fstype in {"zfs"}:
        return Decision.refuse("mount ZFS datasets through zpool import -o readonly=on -N")
    return Decision.allow()


@_tool("umount")
def _check_umount(name: str, args: list[str], ctx: GuardContext) -> Decision:
    if "a" in _short_flags(args) or _long(args, "--all"):
        return Decision.refuse("umount -a unmounts everything")
    if not _positionals(args):
        return Decision.refuse("umount needs the mount point the kit mounted")
    return Decision.allow()


KIT_DM_PREFIX = "ckr-"  # device-mapper names the kit creates (read-only LV assemblies)
_DMSETUP_READ = {"ls", "table", "info", "status", "deps", "targets", "version", "help"}


@_tool("dmsetup")
def _check_dmsetup(name: str, args: list[str], ctx: GuardContext) -> Decision:
    pos = _positionals(args, {"-j", "--major", "-m", "--minor", "-o", "--options", "--table",
                              "-u", "--uuid", "--select", "-S", "--readahead", "--count",
                              "--separator"})
    sub = pos[0] if pos else ""
    if sub in _DMSETUP_READ:
        return Decision.allow()
    if sub == "create":
        if not (_long(args, "--readonly") or "r" in _short_flags(args)):
            return Decision.refuse("dmsetup create without --readonly: evidence devices are "
                                   "only assembled read-only")
        if _long(args, "--concise", "--table", "--notable", "--uuid", "-u"):
            return Decision.refuse("dmsetup create: the kit gives one name and one table file "
                                   "(no --concise, --table or --notable)")
        if len(pos) != 3 or not pos[1].startswith(KIT_DM_PREFIX):
            return Decision.refuse(f"dmsetup create: exactly one {KIT_DM_PREFIX}* name and one "
                                   "table file")
        table = ctx.read_text(pos[2])
        if table is None:
            return Decision.refuse(f"dmsetup create: table file {pos[2]} is unreadable")
        for line in table.splitlines():
            f = line.split()
            if not f or line.lstrip().startswith("#"):
                continue
            if len(f) != 5 or f[2] != "linear" or not all(x.isdigit() for x in (f[0], f[1], f[4])):
                return Decision.refuse("dmsetup create: only linear targets "
                                       "(START LEN linear DEVICE OFFSET) are allowed; other "
                                       "targets can write metadata when loaded")
        return Decision.allow()
    if sub == "remove":
        if "f" in _short_flags(args) or _long(args, "--force", "--deferred"):
            return Decision.refuse("dmsetup remove --force replaces the table with an error "
                                   "target under its users")
        names = pos[1:]
        if names and all(n.startswith(KIT_DM_PREFIX) for n in names):
            return Decision.allow()
        return Decision.refuse(f"dmsetup remove: only the kit's own {KIT_DM_PREFIX}* devices")
    return Decision.refuse(f"dmsetup {sub or '(no command)'} changes device-mapper state; only "
                           "read commands and the kit's read-only create/remove are allowed")


@_tool("losetup")
def _check_losetup(name: str, args: list[str], ctx: GuardContext) -> Decision:
    flags = _short_flags(args)
    listing = flags & {"l", "a", "j", "J", "n"} or _long(args, "--list", "--all", "--json",
                                                           "--associated", "--version")
    detaching = "d" in flags or _long(args, "--detach")
    if "D" in flags or _long(args, "--detach-all"):
        return Decision.refuse("losetup -D detaches every loop device, including ones in use")
    if "c" in flags or _long(args, "--set-capacity"):
        return Decision.refuse("losetup -c changes a loop device's capacity")
    if detaching:
        return Decision.allow()
    attaching = bool(_positionals(args, {"-o", "--offset", "--sizelimit", "-b",
                                         "--sector-size", "-O", "--output"}))
    if attaching and not ("r" in flags or _long(args, "--read-only")):
        return Decision.refuse("losetup attach without --read-only: evidence is attached read-only")
    if attaching or listing or "f" in flags or _long(args, "--find"):
        return Decision.allow()
    return Decision.allow()


@_tool("partx")
def _check_partx(name: str, args: list[str], ctx: GuardContext) -> Decision:
    flags = _short_flags(args)
    if flags & {"a", "d", "u"} or _long(args, "--add", "--delete", "--update"):
        return Decision.refuse("partx -a/-d/-u change the kernel's partition mappings")
    if "s" in flags or _long(args, "--show", "--version", "--help"):
        return Decision.allow()
    return Decision.refuse("partx is allowed only with --show (read the partition table)")


@_tool("blockdev")
def _check_blockdev(name: str, args: list[str], ctx: GuardContext) -> Decision:
    for arg in args:
        if not arg.startswith("--"):
            continue
        if arg in {"--setrw", "--flushbufs", "--rereadpt", "--setbsz", "--setra", "--setfra"}:
            return Decision.refuse(f"blockdev {arg} changes device state")
        if not (arg.startswith("--get") or arg in {"--report", "--setro", "--version", "-V"}):
            return Decision.refuse(f"blockdev {arg} is not on the read-only allowlist")
    return Decision.allow()


# ---- imaging and copying ---------------------------------------------------------------------

@_tool("ddrescue")
def _check_ddrescue(name: str, args: list[str], ctx: GuardContext) -> Decision:
    flags = _short_flags(args)
    if "f" in flags or _long(args, "--force"):
        return Decision.refuse("ddrescue --force writes to a device: output must be an image file")
    takes = {"-b", "--sector-size", "-r", "--retry-passes", "-H", "--test-mode", "-c",
             "--cluster-size", "-i", "--input-position", "-o", "--output-position", "-s",
             "--size", "-K", "--skip-size", "-m", "--domain-mapfile", "-F", "--fill-mode",
             "-T", "--timeout", "-a", "--min-read-rate", "-e", "--max-bad-areas", "-x",
             "--extend-outfile", "-L", "--loose-domain", "-Z", "--max-read-rate",
             "-E", "--max-error-rate", "--log-rates", "--log-reads", "--log-events",
             "--mapfile-interval", "--pause-on-error", "--pause-on-pass", "--delay-slow"}
    pos = _positionals(args, takes)
    if len(pos) < 2:
        return Decision.allow() if _long(args, "--version", "--help") or "V" in flags else \
            Decision.refuse("ddrescue needs infile outfile mapfile")
    infile, outfile = pos[0], pos[1]
    mapfile = pos[2] if len(pos) > 2 else None
    if mapfile is None:
        return Decision.refuse("ddrescue without a mapfile cannot resume or prove what was read")
    for label, target in (("outfile", outfile), ("mapfile", mapfile)):
        reason = ctx.writes_forbidden(target)
        if reason:
            return Decision.refuse(f"ddrescue {label}: {reason}")
        if os.path.realpath(target) == os.path.realpath(infile):
            return Decision.refuse(f"ddrescue {label} is the input: infile and outfile swapped?")
    return Decision.allow()


def _dd_like(name: str, args: list[str], ctx: GuardContext) -> Decision:
    for arg in args:
        key, _, value = arg.partition("=")
        if key in {"of", "hof", "ofs", "hofs"} and value:
            reason = ctx.writes_forbidden(value)
            if reason:
                return Decision.refuse(f"{name} {key}=: {reason}")
        if key in {"conv"} and "notrunc" in value:
            continue
    return Decision.allow()


_tool("dd", "dc3dd", "dcfldd")(_dd_like)


@_tool("rsync")
def _check_rsync(name: str, args: list[str], ctx: GuardContext) -> Decision:
    if _long(args, "--remove-source-files"):
        return Decision.refuse("rsync --remove-source-files deletes evidence after copying")
    if any(a.startswith("--delete") for a in args):
        return Decision.refuse("rsync --delete removes files on the receiving side")
    if _long(args, "--read-only"):
        return Decision.refuse("--read-only is not an rsync client option (rsyncd.conf only); "
                               "copy from a read-only mount instead")
    pos = _positionals(args, {"--log-file", "-e", "--rsh", "--exclude", "--include",
                              "--files-from", "--filter", "-f", "--chmod"})
    if len(pos) >= 2:
        reason = ctx.writes_forbidden(pos[-1])
        if reason:
            return Decision.refuse(f"rsync destination: {reason}")
    return Decision.allow()


@_tool("find")
def _check_find(name: str, args: list[str], ctx: GuardContext) -> Decision:
    for arg in args:
        if arg in {"-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0",
                   "-fprintf", "-fls"}:
            return Decision.refuse(f"find {arg} runs commands or writes files")
    return Decision.allow()


# ---- logs ------------------------------------------------------------------------------------

@_tool("dmesg")
def _check_dmesg(name: str, args: list[str], ctx: GuardContext) -> Decision:
    flags = _short_flags(args)
    if flags & {"c", "C"} or _long(args, "--clear", "--read-clear"):
        return Decision.refuse("dmesg -c/-C clears the kernel ring buffer (evidence)")
    if flags & {"n", "D", "E"} or _long(args, "--console-level", "--console-off", "--console-on"):
        return Decision.refuse("dmesg -n/-D/-E changes console logging")
    return Decision.allow()


@_tool("journalctl")
def _check_journalctl(name: str, args: list[str], ctx: GuardContext) -> Decision:
    for arg in args:
        base = arg.split("=", 1)[0]
        if base in {"--vacuum-size", "--vacuum-time", "--vacuum-files", "--rotate", "--flush",
                    "--sync", "--relinquish-var", "--smart-relinquish-var", "--setup-keys",
                    "--update-catalog", "--cursor-file"}:
            return Decision.refuse(f"journalctl {base} changes or deletes the journal")
    return Decision.allow()


# ---- device health ---------------------------------------------------------------------------

@_tool("smartctl")
def _check_smartctl(name: str, args: list[str], ctx: GuardContext) -> Decision:
    flags = _short_flags(args)
    if flags & {"t", "X"} or _long(args, "--test", "--abort"):
        return Decision.refuse("smartctl -t/-X start or abort self-tests (they load a failing disk)")
    if flags & {"s", "o", "S"} or _long(args, "--smart", "--offlineauto", "--saveauto", "--set"):
        return Decision.refuse("smartctl -s/-o/-S/--set change device settings")
    return Decision.allow()


_NVME_READ = {"list", "list-subsys", "smart-log", "error-log", "id-ctrl", "id-ns", "fw-log",
              "show-regs", "list-ns", "list-ctrl", "get-log", "effects-log", "endurance-log",
              "self-test-log", "version", "help", "id-ns-granularity", "id-uuid", "id-nvmset",
              "primary-ctrl-caps", "show-topology", "supported-log-pages",
              "get-feature"}
_NVME_DANGER = {"format": "nvme format erases the namespace",
                "sanitize": "nvme sanitize erases the drive",
                "create-ns": "nvme create-ns changes namespaces",
                "delete-ns": "nvme delete-ns destroys a namespace",
                "attach-ns": "nvme attach-ns changes namespaces",
                "detach-ns": "nvme detach-ns changes namespaces",
                "fw-download": "nvme fw-download changes firmware",
                "fw-commit": "nvme fw-commit activates firmware",
                "fw-activate": "nvme fw-activate activates firmware",
                "set-feature": "nvme set-feature changes device settings",
                "write": "nvme write writes to the namespace",
                "write-zeroes": "nvme write-zeroes erases blocks",
                "write-uncor": "nvme write-uncor marks blocks unreadable",
                "dsm": "nvme dsm deallocates (trims) blocks",
                "reset": "nvme reset resets the controller",
                "subsystem-reset": "nvme subsystem-reset resets the subsystem",
                "device-self-test": "nvme device-self-test loads a failing drive",
                "flush": "nvme flush forces writes to media",
                "telemetry-log": "nvme telemetry-log asks the controller to create new "
                                 "host-initiated telemetry data"}


@_tool("nvme")
def _check_nvme(name: str, args: list[str], ctx: GuardContext) -> Decision:
    sub = next((a for a in args if not a.startswith("-")), "")
    if sub in _NVME_DANGER:
        return Decision.refuse(_NVME_DANGER[sub])
    if sub == "get-feature" and any(a.startswith("--sel") for a in args):
        return Decision.allow()
    if sub not in _NVME_READ and not _long(args, "--version", "--help"):
        return Decision.refuse(f"nvme {sub} is not on the read-only allowlist")
    return Decision.allow()


@_tool("hdparm")
def _check_hdparm(name: str, args: list[str], ctx: GuardContext) -> Decision:
    for arg in args:
        if arg.startswith("/"):
            continue
        if arg not in {"-I", "-i", "-g", "-C", "-N", "--version", "-h"}:
            return Decision.refuse(f"hdparm {arg} may change device settings; only -I -i -g -C -N")
    return Decision.allow()


# ---- partition tables and RAID ---------------------------------------------------------------

@_tool("fdisk")
def _check_fdisk(name: str, args: list[str], ctx: GuardContext) -> Decision:
    if "l" in _short_flags(args) or _long(args, "--list", "--version"):
        return Decision.allow()
    return Decision.refuse("fdisk without -l edits the partition table")


@_tool("sfdisk")
def _check_sfdisk(name: str, args: list[str], ctx: GuardContext) -> Decision:
    read = {"-l", "--list", "-d", "--dump", "-J", "--json", "-V", "--verify", "--version",
            "-s", "--show-size", "-F", "--list-free", "-q", "--quiet", "-o", "--output",
            "--bytes", "-r", "--raw"}
    if not any(a in {"-l", "--list", "-d", "--dump", "-J", "--json", "-V", "--verify",
                     "--version", "-s", "--show-size", "-F", "--list-free"} for a in args):
        return Decision.refuse("sfdisk without --list/--dump/--json writes the partition table")
    for arg in args:
        if arg.startswith("-") and arg.split("=", 1)[0] not in read:
            return Decision.refuse(f"sfdisk {arg} changes the partition table")
    return Decision.allow()


@_tool("sgdisk")
def _check_sgdisk(name: str, args: list[str], ctx: GuardContext) -> Decision:
    allowed = {"-p", "--print", "-i", "--info", "-v", "--verify", "-V", "--version", "-O",
               "--print-mbr"}
    for arg in args:
        if arg.startswith("-") and arg.split("=")[0] not in allowed:
            if arg.startswith("-i") and arg[2:].isdigit():
                continue
            return Decision.refuse(f"sgdisk {arg} writes the partition table")
    return Decision.allow()


@_tool("parted")
def _check_parted(name: str, args: list[str], ctx: GuardContext) -> Decision:
    pos = [a for a in args if not a.startswith("-")]
    flags = _short_flags(args)
    if "l" in flags or _long(args, "--list"):
        return Decision.allow()
    words = pos[1:] if pos else []
    if words and all(w in {"print", "unit", "s", "B", "MiB", "GiB"} for w in words):
        return Decision.allow()
    return Decision.refuse("parted commands other than print/--list write the partition table")


@_tool("mdadm")
def _check_mdadm(name: str, args: list[str], ctx: GuardContext) -> Decision:
    safe = {"--examine", "-E", "--detail", "-D", "--query", "-Q", "--version", "-V"}
    if any(a in safe for a in args) and not any(
        a in {"--assemble", "-A", "--create", "-C", "--grow", "-G", "--build", "-B", "--manage",
              "--zero-superblock", "--run", "-R", "--stop", "-S", "--add", "-a", "--remove",
              "-r", "--fail", "-f", "--incremental", "-I"} for a in args
    ):
        return Decision.allow()
    return Decision.refuse("mdadm assemble/create/grow/manage change RAID state; only "
                           "--examine/--detail/--query are allowed")


# ---- ZFS -------------------------------------------------------------------------------------

_ZPOOL_READ = {"status", "list", "get", "history", "iostat", "version", "help"}
_ZPOOL_DANGER = {
    "clear": "zpool clear resets error counters and resumes I/O (it can rewind with -F)",
    "scrub": "zpool scrub writes repairs",
    "resilver": "zpool resilver writes to the pool",
    "destroy": "zpool destroy destroys the pool",
    "create": "zpool create makes a new pool",
    "set": "zpool set changes pool properties",
    "upgrade": "zpool upgrade changes the on-disk format",
    "labelclear": "zpool labelclear erases vdev labels",
    "online": "zpool online changes vdev state", "offline": "zpool offline changes vdev state",
    "replace": "zpool replace rebuilds onto another device",
    "attach": "zpool attach starts a resilver", "detach": "zpool detach changes the pool",
    "add": "zpool add changes the pool", "remove": "zpool remove changes the pool",
    "split": "zpool split changes the pool", "reguid": "zpool reguid rewrites the pool GUID",
    "trim": "zpool trim discards blocks", "initialize": "zpool initialize writes to free space",
    "checkpoint": "zpool checkpoint writes to the pool", "sync": "zpool sync forces writes",
    "reopen": "zpool reopen changes vdev state", "prefetch": "zpool prefetch is not needed",
}


@_tool("zpool")
def _check_zpool(name: str, args: list[str], ctx: GuardContext) -> Decision:
    sub = next((a for a in args if not a.startswith("-")), "")
    rest = args[args.index(sub) + 1 :] if sub in args else []
    if sub in _ZPOOL_DANGER:
        return Decision.refuse(_ZPOOL_DANGER[sub])
    if sub in _ZPOOL_READ:
        return Decision.allow()
    if sub == "events":
        if "c" in _short_flags(rest):
            return Decision.refuse("zpool events -c clears the event log (evidence)")
        return Decision.allow()
    if sub == "export":
        pools = _positionals(rest)
        if {"a", "f"} & _short_flags(rest) or _long(rest, "--all", "--force"):
            return Decision.refuse("zpool export -a/-f: export only the pool the kit imported")
        if len(pools) == 1 and pools[0] in ctx.readonly_pools:
            return Decision.allow()
        return Decision.refuse("zpool export writes pool state when the pool was imported "
                               "read-write; the kit exports only a pool this case imported with "
                               "-o readonly=on")
    if sub == "import":
        flags = _short_flags(rest)
        if {"X", "T"} & flags:
            return Decision.refuse("zpool import -X/-T rewind extremely (data loss)")
        if "F" in flags and "n" not in flags:
            return Decision.refuse("zpool import -F without -n discards transactions")
        if "F" in flags and "n" in flags:
            return Decision.allow()
        pools = _positionals(rest, {"-o", "-R", "-d", "-c", "-O"})
        props = {v.replace(" ", "") for v in _values(rest, "-o")}
        if not pools and "a" not in flags:
            if "f" in flags:
                return Decision.refuse("zpool import -f only with -o readonly=on -N and a pool")
            return Decision.allow()  # listing importable pools imports nothing
        if "readonly=on" not in props:
            return Decision.refuse("zpool import without -o readonly=on writes to the pool"
                                   + (" (and -f forces an import of a pool another host may "
                                      "use)" if "f" in flags else ""))
        if "N" not in flags:
            return Decision.refuse("zpool import without -N mounts datasets; import with -N")
        return Decision.allow()
    return Decision.refuse(f"zpool {sub} is not on the read-only allowlist")


@_tool("zfs")
def _check_zfs(name: str, args: list[str], ctx: GuardContext) -> Decision:
    sub = next((a for a in args if not a.startswith("-")), "")
    if sub in {"get", "list", "version", "help", "holds", "userspace", "groupspace"}:
        return Decision.allow()
    if sub == "mount":
        opts = {o for raw in _values(args, "-o") for o in raw.split(",")}
        if "ro" in opts:
            return Decision.allow()
        return Decision.refuse("zfs mount without -o ro")
    if sub in {"set", "rollback", "destroy", "create", "rename", "promote", "receive", "recv",
               "snapshot", "snap", "inherit", "upgrade", "clone", "bookmark", "redact", "diff"}:
        return Decision.refuse(f"zfs {sub} changes datasets")
    if sub == "import":
        return Decision.refuse("there is no `zfs import`; use zpool import -o readonly=on -N")
    return Decision.refuse(f"zfs {sub} is not on the read-only allowlist")


# ---- misc ------------------------------------------------------------------------------------

@_tool("fuser")
def _check_fuser(name: str, args: list[str], ctx: GuardContext) -> Decision:
    if "k" in _short_flags(args) or _long(args, "--kill"):
        return Decision.refuse("fuser -k kills processes; ckptrescue says whom to stop")
    return Decision.allow()


@_tool("udevadm")
def _check_udevadm(name: str, args: list[str], ctx: GuardContext) -> Decision:
    sub = next((a for a in args if not a.startswith("-")), "")
    if _long(args, "--cleanup-db", "--attribute-walk-cleanup"):
        return Decision.refuse("udevadm info --cleanup-db deletes the udev database")
    if sub in {"info", "--version"} or _long(args, "--version"):
        return Decision.allow()
    return Decision.refuse(f"udevadm {sub} changes device state; only udevadm info is allowed")


_PIPE_CHARS = re.compile(r"[|;&<>`$]")


def looks_like_shell(text: str) -> bool:
    """True when a single string looks like shell text rather than one argument."""
    return bool(_PIPE_CHARS.search(text))
