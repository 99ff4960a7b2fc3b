"""The Hugging Face hub cache, verified offline (issue #31): hub.verify."""

from __future__ import annotations

from collections.abc import Generator

from ckptrescue.datasets.outputs import HubCacheOutput
from ckptrescue.engine.action import Action, ActionArgs, ActionResult, ArgSpec, StepContext, from_library
from ckptrescue.engine.events import Event


class HubVerify(Action):
    name = "hub.verify"
    summary = "Verify a Hugging Face hub cache offline: every blob against its name, every link"
    description = """
Verify a Hugging Face hub cache (~/.cache/huggingface/hub) offline: every blob under
blobs/ against its name (SHA-256 for LFS files, the git blob hash sha1("blob <len>\\0" + data)
otherwise), every snapshot link against its blob.

Lists blobs whose bytes do not match their names, dangling links (the blob missing or still an
.incomplete download), links that leave the repository's blobs/, interrupted downloads and refs
to revisions the cache does not hold, each with the model (or dataset) revision it breaks and
the refs (main, tags) that name that revision. Reads only; no network.

Exit 0 when every blob and link verifies, 1 otherwise."""
    examples = ("ckptrescue hub verify ~/.cache/huggingface/hub",
                "ckptrescue hub verify --json   # $HF_HUB_CACHE, $HF_HOME/hub or the default")
    output_type = HubCacheOutput
    args = (ArgSpec("cache", "path", positional=True, cli_name="cache_dir",
                    help="The hub cache directory (default: $HF_HUB_CACHE, $HF_HOME/hub, else "
                         "~/.cache/huggingface/hub)."),)

    def plan(self, args: ActionArgs) -> list[str]:
        return [f"hash every blob of the hub cache {args.get('cache') or '(default)'} and "
                "check every snapshot link (no network)"]

    def run(self, ctx: StepContext, args: ActionArgs) -> Generator[Event, None, ActionResult]:
        from ckptrescue.datasets.hub_cache import verify_cache

        result = yield from ctx.blocking(lambda p: verify_cache(
            args.get("cache") or None, progress=p, cancel=ctx.cancel), label="hashing")
        return from_library(result, result.answer())


ACTIONS = [HubVerify]
