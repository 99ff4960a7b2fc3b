"""Resume-time actions (issue #31): what a run needs to resume that no loader tells it.

resume.safe_globals: the exact ``torch.serialization.add_safe_globals`` list a checkpoint needs.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from ckptrescue.engine.action import Action, ActionResult, ArgSpec, StepContext, from_library
from ckptrescue.engine.events import Event
from ckptrescue.engine.outputs import SafeGlobalsOutput


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

    def plan(self, args: dict[str, Any]) -> list[str]:
        return [f"list the globals torch.load(weights_only=True) needs in {p} (static scan)"
                for p in args["paths"]]

    def run(self, ctx: StepContext, args: dict[str, Any]) -> Generator[Event, None, ActionResult]:
        from ckptrescue.checkpoints.weights_only_globals import needed_globals

        result = yield from ctx.blocking(lambda p: needed_globals(list(args["paths"])),
                                         label="scanning")
        return from_library(result, result.answer())


ACTIONS = [SafeGlobals]
