"""Attaching and mounting: read-only forms only, and detaching only what this case attached
(``mount``, ``umount``, ``losetup``, ``dmsetup``, ``blockdev``, ``partx``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptrescue.guard.decision import Decision
from ckptrescue.guard.grammar import Parsed
from ckptrescue.guard.tools._base import Entry, grammar

if TYPE_CHECKING:
    from ckptrescue.guard.context import GuardContext

KIT_DM_PREFIX = "ckr-"  # device-mapper names the kit creates (read-only LV assemblies)

# ---- mount -----------------------------------------------------------------------------------
# filesystem types with a known read-only, no-replay mount form (checked below)
RO_MOUNT_TYPES = {"xfs", "ext2", "ext3", "ext4", "btrfs", "vfat", "exfat", "iso9660", "squashfs",
                  "udf", "zfs"}
# mount options that neither write nor change what is mounted read-only
SAFE_MOUNT_OPTIONS = {"ro", "norecovery", "noload", "nouuid", "nologreplay", "rescue=nologreplay",
                      "nosuid", "nodev", "noexec", "rescue=ignorebadroots",
                      "rescue=ignoredatacsums", "noatime", "nodiratime", "inode64", "inode32",
                      "user_xattr", "acl", "noacl", "utf8", "nosymfollow"}
SAFE_MOUNT_PREFIXES = ("uid=", "gid=", "umask=", "dmask=", "fmask=", "iocharset=", "codepage=",
                       "logdev=", "sb=", "subvol=", "subvolid=", "device=", "context=",
                       "session=", "blocksize=")
# an evidence mount never runs, honours set-uid bits on, or opens device nodes from, the evidence
REQUIRED_MOUNT_OPTIONS = ("nosuid", "nodev", "noexec")
_MAKE = ("make-shared", "make-slave", "make-private", "make-unbindable", "make-rshared",
         "make-rslave", "make-rprivate", "make-runbindable")


def _mount(p: Parsed, ctx: GuardContext) -> Decision | None:
    tokens = [t.strip() for raw in p.values("options") for t in raw.split(",") if t.strip()]
    if "remount" in tokens:
        return Decision.refuse("remount changes a mounted filesystem; never remount evidence")
    if "rw" in tokens or p.has("rw", "read-write"):
        return Decision.refuse("mount read-write: evidence is only ever mounted read-only (ro)")
    if not p.operands:
        if tokens or p.has("read-only"):
            return Decision.refuse("mount with options but no device and mount point")
        return Decision.allow()  # `mount` (or `mount -t TYPE`) lists mounts
    if len(p.operands) != 2:
        return Decision.refuse("mount needs exactly a device and a mount point (one operand "
                               "would take the rest from fstab)")
    if "ro" not in tokens and not p.has("read-only"):
        return Decision.refuse("mount without ro: evidence is only ever mounted read-only")
    for token in tokens:
        if token not in SAFE_MOUNT_OPTIONS and not token.startswith(SAFE_MOUNT_PREFIXES):
            return Decision.refuse(f"mount option {token!r} is not on the read-only allowlist")
    fstypes = [t for raw in p.values("types") for t in raw.split(",")]
    if not fstypes:
        return Decision.refuse("mount without -t: give the filesystem type so the guard can "
                               "require norecovery (XFS) or noload (ext3/ext4)")
    fstype = fstypes[0]
    if len(fstypes) > 1 or fstype == "auto" or fstype.startswith("no"):
        return Decision.refuse("mount -t must name exactly one filesystem type (not auto or a "
                               "list): the read-only options depend on it")
    if fstype not in RO_MOUNT_TYPES:
        return Decision.refuse(f"mount -t {fstype}: no known read-only, no-replay form for this "
                               "filesystem type")
    opts = set(tokens)
    if fstype == "btrfs" and not opts & {"nologreplay", "rescue=nologreplay"}:
        return Decision.refuse("btrfs mount without nologreplay: a plain ro mount replays the "
                               "log tree and changes the disk")
    if fstype == "xfs" and "norecovery" not in opts:
        return Decision.refuse("XFS mount without norecovery: a plain ro mount replays a dirty "
                               "log and changes the disk")
    if fstype in {"ext3", "ext4"} and not opts & {"noload", "norecovery"}:
        return Decision.refuse(f"{fstype} mount without noload: a plain ro mount replays the "
                               "journal and changes the disk")
    if fstype == "xfs" and "noload" in opts:
        return Decision.refuse("XFS rejects noload; use ro,norecovery")
    if fstype == "zfs":
        return Decision.refuse("mount ZFS datasets through zpool import -o readonly=on -N")
    missing = [o for o in REQUIRED_MOUNT_OPTIONS if o not in tokens]
    if missing:
        return Decision.refuse(f"mount without {','.join(missing)}: an evidence mount never runs "
                               "programs, set-uid bits or device nodes from the evidence")
    reason = ctx.mount_point_forbidden(p.operands[1])
    if reason:
        return Decision.refuse(f"mount point: {reason}")
    source = p.operands[0]
    if ctx.block_rdev(source) is None:
        return Decision.refuse(f"mount {source}: not a block device; the kit mounts only from a "
                               "device the kernel reports read-only (attach an image with "
                               "losetup --read-only)")
    if not ctx.device_read_only(source):
        return Decision.refuse(f"mount {source}: the kernel reports the device writable; a "
                               "filesystem is mounted only from a device the kernel keeps "
                               "read-only (a ro mount can still write: orphan cleanup, log "
                               "replay)")
    return Decision.allow(host_namespace=True)


MOUNT = grammar(
    "mount", "-a --all", "-c --no-canonicalize", "-f --fake", "-F --fork", "-T= --fstab=",
    "-i --internal-only", "-l --show-labels", "-m --mkdir=?", "-n --no-mtab",
    "--options-mode=", "--options-source=", "--options-source-force", "--onlyonce",
    "-o= --options=", "-O= --test-opts=", "-r --read-only", "-R --rbind", "-s", "-t= --types=",
    "-v --verbose", "-w --rw --read-write", "-N= --namespace=", "-L= --label=", "-U= --uuid=",
    "--source=", "--target=", "--target-prefix=", "-B --bind", "-M --move", "--map-users=",
    "--map-groups=", *(f"--{m}" for m in _MAKE), "-h --help", "-V --version",
    refuse={
        "all": "mount -a mounts everything in fstab",
        "bind": "bind/move/propagation mounts are not part of read-only inspection",
        "rbind": "bind/move/propagation mounts are not part of read-only inspection",
        "move": "bind/move/propagation mounts are not part of read-only inspection",
        **dict.fromkeys(_MAKE, "bind/move/propagation mounts are not part of read-only inspection"),
        "fstab": "mount --fstab reads options from another fstab",
        "options-mode": "mount --options-mode merges options from fstab",
        "options-source": "mount --options-source merges options from fstab",
        "options-source-force": "mount --options-source-force merges options from fstab",
        "mkdir": "mount --mkdir creates directories",
        "namespace": "mount --namespace acts in another mount namespace",
        "label": "give the device itself, not a label/UUID/--source/--target",
        "uuid": "give the device itself, not a label/UUID/--source/--target",
        "source": "give the device itself, not a label/UUID/--source/--target",
        "target": "give the device itself, not a label/UUID/--source/--target",
        "target-prefix": "mount --target-prefix changes where things are mounted",
        "fork": "mount -F mounts fstab entries in parallel",
        "map-users": "idmapped mounts are not part of read-only inspection",
        "map-groups": "idmapped mounts are not part of read-only inspection",
        "s": "mount -s ignores options the filesystem does not know (sloppy)",
    },
    policy=_mount, host_namespace=True)


# ---- umount ----------------------------------------------------------------------------------
def _umount(p: Parsed, ctx: GuardContext) -> Decision | None:
    if not p.operands:
        return Decision.refuse("umount needs the mount point the kit mounted")
    for target in p.operands:
        if ctx.block_rdev(target) is not None:
            return Decision.refuse(f"umount {target}: give the mount point (a directory), not "
                                   "a device: umount would pick one of its mounts itself")
        if ctx.attached_mount(target) is None:
            return Decision.refuse(f"umount {target}: not a mount this case made (the kit "
                                   "unmounts only what its records show the kernel mounted "
                                   "for it, with the same mount id)")
    return Decision.allow(host_namespace=True)


UMOUNT = grammar(
    "umount", "-a --all", "-A --all-targets", "-c --no-canonicalize", "-d --detach-loop",
    "--fake", "-f --force", "-i --internal-only", "-n --no-mtab", "-l --lazy", "-O= --test-opts=",
    "-R --recursive", "-r --read-only", "-t= --types=", "-v --verbose", "-q --quiet",
    "-N= --namespace=", "-h --help", "-V --version",
    refuse={"all": "umount -a unmounts everything",
            "all-targets": "umount -A unmounts every mount of the device, not only the kit's",
            "recursive": "umount -R unmounts submounts the case did not make",
            "detach-loop": "umount -d also detaches a loop device; the kit detaches its own "
                           "loops itself",
            "read-only": "umount -r remounts read-only on failure (a remount)",
            "namespace": "umount --namespace acts in another mount namespace",
            "types": "umount -t selects mounts by type (with -a)",
            "test-opts": "umount -O selects mounts by options (with -a)"},
    policy=_umount, host_namespace=True)


# ---- losetup ---------------------------------------------------------------------------------
def _losetup(p: Parsed, ctx: GuardContext) -> Decision | None:
    if p.has("detach"):
        devices = [*p.values("detach"), *p.operands]
        for dev in devices:
            if ctx.attached_loop(dev) is None:
                return Decision.refuse(f"losetup -d {dev}: not a loop device this case attached "
                                       "(the kit detaches only its own, still bound to the "
                                       "file the kernel showed it attach)")
        return Decision.allow(host_namespace=True)
    attaching = (p.has("find") and bool(p.operands)) or len(p.operands) >= 2
    if attaching:
        if not p.has("read-only"):
            return Decision.refuse("losetup attach without --read-only: evidence is attached "
                                   "read-only")
        if len(p.operands) > (1 if p.has("find") else 2):
            return Decision.refuse("losetup attaches one file at a time")
        # the kernel keeps the backing file's path as seen from the attaching namespace
        return Decision.allow(host_namespace=True)
    return Decision.allow()


LOSETUP = grammar(
    "losetup", "-a --all", "-d= --detach=", "-D --detach-all", "-f --find", "-c= --set-capacity=",
    "-j= --associated=", "-L --nooverlap", "-o= --offset=", "--sizelimit=", "-b= --sector-size=",
    "-P --partscan", "-r --read-only", "--direct-io=?", "--show", "-v --verbose", "-J --json",
    "-l --list", "-n --noheadings", "-O= --output=", "--output-all", "--raw", "-h --help",
    "-V --version", "--loop-ref=",
    refuse={"detach-all": "losetup -D detaches every loop device, including ones in use",
            "set-capacity": "losetup -c changes a loop device's capacity",
            "loop-ref": "losetup --loop-ref is not used by the kit"},
    policy=_losetup, paths=("detach",))


# ---- dmsetup ---------------------------------------------------------------------------------
DMSETUP_READ = {"ls", "table", "info", "status", "deps", "targets", "version", "help",
                "splitname"}


def _dmsetup(p: Parsed, ctx: GuardContext) -> Decision | None:
    sub = p.operands[0] if p.operands else ""
    if not sub:
        return Decision.allow() if p.has("version", "help") else Decision.refuse(
            "dmsetup needs a command")
    if sub in DMSETUP_READ:
        return Decision.allow()
    if sub == "create":
        if not p.has("readonly"):
            return Decision.refuse("dmsetup create without --readonly: evidence devices are "
                                   "only assembled read-only")
        if p.has("concise", "table", "notable", "uuid"):
            return Decision.refuse("dmsetup create: the kit gives one name and one table file "
                                   "(no --concise, --table, --notable or --uuid)")
        if len(p.operands) != 3 or not p.operands[1].startswith(KIT_DM_PREFIX):
            return Decision.refuse(f"dmsetup create: exactly one {KIT_DM_PREFIX}* name and one "
                                   "table file")
        table = ctx.read_text(p.operands[2])
        if table is None:
            return Decision.refuse(f"dmsetup create: table file {p.operands[2]} is unreadable")
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
        names = p.operands[1:]
        if not names:
            return Decision.refuse("dmsetup remove needs the name of a device the kit made")
        for name in names:
            if not name.startswith(KIT_DM_PREFIX):
                return Decision.refuse(f"dmsetup remove: only the kit's own {KIT_DM_PREFIX}* "
                                       "devices")
            if ctx.attached_dm(name) is None:
                return Decision.refuse(f"dmsetup remove {name}: not a device this case "
                                       "assembled (only the kit's own, by this case's records)")
        return Decision.allow()
    return Decision.refuse(f"dmsetup {sub} changes device-mapper state; only read commands and "
                           "the kit's read-only create/remove are allowed")


DMSETUP = grammar(
    "dmsetup", "--version", "-h --help", "-c -C --columns", "-v --verbose", "-f --force",
    "--checks", "--manglename=", "-r --readonly", "--noopencount", "--noflush", "--nolockfs",
    "--inactive", "--udevcookie=", "--noudevrules", "--noudevsync", "--verifyudev", "-y --yes",
    "--readahead=", "--retry", "-o= --options=", "-O= --sort=", "-S= --select=",
    "--nameprefixes", "--noheadings", "--separator=", "-j= --major=", "-m= --minor=",
    "-U= --uid=", "-G= --gid=", "-M= --mode=", "-u= --uuid=", "--addnodeonresume",
    "--addnodeoncreate", "-n --notable", "--table=", "--concise", "--tree", "--target=",
    "--exec=", "--count=", "--interval=", "--nosuffix", "--unbuffered", "--units=",
    "--showkeys", "--deferred", "--unquoted", "--headings=", "--setuuid",
    refuse={"force": "dmsetup remove --force replaces the table with an error target under "
                     "its users",
            "exec": "dmsetup --exec runs a command", "deferred": "dmsetup --deferred removes "
            "later, out of the kit's sight", "setuuid": "dmsetup --setuuid changes a device",
            "retry": "dmsetup --retry repeats a remove"},
    policy=_dmsetup)


# ---- blockdev --------------------------------------------------------------------------------
BLOCKDEV_READ = {"--getsz", "--getss", "--getpbsz", "--getiomin", "--getioopt", "--getalignoff",
                 "--getmaxsect", "--getbsz", "--getsize", "--getsize64", "--getra", "--getfra",
                 "--getro", "--getdiscardzeroes", "--getdiskseq", "--getzonesz", "--report",
                 "-q", "-v", "-V", "--version", "-h", "--help"}


def _blockdev(name: str, args: list[str], ctx: GuardContext, depth: int) -> Decision:
    """blockdev runs its ``--command`` words in order on the devices that follow them."""
    for arg in args:
        if arg.startswith("-") and arg not in BLOCKDEV_READ:
            if arg in {"--setrw", "--flushbufs", "--rereadpt", "--setbsz", "--setra", "--setfra"}:
                return Decision.refuse(f"blockdev {arg} changes device state")
            if arg == "--setro":
                return Decision.refuse("blockdev --setro: the kit write-blocks evidence itself "
                                       "(recorded, releasable: `ckptrescue writeblock`); on any "
                                       "other device it could stop the host")
            return Decision.refuse(f"blockdev {arg} is not on the read-only allowlist")
    return Decision.allow()


# ---- partx -----------------------------------------------------------------------------------
PARTX = grammar(
    "partx", "-a --add", "-d --delete", "-u --update", "-s --show", "-b --bytes",
    "-g --noheadings", "-n= --nr=", "-o= --output=", "--output-all", "-P --pairs", "-r --raw",
    "-S= --sector-size=", "-t= --type=", "--list-types", "-v --verbose", "-h --help",
    "-V --version",
    refuse=dict.fromkeys(("add", "delete", "update"),
                         "partx -a/-d/-u change the kernel's partition mappings"),
    requires={"show": "partx is allowed only with --show (read the partition table)"},
    operands=(0, 2))

TOOLS: dict[str, Entry] = {"mount": MOUNT, "umount": UMOUNT, "losetup": LOSETUP,
                           "dmsetup": DMSETUP, "blockdev": _blockdev, "partx": PARTX}
