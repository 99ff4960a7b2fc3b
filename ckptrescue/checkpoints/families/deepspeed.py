"""DeepSpeed checkpoints (``engine.save_checkpoint``): one tag directory per step, a ``latest``
pointer in the run directory.

Layout (DeepSpeed 0.19 ``runtime/engine.py`` ``_get_ckpt_name``/``_get_zero_ckpt_name``):
``<tag>/mp_rank_XX_model_states.pt`` per model-parallel rank (ZeRO 0-2), or
``<tag>/zero_pp_rank_R_mp_rank_XX_model_states.pt`` per data-parallel rank (ZeRO 3), and
``<tag>/[bf16_]zero_pp_rank_R_mp_rank_XX_optim_states.pt`` per dp rank when ZeRO (or the bf16
optimizer) partitions the optimizer. ``<run>/latest`` holds the newest tag (default tag
``global_step<N>``).

What the step must hold comes from the files' own metadata, read statically: the model states
dict records ``dp_world_size``, ``mp_world_size``, ``global_steps``, ``skipped_steps``,
``ds_config`` (``zero_optimization.stage``); each optimizer-state dict records ``zero_stage``
(``ZeroStageEnum``), ``partition_count``, the Adam ``step`` tensors and the same ``ds_config``.
Checks: every model/optim rank file for ``mp x dp`` (FM001/FM030), each model file's
``global_steps`` equals the tag's step (FM002), each optim rank's Adam step equals
``global_steps - skipped_steps`` (FM002) and agrees across ranks (FM004), the same ``ds_config``,
dp/mp sizes everywhere (FM003), ``partition_count`` = dp size (FM031), ``zero_stage`` = the
config's stage (FM032), flat fp32 partitions of equal size on every dp rank (FM005; DeepSpeed pads
them equal), TP shards of mp ranks (FM005/FM006); no model-states file at all (FM030: sizes
then from the optimizer files), optimizer files beyond dp x mp or under a second prefix (FM033:
``zero_to_fp32`` counts them and refuses), each ZeRO-1/2 partition against the rank its name
claims (FM034, ``deepspeed_partitions.py``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

from ckptrescue.checkpoints.base import CheckpointReport
from ckptrescue.checkpoints.families import crossrank
from ckptrescue.checkpoints.families import deepspeed_partitions as partitions
from ckptrescue.checkpoints.families.base import (
    Family,
    Member,
    MemberSummary,
    Pointer,
    StepLayout,
    claim_steps,
    finding,
    listdir,
    text_pointer,
)
from ckptrescue.checkpoints.families.pickles import as_int, data_pkl_root, plain, top_level, zip_pickle_root
from ckptrescue.model import Finding, JsonObject

_MODEL = re.compile(r"^mp_rank_(\d+)_model_states\.pt$")
_MODEL3 = re.compile(r"^zero_pp_rank_(\d+)_mp_rank_(\d+)_model_states\.pt$")
_OPTIM = re.compile(r"^(bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt$")
_LAYER = re.compile(r"^layer_(\d+)-model_(\d+)-model_states\.pt$|^layer_(\d+)-model_states\.pt$")
_TAG_STEP = re.compile(r"(\d+)$")
_MODEL_KEYS = ("global_steps", "global_samples", "skipped_steps", "dp_world_size",
               "mp_world_size", "ds_config", "ds_version", "checkpoint_parallel_dimensions",
               "param_shapes")


def _is_rank_file(name: str) -> bool:
    return bool(_MODEL.match(name) or _MODEL3.match(name) or _OPTIM.match(name))


def _stage_of(config: Any) -> int | None:
    if isinstance(config, dict):
        zero = config.get("zero_optimization")
        if isinstance(zero, dict):
            return as_int(zero.get("stage"))
        return 0
    return None


class DeepSpeedFamily(Family):
    """``global_stepN/`` of DeepSpeed rank files (``deepspeed``)."""

    name: ClassVar[str] = "deepspeed"
    step_name: ClassVar[re.Pattern[str]] = _TAG_STEP
    # Exact classes DeepSpeed 0.19.8 pickles into its rank files. DeepSpeed registers no safe
    # globals (it loads with ``torch.load(..., weights_only=False)``:
    # ``runtime/checkpoint_engine/torch_checkpoint_engine.py`` ``load``,
    # ``utils/zero_to_fp32.py``); the list is what static scans of files its engine saved here
    # name beyond torch's weights-only list, each checked against its save site:
    allowed_globals: ClassVar[frozenset[str]] = frozenset({
        # runtime/zero/stage_1_and_2.py and stage3.py ``state_dict``: ``state_dict[LOSS_SCALER]
        # = self.loss_scaler`` (a plain class; state is its __dict__: cur_scale, dynamic, ...)
        "deepspeed.runtime.fp16.loss_scaler.LossScaler",
        # the same save site with fp16 dynamic loss scaling (``CreateLossScaler`` dynamic=True):
        # a plain class, __dict__ state (cur_scale, cur_iter, scale_factor, ...)
        "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
        # stage_1_and_2.py/stage3.py ``state_dict[ZERO_STAGE] = ZeroStageEnum.<stage>``
        # (runtime/zero/config.py: ``class ZeroStageEnum(int, Enum)``, looked up by value)
        "deepspeed.runtime.zero.config.ZeroStageEnum",
        # stage_1_and_2.py ``state_dict[PARAM_SLICE_MAPPINGS] = self._param_slice_mappings``
        # (utils/tensor_fragment.py: ``@dataclass class fragment_address: numel; start``)
        "deepspeed.utils.tensor_fragment.fragment_address",
    })

    # -- discovery -----------------------------------------------------------------------------
    @classmethod
    def _is_step(cls, directory: Path) -> bool:
        return any(_is_rank_file(n) for n in listdir(directory))

    @classmethod
    def claim(cls, directory: Path) -> list[Path]:
        return claim_steps(directory, cls._is_step, links=False)

    @classmethod
    def pointers(cls, run_dir: Path) -> list[Pointer]:
        return text_pointer(run_dir / "latest", cls.name,
                            lambda tag: cls.step_of(Path(tag)) if tag and "/" not in tag else None)

    # -- layout --------------------------------------------------------------------------------
    @classmethod
    def _metadata(cls, root: Path, names: list[str]) -> JsonObject:
        """The first readable model-states file's metadata (static scan of its data.pkl)."""
        for n in names:
            if _MODEL.match(n) or _MODEL3.match(n):
                meta = top_level(zip_pickle_root(root / n), _MODEL_KEYS)
                if meta:
                    return meta
        return {}

    @classmethod
    def _optim_metadata(cls, root: Path, names: list[str]) -> JsonObject:
        """Without a readable model-states file: dp size, ZeRO stage and config from the first
        readable optimizer file (``partition_count``, ``zero_stage``, ``ds_config``), the mp size
        from the file names (``..._mp_rank_XX_...``: the highest + 1)."""
        mps = [int(m.group(3)) for n in names if (m := _OPTIM.match(n))]
        for n in names:
            if not _OPTIM.match(n):
                continue
            root_obj = zip_pickle_root(root / n)
            if not isinstance(root_obj, dict):
                continue
            osd = top_level(root_obj.get("optimizer_state_dict"),
                            ("partition_count", "zero_stage"))
            config = plain(root_obj.get("ds_config"))
            pc = osd.get("partition_count")
            dp = as_int(pc[0] if isinstance(pc, list) and pc else pc)
            if dp is None or not isinstance(config, dict):
                continue
            return {"dp_world_size": dp, "mp_world_size": max(mps) + 1, "ds_config": config}
        return {}

    @classmethod
    def layout(cls, root: Path) -> StepLayout:
        names = listdir(root)
        members: list[Member] = []
        prefixes: set[str] = set()
        for n in names:
            if m := _MODEL.match(n):
                members.append(Member(root / n, f"mp_rank_{m.group(1)}", "model"))
            elif m := _MODEL3.match(n):
                members.append(Member(root / n, f"zero_pp_rank_{m.group(1)}_mp_rank_{m.group(2)}",
                                      "model"))
            elif m := _OPTIM.match(n):
                prefixes.add(m.group(1) or "")
                members.append(Member(root / n, f"zero_pp_rank_{m.group(2)}_mp_rank_{m.group(3)}",
                                      "optim"))
            elif m := _LAYER.match(n):
                members.append(Member(root / n, _layer_label(m), "layer"))
        meta = cls._metadata(root, names)
        step = cls.step_of(root)
        layout = StepLayout(cls.name, root, step, members)
        layout.expected, layer_findings = _layer_expectations(root, names)
        layout.findings += layer_findings
        models = [m for m in members if m.role == "model"]
        if not models and any(m.role == "optim" for m in members):
            # zero_to_fp32 and engine.load_checkpoint both start from a model-states file
            layout.findings.append(finding(
                "FM030", f"{root.name}: no model-states file (mp_rank_XX_model_states.pt or "
                "zero_pp_rank_R_mp_rank_XX_model_states.pt) beside the optimizer partitions: "
                "DeepSpeed cannot load or consolidate the step", evidence=root,
                ranks=["mp_rank_00"]))
        if not meta:
            meta = cls._optim_metadata(root, names)
        dp, mp = as_int(meta.get("dp_world_size")), as_int(meta.get("mp_world_size"))
        stage = _stage_of(meta.get("ds_config"))
        if dp is None or mp is None or stage is None:
            layout.findings.append(finding(
                "FM008", f"{root.name}: no readable model-states metadata: dp/mp sizes and ZeRO "
                "stage unknown, rank files checked by their names only", evidence=root))
            return layout
        layout.world = {"dp": dp, "mp": mp, "zero_stage": stage}
        digits = max([len(_mp_digits(m.path.name)) for m in members] or [2])
        expected: list[Member] = []
        # one optimizer-file prefix per step: the one the config makes the engine load
        # (``bf16_`` for the bf16 optimizer); files of the other prefix are extras
        prefix = (next(iter(prefixes)) if len(prefixes) == 1
                  else cls._default_prefix(meta))
        for t in range(mp):
            tt = str(t).zfill(digits)
            if stage >= 3:
                expected += [Member(root / f"zero_pp_rank_{r}_mp_rank_{tt}_model_states.pt",
                                    f"zero_pp_rank_{r}_mp_rank_{tt}", "model") for r in range(dp)]
            else:
                expected.append(Member(root / f"mp_rank_{tt}_model_states.pt", f"mp_rank_{tt}",
                                       "model"))
            if stage >= 1 or prefix:
                expected += [Member(root / f"{prefix}zero_pp_rank_{r}_mp_rank_{tt}_optim_states.pt",
                                    f"zero_pp_rank_{r}_mp_rank_{tt}", "optim") for r in range(dp)]
        layout.expected = expected + layout.expected
        known = {m.path for m in expected}
        leftovers = [m for m in members if m.path not in known and m.role == "model"]
        if leftovers:  # zero_to_fp32 reads the first model-states file; the engine its own
            layout.findings.append(finding(
                "FM010", f"{len(leftovers)} model-states file(s) beyond dp={dp} x mp={mp}: "
                + ", ".join(m.path.name for m in leftovers[:8]), evidence=root,
                ranks=sorted({m.rank for m in leftovers})))
        extra = [m for m in members if m.path not in known and m.role == "optim"]
        if extra:
            # zero_to_fp32 counts the optimizer files against the world size and refuses the
            # step ("Expected 2 of '*_optim_states.pt' ... but found 3 files"); an elastic load
            # merges every zero file it globs: an extra file is never harmless
            layout.findings.append(finding(
                "FM033", f"{len(extra)} rank file(s) beyond dp={dp} x mp={mp}"
                f"{' (ZeRO-' + str(stage) + ')' if stage else ''}: "
                + ", ".join(m.path.name for m in extra[:8])
                + ("" if len(extra) <= 8 else f" ... (+{len(extra) - 8} more)")
                + ": DeepSpeed's consolidation refuses the step", evidence=root,
                ranks=sorted({m.rank for m in extra}),
                details={"extra": [m.path.name for m in extra[:256]]}))
        return layout

    @classmethod
    def _default_prefix(cls, meta: dict[str, Any]) -> str:
        config = meta.get("ds_config")
        bf16 = isinstance(config, dict) and isinstance(config.get("bf16"), dict) \
            and config["bf16"].get("enabled") is True
        return "bf16_" if bf16 and (_stage_of(config) or 0) <= 1 else ""

    # -- per member ----------------------------------------------------------------------------
    @classmethod
    def summarize(cls, member: Member, report: CheckpointReport) -> MemberSummary:
        summary = super().summarize(member, report)
        root = data_pkl_root(member.path, report)
        if member.role == "model":
            meta = top_level(root, _MODEL_KEYS)
            partitions.summarize_model(summary, meta, report.tensors, member.path)
            summary.step = as_int(meta.get("global_steps"))
            summary.scalars.update({
                "global_steps": summary.step, "skipped_steps": as_int(meta.get("skipped_steps")),
                "dp_world_size": as_int(meta.get("dp_world_size")),
                "mp_world_size": as_int(meta.get("mp_world_size")),
                "ds_config": meta.get("ds_config"), "zero_stage": _stage_of(meta.get("ds_config"))})
        elif member.role == "optim":
            osd = root.get("optimizer_state_dict") if isinstance(root, dict) else None
            info = top_level(osd, ("zero_stage", "partition_count", "ds_version"))
            stage = info.get("zero_stage")
            partitions.summarize_optim(summary, top_level(osd, (
                "param_slice_mappings", "param_alignment_paddings")), report.tensors, member.path)
            summary.scalars.update({
                "zero_stage": as_int(stage), "partition_count": info.get("partition_count"),
                "ds_config": plain(root.get("ds_config")) if isinstance(root, dict) else None,
                "optimizer_steps": crossrank.optimizer_steps(member.path, report.tensors),
                "partitions": {n: s for n, (_d, s) in summary.tensors.items()
                               if n.endswith(("single_partition_of_fp32_groups.0",
                                              "fp32_flat_groups.0"))
                               or ".single_partition_of_fp32_groups." in n
                               or ".fp32_flat_groups." in n}})
        return summary

    # -- cross-rank ----------------------------------------------------------------------------
    @classmethod
    def check(cls, layout: StepLayout, summaries: list[MemberSummary]) -> list[Finding]:  # noqa: C901
        out = super().check(layout, summaries)
        models = [s for s in summaries if s.member.role == "model"]
        optims = [s for s in summaries if s.member.role == "optim"]
        dp, stage = layout.world.get("dp"), layout.world.get("zero_stage")
        # one run: the same config and sizes in every rank file
        configs = [(s, s.scalars.get("ds_config")) for s in summaries
                   if s.scalars.get("ds_config") is not None]
        if configs:
            reference = crossrank.majority([repr(c) for _s, c in configs])
            odd = [s for s, c in configs if repr(c) != reference]
            for s in odd:
                out.append(finding(
                    "FM003", f"{s.member.rank} ({s.member.path.name}) records another ds_config "
                    "than the other rank files: a rank file from another run",
                    evidence=s.member.path, ranks=[s.member.rank]))
        for key in ("dp_world_size", "mp_world_size"):
            want = layout.world.get(key.split("_")[0])
            for s in models:
                got = s.scalars.get(key)
                if want is not None and got is not None and got != want:
                    out.append(finding(
                        "FM003", f"{s.member.rank}: {key} = {got}, {want} in the step's "
                        "metadata", evidence=s.member.path, ranks=[s.member.rank]))
        # optimizer step counters: Adam's step = global_steps - skipped_steps
        model_steps = [s.scalars.get("global_steps") for s in models
                       if s.scalars.get("global_steps") == layout.step or layout.step is None]
        skipped = next((s.scalars.get("skipped_steps") for s in models
                        if s.scalars.get("skipped_steps") is not None), 0) or 0
        expected = (model_steps[0] - skipped) if model_steps and model_steps[0] is not None \
            else None
        counters = {s.member.rank: s.scalars.get("optimizer_steps") for s in optims
                    if s.scalars.get("optimizer_steps")}
        if expected is not None:
            for s in optims:
                got = counters.get(s.member.rank)
                if got and any(v != expected for v in got):
                    out.append(finding(
                        "FM002", f"{s.member.rank} ({s.member.path.name}) records optimizer step "
                        f"{sorted(set(got))[0]}, the step's model states say {expected} "
                        f"(global_steps {expected + skipped} - skipped {skipped}): an optimizer "
                        "partition from another step", evidence=s.member.path,
                        ranks=[s.member.rank],
                        details={"recorded": sorted(set(got)), "expected": expected}))
        elif len({tuple(v) for v in counters.values()}) > 1:
            common = crossrank.majority([tuple(v) for v in counters.values()])
            for rank, v in sorted(counters.items()):
                if tuple(v) != common:
                    out.append(finding(
                        "FM004", f"{rank}: optimizer step {sorted(set(v))} while the other ranks "
                        f"record {sorted(set(common))}", evidence=layout.root, ranks=[rank]))
        # ZeRO partitioning
        for s in optims:
            z = s.scalars.get("zero_stage")
            if stage is not None and z is not None and z != stage:
                out.append(finding(
                    "FM032", f"{s.member.rank}: zero_stage {z}, the step's config says {stage}",
                    evidence=s.member.path, ranks=[s.member.rank]))
            pc = s.scalars.get("partition_count")
            counts = pc if isinstance(pc, list) else [pc]
            if dp is not None and any(isinstance(c, int) and c != dp for c in counts):
                out.append(finding(
                    "FM031", f"{s.member.rank}: partition_count {pc}, dp_world_size is {dp}",
                    evidence=s.member.path, ranks=[s.member.rank]))
        config = next((c for _s, c in configs), None)
        zero = config.get("zero_optimization") if isinstance(config, dict) else None
        round_robin = isinstance(zero, dict) and zero.get("round_robin_gradients") is True
        out += partitions.check(models, optims, dp, stage, round_robin)
        parts = [(s, s.scalars.get("partitions") or {}) for s in optims]
        if len(parts) > 1:
            names = set.intersection(*(set(p) for _s, p in parts))
            for name in sorted(names):
                shapes = [tuple(p[name] or ()) for _s, p in parts]
                common = crossrank.majority(shapes)
                for s, p in parts:
                    if tuple(p[name] or ()) != common:
                        out.append(finding(
                            "FM005", f"{s.member.rank}: flat fp32 partition {name} has shape "
                            f"{list(p[name] or ())}, {list(common)} on the other dp ranks "
                            "(DeepSpeed pads partitions equal)", evidence=s.member.path,
                            ranks=[s.member.rank], tensors=[f"{s.member.rank}/{name}"]))
        # tensor-parallel mp ranks (Megatron-DeepSpeed): shards and replicated norms
        mp_models = [s for s in models if s.member.rank.startswith("mp_rank_")]
        if len(mp_models) > 1:
            out += crossrank.tp_shards({"mp ranks": mp_models}, layout.root)
            out += crossrank.replicated({"mp ranks": mp_models}, layout.root)
        # pipeline layer files: one layer's files across the model-parallel ranks are TP shards
        layers: dict[str, list[MemberSummary]] = {}
        for s in summaries:
            if s.member.role == "layer" and "-model_" in s.member.rank:
                layers.setdefault(s.member.rank.split("-model_")[0], []).append(s)
        layers = {k: sorted(v, key=lambda s: s.member.rank) for k, v in layers.items()
                  if len(v) > 1}
        if layers:
            out += crossrank.tp_shards(layers, layout.root)
            out += crossrank.replicated(layers, layout.root)
        return out


def _layer_label(m: re.Match[str]) -> str:
    """``layer_03`` or ``layer_03-model_01`` (pipeline layer files; unique per file)."""
    if m.group(3) is not None:
        return f"layer_{m.group(3)}"
    return f"layer_{m.group(1)}-model_{m.group(2)}"


def _layer_expectations(root: Path, names: list[str]) -> tuple[list[Member], list[Finding]]:
    """Pipeline-parallel layer files (``runtime/pipe/module.py`` ``ckpt_layer_path``:
    ``layer_{idx:02d}[-model_{mp:02d}]-model_states.pt``, the ``-model_YY`` part present when the
    topology has a model axis). Every layer index 0..max that any mp rank saved must be there
    for every mp rank 0..max (a hole is FM001 through ``expected``). An index absent on EVERY mp
    rank is FM012 (a warning): DeepSpeed saves nothing for a layer without ``state_dict`` (a
    function in the layer specs), so such a gap is legitimate in real runs (GPT-NeoX)."""
    layers: dict[int, dict[int | None, str]] = {}
    digits: dict[int, tuple[int, int]] = {}
    for n in names:
        m = _LAYER.match(n)
        if not m:
            continue
        idx_s = m.group(1) if m.group(1) is not None else m.group(3)
        mp = int(m.group(2)) if m.group(2) is not None else None
        layers.setdefault(int(idx_s), {})[mp] = n
        digits[int(idx_s)] = (len(idx_s), len(m.group(2) or "00"))
    if not layers:
        return [], []
    mps = sorted({mp for per in layers.values() for mp in per}, key=lambda v: -1 if v is None
                 else v)
    mp_ranks: list[int | None] = [None] if mps == [None] else list(
        range(max(v for v in mps if v is not None) + 1))
    idx_w = max(w for w, _ in digits.values())
    mp_w = max(w for _, w in digits.values())
    expected: list[Member] = []
    gaps: list[int] = []
    for idx in range(max(layers) + 1):
        if idx not in layers:
            gaps.append(idx)
            continue
        for mp in mp_ranks:
            if mp is None:
                name = f"layer_{idx:0{idx_w}d}-model_states.pt"
                label = f"layer_{idx:0{idx_w}d}"
            else:
                name = f"layer_{idx:0{idx_w}d}-model_{mp:0{mp_w}d}-model_states.pt"
                label = f"layer_{idx:0{idx_w}d}-model_{mp:0{mp_w}d}"
            expected.append(Member(root / layers[idx].get(mp, name), label, "layer"))
    findings: list[Finding] = []
    if gaps:
        findings.append(finding(
            "FM012", f"{root.name}: pipeline layer index(es) {', '.join(map(str, gaps[:16]))}"
            f"{' ...' if len(gaps) > 16 else ''} absent on every model-parallel rank (layers "
            f"0..{max(layers)} saved): a layer without parameters (DeepSpeed saves none) or "
            "every file of that layer lost", evidence=root,
            details={"indices": gaps[:256], "max_layer": max(layers)}))
    return expected, findings


def _mp_digits(name: str) -> str:
    """The zero-padded mp rank digits in a DeepSpeed file name ('00' in mp_rank_00_...)."""
    m = re.search(r"mp_rank_(\d+)", name)
    return m.group(1) if m else "00"


FAMILIES = [DeepSpeedFamily]
