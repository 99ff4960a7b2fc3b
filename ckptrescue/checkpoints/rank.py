"""Rank a run directory's checkpoints, newest first, and pick the one to resume from.

Each top-level entry of the run directory that holds checkpoints (a file, or a directory such as
``checkpoint-500/`` or a DCP step directory) is one candidate; its verdict is the worst verdict of
the checkpoints found in it. Order: by the step number in the name when present (the last run of
digits: ``step_1200.pt``, ``checkpoint-500``, ``epoch=3-step=900.ckpt``), else by mtime.
``resume_from`` is the newest candidate whose verdict is ``intact``. A multi-rank family step
(DeepSpeed ``global_stepN/``, Megatron ``iter_N/``, ...) is one candidate, ordered by the step its
family records, intact only when every rank verifies; the result names its ``family``, the bad
ranks of each step, and ``pointer_fix``: the value to write into the run's newest-step pointer
(``latest``, ...) so that it names ``resume_from`` (never written by the kit). Probing is static unless
``load=True``: then the real loaders also run in the sandbox, and a checkpoint they refuse
(LD007, verdict ``unreadable``) or that tried to escape (LD005, ``unsafe``) is never recommended.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptrescue.checkpoints.base import CheckpointReport, Verdict, worst_verdict
from ckptrescue.errors import UsageError
from ckptrescue.model import JsonObject

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

_STEP = re.compile(r"(\d+)")


@dataclass
class RankedCheckpoint:
    path: str
    verdict: Verdict
    step: int | None
    mtime: float
    reports: list[CheckpointReport] = field(default_factory=list)
    family: str | None = None  # a multi-rank family step (deepspeed, megatron, ...)
    bad_ranks: list[str] = field(default_factory=list)


@dataclass
class RankResult:
    checkpoints: list[RankedCheckpoint]
    resume_from: str | None
    family: str | None = None  # the family of resume_from (else of the newest family step)
    # the pointer change the resume needs: {"pointer": file, "current": value, "write": value,
    # "target": step root, "family": name}; None when the pointer is right or there is none
    pointer_fix: dict[str, Any] | None = None

    def to_json(self) -> JsonObject:
        """The stable shape; family keys appear only for multi-rank family steps (a run of
        single-file checkpoints keeps exactly ``{"checkpoints": [{"path", "verdict"}],
        "resume_from"}``)."""
        rows: list[JsonObject] = []
        for c in self.checkpoints:
            row: JsonObject = {"path": c.path, "verdict": str(c.verdict)}
            if c.family is not None:
                row.update({"step": c.step, "family": c.family, "bad_ranks": c.bad_ranks[:64],
                            "bad_ranks_total": len(c.bad_ranks)})
            rows.append(row)
        data: JsonObject = {"checkpoints": rows, "resume_from": self.resume_from}
        if self.family is not None:
            data.update({"family": self.family, "pointer_fix": self.pointer_fix})
        return data


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


def _family_info(reps: list[CheckpointReport]) -> tuple[str | None, int | None, list[str]]:
    """(family, step, bad ranks) of a candidate made of family step reports."""
    infos = [r.extra["family"] for r in reps if isinstance(r.extra.get("family"), dict)]
    if not infos:
        return None, None, []
    steps = {i.get("step") for i in infos}
    step = steps.pop() if len(steps) == 1 else None
    bad = sorted({b for i in infos for b in i.get("bad_ranks", [])})
    return str(infos[0].get("family")), step if isinstance(step, int) else None, bad


def _pointer_fix(ranked: list[RankedCheckpoint], family: str | None) -> JsonObject | None:
    for c in ranked:
        for r in c.reports:
            for fix in r.extra.get("pointers", []):
                if family is None or fix.get("family") == family:
                    return dict(fix)
    return None


def rank(run_dir: Path, *, case: Case | None = None, load: bool = False, jobs: int = 1,
         progress: Callable[[str, str, str], None] | None = None,
         scheduler: str | None = None,
         accept: Callable[[RankedCheckpoint], bool] | None = None) -> RankResult:
    """Probe every checkpoint in ``run_dir`` and rank them (see module docstring).

    ``jobs``: rank files of multi-rank family steps are probed in this many processes;
    ``progress(step_root, rank, verdict)`` after each rank file; ``scheduler``: a Dask
    scheduler address (family steps spread over its workers rank file by rank file);
    ``accept``: a further test a resumable candidate must pass to be ``resume_from`` (the
    responder's eval, ``probes/evalhook.py``), asked newest first only of resumable candidates
    (never of an unsafe or damaged one) until the first it accepts.
    """
    from ckptrescue.checkpoints.probes.checkpoints import probe_paths

    run_dir = Path(run_dir).absolute()
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: not a directory")
    reports = probe_paths([run_dir], case=case, numeric=True, load=load, jobs=jobs,
                          progress=progress, scheduler=scheduler)
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
        family, fstep, bad = _family_info(reps)
        ranked.append(RankedCheckpoint(str(top), worst_verdict([r.verdict for r in reps]),
                                       fstep if fstep is not None else step_of(top.name), mtime,
                                       reps, family, bad))
    ranked.sort(key=lambda c: (c.step is not None, c.step if c.step is not None else 0,
                               c.mtime), reverse=True)
    chosen = next((c for c in ranked if _resumable(c) and (accept is None or accept(c))), None)
    resume = chosen.path if chosen is not None else None
    family = chosen.family if chosen is not None and chosen.family else next(
        (c.family for c in ranked if c.family), None)
    return RankResult(ranked, resume, family, _pointer_fix(ranked, family))
