"""ZFS: ``zpool`` and ``zfs`` by subcommand, ``zdb``. Pools are imported only read-only and
unmounted (``-o readonly=on -N``) and exported only when this case imported them."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ckptrescue.guard.decision import Decision
from ckptrescue.guard.grammar import Parsed
from ckptrescue.guard.tools._base import Entry, Subcommands, grammar

if TYPE_CHECKING:
    from ckptrescue.guard.context import GuardContext

ZPOOL_DANGER = {
    "clear": "zpool clear resets error counters and resumes I/O (it can rewind with -F)",
    "scrub": "zpool scrub writes repairs", "resilver": "zpool resilver writes to the pool",
    "destroy": "zpool destroy destroys the pool", "create": "zpool create makes a new pool",
    "set": "zpool set changes pool properties", "upgrade": "zpool upgrade changes the on-disk "
    "format", "labelclear": "zpool labelclear erases vdev labels",
    "online": "zpool online changes vdev state", "offline": "zpool offline changes vdev state",
    "replace": "zpool replace rebuilds onto another device",
    "attach": "zpool attach starts a resilver", "detach": "zpool detach changes the pool",
    "add": "zpool add changes the pool", "remove": "zpool remove changes the pool",
    "split": "zpool split changes the pool", "reguid": "zpool reguid rewrites the pool GUID",
    "trim": "zpool trim discards blocks", "initialize": "zpool initialize writes to free space",
    "checkpoint": "zpool checkpoint writes to the pool", "sync": "zpool sync forces writes",
    "reopen": "zpool reopen changes vdev state", "prefetch": "zpool prefetch is not needed",
    "wait": "zpool wait is not needed", "ddtprune": "zpool ddtprune changes the pool",
}
_JSON = ("-j --json", "--json-int", "--json-flat-vdevs", "--json-pool-key-guid")


def _zpool_import(p: Parsed, ctx: GuardContext) -> Decision | None:
    if p.has("X", "T"):
        return Decision.refuse("zpool import -X/-T rewind extremely (data loss)")
    if p.has("F") and not p.has("n"):
        return Decision.refuse("zpool import -F without -n discards transactions")
    if p.has("a"):
        return Decision.refuse("zpool import -a imports every pool it finds; name the one pool "
                               "(with -o readonly=on -N)")
    if not p.operands:
        if p.has("f") or p.has("o") or p.has("N") or p.has("F"):
            return Decision.refuse("zpool import -f/-F only with -o readonly=on -N and a pool")
        return Decision.allow()  # listing importable pools imports nothing
    props: dict[str, str] = {}
    for value in p.values("o"):
        name, _, val = value.replace(" ", "").partition("=")
        props[name] = val  # the last -o of a property wins, as in zpool
    if props.get("readonly") != "on":
        return Decision.refuse("zpool import without -o readonly=on writes to the pool"
                               + (" (and -f forces an import of a pool another host may use)"
                                  if p.has("f") else ""))
    if "cachefile" in props and props["cachefile"] not in {"none", ""}:
        return Decision.refuse("zpool import -o cachefile=FILE writes a cache file; use "
                               "cachefile=none")
    if not p.has("N"):
        return Decision.refuse("zpool import without -N mounts datasets; import with -N")
    if len(p.operands) > 2:
        return Decision.refuse("zpool import takes one pool (and its new name)")
    if p.has("n"):
        return Decision.allow()  # -F -n: says whether a rewind would work; imports nothing
    altroots = p.values("R")
    if not altroots or props.get("altroot") not in (None, altroots[-1]):
        return Decision.refuse("zpool import without -R ALTROOT: the pool's datasets would "
                               "mount where the evidence's mountpoint properties say (/etc, "
                               "a home directory…); import under an empty directory of yours")
    reason = _mount_place(ctx, altroots[-1])
    if reason:
        return Decision.refuse(f"zpool import -R: {reason}")
    return Decision.allow(host_namespace=True)


def _zpool_export(p: Parsed, ctx: GuardContext) -> Decision | None:
    if p.has("a", "f", "F"):
        return Decision.refuse("zpool export -a/-f: export only the pool the kit imported")
    if len(p.operands) == 1 and ctx.attached_pool(p.operands[0]) is not None:
        return Decision.allow(host_namespace=True)
    return Decision.refuse("zpool export writes pool state when the pool was imported "
                           "read-write; the kit exports only a pool this case imported with "
                           "-o readonly=on")


ZPOOL = Subcommands(
    "zpool", globals=grammar("zpool", "-V --version", "-?", "-h --help", posix=True),
    subs={
        "status": grammar("zpool status", "-c=", "-D", "-e", "-g", "-i", "-L", "-p", "-P", "-s",
                          "-t", "-T=", "-v", "-x", "--power", *_JSON,
                          refuse={"c": "zpool status -c runs scripts"}),
        "list": grammar("zpool list", "-g", "-H", "-L", "-o=", "-p", "-P", "-T=", "-v", *_JSON),
        "get": grammar("zpool get", "-H", "-o=", "-p", *_JSON),
        "history": grammar("zpool history", "-i", "-l"),
        "iostat": grammar("zpool iostat", "-c=", "-g", "-H", "-L", "-n", "-p", "-P", "-q", "-r",
                          "-T=", "-v", "-w", "-y", "-l", *_JSON,
                          refuse={"c": "zpool iostat -c runs scripts"}),
        "version": grammar("zpool version", *_JSON),
        "help": grammar("zpool help"),
        "events": grammar("zpool events", "-v", "-H", "-f", "-c", *_JSON,
                          refuse={"c": "zpool events -c clears the event log (evidence)",
                                  "f": "zpool events -f never ends"}),
        "import": grammar("zpool import", "-a", "-c=", "-d=", "-D", "-f", "-F", "-m", "-n", "-N",
                          "-o=", "-O=", "-R=", "-s", "-t", "-T=", "-V", "-X", "-l",
                          "--rewind-to-checkpoint",
                          refuse={"l": "zpool import -l loads encryption keys",
                                  "rewind-to-checkpoint": "zpool import --rewind-to-checkpoint "
                                                          "discards everything after it",
                                  "O": "zpool import -O sets dataset properties",
                                  "m": "zpool import -m imports with a missing log device",
                                  "V": "zpool import -V imports a faulted pool"},
                          # a listing reads the labels of every device under its -d
                          # directories (or /dev), as blkid does: the host's /dev, read-only
                          devices=True, policy=_zpool_import, paths=("d", "R"),
                          operand_paths=False),
        "export": grammar("zpool export", "-a", "-f", "-F", policy=_zpool_export,
                          operand_paths=False),
    },
    refused=ZPOOL_DANGER)


ZFS_MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "noexec")


def _mount_place(ctx: GuardContext, path: str) -> str | None:
    """Why ``path`` may not take a ZFS mount (or hold a pool's mounts): a place no output may
    go (a host tree, evidence, the case's records), or an existing directory with files in it
    (they would be hidden). zfs creates a missing directory itself."""
    return ctx.writes_forbidden(path) or (
        ctx.mount_point_forbidden(path) if os.path.lexists(path) else None)


def _zfs_mount(p: Parsed, ctx: GuardContext) -> Decision | None:
    opts = [o.strip() for raw in p.values("o") for o in raw.split(",")]
    if "ro" not in opts or "rw" in opts:
        return Decision.refuse("zfs mount without -o ro")
    if not p.operands:
        return Decision.allow()  # lists what is mounted
    if len(p.operands) != 1:
        return Decision.refuse("zfs mount takes one dataset")
    missing = [o for o in ZFS_MOUNT_OPTIONS if o not in opts]
    if missing or any(o in opts for o in ("suid", "dev", "exec", "setuid", "devices")):
        return Decision.refuse(f"zfs mount without -o {','.join(ZFS_MOUNT_OPTIONS)}: an "
                               "evidence dataset never runs programs, set-uid bits or device "
                               "nodes")
    dataset = p.operands[0]
    if ctx.attached_pool(dataset.split("/")[0]) is None:
        return Decision.refuse(f"zfs mount {dataset}: not a dataset of a pool this case "
                               "imported read-only (under its -R directory)")
    where = ctx.dataset_mountpoint(dataset) if ctx.dataset_mountpoint else None
    if not where or not where.startswith("/"):
        return Decision.refuse(f"zfs mount {dataset}: cannot tell where it would mount "
                               f"(mountpoint {where or 'unknown'})")
    # the mountpoint comes from the evidence: it must be a place a mount point may be
    reason = _mount_place(ctx, where)
    if reason:
        return Decision.refuse(f"zfs mount {dataset}: its mountpoint {where}: {reason}")
    return Decision.allow(host_namespace=True)


_ZFS_CHANGE = {s: f"zfs {s} changes datasets" for s in (
    "set", "rollback", "destroy", "create", "rename", "promote", "receive", "recv", "snapshot",
    "snap", "inherit", "upgrade", "clone", "bookmark", "redact", "diff", "send", "unmount",
    "umount", "share", "unshare", "allow", "unallow", "load-key", "unload-key", "change-key",
    "hold", "release", "program", "jail", "unjail", "zone", "unzone", "project")}
_ZFS_CHANGE["import"] = "there is no `zfs import`; use zpool import -o readonly=on -N"
ZFS = Subcommands(
    "zfs", globals=grammar("zfs", "-V --version", "-?", "-h --help", posix=True),
    subs={
        "get": grammar("zfs get", "-r", "-d=", "-H", "-p", "-o=", "-s=", "-t=", *_JSON),
        "list": grammar("zfs list", "-r", "-d=", "-H", "-p", "-o=", "-s=", "-S=", "-t=", *_JSON),
        "version": grammar("zfs version", *_JSON), "help": grammar("zfs help"),
        "holds": grammar("zfs holds", "-r", "-H", "-p"),
        "userspace": grammar("zfs userspace", "-H", "-i", "-n", "-p", "-o=", "-s=", "-S=", "-t="),
        "groupspace": grammar("zfs groupspace", "-H", "-i", "-n", "-p", "-o=", "-s=", "-S=",
                              "-t="),
        "mount": grammar("zfs mount", "-o=", "-O", "-v", "-a", "-l", "-f", "-R",
                         refuse={"a": "zfs mount -a mounts every dataset",
                                 "O": "zfs mount -O mounts over a non-empty directory",
                                 "l": "zfs mount -l loads encryption keys",
                                 "f": "zfs mount -f forces a mount",
                                 "R": "zfs mount -R mounts every descendant"},
                         policy=_zfs_mount, operand_paths=False),
    },
    refused=_ZFS_CHANGE)

ZDB = grammar(
    "zdb", "-b", "-c", "-C", "-d", "-D", "-E", "-h", "-i", "-l", "-L", "-m", "-M", "-O", "-r",
    "-R", "-s", "-S", "-u", "-A", "-B", "-e", "-F", "-G", "-k", "-P", "-q", "-Q", "-T", "-v",
    "-V", "-X", "-Y", "-y", "-I=", "-o=", "-p=", "-t=", "-U=", "-x=", "-K=", "-a",
    abbreviate=False, devices=True, caps=("CAP_SYS_ADMIN",),
    refuse={"x": "zdb -x dumps blocks into a directory", "r": "zdb -r copies a file out",
            "B": "zdb -B writes a send stream", "X": "zdb -X attempts extreme rewinds"})

TOOLS: dict[str, Entry] = {"zpool": ZPOOL, "zfs": ZFS, "zdb": ZDB}
