"""Rank a run directory's checkpoints, newest first, and pick the one to resume from.

Each top-level entry of the run directory that holds checkpoints (a file, or a directory such as
``checkpoint-500/`` or a DCP step directory) is one candidate; its verdict is the worst verdict of
the checkpoints found in it. Order: by the step number in the name when present (the last run of
digits: ``step_1200.pt``, ``checkpoint-500``, ``epoch=3-step=900.ckpt``), else by mtime.
``resume_from`` is the newest candidate whose verdict is ``intact``. Probing is static unless
``load=True``: then the real loaders also run in the sandbox, and a checkpoint they refuse
(LD007, verdict ``unreadable``) or that tried to escape (LD005, ``unsafe``) is never recommended.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptrescue.checkpoint import CheckpointReport, Verdict, worst_verdict
from ckptrescue.errors import UsageError

if TYPE_CHECKING:
    from ckptrescue.case import Case

_STEP = re.compile(r"(\d+)")


@dataclass
class RankedCheckpoint:
    path: str
    verdict: Verdict
    step: int | None
    mtime: float
    reports: list[CheckpointReport] = field(default_factory=list)


@dataclass
class RankResult:
    checkpoints: list[RankedCheckpoint]
    resume_from: str | None

    def to_json(self) -> dict[str, Any]:
        return {"checkpoints": [{"path": c.path, "verdict": str(c.verdict)}
                                for c in self.checkpoints],
                "resume_from": self.resume_from}


def step_of(name: str) -> int | None:
    """The step number in a checkpoint's name (the last run of digits), else None."""
    if "step" in name.lower():
        m = re.search(r"step[=_\-]?(\d+)", name, re.IGNORECASE)
        if m:
            return int(m.group(1))
    runs = _STEP.findall(name)
    return int(runs[-1]) if runs else None


_NEVER_RESUME = {"LD005", "LD007"}  # blocked by the sandbox / the real loader refuses it


def _resumable(candidate: RankedCheckpoint) -> bool:
    return candidate.verdict.resumable and not any(
        f.code in _NEVER_RESUME for r in candidate.reports for f in r.findings)


def rank(run_dir: Path, *, case: Case | None = None, load: bool = False) -> RankResult:
    """Probe every checkpoint in ``run_dir`` and rank them (see module docstring)."""
    from ckptrescue.probes.checkpoints import probe_paths

    run_dir = Path(run_dir).absolute()
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: not a directory")
    reports = probe_paths([run_dir], case=case, numeric=True, load=load)
    groups: dict[Path, list[CheckpointReport]] = {}
    for r in reports:
        p = Path(r.path)
        try:
            top = run_dir / p.relative_to(run_dir).parts[0]
        except (ValueError, IndexError):
            top = p
        if p == run_dir:
            top = run_dir
        groups.setdefault(top, []).append(r)
    ranked: list[RankedCheckpoint] = []
    for top, reps in groups.items():
        try:
            mtime = top.stat().st_mtime
        except OSError:
            mtime = 0.0
        ranked.append(RankedCheckpoint(str(top), worst_verdict([r.verdict for r in reps]),
                                       step_of(top.name), mtime, reps))
    ranked.sort(key=lambda c: (c.step is not None, c.step if c.step is not None else 0,
                               c.mtime), reverse=True)
    resume = next((c.path for c in ranked if _resumable(c)), None)
    result = RankResult(ranked, resume)
    if case is not None:
        case.log("checkpoint.ranked", result.to_json())
    return result
