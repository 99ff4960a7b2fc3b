"""Actions for the training job's side: ``dataset.quarantine`` (what to skip while recovery
runs) and ``gate`` (verify a dataset slice or a checkpoint before a job starts)."""

from __future__ import annotations

import json
from collections.abc import Generator
from pathlib import Path

from ckptrescue.datasets.outputs import GateOutput, QuarantineOutput
from ckptrescue.engine.action import Action, ActionArgs, ActionResult, ArgSpec, StepContext
from ckptrescue.engine.events import Event
from ckptrescue.errors import UsageError
from ckptrescue.model import JsonObject


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


class DatasetQuarantine(Action):
    name = "dataset.quarantine"
    capability = "write_recovery"
    summary = "The list of bad files and records a training job should skip (JSON + paths)"
    description = """
Write the quarantine list of a dataset: every file a manifest audit found corrupted, changed,
missing or unreadable, and every bad record `dataset verify` named (JSONL line, TFRecord
record, Parquet row group; a tar shard whole when its bad member names no sample), as JSON
(schema ckptrescue.datasets.quarantine/1) and as a plain list of whole bad files. Sources: --audit and
--verify JSON files (the commands' --json output), else every audit and verify of the case.

Training reads it with ckptrescue.datasets.quarantine: a torch Dataset/IterableDataset wrapper, a
WebDataset shard list and sample filter, a Hugging Face datasets filter (docs/datasets.md)."""
    examples = ("ckptrescue dataset quarantine /data/train --case /cases/INC-7 "
                "-o /cases/INC-7/quarantine.json",
                "ckptrescue dataset quarantine /data/train --verify verify.json -o q.json")
    output_type = QuarantineOutput
    args = (ArgSpec("dir", "path", required=True, positional=True, cli_name="directory",
                    help="The dataset directory the lists' paths are relative to."),
            ArgSpec("output", "path", required=True, short="-o",
                    help="The quarantine JSON to write (outside DIR)."),
            ArgSpec("paths", "path", help="Also the plain list of whole bad files "
                    "(default: OUTPUT with .paths)."),
            ArgSpec("audit", "list", item="path", help="A `manifest audit --json` output "
                    "(repeat the option)."),
            ArgSpec("verify", "list", item="path", help="A `dataset verify --json` output "
                    "(repeat the option)."))

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"quarantine list of {args['dir']} -> {args['output']}"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.datasets.outputs import DatasetVerifyOutput, ManifestAuditOutput
        from ckptrescue.datasets.quarantine.listing import build
        from ckptrescue.engine.answer import outputs_of
        from ckptrescue.errors import UsageError

        root = Path(args["dir"])
        if not root.is_dir():  # a mistyped DIR made a list of paths under a folder not there
            from ckptrescue.errors import EvidenceError

            raise EvidenceError(f"{root}: not a directory (DIR is the dataset the lists' "
                                "paths are relative to)")
        out = Path(args["output"])
        paths = Path(args["paths"]) if args.get("paths") else out.with_suffix(".paths")
        from ckptrescue.actions.shared import refuse_unsafe_output

        for target in (out, paths):
            if _inside(target, root):
                raise UsageError(f"{target}: inside the dataset; write the list elsewhere")
            refuse_unsafe_output(ctx.case, str(target))
        audits = [_read_json(p) for p in args.get("audit") or []]
        verifies = [_read_json(p) for p in args.get("verify") or []]
        if not audits and not verifies:
            audits = [o.to_json() for o in outputs_of(ctx.case, ManifestAuditOutput)]
            verifies = [o.to_json() for o in outputs_of(ctx.case, DatasetVerifyOutput)]
        if not audits and not verifies:
            raise UsageError("dataset quarantine: no audit or verify to build from",
                             hint="pass --audit/--verify JSON files, or --case CASE after "
                                  "`manifest audit` / `dataset verify` ran in that case")
        q = build(str(root.absolute()), audits=audits, verifies=verifies)
        out.parent.mkdir(parents=True, exist_ok=True)
        q.save(out, paths)
        data = q.to_json()
        answer = (f"{len(q.files)} file(s) and {len(q.records)} record(s) quarantined -> {out}"
                  if q.files or q.records else f"nothing to quarantine -> {out}")
        yield ctx.output(answer)
        return ActionResult(outputs={"quarantine": data, "output": str(out),
                                     "path_list": str(paths), "answer": answer},
                            summary=answer)


def _read_json(path: str) -> JsonObject:
    from ckptrescue.errors import UsageError

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8", errors="surrogateescape"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not a JSON result ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise UsageError(f"{path}: not a `manifest audit --json` / `dataset verify --json` "
                         "output (no files list)")
    return data


class Gate(Action):
    name = "gate"
    summary = "Go/no-go before a job loads data or a checkpoint (exit status for launchers)"
    description = """
Check a dataset slice against its manifest, or a checkpoint, before a job starts; exit 0 means
go. A dataset (with --manifest): every manifest entry under DIR (or under each --only prefix)
present with the manifest's size, then a seeded sample of files hashed in full (--sample: a
fraction, 1 = every file; --sample-count N: N files; a fresh seed per launch unless --seed,
recorded). Fail closed: a file under DIR (or the --only slices) that the manifest does not list
would be loaded unchecked: it is unverified and fails the gate unless --allow-unverified. An
s3:// prefix: one listing instead of the stats, sampled objects checked against their stored
full-object SHA-256, or a stored CRC the manifest recorded (build --checksums), without a byte
read (downloaded only when the store holds neither), objects
whose ETag changed since the manifest always checked (--strict-mtime: refused). A
checkpoint (file or directory, no --manifest): the static probe (structure, every CRC, pickle
safety, shard/rank completeness) must say intact (--allow-suspect: or suspect).

In Python: ckptrescue.datasets.gate.gate_dataset / gate_checkpoint, and
ckptrescue.checkpoints.verified_load.load_verified for a torch.load that verifies first."""
    examples = ("ckptrescue gate /data/train --manifest /data/train.sha256 --sample 0.01",
                "ckptrescue gate ckpt/global_step1200 && torchrun train.py --resume")
    output_type = GateOutput
    args = (ArgSpec("target", "location", required=True, positional=True,
                    help="Dataset directory or s3://bucket/prefix (with --manifest), or "
                         "checkpoint."),
            ArgSpec("manifest", "path", short="-m", help="The dataset's sha256 manifest."),
            ArgSpec("sample", "number", default=0.01, minimum=0,
                    help="Share of the files hashed in full: a fraction, 1 = every file."),
            ArgSpec("sample_count", "integer", minimum=0,
                    help="Hash this many files in full instead of a share (--sample)."),
            ArgSpec("allow_unverified", "boolean", default=False,
                    help="Pass although files under the target are not in the manifest "
                         "(they are still counted)."),
            ArgSpec("seed", "integer", help="Redraw a recorded sample."),
            ArgSpec("only", "list", metavar="PREFIX",
                    help="Gate only entries under this prefix (repeat)."),
            ArgSpec("strict_mtime", "boolean", default=False,
                    help="Also require the manifest's mtimes."),
            ArgSpec("allow_suspect", "boolean", default=False,
                    help="A numerically suspect checkpoint passes."),
            ArgSpec("endpoint_url", "string",
                    help="S3-compatible endpoint (for an s3:// dataset)."))

    def plan(self, args: ActionArgs) -> list[str]:
        what = "dataset" if args.get("manifest") else "checkpoint"
        return [f"gate the {what} {args['target']}"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.datasets.gate import gate_checkpoint, gate_dataset

        target = str(args["target"])
        if "://" in target and not (args.get("manifest") and target.startswith("s3://")):
            raise UsageError(f"{target}: gate takes s3:// prefixes with --manifest only",
                             hint="a checkpoint in an object store: ckptrescue probe URL")
        if args.get("manifest"):
            result = yield from ctx.blocking(lambda p: gate_dataset(
                args["target"], args["manifest"], sample=float(args.get("sample") or 0),
                sample_count=args.get("sample_count"),
                allow_unverified=bool(args.get("allow_unverified")),
                seed=args.get("seed"), only=args.get("only") or (),
                strict_mtime=bool(args.get("strict_mtime")),
                endpoint_url=args.get("endpoint_url") or None))
        else:
            result = yield from ctx.blocking(lambda p: gate_checkpoint(
                args["target"], allow_suspect=bool(args.get("allow_suspect"))))
        yield ctx.output(("PASS " if result.passed else "FAIL ") + result.reason)
        return ActionResult(status="ok" if result.passed else "findings",
                            outputs=result.to_json(), summary=result.reason)


ACTIONS = [DatasetQuarantine, Gate]
