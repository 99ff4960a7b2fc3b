"""Resume-time actions (issue #31): what a run needs to resume that no loader tells it.

resume.safe_globals: the exact ``torch.serialization.add_safe_globals`` list a checkpoint needs.
resume.keys: why its names do not load into the model, and the mapping that fixes them.
resume.reassemble: a step lacking rank files, completed from verified copies elsewhere (a plan).
resume.world_size: whether a verified step loads at N ranks, and how.
resume.replicas: node-local replicas against the persistent copy, tensor by tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from ckptrescue.checkpoints.outputs import (
    KeyMismatchOutput,
    ReassemblyOutput,
    ReplicaOutput,
    SafeGlobalsOutput,
    WorldSizeOutput,
)
from ckptrescue.engine.action import Action, ActionArgs, ActionResult, ArgSpec, StepContext, from_library
from ckptrescue.engine.events import Event


def _answered(ctx: StepContext, work: Callable[[Callable[..., None]], Any], *, label: str,
              unit: str = "B") -> Generator[Event, None, ActionResult]:
    """Run a resume check's library call (``work(progress)``) off the event loop and hand its
    result on, answered by its own ``answer()``."""
    result = yield from ctx.blocking(work, label=label, unit=unit)
    return from_library(result, result.answer())


class SafeGlobals(Action):
    name = "resume.safe_globals"
    summary = "The exact add_safe_globals list torch.load(weights_only=True) needs (static)"
    description = """
The exact torch.serialization.add_safe_globals list each torch file needs before
torch.load(weights_only=True) accepts it, read statically (nothing imported or unpickled).

Every global torch's weights-only unpickler would refuse is listed at once (torch names one per
attempt), split into: safe (on one of the kit's exact lists: a training library's own classes,
DCP metadata, plain data, numpy dtypes; each with the source that justifies it), unlisted (on no
exact list: registering it runs that code), dangerous and blocked (never register). Prints the
Python that registers the safe ones. Reasons no registration fixes (opcodes torch does not
implement, a damaged pickle or file) are listed as blockers.

Exit 0 when every file loads as it is or once the safe list is registered, 1 otherwise.
PATH may be a directory: every torch file under it (a DeepSpeed step, a run)."""
    examples = ("ckptrescue resume safe-globals run/global_step300/"
                "zero_pp_rank_0_mp_rank_00_optim_states.pt",
                "ckptrescue resume safe-globals run/iter_0000300 --json")
    output_type = SafeGlobalsOutput
    args = (ArgSpec("paths", "list", item="path", required=True, positional=True,
                    cli_name="path",
                    help="Checkpoint files (torch zip or legacy) or directories of them."),)

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"list the globals torch.load(weights_only=True) needs in {p} (static scan)"
                for p in args["paths"]]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.checkpoints.weights_only_globals import needed_globals

        return (yield from _answered(ctx, lambda p: needed_globals(list(args["paths"])),
                                     label="scanning"))


class Keys(Action):
    name = "resume.keys"
    summary = "Why load_state_dict reports missing/unexpected keys, and the mapping that fixes it"
    description = """
Explain why a checkpoint's tensor names do not load into the model (load_state_dict's "Missing
key(s) ... Unexpected key(s)") and print the mapping that fixes it.

The model's names come from exactly one of: --reference (a checkpoint of the model, e.g. a
freshly saved model.state_dict()), --keys (a list, one name per line, optional shape) or
--model-class MODULE:CLASS (instantiated on torch's meta device inside the loader sandbox, never
in the kit's process; --model-path puts its package on the path, --model-kwargs passes JSON
arguments). The checkpoint's names are read statically (any format the kit probes).

Causes found: the state dict under a container key (state_dict., model.), module. from
DistributedDataParallel, _orig_mod. from torch.compile (also both at once), FSDP wrapper names
and flat parameters (which no renaming maps), a layer renamed consistently, tied weights saved
once. Shapes are compared. Prints the per-name mapping and a fix_keys() function.

Exit 0 when the names match as saved, 1 otherwise."""
    examples = ("ckptrescue resume keys run/step-300.pt --reference fresh_model.pt",
                "ckptrescue resume keys ckpt.pt --model-class mymodel.arch:GPT --model-path "
                "src --model-kwargs '{\"layers\": 2}'")
    capability = "load_model_sandboxed"
    output_type = KeyMismatchOutput
    args = (ArgSpec("checkpoint", "path", required=True, positional=True,
                    help="The checkpoint that does not load."),
            ArgSpec("reference", "path",
                    help="A checkpoint with the names the model expects (e.g. "
                         "torch.save(model.state_dict())."),
            ArgSpec("keys", "path", metavar="FILE",
                    help="A list of the names the model expects, one per line (optionally "
                         "followed by a shape)."),
            ArgSpec("model_class", "string", metavar="MODULE:CLASS",
                    help="The model class, instantiated on the meta device inside the loader "
                         "sandbox (never in this process)."),
            ArgSpec("model_path", "path", metavar="DIR",
                    help="With --model-class: the directory its package is imported from."),
            ArgSpec("model_kwargs", "string", metavar="JSON",
                    help="With --model-class: keyword arguments as a JSON object."))

    def plan(self, args: ActionArgs) -> list[str]:
        source = args.get("reference") or args.get("keys") or \
            f"{args.get('model_class')} (in the loader sandbox)"
        return [f"compare the names of {args['checkpoint']} with {source}"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        import json

        from ckptrescue.checkpoints.key_mismatch import explain_checkpoint
        from ckptrescue.errors import UsageError

        kwargs = None
        if args.get("model_kwargs"):
            try:
                kwargs = json.loads(args["model_kwargs"])
            except ValueError as exc:
                raise UsageError(f"--model-kwargs: not JSON: {exc}") from exc
            if not isinstance(kwargs, dict):
                raise UsageError("--model-kwargs: a JSON object ({\"name\": value})")
        return (yield from _answered(ctx, lambda p: explain_checkpoint(
            args["checkpoint"], reference=args.get("reference") or None,
            keys_file=args.get("keys") or None, model_class=args.get("model_class") or None,
            model_path=args.get("model_path") or None, model_kwargs=kwargs, case=ctx.case),
            label="comparing"))


class Reassemble(Action):
    name = "resume.reassemble"
    summary = "Complete a step that lacks rank files from verified copies a crashed save left"
    description = """
When a multi-rank step (DeepSpeed global_stepN, Megatron iter_N, ...) lacks rank files or holds
damaged ones, look for them where a crashed save leaves them: temporary and partial siblings
(tmp-checkpoint-N/, global_stepN.tmp, iter_N_partial) and other copies of the same run up to
two levels above the step (run.bak/); say whether the step can be reassembled and from which
files.

A copy counts only when verified: probed with its own format (intact), recording the same
step, and passing the family's own cross-rank rules together with the files present (world
sizes, ZeRO stage, per-rank layouts, the step each rank records). Nothing is moved or copied:
with --plan PLAN.json the kit writes the plan and PLAN.sh, which builds the complete step in a
NEW directory (--dest, default beside the plan) and checks every copy's SHA-256.

Exit 0 when the step is complete as saved, 1 otherwise."""
    examples = ("ckptrescue resume reassemble run/checkpoint-500/global_step500 --plan "
                "/cases/INC-9/reassemble.json",)
    output_type = ReassemblyOutput
    args = (ArgSpec("step_dir", "path", required=True, positional=True,
                    help="The step directory that lacks rank files (read only)."),
            ArgSpec("plan", "path", metavar="PLAN.json",
                    help="Write the reassembly plan here (JSON) and PLAN.sh beside it, when "
                         "the step can be reassembled."),
            ArgSpec("dest", "path", metavar="DIR",
                    help="With --plan: where the script builds the step (a new directory; "
                         "default beside the plan)."))

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"look for verified copies of the rank files {args['step_dir']} lacks"
                + (f"; write the plan {args['plan']}" if args.get("plan") else "")]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.actions.shared import refuse_unsafe_output
        from ckptrescue.checkpoints.reassemble import reassemble

        for key in ("plan", "dest"):
            if args.get(key):
                refuse_unsafe_output(ctx.case, str(args[key]))
        return (yield from _answered(ctx, lambda p: reassemble(
            args["step_dir"], plan=args.get("plan") or None, dest=args.get("dest") or None,
            progress=p), label="verifying", unit="files"))


class WorldSize(Action):
    name = "resume.world_size"
    summary = "Whether a verified step loads at N ranks, and how (reshard, convert, or not)"
    description = """
Whether a verified step can be resumed at another world size (N ranks), and how.

DCP (FSDP, DTensor), megatron-core dist checkpoints and Orbax reshard at load: any N.
DeepSpeed loads as saved at the same dp x mp; with ZeRO partitions another size needs the
universal checkpoint: the kit names the command (python -m
deepspeed.checkpoint.ds_to_universal --input_folder STEP --output_folder STEP_universal, with
--inject_missing_state when the step lacks universal_checkpoint_info), the files it reads and
the load_universal setting. Legacy Megatron needs N to be a multiple of TP x PP, else Megatron's
converter. Accelerate and single-file checkpoints hold the full state.

The step is probed first; a step that does not verify is not planned for. Exit 0 when it loads
at N ranks as saved or by resharding, 1 otherwise."""
    examples = ("ckptrescue resume world-size run/global_step300 --ranks 6",)
    output_type = WorldSizeOutput
    args = (ArgSpec("step_dir", "path", required=True, positional=True,
                    help="The step (or checkpoint) to resume from."),
            ArgSpec("ranks", "integer", required=True, minimum=1, cli_required=True,
                    help="The world size to resume at."))

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"can {args['step_dir']} resume at {args.get('ranks')} ranks"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.checkpoints.world_size import plan_world_size

        return (yield from _answered(ctx, lambda p: plan_world_size(
            args["step_dir"], int(args["ranks"])), label="probing"))


class Replicas(Action):
    name = "resume.replicas"
    summary = "Node-local replicas against the persistent copy, tensor by tensor (CRC, shape)"
    description = """
Compare node-local replicas of a step (and copies fetched from peers) with the persistent copy,
tensor by tensor, without loading: each rank file a replica holds against the persistent file
of the same name, every tensor by name, dtype, shape and CRC-32 of its bytes (the CRC the format
records and the probe verified, else computed over the tensor's bytes).

Names which replica of which rank differs and in which tensors, which are damaged, and which
copy to resume each rank file from: the persistent one when intact, else the intact replica
most copies agree on (a tie is named, not decided).

Exit 0 when every replica is identical to an intact persistent copy, 1 otherwise."""
    examples = ("ckptrescue resume replicas /persistent/run/global_step300 "
                "/local/node0/global_step300 /local/node1/global_step300",)
    output_type = ReplicaOutput
    args = (ArgSpec("persistent", "path", required=True, positional=True,
                    help="The persistent copy of the step (read only)."),
            ArgSpec("replicas", "list", item="path", required=True, positional=True,
                    cli_name="replica",
                    help="Replica directories, each holding some of the step's rank files "
                         "under the same names."))

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"compare {r} with {args['persistent']} tensor by tensor (no load)"
                for r in args.get("replicas") or []]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.checkpoints.replicas import compare_replicas

        return (yield from _answered(ctx, lambda p: compare_replicas(
            args["persistent"], list(args.get("replicas") or []), progress=p),
            label="comparing", unit="files"))


ACTIONS = [SafeGlobals, Keys, Reassemble, WorldSize, Replicas]
