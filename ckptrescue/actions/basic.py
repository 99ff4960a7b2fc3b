"""Actions that need only the foundation: confirm gates, exec, collect.logs, case.verify."""

from __future__ import annotations

import shlex
from collections.abc import Generator
from typing import Any

from ckptrescue.effects.runner import ToolCall
from ckptrescue.engine.action import Action, ActionArgs, ActionResult, ArgSpec, StepContext
from ckptrescue.engine.events import Event, GateReached
from ckptrescue.engine.outputs import CaseVerifyOutput, CollectLogsOutput, ConfirmOutput, ExecOutput
from ckptrescue.model import AuditEvent, Finding, Severity


class Confirm(Action):
    name = "confirm"
    summary = "A human gate: stop until the responder confirms"
    capability = "human"
    output_type = ConfirmOutput
    args = (ArgSpec("prompt", "string", required=True, help="What the responder confirms."),)

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"confirm: {args.get('prompt')}"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        prompt = str(args["prompt"])
        answer = ctx.confirm(prompt)
        yield GateReached(step_id=ctx.step_id, prompt=prompt, answered=answer)
        if answer is None:
            return ActionResult(status="stopped", error=prompt)
        if not answer:
            return ActionResult(status="failed", error=f"declined: {prompt}")
        return ActionResult(status="ok", outputs={"confirmed": True}, summary="confirmed",
                            audit=[AuditEvent("gate.confirmed",
                                              {"step": ctx.step_id, "prompt": prompt})])


class Exec(Action):
    name = "exec"
    summary = "Run one allowlisted read-only tool (argv list) through the guarded runner"
    capability = "exec_tool"
    description = """
Run one allowlisted read-only command through the guarded runner, recorded in the case.

Its stdout and stderr become artifacts whose SHA-256 the audit log records. A refused
command exits 3 with a one-line reason (also in the audit log)."""
    examples = ('ckptrescue exec --case C -- xfs_db -r -c "sb 0" -c print disk.img',)
    output_type = ExecOutput
    args = (
        ArgSpec("argv", "list", required=True, positional=True,
                help="The command and its arguments (after --)."),
        ArgSpec("timeout_s", "number", default=600, flag="--timeout",
                help="Time limit in seconds."),
        ArgSpec("allow_nonzero", "boolean", default=False, cli=False,
                help="A non-zero exit is not a failure."),
    )

    def plan(self, args: ActionArgs) -> list[str]:
        from ckptrescue import guard

        argv = [str(a) for a in args["argv"]]
        decision = guard.check(argv)
        shown = shlex.join(argv)
        return [shown if decision.allowed else f"{shown}    # REFUSED: {decision.reason}"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        argv = tuple(str(a) for a in args["argv"])
        result = ctx.runner.run(ToolCall(argv=argv, timeout_s=float(args["timeout_s"]),
                                         purpose=f"step {ctx.step_id}"), cancel=ctx.cancel)
        if result.refused:
            return ActionResult(status="refused", error=result.refused, findings=[Finding(
                "RN001", Severity.WARNING, f"refused: {shlex.join(argv)}",
                source="actions.exec", details={"reason": result.refused})])
        text = result.stdout.strip()
        if text:
            yield ctx.output(text[-4000:])
        outputs = {"returncode": result.returncode, "stdout_sha256": result.stdout_sha256,
                   "stderr_sha256": result.stderr_sha256, "stdout": result.stdout[:65536]}
        if result.cancelled:
            return ActionResult(status="cancelled", outputs=outputs,
                                error=f"{argv[0]} cancelled (the run can be resumed)")
        if result.timed_out:
            return ActionResult(status="failed", outputs=outputs,
                                error=f"{argv[0]} timed out", findings=[Finding(
                                    "RN002", Severity.ERROR, f"{argv[0]} timed out",
                                    source="actions.exec")])
        ok = result.returncode == 0 or args["allow_nonzero"]
        return ActionResult(status="ok" if ok else "failed", outputs=outputs,
                            summary=f"exit {result.returncode}",
                            error=None if ok else f"{argv[0]} exited {result.returncode}")


class CollectLogs(Action):
    name = "collect.logs"
    summary = "Capture logs and scheduler state read-only (kernel, journal, syslog, Slurm, k8s)"
    capability = "exec_tool"
    output_type = CollectLogsOutput
    args = (ArgSpec("journal", "boolean", default=True, help="Also export the journal."),
            ArgSpec("since", "string", help="Journal window start (journalctl --since syntax, "
                    "e.g. '2026-11-30 22:00')."),
            ArgSpec("until", "string", help="Journal window end."),
            ArgSpec("system_logs", "boolean", default=True,
                    help="Also keep /var/log/messages, syslog, kern.log and slurmd logs."),
            ArgSpec("logs", "list", item="path", help="Training-job logs and raw CloudTrail "
                    "files to keep with the case (tail of each, bounded)."),
            ArgSpec("slurm_jobs", "list", help="Slurm job ids: sacct and scontrol show job."),
            ArgSpec("k8s_namespace", "string", help="Kubernetes namespace: its events."),
            ArgSpec("pods", "list", help="Pods in that namespace: describe and logs."),
            ArgSpec("k8s_context", "string", help="kubectl context."))

    def _calls(self, args: ActionArgs) -> list[tuple[str, ...]]:
        from ckptrescue.storage.collect.host import Kube, Window, tool_calls

        k8s = Kube(str(args["k8s_namespace"]), tuple(p for p in args.get("pods") or () if p),
                   args.get("k8s_context") or None) if args.get("k8s_namespace") else None
        return tool_calls(Window(args.get("since") or None, args.get("until") or None),
                          [str(j) for j in args.get("slurm_jobs") or () if str(j)], k8s,
                          journal=bool(args.get("journal", True)))

    def plan(self, args: ActionArgs) -> list[str]:
        lines = [shlex.join(c) for c in self._calls(args)]
        files = (["system logs (messages, syslog, kern.log, slurmd)"]
                 if args.get("system_logs", True) else []) + list(args.get("logs") or [])
        if files:
            lines.append("keep (read only, tail bounded): "
                         + ", ".join(str(f) for f in files if str(f)))
        return lines

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        import shutil

        from ckptrescue.storage.collect.host import SYSTEM_LOGS, read_logs

        collected: dict[str, Any] = {}
        for argv in self._calls(args):
            if shutil.which(argv[0]) is None:
                yield ctx.output(f"{argv[0]} not available; skipped")
                continue
            result = ctx.runner.run(ToolCall(argv=argv, timeout_s=120,
                                             purpose="collect.logs"), cancel=ctx.cancel)
            label = " ".join(a for a in argv[:4] if not a.startswith("-"))
            collected[argv[0] if argv[0] not in collected else label] = {
                "argv": list(argv), "returncode": result.returncode,
                "sha256": result.stdout_sha256, "bytes": len(result.stdout_bytes)}
        paths = [*(SYSTEM_LOGS if args.get("system_logs", True) else ()),
                 *(str(p) for p in args.get("logs") or () if str(p))]
        reads = yield from ctx.blocking(lambda p: read_logs(paths))
        artifacts = [r.data for r in reads if r.data is not None]
        files = [r.to_json() for r in reads]
        audit = [AuditEvent("logs.collected", {"files": files},
                            tuple(a.sha256 for a in artifacts))] if files else []
        for r in reads:
            yield ctx.output(f"{r.path}: " + (r.error or f"{r.read} bytes kept"
                                               + (" (tail)" if r.truncated else "")))
        return ActionResult(outputs={"logs": collected, "files": files},
                            artifacts=artifacts, audit=audit,
                            summary=f"{len(collected)} tool(s) run, {len(artifacts)} log "
                                    "file(s) kept")


class CaseVerify(Action):
    name = "case.verify"
    summary = "Verify the case's audit chain and artifacts"
    output_type = CaseVerifyOutput
    args = ()

    def plan(self, args: ActionArgs) -> list[str]:
        return ["verify the audit chain and every artifact"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        report = ctx.case.verify()
        yield ctx.output(f"chain {'intact' if report.ok else 'BROKEN'}; head {report.chain.head}")
        return ActionResult(status="ok" if report.ok else "failed", outputs=report.to_json(),
                            error=None if report.ok else report.all_problems[0])


ACTIONS = [Confirm, Exec, CollectLogs, CaseVerify]
