"""Megatron-LM checkpoints: the legacy per-rank layout and the ``torch_dist`` (DCP-based) format.

Legacy (``megatron/training/checkpointing.py`` ``get_checkpoint_name``):
``iter_NNNNNNN/mp_rank_TT/model_optim_rng.pt`` (PP = 1) or ``mp_rank_TT_PPP/`` (PP > 1), plus
``distrib_optim.pt`` beside it with the distributed optimizer; ``<run>/latest_checkpointed_
iteration.txt`` holds the newest iteration (or ``release``). Each rank file is a ``torch.save`` of
``{"args": argparse.Namespace, "checkpoint_version", "iteration", "model", "optimizer",
"opt_param_scheduler", "rng_state": [{"random_rng_state", "np_rng_state", "torch_rng_state",
...}]}``. TP and PP sizes come from the saved args (``tensor_model_parallel_size``,
``pipeline_model_parallel_size``), read statically.

Checks: every ``mp_rank`` directory for TP x PP (FM040), ``distrib_optim.pt`` where the args
say ``use_distributed_optimizer`` (FM001), each rank's ``iteration`` equals the directory's
(FM002), the same TP/PP sizes in every rank's args and the layout (FM041, FM003), the Adam
step counters agree (FM004), TP shards of each PP stage agree on shape/dtype and split size
(FM005), norm weights replicated across TP ranks have equal record CRCs (FM006).

``torch_dist`` (``megatron.core.dist_checkpointing.save``): ``iter_NNNNNNN/`` with
``metadata.json`` (``sharded_backend: torch_dist``), ``common.pt`` (rank 0's non-tensor state:
args, iteration) and a DCP store (``.metadata``, ``__R_T.distcp``). Verified as the DCP store
(its own format: every file the plan names, chunk tiling, CRCs) plus ``common.pt``; FM042 when
``metadata.json``, ``common.pt`` or ``.metadata`` is missing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, ClassVar

from ckptrescue.checkpoints.base import CheckpointReport
from ckptrescue.checkpoints.families import crossrank
from ckptrescue.checkpoints.families.base import (
    Family,
    Member,
    MemberSummary,
    Pointer,
    StepLayout,
    claim_steps,
    finding,
    listdir,
    number_in,
    read_text,
    text_pointer,
)
from ckptrescue.checkpoints.families.pickles import as_int, data_pkl_root, plain, zip_pickle_root
from ckptrescue.model import Finding, JsonObject

_ITER = re.compile(r"^iter_(\d+)$")
_MP = re.compile(r"^mp_rank_(\d+)(?:_(\d+))?$")
POINTER = "latest_checkpointed_iteration.txt"
# args that differ between ranks of one run by design (never compared across ranks)
_RANK_ARGS = {"rank", "local_rank", "world_size", "data_parallel_rank", "tensor_model_parallel_rank",
              "pipeline_model_parallel_rank", "iteration", "consumed_train_samples",
              "consumed_valid_samples", "save", "load"}

# Exact classes Megatron pickles into its rank files beyond torch's weights-only list: the subset
# of ``megatron.core.safe_globals.SAFE_GLOBALS`` (megatron-core 0.16.1 ``safe_globals.py``,
# registered with ``torch.serialization.add_safe_globals`` by ``register_safe_globals()`` when
# ``megatron.core`` is imported) that is a plain-state class, an Enum or numpy's array
# reconstruction. Left out on purpose: ``io.BytesIO`` and ``signal.Signals`` (I/O and signals;
# never in a checkpoint's state), ``types.SimpleNamespace`` and ``pathlib.PosixPath`` (the kit's
# pickle policy names ``types`` as dangerous; PosixPath only matters for DCP metadata, already
# on that list).
MEGATRON_GLOBALS = frozenset({
    # checkpointing.py ``state_dict['args'] = args`` (the argparse.Namespace)
    "argparse.Namespace",
    # ``rng_state[...]['np_rng_state'] = np.random.get_state()``: a tuple holding a uint32
    # ndarray; numpy 2 pickles ``numpy._core.multiarray._reconstruct`` (megatron lists the
    # numpy 1 spelling ``numpy.core.multiarray._reconstruct``, an alias in numpy 2)
    "numpy._core.multiarray._reconstruct", "numpy.core.multiarray._reconstruct",
    "numpy.ndarray", "numpy.dtype", "numpy.dtypes.UInt32DType",
    # enums saved inside args (``args.model_type``, ``args.attention_backend``)
    "megatron.core.enums.ModelType", "megatron.core.transformer.enums.AttnBackend",
    "megatron.core.transformer.enums.CudaGraphScope",
    # ``state_dict['rerun_state_machine']`` (rerun_state_machine.py: enums) and
    # ``optimizer`` config (``OptimizerConfig``: a dataclass)
    "megatron.core.rerun_state_machine.RerunDiagnostic",
    "megatron.core.rerun_state_machine.RerunMode",
    "megatron.core.rerun_state_machine.RerunState",
    "megatron.core.optimizer.optimizer_config.OptimizerConfig",
})


def _iter_of(root: Path) -> int | None:
    return number_in(_ITER.match(root.name))


def _args(root_obj: Any) -> JsonObject:
    if not isinstance(root_obj, dict):
        return {}
    args = plain(root_obj.get("args"))
    return args if isinstance(args, dict) else {}


class _MegatronRun(Family):
    """What both Megatron layouts share: ``iter_N`` (or ``release``) step directories, never
    one reached through a symbolic link, and ``latest_checkpointed_iteration.txt``: an iteration
    number (or ``release``)."""

    @classmethod
    def _is_step(cls, directory: Path) -> bool:
        raise NotImplementedError

    @classmethod
    def claim(cls, directory: Path) -> list[Path]:
        return claim_steps(directory, cls._is_step, links=False)

    @classmethod
    def step_of(cls, root: Path) -> int | None:
        return _iter_of(root)

    @classmethod
    def pointers(cls, run_dir: Path) -> list[Pointer]:
        return text_pointer(run_dir / POINTER, cls.name,
                            lambda value: int(value) if value.isdigit() else None)

    @classmethod
    def pointer_value(cls, pointer: Pointer, root: Path) -> str:
        step = _iter_of(root)
        return str(step) if step is not None else root.name


class MegatronFamily(_MegatronRun):
    """Legacy ``iter_N/mp_rank_TT[_PPP]/model_optim_rng.pt`` (``megatron``)."""

    name: ClassVar[str] = "megatron"
    allowed_globals: ClassVar[frozenset[str]] = MEGATRON_GLOBALS

    @classmethod
    def _is_step(cls, directory: Path) -> bool:
        return (_ITER.match(directory.name) is not None or directory.name == "release") and any(
            _MP.match(n) for n in listdir(directory))

    @classmethod
    def layout(cls, root: Path) -> StepLayout:
        members: list[Member] = []
        for d in listdir(root):
            if not _MP.match(d):
                continue
            for f in listdir(root / d):
                if f == "model_optim_rng.pt":
                    members.append(Member(root / d / f, d, "model"))
                elif f == "distrib_optim.pt":
                    members.append(Member(root / d / f, d, "optim"))
        layout = StepLayout(cls.name, root, _iter_of(root), members)
        args: dict[str, Any] = {}
        for m in members:
            if m.role == "model":
                args = _args(zip_pickle_root(m.path))
                if args:
                    break
        tp = as_int(args.get("tensor_model_parallel_size"))
        pp = as_int(args.get("pipeline_model_parallel_size"))
        if tp is None or pp is None:
            layout.findings.append(finding(
                "FM045", f"{root.name}: no readable saved args: TP/PP sizes unknown, mp_rank "
                "directories checked by their names only", evidence=root))
            return layout
        layout.world = {"tp": tp, "pp": pp}
        names = [f"mp_rank_{t:02d}" if pp == 1 else f"mp_rank_{t:02d}_{p:03d}"
                 for p in range(pp) for t in range(tp)]
        layout.expected = [Member(root / n / "model_optim_rng.pt", n, "model") for n in names]
        if args.get("use_distributed_optimizer") is True:
            layout.expected += [Member(root / n / "distrib_optim.pt", n, "optim") for n in names]
        odd = sorted({m.rank for m in members} - set(names))
        if odd:
            layout.findings.append(finding(
                "FM041", f"{root.name}: mp_rank directories {', '.join(odd[:8])} do not fit the "
                f"saved args (TP={tp}, PP={pp})", evidence=root, ranks=odd))
        missing_dirs = [n for n in names if not (root / n).is_dir()]
        if missing_dirs:
            layout.findings.append(finding(
                "FM040", f"{root.name}: {len(missing_dirs)} mp_rank director(ies) missing for "
                f"TP={tp} x PP={pp}: {', '.join(missing_dirs[:8])}", evidence=root,
                ranks=missing_dirs))
        return layout

    @classmethod
    def summarize(cls, member: Member, report: CheckpointReport) -> MemberSummary:
        summary = super().summarize(member, report)
        if member.role != "model":
            return summary
        root = data_pkl_root(member.path, report)
        args = _args(root)
        if isinstance(root, dict):
            summary.step = as_int(plain(root.get("iteration")))
            summary.scalars["checkpoint_version"] = plain(root.get("checkpoint_version"))
        summary.scalars["tp"] = as_int(args.get("tensor_model_parallel_size"))
        summary.scalars["pp"] = as_int(args.get("pipeline_model_parallel_size"))
        summary.scalars["args"] = {k: v for k, v in args.items() if k not in _RANK_ARGS}
        summary.scalars["saved_rank"] = (as_int(args.get("rank")), as_int(args.get("world_size")),
                                         args.get("context_parallel_size", 1))
        summary.scalars["optimizer_steps"] = crossrank.optimizer_steps(member.path,
                                                                       report.tensors)
        # only the model's tensors take part in the TP shard checks
        summary.tensors = {n.removeprefix("model."): v for n, v in summary.tensors.items()
                           if n.startswith("model.")}
        summary.checksums = {n.removeprefix("model."): v for n, v in summary.checksums.items()
                             if n.startswith("model.")}
        return summary

    @classmethod
    def check(cls, layout: StepLayout, summaries: list[MemberSummary]) -> list[Finding]:
        out = super().check(layout, summaries)
        models = [s for s in summaries if s.member.role == "model"]
        tp, pp = layout.world.get("tp"), layout.world.get("pp")
        for s in models:
            for key, want in (("tp", tp), ("pp", pp)):
                got = s.scalars.get(key)
                if want is not None and got is not None and got != want:
                    out.append(finding(
                        "FM041", f"{s.member.rank}: saved args say {key.upper()}={got}, "
                        f"{want} in the step's other ranks", evidence=s.member.path,
                        ranks=[s.member.rank]))
        argsets = [(s, json.dumps(s.scalars.get("args"), sort_keys=True, default=str))
                   for s in models if s.scalars.get("args")]
        if len(argsets) > 1:
            common = crossrank.majority([a for _s, a in argsets])
            for s, a in argsets:
                if a != common:
                    out.append(finding(
                        "FM003", f"{s.member.rank}: saved args differ from the other ranks' "
                        "(a rank file from another run)", evidence=s.member.path,
                        ranks=[s.member.rank]))
        counters = {s.member.rank: tuple(sorted(set(s.scalars.get("optimizer_steps") or ())))
                    for s in models if s.scalars.get("optimizer_steps")}
        if len(set(counters.values())) > 1:
            common = crossrank.majority(list(counters.values()))
            for rank, v in sorted(counters.items()):
                if v != common and not any(f.code == "FM002" and rank in f.details.get(
                        "ranks", []) for f in out):
                    out.append(finding(
                        "FM004", f"{rank}: optimizer step {sorted(set(v))} while the other ranks "
                        f"record {sorted(set(common))}", evidence=layout.root, ranks=[rank]))
        out += _stage_findings(models, tp, pp)
        stages: dict[str, list[MemberSummary]] = {}
        for s in models:
            m = _MP.match(s.member.rank)
            stage = f"pipeline stage {int(m.group(2))}" if m and m.group(2) else "pipeline stage 0"
            stages.setdefault(stage, []).append(s)
        out += crossrank.tp_shards(stages, layout.root)
        out += crossrank.replicated(stages, layout.root)
        return out


# Megatron's pre_process stage (PP rank 0) alone holds the embedding; its post_process stage (the
# last) alone holds the final norm and the output layer (megatron-core ``GPTModel``:
# ``if self.pre_process: self.embedding``, ``if self.post_process: self.output_layer``;
# ``TransformerBlock``: ``final_layernorm`` only with ``post_process``; legacy Megatron-LM:
# ``language_model.embedding`` and ``encoder.final_layernorm`` the same way; its tied head on
# the last stage is ``word_embeddings_for_head``, not an embedding)
_EMBED = re.compile(r"(^|\.)embedding\.")
_HEAD = re.compile(r"(^|\.)(final_layernorm|final_norm|output_layer)\.")
_LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _stage_of(rank: str) -> tuple[int, int] | None:
    m = _MP.match(rank)
    return (int(m.group(1)), int(m.group(2) or 0)) if m else None


def _layer_indices(names: frozenset[str]) -> frozenset[int]:
    return frozenset(int(m.group(1)) for n in names if (m := _LAYER_INDEX.search(n)))


def _stage_findings(models: list[MemberSummary], tp: int | None, pp: int | None
                    ) -> list[Finding]:
    """Each rank file holds the model of the pipeline stage its directory names (FM048):

    * the embedding on the first stage only, the final norm / output layer on the last only;
    * where the files number their layers globally (the stages' layer indices do not overlap),
      the layer indices grow with the stage along each TP rank's files (local numbering, where
      every stage starts at ``layers.0``, gives no order: not checked);
    * where the saved args record the saving process's ``rank`` and ``world_size`` (Megatron-LM
      sets them from the launcher), that rank is the one that saves this directory: TP rank t
      of stage p at data-parallel rank 0, rank order tp-cp-ep-dp-pp: ``t + p * world / PP``.
    """
    out: list[Finding] = []
    info: dict[str, tuple[int, int, frozenset[str]]] = {}
    for s in models:
        where = _stage_of(s.member.rank)
        if where is not None and s.tensors:
            info[s.member.rank] = (where[0], where[1], frozenset(s.tensors))
    # per TP rank, the stage order its files' global layer indices give
    order_holds: dict[str, int] = {}
    columns: dict[int, list[tuple[int, str, frozenset[int]]]] = {}
    for rank, (t, p, names) in info.items():
        columns.setdefault(t, []).append((p, rank, _layer_indices(names)))
    for column in columns.values():
        sets = [idx for _p, _r, idx in column if idx]
        if len(sets) < 2 or sum(len(x) for x in sets) != len(frozenset().union(*sets)):
            continue  # local numbering (indices repeat across stages): no order to check
        by_layers = sorted((min(idx), p) for p, _r, idx in column if idx)
        stages = sorted(p for p, _r, idx in column if idx)
        position = {p: stages[i] for i, (_m, p) in enumerate(by_layers)}
        for p, rank, idx in column:
            if idx and position[p] != p:
                order_holds[rank] = position[p]
    for s in models:
        if s.member.rank not in info:
            continue
        t, p, names = info[s.member.rank]
        why: list[str] = []
        holds: set[int] = set()
        if pp is not None and pp > 1:
            embed = any(_EMBED.search(n) for n in names)
            head = any(_HEAD.search(n) for n in names)
            mtp = any(n.startswith("mtp.") or ".mtp." in n for n in names)
            if embed != (p == 0) and not (mtp and p == pp - 1):  # MTP shares the embedding
                why.append("it holds the embedding (the first stage's)" if embed else
                           "it lacks the embedding the first stage holds")
                holds |= {0} if embed else set()
            if head != (p == pp - 1):
                why.append("it holds the final norm/output layer (the last stage's)" if head
                           else "it lacks the final norm/output layer the last stage holds")
                holds |= {pp - 1} if head else set()
        if s.member.rank in order_holds:
            q = order_holds[s.member.rank]
            holds.add(q)
            why.append(f"its layers ({', '.join(map(str, sorted(_layer_indices(names))[:6]))}) "
                       f"come in stage {q}'s place along TP rank {t}'s files")
        saved_rank, world, cp = s.scalars.get("saved_rank") or (None, None, 1)
        if isinstance(saved_rank, int) and isinstance(world, int) and tp and pp \
                and world % pp == 0 and cp in (1, None):
            want = t + p * (world // pp)
            if saved_rank != want:
                why.append(f"its saved args were written by global rank {saved_rank}, the "
                           f"directory's saver is rank {want}")
        if why:
            stage = f"; it holds stage {min(holds)}'s model" if len(holds) == 1 else ""
            out.append(finding(
                "FM048", f"{s.member.rank}/{s.member.path.name} is not pipeline stage {p}'s "
                f"model{stage}: " + "; ".join(why), evidence=s.member.path,
                ranks=[s.member.rank], details={"stage": p, "tp_rank": t,
                                                "holds_stage": min(holds) if len(holds) == 1
                                                else None, "reasons": why}))
    return out


class MegatronDistFamily(_MegatronRun):
    """``torch_dist`` iteration directories (``megatron-dist``)."""

    name: ClassVar[str] = "megatron-dist"
    priority: ClassVar[int] = 4  # before the generic FSDP/DCP family: metadata.json says torch_dist
    allowed_globals: ClassVar[frozenset[str]] = MEGATRON_GLOBALS | {
        # the DCP ``.metadata`` megatron-core writes (``strategies/state_dict_saver.py``
        # ``save_state_dict_async_plan``: the global plan's ``SavePlan``/``WriteItem``/
        # ``TensorWriteData`` kept in the metadata for cached-metadata saves); found by static
        # scans of the files megatron-core 0.16.1 saved here; torch's own dataclasses
        # (``torch/distributed/checkpoint/planner.py``, ``@dataclass(frozen=True)``)
        "torch.distributed.checkpoint.planner.SavePlan",
        "torch.distributed.checkpoint.planner.WriteItem",
        "torch.distributed.checkpoint.planner.TensorWriteData",
    }

    @classmethod
    def _is_step(cls, directory: Path) -> bool:
        if _ITER.match(directory.name) is None and directory.name != "release":
            return False
        names = listdir(directory)
        if "metadata.json" in names:
            text = read_text(directory / "metadata.json") or ""
            return "torch_dist" in text or "sharded_backend" in text
        return "common.pt" in names and any(n.endswith(".distcp") for n in names)

    @classmethod
    def layout(cls, root: Path) -> StepLayout:
        names = listdir(root)
        members: list[Member] = []
        if ".metadata" in names or any(n.endswith(".distcp") for n in names):
            members.append(Member(root, "dcp", "data"))
        if "common.pt" in names:
            members.append(Member(root / "common.pt", "common", "common"))
        layout = StepLayout(cls.name, root, _iter_of(root), members)
        missing = [n for n in ("metadata.json", "common.pt", ".metadata") if n not in names]
        if missing:
            layout.findings.append(finding(
                "FM042", f"{root.name}: {', '.join(missing)} missing (the save did not finish)",
                evidence=root, ranks=[{"common.pt": "common", ".metadata": "dcp"}.get(
                    n, "metadata") for n in missing]))
        else:
            try:
                meta = json.loads(read_text(root / "metadata.json", 65536) or "")
                if not isinstance(meta, dict) or meta.get("sharded_backend") != "torch_dist":
                    raise ValueError
            except ValueError:
                layout.findings.append(finding(
                    "FM042", f"{root.name}: metadata.json unreadable or not torch_dist",
                    evidence=root / "metadata.json", ranks=["metadata"]))
        return layout

    @classmethod
    def companions(cls, root: Path) -> list[Path]:
        return [p for p in root.rglob("*") if p.is_file()]

    @classmethod
    def summarize(cls, member: Member, report: CheckpointReport) -> MemberSummary:
        summary = super().summarize(member, report)
        if member.role == "common":
            root = data_pkl_root(member.path, report)
            if isinstance(root, dict):
                summary.step = as_int(plain(root.get("iteration")))
                args = _args(root)
                summary.scalars["tp"] = as_int(args.get("tensor_model_parallel_size"))
                summary.scalars["pp"] = as_int(args.get("pipeline_model_parallel_size"))
        return summary


FAMILIES = [MegatronFamily, MegatronDistFamily]
