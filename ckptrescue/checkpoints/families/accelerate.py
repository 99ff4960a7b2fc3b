"""Hugging Face Accelerate ``checkpoint_N/`` directories (``Accelerator.save_state``).

Layout (``accelerate/checkpointing.py`` ``save_accelerator_state``): ``model.safetensors`` /
``pytorch_model.bin`` (``model_<i>.*`` for further models, or an HF sharded index),
``optimizer.bin`` (``optimizer_<i>.bin``), ``scheduler.bin`` (``scheduler_<i>.bin``),
``sampler.bin``, ``dl_state_dict.bin``, ``scaler.pt``, one ``random_states_<process>.pkl`` per
process (``step`` = ``accelerator.step``, Python's, numpy's and torch's RNG states) and
``custom_checkpoint_<i>.pkl`` per registered object. With ``automatic_checkpoint_naming`` the
directories are ``checkpoints/checkpoint_<save_iteration>``; there is no pointer file (Accelerate
resumes from the highest index).

Accelerate records no world size. It is taken as the largest of: the RNG files' highest index
+ 1, the same in the sibling ``checkpoint_*`` directories, and ``scheduler.last_epoch / step``
(``AcceleratedScheduler`` steps the wrapped scheduler once per process per optimizer step unless
``split_batches``) — FM072 says it was inferred; a missing ``random_states_<r>.pkl`` is FM001.
The RNG files' ``step`` must agree (FM002 names a rank file from another step); the optimizer's
``param_groups[*].lr`` must equal the scheduler's ``_last_lr`` (FM071: optimizer and scheduler
from different steps); Adam-style ``state.*.step`` counters must agree (FM004).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

from ckptrescue.checkpoints.base import CheckpointReport
from ckptrescue.checkpoints.families import pickles
from ckptrescue.checkpoints.families.base import (
    Family,
    Member,
    MemberSummary,
    StepLayout,
    claim_steps,
    finding,
    listdir,
)
from ckptrescue.model import Finding

_RNG = re.compile(r"^random_states_(\d+)\.pkl$")
_CKPT = re.compile(r"^checkpoint_(\d+)$")
_CUSTOM = re.compile(r"^custom_checkpoint_(\d+)\.pkl$")
_ROLES = [
    (re.compile(r"^(?:model|pytorch_model)(?:_(\d+))?\.(?:safetensors|bin)$"), "model"),
    (re.compile(r"^(?:model|pytorch_model)(?:_(\d+))?\.(?:safetensors|bin)\.index\.json$"),
     "model"),
    (re.compile(r"^optimizer(?:_(\d+))?\.bin$"), "optim"),
    (re.compile(r"^scheduler(?:_(\d+))?\.bin$"), "scheduler"),
    (re.compile(r"^sampler(?:_(\d+))?\.bin$"), "sampler"),
    (re.compile(r"^dl_state_dict(?:_(\d+))?\.bin$"), "sampler"),
    (re.compile(r"^scaler\.pt$"), "scaler"),
    (re.compile(r"^custom_checkpoint_(\d+)\.pkl$"), "custom"),
]


def _role(name: str) -> tuple[str, str] | None:
    m = _RNG.match(name)
    if m:
        return "rng", f"rank{int(m.group(1))}"
    for pattern, role in _ROLES:
        m = pattern.match(name)
        if m:
            idx = m.group(1) if m.groups() else None
            label = {"optim": "optimizer"}.get(role, role)
            return role, f"{label}_{idx}" if idx else label
    return None


def _rng_ranks(directory: Path) -> set[int]:
    return {int(m.group(1)) for n in listdir(directory) if (m := _RNG.match(n))}


def _contiguous(ranks: set[int]) -> int:
    """How many processes the files 0, 1, ... number before the first gap."""
    n = 0
    while n in ranks:
        n += 1
    return n


def _exists(path: Path) -> bool:
    """Something stands under the name (a dangling or looping symlink too)."""
    try:
        path.lstat()
    except OSError:
        return False
    return True


def _scheduler_world(root: Path, names: list[str]) -> int | None:
    """``scheduler.last_epoch / step``: ``AcceleratedScheduler`` steps the wrapped scheduler once
    per process per optimizer step (unless ``split_batches``), ``step`` from an RNG file."""
    if "scheduler.bin" not in names:
        return None
    last = pickles.as_int(pickles.top_level(pickles.zip_pickle_root(root / "scheduler.bin"),
                                            ("last_epoch",)).get("last_epoch"))
    step = None
    for n in names:
        if _RNG.match(n):
            step = pickles.as_int(pickles.top_level(pickles.zip_pickle_root(root / n),
                                                    ("step",)).get("step"))
            if step:
                break
    if not last or not step or last % step:
        return None
    return last // step


def _is_step(directory: Path) -> bool:
    names = listdir(directory)
    return any(_RNG.match(n) for n in names) and any(
        (r := _role(n)) is not None and r[0] in ("model", "optim") for n in names)


def _scalar(rec: Any) -> float | None:
    """A one-element tensor's value read from its bytes (Adam's ``step``)."""
    if rec.file is None or not rec.length:
        return None
    value = pickles.scalar_value(Path(rec.file), rec.offset, rec.dtype)
    return None if value is None else float(value)


class AccelerateFamily(Family):
    """An Accelerate ``save_state`` directory (``accelerate``)."""

    name: ClassVar[str] = "accelerate"
    step_name: ClassVar[re.Pattern[str]] = _CKPT
    # Accelerate's own load (``accelerate/utils/other.py`` ``load``) adds TORCH_SAFE_GLOBALS to
    # torch's weights-only list for the RNG files (numpy's RNG state is an ndarray):
    allowed_globals: ClassVar[frozenset[str]] = frozenset({
        "numpy._core.multiarray._reconstruct",  # np_core.multiarray._reconstruct (numpy >= 2)
        "numpy.core.multiarray._reconstruct",  # the same under numpy < 2 (np.core)
        "numpy.ndarray",  # np.ndarray
        "numpy.dtype",  # np.dtype
        "numpy.dtypes.UInt32DType",  # np.dtypes.UInt32DType (numpy >= 1.25)
    })

    @classmethod
    def claim(cls, directory: Path) -> list[Path]:
        return claim_steps(directory, _is_step, links=False)

    @classmethod
    def layout(cls, root: Path) -> StepLayout:  # noqa: C901
        names = listdir(root)
        present = _rng_ranks(root)
        sibling_dirs = [root.parent / n for n in listdir(root.parent)
                        if n != root.name and _CKPT.match(n) and (root.parent / n).is_dir()]
        siblings = [_rng_ranks(d) for d in sibling_dirs]
        # the world: the RNG files numbered 0, 1, ... without a gap, here and in the sibling
        # steps, and scheduler.last_epoch / step; an RNG file beyond it is one the loader never
        # reads (``load_accelerator_state`` opens random_states_<process_index>.pkl only)
        counts = {"rng files": _contiguous(present)}
        counts["sibling steps"] = max((_contiguous(x) for x in siblings), default=0)
        inferred = _scheduler_world(root, names)
        if inferred:
            counts["scheduler.last_epoch / step"] = inferred
        world = max(counts.values())
        if present and world == 0:
            world = 1  # process 0 always saves
        world_from = next(k for k, v in counts.items() if v == world) if world else ""
        members: list[Member] = []
        extra_rng: list[str] = []
        for n in names:
            role = _role(n)
            if role is None or not _exists(root / n):
                continue
            m = _RNG.match(n)
            if m and int(m.group(1)) >= world:
                extra_rng.append(n)
                continue
            # whatever stands under a name the loader opens is a member: a symlink loop or a
            # device there is reported by the member's probe, never skipped
            members.append(Member(root / n, role[1], role[0]))
        expected = [Member(root / f"random_states_{r}.pkl", f"rank{r}", "rng")
                    for r in range(world)]
        findings: list[Finding] = []
        # files every other step of the run holds (the objects the run registers and
        # prepares: custom_checkpoint_<i>.pkl, scheduler.bin, optimizer_<i>.bin, ...)
        if sibling_dirs:
            common = set.intersection(*({n for n in listdir(d) if _role(n) is not None
                                         and not _RNG.match(n)} for d in sibling_dirs))
            for n in sorted(common - set(names)):
                role = _role(n)
                if role is not None:
                    expected.append(Member(root / n, role[1], role[0]))
        customs = [int(m.group(1)) for n in names if (m := _CUSTOM.match(n))]
        for i in range(max(customs, default=-1)):
            if f"custom_checkpoint_{i}.pkl" not in names:
                expected.append(Member(root / f"custom_checkpoint_{i}.pkl", f"custom_{i}",
                                       "custom"))
        roles = {m.role for m in members}
        if "model" not in roles:
            findings.append(finding("FM070", f"{root.name}: no model weights "
                                    "(model.safetensors / pytorch_model.bin)", evidence=root,
                                    ranks=["model"]))
        if "optim" not in roles and "scheduler" in roles:
            findings.append(finding("FM070", f"{root.name}: scheduler.bin without "
                                    "optimizer.bin", evidence=root, ranks=["optimizer"]))
        layout = StepLayout(cls.name, root, None, members, expected,
                            {"processes": world} if world > 0 else {}, findings)
        if world > 0 and world_from != "rng files":
            findings.append(finding(
                "FM072", f"{root.name}: {world} processes inferred from {world_from} "
                "(Accelerate records no world size)", evidence=root,
                details={"processes": world}))
        if extra_rng:
            findings.append(finding(
                "FM010", f"{root.name}: {', '.join(extra_rng[:8])} beyond the {world} "
                f"process(es) ({world_from}): Accelerate's load_state never reads it (a "
                "leftover of a larger run?)", evidence=root,
                ranks=[f"rank{_RNG.match(n).group(1)}" for n in extra_rng[:64]],  # type: ignore[union-attr]
                details={"extra": extra_rng[:256], "processes": world}))
        return layout

    @classmethod
    def summarize(cls, member: Member, report: CheckpointReport) -> MemberSummary:
        summary = super().summarize(member, report)
        if member.role not in ("rng", "optim", "scheduler"):
            return summary
        root = pickles.data_pkl_root(member.path, report)
        if member.role == "rng":
            summary.step = pickles.as_int(pickles.top_level(root, ("step",)).get("step"))
        elif member.role == "scheduler":
            top = pickles.top_level(root, ("last_epoch", "_last_lr", "_step_count"))
            summary.scalars["last_epoch"] = pickles.as_int(top.get("last_epoch"))
            summary.scalars["last_lr"] = top.get("_last_lr")
        else:
            top = pickles.top_level(root, ("param_groups",))
            groups = top.get("param_groups")
            summary.scalars["lr"] = [g.get("lr") for g in groups if isinstance(g, dict)] \
                if isinstance(groups, list) else None
            # LRScheduler.__init__ sets ``initial_lr`` in every param group it drives
            summary.scalars["scheduled"] = isinstance(groups, list) and any(
                isinstance(g, dict) and "initial_lr" in g for g in groups)
            steps = {rec.name: _scalar(rec) for rec in report.tensors
                     if rec.name.startswith("state.") and rec.name.endswith(".step")}
            summary.scalars["optimizer_steps"] = sorted({v for v in steps.values()
                                                         if v is not None})
        return summary

    @classmethod
    def check(cls, layout: StepLayout, summaries: list[MemberSummary]) -> list[Finding]:
        out = super().check(layout, summaries)
        rng = [s for s in summaries if s.member.role == "rng" and s.step is not None]
        sched = next((s for s in summaries if s.member.rank == "scheduler"), None)
        optim = next((s for s in summaries if s.member.rank == "optimizer"), None)
        world = layout.world.get("processes", 0)
        expected_step: int | None = None
        last_epoch = sched.scalars.get("last_epoch") if sched else None
        if rng:
            votes = Counter(s.step for s in rng).most_common()
            expected_step = votes[0][0]
            if isinstance(last_epoch, int) and len(votes) > 1:
                # the scheduler breaks a tie: last_epoch = step x processes
                for step, _n in votes:
                    if step and world and last_epoch == step * world:
                        expected_step = step
            for s in rng:
                if s.step != expected_step:
                    out.append(finding(
                        "FM002", f"{s.member.rank} ({s.member.path.name}) records step {s.step}"
                        f", the other ranks {expected_step}: an RNG file from another step",
                        evidence=s.member.path, ranks=[s.member.rank],
                        details={"recorded": s.step, "expected": expected_step}))
        has_sched = any(m.role == "scheduler" for m in layout.members + layout.expected)
        siblings = [n for n in listdir(layout.root.parent)
                    if n != layout.root.name and _CKPT.match(n)]
        driven = [s for s in summaries if s.member.role == "optim" and s.scalars.get("scheduled")]
        if driven and not has_sched and not siblings:
            out.append(finding(
                "FM073", f"{layout.root.name}: {driven[0].member.path.name} was driven by an LR "
                "scheduler (its param_groups hold initial_lr) but the step holds no "
                "scheduler.bin: Accelerator.load_state with that scheduler prepared refuses "
                "the step (if the run never passed its scheduler to prepare(), this is "
                "expected)", evidence=layout.root, ranks=["scheduler"]))
        if sched and optim:
            lr, last = optim.scalars.get("lr"), sched.scalars.get("last_lr")
            if isinstance(lr, list) and isinstance(last, list) and lr and last and lr != last:
                out.append(finding(
                    "FM071", f"optimizer.bin learning rates {lr} != scheduler.bin _last_lr "
                    f"{last}: optimizer and scheduler come from different steps",
                    evidence=layout.root, ranks=["optimizer", "scheduler"],
                    details={"optimizer_lr": lr, "scheduler_last_lr": last}))
        for s in summaries:
            steps = s.scalars.get("optimizer_steps") or []
            if len(steps) > 1:
                out.append(finding(
                    "FM004", f"{s.member.path.name}: parameters' optimizer step counters "
                    f"disagree ({', '.join(str(int(v)) for v in steps)})",
                    evidence=s.member.path, ranks=[s.member.rank]))
        return out


FAMILIES = [AccelerateFamily]
