"""``ckptrescue drill DIR --silent``: a silent incident — every byte verifies, the content is wrong.

DIR/silent gets ``data-v1`` (a clean baseline corpus, JSON lines shards), ``data-v2`` (its new
version with a label-flipped shard, an emptied field, a duplicated shard and a length blow-up),
``run`` (``torch.save`` checkpoints of a run whose one layer froze), ``params.json`` (the
parameters of ``playbook run silent-failure -P DIR/silent/params.json``) and ``expected.json``
(each injected fault and the finding that must name it). No disk image, no S3, no clock: the
same files on every machine, in seconds.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue import imports_kept
from ckptrescue.drill import folder, silent_data, silent_run
from ckptrescue.errors import UsageError
from ckptrescue.model import JsonObject

SCHEMA = "ckptrescue.drill.silent/1"
BASELINE, CURRENT, RUN = "data-v1", "data-v2", "run"
PROFILE = "data-v1.profile.json"  # written by the playbook's profile step, not by the drill


@dataclass
class SilentDrill:
    root: Path
    baseline: Path
    current: Path
    run: Path
    params: dict[str, Any] = field(default_factory=dict)
    expected: JsonObject = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        return {"root": str(self.root), "baseline": str(self.baseline),
                "current": str(self.current), "run": str(self.run),
                "params": self.params, "expected": self.expected}


def build(out: Path) -> SilentDrill:
    """Build the silent incident under ``out/silent`` (which must be new or empty)."""
    root = out.resolve() / "silent"
    baseline, current, run = root / BASELINE, root / CURRENT, root / RUN
    folder.claim(root, BASELINE, what="the silent drill")  # before the seconds of importing torch
    try:
        with imports_kept():
            import torch  # noqa: F401
    except BaseException as exc:  # nothing was written: the claim is given back, so that the
        # same command runs again (torch installed, a CUDA library found, a Ctrl-C)
        with contextlib.suppress(OSError):
            baseline.rmdir()
        if isinstance(exc, ImportError):
            raise UsageError("the silent drill writes torch checkpoints: install the [torch] "
                             "extra") from exc
        raise
    silent_data.write_version(baseline, silent_data.BASELINE_SEED)
    silent_data.write_version(current, silent_data.CURRENT_SEED, faults=silent_data.FAULTS)
    silent_run.write_run(run)
    drill = SilentDrill(root=root, baseline=baseline, current=current, run=run)
    drill.params = {"baseline": str(baseline), "current": str(current), "run_dir": str(run),
                    "baseline_profile": str(root / PROFILE)}
    drill.expected = {
        "schema": SCHEMA,
        "playbook": "silent-failure",
        "dataset": {"baseline": BASELINE, "current": CURRENT, "shards": silent_data.SHARDS,
                    "records_per_shard": silent_data.RECORDS,
                    "faults": silent_data.expected(BASELINE, CURRENT)},
        "run": {"dir": RUN, "steps": list(silent_run.STEPS),
                "faults": silent_run.expected()},
    }
    (root / "params.json").write_text(json.dumps(drill.params, indent=2) + "\n")
    (root / "expected.json").write_text(json.dumps(drill.expected, indent=2) + "\n")
    return drill
