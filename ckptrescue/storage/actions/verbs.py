"""Block-storage actions: triage, image, copy, fs.inspect, mount, umount, locate."""

from __future__ import annotations

import shlex
from collections.abc import Generator
from pathlib import Path

from ckptrescue.actions.shared import progress_adapter
from ckptrescue.engine.action import Action, ActionArgs, ActionResult, ArgSpec, StepContext, from_library
from ckptrescue.engine.events import Event
from ckptrescue.storage.outputs import (
    CopyOutput,
    ExtractOutput,
    FsInspectOutput,
    ImageOutput,
    LocateOutput,
    MountOutput,
    TriageOutput,
    UmountOutput,
)

_FILESYSTEM_HELP = ("Which filesystem when the target holds several: p2, vg0/data (an LVM "
                    "logical volume) or a device node.")


class Triage(Action):
    name = "triage"
    summary = "What is writing to the volume, kernel-log errors, and the freeze checklist"
    capability = "read_device"
    description = """
Show who is writing to a volume now and what to stop (never kills anything).

Open-for-write files and write rates, training jobs, sync/backup agents, orchestration,
kernel-log I/O and filesystem errors, and the freeze checklist."""
    examples = ("ckptrescue triage --case C --volume /mnt/checkpoints",)
    output_type = TriageOutput
    args = (ArgSpec("volume", "path",
                    help="Mount point of the affected volume (default: every volume)."),
            ArgSpec("seconds", "number", default=3, help="Write-rate window."))

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"psutil: processes with files open for writing under {args.get('volume') or '/'}"
                f" (write rates over {args.get('seconds')}s)", "dmesg -x --time-format iso"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.storage.triage import triage

        result = yield from ctx.blocking(lambda p: triage(
            case=ctx.case, volume=args.get("volume") or None, seconds=float(args["seconds"]),
            runner=ctx.runner))
        out = result.to_json()
        for line in out.get("checklist", [])[:12]:
            yield ctx.output(f"[ ] {line}" if isinstance(line, str) else str(line))
        return from_library(result, f"{len(out.get('writers', []))} writer(s) found")


class Image(Action):
    name = "image"
    summary = "ddrescue imaging onto separate media; the mapfile is the truth"
    capability = "read_device"
    description = """
Image a device or image file with GNU ddrescue; the mapfile decides the verdict.

Refuses a destination on the same physical disk or without room. Rerun the same command to
resume after an interruption. Exit 1 when sectors were unreadable. A block-device source is
write-blocked by the kernel (BLKROSET) and the finished image and mapfile made immutable
(chattr +i); both stay until `ckptrescue writeblock release`."""
    examples = ("ckptrescue image /dev/nvme1n1 --case C --dest /mnt/evidence --retries 3 --json",)
    output_type = ImageOutput
    args = (ArgSpec("source", "path", required=True, positional=True,
                    help="Block device or image file (read only)."),
            ArgSpec("dest", "path", help="Destination directory on other physical media "
                                         "(default CASE/images)."),
            ArgSpec("retries", "integer", default=3, help="Retry passes over bad areas."),
            ArgSpec("simulate_bad_map", "path",
                    help="ddrescue test-mode map (-H): blocks not '+' read as errors (drills "
                         "and tests)."))

    def plan(self, args: ActionArgs) -> list[str]:
        src = args["source"]
        dest = args.get("dest") or "CASE/images"
        test = f" -H {args['simulate_bad_map']}" if args.get("simulate_bad_map") else ""
        return ["refuse a destination on the same physical disk or without room",
                f"ddrescue -b SECTOR -n -x SIZE{test} {src} {dest}/IMAGE {dest}/IMAGE.map",
                f"ddrescue -b SECTOR [-d for block devices] -r{args.get('retries', 3)} -x SIZE"
                f"{test} {src} {dest}/IMAGE {dest}/IMAGE.map",
                "sha256 of the image, the mapfile (and the source when fully readable)"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.storage.imaging import image

        result = yield from ctx.blocking(lambda p: image(
            args["source"], case=ctx.case, dest=args.get("dest") or None,
            retries=int(args["retries"]), simulate_bad_map=args.get("simulate_bad_map") or None,
            on_progress=progress_adapter(p), cancel=ctx.cancel, runner=ctx.runner),
            label="imaging")
        out = result.to_json()
        bad = out.get("bad_ranges") or []
        # imaging records its findings itself (before the image is made immutable, and not
        # again when an earlier run finished it); the engine records image.finished
        return from_library(result, f"{out.get('rescued_bytes')} of {out.get('size')} bytes "
                                    f"rescued; {len(bad)} bad range(s)", recorded=True)


class Copy(Action):
    name = "copy"
    summary = "Read-only copy of a mounted filesystem (rsync) with a SHA-256 manifest and verify"
    description = """
Copy a mounted filesystem read-only onto other media, hashed and verified.

rsync -aHAXS --numeric-ids -x --open-noatime, a SHA-256 manifest of both sides, and an
rsync -c -n verify pass."""
    examples = ("ckptrescue copy /mnt/evidence-ro --case C --dest /mnt/backup/inc42",)
    output_type = CopyOutput
    args = (ArgSpec("mountpoint", "path", required=True, positional=True,
                    help="Mounted filesystem to copy."),
            ArgSpec("dest", "path", help="Destination on other media (default "
                                         "CASE/copies/NAME)."))

    def plan(self, args: ActionArgs) -> list[str]:
        src, dst = args["mountpoint"], args.get("dest") or "CASE/work/copy"
        return [f"rsync -aHAXS --numeric-ids -x --open-noatime -i {src}/ {dst}/",
                f"rsync -aHAXS --numeric-ids -x -c -n -i {src}/ {dst}/",
                "sha256 manifest of both sides"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.storage.copy import copy_tree

        result = yield from ctx.blocking(lambda p: copy_tree(
            args["mountpoint"], case=ctx.case, dest=args.get("dest") or None,
            runner=ctx.runner))
        return from_library(result, "copied and verified")


class FsInspect(Action):
    name = "fs.inspect"
    summary = "Read-only filesystem and device-health inspection (XFS, ext4, ZFS, SMART, NVMe)"
    capability = "read_device"
    description = """
Report filesystem and device-health state without replaying or repairing anything.

XFS superblock, log CLEAN/DIRTY, NEEDSREPAIR, xfs_repair -n; ext4 needs_recovery and
errors; ZFS vdev label, pool status (text and -j), event log and dataset properties;
SMART/NVMe health and the NVMe error log."""
    examples = ("ckptrescue fs inspect /dev/sdb1 --case C --json",)
    output_type = FsInspectOutput
    args = (ArgSpec("target", "path", required=True, positional=True,
                    help="Block device or image file."),
            ArgSpec("health", "boolean", default=True, cli=False,
                    help="Also query SMART/NVMe health."),
            ArgSpec("filesystem", "string", help=_FILESYSTEM_HELP))

    def plan(self, args: ActionArgs) -> list[str]:
        t = args["target"]
        return [f"blkid -p {t}", f"xfs_info {t}", f"xfs_db -r -c 'sb 0' -c print {t}",
                f"xfs_logprint -t {t}", f"xfs_repair -n {t}", f"dumpe2fs -h {t} (ext4)",
                "zdb -l MEMBER; zpool status -vP / -j; zpool events -v; zfs get -Hp (ZFS)",
                "smartctl -x -j DEVICE / nvme smart-log DEVICE -o json / nvme error-log DEVICE "
                "-o json (when a device)"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.storage.fsinspect import fs_inspect

        ctx.case.ensure_evidence(args["target"], how="examined in place, read-only (fs.inspect)")
        result = yield from ctx.blocking(lambda p: fs_inspect(
            args["target"], case=ctx.case, health=bool(args["health"]),
            select=args.get("filesystem") or None, runner=ctx.runner))
        return from_library(result, "inspected")


class Mount(Action):
    name = "mount"
    summary = ("Attach read-only (losetup --read-only) and mount ro,norecovery / ro,noload; "
               "ZFS: zpool import -o readonly=on -N")
    capability = "read_device"
    description = """
Mount an image or device read-only without log replay.

Read-only loop device (or BLKROSET on a block device, which stays after umount until
`ckptrescue writeblock release`), XFS ro,norecovery (+nouuid for clones), ext4
ro,noload. Partitions and LVM logical volumes (read from the PV's own metadata, no
device-mapper needed for an LV in one piece) are found on the image. A ZFS member: the pool
is imported with zpool import -o readonly=on -o cachefile=none -N -R MOUNTPOINT and its
datasets mounted with zfs mount -o ro; umount exports it."""
    examples = ("ckptrescue mount disk.img /mnt/evidence --case C",
                "ckptrescue mount sdb.img /mnt/evidence --filesystem vg0/data --case C",
                "ckptrescue mount disk0.img /mnt/pool --member disk1.img --member disk2.img "
                "--case C")
    output_type = MountOutput
    args = (ArgSpec("target", "path", required=True, positional=True,
                    help="Image file or block device."),
            ArgSpec("mountpoint", "path", positional=True,
                    help="Where to mount (created if missing)."),
            ArgSpec("filesystem", "string", help=_FILESYSTEM_HELP),
            ArgSpec("members", "list", item="path", flag="--member",
                    help="Another image or device of the same ZFS pool (mirror, raidz); repeat "
                         "for each."))

    def plan(self, args: ActionArgs) -> list[str]:
        t, m = args["target"], args.get("mountpoint") or "CASE/work/mnt-STEP"
        return [f"losetup --read-only --find --show {t}",
                f"mount -t FSTYPE -o ro,norecovery|ro,noload[,nouuid] /dev/loopN {m}",
                "or, for a ZFS member: zpool import -o readonly=on -o cachefile=none -N "
                f"-R {m} -d /dev/loopN GUID; zfs mount -o ro DATASET"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.storage.mounting import mount

        ctx.case.ensure_evidence(args["target"], how="attached read-only and mounted (mount)")
        where = Path(args.get("mountpoint") or ctx.work_dir(f"mnt-{ctx.step_id}"))
        where.mkdir(parents=True, exist_ok=True)
        for extra in args.get("members") or []:
            ctx.case.ensure_evidence(extra, how="attached read-only as a ZFS pool member (mount)")
        result = mount(args["target"], where, case=ctx.case,
                       select=args.get("filesystem") or None,
                       members=[str(x) for x in args.get("members") or []],
                       runner=ctx.runner)
        yield ctx.output(shlex.join(["mounted", str(args["target"]), str(where)]))
        wrapped = from_library(result, f"mounted at {where}")
        wrapped.outputs.setdefault("mountpoint", str(where))
        wrapped.outputs["mountpoint"] = str(where)
        return wrapped


class Umount(Action):
    name = "umount"
    summary = "Unmount and detach exactly what mount attached"
    capability = "read_device"
    description = "Unmount and detach exactly what `ckptrescue mount` attached."
    examples = ("ckptrescue umount /mnt/evidence --case C",)
    output_type = UmountOutput
    args = (ArgSpec("mountpoint", "path", required=True, positional=True,
                    help="A mount point made by `ckptrescue mount`."),)

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"umount {args['mountpoint']}", "losetup -d /dev/loopN (the one mount attached)"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.storage.mounting import umount, unmounted_record

        result = umount(args["mountpoint"], case=ctx.case, runner=ctx.runner)
        yield ctx.output(f"unmounted {args['mountpoint']}")
        return ActionResult(outputs=result if isinstance(result, dict) else {}, summary="released",
                            audit=[unmounted_record(args["mountpoint"], result)])


class Locate(Action):
    name = "locate"
    summary = "Unreadable ranges -> files -> tensors"
    description = """
Map every unreadable range of a ddrescue mapfile to files and tensors.

Through the partition and LVM volume holding each range, FIEMAP on a read-only mount
(xfs_db or debugfs when not mountable; on a ZFS member, a read-only import whose checksum
events name the files), then the checkpoint tensor map of every file hit."""
    examples = ("ckptrescue locate --case C C/images/sdb.map C/images/sdb.img --json",)
    output_type = LocateOutput
    args = (ArgSpec("mapfile", "path", required=True, positional=True,
                    help="ddrescue mapfile."),
            ArgSpec("image", "path", required=True, positional=True,
                    help="The rescued image (or the device)."),
            ArgSpec("mountpoint", "path", cli=False,
                    help="A read-only mount of the image (optional)."))

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"parse {args['mapfile']}; FIEMAP on the read-only mount of {args['image']} "
                "(xfs_db -r / debugfs when not mountable); tensor map of every checkpoint hit"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.storage.locate import locate

        ctx.case.ensure_evidence(args["image"], how="examined in place, read-only (locate)")
        result = yield from ctx.blocking(lambda p: locate(
            args["mapfile"], args["image"], case=ctx.case,
            mountpoint=args.get("mountpoint") or None, runner=ctx.runner))
        out = result.to_json()
        for r in out.get("ranges", []):
            names = [f"{f['path']} [{', '.join(f.get('tensors') or []) or 'no tensor'}]"
                     for f in r.get("files", [])]
            yield ctx.output(f"[{r['start']}, {r['end']}) -> {'; '.join(names) or 'no file'}")
        located = from_library(result, f"{len(out.get('ranges', []))} range(s) located")
        located.outputs["unmapped"] = [list(u) for u in result.unmapped]
        located.outputs["notes"] = list(result.notes)
        return located


class Extract(Action):
    name = "extract"
    summary = "Copy out only the intact checkpoints of a read-only mount (with companions)"
    capability = "write_recovery"
    description = """
Copy out only the intact checkpoints of a read-only mount, with companion files.

Configs, tokenizer and index files go along; what was left behind is listed with its
verdict."""
    examples = ("ckptrescue extract /mnt/evidence --to /recovery/inc42 --case C",)
    output_type = ExtractOutput
    args = (ArgSpec("mountpoint", "path", required=True, positional=True,
                    help="Read-only mount holding checkpoints."),
            ArgSpec("to", "path", required=True, help="New recovery directory."))

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"probe every checkpoint under {args['mountpoint']}; copy the intact ones and "
                f"their companion files to {args['to']}, re-hashed"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.storage.extract import extract

        result = yield from ctx.blocking(lambda p: extract(args["mountpoint"], args["to"],
                                                           case=ctx.case))
        out = result.to_json()
        return from_library(result, f"{len(out.get('extracted', []))} extracted, "
                                    f"{len(out.get('left_behind', []))} left behind")


ACTIONS = [Triage, Image, Copy, FsInspect, Mount, Umount, Locate, Extract]
