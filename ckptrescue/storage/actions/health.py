"""``device.health``: SMART / NVMe health and error log of the physical disk under a device,
without reading its media (safe before imaging a failing disk)."""

from __future__ import annotations

import os
import stat
from collections.abc import Generator

from ckptrescue.engine.action import Action, ActionArgs, ActionResult, ArgSpec, StepContext
from ckptrescue.engine.events import Event
from ckptrescue.storage.outputs import DeviceHealthOutput


class DeviceHealth(Action):
    name = "device.health"
    summary = "SMART / NVMe health of the physical disk under a device (reads no media)"
    capability = "read_device"
    output_type = DeviceHealthOutput
    args = (ArgSpec("target", "path", required=True,
                    help="Block device (an image file has no health: skipped)."),)

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"smartctl -x -j DISK; nvme smart-log / error-log -o json (the disk under "
                f"{args['target']})"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.storage.fsinspect import device_health

        target = str(args["target"])
        try:
            is_device = stat.S_ISBLK(os.stat(target).st_mode)
        except OSError as exc:
            return ActionResult(status="failed", error=f"{target}: {exc.strerror}")
        if not is_device:
            yield ctx.output(f"{target}: not a block device; no SMART/NVMe health to read")
            return ActionResult(outputs={"target": target, "device": False, "health": {}},
                                summary="not a device")
        health, findings = yield from ctx.blocking(
            lambda p: device_health(ctx.runner, target, target))
        return ActionResult(status="findings" if findings else "ok",
                            outputs={"target": target, "device": True, "health": health},
                            findings=findings, summary=f"health of {health.get('disk')}")


ACTIONS = [DeviceHealth]
