"""The kernel floor under the guard for external tools: each tool runs in a private mount
namespace (bubblewrap) where ``/`` is read-only and only the paths the guard says it writes
(its output files, an image destination) and a scratch ``TMPDIR`` are writable, with
``no_new_privs`` (bubblewrap always sets it). A guard mistake about a file the tool writes then
fails with EROFS instead of changing evidence or the case's records.

Tools whose job is to change the host's mount table (``mount``, ``umount``, ``zpool``, ``zfs``)
cannot run in a private namespace — their mounts would vanish with it — and neither can a loop
attach (the kernel keeps the backing file's path as the attaching namespace saw it), so they run
on the host,
judged by the guard alone, over devices the kit has already made read-only at the block layer.
Writes to *devices* are not stopped by a read-only mount (a device node on a read-only
filesystem stays writable); the block layer's read-only flag (BLKROSET) and read-only loop
devices are the kernel's answer there.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass

NAMESPACE_TOOL = "bwrap"


@dataclass(frozen=True)
class Confinement:
    """How one tool runs: the argv prefix, what it may write, and whether the kernel enforces."""

    prefix: tuple[str, ...]
    writable: tuple[str, ...]
    enforced: bool
    how: str


def bwrap_path() -> str | None:
    return shutil.which(NAMESPACE_TOOL, path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                                             "/sbin:/bin")


def _bind_target(path: str) -> str | None:
    """The existing path to bind for a write target: itself, or its nearest existing parent."""
    real = os.path.realpath(path)
    for _ in range(64):
        if os.path.lexists(real):
            return real
        parent = os.path.dirname(real)
        if parent == real:
            return None
        real = parent
    return None


# what a tool keeps of root's powers: file access and ownership (rsync -a of other users'
# files), never CAP_SYS_ADMIN (undoing BLKROSET, remounting), CAP_SYS_RAWIO, CAP_LINUX_IMMUTABLE
# (clearing chattr +i), CAP_SYS_MODULE/BOOT/TIME — unless its grammar says it needs one
# the tool is root: /proc/sys (host-wide sysctls), sysrq and friends are checked by uid alone
PROC_READ_ONLY = ("--ro-bind", "/proc/sys", "/proc/sys", "--ro-bind-try", "/proc/sysrq-trigger",
                  "/proc/sysrq-trigger", "--ro-bind-try", "/proc/irq", "/proc/irq",
                  "--ro-bind-try", "/proc/bus", "/proc/bus", "--ro-bind-try", "/proc/fs",
                  "/proc/fs")
BASE_CAPS = ("CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_CHOWN",
             "CAP_FSETID", "CAP_MKNOD", "CAP_SETFCAP")


def named_devices(argv: tuple[str, ...] | list[str]) -> list[str]:
    """Device nodes an argv names (as an argument or after ``=``), for a minimal ``/dev``."""
    out: list[str] = []
    for arg in argv:
        for cand in (arg, arg.partition("=")[2]):
            if not cand.startswith("/dev/") or cand.startswith("/dev/shm/"):
                continue
            try:
                mode = os.stat(cand).st_mode
            except OSError:
                continue
            if stat.S_ISBLK(mode) or stat.S_ISCHR(mode):
                out.append(cand)
    return list(dict.fromkeys(out))


def private_namespace(writes: tuple[str, ...], *, scratch: str | None, cwd: str | None,
                      argv: tuple[str, ...] | list[str] = (), caps: tuple[str, ...] = (),
                      all_devices: bool = False, network: bool = False,
                      readonly: tuple[str, ...] = (),
                      substitutes: dict[str, str] | None = None) -> Confinement:
    """Wrap a tool so that only ``writes`` (and ``scratch``) are writable, only the device
    nodes it names exist (unless it scans ``/dev``), and it keeps only the capabilities it
    needs; ``readonly`` (evidence, the case's records) is re-bound read-only even when it lies
    under a writable directory. ``substitutes`` maps a device the tool names to the read-only
    loop device it sees at that name instead (a read-only bind does not stop writes to a device
    node; the block layer's read-only flag does)."""
    bwrap = bwrap_path()
    if bwrap is None:
        return Confinement((), writes, False,
                           "bubblewrap (bwrap) is not installed: the guard alone decides what "
                           "the tool may write")
    prefix: list[str] = [bwrap, "--ro-bind", "/", "/"]
    if all_devices:
        prefix += ["--dev-bind", "/dev", "/dev"]
    else:
        prefix += ["--dev", "/dev", "--ro-bind-try", "/dev/shm", "/dev/shm"]
        for dev in named_devices(argv):
            real = os.path.realpath(dev)
            # a block device the kernel keeps writable is seen through a read-only loop over
            # it (``substitutes``): the tool reads the same bytes, and cannot write them
            prefix += ["--dev-bind", (substitutes or {}).get(real, real), real]
            if real != dev:
                prefix += ["--symlink", real, dev]
    prefix += ["--proc", "/proc", *PROC_READ_ONLY, *(() if network else ("--unshare-net",)),
               "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--cap-drop", "ALL"]
    for cap in dict.fromkeys((*BASE_CAPS, *caps)):
        prefix += ["--cap-add", cap]
    writable: list[str] = []
    for path in (*writes, *((scratch,) if scratch else ())):
        target = _bind_target(path)
        if target is None or target == "/" or target in writable:
            continue
        writable.append(target)
        prefix += ["--bind", target, target]
    for path in readonly:  # the floor under a writable directory
        real = os.path.realpath(path)
        if os.path.lexists(real) and any(real.startswith(w.rstrip("/") + "/") for w in writable):
            prefix += ["--ro-bind", real, real]
    if scratch:
        prefix += ["--setenv", "TMPDIR", scratch]
    if cwd:
        prefix += ["--chdir", os.path.realpath(cwd)]
    prefix.append("--")
    net = "network kept (a read-only query of a cluster service)" if network else "no network"
    how = (f"private mount namespace (bubblewrap): / read-only, {net}, no CAP_SYS_ADMIN"
           if "CAP_SYS_ADMIN" not in caps else
           f"private mount namespace (bubblewrap): / read-only, {net}")
    return Confinement(tuple(prefix), tuple(writable), True, how + ", no_new_privs")


def host_namespace() -> Confinement:
    return Confinement((), (), False, "host mount namespace: the tool changes the host's mount "
                                      "table; the guard decides, over read-only devices")
