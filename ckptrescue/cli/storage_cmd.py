"""Block-storage commands: devices, triage, image, copy, fs inspect, mount, umount, locate,
extract. ``devices`` reads sysfs and is written here; the others are generated from their
engine actions (``cli/from_action.py``) and this module only renders their step outputs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from ckptrescue.cli.from_action import CASE, JSON, Command, StepResult, add_command
from ckptrescue.cli.options import JsonOpt
from ckptrescue.cli.output import emit_json, info, say
from ckptrescue.errors import ExitCode
from ckptrescue.storage.outputs import (
    CopyOutput,
    ExtractOutput,
    FsInspectOutput,
    ImageOutput,
    LocateOutput,
    MountOutput,
    TriageOutput,
)

if TYPE_CHECKING:
    from ckptrescue.engine.action import ActionArgs

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


def render_triage(result: StepResult) -> int:
    res: TriageOutput = result.out
    if result.options[JSON]:
        emit_json(result.outputs)
    else:
        for p in res.processes:
            say(f"pid {p['pid']:<7} {p['kind']:<13} {p.get('write_rate_bps') or 0:>12.0f} B/s  "
                f"{' '.join(p.get('cmdline') or [])[:100]}")
            for path in (p.get("open_for_write") or [])[:10]:
                say(f"{'':10} writing {path}")
        for m in res.kernel_messages[-20:]:
            say(f"kernel[{m['kind']}] {m['line']}")
        say("\nFreeze checklist:")
        for i, item in enumerate(res.checklist, 1):
            say(f"  {i}. {item}")
        _print_findings(result.findings)
    return _code(result.findings)


def _stop_on_sigterm(args: ActionArgs, options: dict[str, Any], plan: Any) -> None:
    import signal

    def terminate(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # stops ddrescue through the runner, keeps the mapfile

    signal.signal(signal.SIGTERM, terminate)


def render_image(result: StepResult) -> int:
    res: ImageOutput = result.out
    if result.options[JSON]:
        emit_json(result.outputs)
    else:
        say(f"image      {res.image}\nmapfile    {res.mapfile}\nsha256     {res.image_sha256}")
        say(f"size       {res.size}\nrescued    {res.rescued_bytes}")
        for s, e in res.bad_ranges:
            say(f"bad        [{s:#x}, {e:#x})  {e - s} B")
        _print_findings(result.findings)
    return int(ExitCode.FINDINGS) if res.bad_ranges or not res.finished else 0


def render_copy(result: StepResult) -> int:
    res: CopyOutput = result.out
    if result.options[JSON]:
        emit_json(result.outputs)
    else:
        say(f"copied {res.files} files ({res.bytes} B) to {res.dest}; manifest "
            f"{res.manifest_sha256}; verified: {'yes' if res.verified else 'NO'}")
        _print_findings(result.findings)
    return 0 if res.verified else int(ExitCode.FINDINGS)


def render_fs_inspect(result: StepResult) -> int:
    res: FsInspectOutput = result.out
    if result.options[JSON]:
        emit_json(result.outputs)
    else:
        say(f"{res.target}: {res.fstype or 'unknown filesystem'} on {res.device}")
        for n in res.notes:
            say(f"  note: {n}")
        _print_findings(result.findings)
    return _code(result.findings)


def render_mount(result: StepResult) -> int:
    res: MountOutput = result.out
    if result.options[JSON]:
        emit_json(result.outputs)
    else:
        say(f"mounted {res.device} ({res.fstype}) on {res.mountpoint} with {res.options}"
            + (f"; loop {res.loop_device}" if res.loop_device else ""))
        for d in res.datasets:
            say(f"  {d['dataset']}: " + ("mounted ro on " + d["mountpoint"] if d["mounted"]
                                        else f"not mounted ({d.get('reason', '')})"))
    return 0


def render_umount(result: StepResult) -> int:
    loop = result.outputs.get("loop_device")
    say(f"unmounted {result.args['mountpoint']}" + (f"; detached {loop}" if loop else ""))
    return 0


def render_locate(result: StepResult) -> int:
    res: LocateOutput = result.out
    if result.options[JSON]:
        emit_json(LocateOutput.public_json(result.outputs))
    else:
        for r in res.ranges:
            start, end, files = r["start"], r["end"], r.get("files") or []
            say(f"[{start:#x}, {end:#x})")
            blind = [why for a, b, why in res.unmapped if a < end and start < b]
            if blind:
                say("    not mapped" + (" (part of it)" if files else "") + ": "
                    + "; ".join(blind))
            elif not files:
                say("    no regular-file data (metadata or free space)")
            for f in files:
                tensors = ", ".join(f["tensors"]) if f.get("tensors") else "-"
                say(f"    {f['path']} bytes [{f['file_offset']}, "
                    f"{f['file_offset'] + f['length']}) tensors: {tensors}")
        for n in res.notes:
            info(f"note: {n}")
    return int(ExitCode.FINDINGS) if any(r.get("files") for r in res.ranges) else 0


def render_extract(result: StepResult) -> int:
    res: ExtractOutput = result.out
    if result.options[JSON]:
        emit_json(result.outputs)
    else:
        for e in res.extracted:
            say(f"extracted {e['checkpoint']} ({e['format']}): {len(e['files'])} file(s)")
        for lb in res.left_behind:
            say(f"left behind {lb['checkpoint']}: {lb['verdict']}")
    return int(ExitCode.FINDINGS) if res.left_behind else 0


COMMANDS = {
    "triage": Command("triage", render_triage, case="required",
                      order=(CASE, "volume", "seconds", JSON)),
    "image": Command("image", render_image, case="required", before=_stop_on_sigterm,
                     order=("source", CASE, "dest", "retries", "simulate_bad_map", JSON)),
    "copy": Command("copy", render_copy, case="required",
                    order=("mountpoint", CASE, "dest", JSON)),
    "mount": Command("mount", render_mount, case="required",
                     order=("target", "mountpoint", CASE, "filesystem", "members", JSON)),
    "umount": Command("umount", render_umount, case="required", json=False),
    "locate": Command("locate", render_locate, case="required",
                      order=(CASE, "mapfile", "image", JSON)),
    "extract": Command("extract", render_extract, case="required"),
}
FS_INSPECT = Command("fs.inspect", render_fs_inspect, case="required",
                     order=("target", CASE, "filesystem", JSON))


def register(app: typer.Typer) -> None:
    app.command("devices")(devices_command)
    for name in ("triage", "image", "copy"):
        add_command(app, name, COMMANDS[name])
    add_command(fs_app, "inspect", FS_INSPECT)
    app.add_typer(fs_app, name="fs")
    for name in ("mount", "umount", "locate", "extract"):
        add_command(app, name, COMMANDS[name])
