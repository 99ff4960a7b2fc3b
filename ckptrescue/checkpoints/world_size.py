"""Resume a verified step at another world size: whether it loads at N ranks, and how.

From what the step's own metadata records (the family probe's world sizes) and its format:

* **DCP** (``torch.distributed.checkpoint``: FSDP / FSDP2 / DTensor saves, Lightning's FSDP
  directories) and **megatron-core dist checkpoints** (``torch_dist``), **Orbax**: the load
  reshards to the new world's layout natively: any N (megatron-core: any TP x PP dividing N);
* **DeepSpeed**: a step loads as saved at the same data- and model-parallel sizes; with ZeRO
  partitions (stage 1-3) another data-parallel size needs the universal checkpoint:
  ``python -m deepspeed.checkpoint.ds_to_universal --input_folder STEP --output_folder
  STEP_universal`` (``--inject_missing_state`` when the step does not carry
  ``universal_checkpoint_info``, which a plain DeepSpeed engine does not write), then the
  config's ``"checkpoint": {"load_universal": true}``; the files it reads are every
  model-states file and every optimizer partition of the step (listed);
* **Megatron** (legacy ``mp_rank_XX[_YYY]`` directories): N must be a multiple of TP x PP (the
  data-parallel size may change); other TP/PP sizes need Megatron-LM's checkpoint converter
  (``tools/checkpoint/convert.py`` with ``--target-tensor-parallel-size`` and
  ``--target-pipeline-parallel-size``) or a conversion to a dist checkpoint;
* **Accelerate** and single-file checkpoints hold the full state: any N (Accelerate restores
  the RNG state only of the ranks it saved);

A step that does not verify (not ``intact``) is not planned for: the answer says to fix it
first. Nothing is converted or run by the kit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.errors import UsageError
from ckptrescue.model import Finding, JsonObject, Recorded, Severity

DS_TO_UNIVERSAL = "python -m deepspeed.checkpoint.ds_to_universal"
MEGATRON_CONVERT = "python tools/checkpoint/convert.py"  # Megatron-LM's converter


@dataclass
class WorldSizeResult(Recorded):
    step_dir: str
    ranks: int
    family: str = ""
    verdict: str = ""
    step: int | None = None
    saved_world: dict[str, Any] = field(default_factory=dict)
    loads: str = ""  # as-saved, reshards, after-conversion, no, not-verified
    how: str = ""
    commands: list[str] = field(default_factory=list)
    files_needed: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def answer(self) -> str:
        name = Path(self.step_dir).name
        text = {"as-saved": f"{name} loads at {self.ranks} ranks as saved",
                "reshards": f"{name} loads at {self.ranks} ranks: its format reshards",
                "after-conversion": f"{name} loads at {self.ranks} ranks only after conversion",
                "no": f"{name} does not load at {self.ranks} ranks",
                "not-verified": f"{name} is not verified ({self.verdict}): fix it before "
                                "changing the world size"}.get(self.loads, name)
        return f"{text}: {self.how}" if self.how else text

    def findings(self) -> list[Finding]:
        src = "resume.world_size"
        if self.loads in ("as-saved", "reshards"):
            return [Finding("WS001", Severity.INFO, self.answer(), evidence=self.step_dir,
                            source=src, details={"ranks": self.ranks,
                                                 "saved_world": self.saved_world})]
        if self.loads == "after-conversion":
            return [Finding("WS002", Severity.WARNING, self.answer(), evidence=self.step_dir,
                            source=src, details={"ranks": self.ranks, "commands": self.commands,
                                                 "files_needed": self.files_needed[:200],
                                                 "saved_world": self.saved_world})]
        return [Finding("WS003", Severity.ERROR, self.answer(), evidence=self.step_dir,
                        source=src, details={"ranks": self.ranks,
                                             "saved_world": self.saved_world})]

    def to_json(self) -> JsonObject:
        return {"step_dir": self.step_dir, "ranks": self.ranks, "family": self.family,
                "verdict": self.verdict, "step": self.step, "saved_world": self.saved_world,
                "loads": self.loads, "how": self.how, "commands": self.commands,
                "files_needed": self.files_needed, "config": self.config, "notes": self.notes,
                "answer": self.answer()}


def _divisor_pairs(n: int) -> list[tuple[int, int]]:
    return [(t, n // t) for t in range(1, n + 1) if n % t == 0]


def _has_universal_info(step: Path) -> bool:
    """Whether a DeepSpeed step's model-states file carries ``universal_checkpoint_info``
    (read statically)."""
    from ckptrescue.checkpoints.families.pickles import zip_pickle_root

    for f in sorted(step.glob("*model_states.pt")):
        root = zip_pickle_root(f)
        if isinstance(root, dict):
            return "universal_checkpoint_info" in root
    return False


def _deepspeed(result: WorldSizeResult, step: Path) -> None:
    world = result.saved_world
    dp, mp, stage = world.get("dp"), world.get("mp"), world.get("zero_stage")
    if not isinstance(dp, int) or not isinstance(mp, int):
        result.loads, result.how = "no", "the step records no dp/mp sizes (model states unread)"
        return
    n = result.ranks
    if n == dp * mp:
        result.loads, result.how = "as-saved", f"dp={dp} x mp={mp} = {n}, as saved"
        return
    if not stage:
        if n % mp == 0:
            result.loads = "as-saved"
            result.how = (f"no ZeRO partitions (stage 0): the model states are per mp rank; "
                          f"dp becomes {n // mp} (mp={mp} unchanged)")
        else:
            result.loads, result.how = "no", f"{n} is not a multiple of mp={mp}"
        return
    out = Path("DEST") / f"{step.name}_universal"
    inject = "" if _has_universal_info(step) else " --inject_missing_state"
    result.loads = "after-conversion"
    result.how = (f"ZeRO-{stage} partitions saved for dp={dp} x mp={mp} = {dp * mp}; another "
                  "size needs DeepSpeed's universal checkpoint (ds_to_universal), then "
                  "load_universal")
    result.commands = [f"{DS_TO_UNIVERSAL} --input_folder {step} --output_folder {out}"
                       + inject]
    result.config = {"checkpoint": {"load_universal": True}}
    names = sorted(p.name for p in step.iterdir()
                   if p.name.endswith(("_model_states.pt", "_optim_states.pt")))
    result.files_needed = [str(step / n) for n in names]
    result.notes.append("ds_to_universal reads every model-states file and every optimizer "
                        "partition of the step (listed); it writes only into --output_folder "
                        "(and latest_universal beside it): DEST is a new directory outside the "
                        f"evidence; load with engine.load_checkpoint('DEST', tag='{out.name}') "
                        "and the config above")
    if inject:
        result.notes.append("the step carries no universal_checkpoint_info (a plain DeepSpeed "
                            "engine does not write it): --inject_missing_state adds it to the "
                            "conversion only, not to the step")


def _megatron(result: WorldSizeResult) -> None:
    world = result.saved_world
    tp, pp = world.get("tp"), world.get("pp")
    if not isinstance(tp, int) or not isinstance(pp, int):
        result.loads, result.how = "no", "the step records no TP/PP sizes (saved args unread)"
        return
    n = result.ranks
    if n % (tp * pp) == 0:
        result.loads = "as-saved"
        result.how = (f"--tensor-model-parallel-size {tp} --pipeline-model-parallel-size {pp} "
                      f"as saved; data-parallel size {n // (tp * pp)}")
        return
    pairs = [f"TP={t} PP={p}" for t, p in _divisor_pairs(n) if p <= max(pp, 1) * 8][:6]
    result.loads = "after-conversion"
    result.how = (f"saved with TP={tp} x PP={pp} = {tp * pp}, and {n} is not a multiple of "
                  f"{tp * pp}: a legacy Megatron checkpoint loads only at its own TP and PP "
                  f"sizes; convert it to a TP x PP that divides {n} ({', '.join(pairs)}, ...)")
    result.commands = [f"{MEGATRON_CONVERT} --model-type GPT --loader megatron --saver "
                       f"megatron --load-dir {Path(result.step_dir).parent} --save-dir "
                       "DEST/converted "
                       "--target-tensor-parallel-size NEW_TP --target-pipeline-parallel-size "
                       "NEW_PP"]
    result.notes.append("or convert once to a megatron-core dist checkpoint (train with "
                        "--ckpt-convert-format torch_dist --ckpt-convert-save DIR), which "
                        "reshards at load")


def plan_world_size(step_dir: str, ranks: int) -> WorldSizeResult:
    """Whether the verified step at ``step_dir`` loads at ``ranks`` ranks, and how."""
    from ckptrescue.checkpoints.probes.checkpoints import probe_paths

    if ranks < 1:
        raise UsageError("--ranks must be at least 1")
    path = Path(step_dir)
    if not path.exists():
        raise UsageError(f"{step_dir}: no such file or directory")
    reports = probe_paths([path], numeric=False)
    if len(reports) != 1:
        raise UsageError(f"{step_dir}: holds {len(reports)} checkpoints; name one step")
    report = reports[0]
    family = report.extra.get("family") if isinstance(report.extra.get("family"), dict) \
        else {}
    result = WorldSizeResult(step_dir=str(path), ranks=ranks, family=report.format,
                             verdict=str(report.verdict), step=family.get("step"),
                             saved_world=dict(family.get("world") or {}))
    if str(report.verdict) not in ("intact", "suspect"):
        result.loads = "not-verified"
    elif report.format == "deepspeed":
        _deepspeed(result, path)
    elif report.format == "megatron":
        _megatron(result)
    elif report.format in ("fsdp-dcp", "megatron-dist", "orbax") or report.format == "dcp":
        result.loads = "reshards"
        result.how = {
            "megatron-dist": "a megatron-core dist checkpoint (torch_dist): dist checkpointing "
                             "reshards at load, to any TP x PP that divides the world size",
            "orbax": "Orbax restores each array into the new mesh's sharding",
        }.get(report.format, "torch.distributed.checkpoint reshards at load: each rank reads "
                             "the chunks its new shards overlap (dcp.load)")
    elif report.format == "accelerate":
        saved = result.saved_world.get("processes")
        result.loads = "reshards"
        result.how = "Accelerate saves the full model and optimizer state"
        if isinstance(saved, int) and ranks > saved:
            result.notes.append(f"random_states_<rank>.pkl exist for {saved} processes: ranks "
                                f"{saved}..{ranks - 1} start without a saved RNG state")
    else:
        result.loads = "reshards"
        result.how = f"a full (unsharded) {report.format} checkpoint: every rank loads all of it"
    result.record("checkpoint.world_size", {"step": str(path), "ranks": ranks,
                                            "loads": result.loads, "answer": result.answer()})
    result.findings_here()
    return result
