"""``watch.pass``: one incremental pass of a continuous watch (``ckptrescue watch`` runs one
per interval or per burst of inotify events, each a recorded step)."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

from ckptrescue.datasets.outputs import WatchPassOutput
from ckptrescue.engine.action import Action, ActionArgs, ActionResult, ArgSpec, StepContext
from ckptrescue.engine.events import Event


class WatchPass(Action):
    name = "watch.pass"
    summary = "One watch pass: check what is new, changed or gone since the last pass"
    output_type = WatchPassOutput
    args = (ArgSpec("source", "string", required=True,
                    help="Dataset directory or s3://bucket/prefix (read only)."),
            ArgSpec("state", "path", required=True,
                    help="The watch's SQLite state (outside the source)."),
            ArgSpec("manifest", "path", help="Manifest to check changed files against."),
            ArgSpec("paths", "list", help="Only these relative paths (inotify); else a full "
                    "pass."),
            ArgSpec("endpoint_url", "string", help="S3-compatible endpoint."),
            ArgSpec("webhook", "string", help="POST findings here (http/https)."),
            ArgSpec("prometheus_textfile", "path",
                    help="Write Prometheus textfile metrics here."))

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"watch pass over {args['source']}"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.datasets.watch.alerts import post_webhook, write_textfile
        from ckptrescue.datasets.watch.passes import run_pass
        from ckptrescue.datasets.watch.state import WatchState, check_location

        source = str(args["source"])
        state_path = check_location(Path(args["state"]), source)
        only = [p.encode("utf-8", "surrogateescape") for p in args["paths"]] \
            if args.get("paths") else None
        from ckptrescue.actions.shared import refuse_unsafe_output

        for target in (state_path, args.get("prometheus_textfile")):
            if target:
                refuse_unsafe_output(ctx.case, str(target))
        from ckptrescue.datasets.watch.state import held_for_a_pass
        from ckptrescue.errors import database

        # one watch per state: the caller's hold (a watch run's), else one for this pass;
        # the state database's errors say which file (a full disk: ENOSPC)
        with held_for_a_pass(state_path, source):
            state = WatchState(state_path, source)
            with database(state_path):
                try:
                    result = yield from ctx.blocking(lambda p: run_pass(
                        source, state, manifest=args.get("manifest"), only=only,
                        endpoint_url=args.get("endpoint_url") or None, cancel=ctx.cancel))
                    out = result.to_json()
                    notes = []
                    if args.get("prometheus_textfile"):
                        write_textfile(Path(args["prometheus_textfile"]), state, result, source)
                    if args.get("webhook") and result.findings:
                        failed = post_webhook(str(args["webhook"]), {
                            "source": source, "case": ctx.case.manifest.get("id"), **out,
                            "findings": [f.to_json() for f in result.findings]})
                        if failed:
                            notes.append(failed)
                    out["bad_total"] = state.bad()
                finally:
                    state.close()
        out["notes"] = notes
        for note in notes:
            yield ctx.output(f"note: {note}")
        yield ctx.output(out["answer"])
        return ActionResult(status="findings" if result.findings else "ok",
                            findings=result.findings, outputs=out, summary=out["answer"])


ACTIONS = [WatchPass]
