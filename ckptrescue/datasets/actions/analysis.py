"""Actions that judge content whose bytes verify: training state across a run's checkpoints
(``trainstate``) and dataset shard profiles against a baseline (``dataset.profile``,
``dataset.compare``)."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

from ckptrescue.datasets.outputs import DatasetCompareOutput, DatasetProfileOutput, TrainStateOutput
from ckptrescue.engine.action import Action, ActionArgs, ActionResult, ArgSpec, StepContext
from ckptrescue.engine.events import Event
from ckptrescue.model import Finding, Severity

SPOT_SHARDS = 5  # spot checks drawn for at most this many flagged shards


def _status(findings: list[Finding]) -> str:
    return "findings" if any(f.severity.rank >= Severity.WARNING.rank for f in findings) \
        else "ok"


class TrainState(Action):
    name = "trainstate"
    summary = "Did the run train? Frozen layers, reset optimizers, zero LR across checkpoints"
    description = """
Compare a run's checkpoints in training order, streaming from the files (nothing imported or
unpickled): per-parameter relative update and sign agreement of successive updates,
parameters that never change, intervals where nothing changed, update spikes, optimizer step
counters that go back, second moments that collapse, a zero learning rate, a scheduler that
stops (TS001-TS008, docs/trainstate.md).

Exit 0 when nothing is found, 1 otherwise."""
    examples = ("ckptrescue trainstate runs/exp1 --json",)
    output_type = TrainStateOutput
    args = (ArgSpec("run_dir", "path", required=True, positional=True,
                    help="A run directory holding two or more checkpoints."),)

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"compare consecutive checkpoints under {args['run_dir']} (static reads)"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.datasets.trainstate.analysis import analyse, run_checkpoints

        result = yield from ctx.blocking(
            lambda p: analyse(run_checkpoints(Path(args["run_dir"])), progress=p),
            label="tensors", unit="tensors")
        for c in result.checkpoints:
            yield ctx.output(f"{c['step']!s:>10}  {c['verdict']:<10} {c['path']}")
        answer = (f"{len(result.findings)} training-state finding(s) over "
                  f"{len(result.checkpoints)} checkpoints" if result.findings else
                  f"{len(result.checkpoints)} checkpoints: the run trained (no finding)")
        out = result.to_json()
        return ActionResult(status=_status(result.findings), findings=result.findings,
                            outputs={**out, "answer": answer}, summary=answer)


class DatasetProfile(Action):
    name = "dataset.profile"
    summary = "Per shard and field statistics of a dataset, for comparison with a baseline"
    description = """
Profile every shard under DIR (JSONL/.gz/.zst, Parquet, Arrow, TFRecord of tf.train.Example,
WebDataset tars, .npy): record counts, empty/null rates, lengths (and tokens with
--tokenizer), value and label distributions, duplicate and near-duplicate rates, schema,
numeric ranges (docs/profiles.md). Streaming; the profile is JSON (-o), kept in the case.

Compare two profiles (or the shards of one) with `dataset compare`."""
    examples = ("ckptrescue dataset profile /data/train -o train.profile.json --jobs 2",)
    output_type = DatasetProfileOutput
    args = (ArgSpec("dir", "location", required=True, positional=True, cli_name="directory",
                    metavar="DIR|URL",
                    help="Dataset directory, or an s3://, az://, gs:// prefix read in place "
                         "(read only)."),
            ArgSpec("endpoint_url", "string", help="Object-store endpoint (emulators)."),
            ArgSpec("output", "path", short="-o", help="Write the profile JSON here."),
            ArgSpec("fields", "list", metavar="FIELD",
                    help="Profile only these fields (repeat the option)."),
            ArgSpec("tokenizer", "string", help="Token lengths too: a Hugging Face tokenizer "
                    "name, or module:function returning tokens."),
            ArgSpec("sample", "integer", minimum=1,
                    help="At most this many records per shard."),
            ArgSpec("jobs", "integer", short="-j", minimum=1, default=1,
                    help="Shards profiled in parallel."),
            ArgSpec("scheduler", "string",
                    help="Dask scheduler address: profile on a cluster's workers."))

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"profile every shard under {args['dir']}"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.actions.shared import refuse_unsafe_output
        from ckptrescue.datasets.profiles.build import profile_dataset
        from ckptrescue.datasets.profiles.profile import save

        if args.get("output"):
            refuse_unsafe_output(ctx.case, str(args["output"]))

        def work(p: Any) -> Any:
            done = [0]

            def tick(_shard: Any) -> None:
                done[0] += 1
                p(done[0], None)
            return profile_dataset(args["dir"], jobs=int(args.get("jobs") or 1),
                                   scheduler=args.get("scheduler") or None,
                                   fields=args.get("fields") or None,
                                   tokenizer=args.get("tokenizer") or None,
                                   sample=args.get("sample"), progress=tick)

        from ckptrescue.actions.in_place import in_place

        with in_place([str(args["dir"])], args.get("endpoint_url")) as (local, views):
            source = args["dir"]
            args = {**args, "dir": local[0]}
            profile = yield from ctx.blocking(work, label="shards", unit="shards")
            audit = views.accounting()
        if views.opened:
            profile.root = str(source)
        if args.get("output"):
            save(profile, Path(args["output"]))
        data = profile.to_json()
        shards = data.get("shards", [])
        answer = f"{len(shards)} shard(s) profiled" + (
            f" -> {args['output']}" if args.get("output") else "")
        yield ctx.output(answer)
        return ActionResult(outputs={"profile": data, "output": args.get("output"),
                                     "answer": answer}, summary=answer, audit=audit)


class DatasetCompare(Action):
    name = "dataset.compare"
    summary = "Flag shards and fields that deviate from a baseline, with the test and effect"
    description = """
Compare CURRENT with BASELINE (two profile JSON files or dataset directories), or, with only
BASELINE and --mode shards, each shard with the rest of the same dataset. Every flag names the
test (PSI/KS for distributions, chi-square for labels, z-tests for rates), its statistic,
p-value and effect size against the documented threshold (DP001-DP049, docs/profiles.md), and
what to check next; a seeded sample of records of each flagged shard and of a reference shard
is drawn with the values that drove the flag marked (the seed and record indices are kept so
anyone can redraw it).

Exit 0 when nothing deviates, 1 otherwise."""
    examples = ("ckptrescue dataset compare v1.profile.json /data/train-v2",
                "ckptrescue dataset compare /data/train --mode shards --json")
    output_type = DatasetCompareOutput
    args = (ArgSpec("baseline", "path", required=True, positional=True,
                    help="Baseline: a profile JSON or a dataset directory."),
            ArgSpec("current", "path", positional=True,
                    help="Current version: a profile JSON or a dataset directory."),
            ArgSpec("mode", "string", default="versions",
                    help="versions (BASELINE vs CURRENT) or shards (each shard vs the rest)."),
            ArgSpec("seed", "integer", default=0, help="Seed of the spot-check samples."),
            ArgSpec("spot", "integer", default=8, minimum=0,
                    help="Records per spot-check sample (0: none)."))

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"compare {args.get('current') or args['baseline']} with "
                f"{args['baseline'] if args.get('current') else 'the rest of its shards'}"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.datasets.profiles.compare import compare
        from ckptrescue.errors import UsageError

        mode = args.get("mode") or "versions"
        if mode not in ("versions", "shards"):
            raise UsageError(f"--mode {mode}: choose versions or shards")
        if mode == "versions" and not args.get("current"):
            raise UsageError("dataset compare: give CURRENT, or --mode shards to compare the "
                             "shards of BASELINE with each other")
        baseline = yield from ctx.blocking(lambda p: _profile_of(args["baseline"]))
        current = (yield from ctx.blocking(lambda p: _profile_of(args["current"]))
                   ) if args.get("current") else None
        result = compare(baseline, current, mode=mode)  # type: ignore[arg-type]
        spots = yield from ctx.blocking(lambda p: _spot_checks(
            result, baseline, current, seed=int(args.get("seed") or 0),
            k=int(args.get("spot") if args.get("spot") is not None else 8)))
        answer = result.answer()
        for f in result.findings:
            yield ctx.output(f"[{f.code}] {f.title}")
        yield ctx.output(answer)
        return ActionResult(status=_status(result.findings), findings=result.findings,
                            outputs={"compare": result.to_json(), "spot_checks": spots,
                                     "answer": answer}, summary=answer)


def _profile_of(path: str) -> Any:
    from ckptrescue.datasets.profiles.build import profile_dataset
    from ckptrescue.datasets.profiles.profile import load

    return profile_dataset(path) if Path(path).is_dir() else load(path)


def _spot_checks(result: Any, baseline: Any, current: Any, *, seed: int,
                 k: int) -> list[dict[str, Any]]:
    from ckptrescue.datasets.profiles.spotcheck import sample_records

    if k <= 0:
        return []
    target = current if current is not None else baseline
    flagged = result.flagged_shards()
    clean = [s.path for s in target.shards if s.path not in flagged]
    out: list[dict[str, Any]] = []
    for finding in result.findings[:]:
        shard = finding.details.get("shard")
        if shard is None or shard in {o["shard"] for o in out}:
            continue
        if len(out) >= SPOT_SHARDS:
            break
        path = Path(target.root) / shard
        if current is not None and baseline.shard(shard) is not None:
            reference: Path | None = Path(baseline.root) / shard
        else:
            reference = Path(target.root) / clean[0] if clean else None
        if not path.is_file():
            continue
        try:
            spot = sample_records(path, seed=seed, k=k, finding=finding,
                                  reference=reference if reference and reference.is_file()
                                  else None)
        except (OSError, ValueError) as exc:
            out.append({"shard": shard, "error": str(exc)})
            continue
        out.append({"shard": shard, **spot.to_json()})
    return out


ACTIONS = [TrainState, DatasetProfile, DatasetCompare]
