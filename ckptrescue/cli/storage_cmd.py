"""Block-storage commands: devices, triage, image, copy, fs inspect, mount, umount, locate,
extract. Thin adapters over ``ckptrescue.storage``; heavy work and imports happen there."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ckptrescue.cli.options import CaseDirOpt, JsonOpt
from ckptrescue.cli.output import emit_json, info, say
from ckptrescue.errors import ExitCode

fs_app = typer.Typer(help="Filesystem state, read-only (XFS, ext4, ZFS, device health).",
                     no_args_is_help=True)


def _code(findings: list[Any], *, floor: str = "warning") -> int:
    from ckptrescue.model import Severity

    rank = Severity(floor).rank
    return int(ExitCode.FINDINGS) if any(f.severity.rank >= rank for f in findings) else 0


def _print_findings(findings: list[Any]) -> None:
    for f in findings:
        say(f"  [{f.severity}] {f.code} {f.title}")


def devices_command(as_json: JsonOpt = False) -> int:
    """List block devices and the physical disk each sits on (sysfs; read-only).

    Model, serial, WWN, size, sector sizes, read-only flag, partitions, the holder/slave stack
    and mounts with their options.

    Example:

        ckptrescue devices --json
    """
    from ckptrescue.storage.devices import devices

    devs = devices()
    if as_json:
        emit_json([d.to_json() for d in devs])
        return 0
    for d in devs:
        mounts = ", ".join(f"{m['mountpoint']} ({m['options']})" for m in d.mounts) or "-"
        say(f"{d.path:<16} {d.type:<5} {d.size:>16} B  ls={d.logical_sector_size} "
            f"ps={d.physical_sector_size} ro={int(d.readonly)}  {d.model or ''} "
            f"{d.serial or ''}  mounts: {mounts}")
        if d.loop_backing_file:
            say(f"{'':16} backing file {d.loop_backing_file}")
        if d.slaves or d.holders:
            say(f"{'':16} slaves {d.slaves} holders {d.holders}")
    return 0


def triage_command(
    case_dir: CaseDirOpt,
    volume: Annotated[Path | None, typer.Option("--volume", help="Mount point of the affected "
                                                "volume (default: every volume).")] = None,
    seconds: Annotated[float, typer.Option("--seconds", help="Write-rate window.")] = 3.0,
    as_json: JsonOpt = False,
) -> int:
    """Show who is writing to a volume now and what to stop (never kills anything).

    Open-for-write files and write rates, training jobs, sync/backup agents, orchestration,
    kernel-log I/O and filesystem errors, and the freeze checklist.

    Example:

        ckptrescue triage --case C --volume /mnt/checkpoints
    """
    from ckptrescue.case import Case
    from ckptrescue.cli.bridge import run_action

    res = run_action("triage", {"volume": str(volume) if volume else None,
                                "seconds": seconds}, case=Case.open(case_dir))
    if as_json:
        emit_json(res.to_json())
    else:
        for p in res.processes:
            say(f"pid {p.pid:<7} {p.kind:<13} {p.write_rate_bps or 0:>12.0f} B/s  "
                f"{' '.join(p.cmdline)[:100]}")
            for path in p.open_for_write[:10]:
                say(f"{'':10} writing {path}")
        for m in res.kernel_messages[-20:]:
            say(f"kernel[{m['kind']}] {m['line']}")
        say("\nFreeze checklist:")
        for i, item in enumerate(res.checklist, 1):
            say(f"  {i}. {item}")
        _print_findings(res.findings)
    return _code(res.findings)


def image_command(
    source: Annotated[Path, typer.Argument(help="Block device or image file (read only).")],
    case_dir: CaseDirOpt,
    dest: Annotated[Path | None, typer.Option("--dest", help="Destination directory on other "
                                              "physical media (default CASE/images).")] = None,
    retries: Annotated[int, typer.Option("--retries", help="Retry passes over bad areas.")] = 3,
    simulate_bad_map: Annotated[Path | None, typer.Option(
        "--simulate-bad-map", help="ddrescue test-mode map (-H): blocks not '+' read as errors "
        "(drills and tests).")] = None,
    as_json: JsonOpt = False,
) -> int:
    """Image a device or image file with GNU ddrescue; the mapfile decides the verdict.

    Refuses a destination on the same physical disk or without room. Rerun the same command to
    resume after an interruption. Exit 1 when sectors were unreadable. A block-device source is
    write-blocked by the kernel (BLKROSET) and the finished image and mapfile made immutable
    (chattr +i); both stay until `ckptrescue writeblock release`.

    Example:

        ckptrescue image /dev/nvme1n1 --case C --dest /mnt/evidence --retries 3 --json
    """
    import signal

    from ckptrescue.case import Case
    from ckptrescue.cli.bridge import run_action

    def terminate(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # stops ddrescue through the runner, keeps the mapfile

    signal.signal(signal.SIGTERM, terminate)
    case = Case.open(case_dir)
    res = run_action("image", {"source": str(source), "dest": str(dest) if dest else None,
                               "retries": retries,
                               "simulate_bad_map": str(simulate_bad_map) if simulate_bad_map
                               else None}, case=case)
    if as_json:
        emit_json(res.to_json())
    else:
        say(f"image      {res.image}\nmapfile    {res.mapfile}\nsha256     {res.image_sha256}")
        say(f"size       {res.size}\nrescued    {res.rescued_bytes}")
        for s, e in res.bad_ranges:
            say(f"bad        [{s:#x}, {e:#x})  {e - s} B")
        _print_findings(res.findings)
    return int(ExitCode.FINDINGS) if res.bad_ranges or not res.finished else 0


def copy_command(
    mountpoint: Annotated[Path, typer.Argument(help="Mounted filesystem to copy.")],
    case_dir: CaseDirOpt,
    dest: Annotated[Path | None, typer.Option("--dest", help="Destination on other media "
                                              "(default CASE/copies/NAME).")] = None,
    as_json: JsonOpt = False,
) -> int:
    """Copy a mounted filesystem read-only onto other media, hashed and verified.

    rsync -aHAXS --numeric-ids -x --open-noatime, a SHA-256 manifest of both sides, and an
    rsync -c -n verify pass.

    Example:

        ckptrescue copy /mnt/evidence-ro --case C --dest /mnt/backup/inc42
    """
    from ckptrescue.case import Case
    from ckptrescue.cli.bridge import run_action

    res = run_action("copy", {"mountpoint": str(mountpoint), "dest": str(dest) if dest else None},
                     case=Case.open(case_dir))
    if as_json:
        emit_json(res.to_json())
    else:
        say(f"copied {res.files} files ({res.bytes} B) to {res.dest}; manifest "
            f"{res.manifest_sha256}; verified: {'yes' if res.verified else 'NO'}")
        _print_findings(res.findings)
    return 0 if res.verified else int(ExitCode.FINDINGS)


@fs_app.command("inspect")
def fs_inspect_command(
    target: Annotated[Path, typer.Argument(help="Block device or image file.")],
    case_dir: CaseDirOpt,
    filesystem: Annotated[str | None, typer.Option(
        "--filesystem", help="Which filesystem when the target holds several: p2, vg0/data "
        "(an LVM logical volume) or a device node.")] = None,
    as_json: JsonOpt = False,
) -> int:
    """Report filesystem and device-health state without replaying or repairing anything.

    XFS superblock, log CLEAN/DIRTY, NEEDSREPAIR, xfs_repair -n; ext4 needs_recovery and
    errors; ZFS vdev label, pool status (text and -j), event log and dataset properties;
    SMART/NVMe health and the NVMe error log.

    Example:

        ckptrescue fs inspect /dev/sdb1 --case C --json
    """
    from ckptrescue.case import Case
    from ckptrescue.cli.bridge import run_action

    res = run_action("fs.inspect", {"target": str(target), "filesystem": filesystem},
                     case=Case.open(case_dir))
    if as_json:
        emit_json(res.to_json())
    else:
        say(f"{res.target}: {res.fstype or 'unknown filesystem'} on {res.device}")
        for n in res.notes:
            say(f"  note: {n}")
        _print_findings(res.findings)
    return _code(res.findings)


def mount_command(
    target: Annotated[Path, typer.Argument(help="Image file or block device.")],
    mountpoint: Annotated[Path, typer.Argument(help="Where to mount (created if missing).")],
    case_dir: CaseDirOpt,
    filesystem: Annotated[str | None, typer.Option(
        "--filesystem", help="Which filesystem when the target holds several: p2, vg0/data "
        "(an LVM logical volume) or a device node.")] = None,
    member: Annotated[list[Path] | None, typer.Option(
        "--member", help="Another image or device of the same ZFS pool (mirror, raidz); "
        "repeat for each.")] = None,
    as_json: JsonOpt = False,
) -> int:
    """Mount an image or device read-only without log replay.

    Read-only loop device (or BLKROSET on a block device, which stays after umount until
    `ckptrescue writeblock release`), XFS ro,norecovery (+nouuid for clones), ext4
    ro,noload. Partitions and LVM logical volumes (read from the PV's own metadata, no
    device-mapper needed for an LV in one piece) are found on the image. A ZFS member: the pool
    is imported with zpool import -o readonly=on -o cachefile=none -N -R MOUNTPOINT and its
    datasets mounted with zfs mount -o ro; umount exports it.

    Examples:

    \b
        ckptrescue mount disk.img /mnt/evidence --case C
        ckptrescue mount sdb.img /mnt/evidence --filesystem vg0/data --case C
        ckptrescue mount disk0.img /mnt/pool --member disk1.img --member disk2.img --case C
    """
    from ckptrescue.case import Case
    from ckptrescue.cli.bridge import run_action

    res = run_action("mount", {"target": str(target), "mountpoint": str(mountpoint),
                               "filesystem": filesystem,
                               "members": [str(m) for m in member or []]},
                     case=Case.open(case_dir))
    if as_json:
        emit_json(res.to_json())
    else:
        say(f"mounted {res.device} ({res.fstype}) on {res.mountpoint} with {res.options}"
            + (f"; loop {res.loop_device}" if res.loop_device else ""))
        for d in res.datasets:
            say(f"  {d['dataset']}: " + ("mounted ro on " + d["mountpoint"] if d["mounted"]
                                        else f"not mounted ({d.get('reason', '')})"))
    return 0


def umount_command(
    mountpoint: Annotated[Path, typer.Argument(help="A mount point made by `ckptrescue mount`.")],
    case_dir: CaseDirOpt,
) -> int:
    """Unmount and detach exactly what `ckptrescue mount` attached.

    Example:

        ckptrescue umount /mnt/evidence --case C
    """
    from ckptrescue.case import Case
    from ckptrescue.cli.bridge import run_action

    data = run_action("umount", {"mountpoint": str(mountpoint)}, case=Case.open(case_dir))
    say(f"unmounted {mountpoint}" + (f"; detached {data['loop_device']}"
                                     if data.get("loop_device") else ""))
    return 0


def locate_command(
    case_dir: CaseDirOpt,
    mapfile: Annotated[Path, typer.Argument(help="ddrescue mapfile.")],
    image: Annotated[Path, typer.Argument(help="The rescued image (or the device).")],
    as_json: JsonOpt = False,
) -> int:
    """Map every unreadable range of a ddrescue mapfile to files and tensors.

    Through the partition and LVM volume holding each range, FIEMAP on a read-only mount
    (xfs_db or debugfs when not mountable; on a ZFS member, a read-only import whose checksum
    events name the files), then the checkpoint tensor map of every file hit.

    Example:

        ckptrescue locate --case C C/images/sdb.map C/images/sdb.img --json
    """
    from ckptrescue.case import Case
    from ckptrescue.cli.bridge import run_action

    res = run_action("locate", {"mapfile": str(mapfile), "image": str(image)},
                     case=Case.open(case_dir))
    if as_json:
        emit_json(res.to_json())
    else:
        for r in res.ranges:
            say(f"[{r.start:#x}, {r.end:#x})")
            blind = [why for a, b, why in res.unmapped if a < r.end and r.start < b]
            if blind:
                say("    not mapped" + (" (part of it)" if r.files else "") + ": "
                    + "; ".join(blind))
            elif not r.files:
                say("    no regular-file data (metadata or free space)")
            for f in r.files:
                tensors = ", ".join(f.tensors) if f.tensors else "-"
                say(f"    {f.path} bytes [{f.file_offset}, {f.file_offset + f.length}) "
                    f"tensors: {tensors}")
        for n in res.notes:
            info(f"note: {n}")
    return int(ExitCode.FINDINGS) if any(r.files for r in res.ranges) else 0


def extract_command(
    mountpoint: Annotated[Path, typer.Argument(help="Read-only mount holding checkpoints.")],
    to: Annotated[Path, typer.Option("--to", help="New recovery directory.")],
    case_dir: CaseDirOpt,
    as_json: JsonOpt = False,
) -> int:
    """Copy out only the intact checkpoints of a read-only mount, with companion files.

    Configs, tokenizer and index files go along; what was left behind is listed with its
    verdict.

    Example:

        ckptrescue extract /mnt/evidence --to /recovery/inc42 --case C
    """
    from ckptrescue.case import Case
    from ckptrescue.cli.bridge import run_action

    res = run_action("extract", {"mountpoint": str(mountpoint), "to": str(to)},
                     case=Case.open(case_dir))
    if as_json:
        emit_json(res.to_json())
    else:
        for e in res.extracted:
            say(f"extracted {e.checkpoint} ({e.format}): {len(e.files)} file(s)")
        for lb in res.left_behind:
            say(f"left behind {lb['checkpoint']}: {lb['verdict']}")
    return int(ExitCode.FINDINGS) if res.left_behind else 0


def register(app: typer.Typer) -> None:
    app.command("devices")(devices_command)
    app.command("triage")(triage_command)
    app.command("image")(image_command)
    app.command("copy")(copy_command)
    app.add_typer(fs_app, name="fs")
    app.command("mount")(mount_command)
    app.command("umount")(umount_command)
    app.command("locate")(locate_command)
    app.command("extract")(extract_command)
