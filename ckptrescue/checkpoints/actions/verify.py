"""The checkpoint wing's verifying actions: probe, salvage, rank (their records:
``checkpoints/outputs.py``; their text: ``checkpoints/render.py``)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Generator
from pathlib import Path
from typing import Any

from ckptrescue.actions.in_place import in_place
from ckptrescue.checkpoints.outputs import (
    CheckpointSummary,
    ProbeOutput,
    RankOutput,
    SalvageOutput,
)
from ckptrescue.engine.action import (
    Action,
    ActionArgs,
    ActionResult,
    ArgSpec,
    StepContext,
    findings_of,
    from_library,
    with_findings,
)
from ckptrescue.engine.events import Event
from ckptrescue.errors import CkptRescueError, UsageError
from ckptrescue.model import AuditEvent


class Probe(Action):
    name = "probe"
    summary = "Verify checkpoints without executing them; verdicts and damaged tensor names"
    description = """Verify checkpoints without executing them; exit 0 when every one is intact, else 1.

Formats: torch.save zip and legacy, safetensors, Hugging Face sharded, torch DCP,
TensorFlow TensorBundle / SavedModel / checkpoint state, Keras .keras / .h5; checkpoints
inside .tar / .tar.gz / .tar.zst and plain .zip archives, walked in place.
Verdicts: intact, suspect, damaged, truncated, incomplete, unsafe, unreadable."""
    examples = ("ckptrescue probe runs/exp1/ --reference runs/exp1/step_900.pt --json",)
    output_type = ProbeOutput
    args = (ArgSpec("paths", "list", required=True, item="location", positional=True,
                    metavar="PATH|URL",
                    help="Checkpoint files, checkpoint directories or run directories (all "
                         "probed); s3://, az://, gs:// URLs are probed in place (ranged reads)."),
            ArgSpec("reference", "path", help="A previous checkpoint to compare with."),
            ArgSpec("load", "boolean", default=False,
                    help="Also run the real loader in a sandboxed child (only when the "
                         "structural verdict allows)."),
            ArgSpec("numeric", "boolean", default=True, flag="--no-numeric",
                    help="Skip the numerical health scan."),
            ArgSpec("tensors", "boolean", default=False,
                    help="Include the per-tensor map (file, offset, length, status) in --json."),
            ArgSpec("scheduler", "string",
                    help="Dask scheduler address: probe each checkpoint on a worker (needs the "
                         "[cluster] extra; workers must see the same paths)."),
            ArgSpec("jobs", "integer", short="-j", minimum=1, default=1,
                    help="Rank files of a multi-rank step probed in parallel."),
            ArgSpec("endpoint_url", "string",
                    help="Object-store endpoint for s3://, az://, gs:// paths (emulators)."))

    def plan(self, args: ActionArgs) -> list[str]:
        paths = args["paths"] if isinstance(args["paths"], list) else [args["paths"]]
        lines = [f"static probe (zip/CRC/pickle scan/numerics) of {p}" for p in paths]
        if args.get("load"):
            lines.append("sandboxed real load (torch.load weights_only=True / safetensors / DCP / "
                         "TensorFlow) in a resource-limited child")
        return lines

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.checkpoints.probes.checkpoints import probe_paths, probe_records

        paths = args["paths"] if isinstance(args["paths"], list) else [args["paths"]]
        with in_place(paths, args.get("endpoint_url")) as (local, views):
            reports = yield from ctx.blocking(lambda p: probe_paths(
                [Path(x) for x in local], reference=Path(args["reference"])
                if args.get("reference") else None, load=bool(args["load"]), case=ctx.case,
                numeric=bool(args["numeric"]), scheduler=args.get("scheduler") or None,
                jobs=int(args.get("jobs") or 1), progress=_rank_progress(p),
                cancel=ctx.cancel),
                label="rank files", unit="files")
            audit = views.close(reports)
        audit += probe_records(paths, reports, reference=args.get("reference"),
                               load=bool(args["load"]), scheduler=args.get("scheduler") or None)
        findings = [f for r in reports for f in r.findings]
        for r in reports:
            yield ctx.output(f"{r.verdict:<10} {r.format:<14} {r.path}")
        bad = [r for r in reports if str(r.verdict) != "intact"]
        return ActionResult(
            audit=audit,
            status="findings" if bad else "ok",
            outputs={"checkpoints": [r.to_json(with_tensors=bool(args.get("tensors")))
                                     for r in reports]},
            findings=findings, findings_recorded=True,
            summary=f"{len(reports)} checkpoint(s), {len(bad)} not intact")


class Salvage(Action):
    name = "salvage"
    summary = "Write the verified tensors of a damaged checkpoint into a new safetensors file"
    capability = "write_recovery"
    description = """Write every verified tensor into OUT_DIR/<name>.salvaged.safetensors + salvage.json.

Exit 0 only when every tensor came back verified; 1 when some were lost (listed with
reasons), numerically suspect (written apart to OUT_DIR/<name>.suspect.safetensors) or
when nothing at all could be recovered."""
    examples = ("ckptrescue salvage /evidence/step_1200.pt /recovery/step_1200 --fill-from "
                "step_1100.pt",)
    output_type = SalvageOutput
    args = (ArgSpec("checkpoint", "location", positional=True, metavar="PATH|URL",
                    help="The damaged checkpoint (a file, a step directory, or an s3://, "
                         "az://, gs:// URL read in place)."),
            ArgSpec("probed", "list", cli=False,
                    help="Probe results (${probe.checkpoints}): salvage every damaged or "
                         "truncated one; unsafe checkpoints are never touched."),
            ArgSpec("out_dir", "path", positional=True,
                    help="New recovery directory (not next to the input, not on a read-only "
                         "mount)."),
            ArgSpec("fill_from", "location", metavar="PATH|URL",
                    help="Take lost tensors from this reference checkpoint (for a multi-rank "
                         "step: an earlier complete step; missing ranks' shards are taken from "
                         "the same ranks there)."),
            ArgSpec("allow_next_to_input", "boolean", default=False,
                    help="Allow OUT_DIR inside the input's directory."),
            ArgSpec("torch_save", "boolean", default=False,
                    help="Also write OUT_DIR/<name>.salvaged.pt: a torch.save file with the "
                         "original's key structure (a torch.save source whose every tensor "
                         "was recovered or filled)."),
            ArgSpec("endpoint_url", "string",
                    help="Object-store endpoint for URLs (emulators)."))

    SALVAGEABLE = ("damaged", "truncated", "incomplete")

    def _targets(self, args: ActionArgs) -> list[str]:
        if args.get("checkpoint"):
            return [str(args["checkpoint"])]
        probed = [CheckpointSummary.from_json(c) for c in args.get("probed") or []
                  if isinstance(c, dict)]
        return [c.path for c in probed if c.verdict in self.SALVAGEABLE]

    def plan(self, args: ActionArgs) -> list[str]:
        what = args.get("checkpoint") or "every damaged/truncated checkpoint the probe found"
        return [f"salvage verified tensors of {what} into {args.get('out_dir') or 'CASE/work/salvage'}"
                + (f", filling from {args['fill_from']}" if args.get("fill_from") else "")]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.checkpoints.salvage import salvage

        targets = self._targets(args)
        base = Path(args.get("out_dir") or ctx.work_dir("salvage"))
        results = []
        failed: list[dict[str, str]] = []
        clean = True
        findings = []
        audit = []
        artifacts = []
        for i, target in enumerate(targets):
            out_dir = base if len(targets) == 1 else base / f"{i:02d}-{Path(target).name}"
            fill = [str(args["fill_from"])] if args.get("fill_from") else []
            try:
                with in_place([target, *fill], args.get("endpoint_url")) as (local, views):
                    ref = Path(local[1]) if fill else None
                    result = yield from ctx.blocking(lambda p, t=local[0], o=out_dir, r=ref: salvage(
                        Path(t), o, fill_from=r,
                        case=ctx.case, allow_next_to_input=bool(args["allow_next_to_input"]),
                        torch_save=bool(args.get("torch_save"))))
                    read = views.accounting()
                if views.opened:
                    result.source = target
            except CkptRescueError as exc:  # one checkpoint failing must not lose the others
                if args.get("checkpoint"):
                    raise  # a single, named checkpoint: its own error (and exit code) stands
                failed.append({"checkpoint": target, "error": exc.message})
                yield ctx.output(f"{target}: salvage failed: {exc.message}")
                continue
            out = result.to_json()
            out.setdefault("checkpoint", target)
            results.append(out)
            clean = clean and bool(getattr(result, "clean", True))  # suspect or nothing
            findings.extend(findings_of(result))
            audit.extend([*read, *with_findings(result.audit, findings_of(result))])
            artifacts.extend(result.artifacts)
            yield ctx.output(f"{target}: {len(out.get('recovered', []))} recovered, "
                             f"{len(out.get('lost', []))} lost"
                             + (f", {len(out['filled'])} filled from {out.get('fill_from')} "
                                "(mixed: not clean)" if out.get("filled") else "")
                             + f" -> {out_dir}")
        if not targets:
            yield ctx.output("nothing to salvage")
        lost = sum(len(r.get("lost", [])) for r in results)
        if failed and not results:
            return ActionResult(status="failed", outputs={"salvaged": [], "failed": failed},
                                error=failed[0]["error"])
        # the findings are written where each salvage marked them (with_findings above)
        return ActionResult(status="findings" if lost or failed or not clean else "ok",
                            outputs={"salvaged": results, "failed": failed},
                            findings=findings, findings_recorded=True, audit=audit,
                            artifacts=artifacts,
                            summary=f"{len(results)} checkpoint(s) salvaged, {lost} tensor(s) lost")


class Rank(Action):
    name = "rank"
    summary = "Rank a run's checkpoints newest first; the newest safe one to resume from"
    description = """List a run's checkpoints newest first with a verdict each, and the one to resume from.

With --eval, the responder's own evaluation command (argv with a {checkpoint} placeholder;
one string is split like a shell would, never run by one) runs confined (read-only filesystem,
scratch only writable, no network, memory/CPU/time limits) against the resumable checkpoints,
newest first, until one passes: resume from the newest checkpoint that also passes the eval.

Exit 0 when a resumable (intact) checkpoint exists (and passes the eval), else 1."""
    examples = ("ckptrescue rank runs/exp1 --load --json",
                "ckptrescue rank runs/exp1 --eval 'python eval.py {checkpoint}' --eval-min 0.7")
    output_type = RankOutput
    args = (ArgSpec("run_dir", "location", required=True, positional=True, metavar="DIR|URL",
                    help="A run directory holding checkpoints (or an s3://, az://, gs:// "
                         "prefix, probed in place)."),
            ArgSpec("load", "boolean", default=False,
                    help="Also load each checkpoint with its real library in the sandbox; a "
                         "file the loader refuses (or that tries to escape) is never "
                         "recommended."),
            ArgSpec("jobs", "integer", short="-j", minimum=1, default=1,
                    help="Rank files of a multi-rank step probed in parallel."),
            ArgSpec("scheduler", "string",
                    help="Dask scheduler address: the rank files of each step on its workers."),
            ArgSpec("endpoint_url", "string",
                    help="Object-store endpoint for an s3://, az://, gs:// run (emulators)."),
            ArgSpec("eval", "list", item="string", metavar="COMMAND",
                    help="Your evaluation command, {checkpoint} standing for the checkpoint "
                         "(one string split like a shell would, or the option repeated once "
                         "per argument); run confined against resumable checkpoints newest "
                         "first until one passes."),
            ArgSpec("eval_min", "number",
                    help="The eval passes when its metric is at least this."),
            ArgSpec("eval_max", "number",
                    help="The eval passes when its metric is at most this."),
            ArgSpec("eval_timeout", "number", default=600.0,
                    help="Wall-clock limit of one eval, in seconds."),
            ArgSpec("eval_memory_mb", "integer", minimum=64, default=8192,
                    help="Address-space limit of one eval, in MB."),
            ArgSpec("eval_metric_regex", "string", metavar="REGEX",
                    help="Read the metric from stdout with this regex (group 'metric', else "
                         "group 1; default: the last line, a number or {\"metric\": x})."))

    def plan(self, args: ActionArgs) -> list[str]:
        lines = [f"probe and rank every checkpoint under {args['run_dir']}"
                 + (" (with sandboxed real loads)" if args.get("load") else "")]
        if args.get("eval"):
            from ckptrescue.checkpoints.probes.evalhook import argv_template

            lines.append("run " + shlex.join(argv_template(args["eval"]))
                         + " confined (read-only filesystem, no network) on resumable "
                         "checkpoints, newest first, until one passes")
        return lines

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.checkpoints.probes.checkpoints import probe_records
        from ckptrescue.checkpoints.rank import rank

        probed = any(issubclass(a, Probe) for a in ctx.plan_actions)
        case = ctx.case  # read only (sandboxed loads); the records travel on the result
        evals: list[Any] = []
        accept = _eval_accept(args, case, evals) if args.get("eval") else None
        with in_place([str(args["run_dir"])], args.get("endpoint_url")) as (local, views):
            result = yield from ctx.blocking(lambda p: rank(
                Path(local[0]), case=case, load=bool(args["load"]),
                jobs=int(args.get("jobs") or 1), scheduler=args.get("scheduler") or None,
                progress=_rank_progress(p), accept=accept), label="rank files", unit="files")
            audit = views.close_rank(result)
        out = result.to_json()
        if accept is not None:
            out["eval"] = [{"path": e.checkpoint, "status": e.status, "metric": e.metric}
                           | ({"reason": e.reason} if e.reason else {}) for e in evals]
        for c in result.checkpoints:
            yield ctx.output(f"{c.verdict!s:<10} {c.path}")
        for e in evals:
            yield ctx.output(f"eval {e.status:<7} metric={e.metric} {e.checkpoint}")
        yield ctx.output(f"resume from: {result.resume_from}")
        # a probe step of the run records the findings; without one, rank records them
        records = [] if probed else probe_records(
            [args["run_dir"]], [r for c in result.checkpoints for r in c.reports],
            load=bool(args["load"]), scheduler=args.get("scheduler") or None)
        done = from_library(result, f"resume from {out.get('resume_from')}", status="ok",
                            recorded=True)  # written in ``records`` (or by the probe step)
        done.outputs = out
        done.audit = [*audit, *records, *[a for e in evals for a in e.audit],
                      AuditEvent("checkpoint.ranked", out), *done.audit]
        return done


def _eval_accept(args: ActionArgs, case: Any, evals: list[Any]) -> Any:
    """``rank``'s ``accept``: the responder's eval of one candidate (its result kept in
    ``evals``); passes when the eval passes."""
    from ckptrescue.checkpoints.probes.evalhook import argv_template, run_eval

    template = argv_template(args["eval"])
    opts = {"timeout_s": float(args.get("eval_timeout") or 600.0),
            "memory_mb": int(args.get("eval_memory_mb") or 8192),
            "metric_regex": args.get("eval_metric_regex") or None,
            "min_metric": args.get("eval_min"), "max_metric": args.get("eval_max")}
    if opts["metric_regex"]:
        try:
            re.compile(str(opts["metric_regex"]))
        except re.error as exc:
            raise UsageError(f"--eval-metric-regex: {exc}") from exc

    def accept(candidate: Any) -> bool:
        result = run_eval(template, Path(candidate.path), case=case, **opts)
        evals.append(result)
        return result.passed
    return accept


def _rank_progress(progress: Any) -> Any:
    """Per rank file of multi-rank steps: a count for the step's progress line."""
    done = [0]

    def callback(*_args: Any, **_kw: Any) -> None:
        done[0] += 1
        progress(done[0], None)
    return callback


ACTIONS = [Probe, Salvage, Rank]
