"""Attach and release evidence as read-only block devices (the block layer of ``mount``).

An image file gets ``losetup --read-only --find --show`` (``-P`` for partition tables); a block
device gets ``BLKROSET`` on it and its partitions (:mod:`writeblock`, recorded as
``safety.kernel``; kept after release until ``ckptrescue writeblock release``).
``/sys/class/block/*/ro`` is read back for the device and every partition. :func:`release`
detaches exactly what was attached (after checking that each loop still points at the recorded
backing file) and removes the device-mapper assemblies the kit made (``lvm.assemble_lv``).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptrescue.effects.runner import DETACH_WAIT_S, SubprocessRunner, ToolCall
from ckptrescue.errors import EvidenceError, RefusedError, ToolFailedError
from ckptrescue.storage import sysfs

if TYPE_CHECKING:
    from ckptrescue.record.case import Case


@contextlib.contextmanager
def attached(target: str | Path, *, case: Case, partscan: bool = True,
             protect_device: bool = True, require_block: bool = True,
             purpose: str = "attached as evidence",
             runner: SubprocessRunner | None = None) -> Iterator[dict[str, Any]]:
    """Attach ``target`` read-only for the duration (image files only get a loop device; a
    block device's write block stays: see :mod:`writeblock`)."""
    info = attach(target, case=case, partscan=partscan, protect_device=protect_device,
                  require_block=require_block, purpose=purpose, runner=runner)
    try:
        yield info
    finally:
        release(info, case=case, runner=runner)


def attach(target: str | Path, *, case: Case, partscan: bool = True,
           protect_device: bool = True, require_block: bool = True,
           purpose: str = "attached as evidence", runner: SubprocessRunner | None = None) -> dict[str, Any]:
    """Make ``target`` available as a read-only block device; returns what was done.

    Image files get a read-only loop device. A block device is write-blocked at the block layer
    (``BLKROSET`` on it and its partitions, :func:`writeblock.protect`; the block stays after
    release) when ``protect_device``. Write-protecting a device under a mount is refused (it
    would make a live filesystem fail its writes): with ``require_block`` (mounting) that is an
    error, without it (inspection) the refusal is recorded and the caller goes on reading.
    """
    from ckptrescue.storage import writeblock

    runner = runner or SubprocessRunner(case)
    path = Path(target)
    if not path.exists():
        raise EvidenceError(f"{path}: no such image or device")
    info: dict[str, Any] = {"target": str(path), "loop_device": None, "backing_file": None,
                            "set_readonly": []}
    if sysfs.is_block_device(path):
        dev = str(path)
    elif path.is_file():
        argv = ["losetup", "--read-only", "--find", "--show"]
        if partscan:
            argv.append("-P")
        res = runner.run(ToolCall(argv=(*argv, str(path)), timeout_s=60,
                                  purpose="attach image read-only"))
        if res.refused:
            raise RefusedError(res.refused)
        if res.returncode != 0:
            raise ToolFailedError(f"losetup failed: {res.stderr.strip()}")
        dev = res.stdout.strip()
        info["loop_device"] = dev
        info["backing_file"] = sysfs.loop_backing_file(sysfs.dev_name(dev))
        wrong = presented_mismatch(dev, path)
        if wrong is not None:
            release(info, case=case, runner=runner)
            raise ToolFailedError(f"{dev}: {wrong}; not used (detached)",
                                  hint="run the command again: losetup is given the next free "
                                       "loop device")
        info["presented_bytes"] = sysfs.size_bytes(dev)
    else:
        raise EvidenceError(f"{path}: not an image file or block device")
    info["device"] = dev
    name = sysfs.dev_name(dev)
    nodes = [name, *sysfs.partitions(name)]
    if info["loop_device"] is not None:
        # the kit's own loop device: read-only by LO_FLAGS_READ_ONLY, never BLKROSET (that
        # would outlive the detach and make the next user of this loop read-only)
        writeblock.record_loop(case, path, dev)
        still_rw = [f"/dev/{n}" for n in nodes if not sysfs.is_readonly(n)]
        if still_rw:
            release(info, case=case)
            raise RefusedError(f"{', '.join(still_rw)} did not come up read-only")
    elif protect_device:
        rec = writeblock.protect(dev, case, purpose=purpose, refuse_any_mount=require_block)
        info["write_block"] = {k: rec.get(k) for k in ("target", "enforced", "how", "previous",
                                                         "by_kit", "reason")}
        info["set_readonly"] = list(rec.get("set_now") or [])
        still_rw = [f"/dev/{n}" for n in nodes if not sysfs.is_readonly(n)]
        if require_block and not rec.get("enforced"):
            raise RefusedError(f"{path}: {rec.get('reason') or 'not write-blocked'}; refusing to "
                               "mount a writable device",
                               hint="freeze and unmount it first, or image it / copy from it")
        if require_block and still_rw:
            raise RefusedError(f"cannot make {', '.join(still_rw)} read-only at the block layer")
    info["ro_verified"] = {f"/dev/{n}": sysfs.is_readonly(n) for n in nodes}
    case.log("storage.attached", info)
    return info


def presented_mismatch(dev: str, backing: str | Path, *, offset: int = 0,
                       limit: int | None = None) -> str | None:
    """Why the loop device ``dev`` is not ``backing`` as it was asked to present it (from
    ``offset``, at most ``limit`` bytes), by what the kernel shows now: its backing file (the
    same inode) and its size (whole 512-byte sectors of the bytes the file holds there).
    None when it is. A stale or raced attach is named here, before a filesystem reads it."""
    name = sysfs.dev_name(dev)
    shown = sysfs.loop_backing_file(name)
    try:
        ours = os.stat(backing)
        theirs = os.stat(shown) if shown else None
        total = sysfs.size_bytes(backing)  # a block device's size, or the file's
    except OSError:
        theirs = None
    if theirs is None or _identity(theirs) != _identity(ours):
        return f"the kernel shows it backed by {shown or 'nothing'}, not {backing}"
    want = max(0, total - offset)
    if limit is not None:
        want = min(want, limit)
    want -= want % 512
    got = sysfs.size_bytes(dev)
    if got != want:
        return (f"the kernel presents {got} bytes of {backing}, which holds {want} there "
                "(whole 512-byte sectors)")
    return None


def _identity(st: os.stat_result) -> tuple[int, ...]:
    """A block device by its device number (any node of it), a file by its inode."""
    return (st.st_rdev,) if stat.S_ISBLK(st.st_mode) else (st.st_dev, st.st_ino)


def release(info: dict[str, Any], *, case: Case, runner: SubprocessRunner | None = None) -> list[str]:
    """Undo exactly what :func:`attach` (and :func:`filesystems`) attached; returns what could
    not be undone (also logged), so that callers keep their records of it. A block device's
    write block (BLKROSET) is NOT cleared: it stays until ``ckptrescue writeblock release``."""
    runner = runner or SubprocessRunner(case)
    problems: list[str] = []
    for dm_name in reversed(info.get("dm_devices", [])):
        res = runner.run(ToolCall.of("dmsetup", "remove", "--noudevsync", dm_name, timeout_s=60,
                                     purpose="remove the read-only LV assembly the kit made"))
        if res.returncode != 0:
            problems.append(f"dmsetup remove {dm_name}: {res.stderr.strip()[:200]}")
    for extra in info.get("extra_loops", []):
        problems += _detach(runner, case, extra["device"], extra["backing_file"])
    loopdev = info.get("loop_device")
    if loopdev:
        problems += _detach(runner, case, loopdev, info.get("backing_file"))
    case.log("storage.released", {"target": info.get("target"), "loop_device": loopdev,
                                  "write_block_kept": info.get("set_readonly") or [],
                                  "problems": problems})
    return problems


def _detach(runner: SubprocessRunner, case: Case, loopdev: str, backing: str | None) -> list[str]:
    current = sysfs.loop_backing_file(Path(loopdev).name)
    if current != backing:
        case.log("storage.detach_skipped", {"device": loopdev, "expected": backing,
                                            "found": current})
        return []
    res = runner.run(ToolCall.of("losetup", "-d", loopdev, timeout_s=60,
                                 purpose="detach the loop device the kit attached"))
    if res.refused:
        return [f"losetup -d {loopdev}: refused: {res.refused}"]
    if res.returncode != 0:
        return [f"losetup -d {loopdev}: {res.stderr.strip()[:200]}"]
    return _detached(loopdev, backing)


def _detached(loopdev: str, backing: str | None) -> list[str]:
    """``losetup -d`` of a device something still holds open (a udev probe, a reader) only
    marks it for release when the last holder closes it: the kernel's state, not the exit
    code, says whether it is gone (the runner has waited for it and recorded what it saw:
    ``safety.detached`` or ``safety.detach_deferred``)."""
    if sysfs.loop_backing_file(Path(loopdev).name) != backing:
        return []
    return [f"losetup -d {loopdev}: still attached to {backing} after {DETACH_WAIT_S:g} s "
            "(held open elsewhere: the kernel releases it when the last holder closes it)"]


def attach_slice(runner: SubprocessRunner, info: dict[str, Any], start: int, size: int,
                  purpose: str) -> str | None:
    """A read-only loop device over ``[start, start+size)`` of the target (recorded in
    ``info["extra_loops"]`` so that :func:`release` detaches it)."""
    backing = info.get("backing_file") or info["device"]
    res = runner.run(ToolCall.of(
        "losetup", "--read-only", "--find", "--show", "--offset", str(start),
        "--sizelimit", str(size), backing, timeout_s=60, purpose=purpose))
    if res.returncode != 0:
        return None
    pdev = res.stdout.strip()
    info.setdefault("extra_loops", []).append({
        "device": pdev, "backing_file": sysfs.loop_backing_file(sysfs.dev_name(pdev)),
        "offset": start})
    if not sysfs.is_readonly(sysfs.dev_name(pdev)):
        raise RefusedError(f"{pdev} did not come up read-only")
    wrong = presented_mismatch(pdev, backing, offset=start, limit=size)
    if wrong is not None:
        raise ToolFailedError(f"{pdev}: {wrong}; not used")
    return pdev


def read_at(node: str) -> Callable[[int, int], bytes]:
    def read(off: int, n: int) -> bytes:
        fd = os.open(node, os.O_RDONLY)
        try:
            return os.pread(fd, n, off)
        finally:
            os.close(fd)
    return read


