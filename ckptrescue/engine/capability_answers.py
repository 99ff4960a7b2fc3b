"""The parts of the one-line answer that the responders' questions of issue #31 add: each the
latest step of its action, read by type from the case (pure over audit records)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ckptrescue.engine.case_outputs import CHECKPOINTS, DATASETS, outputs_of

if TYPE_CHECKING:
    from collections.abc import Callable

    from ckptrescue.record.case import Case

# the actions whose steps examine evidence (the answer's "nothing examined yet" test)
EXAMINING = {"manifest.diff", "resume.safe_globals", "resume.keys", "resume.reassemble",
             "resume.world_size", "resume.replicas", "hub.verify"}


def capability_parts(case: Case, held: Callable[[str], bool] = lambda _module: True
                     ) -> list[str]:
    """Answer parts, in a fixed order; nothing for a capability the case did not use or whose
    latest step found nothing worth a line. ``held(module)``: whether the case may hold records
    of that output module (``case_outputs.domains_held``); a domain it cannot hold is skipped, its
    record types not imported."""
    parts: list[str] = []
    datasets = held(DATASETS)
    if datasets:
        from ckptrescue.datasets.outputs import ManifestDiffOutput, module_of

        for diff in outputs_of(case, ManifestDiffOutput)[-1:]:
            if diff.differs or diff.bad_lines:
                parts.append(f"manifest diff: {diff.answer}")
    if held(CHECKPOINTS):
        parts += _checkpoint_parts(case)
    if datasets and held(module_of("HubCacheOutput")):
        from ckptrescue.datasets.outputs import HubCacheOutput

        for hub in outputs_of(case, HubCacheOutput)[-1:]:
            if not hub.ok:
                parts.append(hub.answer)
    return parts


def _checkpoint_parts(case: Case) -> list[str]:
    from ckptrescue.checkpoints.outputs import (
        KeyMismatchOutput,
        ReassemblyOutput,
        ReplicaOutput,
        SafeGlobalsOutput,
        WorldSizeOutput,
    )

    parts: list[str] = []
    for sg in outputs_of(case, SafeGlobalsOutput)[-1:]:
        if sg.safe or sg.not_safe or not sg.ok:
            parts.append(f"safe globals: {sg.answer}")
    for keys in outputs_of(case, KeyMismatchOutput)[-1:]:
        if not keys.ok:
            parts.append(f"keys: {keys.answer}")
    for ra in outputs_of(case, ReassemblyOutput)[-1:]:
        if not ra.ok:
            parts.append(ra.answer)
    for ws in outputs_of(case, WorldSizeOutput)[-1:]:
        parts.append(f"{ws.answer.split(': ', 1)[0]} ({ws.loads})" if ws.ok else ws.answer)
    for rp in outputs_of(case, ReplicaOutput)[-1:]:
        if not rp.ok:
            parts.append(f"replicas: {rp.answer}")
    return parts
