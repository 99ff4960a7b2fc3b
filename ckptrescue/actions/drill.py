"""``drill.load``: read a drill directory's ``drill.json`` so later steps can refer to it."""

from __future__ import annotations

import json
from collections.abc import Generator
from pathlib import Path

from ckptrescue.engine.action import Action, ActionArgs, ActionResult, ArgSpec, StepContext
from ckptrescue.engine.events import Event
from ckptrescue.engine.outputs import DrillLoadOutput
from ckptrescue.errors import UsageError


class DrillLoad(Action):
    name = "drill.load"
    summary = "Load a drill's description (image, bad-sector map, manifest, S3 endpoint)"
    output_type = DrillLoadOutput
    args = (ArgSpec("dir", "path", required=True, help="Directory built by `ckptrescue drill`."),)

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"read {args['dir']}/drill.json"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        path = Path(args["dir"]) / "drill.json"
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise UsageError(f"{path}: not a drill directory ({exc})") from exc
        s3 = info.get("s3") or {}
        outputs = {
            "image": info["image"], "badsectors_map": info["badsectors_map"],
            "known_good_manifest": info["known_good_manifest"],
            "endpoint_url": s3.get("endpoint_url", ""), "bucket": s3.get("bucket", ""),
            "s3_prefix_url": f"s3://{s3['bucket']}/{s3.get('prefix', '')}" if s3 else "",
            "has_s3": bool(s3), "faults": info.get("faults", []),
        }
        yield ctx.output(f"drill image {outputs['image']}; {len(outputs['faults'])} faults")
        return ActionResult(outputs=outputs, summary="loaded")


ACTIONS = [DrillLoad]
