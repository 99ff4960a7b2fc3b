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


def private_namespace(writes: tuple[str, ...], *, scratch: str | None,
                      cwd: str | None) -> Confinement:
    """Wrap a tool so that only ``writes`` (and ``scratch``) are writable."""
    bwrap = bwrap_path()
    if bwrap is None:
        return Confinement((), writes, False,
                           "bubblewrap (bwrap) is not installed: the guard alone decides what "
                           "the tool may write")
    prefix: list[str] = [bwrap, "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev",
                         "--proc", "/proc", "--die-with-parent"]
    writable: list[str] = []
    for path in (*writes, *((scratch,) if scratch else ())):
        target = _bind_target(path)
        if target is None or target == "/" or target in writable:
            continue
        writable.append(target)
        prefix += ["--bind", target, target]
    if scratch:
        prefix += ["--setenv", "TMPDIR", scratch]
    if cwd:
        prefix += ["--chdir", os.path.realpath(cwd)]
    prefix.append("--")
    return Confinement(tuple(prefix), tuple(writable), True,
                       "private mount namespace (bubblewrap): / read-only, no_new_privs")


def host_namespace() -> Confinement:
    return Confinement((), (), False, "host mount namespace: the tool changes the host's mount "
                                      "table; the guard decides, over read-only devices")
