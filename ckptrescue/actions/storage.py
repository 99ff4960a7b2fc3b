"""Block-storage actions: triage, image, copy, fs.inspect, mount, umount, locate."""

from __future__ import annotations

import shlex
from collections.abc import Generator
from pathlib import Path
from typing import Any

from ckptrescue.action import Action, ActionResult, ArgSpec, StepContext
from ckptrescue.actions._util import from_library, progress_adapter
from ckptrescue.events import Event


class Triage(Action):
    name = "triage"
    summary = "What is writing to the volume, kernel-log errors, and the freeze checklist"
    capability = "read_device"
    args = (ArgSpec("volume", "path", help="Mount point of the affected volume."),
            ArgSpec("seconds", "integer", default=3, help="How long to sample write rates."))

    def plan(self, args: dict[str, Any]) -> list[str]:
        return [f"psutil: processes with files open for writing under {args.get('volume') or '/'}"
                f" (write rates over {args.get('seconds')}s)", "dmesg -x --time-format iso"]

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.storage.triage import triage

        result = yield from ctx.blocking(lambda p: triage(
            case=ctx.case, volume=args.get("volume") or None, seconds=float(args["seconds"])))
        out = result.to_json()
        for line in out.get("checklist", [])[:12]:
            yield ctx.output(f"[ ] {line}" if isinstance(line, str) else str(line))
        return from_library(result, f"{len(out.get('writers', []))} writer(s) found")


class Image(Action):
    name = "image"
    summary = "ddrescue imaging onto separate media; the mapfile is the truth"
    capability = "read_device"
    args = (ArgSpec("source", "path", required=True, help="Block device or image file."),
            ArgSpec("dest", "path", help="Destination directory (default: the case's work dir)."),
            ArgSpec("retries", "integer", default=3, help="Retry passes over bad areas."),
            ArgSpec("simulate_bad_map", "path",
                    help="ddrescue test-mode map (-H) for drills and tests."))

    def plan(self, args: dict[str, Any]) -> list[str]:
        src = args["source"]
        dest = args.get("dest") or "CASE/images"
        test = f" -H {args['simulate_bad_map']}" if args.get("simulate_bad_map") else ""
        return ["refuse a destination on the same physical disk or without room",
                f"ddrescue -b SECTOR -n -x SIZE{test} {src} {dest}/IMAGE {dest}/IMAGE.map",
                f"ddrescue -b SECTOR [-d for block devices] -r{args.get('retries', 3)} -x SIZE"
                f"{test} {src} {dest}/IMAGE {dest}/IMAGE.map",
                "sha256 of the image, the mapfile (and the source when fully readable)"]

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.storage.imaging import image

        result = yield from ctx.blocking(lambda p: image(
            args["source"], case=ctx.case, dest=args.get("dest") or None,
            retries=int(args["retries"]), simulate_bad_map=args.get("simulate_bad_map") or None,
            on_progress=progress_adapter(p), cancel=ctx.cancel), label="imaging")
        out = result.to_json()
        bad = out.get("bad_ranges") or []
        return from_library(result, f"{out.get('rescued_bytes')} of {out.get('size')} bytes "
                                    f"rescued; {len(bad)} bad range(s)")


class Copy(Action):
    name = "copy"
    summary = "Read-only copy of a mounted filesystem (rsync) with a SHA-256 manifest and verify"
    args = (ArgSpec("mountpoint", "path", required=True),
            ArgSpec("dest", "path", help="Destination directory."))

    def plan(self, args: dict[str, Any]) -> list[str]:
        src, dst = args["mountpoint"], args.get("dest") or "CASE/work/copy"
        return [f"rsync -aHAXS --numeric-ids -x --open-noatime -i {src}/ {dst}/",
                f"rsync -aHAXS --numeric-ids -x -c -n -i {src}/ {dst}/",
                "sha256 manifest of both sides"]

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.storage.copy import copy_tree

        result = yield from ctx.blocking(lambda p: copy_tree(
            args["mountpoint"], case=ctx.case, dest=args.get("dest") or None))
        return from_library(result, "copied and verified")


class FsInspect(Action):
    name = "fs.inspect"
    summary = "Read-only filesystem and device-health inspection (XFS, ext4, ZFS, SMART, NVMe)"
    capability = "read_device"
    args = (ArgSpec("target", "path", required=True, help="Device or image."),
            ArgSpec("health", "boolean", default=True, help="Also query SMART/NVMe health."),
            ArgSpec("filesystem", "string", help="Which one when there are several: p2, "
                    "vg0/data (an LVM logical volume) or a device node."))

    def plan(self, args: dict[str, Any]) -> list[str]:
        t = args["target"]
        return [f"blkid -p {t}", f"xfs_info {t}", f"xfs_db -r -c 'sb 0' -c print {t}",
                f"xfs_logprint -t {t}", f"xfs_repair -n {t}", f"dumpe2fs -h {t} (ext4)",
                "zdb -l MEMBER; zpool status -vP / -j; zpool events -v; zfs get -Hp (ZFS)",
                "smartctl -x -j DEVICE / nvme smart-log DEVICE -o json / nvme error-log DEVICE "
                "-o json (when a device)"]

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.storage.fsinspect import fs_inspect

        ctx.case.ensure_evidence(args["target"], how="examined in place, read-only (fs.inspect)")
        result = yield from ctx.blocking(lambda p: fs_inspect(
            args["target"], case=ctx.case, health=bool(args["health"]),
            select=args.get("filesystem") or None))
        return from_library(result, "inspected")


class Mount(Action):
    name = "mount"
    summary = ("Attach read-only (losetup --read-only) and mount ro,norecovery / ro,noload; "
               "ZFS: zpool import -o readonly=on -N")
    capability = "read_device"
    args = (ArgSpec("target", "path", required=True, help="Image or device."),
            ArgSpec("mountpoint", "path", help="Where to mount (default: CASE/work/mnt-STEP)."),
            ArgSpec("filesystem", "string", help="Which one when there are several: p2, "
                    "'partition 2', vg0/data (an LVM logical volume) or a device node."),
            ArgSpec("members", "list", help="The other images/devices of a ZFS pool."))

    def plan(self, args: dict[str, Any]) -> list[str]:
        t, m = args["target"], args.get("mountpoint") or "CASE/work/mnt-STEP"
        return [f"losetup --read-only --find --show {t}",
                f"mount -t FSTYPE -o ro,norecovery|ro,noload[,nouuid] /dev/loopN {m}",
                "or, for a ZFS member: zpool import -o readonly=on -o cachefile=none -N "
                f"-R {m} -d /dev/loopN GUID; zfs mount -o ro DATASET"]

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.storage.mounting import mount

        ctx.case.ensure_evidence(args["target"], how="attached read-only and mounted (mount)")
        where = Path(args.get("mountpoint") or ctx.work_dir(f"mnt-{ctx.step_id}"))
        where.mkdir(parents=True, exist_ok=True)
        for extra in args.get("members") or []:
            ctx.case.ensure_evidence(extra, how="attached read-only as a ZFS pool member (mount)")
        result = mount(args["target"], where, case=ctx.case,
                       select=args.get("filesystem") or None,
                       members=[str(x) for x in args.get("members") or []])
        yield ctx.output(shlex.join(["mounted", str(args["target"]), str(where)]))
        wrapped = from_library(result, f"mounted at {where}")
        wrapped.outputs.setdefault("mountpoint", str(where))
        wrapped.outputs["mountpoint"] = str(where)
        return wrapped


class Umount(Action):
    name = "umount"
    summary = "Unmount and detach exactly what mount attached"
    capability = "read_device"
    args = (ArgSpec("mountpoint", "path", required=True),)

    def plan(self, args: dict[str, Any]) -> list[str]:
        return [f"umount {args['mountpoint']}", "losetup -d /dev/loopN (the one mount attached)"]

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.storage.mounting import umount

        result = umount(args["mountpoint"], case=ctx.case)
        yield ctx.output(f"unmounted {args['mountpoint']}")
        return ActionResult(outputs=result if isinstance(result, dict) else {}, summary="released",
                            native=result)


class Locate(Action):
    name = "locate"
    summary = "Unreadable ranges -> files -> tensors"
    args = (ArgSpec("mapfile", "path", required=True),
            ArgSpec("image", "path", required=True),
            ArgSpec("mountpoint", "path", help="A read-only mount of the image (optional)."))

    def plan(self, args: dict[str, Any]) -> list[str]:
        return [f"parse {args['mapfile']}; FIEMAP on the read-only mount of {args['image']} "
                "(xfs_db -r / debugfs when not mountable); tensor map of every checkpoint hit"]

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.storage.locate import locate

        ctx.case.ensure_evidence(args["image"], how="examined in place, read-only (locate)")
        result = yield from ctx.blocking(lambda p: locate(
            args["mapfile"], args["image"], case=ctx.case,
            mountpoint=args.get("mountpoint") or None))
        out = result.to_json()
        for r in out.get("ranges", []):
            names = [f"{f['path']} [{', '.join(f.get('tensors') or []) or 'no tensor'}]"
                     for f in r.get("files", [])]
            yield ctx.output(f"[{r['start']}, {r['end']}) -> {'; '.join(names) or 'no file'}")
        return from_library(result, f"{len(out.get('ranges', []))} range(s) located")


class Extract(Action):
    name = "extract"
    summary = "Copy out only the intact checkpoints of a read-only mount (with companions)"
    capability = "write_recovery"
    args = (ArgSpec("mountpoint", "path", required=True),
            ArgSpec("to", "path", required=True, help="Destination directory."))

    def plan(self, args: dict[str, Any]) -> list[str]:
        return [f"probe every checkpoint under {args['mountpoint']}; copy the intact ones and "
                f"their companion files to {args['to']}, re-hashed"]

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.storage.extract import extract

        result = yield from ctx.blocking(lambda p: extract(args["mountpoint"], args["to"],
                                                           case=ctx.case))
        out = result.to_json()
        return from_library(result, f"{len(out.get('extracted', []))} extracted, "
                                    f"{len(out.get('left_behind', []))} left behind")


ACTIONS = [Triage, Image, Copy, FsInspect, Mount, Umount, Locate, Extract]
