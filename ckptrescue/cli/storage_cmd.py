"""Block-storage commands: devices, triage, image, copy, fs inspect, mount, umount, locate,
extract. ``devices`` reads sysfs and is written here; the others are generated from their
engine actions (``cli/from_action.py``); their text is ``storage/render.py``'s."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from ckptrescue.cli.from_action import (
    CASE,
    JSON,
    Command,
    StepResult,
    add_command,
    add_group,
    renders,
)
from ckptrescue.cli.options import JsonOpt
from ckptrescue.cli.output import emit_json, say
from ckptrescue.storage import render
from ckptrescue.storage.outputs import LocateOutput

if TYPE_CHECKING:
    from ckptrescue.engine.action import ActionArgs

FS_HELP = "Filesystem state, read-only (XFS, ext4, ZFS, device health)."


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


def _stop_on_sigterm(args: ActionArgs, options: dict[str, Any], plan: Any) -> None:
    import signal

    def terminate(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # stops ddrescue through the runner, keeps the mapfile

    signal.signal(signal.SIGTERM, terminate)


def render_umount(result: StepResult) -> int:
    loop = result.outputs.get("loop_device")
    say(f"unmounted {result.args['mountpoint']}" + (f"; detached {loop}" if loop else ""))
    return 0


COMMANDS = {
    "triage": Command("triage", renders(render.triage, findings=True), case="required",
                      order=(CASE, "volume", "seconds", JSON)),
    "image": Command("image", renders(render.image, findings=True), case="required",
                     before=_stop_on_sigterm,
                     order=("source", CASE, "dest", "retries", "simulate_bad_map", JSON)),
    "copy": Command("copy", renders(render.copy, findings=True), case="required",
                    order=("mountpoint", CASE, "dest", JSON)),
    "mount": Command("mount", renders(render.mount), case="required",
                     order=("target", "mountpoint", CASE, "filesystem", "members", JSON)),
    "umount": Command("umount", render_umount, case="required", json=False),
    "locate": Command("locate",
                      renders(render.locate, json=lambda r: LocateOutput.public_json(r.outputs)),
                      case="required", order=(CASE, "mapfile", "image", JSON)),
    "extract": Command("extract", renders(render.extract), case="required"),
}
FS_INSPECT = Command("fs.inspect", renders(render.fs_inspect, findings=True), case="required",
                     order=("target", CASE, "filesystem", JSON))


def register(app: typer.Typer) -> None:
    app.command("devices")(devices_command)
    for name in ("triage", "image", "copy"):
        add_command(app, name, COMMANDS[name])
    add_command(add_group(app, "fs", FS_HELP), "inspect", FS_INSPECT)
    for name in ("mount", "umount", "locate", "extract"):
        add_command(app, name, COMMANDS[name])
