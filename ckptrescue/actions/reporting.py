"""The ``report`` action: render the incident report from the case into a file."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

from ckptrescue.engine.action import Action, ActionArgs, ActionResult, ArgSpec, StepContext
from ckptrescue.engine.events import Event
from ckptrescue.engine.outputs import ReportOutput
from ckptrescue.model import ArtifactData


class Report(Action):
    name = "report"
    summary = "Render the incident report (HTML, Markdown, JSON or PDF) from the case"
    output_type = ReportOutput
    args = (
        ArgSpec("format", "string", default="html",
                help="html, md, json or pdf (headless Chromium prints the HTML)."),
        ArgSpec("output", "path", help="Output file (default: CASE/report.<format>)."),
    )

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"render the {args.get('format', 'html')} report to "
                f"{args.get('output') or 'CASE/report.' + str(args.get('format', 'html'))}"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.report.render import write

        fmt = str(args.get("format") or "html")
        out = Path(args.get("output") or ctx.case.root / f"report.{fmt}")
        write(ctx.case, out, fmt,
              runner=ctx.runner if hasattr(ctx.runner, "run_internal") else None)
        stored = ArtifactData.of_bytes(out.read_bytes(), name=out.name, kind=f"report:{fmt}")
        yield ctx.output(f"report written: {out.resolve()}")
        return ActionResult(outputs={"path": str(out.resolve()), "sha256": stored.sha256,
                                     "format": fmt},
                            summary=str(out.resolve()), artifacts=[stored])


ACTIONS = [Report]
